"""Where an ORT-format model's weights lie inside its flatbuffer, read without the flatbuffers package
(the loader stays light): the main graph's initializers that ``ort-shared-initializers`` can hand
onnxruntime in place, as views of the caller's buffer.

Only what that path needs is read (onnxruntime's schema, ``onnxruntime/core/flatbuffers/schema/
ort.fbs``; field ids are declaration order, a union takes two): InferenceSession.model (1) ->
Model.graph (7) -> Graph.initializers (0), nodes (2), sparse_initializers (7); Node.attributes (10);
Attribute.type (2), t (6), g (7), tensors (11), graphs (12); Tensor.name (0), dims (2), data_type
(3), raw_data (4); SparseTensor.values (0), indices (1). A weight is a ``sections.TensorRef`` whose
offset is into the flatbuffer (``blob.tensor_view`` over ``[(0, model)]`` views it).

The bytes may be hostile: every read is bounds-checked, the walk is bounded in depth and count, and
anything unexpected gives no weights at all (the model then goes to onnxruntime whole, whose own
verifier judges it). A weight is offered only if its name (up to a NUL, as onnxruntime reads it) is
a tensor once in the whole model (onnxruntime applies a shared initializer to every graph holding
that name, subgraphs included) and no other tensor's raw bytes overlap its own.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import onnxruntime

from .blob import tensor_view
from .files import held, memfd_unit, memfd_without
from .sections import TENSOR_DTYPES, TensorRef

# Smaller weights are copied with the graph: an OrtValue and add_initializer cost about 20 us, the
# copy of 64 KiB into a memfd about as much (measured, 2 GB/s).
MIN_SHARED_WEIGHT = 64 << 10
_MAX_DEPTH = 32  # nested subgraphs
_MAX_ITEMS = 1 << 22  # tables visited: a flatbuffer's vectors cannot make the walk unbounded
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS = 5, 10


class _Malformed(Exception):
    pass


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.size = len(data)
        self.items = 0

    def u32(self, at: int) -> int:
        if at < 0 or at + 4 > self.size:
            raise _Malformed
        return _U32.unpack_from(self.data, at)[0]

    def field(self, table: int, index: int) -> int:
        """Where field ``index`` of the table at ``table`` lies, 0 if absent."""
        if table < 0 or table + 4 > self.size:
            raise _Malformed
        vtable = table - _I32.unpack_from(self.data, table)[0]
        if vtable < 0 or vtable + 4 > self.size:
            raise _Malformed
        vtable_size = _U16.unpack_from(self.data, vtable)[0]
        if vtable + vtable_size > self.size:
            raise _Malformed
        slot = 4 + 2 * index
        if slot + 2 > vtable_size:
            return 0
        offset = _U16.unpack_from(self.data, vtable + slot)[0]
        return table + offset if offset else 0

    def target(self, table: int, index: int) -> int:
        """The table, vector or string field ``index`` points at, 0 if absent."""
        at = self.field(table, index)
        return at + self.u32(at) if at else 0

    def vector(self, table: int, index: int, width: int) -> tuple[int, int]:
        """(first element, count) of a vector field; (0, 0) if absent."""
        at = self.target(table, index)
        if not at:
            return 0, 0
        count = self.u32(at)
        if at + 4 + count * width > self.size:
            raise _Malformed
        return at + 4, count

    def tables(self, table: int, index: int) -> list[int]:
        first, count = self.vector(table, index, 4)
        self.items += count
        if self.items > min(_MAX_ITEMS, self.size // 4):
            raise _Malformed
        offsets = struct.unpack_from(f"<{count}I", self.data, first) if count else ()  # in bounds: vector()
        return [first + 4 * k + offset for k, offset in enumerate(offsets)]

    def string(self, table: int, index: int) -> str | None:
        first, count = self.vector(table, index, 1)
        if not first:
            return None
        try:
            return bytes(self.data[first : first + count]).decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed from None

    def int32(self, table: int, index: int) -> int:
        at = self.field(table, index)
        if not at:
            return 0
        if at + 4 > self.size:
            raise _Malformed
        return _I32.unpack_from(self.data, at)[0]


def shareable_weights(
    model: bytes | bytearray | memoryview, min_bytes: int = MIN_SHARED_WEIGHT
) -> list[TensorRef]:
    """The main graph's initializers of ``min_bytes`` or more that can be shared in place, by offset;
    [] for a flatbuffer this reader does not follow (onnxruntime then gets the model whole)."""
    walk = _Walk(_Reader(memoryview(model).cast("B")))
    try:
        root = walk.reader.u32(0)
        graph = walk.reader.target(walk.reader.target(root, 1), 7)
        if not graph or not _has_big_initializer(_Reader(walk.reader.data), graph, min_bytes):
            return []  # nothing to share: spare a graph-heavy model the walk (1,500 nodes: 16 ms)
        walk.graph(graph, 0)
        weights = [w for t in walk.main if (w := walk.weight(t, min_bytes)) is not None]
    except (_Malformed, struct.error, OverflowError, ValueError):
        return []
    overlapped = _overlapped(walk.spans)
    return sorted(
        (w for w in weights if (w.offset, w.offset + w.nbytes) not in overlapped), key=lambda w: w.offset
    )


def _has_big_initializer(reader: _Reader, graph: int, min_bytes: int) -> bool:
    """Whether a main-graph initializer holds ``min_bytes`` of raw data or more: one read per
    initializer, where the walk that proves a weight shareable reads every tensor and node."""
    return any(reader.vector(tensor, 4, 1)[1] >= max(min_bytes, 1) for tensor in reader.tables(graph, 0))


def _overlapped(spans: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """The raw-bytes spans another span overlaps (onnxruntime never writes such a model; in one that
    did, another tensor could read a weight's hole in place, unseen)."""
    found: set[tuple[int, int]] = set()
    widest: tuple[int, int] | None = None
    for span in sorted(spans):
        if widest is not None and span[0] < widest[1]:
            found |= {span, widest}
        if widest is None or span[1] > widest[1]:
            widest = span
    return found


class _Walk:
    """One pass over the model's graphs: every tensor name (as onnxruntime reads it: up to a NUL),
    every tensor's raw-bytes span, the main graph's initializers. A table reached twice (hostile:
    onnxruntime's writer never shares one) ends the walk, so it is linear in the bytes."""

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.names: dict[str, int] = {}
        self.spans: list[tuple[int, int]] = []
        self.main: list[int] = []
        self.seen: set[int] = set()

    def visit(self, table: int) -> int:
        if table in self.seen:
            raise _Malformed
        self.seen.add(table)
        return table

    def tensor(self, tensor: int) -> None:
        name = self.reader.string(self.visit(tensor), 0) or ""
        key = name.split("\0", 1)[0]
        self.names[key] = self.names.get(key, 0) + 1
        first, count = self.reader.vector(tensor, 4, 1)
        if first:
            self.spans.append((first, first + count))

    def graph(self, graph: int, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise _Malformed
        reader = self.reader
        self.visit(graph)
        for tensor in reader.tables(graph, 0):
            self.tensor(tensor)
            if depth == 0:
                self.main.append(tensor)
        for sparse in reader.tables(graph, 7):
            self.visit(sparse)
            for part in (0, 1):
                if tensor := reader.target(sparse, part):
                    self.tensor(tensor)
        for node in reader.tables(graph, 2):
            for attribute in reader.tables(self.visit(node), 10):
                kind = reader.int32(self.visit(attribute), 2)
                if tensor := reader.target(attribute, 6):
                    self.tensor(tensor)
                for tensor in reader.tables(attribute, 11):
                    self.tensor(tensor)
                if kind == _ATTRIBUTE_GRAPH and (subgraph := reader.target(attribute, 7)):
                    self.graph(subgraph, depth + 1)
                elif kind == _ATTRIBUTE_GRAPHS:
                    for subgraph in reader.tables(attribute, 12):
                        self.graph(subgraph, depth + 1)

    def weight(self, tensor: int, min_bytes: int) -> TensorRef | None:
        reader = self.reader
        name = reader.string(tensor, 0)
        elem_type = reader.int32(tensor, 3)
        if not name or "\0" in name or self.names.get(name) != 1 or elem_type not in TENSOR_DTYPES:
            return None
        first, nbytes = reader.vector(tensor, 4, 1)
        if not first or nbytes < max(min_bytes, 1):
            return None
        dims_at, rank = reader.vector(tensor, 2, 8)
        if rank > 64:
            return None
        dims = struct.unpack_from(f"<{rank}q", reader.data, dims_at) if rank else ()
        itemsize = np.dtype(TENSOR_DTYPES[elem_type]).itemsize
        count = 1
        for dim in dims:
            if dim < 0:
                return None
            count *= dim
        if count * itemsize != nbytes or first % itemsize:
            return None  # onnxruntime refuses or copies such a tensor: it stays in the graph
        return TensorRef(name, elem_type, tuple(dims), first, nbytes)


@dataclass
class SharedModel:
    """An ORT model onnxruntime maps from a memfd that lacks the shared weights' bytes (holes), with
    those weights ``add_initializer``-ed over the caller's buffer: what the session must keep, and
    how to tell whether onnxruntime read the holes (where it would have read zeros)."""

    fd: int
    keep: list[object]
    held: int

    def holes_read(self) -> str | None:
        """Why the session cannot be trusted (it read the graph's own copy of a shared weight:
        zeros), or None. A read through a mapping gives the hole a page: the memfd holds more."""
        grown = held(self.fd) - self.held
        if grown <= 0:
            return None
        return (
            f"onnxruntime read {grown:,} bytes of holes, where the graph's copies of the shared weights "
            "would be (an EP or optimizer reading initializers from the graph): use ort-mapped"
        )


def share_weights(model: memoryview, options: onnxruntime.SessionOptions) -> SharedModel | None:
    """Share the weights of the ORT flatbuffer ``model`` (the caller's memory) in place through
    ``options``, and write the rest into a memfd for onnxruntime to map; None if there is nothing
    worth sharing. Weights whose address is not aligned to their type stay in the memfd. A memfd
    written for equal bytes before (``_Kept``) is used again.

    A hole is the whole pages inside a weight: the bytes around them are written, so a read of any
    byte of a weight either gets the weight's own bytes or gives a hole a page (``holes_read``)."""
    page = mmap.PAGESIZE
    if memfd_unit() > page:
        return None  # a huge page written around a hole would hide a read of it: no check, no door
    kept, fd = _kept_for(model)
    keep: list[object] = []
    try:
        views = [(w, tensor_view([(0, model)], w)) for w in kept.weights] if kept else []
        if kept is not None and all(view.ctypes.data % view.itemsize == 0 for _, view in views):
            written = kept.written
        else:  # none kept, or another alignment: walk this model itself (its bytes inside the kept
            # holes were never compared, and a hostile flatbuffer may hold tables there)
            if kept is not None:
                os.close(fd)
                fd = -1
            views = [(w, tensor_view([(0, model)], w)) for w in shareable_weights(model)]
            views = [(w, view) for w, view in views if view.ctypes.data % view.itemsize == 0]
            if not views:
                return None
            holes = [(_up(w.offset, page), _down(w.offset + w.nbytes, page)) for w, _ in views]
            holes = [(start, end - start) for start, end in holes if end > start]
            fd, written = memfd_without(model, holes)
            _keep(model, [w for w, _ in views], holes, fd, written)
        for weight, view in views:
            value = onnxruntime.OrtValue.ortvalue_from_numpy(view)
            options.add_initializer(weight.name, value)
            keep.append(value)  # onnxruntime holds a bare pointer to the OrtValue, not a reference
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return SharedModel(fd, keep, written)


@dataclass
class _Kept:
    """A sealed memfd written for a flatbuffer (``memfd_without``), kept for the next load of equal
    bytes: its weights, and the bytes it holds (all but the holes), against which a model is
    compared whole. A load whose bytes equal them outside the holes maps this memfd: onnxruntime
    reads the very structure the walk read (the memfd's bytes; where a hostile flatbuffer put a
    table inside a hole, a read of it shows, ``holes_read``), and takes from the load's own bytes
    only the shared weights, at the walk's offsets. Used only with every weight aligned as before;
    otherwise the model is walked itself."""

    weights: list[TensorRef]
    pieces: list[tuple[int, bytes]]
    fd: int
    written: int

    def size(self) -> int:
        return sum(len(piece) for _, piece in self.pieces)


# Memfds kept (by model size: one each), each holding its model's bytes outside the holes, and a
# copy of those to compare: at most _KEPT_MAX of them, _KEPT_TOTAL bytes of copies in all (as much
# again in the memfds); a model whose bytes outside its holes exceed _KEPT_MAX_BYTES is written
# each time.
_KEPT: OrderedDict[int, _Kept] = OrderedDict()
_KEPT_MAX, _KEPT_MAX_BYTES, _KEPT_TOTAL = 16, 8 << 20, 32 << 20
_kept_lock = threading.Lock()


def _kept_for(model: memoryview) -> tuple[_Kept | None, int]:
    """The kept memfd for bytes equal to ``model``'s outside its holes, if no hole of it has been
    read (a page there would hide the next read: then it is dropped), and a duplicate of its
    descriptor for this load (taken under the lock: another thread may drop and close the kept one
    at any time after); (None, -1) if there is none."""
    with _kept_lock:
        kept = _KEPT.get(len(model))
        if kept is None or any(model[a : a + len(piece)].tobytes() != piece for a, piece in kept.pieces):
            return None, -1
        if held(kept.fd) != kept.written:
            os.close(_KEPT.pop(len(model)).fd)
            return None, -1
        _KEPT.move_to_end(len(model))
        return kept, os.dup(kept.fd)


def _keep(
    model: memoryview, weights: list[TensorRef], holes: list[tuple[int, int]], fd: int, written: int
) -> None:
    edges = [0, *(edge for start, length in holes for edge in (start, start + length)), len(model)]
    spans = list(zip(edges[::2], edges[1::2], strict=True))
    if sum(b - a for a, b in spans) > _KEPT_MAX_BYTES:
        return
    kept = _Kept(weights, [(a, model[a:b].tobytes()) for a, b in spans if b > a], os.dup(fd), written)
    with _kept_lock:
        old = _KEPT.pop(len(model), None)
        _KEPT[len(model)] = kept
        dropped = [old] if old is not None else []
        while len(_KEPT) > _KEPT_MAX or sum(k.size() for k in _KEPT.values()) > _KEPT_TOTAL:
            dropped.append(_KEPT.popitem(last=False)[1])
    for entry in dropped:
        os.close(entry.fd)  # each load maps a dup of its own: none is using this descriptor


def _new_lock_in_child() -> None:
    global _kept_lock
    _kept_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def _up(value: int, step: int) -> int:
    return -(-value // step) * step


def _down(value: int, step: int) -> int:
    return value // step * step
