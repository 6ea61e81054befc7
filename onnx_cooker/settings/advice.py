"""Advice the cook and its runtime check give in messages, where it depends on a platform's settings.

Standard library only: the runtime check's worker imports it inside each target onnxruntime's own
environment (no yaml there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def onnx_instead(
    platform: str, *, reduced_build: bool, runtime_style: bool, cook_yaml: str = "the model's .cook.yaml"
) -> str:
    """How to cook one model as ONNX on an ORT-format platform, as the settings check accepts it (the
    format for this platform only; the fixed style at `basic` where the platform's style is runtime,
    which applies basic and saves the rest for ORT format to replay), or, where the platform's
    reduced onnxruntime loads ORT format only, how to leave the platform out."""
    if reduced_build:
        return (
            f"platform {platform!r} ships a reduced onnxruntime build, which loads ORT format only: list "
            f"it in `skip_platforms` in {cook_yaml}"
        )
    style = ", `optimization_style: fixed` and `optimization_level: basic`" if runtime_style else ""
    return (
        f"set `format: onnx`{style} in the `platforms: {{{platform}: {{...}}}}` section of {cook_yaml}, "
        f"or list {platform!r} in its `skip_platforms`"
    )


def onnx_instead_for(
    platform: str, settings: Mapping[str, Any], cook_yaml: str = "the model's .cook.yaml"
) -> str:
    """``onnx_instead`` for a model's settings as its manifest entry records them (plain values)."""
    return onnx_instead(
        platform,
        reduced_build=bool(settings.get("reduced_build")),
        runtime_style=settings.get("optimization_style") == "runtime",
        cook_yaml=cook_yaml,
    )


def tolerance_for(platform: str, max_abs: float, name: str) -> str | None:
    """The line of ``name``'s .cook.yaml that accepts differences up to ``max_abs`` (the largest over
    every output: an explicit atol turns the scale rule off for all of them) on ``platform``: an
    ``atol`` of twice it, rounded up to one significant digit, written as YAML reads a float (with a
    dot: PyYAML takes ``2e-05`` for text). None for a difference no atol accepts (inf, NaN)."""
    if not math.isfinite(max_abs) or max_abs > 1e15:
        return None
    value = max(2 * max_abs, 1e-6)
    exponent = math.floor(math.log10(value))
    rounded = float(f"{math.ceil(value / 10**exponent) * 10**exponent:.1g}")
    text = f"{rounded:g}" if 1e-4 <= rounded < 1e6 else f"{rounded:.1e}"
    return f"`platforms: {{{platform}: {{atol: {text}}}}}` in {name}.cook.yaml"


def lower_level_helps(level: str | None) -> bool:
    """Whether `optimization_level: basic` is advice for a model cooked at ``level``: not at `basic`,
    the lowest level a cook takes (`disable` would ship an unoptimized model); None (settings not
    recorded): it may be."""
    return level != "basic"
