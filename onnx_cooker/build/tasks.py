"""The doit tasks of ``dodo.py``: one cook per (platform, model), one manifest per platform.

Runs at task-loading time for every doit command, so it imports only the standard library, yaml
and doit; the cooking code is imported inside the actions (onnx_cooker.build.actions).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from doit.exceptions import InvalidDodoFile
from doit.task import clean_targets
from doit.tools import config_changed

from onnx_cooker.build.actions import (
    CHECK_RECIPE,
    _remove,
    _remove_report,
    fail_unusable,
    run_cook,
    run_manifest,
    run_runtime_checks,
)
from onnx_cooker.build.config import _key_digest, folders, unknown_variables
from onnx_cooker.build.lock import READ_ONLY_COMMANDS, doit_command
from onnx_cooker.build.plan import (
    _model_settings,
    _plans,
    _refuse_empty,
    _refuse_strays,
    _runtime_checks,
    _shard_share,
    strict_from_env,
)
from onnx_cooker.build.publish import NoRetirementDue, remove_published
from onnx_cooker.build.stamps import OutputsIntact
from onnx_cooker.cook.job import CookJob, RuntimeCheck
from onnx_cooker.cook.key import BUNDLE_FORMAT, canonical_json
from onnx_cooker.errors import CookError
from onnx_cooker.farm.shard import shard_from_env
from onnx_cooker.farm.store import CacheConfig, config_from_env
from onnx_cooker.layout import (
    BLOB_SUFFIX,
    applied_variant_path,
    blob_path,
    cache_record_path,
    cache_run_marker_path,
    check_times_path,
    cook_stamps_path,
    entry_path,
    manifest_stamps_path,
    ops_config_names,
    step_times_path,
    verify_data_path,
)
from onnx_cooker.runtime.constants import MANIFEST_NAME, SIGNATURE_NAME
from onnx_cooker.settings.assets import UnusableModel, survey
from onnx_cooker.settings.resolve import Platform, is_skipped, load_platforms


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


RUNTIME_CHECK_DOC = "Run each platform's blobs in the exact onnxruntime version it ships (runs in `cook`)."


def cook_tasks(env: Mapping[str, str], root: Path) -> Iterator[dict[str, Any]]:
    """Sub-tasks ``<platform>:<model>`` (one cook) and ``<platform>`` (its manifest)."""
    where = folders(env, root)
    try:
        platforms = load_platforms(where.platforms, env)
        found = survey(where.assets)
        _refuse_strays(found.strays, strict_from_env(env))
        _warn(found.strays)
        model_settings, unreadable = _model_settings(found.models, [p.name for p in platforms])
        unusable = [*found.unusable, *unreadable]  # their tasks fail; every other model cooks
        assets = tuple(asset for asset in found.models if asset.name in model_settings)
        plans = _plans(platforms, assets, model_settings, where.build, env)
        failing = {p.name: [model for model in unusable if p.selects(model.name)] for p in platforms}
        found_count = len(found.models) + len(found.unusable)
        skipping = {
            p.name: [a.name for a in assets if is_skipped(model_settings[a.name], p.name)] for p in platforms
        }
        _refuse_empty(
            plans, where.assets, found_count, [name for name, bad in failing.items() if bad], skipping
        )
        key_digest = _key_digest(where.signing_key)
        cache, shard = _for_this_run(config_from_env(env), where.build), shard_from_env(env)
        if shard is not None:
            mine = _shard_share(plans, shard, cache)
    except CookError as exc:
        _report_plan_failure(where.build, str(exc))
        raise InvalidDodoFile(f"cannot plan the cook:\n{exc}") from None
    sys.stderr.write("".join(unknown_variables(env)))  # once a run: the tasks are loaded once
    _warn_orphans(where.build, where.platforms, {platform.name for platform in platforms})
    _warn_unmatched_globs(platforms, [asset.name for asset in found.models])
    if shard is not None:  # its cooks and their runtime checks, into the cache; no manifests
        for platform, jobs in plans:
            share = [job for job in jobs if id(job) in mine]
            yield from (_cook_task(job, cache) for job in share)
            yield from (_failing_task(platform, model) for model in failing[platform.name])
            checks = _runtime_checks(platform, share, where.build / platform.name, where.runtimes, env)
            if checks:  # in the cook group (where the manifest task would be), so `doit cook` runs it
                task = _runtime_check_task(platform, share, checks, cache)
                del task["basename"]
                task["doc"] = f"check this shard's {platform.name} blobs in onnxruntime, into the cook cache"
                yield task
        return
    # The runtime checks' own group (doit would give it the cook's description): `doit list`, `help`.
    yield {"basename": "runtime_check", "name": None, "doc": RUNTIME_CHECK_DOC}
    for platform, jobs in plans:
        platform_dir = where.build / platform.name
        for job in jobs:
            yield _cook_task(job, cache)
        yield from (_failing_task(platform, model) for model in failing[platform.name])
        checks = _runtime_checks(platform, jobs, platform_dir, where.runtimes, env)
        if checks:
            yield _runtime_check_task(platform, jobs, checks, cache)
        manifest = _manifest_task(platform, jobs, platform_dir, checks, where.signing_key, key_digest)
        # a model that cannot be cooked keeps the platform's previous bundle, as a failed cook does
        manifest["task_dep"] = [f"cook:{platform.name}:{model.name}" for model in failing[platform.name]]
        yield manifest


# The bundles in the build folder of platforms the project no longer has (set as the tasks are
# planned, read by the cook report in the same process: onnx_cooker/build/progress.py).
ORPHANED_BUNDLES: list[str] = []


def _warn_orphans(build: Path, platforms_dir: Path, planned: set[str]) -> None:
    """A bundle folder whose platform file is gone: no cook updates it any more, yet a packaging
    step that ships build/*/ would ship it; one line each, with the fix."""
    orphans = sorted(
        path.parent.name for path in build.glob(f"*/{MANIFEST_NAME}") if path.parent.name not in planned
    )
    ORPHANED_BUNDLES[:] = orphans
    sys.stderr.write(
        "".join(
            f"warning: {build / name} holds the bundle of platform {name!r}, which {platforms_dir} no longer "
            f"has ({name}.yaml): no cook updates it; delete that folder, or restore the platform file\n"
            for name in orphans
        )
    )


