"""The measurements. Each returns plain numbers; ``bench.report`` judges them against the targets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime

from onnx_cooker.layout import blob_path, verify_data_path
from onnx_cooker.runtime import read_header, session_from_blob, unpack_blob
from onnx_cooker.runtime.frames import decode_into
from onnx_cooker.runtime.header import MAX_HEADER_SIZE
from onnx_cooker.runtime.writer import Weights, encode_blob

from . import models
from .probe import LOAD_FAILED as PROBE_LOAD_FAILED
from .project import REPO, BenchError, Run, doit, replicate_examples
from .timing import interleaved, interleaved_phases, median

CPU = ["CPUExecutionProvider"]
# A platform's optimization_level as onnxruntime's option (as onnx_cooker/cook/optimize.py maps it).
LEVELS = {
    "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@dataclass(frozen=True, kw_only=True)
class Build:
    """A finished cook: its folder and, per platform, the manifest's models."""

    root: Path
    manifests: dict[str, dict]

    @classmethod
    def read(cls, root: Path, platforms: Sequence[str]) -> Build:
        manifests = {p: json.loads((root / p / "manifest.json").read_text())["models"] for p in platforms}
        return cls(root=root, manifests=manifests)

    @property
    def platforms(self) -> list[str]:
        return list(self.manifests)

    def blob(self, platform: str, model: str) -> Path:
        return self.root / platform / self.manifests[platform][model]["file"]

    def format(self, platform: str) -> str:
        return next(iter(self.manifests[platform].values()))["format"]

    def first_platform(self, model_format: str) -> str:
        return next(p for p in self.platforms if self.format(p) == model_format)


# --- 1. session-ready time and 2. inference time ------------------------------------------------


def feeds(build: Build, model: str) -> dict[str, np.ndarray]:
    """The inputs the cook verified ``model`` with (seeded, the same for every platform)."""
    for platform in build.platforms:
        path = verify_data_path(build.root / platform, model)
        if path.is_file():
            with np.load(path, allow_pickle=False) as archive:
                return {k.partition("/")[2]: archive[k] for k in archive.files if k.startswith("input/")}
    raise BenchError(f"no verification inputs for {model!r} in {build.root}")


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    """Medians, in seconds, per load path: ``source`` or a platform (its blob)."""

    model: str
    ready_s: dict[str, float]  # until the session exists: InferenceSession(path) / session_from_blob(bytes)
    first_run_s: dict[str, float]  # its first Run, right after
    unpack_s: dict[str, float]  # platform -> unpack_blob(bytes) alone: the loader's checks + decompression

    @property
    def source_s(self) -> float:
        return self.ready_s[SOURCE]

    def speedup(self, platform: str) -> float:
        return self.ready_s[SOURCE] / self.ready_s[platform]


SOURCE = "source"


def load_time(
    build: Build, assets: Path, model: str, repeats: int, inputs: dict[str, np.ndarray]
) -> LoadResult:
    """Session-ready time and first run, source file against every platform's blob, side by side."""
    source = str(assets / f"{model}.onnx")
    blobs = {p: build.blob(p, model).read_bytes() for p in build.platforms if model in build.manifests[p]}

    def ready_then_run(create: Callable[[], onnxruntime.InferenceSession]) -> dict[str, float]:
        start = time.perf_counter()
        session = create()
        ready = time.perf_counter()
        session.run(None, inputs)
        return {"ready": ready - start, "first_run": time.perf_counter() - ready}

    def unpack(blob: bytes) -> dict[str, float]:
        start = time.perf_counter()
        unpacked = unpack_blob(blob)
        elapsed = time.perf_counter() - start
        del unpacked
        return {"unpack": elapsed}

    variants: dict[str, Callable[[], dict[str, float]]] = {
        SOURCE: lambda: ready_then_run(lambda: onnxruntime.InferenceSession(source, providers=CPU))
    }
    for platform, blob in blobs.items():
        variants[platform] = lambda blob=blob: ready_then_run(lambda: session_from_blob(blob, providers=CPU))
        variants[f"unpack:{platform}"] = lambda blob=blob: unpack(blob)
    times = interleaved_phases(variants, repeats, label=f"load {model}")
    paths = [SOURCE, *blobs]
    return LoadResult(
        model=model,
        ready_s={p: median(times[p]["ready"]) for p in paths},
        first_run_s={p: median(times[p]["first_run"]) for p in paths},
        unpack_s={p: median(times[f"unpack:{p}"]["unpack"]) for p in blobs},
    )


