"""The blob header: its frame (magic, format version, CRC-32 of the JSON), the version-3 trailer that
finds it, ``BlobHeader`` (the JSON's fields), writing it (``pack_header``), and reading and checking
it (``read_header``, ``read_header_from_file``); its layout fields are parsed in ``sections``.
"""

from __future__ import annotations

import functools
import json
import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from types import MappingProxyType
from typing import Any, BinaryIO

from .compat import parse_version
from .constants import (
    BLOB_FORMAT_VERSION,
    DEVICE_POLICIES,
    LEGACY_BLOB_FORMAT_VERSION,
    V2_BLOB_FORMAT_VERSION,
    ModelFormat,
)
from .errors import (
    DAMAGED,
    ChecksumMismatchError,
    CorruptBlobError,
    NotABlobError,
    TruncatedBlobError,
    UnsupportedBlobVersionError,
)
from .frames import Frame
from .sections import WeightsInfo, _v2_layout

READABLE_VERSIONS = (LEGACY_BLOB_FORMAT_VERSION, V2_BLOB_FORMAT_VERSION, BLOB_FORMAT_VERSION)
HEADER_MAGIC = b"ONNXCOOK"
# 0x184D2A50..0x184D2A5F are zstd skippable-frame magics; decoders ignore the frame's payload.
SKIPPABLE_MAGIC = 0x184D2A5E
_SKIPPABLE_BYTES = struct.pack("<I", SKIPPABLE_MAGIC)
# A version-2 header lists every weight tensor: room for about 100,000 of them.
MAX_HEADER_SIZE = 16 << 20
MODEL_FORMATS = tuple(f.value for f in ModelFormat)
# Version 3's last 16 bytes: TRAILER_MAGIC, then the header frame's offset (uint64, little-endian).
TRAILER_MAGIC = b"OCB3TAIL"
_TRAILER = struct.Struct("<8sQ")
TRAILER_SIZE = _TRAILER.size
# The flatbuffers file identifier of an ORT-format model, at bytes 4..8.
ORT_IDENTIFIER = b"ORTM"
_FRAME_PREFIX = struct.Struct("<II")  # skippable magic, payload size
_HEADER_PREFIX = struct.Struct("<8sHI")  # HEADER_MAGIC, blob format version, crc32 of the JSON


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
    device_policy: str | None = None  # one of DEVICE_POLICIES; absent from the JSON when None
    # Versions 2 and 3 (a version-1 blob has one zstd frame holding the model file).
    version: int = LEGACY_BLOB_FORMAT_VERSION
    graph_size: int | None = None
    frames: tuple[Frame, ...] = ()
    weights: WeightsInfo | None = None

    def to_dict(self) -> dict[str, Any]:
        """The header as JSON data: exactly what the header frame's JSON holds (the version is in the
        frame's binary prefix, not here)."""
        names = (f.name for f in dataclass_fields(self) if f.name not in _V2_FIELDS)
        data = {name: _thawed(getattr(self, name)) for name in names}
        data["execution_providers"] = list(self.execution_providers)
        if self.device_policy is None:
            del data["device_policy"]  # blobs without one stay byte-identical to older cookers'
        if self.version >= 2:
            data["graph_size"] = self.graph_size
            data["frames"] = [_frame_json(f, self.version) for f in self.frames]
            data["weights"] = self.weights.to_json() if self.weights is not None else None
        return data


_V2_FIELDS = ("version", "graph_size", "frames", "weights")


def _frozen(value: Any) -> Any:
    """A parsed header's objects as read-only mappings: a header is shared by every load of the same
    bytes (``_cached_header``), so a caller's change to one must not reach the next load."""
    if isinstance(value, dict):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    return value


def _thawed(value: Any) -> Any:
    """``_frozen``'s mappings as plain dicts again (JSON, ``to_dict``)."""
    if isinstance(value, Mapping):
        return {key: _thawed(item) for key, item in value.items()}
    return value


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
# Optional: read when present (older blobs lack them).
_OPTIONAL_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {"device_policy": (str, type(None))}
_V2_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "graph_size": int,
    "frames": list,
    "weights": (dict, type(None)),
}
_V1_CHECKS = dict(_FIELD_TYPES)
_V2_CHECKS = _FIELD_TYPES | _V2_FIELD_TYPES


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


