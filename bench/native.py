"""``python -m bench.native [--quick]``: the native loader (native/, through ``oc-run``) against
onnxruntime's own ``CreateSession(<source .onnx path>)`` (``oc-run --file``), side by side in one
run, in each platform's own onnxruntime version (the C API library of that version's wheel).

Builds native/ (release), cooks the bench models and the example assets with the real ``doit``,
then for every model of every platform alternates, round by round, fresh ``oc-run`` processes of
each variant: **file** (``--file`` the source ``.onnx``, its weights in ``.onnx.data``), **bundle**
(``--bundle``: the blob file mapped, the bundle opened once, untimed, its blobs hashed then), **low**
(``--bundle --low-memory``: no prepacking). Each process times ``--time`` fresh sessions; a variant's
time is the median over rounds of those medians. The 268 MB model's peak resident memory over each
process's baseline, and the library's own cost (``oc-probe time``: opening the bundle with and
without its sha256 pass, opening the blob), no onnxruntime. Before onnxruntime 1.32 (ONNX platform,
1.24.4 and 1.28.0), the 268 MB model's load path chosen for a blob file (onnx-shared-initializers,
over the library's own mapping) against onnx-mapped (a second build, ``-DOC_SHARED_FOR_FILES=0``),
alternating fresh processes: session-ready time and peak memory. Writes bench/results-native.md and
its section of bench/results.md.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from onnx_cooker.build.target_check import runtime_library

from . import models
from .machine import describe
from .measure import Build
from .project import EXAMPLES, REPO, BenchError, copy_project, doit, platform_names, standalone_main, warm_up
from .report import geomean

VERSIONS = {
    "android": ("1.32.0",),
    "ios": ("1.32.0",),
    "console": ("1.28.0",),
    "windows-dml": ("1.24.4", "1.32.0"),
}
VARIANTS = ("file", "bundle", "memory", "low")
# Cooked models smaller than this time SMALL_MODEL_SESSIONS sessions per oc-run process (else 3).
SMALL_MODEL = 64 << 20
SMALL_MODEL_SESSIONS = 9
# onnxruntime versions in which an ONNX blob file's weights may go as shared initializers or be
# mapped by onnxruntime (onnx-mapped): the library's choice is measured against the other one.
SHARED_VERSIONS = ("1.24.4", "1.28.0")
TARGETS = {
    "onnx": 1.3,
    "ort": 2.0,
    "slowest": 1.0,
    "large": 1.0,
    "low": 20.0,
    "peak": 1.1,
    "own": 0.05,
    "sha": 1e9,
}


def _step(message: str, started: float) -> None:
    print(f"[bench.native {time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


def build_native(out: Path) -> Path:
    done = subprocess.run(
        ["bash", str(REPO / "native" / "build.sh"), str(out)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise BenchError(f"native/build.sh failed:\n{done.stderr[-3000:]}")
    return out / "release"


def build_mapped_variant(out: Path) -> Path:
    """The release library and oc-run built to pick onnx-mapped for blob files before 1.32 (what the
    library chose before shared initializers were measured against it); after build_native(out)."""
    folder = out / "mapped"
    headers = sorted((out / "_deps").glob("onnxruntime-*/include"))  # build.sh keys them by version
    if len(headers) != 1:
        raise BenchError(f"expected one onnxruntime header folder under {out / '_deps'}, found {headers}")
    for step in (
        [
            "cmake", "-S", str(REPO / "native"), "-B", str(folder), "-DCMAKE_BUILD_TYPE=Release",
            "-DOC_SANITIZE=OFF", "-DOC_BUILD_TESTS=OFF", "-DCMAKE_C_FLAGS=-DOC_SHARED_FOR_FILES=0",
            f"-DORT_INCLUDE_DIR={headers[0]}",
        ],
        ["cmake", "--build", str(folder), "--parallel"],
    ):  # fmt: skip
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchError(f"building the onnx-mapped variant failed:\n{done.stderr[-3000:]}")
    return folder


def oc_run(binary: Path, library: Path, variant: str, case: dict[str, Any], sessions: int) -> dict[str, Any]:
    if variant == "file":
        args = ["--file", case["source"]]
    elif variant == "memory":
        args = ["--blob", case["blob"]]
    else:
        args = [
            "--bundle",
            case["bundle"],
            "--model",
            case["model"],
            *(["--low-memory"] if variant == "low" else []),
        ]
    done = subprocess.run(
        [str(binary), *args, "--time", str(sessions), "--ort", str(library)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise BenchError(f"oc-run {variant} {case['model']} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool, workdir: Path, runtimes: Path) -> dict[str, Any]:
    started = time.perf_counter()
    machine = describe()
    _step("building native/ (release)", started)
    release = build_native(workdir / "native")
    mapped = build_mapped_variant(workdir / "native")
    project = copy_project(workdir / "project")
    assets = project / "assets"
    models.write_assets(EXAMPLES, assets, models.QUICK if quick else models.FULL)
    warm_up(project, runtimes, workdir)
    _step("cooking every platform with doit", started)
    doit(project, ["cook"], assets="assets", build="build", runtimes=runtimes, log=workdir / "cook.log")
    build = Build.read(project / "build", platform_names(project))
    rounds, sessions = (1, 1) if quick else (5, 3)
    timings: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for platform in build.platforms:
        manifest = build.manifests[platform]
        cases = [
            {
                "model": name,
                "source": str(assets / f"{name}.onnx"),
                "bundle": str(build.root / platform),
                "blob": str(build.root / platform / entry["file"]),
                "size": entry.get("model_size", 0),
            }
            for name, entry in sorted(manifest.items())
        ]
        for version in VERSIONS.get(platform, ("1.32.0",)):
            library = runtime_library(version, runtimes, project / "platforms" / f"{platform}.yaml")
            key = f"{platform}@{version}"
            _step(f"session-ready times, {key}", started)
            report = {}
            for case in cases:
                samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
                path = "?"
                # A process's first session pays onnxruntime's one-time set-up (about 8 ms here), and
                # one in four or five later ones a stall of 2-4 ms (a pool thread's start on a busy
                # core), either load path: with 3 sessions a small model's median was often a stall
                # (resnet 4.8 ms against 1.0-1.2 ms). Models under SMALL_MODEL time more of them.
                count = sessions if quick or case["size"] >= SMALL_MODEL else SMALL_MODEL_SESSIONS
                for _ in range(rounds):
                    for variant in VARIANTS:
                        result = oc_run(release / "oc-run", library, variant, case, count)
                        samples[variant].append(result["ready_ms_median"])
                        if variant == "bundle":
                            path = result["load_path"]
                report[case["model"]] = {
                    "ready_ms": {v: statistics.median(s) for v, s in samples.items()},
                    "path": path,
                }
            timings[key] = report
            large = next((c for c in cases if c["model"] == models.LARGE_WEIGHTS), None)
            if large is not None:
                _step(f"peak memory and the library's own cost, {key}", started)
                rows = {}
                for variant in VARIANTS:
                    probes = [
                        oc_run(release / "oc-run", library, variant, large, 1)
                        for _ in range(1 if quick else 3)
                    ]
                    rows[variant] = {
                        "peak": statistics.median(
                            p["peak_rss_bytes"] - p["baseline_rss_bytes"] for p in probes
                        ),
                        "size": large["size"],
                    }
                memory[key] = rows
                done = subprocess.run(
                    [
                        str(release / "oc-probe"),
                        "time",
                        large["bundle"],
                        large["model"],
                        "3" if quick else "9",
                    ],
                    capture_output=True,
                    text=True,
                )
                if done.returncode != 0:
                    raise BenchError(f"oc-probe time failed: {done.stderr[-2000:]}")
                total = sum(e["blob_size"] for e in manifest.values())
                own[key] = json.loads(done.stdout) | {"bundle_bytes": total}
    paths = compare_paths(
        build, assets, runtimes, project, {"chosen": release, "other": mapped}, rounds, started
    )
    return {
        "quick": quick,
        "machine": machine,
        "timings": timings,
        "memory": memory,
        "own": own,
        "paths": paths,
        "formats": {p: build.format(p) for p in build.platforms},
        "duration_s": time.perf_counter() - started,
    }


def compare_paths(
    build: Build,
    assets: Path,
    runtimes: Path,
    project: Path,
    binaries: dict[str, Path],
    rounds: int,
    started: float,
) -> dict[str, Any]:
    """The 268 MB model of the first ONNX platform, before 1.32: the library's load path for a blob
    file against the other one, alternating fresh processes of each build; per variant the median
    session-ready time, the median peak over the baseline, and the path each reported."""
    onnx = [p for p in build.platforms if build.format(p) == "onnx"]
    if not onnx or models.LARGE_WEIGHTS not in build.manifests[onnx[0]]:
        return {}
    platform = onnx[0]
    entry = build.manifests[platform][models.LARGE_WEIGHTS]
    case = {
        "model": models.LARGE_WEIGHTS,
        "source": str(assets / f"{models.LARGE_WEIGHTS}.onnx"),
        "bundle": str(build.root / platform),
        "blob": str(build.root / platform / entry["file"]),
        "size": entry.get("model_size", 0),
    }
    found: dict[str, Any] = {}
    for version in SHARED_VERSIONS:
        library = runtime_library(version, runtimes, project / "platforms" / f"{platform}.yaml")
        _step(f"load paths compared, {platform}@{version}", started)
        samples: dict[str, list[dict[str, Any]]] = {v: [] for v in binaries}
        for _ in range(max(rounds, 3)):
            for variant, binary in binaries.items():
                samples[variant].append(
                    oc_run(binary / "oc-run", library, "bundle", case, 3 if rounds > 1 else 1)
                )
        found[f"{platform}@{version}"] = {
            variant: {
                "ready_ms": statistics.median(r["ready_ms_median"] for r in runs),
                "peak": statistics.median(r["peak_rss_bytes"] - r["baseline_rss_bytes"] for r in runs),
                "paths": sorted({r["load_path"] for r in runs}),
                "size": case["size"],
            }
            for variant, runs in samples.items()
        }
    return found


def _x(value: float) -> str:
    return f"{value:.2f}x"


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# onnx-cooker benchmarks: the native loader",
        "",
        f"Written by `python -m bench.native{' --quick' if results['quick'] else ''}` on {m['date']} in "
        f"{results['duration_s'] / 60:.1f} min ({m['cores']}, {m['CPU']}, SHA-256 instructions: "
        f"{m.get('SHA-256 instructions', 'unknown')}; "
        f"project commit {m['project commit']}). "
        "Each variant runs in fresh `oc-run` processes (native/tools/oc_run.c), "
        "alternating within each round; "
        "a time is the median over rounds of each process's median session-ready time (of "
        f"{SMALL_MODEL_SESSIONS} sessions a process for models under {SMALL_MODEL >> 20} MB, whose first "
        "session pays onnxruntime's one-time set-up; of 3 above). Speed-up = file / "
        "the variant (above 1: faster than onnxruntime's own `CreateSession` of the source file).",
        "",
        "Variants: **file** `oc-run --file <source .onnx>` (`CreateSession` from its path, weights in "
        "`.onnx.data` mapped by onnxruntime); **bundle** `oc-run --bundle` (libonnx_cooker: the blob file "
        "mapped, the bundle opened once and its blobs hashed then, untimed; the session made with the blob's "
        "recipe); **memory** `oc-run --blob` (the blob file read into memory once, untimed, as an engine "
        "reads its archive; each session made from those bytes: `oc_blob_open_memory`, its header, layout "
        "and the CRC-32s of raw content checked on every load, on every core); **low** `--bundle` with "
        "`--low-memory` (no prepacking). Prepacking is on elsewhere.",
        "",
        "## Targets",
        "",
        "| platform (onnxruntime) | bundle vs file, geomean | slowest | memory vs file, geomean | slowest "
        "memory | 268 MB: file / bundle / memory / low (ms) | low vs file (268 MB) | load path (268 MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for key, report in results["timings"].items():
        platform = key.split("@")[0]
        fmt = results["formats"][platform]
        ratios = {name: r["ready_ms"]["file"] / r["ready_ms"]["bundle"] for name, r in report.items()}
        slowest = min(ratios, key=ratios.get)
        geo = geomean(list(ratios.values()))
        held = {name: r["ready_ms"]["file"] / r["ready_ms"]["memory"] for name, r in report.items()}
        slow_held = min(held, key=held.get)
        verdicts.append((f"{key}: geomean bundle vs file", geo, TARGETS[fmt]))
        verdicts.append((f"{key}: slowest ({slowest})", ratios[slowest], TARGETS["slowest"]))
        large = report.get(models.LARGE_WEIGHTS)
        large_text = low_text = path = "-"
        if large:
            t = large["ready_ms"]
            large_text = " / ".join(f"{t[v]:.1f}" for v in VARIANTS)
            low_text = _x(t["file"] / t["low"])
            path = large["path"]
            verdicts.append((f"{key}: 268 MB bundle vs file", t["file"] / t["bundle"], TARGETS["large"]))
            verdicts.append((f"{key}: 268 MB low vs file", t["file"] / t["low"], TARGETS["low"]))
        lines.append(
            f"| {key.replace('@', ' (')}) | {_x(geo)} | {_x(ratios[slowest])} {slowest} | "
            f"{_x(geomean(list(held.values())))} | {_x(held[slow_held])} {slow_held} | {large_text} | "
            f"{low_text} | {path} |"
        )
    for key, rows in results["memory"].items():
        size = rows["bundle"]["size"] or 1
        verdicts.append(
            (
                f"{key}: 268 MB peak RSS of bundle / model size",
                size / max(rows["bundle"]["peak"], 1) * 1.0,
                1 / TARGETS["peak"],
            )
        )
    for key, o in results["own"].items():
        large = results["timings"][key].get(models.LARGE_WEIGHTS)
        if large:
            share = o["open_blob_ms"] / large["ready_ms"]["bundle"]
            verdicts.append(
                (
                    f"{key}: library's own cost / session ready (268 MB), as 5% / share",
                    TARGETS["own"] / max(share, 1e-9),
                    1.0,
                )
            )
        sha = o["bundle_bytes"] / max(o["open_bundle_verify_ms"] - o["open_bundle_ms"], 1e-6) * 1e3
        verdicts.append((f"{key}: sha256 pass, GB/s / 1 GB/s", sha / TARGETS["sha"], 1.0))
    lines += ["", "| check | measured | target | result |", "|---|---|---|---|"]
    for name, value, target in verdicts:
        lines.append(
            f"| {name} | {value:.2f} | >= {target:.2f} | {'met' if value >= target else '**missed**'} |"
        )
    lines += [
        "",
        "The memory check reads model size / peak (>= 0.91 means peak <= 1.1x the model); "
        "the cost and sha256 "
        "checks are normalized so that 1.00 is the target.",
        "",
        "## Peak resident memory, 268 MB model",
        "",
        "VmHWM of a fresh `oc-run` process after one session, over its VmRSS just before "
        "(onnxruntime loaded, "
        "the bundle opened), as a multiple of the cooked model's size.",
        "",
        "| platform (onnxruntime) | file | bundle | memory (over the blob already read) | low |",
        "|---|---|---|---|---|",
    ]
    for key, rows in results["memory"].items():
        size = rows["bundle"]["size"] or 1
        lines.append(
            f"| {key.replace('@', ' (')}) | "
            + " | ".join(_x(rows[v]["peak"] / size) for v in VARIANTS)
            + " |"
        )
    lines += [
        "",
        "## The library's own cost (no onnxruntime), 268 MB model's bundle",
        "",
        "| platform (onnxruntime) | open bundle, sha256 of every blob (ms) | open bundle, no hashing (ms) | "
        "sha256 speed | open + close the 268 MB blob (ms) | share of its session-ready time |",
        "|---|---|---|---|---|---|",
    ]
    for key, o in results["own"].items():
        gb_s = o["bundle_bytes"] / max(o["open_bundle_verify_ms"] - o["open_bundle_ms"], 1e-6) / 1e6
        large = results["timings"][key].get(models.LARGE_WEIGHTS)
        share = o["open_blob_ms"] / large["ready_ms"]["bundle"] if large else float("nan")
        lines.append(
            f"| {key.replace('@', ' (')}) | {o['open_bundle_verify_ms']:.1f} | {o['open_bundle_ms']:.2f} | "
            f"{gb_s:.2f} GB/s | {o['open_blob_ms']:.2f} | {share:.2%} |"
        )
    if results.get("paths"):
        lines += [
            "",
            "## Before onnxruntime 1.32: shared initializers against onnx-mapped, 268 MB model",
            "",
            "A blob file's ONNX weights in 1.24.4 and 1.28.0 (prepacking on): the library's choice, "
            "shared initializers over its own read-only mapping with the pages prepacking reads let go, "
            "against onnxruntime mapping the blob file itself (a build with `-DOC_SHARED_FOR_FILES=0`), "
            "alternating fresh `oc-run --bundle` processes; peak as in the table above.",
            "",
            "| platform (onnxruntime) | load path | ready (ms) | peak "
            "| other load path | ready (ms) | peak |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, rows in results["paths"].items():
            cells = []
            for variant in ("chosen", "other"):
                row = rows[variant]
                cells += [
                    ", ".join(row["paths"]),
                    f"{row['ready_ms']:.1f}",
                    _x(row["peak"] / max(row["size"], 1)),
                ]
            lines.append(f"| {key.replace('@', ' (')}) | " + " | ".join(cells) + " |")
    lines += ["", "## Session-ready time per model (ms)", ""]
    for key, report in results["timings"].items():
        lines += [
            f"### {key.replace('@', ' in onnxruntime ')}",
            "",
            "| model | file | bundle | memory | low | bundle vs file | memory vs file | low vs file "
            "| load path |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in sorted(report.items()):
            t = r["ready_ms"]
            lines.append(
                f"| {name} | {t['file']:.2f} | {t['bundle']:.2f} | {t['memory']:.2f} | {t['low']:.2f} | "
                f"{_x(t['file'] / t['bundle'])} | {_x(t['file'] / t['memory'])} | "
                f"{_x(t['file'] / t['low'])} | {r['path']} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return standalone_main("native", __doc__, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
