"""The doit tasks of ``dodo.py``: one cook per (platform, model), one manifest per platform.

Runs at task-loading time for every doit command, so it imports only the standard library, yaml
and doit; the cooking code is imported inside the actions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doit.exceptions import InvalidDodoFile, TaskFailed
from doit.task import clean_targets
from doit.tools import config_changed

from pipeline.build.publish import remove_published
from pipeline.build.stamps import OutputsIntact, record
from pipeline.cook.job import CookJob, RuntimeCheck
from pipeline.cook.key import BUNDLE_FORMAT, canonical_json
from pipeline.errors import CookError, ProfileError
from pipeline.farm.cache import CacheConfig, config_from_env
from pipeline.farm.shard import Shard, assign, shard_from_env
from pipeline.layout import (
    BLOB_SUFFIX,
    REPORT_NAME,
    REPORT_STATE_DIR,
    STAMPS_DIR,
    applied_variant_path,
    blob_path,
    cache_record_path,
    check_times_path,
    cook_stamps_path,
    digest_memo_dir,
    entry_path,
    manifest_stamps_path,
    ops_config_names,
    reference_memo_dir,
    runtime_check_path,
    step_times_path,
    verify_data_path,
)
from pipeline.runtime.constants import MANIFEST_NAME, SIGNATURE_NAME, OptimizationStyle, Precision
from pipeline.settings.assets import AssetModel, discover
from pipeline.settings.eprules import ep_usability_check
from pipeline.settings.resolve import (
    CookSettings,
    Platform,
    is_skipped,
    load_model_settings,
    load_platforms,
    resolve,
)

if TYPE_CHECKING:
    from pipeline.farm.cache import CookCache


@dataclass(frozen=True, kw_only=True)
class Folders:
    assets: Path
    platforms: Path
    build: Path
    runtimes: Path
    signing_key: Path | None  # COOK_SIGNING_KEY: sign every manifest with this Ed25519 key


def folders(env: Mapping[str, str], root: Path) -> Folders:
    """The assets, platforms and build folders; ``COOK_ASSETS_DIR`` etc. override them."""

    def pick(variable: str, default: str) -> Path:
        return (root / env.get(variable, default)).resolve()

    return Folders(
        assets=pick("COOK_ASSETS_DIR", "assets"),
        platforms=pick("COOK_PLATFORMS_DIR", "platforms"),
        build=pick("COOK_BUILD_DIR", "build"),
        runtimes=pick("COOK_RUNTIMES_DIR", str(Path(env.get("COOK_BUILD_DIR", "build")) / ".runtimes")),
        signing_key=pick("COOK_SIGNING_KEY", "") if env.get("COOK_SIGNING_KEY") else None,
    )


def run_cook(job: CookJob, cache_config: CacheConfig | None = None) -> TaskFailed | None:
    from pipeline.build.allocator import release_if_short

    try:
        return _run_cook(job, cache_config)
    finally:
        release_if_short()  # a worker gives back what it keeps when the machine runs short


def _run_cook(job: CookJob, cache_config: CacheConfig | None) -> TaskFailed | None:
    from pipeline.build.outputs import (
        cook,  # imports onnx and onnxruntime only for a real cook (not a cache hit)
    )
    from pipeline.farm.cache import CookCache

    cache = CookCache(cache_config) if cache_config is not None else None
    try:
        entry = cook(job, cache)  # also records what it read and wrote (pipeline.build.stamps)
    except CookError as exc:
        notes = "".join(f"\n{note}" for note in cache.notes) if cache is not None else ""
        return TaskFailed(str(exc) + notes)
    summary = _summary(entry) + (" (from the cook cache)" if cache is not None and cache.hit else "")
    lines = [summary, *(cache.notes if cache is not None else [])]
    sys.stdout.write("\n".join(lines) + "\n")  # one write: lines stay whole under `doit -n`
    return None


def _summary(entry: Mapping[str, Any]) -> str:
    verification = entry["verification"]
    if "outputs" in verification:
        worst = max((o["max_abs"] for o in verification["outputs"]), default=0.0)
        checked = f"verified ({verification['inputs']} inputs), max abs error {worst:.2g}"
    else:
        checked = "NOT verified (verify: false)"
    size = f"{entry['blob_size']:,} B from {entry['source_size']:,} B of source"
    line = f"{entry['settings']['platform']}/{entry['file']}: {size}, {checked}"
    for fallback in entry.get("fallbacks", []):
        if "disabled_optimizers" in fallback:
            done = f"without {', '.join(fallback['disabled_optimizers'])}"
        else:
            done = "with " + ", ".join(f"{k} {v}" for k, v in fallback["used"].items())
        line += f"\n  warning: {entry['name']} cooked {done}: {fallback['why']}"
    return line


def run_manifest(
    platform_dir: Path,
    platform: str,
    names: list[str],
    check_results: list[Path],
    check_off_reason: str | None,
    signing_key: Path | None = None,
    max_bundle_bytes: int = 0,
) -> TaskFailed | None:
    from pipeline.build.manifest import write_manifest
    from pipeline.cook.opconfig import write_operator_configs

    try:
        path = write_manifest(
            platform_dir, platform, names, check_results, check_off_reason, max_bundle_bytes
        )
        manifest = json.loads(path.read_text(encoding="utf-8"))
        configs = write_operator_configs(platform_dir, manifest["models"])
        _sign(path, signing_key)
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
            "disk space and permissions, then run `doit cook` again"
        )
    lines = [f"{path}: {len(names)} model(s)", *(f"{config}: reduced-build operators" for config in configs)]
    lines += usability_lines(platform, manifest["models"])
    sys.stdout.write("\n".join(lines) + "\n")
    return None


def manifest_outputs(platform_dir: Path, configs: Any, signing_key: Path | None) -> list[Path]:
    """The files a platform's manifest task writes."""
    names = [MANIFEST_NAME, *(Path(config).name for config in configs)]
    return [platform_dir / name for name in (*names, *((SIGNATURE_NAME,) if signing_key else ()))]


