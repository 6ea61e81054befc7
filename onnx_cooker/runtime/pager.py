"""Let go of the pages onnxruntime's own mapping of a blob file holds while it builds a session
(``create_session``).

Where onnxruntime maps the blob file itself (``ort-mapped`` with the flatbuffer leading the file,
``onnx-mapped``), prepacking reads every MatMul/Conv weight through that mapping and writes a packed
copy: the pages it read stay counted in the process beside the copies (268 MB ORT model through
``Bundle.session``: peak and held memory 2.04x the model). The pager drops them as it goes: every
``INTERVAL`` seconds it finds the mappings of the blob file in ``/proc/self/maps`` (by device and
inode) and ``madvise(MADV_DONTNEED)``-s them, and once more after the session is built. Pages read
again later (weights that were not prepacked, at the first run) come back from the page cache.

Why this is safe: ``MADV_DONTNEED`` on a private file mapping discards only pages the process
changed (copy-on-write) and makes the rest re-read from the file. onnxruntime holds a mapped model as
``gsl::span<const uint8_t>`` and its initializers as constant tensors; the native loader hands the
same paths a ``PROT_READ`` mapping, where a write would fault, and its tests pass in every target
version; tests/test_pager.py checks after each load and run that the mapping holds no changed page
(``Anonymous: 0 kB`` in ``/proc/self/smaps``). The blob file is only ever replaced by rename, never
rewritten in place (docs/runtime.md, "Mapped blob files"), so the page cache holds the checked bytes.

Linux only (``/proc/self/maps`` and ``madvise``); elsewhere ``start`` returns None and the pages stay.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import onnxruntime

if TYPE_CHECKING:
    from .blob import CheckedBlob
    from .devices import ProviderSpec

# From this size of blob file the pager runs: below it the thread and its scans cost more than the
# pages weigh (the native loader's threshold; docs/native.md).
PAGER_MIN = 16 << 20
INTERVAL = 0.002  # seconds between passes: prepacking a 268 MB model takes about 350 ms


def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_MADVISE = _madvise()


def can_page() -> bool:
    """Whether pages can be let go here (Linux, with ``madvise``)."""
    return _MADVISE is not None


def mappings(st_dev: int, st_ino: int) -> list[tuple[int, int, str, int]]:
    """(start, end, permissions, file offset) of every mapping of the file with this device and
    inode in this process."""
    wanted_dev = f"{os.major(st_dev):02x}:{os.minor(st_dev):02x}"
    wanted_ino = str(st_ino)
    found = []
    with open("/proc/self/maps", "rb") as maps:
        for line in maps.read().decode("ascii", "replace").splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) >= 5 and fields[4] == wanted_ino and fields[3] == wanted_dev:
                start, _, end = fields[0].partition("-")
                found.append((int(start, 16), int(end, 16), fields[1], int(fields[2], 16)))
    return found


def _onnxruntimes(found: list[tuple[int, int, str, int]], size: int) -> list[tuple[int, int]]:
    """The mappings that are onnxruntime's of a whole model file of ``size`` bytes: private,
    writable (``Env::MapFileIntoMemory`` maps ``PROT_READ | PROT_WRITE``, ``MAP_PRIVATE``), from
    offset 0, covering the file. Not the loader's own (``mmap.ACCESS_READ``: shared, read-only),
    which another thread's ``Bundle.session`` of the same blob may create and close meanwhile."""
    return [(a, b) for a, b, perms, offset in found if perms == "rw-p" and offset == 0 and b - a >= size]


class _FileLock:
    """One file's lock, and how many loads hold or wait for it: the entry leaves ``_LOCKS`` with the
    last of them (a game that loads many memfds or re-cooked blobs keeps no lock per file)."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


_LOCKS: dict[tuple[int, int], _FileLock] = {}
_LOCKS_LOCK = threading.Lock()


def _forget_locks() -> None:
    """In a forked child: a lock another thread of the parent held (a load under way at the fork)
    would be held for good there, and the child's next load of that file would wait forever."""
    global _LOCKS_LOCK
    _LOCKS.clear()
    _LOCKS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks)


def file_lock(fd: int) -> contextlib.AbstractContextManager[None] | None:
    """The lock that loads of the file open as ``fd`` hold while onnxruntime maps it, where a pager
    may run (files from ``PAGER_MIN``, on Linux): a pager claims the one mapping of the file that
    appears during its load, so no other load of that file may map it meanwhile (see ``Pager``)."""
    if _MADVISE is None:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    if st.st_size < PAGER_MIN:
        return None
    return _holding((st.st_dev, st.st_ino))


@contextlib.contextmanager
def _holding(key: tuple[int, int]) -> Iterator[None]:
    with _LOCKS_LOCK:
        entry = _LOCKS.setdefault(key, _FileLock())
        entry.users += 1
    try:
        with entry.lock:
            yield
    finally:
        with _LOCKS_LOCK:
            entry.users -= 1
            if not entry.users and _LOCKS.get(key) is entry:  # a fork meanwhile made the child a new table
                del _LOCKS[key]


