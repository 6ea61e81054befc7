"""What a convolution slides over is verified at a size where its kernels read every tap.

A conv net with a free height and width runs at 1x1 (padding keeps every layer's map at 1x1), and the
cook verified it there: each kernel then reads only its centre tap, so a blob whose other taps were
wrong verified (PP-OCRv5's recognizer from PyPI, measured: its left kernel column scaled by 1.1 gives
the source's outputs exactly at a width of 1). The cook now tries those dims at 64 first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.summary import cook_line
from onnx_cooker.cook.axiswalk import pinned_sizes, spatial_dims
from onnx_cooker.layout import verify_data_path
from tests.models import RNG_SEED, model_of
from tests.test_model_classes import cook_unconfigured

CPU = ["CPUExecutionProvider"]


def graph_model(
    nodes: list, inputs: list, initializers: dict[str, np.ndarray], rank: int = 4
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "walk",
        inputs,
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [None] * rank)],
        [numpy_helper.from_array(value, name) for name, value in initializers.items()],
    )
    return model_of(graph, opset=17)


def test_the_walk_finds_what_a_convolution_or_pooling_slides_over() -> None:
    rng = np.random.default_rng(RNG_SEED)
    kernel = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nchw = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])
    conv = helper.make_node("Conv", ["x", "k"], ["y"])
    assert spatial_dims(graph_model([conv], [nchw], {"k": kernel})) == {"h", "w"}

    # an NHWC uint8 image, normalized by constants of one value per channel, then made NCHW
    nhwc = helper.make_tensor_value_info("image", TensorProto.UINT8, ["batch", "h", "w", 3])
    nodes = [
        helper.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["f", "mean"], ["centred"]),
        helper.make_node("Div", ["centred", "std"], ["scaled"]),
        helper.make_node("Transpose", ["scaled"], ["x"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["x", "k"], ["y"]),
    ]
    constants = {"mean": np.full(3, 127, np.float32), "std": np.full((1, 1, 1, 3), 58, np.float32)}
    assert spatial_dims(graph_model(nodes, [nhwc], {**constants, "k": kernel})) == {"h", "w"}

    # a constant over 1 at a free axis pins that dim (the model runs with that size there, or with 1,
    # which it broadcasts), and the walk goes on; at a dim without a name (those share one size) the
    # walk stops there
    widening = {**constants, "mean": np.zeros((1, 5, 1, 1), np.float32)}
    pinning = graph_model(nodes, [nhwc], {**widening, "k": kernel})
    assert pinned_sizes(pinning) == {"h": 5} and spatial_dims(pinning) == {"h", "w"}
    unnamed_h = helper.make_tensor_value_info("image", TensorProto.UINT8, ["batch", None, "w", 3])
    assert spatial_dims(graph_model(nodes, [unnamed_h], {**widening, "k": kernel})) == set()

    # a 1-D conv over samples, behind an Unsqueeze; a pooling; dims without a name
    samples = helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", "samples"])
    nodes = [
        helper.make_node("Unsqueeze", ["audio", "axis"], ["x"]),
        helper.make_node("Conv", ["x", "k1"], ["y"]),
    ]
    found = {"axis": np.array([1], np.int64), "k1": rng.standard_normal((4, 1, 5)).astype(np.float32)}
    assert spatial_dims(graph_model(nodes, [samples], found, rank=3)) == {"samples"}
    unnamed = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, None, None])
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])
    assert spatial_dims(graph_model([pool], [unnamed], {})) == {"?"}

    # nothing slides: a MatMul over the same input; the walk through constants still pins weights
    features = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k"])
    nodes = [helper.make_node("Add", ["x", "bias"], ["b"]), helper.make_node("MatMul", ["b", "m"], ["y"])]
    mlp = graph_model(
        nodes, [features], {"bias": np.zeros(1, np.float32), "m": np.ones((6, 2), np.float32)}, 2
    )
    assert spatial_dims(mlp) == set() and pinned_sizes(mlp) == {"k": 6}


def per_feature_conv_model() -> onnx.ModelProto:
    """madmom's onset CNN, in small: input [frames, bands, channels], every dim free, scaled per band
    and channel by constants [bands, channels] (the model runs only at that size there), then a 7x3
    convolution over frames x bands."""
    rng = np.random.default_rng(RNG_SEED)
    nodes = [
        helper.make_node("Mul", ["input", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "offset"], ["normed"]),
        helper.make_node("Unsqueeze", ["normed", "batch_axis"], ["batched"]),
        helper.make_node("Transpose", ["batched"], ["nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["nchw", "k"], ["y"]),
    ]
    weights = {
        "scale": rng.uniform(0.5, 1.5, (20, 3)).astype(np.float32),
        "offset": rng.standard_normal((20, 3)).astype(np.float32),
        "batch_axis": np.array([0], np.int64),
        "k": rng.standard_normal((4, 3, 7, 3)).astype(np.float32),
    }
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["frames", "bands", "channels"])
    return graph_model(nodes, [x], weights)


def test_free_dims_a_per_feature_constant_sizes_are_verified_at_that_size(tmp_path: Path) -> None:
    model = per_feature_conv_model()
    assert pinned_sizes(model) == {"bands": 20, "channels": 3}
    assert spatial_dims(model) == {"frames", "bands"}
    # before the constants pinned them, every tier failed: 1 frame is under the 7-tall kernel, and
    # 32 or 224 bands do not broadcast against 20
    entry = cook_unconfigured(model, "onsets", "android", tmp_path)
    assert entry["verification"]["default_dims"] == {"frames": 64, "bands": 20, "channels": 3}
    assert entry["verification"]["outputs"][0]["ok"]


def test_a_leading_dim_a_convolution_slides_over_is_not_taken_for_a_batch(tmp_path: Path) -> None:
    """madmom's beat trackers: ``input [frames, bands]`` made one image of frames x bands, whose
    convolutions need 81 bands or more. The 224 tier took ``frames`` for a batch and ran 1 frame."""
    rng = np.random.default_rng(RNG_SEED)
    nodes = [
        helper.make_node("Unsqueeze", ["input", "axes"], ["image"]),
        helper.make_node("Conv", ["image", "k"], ["y"]),
    ]
    weights = {
        "axes": np.array([0, 1], np.int64),
        "k": rng.standard_normal((4, 1, 5, 100)).astype(np.float32),
    }
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["frames", "bands"])
    model = graph_model(nodes, [x], weights)
    assert spatial_dims(model) == {"frames", "bands"}
    entry = cook_unconfigured(model, "tcn", "android", tmp_path)
    assert entry["verification"]["default_dims"] == {"frames": 224, "bands": 224}
    assert entry["verification"]["outputs"][0]["ok"]


def padded_conv_model() -> onnx.ModelProto:
    """x [batch, 3, height, width] -> two padded 3x3 convolutions: it runs at any size, 1x1 included."""
    rng = np.random.default_rng(RNG_SEED)
    nodes = [
        helper.make_node("Conv", ["x", "k1"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Conv", ["r", "k2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    weights = {
        "k1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        "k2": rng.standard_normal((4, 8, 3, 3)).astype(np.float32),
    }
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])
    return graph_model(nodes, [x], weights)


def outputs(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU)
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_a_conv_net_that_runs_at_one_is_verified_where_all_taps_count(tmp_path: Path, platform: str) -> None:
    model = padded_conv_model()
    entry = cook_unconfigured(model, "conv", platform, tmp_path)
    verification = entry["verification"]
    assert verification["default_dims"] == {"batch": 1, "height": 64, "width": 64}
    assert verification["outputs"][0]["ok"]
    assert "(synthesized inputs, batch=1, height=64, width=64)" in cook_line(entry)

    # The inputs it verified on tell a model whose off-centre taps are wrong from the source; 1x1
    # inputs (what the cook used before) do not.
    with np.load(verify_data_path(tmp_path / "build" / platform, "conv")) as data:
        x = data["input/x"]
    assert x.shape == (1, 3, 64, 64)
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    for tensor in wrong.graph.initializer:
        kernel = numpy_helper.to_array(tensor).copy()
        kernel[:, :, :, 0] *= 1.1
        tensor.CopyFrom(numpy_helper.from_array(kernel, tensor.name))
    assert np.abs(outputs(wrong, x) - outputs(model, x)).max() > 0.1
    centre = x[:, :, :1, :1].copy()
    np.testing.assert_array_equal(outputs(wrong, centre), outputs(model, centre))
