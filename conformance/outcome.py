"""Comparing outputs the way onnx's backend runner does, and the categories a (case, platform) ends in."""

from __future__ import annotations

from typing import Any

import numpy as np

# What happened to one case on one platform. A case whose baseline fails gets no platform outcomes.
PASS = "pass"  # cooked, loaded by onnx_cooker.runtime, every data set within the case's tolerances
REFUSED = "refused"  # the platform cannot take the model (runtime too old, ORT format): correct
COOK_FAIL = "cook-fail"  # the cook raised a CookError (checker, optimize, guard, verification)
CRASH = "crash"  # the cook raised something that is not a CookError, or the worker died
LOAD_FAIL = "load-fail"  # the blob was written but onnx_cooker.runtime cannot load or run it
MISMATCH = "mismatch"  # the cooked model runs but its outputs differ from the case's references
WRONG_ACCEPT = "wrong-accept"  # cooked although the platform cannot take the model
RUNTIME_FAIL = "runtime-fail"  # passed here, but fails in the exact onnxruntime the platform ships
PROBE_FAIL = "probe-fail"  # refused correctly, but where the platform could take it the cook breaks
CORRECT = frozenset({PASS, REFUSED})
ORDER = (PASS, REFUSED, COOK_FAIL, CRASH, LOAD_FAIL, MISMATCH, RUNTIME_FAIL, WRONG_ACCEPT, PROBE_FAIL)


def mismatch(expected: Any, actual: Any, rtol: float, atol: float, where: str = "output") -> str | None:
    """None when ``actual`` matches ``expected`` as onnx's ``Runner.assert_similar_outputs`` decides.

    Sequences compare element by element, tensors by shape, dtype (strings by value) and
    ``|actual - expected| <= atol + rtol * |expected|`` with NaN equal to NaN; bfloat16 gets at least
    two ULPs of relative tolerance, as in onnx's runner.
    """
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return f"{where}: expected a sequence, got {type(actual).__name__}"
        if len(actual) != len(expected):
            return f"{where}: expected {len(expected)} sequence elements, got {len(actual)}"
        for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
            problem = mismatch(want, got, rtol, atol, f"{where}[{index}]")
            if problem:
                return problem
        return None
    if expected is None:
        return None if actual is None else f"{where}: expected an empty optional, got a value"
    if actual is None or isinstance(actual, list | dict):
        return f"{where}: expected a tensor, got {type(actual).__name__}"
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        return f"{where}: shape {actual.shape}, expected {expected.shape}"
    if _is_text(expected) or _is_text(actual):
        same = np.array_equal(_as_text(expected), _as_text(actual))
        return None if same else f"{where}: strings differ"
    if expected.dtype != actual.dtype:
        return f"{where}: dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.name == "bfloat16":
        rtol = max(rtol, 2**-6)
    want, got = _as_comparable(expected), _as_comparable(actual)
    close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    worst = float(np.nanmax(np.where(close, 0.0, diff))) if diff.size else 0.0
    return (
        f"{where}: {int((~close).sum())} of {close.size} values differ beyond rtol={rtol:g}, "
        f"atol={atol:g} (max abs {worst:.3g})"
    )


def _is_text(array: np.ndarray) -> bool:
    return array.dtype.kind in "OUS"


def _as_text(array: np.ndarray) -> np.ndarray:
    decode = np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else str(v), otypes=[object])
    return decode(array) if array.size else array.astype(object)


def _as_comparable(array: np.ndarray) -> np.ndarray:
    """numpy cannot do arithmetic on ml_dtypes' float8/float4/int4 and bfloat16: widen them."""
    if array.dtype.kind in "biufc":
        return array
    return array.astype(np.float32)
