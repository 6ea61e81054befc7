"""Blob format version 2 (onnx_cooker/runtime/blob.py, header.py, sections.py, frames.py): the header,
then graph frames (zstd) and weights frames (zstd, or raw content in skippable frames); its layout,
round trips, stock-tool compatibility, damage in any one frame, and headers that lie.

Generic header checks and legacy version-1 blobs are in tests/test_runtime_blob.py.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import hashlib
import json
import math
import re
import shlex
import shutil
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import runtime_helpers
import zstandard
from runtime_helpers import (
    CPU,
    CRC_ENTRY_COST,
    HEADER_DEFAULTS,
    extra_crcs,
    fresh_header_cache,
    header_payload,
    initializers,
    keep_alignment,
    make_blob_v1,
    pack_header,
    peak_allocation,
    repack,
    sample_input,
    split_blob,
    write_bundle,
)
from runtime_helpers import make_blob_v2 as make_blob

import onnx_cooker.runtime.blob as blob_module
import onnx_cooker.runtime.frames as frames_module
import onnx_cooker.runtime.sections as sections_module
import onnx_cooker.runtime.writer as writer_module
from onnx_cooker.runtime import open_bundle
from onnx_cooker.runtime.blob import Unpacked, decode_blob, unpack_blob
from onnx_cooker.runtime.constants import V2_BLOB_FORMAT_VERSION
from onnx_cooker.runtime.errors import (
    BlobTooLargeError,
    BundleError,
    ChecksumMismatchError,
    CorruptBlobError,
    TruncatedBlobError,
)
from onnx_cooker.runtime.frames import RAW_CRC_PIECE, RAW_MAGIC, RAW_PREFIX_SIZE, crc_count
from onnx_cooker.runtime.header import HEADER_MAGIC, SKIPPABLE_MAGIC, read_header
from onnx_cooker.runtime.sections import (
    MAX_FRAMES,
    RAW_UNLESS_GAIN,
    TENSOR_DTYPES,
    WEIGHT_ALIGNMENT,
    TensorRef,
    WeightsInfo,
)
from onnx_cooker.runtime.session import session_from_blob
from onnx_cooker.runtime.writer import Weights
from onnx_cooker.runtime.writer import encode_blob_v2 as encode_blob

ZSTD_FRAME_MAGIC = 0xFD2FB528
SMALL_FRAME = 4096  # FRAME_CONTENT_SIZE in the tests that want many frames
CODECS = ("raw", "zstd")
ELEM_TYPES = {np.dtype(name): code for code, name in TENSOR_DTYPES.items()}


# --- fixtures and helpers -------------------------------------------------------------------------


def make_weighted_blob(model: Any, codec: str = "auto", **kwargs: Any) -> tuple[bytes, bytes, Weights]:
    """``runtime_helpers.make_weighted_blob`` in format version 2."""
    return runtime_helpers.make_weighted_blob(model, codec, version=2, **kwargs)


@pytest.fixture(scope="module")
def weighted(mlp: Any) -> dict[str, tuple[bytes, bytes, Weights]]:
    """(blob, graph, weights) of the MLP with its weights stored raw, and stored as zstd frames."""
    return {codec: make_weighted_blob(mlp, codec) for codec in CODECS}


@pytest.fixture(scope="module")
def plain(models: dict[str, bytes]) -> bytes:
    """A version-2 blob of the tiny ONNX model: no weights section."""
    return make_blob(models["onnx"], "onnx")


@pytest.fixture
def small_frames(monkeypatch: pytest.MonkeyPatch) -> int:
    """Make the writer cut sections into SMALL_FRAME-byte frames (the loader reads sizes from headers)."""
    monkeypatch.setattr(writer_module, "FRAME_CONTENT_SIZE", SMALL_FRAME)
    return SMALL_FRAME


@pytest.fixture(scope="module")
def zstd_cli() -> str:
    path = shutil.which("zstd")
    if path is None:
        pytest.fail("the zstd command-line tool is needed by these tests: install it (apt-get install zstd)")
    return path


def frames_of(blob: bytes, section: str) -> list[blob_module.Frame]:
    return [frame for frame in read_header(blob)[0].frames if frame.section == section]


def flip(data: bytes, index: int, mask: int = 0x40) -> bytes:
    mutable = bytearray(data)
    mutable[index] ^= mask
    return bytes(mutable)


def edited(blob: bytes, edit: Callable[[dict[str, Any]], object], frames: bytes | None = None) -> bytes:
    """``blob`` with its header JSON changed in place by ``edit``, CRC recomputed, followed by its own
    frames or ``frames``. The JSON is padded as ``keep_alignment`` does: frames that the edit leaves in
    place relative to the header's end keep their raw content on 64-byte boundaries."""
    fields, rest = split_blob(blob)
    fields = copy.deepcopy(fields)
    edit(fields)
    payload = keep_alignment(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode(), blob)
    return pack_header(payload, version=V2_BLOB_FORMAT_VERSION) + (rest if frames is None else frames)


def pseudo_model(size: int, seed: int = 3) -> bytes:
    """Bytes that compress somewhat (zstd makes real blocks of them), standing in for a graph."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 24, size, dtype=np.uint8).tobytes()


def weights_of(arrays: dict[str, np.ndarray], codec: str = "auto", file: str = "w.onnx.data") -> Weights:
    """A weights section as ``onnx_cooker.cook.weights.externalize`` lays one out: tensors at 64-byte
    offsets."""
    pieces, tensors, offset = [], [], 0
    for name, array in arrays.items():
        pad = -offset % WEIGHT_ALIGNMENT
        pieces += [bytes(pad), array.tobytes()]
        offset += pad
        tensors.append(TensorRef(name, ELEM_TYPES[array.dtype], array.shape, offset, array.nbytes))
        offset += array.nbytes
    return Weights(data=b"".join(pieces), file=file, tensors=tuple(tensors), codec=codec)


def encode(model: bytes, weights: Weights | None = None, **fields: Any) -> bytes:
    return encode_blob(model, level=3, weights=weights, model_format="onnx", **{**HEADER_DEFAULTS, **fields})


def section_bytes(unpacked: Unpacked) -> bytes:
    """The whole weights section from an unpacked blob's segments (which must cover it)."""
    assert unpacked.header.weights is not None
    out, position = [], 0
    for start, view in unpacked.segments:
        assert start == position
        out.append(bytes(view))
        position += len(view)
    assert position == unpacked.header.weights.size
    return b"".join(out)


def blob_array(blob: bytes | bytearray) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.uint8)


# --- layout ---------------------------------------------------------------------------------------


def test_byte_layout_matches_the_documented_format(plain: bytes, models: dict[str, bytes]) -> None:
    model = models["onnx"]
    magic, frame_size = struct.unpack_from("<II", plain, 0)
    header_magic, version, crc = struct.unpack_from("<8sHI", plain, 8)
    end = 8 + frame_size
    payload = plain[22:end]

    assert magic == SKIPPABLE_MAGIC == 0x184D2A5E
    assert header_magic == HEADER_MAGIC == b"ONNXCOOK"
    assert version == V2_BLOB_FORMAT_VERSION == 2
    assert crc == zlib.crc32(payload)
    fields = json.loads(payload)
    # Sorted keys, no spaces, then (possibly) spaces that pad the header to where the frames start.
    text = payload.rstrip(b" ")
    assert text == json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    assert fields["graph_size"] == fields["model_size"] == len(model)
    assert fields["weights"] is None
    assert fields["compressed_size"] == len(plain) - end
    assert fields["frames"] == [["graph", "zstd", len(plain) - end, len(model), 0]]

    frame = plain[end:]
    assert struct.unpack_from("<I", frame)[0] == ZSTD_FRAME_MAGIC
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == len(model)
    assert params.has_checksum
    assert zstandard.ZstdDecompressor().decompress(frame, allow_extra_data=False) == model


