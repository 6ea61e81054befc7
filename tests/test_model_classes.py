"""Classes of third-party models a new user cooks first, with no .cook.yaml: a symbolic batch and
sequence, string inputs, 4-bit weights. Each cooks with the defaults, or fails naming the fix that
works (and the fix is then applied and cooks)."""

from __future__ import annotations

import gc
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.build.summary import cook_line
from onnx_cooker.errors import ModelError, VerifyError
from onnx_cooker.layout import blob_path
from onnx_cooker.runtime import session_from_blob
from tests.models import RNG_SEED, model_of, word_ids_model
from tests.test_cook import job_for, save, shipped_settings

CPU = ["CPUExecutionProvider"]


def cook_unconfigured(model: onnx.ModelProto, name: str, platform: str, tmp_path: Path) -> dict:
    """``model`` saved as ``tmp_path/assets/<name>.onnx`` and cooked with the platform's shipped
    settings and no .cook.yaml: its manifest entry."""
    save(model, tmp_path / "assets", name)
    return cook(job_for(tmp_path / "assets", name, shipped_settings(platform), tmp_path / "build"))


def embedding_model() -> onnx.ModelProto:
    """ids [batch, seq] int64 -> mean of their embeddings [batch, 8]: both dims symbolic, as exporters
    leave a batch and a sequence length."""
    table = np.random.default_rng(RNG_SEED).standard_normal((32, 8)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["e"]),
            helper.make_node("ReduceMean", ["e"], ["y"], axes=[1], keepdims=0),
        ],
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [numpy_helper.from_array(table, "table")],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_symbolic_dims_without_a_size_are_verified_at_16_a_batch_at_1(tmp_path: Path, platform: str) -> None:
    """At 1 nothing mixes along a sequence (attention over one key, a recurrence from a zero state):
    free dims but a leading batch are tried at 16 first."""
    assets = tmp_path / "assets"
    save(embedding_model(), assets, "emb")
    entry = cook(job_for(assets, "emb", shipped_settings(platform), tmp_path / "build"))
    verification = entry["verification"]
    assert verification["default_dims"] == {"batch": 1, "seq": 16}
    assert all(output["ok"] for output in verification["outputs"])
    assert "(synthesized inputs, batch=1, seq=16)" in cook_line(entry)
    # verify_dims still wins where given; the dims it gives are not defaulted
    entry = cook(job_for(assets, "emb", shipped_settings(platform, verify_dims={"seq": 5}), tmp_path / "b2"))
    assert entry["verification"]["default_dims"] == {"batch": 1}


def symbolic_conv_model(
    kernel: int, dims: tuple = ("height", "width"), batch: int | str = 1, *, seen: bool = True
) -> onnx.ModelProto:
    """x [batch, 3, *dims] -> a ``kernel`` x ``kernel`` convolution without padding: inputs smaller
    than the kernel cannot run it (``dims``: names, or None for dims without a name). ``seen=False``
    puts a Pad of nothing before it, which the cook's walk to a convolution does not follow: its
    free dims are then not known to be what the convolution slides over."""
    weight = np.random.default_rng(RNG_SEED).standard_normal((4, 3, kernel, kernel)).astype(np.float32)
    pad = [] if seen else [helper.make_node("Pad", ["x", "no_pads"], ["x_padded"])]
    graph = helper.make_graph(
        [*pad, helper.make_node("Conv", ["x" if seen else "x_padded", "w"], ["y"])],
        "symbolic_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, *dims])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, None, None])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.zeros(8, np.int64), "no_pads")],
    )
    return model_of(graph, opset=17)


