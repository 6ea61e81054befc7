"""Writing blobs (the cooker's side of ``blob``): version 3 today, versions 2 and 1 for tests of old
bundles. See docs/bundle-format.md for the layout and the measured rule that picks raw or zstd.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import zstandard

from .constants import BLOB_FORMAT_VERSION, COMPRESSION_CHOICES, V2_BLOB_FORMAT_VERSION, ModelFormat
from .frames import RAW_PREFIX_SIZE, Frame, raw_crcs, raw_frame, run_parallel
from .header import TRAILER_MAGIC, BlobHeader, pack_header
from .sections import (
    EXTENT_ALIGNMENT,
    FRAME_CONTENT_SIZE,
    MAX_RAW_FRAME_CONTENT,
    PROBE_GAIN,
    PROBE_LEVEL,
    PROBE_SIZE,
    RAW_UNLESS_GAIN,
    SAMPLE_EVERY,
    WEIGHT_ALIGNMENT,
    TensorRef,
    WeightsInfo,
)

_TRAILER = struct.Struct("<8sQ")
# A raw extent after the header costs up to EXTENT_ALIGNMENT bytes of padding: sections smaller
# than this are zstd frames whatever they gain (decoding 64 KiB takes microseconds).
MIN_RAW_EXTENT = EXTENT_ALIGNMENT
CODEC_CHOICES = ("auto", "zstd", "raw")


@dataclass(frozen=True)
class Weights:
    """Weights to store beside the graph (what ``encode_blob`` takes): the section's bytes and tensors."""

    data: bytes | memoryview
    file: str
    tensors: tuple[TensorRef, ...]
    codec: str = "auto"  # "zstd", "raw", or "auto": raw unless zstd gains RAW_UNLESS_GAIN


def encode_blob_v2(
    model: bytes,
    *,
    level: int,
    weights: Weights | None = None,
    threads: int | None = None,
    **header_fields: Any,
) -> bytes:
    """A version-2 blob (what cookers before blob format 3 wrote): for tests of the loader's support
    of old bundles.

    ``header_fields`` are BlobHeader's descriptive fields (format, platform, name, cook key, ...).
    Frames are compressed on ``threads`` threads (default: one per core).
    """
    # (codec, zstd frame or raw content, content size, CRC-32s of raw content)
    graph_frames = _graph_frames(memoryview(model).cast("B"), level, threads)
    weight_frames: list[tuple[str, bytes | memoryview, int, tuple[int, ...]]] = []
    if weights is not None:
        data = memoryview(weights.data).cast("B")
        raw_chunks = None
        if weights.codec == "raw" or (weights.codec == "auto" and not _zstd_pays(data, level, threads)):
            raw_chunks = _raw_chunks(data, weights.tensors)
        if raw_chunks is not None:
            weight_frames = [("raw", chunk, len(chunk), raw_crcs(chunk, threads)) for chunk in raw_chunks]
        else:
            weight_frames = [("zstd", frame, size, ()) for frame, size in _zstd_frames(data, level, threads)]
    header = _header(V2_BLOB_FORMAT_VERSION, memoryview(model).cast("B"), weights, header_fields)
    pieces = [("graph", *frame) for frame in graph_frames] + [("weights", *frame) for frame in weight_frames]
    # Raw frames pad their content to an aligned offset of the blob, which depends on the header's
    # length, which lists the frames: lay out for a header end, then pad the header's JSON with
    # spaces to reach exactly that end (or try a later end).
    end = len(pack_header(header)) + 64
    while True:
        frames, parts, offset, content = [], [], end, {"graph": 0, "weights": 0}
        for section, codec, item, content_size, checks in pieces:
            if codec == "raw":
                blob_frame = raw_frame(item, offset, WEIGHT_ALIGNMENT)
                pad = len(blob_frame) - RAW_PREFIX_SIZE - content_size
            else:
                blob_frame, pad = item, 0
            frames.append(
                Frame(section, codec, offset, len(blob_frame), content[section], content_size, pad, checks)
            )
            parts.append(blob_frame)
            offset += len(blob_frame)
            content[section] += content_size
        laid_out = replace(header, frames=tuple(frames), compressed_size=offset - end)
        head = pack_header(laid_out, length=end)
        if head is not None:
            return b"".join([head, *parts])
        # Longer than guessed: lay out again behind the header as long as it now is, plus room for
        # the sizes it lists to grow by a digit or two.
        end = len(pack_header(laid_out)) + 64


