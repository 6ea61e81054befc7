"""Which execution providers and devices a session gets: onnxruntime's classic provider list, or (from
onnxruntime 1.22, Windows ML's API) plugin EPs loaded from libraries and chosen by device or policy.

``register_ep_libraries`` loads plugin EP libraries once per process; ``plan_session`` (pure: plain
data in, a ``SessionPlan`` out) decides how the session is configured and says why in one line.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import onnxruntime

from .errors import IncompatibleRuntimeError, SessionCreateError
from .header import DEVICE_POLICIES, BlobHeader
from .hints import check_providers

CPU = "CPUExecutionProvider"
# DirectML can only share a session with the CPU EP (docs/design.md, "DirectML sessions").
EXCLUSIVE_WITH_CPU = frozenset({"DmlExecutionProvider"})
ProviderSpec = str | tuple[str, Mapping[str, Any]]
DEVICE_TYPES = ("cpu", "gpu", "npu")
# A policy name (DEVICE_POLICIES), or (EP name, "cpu" | "gpu" | "npu" | None for any) pairs in
# preference order.
DeviceSelection = str | Sequence[tuple[str, str | None]]
# Our policy names -> onnxruntime.OrtExecutionProviderDevicePolicy members.
POLICY_MEMBERS = {name: name.upper() for name in DEVICE_POLICIES} | {"min_power": "MIN_OVERALL_POWER"}


def choose_providers(
    preference: Sequence[str], available: Sequence[str]
) -> tuple[list[str], list[tuple[str, str]]]:
    """The EPs to use, in order, and the (EP, reason) pairs that were skipped.

    Every preferred EP that this onnxruntime build offers, then the CPU EP as the fallback; an EP that
    must run alone with the CPU (DirectML) ends the list.
    """
    chosen: list[str] = []
    skipped: list[tuple[str, str]] = []
    for ep in preference:
        if ep == CPU:
            continue
        if ep not in available:
            skipped.append((ep, "not offered by this onnxruntime build"))
        elif chosen and (ep in EXCLUSIVE_WITH_CPU or chosen[0] in EXCLUSIVE_WITH_CPU):
            skipped.append((ep, f"cannot be combined with {chosen[0]}"))
        else:
            chosen.append(ep)
    chosen.append(CPU)
    return chosen, skipped


def options_of(provider_options: Mapping[str, Mapping[str, Any]], ep: str) -> dict[str, str]:
    """The blob's provider options for ``ep``, as the strings onnxruntime takes."""
    return {str(k): str(v) for k, v in provider_options.get(ep, {}).items()}


# --- plugin EP libraries ------------------------------------------------------------------------

_LOCK = threading.Lock()
_REGISTERED: dict[str, str] = {}  # registration name -> library path, for this process
_PLUGIN_EPS: set[str] = set()  # EP names the registered libraries brought


def _free_lock_in_child() -> None:
    """A forked child: a registration another thread had under way holds the lock for good there
    (what it registered, onnxruntime's state and this record, the child keeps)."""
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_free_lock_in_child)


def register_ep_libraries(libraries: Mapping[str, str | os.PathLike[str]]) -> None:
    """Register plugin EP libraries with onnxruntime (``register_execution_provider_library``), each
    ``registration name -> library path`` once per process: the same name and path again does
    nothing; the same name with another path is refused. Their EPs then offer devices
    (``onnxruntime.get_ep_devices()``) that ``devices`` and the blob's EP list can pick.

    Raises ``IncompatibleRuntimeError`` on onnxruntime older than 1.22 (no plugin EPs), and
    ``SessionCreateError`` for a library onnxruntime cannot load.
    """
    _register(libraries, "")


def _register(libraries: Mapping[str, str | os.PathLike[str]], model: str) -> None:
    where = f"model {model!r}: " if model else ""
    if not libraries:
        return
    register = getattr(onnxruntime, "register_execution_provider_library", None)
    if register is None or not hasattr(onnxruntime, "get_ep_devices"):
        raise IncompatibleRuntimeError(
            f"{where}plugin EP libraries ({', '.join(libraries)}) need onnxruntime 1.22 or newer, but "
            f"{onnxruntime.__version__} is installed; upgrade onnxruntime (or onnxruntime-windowsml) to "
            ">= 1.22, or load without ep_libraries"
        )
    with _LOCK:
        for name, library in libraries.items():
            path = os.path.abspath(os.fspath(library))
            known = _REGISTERED.get(name)
            if known == path:
                continue
            if known is not None:
                raise SessionCreateError(
                    f"{where}EP library name {name!r} is already registered with {known}, not {path}; "
                    "register each library under its own name"
                )
            before = {d.ep_name for d in onnxruntime.get_ep_devices()}
            try:
                register(name, path)
            except Exception as exc:  # onnxruntime's Fail, RuntimeError, ...: one type for the caller
                raise SessionCreateError(
                    f"{where}onnxruntime {onnxruntime.__version__} could not load the EP library {path} "
                    f"(as {name!r}): {exc}; check the path and that the library was built for this "
                    "onnxruntime"
                ) from None
            _REGISTERED[name] = path
            _PLUGIN_EPS.update({d.ep_name for d in onnxruntime.get_ep_devices()} - before)
            _PLUGIN_EPS.add(name)