@dataclass(frozen=True, kw_only=True)
class InferenceResult:
    model: str
    steady_s: dict[str, float]  # load path -> median Run time after the first
    runs: int  # per load path
    # ORT-format platform -> median Run time of the source .onnx optimized as that platform's cook
    # optimizes (onnxruntime does not re-optimize an ORT-format model at load)
    cooked_like_s: dict[str, float] = field(default_factory=dict)

    def ratio(self, platform: str) -> float:
        """The blob session's steady-state Run time over the source session's (above 1 = slower)."""
        return self.steady_s[platform] / self.steady_s[SOURCE]

    def cooked_like_ratio(self, platform: str) -> float:
        """... over the source optimized like the platform's cook (the source session for ONNX blobs,
        which onnxruntime optimizes again at load)."""
        return self.steady_s[platform] / self.cooked_like_s.get(platform, self.steady_s[SOURCE])


def cooked_like(settings: dict) -> tuple[str, bool]:
    """(optimization level, NCHWc allowed) of an ORT-format cook: what its blob runs with."""
    return settings["optimization_level"], settings["arch"] == "x86_64" and bool(settings["allow_nchwc"])


def steady_inference(
    build: Build, assets: Path, model: str, rounds: int, runs_per_round: int, inputs: dict[str, np.ndarray]
) -> InferenceResult:
    """One session per load path, each run once (untimed), then ``rounds`` rounds in which every
    session does ``runs_per_round`` timed runs in a row (rotating order).

    Runs come in short blocks, not one at a time, so that the intra-op threads one session leaves
    spinning after its Run do not land on the next session's. Beside them, for ORT-format blobs
    (which onnxruntime runs as saved, without optimizing them again), the source optimized the way
    that platform's cook does: the same level, NCHWc layouts only where the cook allows them.
    """
    source = str(assets / f"{model}.onnx")
    sessions = {SOURCE: onnxruntime.InferenceSession(source, providers=CPU)}
    references: dict[tuple[str, bool], str] = {}  # (level, nchwc) -> session name
    cooked_like_of: dict[str, str] = {}
    for platform in build.platforms:
        entry = build.manifests[platform].get(model)
        if entry is None:
            continue
        sessions[platform] = session_from_blob(build.blob(platform, model).read_bytes(), providers=CPU)
        if entry["format"] != "ort":
            continue
        level, nchwc = cooked_like(entry["settings"])
        name = references.setdefault(
            (level, nchwc), f"source optimized: {level}, NCHWc {'on' if nchwc else 'off'}"
        )
        if name not in sessions:
            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = LEVELS[level]
            disabled = [] if nchwc else ["NchwcTransformer"]
            sessions[name] = onnxruntime.InferenceSession(
                source, options, providers=CPU, disabled_optimizers=disabled
            )
        cooked_like_of[platform] = name
    for session in sessions.values():
        session.run(None, inputs)
    times: dict[str, list[float]] = {name: [] for name in sessions}
    names = list(sessions)
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            run = sessions[name].run
            for _ in range(runs_per_round):
                start = time.perf_counter()
                run(None, inputs)
                times[name].append(time.perf_counter() - start)
    medians = {k: median(v) for k, v in times.items()}
    return InferenceResult(
        model=model,
        steady_s={k: v for k, v in medians.items() if k == SOURCE or k in build.platforms},
        runs=rounds * runs_per_round,
        cooked_like_s={p: medians[name] for p, name in cooked_like_of.items()},
    )


# --- 3. decompression throughput ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Throughput:
    label: str
    seconds: float
    nbytes: int  # decompressed bytes

    @property
    def gb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e9


@dataclass(frozen=True, kw_only=True)
class Decompression:
    rows: list[Throughput]
    section_bytes: int  # the weights section
    zstd_blob_bytes: int  # the blob with its weights as zstd frames
    raw_blob_bytes: int  # as cooked: weights stored raw
    frames: int  # zstd frames of the weights section
    level: int
    threads: tuple[int, ...]


