"""The actions of the doit tasks (onnx_cooker.build.tasks): a cook, a platform's manifest, its runtime
checks, and the ``doit clean`` actions. Each prints a short summary, and turns an expected error
into a clean doit failure (one message, no traceback).

Loaded with the tasks on every doit command, so it imports only the standard library and doit at
module level; the cooking code (onnx, onnxruntime) is imported inside the actions.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doit.exceptions import TaskFailed

from onnx_cooker.build.stamps import record
from onnx_cooker.build.summary import cook_line
from onnx_cooker.cook.job import CookJob, RuntimeCheck
from onnx_cooker.cook.key import BUNDLE_FORMAT, canonical_json
from onnx_cooker.errors import CookError
from onnx_cooker.farm.store import CacheConfig
from onnx_cooker.layout import (
    REPORT_NAME,
    REPORT_STATE_DIR,
    STAMPS_DIR,
    check_times_path,
    digest_memo_dir,
    entry_path,
    manifest_stamps_path,
    reference_memo_dir,
)
from onnx_cooker.runtime.constants import MANIFEST_NAME, SIGNATURE_NAME
from onnx_cooker.settings.advice import lower_level_helps

if TYPE_CHECKING:
    from onnx_cooker.build.run_job import Miss
    from onnx_cooker.farm.cache import CookCache
    from onnx_cooker.isolate import Crash


def run_cook(job: CookJob, cache_config: CacheConfig | None = None) -> TaskFailed | None:
    """Cook one model for one platform, in a forked child on Linux (a native crash in onnxruntime
    then fails this task alone: onnx_cooker/isolate.py). A cache hit needs neither: it is looked up and
    put in place here first, without the cook's modules (onnx, onnxruntime, torch: seconds a process)."""
    from onnx_cooker.build.allocator import release_if_short
    from onnx_cooker.build.run_job import Miss
    from onnx_cooker.farm.cache import CookCache
    from onnx_cooker.isolate import Crash, can_isolate, run_isolated

    cache = CookCache(cache_config) if cache_config is not None else None
    miss = None
    if (kept := _kept(job)) is not None:  # nothing changed that the cook depends on: doit lost track
        sys.stdout.write(kept)
        return None
    try:
        if cache is not None and can_isolate():
            found = _look_up(job, cache)
            if not isinstance(found, Miss):
                return None if found is None else TaskFailed(found)
            miss = found
        if can_isolate():
            before = time.monotonic()
            _import_the_cook()
            if cache is not None:  # the statistic of what the cook took leaves out this process's imports
                cache.started += time.monotonic() - before
        failure = run_isolated(lambda: _run_cook(job, cache, miss))
    finally:
        release_if_short()  # a worker gives back what it keeps when the machine runs short
    if isinstance(failure, Crash):
        return TaskFailed(crash_message(job, failure))
    return None if failure is None else TaskFailed(failure)


@functools.cache
def _import_the_cook() -> None:
    """Import every module a cook may import, once per doit process, before the first fork: each
    child inherits them instead of importing them again (onnx, onnxruntime, and torch where it is
    installed, which onnxruntime.tools imports: 2.5 s a child). The idle threads onnxruntime starts
    at import are safe to fork over (onnx_cooker/isolate.py)."""
    import importlib
    import pkgutil

    import onnx_cooker.cook
    import onnx_cooker.runtime

    for package in (onnx_cooker.cook, onnx_cooker.runtime):
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{module.name}")
    importlib.import_module("onnx_cooker.build.run_job")


def _kept(job: CookJob) -> str | None:
    from onnx_cooker.build.outputs import kept_line

    try:
        return kept_line(job)
    except CookError:
        return None  # cooked, which says what is wrong


def _look_up(job: CookJob, cache: CookCache) -> Miss | str | None:
    """The cache lookup alone, in this process: the ``Miss`` to cook, else what ``_run_cook`` returns."""
    from onnx_cooker.build.run_job import look_up

    try:
        found = look_up(job, cache)
    except CookError as exc:
        return _failed(exc, cache)
    if isinstance(found, dict):
        _print_summary(found, cache)
        return None
    return found