def test_graph_is_cut_into_independent_frames_of_frame_content_size(small_frames: int) -> None:
    model = pseudo_model(10 * small_frames + 123)
    blob = encode(model)
    header, end = read_header(blob)

    entries = json.loads(header_payload(blob))["frames"]
    assert len(entries) == len(header.frames) == 11
    offset = end
    for index, ((section, codec, size, content, pad), frame) in enumerate(
        zip(entries, header.frames, strict=True)
    ):
        piece = model[index * small_frames : (index + 1) * small_frames]
        assert (section, codec, pad) == ("graph", "zstd", 0)
        assert content == len(piece) == (small_frames if index < 10 else 123)
        assert (frame.offset, frame.size, frame.content_offset) == (offset, size, index * small_frames)
        # Each frame is a whole zstd frame of its own, with content size and checksum: it decodes alone.
        params = zstandard.get_frame_parameters(blob[offset : offset + size])
        assert (params.content_size, params.has_checksum) == (content, True)
        assert (
            zstandard.ZstdDecompressor().decompress(blob[offset : offset + size], allow_extra_data=False)
            == piece
        )
        offset += size
    assert offset == len(blob) == end + header.compressed_size
    assert decode_blob(blob)[1] == model


def test_empty_model_is_one_empty_frame() -> None:
    blob = encode(b"")
    header, end = read_header(blob)
    assert [(f.section, f.codec, f.content_size) for f in header.frames] == [("graph", "zstd", 0)]
    assert zstandard.get_frame_parameters(blob[end:]).has_checksum
    assert decode_blob(blob) == (header, b"")


def test_raw_weights_frames_match_the_documented_layout(weighted: dict, mlp: Any) -> None:
    blob, graph, weights = weighted["raw"]
    header, end = read_header(blob)
    fields = json.loads(header_payload(blob))

    assert fields["graph_size"] == len(graph)
    assert fields["model_size"] == len(graph) + len(weights.data)
    assert fields["weights"] == {
        "file": "tiny.onnx.data",
        "size": len(weights.data),
        "sha256": hashlib.sha256(weights.data).hexdigest(),
        "tensors": [[t.name, t.elem_type, list(t.dims), t.offset, t.nbytes] for t in weights.tensors],
    }
    assert [t[0] for t in fields["weights"]["tensors"]] == ["W1", "perm", "W2h"]
    assert [f[:2] for f in fields["frames"]] == [["graph", "zstd"], ["weights", "raw"]]
    # A raw entry ends with one CRC-32 per RAW_CRC_PIECE of its content: here one piece.
    assert len(weights.data) < RAW_CRC_PIECE == 8 << 20
    assert len(fields["frames"][0]) == 5
    assert fields["frames"][1][2:] == [
        header.frames[1].size,
        len(weights.data),
        header.frames[1].pad,
        [zlib.crc32(weights.data)],
    ]

    raw = frames_of(blob, "weights")
    assert len(raw) == 1
    frame = raw[0]
    assert frame.offset == end + frames_of(blob, "graph")[0].size
    magic, payload_size = struct.unpack_from("<II", blob, frame.offset)
    assert magic == RAW_MAGIC == 0x184D2A5F
    assert RAW_PREFIX_SIZE == 8
    assert payload_size == frame.pad + frame.content_size == frame.size - 8
    data_offset = frame.offset + 8 + frame.pad
    assert data_offset == frame.data_offset
    assert data_offset % WEIGHT_ALIGNMENT == 0
    assert 0 <= frame.pad < WEIGHT_ALIGNMENT
    assert blob[frame.offset + 8 : data_offset] == bytes(frame.pad)
    assert blob[data_offset : data_offset + frame.content_size] == weights.data
    assert data_offset + frame.content_size == len(blob)
    # Each tensor is the little-endian content of the source initializer, at its offset.
    sources = initializers(mlp)
    for ref in weights.tensors:
        stored = np.frombuffer(
            blob, TENSOR_DTYPES[ref.elem_type], math.prod(ref.dims), data_offset + ref.offset
        )
        np.testing.assert_array_equal(stored.reshape(ref.dims), sources[ref.name])


def test_zstd_weights_frames_match_the_documented_layout(weighted: dict) -> None:
    blob, graph, weights = weighted["zstd"]
    header, end = read_header(blob)
    offset, content = end, {"graph": b"", "weights": b""}
    for section, codec, size, content_size, pad in json.loads(header_payload(blob))["frames"]:
        assert codec == "zstd" and pad == 0
        params = zstandard.get_frame_parameters(blob[offset : offset + size])
        assert (params.content_size, params.has_checksum) == (content_size, True)
        content[section] += zstandard.ZstdDecompressor().decompress(
            blob[offset : offset + size], allow_extra_data=False
        )
        offset += size
    assert offset == len(blob)
    assert content == {"graph": graph, "weights": weights.data}
    assert header.weights is not None and header.weights.size == len(weights.data)


def test_header_to_dict_is_what_the_header_frame_holds(weighted: dict) -> None:
    for blob, _, _ in weighted.values():
        header, end = read_header(blob)
        text = json.dumps(header.to_dict(), sort_keys=True, separators=(",", ":")).encode()
        assert header_payload(blob).rstrip(b" ") == text
        assert read_header(pack_header(text.ljust(end - 22), version=2) + blob[end:]) == (header, end)


# --- round trips ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "zstd", "auto"])
def test_round_trip_of_graph_and_weights(codec: str, mlp: Any) -> None:
    blob, graph, weights = make_weighted_blob(mlp, codec)
    unpacked = unpack_blob(blob)
    header = unpacked.header

    assert unpacked.model == graph
    assert decode_blob(blob) == (header, graph)
    assert header.weights == WeightsInfo(
        file="tiny.onnx.data",
        size=len(weights.data),
        sha256=hashlib.sha256(weights.data).hexdigest(),
        tensors=weights.tensors,
    )
    assert header.model_size == len(graph) + len(weights.data)
    assert header.graph_size == len(graph)
    codecs = {f.codec for f in header.frames if f.section == "weights"}
    assert len(codecs) == 1
    if codec != "auto":
        assert codecs == {codec}
    assert section_bytes(unpacked) == weights.data
    sources = initializers(mlp)
    for ref in header.weights.tensors:
        tensor = unpacked.tensor(ref)
        assert tensor.dtype == sources[ref.name].dtype and tensor.shape == sources[ref.name].shape
        np.testing.assert_array_equal(tensor, sources[ref.name])
        assert not tensor.flags.writeable
    # The graph refers to the weights by the header's file name: the inline initializers are gone.
    assert b"tiny.onnx.data" in unpacked.model
    assert len(unpacked.model) < len(mlp.SerializeToString()) - len(weights.data) // 2


def test_auto_stores_weights_raw_unless_zstd_gains_enough() -> None:
    rng = np.random.default_rng(11)
    trained_like = weights_of({"w": rng.standard_normal(1 << 15).astype(np.float32)})
    zeros = weights_of({"w": np.zeros(1 << 15, dtype=np.float32)})
    # The premise: level-3 zstd gains under RAW_UNLESS_GAIN on random float32, far more on zeros.
    for weights, gains_enough in ((trained_like, False), (zeros, True)):
        packed = len(zstandard.ZstdCompressor(level=3).compress(weights.data))
        assert (packed < len(weights.data) * (1 - RAW_UNLESS_GAIN)) is gains_enough

    for weights, chosen in ((trained_like, "raw"), (zeros, "zstd")):
        for codec, expected in (("auto", chosen), ("raw", "raw"), ("zstd", "zstd")):
            blob = encode(b"graph", dataclasses.replace(weights, codec=codec))
            assert {f.codec for f in frames_of(blob, "weights")} == {expected}, (codec, chosen)
            unpacked = unpack_blob(blob)
            assert unpacked.model == b"graph"
            assert section_bytes(unpacked) == weights.data