ZSTD_WEIGHTS = "unpack_blob, weights as zstd frames, {} thread(s)"
RAW_WEIGHTS = "unpack_blob, weights stored raw (as cooked), {} thread(s)"
RAW_UNCHECKED = "unpack_blob(check_raw=False) (Bundle.session), weights stored raw, {} thread(s)"
ORT_GRAPH = "unpack_blob, ORT blob (weights inside its graph section, as cooked), {} thread(s)"
TOUCHED_DECODE = "zstd frames only, into a buffer already touched, {} thread(s)"
FRESH_COPY = "memory copy into a fresh buffer"
TOUCHED_COPY = "memory copy into a touched buffer"


def zstd_weights_blob(blob: bytes, level: int) -> bytes:
    """The same blob with its weights section re-encoded as zstd frames (what ``weights`` codec
    ``zstd`` gives), for a weights section the cook stored raw."""
    unpacked = unpack_blob(blob)
    header = unpacked.header
    assert header.weights is not None
    section = bytearray(header.weights.size)
    for start, view in unpacked.segments:
        section[start : start + len(view)] = view
    fields = {
        k: getattr(header, k)
        for k in (
            "model_format",
            "platform",
            "name",
            "cook_key",
            "min_runtime_version",
            "ort_format_version",
            "saved_runtime_optimizations",
            "execution_providers",
            "provider_options",
            "ep_session_options",
        )
    }
    weights = Weights(data=section, file=header.weights.file, tensors=header.weights.tensors, codec="zstd")
    return encode_blob(unpacked.model, level=level, weights=weights, **fields)


def decompression(build: Build, model: str, repeats: int, thread_counts: Sequence[int]) -> Decompression:
    """unpack_blob on the weights section of ``model`` stored as zstd frames and stored raw (with and
    without the CRC-32 pass over raw frames), on 1 and 2 threads, and on the ORT blob; against
    decoding into a buffer already touched and plain copies.

    Rates are decompressed bytes per second. A copy into a fresh buffer pays the page faults any new
    buffer pays; a copy into a buffer already touched shows the memory bandwidth.
    """
    onnx_platform = build.first_platform("onnx")
    raw_blob = build.blob(onnx_platform, model).read_bytes()
    level = int(build.manifests[onnx_platform][model]["settings"]["compression_level"])
    zstd_blob = zstd_weights_blob(raw_blob, level)
    header, _ = read_header(zstd_blob)
    assert header.weights is not None
    section_bytes = header.weights.size
    frames = [f for f in header.frames if f.section == "weights"]
    ort_blob = build.blob(build.first_platform("ort"), model).read_bytes()
    ort_size = read_header(ort_blob)[0].model_size
    view = memoryview(zstd_blob)
    touched = np.ones(section_bytes, dtype=np.uint8)
    source = np.ones(section_bytes, dtype=np.uint8)

    def copy_into_touched() -> None:
        touched[:] = source

    variants: dict[str, Callable[[], object]] = {}
    sizes: dict[str, int] = {}
    for n in thread_counts:
        variants[ZSTD_WEIGHTS.format(n)] = lambda n=n: unpack_blob(zstd_blob, threads=n)
        variants[TOUCHED_DECODE.format(n)] = lambda n=n: decode_into(view, frames, memoryview(touched), "", n)
        variants[ORT_GRAPH.format(n)] = lambda n=n: unpack_blob(ort_blob, threads=n)
        variants[RAW_WEIGHTS.format(n)] = lambda n=n: unpack_blob(raw_blob, threads=n)
        variants[RAW_UNCHECKED.format(n)] = lambda n=n: unpack_blob(raw_blob, threads=n, check_raw=False)
        sizes[ORT_GRAPH.format(n)] = ort_size
    variants[FRESH_COPY] = lambda: source.copy()
    variants[TOUCHED_COPY] = copy_into_touched
    times = interleaved(variants, repeats, label="decompression")
    return Decompression(
        rows=[
            Throughput(label=k, seconds=median(v), nbytes=sizes.get(k, section_bytes))
            for k, v in times.items()
        ],
        section_bytes=section_bytes,
        zstd_blob_bytes=len(zstd_blob),
        raw_blob_bytes=len(raw_blob),
        frames=len(frames),
        level=level,
        threads=tuple(thread_counts),
    )


