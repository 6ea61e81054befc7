"""Verify (step 6 of a cook): prove the cooked blob computes what the source computes.

The blob is loaded through ``pipeline.runtime``, the loader games ship, so what is verified is what
ships. The reference is the source model run by onnxruntime with optimizations off.
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime

from pipeline.cook.compare import (
    NOISE_CAP,
    NOISE_FACTOR,
    OF_RANGE_FACTOR,
    RANDOM_SEED,
    OutputDifference,
    compare,
    scale_figures,
)
from pipeline.cook.dims import DEFAULT_DIM_SIZE, UNNAMED, WIDE_DIM_SIZE, dim_size
from pipeline.cook.facts import feed_inputs, input_tensor_type
from pipeline.cook.large import session_input
from pipeline.cook.precision import VERIFY_ATOL_OF_RANGE
from pipeline.errors import VerifyError
from pipeline.fsutil import atomic_write
from pipeline.runtime import BundleError, session_from_blob
from pipeline.settings.resolve import CookSettings

SEED = 20240531
# Synthesized verification inputs are sized by verify_dims; past this, ask for sample inputs instead.
MAX_SYNTHESIZED_BYTES = 1 << 30
CPU_ONLY = ["CPUExecutionProvider"]
# The cooker loads the blob it just wrote whatever its size (games keep the loader's 2 GiB guard).
TRUSTED_SIZE = 1 << 62
# Bump when what reference_outputs computes changes: remembered references are then recomputed.
REFERENCE_RECIPE = 2  # 2: random operators seeded (RANDOM_SEED)


# What an input that is not a tensor is, in a message
_KINDS = {
    "sequence_type": "sequence",
    "map_type": "map",
    "optional_type": "optional of a non-tensor",
    "sparse_tensor_type": "sparse tensor",
    "opaque_type": "opaque value",
}


def synthesized_hint(
    free: list[str], tried: tuple[int, ...], where: str, settings_path: str, bound: int = 0
) -> str:
    """What to do when the source cannot run on synthesized inputs: what they were (the dims in
    ``free`` given each size in ``tried``, then ``bound`` combinations of 1 and 2), and the fixes."""
    named = [d for d in free if d != UNNAMED]
    sizes = ", then ".join(
        f"{size} (a leading batch at 1)" if size == WIDE_DIM_SIZE else str(size) for size in tried
    )
    sizes += f", then each at 1 or 2 ({bound} combinations)" if bound else ""
    text = (
        "the verification inputs were synthesized (seeded: floats from a normal distribution, integers "
        "0 and 1, booleans, short strings"
    )
    if free:
        text += f"; symbolic dimension(s) {', '.join(free)}, which verify_dims does not size, at {sizes}"
    text += f"); if the model needs other values, ship sample inputs as {where} (numpy.savez"
    text += ", keys = input names)"
    if named:
        # every free dim, with the size a traced export bakes into Reshape constants in mind: a
        # model exported by tracing at (2, 10) often runs at those sizes only
        sized = ", ".join(f"{name}: <size>" for name in named)
        text += (
            f", or other sizes, add `verify_dims: {{{sized}}}` to {settings_path} (a model exported by "
            "tracing often runs only at the sizes it was traced with)"
        )
    return text


def synthesize_inputs(
    model: onnx.ModelProto,
    dims: Mapping[str, int],
    *,
    free: int | Mapping[str, int] = DEFAULT_DIM_SIZE,
    settings_hint: str,
    inputs_hint: str,
) -> dict[str, np.ndarray]:
    """Seeded inputs that match the model's input signature; symbolic dims come from ``dims``, else
    are ``free`` (one size per name, so inputs that share a dimension agree; unnamed ones too; a size
    per name where a mapping), or computed where their name is an expression (``dims.dim_size``)."""
    rng = np.random.default_rng(SEED)
    feeds = {}
    for value in feed_inputs(model.graph):
        tensor_type = input_tensor_type(value)
        if tensor_type is None:  # a sequence or a map: .npz holds arrays only
            kind = _KINDS.get(value.type.WhichOneof("value") or "", "value of no type")
            raise VerifyError(
                f"input {value.name!r} is a {kind}, not a tensor: the cooker can "
                "neither synthesize one nor read one from .inputs.npz (arrays only); set `verify: false` "
                "in its .cook.yaml to cook it unverified"
            )
        shape = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            else:
                shape.append(dim_size(dim.dim_param, dims, free))
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        size = math.prod(shape) * max(dtype.itemsize, 8)  # floats are drawn as float64 first
        if size > MAX_SYNTHESIZED_BYTES:
            raise VerifyError(
                f"input {value.name!r} of shape {shape} would take {size:,} bytes to synthesize (limit "
                f"{MAX_SYNTHESIZED_BYTES:,}); lower verify_dims in {settings_hint} or ship sample inputs as "
                f"{inputs_hint}"
            )
        feeds[value.name] = _random(rng, dtype, tuple(shape))
    return feeds


def _random(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == np.bool_:
        # an array even for a scalar input (shape ()): a comparison of 0-d arrays gives a numpy.bool,
        # which onnxruntime refuses ("Unable to handle object of type <class 'numpy.bool'>")
        return np.asarray(rng.random(shape) < 0.5)
    if np.issubdtype(dtype, np.integer):
        # 0 and 1: valid indices into any table of two rows or more (BERT's token types are two),
        # mask values, counts and lengths.
        return rng.integers(0, 2, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.object_:  # tensor(string): short words, as onnxruntime takes them (objects of str)
        return rng.integers(0, 2, size=shape).astype(np.str_).astype(object)
    if dtype.kind == "V":  # ml_dtypes' bfloat16, float8, int4: no numpy type onnxruntime's Python API takes
        raise VerifyError(
            f"cannot verify a model with {dtype} inputs: onnxruntime's Python API takes no {dtype} arrays "
            "(and .npz files cannot hold them); set `verify: false` in its .cook.yaml, or give the model "
            "float16/float32 inputs (a Cast inside it)"
        )
    raise VerifyError(f"cannot synthesize inputs of type {dtype}; ship sample inputs as an .inputs.npz file")


def load_inputs(path: Path, model: onnx.ModelProto, data: bytes | None = None) -> dict[str, np.ndarray]:
    """Sample inputs from ``<model>.inputs.npz`` (or its bytes already read, ``data``); keys must be
    exactly the model's input names."""
    expected = {value.name for value in feed_inputs(model.graph)}
    source = io.BytesIO(data) if data is not None else path
    zipped = zipfile.is_zipfile(source)
    if isinstance(source, io.BytesIO):
        source.seek(0)
    if not zipped:
        raise VerifyError(
            f"{path}: not a .npz archive (numpy.savez writes a zip of .npy arrays); write the sample inputs "
            "with numpy.savez(path, **{input_name: array})"
        )
    try:
        with np.load(source, allow_pickle=False) as archive:
            feeds = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise VerifyError(f"{path}: cannot read sample inputs ({exc}); write it with numpy.savez") from None
    raw = sorted(name for name, value in feeds.items() if value.dtype.kind == "V")
    if raw:
        raise VerifyError(
            f"{path}: input(s) {raw} are stored as raw bytes: arrays of an ml_dtypes type (float8, "
            "bfloat16, int4) lose their type in .npz, and onnxruntime's Python API cannot take them as "
            "inputs anyway; the cooker cannot verify this model on them: set `verify: false` in its "
            ".cook.yaml, or give the model float16/float32 inputs"
        )
    missing, extra = sorted(expected - set(feeds)), sorted(set(feeds) - expected)
    if missing or extra:
        raise VerifyError(
            f"{path}: keys must be the model's input names {sorted(expected)}; "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"unknown {extra}" if extra else "")
        )
    for value in feed_inputs(model.graph):
        _check_input(path, value, feeds[value.name])
    return feeds


