"""The cooked blob: one self-describing model file, compressed where that pays (docs/bundle-format.md).

Version 3 (written today) holds two *sections*: the *graph* (the model file: ``.onnx`` whose big
initializers refer to external data, or ``.ort``) and the optional *weights* (those initializers as
aligned raw tensors). A section is either zstd frames of 1 MiB content (decoded in parallel, each
checked by its own checksum) or one contiguous raw *extent* whose content starts at a multiple of
64 KiB, so that a mapped blob file hands it to onnxruntime in place. The header is a zstd skippable
frame; a 16-byte trailer at the end of the blob gives its offset. The header starts the blob,
except for an ORT-format model stored raw: then the flatbuffer starts the blob (onnxruntime maps
such a file itself, ignoring the bytes after the flatbuffer) and the header follows it.

Version 2 (read for old bundles): the header frame first, then frames laid end to end; raw content
in skippable frames of at most 1 MiB (graph) or runs of whole tensors (weights).
Version 1 (read for old bundles): the header frame, then one zstd frame holding the model file.
Stock ``zstd`` does not give the model of a version-3 (or a mixed version-2) blob: the files are
named ``.ocb``; ``python -m pipeline.runtime unpack`` (or ``inspect``'s stock-tool recipe) does.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

import numpy as np
import zstandard

from .compat import parse_version
from .constants import (
    BLOB_FORMAT_VERSION,
    LEGACY_BLOB_FORMAT_VERSION,
    TWO_GIB,
    V2_BLOB_FORMAT_VERSION,
    ModelFormat,
)
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
)
from .frames import (
    check_raw as check_raw_frames,
)

READABLE_VERSIONS = (LEGACY_BLOB_FORMAT_VERSION, V2_BLOB_FORMAT_VERSION, BLOB_FORMAT_VERSION)
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
# Version 3: a raw extent's content starts at a multiple of this offset of the blob (the mapping
# granularity of Windows; Linux maps at 4 KiB), except an ORT graph that starts the blob.
EXTENT_ALIGNMENT = 1 << 16
# Version 3's last 16 bytes: TRAILER_MAGIC, then the header frame's offset (uint64, little-endian).
TRAILER_MAGIC = b"OCB3TAIL"
_TRAILER = struct.Struct("<8sQ")
TRAILER_SIZE = _TRAILER.size
# The flatbuffers file identifier of an ORT-format model, at bytes 4..8.
ORT_IDENTIFIER = b"ORTM"
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
    compressed_size: int  # bytes of the frames (all but the header frame and, in version 3, the trailer)
    cook_key: str
    min_runtime_version: str
    ort_format_version: str | None = None
    saved_runtime_optimizations: bool = False
    execution_providers: tuple[str, ...] = ("CPUExecutionProvider",)
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ep_session_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Versions 2 and 3 (a version-1 blob has one zstd frame holding the model file).
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
            data["frames"] = [_frame_json(f, self.version) for f in self.frames]
            data["weights"] = self.weights.to_json() if self.weights is not None else None
        return data


_V2_FIELDS = ("version", "graph_size", "frames", "weights")


def _frame_json(frame: Frame, version: int) -> list[Any]:
    """Version 2: [section, codec, size, content size, pad(, CRCs)]; version 3 adds the offset after
    the codec (frames need not follow the header: an ORT graph may start the blob)."""
    place = [frame.offset] if version >= 3 else []
    entry: list[Any] = [frame.section, frame.codec, *place, frame.size, frame.content_size, frame.pad]
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


def pack_header(header: BlobHeader, length: int | None = None) -> bytes | None:
    """The header frame; padded with spaces (valid JSON) to ``length`` bytes, or None if longer."""
    payload = json.dumps(header.to_dict(), sort_keys=True, separators=(",", ":")).encode()
    if length is not None:
        room = length - _FRAME_PREFIX.size - _HEADER_PREFIX.size - len(payload)
        if room < 0:
            return None
        payload += b" " * room
    prefix = _HEADER_PREFIX.pack(HEADER_MAGIC, header.version, zlib.crc32(payload))
    return _FRAME_PREFIX.pack(SKIPPABLE_MAGIC, len(prefix) + len(payload)) + prefix + payload


def read_header(data: bytes | bytearray | memoryview) -> tuple[BlobHeader, int]:
    """Parse and check the header frame; returns it and the offset where the header frame ends.

    The header starts the blob, or (version 3, an ORT graph first) the trailer says where it is.
    """
    view = memoryview(data).cast("B")
    start = _header_start(view)
    if len(view) - start < _FRAME_PREFIX.size:
        if bytes(view[start:]) == struct.pack("<I", SKIPPABLE_MAGIC)[: len(view) - start]:
            raise TruncatedBlobError(f"blob is only {len(view)} bytes long: the header is cut off")
        raise NotABlobError("not an onnx-cooker blob: too short to hold a header")
    magic, size = _FRAME_PREFIX.unpack_from(view, start)
    if magic != SKIPPABLE_MAGIC:
        if start == 0 and bytes(view[4:8]) == ORT_IDENTIFIER:
            raise NotABlobError(
                "not an onnx-cooker blob: an ORT-format model without the cooker's trailer (a plain .ort "
                "file, or a blob cut off at its end); pass an .ocb file written by `doit cook`"
            )
        raise NotABlobError(
            "not an onnx-cooker blob: it does not start with the header frame "
            "(pass an .ocb file written by `doit cook`, not a plain .onnx/.ort file)"
        )
    if size > MAX_HEADER_SIZE or size < _HEADER_PREFIX.size:
        raise CorruptBlobError(f"blob header declares {size} bytes; a valid header is 14 B to 16 MiB")
    end = start + _FRAME_PREFIX.size + size
    if len(view) < end:
        raise TruncatedBlobError(f"blob is {len(view)} bytes, but its header alone needs {end}: file cut off")
    header_magic, version, crc = _HEADER_PREFIX.unpack_from(view, start + _FRAME_PREFIX.size)
    if header_magic != HEADER_MAGIC:
        raise NotABlobError("not an onnx-cooker blob: the first zstd frame is not an onnx-cooker header")
    if version not in READABLE_VERSIONS:
        raise UnsupportedBlobVersionError(
            f"blob format version {version} is not supported: this loader reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}; re-cook the model with the cooker that matches "
            "this loader"
        )
    if start and version < BLOB_FORMAT_VERSION:
        raise CorruptBlobError(f"a version-{version} blob header must start the blob")
    payload = bytes(view[start + _FRAME_PREFIX.size + _HEADER_PREFIX.size : end])
    if zlib.crc32(payload) != crc:
        raise ChecksumMismatchError("blob header checksum mismatch: the file is damaged or was modified")
    return _header_from_json(payload, version, start, end), end


def _header_start(view: memoryview) -> int:
    """0, or where the trailer puts the header when the blob does not start with one."""
    if len(view) >= 4 and bytes(view[:4]) == struct.pack("<I", SKIPPABLE_MAGIC):
        return 0
    if len(view) < TRAILER_SIZE:
        return 0
    magic, offset = _TRAILER.unpack_from(view, len(view) - TRAILER_SIZE)
    if magic != TRAILER_MAGIC:
        return 0
    if offset > len(view) - TRAILER_SIZE - _FRAME_PREFIX.size:
        raise CorruptBlobError(f"blob trailer puts the header at byte {offset:,}, outside the blob")
    return offset


def read_header_from_file(stream: BinaryIO) -> BlobHeader:
    """The header of the blob file open in ``stream`` (seekable), reading only the header and trailer
    (its frames are not checked: ``check_layout`` does that on the whole blob)."""
    start = 0
    head = stream.read(_FRAME_PREFIX.size)
    if len(head) == _FRAME_PREFIX.size and _FRAME_PREFIX.unpack(head)[0] != SKIPPABLE_MAGIC:
        size = stream.seek(0, 2)
        if size >= TRAILER_SIZE + _FRAME_PREFIX.size:
            stream.seek(size - TRAILER_SIZE)
            magic, offset = _TRAILER.unpack(stream.read(TRAILER_SIZE))
            if magic == TRAILER_MAGIC and offset <= size - TRAILER_SIZE - _FRAME_PREFIX.size:
                start = offset
    stream.seek(start)
    frame = stream.read(_FRAME_PREFIX.size)
    if len(frame) == _FRAME_PREFIX.size and _FRAME_PREFIX.unpack(frame)[0] == SKIPPABLE_MAGIC:
        frame += stream.read(min(_FRAME_PREFIX.unpack(frame)[1], MAX_HEADER_SIZE))
    if start == 0:
        return read_header(frame)[0]
    magic, size = _FRAME_PREFIX.unpack_from(frame)
    if magic != SKIPPABLE_MAGIC or len(frame) < _FRAME_PREFIX.size + max(size, _HEADER_PREFIX.size):
        raise CorruptBlobError("blob trailer does not point at a complete header frame")
    header_magic, version, crc = _HEADER_PREFIX.unpack_from(frame, _FRAME_PREFIX.size)
    payload = frame[_FRAME_PREFIX.size + _HEADER_PREFIX.size :]
    if header_magic != HEADER_MAGIC or version != BLOB_FORMAT_VERSION or zlib.crc32(payload) != crc:
        raise ChecksumMismatchError("blob header (found through the trailer) is damaged or not a header")
    return _header_from_json(payload, version, start, start + len(frame))


def _header_from_json(payload: bytes, version: int, start: int, end: int) -> BlobHeader:
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
        known |= _v2_layout(fields, version, start, end)
    return BlobHeader(version=version, **known)


def _v2_layout(fields: dict[str, Any], version: int, start: int, end: int) -> dict[str, Any]:
    """The frames and weights of a version-2 or -3 header, checked for consistency (not yet against
    data): ``start`` and ``end`` are where the header frame lies in the blob."""
    graph_size = fields["graph_size"]
    if graph_size < 0:
        raise CorruptBlobError("blob header declares a negative graph size")
    frames = (
        _parse_frames(fields["frames"], end)
        if version < 3
        else _parse_extents(fields["frames"], start, end, ort=fields["model_format"] == ModelFormat.ORT)
    )
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
        if version < 3 and frame.codec == "raw" and frame.data_offset % WEIGHT_ALIGNMENT:
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


def _parse_extents(entries: list[Any], start: int, end: int, *, ort: bool) -> tuple[Frame, ...]:
    """Version 3's frames: [section, codec, offset, size, content size, pad(, CRC-32s)], in blob
    order, end to end after the header frame; only a raw ORT graph may come first, at offset 0 with
    the header right behind it. A raw frame is a whole section, its content EXTENT_ALIGNMENT-aligned."""
    if len(entries) > MAX_FRAMES:
        raise CorruptBlobError(
            f"blob header lists {len(entries):,} frames; at most {MAX_FRAMES:,} are allowed"
        )
    frames: list[Frame] = []
    position, content = (0 if start else end), {"graph": 0, "weights": 0}
    for index, entry in enumerate(entries):
        label = f"blob header frame {index + 1}"
        if not (
            isinstance(entry, list)
            and len(entry) == (7 if len(entry) > 1 and entry[1] == "raw" else 6)
            and entry[0] in SECTIONS
            and entry[1] in CODECS
            and all(_is_count(v) for v in entry[2:6])
        ):
            raise CorruptBlobError(
                f"{label} is not [section, codec, offset, size, content size, pad(, CRC-32 list for raw "
                "frames)]"
            )
        section, codec, offset, size, content_size, pad = entry[:6]
        if offset != position:
            raise CorruptBlobError(f"{label} starts at byte {offset:,}, not {position:,} where it must")
        if section == "graph" and content["weights"]:
            raise CorruptBlobError(f"{label}: graph frames come before weights frames")
        checks: tuple[int, ...] = ()
        if codec == "raw":
            checks = _raw_checks(entry[6], content_size, index)
            if any(f.section == section for f in frames) or content[section]:
                raise CorruptBlobError(f"{label}: a raw {section} extent must be the whole section")
            if size != pad + content_size or pad >= EXTENT_ALIGNMENT:
                raise CorruptBlobError(f"{label}: raw extent sizes do not add up")
            if offset + pad != 0 and (offset + pad) % EXTENT_ALIGNMENT:
                raise CorruptBlobError(f"{label}: raw content not at a {EXTENT_ALIGNMENT:,}-byte boundary")
        elif pad != 0 or size == 0:
            raise CorruptBlobError(f"{label}: a zstd frame has no padding and is not empty")
        elif any(f.section == section and f.codec == "raw" for f in frames):
            raise CorruptBlobError(f"{label}: a raw {section} extent must be the whole section")
        frames.append(Frame(section, codec, offset, size, content[section], content_size, pad, checks, 0))
        content[section] += content_size
        position = offset + size
        if offset == 0:  # the ORT graph first: the header comes right after it
            if not ort or section != "graph" or codec != "raw" or position != start:
                raise CorruptBlobError(f"{label}: only a raw graph ending where the header starts may lead")
            position = end
    if start and not frames:
        raise CorruptBlobError("blob header is not at the start, but no graph extent comes before it")
    return tuple(frames)


def frames_end(header: BlobHeader, header_end: int) -> int:
    """Where the last frame (or the header frame) of a version-3 blob ends: the trailer starts there."""
    return max([header_end, *(f.offset + f.size for f in header.frames)])


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
        return tensor_view(self.segments, ref)


def tensor_view(segments: Sequence[tuple[int, memoryview]], ref: TensorRef) -> np.ndarray:
    """The initializer ``ref`` as a read-only numpy array over the weights ``segments`` (no copy)."""
    for start, view in segments:
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
    the header and where the header frame ends. For callers that already hold the blob's sha256 from
    a trusted place (the cook cache) and need its header, not its model."""
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
    if header.version == V2_BLOB_FORMAT_VERSION:
        present, expected, what = len(view) - offset, header.compressed_size, "bytes of frames"
    else:
        present, expected, what = len(view), frames_end(header, offset) + TRAILER_SIZE, "bytes"
    if present < expected:
        raise TruncatedBlobError(f"{where} is cut off: {present:,} of {expected:,} {what} present")
    if present > expected:
        raise CorruptBlobError(f"{where} has {present - expected:,} unexpected trailing bytes")
    if header.version >= 3:
        magic, start = _TRAILER.unpack_from(view, len(view) - TRAILER_SIZE)
        if magic != TRAILER_MAGIC:
            raise TruncatedBlobError(f"{where} is cut off or damaged at its end: its trailer is missing")
        if start != _header_start(view):
            raise CorruptBlobError(f"{where}: its trailer does not point at its header")
    check_frames(view, header.frames, where)
    return header, offset


