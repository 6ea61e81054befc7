"""A temporary copy of the project, and the real ``doit`` run on it in a subprocess."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "assets"
PROJECT_FILES = ("dodo.py", "onnx_cooker", "platforms")


class BenchError(Exception):
    """A benchmark step failed (a cook, a probe); the message says which and where its log is."""


# Shipped platforms the benches leave out, and why (docs/benchmarks.md).
NOT_BENCHED = {
    "linux-openvino": "its target runtime is onnxruntime-openvino, whose session creation is OpenVINO "
    "compiling the graph: a load time there measures OpenVINO, not the loader; where its nodes run is "
    "proven by the runtime check (tests/test_dodo.py, tests/test_placement.py)",
}


def copy_project(dest: Path) -> Path:
    """``dodo.py``, ``onnx_cooker/`` and ``platforms/`` (less ``NOT_BENCHED``) copied into ``dest`` (assets
    and builds go beside)."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", *(f"{name}.yaml" for name in NOT_BENCHED))
    for name in PROJECT_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    return dest


def platform_names(project: Path) -> list[str]:
    return sorted(path.stem for path in (project / "platforms").glob("*.yaml"))


@dataclass(frozen=True)
class Run:
    """One timed subprocess: its wall time, its CPU time (with every child it waited for, such as
    the ``doit -n`` workers), and the CPU time the whole machine spent meanwhile."""

    wall_s: float
    user_s: float
    sys_s: float
    machine_s: float  # every process, from /proc/stat (0 where unavailable)
    returncode: int = 0

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    @property
    def others_s(self) -> float:
        """CPU seconds other processes (and the hypervisor's steal) took from this machine meanwhile."""
        return max(self.machine_s - self.cpu_s, 0.0)


def machine_cpu_seconds() -> float:
    """CPU seconds used by everything on this machine since boot (busy + stolen), from /proc/stat."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def doit(
    project: Path,
    args: Sequence[str],
    *,
    assets: str,
    build: str,
    runtimes: Path,
    log: Path,
    check: bool = True,
    extra_env: dict[str, str] | None = None,
) -> Run:
    """Run ``python -m doit <args>`` in ``project`` on the given assets/build folders; a failure raises
    ``BenchError`` unless ``check`` is false (then see ``Run.returncode`` and the log).

    The environment is the caller's without any ``COOK_*`` variable, so that a developer's
    ``COOK_SET_COMPRESSION_LEVEL`` does not change what is measured. ``runtimes`` is the shared cache
    of the runtime check's onnxruntime environments (``COOK_RUNTIMES_DIR``): installing them is not
    part of any measurement.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("COOK_")}
    env.update(
        COOK_ASSETS_DIR=assets,
        COOK_BUILD_DIR=build,
        COOK_RUNTIMES_DIR=str(runtimes),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(extra_env or {})  # e.g. COOK_CACHE for the build-farm measurements (bench/farm.py)
    command = [sys.executable, "-m", "doit", *args]
    with log.open("wb") as output:
        before, machine_before = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu_seconds()
        start = time.perf_counter()
        completed = subprocess.run(command, cwd=project, env=env, stdout=output, stderr=subprocess.STDOUT)
        elapsed = time.perf_counter() - start
        after, machine_after = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu_seconds()
    if completed.returncode != 0 and check:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise BenchError(
            f"`{' '.join(command[1:])}` failed in {project} (assets {assets}, build {build}), exit code "
            f"{completed.returncode}; full log: {log}\n" + "\n".join(tail)
        )
    return Run(
        wall_s=elapsed,
        user_s=after.ru_utime - before.ru_utime,
        sys_s=after.ru_stime - before.ru_stime,
        machine_s=machine_after - machine_before,
        returncode=completed.returncode,
    )


def warm_up(project: Path, runtimes: Path, logs: Path) -> None:
    """Cook one example model once, untimed: fills the runtime check's cache and the OS's file cache."""
    replicate_examples(project / "assets-warm-up", 1)
    doit(
        project,
        ["cook"],
        assets="assets-warm-up",
        build="build-warm-up",
        runtimes=runtimes,
        log=logs / "warm-up.log",
    )
    shutil.rmtree(project / "build-warm-up")
    shutil.rmtree(project / "assets-warm-up")


def replicate_examples(dest: Path, count: int) -> list[str]:
    """``count`` models copied from the examples into ``dest/setNN/`` folders, each with its sidecars.

    Every copy keeps its external data, sample inputs and settings file beside it, under a new name
    (``set03/mnist``), so each is a distinct model to doit. Returns the model names.
    """
    from onnx_cooker.settings.assets import discover  # standard library only

    examples = discover(EXAMPLES)
    names = []
    for i in range(count):
        asset = examples[i % len(examples)]
        folder = dest / f"set{i // len(examples):02d}"
        files = [*asset.source_files, *([asset.settings_path] if asset.settings_path else [])]
        for file in files:
            target = folder / file.relative_to(EXAMPLES)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target)
        names.append(f"{folder.name}/{asset.name}")
    return names


def standalone_main(
    name: str,
    doc: str,
    measure: Callable[[bool, Path, Path], Any],
    render: Callable[[Any], str],
    argv: Sequence[str] | None = None,
) -> int:
    """The command line of a benchmark that writes its own report (``python -m bench.<name>``):
    ``--quick``, ``--output`` (default bench/results-<name>.md), ``--runtimes-dir``, ``--workdir``;
    measures in a temporary folder, removed afterwards."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny inputs, few rounds: a smoke test")
    parser.add_argument(
        "--output",
        type=Path,
        default=REPO / "bench" / f"results-{name}.md",
        help="the report (the default one is also copied into bench/results.md)",
    )
    parser.add_argument("--runtimes-dir", type=Path, default=REPO / "build" / ".runtimes")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix=f"onnx-cooker-{name}-", dir=args.workdir))
    default = REPO / "bench" / f"results-{name}.md"
    try:
        report = render(measure(args.quick, root, args.runtimes_dir.resolve()))
        args.output.write_text(report, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
        if args.output.resolve() == default.resolve():  # the repo's report: its copy in results.md too
            from .sections import embed

            embed(REPO / "bench" / "results.md", name, report, default.name)
            print(f"updated its section of {REPO / 'bench' / 'results.md'}", file=sys.stderr)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0
