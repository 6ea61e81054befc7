"""The cooked blob: one self-describing, zstd-compressed model (see docs/bundle-format.md).

Version 2 (written today): a zstd *skippable frame* carrying the header, then the frames of two
sections. The *graph* section is the model file (``.onnx`` whose big initializers refer to external
data, or ``.ort``) in one or more zstd frames; the optional *weights* section holds those
initializers as aligned raw tensors, in zstd frames or, where zstd gains little, stored as is in
skippable frames the loader can use without copying. Frames decode in parallel, each checked by its
own checksum. Stock ``zstd -d`` skips the header (and raw frames) and writes the model file.

Version 1 (read for old bundles): the header frame, then one zstd frame holding the model file.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import struct
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import zstandard

from .compat import parse_version
from .constants import BLOB_FORMAT_VERSION, LEGACY_BLOB_FORMAT_VERSION, TWO_GIB, ModelFormat
from .errors import (
    BlobTooLargeError,
    ChecksumMismatchError,
    CorruptBlobError,
    NotABlobError,
    TruncatedBlobError,
    UnsupportedBlobVersionError,
)
from .frames import (
    CODECS,
    RAW_CRC_PIECE,
    RAW_PREFIX_SIZE,
    SECTIONS,
    Frame,
    check_frames,
    crc_count,
    decode_into,
    default_threads,
    new_bytes,
    raw_crcs,
    raw_frame,
    run_parallel,
)
from .frames import (
    check_raw as check_raw_frames,
)

READABLE_VERSIONS = (LEGACY_BLOB_FORMAT_VERSION, BLOB_FORMAT_VERSION)
HEADER_MAGIC = b"ONNXCOOK"
# 0x184D2A50..0x184D2A5F are zstd skippable-frame magics; decoders ignore the frame's payload.
SKIPPABLE_MAGIC = 0x184D2A5E
# A version-2 header lists every weight tensor: room for about 100,000 of them.
MAX_HEADER_SIZE = 16 << 20
# Models of up to 2 GiB load by default; a model with external weights may be larger (raise the limit).
DEFAULT_MAX_MODEL_SIZE = TWO_GIB
MODEL_FORMATS = tuple(f.value for f in ModelFormat)
# Frames of this much content decode in parallel: small enough to spread a 2 MB model over the
# cores, big enough that zstd loses nothing measurable and the header stays small.
FRAME_CONTENT_SIZE = 1 << 20
# Raw frames hold whole tensors, up to this much each (a skippable frame holds under 4 GiB).
MAX_RAW_FRAME_CONTENT = 1 << 30
# Weights are stored raw unless zstd makes them at least this much smaller (float32 weights gain
# about 7%: not worth a decompression pass and a second copy in memory).
RAW_UNLESS_GAIN = 0.10
SAMPLE_EVERY = 16  # judged on every 16th frame of the weights
# A graph frame is first probed: zstd at PROBE_LEVEL on PROBE_SIZE bytes from its middle. One that
# gains under PROBE_GAIN there is stored raw without being compressed at the platform's level: float
# weights inside an ORT file (measured on float32 weights: levels 1, 3 and 10 gain 7.24%, 7.16%,
# 7.24%, so the platform's level would only find them under RAW_UNLESS_GAIN too).
PROBE_LEVEL = 1
PROBE_SIZE = 256 << 10
PROBE_GAIN = 0.08
WEIGHT_ALIGNMENT = 64
MAX_FRAMES = 1 << 16
MAX_TENSORS = 1 << 20
MAX_DIMS = 64
# ONNX TensorProto data types the loader can hand onnxruntime as numpy views.
TENSOR_DTYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}

_FRAME_PREFIX = struct.Struct("<II")  # skippable magic, payload size
_HEADER_PREFIX = struct.Struct("<8sHI")  # HEADER_MAGIC, blob format version, crc32 of the JSON


@dataclass(frozen=True)
class TensorRef:
    """One initializer stored in the weights section: its graph name, ONNX data type and place."""

    name: str
    elem_type: int  # ONNX TensorProto.DataType, one of TENSOR_DTYPES
    dims: tuple[int, ...]
    offset: int  # in the weights section; a multiple of the element size
    nbytes: int

    def to_json(self) -> list[Any]:
        return [self.name, self.elem_type, list(self.dims), self.offset, self.nbytes]


@dataclass(frozen=True, kw_only=True)
class WeightsInfo:
    """The weights section: what the graph's external-data references call it, its size, its tensors."""

    file: str  # the ``location`` of the graph's external-data references (the unpacked file's name)
    size: int
    sha256: str  # of the section's content (informational: frames carry their own checksums)
    tensors: tuple[TensorRef, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "size": self.size,
            "sha256": self.sha256,
            "tensors": [t.to_json() for t in self.tensors],
        }


