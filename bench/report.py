"""``bench/results.md``: the machine, every measurement next to its target, and why a target is missed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from onnx_cooker.runtime.frames import RAW_CRC_PIECE

from .measure import (
    FRESH_COPY,
    ORT_GRAPH,
    RAW_WEIGHTS,
    SOURCE,
    TOUCHED_COPY,
    TOUCHED_DECODE,
    ZSTD_WEIGHTS,
    ColdCook,
    Decompression,
    Huge,
    InferenceResult,
    LoadResult,
    MemoryRow,
    NoOp,
    SizeRow,
)
from .project import Run
from .timing import median

# Targets, in one place: the summary table and each section use these.
# Issue 11: session-ready time, blob in memory vs source .onnx file, geomean over every model.
ORT_GEOMEAN_TARGET = 2.0
ONNX_GEOMEAN_TARGET = 1.3
SLOWEST_TARGET = 1.0  # no model's blob slower than its source
GRAPH_SPEEDUP_TARGET = 4.0  # large_graph
# Issue 5: the loader's own checks + decompression, of the session-ready time (large_graph, ORT).
UNPACK_SHARE_TARGET = 0.15
# Issue 11: decompression of the large-weights section stored as zstd frames, on this many threads.
DECOMPRESSION_TARGET_GBPS = 1.8
DECOMPRESSION_TARGET_THREADS = 2
# Issue 11: a blob session's steady-state Run time over the source session's.
INFERENCE_TARGET = 1.05
# Issue 11: peak extra resident memory loading the large-weights model, in model sizes.
MEMORY_TARGETS = {"session_from_blob": 2.0, "bundle_session": 1.5}
# Issue 5: cooking.
PARALLEL_TARGET = 1.7
NOOP_TARGET_S = 1.5
NOOP_TARGET_MODELS = 100
# "No faster than linear": the cost of each added model may not grow by more than this between
# the smaller and the larger sizes (slack for a noisy machine).
NOOP_LINEAR_SLACK = 1.5

MET, MISSED = "met", "**missed**"


@dataclass(frozen=True, kw_only=True)
class InputModel:
    name: str
    kind: str
    nodes: int
    source_size: int  # model + external data
    onnx_weights: str  # where the ONNX blob keeps the weights


@dataclass(frozen=True, kw_only=True)
class Results:
    quick: bool
    machine: Mapping[str, str]
    repeats: Mapping[str, int]
    inputs: Sequence[InputModel]
    platforms: Mapping[str, str]  # platform -> format
    graph_model: str
    weights_model: str
    huge_model: str
    huge_bytes: int  # what --huge would generate
    load: Sequence[LoadResult]
    inference: Sequence[InferenceResult]
    decompression: Decompression
    sizes: Sequence[SizeRow]
    cold: ColdCook
    noop: Sequence[NoOp]
    memory: Sequence[MemoryRow]
    huge: Huge | None
    duration_s: float


def _verdict(ok: bool, quick: bool) -> str:
    if quick:
        return "not judged (quick mode: tiny inputs)"
    return MET if ok else MISSED


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}" if seconds >= 0.01 else f"{seconds * 1000:,.2f}"


def _mb(nbytes: float) -> str:
    if nbytes >= 1e9:
        return f"{nbytes / 1e9:,.2f} GB"
    return f"{nbytes / 1e6:,.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:,.1f} kB"


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def _pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return lines


def _cell(value: object) -> str:
    return " ".join(str(value).replace("|", "\\|").split())


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


class Judged:
    """Every target's measurement and verdict, computed once for the summary and the sections."""

    def __init__(self, r: Results) -> None:
        self.r = r
        self.ort = [p for p, fmt in r.platforms.items() if fmt == "ort"]
        self.onnx = [p for p, fmt in r.platforms.items() if fmt == "onnx"]
        # 1. session-ready time
        self.speedups = {
            p: {ld.model: ld.speedup(p) for ld in r.load if p in ld.ready_s} for p in r.platforms
        }
        self.geomeans = {p: geomean(list(v.values())) for p, v in self.speedups.items()}
        self.ort_ok = all(self.geomeans[p] >= ORT_GEOMEAN_TARGET for p in self.ort)
        self.onnx_ok = all(self.geomeans[p] >= ONNX_GEOMEAN_TARGET for p in self.onnx)
        self.slowest = {p: min(v.items(), key=lambda item: item[1]) for p, v in self.speedups.items()}
        self.slowest_ok = all(ratio >= SLOWEST_TARGET for _, ratio in self.slowest.values())
        self.graph = next(ld for ld in r.load if ld.model == r.graph_model)
        self.graph_speedups = {p: self.graph.speedup(p) for p in r.platforms}
        self.graph_ok = min(self.graph_speedups.values()) >= GRAPH_SPEEDUP_TARGET
        self.unpack_shares = {p: self.graph.unpack_s[p] / self.graph.ready_s[p] for p in self.ort}
        self.share_ok = max(self.unpack_shares.values()) < UNPACK_SHARE_TARGET
        # 2. inference
        self.inference = {
            p: {i.model: i.ratio(p) for i in r.inference if p in i.steady_s} for p in r.platforms
        }
        self.inference_worst = {
            p: max(v.items(), key=lambda item: item[1]) for p, v in self.inference.items()
        }
        self.inference_ok = all(ratio <= INFERENCE_TARGET for _, ratio in self.inference_worst.values())
        cooked_like = {
            p: {i.model: i.cooked_like_ratio(p) for i in r.inference if p in i.cooked_like_s}
            for p in self.ort
        }
        self.cooked_like_worst = {
            p: max(v.items(), key=lambda item: item[1]) for p, v in cooked_like.items() if v
        }
        # 3. decompression
        by = {t.label: t for t in r.decompression.rows}
        self.decompression = by
        self.zstd_rates = {n: by[ZSTD_WEIGHTS.format(n)].gb_per_s for n in r.decompression.threads}
        self.decompression_ok = (
            self.zstd_rates.get(DECOMPRESSION_TARGET_THREADS, 0.0) >= DECOMPRESSION_TARGET_GBPS
        )
        # 5., 6. cooking
        self.parallel_ok = r.cold.speedup >= PARALLEL_TARGET
        largest = r.noop[-1]
        self.noop_largest = largest
        self.noop_ok = largest.median_s < NOOP_TARGET_S and largest.models >= NOOP_TARGET_MODELS
        self.marginal = _marginal_costs(r.noop)
        self.linear_ok = self.marginal[-1] <= NOOP_LINEAR_SLACK * max(self.marginal[0], 1e-3)
        # 7. memory
        self.memory = {
            mode: {f"{m.model_format} ({m.platform})": m.multiple for m in r.memory if m.mode == mode}
            for mode in MEMORY_TARGETS
        }
        self.memory_ok = {
            mode: max(values.values()) <= MEMORY_TARGETS[mode] for mode, values in self.memory.items()
        }

    def summary(self) -> list[str]:
        r, q = self.r, self.r.quick
        rates = self.zstd_rates
        others = ", ".join(
            f"{n} thread(s): {v:.2f} GB/s" for n, v in rates.items() if n != DECOMPRESSION_TARGET_THREADS
        )
        raw = self.decompression.get(RAW_WEIGHTS.format(1))
        rows = [
            [
                "1",
                "session-ready time, geomean over all models, ORT-format blobs vs source .onnx",
                f">= {ORT_GEOMEAN_TARGET:g}x faster",
                ", ".join(f"{_x(self.geomeans[p])} ({p})" for p in self.ort),
                _verdict(self.ort_ok, q),
            ],
            [
                "1",
                "session-ready time, geomean over all models, ONNX blobs vs source .onnx",
                f">= {ONNX_GEOMEAN_TARGET:g}x faster",
                ", ".join(f"{_x(self.geomeans[p])} ({p})" for p in self.onnx),
                _verdict(self.onnx_ok, q),
            ],
            [
                "1",
                "session-ready time, slowest model's blob vs its source .onnx",
                f">= {SLOWEST_TARGET:.1f}x (no model slower)",
                ", ".join(f"{_x(v)} {m} ({p})" for p, (m, v) in self.slowest.items()),
                _verdict(self.slowest_ok, q),
            ],
            [
                "1",
                f"session-ready time, {r.graph_model}, blob vs source .onnx",
                f">= {GRAPH_SPEEDUP_TARGET:g}x faster",
                ", ".join(f"{_x(v)} ({p})" for p, v in self.graph_speedups.items()),
                _verdict(self.graph_ok, q),
            ],
            [
                "1",
                "share of the loader's checks + decompression in that time, ORT-format blobs",
                f"< {UNPACK_SHARE_TARGET:.0%}",
                ", ".join(f"{_pct(v)} ({p})" for p, v in self.unpack_shares.items()),
                _verdict(self.share_ok, q),
            ],
            [
                "2",
                "steady-state inference, blob session vs source-file session, slowest model",
                f"<= {INFERENCE_TARGET:.2f}x (at most 5% slower)",
                ", ".join(f"{_x(v)} {m} ({p})" for p, (m, v) in self.inference_worst.items()),
                _verdict(self.inference_ok, q),
            ],
            [
                "2",
                "the same, ORT-format blob vs the source optimized as its platform's cook does",
                "none (reported)",
                ", ".join(f"{_x(v)} {m} ({p})" for p, (m, v) in self.cooked_like_worst.items()),
                "-",
            ],
            [
                "3",
                f"decompression of the {r.weights_model} weights section as zstd frames, "
                f"{DECOMPRESSION_TARGET_THREADS} threads",
                f">= {DECOMPRESSION_TARGET_GBPS:g} GB/s",
                f"{rates.get(DECOMPRESSION_TARGET_THREADS, 0.0):.2f} GB/s ({others}; stored raw as cooked: "
                f"{_ms(raw.seconds) if raw else '-'} ms, its CRC-32s only)",
                _verdict(self.decompression_ok, q),
            ],
            ["4", "blob size vs source size, per platform", "none (reported)", _size_summary(r), "-"],
            [
                "5",
                "`doit -n 2 cook` speedup over `doit cook`, cold",
                f">= {PARALLEL_TARGET:g}x",
                f"{_x(r.cold.speedup)} (this machine's two-process ceiling: {_x(r.cold.machine_ceiling)})",
                _verdict(self.parallel_ok, q),
            ],
            [
                "6",
                f"no-op `doit cook`, {NOOP_TARGET_MODELS} models x 4 platforms",
                f"< {NOOP_TARGET_S:g} s",
                f"{self.noop_largest.median_s:.2f} s at {self.noop_largest.models} models x "
                f"{self.noop_largest.platforms} platforms",
                _verdict(self.noop_ok, q),
            ],
            [
                "6",
                "no-op cost growth with the number of models",
                "no faster than linear",
                "cost per added model: " + " then ".join(f"{m * 1000:.1f} ms" for m in self.marginal),
                _verdict(self.linear_ok, q),
            ],
            [
                "7",
                f"peak extra memory loading {r.weights_model} with `session_from_blob(bytes)`, "
                "the caller's blob included",
                f"<= {MEMORY_TARGETS['session_from_blob']:g}x model size",
                ", ".join(f"{_x(v)} ({k})" for k, v in self.memory["session_from_blob"].items()),
                _verdict(self.memory_ok["session_from_blob"], q),
            ],
            [
                "7",
                f"peak extra memory loading {r.weights_model} with `Bundle.session`",
                f"<= {MEMORY_TARGETS['bundle_session']:g}x model size",
                ", ".join(f"{_x(v)} ({k})" for k, v in self.memory["bundle_session"].items()),
                _verdict(self.memory_ok["bundle_session"], q),
            ],
            [
                "8",
                "a model over 2 GB: cooks, or fails with a clear message",
                "recorded (no target)",
                _huge_summary(r),
                "-",
            ],
        ]
        return _table(["#", "measurement", "target", "measured", "result"], rows)