def test_one_raw_frame_per_tensor_when_the_raw_frame_limit_is_small(
    monkeypatch: pytest.MonkeyPatch, mlp: Any
) -> None:
    monkeypatch.setattr(writer_module, "MAX_RAW_FRAME_CONTENT", 1)
    blob, _, weights = make_weighted_blob(mlp, "raw")
    raw = frames_of(blob, "weights")

    assert [(f.codec, f.content_offset) for f in raw] == [("raw", t.offset) for t in weights.tensors]
    assert all(f.data_offset % WEIGHT_ALIGNMENT == 0 for f in raw)
    unpacked = unpack_blob(blob)
    assert len(unpacked.segments) == 3
    assert section_bytes(unpacked) == weights.data
    for ref in weights.tensors:
        assert np.shares_memory(unpacked.tensor(ref), blob_array(blob))


def test_raw_frames_hold_at_most_the_raw_frame_limit_unless_one_tensor_is_bigger(
    monkeypatch: pytest.MonkeyPatch, mlp: Any
) -> None:
    # W1 (4,096 B at 0), perm (1,536 B at 4,096), W2h (3,072 B at 5,632): three frames fit the limit.
    monkeypatch.setattr(writer_module, "MAX_RAW_FRAME_CONTENT", 4096)
    blob, _, weights = make_weighted_blob(mlp, "raw")
    for frame in frames_of(blob, "weights"):
        inside = [
            t
            for t in weights.tensors
            if frame.content_offset <= t.offset < frame.content_offset + frame.content_size
        ]
        assert frame.content_size <= 4096 or len(inside) == 1, (frame, inside)


def test_raw_tensors_are_views_into_the_blob_and_zstd_ones_are_decoded(weighted: dict) -> None:
    for codec, (blob, _, weights) in weighted.items():
        for data in (blob, bytearray(blob)):
            unpacked = unpack_blob(data)
            tensors = [unpacked.tensor(ref) for ref in weights.tensors]
            shared = [np.shares_memory(t, blob_array(data)) for t in tensors]
            assert shared == [codec == "raw"] * len(tensors), codec
            assert all(not t.flags.writeable for t in tensors)
            if codec == "zstd":
                # One new buffer holds the whole decoded section.
                ((start, view),) = unpacked.segments
                assert start == 0 and bytes(view) == weights.data
                assert all(np.shares_memory(t, np.asarray(view)) for t in tensors)


def test_tensor_spanning_two_raw_frames_is_decoded_into_a_new_buffer(
    monkeypatch: pytest.MonkeyPatch, mlp: Any
) -> None:
    monkeypatch.setattr(writer_module, "MAX_RAW_FRAME_CONTENT", 1)
    blob, _, weights = make_weighted_blob(mlp, "raw")
    boundary = weights.tensors[1].offset  # where the second raw frame's content starts
    span = TensorRef("span", 2, (64,), boundary - 32, 64)  # uint8 bytes of both frames
    crafted = edited(blob, lambda f: f["weights"]["tensors"].append(list(span.to_json())))

    unpacked = unpack_blob(crafted)
    tensors = [*weights.tensors, span]
    assert unpacked.header.weights is not None and unpacked.header.weights.tensors == tuple(tensors)
    assert section_bytes(unpacked) == weights.data
    for ref in tensors:
        tensor = unpacked.tensor(ref)
        assert not np.shares_memory(tensor, blob_array(crafted))
        assert tensor.tobytes() == weights.data[ref.offset : ref.offset + ref.nbytes]