def _run_cook(job: CookJob, cache: CookCache | None, miss: Miss | None = None) -> str | None:
    from onnx_cooker.build.run_job import cook  # imports onnx and onnxruntime only for a real cook

    try:
        entry = cook(job, cache, miss)  # also records what it read and wrote (onnx_cooker.build.stamps)
    except CookError as exc:
        return _failed(exc, cache)
    _print_summary(entry, cache)
    return None


def _failed(exc: CookError, cache: CookCache | None) -> str:
    notes = "".join(f"\n{note}" for note in cache.notes) if cache is not None else ""
    return str(exc) + notes


def _print_summary(entry: Mapping[str, Any], cache: CookCache | None) -> None:
    summary = cook_line(entry) + (" (from the cook cache)" if cache is not None and cache.hit else "")
    lines = [summary, *(cache.notes if cache is not None else [])]
    sys.stdout.write("\n".join(lines) + "\n")  # one write: lines stay whole under `doit -n`


def crash_message(job: CookJob, crash: Crash) -> str:
    """What to do about a cook whose process died (``crash``), by how and in which step."""
    settings, name, platform = job.settings, job.asset.name, job.settings.platform
    where = f"{job.asset.path}: {platform}: the cook of {name!r}"
    step = crash.step or "starting"
    if crash.how.startswith("SIGKILL"):
        return (
            f"{where} was killed ({crash.how}) during {step!r}: most often the machine ran out of memory; "
            "cook with fewer processes (`-n`) or on a machine with more memory"
        )
    if crash.how.startswith("exit status"):
        return (
            f"{where} ended with no result ({crash.how}) during {step!r}; cook with COOK_ISOLATE=0 to see why"
        )
    lower = lower_level_helps(settings.optimization_level)
    level = f"`platforms: {{{platform}: {{optimization_level: basic}}}}` in {name}.cook.yaml"
    load_level = (
        f"`platforms: {{{platform}: {{ep_session_options: {{CPUExecutionProvider: "
        f"{{graph_optimization_level: extended}}}}}}}}` in {name}.cook.yaml (onnxruntime's optimizations at "
        "load are the likely cause)"
    )
    if step.startswith("verify: the cooked blob"):
        cause = (
            "while the cooked blob was loaded and run through the loader games ship, so a game loading it "
            "would crash the same way: it is not shipped"
        )
        fixes = [load_level] if settings.format == "onnx" else [level] if lower else []
    elif step.startswith("optimize"):
        cause = f"while onnxruntime optimized it at `{settings.optimization_level}`"
        fixes = [level] if lower else []
    else:
        cause = f"during {step!r}"
        fixes = []
    fixes.append(f"`skip_platforms: [{platform}]` in {name}.cook.yaml")
    return (
        f"{where} crashed ({crash.how}) {cause}. That is a crash inside onnxruntime (or another native "
        "library), not an error it could report; no blob was written for this model and the other models "
        f"cooked on. Try {', or '.join(fixes)}; and report it to onnxruntime with the model."
    )


def fail_unusable(problem: str) -> TaskFailed:
    """The action of a model that could not be planned (its name, its settings file): the problem
    found when the tasks were loaded, now, as this model's failure."""
    return TaskFailed(problem)


