"""session_from_blob reads the CRC-32s of large raw content while onnxruntime builds the session
(onnx_cooker/runtime/loadpaths.py, DEFER_RAW_CHECK_MIN): damage is still refused, with the same
ChecksumMismatchError, and it wins over onnxruntime's own refusal of the damaged bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from runtime_helpers import CPU, make_blob, make_weighted_blob, to_ort_format

from onnx_cooker.runtime import load_info, session_from_blob
from onnx_cooker.runtime.blob import check_blob
from onnx_cooker.runtime.constants import ModelFormat
from onnx_cooker.runtime.errors import ChecksumMismatchError
from onnx_cooker.runtime.header import read_header
from onnx_cooker.runtime.loadpaths import (
    DEFER_RAW_CHECK_MIN,
    DEFER_RAW_CHECK_MIN_GIL_HELD,
    LoadPath,
    defer_raw_check_min,
    why_not,
)
from onnx_cooker.runtime.rawcheck import LOW_MEMORY_CHECK_FIRST_MIN
from tests.models import large_matmul_model

ROWS, COLUMNS = 1024, 1536  # 6 MiB of float32 weights: over DEFER_RAW_CHECK_MIN


@pytest.fixture(scope="module")
def large() -> tuple[bytes, np.ndarray, np.ndarray]:
    """(source model bytes, an input, onnxruntime's output on the source)."""
    assert ROWS * COLUMNS * 4 >= max(DEFER_RAW_CHECK_MIN, DEFER_RAW_CHECK_MIN_GIL_HELD)
    source = large_matmul_model(ROWS, COLUMNS, seed=5).SerializeToString()
    x = np.random.default_rng(6).standard_normal((1, ROWS)).astype(np.float32)
    expected = onnxruntime.InferenceSession(source, providers=CPU).run(None, {"x": x})[0]
    return source, x, expected


def flipped(blob: bytes, index: int) -> bytes:
    mutable = bytearray(blob)
    mutable[index] ^= 0x40
    return bytes(mutable)


def raw_frame(blob: bytes, section: str):
    (frame,) = [f for f in read_header(blob)[0].frames if f.section == section]
    assert frame.codec == "raw"
    return frame


def test_large_onnx_weights_damaged_anywhere_are_refused(large: tuple) -> None:
    source, x, expected = large
    blob = make_weighted_blob(onnx.load_from_string(source), "raw")[0]
    session = session_from_blob(blob, providers=CPU)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected)
    frame = raw_frame(blob, "weights")
    for where in (0, frame.content_size // 2, frame.content_size - 1):  # first, middle, last piece
        with pytest.raises(ChecksumMismatchError, match=r"weights frame 1 of 1 is damaged: CRC-32"):
            session_from_blob(flipped(blob, frame.data_offset + where), providers=CPU)


@pytest.mark.parametrize(
    "path", ["onnx-external-initializers", "onnx-shared-initializers", "onnx-file-buffers"]
)
def test_every_onnx_load_path_refuses_damaged_weights(large: tuple, path: str) -> None:
    source, x, expected = large
    blob = make_weighted_blob(onnx.load_from_string(source), "raw")[0]
    reason = why_not(LoadPath(path), check_blob(blob), onnxruntime.__version__, None)
    if reason is not None:  # another onnxruntime's path (tests/test_load_paths.py runs each version)
        assert path != "onnx-external-initializers", reason  # every version has the copying path
        return
    session = session_from_blob(blob, providers=CPU, load_path=path)
    assert load_info(session).path.value == path
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected)
    frame = raw_frame(blob, "weights")
    with pytest.raises(ChecksumMismatchError, match=r"weights frame 1 of 1 is damaged: CRC-32"):
        session_from_blob(flipped(blob, frame.data_offset + 12345), providers=CPU, load_path=path)