@dataclass(frozen=True, kw_only=True)
class BlobHeader:
    """What a blob says about the model inside it; the JSON part of the header frame."""

    model_format: str
    platform: str
    name: str
    model_size: int  # graph + weights bytes
    model_sha256: str  # of the model file (the graph section); informational in version 2
    compressed_size: int  # bytes after the header frame
    cook_key: str
    min_runtime_version: str
    ort_format_version: str | None = None
    saved_runtime_optimizations: bool = False
    execution_providers: tuple[str, ...] = ("CPUExecutionProvider",)
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ep_session_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Version 2 only (a version-1 blob has one zstd frame holding the model file).
    version: int = LEGACY_BLOB_FORMAT_VERSION
    graph_size: int | None = None
    frames: tuple[Frame, ...] = ()
    weights: WeightsInfo | None = None

    def to_dict(self) -> dict[str, Any]:
        """The header as JSON data: exactly what the header frame's JSON holds (the version is in the
        frame's binary prefix, not here)."""
        data = {key: value for key, value in asdict(self).items() if key not in _V2_FIELDS}
        data["execution_providers"] = list(self.execution_providers)
        if self.version >= 2:
            data["graph_size"] = self.graph_size
            data["frames"] = [_frame_json(f) for f in self.frames]
            data["weights"] = self.weights.to_json() if self.weights is not None else None
        return data


_V2_FIELDS = ("version", "graph_size", "frames", "weights")


def _frame_json(frame: Frame) -> list[Any]:
    entry: list[Any] = [frame.section, frame.codec, frame.size, frame.content_size, frame.pad]
    return entry + [list(frame.crcs)] if frame.codec == "raw" else entry


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "model_format": str,
    "platform": str,
    "name": str,
    "model_size": int,
    "model_sha256": str,
    "compressed_size": int,
    "cook_key": str,
    "min_runtime_version": str,
    "ort_format_version": (str, type(None)),
    "saved_runtime_optimizations": bool,
    "execution_providers": list,
    "provider_options": dict,
    "ep_session_options": dict,
}
_V2_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "graph_size": int,
    "frames": list,
    "weights": (dict, type(None)),
}


@dataclass(frozen=True)
class Weights:
    """Weights to store beside the graph (what ``encode_blob`` takes): the section's bytes and tensors."""

    data: bytes | memoryview
    file: str
    tensors: tuple[TensorRef, ...]
    codec: str = "auto"  # "zstd", "raw", or "auto": raw unless zstd gains RAW_UNLESS_GAIN