def _graph_frames(
    model: memoryview, level: int, threads: int | None
) -> list[tuple[str, bytes | memoryview, int, tuple[int, ...]]]:
    """The model file in FRAME_CONTENT_SIZE pieces: zstd frames, except where zstd gains under
    RAW_UNLESS_GAIN (an ORT file's float weights): those are stored raw, so that loading copies them
    (several GB/s) instead of decompressing them (about 1 GB/s a core)."""
    starts = range(0, max(len(model), 1), FRAME_CONTENT_SIZE)
    pieces = [model[start : start + FRAME_CONTENT_SIZE] for start in starts]
    probed = [False] * len(pieces)

    def probe(index: int) -> None:
        probed[index] = len(pieces[index]) >= 4096 and not _probe_pays(pieces[index])

    run_parallel(probe, range(len(pieces)), threads)
    compressed = iter(
        _zstd_frames_of([p for p, raw in zip(pieces, probed, strict=True) if not raw], level, threads)
    )
    frames: list[tuple[str, bytes | memoryview, int, tuple[int, ...]]] = []
    for piece, raw in zip(pieces, probed, strict=True):
        frame, size = (b"", len(piece)) if raw else next(compressed)
        if raw or (size >= 4096 and len(frame) > size * (1 - RAW_UNLESS_GAIN)):
            frames.append(("raw", piece, size, raw_crcs(piece, 1)))
        else:
            frames.append(("zstd", frame, size, ()))
    return frames


def _probe_pays(piece: memoryview) -> bool:
    """Whether zstd may make ``piece`` RAW_UNLESS_GAIN smaller, judged by a fast level on its middle."""
    middle = max(0, (len(piece) - PROBE_SIZE) // 2)
    sample = piece[middle : middle + PROBE_SIZE]
    probe = _probe_compressor().compress(sample)
    return len(probe) <= len(sample) * (1 - PROBE_GAIN)


_PROBE_CONTEXTS = threading.local()


def _probe_compressor() -> zstandard.ZstdCompressor:
    """One compressor per thread: making a zstd context costs more than probing a sample."""
    compressor = getattr(_PROBE_CONTEXTS, "compressor", None)
    if compressor is None:
        compressor = _PROBE_CONTEXTS.compressor = zstandard.ZstdCompressor(level=PROBE_LEVEL)
    return compressor


def _zstd_frames(data: memoryview, level: int, threads: int | None) -> list[tuple[bytes, int]]:
    """``data`` cut into FRAME_CONTENT_SIZE pieces, each its own zstd frame, compressed in parallel."""
    starts = range(0, max(len(data), 1), FRAME_CONTENT_SIZE)
    return _zstd_frames_of([data[i : i + FRAME_CONTENT_SIZE] for i in starts], level, threads)


def _zstd_frames_of(pieces: Sequence[memoryview], level: int, threads: int | None) -> list[tuple[bytes, int]]:
    frames: list[tuple[bytes, int]] = [(b"", 0)] * len(pieces)

    def one(index: int) -> None:
        compressor = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
        frames[index] = (compressor.compress(pieces[index]), len(pieces[index]))

    run_parallel(one, range(len(pieces)), threads)
    return frames


def _zstd_pays(data: memoryview, level: int, threads: int | None) -> bool:
    """Whether zstd makes ``data`` at least RAW_UNLESS_GAIN smaller, judged on a sample of frames
    (every SAMPLE_EVERY-th) so that a big float model is not compressed only to be stored raw."""
    pieces = [data[i : i + FRAME_CONTENT_SIZE] for i in range(0, len(data), FRAME_CONTENT_SIZE)]
    sample = pieces[::SAMPLE_EVERY]
    joined = sum(len(frame) for frame, _ in _zstd_frames_of(sample, level, threads))
    return joined <= sum(len(piece) for piece in sample) * (1 - RAW_UNLESS_GAIN)


def _raw_chunks(data: memoryview, tensors: Sequence[TensorRef]) -> list[memoryview] | None:
    """``data`` cut at tensor starts into pieces of at most MAX_RAW_FRAME_CONTENT (one tensor may be
    bigger, alone), so that every tensor lies whole in one raw frame; None if a tensor cannot."""
    bounds = sorted({t.offset for t in tensors} - {0}) + [len(data)]
    chunks, begin, last = [], 0, 0
    for end in bounds:  # cut before the tensor that would take a frame past the limit
        if end - begin > MAX_RAW_FRAME_CONTENT and last > begin:
            chunks.append(data[begin:last])
            begin = last
        last = end
    chunks.append(data[begin:])
    limit = (1 << 32) - 1 - RAW_PREFIX_SIZE - WEIGHT_ALIGNMENT
    return None if any(len(chunk) > limit for chunk in chunks) else chunks


def encode_blob_v1(model: bytes, *, level: int, **header_fields: Any) -> bytes:
    """A version-1 blob (one zstd frame): what cookers before blob format 2 wrote. For tests of the
    loader's support of old bundles."""
    frame = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True).compress(
        model
    )
    header = BlobHeader(
        model_size=len(model),
        model_sha256=hashlib.sha256(model).hexdigest(),
        compressed_size=len(frame),
        **header_fields,
    )
    head = pack_header(header)
    assert head is not None
    return head + frame


