"""A blob held in memory the way onnxruntime can use it in place: on Linux, a sealed memfd.

A game that keeps its blobs in an archive (a pak, IoStore, a zip) reads each one into memory. Bytes
read that way are anonymous memory, which onnxruntime cannot map: from ``bytes`` an ORT-format
model is copied once more, into a memfd (``ort-mapped``; 268 MB: 80-110 ms here, and the copy stays
for the session's life beside the caller's blob). ``MemoryBlob.read(stream, size)`` reads the blob
straight into a memfd instead (the same one read), and ``session_from_blob`` hands that file to
onnxruntime the way ``Bundle.session`` hands it a blob file: a raw flatbuffer, which leads the
blob, is mapped in place (``/proc/self/fd/N``), so nothing is copied and the blob's pages are the
session's (a zstd-coded graph is decoded into a memfd of its own, as from bytes). ONNX weights go
in place as from ``bytes`` (onnxruntime cannot open a memfd by name, so ``onnx-mapped`` is not
used). A ``MemoryBlob`` is checked once, when it is sealed (its CRC-32s included); once the kernel
has sealed the memfd it cannot change, so its loads read no byte to check it again (where sealing
is refused, every load checks the raw content as from bytes).

The memfd is memory (shared memory: swapped like the rest where there is swap), never a file on a
disk, and only this process holds it. Without memfds (Windows, macOS) the blob is a ``bytearray``
and loads as ``bytes`` do.
"""

from __future__ import annotations

import io
import mmap
import os
import stat
import threading
import weakref
from typing import BinaryIO

from .blob import DEFAULT_MAX_MODEL_SIZE, check_blob
from .errors import BlobTooLargeError, BundleError, TruncatedBlobError
from .files import _seal, has_memfd, map_file, pwrite_all
from .header import MAX_HEADER_SIZE, byte_view
from .loadpaths import BlobFile

CHUNK = 4 << 20  # bytes read at a time from a stream that is not a plain file
_SEALS = ("F_SEAL_WRITE", "F_SEAL_SHRINK", "F_SEAL_GROW")
# Forks this process descends through: a blob's lock that another thread held at a fork is held by
# no thread in the child, so each blob takes a new one there (docs/loader.md, "Forked processes").
_forks = 0
_renew = threading.Lock()


