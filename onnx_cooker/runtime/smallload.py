"""A small blob loaded again: what its first load worked out, kept, so that the next one only
checks the bytes that can differ and builds the session.

A model of a few kilobytes loads in about 1 ms, and the loader's own work (checking the layout,
choosing the load path, planning the EPs, the session options) cost 0.2-0.4 ms of it, because it runs
on caches an onnxruntime session build has just emptied (docs/design.md, "A small model's fixed
costs"). Every one of those steps is a function of the header's bytes, of the blob's length and of
which EPs this onnxruntime offers, so their result is kept here, by the parsed header (header.py
keeps one ``BlobHeader`` per distinct header bytes, up to 64), for at most ``MAX_RECIPES`` blobs.

A recipe is kept after ``session_from_blob`` or ``Bundle.session`` (a blob it reads, not maps) made
a session along ``ort-bytes`` or ``onnx-inline`` (a version-3 blob whose graph is its only section,
in one frame of at most ``SMALL_FRAME``), with the blob's own EP list or ``providers`` given as a
list or tuple, and no ``session_options``, ``devices``, ``ep_libraries`` or ``load_path``. A later
call with equal arguments, for a blob with the same header (its CRC checked) and length, while
onnxruntime offers the same EP devices, checks the trailer and the graph (copied out, then its
CRC-32 compared with the header's; or decoded, zstd comparing its content checksum) and, for an
ONNX graph, its external references (proven.py keeps that verdict by the graph's bytes), then
builds the session as the first load did. Anything else, damage included, goes the general way,
which names what is wrong.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnxruntime

from .blob import SMALL_FRAME, CheckedBlob
from .compat import incompatibility
from .devices import _PLUGIN_EPS, SessionPlan, _ep_devices, plan_for
from .errors import BundleError, IncompatibleRuntimeError, SessionCreateError
from .frames import RAW_CRC_PIECE, Frame, decode_frame
from .header import (
    _TRAILER,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    BlobHeader,
    byte_view,
    check_graph_kind,
    read_header,
)
from .loadtypes import LoadInfo, LoadPath
from .onnxrefs import check_references
from .options import session_options_for
from .pager import create_session
from .proven import proven

log = logging.getLogger("onnx_cooker.runtime")
COPIES = "onnxruntime copies the weights"  # what the load line says of a path that is not in place

MAX_RECIPES = 64
# A zstd frame header is at most 18 bytes: magic, descriptor, window, dictionary ID, content size.
ZSTD_FRAME_HEADER_MAX = 18
_LANE_PATHS = (LoadPath.ORT_BYTES, LoadPath.ONNX_INLINE)


@dataclass(frozen=True)
class Recipe:
    """What a small blob's first load worked out (see the module's docstring)."""

    header: BlobHeader
    size: int  # the blob's length in bytes
    header_start: int  # where its header frame starts (the trailer points there)
    frame: Frame  # its one graph frame
    path: LoadPath
    plan: SessionPlan
    eps: tuple[Any, ...] | None  # devices.ep_state() when it was planned
    asked: tuple[Any, ...]  # the arguments it is for (``asked``), compared by value
    frame_head: bytes  # the first bytes of a zstd graph frame (its flags: a content checksum), as checked


_lock = threading.Lock()
# (id(header), asked(...)) -> the recipe of that blob for those arguments (it holds the header)
_recipes: OrderedDict[tuple[int, tuple[Any, ...]], Recipe] = OrderedDict()
_largest = [0]  # the largest blob a recipe is kept for: a larger one is not looked up


def asked(providers: Any, low_memory: bool, max_model_size: int) -> tuple[Any, ...] | None:
    """The arguments of a load as a recipe is kept and looked up by: a hashable value (provider
    options as sorted (key, ``repr(value)``) pairs, so that a caller's dict changed since is other
    arguments), or None where no recipe is kept: providers that are not a list or tuple of names and
    (name, options) pairs."""
    if providers is None:
        return (None, low_memory, max_model_size)
    if not isinstance(providers, (list, tuple)):
        return None
    given: list[Any] = []
    for spec in providers:
        if isinstance(spec, str):
            given.append(spec)
        elif isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], dict):
            given.append((spec[0], tuple(sorted((str(k), repr(v)) for k, v in spec[1].items()))))
        else:
            return None
    return (tuple(given), low_memory, max_model_size)


def remember(
    checked: CheckedBlob,
    session: onnxruntime.InferenceSession,
    args: tuple[Any, ...] | None,
    providers: Sequence[Any] | None,
) -> None:
    """Keep the recipe of a load that just made ``session`` of ``checked`` with the arguments
    ``args`` (``asked``; ``providers`` as given), where the lane can replay it (the module's
    docstring)."""
    header = checked.header
    frames = header.frames
    info = getattr(session, "_onnx_cooker_load", None)
    if (
        args is None
        or info is None
        or info.refused is not None
        or info.path not in _LANE_PATHS
        or header.version < 3
        or header.weights is not None
        or len(frames) != 1
        or frames[0].section != "graph"
        or frames[0].content_size > SMALL_FRAME
        or (frames[0].codec == "raw" and frames[0].prefix != 0)
    ):
        return
    try:
        plan = plan_for(header, None if providers is None else copy.deepcopy(list(providers)), None, None)
    except Exception:  # noqa: BLE001 - options that cannot be copied: no recipe, nothing else changes
        return
    if plan.providers is None or plan.devices or plan.policy is not None:
        return  # EP devices or a policy: onnxruntime's objects, not kept
    frame = frames[0]
    head = checked.view[frame.offset : frame.offset + min(frame.size, ZSTD_FRAME_HEADER_MAX)].tobytes()
    recipe = Recipe(
        header,
        len(checked.view),
        header_start(checked),
        frame,
        info.path,
        plan,
        ep_state(),
        args,
        head if frame.codec == "zstd" else b"",
    )
    with _lock:
        _recipes[(id(header), args)] = recipe
        _recipes.move_to_end((id(header), args))
        while len(_recipes) > MAX_RECIPES:
            _recipes.popitem(last=False)
        _largest[0] = max(r.size for r in _recipes.values())


def header_start(checked: CheckedBlob) -> int:
    """Where the header frame of a version-3 blob starts: after a graph extent that leads, else 0."""
    lead = checked.header.frames[0]
    return lead.offset + lead.size if lead.offset == 0 else 0


def recall(data: Any, args: tuple[Any, ...] | None) -> tuple[Recipe, bytes] | None:
    """The recipe of a blob loaded before, and its graph checked, or None: the general way then."""
    if args is None:
        return None
    try:
        view = byte_view(data)
        if len(view) > _largest[0]:
            return None  # no recipe is for a blob this large: its header is not read twice
        header, _ = read_header(view)
    except (BundleError, TypeError):
        return None  # the general way says what is wrong
    with _lock:
        recipe = _recipes.get((id(header), args))
    if recipe is None or recipe.header is not header or recipe.size != len(view) or recipe.asked != args:
        return None
    if _TRAILER.unpack_from(view, len(view) - TRAILER_SIZE) != (TRAILER_MAGIC, recipe.header_start):
        return None
    graph = _graph(view, recipe)
    if graph is None or recipe.eps != ep_state():
        return None
    where = f"blob of model {header.name!r} ({header.platform})"
    try:
        check_graph_kind(header, graph, where)
        if recipe.path == LoadPath.ONNX_INLINE:
            proven("references", graph, (None, ()), lambda: check_references(graph, None, {}))
    except BundleError:
        return None
    return recipe, graph


def _graph(view: memoryview, recipe: Recipe) -> bytes | None:
    """The graph, copied out of ``view`` and then checked (so a buffer changed meanwhile cannot slip
    past the check), or None where it does not match the header: a raw graph by its CRC-32s (and
    its padding, zero bytes); a zstd frame whose header (its flags) is the one checked at the first
    load, by zstd's content checksum as it is decoded."""
    frame = recipe.frame
    if frame.codec == "raw":
        if frame.pad and view[frame.offset : frame.data_offset].tobytes() != bytes(frame.pad):
            return None
        graph = view[frame.data_offset : frame.data_offset + frame.content_size].tobytes()
        pieces = range(0, len(graph), RAW_CRC_PIECE)
        crcs = tuple(zlib.crc32(memoryview(graph)[at : at + RAW_CRC_PIECE]) for at in pieces)
        return graph if crcs == frame.crcs else None
    if view[frame.offset : frame.offset + len(recipe.frame_head)] != recipe.frame_head:
        return None
    try:
        return decode_frame(view, frame, "")
    except BundleError:
        return None


