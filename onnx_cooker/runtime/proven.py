"""The ONNX graphs the loader's reference checks have accepted, kept so that a later load of the
same graph skips the walk: a game that makes a second session of a model (another instance, a
level loaded again) pays the checks once.

A check's verdict is a pure function of the graph's bytes and of what it checks them against (the
blob header's weights, the file name a rewrite writes in): an entry is used only where both are
equal to the ones checked, the bytes compared whole (a 400 kB graph: about 20 us, against the
walk's 1-7 ms). A graph that differs in one byte is another graph, checked again; a refusal is never
kept, so a damaged blob is refused on every load. One graph is kept per check, size and header (a
later one replaces it), its header's objects with it, so that no other object can take their
identity, by which they are found. Bounded: ``MAX_ENTRIES`` graphs, ``MAX_BYTES`` of them in all; a
graph over ``MAX_GRAPH``, or in the caller's memory, is checked each time.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

MAX_ENTRIES = 32
MAX_BYTES = 8 << 20
MAX_GRAPH = 1 << 20

_lock = threading.Lock()
_entries: OrderedDict[tuple[object, ...], tuple[tuple[object, ...], bytes, object]] = OrderedDict()
_held = [0]  # bytes of the graphs kept


def proven(kind: str, graph: bytes | memoryview, against: tuple[object, ...], check: Callable[[], T]) -> T:
    """``check()`` (which raises to refuse ``graph``), or what it returned for an earlier ``graph``
    of equal bytes checked the same way (``kind``) against equal ``against``: strings and numbers,
    and objects a load gets again (a cached header's tensors: found by identity, then compared)."""
    if not isinstance(graph, bytes) or len(graph) > MAX_GRAPH:
        return check()  # the caller's memory may change; a big graph costs more to keep than to walk
    key = (kind, len(graph), *(x if isinstance(x, (str, int)) else id(x) for x in against))
    with _lock:
        hit = _entries.get(key)
        if hit is not None and _same(hit[0], against) and hit[1] == graph:
            _entries.move_to_end(key)
            return hit[2]  # type: ignore[return-value]
    result = check()
    with _lock:
        old = _entries.pop(key, None)
        if old is not None:
            _held[0] -= len(old[1])
        _entries[key] = (against, graph, result)
        _held[0] += len(graph)
        while len(_entries) > MAX_ENTRIES or _held[0] > MAX_BYTES:
            _, (_, dropped, _) = _entries.popitem(last=False)
            _held[0] -= len(dropped)
    return result


def _new_lock_in_child() -> None:
    """A forked child: a thread that held the lock at the fork never releases it there."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def forget() -> None:
    """Drop every kept verdict (tests that change what a check does)."""
    with _lock:
        _entries.clear()
        _held[0] = 0


def _same(kept: tuple[object, ...], given: tuple[object, ...]) -> bool:
    return len(kept) == len(given) and all(a is b or a == b for a, b in zip(kept, given, strict=True))
