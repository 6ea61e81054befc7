"""Verify (step 6 of a cook): prove the cooked blob computes what the source computes.

The blob is loaded through ``onnx_cooker.runtime``, the loader games ship, so what is verified is what
ships. The reference is the source model run by onnxruntime with optimizations off.
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime

from onnx_cooker.cook.compare import (
    NOISE_CAP,
    NOISE_FACTOR,
    OF_RANGE_FACTOR,
    RANDOM_SEED,
    OutputDifference,
    compare,
    scale_figures,
)
from onnx_cooker.cook.large import session_input
from onnx_cooker.cook.precision import VERIFY_ATOL_OF_RANGE
from onnx_cooker.errors import VerifyError
from onnx_cooker.fsutil import atomic_write
from onnx_cooker.runtime import BundleError, session_from_blob
from onnx_cooker.settings.resolve import CookSettings

CPU_ONLY = ["CPUExecutionProvider"]
# OutputDifference.passed_by of an output that matches the source's default-level output (verify)
DEFAULT_LEVEL = "default-level"
# Operators whose results jump where their inputs nearly tie: any rounding may reorder or swap what
# they select. Outputs computed from one may verify against the source's default level.
SELECTIONS = frozenset({"TopK", "ArgMax", "ArgMin", "NonMaxSuppression", "Unique"})
# The cooker loads the blob it just wrote whatever its size (games keep the loader's 2 GiB guard).
TRUSTED_SIZE = 1 << 62
# Bump when what reference_outputs computes changes: remembered references are then recomputed.
REFERENCE_RECIPE = 2  # 2: random operators seeded (RANDOM_SEED)


def reference_outputs(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    work_dir: Path | None = None,
    memo_dir: Path | None = None,
    *,
    optimized: bool = False,
) -> dict[str, np.ndarray]:
    """The model's outputs on ``feeds``, run by onnxruntime on the CPU with optimizations off (with
    ``optimized``: at onnxruntime's default level, as a session of the source file would run it).

    With ``memo_dir``, outputs are remembered there under the sha256 of the model's bytes, of the
    inputs and of the onnxruntime version: the platforms' cooks of one model (same source, same
    inputs) run the source once, not once per platform. Models over 2 GiB are not remembered.
    """
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # a failure comes back as the exception the cook reports, once
    if not optimized:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    with session_input(model, work_dir) as source:
        key = (
            _reference_key(source, feeds, optimized)
            if memo_dir is not None and isinstance(source, bytes)
            else None
        )
        if key is not None and (known := _remembered(memo_dir / f"{key}.npz")) is not None:
            return known
        onnxruntime.set_seed(RANDOM_SEED)
        session = onnxruntime.InferenceSession(source, options, providers=CPU_ONLY)
        names = [output.name for output in session.get_outputs()]
        outputs = dict(zip(names, session.run(names, dict(feeds)), strict=True))
    if key is not None and all(_plain_array(value) for value in outputs.values()):
        buffer = io.BytesIO()
        np.savez(buffer, **{f"{index}:{name}": value for index, (name, value) in enumerate(outputs.items())})
        atomic_write(memo_dir / f"{key}.npz", buffer.getvalue(), durable=False)  # unreadable: recomputed
    return outputs


def _plain_array(value: object) -> bool:
    return isinstance(value, np.ndarray) and value.dtype != object


def _reference_key(model: bytes, feeds: Mapping[str, np.ndarray], optimized: bool = False) -> str:
    level = "default level" if optimized else "optimizations off"
    digest = hashlib.sha256(
        f"reference {REFERENCE_RECIPE} onnxruntime {onnxruntime.__version__} {level}\n".encode()
    )
    digest.update(hashlib.sha256(model).digest())
    for name in sorted(feeds):
        value = np.ascontiguousarray(feeds[name])
        digest.update(f"{name}\0{value.dtype.str}\0{value.shape}\0".encode())
        digest.update(value.tobytes() if value.dtype != object else repr(value.tolist()).encode())
    return digest.hexdigest()


def _remembered(path: Path) -> dict[str, np.ndarray] | None:
    """Outputs remembered at ``path``, in their order; None if absent or unreadable (then recomputed)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            named = sorted((int(key.split(":", 1)[0]), key.split(":", 1)[1], data[key]) for key in data.files)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
        return None
    return {name: value for _, name, value in named}


