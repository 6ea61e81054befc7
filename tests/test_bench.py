"""The benchmark (bench/, issue 5) keeps working: its quick mode runs end to end and reports everything.

Speeds are never asserted: the machine is shared and noisy, and quick mode uses tiny inputs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The runtime check's onnxruntime environments, shared with the other end-to-end tests.
RUNTIMES_CACHE = REPO / ".pytest_cache" / "runtimes"
PLATFORMS = ("android", "console", "ios", "windows-dml")
SECTIONS = (
    "## Machine",
    "## Inputs",
    "## Targets",
    "## 1. Session-ready time",
    "## 2. Decompression throughput",
    "## 3. Blob size vs source size",
    "## 4. Cold cook, sequential and parallel",
    "## 5. No-op cook as the project grows",
    "## 6. Peak resident memory",
)
# Each measurement of the summary table with its target, as issue 5 states them.
TARGETS = (
    ("session-ready time, large_graph, ORT-format blob vs source .onnx", ">= 2x faster"),
    ("share of integrity checks + decompression in that time", "< 15%"),
    ("decompression throughput, decode_blob on large_weights", ">= 1 GB/s"),
    ("blob size vs source size, per platform", "none (reported)"),
    ("`doit -n 2 cook` speedup over `doit cook`, cold", ">= 1.7x"),
    ("no-op `doit cook`, 100 models x 4 platforms", "< 1.5 s"),
    ("no-op cost growth with the number of models", "no faster than linear"),
    ("peak resident memory loading large_weights with session_from_blob", "<= 2.5x model size"),
)
MACHINE_ROWS = ("date", "cores", "CPU", "Python", "onnx", "onnxruntime", "zstandard")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("bench")
    output = tmp / "results.md"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            *("--output", str(output), "--workdir", str(tmp), "--runtimes-dir", str(RUNTIMES_CACHE)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    leftovers = [path.name for path in tmp.iterdir() if path.name.startswith("onnx-cooker-bench-")]
    assert not leftovers, f"the temporary folder was not removed: {leftovers}"
    return output.read_text(encoding="utf-8")


def _summary_rows(report: str) -> dict[str, list[str]]:
    """The Targets table: measurement -> [#, measurement, target, measured, result]."""
    table = report.split("## Targets", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in table.splitlines() if line.startswith("| ")]
    return {cells[1].strip(): [cell.strip() for cell in cells] for cells in rows[1:]}


def test_report_has_every_section(report: str) -> None:
    positions = [report.find(section) for section in SECTIONS]
    assert -1 not in positions, [s for s, p in zip(SECTIONS, positions, strict=True) if p == -1]
    assert positions == sorted(positions)


@pytest.mark.parametrize(("measurement", "target"), TARGETS)
def test_summary_lists_measurement_and_target(report: str, measurement: str, target: str) -> None:
    rows = _summary_rows(report)
    assert measurement in rows, sorted(rows)
    _, _, stated, measured, result = rows[measurement]
    assert stated == target
    assert measured  # a number was reported
    expected = "-" if target == "none (reported)" else "not judged (quick mode: tiny inputs)"
    assert result == expected


@pytest.mark.parametrize("row", MACHINE_ROWS)
def test_machine_is_described(report: str, row: str) -> None:
    machine = report.split("## Machine", 1)[1].split("\n## ", 1)[0]
    assert f"| {row} | " in machine


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_platform_is_measured(report: str, platform: str) -> None:
    load = report.split("## 1. Session-ready time", 1)[1].split("\n## ", 1)[0]
    sizes = report.split("## 3. Blob size vs source size", 1)[1].split("\n## ", 1)[0]
    size_header = next(line for line in sizes.splitlines() if line.startswith("| model |"))
    assert f"`session_from_blob`, {platform} blob in memory" in load
    assert f" {platform} (" in size_header


def test_full_sizes_meet_the_issue() -> None:
    """The full run's synthetic models are as large as issue 5 asks (checked without writing 268 MB)."""
    code = textwrap.dedent(
        """
        import json
        from bench.models import FULL, build_large_graph
        print(json.dumps({"nodes": len(build_large_graph(FULL).graph.node), "weights": FULL.weights_bytes}))
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    sizes = json.loads(completed.stdout)
    assert sizes["nodes"] >= 2000
    assert 200e6 <= sizes["weights"] < 2e9  # blobs must stay under 2 GB