def test_a_conv_net_over_free_height_and_width_is_verified_at_the_second_size(tmp_path: Path) -> None:
    """A 17x17 convolution the cook does not see as one (behind a Pad) cannot run on 16x16 or 1x1: the
    free dims are then tried at 32, and the cook says so."""
    assets = tmp_path / "assets"
    save(symbolic_conv_model(17, seen=False), assets, "conv")
    entry = cook(job_for(assets, "conv", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["default_dims"] == {"height": 32, "width": 32}
    assert entry["verification"]["outputs"][0]["ok"]
    assert "(synthesized inputs, height=32, width=32)" in cook_line(entry)


def test_dims_without_a_name_are_tried_at_the_second_size_too(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(symbolic_conv_model(17, (None, None), seen=False), assets, "conv")
    entry = cook(job_for(assets, "conv", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["default_dims"] == {"?": 32} and entry["verification"]["outputs"][0]["ok"]
    save(symbolic_conv_model(225, (None, None), seen=False), assets, "big")
    with pytest.raises(ModelError) as failure:
        cook(job_for(assets, "big", shipped_settings("windows-dml"), tmp_path / "build"))
    message = str(failure.value)
    assert (
        "dimension(s) ?, which verify_dims does not size, at 16 (a named leading batch at 1), then 1, "
        "then 32, then 224" in message
    ), message
    assert "big.inputs.npz" in message and "verify_dims: {" not in message  # it cannot name them


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_a_free_dim_written_as_minus_one_is_free(tmp_path: Path, platform: str) -> None:
    """paddle2onnx writes a free batch as ``dim_value: -1`` (PaddleOCR's classifier in rapidocr's
    wheel: x [-1, 3, ?, ?]): onnxruntime runs it at any size, and so does the cook, where synthesizing
    a [-1, ...] input failed with numpy's "negative dimensions are not allowed" traceback."""
    model = symbolic_conv_model(3, dims=(None, None), batch=-1)
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = -1
    assets = tmp_path / "assets"
    save(model, assets, "paddle")
    settings = shipped_settings(platform)
    entry = cook(job_for(assets, "paddle", settings, tmp_path / "build"))
    # all dims without a name: the batch too is at the size the convolution slides over
    assert entry["verification"]["default_dims"] == {"?": 64} and entry["verification"]["outputs"][0]["ok"]
    assert entry["inputs"][0]["shape"] == [None, 3, None, None]
    assert entry["outputs"][0]["shape"] == [None, 4, None, None]
    blob = blob_path(tmp_path / "build" / platform, "paddle", settings.format).read_bytes()
    x = np.ones((2, 3, 5, 5), np.float32)
    (y,) = session_from_blob(blob, providers=CPU).run(None, {"x": x})
    (want,) = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": x})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert y.shape == (2, 4, 3, 3)
    # inputs shipped at a batch of 2 fit the -1 (they were refused: "the model takes [-1, 3, ?, ?]")
    np.savez(assets / "paddle.inputs.npz", x=x)
    entry = cook(job_for(assets, "paddle", settings, tmp_path / "shipped"))
    verification = entry["verification"]
    assert verification["inputs"] == "paddle.inputs.npz" and verification["outputs"][0]["ok"]


def test_a_deep_conv_net_is_verified_at_224_with_its_batch_at_one(tmp_path: Path) -> None:
    """A 65x65 convolution (a net that downsamples 64x64 to nothing) runs on none of 64, 1 and 32:
    the free dims are then tried at 224, but for the batch, which stays 1."""
    assets = tmp_path / "assets"
    save(symbolic_conv_model(65, batch="batch"), assets, "deep")
    entry = cook(job_for(assets, "deep", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["default_dims"] == {"batch": 1, "height": 224, "width": 224}
    assert entry["verification"]["outputs"][0]["ok"]


def audio_frontend_model() -> onnx.ModelProto:
    """An audio frontend as onnx-asr ships them (Whisper, Kaldi, NeMo features): waveforms [batch_size,
    N] and their lengths [batch_size] -> a power spectrogram by STFT over 400-sample frames, and the
    frame counts; signals shorter than one frame cannot run it."""
    window = np.hanning(400).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["waveforms", "last"], ["signal"]),
            helper.make_node("STFT", ["signal", "step", "window"], ["spectrum"], onesided=1),
            helper.make_node("ReduceSumSquare", ["spectrum"], ["features"], axes=[-1], keepdims=0),
            helper.make_node("Div", ["waveforms_lens", "step"], ["features_lens"]),
        ],
        "audio_frontend",
        [
            helper.make_tensor_value_info("waveforms", TensorProto.FLOAT, ["batch_size", "N"]),
            helper.make_tensor_value_info("waveforms_lens", TensorProto.INT64, ["batch_size"]),
        ],
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch_size", None, 201]),
            helper.make_tensor_value_info("features_lens", TensorProto.INT64, ["batch_size"]),
        ],
        [
            numpy_helper.from_array(np.array([-1], np.int64), "last"),
            numpy_helper.from_array(np.array(160, np.int64), "step"),
            numpy_helper.from_array(window, "window"),
        ],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_an_audio_frontend_is_verified_at_a_signals_length(tmp_path: Path, platform: str) -> None:
    """A 400-sample STFT window fits neither 1, 32 nor 224 samples: a free signal length (the last
    axis of a float input, beside a batch) is then tried at 16000 (a second at 16 kHz), with the batch
    at 1 though the lengths input [batch_size] has it too."""
    entry = cook_unconfigured(audio_frontend_model(), "frontend", platform, tmp_path)
    verification = entry["verification"]
    assert verification["default_dims"] == {"batch_size": 1, "N": 16000}
    assert [output["ok"] for output in verification["outputs"]] == [True, True]
    assert "(synthesized inputs, N=16000, batch_size=1)" in cook_line(entry)
    settings = shipped_settings(platform)
    blob = blob_path(tmp_path / "build" / platform, "frontend", settings.format).read_bytes()
    feeds = {
        "waveforms": np.random.default_rng(RNG_SEED).standard_normal((2, 4000)).astype(np.float32),
        "waveforms_lens": np.array([4000, 3200], np.int64),
    }
    got = session_from_blob(blob, providers=CPU).run(None, feeds)
    want = onnxruntime.InferenceSession(audio_frontend_model().SerializeToString(), providers=CPU).run(
        None, feeds
    )
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-3)
    assert got[0].shape == (2, 23, 201) and got[1].tolist() == [25, 20]


def test_a_signal_that_no_size_runs_names_the_sizes_tried(tmp_path: Path) -> None:
    """Where 16000 samples do not run the model either, the error says that size was tried."""
    model = audio_frontend_model()
    model.graph.initializer[2].CopyFrom(
        numpy_helper.from_array(np.hanning(16001).astype(np.float32), "window")
    )
    assets = tmp_path / "assets"
    save(model, assets, "long")
    with pytest.raises(
        ModelError,
        match=r"N, which verify_dims does not size, at 16 \(a named leading batch at 1\), then 1, then 32, "
        r"then 224 \(a named leading batch at 1\), then 16000 \(a signal's length, the rest at 1\), "
        r"then each at 1 or 2 \(3 combinations\).*`verify_dims: \{batch_size: <size>, N: <size>\}`",
    ):
        cook(job_for(assets, "long", shipped_settings("windows-dml"), tmp_path / "build"))


def unnamed_state_model() -> onnx.ModelProto:
    """As Silero VAD takes its inputs: ``input [?, ?]`` (a batch of sample chunks) and ``state [2, ?,
    4]`` (the batch again, on its second axis), all dims without a name. A reflecting pad of 32
    samples needs chunks of 33 or more, and the state's batch must be the input's."""
    graph = helper.make_graph(
        [
            helper.make_node("Pad", ["input", "pads"], ["padded"], mode="reflect"),
            helper.make_node("ReduceSum", ["state", "axes"], ["summed"], keepdims=0),
            helper.make_node("Unsqueeze", ["summed", "one"], ["column"]),
            helper.make_node("Add", ["padded", "column"], ["output"]),
        ],
        "unnamed_state",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, None]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, 4]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [None, None])],
        [
            numpy_helper.from_array(np.array([0, 32, 0, 32], np.int64), "pads"),
            numpy_helper.from_array(np.array([0, 2], np.int64), "axes"),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
        ],
    )
    return model_of(graph, opset=18)


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_dims_without_a_name_over_a_batch_are_tried_at_224_where_the_inputs_stay_small(
    tmp_path: Path, platform: str
) -> None:
    """Dims without a name share one size, so a leading batch among them held them all at 1 in the
    224 try: a model that runs at none of 1 and 32 (Silero VAD) failed unconfigured. Where the inputs
    stay small (here 200 kB) the try sizes them all, batch included, at 224."""
    entry = cook_unconfigured(unnamed_state_model(), "vad", platform, tmp_path)
    assert entry["verification"]["default_dims"] == {"?": 224}
    assert entry["verification"]["outputs"][0]["ok"]
    assert "(synthesized inputs, ?=224)" in cook_line(entry)


