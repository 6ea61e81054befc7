"""Run inside a target onnxruntime's own environment by tests/test_load_paths.py: every load path
that applies to each blob of a case folder, from memory and from the blob file, outputs compared,
in-place claims proven. Imports only the copied runtime loader, numpy and the standard library.

    python -I load_path_probe.py <folder with the copied onnx_cooker/> <case folder>

Prints one JSON object: {"onnxruntime": version, "cases": {case: {"auto": {...}, "paths": {...}}}}.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

from onnx_cooker.runtime import session_from_blob  # noqa: E402
from onnx_cooker.runtime.blob import check_blob  # noqa: E402
from onnx_cooker.runtime.errors import BundleError  # noqa: E402
from onnx_cooker.runtime.loadpaths import BlobFile, LoadPath, choose_load_path, why_not  # noqa: E402
from onnx_cooker.runtime.session import load_info, session_from_checked  # noqa: E402

CPU = ["CPUExecutionProvider"]


def rss_anon() -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(r"^RssAnon:\s+(\d+) kB", text, re.M).group(1)) * 1024


def from_file(path: Path, load_path: str | None, low_memory: bool = False) -> onnxruntime.InferenceSession:
    fd = os.open(path, os.O_RDONLY)
    try:
        checked = check_blob(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
        return session_from_checked(
            checked,
            providers=CPU,
            load_path=load_path,
            low_memory=low_memory,
            model_file=BlobFile(fd, str(path)),
        )
    finally:
        os.close(fd)


def run(session: onnxruntime.InferenceSession, x: np.ndarray) -> np.ndarray:
    return session.run(None, {"x": x})[0]


def probe(case: dict, folder: Path) -> dict:
    blob_path = folder / case["blob"]
    blob = blob_path.read_bytes()
    x = np.load(folder / case["input"])
    want = np.load(folder / case["output"])
    checked = check_blob(blob)
    result = {
        "auto": {
            "memory": choose_load_path(checked).value,
            "file": choose_load_path(checked, model_file=BlobFile(-1, str(blob_path))).value,
        },
        "paths": {},
    }
    auto = session_from_blob(blob, providers=CPU)
    result["used"] = {
        "path": load_info(auto).path.value,
        "refused": load_info(auto).refused,
        "matches": bool(np.allclose(run(auto, x), want, rtol=1e-4, atol=1e-5)),
    }
    by_file = from_file(blob_path, None)  # as Bundle.session loads it
    result["used_file"] = {
        "path": load_info(by_file).path.value,
        "refused": load_info(by_file).refused,
        "matches": bool(np.allclose(run(by_file, x), want, rtol=1e-4, atol=1e-5)),
    }
    for path in LoadPath:
        for source in ("memory", "file"):
            model_file = BlobFile(-1, str(blob_path)) if source == "file" else None
            if why_not(path, checked, onnxruntime.__version__, model_file) is not None:
                continue
            key = f"{path.value}/{source}"
            try:
                session = (
                    session_from_blob(bytearray(blob), providers=CPU, load_path=path.value)
                    if source == "memory"
                    else from_file(blob_path, path.value)
                )
                got = run(session, x)
            except (BundleError, RuntimeError) as exc:
                result["paths"][key] = {"loads": False, "error": str(exc)}
                continue
            entry = {
                "loads": True,
                "matches": bool(np.allclose(got, want, rtol=1e-4, atol=1e-5)),
                "claims_in_place": load_info(session).in_place,
                "used": load_info(session).path.value,
            }
            entry["in_place"] = in_place(path, source, blob, blob_path, case, x, folder)
            result["paths"][key] = entry
    return result


def in_place(
    path: LoadPath, source: str, blob: bytes, blob_path: Path, case: dict, x: np.ndarray, folder: Path
):
    """True/False where it can be shown; None where this probe has no way to show it."""
    checked = check_blob(blob)
    if case.get("fused"):
        return None
    if path.value.startswith("onnx-") and checked.header.weights is not None and source == "memory":
        # The caller's buffer zeroed after the session was made: do the outputs follow?
        buffer = bytearray(blob)
        session = session_from_blob(buffer, providers=CPU, low_memory=True, load_path=path.value)
        before = run(session, x)
        frame = next(f for f in checked.header.frames if f.section == "weights")
        if frame.codec != "raw":
            return None  # decoded into a buffer of the loader's: nothing of the caller's to zero
        buffer[frame.data_offset : frame.data_offset + frame.content_size] = bytes(frame.content_size)
        return not np.array_equal(before, run(session, x))
    if path == LoadPath.ONNX_MAPPED and source == "file":
        # onnxruntime maps the blob file itself: a copy of it, its weights zeroed in place after the
        # session was made (prepacking off, so that no packed copy hides them): do the outputs follow?
        frame = next(f for f in checked.header.frames if f.section == "weights")
        copy = folder / f"copy-{path.value}.ocb"
        copy.write_bytes(blob)
        session = from_file(copy, path.value, low_memory=True)
        before = run(session, x)
        with copy.open("r+b") as stream:
            stream.seek(frame.data_offset)
            stream.write(bytes(frame.content_size))
        changed = not np.array_equal(before, run(session, x))
        del session
        copy.unlink()
        return changed
    if path == LoadPath.ORT_SHARED_INITIALIZERS and source == "memory" and case.get("weight_at") is not None:
        # One weight's bytes in the caller's buffer zeroed after the session was made (prepacking off).
        buffer = bytearray(blob)
        session = session_from_blob(buffer, providers=CPU, low_memory=True, load_path=path.value)
        before = run(session, x)
        buffer[case["weight_at"] : case["weight_at"] + case["weight_bytes"]] = bytes(case["weight_bytes"])
        return not np.array_equal(before, run(session, x))
    if path == LoadPath.ORT_MAPPED and source == "file" and case.get("weight_at") is not None:
        # A copy of the blob file; one weight's bytes rewritten in place after the session was made.
        copy = folder / f"copy-{path.value}.ocb"
        copy.write_bytes(blob)
        session = from_file(copy, path.value, low_memory=True)
        before = run(session, x)
        with copy.open("r+b") as stream:
            stream.seek(case["weight_at"])
            stream.write(bytes(case["weight_bytes"]))
        changed = not np.array_equal(before, run(session, x))
        del session
        copy.unlink()
        return changed
    if path.value.startswith("ort-") and source == "memory" and sys.platform.startswith("linux"):
        # The memfd is sealed: shown by memory instead, in a fresh process (one that loaded models
        # before reuses their freed memory): a copy lands in anonymous memory, a mapping does not.
        size = checked.header.graph_size or 0
        if size < 4 << 20:
            return None
        command = [
            sys.executable,
            "-I",
            __file__,
            sys.argv[1],
            str(folder),
            "--rss",
            str(blob_path),
            path.value,
        ]
        grown = int(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        return grown < size // 2
    return None


def rss_growth(blob_path: Path, path: str) -> int:
    blob = blob_path.read_bytes()
    before = rss_anon()
    session = session_from_blob(blob, providers=CPU, low_memory=True, load_path=path)
    grown = rss_anon() - before
    del session
    return grown


def main() -> int:
    folder = Path(sys.argv[2])
    if sys.argv[3:4] == ["--rss"]:
        print(rss_growth(Path(sys.argv[4]), sys.argv[5]))
        return 0
    cases = json.loads((folder / "cases.json").read_text())
    report = {"onnxruntime": onnxruntime.__version__, "cases": {c["name"]: probe(c, folder) for c in cases}}
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
