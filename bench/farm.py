"""``python -m bench.farm [--quick]``: the shared cook cache on a build farm, measured side by side.

1. A fresh agent (no build folder, no doit state) running ``doit -n 2 cook`` against a warm cache
   (S3 on localhost: moto's server and the real boto3 client; and a folder cache, as on a network
   share), vs the cold ``doit -n 2 cook`` that filled it.
2. Two shard processes (``COOK_SHARD=0/2`` and ``1/2``) cooking (and runtime-checking) their shares
   at once on separate build folders into one folder cache, then one ``doit -n 2 cook`` assembling
   every bundle from it (as the CI recipe of docs/build-farms.md does), vs one process cooking everything
   (``doit cook``).
3. One cache hit over S3 on localhost, per (platform, model): index, objects, checks.
4. Where a cold cook's time goes, per step (``.stamps/times`` of every cook, and the runtime check),
   against onnxruntime's own converter (``convert_onnx_models_to_ort``) on the same models.

Rounds alternate the variants; medians. Writes bench/results-farm.md.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import models
from .machine import describe
from .project import (
    EXAMPLES,
    BenchError,
    Run,
    copy_project,
    doit,
    platform_names,
    standalone_main,
    warm_up,
)

WARM_GOAL = 0.10  # warm-cache cook / cold cook
SHARD_GOAL = 0.60  # (2 shards at once + assemble) / one process
BUCKET = "cook-cache"


@dataclass(frozen=True)
class Farm:
    tasks: int  # cook tasks (platform, model)
    cold: list[Run]  # doit -n 2 cook, filling the S3 cache
    warm: list[Run]  # doit -n 2 cook on a fresh agent, every cook a hit
    cold_folder: list[Run]  # the same two with a folder cache
    warm_folder: list[Run]
    one_process: list[Run]  # doit cook, no cache
    shards: list[float]  # wall time of the two shard processes running at once
    assemble: list[Run]  # doit cook from the folder cache the shards filled
    hit_s: list[float]  # one hit over S3, per (platform, model), median over entries per round
    download: list[tuple[float, int]]  # boto3 alone fetching the warm run's objects: seconds, bytes
    two_at_once: list[float]  # two whole `doit cook` at once on separate build folders, no cache
    steps: dict[str, float]  # cook step -> wall seconds summed over the first cold cook's tasks
    converter: list[float]  # convert_onnx_models_to_ort over every model, once per round
    platforms: int
    quick: bool
    machine: dict[str, str]


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _at_once(project: Path, runtimes: Path, logs: Path, envs: list[tuple[str, dict[str, str]]]) -> float:
    """``doit cook`` into each (build folder, extra environment) of ``envs``, all at once; the wall
    time until the slowest one ends."""
    import threading

    errors: list[BenchError] = []

    def run(build: str, env: dict[str, str]) -> None:
        try:
            log = logs / f"{build}.log"
            doit(project, ["cook"], assets="assets", build=build, runtimes=runtimes, log=log, extra_env=env)
        except BenchError as exc:
            errors.append(exc)

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=pair) for pair in envs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def _concurrent_shards(project: Path, runtimes: Path, logs: Path, cache: Path, round_: int) -> float:
    """Both shard processes at once; the wall time until the slower one ends."""
    envs = [
        (f"build-shard-{round_}-{i}", {"COOK_CACHE": str(cache), "COOK_SHARD": f"{i}/2"}) for i in range(2)
    ]
    return _at_once(project, runtimes, logs, envs)


def _two_at_once(project: Path, runtimes: Path, logs: Path, round_: int) -> float:
    """Two whole cooks (every task, no cache) at once on separate build folders: what this machine
    does with two processes' worth of this very work (the ceiling of two shards)."""
    return _at_once(project, runtimes, logs, [(f"build-two-{round_}-{i}", {}) for i in range(2)])


