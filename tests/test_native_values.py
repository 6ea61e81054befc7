"""oc-run on outputs that are not tensors: a classifier's ZipMap (a sequence of maps, what
scikit-learn models converted by skl2onnx return by default), sequences of tensors (float32 and
float16), written as ``<output>.json`` (native/tools/values.h) and read back here to the Python
loader's values, in ONNX and ORT blobs, in each target onnxruntime."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from runtime_helpers import make_blob, to_ort_format

from onnx_cooker.runtime import session_from_blob
from tests.test_native import VERSIONS, native, ort_library, run_native  # noqa: F401

CPU = ["CPUExecutionProvider"]
ML = "ai.onnx.ml"
STRING_LABELS = ["cat", 'd"og\\', "é\n\u0001"]  # JSON escapes and UTF-8 beyond ASCII


def zipmap_type(key: int) -> onnx.TypeProto:
    """ZipMap's output type: a sequence of maps from ``key`` to float."""
    scalar = helper.make_tensor_type_proto(TensorProto.FLOAT, [])
    return helper.make_sequence_type_proto(helper.make_map_type_proto(key, scalar))


def classifier() -> onnx.ModelProto:
    """Four outputs: a label tensor, ZipMaps with int64 and with string keys, sequences of tensors."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    seq_float = helper.make_value_info(
        "parts", helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    )
    seq_half = helper.make_value_info(
        "halves", helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT16, None))
    )
    outputs = [
        helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
        helper.make_value_info("probabilities", zipmap_type(TensorProto.INT64)),
        helper.make_value_info("named", zipmap_type(TensorProto.STRING)),
        seq_float,
        seq_half,
    ]
    nodes = [
        helper.make_node("Softmax", ["x"], ["p"], axis=1),
        helper.make_node("ArgMax", ["p"], ["label"], axis=1, keepdims=0),
        helper.make_node("ZipMap", ["p"], ["probabilities"], domain=ML, classlabels_int64s=[0, 1, 7]),
        helper.make_node("ZipMap", ["x"], ["named"], domain=ML, classlabels_strings=STRING_LABELS),
        helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=1),
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("SplitToSequence", ["h"], ["halves"], axis=0, keepdims=0),
    ]
    graph = helper.make_graph(nodes, "classifier", [x], outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def same(got, want) -> bool:
    """A value read back from oc-run's JSON equals the Python loader's (floats to the bit of their type)."""
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and list(got) == [str(k) for k in want]
            and all(same(got[str(k)], v) for k, v in want.items())
        )
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    # a map's float values reach Python as float (widened from float32): compare them as float32
    want = np.float32(want) if isinstance(want, float) else np.asarray(want)
    if want.dtype.kind == "f":
        got = np.asarray(got, dtype=np.float64).astype(want.dtype)
        return got.shape == want.shape and bool(np.all((got == want) | (np.isnan(got) & np.isnan(want))))
    return bool(np.array_equal(np.asarray(got, dtype=want.dtype), want))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("model_format", ["onnx", "ort"])
def test_sequences_and_maps_are_written_as_json_with_the_python_loaders_values(
    native: Path,  # noqa: F811
    tmp_path: Path,
    version: str,
    model_format: str,
) -> None:
    source = classifier().SerializeToString()
    model = source if model_format == "onnx" else to_ort_format(source, tmp_path)
    blob = make_blob(model, model_format)
    (tmp_path / "model.ocb").write_bytes(blob)
    x = np.array([[0.5, -1.25, 3.0], [np.nan, np.inf, -np.inf], [1e-40, -0.0, 65504.0]], dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    done = run_native(
        [native / "oc-run", "--blob", tmp_path / "model.ocb", "--ort", ort_library(version)]
        + ["--in", tmp_path / "x.npy", "--out", out]
    )
    session = session_from_blob(blob, providers=CPU)
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x}), strict=True))
    assert np.array_equal(np.load(out / "label.npy"), expected["label"])
    for name in ("probabilities", "named", "parts", "halves"):
        text = (out / f"{name}.json").read_text(encoding="utf-8")
        got = json.loads(text)  # Python's json reads NaN and Infinity as oc-run writes them
        assert same(got, expected[name]), (name, got, expected[name])
    assert list(json.loads((out / "named.json").read_text(encoding="utf-8"))[0]) == STRING_LABELS
    assert math.isnan(json.loads((out / "named.json").read_text(encoding="utf-8"))[1][STRING_LABELS[0]])
    assert "output 'probabilities': a sequence of 3 maps ->" in done.stdout
    assert "output 'parts': a sequence of 3 tensors ->" in done.stdout


@pytest.mark.parametrize("version", VERSIONS)
def test_optional_outputs_are_written_as_their_value_or_null(
    native: Path,  # noqa: F811
    tmp_path: Path,
    version: str,
) -> None:
    """An optional holding a tensor is that tensor (.npy); an empty one (Python's None) is ``null`` in
    its .json. oc-run crashed on the empty one before (it asked onnxruntime the type of no value)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    kind = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    graph = helper.make_graph(
        [
            helper.make_node("Optional", ["x"], ["held"]),
            helper.make_node("Optional", [], ["empty"], type=kind),
        ],
        "optional",
        [x],
        [helper.make_value_info(name, helper.make_optional_type_proto(kind)) for name in ("held", "empty")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    blob = make_blob(model.SerializeToString(), "onnx")
    (tmp_path / "model.ocb").write_bytes(blob)
    feed = np.array([1.5, -2.0], dtype=np.float32)
    np.save(tmp_path / "x.npy", feed)
    done = run_native(
        [native / "oc-run", "--blob", tmp_path / "model.ocb", "--ort", ort_library(version)]
        + ["--in", tmp_path / "x.npy", "--out", tmp_path / "out"]
    )
    held, empty = session_from_blob(blob, providers=CPU).run(None, {"x": feed})
    assert empty is None
    assert np.array_equal(np.load(tmp_path / "out" / "held.npy"), held)
    assert json.loads((tmp_path / "out" / "empty.json").read_text(encoding="utf-8")) is None
    assert "output 'empty': no value (an empty optional) ->" in done.stdout
