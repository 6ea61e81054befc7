"""Comparing a cooked model's outputs with the source's: shared by the cook and the runtime check.

Imports only numpy and the standard library: it also runs inside the isolated environments that
hold a target's exact onnxruntime version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, kw_only=True)
class OutputDifference:
    """How far one output of the cooked model is from the source's, and whether that is within tolerance."""

    name: str
    max_abs: float
    max_rel: float
    ok: bool


def compare(
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    rtol: float,
    atol: float,
    atol_of_range: float = 0.0,
) -> list[OutputDifference]:
    """One result per output: tensors, sequence outputs (lists) and optionals without a value (None).

    ``atol_of_range`` raises each float output's atol to that share of its largest finite magnitude:
    an int8 variant's rounding is a number of quantization steps, and a step is the output's range
    over 255, so a fixed atol is too tight for outputs in the tens and meaningless for tiny ones.
    """
    return [_compare(name, want, actual[name], rtol, atol, atol_of_range) for name, want in expected.items()]


def _compare(
    name: str, want: Any, got: Any, rtol: float, atol: float, atol_of_range: float = 0.0
) -> OutputDifference:
    if isinstance(want, dict) or isinstance(got, dict):  # a map (e.g. ZipMap): same keys, values
        if not (isinstance(want, dict) and isinstance(got, dict)) or want.keys() != got.keys():
            return _differs(name)
        want, got = [np.asarray(want[k]) for k in want], [np.asarray(got[k]) for k in want]
    if isinstance(want, list) or isinstance(got, list):  # a sequence: element by element
        if not (isinstance(want, list) and isinstance(got, list)) or len(want) != len(got):
            return _differs(name)
        parts = [_compare(name, w, g, rtol, atol, atol_of_range) for w, g in zip(want, got, strict=True)]
        return OutputDifference(
            name=name,
            max_abs=max((p.max_abs for p in parts), default=0.0),
            max_rel=max((p.max_rel for p in parts), default=0.0),
            ok=all(p.ok for p in parts),
        )
    if want is None or got is None:  # an optional without a value
        return _same(name) if want is None and got is None else _differs(name)
    if not (isinstance(want, np.ndarray) and isinstance(got, np.ndarray)):  # scalars from a map
        want, got = np.asarray(want), np.asarray(got)
    if want.dtype.kind in "OUS" or got.dtype.kind in "OUS":
        # Strings: onnxruntime returns objects, an .npz (no pickle) holds fixed-width unicode.
        same = want.shape == got.shape and want.astype(str).tolist() == got.astype(str).tolist()
        return _same(name) if same else _differs(name)
    if got.shape != want.shape or got.dtype != want.dtype:
        return _differs(name)
    if not np.issubdtype(want.dtype, np.number) or want.size == 0:
        return _same(name) if np.array_equal(want, got) else _differs(name)
    if np.issubdtype(want.dtype, np.floating):
        # A cooked model may round differently in the last place (folded constants, other kernels);
        # for float16 that is ~1e-3 relative, above the default rtol. Two ULPs are never a real change.
        rtol = max(rtol, 2 * float(np.finfo(want.dtype).eps))
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    finite = np.isfinite(want64) & np.isfinite(got64)
    nonfinite_same = bool(np.array_equal(want64[~finite], got64[~finite], equal_nan=True))
    diff = np.abs(want64[finite] - got64[finite])
    if atol_of_range:
        atol = max(atol, atol_of_range * float(np.abs(want64[finite]).max(initial=0.0)))
    max_abs = float(diff.max(initial=0.0))
    max_rel = float((diff / np.maximum(np.abs(want64[finite]), np.finfo(np.float64).tiny)).max(initial=0.0))
    ok = nonfinite_same and bool(np.all(diff <= atol + rtol * np.abs(want64[finite])))
    return OutputDifference(name=name, max_abs=max_abs, max_rel=max_rel, ok=ok)


def _same(name: str) -> OutputDifference:
    return OutputDifference(name=name, max_abs=0.0, max_rel=0.0, ok=True)


def _differs(name: str) -> OutputDifference:
    return OutputDifference(name=name, max_abs=float("inf"), max_rel=float("inf"), ok=False)
