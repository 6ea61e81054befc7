"""The verification's default rule never refuses a correct cook of a standard architecture and
still catches a wrong one (docs/verification.md has the measurements behind it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from runtime_helpers import make_blob

from bench.standard import STANDARD, export
from onnx_cooker.build.run_job import cook
from onnx_cooker.cook.inputs import load_inputs
from onnx_cooker.cook.verify import reference_outputs, verify
from onnx_cooker.errors import VerifyError
from onnx_cooker.settings.table import DEFAULT_VERIFY_SCALE
from tests.models import conv_bn_relu_model, mlp_model, transformer_block_model
from tests.test_cook import job_for, save, shipped_settings
from tests.test_target_check import OLD_RUNTIME, check_for, run_check

PLATFORMS = ("windows-dml", "console", "android", "ios")


@pytest.fixture(scope="module")
def standard_assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ResNet-50, ViT-B/16 and BERT-base, seeded, exported by the dynamo exporter (opset 18)."""
    folder = tmp_path_factory.mktemp("standard")
    for model in STANDARD:
        export(model, folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("name", [model.name for model in STANDARD])
def test_standard_architectures_cook_and_verify_for_every_platform_by_default(
    standard_assets: Path, tmp_path: Path, name: str
) -> None:
    """No .cook.yaml: a new user's first ResNet, ViT or BERT cooks everywhere, and its windows-dml
    blob passes the runtime check in onnxruntime 1.24.4 by the same rule."""
    assert not (standard_assets / f"{name}.cook.yaml").exists()
    for platform in PLATFORMS:
        entry = cook(job_for(standard_assets, name, shipped_settings(platform), tmp_path / "build"))
        verification = entry["verification"]
        assert verification["scale"] == DEFAULT_VERIFY_SCALE, platform
        for output in verification["outputs"]:
            assert output["ok"] and output["passed_by"] in ("elementwise", "scale", "noise"), (
                platform,
                output,
            )
            assert output["rel_l2"] <= DEFAULT_VERIFY_SCALE and output["cosine"] > 0.99999
    check = check_for(
        tmp_path / "build" / "windows-dml", [name], OLD_RUNTIME, Path("platforms/windows-dml.yaml")
    )
    assert run_check(check)["models"][name]["ok"]


@pytest.mark.slow
def test_explicit_tolerances_keep_their_meaning_on_a_standard_architecture(
    standard_assets: Path, tmp_path: Path
) -> None:
    """windows-dml's ONNX blob gets onnxruntime's load-time fusions: a team that asks for 1e-5 gets
    the elementwise rule alone, which these float32 roundings fail, with a message that says where."""
    entry = cook(job_for(standard_assets, "resnet50", shipped_settings("windows-dml"), tmp_path / "build"))
    (logits,) = entry["verification"]["outputs"]
    assert logits["ok"] and logits["max_rel"] > 1e-5 and logits["rel_l2"] < 1e-5
    strict = shipped_settings("windows-dml", rtol=1.0e-5, atol=1.0e-6)
    assert strict.verify_scale == 0.0
    with pytest.raises(VerifyError) as failure:
        cook(job_for(standard_assets, "resnet50", strict, tmp_path / "strict"))
    message = str(failure.value)
    assert "resnet50.onnx" in message and "'logits': largest error" in message
    assert "where the source gives" in message and "verify_scale is off" in message


# --- breakage: each must fail ----------------------------------------------------------------------


def feeds_for(model: onnx.ModelProto, seed: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    (value,) = model.graph.input
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    return {value.name: rng.standard_normal(shape).astype(np.float32)}


def with_tensor(model: onnx.ModelProto, name: str, change) -> onnx.ModelProto:
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    tensor = next(t for t in broken.graph.initializer if t.name == name)
    tensor.CopyFrom(
        numpy_helper.from_array(change(numpy_helper.to_array(tensor).copy()).astype(np.float32), name)
    )
    return broken


def largest_weight(model: onnx.ModelProto) -> str:
    return max(model.graph.initializer, key=lambda t: int(np.prod(t.dims))).name


def a_bias(model: onnx.ModelProto) -> str:
    """A bias that matters: a 1-D initializer named as one, not all zeros."""
    return next(
        t.name
        for t in model.graph.initializer
        if len(t.dims) == 1 and t.name.lower().startswith("b") and numpy_helper.to_array(t).any()
    )


def nan_at_one_element(array: np.ndarray) -> np.ndarray:
    array.flat[0] = np.nan
    return array


BREAKAGES = {
    "one weight tensor perturbed by 1%": lambda m: with_tensor(m, largest_weight(m), lambda a: a * 1.01),
    "a bias dropped": lambda m: with_tensor(m, a_bias(m), np.zeros_like),
    "a NaN in a weight": lambda m: with_tensor(m, largest_weight(m), nan_at_one_element),
}
SMALL_MODELS = {
    "conv_bn_relu": conv_bn_relu_model,
    "transformer_block": transformer_block_model,
    "mlp": mlp_model,
}
CASES = [
    (model, breakage)
    for model in sorted(SMALL_MODELS)
    for breakage in sorted(BREAKAGES)
    if not (model == "transformer_block" and breakage == "a bias dropped")  # its biases are all zeros
]


@pytest.mark.parametrize(("model_name", "breakage"), CASES)
def test_a_broken_model_fails_the_default_rule(model_name: str, breakage: str) -> None:
    source = SMALL_MODELS[model_name]()
    feeds = feeds_for(source)
    reference = reference_outputs(source, feeds)
    default_level = reference_outputs(source, feeds, optimized=True)  # as the cook passes it
    settings = shipped_settings("windows-dml")
    assert settings.verify_scale == DEFAULT_VERIFY_SCALE
    intact = verify(
        make_blob(source.SerializeToString(), "onnx"), reference, feeds, settings, None, default_level
    )
    assert all(r.passed_by in ("elementwise", "scale") for r in intact)

    broken = BREAKAGES[breakage](source)
    with pytest.raises(
        VerifyError, match=r"outputs differ from the source .* largest error .* raise `verify_scale`"
    ):
        verify(make_blob(broken.SerializeToString(), "onnx"), reference, feeds, settings, None, default_level)


def test_an_output_as_onnxruntimes_default_level_computes_it_verifies_by_that_reference() -> None:
    """A selection over near-ties (TopK) comes out in another order once onnxruntime's default level
    rounds differently: here the unoptimized reference's rows are reversed, as such a reorder would,
    and the default-level one is the blob's own. The output verifies by the default level, with its
    figures against it; without that reference, or with explicit tolerances (verify_scale off: the
    strict rule against the unoptimized source), it does not."""
    source = mlp_model()
    feeds = feeds_for(source)
    blob = make_blob(source.SerializeToString(), "onnx")
    default_level = reference_outputs(source, feeds, optimized=True)
    reordered = {name: value[..., ::-1].copy() for name, value in reference_outputs(source, feeds).items()}
    settings = shipped_settings("windows-dml")

    (result,) = verify(blob, reordered, feeds, settings, None, default_level)
    assert result.ok and result.passed_by == "default-level" and result.rel_l2 <= settings.verify_scale
    with pytest.raises(VerifyError, match="outputs differ from the source"):
        verify(blob, reordered, feeds, settings)
    with pytest.raises(VerifyError, match="verify_scale is off"):
        verify(blob, reordered, feeds, replace(settings, verify_scale=0.0), None, default_level)
    moved = {name: value + 1.0 for name, value in default_level.items()}  # neither reference
    with pytest.raises(VerifyError, match="outputs differ from the source"):
        verify(blob, reordered, feeds, settings, None, moved)


def test_the_outputs_a_selection_computes_are_found_in_graphs_subgraphs_and_functions() -> None:
    """Only outputs computed from a TopK, ArgMax, ArgMin, NonMaxSuppression or Unique may verify
    against the source's default level: downstream of one through any node, an If's branch or a
    local function; not an output beside it."""
    from onnx import TensorProto, helper

    from onnx_cooker.cook.verify import selection_outputs

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, [1])
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("boxes", "plain")]
    graph = helper.make_graph(
        [
            helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1),
            helper.make_node("Relu", ["values"], ["boxes"]),
            helper.make_node("Sigmoid", ["x"], ["plain"]),
        ],
        "g",
        [x, k],
        outputs,
    )
    assert selection_outputs(helper.make_model(graph)) == {"boxes"}

    # a branch that takes an argmax of an outer value: the If's output is one
    branch = helper.make_graph(
        [helper.make_node("ArgMax", ["x"], ["best"], axis=1)],
        "then",
        [],
        [helper.make_tensor_value_info("best", TensorProto.INT64, None)],
    )
    plain = helper.make_graph(
        [helper.make_node("Identity", ["k"], ["same"])],
        "else",
        [],
        [helper.make_tensor_value_info("same", TensorProto.INT64, None)],
    )
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    nested = helper.make_graph(
        [
            helper.make_node("If", ["cond"], ["picked"], then_branch=branch, else_branch=plain),
            helper.make_node("Neg", ["x"], ["negated"]),
        ],
        "g",
        [x, k, cond],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("picked", "negated")],
    )
    assert selection_outputs(helper.make_model(nested)) == {"picked"}

    # a local function that holds a NonMaxSuppression, called by the graph
    nms = helper.make_function(
        "studio",
        "Detect",
        ["b", "s"],
        ["kept"],
        [helper.make_node("NonMaxSuppression", ["b", "s"], ["kept"])],
        [helper.make_opsetid("", 17)],
    )
    called = helper.make_graph(
        [helper.make_node("Detect", ["x", "k"], ["detections"], domain="studio")],
        "g",
        [x, k],
        [helper.make_tensor_value_info("detections", TensorProto.INT64, None)],
    )
    model = helper.make_model(
        called,
        functions=[nms],
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("studio", 1)],
    )
    assert selection_outputs(model) == {"detections"}
    assert selection_outputs(mlp_model()) == set()


