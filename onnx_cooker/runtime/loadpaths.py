"""How a checked blob reaches onnxruntime: the load paths, which one each onnxruntime can take, and
how each hands over the model without copying what it need not copy.

Measured with the PyPI wheels (docs/design.md, "Loading from memory"; a 100 MB MatMul model,
prepacking off, in place proven by zeroing the caller's buffer and seeing the outputs change):

| path | onnxruntime | weights |
|---|---|---|
| ``onnx-file-buffers``: the weights section as an in-memory external-data file, with
  ``session.use_external_initializer_file_buffers_directly`` | 1.32+ (older versions ignore the key
  and copy twice) | in place |
| ``onnx-shared-initializers``: each weight ``add_initializer``-ed over the blob, the graph's
  references pointed at ``/dev/null`` (onnxruntime only checks that the file exists) | the exact
  versions in ``SHARED_INITIALIZER_VERSIONS``, proven by the cook's runtime check and the tests:
  onnxruntime does not promise this | in place |
| ``onnx-external-initializers``: ``add_external_initializers`` + ``add_initializer`` | all | copied once
  while loading (``Graph::InjectExternalInitializedTensors``), then the blob's used in place |
| ``ort-mapped``: onnxruntime maps the model file itself (the blob file, whose flatbuffer starts it,
  or a sealed memfd), ``session.use_memory_mapped_ort_model`` + ``use_ort_model_bytes_for_initializers``
  | 1.28+ | in place |
| ``ort-shared-initializers``: a blob in memory: the flatbuffer in a sealed memfd without the bytes
  of its weights (holes), each weight ``add_initializer``-ed over the caller's buffer; a session that
  read a hole is thrown away for ``ort-mapped`` (``ortweights.py``) | the exact versions in
  ``ORT_SHARED_VERSIONS``, CPU EP only unless asked for | in place |
| ``ort-file``: onnxruntime reads that file | before 1.28 | its own copy |
| ``ort-bytes``: ``InferenceSession(bytes)`` | all (no memfd: not Linux) | four copies |

Graph-only ONNX blobs go as ``onnx-inline`` (the graph as bytes). Nothing is written to a disk:
a memfd is memory. Every external-data reference of an ONNX graph is checked first
(``onnxrefs.check_references``).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import replace

import onnxruntime

from .blob import CheckedBlob, check_blob, tensor_view
from .compat import parse_version
from .constants import LEGACY_BLOB_FORMAT_VERSION, ModelFormat
from .devices import CPU, SessionPlan
from .errors import CorruptBlobError
from .files import has_memfd
from .graphcheck import check_header_tensors, check_weight_graph
from .loadtypes import BlobFile, LoadPath, Prepared
from .onnxrefs import check_and_rewrite, check_references
from .ortload import leading_graph, prepare_ort
from .pager import can_page
from .proven import proven

FILE_BUFFERS_SINCE = (1, 32, 0)
ORT_MAPPING_SINCE = (1, 28, 0)
# onnxruntime builds proven (tests/test_load_paths.py, every cook's runtime check) to build a CPU
# session of an ORT model from shared initializers without reading the graph's own copy of them:
# the memfd then needs none of their bytes (268 MB from bytes: 256 ms against 415 ms copying them,
# the file 261 ms; prepacking off 1.2 ms against 110 ms). onnxruntime does not promise it.
ORT_SHARED_VERSIONS = frozenset({(1, 28, 0), (1, 32, 0)})
# onnxruntime builds in which a shared initializer is used in place while its external-data
# reference only has to name an existing file: each proven by tests/test_load_paths.py in that
# exact version (and by a cook's runtime check for its platform). Other versions copy instead.
SHARED_INITIALIZER_VERSIONS = frozenset({(1, 24, 4), (1, 28, 0), (1, 32, 0)})
NULL_FOLDER, NULL_FILE = "/dev", "null"
# TensorProto data types the rule of optimizers_read_weights names: float32 (4-D: Conv kernels), and
# the 16-bit floats (any rank), which the CPU EP mostly runs through Casts it folds at load
_FLOAT, _HALF_FLOATS = 1, frozenset({10, 16})  # FLOAT; FLOAT16, BFLOAT16
# Below this, onnxruntime's byte path loads an ORT model faster than a mapping does (measured: a
# 2 kB model 0.36 ms from bytes, 0.45 ms mapped; from 2 MB up the mapping wins, by 2.5-5x at 64 MB
# in a fresh process, where every copy lands in fresh pages): copies of small models cost nothing.
SMALL_ORT_MODEL = 1 << 20
# From this size of raw ONNX weights, Bundle.session lets onnxruntime map them from the blob file
# (onnx-mapped) where its own mapping cannot be paged (before 1.32, or not Linux): with prepacking
# on, memory the loader lends stays beside the packed copy (peak 2.0x the model), a file onnxruntime
# maps itself goes after packing (1.3x, the source file's). From 1.32 on Linux the loader's own
# mapping goes in place and ExtentPager lets its read pages go while the session is built (268 MB:
# peak 1.12x, at the file's time). Below it, and with prepacking off, the views of the loader's own
# mapping load faster (measured: a 45 MB ResNet-18 in 12 ms against 19 ms mapped by onnxruntime,
# which faults every page in again). Not before 1.32: onnxruntime 1.24.4 and 1.28.0 hold the GIL
# while they build a session, so no Python pager thread runs until the build is over (shared
# initializers over the loader's mapping: peak 2.03x; the native library's C pager gets 1.12x there).
MAPPED_WEIGHTS_MIN = 64 << 20
# Before 1.32 a bundle's raw weights go onnx-mapped at any size (prepacking on) where 1.24.4 and
# 1.28.0 would refuse the shared door (conv nets: optimizers_read_weights): copying costs a first load
# more (1.24.4, Bundle.session, first loads in fresh processes, copying / mapped: MobileNet 29.7 / 22.5
# ms, ResNet-18 52.0 / 43.0, PP-OCRv4 det 42.9 / 38.8). Where the door opens, weights under
# MAPPED_WEIGHTS_MIN are shared from the loader's mapping (shared / mapped, first and later loads:
# transformer 35.0 / 36.7 and 19.6 / 22.6 ms, LSTM 12.3 / 14.6 and 3.5 / 3.8). See bundle-format.md.
# onnxruntime builds proven to resolve the references of onnx-mapped in the folder the session
# entry names (tests/test_load_paths.py, every cook's runtime check): one that ignored the entry
# would look for the blob's name in the current directory instead.
MAPPED_VERSIONS = frozenset({(1, 24, 4), (1, 28, 0), (1, 32, 0)})
# Raw content from this size is CRC-checked on a lasting pool thread (frames.helper) while onnxruntime
# builds the session; below it, handing the work over costs more than the check (a 100 kB model's CRC
# takes about 40 us; a task to the helper and back about 60 us, a new thread about 100 us, medians of
# 2,000 here). Measured, 1.32, an LSTM with 3.5 MB of weights: 2.86 ms checked first, 2.16 beside.
DEFER_RAW_CHECK_MIN = 512 << 10
# Where onnxruntime holds the GIL while it builds a session (1.24.4, 1.28.0), the thread beside it
# costs a small model a lot: a 1.1 MB MatMul model, 9 fresh processes each, medians 4.8 / 4.7 ms
# checked first against 5.4 / 6.4 ms beside (1.24.4 / 1.28.0; several loads took 5 ms more, Python's
# GIL switch interval), while 1.32 gains (4.1 -> 3.8 ms). There only large content goes beside (the
# 268 MB model: its 64 ms of CRC hidden).
DEFER_RAW_CHECK_MIN_GIL_HELD = 4 << 20
GIL_RELEASED_SINCE = (1, 32, 0)


def defer_raw_check_min(version: str) -> int:
    """The raw-content size from which ``session_from_blob`` checks CRCs beside onnxruntime ``version``."""
    released = parse_version(version) >= GIL_RELEASED_SINCE
    return DEFER_RAW_CHECK_MIN if released else DEFER_RAW_CHECK_MIN_GIL_HELD


def has_null_file() -> bool:
    return os.name == "posix" and os.path.exists(os.path.join(NULL_FOLDER, NULL_FILE))


def choose_load_path(
    checked: CheckedBlob,
    version: str = onnxruntime.__version__,
    *,
    model_file: BlobFile | None = None,
    low_memory: bool = False,
) -> LoadPath:
    """The fastest path proven for this blob's format, this onnxruntime version and this OS (for
    weights of ``MAPPED_WEIGHTS_MIN`` and more from a blob file, with prepacking on: the leanest;
    before 1.32, without onnx-file-buffers, any raw weights from a blob file that the shared door
    would refuse)."""
    installed = parse_version(version)
    header = checked.header
    if header.model_format == ModelFormat.ORT:
        small = (header.graph_size or header.model_size) < SMALL_ORT_MODEL
        old = header.version == LEGACY_BLOB_FORMAT_VERSION  # one zstd frame: decoded to bytes anyway
        if small or old or not (has_memfd() or leading_graph(checked, model_file)):
            return LoadPath.ORT_BYTES
        if installed < ORT_MAPPING_SINCE:
            return LoadPath.ORT_FILE
        if installed in ORT_SHARED_VERSIONS and why_not_shared(checked, model_file) is None:
            return LoadPath.ORT_SHARED_INITIALIZERS
        return LoadPath.ORT_MAPPED
    if header.weights is None:
        return LoadPath.ONNX_INLINE
    mappable = model_file is not None and model_file.by_name and installed in MAPPED_VERSIONS
    extent = checked.extent("weights") if mappable and not low_memory else None
    # From 1.32 the loader's own mapping goes in place, its read pages let go while onnxruntime
    # builds the session (ExtentPager): as lean as onnx-mapped, and no reopening by name.
    paged = installed >= FILE_BUFFERS_SINCE and can_page()
    buffers = installed >= FILE_BUFFERS_SINCE and checked.weights_contiguous()
    # asked only where file-buffers is not taken; before 1.32 mapped unless the shared door opens
    shared = not buffers and has_null_file() and installed in SHARED_INITIALIZER_VERSIONS
    shared = shared and not optimizers_read_weights(checked)
    before = installed < FILE_BUFFERS_SINCE and not shared
    by_file = extent is not None and (len(extent) >= MAPPED_WEIGHTS_MIN or before)
    if by_file and not paged:
        return LoadPath.ONNX_MAPPED
    if buffers:
        return LoadPath.ONNX_FILE_BUFFERS
    if shared:
        return LoadPath.ONNX_SHARED_INITIALIZERS
    return LoadPath.ONNX_EXTERNAL_INITIALIZERS


def optimizers_read_weights(checked: CheckedBlob) -> bool:
    """Whether onnxruntime's optimizers will read the blob's weights from the referenced file while
    they build a CPU session, so that the shared-initializer door is refused ("cannot get file size
    [/dev/null]") after a try that costs a first load a third of its time: float32 4-D weights
    (Conv kernels: Conv+BatchNormalization fusion, the NCHWc layout), and float16 or bfloat16
    weights of any rank (the CPU EP has few 16-bit kernels, so it puts Casts around those nodes and
    constant folding reads the weight). Measured in 1.24.4 on the 31 real and bench models with a
    weights section: the door was refused for 20, all with such weights (19 float32 4-D, an fp16
    ISNet); it opened for 11, 10 without (an int8 conv net, VADs, MLPs, an LSTM, a transformer), a
    uint8 ISNet with some float kernels. First loads in a fresh process, with the refused try
    against straight along the copying door: a PP-OCRv6 detector 44-51 / 30-31 ms, the fp16 ISNet
    505-526 / 483-502 ms. A float16 Conv and a float16 MatMul are refused in 1.24.4 and 1.28.0 too;
    a float16 weight only a Concat reads is not (it now copies). A refusal this misses is still
    answered by the try, and remembered (``session._REFUSED``)."""
    weights = checked.header.weights
    return weights is not None and any(
        (t.elem_type == _FLOAT and len(t.dims) == 4) or t.elem_type in _HALF_FLOATS for t in weights.tensors
    )


def why_not(path: LoadPath, checked: CheckedBlob, version: str, model_file: BlobFile | None) -> str | None:
    """Why ``path`` cannot load this blob here (None: it can), for a path the caller asked for."""
    header = checked.header
    onnx_path = path.value.startswith("onnx-")
    if onnx_path != (header.model_format == ModelFormat.ONNX):
        kind = "ONNX" if onnx_path else "ORT-format"
        return f"it is for {kind} models, and this blob holds {header.model_format}"
    installed = parse_version(version)
    if path == LoadPath.ONNX_INLINE and header.weights is not None:
        return "the blob has a weights section"
    if path in (
        LoadPath.ONNX_FILE_BUFFERS,
        LoadPath.ONNX_SHARED_INITIALIZERS,
        LoadPath.ONNX_EXTERNAL_INITIALIZERS,
        LoadPath.ONNX_MAPPED,
    ):
        if header.weights is None:
            return "the blob has no weights section"
    if path == LoadPath.ONNX_MAPPED:
        if model_file is None:
            return "it maps the blob file: Bundle.session's, not bytes in memory"
        if not model_file.by_name:
            return (
                "onnxruntime would open the blob file by name, which this load does not allow (a signed "
                "bundle's checked file, or a MemoryBlob's memfd, which has no name in a folder)"
            )
        if installed not in MAPPED_VERSIONS:
            return f"onnxruntime {version} is not one of the versions proven to resolve its references"
        if checked.extent("weights") is None:
            return "the blob's weights are not one raw extent (zstd frames, or an old blob)"
    if path == LoadPath.ONNX_FILE_BUFFERS:
        if installed < FILE_BUFFERS_SINCE:
            return f"onnxruntime {version} ignores use_external_initializer_file_buffers_directly (1.32+)"
        if not checked.weights_contiguous():
            return "the blob's weights are not one contiguous buffer (an old blob with several raw frames)"
    if path == LoadPath.ONNX_SHARED_INITIALIZERS and not has_null_file():
        return f"there is no {NULL_FOLDER}/{NULL_FILE} on this system"
    mapped = (LoadPath.ORT_MAPPED, LoadPath.ORT_SHARED_INITIALIZERS)
    if path in mapped and installed < ORT_MAPPING_SINCE:
        return f"onnxruntime {version} has no session.use_memory_mapped_ort_model (1.28+)"
    if path == LoadPath.ORT_SHARED_INITIALIZERS and (reason := why_not_shared(checked, model_file)):
        return reason
    if path in (*mapped, LoadPath.ORT_FILE) and header.version == LEGACY_BLOB_FORMAT_VERSION:
        return "a version-1 blob's model is one zstd frame: it loads from bytes (ort-bytes)"
    if path in (*mapped, LoadPath.ORT_FILE) and not (has_memfd() or leading_graph(checked, model_file)):
        return "the model is not the start of a blob file, and this system has no memfd"
    return None


def why_not_shared(checked: CheckedBlob, model_file: BlobFile | None) -> str | None:
    """Why ``ort-shared-initializers`` cannot load this ORT blob (None: it can, version aside)."""
    if checked.header.version == LEGACY_BLOB_FORMAT_VERSION or checked.extent("graph") is None:
        return "the blob's graph is not one raw extent (zstd frames, or a version-1 blob)"
    if leading_graph(checked, model_file):
        return "onnxruntime maps the blob file itself, weights and all, in place (ort-mapped)"
    if not has_memfd():
        return "it needs a memfd (Linux)"
    return None


def no_sharing(plan: SessionPlan, session_options: onnxruntime.SessionOptions | None) -> str | None:
    """Why ``ort-shared-initializers`` is not for a session with this plan and these options, or None."""
    cpu_only = plan.providers is not None and not plan.devices and plan.policy is None
    if not cpu_only or plan.names != (CPU,):
        # another EP may use the graph's copy of a weight (a hole) when the session runs, or refuse a
        # shared value on its device, not only while it is built, where a read is seen
        return "it is proven for the CPU EP alone (pass providers=['CPUExecutionProvider'])"
    if session_options is not None and session_options.optimized_model_filepath:
        return "the session options save the optimized model, which reads every weight of the graph"
    return None


def prepare(
    path: LoadPath,
    checked: CheckedBlob,
    options: onnxruntime.SessionOptions,
    model_file: BlobFile | None = None,
) -> Prepared:
    """Set up ``options`` (and the model argument) for loading ``checked`` along ``path``. A graph
    its checks refuse is named by the blob it came from (its model and platform)."""
    try:
        return _prepare(path, checked, options, model_file)
    except CorruptBlobError as exc:
        if str(exc).startswith(checked.where):
            raise
        raise CorruptBlobError(f"{checked.where}: {exc}") from None


def _prepare(
    path: LoadPath, checked: CheckedBlob, options: onnxruntime.SessionOptions, model_file: BlobFile | None
) -> Prepared:
    if path.value.startswith("ort-"):
        return prepare_ort(path, checked, options, model_file)
    graph = checked.graph_bytes()
    weights = checked.header.weights
    file = weights.file if weights else None
    # a graph checked before against the same header is not walked again (proven.py)
    against = (file, weights.tensors if weights else ())
    # the paths that rewrite the references, or take the weights from the header, check them in
    # the same walk (onnxrefs.check_and_rewrite, graphcheck.check_weight_graph)
    own_check = (LoadPath.ONNX_SHARED_INITIALIZERS, LoadPath.ONNX_MAPPED, LoadPath.ONNX_EXTERNAL_INITIALIZERS)
    if weights is None or path not in own_check:
        proven("references", graph, against, lambda: check_references(graph, file, _extents(checked)))
    if path == LoadPath.ONNX_INLINE or weights is None:
        return Prepared(graph)
    if path == LoadPath.ONNX_MAPPED:
        assert model_file is not None
        return _prepare_mapped(graph, checked, options, model_file, against)
    segments = checked.weight_segments()
    if path == LoadPath.ONNX_FILE_BUFFERS:
        (_, buffer) = segments[0]
        options.add_session_config_entry("session.use_external_initializer_file_buffers_directly", "1")
        options.add_external_initializers_from_files_in_memory([weights.file], [buffer], [len(buffer)])
        return Prepared(graph, keep=[buffer], own_pages=_own_pages(checked))
    # onnxruntime takes these tensors' types and shapes from the header: they must be the graph's
    if path == LoadPath.ONNX_SHARED_INITIALIZERS:

        def nulling() -> bytes:
            nulled = check_and_rewrite(graph, weights.file, _extents(checked), NULL_FILE)
            check_header_tensors(graph, weights.tensors)
            return nulled

        nulled = proven("shared", graph, against, nulling)
    else:
        proven("weights", graph, against, lambda: check_weight_graph(graph, weights.file, weights.tensors))
    values = [onnxruntime.OrtValue.ortvalue_from_numpy(tensor_view(segments, ref)) for ref in weights.tensors]
    names = [ref.name for ref in weights.tensors]
    for name, value in zip(names, values, strict=True):
        options.add_initializer(name, value)
    if path == LoadPath.ONNX_EXTERNAL_INITIALIZERS:  # satisfies the references (copied once)
        options.add_external_initializers(names, values)
        return Prepared(graph, keep=[segments, values])

    def copying(why: str) -> Prepared:
        # onnxruntime 1.24.4 and 1.28.0 refuse the door for models whose optimizers read initializer
        # data from the referenced file (conv nets: "cannot get file size [/dev/null]"; /dev/null
        # holds nothing, so such a read always fails, never reads wrong data). The same options,
        # completed: the real references, satisfied from memory.
        options.add_external_initializers(names, values)
        return Prepared(graph, keep=[segments, values], path=LoadPath.ONNX_EXTERNAL_INITIALIZERS)

    options.add_session_config_entry("session.model_external_initializers_file_folder_path", NULL_FOLDER)
    return Prepared(nulled, keep=[segments, values], fallback=copying)


def _extents(checked: CheckedBlob) -> dict[str, tuple[int, int]]:
    """Each weight's (offset, bytes) in the weights section, by name, as the reference checks take them."""
    weights = checked.header.weights
    return {t.name: (t.offset, t.nbytes) for t in weights.tensors} if weights else {}


def _own_pages(checked: CheckedBlob) -> tuple[mmap.mmap, int, int] | None:
    """The raw weights extent in ``Bundle.session``'s own mapping of the blob file, else None (the
    caller's memory is never advised: it may be anonymous, where dropping pages loses them)."""
    mapping = checked.own_mapping()
    frames = checked.frames("weights")
    if mapping is None or checked.extent("weights") is None:
        return None
    return mapping, frames[0].data_offset, frames[0].content_size


def _prepare_mapped(
    graph: bytes,
    checked: CheckedBlob,
    options: onnxruntime.SessionOptions,
    model_file: BlobFile,
    against: tuple[object, ...],
) -> Prepared:
    """onnxruntime maps the weights from the blob file itself, as it maps a loose ``.onnx.data``: each
    external-data reference names the blob file, at its tensor's offset in the raw extent (measured
    in 1.24.4, 1.28.0 and 1.32.0: the same time as the source file, and its pages are let go after
    prepacking, so the peak is the file's). A reference must be a name in a folder (onnxruntime
    refuses one that resolves outside it, so not ``/proc/self/fd/N``): the file's name is checked to
    still be the checked file before and after onnxruntime opens it."""
    weights = checked.header.weights
    assert weights is not None
    start = checked.frames("weights")[0].data_offset
    real = os.path.realpath(model_file.path)
    folder, name = os.path.split(real)
    _still_the_checked_file(model_file, real)
    mapped = proven(
        "mapped",
        graph,
        (*against, name, start),
        lambda: check_and_rewrite(
            graph,
            weights.file,
            _extents(checked),
            name,
            shift=start,
            lengths={t.name: t.nbytes for t in weights.tensors},  # exactly the header's extents
        ),
    )
    options.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
    checked.release()  # onnxruntime maps what it needs itself: ours would count its pages twice

    def copying(why: str) -> Prepared:
        # onnxruntime refused to map it (a file system it cannot map, say): the blob again from
        # the open descriptor, its weights satisfied from memory (the path every version takes).
        again = check_blob(mmap.mmap(model_file.fd, 0, access=mmap.ACCESS_READ), max_model_size=1 << 62)
        return replace(
            prepare(LoadPath.ONNX_EXTERNAL_INITIALIZERS, again, options),
            path=LoadPath.ONNX_EXTERNAL_INITIALIZERS,
        )

    return Prepared(mapped, fallback=copying, confirm=lambda: _still_the_checked_file(model_file, real))


def _still_the_checked_file(model_file: BlobFile, path: str) -> None:
    """Raise OSError unless ``path`` names the file open as ``model_file.fd`` (the one checked)."""
    held, named = os.fstat(model_file.fd), os.stat(path)
    if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
        raise OSError(f"{path} was replaced while it was loaded (another file now has its name)")