def _marginal_costs(noop: Sequence[NoOp]) -> list[float]:
    """Seconds per added model between consecutive sizes."""
    return [
        (b.median_s - a.median_s) / (b.models - a.models) for a, b in zip(noop, noop[1:], strict=False)
    ] or [0.0]


def _size_summary(r: Results) -> str:
    totals = []
    for platform in r.platforms:
        source = sum(row.source_size for row in r.sizes if platform in row.blobs)
        blob = sum(row.blobs[platform][1] for row in r.sizes if platform in row.blobs)
        totals.append(f"{source / blob:.2f}x smaller ({platform})")
    return "all models: " + ", ".join(totals)


def _huge_summary(r: Results) -> str:
    if r.huge is None:
        return "not run (`python -m bench --huge`)"
    cooked = [c.platform for c in r.huge.cooks if c.cooked]
    failed = [c.platform for c in r.huge.cooks if not c.cooked]
    parts = []
    if cooked:
        parts.append(f"cooks for {', '.join(cooked)}")
    if failed:
        parts.append(f"refused for {', '.join(failed)} (section 8)")
    return f"{_mb(r.huge.source_size)}: " + "; ".join(parts)


def render(r: Results) -> str:
    judged = Judged(r)
    mode = "`--quick` smoke run: tiny inputs, the numbers mean nothing" if r.quick else "full run"
    lines = [
        "# onnx-cooker benchmarks",
        "",
        f"Written by `python -m bench` ({mode}) on {r.machine['date']} in {r.duration_s / 60:.1f} min. "
        "Every number is the median of several runs, and every result is a ratio against its alternative "
        "measured in the same run, side by side (variants alternate within each round), because the "
        "machine is shared and noisy. Regenerate with `python -m bench` (full), "
        "`python -m bench --huge` (full, plus a model over 2 GB) or `python -m bench --quick` (seconds, "
        "what CI runs).",
        "",
        "## Machine",
        "",
        *_table(["", ""], list(r.machine.items())),
        "",
        "## Inputs",
        "",
        f"{len(r.inputs)} models: the synthetic ones are built by `bench/models.py` (onnx + numpy, seeded; "
        "weights drawn like trained ones, normal with small std and a scale per output channel, which zstd "
        "compresses about as much as real float32 weights), the others are the example assets. The deep "
        "generated models verify with `rtol: 1e-3, atol: 1e-4` (their `.cook.yaml`), as users of such "
        "models set them.",
        "",
        *_table(
            ["model", "kind", "nodes", "source (model + data)", "ONNX blob (windows-dml) weights"],
            [[m.name, m.kind, f"{m.nodes:,}", _mb(m.source_size), m.onnx_weights] for m in r.inputs],
        ),
        "",
        f"- `{r.huge_model}` (only with `--huge`): the `{r.weights_model}` layout at "
        f"{_mb(r.huge_bytes)} of weights, over the 2 GB a protobuf (and an ORT-format file) can hold",
        "- platforms: " + ", ".join(f"{p} ({fmt})" for p, fmt in r.platforms.items()),
        "- runs per measurement (medians over these): " + ", ".join(f"{k} {v}" for k, v in r.repeats.items()),
        "",
        "## Targets",
        "",
        *judged.summary(),
        "",
        *_load_section(r, judged),
        *_inference_section(r, judged),
        *_decompression_section(r, judged),
        *_size_section(r),
        *_cold_section(r, judged),
        *_noop_section(r, judged),
        *_memory_section(r, judged),
        *_huge_section(r),
    ]
    return "\n".join(lines) + "\n"


