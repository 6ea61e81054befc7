"""Comparing outputs of every kind onnxruntime returns: tensors, strings, sequences, optionals, maps."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_cooker.cook.compare import compare

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


def logits_with_rounding(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logits of magnitude ~3 and float32 rounding of 1e-6 of that scale: elements near zero miss
    rtol=1e-4 of themselves, the output as a whole is 3e-7 away (docs/verification.md)."""
    rng = np.random.default_rng(seed)
    want = rng.standard_normal((2, 1000)).astype(np.float32) * 3
    want[0, 7] = 2e-3  # a logit near zero
    got = want + rng.standard_normal(want.shape).astype(np.float32) * 1e-6
    got[0, 7] = want[0, 7] + 2e-5  # 1% of itself: beyond rtol/atol, nothing at the output's scale
    return want, got


def test_the_scale_rule_passes_rounding_the_elementwise_rule_refuses() -> None:
    want, got = logits_with_rounding()
    (strict,) = compare({"y": want}, {"y": got}, RTOL, ATOL)
    (scaled,) = compare({"y": want}, {"y": got}, RTOL, ATOL, scale=1e-5)
    assert not strict.ok and strict.passed_by == "" and "at [0, 7]" in strict.worst
    assert scaled.ok and scaled.passed_by == "scale" and scaled.worst == ""
    assert scaled.rel_l2 < 1e-6 and scaled.of_range < 1e-5 and scaled.cosine > 0.999999


@pytest.mark.parametrize(
    "breakage",
    ["one percent off", "one element off by 1e-3 of the range", "a NaN", "shifted", "zeros"],
)
def test_the_scale_rule_still_refuses_real_differences(breakage: str) -> None:
    want, got = logits_with_rounding()
    if breakage == "one percent off":
        got = want * 1.01
    elif breakage == "one element off by 1e-3 of the range":
        got[1, 500] += 1e-3 * float(np.abs(want).max())
    elif breakage == "a NaN":
        got[1, 3] = np.nan
    elif breakage == "shifted":
        got = np.roll(want, 1, axis=1)
    else:
        got = np.zeros_like(want)
    (result,) = compare({"y": want}, {"y": got}, RTOL, ATOL, scale=1e-5)
    assert not result.ok and result.worst.startswith("at [")


def test_integer_outputs_get_no_scale_rule() -> None:
    """One wrong class id among 200,000 is a wrong answer, however small its share of the norm."""
    want = np.arange(200_000, dtype=np.int64) % 1000
    got = want.copy()
    got[12_345] += 1
    (result,) = compare({"ids": want}, {"ids": got}, RTOL, ATOL, scale=1e-5)
    assert not result.ok and result.rel_l2 < 1e-5 and "at [12345]" in result.worst


def test_the_sources_own_rounding_noise_raises_the_bound_up_to_its_cap() -> None:
    """4x the noise (same figures between two correct runs of the source) where that is more than
    verify_scale, at most 100x verify_scale; the rule that passed is recorded."""
    rng = np.random.default_rng(3)
    want = rng.standard_normal(10_000)
    got = want + rng.standard_normal(want.shape) * 5e-5  # rel_l2 5e-5: beyond verify_scale 1e-5
    fixed, noisy, capped = (
        compare({"y": want}, {"y": got}, 0.0, 0.0, scale=1e-5, noise=noise)[0]
        for noise in ({}, {"y": (2e-5, 2e-4)}, {"y": (1.0, 1.0)})
    )
    assert not fixed.ok
    assert noisy.ok and noisy.passed_by == "noise" and noisy.noise_rel_l2 == 2e-5
    assert capped.ok  # 5e-5 is under the cap (1e-3) too
    far = want + rng.standard_normal(want.shape) * 5e-3  # rel_l2 5e-3: over the cap whatever the noise
    (beyond,) = compare({"y": want}, {"y": far}, 0.0, 0.0, scale=1e-5, noise={"y": (1.0, 1.0)})
    assert not beyond.ok


def test_a_failure_onnxruntime_itself_explains_names_the_verify_scale_that_passes_it() -> None:
    """The source moves 0.45% under onnxruntime's default optimizations (beyond the noise cap) and the
    blob as much: the message names a verify_scale, and compare passes the blob with it. An output
    that is zero in the source (relative errors infinite) gets no suggestion and no crash."""
    from onnx_cooker.cook.verify import failure_message

    rng = np.random.default_rng(3)
    want = rng.standard_normal(256).astype(np.float32)
    got = want + 0.0045 * np.linalg.norm(want) / 16 * rng.standard_normal(256).astype(np.float32)
    noise = {"y": (0.0045, 0.02)}
    failed = compare({"y": want}, {"y": got}, 1e-4, 1e-5, scale=1e-5, noise=noise)
    assert not failed[0].ok
    message = failure_message(failed, 1e-4, 1e-5, 0.0, 1e-5)
    scale = float(message.split("`verify_scale: ")[1].split("`")[0])
    assert "onnxruntime's own default optimizations move" in message and 0.0045 < scale <= 0.01
    assert compare({"y": want}, {"y": got}, 1e-4, 1e-5, scale=scale, noise=noise)[0].ok
    zero = np.zeros(8, np.float32)
    inf = float("inf")
    failed = compare({"z": zero}, {"z": zero + 10}, 1e-4, 1e-5, scale=1e-5, noise={"z": (inf, inf)})
    message = failure_message(failed, 1e-4, 1e-5, 0.0, 1e-5)
    assert "`verify_scale:" not in message and "raise `verify_scale`" in message


@pytest.mark.parametrize(
    ("want", "got", "why"),
    [
        (
            np.zeros((1, 8), np.float32),
            np.zeros((0, 8), np.float32),
            "shape (0, 8) float32 where the source gives shape (1, 8) float32",
        ),
        (
            np.zeros(3, np.float32),
            np.zeros(3, np.float64),
            "shape (3,) float64 where the source gives shape (3,) float32",
        ),
        ([np.zeros(2)], [], "a sequence of 0 where the source gives a sequence of 1"),
        (np.zeros(2), None, "no value where the source gives shape (2,) float64"),
        ({"a": 1.0}, {"b": 1.0}, "a map with other keys than the source's"),
        (np.array(["x"], object), np.array(["y"], object), "other strings than the source's"),
    ],
    ids=["rows", "dtype", "sequence", "optional", "map", "strings"],
)
def test_an_output_not_comparable_element_by_element_says_how_it_differs(
    want: object, got: object, why: str
) -> None:
    """It read "max abs inf" (OpenVINO returned (0, 8) against the source's (1, 8), and the runtime
    check said only that); now the shapes, lengths or kinds, in the verification's and the runtime
    check's messages."""
    from onnx_cooker.cook.verify import differences

    (result,) = compare({"y": want}, {"y": got}, 1e-3, 1e-4)
    assert not result.ok and result.worst == why
    assert differences([result]) == f"'y': {why}"
