"""``python -m bench.precision [--quick]``: each precision's blob size, session-ready time and accuracy.

The bench models (``bench/models.py``) and the example assets cooked for one platform at every
``precision`` (``COOK_SET_PRECISION``), with the real ``doit``; a model whose variant fails the
accuracy gate is reported with the gate's message. Session-ready time is ``session_from_blob`` on
the blob in memory, CPU EP, median of rounds in rotating order. Writes bench/results-precision.md.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from . import models
from .machine import describe
from .project import EXAMPLES, copy_project, doit, standalone_main, warm_up

PRECISIONS = ("fp32", "fp16", "int8-dynamic", "int8-static")
PLATFORM = "windows-dml"  # ONNX blobs: every precision loads on the CPU EP here


def _cook(project: Path, precision: str, runtimes: Path, logs: Path) -> dict:
    build = f"build-{precision}"
    doit(
        project,
        ["--continue", f"cook:{PLATFORM}"],
        assets="assets",
        build=build,
        runtimes=runtimes,
        log=logs / f"{build}.log",
        check=False,
        extra_env={"COOK_SET_PRECISION": precision},
    )
    entries = {}
    for path in sorted((project / build / PLATFORM / ".entries").rglob("*.json")):
        entry = json.loads(path.read_text())
        entries[entry["name"]] = entry
    log = (logs / f"{build}.log").read_text(errors="replace")
    return {"entries": entries, "log": log}


def _failure(log: str, name: str) -> str:
    """The cook's own one-paragraph message for ``name``, shortened for a table cell."""
    for line in log.splitlines():
        if f"(model '{name}', platform '{PLATFORM}')" in line:
            return line.split("): ", 1)[-1].replace("|", "/")[:240]
    return "did not cook (no message in the log)"


def _load_ms(project: Path, precision: str, entries: dict, rounds: int) -> dict[str, float]:
    import onnxruntime

    from onnx_cooker.runtime import session_from_blob

    onnxruntime.set_default_logger_severity(3)
    blobs = {
        name: (project / f"build-{precision}" / PLATFORM / entry["file"]).read_bytes()
        for name, entry in entries.items()
    }
    times: dict[str, list[float]] = {name: [] for name in blobs}
    names = sorted(blobs)
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            session = session_from_blob(blobs[name], providers=["CPUExecutionProvider"])
            times[name].append(time.perf_counter() - start)
            del session
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


def measure(quick: bool, workdir: Path, runtimes: Path) -> dict:
    logs = workdir / "logs"
    logs.mkdir(parents=True)
    project = copy_project(workdir / "project")
    models.write_assets(EXAMPLES, project / "assets", models.QUICK if quick else models.FULL)
    warm_up(project, runtimes, logs)
    results = {}
    for precision in PRECISIONS:
        print(f"precision: cooking at {precision}", file=sys.stderr)
        cooked = _cook(project, precision, runtimes, logs)
        cooked["load_ms"] = _load_ms(project, precision, cooked["entries"], 3 if quick else 7)
        results[precision] = cooked
    names = sorted(results["fp32"]["entries"])
    return {"results": results, "names": names, "quick": quick, "machine": describe()}


def render(data: dict) -> str:
    results, names = data["results"], data["names"]
    lines = [
        "# onnx-cooker benchmarks: precision variants",
        "",
        f"Written by `python -m bench.precision{' --quick' if data['quick'] else ''}` on "
        f"{data['machine']['date']}; {data['machine']['cores']}. Every model of the bench set cooked for "
        f"{PLATFORM} (ONNX) at each precision (`COOK_SET_PRECISION`), default gate limits. Per model: the "
        "blob size (and its ratio to fp32), session-ready time from the blob in memory (CPU EP, median), "
        "and the worst output's cosine similarity and max abs error against the fp32 source on the "
        "verification inputs; `refused` marks a variant that did not cook, with the cook's message "
        "(not shipped).",
        "",
        "| model | " + " | ".join(PRECISIONS) + " |",
        "|---|" + "---|" * len(PRECISIONS),
    ]
    for name in names:
        fp32 = results["fp32"]["entries"][name]["blob_size"]
        cells = []
        for precision in PRECISIONS:
            entry = results[precision]["entries"].get(name)
            if entry is None:
                cells.append(f"refused: {_failure(results[precision]['log'], name)}")
                continue
            size = entry["blob_size"]
            load = results[precision]["load_ms"][name]
            text = f"{size / 1e6:,.2f} MB ({size / fp32:.2f}x), {load:,.1f} ms"
            rows = (entry.get("precision") or {}).get("accuracy", {}).get("outputs", [])
            if rows:
                cosine = min(r["cosine"] for r in rows if r.get("cosine") is not None)
                worst = max(r["max_abs"] for r in rows)
                text += f", cos {cosine:.5f}, max abs {worst:.2g}"
            cells.append(text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return standalone_main("precision", __doc__, measure, render, argv)


if __name__ == "__main__":
    sys.exit(main())