def _load_section(r: Results, j: Judged) -> list[str]:
    platforms = list(r.platforms)
    rows = []
    for load in r.load:
        cells = [load.model, _ms(load.source_s)]
        for p in platforms:
            cells.append(
                f"{_ms(load.ready_s[p])} ({_x(load.speedup(p))})" if p in load.ready_s else "not cooked"
            )
        rows.append(cells)
    rows.append(["**geomean speedup**", ""] + [f"**{_x(j.geomeans[p])}**" for p in platforms])
    share_rows = []
    for load in r.load:
        cells = [load.model]
        for p in platforms:
            if p in load.unpack_s:
                cells.append(f"{_ms(load.unpack_s[p])} ({_pct(load.unpack_s[p] / load.ready_s[p])})")
            else:
                cells.append("")
        share_rows.append(cells)
    header = ["model", "source .onnx, ms"] + [f"{p} ({r.platforms[p]}), ms (speedup)" for p in platforms]
    lines = [
        "## 1. Session-ready time",
        "",
        "Time until the session is ready: "
        '`session_from_blob(bytes, providers=["CPUExecutionProvider"])` on a cooked blob already in '
        "memory, against `onnxruntime.InferenceSession(<source .onnx path>, "
        'providers=["CPUExecutionProvider"])` with default options (what users do today: full graph '
        "optimization at load); in brackets, source time / blob time (above 1 = the blob is faster). "
        "Each round creates every session once (then runs it once, section 2) in rotating order.",
        "",
        f"Targets: geomean over all models at least {ORT_GEOMEAN_TARGET:g}x for ORT-format blobs "
        f"({_verdict(j.ort_ok, r.quick)}) and {ONNX_GEOMEAN_TARGET:g}x for ONNX blobs "
        f"({_verdict(j.onnx_ok, r.quick)}); no model slower than its source "
        f"({_verdict(j.slowest_ok, r.quick)}); `{r.graph_model}` at least {GRAPH_SPEEDUP_TARGET:g}x "
        f"({_verdict(j.graph_ok, r.quick)}).",
        "",
        *_table(header, rows),
        "",
        "The loader's own share: `unpack_blob(bytes)` alone (header and frame checks, zstd frames "
        "decoded in parallel with their content checksums, raw weights checked by their CRC-32s and used "
        "in place), timed in the same "
        "rounds, and its share of the session-ready time. Target: under "
        f"{UNPACK_SHARE_TARGET:.0%} for `{r.graph_model}`'s ORT-format blobs "
        f"({_verdict(j.share_ok, r.quick)}).",
        "",
        *_table(["model"] + [f"{p}, ms (share)" for p in platforms], share_rows),
        "",
    ]
    slower = [(p, m, v) for p, values in j.speedups.items() for m, v in values.items() if v < SLOWEST_TARGET]
    if slower and not r.quick:
        lines += [
            "Slower than the source: "
            + ", ".join(f"`{m}` on {p} ({_x(v)})" for p, m, v in sorted(slower, key=lambda t: t[2]))
            + ".",
            "",
        ]
    if not (j.ort_ok and j.onnx_ok and j.slowest_ok and j.graph_ok) and not r.quick:
        lines += _load_why(r, j)
    return lines


