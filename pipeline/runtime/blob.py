"""The cooked blob: one self-describing, zstd-compressed model (see docs/bundle-format.md).

Layout: a zstd *skippable frame* carrying the header, then one standard zstd frame holding the
model bytes with content size and content checksum. The stock ``zstd -d`` tool skips the header
frame and writes out the plain ``.onnx``/``.ort`` file.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import zstandard

from .compat import parse_version
from .errors import (
    BlobTooLargeError,
    ChecksumMismatchError,
    CorruptBlobError,
    NotABlobError,
    TruncatedBlobError,
    UnsupportedBlobVersionError,
)

BLOB_FORMAT_VERSION = 1
HEADER_MAGIC = b"ONNXCOOK"
# 0x184D2A50..0x184D2A5F are zstd skippable-frame magics; decoders ignore the frame's payload.
SKIPPABLE_MAGIC = 0x184D2A5E
MAX_HEADER_SIZE = 1 << 20
DEFAULT_MAX_MODEL_SIZE = 2 << 30  # ORT format and a protobuf both top out at 2 GiB
MODEL_FORMATS = ("onnx", "ort")

_FRAME_PREFIX = struct.Struct("<II")  # skippable magic, payload size
_HEADER_PREFIX = struct.Struct("<8sHI")  # HEADER_MAGIC, blob format version, crc32 of the JSON


@dataclass(frozen=True, kw_only=True)
class BlobHeader:
    """What a blob says about the model inside it; the JSON part of the header frame."""

    model_format: str
    platform: str
    name: str
    model_size: int
    model_sha256: str
    compressed_size: int
    cook_key: str
    min_runtime_version: str
    ort_format_version: str | None = None
    saved_runtime_optimizations: bool = False
    execution_providers: tuple[str, ...] = ("CPUExecutionProvider",)
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ep_session_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["execution_providers"] = list(self.execution_providers)
        return data


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


def encode_blob(model: bytes, *, level: int, **header_fields: Any) -> bytes:
    """Compress ``model`` and prefix the header; ``header_fields`` are BlobHeader's other fields."""
    frame = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True).compress(
        model
    )
    header = BlobHeader(
        model_size=len(model),
        model_sha256=hashlib.sha256(model).hexdigest(),
        compressed_size=len(frame),
        **header_fields,
    )
    payload = json.dumps(header.to_dict(), sort_keys=True, separators=(",", ":")).encode()
    prefix = _HEADER_PREFIX.pack(HEADER_MAGIC, BLOB_FORMAT_VERSION, zlib.crc32(payload))
    skippable = _FRAME_PREFIX.pack(SKIPPABLE_MAGIC, len(prefix) + len(payload))
    return b"".join((skippable, prefix, payload, frame))


def read_header(data: bytes | memoryview) -> tuple[BlobHeader, int]:
    """Parse and check the header frame; returns it and the offset of the model frame."""
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
        raise CorruptBlobError(f"blob header declares {size} bytes; a valid header is 14 B to 1 MiB")
    end = _FRAME_PREFIX.size + size
    if len(view) < end:
        raise TruncatedBlobError(f"blob is {len(view)} bytes, but its header alone needs {end}: file cut off")
    header_magic, version, crc = _HEADER_PREFIX.unpack_from(view, _FRAME_PREFIX.size)
    if header_magic != HEADER_MAGIC:
        raise NotABlobError("not an onnx-cooker blob: the first zstd frame is not an onnx-cooker header")
    if version != BLOB_FORMAT_VERSION:
        raise UnsupportedBlobVersionError(
            f"blob format version {version} is not supported: this loader reads version "
            f"{BLOB_FORMAT_VERSION}; re-cook the model with the cooker that matches this loader"
        )
    payload = bytes(view[_FRAME_PREFIX.size + _HEADER_PREFIX.size : end])
    if zlib.crc32(payload) != crc:
        raise ChecksumMismatchError("blob header checksum mismatch: the file is damaged or was modified")
    return _header_from_json(payload), end


def _header_from_json(payload: bytes) -> BlobHeader:
    try:
        fields = json.loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptBlobError(f"blob header is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise CorruptBlobError("blob header is not a JSON object")
    missing = sorted(set(_FIELD_TYPES) - set(fields))
    if missing:
        raise CorruptBlobError(f"blob header lacks field(s) {', '.join(missing)}")
    for key, expected in _FIELD_TYPES.items():
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
    return BlobHeader(**known)


def decode_blob(
    data: bytes | memoryview, *, max_model_size: int = DEFAULT_MAX_MODEL_SIZE, check_sha256: bool = True
) -> tuple[BlobHeader, bytes]:
    """Check and decompress a blob; returns its header and the model bytes.

    Never allocates more than the header declares, and refuses declarations over ``max_model_size``.
    """
    header, offset = read_header(data)
    view = memoryview(data)[offset:]
    where = f"blob of model {header.name!r} ({header.platform})"
    if header.model_size > max_model_size:
        raise BlobTooLargeError(
            f"{where} declares a {header.model_size:,}-byte model, over the limit of {max_model_size:,} "
            "bytes; raise max_model_size if the model is genuinely that large"
        )
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
    # zstd checked the frame's XXH64 content checksum while decompressing; the sha256 pass on top is
    # for callers that hold no other proof of the bytes (Bundle has the manifest's blob sha256).
    if check_sha256 and hashlib.sha256(model).hexdigest() != header.model_sha256:
        raise ChecksumMismatchError(f"{where}: sha256 of the model bytes does not match the header")
    return header, model
