"""Synthesized verification inputs that verified nothing, by class of model (a prober's findings).

- An LSTM, GRU or RNN whose ``sequence_lens`` is a graph input got 0 and 1, like any integer: every
  sequence ran a step at most, so a blob whose recurrent weights were zeroed verified. It now gets
  the length its X has.
- TopK whose ``K`` is a graph input got k=0: every output was empty, "verified" with an error of 0 (and
  onnxruntime-openvino 1.24.1 crashed on it). K is now min(5, the axis's size), and synthesized inputs
  on which every output is empty are refused, naming the fix.
- Strings that a OneHotEncoder (``cats_strings``) or a TfIdfVectorizer (``pool_strings``) looks up were
  "0" and "1", which miss every key. They are now drawn from the table.
- A wav2vec2-style encoder (raw samples through strided 1-D convolutions into attention) verified at
  64 samples, one frame after the convolutions: attention over one frame mixed nothing. Sizes that
  leave one step after a convolution are now tried after all the others.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.build.summary import cook_line
from onnx_cooker.errors import CookError
from onnx_cooker.layout import verify_data_path
from tests.models import RNG_SEED, model_of
from tests.test_cook import job_for, shipped_settings
from tests.test_model_classes import cook_unconfigured

CPU = ["CPUExecutionProvider"]
HIDDEN, FEATURES = 6, 4


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, feeds)


def stored_inputs(tmp_path: Path, name: str, platform: str = "android") -> dict[str, np.ndarray]:
    """The inputs the cook verified ``name`` on (kept for the runtime check)."""
    with np.load(verify_data_path(tmp_path / "build" / platform, name)) as data:
        return {key[len("input/") :]: data[key] for key in data.files if key.startswith("input/")}


def recurrent_model(op: str, recurrence: float = 1.0, layout: int = 0) -> onnx.ModelProto:
    """x [time, batch, 4] (``layout`` 1: [batch, time, 4]) and lengths [batch] int32 -> the last hidden
    state of an ``op`` (LSTM, GRU, RNN) of 6 units, its recurrent weights R times ``recurrence``."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    rng = np.random.default_rng(RNG_SEED)
    w = (rng.standard_normal((1, gates * HIDDEN, FEATURES)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((1, gates * HIDDEN, HIDDEN)) * 0.5 * recurrence).astype(np.float32)
    x = ["time", "batch", FEATURES] if layout == 0 else ["batch", "time", FEATURES]
    state = [1, "batch", HIDDEN] if layout == 0 else ["batch", 1, HIDDEN]
    node = helper.make_node(
        op, ["x", "w", "r", "", "lengths"], ["", "h"], hidden_size=HIDDEN, **({"layout": 1} if layout else {})
    )
    graph = helper.make_graph(
        [node],
        "recurrent",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x),
            helper.make_tensor_value_info("lengths", TensorProto.INT32, ["batch"]),
        ],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, state)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r")],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize(("op", "layout"), [("LSTM", 0), ("GRU", 0), ("RNN", 0)])
def test_a_recurrences_sequence_lengths_input_is_its_length(tmp_path: Path, op: str, layout: int) -> None:
    model, wrong = recurrent_model(op, layout=layout), recurrent_model(op, recurrence=0.0, layout=layout)
    entry = cook_unconfigured(model, "rnn", "android", tmp_path)
    assert entry["verification"]["outputs"][0]["ok"]
    feeds = stored_inputs(tmp_path, "rnn")
    steps = feeds["x"].shape[layout]
    assert steps == 16 and feeds["lengths"].tolist() == [steps] * feeds["x"].shape[1 - layout]
    # on them a blob whose recurrent weights were zeroed differs; at lengths of 0 and 1 it did not
    assert np.abs(run(wrong, feeds)[0] - run(model, feeds)[0]).max() > 0.01
    short = {**feeds, "lengths": np.ones_like(feeds["lengths"])}
    np.testing.assert_array_equal(run(wrong, short)[0], run(model, short)[0])


def scorer_model(columns: int = 32, weight: float = 1.0) -> onnx.ModelProto:
    """x [B, 16] @ W [16, columns] -> TopK(k) along the last axis, k a graph input: the best scores and
    their ids (a recommender's or a sampler's head)."""
    w = np.random.default_rng(RNG_SEED).standard_normal((16, columns)).astype(np.float32) * weight
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["s"]),
            helper.make_node("TopK", ["s", "k"], ["scores", "ids"]),
        ],
        "scorer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 16]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", "K"]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "K"]),
        ],
        [numpy_helper.from_array(w, "w")],
    )
    return model_of(graph, opset=17)


@pytest.mark.parametrize(("columns", "k"), [(32, 5), (3, 3)])
def test_topks_k_input_selects_some(tmp_path: Path, columns: int, k: int) -> None:
    model = scorer_model(columns)
    entry = cook_unconfigured(model, "scorer", "android", tmp_path)
    assert all(output["ok"] for output in entry["verification"]["outputs"])
    feeds = stored_inputs(tmp_path, "scorer")
    assert feeds["k"].tolist() == [k]
    scores, _ = run(model, feeds)
    assert scores.shape[-1] == k
    # a blob whose weights were lost differs on them; at the k=0 drawn before, nothing did
    assert np.abs(run(scorer_model(columns, weight=0.0), feeds)[0] - scores).max() > 0.1
    assert "nothing was compared" not in cook_line(entry)