def failure_message(
    failed: list[OutputDifference], rtol: float, atol: float, of_range: float, scale: float
) -> str:
    """Which outputs differ, by how much and where, and the settings that would relax the check."""
    details = differences(failed)
    rules = f"rtol={rtol:g}, atol={atol:g}" + (f" (or {of_range:g} of the output range)" if of_range else "")
    if scale:
        rules += (
            f", nor within verify_scale={scale:g} (relative L2 error, and {OF_RANGE_FACTOR:g}x that "
            "over the range)"
        )
        relax = "raise `verify_scale` in the model's .cook.yaml"
    else:
        rules += " (verify_scale is off: explicit rtol/atol, or verify_scale: 0)"
        relax = (
            "raise `rtol`/`atol` in the model's .cook.yaml, or leave them at their defaults for the "
            "scale-aware rule"
        )
    return f"outputs differ from the source beyond {rules}: {details}; " + (
        _own_precision(failed, scale)
        or f"if the difference is expected (fused kernels, a lower precision), {relax}"
    )


def differences(failed: list[OutputDifference]) -> str:
    """Which outputs differ, by how much and where."""
    return "; ".join(
        f"{r.name!r}: {r.worst}"  # not comparable element by element: how it differs
        if r.max_abs == math.inf and r.worst
        else f"{r.name!r}: largest error {r.max_abs:.3g} {r.worst}, relative L2 error {r.rel_l2:.3g}, "
        f"largest error over the largest magnitude {r.of_range:.3g}"
        for r in failed
    )


def _own_precision(failed: list[OutputDifference], scale: float) -> str:
    """Where onnxruntime's default optimizations move the source itself about as far as the blob
    (its noise explains the error, but above what NOISE_CAP lets it raise the bound to): say so,
    and the verify_scale that accepts it."""
    if not scale or not all(
        r.noise_rel_l2 > NOISE_CAP * scale and r.rel_l2 <= NOISE_FACTOR * r.noise_rel_l2 for r in failed
    ):
        return ""
    needed = max(max(r.rel_l2, r.of_range / OF_RANGE_FACTOR) for r in failed)
    if not 0 < needed < 1:  # an all-zero output, or an error as large as the output: no scale helps
        return ""
    exponent = math.floor(math.log10(needed))
    suggested = round(
        math.ceil(needed / 10**exponent) * 10**exponent, 12 - exponent
    )  # one significant digit, rounded up
    noise = ", ".join(f"{r.name!r} {r.noise_rel_l2:.2g}" for r in failed)
    return (
        "onnxruntime's own default optimizations move the source's output(s) about as far (relative "
        f"L2 error between the source run unoptimized and at onnxruntime's default level: {noise}), "
        "so onnxruntime computes this model at a lower precision than its unoptimized form (e.g. "
        "quantized weights run by MatMulNBits with int8 activations), beyond the "
        f"{NOISE_CAP:g}x of verify_scale that such noise may raise the bound to; to accept "
        f"onnxruntime's precision for this model, set `verify_scale: {suggested:.1g}` in its .cook.yaml"
    )


def rounding_noise(
    reference: Mapping[str, Any], optimized: Mapping[str, Any]
) -> dict[str, tuple[float, float]]:
    """Per float output, (rel_l2, of_range) between two correct runs of the source: optimizations off
    and onnxruntime's default level. That is how far float32 rounding moves this model's outputs on
    these inputs (fusions, reassociated sums), which the scale rule allows a few times of."""
    noise = {}
    for name, want in reference.items():
        got = optimized.get(name)
        if (
            isinstance(want, np.ndarray)
            and isinstance(got, np.ndarray)
            and want.dtype.kind == "f"
            and want.shape == got.shape
        ):
            want64, got64 = want.astype(np.float64), got.astype(np.float64)
            finite = np.isfinite(want64) & np.isfinite(got64)
            figures = scale_figures(want64[finite], got64[finite])
            noise[name] = (figures["rel_l2"], figures["of_range"])
    return noise


