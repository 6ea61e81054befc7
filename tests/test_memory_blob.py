"""``MemoryBlob``: a blob read into a sealed memfd, which onnxruntime maps in place like a blob file.

In each target onnxruntime (its own environment): read from a file (sendfile) and from a stream
without a descriptor (chunks), the session matches the source, takes the path the loader promises,
and for ORT-format models from 1.28 onnxruntime maps the loader's memfd itself (its own private
mapping of ``memfd:onnx-cooker-blob``), with no copy into a second memfd. Here (1.32): damage,
truncation, the seal, lifetimes and descriptors.
"""

from __future__ import annotations

import gc
import gzip
import io
import os
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import make_weighted_blob, run_in_runtime, run_source

from onnx_cooker.runtime import (
    BlobTooLargeError,
    BundleError,
    ChecksumMismatchError,
    MemoryBlob,
    NotABlobError,
    TruncatedBlobError,
    load_info,
    session_from_blob,
)
from tests.models import dense_model
from tests.test_load_paths import VERSIONS, _cases

# The path a MemoryBlob takes by version: (ONNX with raw weights, ORT-format with its graph raw).
EXPECTED = {
    "1.24.4": ("onnx-shared-initializers", "ort-file"),
    "1.28.0": ("onnx-shared-initializers", "ort-mapped"),
    "1.32.0": ("onnx-file-buffers", "ort-mapped"),
}