def nothing_found_model() -> onnx.ModelProto:
    """x [n] -> the indices of its values over 100 (NonZero): none, on any synthesized floats."""
    graph = helper.make_graph(
        [
            helper.make_node("Greater", ["x", "limit"], ["over"]),
            helper.make_node("NonZero", ["over"], ["found"]),
        ],
        "finder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("found", TensorProto.INT64, [1, "count"])],
        [numpy_helper.from_array(np.array(100, np.float32), "limit")],
    )
    return model_of(graph, opset=17)


def test_inputs_on_which_every_output_is_empty_do_not_verify(tmp_path: Path) -> None:
    """Every output empty compares nothing: synthesized inputs that give no output anywhere are refused,
    naming the model and the fixes; sample inputs that do give outputs verify it, and sample inputs
    that give none verify with the cook line saying that nothing was compared."""
    with pytest.raises(CookError) as refused:
        cook_unconfigured(nothing_found_model(), "finder", "android", tmp_path)
    message = str(refused.value)
    assert "'finder'" in message and "is empty (size 0)" in message
    assert "finder.inputs.npz" in message and "verify: false" in message

    assets = tmp_path / "assets"
    np.savez(assets / "finder.inputs.npz", x=np.array([1.0, 200.0, 300.0], np.float32))
    entry = cook(job_for(assets, "finder", shipped_settings("android"), tmp_path / "b2"))
    assert entry["verification"]["outputs"][0]["ok"] and "empty_outputs" not in entry["verification"]
    np.savez(assets / "finder.inputs.npz", x=np.array([1.0, 2.0], np.float32))
    entry = cook(job_for(assets, "finder", shipped_settings("android"), tmp_path / "b3"))
    assert entry["verification"]["empty_outputs"]
    assert "every output is empty on finder.inputs.npz: nothing was compared" in cook_line(entry)


