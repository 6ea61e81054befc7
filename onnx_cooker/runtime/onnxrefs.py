"""The external-data references of an ONNX model file, found and rewritten without the onnx package.

An ONNX tensor may say that its bytes live in another file (``data_location: EXTERNAL`` with a
``location`` entry, and ``offset``/``length``); onnxruntime opens that file relative to the model's
folder. A blob's graph handed to onnxruntime may only refer to the weights the loader itself
supplies: ``check_references`` refuses any other reference (``/dev/zero``, ``../../etc/passwd``, a
tensor in a subgraph or a function, a second name for the same tensor) with a ``CorruptBlobError``
before onnxruntime sees the bytes, and ``rewrite_locations`` points the allowed ones where a
loading mechanism needs them (``session.py``).

This reads the protobuf wire format directly (onnx.proto's field numbers below): the loader ships
without the onnx package, and a graph whose weights are external is small.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .errors import CorruptBlobError
from .protowire import all_inside as _all_inside
from .protowire import fields as _fields
from .protowire import holds as _holds
from .protowire import occurrences as _occurrences
from .protowire import past_group as _past_group
from .protowire import read_varint as _varint
from .protowire import string as _string

# onnx.proto: message -> {field number: message kind} for the fields that can hold tensors.
MODEL, GRAPH, NODE, ATTRIBUTE, FUNCTION, TRAINING, SPARSE, TENSOR = range(8)
CHILDREN: dict[int, dict[int, int]] = {
    MODEL: {7: GRAPH, 20: TRAINING, 25: FUNCTION},  # graph, training_info, functions
    TRAINING: {1: GRAPH, 2: GRAPH},  # initialization, algorithm
    GRAPH: {1: NODE, 5: TENSOR, 15: SPARSE},  # node, initializer, sparse_initializer
    NODE: {5: ATTRIBUTE},
    ATTRIBUTE: {5: TENSOR, 6: GRAPH, 10: TENSOR, 11: GRAPH, 22: SPARSE, 23: SPARSE},
    FUNCTION: {7: NODE, 11: ATTRIBUTE},  # node, attribute_proto (defaults)
    SPARSE: {1: TENSOR, 2: TENSOR},  # values, indices
}
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME = 1, 2, 8
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
MAX_DEPTH = 64  # nested subgraphs; real models nest a few levels
ALLOWED_KEYS = frozenset({"location", "offset", "length", "checksum"})


@dataclass(frozen=True)
class ExternalRef:
    """One tensor whose data the graph places in a file: its name, entries and where it sits."""

    name: str
    entries: tuple[tuple[str, str], ...]
    initializer: bool  # an initializer of the main graph (the only place the loader supplies)

    def get(self, key: str) -> str | None:
        return dict(self.entries).get(key)


class TensorFields(NamedTuple):
    """What the checks read of one TensorProto, as protobuf reads it: of a field given twice, the
    last counts (the name, the type, the location); each name field's start is kept."""

    name: str
    name_at: tuple[int, ...]  # where the bytes of each of its name fields start
    elem_type: int
    dims: tuple[int, ...]  # each the low 64 bits of its varint, unsigned (read only when asked)
    location: int  # data_location
    entries: tuple[tuple[str, str], ...]  # external_data (key, value) pairs, in order


_LOW_32, _LOW_64 = (1 << 32) - 1, (1 << 64) - 1
_PAST = "blob graph is not a valid ONNX model (a field runs past its message)"