def two_outputs_model() -> onnx.ModelProto:
    model = conv_bn_relu_model()
    relu = model.graph.node[-1]
    model.graph.node.append(onnx.helper.make_node("Neg", [relu.output[0]], ["negated"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("negated", onnx.TensorProto.FLOAT, None))
    model.graph.output[1].type.CopyFrom(model.graph.output[0].type)
    return model


def test_two_outputs_swapped_fail_the_default_rule() -> None:
    source = two_outputs_model()
    feeds = feeds_for(source)
    reference = reference_outputs(source, feeds)
    swapped = onnx.ModelProto()
    swapped.CopyFrom(source)
    first, second = swapped.graph.output[0].name, swapped.graph.output[1].name
    for node in swapped.graph.node:  # the values each output name carries trade places
        node.output[:] = [{first: second, second: first}.get(name, name) for name in node.output]
        node.input[:] = [{first: second, second: first}.get(name, name) for name in node.input]
    settings = shipped_settings("windows-dml")
    with pytest.raises(VerifyError, match="outputs differ from the source"):
        verify(make_blob(swapped.SerializeToString(), "onnx"), reference, feeds, settings)


@pytest.mark.slow
def test_one_weight_deep_in_a_resnet_50_perturbed_by_1_percent_fails(standard_assets: Path) -> None:
    """The hard case for a relaxed rule: a deep network whose correct cooks move outputs by ~1e-6,
    one mid-network convolution 1% off."""
    path = standard_assets / "resnet50.onnx"
    source = onnx.load(str(path))
    feeds = load_inputs(
        standard_assets / "resnet50.inputs.npz",
        source,
        (standard_assets / "resnet50.inputs.npz").read_bytes(),
    )
    reference = reference_outputs(source, feeds)
    convs = [t.name for t in source.graph.initializer if len(t.dims) == 4]
    middle = convs[len(convs) // 2]
    broken = with_tensor(source, middle, lambda a: a * 1.01)
    with pytest.raises(VerifyError, match="'logits': largest error"):
        verify(
            make_blob(broken.SerializeToString(), "onnx"), reference, feeds, shipped_settings("windows-dml")
        )


def test_the_manifest_records_the_rule_and_its_figures(tmp_path: Path) -> None:
    save(conv_bn_relu_model(), tmp_path / "assets", "net")
    entry = cook(job_for(tmp_path / "assets", "net", shipped_settings("windows-dml"), tmp_path / "build"))
    verification = entry["verification"]
    assert (verification["rtol"], verification["atol"], verification["scale"]) == (
        1e-4,
        1e-5,
        DEFAULT_VERIFY_SCALE,
    )
    (output,) = verification["outputs"]
    assert {"max_abs", "max_rel", "of_range", "rel_l2", "cosine", "passed_by"} <= set(output)
    assert shipped_settings("windows-dml", verify_scale=0.0).verify_scale == 0.0
    assert shipped_settings("windows-dml", atol=1.0e-3).verify_scale == 0.0  # explicit: elementwise only
