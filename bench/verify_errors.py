"""``python -m bench.verify_errors [--quick] [--output PATH]``: how far correct cooks are from their
sources, and how far broken models are: the evidence for the verification's default rule.

Every model the project can make or has is cooked for every shipped platform (its optimization level
and style, through ``onnx_cooker.build.run_job.cook``, tolerances opened so that every figure is recorded):

- **standard**: ResNet-50, ViT-B/16 and a BERT-base encoder (``bench/standard.py``: transformers
  architectures, seeded weights, torch's dynamo exporter, opset 18);
- **exporter**: the test suite's conv net with batch norm, transformer encoder and LSTM, each by the
  TorchScript and the dynamo exporter (``tests/test_exporters.py``);
- **bench**: the benchmark's generated set (``bench/models.py``) and the example assets;
- **conformance**: every ONNX backend test case that plain onnxruntime passes (``conformance/``).

Per output: the largest elementwise error (max abs, max rel), the largest error over the output's
largest magnitude (``of_range``), the relative L2 error (``rel_l2``) and the cosine. Then **broken**
models: each standard and bench model with one weight tensor scaled by 1.01 (a few tensors spread
over the model, the weakest kept), a bias dropped (zeroed) and two outputs swapped, run against the
source by onnxruntime. Writes docs/verification.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.cook.compare import NOISE_CAP, NOISE_FACTOR, OF_RANGE_FACTOR, compare
from onnx_cooker.cook.inputs import load_inputs, synthesize_inputs
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.verify import rounding_noise
from onnx_cooker.errors import CookError
from onnx_cooker.settings.assets import discover
from onnx_cooker.settings.resolve import load_model_settings, load_platforms, resolve
from onnx_cooker.settings.table import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_VERIFY_SCALE

from . import models, standard
from .machine import describe
from .project import EXAMPLES, NOT_BENCHED, REPO
from .sections import embed

# Every cook verifies (the figures are what is measured): rtol/atol keep their defaults, so that
# `passed_by` says which outputs the elementwise rule alone would have refused.
OPEN = {"verify_scale": 1.0e9}
FIGURES = ("max_abs", "max_rel", "of_range", "rel_l2", "one_minus_cosine")
CPU = ["CPUExecutionProvider"]
PERTURBED_TENSORS = 5  # weight tensors tried per model (spread over its initializers)


@dataclass
class Found:
    """The figures of one source set on one platform: one row per float output."""

    rows: list[dict[str, float]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the model and output of each row
    cooks: int = 0
    elementwise_refused: int = 0  # outputs the default rtol/atol alone refuse
    failures: list[str] = field(default_factory=list)


def _figures(output: Mapping[str, Any]) -> dict[str, float]:
    bound = min(
        max(DEFAULT_VERIFY_SCALE, NOISE_FACTOR * output.get("noise_rel_l2", 0.0)),
        NOISE_CAP * DEFAULT_VERIFY_SCALE,
    )
    return {
        "to_bound": output["rel_l2"] / bound,
        "max_abs": output["max_abs"],
        "max_rel": output["max_rel"],
        "of_range": output["of_range"],
        "rel_l2": output["rel_l2"],
        "one_minus_cosine": 1.0 - output["cosine"],
    }


def cook_folder(
    assets: Path, build: Path, found: dict[str, Found], names: Iterable[str] | None = None
) -> None:
    """Cook every model of ``assets`` (or ``names``) for every benched platform; record the figures."""
    platforms = [p for p in load_platforms(REPO / "platforms", {}) if p.name not in NOT_BENCHED]
    wanted = set(names) if names is not None else None
    for asset in discover(assets):
        if wanted is not None and asset.name not in wanted:
            continue
        for platform in platforms:
            own = (
                load_model_settings(asset.settings_path, [p.name for p in platforms])
                if asset.settings_path
                else {}
            )
            settings = resolve(platform, {"verify_dims": {"batch": 2}, **own, **OPEN}, {})
            job = CookJob(asset=asset, settings=settings, platform_dir=build / platform.name)
            record = found.setdefault(platform.name, Found())
            try:
                entry = cook(job)
            except CookError as exc:
                record.failures.append(f"{asset.name}: {str(exc)[:200]}")
                continue
            record.cooks += 1
            for output in entry["verification"].get("outputs", []):
                if math.isfinite(output["max_abs"]):
                    record.rows.append(_figures(output))
                    record.names.append(f"{asset.name} ({output['name']})")
                    record.elementwise_refused += output.get("passed_by") in ("scale", "noise")


def cook_conformance(build: Path, found: dict[str, Found], limit: int | None) -> None:
    """The backend cases plain onnxruntime passes, with their inputs, cooked as above."""
    from conformance.cases import load_cases, materialize
    from conformance.worker import baseline, sample_inputs

    cases = load_cases()[:limit] if limit else load_cases()
    for test_case in cases:
        case = materialize(test_case)
        if baseline(case) != "pass" or sample_inputs(case) is None:
            continue
        with tempfile.TemporaryDirectory(dir=build) as folder:
            assets = Path(folder) / "assets"
            assets.mkdir()
            (assets / f"{case.name}.onnx").write_bytes(case.model)
            np.savez(assets / f"{case.name}.inputs.npz", **sample_inputs(case))
            cook_folder(assets, Path(folder) / "build", found)


# --- broken models ---------------------------------------------------------------------------------


def _feeds(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path), load_external_data=False)
    npz = path.with_name(path.name.removesuffix(".onnx") + ".inputs.npz")
    if npz.is_file():
        return load_inputs(npz, model, npz.read_bytes())
    return synthesize_inputs(model, {"batch": 2}, settings_hint="", inputs_hint="")


def _run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], optimized: bool = False) -> dict[str, Any]:
    options = onnxruntime.SessionOptions()
    if not optimized:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=CPU)
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def _judged(
    want: Mapping[str, Any], got: Mapping[str, Any], noise: Mapping[str, tuple[float, float]]
) -> dict:
    """The figures of the output that shows the breakage most, and whether the default rule (with
    the source's rounding noise, as a cook measures it) refuses the broken model."""
    results = compare(want, got, DEFAULT_RTOL, DEFAULT_ATOL, 0.0, DEFAULT_VERIFY_SCALE, noise)
    worst = max(results, key=lambda r: r.rel_l2)
    figures = _figures(dataclasses.asdict(worst))
    bound = min(
        max(DEFAULT_VERIFY_SCALE, NOISE_FACTOR * worst.noise_rel_l2), NOISE_CAP * DEFAULT_VERIFY_SCALE
    )
    return {**figures, "bound": bound, "caught": not all(r.ok for r in results)}


def broken_figures(path: Path) -> dict[str, dict[str, Any]]:
    """How far each kind of breakage moves the outputs of the model at ``path``, and whether the
    default rule catches it."""
    model = onnx.load(str(path))
    feeds = _feeds(path)
    want = _run(model, feeds)
    noise = rounding_noise(want, _run(model, feeds, optimized=True))
    weights = [
        index
        for index, tensor in enumerate(model.graph.initializer)
        if tensor.data_type == onnx.TensorProto.FLOAT and math.prod(tensor.dims) >= 256
    ]
    biases = [
        index
        for index, tensor in enumerate(model.graph.initializer)
        if tensor.data_type == onnx.TensorProto.FLOAT
        and len(tensor.dims) == 1
        and tensor.dims[0] >= 8
        and numpy_helper.to_array(tensor).any()
    ]
    results: dict[str, dict[str, Any]] = {}
    step = max(1, len(weights) // PERTURBED_TENSORS)
    tried = [
        _judged(want, _run(_with_tensor(model, index, lambda a: a * 1.01), feeds), noise)
        for index in weights[::step][:PERTURBED_TENSORS]
    ]
    if tried:  # the weakest signal of the tensors tried
        results["one weight tensor x1.01 (weakest of 5)"] = min(tried, key=lambda t: t["rel_l2"])
    if biases:
        index = biases[len(biases) // 2]
        results["a bias dropped (zeroed)"] = _judged(
            want, _run(_with_tensor(model, index, np.zeros_like), feeds), noise
        )
    names = list(want)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[:i] if want[a].shape == want[b].shape]
    if pairs:
        a, b = pairs[0]
        results["two outputs swapped"] = _judged(want, {**want, a: want[b], b: want[a]}, noise)
    return results


def _with_tensor(model: onnx.ModelProto, index: int, change) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    tensor = copy.graph.initializer[index]
    tensor.CopyFrom(
        numpy_helper.from_array(change(numpy_helper.to_array(tensor)).astype(np.float32), tensor.name)
    )
    return copy


# --- the report ------------------------------------------------------------------------------------


def _fmt(value: float) -> str:
    return "0" if value == 0 else f"{value:.2g}"


def _quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values), q)) if values else 0.0


