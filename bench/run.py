"""One benchmark run: build the inputs, cook them with the real doit, measure, write the report."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnxruntime

from . import measure, models
from .machine import describe
from .project import EXAMPLES, copy_project, platform_names, warm_up
from .report import Results, render

EXAMPLE_MODEL = "resnet"  # an example asset, timed beside the synthetic models for scale


@dataclass(frozen=True, kw_only=True)
class Config:
    quick: bool
    sizes: models.Sizes
    load_repeats: int
    weights_load_repeats: int  # the large-weights model takes seconds per session
    decompression_repeats: int
    cold_repeats: int
    noop_counts: tuple[int, ...]
    noop_repeats: int
    memory_repeats: int
    burn_scale: int


FULL = Config(
    quick=False,
    sizes=models.FULL,
    load_repeats=9,
    weights_load_repeats=5,
    decompression_repeats=7,
    cold_repeats=3,
    noop_counts=(25, 50, 100),
    noop_repeats=7,
    memory_repeats=3,
    burn_scale=32,
)
QUICK = Config(
    quick=True,
    sizes=models.QUICK,
    load_repeats=3,
    weights_load_repeats=2,
    decompression_repeats=3,
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

    _step("4. cold cook, doit cook vs doit -n 2 cook")
    cold = measure.cold_cook(
        project, "assets", config.cold_repeats, logs, "build", config.burn_scale, runtimes
    )
    build = measure.Build.read(project / "build", platforms)

    _step("1. session-ready time")
    load = [
        measure.load_time(build, assets, models.LARGE_GRAPH, config.load_repeats),
        measure.load_time(build, assets, models.LARGE_WEIGHTS, config.weights_load_repeats),
        measure.load_time(build, assets, EXAMPLE_MODEL, config.load_repeats),
    ]
    _step("2. decompression throughput")
    decompression = measure.decompression(build, models.LARGE_WEIGHTS, config.decompression_repeats)
    _step("3. sizes")
    sizes = measure.sizes(build)
    _step("6. peak memory")
    memory = measure.peak_memory(build, models.LARGE_WEIGHTS, config.memory_repeats, workdir)
    shutil.rmtree(project / "build")  # the large-weights blobs take a gigabyte

    _step("5. no-op cook as the project grows")
    noop = measure.noop_scaling(
        project, config.noop_counts, len(platforms), config.noop_repeats, logs, runtimes
    )

    graph_nodes = len(onnx.load(str(assets / f"{models.LARGE_GRAPH}.onnx")).graph.node)
    examples = sorted(path.stem for path in EXAMPLES.rglob("*.onnx"))
    inputs = [
        f"example assets: {len(examples)} models from `assets/` ({', '.join(examples)})",
        f"`{models.LARGE_GRAPH}`: {graph_nodes:,} nodes in {config.sizes.graph_blocks} residual MLP blocks "
        f"(LayerNormalization, MatMul+Add, SiLU, reshape/transpose pairs, constant subexpressions), "
        f"{_size(assets / f'{models.LARGE_GRAPH}.onnx')}, built by `bench/models.py` (seeded)",
        f"`{models.LARGE_WEIGHTS}`: {config.sizes.weights_layers} MatMul layers of "
        f"{config.sizes.weights_width}x{config.sizes.weights_width} float32, "
        f"{_size(assets / f'{models.LARGE_WEIGHTS}.onnx.data')} of weights in "
        f"`{models.LARGE_WEIGHTS}.onnx.data` beside the model, built by `bench/models.py` (seeded)",
    ]
    return Results(
        quick=config.quick,
        machine=describe(),
        repeats={
            "session-ready": config.load_repeats,
            f"session-ready ({models.LARGE_WEIGHTS})": config.weights_load_repeats,
            "decompression": config.decompression_repeats,
            "cold cook": config.cold_repeats,
            "no-op cook": config.noop_repeats,
            "peak memory": config.memory_repeats,
        },
        inputs=inputs,
        platforms={p: build.format(p) for p in platforms},
        graph_model=models.LARGE_GRAPH,
        weights_model=models.LARGE_WEIGHTS,
        load=load,
        decompression=decompression,
        sizes=sizes,
        cold=cold,
        noop=noop,
        memory=memory,
        duration_s=time.perf_counter() - started,
    )


def _size(path: Path) -> str:
    size = path.stat().st_size
    return f"{size / 1e6:,.1f} MB" if size >= 1e5 else f"{size / 1e3:,.1f} kB"


def main(config: Config, output: Path, workdir: Path | None, keep: bool, runtimes: Path) -> int:
    root = Path(tempfile.mkdtemp(prefix="onnx-cooker-bench-", dir=workdir))
    _step(f"working in {root}")
    try:
        results = run(config, root, runtimes.resolve())
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(render(results), encoding="utf-8")
        _step(f"wrote {output}")
    finally:
        if keep:
            _step(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0