def _check_input(path: Path, value: onnx.ValueInfoProto, array: np.ndarray) -> None:
    """Refuse a sample input whose type or shape the model does not take, naming it and the file
    (onnxruntime's own message names neither)."""
    tensor = input_tensor_type(value)
    if tensor is None:
        return  # sequences, maps: onnxruntime checks those
    if tensor.elem_type == onnx.TensorProto.STRING:
        expected_kind = array.dtype.kind in "UOS"
        wanted = "strings"
    else:
        try:
            wanted_dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, TypeError, ValueError):
            return  # a type numpy has no dtype for: nothing to compare
        # float32 samples for a float16 input: an fp16 variant of an fp32 source (as_input_types)
        expected_kind = array.dtype == wanted_dtype or (
            wanted_dtype == np.float16 and array.dtype == np.float32
        )
        wanted = str(wanted_dtype)
    if not expected_kind:
        raise VerifyError(
            f"{path}: input {value.name!r} is {array.dtype} but the model takes {wanted}; save it as "
            f"{wanted} (e.g. numpy.savez(path, **{{{value.name!r}: array.astype({wanted!r})}}))"
        )
    if not tensor.HasField("shape"):
        return
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    if array.ndim != len(dims) or any(
        d is not None and d != n for d, n in zip(dims, array.shape, strict=False)
    ):
        raise VerifyError(
            f"{path}: input {value.name!r} has shape {list(array.shape)} but the model takes {shown} "
            "(? is any size); save an array of that shape"
        )


def as_input_types(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` with float32 arrays cast to float16 where ``model`` takes float16: the fp32
    source's inputs for an fp16 variant that ships fp16 inputs (``keep_io_types: false``). Any other
    mismatch is left for onnxruntime to refuse."""
    declared = {
        value.name: tensor.elem_type
        for value in feed_inputs(model.graph)
        if (tensor := input_tensor_type(value)) is not None
    }
    return {
        name: value.astype(np.float16)
        if declared.get(name) == onnx.TensorProto.FLOAT16
        and isinstance(value, np.ndarray)
        and value.dtype == np.float32
        else value
        for name, value in feeds.items()
    }


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
    details = "; ".join(
        f"{r.name!r}: largest error {r.max_abs:.3g} {r.worst}, relative L2 error {r.rel_l2:.3g}, "
        f"largest error over the largest magnitude {r.of_range:.3g}"
        for r in failed
    )
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
) -> list[OutputDifference]:
    """Run the cooked blob through the runtime loader on the CPU and compare every output (``noise``:
    each output's rounding noise, ``rounding_noise``)."""
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
    failed = [r for r in results if not r.ok]
    if failed:
        raise VerifyError(
            failure_message(failed, settings.rtol, settings.atol, of_range, settings.verify_scale)
        )
    return results
