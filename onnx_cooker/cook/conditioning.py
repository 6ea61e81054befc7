"""Whether synthesized inputs can verify a model at all.

Floats from a normal distribution drive some models far outside the range they were trained on: a
ZEISS nucleus segmenter from PyPI (napari-czann-segment, a TensorFlow-converted EfficientNet U-Net)
reaches activations of 1e4 on them, and its two-class softmax then flips pixels on rounding alone.
Measured there (onnxruntime 1.32): moving every input up by one float32 step moves the output by
relative L2 6.1e-5 (largest error 0.009 of the largest magnitude), the size of the android blob's
whole error (9.7e-5); onnxruntime's default level moves it by 0.084. No bound tells a correct cook
from a wrong one on such inputs, and the failure advised a `verify_scale` that would accept 10%
errors. On floats uniform in [0, 1) (normalized pixels) the same model moves by 4.2e-7 and every
platform's blob verifies.

So where a cooked model fails on synthesized inputs, the cook measures the source's own swing (one
float step on every input, ``input_swing``). Where that alone breaks the bounds, the inputs are
ill-conditioned for this model: verification runs again on floats uniform in [0, 1), and a failure
there is reported as it is, or, where those are ill-conditioned too, as a model that synthesized
inputs cannot verify (ship sample inputs). Explicit ``rtol``/``atol`` (``verify_scale`` off) are
the user's bounds, whatever the inputs: no second try there.

Some inputs are outside a model's domain altogether: terrain-diffusion's denoiser (PyPI) takes a
noise level ``sigma`` that normal floats make negative, and its output is then NaN everywhere. NaN
compares equal to NaN, so the cook "verified" it with an error of 0, and OpenVINO, which computes
numbers there, failed the runtime check. An output without one finite value, NaN among them,
verifies nothing (``nonfinite_outputs``): synthesized inputs are drawn again as floats in [0, 1).
Sample inputs are the user's choice and stay (the ONNX backend suite's own: a reduction over an
empty set is -inf, or NaN, by its definition).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnx_cooker.cook.compare import OutputDifference, compare
from onnx_cooker.cook.verify import reference_outputs
from onnx_cooker.settings.resolve import CookSettings

UNIT_FLOATS = "floats uniform in [0, 1)"


def nonfinite_outputs(reference: Mapping[str, Any]) -> list[str]:
    """The float outputs of the source that hold values but no finite one, NaN among them (an
    infinity alone can be the answer: the maximum of an empty set is -inf)."""
    return [
        name
        for name, value in reference.items()
        if isinstance(value, np.ndarray)
        and value.dtype.kind in "fc"
        and value.size
        and not np.isfinite(value).any()
        and np.isnan(value).any()
    ]


def nudged(feeds: Mapping[str, Any]) -> dict[str, Any] | None:
    """``feeds`` with every float moved up by one step of its type; None where no input is a float."""
    moved = {
        name: np.nextafter(value, np.inf).astype(value.dtype)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f"
        else value
        for name, value in feeds.items()
    }
    return moved if any(moved[name] is not feeds[name] for name in feeds) else None


def input_swing(
    model: onnx.ModelProto,
    feeds: Mapping[str, Any],
    settings: CookSettings,
    of_range: float,
    work_dir: Path | None = None,
) -> list[OutputDifference]:
    """The source's outputs that one float step on every input moves beyond the verification bounds
    (the fixed ones: no noise raise); empty where the inputs are well-conditioned for the model, or
    have no floats. Both runs are made here, the same way (none is taken from the reference memo,
    whose outputs the cook trusts but does not check). Raises onnxruntime's errors on the source."""
    moved_feeds = nudged(feeds)
    if moved_feeds is None:
        return []
    base = reference_outputs(model, feeds, work_dir)
    moved = reference_outputs(model, moved_feeds, work_dir)
    results = compare(base, moved, settings.rtol, settings.atol, of_range, settings.verify_scale)
    return [result for result in results if not result.ok]


def swing_text(swung: list[OutputDifference]) -> str:
    """How far one float step moved the source's outputs, for a message."""
    return ", ".join(
        f"{r.name!r} by relative L2 {r.rel_l2:.2g} (largest error {r.of_range:.2g} of its largest magnitude)"
        for r in swung
    )


def ill_conditioned_message(
    first: list[OutputDifference], unit: list[OutputDifference], failure: str, hint: str
) -> str:
    """The failure where neither kind of synthesized inputs can verify the model."""
    return (
        "synthesized inputs cannot verify this model: the source itself is ill-conditioned on them, so "
        "no bound tells a correct cook from a wrong one (one float32 step up on every input moves "
        f"{swing_text(first)} on floats from a normal distribution, and {swing_text(unit)} on "
        f"{UNIT_FLOATS}); ship sample inputs from real data as {hint} (numpy.savez, keys = input "
        f"names). The cooked model's outputs on the second inputs: {failure}"
    )