def _load_why(r: Results, j: Judged) -> list[str]:
    """Where the session-ready time goes, from the numbers above and in sections 3 and 7."""
    lines = ["Why missed:", ""]
    by_model = {load.model: load for load in r.load}
    sizes = {m.name: m.source_size for m in r.inputs}
    heavy = sorted(
        (
            m
            for m in by_model
            if sizes.get(m, 0) >= 1e6 and j.ort and min(by_model[m].speedup(p) for p in j.ort) < 1.0
        ),
        key=lambda m: min(by_model[m].speedup(p) for p in j.ort),
    )
    if heavy:
        shares = [by_model[m].unpack_s[p] / by_model[m].ready_s[p] for m in heavy for p in j.ort]
        rate = j.decompression.get(ORT_GRAPH.format(DECOMPRESSION_TARGET_THREADS))
        listed = ", ".join(
            f"`{m}` ({_x(min(by_model[m].speedup(p) for p in j.ort))} at worst)" for m in heavy
        )
        lines.append(
            f"- ORT format, models with weights (over 1 MB) that lose: {listed}. An ORT-format blob keeps "
            "the weights inside its graph section (raw under the default `compression: speed`): "
            "`unpack_blob`, timed alone, checks every weight byte's CRC-32 and copies them into new bytes"
            + (
                f" at {rate.gb_per_s:.2f} GB/s on {DECOMPRESSION_TARGET_THREADS} threads (section 3)"
                if rate
                else ""
            )
            + f", {_pct(min(shares))} to {_pct(max(shares))} of their session-ready time (table above), "
            "where `session_from_blob` hands the section to onnxruntime in place and checks the CRC-32s "
            "beside the build. What remains is onnxruntime building the session (section 7) and the "
            "loader's fixed cost, against reading a file."
        )
    tiny = [m for m in by_model if sizes.get(m, 0) < 1e5]
    if tiny:
        unpack = median([by_model[m].unpack_s[p] for m in tiny for p in by_model[m].unpack_s])
        source = median([by_model[m].source_s for m in tiny])
        lines.append(
            f"- Small models ({len(tiny)} under 100 kB): a session takes about {_ms(source)} ms either "
            f"way; the loader's fixed cost, {_ms(unpack)} ms of `unpack_blob` per blob in these rounds "
            "(JSON header, frame checks, a zstd context per frame), decides the ratio."
        )
    if j.onnx:
        weights = by_model.get(r.weights_model)
        graph = j.graph
        text = (
            "- ONNX blobs (" + ", ".join(j.onnx) + "): onnxruntime parses and optimizes an ONNX graph "
            "again at load (the blob's is pre-optimized at the platform's level, which only shortens "
            f"that): `{r.graph_model}` gains {', '.join(_x(graph.speedup(p)) for p in j.onnx)}, where "
            "ORT-format blobs skip that work"
        )
        if weights is not None:
            text += (
                f"; `{r.weights_model}` ({', '.join(_x(weights.speedup(p)) for p in j.onnx)}) pays "
                "onnxruntime's copy of the weights handed over with `add_external_initializers` "
                "(section 7, prepacking-off line) on top of the MatMul prepacking both paths pay, and "
                "`unpack_blob`'s CRC-32 pass over the raw weights "
                f"({', '.join(_ms(weights.unpack_s[p]) for p in j.onnx)} ms)"
            )
        lines.append(text + ".")
    return lines + [""]