def encode_blob(
    model: bytes,
    *,
    level: int,
    weights: Weights | None = None,
    threads: int | None = None,
    **header_fields: Any,
) -> bytes:
    """A version-2 blob of ``model`` (the graph section) and optional ``weights``.

    ``header_fields`` are BlobHeader's descriptive fields (format, platform, name, cook key, ...).
    Frames are compressed on ``threads`` threads (default: one per core).
    """
    # (codec, zstd frame or raw content, content size, CRC-32s of raw content)
    graph_frames = _graph_frames(memoryview(model).cast("B"), level, threads)
    weight_frames: list[tuple[str, bytes | memoryview, int, tuple[int, ...]]] = []
    info = None
    if weights is not None:
        data = memoryview(weights.data).cast("B")
        raw_chunks = None
        if weights.codec == "raw" or (weights.codec == "auto" and not _zstd_pays(data, level, threads)):
            raw_chunks = _raw_chunks(data, weights.tensors)
        if raw_chunks is not None:
            weight_frames = [("raw", chunk, len(chunk), raw_crcs(chunk, threads)) for chunk in raw_chunks]
        else:
            weight_frames = [("zstd", frame, size, ()) for frame, size in _zstd_frames(data, level, threads)]
        info = WeightsInfo(
            file=weights.file,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            tensors=weights.tensors,
        )
    header = BlobHeader(
        version=BLOB_FORMAT_VERSION,
        model_size=len(model) + (info.size if info else 0),
        model_sha256=hashlib.sha256(model).hexdigest(),
        compressed_size=0,
        graph_size=len(model),
        weights=info,
        **header_fields,
    )
    pieces = [("graph", *frame) for frame in graph_frames] + [("weights", *frame) for frame in weight_frames]
    # Raw frames pad their content to an aligned offset of the blob, which depends on the header's
    # length, which lists the frames: lay out for a header end, then pad the header's JSON with
    # spaces to reach exactly that end (or try a later end).
    end = len(_pack_header(header)) + 64
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
        head = _pack_header(laid_out, length=end)
        if head is not None:
            return b"".join([head, *parts])
        # Longer than guessed: lay out again behind the header as long as it now is, plus room for
        # the sizes it lists to grow by a digit or two.
        end = len(_pack_header(laid_out)) + 64


def _pack_header(header: BlobHeader, length: int | None = None) -> bytes | None:
    """The header frame; padded with spaces (valid JSON) to ``length`` bytes, or None if longer."""
    payload = json.dumps(header.to_dict(), sort_keys=True, separators=(",", ":")).encode()
    if length is not None:
        room = length - _FRAME_PREFIX.size - _HEADER_PREFIX.size - len(payload)
        if room < 0:
            return None
        payload += b" " * room
    prefix = _HEADER_PREFIX.pack(HEADER_MAGIC, header.version, zlib.crc32(payload))
    return _FRAME_PREFIX.pack(SKIPPABLE_MAGIC, len(prefix) + len(payload)) + prefix + payload


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
    head = _pack_header(header)
    assert head is not None
    return head + frame


def read_header(data: bytes | memoryview) -> tuple[BlobHeader, int]:
    """Parse and check the header frame; returns it and the offset of the first frame after it."""
    view = memoryview(data)
    if len(view) < _FRAME_PREFIX.size:
        if bytes(view) == struct.pack("<I", SKIPPABLE_MAGIC)[: len(view)]:
            raise TruncatedBlobError(f"blob is only {len(view)} bytes long: the header is cut off")
        raise NotABlobError("not an onnx-cooker blob: too short to hold a header")
    magic, size = _FRAME_PREFIX.unpack_from(view)
    if magic != SKIPPABLE_MAGIC:
        raise NotABlobError(
            "not an onnx-cooker blob: it does not start with the header frame "
            "(pass a .zst file written by `doit cook`, not a plain .onnx/.ort file)"
        )
    if size > MAX_HEADER_SIZE or size < _HEADER_PREFIX.size:
        raise CorruptBlobError(f"blob header declares {size} bytes; a valid header is 14 B to 16 MiB")
    end = _FRAME_PREFIX.size + size
    if len(view) < end:
        raise TruncatedBlobError(f"blob is {len(view)} bytes, but its header alone needs {end}: file cut off")
    header_magic, version, crc = _HEADER_PREFIX.unpack_from(view, _FRAME_PREFIX.size)
    if header_magic != HEADER_MAGIC:
        raise NotABlobError("not an onnx-cooker blob: the first zstd frame is not an onnx-cooker header")
    if version not in READABLE_VERSIONS:
        raise UnsupportedBlobVersionError(
            f"blob format version {version} is not supported: this loader reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}; re-cook the model with the cooker that matches "
            "this loader"
        )
    payload = bytes(view[_FRAME_PREFIX.size + _HEADER_PREFIX.size : end])
    if zlib.crc32(payload) != crc:
        raise ChecksumMismatchError("blob header checksum mismatch: the file is damaged or was modified")
    return _header_from_json(payload, version, end), end


