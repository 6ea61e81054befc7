"""Comparing outputs of every kind onnxruntime returns: tensors, strings, sequences, optionals, maps."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.compare import compare

RTOL, ATOL = 1e-4, 1e-5


def one(want: object, got: object) -> bool:
    (result,) = compare({"y": want}, {"y": got}, RTOL, ATOL)
    return result.ok


@pytest.mark.parametrize(
    ("want", "got", "ok"),
    [
        (np.array([1.0, 2.0], np.float32), np.array([1.0, 2.00001], np.float32), True),
        (np.array([1.0, 2.0], np.float32), np.array([1.0, 2.1], np.float32), False),
        (np.array([1.0], np.float32), np.array([1.0], np.float64), False),  # dtype changed
        (np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), True),
        (np.array([np.nan, 1.0]), np.array([0.0, 1.0]), False),
        (np.array(["a", "b"], object), np.array(["a", "b"], np.str_), True),  # objects vs npz unicode
        (np.array(["a", "b"], object), np.array(["a", "c"], object), False),
        ([np.ones(2), np.zeros(3)], [np.ones(2), np.zeros(3)], True),  # a sequence
        ([np.ones(2)], [np.ones(2), np.zeros(3)], False),
        (None, None, True),  # an optional without a value
        (None, np.ones(1), False),
        ([{"cat": 0.25, "dog": 0.75}], [{"cat": 0.25, "dog": 0.75}], True),  # ZipMap: a sequence of maps
        ([{"cat": 0.25}], [{"cow": 0.25}], False),
        ({1: np.float32(0.5)}, {1: np.float32(0.6)}, False),
    ],
)
def test_every_output_kind(want: object, got: object, ok: bool) -> None:
    assert one(want, got) is ok


def test_float16_gets_at_least_two_ulps_float32_keeps_the_given_rtol() -> None:
    value = np.float16(1.0)
    next_up = np.nextafter(value, np.float16(2.0))
    assert one(np.array([value]), np.array([next_up]))
    assert not one(np.array([1.0], np.float32), np.array([1.001], np.float32))


def test_atol_of_range_scales_the_tolerance_with_each_outputs_magnitude() -> None:
    """int8 variants: an error of a few quantization steps passes on an output in the tens, where a
    fixed atol refuses it, and gives nothing extra to an output near zero."""
    big = np.linspace(-20, 20, 64, dtype=np.float32)
    small = np.linspace(-0.01, 0.01, 64, dtype=np.float32)
    expected = {"big": big, "small": small}
    actual = {"big": big + 0.5, "small": small + 0.005}
    fixed = {r.name: r.ok for r in compare(expected, actual, 0.0, 0.15)}
    scaled = {r.name: r.ok for r in compare(expected, actual, 0.0, 0.15, atol_of_range=0.05)}
    assert fixed == {"big": False, "small": True}
    assert scaled == {"big": True, "small": True}  # 0.05 of 20 is 1.0 >= 0.5
    assert not compare({"big": big}, {"big": big + 1.5}, 0.0, 0.15, atol_of_range=0.05)[0].ok