def encode_blob(
    model: bytes | memoryview,
    *,
    level: int,
    weights: Weights | None = None,
    threads: int | None = None,
    graph_codec: str = "auto",
    compression: str = "speed",
    **header_fields: Any,
) -> bytes:
    """A version-3 blob of ``model`` (the graph section) and optional ``weights``.

    Each section is stored as one raw extent or as zstd frames. ``"auto"``: with ``compression``
    "speed", raw (onnxruntime takes weights and an ORT graph in place, and an ONNX graph is copied
    faster than it is decoded); with "size", raw unless zstd makes the section
    RAW_UNLESS_GAIN smaller (probed first at a fast level, then measured at ``level``). A section
    under MIN_RAW_EXTENT is zstd either way, but a leading ORT graph. ``graph_codec`` and
    ``Weights.codec`` force one. A raw ORT-format graph starts the blob, so that onnxruntime can map
    the blob file itself.
    ``header_fields`` are BlobHeader's descriptive fields (format, platform, name, cook key, ...).
    Frames are compressed on ``threads`` threads.
    """
    if compression not in COMPRESSION_CHOICES:
        raise ValueError(f"compression must be one of {', '.join(COMPRESSION_CHOICES)}, not {compression!r}")
    speed = compression == "speed"
    graph = memoryview(model).cast("B")
    is_ort = header_fields.get("model_format") == ModelFormat.ORT
    # section -> (codec, [(stored piece, content size)])
    stored = {"graph": _section(graph, graph_codec, level, threads, may_lead=is_ort, prefer_raw=speed)}
    if weights is not None:
        data = memoryview(weights.data).cast("B")
        stored["weights"] = _section(data, weights.codec, level, threads, may_lead=False, prefer_raw=speed)
    header = _header(BLOB_FORMAT_VERSION, graph, weights, header_fields)
    lead = is_ort and stored["graph"][0] == "raw"
    crcs = {
        section: raw_crcs(pieces[0][0], threads)
        for section, (codec, pieces) in stored.items()
        if codec == "raw"
    }
    # The header lists the frames' offsets, which depend on its length: lay out behind a guessed
    # length, then pad the header's JSON with spaces to exactly that length (or guess longer).
    length = len(pack_header(header) or b"") + 256
    while True:
        start = len(graph) if lead else 0
        frames, parts, offset = [], [], start + length
        if lead:
            frames.append(Frame("graph", "raw", 0, len(graph), 0, len(graph), 0, crcs["graph"], 0))
        for section, (codec, pieces) in stored.items():
            if lead and section == "graph":
                continue
            if codec == "raw":
                pad = -offset % EXTENT_ALIGNMENT
                size = pad + len(pieces[0][0])
                frames.append(Frame(section, "raw", offset, size, 0, size - pad, pad, crcs[section], 0))
                parts += [bytes(pad), pieces[0][0]]
                offset += size
                continue
            content = 0
            for frame, content_size in pieces:
                frames.append(Frame(section, "zstd", offset, len(frame), content, content_size, 0, (), 0))
                parts.append(frame)
                offset += len(frame)
                content += content_size
        laid_out = replace(header, frames=tuple(frames), compressed_size=sum(f.size for f in frames))
        head = pack_header(laid_out, length=length)
        if head is not None:
            leading = [graph] if lead else []
            return b"".join([*leading, head, *parts, _TRAILER.pack(TRAILER_MAGIC, start)])
        length = len(pack_header(laid_out) or b"") + 256