# --- 3. sizes -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SizeRow:
    model: str
    source_size: int  # model + external data, as the manifest counts it
    blobs: dict[str, tuple[int, int]]  # platform -> (cooked model size, blob size)


def sizes(build: Build) -> list[SizeRow]:
    models = sorted(set().union(*(m.keys() for m in build.manifests.values())))
    rows = []
    for model in models:
        entries = {p: build.manifests[p][model] for p in build.platforms if model in build.manifests[p]}
        source = next(iter(entries.values()))["source_size"]
        blobs = {p: (e["model_size"], e["blob_size"]) for p, e in entries.items()}
        rows.append(SizeRow(model=model, source_size=source, blobs=blobs))
    return rows


# --- 4. cold cook, sequential and parallel ----------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ColdCook:
    sequential: list[Run]
    parallel: list[Run]  # doit -n 2
    tasks: int
    ceiling: list[tuple[float, float]]  # (one burn alone, two burns at once), wall seconds

    @property
    def speedup(self) -> float:
        return median([r.wall_s for r in self.sequential]) / median([r.wall_s for r in self.parallel])

    @property
    def cpu_growth(self) -> float:
        """CPU seconds of the -n 2 cook over the sequential cook's: 1.0 when running two at once is free."""
        return median([r.cpu_s for r in self.parallel]) / median([r.cpu_s for r in self.sequential])

    @property
    def machine_ceiling(self) -> float:
        """What two processes at once gain on this machine for a fixed CPU-bound workload (2.0 ideal)."""
        return 2 * median([alone for alone, _ in self.ceiling]) / median([two for _, two in self.ceiling])


def cold_cook(
    project: Path, assets: str, repeats: int, logs: Path, keep: str, burn_scale: int, runtimes: Path
) -> ColdCook:
    """Cook from scratch, alternately with ``doit cook`` and ``doit -n 2 cook``, each round followed by
    the machine's own two-process ceiling; ``keep`` is the build folder (under ``project``) of the
    first sequential run, kept for the other measurements."""
    runs: dict[str, list[Run]] = {"sequential": [], "parallel": []}
    ceiling = []
    for i in range(repeats):
        order = ["sequential", "parallel"] if i % 2 == 0 else ["parallel", "sequential"]
        for kind in order:
            build = keep if (kind == "sequential" and i == 0) else f"build-cold-{kind}-{i}"
            args = ["cook"] if kind == "sequential" else ["-n", "2", "cook"]
            print(f"  cold cook {i + 1}/{repeats}: doit {' '.join(args)}", file=sys.stderr)
            log = logs / f"{build}.log"
            runs[kind].append(doit(project, args, assets=assets, build=build, runtimes=runtimes, log=log))
            if build != keep:
                shutil.rmtree(project / build)
        ceiling.append((_burn(1, burn_scale), _burn(2, burn_scale)))
    # doit prints ".  cook:<platform>:<model>" per cook and ".  cook:<platform>" per manifest.
    tasks = sum(
        line.startswith(".  cook:") and line.count(":") == 2
        for line in (logs / f"{keep}.log").read_text().splitlines()
    )
    return ColdCook(sequential=runs["sequential"], parallel=runs["parallel"], tasks=tasks, ceiling=ceiling)


def _burn(copies: int, scale: int) -> float:
    """Wall seconds for ``copies`` processes of bench.burn started together."""
    start = time.perf_counter()
    processes = [
        subprocess.Popen([sys.executable, "-m", "bench.burn", str(scale)], cwd=REPO) for _ in range(copies)
    ]
    if any(process.wait() != 0 for process in processes):
        raise BenchError("python -m bench.burn failed")
    return time.perf_counter() - start


# --- 5. no-op cook as the project grows --------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NoOp:
    models: int
    platforms: int
    times_s: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return median(self.times_s)