def test_large_ort_model_damage_wins_over_onnxruntimes_refusal(large: tuple, tmp_path: Path) -> None:
    source, x, expected = large
    blob = make_blob(to_ort_format(source, tmp_path), "ort")
    frame = raw_frame(blob, "graph")
    assert frame.content_size >= DEFER_RAW_CHECK_MIN and frame.data_offset == 0  # the flatbuffer leads
    session = session_from_blob(blob, providers=CPU)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-5)
    # Bytes 4-8 are the flatbuffer's file identifier: onnxruntime refuses the model outright, and
    # the caller hears of the damage, not of onnxruntime's confusion.
    with pytest.raises(ChecksumMismatchError, match=r"graph frame 1 of 1 is damaged: CRC-32"):
        session_from_blob(flipped(blob, 5), providers=CPU)
    # A weight byte: onnxruntime would load it and compute wrong numbers; the session is not returned.
    with pytest.raises(ChecksumMismatchError, match=r"graph frame 1 of 1 is damaged: CRC-32"):
        session_from_blob(flipped(blob, frame.content_size - 4096), providers=CPU)


def test_only_large_content_goes_beside_an_onnxruntime_that_holds_the_gil() -> None:
    """1.24.4 and 1.28.0 hold the GIL while they build a session: there the thread beside them pays
    off only for large content (docs/design.md); 1.32 lets go of it."""
    assert defer_raw_check_min("1.24.4") == defer_raw_check_min("1.28.0") == DEFER_RAW_CHECK_MIN_GIL_HELD
    assert defer_raw_check_min("1.32.0") == defer_raw_check_min("1.33.1") == DEFER_RAW_CHECK_MIN
    assert DEFER_RAW_CHECK_MIN < DEFER_RAW_CHECK_MIN_GIL_HELD


def stages_of_a_damaged_load(
    blob: bytes, index: int, section: str, low_memory: bool
) -> list[tuple[str, float]]:
    """The progress reports of loading ``blob`` with byte ``index`` flipped (which must be refused)."""
    reports: list[tuple[str, float]] = []
    with pytest.raises(ChecksumMismatchError, match=rf"{section} frame 1 of 1 is damaged: CRC-32"):
        session_from_blob(
            flipped(blob, index),
            providers=CPU,
            low_memory=low_memory,
            progress=lambda stage, fraction: reports.append((stage, fraction)),
        )
    return reports


@pytest.mark.parametrize("model_format", [ModelFormat.ONNX, ModelFormat.ORT])
def test_with_low_memory_large_raw_content_is_checked_before_onnxruntime_is_called(
    large: tuple, model_format: ModelFormat, tmp_path: Path
) -> None:
    """Without prepacking, onnxruntime's build is too short to hide a large check, and the threads it
    starts spin and take the cores a check beside it needs (docs/design.md): from
    LOW_MEMORY_CHECK_FIRST_MIN (16 MiB for ORT, whose build is the shortest; 64 MiB for ONNX) the
    damage is found before onnxruntime sees the bytes. Below it, and with prepacking, the check runs
    beside the build."""

    def blob_of(model: onnx.ModelProto) -> tuple[bytes, str]:
        if model_format == ModelFormat.ONNX:
            return make_weighted_blob(model, "raw")[0], "weights"
        ort = to_ort_format(model.SerializeToString(), tmp_path)
        return make_blob(ort, "ort", graph_codec="raw"), "graph"

    rows = LOW_MEMORY_CHECK_FIRST_MIN[model_format] // (4 * 1024)
    big, section = blob_of(large_matmul_model(rows, 1024, seed=8))
    x = np.random.default_rng(9).standard_normal((1, rows)).astype(np.float32)
    weights = np.random.default_rng(8).standard_normal((rows, 1024)).astype(np.float32)  # the model's
    session = session_from_blob(big, providers=CPU, low_memory=True)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ weights, rtol=1e-4, atol=1e-3)
    frame = raw_frame(big, section)
    assert frame.content_size >= LOW_MEMORY_CHECK_FIRST_MIN[model_format]
    weight_byte = frame.data_offset + frame.content_size - 4096  # onnxruntime would load it
    stages = stages_of_a_damaged_load(big, weight_byte, section, low_memory=True)
    assert [stage for stage, _ in stages] == ["decompress"]  # refused before the session stage
    stages = stages_of_a_damaged_load(big, weight_byte, section, low_memory=False)
    assert ("session", 0.0) in stages  # prepacking on: beside the build
    small, section = blob_of(onnx.load_from_string(large[0]))
    small_frame = raw_frame(small, section)
    assert max(DEFER_RAW_CHECK_MIN, DEFER_RAW_CHECK_MIN_GIL_HELD) <= small_frame.content_size
    assert small_frame.content_size < LOW_MEMORY_CHECK_FIRST_MIN[model_format]
    weight_byte = small_frame.data_offset + small_frame.content_size - 4096
    stages = stages_of_a_damaged_load(small, weight_byte, section, low_memory=True)
    assert ("session", 0.0) in stages


