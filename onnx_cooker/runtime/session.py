"""Build a correctly configured onnxruntime session from a cooked blob held in memory."""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable, Mapping, Sequence

import onnxruntime

from .blob import DEFAULT_MAX_MODEL_SIZE, CheckedBlob, check_blob
from .compat import format_version, incompatibility, parse_version
from .devices import DeviceSelection, ProviderSpec, _register, plan_for
from .devices import choose_providers as choose_providers  # re-exported (tests, older callers)
from .errors import IncompatibleRuntimeError, SessionCreateError
from .header import BlobHeader
from .loadpaths import (
    GIL_RELEASED_SINCE,
    NULL_FILE,
    NULL_FOLDER,
    BlobFile,
    LoadPath,
    choose_load_path,
    defer_raw_check_min,
    no_sharing,
    prepare,
    why_not,
)
from .loadtypes import LoadInfo
from .memblob import MemoryBlob
from .options import mark_holding, refuse_holding
from .options import session_options_for as session_options_for  # re-exported
from .ortload import MEMORY_TENSOR_REFUSAL
from .pager import create_session
from .rawcheck import LOW_MEMORY_CHECK_FIRST_MIN, Background, whole_crcs
from .smallload import COPIES, asked, failure, remember, session_again, used_providers

log = logging.getLogger("onnx_cooker.runtime")

# progress(stage, fraction): stage "read" (Bundle.session), "decompress", then "session"; fraction 0.0
# when the stage starts and 1.0 when it ends. For a loading screen; called on the caller's thread.
Progress = Callable[[str, float], None]


def no_progress(stage: str, fraction: float) -> None:
    return None


def check_runtime(header: BlobHeader, installed: str = onnxruntime.__version__) -> None:
    """Refuse a blob the installed onnxruntime is too old for, before it sees the bytes."""
    needed = parse_version(header.min_runtime_version)
    if parse_version(installed) < needed:
        kind = f"ORT format v{header.ort_format_version}" if header.ort_format_version else "ONNX"
        raise IncompatibleRuntimeError(
            f"model {header.name!r} ({header.platform}, {kind}) needs onnxruntime {format_version(needed)} "
            f"or newer, but {installed} is installed; upgrade onnxruntime to >= {format_version(needed)} "
            "or re-cook for this version (set runtime_version in the platform profile)"
        )


def load_info(session: onnxruntime.InferenceSession) -> LoadInfo | None:
    """The ``LoadInfo`` of a session this loader made, else None."""
    return getattr(session, "_onnx_cooker_load", None)