def run_manifest(
    platform_dir: Path,
    platform: str,
    names: list[str],
    check_results: list[Path],
    check_off_reason: str | None,
    signing_key: Path | None = None,
    max_bundle_bytes: int = 0,
) -> TaskFailed | None:
    from onnx_cooker.build.manifest import write_manifest
    from onnx_cooker.build.signing import load_signing_key, replacing_signed_pair, write_signature
    from onnx_cooker.build.usability_lines import previous_models, usability_lines
    from onnx_cooker.cook.opconfig import write_operator_configs

    try:
        key = load_signing_key(signing_key) if signing_key else None  # first: the signature follows at once
        before = previous_models(platform_dir)
        with replacing_signed_pair(platform_dir):  # readers that meet the new manifest with the old
            path = write_manifest(  # signature (or none) read the pair again
                platform_dir, platform, names, check_results, check_off_reason, max_bundle_bytes
            )
            raw = path.read_bytes()
            write_signature(path, raw, key)
        manifest = json.loads(raw.decode("utf-8"))
        configs = write_operator_configs(platform_dir, manifest["models"])
        published = [platform_dir / entry["file"] for entry in manifest["models"].values()]
        record(
            [*manifest_outputs(platform_dir, configs, signing_key), *published],
            manifest_stamps_path(platform_dir),
            memo_dir=digest_memo_dir(platform_dir.parent),  # published blobs: the cooks' digests
        )
    except CookError as exc:
        return TaskFailed(str(exc))
    except OSError as exc:
        return TaskFailed(
            f"{platform_dir}: cannot write the manifest: {exc.filename or ''} {exc.strerror or exc}; check "
            "disk space and permissions, then run the cook again"
        )
    lines = [f"{path}: {len(names)} model(s)", *(f"{config}: reduced-build operators" for config in configs)]
    lines += usability_lines(platform, manifest["models"], before)
    sys.stdout.write("\n".join(lines) + "\n")
    return None


def manifest_outputs(platform_dir: Path, configs: Any, signing_key: Path | None) -> list[Path]:
    """The files a platform's manifest task writes."""
    names = [MANIFEST_NAME, *(Path(config).name for config in configs)]
    return [platform_dir / name for name in (*names, *((SIGNATURE_NAME,) if signing_key else ()))]


def run_runtime_checks(
    checks: list[RuntimeCheck], cache_config: CacheConfig | None = None
) -> TaskFailed | None:
    """Each check's models in the target onnxruntime, except those whose passing report for this
    exact blob and version the cache holds; the new passes are stored there, one per model, so that
    a shard's checks serve the agent that assembles the bundle."""
    from onnx_cooker.build.placement_check import coverage_failures, placement_lines
    from onnx_cooker.farm.cache import CookCache
    from onnx_cooker.fsutil import write_json

    times: dict[str, float] = {}
    for check in checks:
        cache = CookCache(cache_config) if cache_config is not None else None
        started = time.perf_counter()
        try:
            report, cached = _checked_models(check, cache)
            below, notes = coverage_failures(report, check)
            if below:
                return TaskFailed(
                    f"{check.platform}: {len(below)} model(s) run too little on their preferred EP: "
                    + "; ".join(below)
                )
            write_json(check.result_path, {k: v for k, v in report.items() if k != "unchanged"})
        except CookError as exc:
            return TaskFailed(str(exc))
        except OSError as exc:
            return TaskFailed(
                f"{check.platform}: runtime check failed ({exc.strerror or exc}); free disk space"
            )
        times[check.runtime_version] = time.perf_counter() - started
        write_json(check_times_path(check.platform_dir), times)
        count, unchanged = len(report["models"]), report.pop("unchanged")
        source = (
            " (from the cook cache)"
            if cached == count
            else f" ({cached} of them from the cook cache)"
            if cached
            else ""
        ) + (f" ({unchanged} of them as their last check here: the same blobs)" if unchanged else "")
        version = report["onnxruntime"]
        line = f"{check.platform}: {count} model(s) load and match in onnxruntime {version}{source}"
        lines = [line, *placement_lines(check, report), *notes, *(cache.notes if cache is not None else [])]
        sys.stdout.write("\n".join(lines) + "\n")
    return None


def _under_coverage(report: dict[str, Any] | None, check: RuntimeCheck) -> str:
    from onnx_cooker.build.placement_check import coverage_failures

    if report is None:
        return ""
    ran = replace(check, names=tuple(name for name in check.names if name in report["models"]))
    below, _ = coverage_failures(report, ran)
    return f"; and under their min_ep_coverage: {'; '.join(below)}" if below else ""


