"""``python -m bench.gpu``: the seed's scenario on a GPU, through a GPU plugin execution provider.

The seed's studio saw an ORT file "clearly running on CPU" when a GPU EP was asked for. This cooks
the example assets and the bench models (bench/models.py) for ``windows-dml`` (ONNX) and ``android``
(ORT format) with the real ``doit``, then loads each blob through ``onnx_cooker.runtime`` with the
GPU device that onnxruntime's plugin-EP API offers (``ep_libraries`` + ``devices``, the loader's
Windows ML path; by default onnxruntime's WebGPU plugin EP, ``onnxruntime-ep-webgpu``, which needs
onnxruntime >= 1.31), and records per blob:

- where the nodes run (``onnx_cooker.build.placement``: the assignment record for ONNX, the profiler for
  ORT format, as the runtime check measures it), so an ORT-format blob whose nodes stay on the CPU
  shows as such;
- its outputs against the CPU EP's (max abs and max relative error);
- session-ready time and steady-state inference time on the GPU against the CPU (medians).

On a machine without a GPU device it says so and measures the CPU side only. Writes the table to
``bench/results-gpu.md`` (``--out``) with the device, driver, onnxruntime and plugin versions read
where it ran.

    python -m bench.gpu [--quick] [--workdir DIR] [--out FILE] [--no-runtime-check]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from onnx_cooker.build.placement import measure
from onnx_cooker.runtime import session_from_blob
from onnx_cooker.runtime.loadpaths import LoadPath

from . import models
from .machine import describe
from .measure import Build, feeds
from .project import EXAMPLES, REPO, copy_project, doit

PLATFORMS = ("windows-dml", "android")  # the first platform of each format
CPU = ["CPUExecutionProvider"]
# Plugin EP packages tried, in order: (Python module, its library-path function, EP name).
PLUGINS = (("onnxruntime_ep_webgpu", "get_library_path", "WebGpuExecutionProvider"),)
OUT = REPO / "bench" / "results-gpu.md"


def _step(message: str, started: float) -> None:
    print(f"[bench.gpu {time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


def find_plugin() -> tuple[dict[str, str], str, str] | None:
    """(``ep_libraries`` for the loader, EP name, plugin version) of the first plugin EP installed."""
    for module_name, function, ep in PLUGINS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        path = getattr(module, function, None) or getattr(module, "library_path", None)
        if path is None:
            continue
        try:
            version = importlib.metadata.version(module_name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            version = getattr(module, "__version__", "?")
        return {ep: str(path() if callable(path) else path)}, ep, str(version)
    return None


def gpu_devices(ep: str, device_type: str | None = "gpu") -> list[Any]:
    """The devices of ``device_type`` (None: any) onnxruntime offers for ``ep`` (library registered)."""
    wanted = None if device_type is None else getattr(onnxruntime.OrtHardwareDeviceType, device_type.upper())
    return [d for d in onnxruntime.get_ep_devices() if d.ep_name == ep and wanted in (None, d.device.type)]


def nvidia() -> dict[str, str]:
    """The GPU and driver nvidia-smi reports, where there is one."""
    if shutil.which("nvidia-smi") is None:
        return {}
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    line = (done.stdout.strip().splitlines() or [""])[0]
    parts = [p.strip() for p in line.split(",")]
    return dict(zip(("gpu", "driver", "memory"), parts, strict=False)) if len(parts) == 3 else {}


def _median_ms(action: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def errors(expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """Largest absolute difference over all outputs, and the largest relative to each output's range."""
    worst_abs = worst_rel = 0.0
    for name, want in expected.items():
        want, got = np.asarray(want, dtype=np.float64), np.asarray(actual[name], dtype=np.float64)
        diff = float(np.max(np.abs(want - got))) if want.size else 0.0
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / scale if scale else diff)
    return worst_abs, worst_rel


