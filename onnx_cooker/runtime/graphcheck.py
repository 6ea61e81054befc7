"""The checks a blob's graph passes before onnxruntime takes its weights from the blob header (the
shared- and external-initializer paths), proven from the main graph's initializers alone where the
bytes allow it, by a walk of every node (``onnxrefs``' walk and ``_walk_header_tensors``) where
they do not.

Why the main graph's initializers can be enough. A tensor anywhere in a model (a subgraph's
initializer, a ``Constant``'s value, a sparse tensor, a function's) is a TensorProto, and its name
is a length-delimited field 8 whose bytes lie verbatim in the model: the key 66, as a varint in any
encoding protobuf accepts (its first byte holds the lowest seven bits: 0x42, or 0xc2 when padded;
protobuf keeps a key's low 32 bits, ``protowire``), then the length, then the name. So every place
that could define a weight's name is found by looking at each 0x42 and 0xc2 byte, decoding what
follows and comparing it with the header's names, at C speed between hits. When the only such
places are the main graph's own initializers, no other definition exists. ``Constant`` outputs are
read by a walk of only the messages holding the bytes "Constant" (an op type is stored verbatim).
What the scan finds beside them (a look-alike inside other bytes, a real redefinition) sends the
check to the full walk, which decides. In the same way a graph whose every "location" lies inside
a main-graph initializer has no other external-data reference (``onnxrefs.external_refs``).

Measured (a PP-OCRv6 detector, 93 kB graph, 78 weights, 1.9 MB blob): the reference check and the
header walk took 1.2 + 2.2 ms of a 22 ms load in onnxruntime 1.24.4 (the file: 17 ms); these take
1.6-1.8 ms (docs/design.md, "The header-weight check without the node walk").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from .errors import CorruptBlobError
from .onnxrefs import (
    CHILDREN,
    GRAPH,
    MAX_DEPTH,
    MODEL,
    NODE,
    TENSOR,
    ExternalRef,
    check_references,
    check_refs,
    read_tensor,
)
from .protowire import all_inside as _all_inside
from .protowire import fields as _fields
from .protowire import holds as _holds
from .protowire import int32_value as _int32
from .protowire import occurrences as _occurrences
from .protowire import read_varint as _varint
from .protowire import string as _string
from .sections import TensorRef

_TENSOR_NAME = 8
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
_NODE_OUTPUT, _NODE_OP_TYPE = 2, 4
_NAME_KEY = _TENSOR_NAME << 3 | 2  # 66: 0x42, or 0xc2 when its varint is padded
_NAME_LEADS = (bytes((_NAME_KEY,)), bytes((_NAME_KEY | 0x80,)))


class _Initializer(NamedTuple):
    """One initializer of the main graph, read once for both checks."""

    name: str
    name_at: tuple[int, ...]  # where each of its name fields' bytes start
    elem_type: int
    dims: tuple[int, ...]
    span: tuple[int, int]
    ref: ExternalRef | None  # its external-data reference, as onnxrefs.external_refs finds it


def check_weight_graph(model: bytes | memoryview, file: str, tensors: Sequence[TensorRef]) -> None:
    """``onnxrefs.check_references`` and ``check_header_tensors`` for a graph whose weights come
    from the header's ``tensors`` in ``file``: the same verdicts and messages, the main graph's
    initializers read once (only those holding a "location" or a weight's name: no other can hold a
    reference or define a weight)."""
    flat = model if isinstance(model, bytes) else bytes(model)
    where = {t.name: (t.offset, t.nbytes) for t in tensors}
    hits = _occurrences(flat, b"location")
    layout = _layout(flat)
    named = _fields_holding(flat, _NAME_KEY, {name.encode("utf-8") for name in where}, layout.opaque)
    inits = layout.initializers_holding(flat, sorted([*hits, *named]), references=True)
    if _all_inside(hits, len(b"location"), [init.span for init in inits]):  # in byte order
        # as external_refs reads them: the initializers holding a "location"
        held = [init.ref for init in inits if init.ref is not None and _holds(hits, *init.span)]
        check_refs(held, file, where)
    else:  # a "location" elsewhere: the full walk refuses it or finds it harmless
        check_references(flat, file, where)
    check_header_tensors(flat, tensors, inits, named)


def check_header_tensors(
    model: bytes | memoryview,
    tensors: Sequence[TensorRef],
    inits: Sequence[_Initializer] | None = None,
    named: set[int] | None = None,
) -> None:
    """Refuse a graph that disagrees with the tensors a load path makes from the blob header
    (shared or external initializers: onnxruntime takes their type and shape from the header, and
    replaces every initializer of that name, subgraphs' too): each listed tensor must be exactly one
    initializer of the main graph, of the header's data type and dims, and no other initializer,
    sparse initializer or ``Constant`` output anywhere in the model may have its name. ``inits``
    (at least every main-graph initializer holding one of the ``named`` positions: ``_fields_holding``
    of the listed names) saves reading them again."""
    wanted = {t.name: t for t in tensors}
    if not wanted:
        return
    flat = model if isinstance(model, bytes) else bytes(model)
    if named is None or inits is None:
        layout = _layout(flat)
        named = _fields_holding(flat, _NAME_KEY, {name.encode("utf-8") for name in wanted}, layout.opaque)
        inits = layout.initializers_holding(flat, sorted(named))
    if _defined_once(flat, wanted, inits, named):
        main = {init.name: (init.elem_type, init.dims) for init in inits if init.name in wanted}
        _compare(wanted, main, set())
    else:
        _walk_header_tensors(flat, wanted)


def _defined_once(
    flat: bytes, wanted: Mapping[str, TensorRef], inits: Sequence[_Initializer], named: set[int]
) -> bool:
    """Whether the scan proves that no tensor or ``Constant`` output outside the main graph's
    initializers has a wanted name, and no wanted name is two of them (False: it cannot tell).
    ``inits`` must hold every main-graph initializer with a name field among ``named`` (where the
    name fields holding a wanted name start, ``_fields_holding``)."""
    own: set[int] = set()
    seen: set[str] = set()
    for init in inits:
        if init.name in wanted and (init.name in seen or len(init.name_at) != 1):
            return False
        seen.add(init.name)
        own.update(init.name_at)
    if not named <= own:
        return False
    return b"Constant" not in flat or not _constant_outputs(flat) & wanted.keys()


def _constant_outputs(flat: bytes) -> set[str]:
    """The outputs of every ``Constant`` node in the model. A node whose op_type is "Constant" holds
    those bytes, and so does every message around it: the walk reads only those (as
    ``onnxrefs.external_refs`` reads only the messages holding a "location")."""
    data = memoryview(flat)
    hits = _occurrences(flat, b"Constant")
    outputs: set[str] = set()

    def walk(kind: int, start: int, end: int, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise CorruptBlobError(f"blob graph nests subgraphs over {MAX_DEPTH} deep")
        if kind == NODE:
            fields = [(n, a, b) for n, w, a, b in _fields(data, start, end) if w == 2]
            if any(n == _NODE_OP_TYPE and data[a:b] == b"Constant" for n, a, b in fields):
                outputs.update(_string(data, a, b) for n, a, b in fields if n == _NODE_OUTPUT)
        for number, wire, a, b in _fields(data, start, end):
            child = CHILDREN[kind].get(number)
            if child is None or child == TENSOR or wire != 2:
                continue
            if _holds(hits, a, b):
                walk(child, a, b, depth + 1)

    walk(MODEL, 0, len(data), 0)
    return outputs


def _fields_holding(
    flat: bytes, key: int, names: set[bytes], opaque: Sequence[tuple[int, int]] = ()
) -> set[int]:
    """Where the bytes of every length-delimited field ``key`` (its varint in any encoding) holding
    one of ``names`` start: each byte that can begin the key's varint is decoded as one, except in
    the sorted ``opaque`` spans (tensor data, ``_layout``), where protobuf never starts a field."""
    found: set[int] = set()
    size = len(flat)
    gaps, start = [], 0
    for a, b in opaque:
        gaps.append((start, a))
        start = b
    gaps.append((start, size))
    for lead in (key, key | 0x80):
        for gap_start, gap_end in gaps:
            at = flat.find(lead, gap_start, gap_end)
            while at >= 0:
                pos = _after_key(flat, at, key, size)
                if pos >= 0:
                    length = flat[pos] if pos < size else 0x80
                    if length < 0x80:  # the usual one-byte length, without a call
                        pos += 1
                    else:
                        length, pos = _varint_or_none(flat, pos, size)
                    if pos >= 0 and flat[pos : pos + length] in names:
                        found.add(pos)
                at = flat.find(lead, at + 1, gap_end)
    return found


# TensorProto's data fields (float_data, int32_data, string_data, int64_data, raw_data, double_data,
# uint64_data): packed numbers or bytes, which protobuf never reads as fields
_TENSOR_DATA = frozenset({4, 5, 6, 7, 9, 10, 11})
# A message smaller than this is scanned whole, and so is one other than a tensor holding fewer than
# one of the name key's two lead bytes in 256 (random data: one in 128): reading its fields (about
# 1 us each, a node's a few hundred bytes) would cost more than the false starts it could spare
# (about 1.5 us each).
_OPAQUE_MIN = 4 << 10
_LEADS_SHIFT = 8


class _Layout(NamedTuple):
    """What one walk of the model's tree finds: every main-graph initializer's span, and the
    sorted, disjoint spans of tensor data in messages of ``_OPAQUE_MIN`` bytes or more."""

    initializers: list[tuple[int, int]]
    opaque: list[tuple[int, int]]

    def initializers_holding(
        self, data: bytes | memoryview, only: Sequence[int], references: bool = False
    ) -> list[_Initializer]:
        """The main-graph initializers whose bytes hold one of the sorted positions ``only``, read
        (the rest are skipped unread: a load reads only its weights' initializers)."""
        return [_initializer(data, a, b, references) for a, b in self.initializers if _holds(only, a, b)]


def _layout(flat: bytes) -> _Layout:
    """The main graph's initializers (each ModelProto.graph field: protobuf merges them) and the
    tensor data a name scan may skip, in one walk that enters only the messages below the main
    graph's level worth it: tensors of ``_OPAQUE_MIN`` bytes or more, other messages that size
    dense with the name key's lead bytes (``_LEADS_SHIFT``). A graph's inline weights can be most
    of its bytes, and a key-byte scan of them decodes a false start every hundred bytes or so
    (PP-OCRv6's detector with its weights under 256 KiB left inline: 260 ms a load, 6 ms skipping
    them). Sound: a field holding a tensor's data is one value, read whole; no field of the model
    starts inside it. A malformed tree raises ``CorruptBlobError``."""
    data = memoryview(flat)
    initializers: list[tuple[int, int]] = []
    opaque: list[tuple[int, int]] = []

    def walk(kind: int, start: int, end: int, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise CorruptBlobError(f"blob graph nests subgraphs over {MAX_DEPTH} deep")
        main = kind == GRAPH and depth == 1
        children = CHILDREN.get(kind, {})
        for number, wire, a, b in _fields(data, start, end):
            if wire != 2:
                continue
            if main and number == 5:  # the main graph's initializers
                initializers.append((a, b))
            if b - a < _OPAQUE_MIN:
                continue  # most fields: a node, a small tensor
            if kind == TENSOR:
                if number in _TENSOR_DATA:
                    opaque.append((a, b))
            elif (child := children.get(number)) is not None and worth_entering(a, b, child):
                walk(child, a, b, depth + 1)

    def worth_entering(a: int, b: int, child: int) -> bool:
        # a tensor's few fields cost less than a scan of its data (its size: _OPAQUE_MIN or more);
        # another message's density of lead bytes is judged on its first _OPAQUE_MIN bytes (a count
        # of all of them would cost more than the scan it decides on)
        if child == TENSOR:
            return True
        sample = min(b, a + _OPAQUE_MIN)
        return (
            flat.count(_NAME_LEADS[0], a, sample) + flat.count(_NAME_LEADS[1], a, sample)
            >= (sample - a) >> _LEADS_SHIFT
        )

    for number, wire, a, b in _fields(data, 0, len(data)):
        if number == 7 and wire == 2:
            walk(GRAPH, a, b, 1)
        elif (
            wire == 2
            and b - a >= _OPAQUE_MIN
            and (child := CHILDREN[MODEL].get(number)) is not None
            and worth_entering(a, b, child)
        ):
            walk(child, a, b, 1)
    return _Layout(initializers, sorted(opaque))


def _after_key(flat: bytes, at: int, key: int, size: int) -> int:
    """Where the value starts if a varint whose low 32 bits are ``key`` (< 128: a key, as protobuf
    reads it) starts at ``at``, else -1."""
    if flat[at] == key:
        return at + 1
    value, pos = _varint_or_none(flat, at, size)
    return pos if value >= 0 and _int32(value) == key else -1  # a key: its low 32 bits (protowire)


def _varint_or_none(flat: bytes, pos: int, size: int) -> tuple[int, int]:
    """``protowire.read_varint``, or (-1, -1) where no varint ends within ten bytes (no field here)."""
    try:
        return _varint(flat, pos, size)
    except CorruptBlobError:
        return -1, -1


def _initializer(data: bytes | memoryview, start: int, end: int, references: bool) -> _Initializer:
    """A TensorProto (a main-graph initializer, or any for the walk); its external-data entries read
    only for ``references``."""
    tensor = read_tensor(data, start, end, dims=True, entries=references)
    entries = tensor.entries
    ref = ExternalRef(tensor.name, entries, True) if tensor.location == _EXTERNAL or entries else None
    return _Initializer(
        tensor.name, tensor.name_at, tensor.elem_type, _signed(tensor.dims), (start, end), ref
    )


def _signed(dims: tuple[int, ...]) -> tuple[int, ...]:
    if all(d < 1 << 63 for d in dims):
        return dims
    return tuple(d - (1 << 64) if d >= 1 << 63 else d for d in dims)


def _compare(
    wanted: Mapping[str, TensorRef], main: Mapping[str, tuple[int, tuple[int, ...]]], elsewhere: set[str]
) -> None:
    for name, ref in wanted.items():
        what = f"blob graph tensor {name!r}"
        if name in elsewhere:
            raise CorruptBlobError(
                f"{what} is defined again outside the main graph's initializers (a subgraph, a sparse "
                "or Constant tensor, or a second initializer) while the blob header lists it as a "
                "weight: refused (re-cook the model)"
            )
        if name not in main:
            raise CorruptBlobError(f"{what} is listed in the blob header but is no initializer of the graph")
        if main[name] != (ref.elem_type, tuple(ref.dims)):
            raise CorruptBlobError(
                f"{what} is data type {main[name][0]} with dims {list(main[name][1])} in the graph, but "
                f"{ref.elem_type} with dims {list(ref.dims)} in the blob header: refused (re-cook the model)"
            )


def _walk_header_tensors(flat: bytes, wanted: Mapping[str, TensorRef]) -> None:
    """``check_header_tensors`` by a walk of every node, subgraph and function of the model."""
    data = memoryview(flat)
    main: dict[str, tuple[int, tuple[int, ...]]] = {}
    elsewhere: set[str] = set()
    constants = b"Constant" in flat  # most cooked graphs have none: skip reading node fields then

    def walk(kind: int, start: int, end: int, depth: int, main_graph: bool) -> None:
        if depth > MAX_DEPTH:
            raise CorruptBlobError(f"blob graph nests subgraphs over {MAX_DEPTH} deep")
        if kind == NODE and constants:
            fields = [(n, w, a, b) for n, w, a, b in _fields(data, start, end) if w == 2]
            if any(n == _NODE_OP_TYPE and _string(data, a, b) == "Constant" for n, _, a, b in fields):
                elsewhere.update(_string(data, a, b) for n, _, a, b in fields if n == _NODE_OUTPUT)
        for number, wire, a, b in _fields(data, start, end):
            child = CHILDREN[kind].get(number)
            if child is None or wire != 2:
                continue
            if child != TENSOR:
                walk(child, a, b, depth + 1, main_graph=kind == MODEL and number == 7)
                continue
            tensor = _initializer(data, a, b, references=False)
            if tensor.name not in wanted:
                continue
            if main_graph and kind == GRAPH and number == 5 and tensor.name not in main:
                main[tensor.name] = (tensor.elem_type, tensor.dims)
            else:
                elsewhere.add(tensor.name)

    walk(MODEL, 0, len(data), 0, main_graph=False)
    _compare(wanted, main, elsewhere)
