"""The cooked blob: one self-describing model file, compressed where that pays (docs/bundle-format.md).

Version 3 (written today) holds two *sections*: the *graph* (the model file: ``.onnx`` whose big
initializers refer to external data, or ``.ort``) and the optional *weights* (those initializers as
aligned raw tensors). A section is either zstd frames of 1 MiB content (decoded in parallel, each
checked by its own checksum) or one contiguous raw *extent* whose content starts at a multiple of
64 KiB, so that a mapped blob file hands it to onnxruntime in place. The header is a zstd skippable
frame; a 16-byte trailer at the end of the blob gives its offset. The header starts the blob,
except for an ORT-format model stored raw: then the flatbuffer starts the blob (onnxruntime maps
such a file itself, ignoring the bytes after the flatbuffer) and the header follows it.

Version 2 (read for old bundles): the header frame first, then frames laid end to end; raw content
in skippable frames of at most 1 MiB (graph) or runs of whole tensors (weights).
Version 1 (read for old bundles): the header frame, then one zstd frame holding the model file.
Stock ``zstd`` does not give the model of a version-3 (or a mixed version-2) blob: the files are
named ``.ocb``; ``python -m onnx_cooker.runtime unpack`` (or ``inspect``'s stock-tool recipe) does.

This module checks a whole blob's layout and decodes its sections (``check_layout``, ``check_blob``,
``unpack_blob``, tensor views); the header is read in ``header``, its layout fields in ``sections``,
frames in ``frames``.
"""

from __future__ import annotations

import bisect
import hashlib
import mmap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from .constants import LEGACY_BLOB_FORMAT_VERSION, TWO_GIB, V2_BLOB_FORMAT_VERSION
from .errors import (
    DAMAGED,
    BlobTooLargeError,
    ChecksumMismatchError,
    CorruptBlobError,
    TruncatedBlobError,
)
from .frames import (
    Frame,
    check_frames,
    decode_frame,
    decode_into,
    default_threads,
    new_bytes,
)
from .frames import (
    check_raw as check_raw_frames,
)
from .header import (
    _TRAILER,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    BlobHeader,
    _header_start,
    check_graph_kind,
    read_header,
)
from .rawcheck import Beside, check_whole
from .sections import TENSOR_DTYPES, TensorRef

# A graph of one zstd frame up to this size is decoded in one call (frames.decode_frame): a load's
# fixed cost for small models. Larger ones are decoded into a buffer filled in place (no copy).
SMALL_FRAME = 1 << 20
# Models of up to 2 GiB load by default; a model with external weights may be larger (raise the limit).
DEFAULT_MAX_MODEL_SIZE = TWO_GIB


@dataclass(frozen=True)
class Unpacked:
    """A checked, decoded blob: its header, the model file and, if it has one, its weights section.

    ``segments`` hold the weights section as (offset in the section, read-only view) pairs: views
    into the blob itself for raw frames (so the blob must stay alive while they are used), else one
    view of a buffer the frames were decompressed into.
    """

    header: BlobHeader
    model: bytes
    segments: tuple[tuple[int, memoryview], ...] = ()

    def tensor(self, ref: TensorRef) -> np.ndarray:
        """The initializer ``ref`` as a read-only numpy array over the weights (no copy)."""
        return tensor_view(self.segments, ref)


def tensor_view(segments: Sequence[tuple[int, memoryview]], ref: TensorRef) -> np.ndarray:
    """The initializer ``ref`` as a read-only numpy array over the weights ``segments`` (no copy)."""
    for start, view in segments:
        if start <= ref.offset and ref.offset + ref.nbytes <= start + len(view):
            dtype = np.dtype(TENSOR_DTYPES[ref.elem_type])
            flat = np.frombuffer(
                view, dtype=dtype, count=ref.nbytes // dtype.itemsize, offset=ref.offset - start
            )
            return flat.reshape(ref.dims)
    raise CorruptBlobError(f"tensor {ref.name!r} does not lie whole in one weights frame")


def _where(header: BlobHeader) -> str:
    return f"blob of model {header.name!r} ({header.platform})"


def frames_end(header: BlobHeader, header_end: int) -> int:
    """Where the last frame (or the header frame) of a version-3 blob ends: the trailer starts there."""
    return max([header_end, *(f.offset + f.size for f in header.frames)])