# --- the decision -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SessionPlan:
    """How a session's EPs are configured, and why (``explanation``, for the log line).

    Exactly one way: ``providers``, a classic list for ``InferenceSession(providers=...)``; or
    ``devices``, ``(EP, its OrtEpDevices, options)`` for ``SessionOptions.add_provider_for_devices``
    in preference order (onnxruntime adds the CPU EP after them for the nodes they do not take); or
    ``policy``, one of ``DEVICE_POLICIES`` for ``SessionOptions.set_provider_selection_policy``.
    ``names`` are the EPs whose per-EP session options the blob's ``ep_session_options`` apply.
    """

    names: tuple[str, ...]
    explanation: str
    providers: tuple[ProviderSpec, ...] | None = None
    devices: tuple[tuple[str, tuple[Any, ...], Mapping[str, str]], ...] = ()
    policy: str | None = None

    def configure(self, options: onnxruntime.SessionOptions) -> None:
        """Put the devices or the policy on ``options`` (nothing for a classic list)."""
        for _, devices, ep_options in self.devices:
            options.add_provider_for_devices(list(devices), dict(ep_options))
        if self.policy is not None:
            member = POLICY_MEMBERS[self.policy]
            options.set_provider_selection_policy(
                getattr(onnxruntime.OrtExecutionProviderDevicePolicy, member)
            )


def plan_session(
    preference: Sequence[str],
    provider_options: Mapping[str, Mapping[str, Any]],
    selection: DeviceSelection | None,
    *,
    available: Sequence[str],
    ep_devices: Sequence[Any] | None,
    blob_policy: str | None = None,
    model: str = "model",
    runtime: str = onnxruntime.__version__,
) -> SessionPlan:
    """How to configure the session of a blob whose header prefers the EPs ``preference`` (with
    ``provider_options``), for the caller's ``selection`` (None: the blob decides).

    ``available`` are the classic providers of this build (by name, as ``InferenceSession`` takes
    them); ``ep_devices`` what ``onnxruntime.get_ep_devices()`` offers (objects with ``.ep_name`` and
    ``.device.type``/``.vendor_id``/``.vendor``), or None on an onnxruntime without the plugin-EP
    API (< 1.22); ``blob_policy`` the header's ``device_policy``. In order:

    - a policy name (the caller's, else the blob's): ``set_provider_selection_policy``;
    - ``(EP, device type)`` pairs: each EP on the first of its pairs' devices it offers, in that order
      (``SessionCreateError`` if a named EP offers none of them);
    - no selection, and the blob prefers an EP that is not a classic provider but offers devices (a
      plugin EP, e.g. after ``ep_libraries``): its devices, skipping the preferred EPs that offer none;
    - otherwise the classic list (``choose_providers``). Without the plugin-EP API a policy or pairs
      fall back to the classic list too, and the explanation says so.
    """
    where = f"model {model!r}"
    if isinstance(selection, str):
        if selection not in POLICY_MEMBERS:
            raise SessionCreateError(
                f"{where}: unknown device policy {selection!r}; one of {', '.join(DEVICE_POLICIES)}, or "
                "(EP name, 'cpu'|'gpu'|'npu'|None) pairs"
            )
    elif selection is not None:
        selection = _check_pairs(selection, where)
    policy, source = (selection, "given by the caller") if isinstance(selection, str) else (None, "")
    if selection is None and blob_policy is not None:
        policy, source = blob_policy, "from the blob header"
    if ep_devices is None:
        return _classic_fallback(preference, provider_options, selection, policy, available, where, runtime)
    device_eps = {d.ep_name for d in ep_devices}
    classic = [ep for ep in preference if ep != CPU and ep in available and ep not in device_eps]
    if source == "from the blob header" and classic:
        # onnxruntime's policies choose among EP devices only: a preferred classic EP (OpenVINO from
        # onnxruntime-openvino) would be passed over for the CPU. The blob's EP list wins.
        plan = _classic(preference, provider_options, available)
        why = f"; the blob's device policy {policy} not used: {classic[0]} is a classic EP here"
        return SessionPlan(names=plan.names, explanation=plan.explanation + why, providers=plan.providers)
    if policy is not None:
        offered = ", ".join(_describe(d.ep_name, [d]) for d in ep_devices) or "none"
        eps = {d.ep_name for d in ep_devices}
        return SessionPlan(
            names=tuple(dict.fromkeys([*(ep for ep in preference if ep in eps), CPU])),
            explanation=f"device policy {policy} ({source}); onnxruntime picks among: {offered}",
            policy=policy,
        )
    if selection is not None:
        return _pairs_plan(selection, provider_options, ep_devices, where)
    eps = {d.ep_name for d in ep_devices}
    if any(ep != CPU and ep not in available and ep in eps for ep in preference):
        chosen, skipped = _pick([(ep, None) for ep in preference if ep != CPU], ep_devices)
        return _devices_plan(chosen, provider_options, skipped, "the blob prefers a plugin EP")
    return _classic(preference, provider_options, available)