def measure_blob(
    blob: bytes,
    model_format: str,
    feed: dict[str, np.ndarray],
    gpu: tuple[dict[str, str], str, str] | None,
    repeats: int,
    device_type: str | None = "gpu",
) -> dict[str, Any]:
    """One blob on the CPU EP and, with ``gpu`` (libraries, EP, version), on the GPU device."""
    row: dict[str, Any] = {"format": model_format}

    def make_cpu(options: onnxruntime.SessionOptions | None = None) -> onnxruntime.InferenceSession:
        return session_from_blob(blob, providers=CPU, session_options=options)

    cpu = make_cpu()
    names = [o.name for o in cpu.get_outputs()]
    expected = dict(zip(names, cpu.run(names, feed), strict=True))
    row["ready_cpu_ms"] = _median_ms(make_cpu, repeats)
    row["run_cpu_ms"] = _median_ms(lambda: cpu.run(names, feed), repeats * 3)
    if gpu is None:
        return row
    libraries, ep, version = gpu

    def make_gpu(options: onnxruntime.SessionOptions | None = None) -> onnxruntime.InferenceSession:
        return session_from_blob(
            blob, session_options=options, ep_libraries=libraries, devices=[(ep, device_type)]
        )

    try:
        session = make_gpu()
        row["ready_gpu_ms"] = _median_ms(make_gpu, repeats)
        actual = dict(zip(names, session.run(names, feed), strict=True))
        row["max_abs"], row["max_rel"] = errors(expected, actual)
        session.run(names, feed)  # warm: shaders compiled, buffers uploaded
        row["run_gpu_ms"] = _median_ms(lambda: session.run(names, feed), repeats * 3)
        row["placement"] = measure(
            make_gpu,
            make_cpu,
            feed,
            model_format,
            ep,
            f"onnxruntime {onnxruntime.__version__}, {ep} {version}",
        )
    except Exception as exc:  # noqa: BLE001  recorded in the table: the run goes on
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        row["load_paths"] = _other_load_paths(blob, names, feed, libraries, ep, device_type)
    return row


def _other_load_paths(
    blob: bytes,
    names: list[str],
    feed: dict[str, np.ndarray],
    libraries: dict[str, str],
    ep: str,
    device_type: str | None,
) -> dict[str, str]:
    """Whether the blob runs on the GPU along each load path the loader knows (which one fails)."""
    found = {}
    for path in LoadPath:
        try:
            session = session_from_blob(
                blob, ep_libraries=libraries, devices=[(ep, device_type)], load_path=path.value
            )
            session.run(names, feed)
            found[path.value] = "runs"
        except Exception as exc:  # noqa: BLE001
            found[path.value] = str(exc).splitlines()[0][:160]
    return found