def test_small_blobs_are_refused_the_same_way(tmp_path: Path) -> None:
    """Below DEFER_RAW_CHECK_MIN the check runs before onnxruntime is called, with the same error."""
    source = large_matmul_model(64, 32, seed=3).SerializeToString()
    blob = make_blob(to_ort_format(source, tmp_path), "ort", graph_codec="raw")
    frame = raw_frame(blob, "graph")
    assert frame.content_size < DEFER_RAW_CHECK_MIN
    with pytest.raises(ChecksumMismatchError, match=r"graph frame 1 of 1 is damaged: CRC-32"):
        session_from_blob(flipped(blob, 5), providers=CPU)


def test_the_whole_content_crc_is_combined_from_the_pieces_and_damage_still_names_its_piece() -> None:
    """Beside onnxruntime's build, raw content is checked in one zlib call per section (onnxruntime
    1.24.4 and 1.28.0 hold the GIL while they build: a piece-by-piece check would wait for them),
    against a CRC-32 combined from the header's piece CRC-32s (zlib's crc32_combine arithmetic)."""
    import zlib

    from onnx_cooker.runtime.frames import RAW_CRC_PIECE
    from onnx_cooker.runtime.rawcheck import whole_crcs

    rows, columns = 2048, 2560  # 20 MiB: two whole pieces and a short last one
    assert rows * columns * 4 > 2 * RAW_CRC_PIECE and (rows * columns * 4) % RAW_CRC_PIECE
    source = large_matmul_model(rows, columns, seed=7)
    blob = make_weighted_blob(source, "raw")[0]
    frame = raw_frame(blob, "weights")
    assert len(frame.crcs) == 3
    content = memoryview(blob)[frame.data_offset : frame.data_offset + frame.content_size]
    assert whole_crcs(read_header(blob)[0].frames) == [(frame, zlib.crc32(content))]

    x = np.random.default_rng(8).standard_normal((1, rows)).astype(np.float32)
    expected = onnxruntime.InferenceSession(source.SerializeToString(), providers=CPU).run(None, {"x": x})[0]
    np.testing.assert_allclose(
        session_from_blob(blob, providers=CPU).run(None, {"x": x})[0], expected, rtol=1e-5
    )
    for where in (RAW_CRC_PIECE + 5, frame.content_size - 1):  # the second piece, the short last one
        start = where // RAW_CRC_PIECE * RAW_CRC_PIECE
        with pytest.raises(
            ChecksumMismatchError,
            match=rf"weights frame 1 of 1 is damaged: CRC-32 of its content bytes {start:,} to",
        ):
            session_from_blob(flipped(blob, frame.data_offset + where), providers=CPU)


@pytest.mark.parametrize("length", [0, 1, 7, 4097, (5 << 20) + 3, (8 << 20) - 1, 8 << 20])
def test_the_crc_of_a_concatenation_is_combined_from_the_parts_crcs(length: int) -> None:
    """The arithmetic behind ``whole_crcs`` (x^(8n) from a table of powers, one product per set bit
    of n), against zlib on the concatenated bytes, for piece lengths up to a whole piece."""
    import zlib

    from onnx_cooker.runtime.rawcheck import _multmodp, _x8nmodp

    rng = np.random.default_rng(length)
    head, tail = rng.bytes(1000), rng.bytes(length)
    combined = _multmodp(_x8nmodp(length), zlib.crc32(head)) ^ zlib.crc32(tail)
    assert combined == zlib.crc32(head + tail)
