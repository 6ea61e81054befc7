"""Peak resident memory of one way of loading a model, measured in a fresh interpreter.

``python -m bench.probe MODE PATH [MAX_MODEL_SIZE]`` prints one JSON object: the resident set after
the imports (baseline), the high-water mark (VmHWM) after loading, the load time and the model size.
Modes:

- ``session_from_blob``: read the blob file, ``session_from_blob(bytes)``: what a game does;
- ``session_from_blob_noprepack``: the same with onnxruntime's weight prepacking off
  (``session.disable_prepacking``), to tell its packed copies from the loader's;
- ``bundle_session``: ``open_bundle(folder).session(name)`` for the blob (PATH is the blob file);
- ``unpack_blob``: read the blob file, ``unpack_blob`` only: the loader's own share;
- ``ort_bytes``: read a plain model file, ``onnxruntime.InferenceSession(bytes)``: onnxruntime alone;
- ``ort_file``: ``onnxruntime.InferenceSession(path)``: onnxruntime reading the file itself.

``MAX_MODEL_SIZE`` is passed to the loader (its default refuses models over 2 GiB). If the load
raises, the JSON object holds ``error`` instead and the exit code is ``LOAD_FAILED``.

Linux only (``/proc/self/status``).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy  # noqa: F401  (part of the baseline: the loader imports it)
import onnxruntime
import zstandard  # noqa: F401

import onnx_cooker.runtime as runtime

CPU = ["CPUExecutionProvider"]
MODES = (
    "session_from_blob",
    "session_from_blob_noprepack",
    "bundle_session",
    "unpack_blob",
    "ort_bytes",
    "ort_file",
)
LOAD_FAILED = 3


def memory_status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    text = Path("/proc/self/status").read_text()
    return {
        key: int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1)) * 1024 for key in ("VmRSS", "VmHWM")
    }


def prepare(mode: str, path: Path) -> object:
    """What a mode sets up before the baseline: the opened bundle (its manifest, not the blob)."""
    if mode == "bundle_session":
        bundle = runtime.open_bundle(_bundle_root(path), verify=False)
        return bundle, next(n for n in bundle.names if bundle.info(n)["file"] == _in_bundle(path))
    return None


def _bundle_root(blob: Path) -> Path:
    return next(p for p in blob.parents if (p / "manifest.json").is_file())


def _in_bundle(blob: Path) -> str:
    return blob.relative_to(_bundle_root(blob)).as_posix()


def load(mode: str, path: Path, prepared: object, max_model_size: int) -> tuple[object, int]:
    """Load ``path`` the way ``mode`` says; returns what must stay alive and the model size."""
    limit = {"max_model_size": max_model_size}
    if mode == "bundle_session":
        bundle, name = prepared
        return bundle.session(name, providers=CPU, **limit), bundle.info(name)["model_size"]
    if mode in ("session_from_blob", "session_from_blob_noprepack"):
        options = onnxruntime.SessionOptions()
        if mode.endswith("_noprepack"):
            options.add_session_config_entry("session.disable_prepacking", "1")
        data = path.read_bytes()
        session = runtime.session_from_blob(data, providers=CPU, session_options=options, **limit)
        return (data, session), runtime.read_header(data)[0].model_size
    if mode == "unpack_blob":
        data = path.read_bytes()
        unpacked = runtime.unpack_blob(data, **limit)
        return (data, unpacked), unpacked.header.model_size
    if mode == "ort_bytes":
        model = path.read_bytes()
        return (model, onnxruntime.InferenceSession(model, providers=CPU)), len(model)
    if mode == "ort_file":
        return onnxruntime.InferenceSession(str(path), providers=CPU), path.stat().st_size
    raise SystemExit(f"unknown mode {mode!r}; one of {', '.join(MODES)}")


def main(argv: list[str]) -> int:
    mode, path, *rest = argv
    max_model_size = int(rest[0]) if rest else runtime.DEFAULT_MAX_MODEL_SIZE
    onnxruntime.set_default_logger_severity(3)
    prepared = prepare(mode, Path(path))
    baseline = memory_status()
    start = time.perf_counter()
    try:
        alive, model_size = load(mode, Path(path), prepared, max_model_size)
    except Exception as exc:  # reported, not raised: the caller records what happened
        after = memory_status()
        error = f"{type(exc).__name__}: {exc}"
        print(
            json.dumps(
                {"mode": mode, "error": error, "peak_hwm": after["VmHWM"], "baseline_rss": baseline["VmRSS"]}
            )
        )
        return LOAD_FAILED
    load_s = time.perf_counter() - start
    after = memory_status()
    print(
        json.dumps(
            {
                "mode": mode,
                "model_size": model_size,
                "load_s": load_s,
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