def render(
    correct: Mapping[str, dict[str, Found]],
    broken: Mapping[str, dict[str, dict[str, float]]],
    info: Mapping[str, str],
    seconds: float,
) -> str:
    lines = [
        "# Verification error: correct cooks against broken models",
        "",
        "<!-- Generated by `python -m bench.verify_errors`; do not edit by hand. -->",
        "",
        f"Measured on {info['date']} ({info['CPU']}, {info['cores']}) with onnx {info.get('onnx', '?')}, "
        f"onnxruntime {info.get('onnxruntime', '?')} in {seconds / 60:.1f} min.",
        "",
        "Figures per output: `max_abs` and `max_rel` elementwise; `of_range` = max |error| / max |source "
        "output|; `rel_l2` = ||error|| / ||source output||; `1 - cosine`. **Correct cooks**: the cook's own "
        "verification (the blob through `onnx_cooker.runtime` against the source run by onnxruntime with "
        "optimizations off) for every shipped platform, tolerances opened so that every figure is kept.",
        "",
        "## Correct cooks (largest, and 99th percentile, over all outputs)",
        "",
        "| source set | platform | cooks | outputs | refused by rtol/atol alone | max_abs | max_rel "
        "| of_range (max / p99) | rel_l2 (max / p99) | 1 - cosine | rel_l2 / its bound (max) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for source_set, platforms in correct.items():
        for platform, found in sorted(platforms.items()):
            rows = found.rows
            column = {key: [row[key] for row in rows] for key in FIGURES}
            lines.append(
                f"| {source_set} | {platform} | {found.cooks} | {len(rows)} | {found.elementwise_refused} | "
                f"{_fmt(max(column['max_abs'], default=0))} | {_fmt(max(column['max_rel'], default=0))} | "
                f"{_fmt(max(column['of_range'], default=0))} / {_fmt(_quantile(column['of_range'], 0.99))} | "
                f"{_fmt(max(column['rel_l2'], default=0))} / {_fmt(_quantile(column['rel_l2'], 0.99))} | "
                f"{_fmt(max(column['one_minus_cosine'], default=0))} | "
                f"{_fmt(max((row['to_bound'] for row in rows), default=0))} |"
            )
    lines += [
        "",
        "## Broken models (smallest signal: the weakest of the weight tensors tried)",
        "",
        "| model | breakage | max_abs | max_rel | of_range | rel_l2 | 1 - cosine | rel_l2 bound | refused |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for model_name, kinds in broken.items():
        for kind, figures in kinds.items():
            lines.append(
                f"| {model_name} | {kind} | "
                + " | ".join(_fmt(figures.get(key, 0.0)) for key in FIGURES)
                + f" | {_fmt(figures['bound'])} | {'yes' if figures['caught'] else '**no**'} |"
            )
    lines += ["", *_rule(correct, broken)]
    failures = [
        (s, p, f)
        for s, platforms in correct.items()
        for p, found in platforms.items()
        for f in found.failures
    ]
    if failures:
        lines += [
            "",
            f"## Cooks that did not happen ({len(failures)}, not counted)",
            "",
            "Refusals that have nothing to do with verification: backend cases a platform cannot take "
            "(docs/conformance.md explains each), models that need settings of their own. The first 10:",
            "",
        ]
        lines += [f"- {s} / {p}: {f[:160]}" for s, p, f in failures[:10]]
    return "\n".join(lines) + "\n"


def _rule(
    correct: Mapping[str, dict[str, Found]], broken: Mapping[str, dict[str, dict[str, float]]]
) -> list[str]:
    """The default rule and its measured margins on both sides."""
    rows = [
        (row, f"{name}, {source_set}/{platform}")
        for source_set, platforms in correct.items()
        for platform, found in platforms.items()
        for row, name in zip(found.rows, found.names, strict=True)
    ]
    harms = [
        (figures, f"{model} ({kind})") for model, kinds in broken.items() for kind, figures in kinds.items()
    ]
    lines = [
        "## The default rule",
        "",
        f"An output verifies when every element is within `atol + rtol * |source|` (defaults rtol "
        f"{DEFAULT_RTOL:g}, atol {DEFAULT_ATOL:g}), or, for float outputs, when its `rel_l2` is at most "
        f"`verify_scale` ({DEFAULT_VERIFY_SCALE:g}) and its `of_range` at most {OF_RANGE_FACTOR:g} times "
        f"that, each bound raised to {NOISE_FACTOR:g} times the source's own rounding noise (optimizations "
        f"off against onnxruntime's default level, same inputs) where that is more, up to "
        f"{NOISE_CAP:g} times the fixed bound; non-finite values must match. An output that misses both "
        "also verifies, where a selection computes it (TopK, ArgMax, ArgMin, NonMaxSuppression, Unique), "
        "when it is within the fixed bounds of the source's output at onnxruntime's default level (near-ties "
        "reordered by that level's rounding: docs/design.md). Explicit "
        "rtol/atol turn the second and third branches off. Where a cooked model fails on synthesized "
        "inputs that the source itself is ill-conditioned on (one float32 step up on every input moves "
        "its outputs past the fixed bounds), the cook verifies again on floats uniform in [0, 1) "
        "(onnx_cooker/cook/conditioning.py); so it does, before comparing, where an output of the source "
        "is NaN all over on them.",
        "",
    ]
    if rows:
        closest, closest_at = max(rows, key=lambda item: item[0]["to_bound"])
        lines.append(
            f"- Correct cooks: every output verifies; the closest to its bound has `rel_l2` "
            f"{_fmt(closest['rel_l2'])} ({closest_at}), {1 / max(closest['to_bound'], 1e-300):.1f}x below it "
            f"(the bound is verify_scale, or {NOISE_FACTOR:g} x the source's rounding noise where more, "
            f"at most {NOISE_CAP:g} x verify_scale)."
        )
    if harms:
        missed = [at for figures, at in harms if not figures["caught"]]
        caught = [(f, at) for f, at in harms if f["caught"]]
        if caught:
            weakest, weakest_at = min(caught, key=lambda item: item[0]["rel_l2"] / item[0]["bound"])
            lines.append(
                f"- Broken models: {len(caught)} of {len(harms)} refused; the weakest refused has `rel_l2` "
                f"{_fmt(weakest['rel_l2'])} ({weakest_at}), "
                f"{weakest['rel_l2'] / weakest['bound']:.1f}x its bound."
            )
        if missed:
            lines.append(
                "- Not refused (the breakage moves the outputs less than float32 rounding does, by either "
                f"rule): {', '.join(missed)}."
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.verify_errors", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, 40 conformance cases, no standard models"
    )
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "verification.md")
    parser.add_argument("--workdir", type=Path, help="where to create the temporary folder (~3 GB)")
    parser.add_argument(
        "--results", default=str(REPO / "bench" / "results.md"), help="also embedded here ('': nowhere)"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="verify-errors-", dir=args.workdir))
    correct: dict[str, dict[str, Found]] = {}
    broken: dict[str, dict[str, dict[str, float]]] = {}
    try:
        if not args.quick:
            print("standard architectures: export and cook", flush=True)
            folder = work / "standard"
            for model in standard.STANDARD:
                path = standard.export(model, folder)
                broken[model.name] = broken_figures(path)
            cook_folder(folder, work / "build-standard", correct.setdefault("standard", {}))
            print("exporter-made test models", flush=True)
            from tests.test_exporters import EXPORTERS, NETS, export

            folder = work / "exporter"
            for net in sorted(NETS):
                for exporter in EXPORTERS:
                    export(net, exporter, folder / f"{net}_{exporter}" / f"{net}_{exporter}.onnx")
            for sub in sorted(folder.iterdir()):
                cook_folder(sub, work / "build-exporter", correct.setdefault("exporter", {}))
        print("bench set and example assets", flush=True)
        folder = work / "bench"
        sizes = models.QUICK if args.quick else models.FULL
        models.write_assets(EXAMPLES, folder, sizes)
        for deep in folder.glob("*.cook.yaml"):
            if deep.read_text() == models.DEEP_MODEL_SETTINGS:
                deep.unlink()  # measured with the defaults, as a new user cooks them
        for generated in models.GENERATED:
            broken[generated.name] = broken_figures(folder / f"{generated.name}.onnx")
        cook_folder(folder, work / "build-bench", correct.setdefault("bench", {}))
        print("ONNX backend conformance cases", flush=True)
        cook_conformance(work, correct.setdefault("conformance", {}), 40 if args.quick else None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = describe()
    info |= {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
    report = render(correct, broken, info, time.perf_counter() - start)
    args.output.write_text(report, encoding="utf-8")
    print(f"wrote {args.output}")
    if args.results:
        where = Path(os.path.relpath(args.output, Path(args.results).parent)).as_posix()  # a link from there
        embed(Path(args.results), "verification", report, where)
        print(f"embedded in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
