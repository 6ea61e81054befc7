"""The frames of a blob (versions 2 and 3): where each lies, and decoding them in parallel.

A frame is either a standard zstd frame (content size and content checksum set) or a *raw* frame:
content stored as is behind ``pad`` zero bytes. In version 2 a raw frame is a zstd skippable frame
(magic ``RAW_MAGIC``, an 8-byte prefix) of at most 1 MiB of graph or one run of whole tensors; in
version 3 it is a whole section, one contiguous extent with no prefix (``prefix`` 0), aligned so
that the bytes can be handed to onnxruntime (or mapped) in place.

zstandard releases the GIL while it decompresses, so a small thread pool decodes frames side by
side, each straight into its slice of one preallocated buffer: no frame is decompressed into a
temporary and copied again.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import zstandard

from .errors import DAMAGED, ChecksumMismatchError, TruncatedBlobError

# Skippable-frame magics are 0x184D2A50..0x184D2A5F; 0x184D2A5E is the header (blob.py).
RAW_MAGIC = 0x184D2A5F
SECTIONS = ("graph", "weights")
CODECS = ("zstd", "raw")
_SKIPPABLE_PREFIX = struct.Struct("<II")
RAW_PREFIX_SIZE = _SKIPPABLE_PREFIX.size
# Raw content is checked by a CRC-32 per piece of this size, the pieces checked in parallel.
RAW_CRC_PIECE = 8 << 20


def default_threads() -> int:
    """Decoding threads when the caller does not say: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Frame:
    """One frame of a blob: its section, codec, place in the blob and place in its section."""

    section: str
    codec: str
    offset: int  # where the frame starts in the blob
    size: int  # bytes of the whole frame in the blob
    content_offset: int  # where its content goes in its section
    content_size: int
    pad: int  # raw frames: zero bytes between the frame prefix and the content
    crcs: tuple[int, ...] = ()  # raw frames: CRC-32 of each RAW_CRC_PIECE of the content
    prefix: int = RAW_PREFIX_SIZE  # raw frames: bytes of frame marker before the padding (0 in version 3)

    @property
    def data_offset(self) -> int:
        """Where a raw frame's content starts in the blob."""
        return self.offset + self.prefix + self.pad


def raw_frame(content: bytes | memoryview, blob_offset: int, alignment: int) -> bytes:
    """A raw frame whose content lands on an ``alignment``-byte boundary of the blob when the frame
    starts at ``blob_offset``."""
    pad = -(blob_offset + RAW_PREFIX_SIZE) % alignment
    return b"".join((_SKIPPABLE_PREFIX.pack(RAW_MAGIC, pad + len(content)), bytes(pad), content))


def raw_crcs(content: bytes | memoryview, threads: int | None) -> tuple[int, ...]:
    """CRC-32 of each RAW_CRC_PIECE of a raw frame's content (zlib releases the GIL: in parallel)."""
    view = memoryview(content).cast("B")
    starts = range(0, len(view), RAW_CRC_PIECE)
    crcs = [0] * len(starts)

    def one(index: int) -> None:
        crcs[index] = zlib.crc32(view[starts[index] : starts[index] + RAW_CRC_PIECE])

    run_parallel(one, range(len(starts)), threads)
    return tuple(crcs)


