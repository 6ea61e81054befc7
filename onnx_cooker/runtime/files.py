"""Blob and manifest files as the loader opens them: regular files only, mapped read-only, told
apart by identity, hashed (``bundle.py``'s helpers); and the sealed memfd that hands onnxruntime a
model no blob file holds first (``loadpaths.py``)."""

from __future__ import annotations

import errno
import functools
import hashlib
import mmap
import os
import stat
import sys
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from .blob import CheckedBlob


def map_file(fd: int, size: int, *, populate: bool = True) -> mmap.mmap:
    """A read-only shared mapping of the whole file; on Linux, with ``populate``, its pages are
    faulted in at once (where the checks read every page anyway, one call is cheaper than a fault
    per page; where a pager drops the pages onnxruntime has read, faulting them all first costs
    about 30 ms on 268 MB for nothing)."""
    if sys.platform.startswith("linux"):
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        return mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
    return mmap.mmap(fd, size, access=mmap.ACCESS_READ)


# file identity -> the mapping of that file the process's sessions share (weakly: a mapping lives
# while a session, or a load under way, holds a view of it). Python's mmap keeps a duplicate of the
# descriptor for its life: a mapping per session was a descriptor per session (EMFILE after ~1000).
_SHARED: weakref.WeakValueDictionary[tuple[int, ...], mmap.mmap] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared_mapping(fd: int, size: int, identity: tuple[int, ...], *, populate: bool) -> memoryview:
    """A view of the process's one read-only mapping of the file open as ``fd`` (``identity``,
    ``file_identity`` of it), mapped now if no live one exists (``map_file``). The view pins the
    mapping (``mmap.close`` refuses while it exists, so another load cannot close it from under
    this one); its ``obj`` is the mapping. Release it once the views the load keeps are taken."""
    with _SHARED_LOCK:
        mapping = _SHARED.get(identity)
        if mapping is not None:
            try:
                return memoryview(mapping)
            except ValueError:  # closed by a load that handed onnxruntime the file itself
                pass
        mapping = map_file(fd, size, populate=populate)
        _SHARED[identity] = mapping
        return memoryview(mapping)


def _forget_lock_in_child() -> None:
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_lock_in_child)


def file_identity(info: os.stat_result) -> tuple[int, ...]:
    """What tells one file's content from another's without reading it: replaced by rename, the
    inode differs; written in place, the change time moves."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def sha256_of(data: mmap.mmap | bytes) -> str:
    digest = hashlib.sha256()
    view = memoryview(data)
    for start in range(0, len(view), 16 << 20):
        digest.update(view[start : start + (16 << 20)])
    return digest.hexdigest()


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_regular(path: Path, *, nofollow: bool = False) -> tuple[BinaryIO, int]:
    """Open ``path`` for reading, and its size, if it is a regular file: opening a named pipe blocks
    until a writer comes (for ever), and a device (/dev/zero) never ends. ``nofollow``: a link as
    the last component fails (ELOOP) instead of being followed."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags | (NOFOLLOW if nofollow else 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return os.fdopen(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


@functools.cache
def has_memfd() -> bool:
    """Once per process: a stat of ``/proc/self/fd`` costs about 0.1 ms (procfs), twice a load."""
    return sys.platform.startswith("linux") and hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


def memfd_with(checked: CheckedBlob) -> int:
    """A sealed memfd holding the blob's model file: the raw extent copied in once, or the zstd
    frames decoded straight into it. RAM, not disk; no other process can see or change it."""
    size = checked.header.graph_size or 0
    fd = os.memfd_create("onnx-cooker-model", os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0))
    try:
        os.ftruncate(fd, size)
        extent = checked.extent("graph")
        if extent is not None:
            pwrite_all(fd, extent, 0)
        elif size:
            mapping = mmap.mmap(fd, size)
            try:
                checked.graph_into(memoryview(mapping))
            finally:
                try:
                    mapping.close()
                except BufferError:  # slices held by a failed decode's traceback: unmapped with them
                    pass
        _seal(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def memfd_without(model: memoryview, holes: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """A sealed memfd of ``len(model)`` bytes holding ``model`` except the ``(offset, length)`` holes
    (sorted, apart), which are never written: RAM is taken only for what is. Returns the descriptor
    and the bytes the memfd holds now (``held``): if a mapping of it reads a hole, the kernel gives
    the hole a page, and ``held`` grows."""
    fd = os.memfd_create("onnx-cooker-model", os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0))
    try:
        os.ftruncate(fd, len(model))
        start = 0
        for offset, length in [*holes, (len(model), 0)]:
            pwrite_all(fd, model[start:offset], start)
            start = offset + length
        _seal(fd)
        return fd, held(fd)
    except BaseException:
        os.close(fd)
        raise


@functools.cache
def memfd_unit() -> int:
    """The memory a memfd takes for one byte written: a page, or more where the kernel gives memfds
    huge pages (``shmem_enabled``), which would cover the edges of holes (``memfd_without``)."""
    fd = os.memfd_create("onnx-cooker-probe", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, 4 << 20)
        os.pwrite(fd, b"\1", 1 << 20)
        return held(fd)
    finally:
        os.close(fd)


def held(fd: int) -> int:
    """The bytes of memory (or disk) the file open as ``fd`` takes."""
    return os.fstat(fd).st_blocks * 512


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (``pwrite`` may write less than asked: over 2 GB, always)."""
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written : written + (1 << 30)], offset + written)


def _seal(fd: int) -> None:
    """No write, shrink or grow from now on: a session mapping the memfd cannot be pulled from under."""
    try:
        import fcntl

        seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except (ImportError, AttributeError, OSError):
        pass  # a kernel without seals: the memfd is still private to this process
