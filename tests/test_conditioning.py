"""Synthesized inputs a model is ill-conditioned on verify nothing: the cook then verifies on floats
uniform in [0, 1), or says that only sample inputs can verify the model (onnx_cooker/cook/conditioning.py).

The models here amplify a value's last bit a millionfold (``sin(1e6 * v)``), as a deep net driven
far outside its training range by normal floats does (a ZEISS segmenter from PyPI: activations of 1e4,
pixels of its softmax flipped by rounding). Their Conv + BatchNormalization pair is fused by the cook
(onnxruntime's basic level), which rounds the value differently: the cooked model is correct, and on
ill-conditioned inputs its outputs still differ from the source's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.build.summary import cook_line
from onnx_cooker.cook.conditioning import UNIT_FLOATS, input_swing, nudged
from onnx_cooker.errors import VerifyError
from onnx_cooker.layout import blob_path, verify_data_path
from onnx_cooker.runtime import session_from_blob
from tests.models import RNG_SEED, model_of
from tests.test_cook import job_for, save, shipped_settings
from tests.test_model_classes import cook_unconfigured

CPU = ["CPUExecutionProvider"]


def amplifier_model(negative_only: bool) -> onnx.ModelProto:
    """x [1, 4, 8, 8] -> t = BatchNormalization(Conv(x)) with positive weights; y = t + sin(1e6 * u),
    where u is -t's positive part (``negative_only``: floats in [0, 1) make t positive, so u is 0
    and y is t, well-conditioned) or t itself (ill-conditioned on any floats)."""
    rng = np.random.default_rng(RNG_SEED)
    amplified = ["minus_t"] if negative_only else ["t"]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["t"]),
        *(
            [helper.make_node("Neg", ["t"], ["negated"]), helper.make_node("Relu", ["negated"], ["minus_t"])]
            if negative_only
            else []
        ),
        helper.make_node("Mul", [amplified[0], "gain"], ["wound"]),
        helper.make_node("Sin", ["wound"], ["wave"]),
        helper.make_node("Add", ["t", "wave"], ["y"]),
    ]
    initializers = {
        "w": rng.uniform(0.1, 1.0, (4, 4, 1, 1)).astype(np.float32),
        "scale": rng.uniform(0.5, 2.0, 4).astype(np.float32),
        "bias": rng.uniform(0.1, 0.5, 4).astype(np.float32),
        "mean": np.zeros(4, np.float32),
        "var": rng.uniform(0.3, 3.0, 4).astype(np.float32),
        "gain": np.array(1e6, np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "amplifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(value, name) for name, value in initializers.items()],
    )
    return model_of(graph, opset=17)


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=CPU).run(
        None, {"x": x}
    )[0]


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_ill_conditioned_normal_floats_are_replaced_by_unit_floats(tmp_path: Path, platform: str) -> None:
    model = amplifier_model(negative_only=True)
    entry = cook_unconfigured(model, "amp", platform, tmp_path)
    verification = entry["verification"]
    assert verification["floats"] == UNIT_FLOATS
    assert verification["outputs"][0]["ok"]
    assert verification["normal_floats_swing"]["y"][0] > 1e-3  # the normal floats' swing, recorded
    assert f"(synthesized inputs, {UNIT_FLOATS}), max abs error" in cook_line(entry)

    # The runtime check's inputs are the ones verified on; on them the blob gives the source's outputs
    with np.load(verify_data_path(tmp_path / "build" / platform, "amp")) as data:
        x, want = data["input/x"], data["output/y"]
    assert 0 <= x.min() and x.max() < 1
    settings = shipped_settings(platform)
    blob = blob_path(tmp_path / "build" / platform, "amp", settings.format).read_bytes()
    (got,) = session_from_blob(blob, providers=CPU).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run(model, x), want, rtol=1e-6, atol=1e-7)


def test_the_swing_is_measured_on_the_source_itself() -> None:
    """One float step on every input moves the ill-conditioned source beyond the bounds; floats in
    [0, 1) do not move the other one, nor does a model without float inputs get nudged."""
    settings = shipped_settings("windows-dml")
    rng = np.random.default_rng(RNG_SEED)
    normal = {"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    unit = {"x": rng.random((1, 4, 8, 8)).astype(np.float32)}
    for model, feeds, swings in [
        (amplifier_model(negative_only=True), normal, True),
        (amplifier_model(negative_only=True), unit, False),
        (amplifier_model(negative_only=False), unit, True),
    ]:
        swung = input_swing(model, feeds, settings, 0.0)
        assert bool(swung) == swings, [r.rel_l2 for r in swung]
    assert nudged({"ids": np.array([1, 2], np.int64)}) is None
    assert (nudged(unit)["x"] > unit["x"]).all()


def test_a_model_no_synthesized_inputs_can_verify_says_to_ship_sample_inputs(tmp_path: Path) -> None:
    with pytest.raises(VerifyError) as failure:
        cook_unconfigured(amplifier_model(negative_only=False), "wild", "windows-dml", tmp_path)
    message = str(failure.value)
    assert "synthesized inputs cannot verify this model: the source itself is ill-conditioned" in message
    assert (
        "on floats from a normal distribution, and 'y' by relative L2" in message and UNIT_FLOATS in message
    )
    assert "ship sample inputs from real data as" in message and "wild.inputs.npz" in message
    assert "verify_scale: " not in message  # no bound would tell a correct cook from a wrong one


def test_ill_conditioned_sample_inputs_are_named_as_the_cause(tmp_path: Path) -> None:
    """Sample inputs are the user's: the cook cannot swap them, and says they are what to change."""
    assets = tmp_path / "assets"
    save(amplifier_model(negative_only=True), assets, "amp")
    x = np.random.default_rng(RNG_SEED).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.savez(assets / "amp.inputs.npz", x=x)
    with pytest.raises(VerifyError) as failure:
        cook(job_for(assets, "amp", shipped_settings("windows-dml"), tmp_path / "build"))
    message = str(failure.value)
    assert "the source itself is ill-conditioned on amp.inputs.npz (one float32 step up" in message
    assert "make amp.inputs.npz from real data the model was made for" in message
    assert "verify_scale: " not in message
    np.savez(assets / "amp.inputs.npz", x=np.abs(x) / (1 + np.abs(x)))  # in [0, 1): it verifies
    entry = cook(job_for(assets, "amp", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["inputs"] == "amp.inputs.npz" and "floats" not in entry["verification"]


def log_of_min_model(always: bool) -> onnx.ModelProto:
    """x [1, 16] -> y = x * log(min(x)) (``always``: y = sqrt(-1 - |x|)). Normal floats hold a negative
    value, so min(x) < 0 and y is NaN everywhere, as terrain-diffusion's denoiser (PyPI) is on a
    negative noise level; floats in [0, 1) give numbers. ``always`` is NaN on any inputs."""
    if always:
        nodes = [
            helper.make_node("Abs", ["x"], ["a"]),
            helper.make_node("Sub", ["minus_one", "a"], ["n"]),
            helper.make_node("Sqrt", ["n"], ["y"]),
        ]
    else:
        nodes = [
            helper.make_node("ReduceMin", ["x"], ["m"], keepdims=1),
            helper.make_node("Log", ["m"], ["l"]),
            helper.make_node("Mul", ["x", "l"], ["y"]),
        ]
    graph = helper.make_graph(
        nodes,
        "log_of_min",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(np.array([-1.0], np.float32), "minus_one")] if always else [],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_inputs_that_give_an_output_no_finite_value_are_drawn_again(tmp_path: Path, platform: str) -> None:
    """NaN compares equal to NaN: the cook "verified" an all-NaN output with an error of 0."""
    model = log_of_min_model(always=False)
    normal = np.random.default_rng(RNG_SEED).standard_normal((1, 16)).astype(np.float32)
    assert np.isnan(run_x(model, normal)).all()  # what the cook verified on before
    entry = cook_unconfigured(model, "logmin", platform, tmp_path)
    verification = entry["verification"]
    assert verification["floats"] == UNIT_FLOATS and verification["normal_floats_nonfinite"] == ["y"]
    with np.load(verify_data_path(tmp_path / "build" / platform, "logmin")) as data:
        assert np.isfinite(data["output/y"]).all() and (data["input/x"] >= 0).all()
    line = cook_line(entry)
    assert f"(synthesized inputs, {UNIT_FLOATS})" in line
    assert "(the source's 'y' on floats from a normal distribution: no finite value)" in line


def test_an_output_no_inputs_make_finite_fails_naming_it_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(VerifyError) as failure:
        cook_unconfigured(log_of_min_model(always=True), "nan", "windows-dml", tmp_path)
    message = str(failure.value)
    assert "the source's output(s) 'y' hold no finite value, NaN all over" in message
    assert f"on synthesized inputs (floats from a normal distribution, then {UNIT_FLOATS})" in message
    assert "ship sample inputs from real data the model was made for as" in message
    assert "nan.inputs.npz" in message
    # sample inputs are the user's: compared as they are (NaN matches NaN), as the ONNX backend
    # suite's reductions over an empty set (-inf or NaN by definition) are
    assets = tmp_path / "assets"
    np.savez(assets / "nan.inputs.npz", x=np.ones((1, 16), np.float32))
    entry = cook(job_for(assets, "nan", shipped_settings("windows-dml"), tmp_path / "b2"))
    assert entry["verification"]["inputs"] == "nan.inputs.npz" and entry["verification"]["outputs"][0]["ok"]
    assert "floats" not in entry["verification"]


def test_an_infinite_output_is_an_answer_not_a_domain_error() -> None:
    from onnx_cooker.cook.conditioning import nonfinite_outputs

    outputs = {
        "empty_max": np.full((2, 3), -np.inf, np.float32),  # ReduceMax of an empty set
        "nan": np.full(4, np.nan, np.float32),
        "mixed": np.array([np.inf, np.nan], np.float32),
        "some": np.array([1.0, np.nan], np.float32),
        "ids": np.zeros(3, np.int64),
        "empty": np.zeros(0, np.float32),
    }
    assert nonfinite_outputs(outputs) == ["nan", "mixed"]


def run_x(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": x})[0]