def session_again(
    data: Any,
    args: tuple[Any, ...] | None,
    report: Callable[[str, float], None],
    check: Callable[[BlobHeader], None] | None = None,
) -> onnxruntime.InferenceSession | None:
    """A session of a small blob loaded before with equal arguments ``args`` (``asked``), along its
    recipe (``check`` first refuses its header, e.g. not the one a manifest lists), else None: the
    general way."""
    found = recall(data, args)
    if found is None:
        return None
    recipe, graph = found
    header, plan, path = recipe.header, recipe.plan, recipe.path
    low_memory = recipe.asked[1]
    if check is not None:
        check(header)
    options = session_options_for(header, plan.names, check=False)
    if low_memory:
        options.add_session_config_entry("session.disable_prepacking", "1")
    log.info("%s: using %s; load path %s (%s)", header.name, plan.explanation, path.value, COPIES)
    report("decompress", 1.0)
    report("session", 0.0)
    try:
        session = create_session(graph, options, plan.providers, None, low_memory)
    except Exception as exc:  # onnxruntime raises several unrelated types; keep our promise of one
        raise failure(exc, header, path) from None
    report("session", 1.0)
    session._onnx_cooker_keep = []  # type: ignore[attr-defined]
    session._onnx_cooker_load = LoadInfo(path, False, used_providers(plan, session, header.name))  # type: ignore[attr-defined]
    return session