def session_from_blob(
    data: bytes | bytearray | memoryview | mmap.mmap | MemoryBlob,
    *,
    providers: Sequence[ProviderSpec] | None = None,
    session_options: onnxruntime.SessionOptions | None = None,
    max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
    threads: int | None = None,
    low_memory: bool = False,
    progress: Progress | None = None,
    load_path: str | None = None,
    ep_libraries: Mapping[str, str | os.PathLike[str]] | None = None,
    devices: DeviceSelection | None = None,
) -> onnxruntime.InferenceSession:
    """An ``onnxruntime.InferenceSession`` for a cooked blob, created from memory.

    ``data`` is borrowed, not copied: ``bytes``, ``bytearray``, ``memoryview``, ``mmap``, or a
    ``MemoryBlob`` (a blob read into a sealed memfd, which onnxruntime maps in place like a blob
    file: for a game that reads blobs from an archive, the zero-copy way; memblob.py). Where the
    load path is in place (``load_info(session).in_place``), onnxruntime uses the blob's weights
    where they lie: the session keeps ``data`` alive, and a mutable ``data`` changed while the
    session lives changes the session's weights (do not). ``providers`` (names, or ``(name,
    options)`` pairs as onnxruntime takes them) overrides the blob's EP preference list; by default
    the preferred EPs this onnxruntime offers are used, then the CPU. The blob's per-EP session
    options are applied onto ``session_options`` (or fresh options); the load path adds its own
    entries and weights there too, so use them for that blob only (a second load with options that
    hold a blob's weights is refused). Frames are checked and decompressed on ``threads`` threads
    (default: one per core); the CRC-32s of large raw content are read on a thread while onnxruntime
    builds the session (from 1.32 the caller's joins it after), and a mismatch returns no session.

    ``load_path`` forces one of ``LoadPath``'s paths (default: the fastest one proven for this
    blob's format, this onnxruntime and this OS; ``SessionCreateError`` if the one asked for cannot
    load it). ``low_memory`` turns off weight prepacking (``session.disable_prepacking``): the
    session then keeps no packed second copy of MatMul/Conv weights and loads faster, but may run
    slower; it is off by default (bench/results.md). ``progress(stage, fraction)``, if given, is
    called as each stage starts (0.0) and ends (1.0): ``"decompress"`` (checks and decompression),
    then ``"session"`` (onnxruntime builds the session), for a loading screen. Raises only
    ``BundleError`` subclasses (and ``TypeError`` for a path given instead of the bytes).

    Plugin EPs (onnxruntime >= 1.22, Windows ML): ``ep_libraries`` (registration name -> library
    path) are registered once per process (``register_ep_libraries``); ``devices`` picks EP devices,
    as ``(EP name, "cpu"|"gpu"|"npu"|None)`` pairs in preference order (every EP named must offer one
    of them) or a policy name (``"prefer_gpu"``, ``"prefer_npu"``, ``"prefer_cpu"``,
    ``"max_performance"``, ``"max_efficiency"``, ``"min_power"``, ``"default"``); it excludes
    ``providers``. Without it the blob's ``device_policy`` applies, else a plugin EP the blob prefers
    runs on the devices it offers, else the classic list above (always on older onnxruntime). The
    CPU EP takes the nodes the chosen EPs leave (``devices.plan_session``).
    """
    if isinstance(data, (str, os.PathLike)):  # a programming error, not a damaged blob
        raise TypeError(
            f"session_from_blob takes a blob's bytes, not a path ({str(data)!r}): open its bundle folder "
            "(open_bundle(folder).session(name), which maps the blob file) or read the file's bytes"
        )
    report = progress or no_progress
    extra = (ep_libraries, devices)
    report("decompress", 0.0)
    if isinstance(data, MemoryBlob):
        return _memory_session(
            data, providers, session_options, max_model_size, threads, low_memory, report, load_path, extra
        )
    # a small blob loaded before with equal arguments: its recipe (smallload.py)
    lane = (
        None if session_options or load_path or any(extra) else asked(providers, low_memory, max_model_size)
    )
    if (session := session_again(data, lane, report)) is not None:
        return session
    checked = check_blob(data, max_model_size=max_model_size, threads=threads, check_raw=False)
    # The CRC-32s of raw content catch damage, not attacks (anyone can recompute them; hostile bytes
    # are refused by the layout checks above and by onnxruntime's own parsers): read them while
    # onnxruntime builds the session, which releases the GIL, instead of before it. 268 MB of
    # weights: 64 ms of CRC that no longer add to the load (docs/design.md, "Loading from memory").
    raw = checked.raw_bytes()
    large_unpacked = low_memory and raw >= LOW_MEMORY_CHECK_FIRST_MIN[checked.header.model_format]
    if raw < defer_raw_check_min(onnxruntime.__version__) or large_unpacked:
        checked.check_raw()
        session = _session(checked, providers, session_options, low_memory, report, load_path, None, *extra)
        if lane is not None:
            remember(checked, session, lane, providers)
        return session
    # Without prepacking, under LOW_MEMORY_CHECK_FIRST_MIN: every core beside the build. Else a thread
    # beside it: from 1.32, which lets go of the GIL, piece by piece, and the caller's thread takes
    # the pieces left once the session is made; before, in one zlib call per raw section: zlib lets go
    # of the GIL for the whole call, and onnxruntime 1.24.4 and 1.28.0 hold the GIL while they build a
    # session (a check piece by piece would wait for the whole build).
    if low_memory:
        crc = Background(lambda: checked.check_raw(threads=None))
    elif parse_version(onnxruntime.__version__) >= GIL_RELEASED_SINCE and (beside := checked.check_beside()):
        crc = beside  # piece by piece: what the build does not hide, both cores finish
    else:
        expected = whole_crcs(checked.header.frames, checked.where)  # arithmetic: reads no byte
        crc = Background(lambda: checked.check_whole(expected))
    try:
        session = _session(checked, providers, session_options, low_memory, report, load_path, None, *extra)
    except BaseException:
        crc.result()  # damage explains a refusal better than onnxruntime's message does
        raise
    crc.result()  # damaged: the session goes, unreturned, and the caller gets ChecksumMismatchError
    return session