def test_many_frames_decode_identically_on_one_and_two_threads(
    small_frames: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(4)
    model = pseudo_model(25 * small_frames + 7)
    weights = weights_of(
        {
            "a": rng.integers(-3, 3, (40, 257)).astype(np.int64),
            "b": rng.standard_normal(5000).astype(np.float16),
            "c": np.zeros((17, 33), dtype=np.float32),
        },
        codec="zstd",
    )
    blob = encode(model, weights)
    header, _ = read_header(blob)
    assert sum(f.section == "graph" for f in header.frames) == 26
    assert sum(f.section == "weights" for f in header.frames) >= 20

    decoding_threads: list[str] = []
    real = frames_module._decompress_frame

    def recording(frame: memoryview, target: memoryview) -> None:
        decoding_threads.append(threading.current_thread().name)
        real(frame, target)

    monkeypatch.setattr(frames_module, "_decompress_frame", recording)
    results = {}
    for threads in (1, 2, None):
        decoding_threads.clear()
        unpacked = unpack_blob(blob, threads=threads)
        results[threads] = (unpacked.model, section_bytes(unpacked))
        assert len(decoding_threads) == len(header.frames)
        names = set(decoding_threads)
        if threads == 1:
            assert names == {threading.current_thread().name}
        elif threads == 2:  # the pool decodes; how it shares the frames out is its business
            assert names and all(name.startswith("blob-decode") for name in names)
    assert results[1] == results[2] == results[None] == (model, weights.data)


# --- damage in one frame --------------------------------------------------------------------------


@pytest.fixture
def many_frames(small_frames: int) -> tuple[bytes, bytes, Weights]:
    """(blob, graph, weights): 8 graph frames and 3 zstd weights frames of SMALL_FRAME content."""
    rng = np.random.default_rng(8)
    model = pseudo_model(8 * small_frames - 5)
    weights = weights_of({"w": rng.integers(0, 7, 3 * small_frames - 100).astype(np.uint8)}, codec="zstd")
    blob = encode(model, weights)
    assert [f.section for f in read_header(blob)[0].frames] == ["graph"] * 8 + ["weights"] * 3
    return blob, model, weights


@pytest.mark.parametrize("section", ["graph", "weights"])
@pytest.mark.parametrize("where", ["middle", "content checksum"])
def test_flipped_byte_in_one_zstd_frame_names_the_section_and_frame(
    section: str, where: str, many_frames: tuple[bytes, bytes, Weights]
) -> None:
    blob = many_frames[0]
    frames = frames_of(blob, section)
    for number in sorted({1, 2, len(frames)}):
        frame = frames[number - 1]
        index = frame.offset + frame.size // 2 if where == "middle" else frame.offset + frame.size - 1
        message = (
            rf"blob of model 'tiny' \(test-platform\): {section} frame {number} of {len(frames)} is damaged"
        )
        if where == "content checksum":
            message += r" \(.*checksum"
        with pytest.raises(ChecksumMismatchError, match=message):
            unpack_blob(flip(blob, index), threads=2)


def test_damaged_zstd_frame_header_is_detected(many_frames: tuple[bytes, bytes, Weights]) -> None:
    blob = many_frames[0]
    frame = frames_of(blob, "graph")[1]
    with pytest.raises(ChecksumMismatchError, match=r"graph frame 2 of \d+ is damaged"):
        decode_blob(flip(blob, frame.offset))  # the zstd magic
    # The frame header descriptor: the content size is no longer where it was (or not there).
    with pytest.raises(
        ChecksumMismatchError, match=r"graph frame 2 of \d+ (is damaged|does not match its header)"
    ):
        decode_blob(flip(blob, frame.offset + 4, 0x80))


@pytest.mark.parametrize("byte", range(RAW_PREFIX_SIZE))
def test_damaged_raw_frame_prefix_is_detected(byte: int, weighted: dict) -> None:
    blob = weighted["raw"][0]
    frame = frames_of(blob, "weights")[0]
    with pytest.raises(
        ChecksumMismatchError, match=r"weights frame \d+ of \d+ is not the raw frame its header names"
    ):
        unpack_blob(flip(blob, frame.offset + byte, 0x01))


def test_frame_numbers_count_within_the_section_in_every_message(
    weighted: dict, monkeypatch: pytest.MonkeyPatch, mlp: Any, many_frames: tuple[bytes, bytes, Weights]
) -> None:
    """Frame layout (check_frames), raw content (check_raw) and zstd decoding (decode_into) all call the
    k-th frame of a section "<section> frame k of n", whatever frames of the other section precede it."""
    blob = weighted["raw"][0]
    frame = frames_of(blob, "weights")[0]
    with pytest.raises(ChecksumMismatchError, match=r"weights frame 1 of 1 is not the raw frame"):
        unpack_blob(flip(blob, frame.offset))
    with pytest.raises(ChecksumMismatchError, match=r"weights frame 1 of 1 is damaged: CRC-32"):
        unpack_blob(flip(blob, frame.data_offset))

    monkeypatch.setattr(writer_module, "MAX_RAW_FRAME_CONTENT", 1)
    three = make_weighted_blob(mlp, "raw")[0]
    second = frames_of(three, "weights")[1]
    assert read_header(three)[0].frames.index(second) == 2  # the third frame of the blob
    with pytest.raises(ChecksumMismatchError, match=r"weights frame 2 of 3 is not the raw frame"):
        unpack_blob(flip(three, second.offset))
    with pytest.raises(ChecksumMismatchError, match=r"weights frame 2 of 3 is damaged: CRC-32"):
        unpack_blob(flip(three, second.data_offset + 1), threads=2)

    zstd = many_frames[0]
    second = frames_of(zstd, "weights")[1]
    with pytest.raises(ChecksumMismatchError, match=r": weights frame 2 of 3 is damaged \("):
        unpack_blob(flip(zstd, second.offset))  # its magic: check_frames
    with pytest.raises(ChecksumMismatchError, match=r": weights frame 2 of 3 is damaged \(.*checksum"):
        unpack_blob(flip(zstd, second.offset + second.size - 1))  # its checksum: decode_into


def test_zstd_frame_stored_under_the_raw_codec_is_refused(weighted: dict) -> None:
    """The header calls the zstd weights frame raw (sizes consistent): its magic gives it away."""
    blob = weighted["zstd"][0]
    frame = frames_of(blob, "weights")[0]

    # As if its first bytes were a raw frame's prefix and padding: the "content" is 64-byte aligned and
    # its CRC-32 is right, so only the frame's magic tells.
    pad = -(frame.offset + RAW_PREFIX_SIZE) % WEIGHT_ALIGNMENT
    content = blob[frame.offset + RAW_PREFIX_SIZE + pad : frame.offset + frame.size]

    def as_raw(fields: dict[str, Any]) -> None:
        fields["frames"][1] = ["weights", "raw", frame.size, len(content), pad, [zlib.crc32(content)]]
        fields["weights"]["size"] = len(content)
        fields["weights"]["tensors"] = []
        fields["model_size"] = fields["graph_size"] + len(content)

    crafted = edited(blob, as_raw)
    assert read_header(crafted)[0].frames[1].data_offset % WEIGHT_ALIGNMENT == 0
    with pytest.raises(ChecksumMismatchError, match=r"weights frame 1 of 1 is not the raw frame"):
        unpack_blob(crafted)
    with pytest.raises(ChecksumMismatchError, match=r"weights frame 1 of 1 is not the raw frame"):
        unpack_blob(crafted, check_raw=False)


@pytest.mark.parametrize("checksum", [False, True])
def test_zstd_frame_without_content_checksum_or_size_is_refused(checksum: bool, plain: bytes) -> None:
    model = decode_blob(plain)[1]
    frame = zstandard.ZstdCompressor(write_checksum=checksum, write_content_size=not checksum).compress(model)

    def swap(fields: dict[str, Any]) -> None:
        fields["frames"][0][2] = fields["compressed_size"] = len(frame)

    with pytest.raises(ChecksumMismatchError, match="graph frame 1 of 1 does not match its header"):
        decode_blob(edited(plain, swap, frames=frame))


def test_frame_content_sizes_moved_between_frames_are_detected(
    many_frames: tuple[bytes, bytes, Weights],
) -> None:
    def move(fields: dict[str, Any]) -> None:  # the sums still agree with graph_size
        fields["frames"][0][3] += 1
        fields["frames"][1][3] -= 1

    with pytest.raises(ChecksumMismatchError, match="graph frame 1 of .* does not match its header"):
        decode_blob(edited(many_frames[0], move))


@pytest.mark.parametrize("tail", [b"JUNKJUNK", zstandard.ZstdCompressor().compress(b"smuggled")])
def test_extra_data_inside_a_frames_declared_size_is_refused(tail: bytes, plain: bytes) -> None:
    """The header is consistent (frame size, compressed_size) but the frame's region holds more than its
    zstd frame: `zstd -d` would write the model followed by whatever a second frame holds."""
    fields, frames = split_blob(plain)

    def grow(fields: dict[str, Any]) -> None:
        fields["frames"][0][2] += len(tail)
        fields["compressed_size"] += len(tail)

    crafted = edited(plain, grow, frames=frames + tail)
    with pytest.raises(ChecksumMismatchError, match="graph frame 1 of 1 is damaged"):
        decode_blob(crafted)


@pytest.mark.parametrize("codec", CODECS)
def test_blob_cut_anywhere_after_the_header_is_truncated(codec: str, weighted: dict) -> None:
    blob = weighted[codec][0]
    header, end = read_header(blob)
    graph, weights = frames_of(blob, "graph")[0], frames_of(blob, "weights")[0]
    cuts = {
        end,
        end + 1,
        graph.offset + graph.size // 2,
        graph.offset + graph.size - 4,
        weights.offset,
        weights.offset + 4,
        weights.offset + RAW_PREFIX_SIZE + weights.pad // 2,
        weights.offset + weights.size // 2,
        len(blob) - 1,
    }
    for cut in sorted(cuts):
        present = cut - end
        with pytest.raises(
            TruncatedBlobError,
            match=rf"is cut off: {present:,} of {header.compressed_size:,} bytes of frames present",
        ):
            unpack_blob(blob[:cut])


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "extra", [b"\0", zstandard.ZstdCompressor().compress(b"x"), struct.pack("<II", RAW_MAGIC, 0)]
)
def test_trailing_bytes_after_the_last_frame_are_refused(codec: str, extra: bytes, weighted: dict) -> None:
    with pytest.raises(CorruptBlobError, match=rf"has {len(extra)} unexpected trailing bytes"):
        unpack_blob(weighted[codec][0] + extra)


# --- raw content: a CRC-32 per piece, on 64-byte boundaries ---------------------------------------

SMALL_PIECE = 256  # RAW_CRC_PIECE in the tests that want many pieces


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> int:
    """Make writer and loader check raw content in SMALL_PIECE-byte pieces (sections.py imports the name)."""
    monkeypatch.setattr(frames_module, "RAW_CRC_PIECE", SMALL_PIECE)
    monkeypatch.setattr(sections_module, "RAW_CRC_PIECE", SMALL_PIECE)
    fresh_header_cache(monkeypatch)
    return SMALL_PIECE