def test_an_image_batch_without_a_name_is_not_tried_at_224(tmp_path: Path) -> None:
    """224 images of 3x224x224 (134 MB) are past the small-input bound: dims without a name over a
    batch stay 1 there, so the 224 try would run nothing new and is not made."""
    weight = np.random.default_rng(RNG_SEED).standard_normal((4, 3, 65, 65)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        "deep",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, None, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4, None, None])],
        [numpy_helper.from_array(weight, "w")],
    )
    assets = tmp_path / "assets"
    save(model_of(graph, opset=17), assets, "deep")
    with pytest.raises(
        ModelError,
        match=r"dimension\(s\) \?, which verify_dims does not size, at 64 \(what a convolution slides "
        r"over, the rest at 1\), then 16 \(a named leading batch at 1\), then 1, then 32\)",
    ):
        cook(job_for(assets, "deep", shipped_settings("windows-dml"), tmp_path / "build"))


def all_symbolic_lstm_model() -> onnx.ModelProto:
    """As madmom's converter writes its beat trackers: ``input [input_dim_0, input_dim_1]`` (frames
    by features), every dim symbolic, into an LSTM whose W [1, 4 * 3, 7] takes 7 features: no size
    the cook tries (16, 1, 32, 224, 16000) is 7."""
    rng = np.random.default_rng(RNG_SEED)
    graph = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["input", "batch_axis"], ["sequence"]),
            helper.make_node("LSTM", ["sequence", "W", "R"], ["output"], hidden_size=3),
        ],
        "all_symbolic",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["input_dim_0", "input_dim_1"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["input_dim_0", 1, 1, 3])],
        [
            numpy_helper.from_array(np.array([1], np.int64), "batch_axis"),
            numpy_helper.from_array(rng.standard_normal((1, 12, 7)).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal((1, 12, 3)).astype(np.float32), "R"),
        ],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_a_symbolic_dim_a_weight_sizes_is_given_that_size(tmp_path: Path, platform: str) -> None:
    entry = cook_unconfigured(all_symbolic_lstm_model(), "beats", platform, tmp_path)
    assert entry["verification"]["default_dims"] == {
        "input_dim_0": 16,
        "input_dim_1": 7,
    }  # 16 frames: the recurrence runs
    assert entry["verification"]["outputs"][0]["ok"]
    # verify_dims still wins over the weight: a size the LSTM refuses fails
    settings = shipped_settings(platform, verify_dims={"input_dim_1": 8})
    with pytest.raises(ModelError, match="cannot run the source model"):
        cook(job_for(tmp_path / "assets", "beats", settings, tmp_path / "b2"))