def noop_scaling(
    project: Path, counts: Sequence[int], platforms: int, repeats: int, logs: Path, runtimes: Path
) -> list[NoOp]:
    """For each model count: cook a fresh copy of the examples (untimed, ``-n 2``), then time no-op cooks
    of every size side by side."""
    counts = list(counts)
    results = {}
    for count in counts:
        assets = f"assets-{count}"
        replicate_examples(project / assets, count)
        print(f"  no-op: cooking {count} models x {platforms} platforms first", file=sys.stderr)
        doit(
            project,
            ["-n", "2", "cook"],
            assets=assets,
            build=f"build-{count}",
            runtimes=runtimes,
            log=logs / f"noop-{count}.log",
        )
        results[count] = NoOp(models=count, platforms=platforms)

    def noop(count: int) -> float:
        log = logs / f"noop-{count}-again.log"
        run = doit(
            project, ["cook"], assets=f"assets-{count}", build=f"build-{count}", runtimes=runtimes, log=log
        )
        executed = [line for line in log.read_text().splitlines() if line.startswith(".  ")]
        if executed:
            raise BenchError(f"the no-op cook of {count} models ran tasks: {executed[:3]}; see {log}")
        return run.wall_s

    # The first no-op after a cook is untimed (warm-up): doit records the new files' state then.
    for count in counts:
        noop(count)
    for round_ in range(repeats):
        for count in counts[round_ % len(counts) :] + counts[: round_ % len(counts)]:
            results[count].times_s.append(noop(count))
        print(f"  no-op cook: round {round_ + 1}/{repeats}", file=sys.stderr)
    return [results[count] for count in counts]


# --- 7. peak memory -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MemoryRow:
    platform: str
    model_format: str
    mode: str
    model_size: int  # the cooked model (graph + weights), as its blob header states it
    extra_bytes: int  # median of VmHWM after loading minus VmRSS after the imports
    final_bytes: int  # median of VmRSS after loading (what stays) minus VmRSS after the imports

    @property
    def multiple(self) -> float:
        return self.extra_bytes / self.model_size


MEMORY_MODES = (
    "session_from_blob",
    "session_from_blob_noprepack",
    "bundle_session",
    "unpack_blob",
    "ort_bytes",
    "ort_file",
)


def peak_memory(build: Build, assets: Path, model: str, repeats: int, scratch: Path) -> list[MemoryRow]:
    """Each load mode in a fresh interpreter, per model format (the first platform using it).

    onnxruntime alone is given, for ORT format, the cooked model file the blob holds; for ONNX, the
    source model: its file with the weights beside it (``ort_file``), or one file with the weights
    inline, read into memory (``ort_bytes``; an ONNX model with external data cannot load from bytes).
    """
    rows = []
    for fmt in ("ort", "onnx"):
        platform = build.first_platform(fmt)
        blob = build.blob(platform, model)
        model_size = read_header(blob.read_bytes())[0].model_size
        if fmt == "ort":
            plain = scratch / f"{model}.ort"
            plain.write_bytes(unpack_blob(blob.read_bytes()).model)
            plain_file = plain
        else:
            plain = scratch / f"{model}.inline.onnx"
            onnx.save_model(onnx.load(str(assets / f"{model}.onnx")), str(plain))
            plain_file = assets / f"{model}.onnx"
        paths = {"ort_bytes": plain, "ort_file": plain_file}
        for mode in MEMORY_MODES:
            probes = [probe(mode, paths.get(mode, blob), project=build.root.parent) for _ in range(repeats)]
            rows.append(
                MemoryRow(
                    platform=platform,
                    model_format=fmt,
                    mode=mode,
                    model_size=model_size,
                    extra_bytes=int(median([p["peak_hwm"] - p["baseline_rss"] for p in probes])),
                    final_bytes=int(median([p["final_rss"] - p["baseline_rss"] for p in probes])),
                )
            )
        plain.unlink()
    return rows