def check_layout(
    data: bytes | bytearray | memoryview, *, max_model_size: int = DEFAULT_MAX_MODEL_SIZE
) -> tuple[BlobHeader, int]:
    """The checks of ``unpack_blob`` that need no decompression: the header (and its CRC), the
    declared sizes against ``max_model_size`` and the bytes present, and the frame layout. Returns
    the header and where the header frame ends. For callers that already hold the blob's sha256 from
    a trusted place (the cook cache) and need its header, not its model."""
    header, offset = read_header(data)
    view = memoryview(data).cast("B")
    where = _where(header)
    if header.model_size > max_model_size:
        raise BlobTooLargeError(
            f"{where} declares a {header.model_size:,}-byte model, over the limit of {max_model_size:,} "
            "bytes; raise max_model_size if the model is genuinely that large"
        )
    if header.version == LEGACY_BLOB_FORMAT_VERSION:
        return header, offset
    if header.version == V2_BLOB_FORMAT_VERSION:
        present, expected, what = len(view) - offset, header.compressed_size, "bytes of frames"
    else:
        present, expected, what = len(view), frames_end(header, offset) + TRAILER_SIZE, "bytes"
    if present < expected:
        raise TruncatedBlobError(f"{where} is cut off: {present:,} of {expected:,} {what} present{DAMAGED}")
    if present > expected:
        raise CorruptBlobError(f"{where} has {present - expected:,} unexpected trailing bytes{DAMAGED}")
    if header.version >= 3:
        magic, start = _TRAILER.unpack_from(view, len(view) - TRAILER_SIZE)
        if magic != TRAILER_MAGIC:
            raise TruncatedBlobError(
                f"{where} is cut off or damaged at its end: its trailer is missing{DAMAGED}"
            )
        if start != _header_start(view):
            raise CorruptBlobError(f"{where}: its trailer does not point at its header{DAMAGED}")
    check_frames(view, header.frames, where)
    # the header's format against the graph: a raw graph now, a zstd one once decoded (graph_bytes)
    first = next((f for f in header.frames if f.section == "graph"), None)
    if first is not None and first.codec == "raw":
        try:
            head = view[first.data_offset : first.data_offset + min(8, first.content_size)]
            check_graph_kind(header, head, where)
        except CorruptBlobError:  # damage explains it better, where that is what it is
            check_raw_frames(view, [f for f in header.frames if f.section == "graph"], where, 1)
            raise
    return header, offset