def test_the_weights_that_size_a_free_dim_are_found_through_axis_moves() -> None:
    """MatMul (the input's last axis), Gemm (transA/transB), Conv (channels times groups), RNNs (the
    feature axis), through Unsqueeze and Transpose; two weights that disagree leave the dim free."""
    from onnx_cooker.cook.axiswalk import pinned_sizes

    rng = np.random.default_rng(RNG_SEED)

    def model(nodes: list, shape: list, weights: dict) -> onnx.ModelProto:
        inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
        y = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)
        return model_of(helper.make_graph(nodes, "g", [x], [y], inits), opset=17)

    w = rng.standard_normal((5, 4)).astype(np.float32)
    assert pinned_sizes(model([helper.make_node("MatMul", ["x", "w"], ["y"])], ["n", "k"], {"w": w})) == {
        "k": 5
    }
    gemm = helper.make_node("Gemm", ["x", "w"], ["y"], transA=1, transB=1)
    assert pinned_sizes(model([gemm], ["k", "n"], {"w": w})) == {"k": 4}
    conv = helper.make_node("Conv", ["t", "w"], ["y"], group=2)
    transpose = helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2])  # NHWC -> NCHW
    kernel = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    assert pinned_sizes(model([transpose, conv], ["b", "h", "w_", "c"], {"w": kernel})) == {"c": 6}
    both = [helper.make_node("MatMul", ["x", "w"], ["y1"]), helper.make_node("MatMul", ["x", "v"], ["y"])]
    v = rng.standard_normal((6, 4)).astype(np.float32)
    assert pinned_sizes(model(both, ["n", "k"], {"w": w, "v": v})) == {}
    assert pinned_sizes(all_symbolic_lstm_model()) == {"input_dim_1": 7}
    assert pinned_sizes(symbolic_conv_model(3)) == {}  # its channels are fixed: nothing to pin


def test_dims_that_cannot_run_the_model_name_the_sizes_tried_and_the_fix(tmp_path: Path) -> None:
    """A 225x225 convolution runs on none of 64x64, 16x16, 1x1, 32x32 and 224x224 (nor 1 or 2 each): the error
    names the dims, the sizes tried and the fixes, and verify_dims then cooks the model."""
    assets = tmp_path / "assets"
    save(symbolic_conv_model(225), assets, "conv")
    with pytest.raises(
        ModelError,
        match=r"cannot run the source model on the verification inputs \(synthesized\): .*height, width, "
        r"which verify_dims does not size, at 64 \(what a convolution slides over, the rest at 1\), "
        r"then 16 \(a named leading batch at 1\), then 1, then 32, then 224 \(a named leading batch at "
        r"1\), then each at 1 or 2 \(3 combinations\)"
        r".*conv\.inputs\.npz.*`verify_dims: \{height: <size>, width: <size>\}` to .*conv\.cook\.yaml"
        r" \(a model exported by tracing often runs only at the sizes it was traced with\)",
    ):
        cook(job_for(assets, "conv", shipped_settings("windows-dml"), tmp_path / "build"))
    settings = shipped_settings("windows-dml", verify_dims={"height": 230, "width": 230})
    entry = cook(job_for(assets, "conv", settings, tmp_path / "build"))
    assert "default_dims" not in entry["verification"] and entry["verification"]["outputs"][0]["ok"]


def token_types_model(types: int, dims: list) -> onnx.ModelProto:
    """BERT's token-type embedding: ids [dims] int64 index a table of ``types`` rows (two in BERT)."""
    table = np.random.default_rng(RNG_SEED).standard_normal((types, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "token_type_ids"], ["y"])],
        "token_types",
        [helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*dims, 8])],
        [numpy_helper.from_array(table, "table")],
    )
    return model_of(graph, opset=17)


