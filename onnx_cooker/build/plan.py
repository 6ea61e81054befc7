"""The plan of a cook: every platform's jobs from its file and the models' settings (all problems
reported together, before anything is written), an agent's share of them under ``COOK_SHARD``, and
the runtime checks each platform's models need. A model whose own settings file cannot be read is
set aside instead (``UnusableModel``): its tasks fail, every other model cooks.

Runs at task-loading time for every doit command: standard library and yaml only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from onnx_cooker.build.config import DEFAULT_PIP_TIMEOUT, _seconds
from onnx_cooker.cook.job import CookJob, RuntimeCheck
from onnx_cooker.errors import CookError, ProfileError
from onnx_cooker.farm.shard import Shard, assign
from onnx_cooker.farm.store import CacheConfig
from onnx_cooker.layout import runtime_check_path
from onnx_cooker.runtime.constants import OptimizationStyle, Precision
from onnx_cooker.settings.assets import AssetModel, UnusableModel
from onnx_cooker.settings.eprules import ep_usability_check
from onnx_cooker.settings.resolve import (
    CookSettings,
    Platform,
    is_skipped,
    load_model_settings,
    resolve,
)


def _model_settings(
    assets: tuple[AssetModel, ...], platform_names: list[str]
) -> tuple[dict[str, dict], list[UnusableModel]]:
    """Every model's settings file; a model whose file is invalid is set aside with its problems (its
    cook tasks fail with them, naming the file and the fix, while every other model cooks)."""
    settings, unusable = {}, []
    for asset in assets:
        try:
            settings[asset.name] = load_model_settings(asset.settings_path, platform_names)
        except ProfileError as exc:
            path = asset.settings_path or asset.path
            unusable.append(UnusableModel(name=asset.name, path=path, problem="\n".join(exc.problems)))
    return settings, unusable


def strict_from_env(env: Mapping[str, str]) -> bool:
    """``COOK_STRICT=1``: every warning about the assets folder fails the cook instead."""
    text = env.get("COOK_STRICT", "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ProfileError([f"COOK_STRICT={env['COOK_STRICT']!r}: expected 1 (warnings fail the cook) or 0"])


def _refuse_strays(strays: tuple[str, ...], strict: bool) -> None:
    """Under ``COOK_STRICT=1``, files the cook would ignore stop it before anything is written."""
    if strict and strays:
        fix = "fix these files (or unset COOK_STRICT to cook with a warning for each)"
        raise ProfileError([*strays, f"COOK_STRICT=1: nothing was cooked; {fix}"])


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


def _refuse_empty(
    plans: list[tuple[Platform, list[CookJob]]],
    assets: Path,
    found: int,
    failing: Collection[str] = (),
    skipping: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """A platform with no model to cook is almost always a wrong assets folder or a failed checkout:
    cooking it would replace a good bundle with an empty one. Refused, before anything is written,
    unless its file says ``allow_empty: true``. A platform in ``failing`` has models that cannot be
    cooked: their tasks fail and say why. ``skipping``: per platform, the models whose own settings
    skip it (``skip_platforms``): named, since then the globs are not what is wrong."""
    empty = [
        platform
        for platform, jobs in plans
        if not jobs and not platform.allow_empty and platform.name not in failing
    ]
    if not empty:
        return
    if found:
        problems = [
            _empty_reason(platform, assets, found, (skipping or {}).get(platform.name, ()))
            for platform in empty
        ]
    else:
        problems = [
            f"{assets} holds no .onnx model, so {', '.join(repr(p.name) for p in empty)} would ship empty "
            "bundles; put your models there, or name the folder that holds them: `assets` in cook.toml "
            "(onnx-cooker), or COOK_ASSETS_DIR"
        ]
    problems.append(
        "nothing was cooked or written; set `allow_empty: true` in a platform file whose bundle should be "
        "empty"
    )
    raise ProfileError(problems)


def _empty_reason(platform: Platform, assets: Path, found: int, skipping: Sequence[str]) -> str:
    selected = [name for name in skipping if platform.selects(name)]
    if not selected:
        return (
            f"{platform.path}: platform {platform.name!r} selects none of the {found} model(s) in {assets} "
            f"(include {list(platform.include)}, exclude {list(platform.exclude)}); fix its globs"
        )
    return (
        f"{platform.path}: platform {platform.name!r} gets none of the {found} model(s) in {assets}: "
        f"{', '.join(selected)} skip it (`skip_platforms` in their .cook.yaml), and its globs select no other"
    )


def _shard_share(
    plans: list[tuple[Platform, list[CookJob]]], shard: Shard, cache: CacheConfig | None
) -> set[int]:
    """The ids of the jobs this agent cooks: a deterministic, size-balanced share (onnx_cooker.farm.shard)."""
    if cache is None or not cache.writes:
        raise CookError(
            f"COOK_SHARD={shard} cooks a share of the models into the shared cook cache, so it needs "
            "COOK_CACHE (in readwrite mode, the default); then cook without COOK_SHARD to "
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
            runtime_package=platform.runtime_package,
            min_coverage=tuple(
                (job.asset.name, job.settings.min_ep_coverage)
                for job in jobs
                if job.settings.runtime_version == version and job.settings.min_ep_coverage
            ),
        )
        for version in versions
    ]
