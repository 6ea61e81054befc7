"""The six measurements. Each returns plain numbers; ``bench.report`` judges them against the targets."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime
import zstandard

from pipeline.runtime import decode_blob, read_header, session_from_blob

from .project import REPO, BenchError, Run, doit, replicate_examples
from .timing import interleaved, median

CPU = ["CPUExecutionProvider"]


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


# --- 1. session-ready time ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    model: str
    source_s: float  # onnxruntime.InferenceSession(<source .onnx path>), default options
    session_s: dict[str, float]  # platform -> session_from_blob(bytes)
    decode_s: dict[str, float]  # platform -> decode_blob(bytes), the integrity checks + zstd part


def load_time(build: Build, assets: Path, model: str, repeats: int) -> LoadResult:
    source = str(assets / f"{model}.onnx")
    blobs = {p: build.blob(p, model).read_bytes() for p in build.platforms}
    variants = {"source": lambda: onnxruntime.InferenceSession(source, providers=CPU)}
    for platform, blob in blobs.items():
        variants[f"session:{platform}"] = lambda blob=blob: session_from_blob(blob, providers=CPU)
        variants[f"decode:{platform}"] = lambda blob=blob: decode_blob(blob)
    times = interleaved(variants, repeats, label=f"load {model}")
    return LoadResult(
        model=model,
        source_s=median(times["source"]),
        session_s={p: median(times[f"session:{p}"]) for p in blobs},
        decode_s={p: median(times[f"decode:{p}"]) for p in blobs},
    )


# --- 2. decompression throughput ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Throughput:
    label: str
    seconds: float
    nbytes: int

    @property
    def gb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e9


def decompression(build: Build, model: str, repeats: int) -> list[Throughput]:
    """decode_blob per format, and its parts, against copying the same number of bytes.

    Every rate is in decompressed (model) bytes per second. A copy into a fresh buffer pays the page
    faults that any new model buffer pays; a copy into a buffer already touched shows the bandwidth.
    """
    blobs = {fmt: build.blob(build.first_platform(fmt), model).read_bytes() for fmt in ("ort", "onnx")}
    ort_blob = blobs["ort"]
    _, offset = read_header(ort_blob)
    frame = memoryview(ort_blob)[offset:]
    _, plain = decode_blob(ort_blob)
    source = bytearray(plain)
    touched = bytearray(len(source))

    def copy_into_touched() -> None:
        touched[:] = source

    variants = {f"decode_blob ({fmt} blob)": lambda b=b: decode_blob(b) for fmt, b in blobs.items()}
    variants |= {
        "zstd decompress only (ort blob)": lambda: zstandard.ZstdDecompressor().decompress(frame),
        "sha256 of the model only": lambda: hashlib.sha256(plain).digest(),
        "memory copy into a fresh buffer": lambda: bytes(source),
        "memory copy into a touched buffer": copy_into_touched,
    }
    times = interleaved(variants, repeats, label="decompression")
    sizes = {f"decode_blob ({fmt} blob)": len(decode_blob(b)[1]) for fmt, b in blobs.items()}
    return [Throughput(label=k, seconds=median(v), nbytes=sizes.get(k, len(plain))) for k, v in times.items()]


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


# --- 6. peak memory -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MemoryRow:
    platform: str
    model_format: str
    mode: str
    model_size: int
    extra_bytes: int  # median of VmHWM after loading minus VmRSS after the imports

    @property
    def multiple(self) -> float:
        return self.extra_bytes / self.model_size


def peak_memory(build: Build, model: str, repeats: int, scratch: Path) -> list[MemoryRow]:
    """Each load mode in a fresh interpreter, per model format (the first platform using it)."""
    rows = []
    for fmt in ("ort", "onnx"):
        platform = build.first_platform(fmt)
        blob = build.blob(platform, model)
        plain = scratch / f"{model}.{fmt}"
        plain.write_bytes(decode_blob(blob.read_bytes())[1])
        for mode, path in (
            ("session_from_blob", blob),
            ("bundle_session", blob),
            ("decode_blob", blob),
            ("ort_bytes", plain),
            ("ort_file", plain),
        ):
            probes = [_probe(mode, path) for _ in range(repeats)]
            rows.append(
                MemoryRow(
                    platform=platform,
                    model_format=fmt,
                    mode=mode,
                    model_size=probes[0]["model_size"],
                    extra_bytes=int(median([p["peak_hwm"] - p["baseline_rss"] for p in probes])),
                )
            )
        plain.unlink()
    return rows


def _probe(mode: str, path: Path) -> dict:
    completed = subprocess.run(
        [sys.executable, "-m", "bench.probe", mode, str(path)], cwd=REPO, capture_output=True, text=True
    )
    if completed.returncode != 0:
        raise BenchError(f"memory probe {mode} {path} failed:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])
