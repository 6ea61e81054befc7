"""Comparing a cooked model's outputs with the source's: shared by the cook and the runtime check.

Imports only numpy and the standard library: it also runs inside the isolated environments that
hold a target's exact onnxruntime version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# The scale-aware rule checks the largest error against this many times ``scale`` of the output's
# largest magnitude (beside the relative L2 error against ``scale`` itself), and allows each figure
# NOISE_FACTOR times the source's own rounding noise where that is larger: docs/verification.md.
OF_RANGE_FACTOR = 10.0
NOISE_FACTOR = 4.0
# The noise raises a bound at most this many times ``scale``: a source that rounds more than that
# (1e-3 of the output with the default scale: an fp16 model, say) needs explicit tolerances.
NOISE_CAP = 100.0
# onnxruntime's seed for random operators without a `seed` attribute (RandomNormalLike, ...), set in
# every process that runs a model to compare (onnxruntime.set_seed): a fresh session's first run then
# draws the same values in the source's and the cooked model's sessions, in every onnxruntime version.
RANDOM_SEED = 20250101


@dataclass(frozen=True, kw_only=True)
class OutputDifference:
    """How far one output of the cooked model is from the source's, and whether that is within tolerance."""

    name: str
    max_abs: float
    max_rel: float
    ok: bool
    # Scale-aware figures of float and integer tensors (sequences: the worst element):
    of_range: float = 0.0  # max |got - want| / max |want|
    rel_l2: float = 0.0  # ||got - want|| / ||want|| (Euclidean norms over the whole output)
    cosine: float = 1.0  # of got and want as vectors; 1.0 when both are zero
    # Which rule passed it: "elementwise" (rtol/atol), "scale" (rel_l2 and of_range within the fixed
    # bounds), "noise" (within them raised to the source's own rounding noise), "default-level"
    # (within them of the source's output at onnxruntime's default level: verify.verify); "" if none.
    passed_by: str = "elementwise"
    # The element with the largest error: its index and both values ("" when nothing differs).
    worst: str = ""
    # The source's own rounding noise on these inputs (rel_l2, of_range; 0 when not measured).
    noise_rel_l2: float = 0.0
    noise_of_range: float = 0.0


def compare(
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    rtol: float,
    atol: float,
    atol_of_range: float = 0.0,
    scale: float = 0.0,
    noise: Mapping[str, tuple[float, float]] | None = None,
) -> list[OutputDifference]:
    """One result per output: tensors, sequence outputs (lists) and optionals without a value (None).

    An output passes when every element is within ``atol + rtol * |want|`` (elementwise), or, with
    ``scale``, when its relative L2 error is at most ``scale`` and its largest error at most
    ``OF_RANGE_FACTOR * scale`` of its largest magnitude, each bound raised to ``NOISE_FACTOR``
    times the output's ``noise`` (the same figures between two correct runs of the source: with
    optimizations off and at onnxruntime's default level) where that is larger. Float32 rounding
    through a deep network (fused Conv+BatchNorm, reassociated sums) moves outputs near zero by far
    more than ``rtol`` of themselves and the whole output by about 1e-6 of its size, while a wrong
    weight, a dropped bias or swapped outputs move it by 1e-4 and more (docs/verification.md); a
    model whose outputs cancel (small logits of large features) rounds more, and its noise says so.
    Non-finite values must match.

    ``atol_of_range`` raises each float output's atol to that share of its largest finite magnitude:
    an int8 variant's rounding is a number of quantization steps, and a step is the output's range
    over 255, so a fixed atol is too tight for outputs in the tens and meaningless for tiny ones.
    """
    noise = noise or {}
    with np.errstate(divide="ignore", over="ignore"):  # errors over near-zero outputs are inf, quietly
        return [
            _compare(name, want, actual[name], rtol, atol, atol_of_range, scale, noise.get(name, (0.0, 0.0)))
            for name, want in expected.items()
        ]