def _warn_unmatched_globs(platforms: list[Platform], names: list[str]) -> None:
    """An include or exclude glob that matches no model is a typo more often than not (exclude
    "bigg/*" keeps every big model in): one line each. A platform that selects nothing at all is
    an error already (plan._refuse_empty)."""
    if not names:
        return
    lines = [
        f"warning: {platform.origins.get(key, platform.path)}: {key} glob {glob!r} matches none of the "
        f"{len(names)} model(s) in the assets; fix it or remove it (`onnx-cooker list --all` lists the "
        "models)\n"
        for platform in platforms
        for key, globs in (("include", platform.include), ("exclude", platform.exclude))
        for glob in globs
        if glob != "*" and not any(fnmatch.fnmatchcase(name, glob) for name in names)
    ]
    sys.stderr.write("".join(dict.fromkeys(lines)))  # a COOK_SET_ variable's glob: once, not per platform


def _report_plan_failure(build: Path, problem: str) -> None:
    """A cook that cannot be planned still ends with its report (``doit list`` and the other
    read-only commands write none)."""
    if doit_command() in READ_ONLY_COMMANDS:
        return
    try:
        from onnx_cooker.report.html import write_plan_failure

        sys.stderr.write(f"report: {write_plan_failure(build, problem)}\n")
    except Exception:  # noqa: BLE001  the report never hides the problem itself
        pass


def _for_this_run(cache: CacheConfig | None, build: Path) -> CacheConfig | None:
    """The cache settings with this doit run's marker (a new id each time the tasks are loaded):
    in a run, one cook waits for a cache that is down, not every cook in turn."""
    if cache is None:
        return None
    return dataclasses.replace(cache, run_marker=str(cache_run_marker_path(build)), run=uuid.uuid4().hex)


def _warn(strays: tuple[str, ...]) -> None:
    """One line per file the cook ignores, once per run (tasks are loaded once)."""
    if strays:
        sys.stderr.write("".join(f"warning: {line}\n" for line in strays))


def _failing_task(platform: Platform, model: UnusableModel) -> dict[str, Any]:
    """The cook of a model that cannot be planned: it fails with the problem (the file and the fix)
    every time it runs, and holds back the platform's manifest as a failed cook does."""
    return {
        "name": f"{platform.name}:{model.name}",
        "doc": f"cook {model.name} for {platform.name}: fails until its file is fixed (a cook says how)",
        "actions": [(fail_unusable, [model.problem])],
        "verbosity": 2,
    }


