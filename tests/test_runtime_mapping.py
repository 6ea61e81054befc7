"""Bundle.session maps blob files: what it maps, when the mapping goes, and what survives it.

The cooker replaces a blob only by writing a new file and renaming it (content-hashed names), and
deletes unlisted ones later: a mapping survives both. Truncating a mapped file in place is what
no cooker step does; it kills the process (SIGBUS), which is why ``open_bundle(map_blobs=False)``
exists: then the blob is read, and nothing done to the file reaches the session.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import CPU, HEADER_DEFAULTS, REPO, split_weights, to_ort_format, write_bundle

from onnx_cooker.runtime import load_info, open_bundle, session_from_blob
from onnx_cooker.runtime.writer import encode_blob
from tests.models import dense_model

X = np.random.default_rng(5).standard_normal((1, 1024)).astype(np.float32)


def _bundle(root: Path, fmt: str) -> tuple[Path, np.ndarray]:
    model = dense_model(1024, 512, batch=1, seed=9, activation="Relu", name="net")  # 2 MB: mapped
    import onnxruntime

    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": X})[0]
    if fmt == "onnx":
        graph, weights = split_weights(model, "net")
        raw = dataclasses.replace(weights, codec="raw")
        blob = encode_blob(graph, level=3, weights=raw, model_format="onnx", **HEADER_DEFAULTS)
    else:
        ort = to_ort_format(model.SerializeToString(), root.parent)
        blob = encode_blob(ort, level=3, graph_codec="raw", model_format="ort", **HEADER_DEFAULTS)
    return write_bundle(root, {"net": (fmt, blob)}), expected


@pytest.mark.parametrize("fmt", ["onnx", "ort"])
def test_a_session_outlives_its_blob_being_replaced_by_rename_and_deleted(fmt: str, tmp_path: Path) -> None:
    root, expected = _bundle(tmp_path / "bundle", fmt)
    session = open_bundle(root).session("net", providers=CPU, low_memory=True)
    assert load_info(session).in_place
    blob = next(root.glob("*.ocb"))
    replacement = blob.with_name(".new")
    replacement.write_bytes(os.urandom(blob.stat().st_size))
    replacement.replace(blob)  # what a re-cook does (under a new name, even)
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)
    blob.unlink()  # what retiring does
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)


def test_the_mapping_closes_with_the_last_session_using_it(tmp_path: Path) -> None:
    root, _ = _bundle(tmp_path / "bundle", "onnx")
    bundle = open_bundle(root)
    maps = _mapped(root)
    first, second = bundle.session("net", providers=CPU), bundle.session("net", providers=CPU)
    assert _mapped(root) == maps + 1  # one mapping of the file, shared by its sessions (one descriptor)
    keep = weakref.ref(first)
    del first
    gc.collect()
    assert keep() is None and _mapped(root) == maps + 1  # the second session still uses it
    del second
    gc.collect()
    assert _mapped(root) == maps


def _mapped(root: Path) -> int:
    """How many mappings of this process are of a blob file of ``root``."""
    text = Path("/proc/self/maps").read_text()
    return sum(1 for line in text.splitlines() if str(root) in line and line.endswith(".ocb"))


def test_read_not_mapped_blobs_ignore_what_happens_to_the_file(tmp_path: Path) -> None:
    root, expected = _bundle(tmp_path / "bundle", "onnx")
    session = open_bundle(root, map_blobs=False).session("net", providers=CPU, low_memory=True)
    assert _mapped(root) == 0
    blob = next(root.glob("*.ocb"))
    with blob.open("r+b") as stream:
        stream.truncate(100)
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", ["onnx", "ort"])
def test_a_mapped_blob_truncated_in_place_kills_the_process_as_documented(fmt: str, tmp_path: Path) -> None:
    """The hazard the docs name, shown in a child process: why map_blobs=False exists."""
    root, _ = _bundle(tmp_path / "bundle", fmt)
    script = textwrap.dedent(
        f"""
        import numpy as np
        from onnx_cooker.runtime import open_bundle
        from pathlib import Path
        root = Path({str(root)!r})
        session = open_bundle(root).session("net", providers=["CPUExecutionProvider"], low_memory=True)
        blob = next(root.glob("*.ocb"))
        with blob.open("r+b") as stream:
            stream.truncate(0)
        session.run(None, {{"x": np.ones((1, 1024), np.float32)}})
        print("survived")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stdout, done.stderr[-500:])


def test_small_ort_models_take_the_byte_path_and_large_ones_are_mapped_or_shared(tmp_path: Path) -> None:
    """Below SMALL_ORT_MODEL onnxruntime's own copy is cheaper than a mapping (measured, loadpaths.py)."""
    import onnxruntime

    from onnx_cooker.runtime.compat import parse_version
    from onnx_cooker.runtime.loadpaths import ORT_SHARED_VERSIONS, SMALL_ORT_MODEL

    small = dense_model(64, 32, batch=1, seed=2, name="small")
    blob = encode_blob(
        to_ort_format(small.SerializeToString(), tmp_path), level=3, model_format="ort", **HEADER_DEFAULTS
    )
    assert len(blob) < SMALL_ORT_MODEL
    assert load_info(session_from_blob(blob, providers=CPU)).path == "ort-bytes"
    big = dense_model(1024, 1024, batch=1, seed=2, name="big")
    ort = to_ort_format(big.SerializeToString(), tmp_path)
    large = encode_blob(ort, level=3, graph_codec="raw", model_format="ort", **HEADER_DEFAULTS)
    installed = parse_version(onnxruntime.__version__)
    mapped = "ort-mapped" if installed >= (1, 28, 0) else "ort-file"
    # from memory, its weights are shared in place where that is proven, not copied into the memfd
    shared = "ort-shared-initializers" if installed in ORT_SHARED_VERSIONS else mapped
    assert load_info(session_from_blob(large, providers=CPU)).path == shared
    packed = encode_blob(ort, level=3, graph_codec="zstd", model_format="ort", **HEADER_DEFAULTS)
    assert load_info(session_from_blob(packed, providers=CPU)).path == mapped  # decoded: nothing to share


def test_session_from_blob_takes_an_mmap_and_uses_it_in_place(tmp_path: Path) -> None:
    """The caller's own mapping (an mmap object) is borrowed like bytes: the weights stay in it."""
    import mmap

    root, expected = _bundle(tmp_path / "bundle", "onnx")
    path = next(root.glob("*.ocb"))
    copy = tmp_path / "copy.ocb"
    copy.write_bytes(path.read_bytes())
    with copy.open("r+b") as stream:
        mapping = mmap.mmap(stream.fileno(), 0)  # writable, shared: the file is what the session uses
    session = session_from_blob(mapping, providers=CPU, low_memory=True)
    assert load_info(session).in_place
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)
    from onnx_cooker.runtime.header import read_header

    frame = next(f for f in read_header(mapping)[0].frames if f.section == "weights")
    mapping[frame.data_offset : frame.data_offset + frame.content_size] = bytes(frame.content_size)
    assert not np.allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)