class Pager:
    """Drops the pages of the one mapping of a file that onnxruntime creates during a load.

    Which mapping: the first of onnxruntime's mappings of that whole file (``_onnxruntimes``) not
    there when the pager started. Only that range is ever
    advised, and only while the load runs (``stop`` before onnxruntime can return, or raise and free,
    the session that owns it): ``MADV_DONTNEED`` on a range that had been unmapped and reused for
    anonymous memory would zero that memory, so a range that may go away is never touched. Mappings
    that were already there (other sessions of the same blob, which may be freed at any time) are
    left alone; the caller holds ``file_lock`` so that no other load maps the file meanwhile.
    """

    def __init__(self, st_dev: int, st_ino: int, size: int) -> None:
        self._key = (st_dev, st_ino)
        self._size = size
        self._before = set(_onnxruntimes(mappings(st_dev, st_ino), size))
        self._claimed: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="onnx-cooker-pager", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, fd: int) -> Pager | None:
        """A running pager for the file open as ``fd``, or None where it cannot help (not Linux, a
        file under ``PAGER_MIN``, no ``/proc``)."""
        if _MADVISE is None:
            return None
        try:
            st = os.fstat(fd)
            if st.st_size < PAGER_MIN:
                return None
            return cls(st.st_dev, st.st_ino, st.st_size)
        except OSError:
            return None

    def _pass(self) -> None:
        assert _MADVISE is not None
        if self._claimed is None:
            try:
                new = [r for r in _onnxruntimes(mappings(*self._key), self._size) if r not in self._before]
            except OSError:
                return
            if not new:
                return
            self._claimed = new[0]
        start, end = self._claimed
        _MADVISE(start, end - start, mmap.MADV_DONTNEED)

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            self._pass()

    def stop(self, *, built: bool = True) -> None:
        """End the passes; for a ``built`` session, let go of what it read while it was built. Call it
        while the session that owns the mapping is alive (before it is returned, or its failure
        lets it be freed)."""
        self._stop.set()
        self._thread.join()
        if built:
            self._pass()


class ExtentPager:
    """Drops the pages of a range of the loader's *own* read-only shared mapping of a blob file
    (``Bundle.session``'s) while onnxruntime builds a session over it in place (``onnx-file-buffers``):
    what prepacking has read would otherwise stay counted beside the packed copies (268 MB model,
    onnxruntime 1.32: peak 2.04x the model without it, 1.12x with it; docs/design.md).

    Safe where ``Pager`` needs care: the mapping is ours and cannot go away during the load (the
    session's borrowed views of it pin it: ``mmap.close`` refuses while they exist), it is a shared
    read-only mapping of a file (``MADV_DONTNEED`` only unmaps page-cache pages, which fault back
    unchanged), and it is never anonymous memory (``start`` is only called with ``Bundle``'s maps).
    """

    def __init__(self, mapping: mmap.mmap, start: int, length: int) -> None:
        self._mapping, self._start, self._length = mapping, start, length
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="onnx-cooker-pager", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, mapping: mmap.mmap, start: int, length: int) -> ExtentPager | None:
        """A running pager over ``mapping[start:start + length]`` (widened down to a page boundary),
        or None where it cannot help (not Linux, under ``PAGER_MIN``)."""
        if _MADVISE is None or length < PAGER_MIN:
            return None
        aligned = start - start % mmap.PAGESIZE
        return cls(mapping, aligned, length + start - aligned)

    def _pass(self) -> None:
        try:
            self._mapping.madvise(mmap.MADV_DONTNEED, self._start, self._length)
        except (ValueError, OSError):  # closed, or a kernel that refuses: advice only
            pass

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            self._pass()

    def stop(self) -> None:
        """End the passes (``Bundle.session`` lets go of what the built session read afterwards)."""
        self._stop.set()
        self._thread.join()


def create_session(
    model: bytes | str,
    options: onnxruntime.SessionOptions,
    specs: Sequence[ProviderSpec] | None,
    mapped_fd: int | None,
    low_memory: bool,
    own_pages: tuple[mmap.mmap, int, int] | None = None,
) -> onnxruntime.InferenceSession:
    """``InferenceSession``, never retried on other EPs behind the caller's back (onnxruntime's
    Python wrapper would print "EP Error" and retry on the CPU: the seed's silent trap); where
    onnxruntime maps ``mapped_fd``'s file for the session, or reads ``own_pages`` of the loader's own
    mapping in place, those pages are let go while it is built (no prepacking: nothing to let go)."""
    lock = file_lock(mapped_fd) if mapped_fd is not None else None
    if lock is None:
        paging = None if low_memory or own_pages is None else ExtentPager.start(*own_pages)
        try:
            return onnxruntime.InferenceSession(
                model, sess_options=options, providers=specs, enable_fallback=0
            )
        finally:
            if paging is not None:
                paging.stop()
    assert mapped_fd is not None
    with lock:
        pager = None if low_memory else Pager.start(mapped_fd)  # no prepacking: nothing to let go
        built = False
        try:
            session = onnxruntime.InferenceSession(
                model, sess_options=options, providers=specs, enable_fallback=0
            )
            built = True
        finally:
            if pager is not None:
                pager.stop(built=built)  # while the session, and so its mapping, is alive
    return session


def drop_mapped_weights(data: mmap.mmap, checked: CheckedBlob) -> None:
    """After an in-place ONNX load from a mapped blob file (``Bundle.session``), let the resident
    pages of the weights go, as onnxruntime does when it maps a model's data file itself: prepacked
    weights are not read again, and a page that is read again comes back from the page cache (clean,
    file-backed: nothing is lost). Never for anonymous memory, where dropping pages would lose them."""
    weights = [f for f in checked.header.frames if f.section == "weights" and f.codec == "raw"]
    if len(weights) != 1:
        return
    start = weights[0].data_offset - weights[0].data_offset % mmap.PAGESIZE
    length = weights[0].data_offset + weights[0].content_size - start
    try:
        data.madvise(mmap.MADV_DONTNEED, start, length)
    except (AttributeError, OSError, ValueError):
        pass  # advice only