def one_hot_model(categories: list[str], zeros: int = 1) -> onnx.ModelProto:
    """color [?, 1] strings -> its column (Gather, as skl2onnx's ColumnTransformer writes it) one-hot
    encoded over ``categories`` (ai.onnx.ml OneHotEncoder) -> times a weight per category."""
    weight = np.arange(1, len(categories) + 1, dtype=np.float32).reshape(-1, 1)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["color", "column"], ["picked"], axis=1),
            helper.make_node(
                "OneHotEncoder",
                ["picked"],
                ["hot"],
                domain="ai.onnx.ml",
                cats_strings=categories,
                zeros=zeros,
            ),
            helper.make_node("Cast", ["hot"], ["hotf"], to=TensorProto.FLOAT),
            helper.make_node("Reshape", ["hotf", "flat"], ["rows"]),
            helper.make_node("MatMul", ["rows", "weight"], ["y"]),
        ],
        "onehot",
        [helper.make_tensor_value_info("color", TensorProto.STRING, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
        [
            numpy_helper.from_array(np.array(0, np.int64), "column"),
            numpy_helper.from_array(np.array([-1, len(categories)], np.int64), "flat"),
            numpy_helper.from_array(weight, "weight"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    model.ir_version = 8
    return model


@pytest.mark.parametrize("zeros", [1, 0])
def test_strings_a_one_hot_encoder_reads_are_its_categories(tmp_path: Path, zeros: int) -> None:
    """``zeros=0`` refuses a word out of the table: none is drawn then."""
    categories = ["blue", "green", "red", "yellow"]
    model = one_hot_model(categories, zeros)
    entry = cook_unconfigured(model, "onehot", "android", tmp_path)
    assert entry["verification"]["outputs"][0]["ok"]
    feeds = stored_inputs(tmp_path, "onehot")
    drawn = set(feeds["color"].ravel().tolist())
    assert drawn == set(categories) | ({"0"} if zeros else set())
    strings = {"color": feeds["color"].astype(object)}
    assert (
        np.abs(run(one_hot_model(categories[::-1], zeros), strings)[0] - run(model, strings)[0]).max() > 0.5
    )


def tfidf_model(pool: list[str]) -> onnx.ModelProto:
    """text [N] -> lowercased, split into words (com.microsoft Tokenizer), counted over ``pool``
    (TfIdfVectorizer, unigrams and the bigram of its first two words), as skl2onnx writes a
    TfidfVectorizer."""
    unigrams = len(pool)
    graph = helper.make_graph(
        [
            helper.make_node("StringNormalizer", ["text"], ["lower"], case_change_action="LOWER", locale="C"),
            helper.make_node(
                "Tokenizer",
                ["lower"],
                ["words"],
                domain="com.microsoft",
                mark=0,
                mincharnum=1,
                pad_value="#",
                tokenexp="[a-z]+",
            ),  # fmt: skip
            helper.make_node(
                "TfIdfVectorizer",
                ["words"],
                ["counts"],
                mode="TF",
                min_gram_length=1,
                max_gram_length=2,
                max_skip_count=0,
                ngram_counts=[0, unigrams],
                ngram_indexes=list(range(unigrams + 1)),
                pool_strings=[*pool, pool[0], pool[1]],
            ),  # fmt: skip
        ],
        "tfidf",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("counts", TensorProto.FLOAT, ["N", unigrams + 1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    return model


def test_strings_a_tfidf_vectorizer_counts_are_its_words() -> None:
    from onnx_cooker.cook.inputs import looked_up_words, synthesize_inputs

    pool = ["brown", "cat", "dog", "fox", "mat", "quick"]
    model = tfidf_model(pool)
    assert looked_up_words(model)["text"][0] == "brown cat dog"  # phrases: the tokenizer splits them
    feeds = synthesize_inputs(model, {}, free=16, settings_hint="", inputs_hint="")
    counts = run(model, feeds)[0]
    assert (counts[:, :-1].sum(axis=0) > 0).all() and counts[:, -1].sum() > 0  # every word, the bigram
    assert np.abs(run(tfidf_model(pool[::-1]), feeds)[0] - counts).max() > 0.5


def audio_encoder(query_sign: float = 1.0) -> onnx.ModelProto:
    """samples [batch, samples] -> three strided 1-D convolutions (kernels 10, 4, 2; strides 5, 4, 2: 64
    samples make one frame) -> [batch, frames, 8] -> single-head self-attention over the frames, its
    query weights times ``query_sign``: a wav2vec2-style encoder, small."""
    rng = np.random.default_rng(RNG_SEED)
    convs = [(1, 10, 5), (8, 4, 4), (8, 2, 2)]
    weights = {
        f"c{i}": (rng.standard_normal((8, channels, kernel)) * 0.3).astype(np.float32)
        for i, (channels, kernel, _) in enumerate(convs)
    }
    for name in ("wq", "wk", "wv"):
        weights[name] = (rng.standard_normal((8, 8)) * 0.5).astype(np.float32)
    weights["wq"] *= query_sign
    nodes = [helper.make_node("Unsqueeze", ["samples", "axis1"], ["a0"])]
    for i, (_, kernel, stride) in enumerate(convs):
        nodes += [
            helper.make_node("Conv", [f"a{i}", f"c{i}"], [f"z{i}"], kernel_shape=[kernel], strides=[stride]),
            helper.make_node("Relu", [f"z{i}"], [f"a{i + 1}"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["a3"], ["h"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["h", "wq"], ["q"]),
        helper.make_node("MatMul", ["h", "wk"], ["k"]),
        helper.make_node("MatMul", ["h", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "encoder",
        [helper.make_tensor_value_info("samples", TensorProto.FLOAT, ["batch", "length"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", 8])],
        [
            numpy_helper.from_array(np.array([1], np.int64), "axis1"),
            *(numpy_helper.from_array(value, name) for name, value in weights.items()),
        ],
    )
    return model_of(graph, opset=17)


def test_an_audio_encoder_is_verified_where_its_frames_mix(tmp_path: Path) -> None:
    model, wrong = audio_encoder(), audio_encoder(query_sign=-1.0)
    at_64 = {"samples": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}
    assert run(model, at_64)[0].shape[1] == 1  # one frame: attention mixes nothing
    np.testing.assert_array_equal(run(wrong, at_64)[0], run(model, at_64)[0])

    entry = cook_unconfigured(model, "encoder", "android", tmp_path)
    verification = entry["verification"]
    assert verification["outputs"][0]["ok"]
    assert verification["default_dims"]["length"] > 64
    feeds = stored_inputs(tmp_path, "encoder")
    assert run(model, feeds)[0].shape[1] > 1
    assert np.abs(run(wrong, feeds)[0] - run(model, feeds)[0]).max() > 0.01
    assert f"length={verification['default_dims']['length']}" in cook_line(entry)


def test_an_output_python_cannot_read_is_refused_with_verify_false_as_the_way(tmp_path: Path) -> None:
    """A bfloat16 output: onnxruntime's Python API has no numpy type for it, and the cook failed as
    "onnxruntime cannot run the source model", advising sample inputs, which changed nothing (with
    them the message named no fix at all). It says what cannot be compared and how to cook it."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Cast", ["r"], ["y"], to=TensorProto.BFLOAT16),
        ],
        "bf16_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 5])],
    )
    with pytest.raises(CookError) as refused:
        cook_unconfigured(model_of(graph), "halfway", "windows-dml", tmp_path)
    message = str(refused.value)
    assert "its output(s) 'y' (bfloat16) have a type onnxruntime's Python API cannot return" in message
    assert "`verify: false` in" in message and "halfway.cook.yaml" in message
    settings = shipped_settings("windows-dml", verify=False)
    entry = cook(job_for(tmp_path / "assets", "halfway", settings, tmp_path / "unverified"))
    assert entry["verification"] == {"skipped": "verify is false in the settings"}
