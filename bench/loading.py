"""``python -m bench.loading [--quick]``: how fast and how lean a cooked blob loads, against the
files it came from, in each platform's own onnxruntime version, side by side in one run.

Cooks the bench models (bench/models.py) and the example assets with the real ``doit``, then, in
the exact onnxruntime each platform ships (its runtime-check environment; windows-dml's ONNX blobs
also in the bench's own 1.32), times session-ready for: the source ``.onnx`` from its path,
``session_from_blob(bytes)``, ``open_bundle(...).session(...)`` (the blob file mapped),
``session_from_blob(low_memory=True)`` and, for ORT-format blobs, the same ORT model as a plain
``.ort`` file (what onnxruntime's converter writes) from its path; variants alternate within each
round (bench/load_worker.py). Peak memory of each, for the 268 MB model, in fresh processes.
Writes bench/results-loading.md and its section of bench/results.md.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from onnx_cooker.build.target_check import ensure_runtime
from onnx_cooker.runtime import unpack_blob

from . import models
from .machine import describe
from .measure import Build, feeds
from .project import EXAMPLES, REPO, BenchError, copy_project, doit, platform_names, warm_up
from .sections import embed

WORKER = REPO / "bench" / "load_worker.py"
# platform -> the onnxruntime versions its blobs are timed in (its own first)
VERSIONS = {
    "android": ("1.32.0",),
    "ios": ("1.32.0",),
    "console": ("1.28.0",),
    "windows-dml": ("1.24.4", "1.32.0"),
}
TARGETS = {"onnx_geomean": 1.3, "ort_geomean": 2.0, "slowest": 1.0, "ort_vs_plain": 1.0, "low_memory": 10.0}
MEMORY_VARIANTS = (
    "source",
    "blob",
    "memory",
    "bundle",
    "plain_ort",
    "blob_low_memory",
    "memory_low_memory",
    "bundle_low_memory",
)
MEMORY_TARGETS = {"onnx": 1.2, "ort": 1.5}


def _step(message: str, started: float) -> None:
    print(f"[bench.loading {time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


def cases(build: Build, assets: Path, scratch: Path) -> dict[str, list[dict[str, Any]]]:
    """platform -> its cases (see load_worker): every model its manifest lists."""
    found: dict[str, list[dict[str, Any]]] = {}
    for platform in build.platforms:
        for model, entry in sorted(build.manifests[platform].items()):
            blob = build.blob(platform, model)
            plain = None
            if entry["format"] == "ort":
                plain = scratch / platform / f"{model}.ort"
                plain.parent.mkdir(parents=True, exist_ok=True)
                plain.write_bytes(unpack_blob(blob.read_bytes()).model)
            inputs = scratch / "inputs" / f"{model}.npz"
            if not inputs.is_file():
                inputs.parent.mkdir(parents=True, exist_ok=True)
                np.savez(inputs, **feeds(build, model))
            found.setdefault(platform, []).append(
                {
                    "model": model,
                    "platform": platform,
                    "format": entry["format"],
                    "model_size": entry.get("model_size", 0),
                    "source": str(assets / f"{model}.onnx"),
                    "blob": str(blob),
                    "bundle": str(build.root / platform),
                    "plain_ort": str(plain) if plain else None,
                    "input": str(inputs),
                }
            )
    return found


def worker(python: Path, scratch: Path, *args: str) -> dict[str, Any]:
    """bench/load_worker.py in ``python``'s environment, with the loader copied beside it."""
    package = scratch / "loader"
    if not package.is_dir():
        shutil.copytree(REPO / "onnx_cooker" / "runtime", package / "onnx_cooker" / "runtime")
        shutil.copy2(REPO / "onnx_cooker" / "__init__.py", package / "onnx_cooker" / "__init__.py")
    done = subprocess.run(
        [str(python), "-I", str(WORKER), str(package), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"load worker {args[0]} failed in {python}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool, workdir: Path, runtimes: Path) -> dict[str, Any]:
    started = time.perf_counter()
    machine = describe()
    project = copy_project(workdir / "project")
    assets = project / "assets"
    sizes = models.QUICK if quick else models.FULL
    _step(f"writing inputs into {assets}", started)
    models.write_assets(EXAMPLES, assets, sizes)
    warm_up(project, runtimes, workdir)
    _step("cooking every platform with doit", started)
    doit(project, ["cook"], assets="assets", build="build", runtimes=runtimes, log=workdir / "cook.log")
    build = Build.read(project / "build", platform_names(project))
    scratch = workdir / "scratch"
    by_platform = cases(build, assets, scratch)
    repeats, large_repeats = (2, 1) if quick else (7, 5)
    timings: dict[str, dict[str, Any]] = {}
    for platform, platform_cases in by_platform.items():
        for version in VERSIONS.get(platform, ("1.32.0",)):
            python = ensure_runtime(version, runtimes, project / "platforms" / f"{platform}.yaml")
            small = [c for c in platform_cases if c["model"] != models.LARGE_WEIGHTS]
            large = [c for c in platform_cases if c["model"] == models.LARGE_WEIGHTS]
            _step(f"session-ready times, {platform} in onnxruntime {version}", started)
            report: dict[str, Any] = {}
            for group, count in ((small, repeats), (large, large_repeats)):
                if group:
                    (scratch / "cases.json").write_text(json.dumps(group))
                    report |= worker(python, scratch, "times", str(scratch / "cases.json"), str(count))[
                        "cases"
                    ]
            timings[f"{platform}@{version}"] = report
    memory: dict[str, list[dict[str, Any]]] = {}
    for platform, platform_cases in by_platform.items():
        case = next((c for c in platform_cases if c["model"] == models.LARGE_WEIGHTS), None)
        if case is None or platform not in ("android", "console", "windows-dml"):
            continue
        for version in VERSIONS[platform]:
            python = ensure_runtime(version, runtimes, project / "platforms" / f"{platform}.yaml")
            _step(f"peak memory, {models.LARGE_WEIGHTS} {platform} in onnxruntime {version}", started)
            rows = []
            for variant in MEMORY_VARIANTS:
                if variant == "plain_ort" and not case["plain_ort"]:
                    continue
                probes = [
                    worker(python, scratch, "memory", json.dumps(case), variant)
                    for _ in range(1 if quick else 3)
                ]
                rows.append(
                    {
                        "variant": variant,
                        "path": probes[0]["path"],
                        "peak": statistics.median(p["peak"] for p in probes),
                        "held": statistics.median(p["held"] for p in probes),
                        "ready_s": statistics.median(p["ready_s"] for p in probes),
                        "model_size": case["model_size"],
                    }
                )
            memory[f"{platform}@{version}"] = rows
    return {
        "quick": quick,
        "machine": machine,
        "timings": timings,
        "memory": memory,
        "formats": {p: build.format(p) for p in build.platforms},
        "duration_s": time.perf_counter() - started,
    }


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# onnx-cooker benchmarks: loading a blob",
        "",
        f"Written by `python -m bench.loading{' --quick' if results['quick'] else ''}` on {m['date']} in "
        f"{results['duration_s'] / 60:.1f} min ({m['cores']}, {m['CPU']}; project commit "
        f"{m['project commit']}). "
        "Session-ready times are medians of alternating rounds; each ratio is against a variant timed in "
        "the same rounds. Speed-up = the other variant's time / the blob's (above 1: the blob is faster).",
        "",
        "Variants: **file** `InferenceSession(<source .onnx>)` (weights in `.onnx.data`, mapped by "
        "onnxruntime); **blob** `session_from_blob(bytes)` (the blob already in memory, as a game holds it); "
        "**bundle** `bundle.session(name)` (the blob file mapped; `open_bundle` checked every blob's sha256 "
        "at start-up, untimed, as a game opens a bundle once); **.ort** the same ORT model "
        "as a plain file, `InferenceSession(<.ort path>)`, as onnxruntime's converter leaves it; **memory** "
        "`session_from_blob(MemoryBlob)` (the blob read into a sealed memfd and checked, untimed); **low** "
        "`session_from_blob(bytes, low_memory=True)` (no prepacking), **low bundle** the same through "
        "`bundle.session`. Prepacking is on everywhere else.",
        "",
        "## Targets",
        "",
        "| platform (onnxruntime) | blob vs file, geomean | slowest blob vs file | bundle vs file, geomean | "
        "blob vs .ort, geomean | 268 MB: file / blob / bundle / low / low bundle (ms) | low vs file, "
        "low bundle vs file (268 MB) | load path (blob, bundle) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for key, report in results["timings"].items():
        platform, version = key.split("@")
        fmt = results["formats"][platform]
        ratios = {m: r["ready_s"]["source"] / r["ready_s"]["blob"] for m, r in report.items()}
        bundle = {m: r["ready_s"]["source"] / r["ready_s"]["bundle"] for m, r in report.items()}
        plain = {
            m: r["ready_s"]["plain_ort"] / r["ready_s"]["blob"]
            for m, r in report.items()
            if "plain_ort" in r["ready_s"]
        }
        slow_model = min(ratios, key=ratios.get)
        large = next((r for m, r in report.items() if m.startswith(models.LARGE_WEIGHTS + "/")), None)
        large_text, low_text, paths = "-", "-", "-"
        if large:
            t = large["ready_s"]
            large_text = " / ".join(
                _ms(t[v]) for v in ("source", "blob", "bundle", "blob_low_memory", "bundle_low_memory")
            )
            low = t["source"] / t["blob_low_memory"]
            low_bundle = t["source"] / t["bundle_low_memory"]
            low_text = f"{_x(low)}, {_x(low_bundle)}"
            verdicts.append((f"{key}: 268 MB low_memory bundle vs file", low_bundle, TARGETS["low_memory"]))
            paths = f"{large['paths'].get('blob', '?')}, {large['paths'].get('bundle', '?')}"
            verdicts.append((f"{key}: 268 MB low_memory vs file", low, TARGETS["low_memory"]))
            verdicts.append(
                (f"{key}: 268 MB blob vs file", t["source"] / t["blob"], 1.0 if fmt == "onnx" else 1 / 1.3)
            )
            verdicts.append((f"{key}: 268 MB bundle vs file", t["source"] / t["bundle"], 1.0))
        geo = _geomean(list(ratios.values()))
        verdicts.append((f"{key}: geomean blob vs file", geo, TARGETS[f"{fmt}_geomean"]))
        verdicts.append(
            (f"{key}: slowest ({slow_model.split('/')[0]})", ratios[slow_model], TARGETS["slowest"])
        )
        if plain:
            verdicts.append(
                (f"{key}: geomean blob vs .ort", _geomean(list(plain.values())), TARGETS["ort_vs_plain"])
            )
        lines.append(
            f"| {platform} ({version}) | {_x(geo)} | {_x(ratios[slow_model])} {slow_model.split('/')[0]} | "
            f"{_x(_geomean(list(bundle.values())))} | "
            f"{_x(_geomean(list(plain.values()))) if plain else '-'} | "
            f"{large_text} | {low_text} | {paths} |"
        )
    lines += [
        "",
        "A **MemoryBlob** (`onnx_cooker.runtime.MemoryBlob.read`: the blob read from its file into a sealed "
        "memfd and checked then, untimed, as a game reads its archive; onnxruntime maps it in place like a "
        "blob file) against the file, and the same with `low_memory`:",
        "",
        "| platform (onnxruntime) | memory vs file, geomean | slowest memory vs file | "
        "268 MB: memory / low memory (ms) | low memory vs file (268 MB) | load path (268 MB) |",
        "|---|---|---|---|---|---|",
    ]
    for key, report in results["timings"].items():
        platform, version = key.split("@")
        fmt = results["formats"][platform]
        held = {m: r["ready_s"]["source"] / r["ready_s"]["memory"] for m, r in report.items()}
        slow_model = min(held, key=held.get)
        large = next((r for m, r in report.items() if m.startswith(models.LARGE_WEIGHTS + "/")), None)
        large_text, low_text, path = "-", "-", "-"
        if large:
            t = large["ready_s"]
            large_text = f"{_ms(t['memory'])} / {_ms(t['memory_low_memory'])}"
            low_text = _x(t["source"] / t["memory_low_memory"])
            path = large["paths"].get("memory", "?")
            verdicts.append(
                (
                    f"{key}: 268 MB MemoryBlob vs file",
                    t["source"] / t["memory"],
                    1.0 if fmt == "onnx" else 1 / 1.3,
                )
            )
            verdicts.append(
                (f"{key}: 268 MB low_memory MemoryBlob vs file", t["source"] / t["memory_low_memory"], 10.0)
            )
        lines.append(
            f"| {platform} ({version}) | {_x(_geomean(list(held.values())))} | "
            f"{_x(held[slow_model])} {slow_model.split('/')[0]} | {large_text} | {low_text} | {path} |"
        )
    lines += ["", "| check | measured | target | result |", "|---|---|---|---|"]
    for name, value, target in verdicts:
        lines.append(
            f"| {name} | {_x(value)} | >= {_x(target)} | {'met' if value >= target else '**missed**'} |"
        )
    lines += ["", "## Session-ready time per model (ms)", ""]
    for key, report in results["timings"].items():
        lines += [
            f"### {key.replace('@', ' in onnxruntime ')}",
            "",
            "| model | file | blob | memory | bundle | .ort | low | blob vs file | memory vs file | "
            "bundle vs file | blob vs .ort | load path |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for model_key, r in sorted(report.items()):
            t = r["ready_s"]
            ort = t.get("plain_ort")
            lines.append(
                f"| {model_key.split('/')[0]} | {_ms(t['source'])} | {_ms(t['blob'])} | {_ms(t['memory'])} | "
                f"{_ms(t['bundle'])} | {_ms(ort) if ort else '-'} | {_ms(t['blob_low_memory'])} | "
                f"{_x(t['source'] / t['blob'])} | {_x(t['source'] / t['memory'])} | "
                f"{_x(t['source'] / t['bundle'])} | {_x(ort / t['blob']) if ort else '-'} | "
                f"{r['paths'].get('blob', '?')} |"
            )
        lines.append("")
    lines += [
        "## Peak memory, 268 MB model",
        "",
        "VmHWM of a fresh process over its level after the imports, the blob read included for **blob**, "
        "**memory** and their **low_memory** loads (what a game holds), as a multiple of the cooked "
        "model's size; held = VmRSS after the load. "
        "The same processes time their one load: a game's first load, every copy into fresh pages. "
        f"Targets: blob and bundle <= {MEMORY_TARGETS['onnx']:g}x (ONNX), "
        f"<= {MEMORY_TARGETS['ort']:g}x (ORT).",
        "",
        "| platform (onnxruntime) | variant | load path | peak | held | session ready, fresh process (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for key, rows in results["memory"].items():
        for row in rows:
            size = row["model_size"] or 1
            lines.append(
                f"| {key.replace('@', ' (') + ')'} | {row['variant']} | {row['path'] or '-'} | "
                f"{_x(row['peak'] / size)} | {_x(row['held'] / size)} | {_ms(row['ready_s'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loading", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models and few repeats (seconds)")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-loading.md")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results.md")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--runtimes-dir", type=Path, default=REPO / "build" / ".runtimes")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="onnx-cooker-loading-", dir=args.workdir))
    try:
        results = run(args.quick, root, args.runtimes_dir.resolve())
        report = render(results)
        args.output.write_text(report, encoding="utf-8")
        embed(args.results, "loading", report, args.output.name)
        (root.parent / "loading-results.json").write_text(json.dumps(results, default=str))
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
