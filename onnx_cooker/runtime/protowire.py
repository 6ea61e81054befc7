"""The protobuf wire format, read without the protobuf package: the field walk that the ONNX graph
checks of ``onnxrefs.py`` build on. Malformed input raises ``CorruptBlobError`` (the bytes are a
blob's graph), never an IndexError or a loop without end.

Varints are read as protobuf's C++ parser (the one inside onnxruntime) reads them, not by their
full value: a key is the low 32 bits of its varint (``ReadTag`` adds up to five bytes in 32-bit
arithmetic, the older ``ReadVarint32`` up to ten, and both drop the bits above), and a value the
low 64 bits, an int32 or enum field (``TensorProto.data_location``, ``data_type``) its low 32
(``int32_value``). A graph can pad a key with a high bit set, ``ea 80 80 80 10`` for
``external_data`` (106): a walk that decoded it whole read field 2^29 + 13 and skipped it, while
onnxruntime 1.24.4 read the entry and opened the file it named (measured; tests/test_external_refs.py).
A group (wire types 3 and 4: no ONNX field is one) is skipped whole, as protobuf skips an unknown
field (``past_group``; tests/test_wire_groups.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from .errors import CorruptBlobError

_LOW_32, _LOW_64 = (1 << 32) - 1, (1 << 64) - 1


def int32_value(value: int) -> int:
    """An int32 or enum field's value as protobuf reads it: the low 32 bits of its varint."""
    return value & _LOW_32


def read_varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    """A varint of at most ten bytes, whole (a key's or a value's caller keeps the low bits)."""
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise CorruptBlobError("blob graph is not a valid ONNX model (a varint runs past its message)")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def fields(data: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, start, end) of each field of the message in ``data[start:end]``;
    for varints start is the value itself; for a group (wire type 3) its fields' bytes and its
    closing key, skipped whole (``past_group``)."""
    pos = start
    while pos < end:
        key = data[pos]  # one-byte varints (most keys and short lengths) without a call
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(data, pos, end)
            key &= _LOW_32
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = data[pos] if pos < end else 0x80
            if value < 0x80:
                pos += 1
            else:
                value, pos = read_varint(data, pos, end)
                value &= _LOW_64
            yield number, wire, value, pos
        elif wire == 2:
            size = data[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = read_varint(data, pos, end)
            if pos + size > end:
                raise CorruptBlobError("blob graph is not a valid ONNX model (a field runs past its message)")
            yield number, wire, pos, pos + size
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            if pos > end:
                raise CorruptBlobError("blob graph is not a valid ONNX model (a field runs past its message)")
            yield number, wire, pos, pos
        elif wire == 3:  # a group: no ONNX field is one, so protobuf keeps it as an unknown field
            start, pos = pos, past_group(data, pos, end, number)
            yield number, wire, start, pos
        else:
            raise CorruptBlobError(f"blob graph is not a valid ONNX model (wire type {wire})")


# Groups nested in groups: protobuf's default recursion limit, which counts the enclosing messages
# too (it refuses sooner; a model the loader accepts and protobuf refuses is refused by onnxruntime)
MAX_GROUPS = 100
_INVALID = "blob graph is not a valid ONNX model "


def past_group(data: memoryview, pos: int, end: int, number: int) -> int:
    """Where the group opened by field ``number`` (wire type 3) ends, past its closing key (wire
    type 4, the same number): its fields skipped as protobuf's parser skips an unknown group's,
    nested groups with them. A group left open, closed by another number or nested over
    ``MAX_GROUPS`` deep is malformed, as there."""
    open_groups = [number]
    while open_groups:
        key, pos = read_varint(data, pos, end)
        key &= _LOW_32
        number, wire = key >> 3, key & 7
        if wire == 0:
            pos = read_varint(data, pos, end)[1]
        elif wire == 2:
            size, pos = read_varint(data, pos, end)
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire == 3:
            if len(open_groups) == MAX_GROUPS:
                raise CorruptBlobError(_INVALID + f"(groups nest over {MAX_GROUPS} deep)")
            open_groups.append(number)
        elif wire == 4:
            if open_groups.pop() != number:
                raise CorruptBlobError(_INVALID + "(a group closed by another field)")
        else:
            raise CorruptBlobError(f"blob graph is not a valid ONNX model (wire type {wire})")
        if pos > end:
            raise CorruptBlobError("blob graph is not a valid ONNX model (a field runs past its message)")
    return pos


def string(data: bytes | memoryview, start: int, end: int) -> str:
    try:
        return str(data[start:end], "utf-8")
    except UnicodeDecodeError:
        raise CorruptBlobError("blob graph is not a valid ONNX model (a name is not UTF-8)") from None


def occurrences(data: bytes, needle: bytes) -> list[int]:
    """Where ``needle`` starts in ``data``, in order (bytes.find: C speed)."""
    found, at = [], data.find(needle)
    while at >= 0:
        found.append(at)
        at = data.find(needle, at + 1)
    return found


def holds(hits: list[int], start: int, end: int) -> bool:
    """Whether one of the sorted ``hits`` (``occurrences``) starts in ``data[start:end]``: a message
    whose bytes hold no occurrence of a key stored verbatim holds no such key."""
    first = bisect_left(hits, start)
    return first < len(hits) and hits[first] < end


def all_inside(hits: list[int], size: int, spans: list[tuple[int, int]]) -> bool:
    """Whether every hit (``size`` bytes from it) lies wholly inside one of the sorted ``spans``."""
    starts = [a for a, _ in spans]
    for hit in hits:
        at = bisect_left(starts, hit + 1) - 1
        if at < 0 or hit + size > spans[at][1]:
            return False
    return True