def byte_view(data: Any) -> memoryview:
    """``data`` as a flat view of bytes; a programming error (a strided view, a str, a list) is a
    TypeError that says what to pass."""
    try:
        return memoryview(data).cast("B")
    except TypeError as exc:
        raise TypeError(
            f"a blob is one contiguous buffer of bytes (bytes, bytearray, mmap, a C-contiguous memoryview "
            f"or numpy array), not {type(data).__name__} ({exc}): pass the blob's bytes (a file's, read; "
            "bytes(view) of a strided view)"
        ) from None


def read_header(data: bytes | bytearray | memoryview) -> tuple[BlobHeader, int]:
    """Parse and check the header frame; returns it and the offset where the header frame ends.

    The header starts the blob, or (version 3, an ORT graph first) the trailer says where it is.
    """
    view = byte_view(data)
    start = _header_start(view)
    if len(view) - start < _FRAME_PREFIX.size:
        if bytes(view[start:]) == _SKIPPABLE_BYTES[: len(view) - start]:
            raise TruncatedBlobError(f"blob is only {len(view)} bytes long: the header is cut off{DAMAGED}")
        raise NotABlobError("not an onnx-cooker blob: too short to hold a header")
    magic, size = _FRAME_PREFIX.unpack_from(view, start)
    if magic != SKIPPABLE_MAGIC:
        if start == 0 and bytes(view[4:8]) == ORT_IDENTIFIER:
            if (header := _header_frame_in_tail(view)) >= 0:  # a blob's ORT graph and header, then?
                if _TRAILER.pack(TRAILER_MAGIC, header) in bytes(view[header:]):  # a whole trailer, then more
                    raise CorruptBlobError(f"blob has bytes added after its trailer{DAMAGED}")
                raise TruncatedBlobError(f"blob is cut off at its end: its trailer is missing{DAMAGED}")
            raise NotABlobError(
                "not an onnx-cooker blob: an ORT-format model without the cooker's trailer at its end (a "
                "plain .ort file, or a blob cut off or with bytes added at its end); pass an .ocb file "
                "written by `onnx-cooker cook`"
            )
        raise NotABlobError(
            "not an onnx-cooker blob: it does not start with the header frame "
            "(pass an .ocb file written by `onnx-cooker cook`, not a plain .onnx/.ort file)"
        )
    if size > MAX_HEADER_SIZE or size < _HEADER_PREFIX.size:
        raise CorruptBlobError(f"blob header declares {size} bytes; a valid header is 14 B to 16 MiB")
    end = start + _FRAME_PREFIX.size + size
    if len(view) < end:
        raise TruncatedBlobError(
            f"blob is {len(view)} bytes, but its header alone needs {end}: file cut off{DAMAGED}"
        )
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
        raise ChecksumMismatchError(
            f"blob header checksum mismatch: the file is damaged or was modified{DAMAGED}"
        )
    return _parsed(payload, version, start, end), end


# A header is parsed from its checked bytes alone: a load of a blob whose header was parsed before
# (a game's second session of a model, a level loaded again) takes the same frozen BlobHeader
# instead of parsing the JSON again. Tiny models pay most for it: 60-150 us of a 0.7-1.5 ms load,
# the header's Python checks running on caches an onnxruntime session build has just emptied
# (docs/design.md, "A small model's fixed costs"). At most 64 headers of up to 64 KiB (a small model's
# is 1-2 kB): larger ones, of models whose load this does not weigh on, are parsed each time.
_CACHED_HEADER_MAX = 64 << 10


def _parsed(payload: bytes, version: int, start: int, end: int) -> BlobHeader:
    if len(payload) > _CACHED_HEADER_MAX:
        return _header_from_json(payload, version, start, end)
    return _cached_header(payload, version, start, end)


@functools.lru_cache(maxsize=64)
def _cached_header(payload: bytes, version: int, start: int, end: int) -> BlobHeader:
    return _header_from_json(payload, version, start, end)


def _header_frame_in_tail(view: memoryview) -> int:
    """Where the first header frame (the skippable frame's magic, its size, ``ONNXCOOK``) in the last
    ``MAX_HEADER_SIZE`` + 64 bytes starts, or -1: where the header of an ORT blob without its trailer
    at its end lies (the C loader looks for the same)."""
    start = max(0, len(view) - MAX_HEADER_SIZE - 64)
    tail = bytes(view[start:])
    at = tail.find(HEADER_MAGIC, 8)
    while at >= 0:
        if tail[at - 8 : at - 4] == _SKIPPABLE_BYTES:
            return start + at - 8
        at = tail.find(HEADER_MAGIC, at + 1)
    return -1


