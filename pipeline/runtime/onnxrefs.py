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

from .errors import CorruptBlobError
from .protowire import all_inside as _all_inside
from .protowire import fields as _fields
from .protowire import holds as _holds
from .protowire import int32_value as _int32
from .protowire import occurrences as _occurrences
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
_TENSOR_NAME, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 8, 13, 14
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


def _tensor(data: memoryview, start: int, end: int, initializer: bool) -> ExternalRef | None:
    name, entries, location = "", [], 0
    for number, wire, a, b in _fields(data, start, end):
        if number == _TENSOR_NAME and wire == 2:
            name = _string(data, a, b)
        elif number == _TENSOR_DATA_LOCATION and wire == 0:
            location = _int32(a)
        elif number == _TENSOR_EXTERNAL_DATA and wire == 2:
            pair = {1: "", 2: ""}
            for field, kind, c, d in _fields(data, a, b):
                if field in pair and kind == 2:
                    pair[field] = _string(data, c, d)
            entries.append((pair[1], pair[2]))
    if location != _EXTERNAL and not entries:
        return None
    return ExternalRef(name, tuple(entries), initializer)


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
        what = f"blob graph tensor {ref.name!r}"
        keys = [key for key, _ in ref.entries]
        if file is None:
            raise CorruptBlobError(f"{what} refers to external data, but the blob has no weights section")
        if not ref.initializer:
            raise CorruptBlobError(
                f"{what} refers to external data outside the main graph's initializers; the loader "
                "supplies only those"
            )
        if len(keys) != len(set(keys)) or not set(keys) <= ALLOWED_KEYS:
            raise CorruptBlobError(f"{what} has external-data entries the loader does not allow ({keys})")
        if ref.get("location") != file:
            raise CorruptBlobError(
                f"{what} refers to {ref.get('location')!r}, not the blob's own weights ({file!r}): refused "
                "before onnxruntime could open it"
            )
        if ref.name not in tensors or ref.name in seen:
            raise CorruptBlobError(f"{what} is not one of the blob's weights, or is named twice")
        offset, nbytes = tensors[ref.name]
        offset_ok = ref.get("offset") == str(offset) or (offset == 0 and ref.get("offset") is None)
        if not offset_ok or ref.get("length") not in (str(nbytes), None):
            raise CorruptBlobError(f"{what}: its offset or length differs from the blob header's")
        seen.add(ref.name)


def _key(number: int, wire: int) -> bytes:
    return _varint_bytes(number << 3 | wire)


def _varint_bytes(value: int) -> bytes:
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
    return _key(number, 2) + _varint_bytes(len(payload)) + payload


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

    def entry(a: int, b: int, length: int | None) -> tuple[str, str, bytes | None]:
        """An external-data entry's key and value, and the entry rewritten (None: it stays)."""
        key, value = "", ""
        for number, wire, c, d in _fields(data, a, b):  # repeated fields: the last one counts
            if number == 1 and wire == 2:
                key = _string(data, c, d)
            elif number == 2 and wire == 2:
                value = _string(data, c, d)
        if key == "location":
            new = target
        elif key == "offset" and shift:
            new = str(int(value) + shift).encode("ascii") if value.isdecimal() else value.encode()
        elif key == "length" and length is not None:
            new = str(length).encode("ascii")
        else:
            return key, value, None
        return key, value, _length_delimited(1, key.encode("utf-8")) + _length_delimited(2, new)

    def tensor(a: int, b: int) -> bytes:
        fields = list(_fields(data, a, b))
        names = [_string(data, c, d) for n, w, c, d in fields if n == _TENSOR_NAME and w == 2]
        length = lengths.get(names[-1]) if lengths is not None and names else None
        keys, entries, parts, run, start, where = [], [], [], a, a, 0
        for n, w, c, d in fields:
            if n == _TENSOR_EXTERNAL_DATA and w == 2:
                key, value, new = entry(c, d, length)
                keys.append(key)
                entries.append((key, value))
                if new is not None:
                    parts += [data[run:start], _length_delimited(n, new)]
                    run = d
            elif n == _TENSOR_DATA_LOCATION and w == 0:
                where = _int32(c)
            start = d
        if seen is not None:  # what external_refs would find here (check_and_rewrite)
            seen[1].append((a, b))
            if where == _EXTERNAL or entries:
                seen[0].append(ExternalRef(names[-1] if names else "", tuple(entries), initializer=True))
        parts.append(data[run:b])
        if shift and keys and "offset" not in keys:  # no offset means 0: it becomes the shift
            parts.append(_length_delimited(_TENSOR_EXTERNAL_DATA, _entry(b"offset", shift)))
        if length is not None and keys and "length" not in keys:
            parts.append(_length_delimited(_TENSOR_EXTERNAL_DATA, _entry(b"length", length)))
        return b"".join(parts)

    def edited(a: int, b: int, number: int, edit: Callable[[int, int], bytes]) -> bytes:
        """The message ``data[a:b]`` with each length-delimited field ``number`` holding "location"
        replaced by ``edit`` of it and every other field copied verbatim, in runs (a field whose
        bytes hold no "location" holds no reference: ``external_refs``)."""
        parts, run, start = [], a, a
        for n, w, c, d in _fields(data, a, b):
            if n == number and w == 2 and _holds(hits, c, d):
                parts += [data[run:start], _length_delimited(n, edit(c, d))]
                run = d
            start = d
        parts.append(data[run:b])
        return b"".join(parts)

    def graph(a: int, b: int) -> bytes:
        return edited(a, b, 5, tensor)

    return edited(0, len(data), 7, graph)
