"""The converter options a model may set per precision (``precision_options``): each option's
allowed values and its default for each precision it applies to.

``precision_options: {int8-static: {per_channel: false, calibrate_method: entropy}}`` overrides the
defaults below for that precision only; options of a precision the model is not cooked at are kept
(a platform may name options for several precisions) and do nothing. The resolved options are
recorded in the manifest entry's ``precision.options``.

Imported while doit loads tasks: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnx_cooker.runtime.constants import Precision

FP16, INT8_DYNAMIC, INT8_STATIC = (
    Precision.FP16.value,
    Precision.INT8_DYNAMIC.value,
    Precision.INT8_STATIC.value,
)
_BOOLS = (True, False)

# option -> (allowed values, {precision: default}); the defaults are what onnxruntime's tools
# recommend for each format (signed symmetric per-channel weights for QDQ, which NNAPI/XNNPACK take).
OPTIONS: Mapping[str, tuple[tuple[Any, ...], Mapping[str, Any]]] = {
    "keep_io_types": (_BOOLS, {FP16: True}),
    "per_channel": (_BOOLS, {INT8_DYNAMIC: False, INT8_STATIC: True}),
    "reduce_range": (_BOOLS, {INT8_DYNAMIC: False, INT8_STATIC: False}),
    "weight_type": (("int8", "uint8"), {INT8_DYNAMIC: "int8", INT8_STATIC: "int8"}),
    "activation_type": (("uint8", "int8"), {INT8_STATIC: "uint8"}),
    "activation_symmetric": (_BOOLS, {INT8_STATIC: False}),
    "weight_symmetric": (_BOOLS, {INT8_STATIC: True}),
    "calibrate_method": (("minmax", "entropy", "percentile"), {INT8_STATIC: "minmax"}),
}
LOWER_PRECISIONS = (FP16, INT8_DYNAMIC, INT8_STATIC)


def applicable(precision: str) -> tuple[str, ...]:
    return tuple(name for name, (_, defaults) in OPTIONS.items() if precision in defaults)


def resolved(precision: str, given: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The options a cook at ``precision`` uses: the defaults, overridden by ``given[precision]``."""
    options = {name: OPTIONS[name][1][precision] for name in applicable(precision)}
    options.update(given.get(precision, {}))
    return options


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def check(name: str, value: Mapping[Any, Any]) -> list[str]:
    """A mapping of precision -> mapping of option -> one of the option's values."""
    problems = []
    for precision, options in value.items():
        if precision not in LOWER_PRECISIONS:
            problems.append(
                f"{name!r} keys must be precisions ({', '.join(LOWER_PRECISIONS)}); got {precision!r}"
            )
            continue
        if not isinstance(options, dict):
            problems.append(f"'{name}.{precision}' must be a mapping of option names to values")
            continue
        for option, chosen in options.items():
            where = f"'{name}.{precision}.{option}'"
            known = applicable(precision)
            if option not in known:
                problems.append(f"{where} is not an option of {precision}; its options: {', '.join(known)}")
                continue
            allowed = OPTIONS[option][0]
            if not any(chosen is a or (not isinstance(a, bool) and chosen == a) for a in allowed):
                problems.append(f"{where} must be one of {', '.join(map(_show, allowed))}; got {chosen!r}")
    return problems


def schema() -> dict[str, Any]:
    """The JSON Schema of the setting's value (docs/settings.schema.json)."""
    properties = {}
    for precision in LOWER_PRECISIONS:
        options = {name: {"enum": list(OPTIONS[name][0])} for name in applicable(precision)}
        properties[precision] = {"type": "object", "properties": options, "additionalProperties": False}
    return {"properties": properties, "additionalProperties": False}
