"""Checking a blob's raw content beside onnxruntime: its CRC-32s read while onnxruntime builds the
session (``session_from_blob``), in one zlib call per raw frame where onnxruntime holds the GIL,
else piece by piece, by a thread and then by the caller too once onnxruntime is done."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import wait

from .constants import ModelFormat
from .errors import ChecksumMismatchError, CorruptBlobError
from .frames import RAW_CRC_PIECE, Frame, check_piece, check_raw, crc_count, helper, raw_pieces

# With low_memory (no prepacking) a session over this much raw content is checked first, on every
# core, instead of beside the build: onnxruntime builds an in-place session in a few milliseconds
# (an ORT model's graph is saved optimized), and its new intra-op threads then spin (about 35 ms of a
# core each, measured: 1.24.4 and 1.32), taking the cores the check beside them needs. An ONNX build
# optimizes the graph again, which hides more of it. Medians of alternating rounds from bytes,
# checked first / beside: the 268 MB MatMul model 37 / 62 ms (ORT, 1.32), 42 / 68 (ONNX, 1.24.4);
# ORT U-Net (58 MB) 12 / 19 (1.32), 11 / 17 (1.28); ORT MatMul stacks of 16 and 32 MB 4.5 / 6.6 and
# 8.2 / 11.4; ONNX U-Net 142 / 125 (1.24.4), whose layout pass rewrites every conv weight.
# docs/design.md, "Where load time goes".
LOW_MEMORY_CHECK_FIRST_MIN = {ModelFormat.ORT: 16 << 20, ModelFormat.ONNX: 64 << 20}


def whole_crcs(frames: Sequence[Frame], where: str = "blob") -> list[tuple[Frame, int]]:
    """Each raw frame with the CRC-32 of its whole content, combined from its pieces' CRC-32s (as
    zlib's ``crc32_combine``: no byte is read). For ``check_whole``."""
    found = []
    for frame in frames:
        if frame.codec != "raw":
            continue
        if len(frame.crcs) != crc_count(frame.content_size):  # the layout check refuses it first
            raise CorruptBlobError(f"{where}: a raw {frame.section} frame lists the wrong number of CRC-32s")
        crc = frame.crcs[0] if frame.crcs else 0
        for piece in range(1, len(frame.crcs)):
            length = min(RAW_CRC_PIECE, frame.content_size - piece * RAW_CRC_PIECE)
            shift = _X8_PIECE if length == RAW_CRC_PIECE else _x8nmodp(length)
            crc = _multmodp(shift, crc) ^ frame.crcs[piece]
        found.append((frame, crc))
    return found


def check_whole(
    data: memoryview, expected: Sequence[tuple[Frame, int]], frames: Sequence[Frame], where: str
) -> None:
    """``check_raw`` in one ``zlib.crc32`` call per raw frame (``expected`` from ``whole_crcs``):
    zlib releases the GIL for the whole call, so the check runs beside an onnxruntime that holds the
    GIL while it builds a session (1.24.4 and 1.28.0 do: a check piece by piece would wait for it).
    On a mismatch, ``check_raw`` names the damaged piece."""
    for frame, crc in expected:
        if zlib.crc32(data[frame.data_offset : frame.data_offset + frame.content_size]) != crc:
            check_raw(data, frames, where, 1)
            raise ChecksumMismatchError(
                f"{where}: the CRC-32 of its raw {frame.section} differs from the header's"
            )


# CRC-32 arithmetic, as zlib's crc32_combine does it: polynomials over GF(2) with bit 31 the x^0
# term (CRC-32 is bit-reflected), multiplied modulo the CRC-32 polynomial.
_CRC_POLY = 0xEDB88320


def _multmodp(a: int, b: int) -> int:
    """a(x) * b(x) modulo the CRC-32 polynomial."""
    m, product = 1 << 31, 0
    while True:
        if a & m:
            product ^= b
            if a & (m - 1) == 0:
                return product
        m >>= 1
        b = (b >> 1) ^ _CRC_POLY if b & 1 else b >> 1