def _memory_session(
    memory: MemoryBlob,
    providers: Sequence[ProviderSpec] | None,
    session_options: onnxruntime.SessionOptions | None,
    max_model_size: int,
    threads: int | None,
    low_memory: bool,
    report: Progress,
    load_path: str | None,
    extra: tuple[Mapping[str, str | os.PathLike[str]] | None, DeviceSelection | None],
) -> onnxruntime.InferenceSession:
    """``session_from_blob`` of a ``MemoryBlob``: its memfd handed over as a blob file, through a
    descriptor of this load's own; checked when it was sealed, so no byte again where the kernel
    sealed it, else its raw content's CRC-32s again as from bytes."""
    view, model_file = memory.borrow()
    try:
        checked = check_blob(view, max_model_size=max_model_size, threads=threads, check_raw=False)
        if not memory.unchanging:
            checked.check_raw(threads=threads)
        return _session(
            checked, providers, session_options, low_memory, report, load_path, model_file, *extra
        )
    finally:
        if model_file is not None:
            os.close(model_file.fd)  # onnxruntime opened (and mapped or read) the memfd itself


def session_from_checked(
    checked: CheckedBlob,
    *,
    providers: Sequence[ProviderSpec] | None = None,
    session_options: onnxruntime.SessionOptions | None = None,
    low_memory: bool = False,
    progress: Progress | None = None,
    load_path: str | None = None,
    model_file: BlobFile | None = None,
    ep_libraries: Mapping[str, str | os.PathLike[str]] | None = None,
    devices: DeviceSelection | None = None,
) -> onnxruntime.InferenceSession:
    """``session_from_blob`` after ``check_blob`` (``Bundle.session`` passes the mapped blob file)."""
    report = progress or no_progress
    extra = (ep_libraries, devices)
    return _session(checked, providers, session_options, low_memory, report, load_path, model_file, *extra)


