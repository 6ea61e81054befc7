"""A runtime-style ORT blob (android, ios) replays optimizations its cook's onnxruntime recorded; an
older onnxruntime that lacks one of their actions refused it with its own words ("Missing action
1DQ_CPU_Softmax for transformer QDQSelectorActionTransformer", found cooking a statically quantized
conv net for android and loading it in 1.28.0). Both loaders now name it as the incompatibility it
is (IncompatibleRuntimeError / OC_ERR_INCOMPATIBLE_RUNTIME, the same message) and the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
from onnx import TensorProto, helper, numpy_helper
from runtime_helpers import incompatibility_in, make_blob

from tests.test_native import native, ort_library, run_native  # noqa: F401

OLDER = "1.28.0"  # has no 1DQ_CPU_Softmax action (1.32.0 records it)
WORDS = (
    f"onnxruntime {OLDER} cannot replay the saved runtime optimizations of model 'qsoftmax' (android): it "
    "has no action 1DQ_CPU_Softmax for QDQSelectorActionTransformer, which the onnxruntime that cooked "
    "the model recorded; it is older than the onnxruntime the platform ships: load it with the "
    f"platform's onnxruntime (its runtime_version), or cook a platform for onnxruntime {OLDER} "
    "(optimization_style: fixed needs no replay)"
)


def runtime_style_blob(tmp_path: Path) -> bytes:
    """A QDQ Softmax saved as onnxruntime's runtime-style ORT model (as the cook saves android's)."""
    scale = numpy_helper.from_array(np.array(0.05, dtype=np.float32), "scale")
    zero = numpy_helper.from_array(np.array(0, dtype=np.int8), "zero")
    out_scale = numpy_helper.from_array(np.array(1 / 256, dtype=np.float32), "out_scale")
    out_zero = numpy_helper.from_array(np.array(-128, dtype=np.int8), "out_zero")
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["d"]),
            helper.make_node("Softmax", ["d"], ["s"], axis=-1),
            helper.make_node("QuantizeLinear", ["s", "out_scale", "out_zero"], ["qs"]),
            helper.make_node("DequantizeLinear", ["qs", "out_scale", "out_zero"], ["y"]),
        ],
        "qsoftmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [scale, zero, out_scale, out_zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "qsoftmax.ort")
    options.add_session_config_entry("session.save_model_format", "ORT")
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    options.add_session_config_entry("optimization.minimal_build_optimizations", "save")
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ort_model = (tmp_path / "qsoftmax.ort").read_bytes()
    return make_blob(ort_model, "ort", name="qsoftmax", platform="android", saved_runtime_optimizations=True)


def test_an_action_an_older_onnxruntime_lacks_is_its_incompatibility_in_python(tmp_path: Path) -> None:
    blob = tmp_path / "qsoftmax.ocb"
    blob.write_bytes(runtime_style_blob(tmp_path))
    assert incompatibility_in(OLDER, tmp_path / "work", blob) == ["1DQ_CPU_Softmax", WORDS]


def test_an_action_an_older_onnxruntime_lacks_is_its_incompatibility_in_c(
    native: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    (tmp_path / "qsoftmax.ocb").write_bytes(runtime_style_blob(tmp_path))
    done = run_native(
        [native / "oc-run", "--blob", tmp_path / "qsoftmax.ocb", "--ort", ort_library(OLDER)], check=False
    )
    assert done.returncode == 1
    assert WORDS in done.stderr, done.stderr
    # the platform's own onnxruntime replays it
    run_native([native / "oc-run", "--blob", tmp_path / "qsoftmax.ocb", "--ort", ort_library("1.32.0")])