def read_tensor(
    data: bytes | memoryview,
    start: int,
    end: int,
    *,
    dims: bool = False,
    entries: bool = True,
    entry_spans: list[tuple[int, int]] | None = None,
) -> TensorFields:
    """The TensorProto in ``data[start:end]``: ``protowire.fields``' walk and rules (and errors) in one
    loop, for the fields the checks need (a load reads every weight's: about twice as fast as the
    walk). ``dims`` reads the dims too (a malformed packed dims field is then refused); ``entries``
    the external-data entries, and ``entry_spans`` receives where each of their fields starts and
    ends (key included)."""
    name, name_at, elem_type, shape, location, pairs = "", [], 0, [], 0, []
    pos = start
    while pos < end:
        field = pos
        key = data[pos]  # one-byte varints (most keys and short lengths) without a call
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(data, pos, end)
            key &= _LOW_32
        wire, number = key & 7, key >> 3
        if wire == 2:
            size = data[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = _varint(data, pos, end)
            a, pos = pos, pos + size
            if pos > end:
                raise CorruptBlobError(_PAST)
            if number == _TENSOR_NAME:
                name = _string(data, a, pos)
                name_at.append(a)
            elif number == _TENSOR_EXTERNAL_DATA and entries:
                pairs.append(read_entry(data, a, pos))
                if entry_spans is not None:
                    entry_spans.append((field, pos))
            elif number == _TENSOR_DIMS and dims:  # packed
                at = a
                while at < pos:
                    value, at = _varint(data, at, pos)
                    shape.append(value & _LOW_64)
        elif wire == 0:
            value = data[pos] if pos < end else 0x80
            if value < 0x80:
                pos += 1
            else:
                value, pos = _varint(data, pos, end)
                value &= _LOW_64
            if number == _TENSOR_DATA_TYPE:
                elem_type = value & _LOW_32
            elif number == _TENSOR_DATA_LOCATION:
                location = value & _LOW_32
            elif number == _TENSOR_DIMS and dims:
                shape.append(value)
        elif wire == 1 or wire == 5:
            pos += 8 if wire == 1 else 4
            if pos > end:
                raise CorruptBlobError(_PAST)
        elif wire == 3:  # an unknown group, skipped as protobuf skips it
            pos = _past_group(data, pos, end, number)
        else:
            raise CorruptBlobError(f"blob graph is not a valid ONNX model (wire type {wire})")
    return TensorFields(name, tuple(name_at), elem_type, tuple(shape), location, tuple(pairs))


def read_entry(data: bytes | memoryview, a: int, b: int) -> tuple[str, str]:
    """An external-data entry's key and value (repeated fields: the last one counts)."""
    if b - a >= 4 and data[a] == 0x0A and data[a + 1] < 0x80:  # as writers lay it out: key, value,
        middle = a + 2 + data[a + 1]  # each with a one-byte length, the two filling the entry
        if (
            middle + 2 <= b
            and data[middle] == 0x12
            and data[middle + 1] < 0x80
            and middle + 2 + data[middle + 1] == b
        ):
            return _string(data, a + 2, middle), _string(data, middle + 2, b)
    pair = {1: "", 2: ""}
    for field, kind, c, d in _fields(data, a, b):
        if field in pair and kind == 2:
            pair[field] = _string(data, c, d)
    return pair[1], pair[2]


def _tensor(data: memoryview, start: int, end: int, initializer: bool) -> ExternalRef | None:
    tensor = read_tensor(data, start, end)
    if tensor.location != _EXTERNAL and not tensor.entries:
        return None
    return ExternalRef(tensor.name, tensor.entries, initializer)


def external_refs(model: bytes | memoryview) -> list[ExternalRef]:
    """Every tensor anywhere in the model (graphs, subgraphs, functions, sparse tensors) that has
    external-data entries or an EXTERNAL data location; none where no "location" key can exist."""
    flat = model if isinstance(model, bytes) else bytes(model)
    data = memoryview(flat)
    if b"location" not in flat:
        # No reference can name a file (or onnxruntime's in-memory address tag): a "location" key is
        # stored verbatim, and a tensor marked EXTERNAL without one is refused by onnxruntime itself
        # ("model format error! Missing 'location'", ExternalDataInfo::Create; in 1.24.4, 1.28.0 and
        # 1.32.0). The common case of a graph-only blob, at C speed: the walk took 0.1-0.6 ms.
        return []
    # For the same reason a message whose bytes hold no "location" holds no reference: the walk
    # reads only the messages around one (large_graph, 300 external weights: 16.5 ms -> 4.8 ms).
    hits = _occurrences(flat, b"location")
    found: list[ExternalRef] = []

    def walk(kind: int, start: int, end: int, depth: int, main: bool) -> None:
        if depth > MAX_DEPTH:
            raise CorruptBlobError(f"blob graph nests subgraphs over {MAX_DEPTH} deep")
        children = CHILDREN[kind]
        for number, wire, a, b in _fields(data, start, end):
            child = children.get(number)
            if child is None or wire != 2:
                continue
            if not _holds(hits, a, b):
                continue
            if child == TENSOR:
                ref = _tensor(data, a, b, initializer=main and kind == GRAPH and number == 5)
                if ref is not None:
                    found.append(ref)
            else:
                walk(child, a, b, depth + 1, main=kind == MODEL and number == 7)

    walk(MODEL, 0, len(data), 0, main=False)
    return found


def check_references(
    model: bytes | memoryview, file: str | None, tensors: Mapping[str, tuple[int, int]]
) -> None:
    """Refuse a graph with any external-data reference the loader does not supply.

    Allowed: an initializer of the main graph, listed in ``tensors`` (name -> (offset, bytes) in the
    weights section) with exactly that offset and length, in ``file`` (the weights section's name),
    each named once. ``file`` None: the blob has no weights, so no reference at all is allowed.
    """
    check_refs(external_refs(model), file, tensors)


def check_refs(refs: Sequence[ExternalRef], file: str | None, tensors: Mapping[str, tuple[int, int]]) -> None:
    seen: set[str] = set()
    for ref in refs:
        keys = [key for key, _ in ref.entries]
        if file is None:
            raise CorruptBlobError(
                f"{_what(ref)} refers to external data, but the blob has no weights section"
            )
        if not ref.initializer:
            raise CorruptBlobError(
                f"{_what(ref)} refers to external data outside the main graph's initializers; the loader "
                "supplies only those"
            )
        entries = dict(ref.entries)
        if len(keys) != len(entries) or not entries.keys() <= ALLOWED_KEYS:
            raise CorruptBlobError(
                f"{_what(ref)} has external-data entries the loader does not allow ({keys})"
            )
        if entries.get("location") != file:
            raise CorruptBlobError(
                f"{_what(ref)} refers to {entries.get('location')!r}, not the blob's own weights ({file!r}): "
                "refused before onnxruntime could open it"
            )
        if ref.name not in tensors or ref.name in seen:
            raise CorruptBlobError(f"{_what(ref)} is not one of the blob's weights, or is named twice")
        offset, nbytes = tensors[ref.name]
        given = entries.get("offset")
        offset_ok = given == str(offset) or (offset == 0 and given is None)
        if not offset_ok or entries.get("length") not in (str(nbytes), None):
            raise CorruptBlobError(f"{_what(ref)}: its offset or length differs from the blob header's")
        seen.add(ref.name)


def _what(ref: ExternalRef) -> str:
    return f"blob graph tensor {ref.name!r}"


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def _varint_bytes(value: int) -> bytes:
    if value < 0x80:  # keys and the lengths of most entries: without a loop
        return _ONE_BYTE[value]
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _entry(key: bytes, value: int) -> bytes:
    """A StringStringEntryProto ``key`` = ``value``."""
    return _length_delimited(1, key) + _length_delimited(2, str(value).encode("ascii"))


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload


def check_and_rewrite(
    model: bytes,
    file: str,
    tensors: Mapping[str, tuple[int, int]],
    location: str,
    shift: int = 0,
    lengths: Mapping[str, int] | None = None,
) -> bytes:
    """``check_references`` then ``rewrite_locations``, in one walk where that proves as much: the
    rewrite reads every main-graph initializer whose bytes hold "location". When every "location"
    in the model lies inside one of those, no other message can hold a reference (``external_refs``),
    and theirs are checked as ``check_references`` checks them; else the full check runs first."""
    seen: list[ExternalRef] = []
    spans: list[tuple[int, int]] = []
    hits = _occurrences(model, b"location")
    rewritten = _rewrite(model, hits, location, shift, lengths, (seen, spans))
    if not _all_inside(hits, len(b"location"), spans):
        check_references(model, file, tensors)  # refuses, or finds the other hits harmless
        return rewritten
    check_refs(seen, file, tensors)
    return rewritten


def rewrite_locations(
    model: bytes | memoryview,
    location: str,
    shift: int = 0,
    lengths: Mapping[str, int] | None = None,
) -> bytes:
    """The model with the ``location`` of every main-graph initializer's external data replaced by
    ``location`` and its ``offset`` moved by ``shift`` bytes; with ``lengths`` (name -> bytes, the
    blob header's) each reference's ``length`` set too, so that onnxruntime reads exactly the
    header's extent and refuses dims that do not fit it. Call after ``check_references``: other
    references are not rewritten."""
    flat = model if isinstance(model, bytes) else bytes(model)
    return _rewrite(flat, _occurrences(flat, b"location"), location, shift, lengths, None)


def _rewrite(
    model: bytes,
    hits: list[int],
    location: str,
    shift: int,
    lengths: Mapping[str, int] | None,
    seen: tuple[list[ExternalRef], list[tuple[int, int]]] | None,
) -> bytes:
    """``rewrite_locations`` given where "location" occurs; ``seen``, if given, receives each rewritten
    initializer's span and the reference ``external_refs`` would find in it."""
    data = memoryview(model)
    target = location.encode("utf-8")

    def entry(key: str, value: str, length: int | None) -> bytes | None:
        """An external-data entry rewritten (None: it stays)."""
        if key == "location":
            new = target
        elif key == "offset" and shift:
            new = str(int(value) + shift).encode("ascii") if value.isdecimal() else value.encode()
        elif key == "length" and length is not None:
            new = str(length).encode("ascii")
        else:
            return None
        return _length_delimited(1, key.encode("utf-8")) + _length_delimited(2, new)

    def tensor(a: int, b: int) -> list[bytes | memoryview]:
        spans: list[tuple[int, int]] = []
        read = read_tensor(data, a, b, entry_spans=spans)
        length = lengths.get(read.name) if lengths is not None and read.name_at else None
        parts, run = [], a
        for (key, value), (start, end) in zip(read.entries, spans, strict=True):
            new = entry(key, value, length)
            if new is not None:
                parts += [data[run:start], _length_delimited(_TENSOR_EXTERNAL_DATA, new)]
                run = end
        if seen is not None:  # what external_refs would find here (check_and_rewrite)
            seen[1].append((a, b))
            if read.location == _EXTERNAL or read.entries:
                seen[0].append(ExternalRef(read.name, read.entries, initializer=True))
        parts.append(data[run:b])
        keys = [key for key, _ in read.entries]
        if shift and keys and "offset" not in keys:  # no offset means 0: it becomes the shift
            parts.append(_length_delimited(_TENSOR_EXTERNAL_DATA, _entry(b"offset", shift)))
        if length is not None and keys and "length" not in keys:
            parts.append(_length_delimited(_TENSOR_EXTERNAL_DATA, _entry(b"length", length)))
        return parts

    def edited(
        a: int, b: int, number: int, edit: Callable[[int, int], list[bytes | memoryview]]
    ) -> list[bytes | memoryview]:
        """The message ``data[a:b]`` with each length-delimited field ``number`` holding "location"
        replaced by ``edit`` of it and every other field copied verbatim, in runs (a field whose
        bytes hold no "location" holds no reference: ``external_refs``): as parts, joined once at
        the end (a big graph is copied once, not once per level)."""
        parts, run, start = [], a, a
        for n, w, c, d in _fields(data, a, b):
            if n == number and w == 2 and _holds(hits, c, d):
                inner = edit(c, d)
                size = sum(map(len, inner))
                parts += [data[run:start], _varint_bytes(n << 3 | 2), _varint_bytes(size), *inner]
                run = d
            start = d
        parts.append(data[run:b])
        return parts

    def graph(a: int, b: int) -> list[bytes | memoryview]:
        return edited(a, b, 5, tensor)

    return b"".join(edited(0, len(data), 7, graph))