def used_providers(plan: SessionPlan, session: onnxruntime.InferenceSession, name: str) -> tuple[str, ...]:
    """The session's EPs as onnxruntime made them (a policy's choice is logged: known only now). An
    EP of a classic list that onnxruntime dropped (it only warns when an EP fails to initialize,
    e.g. OpenVINO's device_type GPU where there is none) is an error: the CPU would run it all."""
    used = tuple(session.get_providers())
    if plan.providers is not None:
        dropped = [ep for ep in plan.names if ep not in used]
        if missing := [ep for ep in dropped if ep not in onnxruntime.get_available_providers()]:
            raise SessionCreateError(
                f"model {name!r}: {', '.join(missing)} is not in this onnxruntime package (onnxruntime "
                f"{onnxruntime.__version__} offers {', '.join(onnxruntime.get_available_providers())}); "
                "install a package built with it (onnxruntime-gpu: CUDA, TensorRT), or pass providers "
                "it offers"
            )
        if dropped:
            raise SessionCreateError(
                f"model {name!r}: onnxruntime {onnxruntime.__version__} dropped {', '.join(dropped)} while "
                "creating the session (see its warning: e.g. a provider option naming a device this "
                f"machine lacks), leaving {', '.join(used)}; fix that EP's provider options, or pass "
                "providers without it"
            )
        return plan.names
    if plan.policy is not None:
        log.info("%s: device policy %s chose %s", name, plan.policy, ", ".join(used))
    return used


def ep_state() -> tuple[Any, ...] | None:
    """What a blob's EP plan depends on besides its header and the caller's arguments: the EPs
    offering devices, and the plugin EPs registered through the loader (None: no plugin-EP API)."""
    devices = _ep_devices()
    return None if devices is None else (tuple(d.ep_name for d in devices), frozenset(_PLUGIN_EPS))


def failure(exc: Exception, header: BlobHeader, path: LoadPath) -> BundleError:
    """onnxruntime's refusal to build a session, as the loader's error: a missing kernel or
    optimization is an ``IncompatibleRuntimeError`` naming it."""
    lacks = incompatibility(str(exc), header.name, header.platform, onnxruntime.__version__)
    if lacks is not None:
        error = IncompatibleRuntimeError(lacks[1])
        error.operator = lacks[0]  # the operator it has no kernel for, or the optimization's action
        return error
    return SessionCreateError(
        f"onnxruntime {onnxruntime.__version__} could not create a session for model {header.name!r} "
        f"({header.platform}, {header.model_format}, load path {path.value}): {exc}"
    )


def _new_lock_in_child() -> None:
    """A forked child: a thread that held the lock at the fork never releases it there."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def forget() -> None:
    """Drop every recipe (tests that change what a load does)."""
    with _lock:
        _recipes.clear()
        _largest[0] = 0