def test_integer_inputs_index_a_table_of_two_rows(tmp_path: Path) -> None:
    """Synthesized integers are 0 and 1: BERT's token types (two) take them, and a table of one row
    fails naming what the cook synthesized and the sample inputs that fix it (dims were all given)."""
    assets = tmp_path / "assets"
    save(token_types_model(2, ["batch", "sequence"]), assets, "bert_types")
    entry = cook(job_for(assets, "bert_types", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["outputs"][0]["ok"]
    save(token_types_model(1, [1, 16]), assets, "one_row")
    with pytest.raises(ModelError) as failure:
        cook(job_for(assets, "one_row", shipped_settings("windows-dml"), tmp_path / "build"))
    message = str(failure.value)
    pattern = r"\(synthesized\): .*out of .*bounds.*integers 0 and 1.*one_row\.inputs\.npz"
    assert re.search(pattern, message), message
    assert "verify_dims" not in message and "[E:onnxruntime" not in message


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_string_inputs_are_synthesized(tmp_path: Path, platform: str) -> None:
    assets = tmp_path / "assets"
    save(word_ids_model(["0", "1", "cat"], [4], matmul=True), assets, "words")
    settings = shipped_settings(platform)
    entry = cook(job_for(assets, "words", settings, tmp_path / "build"))
    assert entry["verification"]["inputs"] == "synthesized"
    assert [o["name"] for o in entry["verification"]["outputs"] if o["ok"]] == ["ids", "y"]
    # the words drawn hit the encoder's keys, so the comparison of ids says something
    session = session_from_blob(
        blob_path(tmp_path / "build" / platform, "words", settings.format).read_bytes()
    )
    words = np.array(["1", "cat", "dog", "0"], dtype=object)
    ids = session.run(["ids"], {"words": words, "x": np.zeros((1, 8), np.float32)})[0]
    assert ids.tolist() == [11, 12, -1, 10]


def test_words_a_table_looks_up_are_drawn_from_its_keys(tmp_path: Path) -> None:
    """Synthesized strings were "0" and "1": a LabelEncoder whose keys are words missed them all, so
    a blob with a wrong table (every value 9) verified. The words are now the table's keys (followed
    back through a StringNormalizer) and one word out of it, for its default."""
    from onnx_cooker.cook.inputs import looked_up_words, synthesize_inputs

    model = word_ids_model(["cat", "dog", "emu"], [16])
    normalize = helper.make_node(
        "StringNormalizer", ["words"], ["lower"], case_change_action="LOWER", locale="C"
    )
    model.graph.node.insert(0, normalize)
    model.graph.node[1].input[0] = "lower"
    assert looked_up_words(model) == {"words": ["cat", "dog", "emu"]}
    feeds = synthesize_inputs(model, {}, settings_hint="", inputs_hint="")
    assert set(feeds["words"].tolist()) == {"cat", "dog", "emu", "0"}
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    next(a for a in wrong.graph.node[1].attribute if a.name == "values_int64s").ints[:] = [9, 9, 9]

    def ids(m: onnx.ModelProto) -> list[int]:
        session = onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(["ids"], feeds)[0].tolist()

    assert ids(wrong) != ids(model) and -1 in ids(model)  # the table, and its default, verified


def sparse_weights_model() -> onnx.ModelProto:
    """x [4, 64] @ W [64, 32], W held as a sparse initializer (values and flat indices, 90% zeros)."""
    rng = np.random.default_rng(RNG_SEED)
    dense = rng.standard_normal((64, 32)).astype(np.float32)
    dense[rng.random(dense.shape) < 0.9] = 0
    where = np.flatnonzero(dense).astype(np.int64)
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(dense.flat[where], "w"), numpy_helper.from_array(where, "w_indices"), [64, 32]
    )
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "sparse",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        sparse_initializer=[sparse],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_sparse_initializers_cook_and_load(
    tmp_path: Path, platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sparse initializer is a weight like any other (the cook crashed reading its name), and the
    usability check's failing shape inference on it leaves no noise in the cook's output."""
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    assets = tmp_path / "assets"
    model = sparse_weights_model()
    save(model, assets, "sparse")
    settings = shipped_settings(platform)
    entry = cook(job_for(assets, "sparse", settings, tmp_path / "build"))
    gc.collect()
    assert entry["verification"]["outputs"][0]["ok"] and unraisable == []
    session = session_from_blob(
        blob_path(tmp_path / "build" / platform, "sparse", settings.format).read_bytes()
    )
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    source = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], source.run(None, {"x": x})[0], rtol=1e-5)


def bfloat16_io_model() -> onnx.ModelProto:
    """x bfloat16 [2, 16] -> float32 MatMul -> y bfloat16: a model that keeps bf16 at its edges."""
    weight = np.random.default_rng(RNG_SEED).standard_normal((16, 16)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["xf", "w"], ["yf"]),
            helper.make_node("Cast", ["yf"], ["y"], to=TensorProto.BFLOAT16),
        ],
        "bf16",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 16])],
        [numpy_helper.from_array(weight, "w")],
    )
    return model_of(graph, opset=17)


def test_bfloat16_inputs_fail_verification_naming_the_setting_that_cooks_them(tmp_path: Path) -> None:
    """onnxruntime's Python API takes no bfloat16 arrays and .npz cannot hold them: the failure must
    not send the user to ship an .npz, but to `verify: false`, which then cooks a blob that runs."""
    assets = tmp_path / "assets"
    save(bfloat16_io_model(), assets, "bf16")
    with pytest.raises(VerifyError) as failure:
        cook(job_for(assets, "bf16", shipped_settings("windows-dml"), tmp_path / "build"))
    message = str(failure.value)
    assert "bfloat16 inputs" in message and "`verify: false`" in message
    assert "ship sample inputs" not in message
    settings = shipped_settings("windows-dml", verify=False)
    cook(job_for(assets, "bf16", settings, tmp_path / "build"))
    session = session_from_blob(blob_path(tmp_path / "build" / "windows-dml", "bf16", "onnx").read_bytes())
    bits = np.zeros((2, 16), np.uint16)  # bfloat16 zeros, fed as an OrtValue
    value = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    (out,) = session.run_with_ort_values(["y"], {"x": value})
    assert out.data_type() == "tensor(bfloat16)" and out.shape() == [2, 16]


def optional_input_model() -> onnx.ModelProto:
    """y = x + opt where the optional tensor ``opt`` is given, else x (OptionalHasElement -> If)."""
    then = helper.make_graph(
        [helper.make_node("OptionalGetElement", ["opt"], ["v"]), helper.make_node("Add", ["v", "x"], ["o"])],
        "then",
        [],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])],
    )
    otherwise = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["o2"])],
        "else",
        [],
        [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [4])],
    )
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["n"]))
    graph = helper.make_graph(
        [
            helper.make_node("OptionalHasElement", ["opt"], ["has"]),
            helper.make_node("If", ["has"], ["y"], then_branch=then, else_branch=otherwise),
        ],
        "optional",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]), helper.make_value_info("opt", optional)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return model_of(graph, opset=18)


def test_an_optional_tensor_input_is_synthesized_as_its_tensor(tmp_path: Path) -> None:
    """onnxruntime takes a plain array for an optional(tensor) input: the cook synthesizes one (its
    free dim sized as any other), so the branch that uses it is the one verified."""
    assets = tmp_path / "assets"
    save(optional_input_model(), assets, "opt")
    entry = cook(job_for(assets, "opt", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["outputs"][0]["ok"] and entry["verification"]["default_dims"] == {"n": 1}


def test_a_sequence_input_names_verify_false(tmp_path: Path) -> None:
    sequence = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["xs"], ["n"])],
        "seq",
        [helper.make_value_info("xs", sequence)],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
    )
    assets = tmp_path / "assets"
    save(model_of(graph, opset=17), assets, "seq")
    with pytest.raises(VerifyError, match=r"input 'xs' is a sequence, not a tensor.*`verify: false`"):
        cook(job_for(assets, "seq", shipped_settings("windows-dml"), tmp_path / "build"))
    entry = cook(job_for(assets, "seq", shipped_settings("windows-dml", verify=False), tmp_path / "build"))
    assert entry["format"] == "onnx"


def int4_weights_model() -> onnx.ModelProto:
    """x [1, 64] @ DequantizeLinear(int4 weights [64, 64]): weight-only 4-bit quantization in QDQ form."""
    rng = np.random.default_rng(RNG_SEED)
    weights = helper.make_tensor("w4", TensorProto.INT4, [64, 64], vals=rng.integers(-8, 8, 64 * 64).tolist())
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w4", "scale"], ["w"]),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "int4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weights, numpy_helper.from_array(np.array(0.01, np.float32), "scale")],
    )
    return model_of(graph, opset=21, ir_version=10)


@pytest.mark.parametrize("platform", ["android", "console"])
def test_int4_initializers_are_refused_for_the_ort_format_and_nothing_is_left(
    tmp_path: Path, platform: str
) -> None:
    """onnxruntime writes an ORT-format model holding an INT4 initializer and then refuses to load it
    ("Unsupported tensor data type"): the cook refuses it before verifying, naming the tensor and the
    fixes, and leaves no file."""
    assets = tmp_path / "assets"
    save(int4_weights_model(), assets, "q4")
    with pytest.raises(
        ModelError, match=r"ORT format .* cannot hold .*w4 \(INT4\).*MatMulNBits.*skip_platforms"
    ):
        cook(job_for(assets, "q4", shipped_settings(platform), tmp_path / "build"))
    assert not list((tmp_path / "build").rglob("*.ocb"))


def blockwise_int4_model() -> onnx.ModelProto:
    """x [1, 64] @ DequantizeLinear(int4 [64, 64], block-wise scales [2, 64], axis 0, blocks of 32):
    4-bit weights as onnxruntime fuses them into MatMulNBits above the basic level."""
    rng = np.random.default_rng(RNG_SEED)
    weights = helper.make_tensor("w4", TensorProto.INT4, [64, 64], vals=rng.integers(-8, 8, 64 * 64).tolist())
    scales = numpy_helper.from_array((rng.random((2, 64)) * 0.02).astype(np.float32), "scales")
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w4", "scales"], ["w"], axis=0, block_size=32),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "int4_blocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weights, scales],
    )
    return model_of(graph, opset=21, ir_version=10)


def test_int4_weights_a_fusion_takes_away_cook_for_the_ort_format(tmp_path: Path) -> None:
    """The refusal looks at the model onnxruntime wrote: at `extended` the block-wise int4 weights go
    into MatMulNBits, and the ORT blob cooks, verifies (at onnxruntime's precision) and loads."""
    assets = tmp_path / "assets"
    save(blockwise_int4_model(), assets, "q4")
    cpu_only = {"execution_providers": ["CPUExecutionProvider"], "verify_scale": 0.01}
    with pytest.raises(ModelError, match=r"w4 \(INT4\).*optimization_level extended or all"):
        cook(job_for(assets, "q4", shipped_settings("console", **cpu_only), tmp_path / "basic"))
    settings = shipped_settings("console", optimization_level="extended", **cpu_only)
    entry = cook(job_for(assets, "q4", settings, tmp_path / "build"))
    assert entry["verification"]["outputs"][0]["ok"]
    blob = blob_path(tmp_path / "build" / "console", "q4", "ort").read_bytes()
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    assert session_from_blob(blob, providers=CPU).run(None, {"x": x})[0].shape == (1, 64)


def test_a_model_onnxruntime_itself_runs_at_lower_precision_gets_the_verify_scale_that_passes(
    tmp_path: Path,
) -> None:
    """onnxruntime's default optimizations turn DequantizeLinear(int4) + MatMul into MatMulNBits,
    which rounds the activations to int8: the source itself moves by about 0.5% at the default level.
    That is above what the noise rule lets the source's noise excuse, so the cook refuses; its message
    says onnxruntime computes the source so too and gives a verify_scale, which then cooks."""
    assets = tmp_path / "assets"
    save(int4_weights_model(), assets, "q4")
    with pytest.raises(VerifyError, match=r"onnxruntime's own default optimizations move") as failure:
        cook(job_for(assets, "q4", shipped_settings("windows-dml"), tmp_path / "build"))
    suggested = re.search(r"`verify_scale: ([0-9.e-]+)`", str(failure.value))
    assert suggested, failure.value
    scale = float(suggested.group(1))
    assert 1e-3 < scale <= 0.1
    entry = cook(
        job_for(assets, "q4", shipped_settings("windows-dml", verify_scale=scale), tmp_path / "build")
    )
    assert entry["verification"]["outputs"][0]["ok"]


def kv_cache_model(mask_dim: str = "total") -> onnx.ModelProto:
    """A decoder step with a KV cache: ids [batch, seq], mask [batch, ``mask_dim``], past [batch,
    past, 4]; the new tokens' embeddings join the past along the sequence and the mask rides beside
    them (Concat: no broadcast), so the mask's length must be past + seq, as in every KV-cache
    decoder. ``mask_dim`` may be an expression of the others (``past + seq``), as exporters name it."""
    table = np.random.default_rng(RNG_SEED).standard_normal((16, 4)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["new"]),
            helper.make_node("Concat", ["past", "new"], ["present"], axis=1),
            helper.make_node("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["mask_f", "axis2"], ["mask_3d"]),
            helper.make_node("Concat", ["present", "mask_3d"], ["y"], axis=2),
        ],
        "kv_step",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", mask_dim]),
            helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", "past", 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None, 5])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([2], np.int64), "axis2")],
    )
    return model_of(graph, opset=17)


def test_dims_bound_to_each_other_are_found_at_one_or_two(tmp_path: Path) -> None:
    """A KV-cache decoder runs with neither every free dim at 1 nor at 32 (total = past + seq):
    each is then tried at 1 or 2, fewest 2s first, and the cook says which sizes it verified at."""
    assets = tmp_path / "assets"
    save(kv_cache_model(), assets, "decoder")
    entry = cook(job_for(assets, "decoder", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["default_dims"] == {"batch": 1, "seq": 1, "total": 2, "past": 1}
    assert entry["verification"]["outputs"][0]["ok"]
    assert "(synthesized inputs, batch=1, past=1, seq=1, total=2)" in cook_line(entry)


def test_a_dim_named_by_an_expression_is_computed_from_the_others(tmp_path: Path) -> None:
    """``past + seq`` is not a free dim: it is sized from past and seq, first try."""
    assets = tmp_path / "assets"
    save(kv_cache_model("past + seq"), assets, "decoder")
    entry = cook(job_for(assets, "decoder", shipped_settings("android"), tmp_path / "build"))
    assert entry["verification"]["default_dims"] == {"batch": 1, "seq": 16, "past": 16}
    assert entry["verification"]["outputs"][0]["ok"]
    settings = shipped_settings("android", verify_dims={"past": 3})
    entry = cook(job_for(assets, "decoder", settings, tmp_path / "b2"))
    assert (
        entry["verification"]["default_dims"] == {"batch": 1, "seq": 16}
        and entry["verification"]["outputs"][0]["ok"]
    )


def test_dim_expressions_as_exporters_write_them() -> None:
    from onnx_cooker.cook.dims import bound_sizes, dim_size, expression_names, unsized_dims

    assert expression_names("past_sequence_length + 1") == ["past_sequence_length"]
    assert expression_names("past_sequence_length + sequence_length") == [
        "past_sequence_length",
        "sequence_length",
    ]
    assert expression_names("floor(s0/2) + Max(s1, 3)") == ["s0", "s1"]
    for plain in ("batch", "batch size", "unk__12", "2", "s0.size()", "__import__('os')", ""):
        assert expression_names(plain) is None, plain
    assert dim_size("past + 1", {}, 1) == 2
    assert dim_size("past + 1", {"past": 7}, 1) == 8
    assert dim_size("past + 1", {"past + 1": 3}, 1) == 3  # verify_dims may size the expression itself
    assert dim_size("2*s0 - s1", {}, {"s0": 3, "s1": 2}) == 4
    assert dim_size("floor(s0/2)", {}, 5) == 2 and dim_size("s0 - 4", {}, 1) == 0
    model = kv_cache_model("past + seq + 1")
    assert unsized_dims(model, {}) == ["batch", "seq", "past"]
    assert unsized_dims(model, {"past + seq + 1": 4}) == ["batch", "seq", "past"]
    sizes = list(bound_sizes(["a", "b", "c"]))
    assert sizes[0] == {"a": 2, "b": 1, "c": 1} and sizes[-1] == {"a": 2, "b": 2, "c": 2} and len(sizes) == 7
    assert len(list(bound_sizes([f"d{i}" for i in range(8)]))) == 16 and not list(bound_sizes(["a"]))


def random_sample_model() -> onnx.ModelProto:
    """mu [1, 8] -> mu + RandomNormalLike(mu), unseeded (a VAE's sampling step): its outputs change
    with every run unless onnxruntime's own seed is set."""
    graph = helper.make_graph(
        [
            helper.make_node("RandomNormalLike", ["mu"], ["eps"]),
            helper.make_node("Add", ["mu", "eps"], ["z"]),
        ],
        "sample",
        [helper.make_tensor_value_info("mu", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8])],
    )
    return model_of(graph, opset=17)


@pytest.mark.slow
def test_a_model_with_random_operators_verifies_in_every_target_version(tmp_path: Path) -> None:
    """Unseeded random operators draw from onnxruntime's seed: the cook sets it in every process that
    compares outputs, so the cook and the runtime check in another onnxruntime (another process)
    compare equal draws, and the in-place proof does not take run-to-run changes for in place."""
    from tests.test_target_check import OLD_RUNTIME, check_for, run_check

    save(random_sample_model(), tmp_path / "assets", "vae")
    entry = cook(job_for(tmp_path / "assets", "vae", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["outputs"][0]["max_abs"] == 0.0
    platform_dir = tmp_path / "build" / "windows-dml"
    report = run_check(check_for(platform_dir, ["vae"], OLD_RUNTIME, Path("platforms/windows-dml.yaml")))
    assert report["models"]["vae"]["ok"], report["models"]["vae"]
    assert report["models"]["vae"]["outputs"][0]["max_abs"] == 0.0


def test_an_optional_float16_input_gets_its_float32_sample_cast() -> None:
    """An fp16 variant's optional(tensor(float16)) input takes the fp32 source's sample cast, as a
    plain float16 input does (onnxruntime refuses float32 there)."""
    from onnx_cooker.cook.inputs import as_input_types

    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT16, [2]))
    graph = helper.make_graph([], "g", [helper.make_value_info("opt", optional)], [])
    cast = as_input_types(model_of(graph), {"opt": np.ones(2, np.float32)})
    assert cast["opt"].dtype == np.float16


def dropout_model(training: bool, ratio: float = 0.1) -> onnx.ModelProto:
    """x [batch, 16] @ W, then Dropout with constant ratio and training_mode: what
    torch.onnx.export(dynamo=True) writes for a module left in train() (a constant true)."""
    weights = (np.random.default_rng(RNG_SEED).standard_normal((16, 16)) * 0.3).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Dropout", ["m", "ratio", "training"], ["y"], name="encoder.dropout"),
        ],
        "dropout",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [
            numpy_helper.from_array(weights, "w"),
            numpy_helper.from_array(np.array(ratio, np.float32), "ratio"),
            numpy_helper.from_array(np.array(training), "training"),
        ],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_a_dropout_in_training_mode_is_refused_with_the_export_fix(tmp_path: Path, platform: str) -> None:
    """Its outputs are random at every run: the cook once verified it (onnxruntime's seed lined the
    draws up) and the runtime check then advised `atol: 3`, or blamed precision and advised a
    verify_scale that shipped it. Refused before it runs, naming the node and `model.eval()`."""
    model = dropout_model(training=True)
    first = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU)
    x = np.ones((2, 16), np.float32)
    assert not np.array_equal(first.run(None, {"x": x})[0], first.run(None, {"x": x})[0])  # the premise
    with pytest.raises(ModelError) as failure:
        cook_unconfigured(model, "tagger", platform, tmp_path)
    said = str(failure.value)
    assert "runs Dropout in training mode ('encoder.dropout': its training_mode input is a constant" in said
    assert "after `model.eval()`" in said and "`verify: false` in " in said and "tagger.cook.yaml" in said
    # in eval mode, and at ratio 0 (the identity), the same model cooks and verifies
    for name, fine in (("eval", dropout_model(training=False)), ("ratio0", dropout_model(True, ratio=0.0))):
        entry = cook_unconfigured(fine, name, platform, tmp_path)
        assert all(output["ok"] for output in entry["verification"]["outputs"])
    # randomness meant (Monte Carlo dropout): `verify: false` ships it, unverified
    save(model, tmp_path / "assets", "sampler")
    (tmp_path / "assets" / "sampler.cook.yaml").write_text("verify: false\n")
    unverified = replace(shipped_settings(platform), verify=False)
    entry = cook(job_for(tmp_path / "assets", "sampler", unverified, tmp_path / "build"))
    assert entry["verification"] == {"skipped": "verify is false in the settings"}


def test_string_sample_inputs_saved_as_objects_name_the_str_array_fix(tmp_path: Path) -> None:
    """np.savez of a dtype=object string array (the type onnxruntime takes) cannot be read without
    unpickling; the message said "write it with numpy.savez", which it was. It now names the input
    and the fix, a str array, which then cooks."""
    assets = tmp_path / "assets"
    save(word_ids_model(["cat", "dog"], [3]), assets, "words")
    words = ["cat", "emu", "dog"]
    np.savez(assets / "words.inputs.npz", words=np.array(words, dtype=object))
    with pytest.raises(VerifyError) as failure:
        cook(job_for(assets, "words", shipped_settings("android"), tmp_path / "build"))
    said = str(failure.value)
    assert "words.inputs.npz: input 'words' is an array of Python objects (dtype=object)" in said, said
    assert "numpy.array(list_of_strings) (dtype '<U...')" in said
    np.savez(assets / "words.inputs.npz", words=np.array(words))
    entry = cook(job_for(assets, "words", shipped_settings("android"), tmp_path / "build"))
    assert entry["verification"]["inputs"] == "words.inputs.npz" and entry["verification"]["outputs"][0]["ok"]