class CheckedBlob:
    """A blob whose header and layout were checked (``check_blob``): its sections on demand.

    Holds ``data`` (read-only views of it: the caller's bytes, bytearray or mmap stay borrowed, not
    copied). Raw sections are handed out as views; zstd sections are decoded when asked for.
    """

    def __init__(self, data: Any, header: BlobHeader, header_end: int, threads: int | None) -> None:
        self._views = [memoryview(data)]
        self._views.append(self._views[0].cast("B"))
        self.view = self._views[-1].toreadonly()
        self._source = data
        self.owns_source = False  # the caller's data is never closed; Bundle.session's own mapping is
        self.header = header
        self.header_end = header_end
        self._threads = threads
        self.where = _where(header)
        self._segments: tuple[tuple[int, memoryview], ...] | None = None

    @property
    def threads(self) -> int:
        """Decoding threads: the caller's, else one per core (asked of the OS only when needed)."""
        if self._threads is None:
            self._threads = default_threads()
        return self._threads

    def release(self) -> None:
        """Let go of the blob's bytes (after onnxruntime took what it needs from elsewhere, e.g. the
        blob file it maps itself): the views are released and an owned mapping is closed, so that
        its pages are not counted twice while onnxruntime maps the same file."""
        self.view.release()
        for view in reversed(self._views):
            view.release()
        if self.owns_source and hasattr(self._source, "close"):
            try:
                self._source.close()
            except BufferError:  # a view still held elsewhere: unmapped when it goes
                pass

    def own_mapping(self) -> mmap.mmap | None:
        """The loader's own read-only mapping of a blob file this blob was checked on (``owns_source``,
        set by ``Bundle.session``), else None: never the caller's memory."""
        source = self._source
        return source if self.owns_source and isinstance(source, mmap.mmap) and not source.closed else None

    def frames(self, section: str) -> list[Frame]:
        return [f for f in self.header.frames if f.section == section]

    def extent(self, section: str) -> memoryview | None:
        """The whole ``section`` as one view into the blob, if a version-3 raw extent stores it."""
        frames = self.frames(section)
        if self.header.version >= 3 and len(frames) == 1 and frames[0].codec == "raw":
            start = frames[0].data_offset
            return self.view[start : start + frames[0].content_size]
        return None

    def graph_into(self, target: memoryview) -> None:
        """Decode the graph section into ``target`` (``graph_size`` writable bytes)."""
        decode_into(self.view, self.frames("graph"), target, self.where, self.threads)
        check_graph_kind(self.header, target[:8], self.where)

    def graph_bytes(self, *, check_sha256: bool = True) -> bytes:
        """The model file as ``bytes`` (what onnxruntime's Python API takes): decoded, or copied once."""
        if self.header.version == LEGACY_BLOB_FORMAT_VERSION:
            graph = _decode_v1(
                self.view[self.header_end :], self.header, self.where, check_sha256=check_sha256
            )
            check_graph_kind(self.header, graph, self.where)
            return graph
        frames = self.frames("graph")
        if len(frames) == 1 and frames[0].content_size <= SMALL_FRAME:
            if frames[0].codec == "zstd":
                graph = decode_frame(self.view, frames[0], self.where)
                check_graph_kind(self.header, graph, self.where)
                return graph
            # one C-speed copy: no buffer to set up, no thread pool asked (a 4 kB graph: 40-80 us less)
            start = frames[0].data_offset
            return self.view[start : start + frames[0].content_size].tobytes()
        target, finish = new_bytes(self.header.graph_size or 0)
        self.graph_into(target)
        return finish()

    def weight_segments(self) -> tuple[tuple[int, memoryview], ...]:
        """The weights section as (offset in the section, read-only view) pairs (see ``Unpacked``);
        zstd frames are decoded on the first call only."""
        if self.header.weights is None:
            return ()
        if self._segments is None:
            extent = self.extent("weights")
            self._segments = (
                ((0, extent),)
                if extent is not None
                else _weight_segments(self.view, self.header, self.where, self.threads)
            )
        return self._segments

    def raw_bytes(self) -> int:
        """Bytes of raw content whose CRC-32s ``check_raw`` reads (0 for a version-1 blob)."""
        if self.header.version == LEGACY_BLOB_FORMAT_VERSION:
            return 0
        return sum(f.content_size for f in self.header.frames if f.codec == "raw")

    def check_raw(self, threads: int | None = None) -> None:
        """Compare the CRC-32s of every raw frame's content with the header's (what ``check_blob``
        does unless told not to) on ``threads`` threads (default: the blob's), on a view of its own:
        ``release`` elsewhere does not cut it off."""
        if self.header.version == LEGACY_BLOB_FORMAT_VERSION:
            return
        with memoryview(self._source) as whole, whole.cast("B") as view:
            check_raw_frames(view, self.header.frames, self.where, threads or self.threads)

    def check_whole(self, expected: Sequence[tuple[Frame, int]]) -> None:
        """``check_raw`` with one CRC-32 pass per raw frame, against ``frames.whole_crcs``'s values
        (see ``frames.check_whole``)."""
        if self.header.version == LEGACY_BLOB_FORMAT_VERSION:
            return
        with memoryview(self._source) as whole, whole.cast("B") as view:
            check_whole(view, expected, self.header.frames, self.where)

    def check_beside(self) -> Beside | None:
        """``check_raw`` piece by piece on a thread, which ``result()`` joins (``rawcheck.Beside``)."""
        if self.header.version == LEGACY_BLOB_FORMAT_VERSION:
            return None
        view = memoryview(self._source).cast("B")
        return Beside(view, self.header.frames, self.where, release=view.release)

    def weights_contiguous(self) -> bool:
        """Whether ``weight_segments`` gives one buffer, known without decoding anything: always in
        version 3; in version 2 unless the weights are several raw frames."""
        frames = self.frames("weights")
        return self.header.version >= 3 or len(frames) <= 1 or any(f.codec != "raw" for f in frames)


def check_blob(
    data: Any,
    *,
    max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
    threads: int | None = None,
    check_raw: bool = True,
) -> CheckedBlob:
    """Check a blob's header, layout and (``check_raw``) the CRC-32s of its raw content; decode
    nothing. ``data`` is anything exposing the buffer protocol: bytes, bytearray, memoryview, mmap."""
    header, offset = check_layout(data, max_model_size=max_model_size)
    checked = CheckedBlob(data, header, offset, threads)
    if check_raw and header.version != LEGACY_BLOB_FORMAT_VERSION:
        check_raw_frames(checked.view, header.frames, checked.where, checked.threads)
    return checked