PROBE = """
import io, json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import numpy as np, onnxruntime
from onnx_cooker.runtime import MemoryBlob, load_info, session_from_blob

MEMFD = "memfd:onnx-cooker-blob"

def maps():
    return Path("/proc/self/maps").read_text()

folder = Path(sys.argv[2])
report = {"onnxruntime": onnxruntime.__version__, "cases": {}}
for case in json.loads((folder / "cases.json").read_text()):
    path = folder / case["blob"]
    x, want = np.load(folder / case["input"]), np.load(folder / case["output"])
    for how in ("file", "stream"):
        with open(path, "rb") as stream:
            source = stream if how == "file" else io.BytesIO(stream.read())
            blob = MemoryBlob.read(source, path.stat().st_size)
        before = maps()
        session = session_from_blob(blob, providers=["CPUExecutionProvider"])
        during = maps()
        name = session.get_inputs()[0].name
        got = session.run(None, {name: x})[0]
        info = load_info(session)
        report["cases"][case["name"] + "/" + how] = {
            "path": info.path.value,
            "in_place": info.in_place,
            "matches": bool(np.allclose(got, want, rtol=1e-4, atol=1e-5)),
            # onnxruntime's own mapping of the loader's memfd, and no memfd copy of the model
            "onnxruntime_maps_it": during.count(MEMFD) > before.count(MEMFD),
            "copied": "onnx-cooker-model" in during,
        }
        del session
        blob.close()
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def case_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("memory-blob")
    _cases(folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_a_memory_blob_loads_in_place_in_every_target_version(
    version: str, case_folder: Path, tmp_path: Path
) -> None:
    cases = run_in_runtime(version, tmp_path, ["-c", PROBE, str(case_folder)])["cases"]
    onnx_path, ort_path = EXPECTED[version]
    for how in ("file", "stream"):
        for name in ("onnx-raw", "onnx-zstd", "conv-raw", "ort-raw", "ort-zstd"):
            assert cases[f"{name}/{how}"]["matches"], f"{name}/{how}: {cases[f'{name}/{how}']}"
        assert cases[f"onnx-raw/{how}"]["path"] == onnx_path and cases[f"onnx-raw/{how}"]["in_place"]
        ort = cases[f"ort-raw/{how}"]
        assert ort["path"] == ort_path and not ort["copied"], ort
        # onnxruntime maps the memfd itself (1.28+: in place; 1.24.4 reads the file it names)
        assert ort["onnxruntime_maps_it"] == (ort_path == "ort-mapped") == ort["in_place"], ort


def _blob() -> tuple[bytes, np.ndarray, np.ndarray]:
    model = dense_model(64, 128, batch=1, seed=7, activation="Relu", name="mlp")
    x = np.random.default_rng(3).standard_normal((1, 64)).astype(np.float32)
    return make_weighted_blob(model, "raw")[0], x, run_source(model.SerializeToString(), x)


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_memory_blob_outlives_its_name_while_a_session_uses_it() -> None:
    blob, x, want = _blob()
    memory = MemoryBlob.copy(blob)
    session = session_from_blob(memory, providers=["CPUExecutionProvider"])
    assert load_info(session) is not None and load_info(session).in_place
    del memory
    gc.collect()
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_damage_is_refused_when_the_blob_is_sealed_and_leaves_no_descriptor() -> None:
    blob, _, _ = _blob()
    damaged = bytearray(blob)
    damaged[len(damaged) // 2] ^= 0x40  # inside the raw weights: only their CRC-32 can tell
    before = _fds()
    with pytest.raises(ChecksumMismatchError):
        MemoryBlob.read(io.BytesIO(bytes(damaged)), len(damaged))
    with pytest.raises(NotABlobError):
        MemoryBlob.copy(b"\0" * 4096)
    gc.collect()
    assert _fds() == before


def test_a_stream_that_ends_early_is_a_truncated_blob(tmp_path: Path) -> None:
    blob, _, _ = _blob()
    path = tmp_path / "short.ocb"
    path.write_bytes(blob[:-100])
    before = _fds()
    for stream in (io.BytesIO(blob[:-100]), path.open("rb")):
        with stream, pytest.raises(TruncatedBlobError, match=f"after {len(blob) - 100:,} of the blob's"):
            MemoryBlob.read(stream, len(blob))
    gc.collect()
    assert _fds() == before


def test_reading_takes_exactly_the_blob_from_a_longer_stream(tmp_path: Path) -> None:
    """An archive holds blobs back to back: ``read`` takes its blob and leaves the stream after it."""
    blob, x, want = _blob()
    path = tmp_path / "archive.bin"
    path.write_bytes(b"HEAD" + blob + b"NEXT")
    with path.open("rb") as stream:
        stream.seek(4)
        memory = MemoryBlob.read(stream, len(blob))
        assert stream.read() == b"NEXT"
    session = session_from_blob(memory, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_filled_in_place_then_sealed_and_never_written_again() -> None:
    blob, x, want = _blob()
    memory = MemoryBlob(len(blob))
    with pytest.raises(BundleError, match="seal"):
        session_from_blob(memory)
    view = memory.writable()
    view[:] = blob
    view.release()
    memory.seal()
    with pytest.raises(BundleError, match="sealed"):
        memory.writable()
    session = session_from_blob(memory, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
    assert memory.unchanging  # the kernel sealed it: loads read no byte again
    view, file = memory.borrow()
    assert file is not None and view.readonly
    with pytest.raises(PermissionError):  # the memfd refuses writes: what was checked stays
        os.pwrite(file.fd, b"x", 0)
    os.close(file.fd)
    view.release()
    memory.close()
    for refused in (lambda: session_from_blob(memory), memory.writable, lambda: memory.write(b"x", 0)):
        with pytest.raises(BundleError, match="closed"):
            refused()


def test_closed_while_a_session_runs_and_let_go_with_it() -> None:
    blob, x, want = _blob()

    def mapped() -> int:  # mappings of MemoryBlobs in this process (other tests' may linger)
        return Path("/proc/self/maps").read_text().count("memfd:onnx-cooker-blob")

    before = mapped()
    memory = MemoryBlob.copy(blob)
    session = session_from_blob(memory, providers=["CPUExecutionProvider"])
    assert mapped() > before
    memory.close()  # the session keeps what it reads; the rest goes now
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
    del session
    gc.collect()
    assert mapped() == before  # though `memory` lives on


def test_a_decompressing_stream_is_read_through_its_own_positions(tmp_path: Path) -> None:
    """gzip hands out its file's descriptor, whose positions are not the stream's: read, not sent."""
    blob, x, want = _blob()
    path = tmp_path / "blob.ocb.gz"
    with gzip.open(path, "wb") as packed:
        packed.write(blob)
    with gzip.open(path, "rb") as stream:
        memory = MemoryBlob.read(stream, len(blob))  # type: ignore[arg-type]
    session = session_from_blob(memory, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_a_size_no_model_can_have_is_refused_before_anything_is_allocated() -> None:
    with pytest.raises(BlobTooLargeError, match="max_model_size"):
        MemoryBlob.read(io.BytesIO(b"abc"), 1 << 50)


def test_a_blob_decrypted_piece_by_piece_is_written_then_sealed() -> None:
    """An encrypted archive: each 4 KiB piece deciphered (here: a XOR) and written at its offset."""
    blob, x, want = _blob()
    key = np.frombuffer(os.urandom(4096), np.uint8)
    stored = [
        np.frombuffer(blob[i : i + 4096], np.uint8) ^ key[: len(blob[i : i + 4096])]
        for i in range(0, len(blob), 4096)
    ]
    memory = MemoryBlob(len(blob))
    for index, piece in reversed(list(enumerate(stored))):  # in any order
        memory.write((piece ^ key[: len(piece)]).tobytes(), index * 4096)
    with pytest.raises(ValueError, match="do not fit"):
        memory.write(b"xx", len(blob) - 1)
    memory.seal()
    with pytest.raises(BundleError, match="sealed"):
        memory.write(b"x", 0)
    session = session_from_blob(memory, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
