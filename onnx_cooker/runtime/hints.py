"""What to open instead, for a path given to ``open_bundle`` that is not a bundle folder: a blob
file, the build folder above the bundles, a mistyped platform folder; and what to pass instead of
providers onnxruntime cannot use."""

from __future__ import annotations

import difflib
import os
from collections.abc import Sized
from pathlib import Path

import onnxruntime

from .constants import MANIFEST_NAME
from .errors import SessionCreateError


def open_hint(given: Path) -> str:
    """How to open a bundle, for a path that is not one: a blob file, the build folder above them."""
    if given.name.endswith(".ocb"):
        return (
            f"{given.name} is a blob, not a bundle: open its folder (open_bundle({str(given.parent)!r})), "
            "or pass the blob's bytes to session_from_blob"
        )
    manifest = given / MANIFEST_NAME
    if os.path.lexists(manifest):  # a bundle whose manifest cannot be read (False for a NUL path)
        unreadable = manifest.is_file() and not os.access(manifest, os.R_OK)
        return (
            f"{'let the game read it (its permissions), or ' if unreadable else ''}re-run `onnx-cooker cook`"
        )
    try:  # the build folder: its platforms (not the cook's own hidden folders, such as .stamps)
        platforms = sorted(
            d.name for d in given.iterdir() if not d.name.startswith(".") and (d / MANIFEST_NAME).is_file()
        )
    except (OSError, ValueError):  # ValueError: NUL or a lone surrogate in the path
        platforms = []
    if platforms:
        return (
            f"{given} holds the bundles of {', '.join(platforms)}: open one, e.g. "
            f"open_bundle({str(given / platforms[0])!r})"
        )
    if near := near_bundle(given):  # a mistyped platform folder beside real ones
        return f"did you mean open_bundle({str(near)!r})?"
    return "point open_bundle at a folder written by `onnx-cooker cook` (build/<platform>/)"


def near_bundle(given: Path) -> Path | None:
    """The bundle folder beside ``given`` whose name is nearest to its name (a typo), else None."""
    try:
        if os.path.lexists(given):
            return None
        beside = [
            d.name
            for d in given.parent.iterdir()
            if not d.name.startswith(".") and (d / MANIFEST_NAME).is_file()
        ]
    except (OSError, ValueError):
        return None
    close = difflib.get_close_matches(given.name, beside, n=1)
    return given.parent / close[0] if close else None


def check_providers(providers: object, model: str) -> None:
    """Refuse ``providers`` a caller gave that onnxruntime could not use: one string instead of a list
    (a ``TypeError``), or a name it does not know, which it would refuse as "Unknown Provider Type"
    (``SessionCreateError``, naming the nearest name it knows and those this build offers)."""
    if isinstance(providers, str):
        raise TypeError(
            f"model {model!r}: providers takes a list of EP names, e.g. [{providers!r}], not one string"
        )
    if isinstance(providers, Sized) and not len(providers):
        raise SessionCreateError(
            f"model {model!r}: providers=[] names no execution provider (onnxruntime would run the model on "
            "the CPU, unasked): pass None for the blob's preferred EPs, then the CPU, or name them, e.g. "
            "['CPUExecutionProvider']"
        )
    known = onnxruntime.get_all_providers()
    for spec in providers:  # type: ignore[attr-defined]
        name = spec if isinstance(spec, str) else spec[0]
        if name not in known:
            near = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
            raise SessionCreateError(
                f"model {model!r}: {name!r} is no execution provider onnxruntime knows; "
                f"{f'did you mean {near[0]!r}? ' if near else ''}this onnxruntime offers "
                + ", ".join(onnxruntime.get_available_providers())
            )