def verify(
    blob: bytes,
    reference: Mapping[str, np.ndarray],
    feeds: Mapping[str, np.ndarray],
    settings: CookSettings,
    noise: Mapping[str, tuple[float, float]] | None = None,
    default_level: Mapping[str, Any] | None = None,
) -> list[OutputDifference]:
    """Run the cooked blob through the runtime loader on the CPU and compare every output (``noise``:
    each output's rounding noise, ``rounding_noise``).

    An output the unoptimized source's refuses also verifies where it is within the fixed bounds of
    its ``default_level`` output, the source's at onnxruntime's default level (what a session of the
    source file computes): ``passed_by`` DEFAULT_LEVEL. The cook passes those of the outputs a
    selection computes only (``selection_outputs``: TopK, NMS, argmax over near-ties): a YOLO
    end-to-end detector's top 300 boxes come out in another order once the default level fuses its
    convolutions, and the cooked model, loaded at that level, gives exactly the source's
    default-level boxes; and every output of an int8 variant it made, whose QDQ pairs the default
    level runs as int8 kernels (checking._references)."""
    try:
        onnxruntime.set_seed(RANDOM_SEED)
        session = session_from_blob(blob, providers=CPU_ONLY, max_model_size=TRUSTED_SIZE)
        names = [output.name for output in session.get_outputs()]
        actual = dict(zip(names, session.run(names, dict(feeds)), strict=True))
    except BundleError as exc:
        raise VerifyError(f"the runtime loader cannot load the cooked blob: {exc}") from None
    except Exception as exc:  # onnxruntime's run errors
        raise VerifyError(f"the cooked model fails to run on the verification inputs: {exc}") from None
    missing = sorted(set(reference) - set(actual))
    if missing:
        raise VerifyError(f"the cooked model lacks output(s) {missing}")
    of_range = VERIFY_ATOL_OF_RANGE.get(settings.precision, 0.0)
    results = compare(reference, actual, settings.rtol, settings.atol, of_range, settings.verify_scale, noise)
    if default_level and settings.verify_scale:
        results = [
            result if result.ok else _against_default_level(result, default_level, actual, settings, of_range)
            for result in results
        ]
    failed = [r for r in results if not r.ok]
    if failed:
        error = VerifyError(
            failure_message(failed, settings.rtol, settings.atol, of_range, settings.verify_scale)
        )
        error.failed = tuple(failed)  # for a caller that words the failure itself
        raise error
    return results


def _against_default_level(
    result: OutputDifference,
    default_level: Mapping[str, Any],
    actual: Mapping[str, Any],
    settings: CookSettings,
    of_range: float,
) -> OutputDifference:
    """``result`` again against the source's default-level output, within the fixed bounds (not
    raised by noise): passed by DEFAULT_LEVEL, with its figures and the unoptimized run's noise;
    else ``result`` as it was."""
    if result.name not in default_level:
        return result
    (again,) = compare(
        {result.name: default_level[result.name]},
        {result.name: actual[result.name]},
        settings.rtol,
        settings.atol,
        of_range,
        settings.verify_scale,
    )
    if not again.ok:
        return result
    return replace(
        again, passed_by=DEFAULT_LEVEL, noise_rel_l2=result.noise_rel_l2, noise_of_range=result.noise_of_range
    )


def selection_outputs(model: onnx.ModelProto) -> set[str]:
    """The model's outputs computed from a selection (SELECTIONS of the default domain, in the main
    graph, a subgraph or a local function): a YOLO detector's top boxes, a classifier's argmax.
    A node with subgraphs reads every name they read (outer-scope values included)."""
    functions = {(f.domain, f.name): f for f in model.functions}
    selecting: dict[tuple[str, str], bool] = {}

    def selects(node: onnx.NodeProto) -> bool:
        if node.domain in ("", "ai.onnx") and node.op_type in SELECTIONS:
            return True
        key = (node.domain, node.op_type)
        if key in functions:
            if key not in selecting:
                selecting[key] = False  # a function that calls itself is not a selection by that call
                selecting[key] = any(selects(inner) for inner in functions[key].node)
            return selecting[key]
        return any(selects(inner) for graph in _subgraphs(node) for inner in graph.node)

    def reads(node: onnx.NodeProto) -> set[str]:
        names = set(node.input)
        for graph in _subgraphs(node):
            names |= {name for inner in graph.node for name in reads(inner)}
        return names

    nodes = [(node, selects(node), reads(node)) for node in model.graph.node]
    tainted: set[str] = set()
    grown = True
    while grown:  # to a fixed point: a valid graph is sorted, but nothing here relies on it
        before = len(tainted)
        for node, selecting_node, read in nodes:
            if selecting_node or not read.isdisjoint(tainted):
                tainted.update(name for name in node.output if name)
        grown = len(tainted) > before
    return {output.name for output in model.graph.output if output.name in tainted}


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    found = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            found.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            found.extend(attribute.graphs)
    return found