def _header_start(view: memoryview) -> int:
    """0, or where the trailer puts the header when the blob does not start with one."""
    if len(view) >= 4 and view[:4] == _SKIPPABLE_BYTES:
        return 0
    if len(view) < TRAILER_SIZE:
        return 0
    magic, offset = _TRAILER.unpack_from(view, len(view) - TRAILER_SIZE)
    if magic != TRAILER_MAGIC:
        return 0
    if offset > len(view) - TRAILER_SIZE - _FRAME_PREFIX.size:
        raise CorruptBlobError(f"blob trailer puts the header at byte {offset:,}, outside the blob{DAMAGED}")
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
    return _parsed(bytes(payload), version, start, start + len(frame))


def load_json(raw: bytes) -> Any:
    """A header's or manifest's JSON, read as the C loader reads it (native/src/json.c): UTF-8, a BOM
    allowed (cJSON skips one), no ``\\u0000`` escape anywhere (cJSON would end the string at
    the NUL it makes: the loaders would read two different names), no NaN or Infinity (not JSON;
    cJSON refuses them) and no lone surrogate escape (cJSON refuses it). Raises ValueError."""
    # str, not bytes: json.loads would detect the encoding in Python first (a load's fixed cost)
    text = raw.decode("utf-8-sig")
    if "\\u0000" in text:
        raise ValueError("a string holds a NUL character (\\u0000)")
    value = json.loads(text, parse_constant=_not_json)
    if _SURROGATE_ESCAPE.search(text) and _holds_surrogate(value):
        raise ValueError("a string holds a lone surrogate escape (\\ud800-\\udfff)")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _holds_surrogate(value: Any) -> bool:
    """Whether a string in ``value`` (keys included) holds a surrogate: an escape no pair completed."""
    if isinstance(value, str):
        return any("\ud800" <= char <= "\udfff" for char in value)
    if isinstance(value, dict):
        return any(_holds_surrogate(key) or _holds_surrogate(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_surrogate(item) for item in value)
    return False


def _header_from_json(payload: bytes, version: int, start: int, end: int) -> BlobHeader:
    try:
        fields = load_json(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptBlobError(f"blob header is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise CorruptBlobError("blob header is not a JSON object")
    expected_types = _V2_CHECKS if version >= 2 else _V1_CHECKS
    if not expected_types.keys() <= fields.keys():
        missing = sorted(set(expected_types) - set(fields))
        raise CorruptBlobError(f"blob header lacks field(s) {', '.join(missing)}")
    for key, expected in expected_types.items():
        value = fields[key]
        if not isinstance(value, expected) or (expected is int and value.__class__ is bool):
            raise CorruptBlobError(f"blob header field {key!r} has the wrong type ({type(value).__name__})")
    optional = {key: fields[key] for key in _OPTIONAL_FIELD_TYPES if key in fields}
    for key, value in optional.items():
        if not isinstance(value, _OPTIONAL_FIELD_TYPES[key]):
            raise CorruptBlobError(f"blob header field {key!r} has the wrong type ({type(value).__name__})")
    if optional.get("device_policy") not in (None, *DEVICE_POLICIES):
        raise CorruptBlobError(
            f"blob header field 'device_policy' is {optional['device_policy']!r}, not one of "
            f"{', '.join(DEVICE_POLICIES)}; re-cook with a valid ep_device_policy"
        )
    for key in ("name", "platform"):  # both go into every message about the blob, and log lines
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in fields[key]):
            raise CorruptBlobError(f"blob header field {key!r} holds a control character: re-cook the model")
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
    known = {key: fields[key] for key in _FIELD_TYPES} | optional
    known["execution_providers"] = tuple(known["execution_providers"])
    for key in ("provider_options", "ep_session_options"):
        known[key] = _frozen(known[key])
    if version >= 2:
        known |= _v2_layout(fields, version, start, end)
    return BlobHeader(version=version, **known)


def check_graph_kind(header: BlobHeader, graph: bytes | memoryview, where: str) -> None:
    """The header's model format is the one onnxruntime reads the graph as (an ORT model has the
    identifier ``ORTM`` at bytes 4-7; onnxruntime takes any model that has it for one): a blob whose
    header says otherwise is refused before its graph goes anywhere (``graph`` may be its first bytes)."""
    ort = bytes(graph[4:8]) == ORT_IDENTIFIER
    if ort != (header.model_format == ModelFormat.ORT):
        said, found = ("ORT", "not an ORT model") if not ort else ("ONNX", "an ORT-format model")
        raise CorruptBlobError(
            f"{where}: its header says {said} format, but its graph is {found}; the blob was not written as "
            "onnx-cooker writes blobs: re-run `onnx-cooker cook`"
        )
