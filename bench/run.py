"""One benchmark run: build the inputs, cook them with the real doit, measure, write the report."""

from __future__ import annotations

import pickle
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import onnx
import onnxruntime

from . import measure, models
from .machine import describe
from .project import EXAMPLES, copy_project, platform_names, warm_up
from .report import InputModel, Results, render
from .sections import carry_over

# Models this large (source bytes) get the fewer load repeats: each session takes a second or more.
LARGE_SOURCE = 100_000_000


@dataclass(frozen=True, kw_only=True)
class Config:
    quick: bool
    sizes: models.Sizes
    load_repeats: int
    large_load_repeats: int  # for models over LARGE_SOURCE bytes
    inference_rounds: int  # steady-state inference: rounds x runs per round Runs per load path
    inference_runs: int
    decompression_repeats: int
    decompression_threads: tuple[int, ...]
    cold_repeats: int
    noop_counts: tuple[int, ...]
    noop_repeats: int
    memory_repeats: int
    burn_scale: int
    huge: bool = False  # generate and try to cook the >2 GB model (--huge; never in quick mode)


FULL = Config(
    quick=False,
    sizes=models.FULL,
    load_repeats=9,
    large_load_repeats=5,
    inference_rounds=25,
    inference_runs=2,
    decompression_repeats=7,
    decompression_threads=(1, 2),
    cold_repeats=3,
    noop_counts=(25, 50, 100),
    noop_repeats=7,
    memory_repeats=3,
    burn_scale=32,
)
QUICK = Config(
    quick=True,
    sizes=models.QUICK,
    load_repeats=2,
    large_load_repeats=2,
    inference_rounds=2,
    inference_runs=2,
    decompression_repeats=2,
    decompression_threads=(1, 2),
    cold_repeats=1,
    noop_counts=(2, 4, 8),
    noop_repeats=2,
    memory_repeats=1,
    burn_scale=2,
)


_START = time.perf_counter()


def _step(message: str) -> None:
    print(f"[bench {time.perf_counter() - _START:6.1f} s] {message}", file=sys.stderr, flush=True)


def run(config: Config, workdir: Path, runtimes: Path) -> Results:
    started = time.perf_counter()
    machine = describe()  # now: the project commit measured is the one copied below
    onnxruntime.set_default_logger_severity(3)  # unused-initializer warnings would drown the progress
    logs = workdir / "logs"
    logs.mkdir(parents=True)
    project = copy_project(workdir / "project")
    assets = project / "assets"
    _step(f"writing inputs into {assets}")
    models.write_assets(EXAMPLES, assets, config.sizes)
    platforms = platform_names(project)
    _step(f"warm-up cook (runtime check environments cached in {runtimes})")
    warm_up(project, runtimes, logs)

    _step("5. cold cook, doit cook vs doit -n 2 cook")
    cold = measure.cold_cook(
        project, "assets", config.cold_repeats, logs, "build", config.burn_scale, runtimes
    )
    build = measure.Build.read(project / "build", platforms)
    names = sorted(set().union(*(m.keys() for m in build.manifests.values())))
    inputs = {name: measure.feeds(build, name) for name in names}

    _step(f"1. session-ready time and first run, {len(names)} models")
    load = []
    for name in names:
        large = build.manifests[platforms[0]][name]["source_size"] > LARGE_SOURCE
        repeats = config.large_load_repeats if large else config.load_repeats
        load.append(measure.load_time(build, assets, name, repeats, inputs[name]))
    _step(f"2. steady-state inference, {config.inference_rounds * config.inference_runs} runs per load path")
    inference = []
    for name in names:
        inference.append(
            measure.steady_inference(
                build, assets, name, config.inference_rounds, config.inference_runs, inputs[name]
            )
        )
        print(f"  inference {name}: done", file=sys.stderr)
    _step("3. decompression throughput")
    decompression = measure.decompression(
        build, models.LARGE_WEIGHTS, config.decompression_repeats, config.decompression_threads
    )
    _step("4. sizes")
    sizes = measure.sizes(build)
    _step("7. peak memory")
    memory = measure.peak_memory(build, assets, models.LARGE_WEIGHTS, config.memory_repeats, workdir)
    described = _describe_inputs(build, assets, names)
    shutil.rmtree(project / "build")  # the large-weights blobs take a gigabyte

    _step("6. no-op cook as the project grows")
    noop = measure.noop_scaling(
        project, config.noop_counts, len(platforms), config.noop_repeats, logs, runtimes
    )
    huge = None
    if config.huge:
        _step(f"8. a model over 2 GB ({models.HUGE_WEIGHTS})")
        huge = measure.huge_model(project, config.sizes, platforms, runtimes, logs)
        shutil.rmtree(project / "assets-huge")
        shutil.rmtree(project / "build-huge", ignore_errors=True)

    return Results(
        quick=config.quick,
        machine=machine,
        repeats={
            "session-ready and first run": config.load_repeats,
            f"the same, models over {LARGE_SOURCE / 1e6:.0f} MB": config.large_load_repeats,
            "steady-state inference (Runs per load path)": config.inference_rounds * config.inference_runs,
            "decompression": config.decompression_repeats,
            "cold cook": config.cold_repeats,
            "no-op cook": config.noop_repeats,
            "peak memory": config.memory_repeats,
        },
        inputs=described,
        platforms={p: build.format(p) for p in platforms},
        graph_model=models.LARGE_GRAPH,
        weights_model=models.LARGE_WEIGHTS,
        huge_model=models.HUGE_WEIGHTS,
        huge_bytes=config.sizes.huge_bytes,
        load=load,
        inference=inference,
        decompression=decompression,
        sizes=sizes,
        cold=cold,
        noop=noop,
        memory=memory,
        huge=huge,
        duration_s=time.perf_counter() - started,
    )


def _describe_inputs(build: measure.Build, assets: Path, names: list[str]) -> list[InputModel]:
    kinds = {g.name: g.kind for g in models.GENERATED}
    kinds[models.LARGE_WEIGHTS] = "weight-bound: MatMul stack, weights in a .onnx.data file"
    onnx_platform = build.first_platform("onnx")
    described = []
    for name in names:
        graph = onnx.load(str(assets / f"{name}.onnx"), load_external_data=False).graph
        entry = build.manifests[onnx_platform].get(name, {})
        weights = entry.get("weights")
        described.append(
            InputModel(
                name=name,
                kind=kinds.get(name, "example asset (`assets/`)"),
                nodes=len(graph.node),
                source_size=next(m[name]["source_size"] for m in build.manifests.values() if name in m),
                onnx_weights="in the graph" if not weights else f"section, stored {weights['stored']}",
            )
        )
    return described


def main(
    config: Config, output: Path, workdir: Path | None, keep: bool, runtimes: Path, huge: bool = False
) -> int:
    if huge:
        config = replace(config, huge=True)
    root = Path(tempfile.mkdtemp(prefix="onnx-cooker-bench-", dir=workdir))
    _step(f"working in {root}")
    try:
        results = run(config, root, runtimes.resolve())
        # The measurements themselves, to render the report again (python -m bench.report, with --keep).
        (root / "results.pickle").write_bytes(pickle.dumps(results))
        output.parent.mkdir(parents=True, exist_ok=True)
        previous = output.read_text(encoding="utf-8") if output.is_file() else ""
        # the standalone benches' sections (bench.farm, bench.precision) stay
        output.write_text(carry_over(previous, render(results)), encoding="utf-8")
        _step(f"wrote {output}")
    finally:
        if keep:
            _step(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0
