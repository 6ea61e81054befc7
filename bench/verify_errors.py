"""``python -m bench.verify_errors [--quick] [--output PATH]``: how far correct cooks are from their
sources, and how far broken models are: the evidence for the verification's default rule.

Every model the project can make or has is cooked for every shipped platform (its optimization level
and style, through ``pipeline.cook.cook``, tolerances opened so that every figure is recorded):

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
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper

from pipeline.assets import discover
from pipeline.compare import scale_figures
from pipeline.cook import cook
from pipeline.errors import CookError
from pipeline.job import CookJob
from pipeline.profile import load_platforms, resolve
from pipeline.verify import load_inputs, synthesize_inputs

from . import models, standard
from .machine import describe
from .project import EXAMPLES, REPO

OPEN = {"rtol": 1.0e9, "atol": 1.0e9}  # every cook verifies: the figures are what is measured
FIGURES = ("max_abs", "max_rel", "of_range", "rel_l2", "one_minus_cosine")
CPU = ["CPUExecutionProvider"]
PERTURBED_TENSORS = 5  # weight tensors tried per model (spread over its initializers)


@dataclass
class Found:
    """The figures of one source set on one platform: one row per float output."""

    rows: list[dict[str, float]] = field(default_factory=list)
    cooks: int = 0
    failures: list[str] = field(default_factory=list)


def _figures(output: Mapping[str, float]) -> dict[str, float]:
    return {
        "max_abs": output["max_abs"],
        "max_rel": output["max_rel"],
        "of_range": output["of_range"],
        "rel_l2": output["rel_l2"],
        "one_minus_cosine": 1.0 - output["cosine"],
    }


def cook_folder(
    assets: Path, build: Path, found: dict[str, Found], names: Iterable[str] | None = None
) -> None:
    """Cook every model of ``assets`` (or ``names``) for every shipped platform; record the figures."""
    platforms = load_platforms(REPO / "platforms", {})
    wanted = set(names) if names is not None else None
    for asset in discover(assets):
        if wanted is not None and asset.name not in wanted:
            continue
        for platform in platforms:
            settings = resolve(platform, OPEN, {})
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


def _run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=CPU)
    return session.run(None, dict(feeds))


def _worst(want: list[np.ndarray], got: list[np.ndarray]) -> dict[str, float]:
    """The largest figure over the float outputs (the breakage is seen where it shows most)."""
    rows = []
    for w, g in zip(want, got, strict=True):
        if np.issubdtype(w.dtype, np.floating) and w.shape == g.shape:
            w64, g64 = w.astype(np.float64).ravel(), g.astype(np.float64).ravel()
            figures = scale_figures(w64, g64)
            diff = np.abs(w64 - g64)
            figures["max_abs"] = float(diff.max(initial=0.0))
            figures["max_rel"] = float((diff / np.maximum(np.abs(w64), 1e-300)).max(initial=0.0))
            figures["one_minus_cosine"] = 1.0 - figures.pop("cosine")
            rows.append(figures)
    return {key: max(row[key] for row in rows) for key in FIGURES} if rows else {}


def broken_figures(path: Path) -> dict[str, dict[str, float]]:
    """How far each kind of breakage moves the outputs of the model at ``path``."""
    model = onnx.load(str(path))
    feeds = _feeds(path)
    want = _run(model, feeds)
    weights = [
        index
        for index, tensor in enumerate(model.graph.initializer)
        if tensor.data_type == onnx.TensorProto.FLOAT and math.prod(tensor.dims) >= 256
    ]
    biases = [
        index
        for index, tensor in enumerate(model.graph.initializer)
        if tensor.data_type == onnx.TensorProto.FLOAT and len(tensor.dims) == 1 and tensor.dims[0] >= 8
    ]
    results: dict[str, dict[str, float]] = {}
    step = max(1, len(weights) // PERTURBED_TENSORS)
    tried = []
    for index in weights[::step][:PERTURBED_TENSORS]:
        tried.append(_worst(want, _run(_with_tensor(model, index, lambda a: a * 1.01), feeds)))
    if tried:  # the weakest signal of the tensors tried
        results["one weight tensor x1.01"] = {key: min(t[key] for t in tried) for key in FIGURES}
    if biases:
        index = biases[len(biases) // 2]
        results["a bias dropped (zeroed)"] = _worst(
            want, _run(_with_tensor(model, index, np.zeros_like), feeds)
        )
    same_shape = [i for i in range(len(want)) for j in range(i) if want[i].shape == want[j].shape]
    if same_shape:
        j = same_shape[0]
        i = next(k for k in range(j) if want[k].shape == want[j].shape)
        swapped = list(want)
        swapped[i], swapped[j] = want[j], want[i]
        results["two outputs swapped"] = _worst(want, swapped)
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
        "verification (the blob through `pipeline.runtime` against the source run by onnxruntime with "
        "optimizations off) for every shipped platform, tolerances opened so that every figure is kept.",
        "",
        "## Correct cooks (largest, and 99th percentile, over all outputs)",
        "",
        "| source set | platform | cooks | outputs | max_abs | max_rel | of_range (max / p99) "
        "| rel_l2 (max / p99) | 1 - cosine |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for source_set, platforms in correct.items():
        for platform, found in sorted(platforms.items()):
            rows = found.rows
            column = {key: [row[key] for row in rows] for key in FIGURES}
            lines.append(
                f"| {source_set} | {platform} | {found.cooks} | {len(rows)} | "
                f"{_fmt(max(column['max_abs'], default=0))} | {_fmt(max(column['max_rel'], default=0))} | "
                f"{_fmt(max(column['of_range'], default=0))} / {_fmt(_quantile(column['of_range'], 0.99))} | "
                f"{_fmt(max(column['rel_l2'], default=0))} / {_fmt(_quantile(column['rel_l2'], 0.99))} | "
                f"{_fmt(max(column['one_minus_cosine'], default=0))} |"
            )
    lines += [
        "",
        "## Broken models (smallest signal: the weakest of the weight tensors tried)",
        "",
        "| model | breakage | max_abs | max_rel | of_range | rel_l2 | 1 - cosine |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for model_name, kinds in broken.items():
        for kind, figures in kinds.items():
            lines.append(
                f"| {model_name} | {kind} | "
                + " | ".join(_fmt(figures.get(key, 0.0)) for key in FIGURES)
                + " |"
            )
    failures = [
        (s, p, f)
        for s, platforms in correct.items()
        for p, found in platforms.items()
        for f in found.failures
    ]
    if failures:
        lines += ["", "## Cooks that failed for other reasons (not counted)", ""]
        lines += [f"- {s} / {p}: {f}" for s, p, f in failures[:40]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.verify_errors", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, 40 conformance cases, no standard models"
    )
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "verification.md")
    parser.add_argument("--workdir", type=Path, help="where to create the temporary folder (~3 GB)")
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
    args.output.write_text(render(correct, broken, info, time.perf_counter() - start), encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