def _download(server_env: dict[str, str], prefix: str, folder: Path) -> tuple[float, int]:
    """boto3 alone fetching every object under ``prefix`` (what a warm agent downloads) into files, on
    two threads like ``doit -n 2``, streamed, nothing checked: the time moving the bytes takes here."""
    import os
    import threading

    from onnx_cooker.farm.s3_store import _s3_client

    os.environ.update(server_env)
    client = _s3_client()
    keys = [
        (item["Key"], item["Size"])
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/")
        for item in page.get("Contents", [])
        if "/checks/" not in item["Key"]
    ]
    folder.mkdir(parents=True, exist_ok=True)

    def fetch(share: list[tuple[str, int]], index: int) -> None:
        for number, (key, _) in enumerate(share):
            body = client.get_object(Bucket=BUCKET, Key=key)["Body"]
            with open(folder / f"{index}-{number}", "wb") as out:
                for chunk in body.iter_chunks(1 << 20):
                    out.write(chunk)

    shares = [keys[0::2], keys[1::2]]
    started = time.perf_counter()
    threads = [threading.Thread(target=fetch, args=(share, i)) for i, share in enumerate(shares)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    shutil.rmtree(folder)
    return elapsed, sum(size for _, size in keys)


def _hit_cost(project: Path, build: str, server_env: dict[str, str], prefix: str) -> float:
    """The median time of one S3 hit over every (platform, model) the build holds: index, objects
    streamed into temp files and hashed, the checks; the temp files are dropped."""
    import os
    import tempfile

    from onnx_cooker.farm.cache import CookCache
    from onnx_cooker.farm.store import ROLES, CacheConfig

    os.environ.update(server_env)
    times = []
    with tempfile.TemporaryDirectory(dir=project) as scratch:
        for platform in platform_names(project):
            manifest = json.loads((project / build / platform / "manifest.json").read_text())
            for name, entry in manifest["models"].items():
                staged = f".entries/{name}.{entry['format']}.ocb"
                roles = _roles(project / build / platform, name, entry["format"])
                dests = {role: Path(scratch) / f"{role}-{i}" for i, role in enumerate(roles) if role in ROLES}
                cache = CookCache(CacheConfig(url=f"s3://{BUCKET}/{prefix}"))
                start = time.perf_counter()
                hit = cache.fetch(entry["cook_key"], name, platform, staged, dests)
                times.append(time.perf_counter() - start)
                if hit is None:
                    raise BenchError(f"no S3 cache hit for {platform}/{name}: {cache.notes}")
                hit.discard()
    return _median(times)


def _roles(platform_dir: Path, name: str, model_format: str) -> list[str]:
    """The roles a cook of ``name`` wrote into ``platform_dir`` (what its cache entry holds)."""
    from onnx_cooker.layout import applied_variant_path, blob_path, entry_path, verify_data_path

    paths = {
        "blob": blob_path(platform_dir, name, model_format),
        "entry": entry_path(platform_dir, name),
        "verify": verify_data_path(platform_dir, name),
        "applied": applied_variant_path(platform_dir, name),
    }
    return [role for role, path in paths.items() if path.is_file()]


def _converter(project: Path, workdir: Path, round_: int) -> float:
    """onnxruntime's own ORT converter over a copy of the same models: what one platform costs it."""
    import subprocess

    folder = workdir / f"converter-{round_}"
    shutil.copytree(project / "assets", folder)
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "onnxruntime.tools.convert_onnx_models_to_ort",
            "--allow_conversion_failures",
            str(folder),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    shutil.rmtree(folder)
    if done.returncode != 0:
        raise BenchError(f"onnxruntime's converter failed: {done.stderr[-2000:]}")
    return elapsed


def _step_times(build: Path) -> dict[str, float]:
    """Wall seconds per cook step, summed over every cook of ``build``, and the runtime checks."""
    from onnx_cooker.layout import STAMPS_DIR, check_times_path

    totals: dict[str, float] = {}
    for times in build.glob(f"*/{STAMPS_DIR}/times/**/*.json"):
        for step, seconds in json.loads(times.read_text()).items():
            totals[step] = totals.get(step, 0.0) + seconds
    for platform_dir in build.iterdir():
        check = check_times_path(platform_dir)
        if check.is_file():
            seconds = sum(json.loads(check.read_text()).values())
            totals["runtime check (per platform)"] = totals.get("runtime check (per platform)", 0.0) + seconds
    return totals


def measure(quick: bool, workdir: Path, runtimes: Path) -> Farm:
    from tests.s3server import s3_server

    logs = workdir / "logs"
    logs.mkdir(parents=True)
    project = copy_project(workdir / "project")
    models.write_assets(EXAMPLES, project / "assets", models.QUICK if quick else models.FULL)
    print("farm: warm-up cook", file=sys.stderr)
    warm_up(project, runtimes, logs)
    repeats = 1 if quick else 3
    kinds = (
        *("cold", "warm", "cold_folder", "warm_folder", "one", "shards", "assemble", "hit", "converter"),
        *("download", "two"),
    )
    farm: dict[str, list] = {k: [] for k in kinds}

    def cook(build: str, args: list[str], cache_env: dict[str, str] | None = None) -> Run:
        """``doit <args>`` in the project into build folder ``build`` (its log beside the others)."""
        return doit(
            project,
            args,
            assets="assets",
            build=build,
            runtimes=runtimes,
            log=logs / f"{build}.log",
            extra_env=cache_env,
        )

    parallel = ["-n", "2", "cook"]
    with s3_server() as server:
        server.client().create_bucket(Bucket=BUCKET)
        for i in range(repeats):
            s3 = {"COOK_CACHE": f"s3://{BUCKET}/round{i}", **server.env()}
            print(f"farm: round {i + 1}/{repeats}: cold cook into S3, then a fresh agent", file=sys.stderr)
            farm["cold"].append(cook(f"build-cold-{i}", parallel, s3))
            farm["warm"].append(cook(f"build-warm-{i}", parallel, s3))
            farm["hit"].append(_hit_cost(project, f"build-warm-{i}", server.env(), f"round{i}"))
            farm["download"].append(_download(server.env(), f"round{i}", workdir / "download"))
            folder = {"COOK_CACHE": str(workdir / f"warm-folder-cache-{i}")}
            farm["cold_folder"].append(cook(f"build-cold-folder-{i}", parallel, folder))
            farm["warm_folder"].append(cook(f"build-warm-folder-{i}", parallel, folder))
            shutil.rmtree(workdir / f"warm-folder-cache-{i}", ignore_errors=True)
            if i == 0:
                steps = _step_times(project / "build-cold-0")
            farm["converter"].append(_converter(project, workdir, i))
            print(f"farm: round {i + 1}/{repeats}: two shards and assemble vs one process", file=sys.stderr)
            cache = workdir / f"folder-cache-{i}"
            order = ["one", "shards", "two"] if i % 2 == 0 else ["two", "shards", "one"]
            for kind in order:
                if kind == "one":
                    farm["one"].append(cook(f"build-one-{i}", ["cook"]))
                elif kind == "two":
                    farm["two"].append(_two_at_once(project, runtimes, logs, i))
                else:
                    farm["shards"].append(_concurrent_shards(project, runtimes, logs, cache, i))
                    farm["assemble"].append(cook(f"build-assemble-{i}", parallel, {"COOK_CACHE": str(cache)}))
            for leftover in project.glob(f"build-*-{i}*"):
                if not leftover.name.startswith(("build-warm-", "build-cold-")) or "folder" in leftover.name:
                    shutil.rmtree(leftover)
    log = (logs / "build-warm-0.log").read_text()
    hits = sum(" blob of " in line and line.endswith("(from the cook cache)") for line in log.splitlines())
    tasks = sum(line.startswith(".  cook:") and line.count(":") == 2 for line in log.splitlines())
    if hits != tasks:
        raise BenchError(
            f"the fresh agent cooked {tasks - hits} of {tasks} tasks instead of hitting the cache"
        )
    return Farm(
        tasks=tasks,
        cold=farm["cold"],
        warm=farm["warm"],
        cold_folder=farm["cold_folder"],
        warm_folder=farm["warm_folder"],
        one_process=farm["one"],
        shards=farm["shards"],
        assemble=farm["assemble"],
        hit_s=farm["hit"],
        download=farm["download"],
        two_at_once=farm["two"],
        steps=steps,
        converter=farm["converter"],
        platforms=len(platform_names(project)),
        quick=quick,
        machine=describe(),
    )


def render(farm: Farm) -> str:
    cold = _median([r.wall_s for r in farm.cold])
    warm = _median([r.wall_s for r in farm.warm])
    cold_folder = _median([r.wall_s for r in farm.cold_folder])
    warm_folder = _median([r.wall_s for r in farm.warm_folder])
    one = _median([r.wall_s for r in farm.one_process])
    sharded = _median([s + a.wall_s for s, a in zip(farm.shards, farm.assemble, strict=True)])
    hit = _median(farm.hit_s)
    download = _median([seconds for seconds, _ in farm.download])
    downloaded = _median([size for _, size in farm.download])
    two = _median(farm.two_at_once)
    assemble = _median([a.wall_s for a in farm.assemble])
    converter = _median(farm.converter)
    platforms = farm.platforms
    total_steps = sum(farm.steps.values()) or 1.0
    judged = not farm.quick

    def verdict(ok: bool) -> str:
        return ("met" if ok else "**missed**") if judged else "not judged (quick mode)"

    lines = [
        "# onnx-cooker benchmarks: the shared cook cache on a build farm",
        "",
        f"Written by `python -m bench.farm{' --quick' if farm.quick else ''}` on {farm.machine['date']}; "
        f"{farm.machine['cores']}, {farm.machine.get('CPU', '')}. Every number is the median of "
        f"{len(farm.cold)} round(s); the variants of a round run one after the other, in alternating order. "
        f"The project: the bench models of `bench/models.py` and the example assets, {farm.tasks} cook tasks "
        f"(platform, model) over {farm.platforms} platforms, every check on (verification, the runtime "
        "check in each platform's exact onnxruntime).",
        "",
        "| # | measurement | goal | measured | result |",
        "|---|---|---|---|---|",
        f"| 1 | fresh agent, warm S3 cache (`doit -n 2 cook`) vs the cold `doit -n 2 cook` that filled it "
        f"| <= {WARM_GOAL:.2f}x | {warm:.1f} s vs {cold:.1f} s: {warm / cold:.2f}x "
        f"| {verdict(warm / cold <= WARM_GOAL)} |",
        f"| 1 | the same with a folder cache (a network share's case) | <= {WARM_GOAL:.2f}x "
        f"| {warm_folder:.1f} s vs {cold_folder:.1f} s: {warm_folder / cold_folder:.2f}x "
        f"| {verdict(warm_folder / cold_folder <= WARM_GOAL)} |",
        f"| 1 | for scale: boto3 alone downloading the same {downloaded / 1e9:.2f} GB (every object the warm "
        f"S3 run fetched) into files on 2 threads, nothing checked | reported | {download:.1f} s | - |",
        f"| 2 | 2 shard processes at once into a folder cache, then `doit -n 2 cook` assembling, vs one "
        f"process (`doit cook`) | <= {SHARD_GOAL:.2f}x | {sharded:.1f} s "
        f"({_median(farm.shards):.1f} s shards + {assemble:.1f} s assemble) "
        f"vs {one:.1f} s: {sharded / one:.2f}x | {verdict(sharded / one <= SHARD_GOAL)} |",
        f"| 2 | for scale: two whole `doit cook` at once on separate build folders (no cache), vs one alone "
        f"| reported | {two:.1f} s vs {one:.1f} s: two processes do {2 * one / two:.2f}x the work per "
        f"second here, so two shards can at best take {two / (2 * one):.2f}x | - |",
        f"| 3 | one cache hit over S3 on localhost, per (platform, model) | reported | "
        f"{hit * 1000:.1f} ms (index, objects and their sha256s, the blob's header and frame layout) | - |",
        f"| 4 | cold `doit -n 2 cook` vs onnxruntime's converter (`convert_onnx_models_to_ort`, fixed "
        f"style) on the same models, once per platform | <= 2.00x | {cold:.1f} s vs {converter:.1f} s x "
        f"{platforms} platforms = {converter * platforms:.1f} s: {cold / (converter * platforms):.2f}x "
        f"| {verdict(cold / (converter * platforms) <= 2.0)} |",
        "",
        "Where the first cold cook's time goes (wall seconds summed over its cook tasks, which `-n 2` runs "
        "two at a time; from `.stamps/times/` of every cook and the runtime check's own timing):",
        "",
        "| step | seconds | share |",
        "|---|---|---|",
        *(
            f"| {step} | {seconds:.1f} | {seconds / total_steps:.1%} |"
            for step, seconds in sorted(farm.steps.items(), key=lambda item: -item[1])
        ),
        f"| **all** | **{total_steps:.1f}** | |",
        "",
        "What the warm run still does: doit loads the tasks; every cook task (without importing onnx or "
        "onnxruntime) hashes the sources for the cook key (once per model: the other platforms take "
        "the remembered digests), fetches its entry's objects into temp files beside their places (a "
        "hard link from a folder cache on the same file system, else a streamed copy or download), "
        "hashes each once against its index, checks the blob's header and frame layout, and renames "
        "them into place; every runtime check finds its per-model reports; each manifest merges the "
        "entries' operator lists and publishes the blobs by hard link.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return standalone_main("farm", __doc__, measure, render, argv)


if __name__ == "__main__":
    sys.exit(main())
