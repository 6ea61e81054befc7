"""The committed example models in assets/ match what assets/make_assets.py generates, and keep the
properties the rest of the test suite relies on."""

from __future__ import annotations

import runpy
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

ASSETS = Path(__file__).resolve().parent.parent / "assets"
SCRIPT = ASSETS / "make_assets.py"
MAX_ASSETS_BYTES = 15 * 1024 * 1024

EXPECTED_FILES = {
    "mnist.onnx",
    "squeezenet.onnx",
    "resnet.onnx",
    "vision/detector.onnx",
    "vision/detector.cook.yaml",
    "big_weights.onnx",
    "big_weights.onnx.data",
    "gated.onnx",
    "gated.inputs.npz",
    "multi_io.onnx",
    "multi_io.inputs.npz",
    "legacy_ir3.onnx",
}


def _load_main() -> Callable[[list[str]], int]:
    # run_path rather than an import: assets/ is not a package, and this writes no __pycache__ into it.
    return runpy.run_path(str(SCRIPT), run_name="make_assets")["main"]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out_dir = tmp_path_factory.mktemp("assets")
    assert _load_main()([str(out_dir)]) == 0
    return out_dir


def _relative_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_generates_expected_files(regenerated: Path) -> None:
    assert _relative_files(regenerated) == EXPECTED_FILES


@pytest.mark.parametrize("relative", sorted(EXPECTED_FILES))
def test_committed_asset_is_byte_identical(regenerated: Path, relative: str) -> None:
    committed = ASSETS / relative
    assert committed.is_file(), f"{relative} missing from assets/: run python assets/make_assets.py"
    assert committed.read_bytes() == (regenerated / relative).read_bytes(), (
        f"assets/{relative} is stale: run python assets/make_assets.py and commit the result"
    )


def test_assets_total_size_is_small() -> None:
    total = sum(p.stat().st_size for p in ASSETS.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert total < MAX_ASSETS_BYTES


def test_legacy_model_is_ir3_with_initializers_as_inputs() -> None:
    model = onnx.load(str(ASSETS / "legacy_ir3.onnx"))
    assert model.ir_version == 3
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 7)]
    initializer_names = {t.name for t in model.graph.initializer}
    input_names = {i.name for i in model.graph.input}
    assert initializer_names
    assert initializer_names <= input_names


def test_legacy_model_has_identical_constants() -> None:
    # The ConstantSharing trap needs two distinct initializers holding the same one-element value.
    model = onnx.load(str(ASSETS / "legacy_ir3.onnx"))
    small = [numpy_helper.to_array(t) for t in model.graph.initializer if np.prod(t.dims) == 1]
    values = [a.item() for a in small]
    assert any(values.count(v) >= 2 for v in values)


def test_detector_has_symbolic_batch() -> None:
    model = onnx.load(str(ASSETS / "vision" / "detector.onnx"))
    for value in [*model.graph.input, *model.graph.output]:
        assert value.type.tensor_type.shape.dim[0].dim_param == "batch", value.name
    assert [o.name for o in model.graph.output] == ["boxes", "scores"]


def test_big_weights_uses_external_data_file() -> None:
    model = onnx.load(str(ASSETS / "big_weights.onnx"), load_external_data=False)
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external
    data_size = (ASSETS / "big_weights.onnx.data").stat().st_size
    for tensor in external:
        info = {entry.key: entry.value for entry in tensor.external_data}
        assert info["location"] == "big_weights.onnx.data"
        assert int(info.get("offset", 0)) + int(info["length"]) <= data_size
    assert (ASSETS / "big_weights.onnx").stat().st_size < 4096


def test_gated_contains_if() -> None:
    model = onnx.load(str(ASSETS / "gated.onnx"))
    assert "If" in {node.op_type for node in model.graph.node}


@pytest.mark.parametrize(
    ("model_name", "npz_name"),
    [("gated.onnx", "gated.inputs.npz"), ("multi_io.onnx", "multi_io.inputs.npz")],
)
def test_inputs_file_keys_match_model_inputs(model_name: str, npz_name: str) -> None:
    model = onnx.load(str(ASSETS / model_name))
    with np.load(ASSETS / npz_name) as inputs:
        assert sorted(inputs.files) == sorted(i.name for i in model.graph.input)