class CheckedBlob:
    """A blob whose header and layout were checked (``check_blob``): its sections on demand.

    Holds ``data`` (read-only views of it: the caller's bytes, bytearray or mmap stay borrowed, not
    copied). Raw sections are handed out as views; zstd sections are decoded when asked for.
    """

    def __init__(self, data: Any, header: BlobHeader, header_end: int, threads: int | None) -> None:
        self._views = [memoryview(data)]
        self._views.append(self._views[0].cast("B"))
        self.view = self._views[-1].toreadonly()
        self._source = data
        self.owns_source = False  # the caller's data is never closed; Bundle.session's own mapping is
        self.header = header
        self.header_end = header_end
        self.threads = threads if threads is not None else default_threads()
        self.where = _where(header)
        self._segments: tuple[tuple[int, memoryview], ...] | None = None

    def release(self) -> None:
        """Let go of the blob's bytes (after onnxruntime took what it needs from elsewhere, e.g. the
        blob file it maps itself): the views are released and an owned mapping is closed, so that
        its pages are not counted twice while onnxruntime maps the same file."""
        self.view.release()
        for view in reversed(self._views):
            view.release()
        if self.owns_source and hasattr(self._source, "close"):
            try:
                self._source.close()
            except BufferError:  # a view still held elsewhere: unmapped when it goes
                pass

    def frames(self, section: str) -> list[Frame]:
        return [f for f in self.header.frames if f.section == section]

    def extent(self, section: str) -> memoryview | None:
        """The whole ``section`` as one view into the blob, if a version-3 raw extent stores it."""
        frames = self.frames(section)
        if self.header.version >= 3 and len(frames) == 1 and frames[0].codec == "raw":
            start = frames[0].data_offset
            return self.view[start : start + frames[0].content_size]
        return None

    def graph_into(self, target: memoryview) -> None:
        """Decode the graph section into ``target`` (``graph_size`` writable bytes)."""
        decode_into(self.view, self.frames("graph"), target, self.where, self.threads)

    def graph_bytes(self, *, check_sha256: bool = True) -> bytes:
        """The model file as ``bytes`` (what onnxruntime's Python API takes): decoded, or copied once."""
        if self.header.version == LEGACY_BLOB_FORMAT_VERSION:
            return _decode_v1(
                self.view[self.header_end :], self.header, self.where, check_sha256=check_sha256
            )
        target, finish = new_bytes(self.header.graph_size or 0)
        self.graph_into(target)
        return finish()

    def weight_segments(self) -> tuple[tuple[int, memoryview], ...]:
        """The weights section as (offset in the section, read-only view) pairs (see ``Unpacked``);
        zstd frames are decoded on the first call only."""
        if self.header.weights is None:
            return ()
        if self._segments is None:
            extent = self.extent("weights")
            self._segments = (
                ((0, extent),)
                if extent is not None
                else _weight_segments(self.view, self.header, self.where, self.threads)
            )
        return self._segments

    def raw_bytes(self) -> int:
        """Bytes of raw content whose CRC-32s ``check_raw`` reads (0 for a version-1 blob)."""
        if self.header.version == LEGACY_BLOB_FORMAT_VERSION:
            return 0
        return sum(f.content_size for f in self.header.frames if f.codec == "raw")

    def check_raw(self, threads: int | None = None) -> None:
        """Compare the CRC-32s of every raw frame's content with the header's (what ``check_blob``
        does unless told not to) on ``threads`` threads (default: the blob's), on a view of its own:
        ``release`` elsewhere does not cut it off."""
        if self.header.version == LEGACY_BLOB_FORMAT_VERSION:
            return
        with memoryview(self._source) as whole, whole.cast("B") as view:
            check_raw_frames(view, self.header.frames, self.where, threads or self.threads)

    def weights_contiguous(self) -> bool:
        """Whether ``weight_segments`` gives one buffer, known without decoding anything: always in
        version 3; in version 2 unless the weights are several raw frames."""
        frames = self.frames("weights")
        return self.header.version >= 3 or len(frames) <= 1 or any(f.codec != "raw" for f in frames)


def check_blob(
    data: Any,
    *,
    max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
    threads: int | None = None,
    check_raw: bool = True,
) -> CheckedBlob:
    """Check a blob's header, layout and (``check_raw``) the CRC-32s of its raw content; decode
    nothing. ``data`` is anything exposing the buffer protocol: bytes, bytearray, memoryview, mmap."""
    header, offset = check_layout(data, max_model_size=max_model_size)
    checked = CheckedBlob(data, header, offset, threads)
    if check_raw and header.version != LEGACY_BLOB_FORMAT_VERSION:
        check_raw_frames(checked.view, header.frames, checked.where, checked.threads)
    return checked


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
    against a sha256 skip the last. ``check_sha256`` adds a sha256 pass over version-1 blobs, whose
    header has nothing else.
    """
    checked = check_blob(data, max_model_size=max_model_size, threads=threads, check_raw=check_raw)
    return Unpacked(checked.header, checked.graph_bytes(check_sha256=check_sha256), checked.weight_segments())


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