def _sign(manifest: Path, signing_key: Path | None) -> None:
    """Write manifest.json.sig, or remove a stale one when this cook does not sign."""
    signature_path = manifest.with_name(SIGNATURE_NAME)
    if signing_key is None:
        signature_path.unlink(missing_ok=True)
        return
    from pipeline.build.signing import sign
    from pipeline.fsutil import atomic_write

    atomic_write(signature_path, sign(manifest.read_bytes(), signing_key))


def usability_lines(platform: str, models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The end-of-cook summary: how much of each model the platform's NNAPI/CoreML EP would take."""
    lines = []
    for name, entry in sorted(models.items()):
        for ep, report in entry.get("usability", {}).items():
            share = f"{report['supported_nodes']}/{report['nodes']} nodes"
            line = f"  {platform}:{name}: {ep} takes {share} in {report['partitions']} partition(s): "
            line += report["verdict"]
            if report["verdict_if_shapes_fixed"] != report["verdict"]:
                line += f" ({report['verdict_if_shapes_fixed']} with fixed_dims/fixed_shapes for "
                line += f"{', '.join(report['dynamic_inputs'])})"
            lines.append(line)
    return lines


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _model_settings(assets: tuple[AssetModel, ...], platform_names: list[str]) -> dict[str, dict]:
    """Every model's settings file, validated together so that one run reports every problem."""
    settings, problems = {}, []
    for asset in assets:
        try:
            settings[asset.name] = load_model_settings(asset.settings_path, platform_names)
        except ProfileError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ProfileError(problems)
    return settings


def cook_tasks(env: Mapping[str, str], root: Path) -> Iterator[dict[str, Any]]:
    """Sub-tasks ``<platform>:<model>`` (one cook) and ``<platform>`` (its manifest)."""
    where = folders(env, root)
    try:
        platforms = load_platforms(where.platforms, env)
        assets = discover(where.assets)
        model_settings = _model_settings(assets, [p.name for p in platforms])
        plans = _plans(platforms, assets, model_settings, where.build, env)
        _refuse_empty(plans, where.assets, len(assets))
        key_digest = _key_digest(where.signing_key)
        cache, shard = config_from_env(env), shard_from_env(env)
        if shard is not None:
            mine = _shard_share(plans, shard, cache)
    except CookError as exc:
        raise InvalidDodoFile(f"cannot plan the cook:\n{exc}") from None
    if shard is not None:  # its cooks and their runtime checks, into the cache; no manifests
        for platform, jobs in plans:
            share = [job for job in jobs if id(job) in mine]
            yield from (_cook_task(job, cache) for job in share)
            checks = _runtime_checks(platform, share, where.build / platform.name, where.runtimes, env)
            if checks:  # in the cook group (where the manifest task would be), so `doit cook` runs it
                task = _runtime_check_task(platform, share, checks, cache)
                del task["basename"]
                task["doc"] = f"check this shard's {platform.name} blobs in onnxruntime, into the cook cache"
                yield task
        return
    for platform, jobs in plans:
        platform_dir = where.build / platform.name
        for job in jobs:
            yield _cook_task(job, cache)
        checks = _runtime_checks(platform, jobs, platform_dir, where.runtimes, env)
        if checks:
            yield _runtime_check_task(platform, jobs, checks, cache)
        yield _manifest_task(platform, jobs, platform_dir, checks, where.signing_key, key_digest)


def _shard_share(
    plans: list[tuple[Platform, list[CookJob]]], shard: Shard, cache: CacheConfig | None
) -> set[int]:
    """The ids of the jobs this agent cooks: a deterministic, size-balanced share (pipeline.farm.shard)."""
    if cache is None or not cache.writes:
        raise CookError(
            f"COOK_SHARD={shard} cooks a share of the models into the shared cook cache, so it needs "
            "COOK_CACHE (in readwrite mode, the default); then run `doit cook` without COOK_SHARD to "
            "assemble the bundles from the cache"
        )
    jobs = [job for _, platform_jobs in plans for job in platform_jobs]
    weights = [(id(job), _source_bytes(job) * _passes(job.settings)) for job in jobs]
    assigned = assign(weights, shard.count)
    return {job_id for job_id, index in assigned.items() if index == shard.index}


def _passes(settings: CookSettings) -> int:
    """How many times a cook with these settings goes over the whole model, a proxy for its time
    beside the model's size (measured on the bench set: a runtime-style reduced-build cook with an
    NNAPI or CoreML usability report takes ~1.7x a fixed-style one of the same model)."""
    passes = 2  # load and check; optimize and serialize
    passes += 2 if settings.verify else 0  # the source's outputs; the cooked blob through the loader
    runtime = settings.optimization_style == OptimizationStyle.RUNTIME
    passes += 1 if settings.reduced_build and runtime else 0  # the applied variant
    passes += 1 if any(ep_usability_check(ep) for ep in settings.execution_providers) else 0
    passes += 1 if settings.precision != Precision.FP32 else 0  # the variant and its accuracy gate
    return passes


def _source_bytes(job: CookJob) -> int:
    total = 0
    for path in job.asset.source_files:
        try:
            total += path.stat().st_size
        except OSError:
            continue  # the cook itself will say what is missing
    return total


def _remove_report(build: Path) -> None:
    """``doit clean``: the cook report (written by doit's reporter at the end of every run,
    pipeline.build.progress) and the build folder's memos go with the bundles; every platform's manifest
    task removes them."""
    import shutil

    (build / REPORT_NAME).unlink(missing_ok=True)
    shutil.rmtree(build / REPORT_STATE_DIR, ignore_errors=True)
    # and the digests and source outputs the cooks remembered (pipeline.build.stamps, pipeline.cook.verify)
    shutil.rmtree(digest_memo_dir(build), ignore_errors=True)
    shutil.rmtree(reference_memo_dir(build), ignore_errors=True)
    with contextlib.suppress(OSError):
        (build / STAMPS_DIR).rmdir()


def _refuse_empty(plans: list[tuple[Platform, list[CookJob]]], assets: Path, found: int) -> None:
    """A platform with no model to cook is almost always a wrong assets folder or a failed checkout:
    cooking it would replace a good bundle with an empty one. Refused, before anything is written,
    unless its file says ``allow_empty: true``."""
    empty = [platform for platform, jobs in plans if not jobs and not platform.allow_empty]
    if not empty:
        return
    if found:
        problems = [
            f"{platform.path}: platform {platform.name!r} selects none of the {found} model(s) in {assets} "
            f"(include {list(platform.include)}, exclude {list(platform.exclude)}); fix its globs"
            for platform in empty
        ]
    else:
        problems = [
            f"{assets} holds no .onnx model, so {', '.join(repr(p.name) for p in empty)} would ship empty "
            "bundles; point COOK_ASSETS_DIR at the folder with your models (a relative path starts at the "
            "folder of dodo.py)"
        ]
    problems.append(
        "nothing was cooked or written; set `allow_empty: true` in a platform file whose bundle should be "
        "empty"
    )
    raise ProfileError(problems)


DEFAULT_PIP_TIMEOUT = 300.0


def _seconds(env: Mapping[str, str], variable: str, default: float) -> float:
    text = env.get(variable, "")
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ProfileError([f"{variable}={text!r}: expected a number of seconds above 0"])
    return value


def _runtime_checks(
    platform: Platform, jobs: list[CookJob], platform_dir: Path, runtimes: Path, env: Mapping[str, str]
) -> list[RuntimeCheck]:
    """One check per onnxruntime version the platform's models target (usually one)."""
    if not platform.runtime_check or not jobs:
        return []
    install_timeout = _seconds(env, "COOK_PIP_TIMEOUT", DEFAULT_PIP_TIMEOUT)
    versions = sorted({job.settings.runtime_version for job in jobs})
    return [
        RuntimeCheck(
            platform=platform.name,
            runtime_version=version,
            platform_dir=platform_dir,
            names=tuple(job.asset.name for job in jobs if job.settings.runtime_version == version),
            runtimes_dir=runtimes,
            result_path=runtime_check_path(platform_dir, version),
            profile=platform.path,
            install_timeout=install_timeout,
        )
        for version in versions
    ]


def run_runtime_checks(
    checks: list[RuntimeCheck], cache_config: CacheConfig | None = None
) -> TaskFailed | None:
    """Each check's models in the target onnxruntime, except those whose passing report for this
    exact blob and version the cache holds; the new passes are stored there, one per model, so that
    a shard's checks serve the agent that assembles the bundle."""
    from pipeline.farm.cache import CookCache
    from pipeline.fsutil import write_json

    times: dict[str, float] = {}
    for check in checks:
        cache = CookCache(cache_config) if cache_config is not None else None
        started = time.perf_counter()
        try:
            report, cached = _checked_models(check, cache)
            write_json(check.result_path, report)
        except CookError as exc:
            return TaskFailed(str(exc))
        except OSError as exc:
            return TaskFailed(
                f"{check.platform}: runtime check failed ({exc.strerror or exc}); free disk space"
            )
        times[check.runtime_version] = time.perf_counter() - started
        write_json(check_times_path(check.platform_dir), times)
        count = len(report["models"])
        source = (
            " (from the cook cache)"
            if cached == count
            else f" ({cached} of them from the cook cache)"
            if cached
            else ""
        )
        version = report["onnxruntime"]
        line = f"{check.platform}: {count} model(s) load and match in onnxruntime {version}{source}"
        sys.stdout.write("\n".join([line, *(cache.notes if cache is not None else [])]) + "\n")
    return None


def _checked_models(check: RuntimeCheck, cache: CookCache | None) -> tuple[dict[str, Any], int]:
    """The check's report, and how many of its models came from the cache."""
    from pipeline.build.target_check import run_check

    keys = {name: _check_key(check, name) for name in check.names}
    models: dict[str, Any] = {}
    version = check.runtime_version
    for name, key in keys.items() if cache is not None else ():
        stored = cache.fetch_check(key, check.runtime_version, [name])
        if stored is not None:
            models[name], version = stored["models"][name], stored["onnxruntime"]
    cached = len(models)
    missing = tuple(name for name in check.names if name not in models)
    if missing:
        report = run_check(replace(check, names=missing))  # raises if any model fails
        version = report["onnxruntime"]
        for name in missing:
            models[name] = report["models"][name]
            if cache is not None:
                cache.upload_check(keys[name], {"onnxruntime": version, "models": {name: models[name]}})
    return {"onnxruntime": version, "models": {name: models[name] for name in check.names}}, cached


# Bump whenever what the runtime check tests changes (its worker, its tolerances): cached reports of
# an older check are not reused.
CHECK_RECIPE = 3  # 2: compares at the tolerances the cook verified with; 3: one report per model


def _check_key(check: RuntimeCheck, name: str) -> str:
    """What one model's runtime check depends on: the target version and the exact blob it loads."""
    entry = json.loads(entry_path(check.platform_dir, name).read_text(encoding="utf-8"))
    return canonical_json(
        {
            "check": "runtime",
            "recipe": CHECK_RECIPE,
            "version": check.runtime_version,
            "format": BUNDLE_FORMAT,
            "model": name,
            "blob": entry["blob_sha256"],
        }
    )


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
        "uptodate": [config_changed(_digest(canonical_json({"versions": versions, "python": sys.version})))],
        "clean": [clean_targets, (_remove, [check_times_path(checks[0].platform_dir)])],
        "verbosity": 2,
    }


