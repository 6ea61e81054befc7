"""Session-ready time and peak memory of each way to load a model, in whatever onnxruntime this
interpreter has (the bench's own, or a target's isolated environment: bench/loading.py starts it).
Imports only the loader (from the folder given first), onnxruntime, numpy and the standard library.

    python -I bench/load_worker.py <folder holding onnx_cooker/> times <cases.json> <repeats> [variant,...]
    python -I bench/load_worker.py <folder holding onnx_cooker/> memory <case JSON> <variant>

Variants: the source file; the blob's bytes; a ``MemoryBlob`` of it (read from its file into a
sealed memfd, untimed, as a game reads an archive); the bundle; each blob variant also with
``low_memory``; onnxruntime's own .ort file.

``cases.json``: a list of {"model", "platform", "source", "blob", "bundle", "plain_ort", "input"}
(paths; ``plain_ort`` the blob's ORT model as a plain .ort file, or null; ``input`` an .npz of the
model's inputs). Prints one JSON line.
"""

from __future__ import annotations

import gc
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1])

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

from onnx_cooker.runtime import MemoryBlob, load_info, open_bundle, session_from_blob  # noqa: E402

CPU = ["CPUExecutionProvider"]
VARIANTS = (
    "source",
    "blob",
    "bundle",
    "plain_ort",
    "blob_low_memory",
    "bundle_low_memory",
    "memory",
    "memory_low_memory",
)


def make(variant: str, case: dict, held: dict) -> onnxruntime.InferenceSession | None:
    """The session of ``variant``; ``held`` keeps what a game holds before it asks (the blob bytes,
    the opened bundle), outside the timed part."""
    if variant == "source":
        return onnxruntime.InferenceSession(case["source"], providers=CPU)
    if variant == "blob":
        return session_from_blob(held["blob"], providers=CPU)
    if variant == "blob_low_memory":
        return session_from_blob(held["blob"], providers=CPU, low_memory=True)
    if variant == "memory":
        return session_from_blob(held["memory"], providers=CPU)
    if variant == "memory_low_memory":
        return session_from_blob(held["memory"], providers=CPU, low_memory=True)
    if variant == "bundle":
        return held["bundle"].session(held["name"], providers=CPU)
    if variant == "bundle_low_memory":
        return held["bundle"].session(held["name"], providers=CPU, low_memory=True)
    if variant == "plain_ort":
        return onnxruntime.InferenceSession(case["plain_ort"], providers=CPU) if case["plain_ort"] else None
    raise SystemExit(f"unknown variant {variant!r}")


def hold(case: dict, *, read: bool = True) -> dict:
    # As a game opens a bundle: open_bundle checks every blob's sha256 once, at start-up (untimed).
    bundle = open_bundle(case["bundle"])
    name = next(n for n in bundle.names if Path(case["blob"]).name == Path(bundle.info(n)["file"]).name)
    held = {"blob": None, "memory": None, "bundle": bundle, "name": name}
    if read:
        held["blob"], held["memory"] = Path(case["blob"]).read_bytes(), read_memory(case)
    return held


def read_memory(case: dict) -> MemoryBlob:
    """The blob read from its file into a MemoryBlob (a sealed memfd), as a game reads an archive."""
    path = Path(case["blob"])
    with path.open("rb") as stream:
        return MemoryBlob.read(stream, path.stat().st_size)


def feeds(case: dict) -> dict[str, np.ndarray]:
    with np.load(case["input"]) as archive:
        return {k: archive[k] for k in archive.files}


def times(cases: list[dict], repeats: int, variants: tuple[str, ...] = VARIANTS) -> dict:
    """Medians per case and variant (all of VARIANTS unless named), alternating within each round."""
    result = {}
    for case in cases:
        held = hold(case)
        inputs = feeds(case)
        samples: dict[str, list[float]] = {v: [] for v in variants}
        paths: dict[str, str] = {}
        for _ in range(repeats):
            for variant in variants:
                gc.collect()
                start = time.perf_counter()
                session = make(variant, case, held)
                elapsed = time.perf_counter() - start
                if session is None:
                    continue
                session.run(None, inputs)
                samples[variant].append(elapsed)
                info = load_info(session)
                if info is not None:
                    paths[variant] = info.path.value
                del session
        key = f"{case['model']}/{case['platform']}"
        result[key] = {
            "ready_s": {v: statistics.median(s) for v, s in samples.items() if s},
            "paths": paths,
        }
    return {"onnxruntime": onnxruntime.__version__, "cases": result}


def status() -> dict[str, int]:
    text = Path("/proc/self/status").read_text()
    return {k: int(re.search(rf"^{k}:\s+(\d+) kB", text, re.M).group(1)) * 1024 for k in ("VmRSS", "VmHWM")}


def memory(case: dict, variant: str) -> dict:
    """Peak resident memory of one load in this fresh process, the blob read included for the
    in-memory variants (what a game holds), as VmHWM over the level after the imports."""
    held = hold(case, read=False)
    baseline = status()["VmRSS"]
    if variant in ("blob", "blob_low_memory"):
        held["blob"] = Path(case["blob"]).read_bytes()
    if variant in ("memory", "memory_low_memory"):
        held["memory"] = read_memory(case)
    start = time.perf_counter()
    session = make(variant, case, held)
    ready = time.perf_counter() - start
    after = status()
    info = load_info(session) if session is not None else None
    return {
        "onnxruntime": onnxruntime.__version__,
        "variant": variant,
        "peak": after["VmHWM"] - baseline,
        "held": after["VmRSS"] - baseline,
        "path": info.path.value if info else None,
        "ready_s": ready,
    }


def main() -> int:
    mode = sys.argv[2]
    if mode == "times":
        named = tuple(sys.argv[5].split(",")) if len(sys.argv) > 5 else VARIANTS
        report = times(json.loads(Path(sys.argv[3]).read_text()), int(sys.argv[4]), named)
    else:
        report = memory(json.loads(sys.argv[3]), sys.argv[4])
    onnxruntime.set_default_logger_severity(3)
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    onnxruntime.set_default_logger_severity(3)
    sys.exit(main())