def run(
    quick: bool,
    workdir: Path,
    runtimes: Path,
    runtime_check: bool,
    device_type: str | None = "gpu",
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    started = time.perf_counter()
    project = copy_project(workdir / "project")
    for profile in (project / "platforms").glob("*.yaml"):
        if profile.stem not in PLATFORMS:
            profile.unlink()
    assets = project / "assets"
    sizes = models.QUICK if quick else models.FULL
    _step(f"writing inputs into {assets}", started)
    models.write_assets(EXAMPLES, assets, sizes)
    env = {} if runtime_check else {
        "COOK_SET_RUNTIME_CHECK": "false",
        "COOK_SET_RUNTIME_CHECK_OFF_REASON": "bench.gpu --no-runtime-check (no package registry here)",
    }  # fmt: skip
    _step("cooking windows-dml and android with doit", started)
    doit(project, ["cook"], assets="assets", build="build", runtimes=runtimes, log=workdir / "cook.log",
         extra_env=env)  # fmt: skip
    build = Build.read(project / "build", list(PLATFORMS))
    gpu = find_plugin()
    note = None
    if gpu is None:
        note = "no GPU plugin EP package installed (onnxruntime-ep-webgpu): CPU side only"
    else:
        libraries, ep, _ = gpu
        session_from_blob(
            build.blob(PLATFORMS[0], next(iter(build.manifests[PLATFORMS[0]]))).read_bytes(),
            providers=CPU,
            ep_libraries=libraries,
        )  # fmt: skip  registers the library
        if not gpu_devices(ep, device_type):
            note = f"{ep} offers no {device_type or 'device'} on this machine: CPU side only"
            gpu = None
    if note:
        _step(note, started)
    rows: dict[str, dict[str, Any]] = {}
    repeats = 2 if quick else 3
    for platform in PLATFORMS:
        for model, entry in sorted(build.manifests[platform].items()):
            if model == models.LARGE_WEIGHTS and quick:
                continue
            _step(f"{platform}:{model}", started)
            blob = build.blob(platform, model).read_bytes()
            feed = feeds(build, model)
            rows[f"{platform}:{model}"] = measure_blob(blob, entry["format"], feed, gpu, repeats, device_type)
            if progress is not None:  # the table so far: a run cut off at its time limit keeps it
                progress(_result(quick, gpu, device_type, note, rows, started))
    return _result(quick, gpu, device_type, note, rows, started)


def _result(
    quick: bool,
    gpu: tuple[dict[str, str], str, str] | None,
    device_type: str | None,
    note: str | None,
    rows: dict[str, dict[str, Any]],
    started: float,
) -> dict[str, Any]:
    devices = [
        {"ep": d.ep_name, "vendor": d.ep_vendor, "vendor_id": d.device.vendor_id, **dict(d.device.metadata)}
        for d in (gpu_devices(gpu[1], device_type) if gpu else [])
    ]
    return {
        "quick": quick,
        "machine": describe(),
        "nvidia": nvidia(),
        "onnxruntime": onnxruntime.__version__,
        "plugin": None if gpu is None else {"ep": gpu[1], "version": gpu[2]},
        "devices": devices,
        "note": note,
        "device_type": device_type,
        "rows": dict(rows),
        "duration_s": time.perf_counter() - started,
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _gpu_cells(row: dict[str, Any]) -> list[str]:
    """Nodes on the GPU EP, coverage, CPU ops, max abs and rel error (or why not)."""
    if "error" in row:
        runs = [path for path, how in row.get("load_paths", {}).items() if how == "runs"]
        also = f" (runs along: {', '.join(runs) or 'no load path'})" if "load_paths" in row else ""
        return [f"failed: {row['error'][:200]}{also}", "-", "-", "-", "-"]
    placement = row.get("placement")
    if not placement:
        return ["-"] * 5
    nodes = placement.get("nodes", {})
    on_gpu = nodes.get(placement.get("preferred", ""), 0)
    return [
        f"{on_gpu}/{sum(nodes.values())}",
        f"{placement['coverage']:.0%}",
        ", ".join(placement.get("cpu_ops", [])) or "-",
        f"{row['max_abs']:.3g}",
        f"{row['max_rel']:.3g}",
    ]


def _time_cells(row: dict[str, Any]) -> list[str]:
    gpu = row.get("run_gpu_ms")
    speed = f"{row['run_cpu_ms'] / gpu:.2f}x" if gpu else "-"
    return [_ms(row["ready_cpu_ms"]), _ms(row.get("ready_gpu_ms")), _ms(row["run_cpu_ms"]), _ms(gpu), speed]


def render(result: dict[str, Any]) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    gpu = result["nvidia"]
    plugin = result["plugin"]
    lines = [
        "# onnx-cooker benchmarks: cooked blobs on a GPU, through a plugin EP",
        "",
        f"Written by `python -m bench.gpu{' --quick' if result['quick'] else ''}` on {when} in "
        f"{result['duration_s'] / 60:.1f} min.",
        "",
        "| what | read where it ran |",
        "|---|---|",
        f"| GPU | {gpu.get('gpu', 'none found')} ({gpu.get('memory', '-')}) |",
        f"| driver | {gpu.get('driver', '-')} |",
        f"| onnxruntime | {result['onnxruntime']} |",
        f"| plugin EP | {plugin['ep'] + ' ' + plugin['version'] if plugin else '-'} |",
        f"| device(s) offered | {json.dumps(result['devices']) if result['devices'] else '-'} |",
        *(f"| {key} | {value} |" for key, value in result["machine"].items()),
        "",
    ]
    if result["note"]:
        lines += [f"**{result['note']}.**", ""]
    lines += [
        f"Each blob loaded with `session_from_blob(blob, ep_libraries=..., devices=[(EP, "
        f"{result.get('device_type')!r})])`; "
        "placement by the runtime check's methods (assignment record for ONNX, profiler for ORT format); "
        "errors against the CPU EP on the cook's verification inputs; times are medians (ready: fresh "
        "sessions; run: steady state after a warm-up run).",
        "",
        "| blob | format | nodes on GPU EP | coverage | left to the CPU | max abs err | max rel err "
        "| ready CPU ms | ready GPU ms | run CPU ms | run GPU ms | run speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        lines.append("| " + " | ".join([name, row["format"], *_gpu_cells(row), *_time_cells(row)]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models (the CPU dry run of CI)")
    parser.add_argument("--workdir", type=Path, help="keep the project and build here (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the table (default {OUT.relative_to(REPO)})")
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    parser.add_argument("--runtimes-dir", dest="runtimes", type=Path, default=REPO / "build" / ".runtimes",
                        help="the runtime check's onnxruntime environments")  # fmt: skip
    parser.add_argument("--no-runtime-check", action="store_true",
                        help="cook with the runtime check off (no package registry)")  # fmt: skip
    parser.add_argument("--device-type", default="gpu", choices=("gpu", "npu", "cpu", "any"),
                        help="the plugin EP's device to use (any: whatever it offers)")  # fmt: skip
    args = parser.parse_args(argv)
    device_type = None if args.device_type == "any" else args.device_type
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)

        def write(partial: dict[str, Any]) -> None:
            args.out.write_text(render(partial), encoding="utf-8")

        result = run(args.quick, workdir, args.runtimes, not args.no_runtime_check, device_type, write)
    args.out.write_text(render(result), encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