def _plans(
    platforms: tuple[Platform, ...],
    assets: tuple[AssetModel, ...],
    model_settings: Mapping[str, Mapping[str, Any]],
    build: Path,
    env: Mapping[str, str],
) -> list[tuple[Platform, list[CookJob]]]:
    """Every platform's jobs; settings that do not resolve are all reported together."""
    plans, problems = [], []
    for platform in platforms:
        try:
            plans.append((platform, _platform_jobs(platform, assets, model_settings, build, env)))
        except ProfileError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ProfileError(list(dict.fromkeys(problems)))  # one line per distinct problem
    return plans


def _platform_jobs(
    platform: Platform,
    assets: tuple[AssetModel, ...],
    model_settings: Mapping[str, Mapping[str, Any]],
    build: Path,
    env: Mapping[str, str],
) -> list[CookJob]:
    jobs, problems = [], []
    for asset in assets:
        overrides = model_settings[asset.name]
        if not platform.selects(asset.name) or is_skipped(overrides, platform.name):
            continue
        try:
            settings = resolve(platform, overrides, env, model_source=str(asset.settings_path or asset.path))
        except ProfileError as exc:
            problems.extend(exc.problems)
            continue
        jobs.append(CookJob(asset=asset, settings=settings, platform_dir=build / platform.name))
    if problems:
        raise ProfileError(problems)
    return jobs


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


def _key_digest(signing_key: Path | None) -> str | None:
    if signing_key is None:
        return None
    try:
        return hashlib.sha256(signing_key.read_bytes()).hexdigest()
    except OSError as exc:
        raise CookError(f"COOK_SIGNING_KEY={signing_key}: cannot read the key ({exc.strerror})") from None


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
        ],
        "clean": [
            clean_targets,
            (_remove, [manifest_stamps_path(platform_dir)]),
            (remove_published, [platform_dir]),
            (_remove_report, [platform_dir.parent]),
        ],
        "verbosity": 2,
    }


def _remove(path: Path) -> None:
    """``doit clean``: the record of what a task wrote goes with its outputs."""
    path.unlink(missing_ok=True)


def environment() -> dict[str, str]:
    """The process environment, read once at the edge (dodo.py) and passed in everywhere else."""
    return dict(os.environ)