def _session(
    checked: CheckedBlob,
    providers: Sequence[ProviderSpec] | None,
    session_options: onnxruntime.SessionOptions | None,
    low_memory: bool,
    report: Progress,
    load_path: str | None,
    model_file: BlobFile | None,
    ep_libraries: Mapping[str, str | os.PathLike[str]] | None = None,
    devices: DeviceSelection | None = None,
) -> onnxruntime.InferenceSession:
    header = checked.header
    check_runtime(header)
    path = _load_path(checked, load_path, model_file, low_memory)
    # a remembered refusal is why this load copies (onnx-mapped, from a bundle, never tried that door)
    copies = load_path is None and path in (
        LoadPath.ONNX_EXTERNAL_INITIALIZERS,
        LoadPath.ORT_MAPPED,
        LoadPath.ORT_FILE,
    )
    refused = _REFUSED.get(_refusal_key(header), (None,))[0] if copies else None
    _register(ep_libraries or {}, header.name)
    plan = plan_for(header, providers, devices, session_options)
    names, specs = plan.names, plan.providers
    if path == LoadPath.ORT_SHARED_INITIALIZERS and (why := no_sharing(plan, session_options)):
        if load_path is not None:
            raise SessionCreateError(f"model {header.name!r} cannot load along {path.value}: {why}")
        path = LoadPath.ORT_MAPPED
    refuse_holding(session_options, header.name)
    options = session_options_for(header, names, session_options)
    try:
        plan.configure(options)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise SessionCreateError(f"model {header.name!r}: onnxruntime refused the devices: {exc}") from None
    if low_memory:
        options.add_session_config_entry("session.disable_prepacking", "1")
    try:
        prepared = prepare(path, checked, options, model_file)
    except (RuntimeError, ValueError, TypeError, OSError) as exc:
        raise SessionCreateError(
            f"model {header.name!r}: onnxruntime {onnxruntime.__version__} refused its weights "
            f"({path.value}): {exc}"
        ) from None
    path = prepared.path or path  # ort-shared-initializers with nothing worth sharing: ort-mapped
    if session_options is not None and prepared.keep:  # what the options now point into
        mark_holding(options, header.name)
    log.info(
        "%s: using %s; load path %s (%s)",
        header.name,
        plan.explanation,
        path.value,
        "weights in place" if path.in_place else COPIES,
    )
    fallback = prepared.fallback if load_path is None else None
    cleanup = list(prepared.cleanup)
    try:
        report("decompress", 1.0)  # checked (by the caller) and decoded (by prepare)
        report("session", 0.0)
    except BaseException:  # the caller's callback: its error is the caller's, the memfd is ours
        for undo in cleanup:
            undo()
        raise
    try:
        try:
            severity = options.log_severity_level
            if fallback is not None and path != LoadPath.ORT_MAPPED:  # a refusal expected, and answered
                options.log_severity_level = 4
            try:
                own = prepared.own_pages
                session = create_session(prepared.model, options, specs, prepared.mapped_fd, low_memory, own)
            finally:
                options.log_severity_level = severity
            distrust = prepared.distrust() if prepared.distrust is not None else None
            if distrust is not None:
                del session
                raise _Distrusted(distrust)
        except Exception as exc:  # onnxruntime raises several unrelated types; keep our promise of one
            lacks = incompatibility(str(exc), header.name, header.platform, onnxruntime.__version__)
            again = None if fallback is None or lacks else fallback(str(exc))
            if again is None or again.path is None:  # what every path lacks (a kernel), what copying meets
                raise
            what = "not used" if isinstance(exc, _Distrusted) else "refused"
            refused = f"{path.value} {what} ({str(exc).splitlines()[0][:200]})"
            log.info(
                "%s: onnxruntime %s: %s; loading along %s",
                header.name,
                onnxruntime.__version__,
                refused,
                again.path.value,
            )
            prepared, path = again, again.path
            cleanup += prepared.cleanup
            # Remembered only when onnxruntime refused the door itself (it could not read the null
            # file): another failure (an EP, memory) may not recur, and says nothing of the model.
            # So is a session that read the holes of ort-shared-initializers (it will again), and an
            # ORT model's tensor attributes refused in place (ortload.py).
            known = isinstance(exc, _Distrusted) or NULL_PATH in str(exc) or MEMORY_TENSOR_REFUSAL in str(exc)
            if len(_REFUSED) < _MAX_REFUSED and known:
                _REFUSED[_refusal_key(header)] = (refused, path)
            session = create_session(prepared.model, options, specs, None, low_memory)
    except Exception as exc:  # onnxruntime raises several unrelated types; keep our promise of one
        raise failure(exc, header, path) from None
    finally:
        for undo in cleanup:
            undo()
    if prepared.confirm is not None:
        try:
            prepared.confirm()
        except OSError as exc:
            raise SessionCreateError(
                f"model {header.name!r} (load path {path.value}): {exc}; a re-cook replaced the blob "
                "file during the load: open the bundle again and load it again"
            ) from None
    report("session", 1.0)
    # What onnxruntime uses in place must live as long as the session: the blob's views (and through
    # them the caller's buffer or the mapped file) go with it.
    session._onnx_cooker_keep = prepared.keep  # type: ignore[attr-defined]
    info = LoadInfo(path, path.in_place, used_providers(plan, session, header.name), refused)
    session._onnx_cooker_load = info  # type: ignore[attr-defined]
    return session


class _Distrusted(Exception):
    """A session that was made, but may compute with bytes the loader never gave onnxruntime."""


# (cook key, model sha256, onnxruntime version) -> why onnxruntime refused an in-place door for that
# model, and the path it then loaded along: its next load in this process goes straight there.
_REFUSED: dict[tuple[str, str, str], tuple[str, LoadPath]] = {}
_IN_PLACE_DOORS = (LoadPath.ONNX_SHARED_INITIALIZERS, LoadPath.ORT_SHARED_INITIALIZERS, LoadPath.ORT_MAPPED)
NULL_PATH = f"{NULL_FOLDER}/{NULL_FILE}"
_MAX_REFUSED = 4096


def _load_path(
    checked: CheckedBlob, asked: str | None, model_file: BlobFile | None, low_memory: bool = False
) -> LoadPath:
    if asked is None:
        path = choose_load_path(checked, model_file=model_file, low_memory=low_memory)
        remembered = _REFUSED.get(_refusal_key(checked.header))
        return remembered[1] if remembered is not None and path in _IN_PLACE_DOORS else path
    try:
        path = LoadPath(asked)
    except ValueError:
        choices = ", ".join(p.value for p in LoadPath)
        raise SessionCreateError(f"unknown load path {asked!r}; one of {choices}") from None
    reason = why_not(path, checked, onnxruntime.__version__, model_file)
    if reason is not None:
        raise SessionCreateError(f"model {checked.header.name!r} cannot load along {path.value}: {reason}")
    return path


def _refusal_key(header: BlobHeader) -> tuple[str, str, str]:
    return (header.cook_key, header.model_sha256, onnxruntime.__version__)