def probe(mode: str, path: Path, *args: str, project: Path, allow_error: bool = False) -> dict:
    """``python -m bench.probe``'s answer; with ``allow_error``, a failed load is an answer too
    (``{"error": ...}``), not a failed benchmark.

    The probe imports the loader from ``project`` (the copy the blobs were cooked with), not from
    the repository, which may have changed since the run started.
    """
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    completed = subprocess.run(
        [sys.executable, "-m", "bench.probe", mode, str(path), *args],
        cwd=project,  # first on sys.path: its onnx_cooker/ wins over the repository's
        env=env,
        capture_output=True,
        text=True,
    )
    lines = completed.stdout.strip().splitlines()
    if completed.returncode == 0 or (allow_error and completed.returncode == PROBE_LOAD_FAILED and lines):
        return json.loads(lines[-1])
    raise BenchError(f"memory probe {mode} {path} failed:\n{completed.stderr[-2000:]}")


# --- 8. a model over 2 GB ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class HugeCook:
    platform: str
    cooked: bool
    message: str  # the cook's error, or what the blob holds
    blob_size: int | None = None
    default_load: dict | None = None  # probe of session_from_blob(bytes) with the loader's default limit
    raised_load: dict | None = None  # ... with max_model_size raised past the model


@dataclass(frozen=True, kw_only=True)
class Huge:
    model: str
    source_size: int  # model + external data
    tensors_bytes: int
    generate_s: float
    cook: Run
    cooks: list[HugeCook]
    source_load: dict  # probe of onnxruntime.InferenceSession(<source path>)


def huge_model(
    project: Path, sizes: models.Sizes, platforms: Sequence[str], runtimes: Path, logs: Path
) -> Huge:
    """Generate the >2 GB model in its own assets folder, ``doit --continue cook`` it for every
    platform (one cook at a time: each holds the model in memory), and record what happens: which
    platforms cook it or fail with which message, and whether the loader and onnxruntime load it."""
    assets = project / "assets-huge"
    assets.mkdir()
    start = time.perf_counter()
    path = models.write_huge_weights(assets, sizes)
    generate_s = time.perf_counter() - start
    source_size = sum(p.stat().st_size for p in assets.iterdir())
    log = logs / "huge-cook.log"
    print(
        f"  {models.HUGE_WEIGHTS}: {source_size / 1e9:.2f} GB written; cooking (log: {log})", file=sys.stderr
    )
    cook = doit(
        project,
        ["--continue", "cook"],
        assets=assets.name,
        build="build-huge",
        runtimes=runtimes,
        log=log,
        check=False,
    )
    text = log.read_text(errors="replace")
    cooks = []
    for platform in platforms:
        platform_dir = project / "build-huge" / platform
        blob = blob_path(platform_dir, models.HUGE_WEIGHTS, "ort")
        blob = blob if blob.is_file() else blob_path(platform_dir, models.HUGE_WEIGHTS, "onnx")
        if not blob.is_file():
            cooks.append(HugeCook(platform=platform, cooked=False, message=_failure(text, platform)))
            continue
        with blob.open("rb") as stream:
            header = read_header(stream.read(MAX_HEADER_SIZE + 16))[0]
        weights = (
            "in the graph"
            if header.weights is None
            else f"{header.weights.size:,} bytes in a weights section"
        )
        limit = str(1 << 40)
        cooks.append(
            HugeCook(
                platform=platform,
                cooked=True,
                message=f"{header.model_format} blob, model {header.model_size:,} bytes, weights {weights}",
                blob_size=blob.stat().st_size,
                default_load=probe("session_from_blob", blob, project=project, allow_error=True),
                raised_load=probe("session_from_blob", blob, limit, project=project, allow_error=True),
            )
        )
    source_load = probe("ort_file", path, project=project, allow_error=True)
    return Huge(
        model=models.HUGE_WEIGHTS,
        source_size=source_size,
        tensors_bytes=sizes.huge_bytes,
        generate_s=generate_s,
        cook=cook,
        cooks=cooks,
        source_load=source_load,
    )


def _failure(log: str, platform: str) -> str:
    """The first line of the log that names the platform's failed cook (doit prints TaskError/
    TaskFailed reports at the end), else its last lines."""
    lines = log.splitlines()
    tag = f"platform {platform!r}"
    for line in lines:
        if tag in line and models.HUGE_WEIGHTS in line:
            return line.strip()
    return " / ".join(line.strip() for line in lines[-3:] if line.strip()) or "no output"