def _classic(
    preference: Sequence[str], provider_options: Mapping[str, Mapping[str, Any]], available: Sequence[str]
) -> SessionPlan:
    names, skipped = choose_providers(preference, available)
    specs = tuple((ep, options_of(provider_options, ep)) for ep in names)
    return SessionPlan(names=tuple(names), explanation=_joined(", ".join(names), skipped), providers=specs)


def _check_pairs(selection: Any, where: str) -> list[tuple[str, str | None]]:
    pairs = []
    try:
        for ep, kind in selection:
            if not isinstance(ep, str) or not (kind is None or str(kind).lower() in DEVICE_TYPES):
                raise ValueError
            pairs.append((ep, None if kind is None else str(kind).lower()))
    except (TypeError, ValueError):
        raise SessionCreateError(
            f"{where}: devices must be a policy ({', '.join(DEVICE_POLICIES)}) or (EP name, "
            f"'cpu'|'gpu'|'npu'|None) pairs, not {selection!r}"
        ) from None
    if not pairs:
        raise SessionCreateError(f"{where}: devices is an empty list; name at least one (EP, device type)")
    return pairs


def _pairs_plan(
    pairs: Sequence[tuple[str, str | None]],
    provider_options: Mapping[str, Mapping[str, Any]],
    ep_devices: Sequence[Any],
    where: str,
) -> SessionPlan:
    chosen, skipped = _pick(pairs, ep_devices)
    for ep in dict.fromkeys(ep for ep, _ in pairs):
        if ep not in chosen:
            why = "; ".join(f"{label}: {reason}" for label, reason in skipped if label.split()[0] == ep)
            offered = ", ".join(_describe(d.ep_name, [d]) for d in ep_devices) or "nothing"
            raise SessionCreateError(
                f"{where}: devices asks for {ep}, but none of its devices can be used ({why}); "
                f"onnxruntime.get_ep_devices() offers {offered}: register its library with "
                "ep_libraries, or ask for a device it offers"
            )
    return _devices_plan(chosen, provider_options, skipped, "devices given by the caller")


def _pick(
    wanted: Sequence[tuple[str, str | None]], ep_devices: Sequence[Any]
) -> tuple[dict[str, list[Any]], list[tuple[str, str]]]:
    """The devices of each wanted (EP, device type or None), in order, and what was skipped, why."""
    chosen: dict[str, list[Any]] = {}
    skipped: list[tuple[str, str]] = []
    for ep, kind in wanted:
        label = ep if kind is None else f"{ep} on {kind.upper()}"
        matches = [d for d in ep_devices if d.ep_name == ep and (kind is None or _type(d) == kind)]
        first = next(iter(chosen), None)
        if ep in chosen:
            skipped.append((label, f"{ep} already chosen"))
        elif not matches:
            kinds = ", ".join(sorted({_type(d).upper() for d in ep_devices if d.ep_name == ep}))
            skipped.append((label, f"it offers only {kinds}" if kinds else "no device offered"))
        elif first is not None and (ep in EXCLUSIVE_WITH_CPU or first in EXCLUSIVE_WITH_CPU):
            skipped.append((label, f"cannot be combined with {first}"))
        else:
            chosen[ep] = matches
    return chosen, skipped