def _compare(
    name: str,
    want: Any,
    got: Any,
    rtol: float,
    atol: float,
    atol_of_range: float = 0.0,
    scale: float = 0.0,
    noise: tuple[float, float] = (0.0, 0.0),
) -> OutputDifference:
    if isinstance(want, dict) or isinstance(got, dict):  # a map (e.g. ZipMap): same keys, values
        if not (isinstance(want, dict) and isinstance(got, dict)) or want.keys() != got.keys():
            return _differs(name, "a map with other keys than the source's")
        want, got = [np.asarray(want[k]) for k in want], [np.asarray(got[k]) for k in want]
    if isinstance(want, list) or isinstance(got, list):  # a sequence: element by element
        if not (isinstance(want, list) and isinstance(got, list)) or len(want) != len(got):
            return _differs(name, f"{_kind(got)} where the source gives {_kind(want)}")
        parts = [
            _compare(name, w, g, rtol, atol, atol_of_range, scale, noise)
            for w, g in zip(want, got, strict=True)
        ]
        ok = all(p.ok for p in parts)
        return OutputDifference(
            name=name,
            max_abs=max((p.max_abs for p in parts), default=0.0),
            max_rel=max((p.max_rel for p in parts), default=0.0),
            ok=ok,
            of_range=max((p.of_range for p in parts), default=0.0),
            rel_l2=max((p.rel_l2 for p in parts), default=0.0),
            cosine=min((p.cosine for p in parts), default=1.0),
            passed_by=("scale" if any(p.passed_by == "scale" for p in parts) else "elementwise")
            if ok
            else "",
            worst=next((f"element {i} {p.worst}" for i, p in enumerate(parts) if not p.ok and p.worst), ""),
        )
    if want is None or got is None:  # an optional without a value
        return (
            _same(name)
            if want is None and got is None
            else _differs(name, f"{_kind(got)} where the source gives {_kind(want)}")
        )
    if not (isinstance(want, np.ndarray) and isinstance(got, np.ndarray)):  # scalars from a map
        want, got = np.asarray(want), np.asarray(got)
    if want.dtype.kind in "OUS" or got.dtype.kind in "OUS":
        # Strings: onnxruntime returns objects, an .npz (no pickle) holds fixed-width unicode.
        same = want.shape == got.shape and want.astype(str).tolist() == got.astype(str).tolist()
        return _same(name) if same else _differs(name, "other strings than the source's")
    if got.shape != want.shape or got.dtype != want.dtype:
        return _differs(name, f"{_kind(got)} where the source gives {_kind(want)}")
    if not np.issubdtype(want.dtype, np.number) or want.size == 0:
        return _same(name) if np.array_equal(want, got) else _differs(name, "other values than the source's")
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
    figures = scale_figures(want64[finite], got64[finite])
    if not nonfinite_same:
        passed_by = ""
    elif bool(np.all(diff <= atol + rtol * np.abs(want64[finite]))):
        passed_by = "elementwise"
    elif scale and want.dtype.kind == "f":  # integers (ids, classes, counts) must be exact
        passed_by = _scale_rule(figures, scale, noise)
    else:
        passed_by = ""
    return OutputDifference(
        name=name,
        max_abs=max_abs,
        max_rel=max_rel,
        ok=bool(passed_by),
        passed_by=passed_by,
        worst=_worst(want64, got64, finite) if not passed_by else "",
        noise_rel_l2=noise[0],
        noise_of_range=noise[1],
        **figures,
    )


def _scale_rule(figures: Mapping[str, float], scale: float, noise: tuple[float, float]) -> str:
    """ "scale" within the fixed bounds, "noise" within those raised by the source's rounding noise
    (``NOISE_FACTOR`` times it, at most ``NOISE_CAP`` times the fixed ones), else ""."""
    l2, span = figures["rel_l2"], figures["of_range"]
    if l2 <= scale and span <= OF_RANGE_FACTOR * scale:
        return "scale"
    l2_bound = min(max(scale, NOISE_FACTOR * noise[0]), NOISE_CAP * scale)
    span_bound = min(
        max(OF_RANGE_FACTOR * scale, NOISE_FACTOR * noise[1]), NOISE_CAP * OF_RANGE_FACTOR * scale
    )
    return "noise" if l2 <= l2_bound and span <= span_bound else ""


def _worst(want: np.ndarray, got: np.ndarray, finite: np.ndarray) -> str:
    """Where the outputs differ most: a non-finite mismatch first, else the largest error."""
    mismatch = ~finite & ~((np.isnan(want) & np.isnan(got)) | (want == got))
    if mismatch.any():
        index = np.unravel_index(int(np.argmax(mismatch)), want.shape)
    else:
        diff = np.where(finite, np.abs(want - got), -1.0)
        index = np.unravel_index(int(np.argmax(diff)), want.shape)
    where = list(map(int, index))
    return f"at {where}: {float(got[index]):.7g} where the source gives {float(want[index]):.7g}"


def _weakest(parts: list[OutputDifference]) -> str:
    """The most lenient rule any element of a sequence passed by."""
    for rule in ("noise", "scale"):
        if any(p.passed_by == rule for p in parts):
            return rule
    return "elementwise"


def scale_figures(want: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """``of_range``, ``rel_l2`` and ``cosine`` of two float64 vectors of finite values."""
    diff = got - want
    tiny = np.finfo(np.float64).tiny
    largest = float(np.abs(want).max(initial=0.0))
    norm_want, norm_got = float(np.linalg.norm(want)), float(np.linalg.norm(got))
    norm_diff = float(np.linalg.norm(diff))
    if norm_want == 0.0 and norm_got == 0.0:
        cosine = 1.0
    elif norm_want == 0.0 or norm_got == 0.0:
        cosine = 0.0
    else:
        cosine = float(np.dot(want.ravel(), got.ravel()) / (norm_want * norm_got))
    return {
        "of_range": float(np.abs(diff).max(initial=0.0)) / max(largest, tiny) if norm_diff else 0.0,
        "rel_l2": norm_diff / max(norm_want, tiny) if norm_diff else 0.0,
        "cosine": cosine,
    }


def _same(name: str) -> OutputDifference:
    return OutputDifference(name=name, max_abs=0.0, max_rel=0.0, ok=True)


def _differs(name: str, why: str = "") -> OutputDifference:
    """An output that cannot be compared element by element; ``why`` (in ``worst``) says how it differs."""
    inf = float("inf")
    return OutputDifference(
        name=name,
        max_abs=inf,
        max_rel=inf,
        ok=False,
        of_range=inf,
        rel_l2=inf,
        cosine=0.0,
        passed_by="",
        worst=why,
    )


def _kind(value: Any) -> str:
    """What an output is, for a message: its shape and type, a sequence's length, or no value."""
    if value is None:
        return "no value"
    if isinstance(value, list):
        return f"a sequence of {len(value)}"
    if isinstance(value, dict):
        return f"a map of {len(value)}"
    array = np.asarray(value)
    return f"shape {tuple(array.shape)} {array.dtype}"