def unpack_blob(
    data: bytes | bytearray | memoryview,
    *,
    max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
    threads: int | None = None,
    check_sha256: bool = True,
    check_raw: bool = True,
) -> Unpacked:
    """Check and decode a blob of any readable version, decompressing frames on ``threads`` threads
    (default: one per core).

    Never allocates more than the header declares, and refuses declarations over ``max_model_size``.
    Damage is caught by the header CRC, the frame layout, each zstd frame's content checksum and
    (``check_raw``) the CRC-32s of raw frames' content; callers that just checked the whole blob
    against a sha256 skip the last. ``check_sha256`` adds a sha256 pass over version-1 blobs, whose
    header has nothing else.
    """
    checked = check_blob(data, max_model_size=max_model_size, threads=threads, check_raw=check_raw)
    return Unpacked(checked.header, checked.graph_bytes(check_sha256=check_sha256), checked.weight_segments())


def _weight_segments(
    view: memoryview, header: BlobHeader, where: str, threads: int
) -> tuple[tuple[int, memoryview], ...]:
    """Raw frames whose tensors each lie whole in one frame are used in place; anything else is
    decoded into one new buffer."""
    assert header.weights is not None
    frames = [f for f in header.frames if f.section == "weights"]
    if all(f.codec == "raw" for f in frames):
        segments = tuple(
            (f.content_offset, view[f.data_offset : f.data_offset + f.content_size].toreadonly())
            for f in frames
        )
        starts = [start for start, _ in segments]
        if all(_within_one(ref, starts, segments) for ref in header.weights.tensors):
            return segments
    buffer = np.empty(header.weights.size, dtype=np.uint8)
    decode_into(view, frames, memoryview(buffer), where, threads)
    return ((0, memoryview(buffer).toreadonly()),)


def _within_one(ref: TensorRef, starts: list[int], segments: tuple[tuple[int, memoryview], ...]) -> bool:
    index = bisect.bisect_right(starts, ref.offset) - 1
    if index < 0:
        return False
    start, segment = segments[index]
    return ref.offset + ref.nbytes <= start + len(segment)


def _decode_v1(view: memoryview, header: BlobHeader, where: str, *, check_sha256: bool) -> bytes:
    if len(view) < header.compressed_size:
        raise TruncatedBlobError(
            f"{where} is cut off: {len(view):,} of {header.compressed_size:,} compressed bytes present"
        )
    if len(view) > header.compressed_size:
        raise CorruptBlobError(
            f"{where} has {len(view) - header.compressed_size:,} unexpected trailing bytes"
        )
    try:
        params = zstandard.get_frame_parameters(view)
    except zstandard.ZstdError as exc:
        raise ChecksumMismatchError(f"{where}: model frame is damaged ({exc})") from None
    if params.content_size != header.model_size or not params.has_checksum:
        raise ChecksumMismatchError(f"{where}: model frame does not match its header (damaged or modified)")
    try:
        model = zstandard.ZstdDecompressor().decompress(
            view, max_output_size=header.model_size, allow_extra_data=False
        )
    except zstandard.ZstdError as exc:
        raise ChecksumMismatchError(f"{where}: model data is damaged ({exc})") from None
    if len(model) != header.model_size:
        raise ChecksumMismatchError(
            f"{where}: the model frame holds {len(model):,} bytes, not {header.model_size:,}"
        )
    # Version 1 blobs keep their sha256 check: their header has no other proof of the whole model.
    if check_sha256 and hashlib.sha256(model).hexdigest() != header.model_sha256:
        raise ChecksumMismatchError(f"{where}: sha256 of the model bytes does not match the header")
    return model


def decode_blob(
    data: bytes | bytearray | memoryview,
    *,
    max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
    check_sha256: bool = True,
    threads: int | None = None,
) -> tuple[BlobHeader, bytes]:
    """Check and decompress a blob; returns its header and the model file (the graph section).

    For a blob with external weights the model file refers to them; ``unpack_blob`` gives both.
    """
    unpacked = unpack_blob(data, max_model_size=max_model_size, threads=threads, check_sha256=check_sha256)
    return unpacked.header, unpacked.model
