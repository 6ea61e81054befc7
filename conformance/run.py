"""Run every ONNX backend test case through the cooker for every platform, in parallel, and judge it.

Two phases: baselines and cooks (worker processes, one per core), then each platform's runtime check
of the blobs that passed. ``python -m conformance`` (see ``--help``) runs the whole suite and
regenerates ``docs/conformance.md``; ``tests/test_conformance.py`` runs the same as the gate.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import multiprocessing
import os
import platform as host
import sys
import tempfile
import time
import warnings
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import onnx
import onnxruntime

from onnx_cooker.build.config import folders
from onnx_cooker.settings.resolve import Platform, load_platforms

from . import outcome
from .cases import KINDS, load_cases, materialize
from .exclusions import EXCLUSIONS_PATH, Exclusion, load_exclusions
from .report import render
from .runtime_check import check_platforms
from .summary import Summary
from .worker import CaseResult, PlatformResult, clean, run_case

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "docs" / "conformance.md"
EXCLUDED = "excluded"

# Set in the parent before the workers fork, so that no case is pickled on the way in.
_STATE: dict[str, Any] = {}


# --- running ---------------------------------------------------------------------------------------


def _init_worker(root: str, cores: Any) -> None:
    core = cores.get()
    if core is not None:
        # One core per worker: onnxruntime sizes each session's thread pool to the cores it may use,
        # so workers stop creating and spinning threads on each other's core (a third faster).
        os.sched_setaffinity(0, {core})
    onnxruntime.set_default_logger_severity(4)  # expected errors of baseline failures, old-opset warnings
    warnings.filterwarnings("ignore")
    _STATE["work"] = Path(tempfile.mkdtemp(prefix="worker-", dir=root))


def _run_one(index: int) -> dict[str, Any]:
    case = materialize(_STATE["cases"][index])
    return run_case(case, _STATE["platforms"], _STATE["work"], _STATE["build"]).to_dict()


def run_cases(
    test_cases: Sequence[Any], platforms: Sequence[Platform], jobs: int, root: Path
) -> list[dict[str, Any]]:
    """Every case's result, in the order given; blobs go to ``root/build/<platform>``.

    A case that kills its worker process is a crash on its own.
    """
    _STATE.update(cases=list(test_cases), platforms=list(platforms), build=root / "build")
    pending = deque(range(len(test_cases)))
    results: dict[int, dict[str, Any]] = {}
    while pending:
        suspects = _run_pool(pending, results, jobs, str(root))
        for index in suspects:  # one at a time, to tell which one took the pool down
            _run_pool(deque([index]), results, 1, str(root), dead=_crashed(index, platforms))
    return [results[index] for index in range(len(test_cases))]


def scratch_dir() -> str | None:
    """A tmpfs when there is one: the cooker fsyncs every blob and entry it writes."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _run_pool(
    pending: deque[int],
    results: dict[int, dict[str, Any]],
    jobs: int,
    root: str,
    dead: dict[str, Any] | None = None,
) -> list[int]:
    """Run pending cases until done or a worker dies; returns the cases in flight when it died."""
    context = multiprocessing.get_context("fork")
    cores = context.SimpleQueue()
    available = sorted(os.sched_getaffinity(0))
    for index in range(jobs):
        cores.put(available[index] if jobs <= len(available) else None)
    running: dict[Future[dict[str, Any]], int] = {}
    done_count = len(results)
    initargs = (root, cores)
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker, initargs=initargs) as pool:
        while pending or running:
            while pending and len(running) < 2 * jobs:
                index = pending.popleft()
                running[pool.submit(_run_one, index)] = index
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                index = running.pop(future)
                try:
                    results[index] = future.result()
                except BrokenProcessPool:
                    if dead is not None:
                        results[index] = dead
                        continue
                    suspects = [index, *running.values()]
                    running.clear()
                    return suspects
                done_count += 1
                if done_count % 200 == 0:
                    print(f"  {done_count} cases done", file=sys.stderr, flush=True)
    return []


def _crashed(index: int, platforms: Sequence[Platform]) -> dict[str, Any]:
    test_case = _STATE["cases"][index]
    result = CaseResult(kind=test_case.kind, name=test_case.name, baseline="pass")
    for platform in platforms:
        result.platforms[platform.name] = PlatformResult(
            category=outcome.CRASH, detail="the worker process died (segfault or abort) on this case"
        )
    return result.to_dict()


# --- judging ---------------------------------------------------------------------------------------