def crc_count(content_size: int) -> int:
    return -(-content_size // RAW_CRC_PIECE)


def _label(frames: Sequence[Frame], index: int, where: str) -> str:
    """``<where>: <section> frame k of n``, numbered within its section (made for a message only:
    building every label up front was a fixed cost of each load)."""
    section = frames[index].section
    place = sum(f.section == section for f in frames[: index + 1])
    return f"{where}: {section} frame {place} of {sum(f.section == section for f in frames)}"


def check_frames(data: memoryview, frames: Sequence[Frame], where: str) -> None:
    """Every frame is where the header says, of the kind it says, holding as much as it says.

    Reads frame headers only (a few bytes each); the content is checked while it is decoded (zstd)
    or by ``check_raw`` (raw).
    """
    for index, frame in enumerate(frames):
        if frame.offset + frame.size > len(data):
            raise TruncatedBlobError(
                f"{_label(frames, index, where)} ends at byte {frame.offset + frame.size:,}, but the "
                f"blob has {len(data):,}: the file is cut off{DAMAGED}"
            )
        if frame.codec == "raw":
            if frame.prefix:
                magic, payload = _SKIPPABLE_PREFIX.unpack_from(data, frame.offset)
                if magic != RAW_MAGIC or payload != frame.size - RAW_PREFIX_SIZE:
                    label = _label(frames, index, where)
                    raise ChecksumMismatchError(f"{label} is not the raw frame its header names{DAMAGED}")
            padding = data[frame.offset + frame.prefix : frame.data_offset]
            if padding.tobytes() != bytes(len(padding)):  # a memcmp: strip() took 0.13 ms for 64 KiB
                raise ChecksumMismatchError(
                    f"{_label(frames, index, where)} has damaged padding (non-zero bytes){DAMAGED}"
                )
            continue
        try:
            params = zstandard.get_frame_parameters(data[frame.offset : frame.offset + frame.size])
        except zstandard.ZstdError as exc:
            raise ChecksumMismatchError(
                f"{_label(frames, index, where)} is damaged ({exc}){DAMAGED}"
            ) from None
        if params.content_size != frame.content_size or not params.has_checksum:
            label = _label(frames, index, where)
            raise ChecksumMismatchError(f"{label} does not match its header{DAMAGED}")


def raw_pieces(frames: Sequence[Frame]) -> list[tuple[int, Frame, int]]:
    """(frame index, frame, piece) for every piece of every raw frame's content."""
    return [
        (i, frame, piece)
        for i, frame in enumerate(frames)
        if frame.codec == "raw"
        for piece in range(len(frame.crcs))
    ]


def check_piece(data: memoryview, frames: Sequence[Frame], where: str, piece: tuple[int, Frame, int]) -> None:
    """Compare the CRC-32 of one piece of raw content (``raw_pieces``) with the header's."""
    place, frame, number = piece
    start = frame.data_offset + number * RAW_CRC_PIECE
    end = min(start + RAW_CRC_PIECE, frame.data_offset + frame.content_size)
    if zlib.crc32(data[start:end]) != frame.crcs[number]:
        raise ChecksumMismatchError(
            f"{_label(frames, place, where)} is damaged: CRC-32 of its content bytes "
            f"{start - frame.data_offset:,} to {end - frame.data_offset:,} differs from the header's{DAMAGED}"
        )


def check_raw(data: memoryview, frames: Sequence[Frame], where: str, threads: int | None) -> None:
    """Compare the CRC-32 of every piece of every raw frame's content with the header's, in parallel."""
    pieces = raw_pieces(frames)
    run_parallel(lambda index: check_piece(data, frames, where, pieces[index]), range(len(pieces)), threads)


def decode_into(
    data: memoryview, frames: Sequence[Frame], out: memoryview, where: str, threads: int | None
) -> None:
    """Decode ``frames`` (all of one section) into ``out`` at their content offsets, in parallel.

    zstd checks each frame's content checksum as it finishes it: damage raises
    ``ChecksumMismatchError`` naming the frame.
    """

    def one(index: int) -> None:
        frame = frames[index]
        target = out[frame.content_offset : frame.content_offset + frame.content_size]
        if frame.codec == "raw":
            target[:] = data[frame.data_offset : frame.data_offset + frame.content_size]
            return
        try:
            _decompress_frame(data[frame.offset : frame.offset + frame.size], target)
        except (zstandard.ZstdError, ValueError) as exc:
            raise ChecksumMismatchError(
                f"{_label(frames, index, where)} is damaged ({exc}){DAMAGED}"
            ) from None

    run_parallel(one, range(len(frames)), threads)


def decode_frame(data: memoryview, frame: Frame, where: str) -> bytes:
    """One zstd frame (a small graph section) as new ``bytes``, in one call: no buffer to fill, no
    stream to set up (a 30 kB ORT graph: 8-35 us less per load than ``decode_into``). zstd checks
    the content checksum; ``check_frames`` already proved the frame declares its size and one."""
    try:
        content = _decompressor().decompress(
            data[frame.offset : frame.offset + frame.size],
            max_output_size=frame.content_size,
            allow_extra_data=False,
        )
    except zstandard.ZstdError as exc:
        raise ChecksumMismatchError(f"{_label([frame], 0, where)} is damaged ({exc}){DAMAGED}") from None
    if len(content) != frame.content_size:
        raise ChecksumMismatchError(
            f"{_label([frame], 0, where)} is damaged (it holds {len(content):,} of "
            f"{frame.content_size:,} bytes){DAMAGED}"
        )
    return content


def _decompress_frame(frame: memoryview, target: memoryview) -> None:
    # Feed the whole frame at once: the default 128 KiB input steps halve the throughput.
    reader = _decompressor().stream_reader(frame, read_size=max(len(frame), 1), read_across_frames=False)
    filled = 0
    while filled < len(target):
        count = reader.readinto(target[filled:])
        if count == 0:
            raise ValueError(f"frame ends after {filled:,} of {len(target):,} bytes")
        filled += count
    # The last read consumes the end of the frame, where zstd compares the content checksum.
    if reader.readinto(bytearray(1)) != 0:
        raise ValueError("frame holds more than its declared content size")


_LOCAL = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """One decompression context per thread, reused: making one costs more than a small frame."""
    context = getattr(_LOCAL, "decompressor", None)
    if context is None:
        context = _LOCAL.decompressor = zstandard.ZstdDecompressor()
    return context


def run_parallel(task: Callable[[int], None], indices: range, threads: int | None) -> None:
    """``task(i)`` for every index, on up to ``threads`` threads; the first error is raised."""
    workers = min(len(indices), threads if threads is not None else default_threads())
    if workers <= 1 or threading.current_thread().name.startswith(_POOL_PREFIX):
        # inline on a pool thread: waiting there for tasks queued behind it could wait for ever
        for index in indices:
            task(index)
        return
    pool = _pool(workers)
    futures = [pool.submit(task, index) for index in indices]
    try:
        for future in futures:
            future.result()
    finally:  # on an error, drop what has not started and wait for what has (it writes our buffers)
        for future in futures:
            future.cancel()
        wait(futures)


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOL_PREFIX = "blob-decode"
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One lasting pool per size: starting threads for every blob would cost more than small blobs
    take to decode. Tasks never submit tasks, so callers sharing a pool cannot deadlock."""
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=_POOL_PREFIX)
        return pool


def helper(task: Callable[[], None]) -> Future[None]:
    """``task()`` on a lasting pool thread, for work beside the caller's (``rawcheck.Beside``): a
    new thread costs 100-130 us to start and join, a task to the pool and back about 60 us. The task
    must submit none of its own (the pool's rule)."""
    return _pool(default_threads()).submit(task)


def _forget_pools() -> None:
    """In a forked child: the parent's pool threads do not exist there, and its pools would queue
    tasks that never run (the child's next blob of several frames hung for good: a game server
    that loads its models and then forks its workers, ``multiprocessing``'s default on Linux before
    Python 3.14). The child makes its own pools on first use."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def new_bytes(size: int) -> tuple[memoryview, Callable[[], bytes]]:
    """A writable view of ``size`` new bytes, and the function that returns them as ``bytes``.

    onnxruntime's Python API takes a model only as ``bytes``. Filling a fresh, not yet shared bytes
    object through the C API (``PyBytes_FromStringAndSize(NULL, n)``, made for exactly this) saves a
    whole copy of the model. Elsewhere than CPython, a bytearray is filled, then copied once.
    """
    if size > 1 and sys.implementation.name == "cpython":
        obj = _PY_BYTES_FROM_SIZE(None, size)
        address = _PY_BYTES_AS_STRING(obj)
        _ask_for_huge_pages(address, size)
        view = memoryview((ctypes.c_char * size).from_address(address)).cast("B")
        return view, lambda: obj
    buffer = bytearray(size)
    return memoryview(buffer), lambda: bytes(buffer)


_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14


def _ask_for_huge_pages(address: int, size: int) -> None:
    """On Linux, back a big new buffer with transparent huge pages where the system allows it (as numpy
    does for its big arrays): filling 268 MB then takes a few thousand page faults, not 65,000
    (measured here: 55 ms instead of 150-190 ms). Advice only; any failure is ignored."""
    if _MADVISE is None or size < 4 * _HUGE_PAGE:
        return
    start = -(-address // _HUGE_PAGE) * _HUGE_PAGE
    end = (address + size) // _HUGE_PAGE * _HUGE_PAGE
    if end > start:
        _MADVISE(start, end - start, _MADV_HUGEPAGE)


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


_MADVISE = _libc_madvise()

if sys.implementation.name == "cpython":
    _PY_BYTES_FROM_SIZE = ctypes.pythonapi.PyBytes_FromStringAndSize
    _PY_BYTES_FROM_SIZE.restype = ctypes.py_object
    _PY_BYTES_FROM_SIZE.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    _PY_BYTES_AS_STRING = ctypes.pythonapi.PyBytes_AsString
    _PY_BYTES_AS_STRING.restype = ctypes.c_void_p
    _PY_BYTES_AS_STRING.argtypes = (ctypes.py_object,)
