"""Peak resident memory of one way of loading a model, measured in a fresh interpreter.

``python -m bench.probe MODE PATH`` prints one JSON object: the resident set after the imports
(baseline), the high-water mark (VmHWM) after loading, and the model size. Modes:

- ``session_from_blob``: read the blob file, ``session_from_blob(bytes)``: what a game does;
- ``bundle_session``: ``open_bundle(folder).session(name)`` for the blob (PATH is the blob file);
- ``decode_blob``: read the blob file, ``decode_blob`` only: the loader's own share;
- ``ort_bytes``: read a plain model file, ``onnxruntime.InferenceSession(bytes)``: onnxruntime alone;
- ``ort_file``: ``onnxruntime.InferenceSession(path)``: onnxruntime reading the file itself.

Linux only (``/proc/self/status``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy  # noqa: F401  (part of the baseline: the loader imports it)
import onnxruntime
import zstandard  # noqa: F401

import pipeline.runtime as runtime

CPU = ["CPUExecutionProvider"]
MODES = ("session_from_blob", "bundle_session", "decode_blob", "ort_bytes", "ort_file")


def memory_status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    text = Path("/proc/self/status").read_text()
    return {
        key: int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1)) * 1024 for key in ("VmRSS", "VmHWM")
    }


def prepare(mode: str, path: Path) -> object:
    """What a mode sets up before the baseline: the opened bundle (its manifest, not the blob)."""
    if mode == "bundle_session":
        bundle = runtime.open_bundle(_bundle_root(path))
        return bundle, next(n for n in bundle.names if bundle.info(n)["file"] == _in_bundle(path))
    return None


def _bundle_root(blob: Path) -> Path:
    return next(p for p in blob.parents if (p / "manifest.json").is_file())


def _in_bundle(blob: Path) -> str:
    return blob.relative_to(_bundle_root(blob)).as_posix()


def load(mode: str, path: Path, prepared: object) -> tuple[object, int]:
    """Load ``path`` the way ``mode`` says; returns what must stay alive and the model size."""
    if mode == "bundle_session":
        bundle, name = prepared
        return bundle.session(name, providers=CPU), bundle.info(name)["model_size"]
    if mode == "session_from_blob":
        data = path.read_bytes()
        return (data, runtime.session_from_blob(data, providers=CPU)), runtime.read_header(data)[0].model_size
    if mode == "decode_blob":
        data = path.read_bytes()
        header, model = runtime.decode_blob(data)
        return (data, model), header.model_size
    if mode == "ort_bytes":
        model = path.read_bytes()
        return (model, onnxruntime.InferenceSession(model, providers=CPU)), len(model)
    if mode == "ort_file":
        return onnxruntime.InferenceSession(str(path), providers=CPU), path.stat().st_size
    raise SystemExit(f"unknown mode {mode!r}; one of {', '.join(MODES)}")


def main(argv: list[str]) -> int:
    mode, path = argv
    onnxruntime.set_default_logger_severity(3)
    prepared = prepare(mode, Path(path))
    baseline = memory_status()
    alive, model_size = load(mode, Path(path), prepared)
    after = memory_status()
    print(
        json.dumps(
            {
                "mode": mode,
                "model_size": model_size,
                "baseline_rss": baseline["VmRSS"],
                "peak_hwm": after["VmHWM"],
                "final_rss": after["VmRSS"],
            }
        )
    )
    del alive
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