def _inference_section(r: Results, j: Judged) -> list[str]:
    platforms = list(r.platforms)
    runs = r.inference[0].runs if r.inference else 0
    steady = []
    for inf in r.inference:
        cells = [inf.model, _ms(inf.steady_s[SOURCE])]
        for p in platforms:
            if p not in inf.steady_s:
                cells.append("not cooked")
            elif p in inf.cooked_like_s:
                cells.append(f"{_ms(inf.steady_s[p])} ({_x(inf.ratio(p))}; {_x(inf.cooked_like_ratio(p))})")
            else:
                cells.append(f"{_ms(inf.steady_s[p])} ({_x(inf.ratio(p))})")
        steady.append(cells)
    first = []
    for load in r.load:
        cells = [load.model, _ms(load.first_run_s[SOURCE])]
        for p in platforms:
            if p in load.first_run_s:
                cells.append(
                    f"{_ms(load.first_run_s[p])} ({_x(load.first_run_s[p] / load.first_run_s[SOURCE])})"
                )
            else:
                cells.append("not cooked")
        first.append(cells)
    header = ["model", "source session, ms"] + [f"{p} blob session, ms (x source)" for p in platforms]
    lines = [
        "## 2. Inference time",
        "",
        "What a session loaded from a blob costs later, per load path (the source file, or each "
        "platform's blob), on the inputs the cook verified with. Steady state: one session per load "
        f"path, run once, then the median of {runs} Runs, in rounds of short blocks (every session in "
        "each round, rotating order). In brackets, blob session time / source session time (above 1 = "
        "the blob's session runs slower); for ORT-format blobs, second, blob session time / the time of "
        "the source optimized as that platform's cook optimizes it (same level; NCHWc layouts only "
        "where the cook allows them), timed in the same rounds: onnxruntime runs an ORT-format model "
        "as saved, without optimizing it again at load, while ONNX blobs are optimized again like the "
        "source.",
        "",
        f"Target: no blob session's steady-state Run more than {INFERENCE_TARGET - 1:.0%} slower than the "
        f"source session's, for every model and platform ({_verdict(j.inference_ok, r.quick)}).",
        "",
        *_table(header, steady),
        "",
        "First Run right after the session is ready (same rounds as section 1): lazy initialization "
        "(kernels, allocators, memory patterns) lands here. No target.",
        "",
        *_table(header, first),
        "",
    ]
    over = [(p, m, v) for p, values in j.inference.items() for m, v in values.items() if v > INFERENCE_TARGET]
    if over and not r.quick:
        lines += [
            "More than 5% slower than the source session: "
            + ", ".join(f"`{m}` on {p} ({_x(v)})" for p, m, v in sorted(over, key=lambda t: -t[2]))
            + ".",
            "",
        ]
        quick_runs = sorted({m for _, m, _ in over if by_model_steady(r, m) < 1e-4})
        if quick_runs:
            lines += [
                "Of these, "
                + ", ".join(f"`{m}`" for m in quick_runs)
                + " run in under 0.1 ms, where the Python call into onnxruntime weighs and a few "
                "microseconds are tens of percent.",
                "",
            ]
        ort_over = {p for p, _, _ in over if p in j.ort}
        if ort_over and j.cooked_like_worst:
            worst = ", ".join(f"{_x(v)} `{m}` ({p})" for p, (m, v) in j.cooked_like_worst.items())
            lines += [
                "Why missed: mostly what each platform is cooked for, not the loading. An ORT-format blob "
                "runs the graph its cook saved; android and ios are cooked for arm64, which rules out the "
                "x86-only NCHWc layouts, and console at level basic, while the source session on this "
                "x86_64 machine gets level all with NCHWc (a conv net's biggest win here). Against the "
                "source optimized the way each cook optimizes it, the slowest blob session is: "
                f"{worst}. ONNX blobs are optimized again at load, like the source.",
                "",
            ]
    return lines


def by_model_steady(r: Results, model: str) -> float:
    """The source session's steady-state Run time of ``model``."""
    return next(i.steady_s[SOURCE] for i in r.inference if i.model == model)