def _devices_plan(
    chosen: Mapping[str, list[Any]],
    provider_options: Mapping[str, Mapping[str, Any]],
    skipped: list[tuple[str, str]],
    why: str,
) -> SessionPlan:
    described = "; ".join(_describe(ep, devices) for ep, devices in chosen.items())
    fallback = "" if CPU in chosen else f", then {CPU} for the nodes they do not take"
    return SessionPlan(
        names=tuple(dict.fromkeys([*chosen, CPU])),
        explanation=_joined(f"{described}{fallback} ({why})", skipped),
        devices=tuple((ep, tuple(found), options_of(provider_options, ep)) for ep, found in chosen.items()),
    )


def _classic_fallback(
    preference: Sequence[str],
    provider_options: Mapping[str, Mapping[str, Any]],
    selection: DeviceSelection | None,
    policy: str | None,
    available: Sequence[str],
    where: str,
    runtime: str,
) -> SessionPlan:
    """An onnxruntime without the plugin-EP API (< 1.22): the classic list, with a note."""
    note = ""
    if policy is not None:
        note = f"; device policy {policy} ignored: onnxruntime {runtime} has no plugin-EP API (>= 1.22)"
    elif selection is not None:
        preference = [ep for ep, _ in selection]  # type: ignore[misc]
        missing = [ep for ep in dict.fromkeys(preference) if ep != CPU and ep not in available]
        if missing:
            raise SessionCreateError(
                f"{where}: devices asks for {', '.join(missing)}, which onnxruntime {runtime} does not offer "
                f"(it offers {', '.join(available)}); plugin EPs need onnxruntime >= 1.22"
            )
        note = f"; devices given by the caller, by name: onnxruntime {runtime} cannot pick devices (< 1.22)"
    plan = _classic(preference, provider_options, available)
    return dataclasses.replace(plan, explanation=plan.explanation + note)


def _type(device: Any) -> str:
    kind = device.device.type
    return str(getattr(kind, "name", kind)).rsplit(".", 1)[-1].lower()


def _describe(ep: str, devices: Sequence[Any]) -> str:
    """``ggml on CPU (vendor 0x1022 AMD)``."""
    parts = [f"{_type(d).upper()} (vendor 0x{d.device.vendor_id:04x} {d.device.vendor})" for d in devices]
    return f"{ep} on {', '.join(parts)}"


def _joined(chosen: str, skipped: Sequence[tuple[str, str]]) -> str:
    why = "; ".join(f"skipped {ep} ({reason})" for ep, reason in skipped)
    return f"{chosen}{f'; {why}' if why else ''}"


# --- onnxruntime's state ------------------------------------------------------------------------


def plan_for(
    header: BlobHeader,
    providers: Sequence[ProviderSpec] | None,
    devices: DeviceSelection | None,
    session_options: onnxruntime.SessionOptions | None,
) -> SessionPlan:
    """``plan_session`` for this blob and the installed onnxruntime; explicit ``providers`` win."""
    if providers is not None:
        if devices is not None:
            raise SessionCreateError(
                f"model {header.name!r}: pass providers (classic EP names) or devices (plugin EP devices "
                "or a policy), not both"
            )
        check_providers(providers, header.name)
        specs = tuple(providers)
        names = tuple(spec if isinstance(spec, str) else spec[0] for spec in specs)
        return SessionPlan(names, f"{', '.join(names)} (given by the caller)", providers=specs)
    ep_devices = _ep_devices()
    configured = session_options is not None and getattr(session_options, "has_providers", lambda: False)()
    if devices is None and ep_devices is not None and configured:
        return SessionPlan(
            names=tuple(dict.fromkeys([*header.execution_providers, CPU])),
            explanation="the EP devices or policy session_options already carries (given by the caller)",
        )
    return plan_session(
        header.execution_providers,
        header.provider_options,
        devices,
        available=classic_providers(ep_devices),
        ep_devices=ep_devices,
        blob_policy=header.device_policy,
        model=header.name,
    )


def _ep_devices() -> list[Any] | None:
    """What ``get_ep_devices()`` offers, or None on an onnxruntime without the plugin-EP API."""
    get = getattr(onnxruntime, "get_ep_devices", None)
    if get is None or not hasattr(onnxruntime.SessionOptions, "add_provider_for_devices"):
        return None
    return list(get())


def classic_providers(ep_devices: Collection[Any] | None) -> list[str]:
    """The providers this build offers by name, less plugin EPs: the ones our registered libraries
    brought, and EPs offered as devices under a name onnxruntime does not build in."""
    builtin = set(onnxruntime.get_all_providers())
    plugins = _PLUGIN_EPS | {d.ep_name for d in ep_devices or () if d.ep_name not in builtin}
    return [ep for ep in onnxruntime.get_available_providers() if ep not in plugins]