def _header_from_json(payload: bytes, version: int, end: int) -> BlobHeader:
    try:
        fields = json.loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptBlobError(f"blob header is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise CorruptBlobError("blob header is not a JSON object")
    expected_types = _FIELD_TYPES | (_V2_FIELD_TYPES if version >= 2 else {})
    missing = sorted(set(expected_types) - set(fields))
    if missing:
        raise CorruptBlobError(f"blob header lacks field(s) {', '.join(missing)}")
    for key, expected in expected_types.items():
        value = fields[key]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise CorruptBlobError(f"blob header field {key!r} has the wrong type ({type(value).__name__})")
    if fields["model_format"] not in MODEL_FORMATS:
        raise CorruptBlobError(f"blob header names an unknown model format {fields['model_format']!r}")
    if fields["model_size"] < 0 or fields["compressed_size"] < 0:
        raise CorruptBlobError("blob header declares a negative size")
    if not all(isinstance(ep, str) for ep in fields["execution_providers"]):
        raise CorruptBlobError("blob header field 'execution_providers' must list names")
    for key in ("provider_options", "ep_session_options"):
        if not all(isinstance(v, dict) for v in fields[key].values()):
            raise CorruptBlobError(f"blob header field {key!r} must map provider names to objects")
    try:
        parse_version(fields["min_runtime_version"])
    except ValueError:
        raise CorruptBlobError(
            f"blob header field 'min_runtime_version' is not a version: {fields['min_runtime_version']!r}"
        ) from None
    known = {key: fields[key] for key in _FIELD_TYPES}
    known["execution_providers"] = tuple(known["execution_providers"])
    if version >= 2:
        known |= _v2_layout(fields, end)
    return BlobHeader(version=version, **known)


def _v2_layout(fields: dict[str, Any], end: int) -> dict[str, Any]:
    """The frames and weights of a version-2 header, checked for consistency (not yet against data)."""
    graph_size = fields["graph_size"]
    if graph_size < 0:
        raise CorruptBlobError("blob header declares a negative graph size")
    frames = _parse_frames(fields["frames"], end)
    weights = None if fields["weights"] is None else _parse_weights(fields["weights"])
    if fields["model_format"] == ModelFormat.ORT and weights is not None:
        raise CorruptBlobError("blob header gives an ORT-format model external weights, which it cannot use")
    sizes = {"graph": graph_size, "weights": weights.size if weights else 0}
    for section in SECTIONS:
        content = sum(f.content_size for f in frames if f.section == section)
        if content != sizes[section]:
            raise CorruptBlobError(
                f"blob frames hold {content:,} bytes of {section}, but the header declares {sizes[section]:,}"
            )
    if fields["model_size"] != graph_size + sizes["weights"]:
        raise CorruptBlobError("blob header's model_size is not the graph size plus the weights size")
    if fields["compressed_size"] != sum(f.size for f in frames):
        raise CorruptBlobError("blob header's compressed_size is not the sum of its frame sizes")
    for index, frame in enumerate(frames):
        if frame.codec == "raw" and frame.data_offset % WEIGHT_ALIGNMENT:
            raise CorruptBlobError(
                f"blob header frame {index + 1}: raw content not at a {WEIGHT_ALIGNMENT}-byte boundary"
            )
    return {"graph_size": graph_size, "frames": frames, "weights": weights}


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_frames(entries: list[Any], end: int) -> tuple[Frame, ...]:
    if len(entries) > MAX_FRAMES:
        raise CorruptBlobError(
            f"blob header lists {len(entries):,} frames; at most {MAX_FRAMES:,} are allowed"
        )
    frames, offset, content = [], end, {"graph": 0, "weights": 0}
    for index, entry in enumerate(entries):
        if not (
            isinstance(entry, list)
            and len(entry) == (6 if len(entry) > 1 and entry[1] == "raw" else 5)
            and entry[0] in SECTIONS
            and entry[1] in CODECS
            and all(_is_count(v) for v in entry[2:5])
        ):
            raise CorruptBlobError(
                f"blob header frame {index + 1} is not [section, codec, size, content size, pad"
                "(, CRC-32 list for raw frames)]"
            )
        section, codec, size, content_size, pad = entry[:5]
        checks: tuple[int, ...] = ()
        if codec == "raw":
            checks = _raw_checks(entry[5], content_size, index)
        if codec == "raw" and pad >= WEIGHT_ALIGNMENT:
            raise CorruptBlobError(
                f"blob header frame {index + 1}: raw frame padding over {WEIGHT_ALIGNMENT} bytes"
            )
        if codec == "raw" and size != RAW_PREFIX_SIZE + pad + content_size:
            raise CorruptBlobError(f"blob header frame {index + 1}: raw frame sizes do not add up")
        if codec == "zstd" and (pad != 0 or size == 0):
            raise CorruptBlobError(
                f"blob header frame {index + 1}: a zstd frame has no padding and is not empty"
            )
        frames.append(Frame(section, codec, offset, size, content[section], content_size, pad, checks))
        offset += size
        content[section] += content_size
    return tuple(frames)


def _raw_checks(value: Any, content_size: int, index: int) -> tuple[int, ...]:
    if not (
        isinstance(value, list)
        and len(value) == crc_count(content_size)
        and all(_is_count(crc) and crc < 1 << 32 for crc in value)
    ):
        raise CorruptBlobError(
            f"blob header frame {index + 1}: a raw frame needs one CRC-32 per "
            f"{RAW_CRC_PIECE:,} bytes of content"
        )
    return tuple(value)


def _parse_weights(value: dict[str, Any]) -> WeightsInfo:
    def fail(problem: str) -> CorruptBlobError:
        return CorruptBlobError(f"blob header field 'weights': {problem}")

    if not (isinstance(value.get("file"), str) and isinstance(value.get("sha256"), str)):
        raise fail("'file' and 'sha256' must be strings")
    size, entries = value.get("size"), value.get("tensors")
    if not _is_count(size) or not isinstance(entries, list):
        raise fail("'size' (count) and 'tensors' (list) are required")
    if len(entries) > MAX_TENSORS:
        raise fail(f"{len(entries):,} tensors listed; at most {MAX_TENSORS:,} are allowed")
    tensors, names = [], set()
    for index, entry in enumerate(entries):
        if not (isinstance(entry, list) and len(entry) == 5):
            raise fail(f"tensor {index + 1} is not [name, type, dims, offset, bytes]")
        name, elem_type, dims, offset, nbytes = entry
        if not isinstance(name, str) or name in names:
            raise fail(f"tensor {index + 1} has no name or a name used twice")
        if not (_is_count(elem_type) and elem_type in TENSOR_DTYPES):
            raise fail(f"tensor {name!r} has a data type the loader cannot map ({elem_type!r})")
        if not (isinstance(dims, list) and len(dims) <= MAX_DIMS and all(_is_count(d) for d in dims)):
            raise fail(f"tensor {name!r} has malformed dims")
        itemsize = np.dtype(TENSOR_DTYPES[elem_type]).itemsize
        if not (_is_count(offset) and _is_count(nbytes)) or nbytes != math.prod(dims) * itemsize:
            raise fail(f"tensor {name!r}: its byte count does not match its type and dims")
        if offset % itemsize or offset + nbytes > size:
            raise fail(f"tensor {name!r} lies outside the weights section or is misaligned")
        names.add(name)
        tensors.append(TensorRef(name, elem_type, tuple(dims), offset, nbytes))
    return WeightsInfo(file=value["file"], size=size, sha256=value["sha256"], tensors=tuple(tensors))


@dataclass(frozen=True)
class Unpacked:
    """A checked, decoded blob: its header, the model file and, if it has one, its weights section.

    ``segments`` hold the weights section as (offset in the section, read-only view) pairs: views
    into the blob itself for raw frames (so the blob must stay alive while they are used), else one
    view of a buffer the frames were decompressed into.
    """

    header: BlobHeader
    model: bytes
    segments: tuple[tuple[int, memoryview], ...] = ()

    def tensor(self, ref: TensorRef) -> np.ndarray:
        """The initializer ``ref`` as a read-only numpy array over the weights (no copy)."""
        for start, view in self.segments:
            if start <= ref.offset and ref.offset + ref.nbytes <= start + len(view):
                dtype = np.dtype(TENSOR_DTYPES[ref.elem_type])
                flat = np.frombuffer(
                    view, dtype=dtype, count=ref.nbytes // dtype.itemsize, offset=ref.offset - start
                )
                return flat.reshape(ref.dims)
        raise CorruptBlobError(f"tensor {ref.name!r} does not lie whole in one weights frame")


def _where(header: BlobHeader) -> str:
    return f"blob of model {header.name!r} ({header.platform})"


def check_layout(
    data: bytes | bytearray | memoryview, *, max_model_size: int = DEFAULT_MAX_MODEL_SIZE
) -> tuple[BlobHeader, int]:
    """The checks of ``unpack_blob`` that need no decompression: the header (and its CRC), the
    declared sizes against ``max_model_size`` and the bytes present, and the frame layout. Returns
    the header and where the frames start. For callers that already hold the blob's sha256 from a
    trusted place (the cook cache) and need its header, not its model."""
    header, offset = read_header(data)
    view = memoryview(data).cast("B")
    where = _where(header)
    if header.model_size > max_model_size:
        raise BlobTooLargeError(
            f"{where} declares a {header.model_size:,}-byte model, over the limit of {max_model_size:,} "
            "bytes; raise max_model_size if the model is genuinely that large"
        )
    if header.version == LEGACY_BLOB_FORMAT_VERSION:
        return header, offset
    present = len(view) - offset
    if present < header.compressed_size:
        raise TruncatedBlobError(
            f"{where} is cut off: {present:,} of {header.compressed_size:,} bytes of frames present"
        )
    if present > header.compressed_size:
        raise CorruptBlobError(f"{where} has {present - header.compressed_size:,} unexpected trailing bytes")
    check_frames(view, header.frames, where)
    return header, offset


def unpack_blob(
    data: bytes | bytearray | memoryview,
    *,
    max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
    threads: int | None = None,
    check_sha256: bool = True,
    check_raw: bool = True,
) -> Unpacked:
    """Check and decode a blob of any readable version, decompressing frames on ``threads`` threads
    (default: one per core).

    Never allocates more than the header declares, and refuses declarations over ``max_model_size``.
    Damage is caught by the header CRC, the frame layout, each zstd frame's content checksum and
    (``check_raw``) the CRC-32s of raw frames' content; callers that just checked the whole blob
    against a sha256 (``Bundle``) skip the last. ``check_sha256`` adds a sha256 pass over
    version-1 blobs, whose header has nothing else.
    """
    header, offset = check_layout(data, max_model_size=max_model_size)
    view = memoryview(data).cast("B")
    where = _where(header)
    if header.version == LEGACY_BLOB_FORMAT_VERSION:
        return Unpacked(header, _decode_v1(view[offset:], header, where, check_sha256=check_sha256))
    threads = threads if threads is not None else default_threads()
    if check_raw:
        check_raw_frames(view, header.frames, where, threads)
    target, finish = new_bytes(header.graph_size or 0)
    decode_into(view, [f for f in header.frames if f.section == "graph"], target, where, threads)
    segments = _weight_segments(view, header, where, threads) if header.weights is not None else ()
    return Unpacked(header, finish(), segments)


def _weight_segments(
    view: memoryview, header: BlobHeader, where: str, threads: int
) -> tuple[tuple[int, memoryview], ...]:
    """Raw frames whose tensors each lie whole in one frame are used in place; anything else is
    decoded into one new buffer."""
    assert header.weights is not None
    frames = [f for f in header.frames if f.section == "weights"]
    if all(f.codec == "raw" for f in frames):
        segments = tuple(
            (f.content_offset, view[f.data_offset : f.data_offset + f.content_size].toreadonly())
            for f in frames
        )
        starts = [start for start, _ in segments]
        if all(_within_one(ref, starts, segments) for ref in header.weights.tensors):
            return segments
    buffer = np.empty(header.weights.size, dtype=np.uint8)
    decode_into(view, frames, memoryview(buffer), where, threads)
    return ((0, memoryview(buffer).toreadonly()),)


def _within_one(ref: TensorRef, starts: list[int], segments: tuple[tuple[int, memoryview], ...]) -> bool:
    index = bisect.bisect_right(starts, ref.offset) - 1
    if index < 0:
        return False
    start, segment = segments[index]
    return ref.offset + ref.nbytes <= start + len(segment)


def _decode_v1(view: memoryview, header: BlobHeader, where: str, *, check_sha256: bool) -> bytes:
    if len(view) < header.compressed_size:
        raise TruncatedBlobError(
            f"{where} is cut off: {len(view):,} of {header.compressed_size:,} compressed bytes present"
        )
    if len(view) > header.compressed_size:
        raise CorruptBlobError(
            f"{where} has {len(view) - header.compressed_size:,} unexpected trailing bytes"
        )
    try:
        params = zstandard.get_frame_parameters(view)
    except zstandard.ZstdError as exc:
        raise ChecksumMismatchError(f"{where}: model frame is damaged ({exc})") from None
    if params.content_size != header.model_size or not params.has_checksum:
        raise ChecksumMismatchError(f"{where}: model frame does not match its header (damaged or modified)")
    try:
        model = zstandard.ZstdDecompressor().decompress(
            view, max_output_size=header.model_size, allow_extra_data=False
        )
    except zstandard.ZstdError as exc:
        raise ChecksumMismatchError(f"{where}: model data is damaged ({exc})") from None
    if len(model) != header.model_size:
        raise ChecksumMismatchError(
            f"{where}: the model frame holds {len(model):,} bytes, not {header.model_size:,}"
        )
    # Version 1 blobs keep their sha256 check: their header has no other proof of the whole model.
    if check_sha256 and hashlib.sha256(model).hexdigest() != header.model_sha256:
        raise ChecksumMismatchError(f"{where}: sha256 of the model bytes does not match the header")
    return model


def decode_blob(
    data: bytes | bytearray | memoryview,
    *,
    max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
    check_sha256: bool = True,
    threads: int | None = None,
) -> tuple[BlobHeader, bytes]:
    """Check and decompress a blob; returns its header and the model file (the graph section).

    For a blob with external weights the model file refers to them; ``unpack_blob`` gives both.
    """
    unpacked = unpack_blob(data, max_model_size=max_model_size, threads=threads, check_sha256=check_sha256)
    return unpacked.header, unpacked.model
