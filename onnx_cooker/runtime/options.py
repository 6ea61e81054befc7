"""Session options from a blob's recipe: each EP's session options, the saved-optimizations flag."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnxruntime

from .constants import (
    OPTIMIZATION_LEVELS,
    SAFE_CONFIG_ENTRIES,
    SAFE_CONFIG_PREFIXES,
    UNSAFE_CONFIG_ENTRIES,
    unsafe_provider_option,
)
from .errors import SessionCreateError
from .header import BlobHeader

_EXECUTION_MODES = {
    "sequential": onnxruntime.ExecutionMode.ORT_SEQUENTIAL,
    "parallel": onnxruntime.ExecutionMode.ORT_PARALLEL,
}
_LEVEL = onnxruntime.GraphOptimizationLevel
_OPTIMIZATION_LEVELS = dict(
    zip(
        OPTIMIZATION_LEVELS,
        (_LEVEL.ORT_DISABLE_ALL, _LEVEL.ORT_ENABLE_BASIC, _LEVEL.ORT_ENABLE_EXTENDED, _LEVEL.ORT_ENABLE_ALL),
        strict=True,
    )
)


def _apply_session_options(options: onnxruntime.SessionOptions, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if key == "enable_mem_pattern":
            options.enable_mem_pattern = bool(value)
        elif key == "execution_mode":
            if str(value) not in _EXECUTION_MODES:
                raise ValueError(f"execution_mode '{value}'")
            options.execution_mode = _EXECUTION_MODES[str(value)]
        elif key == "graph_optimization_level":
            if str(value) not in _OPTIMIZATION_LEVELS:
                raise ValueError(f"graph_optimization_level '{value}'")
            options.graph_optimization_level = _OPTIMIZATION_LEVELS[str(value)]
        elif key in UNSAFE_CONFIG_ENTRIES:
            raise ValueError(f"{key} is refused: {UNSAFE_CONFIG_ENTRIES[key]}")
        elif key not in SAFE_CONFIG_ENTRIES and not key.startswith(SAFE_CONFIG_PREFIXES):
            # Others may name files onnxruntime reads or writes (constants.SAFE_CONFIG_ENTRIES)
            raise ValueError(f"config entry '{key}' is not one a blob may carry{UNLISTED_ENTRY}")
        else:
            options.add_session_config_entry(key, str(value))


# What to do about a session option the loader refuses (the native library says the same): the
# cooker's settings check refuses such options, so the blob came from another cooker, or was made.
BAD_OPTION_FIX = (
    "; the platform's ep_session_options allow the keys and values of docs/settings.md: fix them and "
    "re-cook with this onnx-cooker"
)


# Why an entry is refused, and what a game that wants it does (native/src/session.c says the same)
UNLISTED_ENTRY = (
    " (it is not in the loader's list of entries that only change how a session computes, "
    "docs/settings.md; others may name files onnxruntime reads or writes); a game that needs it sets "
    "it on the session options it passes"
)
# What to do about a provider option the loader refuses (native/src/session.c says the same)
BAD_PROVIDER_OPTION_FIX = (
    "; a blob may not choose where an EP reads, writes or loads from: remove it from the platform's "
    "provider_options and re-cook, and have the game pass it itself (docs/settings.md)"
)


def check_provider_options(header: BlobHeader) -> None:
    """Refuse provider options that may name a file, folder, library or memory address
    (``constants.unsafe_provider_option``), for every EP the blob lists options for."""
    for ep, options in header.provider_options.items():
        for key, value in options.items():
            if why := unsafe_provider_option(str(key), value):
                raise SessionCreateError(
                    f"model {header.name!r}: provider option '{key}' for {ep} is refused: {why}"
                    f"{BAD_PROVIDER_OPTION_FIX}"
                )


def session_options_for(
    header: BlobHeader,
    providers: Sequence[str],
    base: onnxruntime.SessionOptions | None = None,
    *,
    check: bool = True,
) -> onnxruntime.SessionOptions:
    """Session options for this blob on these EPs: each EP's required options, saved optimizations.

    A blob may not set the entries the load paths own (``UNSAFE_CONFIG_ENTRIES``). ``check=False``
    skips the provider options' check, for a header whose options were checked (smallload.py).
    """
    if check:
        check_provider_options(header)
    options = base if base is not None else onnxruntime.SessionOptions()
    for ep in providers:
        try:
            _apply_session_options(options, header.ep_session_options.get(ep, {}))
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise SessionCreateError(
                f"model {header.name!r}: bad session option for {ep}: {exc}{BAD_OPTION_FIX}"
            ) from None
    # Only reached after decode_blob proved the bytes are the ones the cooker wrote. Set either way:
    # a caller may reuse one SessionOptions object for several blobs.
    replay = "1" if header.saved_runtime_optimizations else "0"
    options.add_session_config_entry("session.enable_saved_runtime_optimizations", replay)
    return options


# Set on a caller's SessionOptions that now hold pointers into a blob (shared weights, in-memory
# weight files): another load with them would use those values, or dangling ones.
HOLDS_WEIGHTS = "onnx_cooker.holds_weights_of"


def mark_holding(options: onnxruntime.SessionOptions, name: str) -> None:
    """Mark ``options`` as holding model ``name``'s weights (``refuse_holding`` refuses them after)."""
    options.add_session_config_entry(HOLDS_WEIGHTS, name)


def refuse_holding(options: onnxruntime.SessionOptions | None, name: str) -> None:
    """Refuse a caller's SessionOptions an earlier load left weights in (onnxruntime can neither copy
    a SessionOptions nor take an initializer out of one)."""
    if options is None:
        return
    try:
        earlier = options.get_session_config_entry(HOLDS_WEIGHTS)
    except RuntimeError:  # onnxruntime's answer for a key never set
        return
    raise SessionCreateError(
        f"model {name!r}: these session_options already hold the weights of model {earlier!r}, added "
        "when it was loaded with them: pass new SessionOptions for each blob with weights"
    )