def _x8nmodp(n: int) -> int:
    """x^(8n) modulo the CRC-32 polynomial: appending n zero bytes to a message multiplies its CRC
    (pre- and post-conditioning aside) by it, for ``n`` up to ``RAW_CRC_PIECE`` (a piece's length).
    One product per set bit of ``n``, from the table of x^(8 * 2^k): squaring anew on each call
    took a load 0.1 ms for the last piece of a raw frame."""
    product, k = 1 << 31, 0
    while n:
        if n & 1:
            product = _multmodp(_X8_POWERS[k], product)
        n >>= 1
        k += 1
    return product


def _x8_powers(count: int) -> tuple[int, ...]:
    """x^(8 * 2^k) modulo the CRC-32 polynomial, for k = 0 .. count - 1."""
    square = 1 << 30  # x^1, squared three times: x^8
    for _ in range(3):
        square = _multmodp(square, square)
    powers = []
    for _ in range(count):
        powers.append(square)
        square = _multmodp(square, square)
    return tuple(powers)


# Up to x^(8 * RAW_CRC_PIECE): every length a piece can have (made at import, as the squarings for
# _X8_PIECE were before: a table of 64 would add 0.15 ms to ``import onnx_cooker.runtime``).
_X8_POWERS = _x8_powers(RAW_CRC_PIECE.bit_length())
_X8_PIECE = _x8nmodp(RAW_CRC_PIECE)


class Background:
    """``task()`` on a thread of its own (not the decoding pool: the task itself uses that pool)."""

    def __init__(self, task: Callable[[], None]) -> None:
        self._error: BaseException | None = None

        def run() -> None:
            try:
                task()
            except BaseException as exc:  # handed to result(), on the caller's thread
                self._error = exc

        self._thread = threading.Thread(target=run, name="onnx-cooker-crc", daemon=True)
        self._thread.start()

    def result(self) -> None:
        """Wait for the task; raise what it raised."""
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class Beside:
    """The CRC-32 check of every piece of raw content, taken piece by piece by a lasting pool thread
    (``frames.helper``) while onnxruntime builds the session, and by the caller's thread too once
    ``result`` is called (onnxruntime done): where onnxruntime lets go of the GIL (1.32+), both
    cores finish what the build did not hide (a 45 MB ResNet-18 builds in 3 ms; its 45 MB of CRC
    take 8 on one core). A helper still queued behind other loads' work when the caller is done is
    cancelled: the caller has checked every piece itself."""

    def __init__(
        self, data: memoryview, frames: Sequence[Frame], where: str, release: Callable[[], None]
    ) -> None:
        self._check = lambda piece: check_piece(data, frames, where, piece)
        self._release = release  # the view ``data`` is, once every piece is checked
        self._pieces = iter(raw_pieces(frames))
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._stop = False
        self._helper = helper(self._work)

    def _take(self) -> tuple[int, Frame, int] | None:
        """The next piece to check; None when none is left or one was found damaged."""
        with self._lock:
            return None if self._errors else next(self._pieces, None)

    def _work(self) -> None:
        while not self._stop and (piece := self._take()) is not None:
            try:
                self._check(piece)
            except BaseException as exc:  # handed to result(), on the caller's thread
                self._errors.append(exc)

    def result(self) -> None:
        """Check what is left with the thread; wait for it; raise the first error (an interrupt of
        the caller's own, such as KeyboardInterrupt, first of all)."""
        try:
            while (piece := self._take()) is not None:
                try:
                    self._check(piece)
                except Exception as exc:  # noqa: BLE001  a damaged piece: reported after the join
                    self._errors.append(exc)
        finally:
            self._stop = True  # an interrupt: the helper ends after its piece
            if not self._helper.cancel():
                wait((self._helper,))
            self._release()
        if self._errors:
            error = self._errors[0]
            self._errors.clear()
            raise error
