"""Checks of single setting values, and the wording every settings problem shares.

A check takes the value's name as the user wrote it (``'verify_dims'``, ``'platforms.ios.include'``)
and the value, and returns one message per problem (empty when the value is fine). The settings table
(``onnx_cooker/settings/table.py``) says which check applies to which setting.

Imported while doit loads tasks: standard library only.
"""

from __future__ import annotations

import math
import re
from typing import Any

from onnx_cooker.runtime.compat import OLDEST_SUPPORTED

Scalar = str | int | float | bool
# Largest dimension size a profile may give (verify_dims, fixed_dims, fixed_shapes): int32, as the
# mobile EPs take; ONNX dims are int64, and protobuf refuses anything larger.
MAX_DIM_SIZE = 2**31 - 1
RUNTIME_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")


def has_type(value: Any, expected: type) -> bool:
    """Whether value is of the expected type; bool is not an int here, an int is a fine float."""
    if expected is bool or isinstance(value, bool):
        return isinstance(value, bool) and expected is bool
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


def type_hint(value: Any, expected: type) -> str:
    """How to fix the most common YAML slips, as a "; ..." tail for a wrong-type message."""
    if isinstance(value, str) and expected is bool:
        return "; write true or false without quotes"
    if isinstance(value, str) and expected in (int, float) and _is_number(value) and "e" in value.lower():
        # YAML 1.1 reads a number with an exponent only with a dot and a signed exponent (1.0e-3)
        number = float(value)
        if expected is int and number.is_integer():
            return f"; YAML reads {value} as text: write {int(number)}"
        return (
            f"; YAML reads {value} as text: write it with a dot and a signed exponent, {_yaml_float(number)}"
        )
    if isinstance(value, str) and expected in (int, float) and _is_number(value):
        return "; write the number without quotes"
    if isinstance(value, int | float) and not isinstance(value, bool) and expected is str:
        return "; put it in quotes (unquoted, YAML reads it as a number: 1.20 becomes 1.2)"
    return ""


def _yaml_float(number: float) -> str:
    """``number`` as YAML 1.1 reads a float: a dot in the mantissa, a sign in the exponent (1.0e+3)."""
    mantissa, exponent = f"{number:e}".split("e")
    mantissa = mantissa.rstrip("0") + ("0" if mantissa.rstrip("0").endswith(".") else "")
    return f"{mantissa}e{exponent[0]}{int(exponent[1:])}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def describe(value: Any) -> str:
    """A found value as a message shows it: its text and, where YAML decided it, its type."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, int):
        return f"{value} (an integer)"
    if isinstance(value, float):
        return f"{value!r} (a float)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{value} (a {type(value).__name__})"


def is_name(value: Any) -> bool:
    """A non-empty string: an EP, option, dimension or input name."""
    return isinstance(value, str) and value.strip() != ""


def check_range(name: str, value: Any, low: float | None, high: float | None) -> list[str]:
    """Every number must be finite; low/high (None: no bound) are inclusive."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{name!r} must be a finite number; got {value!r}"]
    if low is None:
        return []
    if high is None and value < low:
        return [f"{name!r} must be >= {low}; got {value!r}"]
    if high is not None and not low <= value <= high:
        return [f"{name!r} must be between {low} and {high}; got {value!r}"]
    return []


def check_runtime_version(name: str, value: str) -> list[str]:
    if not RUNTIME_VERSION.fullmatch(value):
        return [f'{name!r} must be an onnxruntime version like "1.24" or "1.24.4"; got {value!r}']
    major, minor = (int(part) for part in value.split(".")[:2])
    if (major, minor) < OLDEST_SUPPORTED:
        oldest = ".".join(map(str, OLDEST_SUPPORTED))
        return [
            f"{name!r} is {value}, older than {oldest}, the oldest onnxruntime this cooker targets (ORT "
            f"format v6 and the measured opset limits start there); use {oldest} or newer"
        ]
    return []


def check_one_line(name: str, value: str) -> list[str]:
    return [f"{name!r} must be one line; got {value!r}"] if "\n" in value or "\r" in value else []


def check_names(name: str, value: list[Any]) -> list[str]:
    """Every item a non-empty string (globs, EP names)."""
    return [
        f"'{name}[{index}]' must be a non-empty string; got {describe(item)}"
        for index, item in enumerate(value)
        if not is_name(item)
    ]


def check_dim_sizes(name: str, value: dict[Any, Any]) -> list[str]:
    """Symbolic dimension name -> size in 1..MAX_DIM_SIZE (verify_dims, fixed_dims)."""
    problems = []
    for dim, size in value.items():
        if not is_name(dim):
            problems.append(f"{name!r} keys must be symbolic dimension names; got {describe(dim)}")
        elif isinstance(size, bool) or not isinstance(size, int) or size < 1:
            problems.append(f"'{name}.{dim}' must be an integer >= 1; got {describe(size)}")
        elif size > MAX_DIM_SIZE:
            problems.append(f"'{name}.{dim}' must be at most {MAX_DIM_SIZE:,}; got {size:,}")
    return problems


def check_shapes(name: str, value: dict[Any, Any]) -> list[str]:
    """Input name -> list of sizes in 1..MAX_DIM_SIZE (fixed_shapes)."""
    problems = []
    for input_name, shape in value.items():
        if not is_name(input_name):
            problems.append(f"{name!r} keys must be input names; got {describe(input_name)}")
        elif not isinstance(shape, list) or not all(
            isinstance(size, int) and not isinstance(size, bool) and size >= 1 for size in shape
        ):
            problems.append(f"'{name}.{input_name}' must be a list of integers >= 1; got {describe(shape)}")
        elif max(shape, default=1) > MAX_DIM_SIZE:
            problems.append(
                f"'{name}.{input_name}' sizes must be at most {MAX_DIM_SIZE:,}; got {max(shape):,}"
            )
    return problems