def crc_message(number: int, total: int, start: int, end: int, file: str = "") -> str:
    """The damaged piece's message; through a bundle it begins with the blob ``file``."""
    return (
        rf"^{re.escape(file + ': ' if file else '')}blob of model 'tiny' \(test-platform\): weights frame "
        rf"{number} of {total} is damaged: CRC-32 of its content bytes {start:,} to {end:,} differs from the "
        r"header's; re-copy the blob file whole, or re-run `onnx-cooker cook`$"
    )


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_flipped_byte_in_raw_weights_is_caught_by_their_crc(where: str, weighted: dict) -> None:
    blob = weighted["raw"][0]
    (frame,) = frames_of(blob, "weights")
    at = {"first": 0, "middle": frame.content_size // 2, "last": frame.content_size - 1}[where]
    damaged = flip(blob, frame.data_offset + at, 0x01)
    message = crc_message(1, 1, 0, frame.content_size)
    assert frame.content_size == 8704

    for threads in (1, 2, None):
        with pytest.raises(ChecksumMismatchError, match=message):
            unpack_blob(damaged, threads=threads)
    with pytest.raises(ChecksumMismatchError, match=message):
        decode_blob(damaged)
    with pytest.raises(ChecksumMismatchError, match=message):
        session_from_blob(damaged, providers=CPU)
    with pytest.raises(ChecksumMismatchError, match=message):
        session_from_blob(bytearray(damaged), providers=CPU)


def test_check_raw_false_skips_the_crcs_and_hands_out_the_stored_bytes(weighted: dict) -> None:
    """For callers that just checked the whole blob otherwise (Bundle.session: the manifest's sha256)."""
    blob, graph, weights = weighted["raw"]
    (frame,) = frames_of(blob, "weights")
    damaged = flip(blob, frame.data_offset + 100)
    stored = bytearray(weights.data)
    stored[100] ^= 0x40

    unpacked = unpack_blob(damaged, check_raw=False)
    assert unpacked.model == graph
    assert section_bytes(unpacked) == bytes(stored) != weights.data
    assert all(np.shares_memory(unpacked.tensor(ref), blob_array(damaged)) for ref in weights.tensors)
    with pytest.raises(ChecksumMismatchError, match=crc_message(1, 1, 0, len(weights.data))):
        unpack_blob(damaged, check_raw=True)
    # Only the content's CRCs are skipped: the frame layout is still checked.
    with pytest.raises(ChecksumMismatchError, match="weights frame 1 of 1 is not the raw frame"):
        unpack_blob(flip(blob, frame.offset), check_raw=False)


def test_raw_crcs_are_checked_by_session_from_blob_and_by_bundle_session_unless_open_bundle_hashed_it(
    weighted: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlp_expected: np.ndarray
) -> None:
    """A blob open_bundle hashed (the same file, unchanged) is not read again on a load; otherwise its
    raw content is checked by its CRC-32s, once, as session_from_blob checks it."""
    checked: list[int] = []
    real = blob_module.check_raw_frames

    def counting(data: memoryview, frames: Any, where: str, threads: int | None) -> None:
        checked.append(sum(len(frame.crcs) for frame in frames))
        real(data, frames, where, threads)

    monkeypatch.setattr(blob_module, "check_raw_frames", counting)
    blob = weighted["raw"][0]
    root = write_bundle(tmp_path / "bundle", {"mlp": ("onnx", blob)})

    session = open_bundle(root).session("mlp", providers=CPU)
    assert checked == []  # open_bundle hashed this very file: no second pass over its content
    open_bundle(root, verify=False).session("mlp", providers=CPU)
    assert checked == [len(read_header(blob)[0].frames[-1].crcs)]
    np.testing.assert_allclose(
        session.run(None, {"x": sample_input()})[0], mlp_expected, rtol=1e-5, atol=1e-5
    )
    session_from_blob(blob, providers=CPU)
    assert checked == [1, 1]


def test_raw_frame_carries_one_crc_per_piece_and_damage_names_the_piece(small_pieces: int) -> None:
    rng = np.random.default_rng(12)
    # a: 800 B at 0; b: 74 B at 832 (64-byte aligned): 906 B, pieces of 256, 256, 256 and 138 B.
    weights = weights_of(
        {"a": rng.standard_normal(200).astype(np.float32), "b": rng.integers(0, 9, 37).astype(np.int16)},
        codec="raw",
    )
    blob = encode(b"graph", weights)
    (frame,) = frames_of(blob, "weights")
    content = weights.data
    ranges = [(0, 256), (256, 512), (512, 768), (768, 906)]
    assert frame.content_size == len(content) == 906
    assert frame.crcs == tuple(zlib.crc32(content[start:end]) for start, end in ranges)
    assert len(frame.crcs) == crc_count(906) == 4
    assert json.loads(header_payload(blob))["frames"][1][5] == list(frame.crcs)
    assert section_bytes(unpack_blob(blob)) == content

    for start, end in ranges:
        for at in (start, (start + end) // 2, end - 1):
            damaged = flip(blob, frame.data_offset + at)
            for threads in (1, 4):
                with pytest.raises(ChecksumMismatchError, match=crc_message(1, 1, start, end)):
                    unpack_blob(damaged, threads=threads)
    with pytest.raises(ChecksumMismatchError, match=crc_message(1, 1, 768, 906)):
        session_from_blob(flip(blob, frame.data_offset + 900), providers=CPU)
    # Two damaged pieces: the first is named, however many threads check them.
    twice = flip(flip(blob, frame.data_offset + 600), frame.data_offset + 300)
    for threads in (1, 2, 4):
        with pytest.raises(ChecksumMismatchError, match=crc_message(1, 1, 256, 512)):
            unpack_blob(twice, threads=threads)


def test_crc_pieces_count_within_each_raw_frame(small_pieces: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "MAX_RAW_FRAME_CONTENT", 1)
    rng = np.random.default_rng(12)
    weights = weights_of(
        {"a": rng.standard_normal(200).astype(np.float32), "b": rng.integers(0, 9, 37).astype(np.int16)},
        codec="raw",
    )
    blob = encode(b"graph", weights)
    first, second = frames_of(blob, "weights")
    assert (first.content_size, second.content_offset, second.content_size) == (832, 832, 74)
    assert (len(first.crcs), len(second.crcs)) == (4, 1)
    with pytest.raises(ChecksumMismatchError, match=crc_message(1, 2, 512, 768)):
        unpack_blob(flip(blob, first.data_offset + 700))
    with pytest.raises(ChecksumMismatchError, match=crc_message(1, 2, 768, 832)):
        unpack_blob(flip(blob, first.data_offset + 831))
    with pytest.raises(ChecksumMismatchError, match=crc_message(2, 2, 0, 74)):
        unpack_blob(flip(blob, second.data_offset + 10))


def test_crc_piece_size_is_part_of_the_format(small_pieces: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A blob whose raw frames list CRCs of other pieces than this loader's is refused, not misread."""
    weights = weights_of({"a": np.arange(300, dtype=np.float32)}, codec="raw")
    blob = encode(b"graph", weights)
    assert len(frames_of(blob, "weights")[0].crcs) == 5
    monkeypatch.setattr(frames_module, "RAW_CRC_PIECE", RAW_CRC_PIECE)
    monkeypatch.setattr(sections_module, "RAW_CRC_PIECE", RAW_CRC_PIECE)
    fresh_header_cache(monkeypatch)
    with pytest.raises(CorruptBlobError, match=r"frame 2: a raw frame needs one CRC-32 per"):
        unpack_blob(blob)


def test_empty_raw_content_has_an_empty_crc_list() -> None:
    blob = encode(b"graph", Weights(data=b"", file="w.onnx.data", tensors=(), codec="raw"))
    entry = json.loads(header_payload(blob))["frames"][1]
    assert (entry[1], entry[3], entry[5]) == ("raw", 0, [])
    unpacked = unpack_blob(blob)
    assert (unpacked.model, section_bytes(unpacked)) == (b"graph", b"")
    with pytest.raises(CorruptBlobError, match=r"frame 2: a raw frame needs one CRC-32 per"):
        unpack_blob(edited(blob, _set("frames.1.5", [0])))


@pytest.mark.parametrize("shift", [1, 8, 32, 63, 64, 128])
def test_raw_content_must_start_on_a_64_byte_boundary_of_the_blob(shift: int, weighted: dict) -> None:
    """A header rewritten to another length moves every frame behind it: raw content is then refused,
    unless it moved by a multiple of 64 bytes. zstd frames may lie anywhere."""
    for codec, (blob, graph, weights) in weighted.items():
        end = read_header(blob)[1]
        crafted = pack_header(header_payload(blob) + b" " * shift, version=2) + blob[end:]
        if codec == "raw" and shift % WEIGHT_ALIGNMENT:
            message = r"^blob header frame 2: raw content not at a 64-byte boundary$"
            for check_raw in (True, False):
                with pytest.raises(CorruptBlobError, match=message):
                    unpack_blob(crafted, check_raw=check_raw)
            with pytest.raises(CorruptBlobError, match=message):
                session_from_blob(crafted, providers=CPU)
        else:
            unpacked = unpack_blob(crafted)
            assert (unpacked.model, section_bytes(unpacked)) == (graph, weights.data)


def test_repack_helpers_keep_raw_content_aligned(weighted: dict) -> None:
    """The helpers these tests rewrite headers with (the premise of the tests that use them)."""
    blob, graph, weights = weighted["raw"]
    for crafted in (
        repack(blob, aligned=True, name="a-much-longer-name-than-tiny-so-the-header-grows"),
        repack(blob, same_length=True, name="t"),
        edited(blob, _set("name", "x" * 150)),
    ):
        assert len(header_payload(crafted)) % WEIGHT_ALIGNMENT == len(header_payload(blob)) % WEIGHT_ALIGNMENT
        unpacked = unpack_blob(crafted)
        assert (unpacked.model, section_bytes(unpacked)) == (graph, weights.data)


# --- headers that lie (CRC recomputed): CorruptBlobError before any frame is read -----------------


def _tensor(index: int, position: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(fields: dict[str, Any]) -> None:
        fields["weights"]["tensors"][index][position] = value

    return edit


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(fields: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = fields
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return edit


def _add(path: str, delta: int) -> Callable[[dict[str, Any]], None]:
    def edit(fields: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = fields
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[int(last) if isinstance(target, list) else last] += delta

    return edit


def _all(*edits: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(fields: dict[str, Any]) -> None:
        for one in edits:
            one(fields)

    return edit


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda fields: fields.pop(key)


LIES: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "compressed-size-off-by-one": (
        "raw",
        _add("compressed_size", 1),
        "compressed_size is not the sum of its frame sizes",
    ),
    "frame-size-off-by-one": (
        "zstd",
        _add("frames.1.2", 1),
        "compressed_size is not the sum of its frame sizes",
    ),
    "graph-content-short": (
        "raw",
        _all(_add("graph_size", 1), _add("model_size", 1)),
        r"blob frames hold [\d,]+ bytes of graph, but the header declares",
    ),
    "graph-frame-content-long": (
        "zstd",
        _add("frames.0.3", 1),
        r"blob frames hold [\d,]+ bytes of graph, but the header declares",
    ),
    "weights-content-short": (
        "zstd",
        _all(_add("weights.size", 64), _add("model_size", 64)),
        r"blob frames hold [\d,]+ bytes of weights, but the header declares",
    ),
    "no-frames-at-all": (
        "zstd",
        _all(_set("frames", []), _set("compressed_size", 0)),
        r"frames hold 0 bytes of graph",
    ),
    "model-size-not-the-sum": (
        "raw",
        _add("model_size", -1),
        "model_size is not the graph size plus the weights size",
    ),
    "negative-graph-size": ("raw", _set("graph_size", -1), "negative graph size"),
    "graph-size-not-an-int": (
        "raw",
        _set("graph_size", 1.0),
        r"field 'graph_size' has the wrong type \(float\)",
    ),
    "graph-size-bool": ("raw", _set("graph_size", True), r"field 'graph_size' has the wrong type \(bool\)"),
    "frames-not-a-list": ("raw", _set("frames", {}), r"field 'frames' has the wrong type \(dict\)"),
    "weights-a-list": ("raw", _set("weights", []), r"field 'weights' has the wrong type \(list\)"),
    "no-graph-size": ("raw", _drop("graph_size"), r"lacks field\(s\) graph_size"),
    "no-frames": ("raw", _drop("frames"), r"lacks field\(s\) frames"),
    "no-weights": ("raw", _drop("weights"), r"lacks field\(s\) weights"),
    "frame-of-four": ("raw", _set("frames.0", ["graph", "zstd", 10, 10]), r"frame 1 is not \[section, codec"),
    "zstd-frame-of-six": (
        "raw",
        _set("frames.0", ["graph", "zstd", 10, 10, 0, []]),
        r"frame 1 is not \[section, codec",
    ),
    "raw-frame-of-five": (
        "raw",
        lambda f: f["frames"][1].pop(),
        r"frame 2 is not \[section, codec, size, content size, pad\(, CRC-32 list for raw frames\)\]",
    ),
    "raw-frame-of-seven": ("raw", lambda f: f["frames"][1].append([]), r"frame 2 is not \[section, codec"),
    "raw-crcs-not-a-list": ("raw", _set("frames.1.5", 0), r"frame 2: a raw frame needs one CRC-32 per"),
    "raw-crcs-empty": ("raw", _set("frames.1.5", []), r"frame 2: a raw frame needs one CRC-32 per"),
    "raw-crcs-one-too-many": (
        "raw",
        lambda f: f["frames"][1][5].append(0),
        r"frame 2: a raw frame needs one CRC-32 per",
    ),
    "raw-crc-negative": ("raw", _set("frames.1.5.0", -1), r"frame 2: a raw frame needs one CRC-32 per"),
    "raw-crc-over-32-bits": ("raw", _set("frames.1.5.0", 2**32), r"frame 2: a raw frame needs one CRC-32"),
    "raw-crc-bool": ("raw", _set("frames.1.5.0", True), r"frame 2: a raw frame needs one CRC-32 per"),
    "raw-crc-float": ("raw", _set("frames.1.5.0", 1.0), r"frame 2: a raw frame needs one CRC-32 per"),
    "raw-crc-text": ("raw", _set("frames.1.5.0", "0"), r"frame 2: a raw frame needs one CRC-32 per"),
    "raw-content-misaligned": (
        "raw",
        _all(_add("frames.1.2", 1), _add("frames.1.4", 1), _add("compressed_size", 1)),
        r"blob header frame 2: raw content not at a 64-byte boundary",
    ),
    "frame-not-a-list": ("raw", _set("frames.0", {"section": "graph"}), r"frame 1 is not \[section, codec"),
    "frame-unknown-section": ("raw", _set("frames.0.0", "bias"), r"frame 1 is not \[section, codec"),
    "frame-unknown-codec": ("raw", _set("frames.1.1", "lz4"), r"frame 2 is not \[section, codec"),
    "frame-negative-size": ("raw", _set("frames.0.2", -5), r"frame 1 is not \[section, codec"),
    "frame-float-size": ("raw", _set("frames.0.3", 5.0), r"frame 1 is not \[section, codec"),
    "frame-bool-pad": ("zstd", _set("frames.1.4", False), r"frame 2 is not \[section, codec"),
    "frame-string-size": ("raw", _set("frames.0.2", "12"), r"frame 1 is not \[section, codec"),
    "raw-sizes-do-not-add-up": ("raw", _add("frames.1.4", 1), "frame 2: raw frame sizes do not add up"),
    "zstd-frame-with-padding": ("zstd", _set("frames.1.4", 1), "frame 2: a zstd frame has no padding"),
    "empty-zstd-frame": (
        "raw",
        _all(_set("frames", [["graph", "zstd", 0, 0, 0]]), _set("weights", None), _set("graph_size", 0)),
        "frame 1: a zstd frame has no padding and is not empty",
    ),
    "tensor-past-the-section": (
        "raw",
        _tensor(2, 3, 5632 + 64),
        r"tensor 'W2h' lies outside the weights section",
    ),
    "tensor-huge-offset": ("zstd", _tensor(0, 3, 2**64), r"tensor 'W1' lies outside the weights section"),
    "tensor-misaligned": (
        "raw",
        _tensor(1, 3, 4096 + 4),
        r"tensor 'perm' lies outside the weights section or is misaligned",
    ),
    "tensor-bytes-not-dims": ("raw", _tensor(0, 4, 4096 - 4), r"tensor 'W1': its byte count does not match"),
    "tensor-dims-not-bytes": (
        "zstd",
        _tensor(2, 2, [192, 9]),
        r"tensor 'W2h': its byte count does not match",
    ),
    "tensor-type-changes-size": ("raw", _tensor(0, 1, 11), r"tensor 'W1': its byte count does not match"),
    "tensor-negative-offset": ("raw", _tensor(0, 3, -64), r"tensor 'W1': its byte count does not match"),
    "tensor-string-type": (
        "raw",
        _tensor(0, 1, 8),
        r"tensor 'W1' has a data type the loader cannot map \(8\)",
    ),
    "tensor-bfloat16": (
        "raw",
        _tensor(0, 1, 16),
        r"tensor 'W1' has a data type the loader cannot map \(16\)",
    ),
    "tensor-type-zero": ("zstd", _tensor(0, 1, 0), r"data type the loader cannot map \(0\)"),
    "tensor-type-true": (
        "raw",
        _tensor(0, 1, True),
        r"tensor 'W1' has a data type the loader cannot map \(True\)",
    ),
    "tensor-type-as-text": (
        "zstd",
        _tensor(0, 1, "float32"),
        r"data type the loader cannot map \('float32'\)",
    ),
    "tensor-name-twice": ("raw", _tensor(1, 0, "W1"), r"tensor 2 has no name or a name used twice"),
    "tensor-without-name": ("raw", _tensor(0, 0, None), r"tensor 1 has no name or a name used twice"),
    "tensor-of-four": (
        "raw",
        _set("weights.tensors.0", ["W1", 1, [16, 64], 0]),
        r"tensor 1 is not \[name, type",
    ),
    "tensor-dims-negative": ("raw", _tensor(0, 2, [-16, -64]), r"tensor 'W1' has malformed dims"),
    "tensor-dims-not-a-list": ("raw", _tensor(0, 2, 1024), r"tensor 'W1' has malformed dims"),
    "tensor-too-many-dims": ("raw", _tensor(1, 2, [192] + [1] * 64), r"tensor 'perm' has malformed dims"),
    "weights-file-not-text": ("raw", _set("weights.file", 3), r"'file' and 'sha256' must be strings"),
    "weights-without-sha256": (
        "raw",
        lambda f: f["weights"].pop("sha256"),
        r"'file' and 'sha256' must be strings",
    ),
    "weights-size-negative": (
        "raw",
        _set("weights.size", -1),
        r"'size' \(count\) and 'tensors' \(list\) are required",
    ),
    "weights-tensors-not-a-list": (
        "raw",
        _set("weights.tensors", {}),
        r"'size' \(count\) and 'tensors' \(list\)",
    ),
    "weights-on-an-ort-model": (
        "raw",
        _set("model_format", "ort"),
        "gives an ORT-format model external weights",
    ),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_header_that_lies_about_the_layout_is_corrupt(lie: str, weighted: dict) -> None:
    codec, edit, message = LIES[lie]
    crafted = edited(weighted[codec][0], edit)
    with pytest.raises(CorruptBlobError, match=message) as caught:
        unpack_blob(crafted)
    assert isinstance(caught.value, BundleError)
    with pytest.raises(CorruptBlobError, match=message):
        session_from_blob(crafted, providers=CPU)


@pytest.mark.slow
def test_more_than_max_frames_is_corrupt(plain: bytes) -> None:
    assert MAX_FRAMES == 1 << 16
    crafted = edited(plain, _set("frames", [["graph", "zstd", 1, 0, 0]] * (MAX_FRAMES + 1)))
    started = time.perf_counter()
    with pytest.raises(CorruptBlobError, match=r"lists 65,537 frames; at most 65,536 are allowed"):
        decode_blob(crafted)
    assert time.perf_counter() - started < 2.0
    # Exactly MAX_FRAMES frames are not refused for their number (here: for their sizes).
    crafted = edited(plain, _set("frames", [["graph", "zstd", 1, 0, 0]] * MAX_FRAMES))
    with pytest.raises(CorruptBlobError, match="bytes of graph"):
        decode_blob(crafted)


def test_more_than_max_tensors_is_corrupt(monkeypatch: pytest.MonkeyPatch, weighted: dict) -> None:
    monkeypatch.setattr(sections_module, "MAX_TENSORS", 2)
    fresh_header_cache(monkeypatch)
    with pytest.raises(CorruptBlobError, match=r"3 tensors listed; at most 2 are allowed"):
        unpack_blob(weighted["raw"][0])


@pytest.mark.parametrize("codec", CODECS)
def test_model_over_max_model_size_counts_graph_and_weights(codec: str, weighted: dict) -> None:
    blob, graph, weights = weighted[codec]
    size = len(graph) + len(weights.data)
    with pytest.raises(
        BlobTooLargeError, match=rf"declares a {size:,}-byte model, over the limit of {size - 1:,}"
    ):
        unpack_blob(blob, max_model_size=size - 1)
    with pytest.raises(BlobTooLargeError):
        session_from_blob(blob, providers=CPU, max_model_size=len(graph))
    assert section_bytes(unpack_blob(blob, max_model_size=size)) == weights.data


TERABYTE = 10**12


def _huge_graph(fields: dict[str, Any]) -> None:
    fields["frames"][0][3] += TERABYTE
    fields["graph_size"] += TERABYTE
    fields["model_size"] += TERABYTE


def _huge_zstd_weights(fields: dict[str, Any]) -> None:
    fields["frames"][1][3] += TERABYTE
    fields["weights"]["size"] += TERABYTE
    fields["model_size"] += TERABYTE


def _huge_raw_weights(fields: dict[str, Any]) -> None:
    _huge_zstd_weights(fields)
    fields["frames"][1][2] += TERABYTE
    fields["compressed_size"] += TERABYTE
    # A consistent header lists one CRC-32 per RAW_CRC_PIECE of the declared content: 119,210 of them.
    crcs = fields["frames"][1][5]
    crcs += [0] * (crc_count(fields["frames"][1][3]) - len(crcs))


@pytest.mark.parametrize(
    ("codec", "edit", "under_a_raised_limit"),
    [
        ("zstd", _huge_graph, ChecksumMismatchError),
        ("zstd", _huge_zstd_weights, ChecksumMismatchError),
        ("raw", _huge_raw_weights, TruncatedBlobError),
    ],
    ids=["graph", "zstd-weights", "raw-weights"],
)
def test_terabyte_declarations_never_allocate(
    codec: str, edit: Callable[[dict[str, Any]], None], under_a_raised_limit: type, weighted: dict
) -> None:
    """A consistent header declaring a terabyte more content: refused by the limit before anything is
    allocated; with the limit raised, the frames' real sizes give the lie away, still before."""
    crafted = edited(weighted[codec][0], edit)
    assert read_header(crafted)[0].model_size > TERABYTE
    bound = (1 << 20) + CRC_ENTRY_COST * extra_crcs(split_blob(crafted)[0], weighted[codec][0])
    assert bound < 4 << 20

    error, peak = peak_allocation(lambda: unpack_blob(crafted))
    assert isinstance(error, BlobTooLargeError), error
    assert peak < bound

    error, peak = peak_allocation(lambda: unpack_blob(crafted, max_model_size=100 * TERABYTE))
    assert isinstance(error, under_a_raised_limit), error
    assert peak < bound


def test_model_sha256_is_informational_in_version_2(weighted: dict) -> None:
    """Version 2 has no whole-model hash on the load path (every zstd frame carries its checksum)."""
    blob, graph, weights = weighted["zstd"]
    crafted = repack(blob, same_length=True, model_sha256="0" * 64)
    assert read_header(crafted)[0].model_sha256 == "0" * 64
    for check in (True, False):
        unpacked = unpack_blob(crafted, check_sha256=check)
        assert (unpacked.model, section_bytes(unpacked)) == (graph, weights.data)


# --- stock zstd -----------------------------------------------------------------------------------


def run_zstd(zstd_cli: str, *args: str | Path) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run([zstd_cli, "-q", *map(str, args)], capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode()
    return result


def test_zstd_cli_writes_the_model_of_a_blob_without_weights(
    zstd_cli: str, small_frames: int, tmp_path: Path
) -> None:
    model = pseudo_model(5 * small_frames + 99)
    path = tmp_path / "model.onnx.ocb"
    path.write_bytes(encode(model))
    assert len(read_header(path.read_bytes())[0].frames) == 6

    run_zstd(zstd_cli, "-t", path)
    run_zstd(zstd_cli, "-d", path, "-o", tmp_path / "model.onnx")

    assert (tmp_path / "model.onnx").read_bytes() == model


def test_zstd_cli_writes_graph_then_zstd_weights(zstd_cli: str, weighted: dict, tmp_path: Path) -> None:
    blob, graph, weights = weighted["zstd"]
    path = tmp_path / "net.onnx.ocb"
    path.write_bytes(blob)

    both = run_zstd(zstd_cli, "-dc", path).stdout
    assert both == graph + weights.data
    head = subprocess.run(
        f"{shlex.quote(zstd_cli)} -dcq {shlex.quote(str(path))} | head -c {read_header(blob)[0].graph_size}",
        shell=True,
        capture_output=True,
        check=True,
    )
    assert head.stdout == graph


def test_zstd_cli_skips_raw_weights_which_lie_at_the_documented_offset(
    zstd_cli: str, weighted: dict, tmp_path: Path
) -> None:
    blob, graph, weights = weighted["raw"]
    path = tmp_path / "net.onnx.ocb"
    path.write_bytes(blob)

    run_zstd(zstd_cli, "-t", path)
    run_zstd(zstd_cli, "-d", path, "-o", tmp_path / "net.onnx")
    assert (tmp_path / "net.onnx").read_bytes() == graph

    (frame,) = frames_of(blob, "weights")
    offset = frame.offset + RAW_PREFIX_SIZE + frame.pad
    assert offset % WEIGHT_ALIGNMENT == 0
    data = subprocess.run(
        f"head -c {offset + frame.content_size} {shlex.quote(str(path))} | tail -c +{offset + 1}",
        shell=True,
        capture_output=True,
        check=True,
    )
    assert data.stdout == weights.data


# --- sessions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("codec", ["raw", "zstd", "auto"])
def test_session_from_a_blob_with_weights_computes_what_the_source_does(
    codec: str, threads: int, mlp: Any, mlp_expected: np.ndarray
) -> None:
    blob, _, _ = make_weighted_blob(mlp, codec)
    session = session_from_blob(blob, providers=CPU, threads=threads)
    np.testing.assert_allclose(
        session.run(None, {"x": sample_input()})[0], mlp_expected, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("maker", [make_blob_v1, make_blob], ids=["v1", "v2-inline"])
def test_session_from_a_blob_of_the_inline_model_computes_the_same(
    maker: Callable[..., bytes], mlp: Any, mlp_expected: np.ndarray
) -> None:
    """An old version-1 blob, and a version-2 blob without a weights section, of the same model."""
    blob = maker(mlp.SerializeToString(), "onnx")
    assert read_header(blob)[0].weights is None
    session = session_from_blob(blob, providers=CPU)
    np.testing.assert_allclose(
        session.run(None, {"x": sample_input()})[0], mlp_expected, rtol=1e-5, atol=1e-5
    )


def test_session_keeps_raw_weights_alive_after_the_blob_is_dropped(
    weighted: dict, mlp_expected: np.ndarray
) -> None:
    blob = bytes(bytearray(weighted["raw"][0]))  # a copy only this test holds
    session = session_from_blob(blob, providers=CPU)
    del blob
    gc.collect()
    clobber = [bytes([i]) * len(weighted["raw"][0]) for i in range(1, 9)]  # reuse freed memory, if any
    np.testing.assert_allclose(
        session.run(None, {"x": sample_input()})[0], mlp_expected, rtol=1e-5, atol=1e-5
    )
    del clobber


def test_damaged_raw_weights_are_caught_by_their_crc_and_in_a_bundle_by_the_blob_sha256(
    weighted: dict, tmp_path: Path
) -> None:
    """Raw content has no zstd checksum: the header's CRC-32s catch damage to it (session_from_blob,
    unpack_blob, Bundle.session); open_bundle's check of every blob's sha256 catches it first."""
    blob = weighted["raw"][0]
    root = write_bundle(tmp_path / "bundle", {"mlp": ("onnx", blob)})
    (frame,) = frames_of(blob, "weights")
    damaged = flip(blob, frame.data_offset + frame.content_size // 2)
    (root / "mlp.onnx.ocb").write_bytes(damaged)

    with pytest.raises(ChecksumMismatchError, match="blob does not match the sha256/size"):
        open_bundle(root)
    message = crc_message(1, 1, 0, frame.content_size)
    in_bundle = crc_message(1, 1, 0, frame.content_size, str(root / "mlp.onnx.ocb"))
    with pytest.raises(ChecksumMismatchError, match=in_bundle):
        open_bundle(root, verify=False).session("mlp", providers=CPU)
    with pytest.raises(ChecksumMismatchError, match=message):
        session_from_blob(damaged, providers=CPU)
    with pytest.raises(ChecksumMismatchError, match=message):
        unpack_blob(damaged)


def test_incompressible_graph_frames_are_stored_raw_without_the_platforms_level() -> None:
    """A float-weight frame is judged by a fast probe (not compressed at the platform's level) and
    stored raw; a structured frame is compressed at the platform's level."""
    from onnx_cooker.runtime import writer as blob_module

    rng = np.random.default_rng(3)
    floats = (rng.standard_normal(1 << 18) * 0.02).astype(np.float32).tobytes()  # one 1 MiB frame
    text = (b"node Conv input x output y; " * ((1 << 20) // 28 + 1))[: 1 << 20]
    assert not blob_module._probe_pays(memoryview(floats)) and blob_module._probe_pays(memoryview(text))
    frames = blob_module._graph_frames(memoryview(floats + text), 10, None)
    assert [f[0] for f in frames] == ["raw", "zstd"]
    assert bytes(frames[0][1]) == floats and len(frames[1][1]) < len(text) // 10