def _decompression_section(r: Results, j: Judged) -> list[str]:
    d = r.decompression
    by = j.decompression
    fresh = by[FRESH_COPY]
    rows = [
        [t.label, _mb(t.nbytes), _ms(t.seconds), f"{t.gb_per_s:.2f}", _x(t.gb_per_s / fresh.gb_per_s)]
        for t in d.rows
    ]
    lines = [
        "## 3. Decompression throughput",
        "",
        f"The `{r.weights_model}` weights section ({_mb(d.section_bytes)}): as cooked, stored raw (zstd "
        f"gains {_pct(1 - d.zstd_blob_bytes / d.raw_blob_bytes)} on these float32 weights, under the 10% "
        "that makes the cooker compress them), so `unpack_blob` uses it in place after checking its "
        f"CRC-32s (one per {RAW_CRC_PIECE >> 20} MiB, in parallel; `Bundle.session` skips them with "
        "`check_raw=False`, having just checked the blob's sha256); and re-encoded with "
        f'`encode_blob(..., weights=Weights(..., codec="zstd"))` at the platform\'s level {d.level} into '
        f"{d.frames} zstd frames ({_mb(d.zstd_blob_bytes)} blob), decoded by `unpack_blob(bytes, "
        "threads=n)` into one new buffer. For scale: the ORT-format blob (its weights inside the graph "
        "section, as cooked: raw, so `unpack_blob` checks its CRC-32s and copies it), the zstd frames "
        "decoded into a buffer already touched (no page faults), "
        "and plain copies of the same bytes into a fresh buffer (the page faults any new buffer pays) and "
        "into a touched one (memory bandwidth). Rates are decompressed bytes per second.",
        "",
        f"Target: the zstd-coded section at least {DECOMPRESSION_TARGET_GBPS:g} GB/s with "
        f"{DECOMPRESSION_TARGET_THREADS} threads ({_verdict(j.decompression_ok, r.quick)}).",
        "",
        *_table(["what", "decompressed", "ms", "GB/s", "vs fresh copy"], rows),
        "",
    ]
    if not r.quick:
        n = DECOMPRESSION_TARGET_THREADS
        decode, touched = by.get(ZSTD_WEIGHTS.format(n)), by.get(TOUCHED_DECODE.format(n))
        if decode is not None and touched is not None:
            faults = max(decode.seconds - touched.seconds, 0.0)
            one = by.get(ZSTD_WEIGHTS.format(1))
            why = "" if j.decompression_ok else "Why missed: "
            scaling = (
                f" {n} threads decode {_x(decode.gb_per_s / one.gb_per_s)} as fast as one."
                if one is not None and n != 1
                else ""
            )
            lines += [
                f"{why}{'w' if why else 'W'}ith {n} threads, decoding into a buffer already touched takes "
                f"{_ms(touched.seconds)} ms "
                f"({touched.gb_per_s:.2f} GB/s); `unpack_blob` adds {_ms(faults)} ms, the first touch of "
                f"its new {_mb(d.section_bytes)} buffer (a fresh copy pays "
                f"{_ms(max(fresh.seconds - by[TOUCHED_COPY].seconds, 0.0))} ms for the same bytes)."
                + scaling,
                "",
            ]
        ort = by.get(ORT_GRAPH.format(n))
        if ort is not None:
            lines += [
                f"An ORT-format blob keeps the weights in its graph section, raw as cooked: `unpack_blob` "
                f"checks and copies {_mb(ort.nbytes)} there at {ort.gb_per_s:.2f} GB/s on {n} threads, "
                "where `session_from_blob` hands the section to onnxruntime in place (section 7).",
                "",
            ]
    return lines


def _size_section(r: Results) -> list[str]:
    header = ["model", "source (model + data)"] + [f"{p} ({fmt})" for p, fmt in r.platforms.items()]
    rows = []
    for row in r.sizes:
        cells = [row.model, _mb(row.source_size)]
        for platform in r.platforms:
            if platform in row.blobs:
                _, blob = row.blobs[platform]
                cells.append(f"{_mb(blob)} ({row.source_size / blob:.2f}x)")
            else:
                cells.append("not cooked")
        rows.append(cells)
    return [
        "## 4. Blob size vs source size",
        "",
        "Bytes shipped per model and platform: the blob (header + frames) against the source model "
        "with its external data; in brackets, source size / blob size (above 1 = smaller than the "
        "source). Each platform's `compression_level` (default 10); ONNX blobs store a weights section "
        "raw where zstd gains under 10%. No target.",
        "",
        *_table(header, rows),
        "",
        f"Total: {_size_summary(r)}.",
        "",
    ]


