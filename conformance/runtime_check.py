"""After the cooks: every platform's passing blobs run in the exact onnxruntime the platform ships.

This is the runtime check ``doit cook`` runs after a platform's cooks
(``onnx_cooker.build.target_check.run_check``,
an isolated environment per onnxruntime version, cached like doit's, in the user's cache folder). It
fails a whole platform at once, so the models that fail are found by bisection: a few more checks
when something fails, none when nothing does.

A blob that fails there is a correct refusal when the platform's onnxruntime cannot run the case's
source model either (an operator or type it lacks, a kernel that computes otherwise than onnx's
reference): ``source_in_runtime.py`` runs the sources in the same environment to tell.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import queue
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnx_cooker.build.target_check import ensure_runtime, run_check
from onnx_cooker.cook.downgrade import downgrade, limits_of
from onnx_cooker.cook.job import RuntimeCheck
from onnx_cooker.errors import CookError
from onnx_cooker.layout import runtime_check_path
from onnx_cooker.runtime.compat import parse_version
from onnx_cooker.settings.resolve import Platform, resolve

from . import outcome
from .cases import Case

ORACLE = Path(__file__).with_name("source_in_runtime.py")
ORACLE_TIMEOUT = 600
SHARD = 400


def check_platforms(
    results: list[dict[str, Any]],
    platforms: Sequence[Platform],
    build: Path,
    runtimes_dir: Path,
    jobs: int,
    case_named: Callable[[str], Case],
    clean: Callable[[str], str],
) -> dict[str, dict[str, Any]]:
    """Re-judge every passing (case, platform) by its platform's runtime check, in ``results``:
    REFUSED when the platform's onnxruntime cannot run the source either, else RUNTIME_FAIL.
    Returns per platform what was checked (or why not)."""
    reports: dict[str, dict[str, Any]] = {}
    checks: dict[str, tuple[RuntimeCheck, Path]] = {}
    for platform in platforms:
        version = resolve(platform, {}, {}).runtime_version
        reports[platform.name] = {"onnxruntime": version}
        if not platform.runtime_check:
            reports[platform.name]["off"] = platform.runtime_check_off_reason
            continue
        try:
            python = ensure_runtime(version, runtimes_dir, platform.path)
        except CookError as exc:
            reports[platform.name]["error"] = clean(str(exc))
            continue
        names = tuple(r["name"] for r in results if _category(r, platform.name) == outcome.PASS)
        check = RuntimeCheck(
            platform=platform.name,
            runtime_version=version,
            platform_dir=build / platform.name,
            names=names,
            runtimes_dir=runtimes_dir,
            result_path=runtime_check_path(build / platform.name, version),
            profile=platform.path,
        )
        checks[platform.name] = check, python
    # Slowest first (older runtimes load ONNX-format blobs several times slower), to end together.
    shards = [shard for check, _ in checks.values() for shard in _shards(check)]
    shards.sort(key=lambda shard: parse_version(shard.runtime_version))
    failed: dict[str, dict[str, str]] = {name: {} for name in checks}
    for shard, found in zip(shards, _in_parallel(_failing, shards, jobs), strict=True):
        failed[shard.platform].update(found)
    for name, (check, python) in checks.items():
        _judge(results, check, python, failed[name], case_named, clean)
        reports[name] |= {"checked": len(check.names), "failed": len(failed[name])}
    return reports


def _category(result: Mapping[str, Any], platform: str) -> str | None:
    return result["platforms"].get(platform, {}).get("category")


def _shards(check: RuntimeCheck) -> list[RuntimeCheck]:
    """Checks of at most SHARD models, so that both cores stay busy to the end."""
    count = max(1, math.ceil(len(check.names) / SHARD))
    size = math.ceil(len(check.names) / count) if check.names else 0
    return [
        dataclasses.replace(check, names=check.names[i : i + size])
        for i in range(0, len(check.names), size or 1)
    ]


def _in_parallel(work: Callable[[Any], Any], items: Sequence[Any], jobs: int) -> list[Any]:
    cores: queue.SimpleQueue[int] = queue.SimpleQueue()
    for core in sorted(os.sched_getaffinity(0))[: max(jobs, 1)]:
        cores.put(core)

    def pin() -> None:
        # A check's subprocess inherits this thread's core: onnxruntime then runs one thread per
        # check instead of every check spinning threads on every core (several times faster).
        os.sched_setaffinity(0, {cores.get()})

    with ThreadPoolExecutor(max(jobs, 1), initializer=pin) as pool:
        return list(pool.map(work, items))


def _judge(
    results: list[dict[str, Any]],
    check: RuntimeCheck,
    python: Path,
    failed: Mapping[str, str],
    case_named: Callable[[str], Case],
    clean: Callable[[str], str],
) -> None:
    sources = _sources_in_runtime(python, [case_named(name) for name in failed], check.runtime_version)
    for result in results:
        if result["name"] not in failed or _category(result, check.platform) != outcome.PASS:
            continue
        found = result["platforms"][check.platform]
        source = sources.get(result["name"], "not run: inputs or outputs that are not tensors")
        if source.startswith(("load:", "run:", "compare:")):
            found["category"] = outcome.REFUSED
            found["detail"] = f"onnxruntime {check.runtime_version} fails the source model too ({source})"
        else:
            found["category"] = outcome.RUNTIME_FAIL
            found["detail"] = f"{clean(_own_error(check, result['name']))}; the source model there: {source}"


def _failing(check: RuntimeCheck) -> Mapping[str, str]:
    """Model name -> the runtime check's error, for the models of ``check`` that fail it.

    The check's message counts and names the failing models: when every one counted is found, that
    is the answer (one check). Otherwise (a crash, a message it cannot read) check the rest again, or
    bisect.
    """
    try:
        run_check(check)
    except CookError as exc:
        message = str(exc)
        named = [name for name in check.names if re.search(rf"(?:: |; ){re.escape(name)}: ", message)]
        counted = re.search(r"(\d+) model\(s\) fail", message)
        if named and counted and int(counted.group(1)) == len(named):
            return dict.fromkeys(named, message)
        rest = tuple(name for name in check.names if name not in named)
        if named and rest:
            return {**dict.fromkeys(named, message), **_failing(dataclasses.replace(check, names=rest))}
        if named or len(check.names) == 1:
            return dict.fromkeys(check.names, message)
        half = len(check.names) // 2
        first, second = check.names[:half], check.names[half:]
        return {
            **_failing(dataclasses.replace(check, names=first)),
            **_failing(dataclasses.replace(check, names=second)),
        }
    return {}


def _own_error(check: RuntimeCheck, name: str) -> str:
    """The runtime check's message for one model alone."""
    try:
        run_check(dataclasses.replace(check, names=(name,)))
    except CookError as exc:
        return str(exc)
    return "passes when checked alone"


