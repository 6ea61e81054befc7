"""Comparing a cooked model's outputs with the source's: shared by the cook and the runtime check.

Imports only numpy and the standard library: it also runs inside the isolated environments that
hold a target's exact onnxruntime version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class OutputError:
    name: str
    max_abs: float
    max_rel: float
    ok: bool


def compare(
    expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray], rtol: float, atol: float
) -> list[OutputError]:
    results = []
    for name, want in expected.items():
        got = actual[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            results.append(OutputError(name=name, max_abs=float("inf"), max_rel=float("inf"), ok=False))
            continue
        if not np.issubdtype(want.dtype, np.number) or want.size == 0:
            same = bool(np.array_equal(want, got))
            results.append(
                OutputError(name=name, max_abs=0.0 if same else float("inf"), max_rel=0.0, ok=same)
            )
            continue
        want64, got64 = want.astype(np.float64), got.astype(np.float64)
        finite = np.isfinite(want64) & np.isfinite(got64)
        nonfinite_same = bool(np.array_equal(want64[~finite], got64[~finite], equal_nan=True))
        diff = np.abs(want64[finite] - got64[finite])
        max_abs = float(diff.max(initial=0.0))
        max_rel = float(
            (diff / np.maximum(np.abs(want64[finite]), np.finfo(np.float64).tiny)).max(initial=0.0)
        )
        ok = nonfinite_same and bool(np.all(diff <= atol + rtol * np.abs(want64[finite])))
        results.append(OutputError(name=name, max_abs=max_abs, max_rel=max_rel, ok=ok))
    return results