def _forked() -> None:
    global _forks, _renew
    _forks += 1
    _renew = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class MemoryBlob:
    """One blob in RAM, for ``session_from_blob``: make it with ``read`` (from a stream) or ``copy``
    (from bytes). Sessions made from it keep what they use alive; ``close`` lets it go."""

    def __init__(self, size: int, *, max_model_size: int = DEFAULT_MAX_MODEL_SIZE) -> None:
        """An empty blob of ``size`` bytes: fill it (``write`` or ``writable``), then ``seal()``.
        ``BlobTooLargeError`` before anything is allocated if no model under ``max_model_size``
        makes a blob that large."""
        if size < 0:
            raise ValueError(f"a blob size is >= 0, not {size}")
        if size > max_model_size + (max_model_size >> 8) + MAX_HEADER_SIZE:
            raise BlobTooLargeError(
                f"a blob of {size:,} bytes holds a model over max_model_size ({max_model_size:,} bytes); "
                "check the size given, or raise max_model_size"
            )
        self.size = size
        self._fd: int | None = None
        self._buffer: bytearray | None = None
        self._mapping: mmap.mmap | None = None
        self._sealed = False
        self._closed = False
        self._kernel_sealed = False  # the memfd refuses writes: loads need not check it again
        self._lock = threading.Lock()  # close() against a load taking its own descriptor (_guard)
        self._forks = _forks
        if size and has_memfd():
            fd = os.memfd_create("onnx-cooker-blob", os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0))
            try:
                os.ftruncate(fd, size)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            self._closer = weakref.finalize(self, os.close, fd)
        else:
            self._buffer = bytearray(size)

    @classmethod
    def read(cls, stream: BinaryIO, size: int, *, max_model_size: int = DEFAULT_MAX_MODEL_SIZE) -> MemoryBlob:
        """The next ``size`` bytes of ``stream`` (a file, an archive entry: anything with
        ``readinto``, or else ``read``), read into RAM once and sealed; ``TruncatedBlobError`` if the
        stream ends first, or another ``BundleError`` if the bytes are not a sound blob (see
        ``seal``); a path or bytes instead of a stream is a ``TypeError`` saying what to pass. From a
        plain file the kernel copies them into the memfd (``sendfile``); from anything else (an
        archive's entry, a decompressing stream) they go through a 4 MiB buffer. (Through a mapping
        of the memfd every page would fault on its first write: 268 MB took 1.7 s here, against
        0.1-0.2 s by ``write``.)"""
        _check_stream(stream)
        blob = cls(size, max_model_size=max_model_size)
        try:
            filled = blob._send(stream, size)
            if filled < size:
                chunk = bytearray(min(size - filled, CHUNK))
                while filled < size:
                    view = memoryview(chunk)[: min(len(chunk), size - filled)]
                    count = _read_into(stream, view)
                    if not count:
                        raise TruncatedBlobError(
                            f"the stream ended after {filled:,} of the blob's {size:,} bytes: the blob is "
                            "cut off (check the size given, or the archive it comes from)"
                        )
                    blob._write(view[:count], filled)
                    filled += count
        except BaseException:
            blob.close()
            raise
        blob.seal(max_model_size=max_model_size)
        return blob

    def _send(self, stream: BinaryIO, size: int) -> int:
        """Bytes copied by the kernel from ``stream``'s file into the memfd (0 where it cannot): only
        for a plain file object, whose position is a position in that file (a gzip or archive-entry
        stream may hand out its archive's descriptor, with positions of its own)."""
        raw = stream.raw if isinstance(stream, io.BufferedReader | io.BufferedRandom) else stream
        if self._fd is None or not hasattr(os, "sendfile") or not isinstance(raw, io.FileIO):
            return 0
        try:
            source, start = stream.fileno(), stream.tell()
            if not stat.S_ISREG(os.fstat(source).st_mode):
                return 0
        except (OSError, ValueError):
            return 0
        sent = 0
        try:
            while sent < size:
                os.lseek(self._fd, sent, os.SEEK_SET)
                count = os.sendfile(self._fd, source, start + sent, min(size - sent, 1 << 30))
                if not count:
                    break
                sent += count
        except OSError:  # a file system that cannot splice: the rest goes through the buffer
            pass
        stream.seek(start + sent)  # as if read: the stream's position moves past what was taken
        return sent

    def write(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        """Put ``data`` at ``offset`` of the blob, before ``seal``: for bytes made piece by piece (a
        blob decrypted or decompressed from its archive 4 MiB at a time) without the page faults
        of ``writable``."""
        self._unsealed()
        view = byte_view(data)
        if offset < 0 or offset + len(view) > self.size:
            raise ValueError(f"{len(view):,} bytes at {offset:,} do not fit a blob of {self.size:,}")
        self._write(view, offset)

    def _write(self, data: memoryview, offset: int) -> None:
        if self._fd is None:
            assert self._buffer is not None
            self._buffer[offset : offset + len(data)] = data
            return
        pwrite_all(self._fd, data, offset)

    @classmethod
    def copy(
        cls, data: bytes | bytearray | memoryview, *, max_model_size: int = DEFAULT_MAX_MODEL_SIZE
    ) -> MemoryBlob:
        """A sealed copy of ``data`` (one copy, the one ``session_from_blob(bytes)`` would make for
        an ORT-format model anyway, made once for all its sessions)."""
        source = byte_view(data)
        blob = cls(len(source), max_model_size=max_model_size)
        try:
            blob._write(source, 0)
        except BaseException:
            blob.close()
            raise
        blob.seal(max_model_size=max_model_size)
        return blob

    def _unsealed(self) -> None:
        if self._closed:
            raise BundleError("this MemoryBlob was closed")
        if self._sealed:
            raise BundleError("this MemoryBlob is sealed: its bytes can no longer change")

    def writable(self) -> memoryview:
        """The blob's bytes to fill in place, until ``seal`` (release the view first). Slower than
        ``write`` for large blobs: each page of the memfd faults on its first write."""
        self._unsealed()
        if self._fd is not None:
            if self._mapping is None:
                self._mapping = mmap.mmap(self._fd, self.size)  # shared and writable until sealed
            return memoryview(self._mapping)
        assert self._buffer is not None
        return memoryview(self._buffer)

    def seal(self, *, max_model_size: int = DEFAULT_MAX_MODEL_SIZE) -> None:
        """No change from now on: a writable mapping goes, the memfd is sealed against write, shrink
        and grow, the bytes are mapped read-only, and the blob is checked as ``session_from_blob``
        checks it, its CRC-32s included (a ``BundleError`` closes it)."""
        if self._closed:
            raise BundleError("this MemoryBlob was closed")
        if self._sealed:
            return
        if self._fd is not None:
            if self._mapping is not None:
                try:
                    self._mapping.close()  # F_SEAL_WRITE is refused while a writable shared mapping exists
                except BufferError:
                    raise BundleError("release the views writable() gave before seal()") from None
            _seal(self._fd)
            self._kernel_sealed = _sealed_against_writes(self._fd)
            self._mapping = map_file(self._fd, self.size, populate=True)
        self._sealed = True
        data = self._mapping if self._mapping is not None else memoryview(self._buffer or b"")
        try:  # every check once, the CRC-32s of raw content included
            check_blob(data, max_model_size=max_model_size).release()
        except BaseException:
            self.close()
            raise

    @property
    def unchanging(self) -> bool:
        """Whether the kernel refuses every change to the sealed bytes (a sealed memfd): its loads
        need not check them again. Without it (no memfd, or sealing refused) each load checks the
        raw content's CRC-32s, as from bytes."""
        return self._kernel_sealed

    def _guard(self) -> threading.Lock:
        """The blob's lock; a new one in a forked child, where the thread that held it is gone."""
        if self._forks != _forks:
            with _renew:
                if self._forks != _forks:
                    self._lock, self._forks = threading.Lock(), _forks
        return self._lock

    def borrow(self) -> tuple[memoryview, BlobFile | None]:
        """For one load: a view of the sealed bytes and, with a memfd, a descriptor of its own (a
        duplicate: ``close`` cannot free the file under a load that names it; the caller closes it)."""
        with self._guard():
            if self._closed:
                raise BundleError("this MemoryBlob was closed: read the blob again to load it")
            if not self._sealed:
                raise BundleError("seal() this MemoryBlob before loading it: it is still being written")
            if self._mapping is None:
                assert self._buffer is not None
                return memoryview(self._buffer).toreadonly(), None
            view = memoryview(self._mapping)
            if self._fd is None:
                return view, None
            fd = os.dup(self._fd)
            return view, BlobFile(fd, f"/proc/self/fd/{fd}", by_name=False)

    def close(self) -> None:
        """Let the blob go: what no session uses is freed now (its mapping, once no load or session
        holds a view of it; the memfd once onnxruntime's own mappings of it are gone)."""
        with self._guard():
            self._closed = True
            mapping, self._mapping, self._buffer = self._mapping, None, None
            if mapping is not None and not mapping.closed:
                try:
                    mapping.close()
                except BufferError:  # a session still reads it: unmapped when the session goes
                    pass
            if self._fd is not None:
                self._closer()
                self._fd = None

    def __len__(self) -> int:
        return self.size

    def __enter__(self) -> MemoryBlob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_stream(stream: object) -> None:
    """A ``TypeError`` naming what to pass for what is not a readable stream (a path, bytes)."""
    if isinstance(stream, str | os.PathLike):
        raise TypeError(
            f"MemoryBlob.read takes an open stream, not a path ({os.fspath(stream)!r}): "
            "with open(path, 'rb') as stream: MemoryBlob.read(stream, size)"
        )
    if isinstance(stream, bytes | bytearray | memoryview):
        raise TypeError(
            "MemoryBlob.read takes an open stream; for bytes already in memory, MemoryBlob.copy(data)"
        )
    if not (hasattr(stream, "readinto") or hasattr(stream, "read")):
        raise TypeError(
            f"MemoryBlob.read takes a stream with readinto() or read() (a file opened 'rb', an archive "
            f"entry), not {type(stream).__name__}"
        )


def _read_into(stream: BinaryIO, view: memoryview) -> int:
    """Bytes read into ``view``: by ``readinto``, else (a stream with ``read`` only) by ``read``."""
    if hasattr(stream, "readinto"):
        return stream.readinto(view) or 0
    piece = stream.read(len(view))
    view[: len(piece)] = piece
    return len(piece)


def _sealed_against_writes(fd: int) -> bool:
    try:
        import fcntl

        wanted = 0
        for name in _SEALS:
            wanted |= getattr(fcntl, name)
        return fcntl.fcntl(fd, fcntl.F_GET_SEALS) & wanted == wanted
    except (ImportError, AttributeError, OSError):
        return False