def _cold_section(r: Results, j: Judged) -> list[str]:
    c = r.cold

    def row(name: str, runs: Sequence[Run]) -> list[str]:
        return [
            name,
            f"{median([x.wall_s for x in runs]):.1f}",
            f"{median([x.user_s for x in runs]):.1f} + {median([x.sys_s for x in runs]):.1f}",
            f"{median([x.others_s for x in runs]):.1f}",
            ", ".join(f"{x.wall_s:.1f}" for x in runs),
        ]

    alone, two = [a for a, _ in c.ceiling], [b for _, b in c.ceiling]
    cpu = median([x.cpu_s for x in c.sequential])
    kernel = median([x.sys_s for x in c.sequential])
    lines = [
        "## 5. Cold cook, sequential and parallel",
        "",
        f"`doit cook` and `doit -n 2 cook` from an empty build folder ({c.tasks} cooks, every input model "
        "for every platform, plus each platform's runtime check and manifest), run alternately in a "
        "subprocess on a temporary copy of the project; the runtime check's onnxruntime environments are "
        'cached beforehand. CPU seconds are those of doit and its workers; "other load" is what every '
        "other process on the machine used meanwhile (`/proc/stat`). After each pair, the machine's own "
        "ceiling: a fixed CPU-bound workload (`bench/burn.py`: zstd, sha256, Python) run alone and as two "
        "processes started together; 2.0x means two free cores.",
        "",
        f"Target: `-n 2` at least {PARALLEL_TARGET:g}x faster ({_verdict(j.parallel_ok, r.quick)}).",
        "",
        *_table(
            ["command", "wall s", "CPU s, user + kernel", "other load, CPU s", "wall s, every run"],
            [row("`doit cook`", c.sequential), row("`doit -n 2 cook`", c.parallel)],
        ),
        "",
        f"Speedup {_x(c.speedup)}; the parallel cook used {_x(c.cpu_growth)} the CPU seconds of the "
        f"sequential one. Machine ceiling: the workload took {median(alone):.2f} s alone and "
        f"{median(two):.2f} s as two processes, so a second process gains {_x(c.machine_ceiling)} here. "
        f"Kernel time is {_pct(kernel / cpu)} of the sequential cook's CPU time.",
        "",
    ]
    if not j.parallel_ok and not r.quick:
        others = median([x.others_s for x in c.parallel])
        own = median([x.cpu_s for x in c.parallel])
        text = (
            f"Why missed: the machine gives less than the target here. Between the pairs, a second "
            f"process gained {_x(c.machine_ceiling)} on a fixed workload, and the cook reached "
            f"{_pct(c.speedup / c.machine_ceiling)} of that; the -n 2 run does {_x(c.cpu_growth)} the CPU "
            "seconds of the sequential one, so its workers did not idle but ran slower side by side."
        )
        if others > 0.1 * own:
            text += (
                f" Other processes also took {others:.0f} CPU s (median) while the -n 2 cooks ran, "
                f"{_pct(others / own)} of the cook's own {own:.0f}: the two vCPUs were shared."
            )
        lines += [text, ""]
    return lines


def _noop_section(r: Results, j: Judged) -> list[str]:
    rows = []
    for i, n in enumerate(r.noop):
        marginal = "" if i == 0 else f"{j.marginal[i - 1] * 1000:.1f}"
        every = ", ".join(f"{t:.2f}" for t in n.times_s)
        rows.append([n.models, n.models * n.platforms, f"{n.median_s:.3f}", marginal, every])
    lines = [
        "## 6. No-op cook as the project grows",
        "",
        "`doit cook` when nothing changed, on projects made of copies of the example assets (each copy "
        "in its own folder with its external data, sample inputs and settings), cooked once beforehand. "
        "Wall time of the whole `python -m doit cook` process; sizes timed in alternating order.",
        "",
        f"Target: under {NOOP_TARGET_S:g} s at {NOOP_TARGET_MODELS} models x 4 platforms "
        f"({_verdict(j.noop_ok, r.quick)}), growing no faster than linearly: the cost per added model "
        f"between the larger sizes at most {NOOP_LINEAR_SLACK:g}x that between the smaller ones "
        f"({_verdict(j.linear_ok, r.quick)}).",
        "",
        *_table(["models", "cook tasks", "wall s", "ms per added model", "wall s, every run"], rows),
        "",
    ]
    if not (j.noop_ok and j.linear_ok) and not r.quick:
        lines += [
            "Why missed: profile one no-op run with `python -m cProfile -s cumulative -m doit cook` in a "
            "project of that size.",
            "",
        ]
    return lines


MEMORY_LABELS = {
    "session_from_blob": "`session_from_blob(blob bytes)` (what a game does; the caller holds the blob)",
    "session_from_blob_noprepack": "the same, onnxruntime's weight prepacking off "
    "(`session.disable_prepacking`)",
    "bundle_session": "`open_bundle(folder).session(name)` (reads the blob itself, drops it when it can)",
    "unpack_blob": "`unpack_blob(blob bytes)` only (the loader's share, blob included)",
    "ort_bytes": "`InferenceSession(plain model bytes)` (onnxruntime alone, from memory)",
    "ort_file": "`InferenceSession(plain model path)` (onnxruntime reading files)",
}