def _runtime_check_task(
    platform: Platform, jobs: list[CookJob], checks: list[RuntimeCheck], cache: CacheConfig | None
) -> dict[str, Any]:
    deps = [
        path
        for job in jobs
        for path in cook_targets(job)
        if path.suffix in (f".{BLOB_SUFFIX}", ".npz", ".json")
    ]
    versions = [check.runtime_version for check in checks]
    return {
        "basename": "runtime_check",
        "name": platform.name,
        "doc": f"run {platform.name}'s blobs in onnxruntime {', '.join(versions)}, the version it ships",
        "actions": [(run_runtime_checks, [checks, cache])],
        "file_dep": [str(path) for path in deps],
        "targets": [str(check.result_path) for check in checks],
        # What the check measures and enforces beside the blobs: a change runs it again.
        "uptodate": [config_changed(_digest(canonical_json(_check_config(checks, versions))))],
        "clean": [clean_targets, (_remove, [check_times_path(checks[0].platform_dir)])],
        "verbosity": 2,
    }


def _check_config(checks: list[RuntimeCheck], versions: list[str]) -> dict[str, object]:
    return {
        "versions": versions,
        "python": sys.version,
        "recipe": CHECK_RECIPE,
        "packages": sorted({check.runtime_package for check in checks}),
        "min_coverage": sorted(item for check in checks for item in check.min_coverage),
    }


def cook_targets(job: CookJob) -> list[Path]:
    settings, name = job.settings, job.asset.name
    targets = [blob_path(job.platform_dir, name, settings.format), entry_path(job.platform_dir, name)]
    if settings.verify:
        targets.append(verify_data_path(job.platform_dir, name))
    return targets


def _cook_task(job: CookJob, cache: CacheConfig | None) -> dict[str, Any]:
    settings = job.settings
    return {
        "name": f"{settings.platform}:{job.asset.name}",
        "doc": f"cook {job.asset.name} for {settings.platform} "
        f"({settings.format}, {settings.optimization_level}, {settings.optimization_style})",
        "actions": [(run_cook, [job, cache])],
        "file_dep": [str(path) for path in job.asset.source_files],
        "targets": [str(path) for path in cook_targets(job)],
        "uptodate": [
            config_changed(_digest(job.task_key)),
            OutputsIntact(
                f"cook:{settings.platform}:{job.asset.name}",
                cook_targets(job),
                cook_stamps_path(job.platform_dir, job.asset.name),
            ),
        ],
        "clean": [
            clean_targets,
            (_remove, [cook_stamps_path(job.platform_dir, job.asset.name)]),
            (_remove, [step_times_path(job.platform_dir, job.asset.name)]),
            (_remove, [applied_variant_path(job.platform_dir, job.asset.name)]),  # kept by some cooks
            (_remove, [cache_record_path(job.platform_dir, job.asset.name)]),
        ],
        "verbosity": 2,
    }


def _manifest_task(
    platform: Platform,
    jobs: list[CookJob],
    platform_dir: Path,
    checks: list[RuntimeCheck],
    signing_key: Path | None,
    key_digest: str | None,
) -> dict[str, Any]:
    names = [job.asset.name for job in jobs]
    type_reduction = any(job.settings.type_reduction for job in jobs)
    configs = ops_config_names(type_reduction) if any(job.settings.reduced_build for job in jobs) else ()
    results = [check.result_path for check in checks]
    off_reason = None if platform.runtime_check else platform.runtime_check_off_reason
    signature = (SIGNATURE_NAME,) if signing_key is not None else ()
    state = {"models": names, "format": BUNDLE_FORMAT, "signing_key": key_digest, "check_off": off_reason}
    if platform.max_bundle_bytes:
        state["max_bundle_bytes"] = platform.max_bundle_bytes
    return {
        "name": platform.name,
        "doc": platform.description or f"cook every model for {platform.name} and write its manifest",
        "actions": [
            (
                run_manifest,
                [
                    platform_dir,
                    platform.name,
                    names,
                    results,
                    off_reason,
                    signing_key,
                    platform.max_bundle_bytes,
                ],
            )
        ],
        "file_dep": [str(entry_path(platform_dir, name)) for name in names] + [str(path) for path in results],
        "targets": [str(platform_dir / name) for name in (MANIFEST_NAME, *configs, *signature)],
        "uptodate": [
            config_changed(_digest(canonical_json(state))),
            OutputsIntact(
                f"cook:{platform.name}",
                [platform_dir / name for name in (MANIFEST_NAME, *configs, *signature)],
                manifest_stamps_path(platform_dir),
            ),
            NoRetirementDue(platform_dir),  # a retired blob past its grace: delete it
        ],
        "clean": [
            clean_targets,
            (_remove, [manifest_stamps_path(platform_dir)]),
            (remove_published, [platform_dir]),
            (_remove_report, [platform_dir.parent]),
        ],
        "verbosity": 2,
    }