def _header(version: int, graph: memoryview, weights: Weights | None, fields: dict[str, Any]) -> BlobHeader:
    """The header of a blob of ``graph`` and ``weights``, before its frames are laid out."""
    info = None
    if weights is not None:
        data = memoryview(weights.data).cast("B")
        info = WeightsInfo(
            file=weights.file,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            tensors=weights.tensors,
        )
    return BlobHeader(
        version=version,
        model_size=len(graph) + (info.size if info else 0),
        model_sha256=hashlib.sha256(graph).hexdigest(),
        compressed_size=0,
        graph_size=len(graph),
        weights=info,
        **fields,
    )


def _section(
    data: memoryview, codec: str, level: int, threads: int | None, *, may_lead: bool, prefer_raw: bool
) -> tuple[str, list[tuple[bytes | memoryview, int]]]:
    """("raw", [(data, size)]) or ("zstd", [(frame, content size), ...]) for one section. ``codec``
    "auto": raw where ``prefer_raw`` (but a small section that cannot lead the blob), else zstd where
    it makes ``data`` at least RAW_UNLESS_GAIN smaller."""
    if codec not in CODEC_CHOICES:
        raise ValueError(f"codec must be one of {', '.join(CODEC_CHOICES)}, not {codec!r}")
    small = len(data) < MIN_RAW_EXTENT and not may_lead
    if codec == "raw" or (
        codec == "auto" and not small and (prefer_raw or not _probe_section_pays(data, threads))
    ):
        return "raw", [(data, len(data))]
    frames = _zstd_frames(data, level, threads)
    if codec == "auto" and not small and sum(len(f) for f, _ in frames) > len(data) * (1 - RAW_UNLESS_GAIN):
        return "raw", [(data, len(data))]
    return "zstd", frames


def _probe_section_pays(data: memoryview, threads: int | None) -> bool:
    """Whether zstd may make ``data`` RAW_UNLESS_GAIN smaller: every 1 MiB piece probed on its middle
    at a fast level (float weights gain 7% at levels 1, 3 and 10 alike), weighted by size."""
    starts = range(0, len(data), FRAME_CONTENT_SIZE)
    saved = [0.0] * len(starts)

    def probe(index: int) -> None:
        piece = data[starts[index] : starts[index] + FRAME_CONTENT_SIZE]
        middle = max(0, (len(piece) - PROBE_SIZE) // 2)
        sample = piece[middle : middle + PROBE_SIZE]
        gain = 1 - len(_probe_compressor().compress(sample)) / max(len(sample), 1)
        saved[index] = gain * len(piece)

    run_parallel(probe, range(len(starts)), threads)
    return sum(saved) >= len(data) * PROBE_GAIN