def summarize(
    results: list[dict[str, Any]], platform_names: Sequence[str], exclusions: Mapping[str, Exclusion]
) -> Summary:
    summary = Summary(results=results, platforms=list(platform_names), exclusions=dict(exclusions))
    seen: set[str] = set()
    for result in results:
        kind, name = result["kind"], result["name"]
        seen.add(name)
        counts = summary.counts.setdefault(kind, {})
        _bump(counts, "cases")
        if result["baseline"] != "pass":
            _bump(counts, "baseline fail")
            if name in exclusions:
                summary.stale.append({"case": name, "why": "its baseline fails, so it does not count anyway"})
            continue
        _bump(counts, "baseline pass")
        exclusion = exclusions.get(name)
        needed = False
        for platform_name, found in result["platforms"].items():
            category = found["category"]
            row = {"kind": kind, "case": name, "platform": platform_name, "category": category}
            row["detail"] = found["detail"]
            if category in outcome.CORRECT:
                _bump(counts, f"{platform_name}:{category}")
            elif exclusion is not None and exclusion.covers(platform_name):
                needed = True
                _bump(counts, f"{platform_name}:{EXCLUDED}")
                summary.excluded.append({**row, "reason": exclusion.reason})
            else:
                _bump(counts, f"{platform_name}:fail")
                summary.unexplained.append(row)
        if exclusion is not None and not needed:
            why = "passes (or is correctly refused) where it is excluded"
            summary.stale.append({"case": name, "why": why})
    summary.stale += [
        {"case": name, "why": "no such case in the suite"} for name in sorted(set(exclusions) - seen)
    ]
    return summary


def _bump(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


# --- command line -----------------------------------------------------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), help="worker processes")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated loader kinds")
    parser.add_argument("--match", help="run only cases whose name matches this glob (no doc written)")
    parser.add_argument("--platforms-dir", type=Path, default=REPO / "platforms")
    parser.add_argument("--exclusions", type=Path, default=EXCLUSIONS_PATH)
    parser.add_argument(
        "--output", type=Path, help=f"the report (default {DEFAULT_OUTPUT.relative_to(REPO)} on full runs)"
    )
    parser.add_argument("--json", type=Path, help="also write every result and the verdict as JSON")
    parser.add_argument(
        "--no-runtime-check",
        dest="runtime_check",
        action="store_false",
        help="skip running the blobs in each platform's exact onnxruntime (quick local iterations)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    warnings.filterwarnings("ignore")  # onnx's case generators overflow on purpose (casts)
    start = time.perf_counter()
    platforms = load_platforms(args.platforms_dir, {})
    names = [p.name for p in platforms]
    exclusions = load_exclusions(args.exclusions, names)
    test_cases = load_cases(args.kinds.split(","))
    if args.match:
        test_cases = [c for c in test_cases if fnmatch.fnmatchcase(c.name, args.match)]
    print(f"{len(test_cases)} cases x {len(names)} platforms, {args.jobs} jobs", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="onnx-conformance-", dir=scratch_dir()) as scratch:
        root = Path(scratch)
        results = run_cases(test_cases, platforms, args.jobs, root)
        cooked_seconds = time.perf_counter() - start
        checks: dict[str, dict[str, Any]] = {}
        if args.runtime_check:
            print("runtime check: each platform's blobs in the onnxruntime it ships", file=sys.stderr)
            runtimes = folders(dict(os.environ), REPO).runtimes
            by_name = {case.name: case for case in test_cases}
            checks = check_platforms(
                results,
                platforms,
                root / "build",
                runtimes,
                args.jobs,
                lambda name: materialize(by_name[name]),
                lambda text: clean(text, root, root),
            )
    if args.match:
        exclusions = {name: e for name, e in exclusions.items() if fnmatch.fnmatchcase(name, args.match)}
    summary = summarize(results, names, exclusions)
    summary.runtime_checks = checks
    summary.unexplained += [  # the platform's runtime could not be set up: nothing of it is checked
        {
            "case": "(runtime check)",
            "platform": name,
            "category": outcome.RUNTIME_FAIL,
            "detail": check["error"],
        }
        for name, check in checks.items()
        if "error" in check
    ]
    summary.seconds = round(time.perf_counter() - start, 1)
    summary.cook_seconds = round(cooked_seconds, 1)
    summary.jobs = args.jobs
    summary.versions = {
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "python": host.python_version(),
    }
    summary.date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    output = args.output or (None if args.match else DEFAULT_OUTPUT)
    if output is not None:
        output.write_text(render(summary, exclusions_path=_relative(args.exclusions)), encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(summary.to_dict(), indent=1, default=str), encoding="utf-8")
    _print_verdict(summary, output)
    return 1 if summary.unexplained or summary.stale else 0


def _relative(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def _print_verdict(summary: Summary, output: Path | None) -> None:
    total: Counter[str] = Counter()
    for counts in summary.counts.values():
        total.update(counts)
    print(_line(total, summary.platforms), file=sys.stderr)
    for row in summary.unexplained:
        print(f"FAIL {row['case']} [{row['platform']}] {row['category']}: {row['detail']}", file=sys.stderr)
    for row in summary.stale:
        print(f"STALE exclusion {row['case']}: {row['why']}", file=sys.stderr)
    where = f"; report: {output}" if output else ""
    print(f"{summary.seconds:.0f} s with {summary.jobs} jobs{where}", file=sys.stderr)


def _line(total: Mapping[str, int], platforms: Iterable[str]) -> str:
    parts = [f"{total['cases']} cases, {total['baseline pass']} pass their baseline"]
    for name in platforms:
        parts.append(
            f"{name}: {total[f'{name}:pass']} pass, {total[f'{name}:refused']} refused, "
            f"{total[f'{name}:{EXCLUDED}']} excluded, {total[f'{name}:fail']} fail"
        )
    return "; ".join(parts)