def _checked_models(check: RuntimeCheck, cache: CookCache | None) -> tuple[dict[str, Any], int]:
    """The check's report, and how many of its models came from the cache."""
    from onnx_cooker.build.check_report import read_result
    from onnx_cooker.build.target_check import RuntimeCheckError, run_check

    keys = {name: _check_key(check, name) for name in check.names}
    models: dict[str, Any] = {}
    version = check.runtime_version
    for name, key in keys.items() if cache is not None else ():
        stored = cache.fetch_check(key, check.runtime_version, [name])
        if stored is not None:
            models[name], version = stored["models"][name], stored["onnxruntime"]
    cached = len(models)
    # A model whose last check here passed for the same key (the same blob, version and check) is
    # not checked again: one changed model re-ran the check of every model of the platform
    digests = {name: hashlib.sha256(key.encode()).hexdigest() for name, key in keys.items()}
    try:
        last = read_result(check.result_path)
        before = {n: last["models"][n] for n, d in last.get("keys", {}).items() if d == digests.get(n)}
    except (CookError, AttributeError, KeyError, TypeError):  # damaged: checked again, and rewritten
        before = {}
    unchanged = 0
    for name, passed in before.items():
        if name not in models and isinstance(passed, dict) and passed.get("ok") is True:
            models[name], version, unchanged = passed, last.get("onnxruntime", version), unchanged + 1
    missing = tuple(name for name in check.names if name not in models)
    if missing:
        try:
            report = run_check(replace(check, names=missing))  # raises if any model fails
        except RuntimeCheckError as exc:  # with the others' placements: one run says everything wrong
            below = _under_coverage(exc.report, replace(check, names=missing))
            raise RuntimeCheckError(str(exc) + below) from None
        version = report["onnxruntime"]
        for name in missing:
            models[name] = report["models"][name]
            if cache is not None:
                cache.upload_check(keys[name], {"onnxruntime": version, "models": {name: models[name]}})
    ordered = {name: models[name] for name in check.names}
    return {"onnxruntime": version, "models": ordered, "keys": digests, "unchanged": unchanged}, cached


# Bump whenever what the runtime check tests changes (its worker, its tolerances): cached reports of
# an older check are not reused.
# 2: compares at the tolerances the cook verified with; 3: one report per model; 4: node placement
CHECK_RECIPE = 4


def _check_key(check: RuntimeCheck, name: str) -> str:
    from onnx_cooker.settings.eprules import installed_for

    """What one model's runtime check depends on: the target version and the exact blob it loads."""
    entry = json.loads(entry_path(check.platform_dir, name).read_text(encoding="utf-8"))
    return canonical_json(
        {
            "check": "runtime",
            "recipe": CHECK_RECIPE,
            "version": check.runtime_version,
            "package": check.runtime_package,
            "installs": installed_for(check.runtime_package),  # what measured it on this machine
            "format": BUNDLE_FORMAT,
            "model": name,
            "blob": entry["blob_sha256"],
        }
    )


def _remove(path: Path) -> None:
    """``doit clean``: the record of what a task wrote goes with its outputs."""
    path.unlink(missing_ok=True)


def _remove_report(build: Path) -> None:
    """``doit clean``: the cook report (written by doit's reporter at the end of every run,
    onnx_cooker.build.progress) and the build folder's memos go with the bundles; every platform's manifest
    task removes them."""
    import shutil

    (build / REPORT_NAME).unlink(missing_ok=True)
    shutil.rmtree(build / REPORT_STATE_DIR, ignore_errors=True)
    # and the digests and source outputs the cooks remembered (build/stamps.py, cook/verify.py)
    shutil.rmtree(digest_memo_dir(build), ignore_errors=True)
    shutil.rmtree(reference_memo_dir(build), ignore_errors=True)
    with contextlib.suppress(OSError):
        (build / STAMPS_DIR).rmdir()
