"""The sections of a version-2 or -3 blob as its header lays them out (docs/bundle-format.md): the
sizes and limits of frames and raw extents (with the writer's raw-or-zstd rule), the weights
section's tensor table (``WeightsInfo``, ``TensorRef``), and the parsing and consistency checks of
the header's ``graph_size``, ``frames`` and ``weights`` fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .constants import ModelFormat
from .errors import CorruptBlobError
from .frames import (
    CODECS,
    RAW_CRC_PIECE,
    RAW_PREFIX_SIZE,
    SECTIONS,
    Frame,
    crc_count,
)

# Frames of this much content decode in parallel: small enough to spread a 2 MB model over the
# cores, big enough that zstd loses nothing measurable and the header stays small.
FRAME_CONTENT_SIZE = 1 << 20
# Raw frames hold whole tensors, up to this much each (a skippable frame holds under 4 GiB).
MAX_RAW_FRAME_CONTENT = 1 << 30
# Weights are stored raw unless zstd makes them at least this much smaller (float32 weights gain
# about 7%: not worth a decompression pass and a second copy in memory). In version 3 the rule of
# `compression: size`, and of an ONNX graph section (onnxruntime parses it from a copy anyway).
RAW_UNLESS_GAIN = 0.10
# Version 3, `compression: speed` (the default): a section onnxruntime takes in place when it is raw
# (ONNX weights; an ORT graph, which holds an ORT model's weights) is stored raw whatever zstd gains:
# decoding it costs a pass and a copy, and in place is lost. Measured (onnxruntime 1.32; bench.real):
# real ORT models whose graphs zstd made 13-52% smaller (PaddleOCR, ISNet, Silero VAD; int8 weights)
# loaded 1.1-3.3x faster raw through the bundle, and a 67 MB pruned MatMul stack 2.7x, 3.2x, 2.9x and
# 1.7x faster raw from bytes at gains of 8%, 45%, 75% and 93% (docs/bundle-format.md).
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
_ITEMSIZES = {elem_type: np.dtype(name).itemsize for elem_type, name in TENSOR_DTYPES.items()}


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


def plain_file_name(name: str) -> bool:
    """Whether ``name`` names a file inside a folder on every OS, and nothing else: not empty, not
    ``.`` or ``..``, without a separator (``/``, ``\\``), a drive or stream colon, or a control
    character. The cook's names are ASCII letters, digits and ``_-.+`` (settings/assets.py)."""
    return name not in ("", ".", "..") and not any(
        c in "/\\:" or ord(c) < 0x20 or ord(c) == 0x7F for c in name
    )


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


def _counts(values: list[Any]) -> bool:
    """Whether every item of a JSON list is a count (an int, not a bool, not negative)."""
    for value in values:
        if type(value) is not int or value < 0:
            return False
    return True


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
    if not plain_file_name(value["file"]):
        # the graph's references name it, `unpack` writes it and engines may too (the C library's
        # info.weights_file): a path such as ../../x would reach outside their folder
        raise fail(f"'file' {value['file']!r} is not a plain file name (re-cook the model)")
    size, entries = value.get("size"), value.get("tensors")
    if not _is_count(size) or not isinstance(entries, list):
        raise fail("'size' (count) and 'tensors' (list) are required")
    if len(entries) > MAX_TENSORS:
        raise fail(f"{len(entries):,} tensors listed; at most {MAX_TENSORS:,} are allowed")
    # Once per weight of every load (a transformer lists hundreds): JSON gives exact ints, never an
    # int subclass but bool, so ``type(v) is int`` is _is_count's test without its calls.
    tensors, names = [], set()
    for index, entry in enumerate(entries):
        if type(entry) is not list or len(entry) != 5:
            raise fail(f"tensor {index + 1} is not [name, type, dims, offset, bytes]")
        name, elem_type, dims, offset, nbytes = entry
        if type(name) is not str or name in names:
            raise fail(f"tensor {index + 1} has no name or a name used twice")
        itemsize = _ITEMSIZES.get(elem_type) if type(elem_type) is int else None
        if itemsize is None:
            raise fail(f"tensor {name!r} has a data type the loader cannot map ({elem_type!r})")
        if type(dims) is not list or len(dims) > MAX_DIMS or not _counts(dims):
            raise fail(f"tensor {name!r} has malformed dims")
        if not (_is_count(offset) and _is_count(nbytes)) or nbytes != math.prod(dims) * itemsize:
            raise fail(f"tensor {name!r}: its byte count does not match its type and dims")
        if offset % itemsize or offset + nbytes > size:
            raise fail(f"tensor {name!r} lies outside the weights section or is misaligned")
        names.add(name)
        tensors.append(TensorRef(name, elem_type, tuple(dims), offset, nbytes))
    return WeightsInfo(file=value["file"], size=size, sha256=value["sha256"], tensors=tuple(tensors))