def _as_the_target_takes_it(model: bytes, runtime_version: str) -> bytes:
    """The source lowered as the cook lowers it for that runtime (docs/design.md, "Newer models, older
    runtimes"): a lowered blob is judged against the lowered source, not against a source the
    runtime refuses for its opset or IR alone."""
    proto = onnx.load_model_from_string(model)
    try:
        lowered, records = downgrade(proto, limits_of(runtime_version), mode="auto", where="")
    except CookError:
        return model
    return lowered.SerializeToString() if records else model


def _sources_in_runtime(python: Path, cases: Sequence[Case], runtime_version: str) -> dict[str, str]:
    """Case name -> how the source model (lowered for ``runtime_version`` as the cook lowers it)
    fares in that interpreter's onnxruntime (tensor cases only)."""
    runnable = [case for case in cases if _tensors(case) is not None]
    if not runnable:
        return {}
    with tempfile.TemporaryDirectory(prefix="source-in-runtime-") as folder:
        listing = []
        for case in runnable:
            source = _as_the_target_takes_it(case.model, runtime_version)
            (Path(folder) / f"{case.name}.onnx").write_bytes(source)
            np.savez(Path(folder) / f"{case.name}.npz", **_tensors(case))
            outputs = [value.name for value in onnx.load_model_from_string(case.model).graph.output]
            count = len(case.data_sets[0].outputs)
            listing.append(
                {"name": case.name, "outputs": outputs[:count], "rtol": case.rtol, "atol": case.atol}
            )
        (Path(folder) / "cases.json").write_text(json.dumps(listing), encoding="utf-8")
        # -E -s: nothing of this environment (PYTHONPATH, user site) reaches the target's interpreter.
        command = [str(python), "-E", "-s", str(ORACLE), folder]
        done = subprocess.run(command, capture_output=True, text=True, timeout=ORACLE_TIMEOUT, check=False)
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-2:])
        return {case.name: f"not run: the source check crashed ({tail})" for case in runnable}
    return json.loads(done.stdout.strip().splitlines()[-1])["cases"]


def _tensors(case: Case) -> dict[str, np.ndarray] | None:
    """The first data set as ``input/<name>`` and ``output/<index>`` arrays, if all are plain tensors."""
    data_set = case.data_sets[0]
    arrays = {f"input/{name}": value for name, value in data_set.inputs.items()}
    arrays |= {f"output/{index}": value for index, value in enumerate(data_set.outputs)}
    plain = {}
    for key, value in arrays.items():
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biufcUO":
            return None
        if value.dtype.kind == "O":
            if not all(isinstance(item, str) for item in value.flat):
                return None
            value = value.astype(np.str_)
        plain[key] = value
    return plain