def _memory_section(r: Results, j: Judged) -> list[str]:
    rows = [
        [f"{m.model_format} ({m.platform})", MEMORY_LABELS[m.mode], _mb(m.model_size), _mb(m.extra_bytes)]
        + [_x(m.multiple), _x(m.final_bytes / m.model_size)]
        for m in r.memory
    ]
    lines = [
        "## 7. Peak resident memory",
        "",
        "Each line runs in a fresh interpreter (`python -m bench.probe`): peak resident set (VmHWM) "
        f"after loading `{r.weights_model}`, minus the resident set after importing onnxruntime, numpy, "
        "zstandard and the loader, as a multiple of the model size (graph + weights, as the blob's header "
        "states it). Reading the blob file is part of loading, so the blob counts. onnxruntime alone "
        "is given the cooked `.ort` file for ORT format, and for ONNX the source model: its file with "
        "the weights beside it (path), or one file with the weights inline (bytes).",
        "",
        f"Targets: `session_from_blob` at most {MEMORY_TARGETS['session_from_blob']:g}x the model size, "
        f"the caller's blob included ({_verdict(j.memory_ok['session_from_blob'], r.quick)}); "
        f"`Bundle.session` at most {MEMORY_TARGETS['bundle_session']:g}x "
        f"({_verdict(j.memory_ok['bundle_session'], r.quick)}). Per format:",
        "",
        *_table(
            [
                "target",
                *(f"{m.model_format} ({m.platform})" for m in r.memory if m.mode == "session_from_blob"),
            ],
            [
                [f"{MEMORY_LABELS[mode].split(' (')[0]} <= {limit:g}x"]
                + [
                    f"{_x(m.multiple)} {'met' if m.multiple <= limit else 'missed'}"
                    for m in r.memory
                    if m.mode == mode
                ]
                for mode, limit in MEMORY_TARGETS.items()
            ],
        ),
        "",
        *_table(
            [
                "format (platform)",
                "how",
                "model",
                "peak extra",
                "x model size",
                "still held after, x model size",
            ],
            rows,
        ),
        "",
    ]
    missed = [mode for mode, ok in j.memory_ok.items() if not ok]
    if missed and not r.quick:
        by = {(m.model_format, m.mode): m for m in r.memory}
        lines.append("Why missed:")
        if any(
            v > MEMORY_TARGETS[mode]
            for mode in missed
            for k, v in j.memory[mode].items()
            if k.startswith("ort")
        ):
            lines.append(
                "- ORT format: onnxruntime itself. Given the plain `.ort` bytes, with no blob and no "
                f"decompression, it peaks at {_x(by[('ort', 'ort_bytes')].multiple)}, the bytes passed in "
                "included: its Python binding copies the `bytes` into a `std::string`, "
                "`InferenceSession::LoadOrtModel` copies that into the buffer it keeps until "
                "`Initialize`, and the initializers become tensors of their own. The loader adds the "
                f"blob and one decoded copy ({_x(by[('ort', 'unpack_blob')].multiple)}, the `unpack_blob` "
                "line); `Bundle.session` drops the blob before onnxruntime starts."
            )
        if any(
            v > MEMORY_TARGETS[mode]
            for mode in missed
            for k, v in j.memory[mode].items()
            if k.startswith("onnx")
        ):
            blob, noprepack = (
                by[("onnx", "session_from_blob")],
                by.get(("onnx", "session_from_blob_noprepack")),
            )
            text = (
                "- ONNX with its weights stored raw: the blob is the weights (used in place, so "
                "`Bundle.session` must keep it too: both paths hold "
                f"{_x(by[('onnx', 'unpack_blob')].multiple)} before onnxruntime starts). onnxruntime "
                f"then adds {_x(blob.multiple - by[('onnx', 'unpack_blob')].multiple)}: it prepacks the "
                "MatMul weights into copies of its own and, the originals being the caller's, cannot free "
                "them, as it does when it reads the weights from a file"
            )
            if noprepack is not None:
                text += (
                    f"; with prepacking off the peak is still {_x(noprepack.multiple)} but only "
                    f"{_x(noprepack.final_bytes / noprepack.model_size)} stays: building the session, "
                    "onnxruntime copies the weights given through `add_external_initializers` once more, "
                    "and frees that copy at the end"
                )
            lines.append(text + ".")
        lines.append("")
    return lines


def _huge_section(r: Results) -> list[str]:
    lines = ["## 8. A model over 2 GB", ""]
    h = r.huge
    if h is None:
        return lines + [
            f"Not run: `python -m bench --huge` generates `{r.huge_model}` ({_mb(r.huge_bytes)} of "
            "weights), cooks it for every platform and records what happens. Never part of `--quick` or "
            "CI (it needs several GB of memory and disk).",
            "",
        ]
    rows = []
    for c in h.cooks:
        if not c.cooked:
            rows.append([c.platform, "refused", c.message, "", ""])
            continue
        rows.append(
            [
                c.platform,
                f"cooked: {_mb(c.blob_size or 0)} blob",
                c.message,
                _load(c.default_load),
                _load(c.raised_load),
            ]
        )
    lines += [
        f"`{h.model}`: {_mb(h.source_size)} (model + `.onnx.data`), generated in {h.generate_s:.0f} s, then "
        f"`doit --continue cook` on it alone: {h.cook.wall_s:.0f} s, exit code {h.cook.returncode}. Per "
        "platform, what the cook did and, for a blob, `session_from_blob(bytes)` with the loader's default "
        "limit and with `max_model_size` raised (each in a fresh interpreter: load time, peak extra memory).",
        "",
        *_table(["platform", "cook", "message", "session_from_blob, default limit", "limit raised"], rows),
        "",
        f"onnxruntime alone, `InferenceSession(<source path>)`: {_load(h.source_load)}.",
        "",
    ]
    return lines


def _load(result: Mapping | None) -> str:
    if result is None:
        return ""
    if "error" in result:
        return f"fails: {result['error'][:300]}"
    extra = result["peak_hwm"] - result["baseline_rss"]
    return f"loads in {result['load_s']:.1f} s, peak extra {_mb(extra)}"


if __name__ == "__main__":  # python -m bench.report RESULTS.pickle OUTPUT.md: render a kept run again
    import pickle
    import sys
    from pathlib import Path

    results = pickle.loads(Path(sys.argv[1]).read_bytes())
    Path(sys.argv[2]).write_text(render(results), encoding="utf-8")
