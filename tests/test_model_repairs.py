"""Every model onnxruntime runs cooks for every platform: the exact weight guard (no refusal of
deduplicated constants, the seed thread's stripped file still refused) and the downgrades of IR and
opset for older target runtimes (docs/design.md, "The weight guard", "Newer models, older runtimes")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.cook import guard as guard_module
from onnx_cooker.cook.downgrade import NEWEST_IR_KNOWN, TYPES_SINCE_IR, Limits, downgrade, limits_of
from onnx_cooker.cook.facts import onnx_facts, ort_facts
from onnx_cooker.cook.optimize import optimize
from onnx_cooker.cook.source import read_sources
from onnx_cooker.cook.variant import cook_variant
from onnx_cooker.errors import GuardError, ModelError, VerifyError
from onnx_cooker.layout import blob_path
from onnx_cooker.runtime import decode_blob, session_from_blob
from tests.models import (
    conv_bn_relu_model,
    mlp_model,
    model_of,
    relu_model,
    shared_constants_model,
    tanh_loop_body,
    todays_onnx_model,
)
from tests.test_cook import job_for, save, settings_for, shipped_settings
from tests.test_dodo import cook as doit_cook
from tests.test_target_check import OLD_RUNTIME, check_for, run_check

PLATFORMS = ("windows-dml", "console", "android", "ios")
CPU = ["CPUExecutionProvider"]


def cooked_facts(blob: bytes):
    header, model = decode_blob(blob)
    return ort_facts(model) if header.model_format == "ort" else onnx_facts(onnx.load_from_string(model))


def used(entry: dict) -> dict:
    """What the entry's downgrade fallbacks put in place: {"opset": 25, "ir_version": 13}."""
    return {key: value for fallback in entry["fallbacks"] for key, value in fallback.get("used", {}).items()}


# --- the weight guard ------------------------------------------------------------------------------


@pytest.mark.parametrize("ir_version", [3, 8])
def test_deduplicated_constants_cook_and_verify_for_every_platform(tmp_path: Path, ir_version: int) -> None:
    """The real model the byte-ratio guard refused: ConstantSharing keeps one of many equal constants."""
    source = shared_constants_model(ir_version)
    save(source, tmp_path / "assets", "shared")
    source_bytes = onnx_facts(source).initializer_bytes
    for platform in PLATFORMS:
        settings = shipped_settings(platform)
        entry = cook(job_for(tmp_path / "assets", "shared", settings, tmp_path / "build"))
        assert all(output["ok"] for output in entry["verification"]["outputs"]), entry["verification"]
        # the case the old rule refused: under half of the source's weight bytes, and nothing lost
        assert entry["weight_bytes"] < 0.5 * source_bytes
        blob = blob_path(tmp_path / "build" / platform, "shared", settings.format).read_bytes()
        assert cooked_facts(blob).missing_values == ()


@pytest.mark.parametrize("setting", ["drop", "keep"])
def test_initializers_a_source_lists_as_inputs_become_constants_unless_kept(
    tmp_path: Path, setting: str
) -> None:
    """An IR>=4 model that lists its initializers as graph inputs (`keep_initializers_as_inputs`):
    onnxruntime fuses no Conv+BatchNormalization over weights a caller may override, and warns on
    every load. The cook makes them constants (recorded in `fallbacks`), unless the model keeps them."""
    source = conv_bn_relu_model()
    source.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in source.graph.initializer
    )
    source.ir_version = 8
    save(source, tmp_path / "assets", "overridable")
    (tmp_path / "assets" / "overridable.cook.yaml").write_text(f"overridable_initializers: {setting}\n")
    settings = shipped_settings("windows-dml", overridable_initializers=setting)
    entry = cook(job_for(tmp_path / "assets", "overridable", settings, tmp_path / "build"))
    assert all(output["ok"] for output in entry["verification"]["outputs"]), entry["verification"]
    blob = blob_path(tmp_path / "build" / "windows-dml", "overridable", "onnx").read_bytes()
    session = session_from_blob(blob, providers=CPU)
    overridable = [value.name for value in session.get_overridable_initializers()]
    repaired = [f for f in entry["fallbacks"] if "overridable_initializers" in f.get("used", {})]
    ops = [node.op_type for node in onnx.load_from_string(decode_blob(blob)[1]).graph.node]
    if setting == "drop":
        assert overridable == [] and "BatchNormalization" not in ops, ops
        assert repaired[0]["instead_of"] == {"overridable_initializers": 5}
        assert "(w, scale, bias and 2 more)" in repaired[0]["why"]
    else:
        assert overridable == ["w", "scale", "bias", "mean", "var"] and not repaired
        assert "BatchNormalization" in ops, ops  # what onnxruntime cannot fuse while they are inputs
    feed = {"x": np.random.default_rng(4).standard_normal((1, 8, 16, 16)).astype(np.float32)}
    want = onnxruntime.InferenceSession(source.SerializeToString(), providers=CPU).run(None, feed)[0]
    np.testing.assert_allclose(session.run(None, feed)[0], want, rtol=1e-4, atol=1e-5)


def test_a_cooked_model_with_its_initializers_stripped_is_refused_naming_them() -> None:
    """The seed thread's file: optimized for real, then its initializers gone (as DirectML took them)."""
    source = conv_bn_relu_model()
    cooked = onnx.load_from_string(optimize(source, shipped_settings("windows-dml")))
    names = sorted(tensor.name for tensor in cooked.graph.initializer)
    assert names
    del cooked.graph.initializer[:]

    problems = guard_module.check_weights(onnx_facts(source), onnx_facts(cooked))

    assert len(problems) == 1 and problems[0].startswith("weights were dropped: nodes read values")
    assert all(name in problems[0] for name in names[:5])
    assert "0 initializers" in problems[0]


def test_a_value_a_subgraph_reads_from_outside_counts_as_provided_only_while_it_exists() -> None:
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "outer_w"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        "branches",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "outer_w")],
    )
    model = model_of(graph)
    assert onnx_facts(model).missing_values == ()
    del model.graph.initializer[:]
    assert onnx_facts(model).missing_values == ("outer_w",)


def named_mlp() -> onnx.ModelProto:
    model = mlp_model()
    for index, node in enumerate(model.graph.node):
        node.name = f"n{index}"
    return model


def test_a_weight_zeroed_or_retyped_under_its_own_name_is_refused() -> None:
    source = named_mlp()
    weight = numpy_helper.to_array(source.graph.initializer[0])
    for replacement in (np.zeros_like(weight), weight.astype(np.float16), weight[:2]):
        cooked = onnx.ModelProto()
        cooked.CopyFrom(source)
        cooked.graph.initializer[0].CopyFrom(numpy_helper.from_array(replacement, "W"))

        problems = guard_module.check_weights(onnx_facts(source), onnx_facts(cooked))

        assert len(problems) == 1 and "'W' of node 'n0' (MatMul)" in problems[0], problems


def test_a_weight_rewritten_in_place_or_shared_under_another_name_passes() -> None:
    """onnxruntime transposes a weight one node reads under its own name; ConstantSharing and folding
    give nodes other names to read. Neither drops a weight (the verification proves the numbers)."""
    source = named_mlp()
    weight = numpy_helper.to_array(source.graph.initializer[0])
    transposed = onnx.ModelProto()
    transposed.CopyFrom(source)
    transposed.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(weight.T), "W"))
    renamed = onnx.ModelProto()
    renamed.CopyFrom(source)
    renamed.graph.initializer[0].name = "W_shared"
    renamed.graph.node[0].input[1] = "W_shared"

    for cooked in (transposed, renamed):
        assert guard_module.check_weights(onnx_facts(source), onnx_facts(cooked)) == []


# --- downgrades: IR -------------------------------------------------------------------------------


def test_the_limits_are_those_of_the_shipped_runtimes_and_the_ir_table_is_complete() -> None:
    assert limits_of("1.24.4") == Limits("1.24.4", 25, 13)
    assert limits_of("1.28.0") == Limits("1.28.0", 26, 13)
    assert limits_of("1.32.0") == Limits("1.32.0", 28, 14)
    # Every data type newer than IR 9 (float8) is listed; a new IR of onnx fails here until it is.
    newer = {value for value in TensorProto.DataType.values() if value > TensorProto.FLOAT8E5M2FNUZ}
    assert newer == {t for types in TYPES_SINCE_IR.values() for t in types}
    assert NEWEST_IR_KNOWN == onnx.IR_VERSION


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_model_saved_by_todays_onnx_cooks_for_every_platform(tmp_path: Path, platform: str) -> None:
    save(todays_onnx_model(), tmp_path / "assets", "today")
    settings = shipped_settings(platform)
    limits = limits_of(settings.runtime_version)

    entry = cook(job_for(tmp_path / "assets", "today", settings, tmp_path / "build"))

    blob = blob_path(tmp_path / "build" / platform, "today", settings.format).read_bytes()
    facts = cooked_facts(blob)
    assert facts.ir_version == min(14, limits.ir_version) and facts.opset == min(28, limits.opset)
    expected = {}
    if limits.opset < 28:
        expected["opset"] = limits.opset
    if limits.ir_version < 14:
        expected["ir_version"] = limits.ir_version
    assert used(entry) == expected
    assert all(output["ok"] for output in entry["verification"]["outputs"])
    feed = {"x": np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)}
    want = onnxruntime.InferenceSession(todays_onnx_model().SerializeToString(), providers=CPU).run(
        None, feed
    )
    got = session_from_blob(blob, providers=CPU).run(None, feed)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(("platform", "version"), [("windows-dml", OLD_RUNTIME), ("console", "1.28.0")])
def test_lowered_models_load_in_the_targets_exact_runtime(
    tmp_path: Path, platform: str, version: str
) -> None:
    """IR 14 / opset 28 lowered, and an opset-26 model converted: the runtime check in the exact
    onnxruntime the platform ships loads and matches them."""
    save(todays_onnx_model(), tmp_path / "assets", "today")
    save(relu_model(26), tmp_path / "assets", "relu26")
    settings = shipped_settings(platform)
    for name in ("today", "relu26"):
        cook(job_for(tmp_path / "assets", name, settings, tmp_path / "build"))
    platform_dir = tmp_path / "build" / platform
    check = check_for(platform_dir, ["today", "relu26"], version, Path(f"platforms/{platform}.yaml"))

    report = run_check(check)

    assert report["onnxruntime"] == version
    assert all(report["models"][name]["ok"] for name in ("today", "relu26")), report["models"]


def test_downgrade_never_fails_naming_ir_and_opset_with_the_numbers_the_target_allows(tmp_path: Path) -> None:
    save(todays_onnx_model(), tmp_path / "assets", "today")
    settings = shipped_settings("windows-dml", downgrade="never")
    with pytest.raises(GuardError) as failure:
        cook(job_for(tmp_path / "assets", "today", settings, tmp_path / "build"))
    message = str(failure.value)
    assert (
        "imports default-domain opset 28 and onnxruntime 1.24.4 (runtime_version) loads opset 25 at most"
        in (message)
    )
    assert "is IR 14 and onnxruntime 1.24.4 (runtime_version) loads IR 13 at most" in message
    assert "set `downgrade: auto`" in message and "raise runtime_version to 1.32" in message
    assert not blob_path(tmp_path / "build" / "windows-dml", "today", "onnx").exists()


def int4_weights_model() -> onnx.ModelProto:
    """An int4 initializer dequantized to float (IR 10, opset 21)."""
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w4", "scale"], ["w"], name="dequantize"),
            helper.make_node("Add", ["x", "w"], ["y"], name="add"),
        ],
        "int4_weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [
            helper.make_tensor("w4", TensorProto.INT4, [4], [1, -2, 3, -4]),
            numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
        ],
    )
    return model_of(graph, opset=21, ir_version=10)


def test_an_int4_model_for_a_target_that_loads_only_ir_9_fails_naming_the_feature(tmp_path: Path) -> None:
    model = int4_weights_model()
    onnx.checker.check_model(model)
    save(model, tmp_path / "assets", "int4")
    settings = settings_for(
        tmp_path, "runtime_version: '1.17.0'\nformat: onnx\nexecution_providers: [CPUExecutionProvider]\n"
    )
    with pytest.raises(ModelError) as failure:
        cook(job_for(tmp_path / "assets", "int4", settings, tmp_path / "build"))
    message = str(failure.value)
    assert "int4.onnx" in message and "the model is IR 10 and uses int4 (IR 10): initializer 'w4'" in message
    assert "loads IR 9 at most" in message and "raise runtime_version to 1.20 or newer" in message
    assert "skip_platforms" in message


def test_lowering_below_ir_10_drops_annotations_and_refuses_overloads() -> None:
    limits = Limits("1.17.0", 20, 9)
    annotated = relu_model(20)
    annotated.graph.node[0].metadata_props.add(key="origin", value="exporter")
    annotated.graph.input[0].metadata_props.add(key="unit", value="m")

    lowered, records = downgrade(annotated, limits, mode="auto", where="relu.cook.yaml")

    assert lowered.ir_version == 9 and records[0]["used"] == {"ir_version": 9}
    assert not lowered.graph.node[0].metadata_props and not lowered.graph.input[0].metadata_props
    assert annotated.ir_version == 10  # the source is left as it was
    overloaded = relu_model(20)
    overloaded.graph.node[0].overload = "fast"
    with pytest.raises(ModelError, match=r"function overloads \(IR 10\): node"):
        downgrade(overloaded, limits, mode="auto", where="relu.cook.yaml")


# --- downgrades: opset ----------------------------------------------------------------------------


def test_an_opset_26_model_is_converted_for_an_older_target_and_verified(tmp_path: Path) -> None:
    save(relu_model(26), tmp_path / "assets", "relu26")
    entry = cook(job_for(tmp_path / "assets", "relu26", shipped_settings("windows-dml"), tmp_path / "build"))
    assert used(entry) == {"opset": 25} and entry["min_runtime_version"] == "1.24"
    assert "version converter" in entry["fallbacks"][0]["why"]
    assert all(output["ok"] for output in entry["verification"]["outputs"])
    # where the target loads opset 26, nothing is converted
    entry = cook(job_for(tmp_path / "assets", "relu26", shipped_settings("console"), tmp_path / "build"))
    assert entry["fallbacks"] == []


def cumprod_model() -> onnx.ModelProto:
    """CumProd is new in opset 26: there is nothing to convert it to."""
    graph = helper.make_graph(
        [helper.make_node("CumProd", ["x", "axis"], ["y"], name="cumprod")],
        "cumprod",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(0, np.int64), "axis")],
    )
    return model_of(graph, opset=26, ir_version=10)


def test_a_model_the_converter_cannot_lower_fails_with_its_reason_and_the_choices(tmp_path: Path) -> None:
    save(cumprod_model(), tmp_path / "assets", "cumprod")
    with pytest.raises(ModelError) as failure:
        cook(job_for(tmp_path / "assets", "cumprod", shipped_settings("windows-dml"), tmp_path / "build"))
    message = str(failure.value)
    assert "cumprod.onnx" in message and "windows-dml" in message
    assert "opset 26 and onnxruntime 1.24.4 (runtime_version) loads opset 25 at most" in message
    assert "cannot convert it (" in message and "CumProd" in message
    assert "raise runtime_version to 1.28 or newer" in message and "skip_platforms" in message


def test_what_ships_is_verified_against_the_model_before_the_repair(tmp_path: Path) -> None:
    """A conversion that changed what the model computes fails the verification: the blob is compared
    with the source, not with the converted model."""
    source = named_mlp()
    save(source, tmp_path / "assets", "mlp")
    job = job_for(tmp_path / "assets", "mlp", shipped_settings("windows-dml"), tmp_path / "build")
    wrong = onnx.ModelProto()
    wrong.CopyFrom(source)
    weight = numpy_helper.to_array(wrong.graph.initializer[0])
    wrong.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight * 1.5, "W"))
    read = read_sources(job.asset)

    cook_variant(job, wrong, read, "key", wrong)  # against itself it verifies
    with pytest.raises(VerifyError, match="outputs differ from the source"):
        cook_variant(job, wrong, read, "key", source)


# --- the whole project, through doit ---------------------------------------------------------------


@pytest.mark.slow
def test_doit_cooks_the_examples_and_the_repaired_models_into_every_manifest(project: Path) -> None:
    """The example assets plus a deduplicated IR-3 model and a model saved by today's onnx: every
    platform gets its manifest, the runtime checks in the exact target versions pass, and each
    repair is one warning line."""
    save(shared_constants_model(3), project / "assets", "shared_constants")
    save(todays_onnx_model(), project / "assets", "todays_onnx")

    run = doit_cook(project)

    for platform in PLATFORMS:
        manifest = json.loads((project / "build" / platform / "manifest.json").read_text())
        assert {"shared_constants", "todays_onnx"} <= set(manifest["models"]), platform
        version = shipped_settings(platform).runtime_version
        assert version in manifest["models"]["todays_onnx"]["verified_on"], platform
    assert "warning: todays_onnx cooked with opset 25: onnxruntime 1.24.4 loads" in run.stdout
    assert "warning: todays_onnx cooked with ir_version 13: onnxruntime 1.28.0 loads" in run.stdout


def gemm_opset6_model() -> onnx.ModelProto:
    """Gemm with the `broadcast` attribute of opset 6, IR 3, weights listed as inputs: the oldest
    model zoo files. onnxruntime has no kernel left for Gemm-6."""
    rng = np.random.default_rng(6)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], broadcast=1, transB=1)],
        "gemm6",
        [
            helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
            for name, shape in (("x", [1, 8]), ("w", [4, 8]), ("b", [4]))
        ],  # fmt: skip
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        weights,
    )
    return model_of(graph, opset=6, ir_version=3)


def test_a_model_older_than_onnxruntimes_opsets_names_the_conversion_that_cooks_it(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    path = save(gemm_opset6_model(), assets, "gemm6")
    with pytest.raises(ModelError) as failure:
        cook(job_for(assets, "gemm6", shipped_settings("windows-dml"), tmp_path / "build"))
    message = str(failure.value)
    assert "imports default-domain opset 6, and onnxruntime supports opset 7 and newer" in message
    command = message.split('`python -c "')[1].split('"`')[0].replace("MODEL.onnx", str(path))
    exec(command)  # the user's one line, as given
    entry = cook(job_for(assets, "gemm6", shipped_settings("windows-dml"), tmp_path / "build"))
    assert entry["verification"]["outputs"][0]["ok"]


def _fp16_loop_and_if_model() -> onnx.ModelProto:
    """fp16 throughout: a Loop of MatMul+Tanh, then an If whose two branches read the Loop's output.
    The CPU EP has no fp16 Mul/Sub/Tanh kernels: onnxruntime puts a Cast in front of each, and the
    two branches' Casts of the same outer value get the same name."""
    weight = (np.random.default_rng(0).standard_normal((8, 8)) * 0.3).astype(np.float16)
    body = tanh_loop_body(TensorProto.FLOAT16)
    then = helper.make_graph(
        [helper.make_node("Mul", ["ly", "two"], ["o"])],
        "then",
        [],
        [helper.make_tensor_value_info("o", 10, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Sub", ["ly", "two"], ["o2"])],
        "else",
        [],
        [helper.make_tensor_value_info("o2", 10, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Loop", ["n", "", "x"], ["ly"], body=body),
            helper.make_node("ReduceSum", ["ly"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ],
        "loop_if",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["b", 8]),
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["b", 8])],
        [
            numpy_helper.from_array(weight, "W"),
            numpy_helper.from_array(np.array(2.0, np.float16), "two"),
            numpy_helper.from_array(np.array(0.0, np.float16), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("platform", ["windows-dml", "linux-openvino"])
def test_an_fp16_model_whose_branches_read_one_value_cooks_for_onnx_platforms(
    tmp_path: Path, platform: str
) -> None:
    """onnxruntime writes the optimized model with one Cast name in both If branches and then refuses
    it itself ("not in SSA form"; 1.32.0, even with every optimization off): the cook renames the
    second branch's, so the blob loads and computes what the source does."""
    model = _fp16_loop_and_if_model()
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "written.onnx")
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="single static assignment"):  # the premise
        onnxruntime.InferenceSession(str(tmp_path / "written.onnx"), providers=["CPUExecutionProvider"])

    save(model, tmp_path / "assets", "loop_if")
    entry = cook(job_for(tmp_path / "assets", "loop_if", shipped_settings(platform), tmp_path / "build"))
    blob = blob_path(tmp_path / "build" / platform, "loop_if", entry["format"]).read_bytes()
    session = session_from_blob(blob, providers=["CPUExecutionProvider"])
    source = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for trips in (0, 3):  # the Loop's body and both branches' sides
        feeds = {"x": np.full((2, 8), 0.5, np.float16), "n": np.array(trips, np.int64)}
        for sign in (1, -1):
            feeds["x"] = feeds["x"] * np.float16(sign)
            np.testing.assert_array_equal(session.run(None, feeds)[0], source.run(None, feeds)[0])


def test_subgraph_names_are_made_unique_only_where_they_repeat_and_within_their_scope() -> None:
    """Names a nested graph defines itself keep their uses; its uses of a renamed outer value follow."""
    from onnx_cooker.cook.ssa import unique_subgraph_names

    inner = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["u"]), helper.make_node("Add", ["u", "t"], ["v"])],
        "inner",
        [],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None)],
    )
    then = helper.make_graph(  # defines t (also the else branch's) and reads it in a nested If
        [
            helper.make_node("Abs", ["x"], ["t"]),
            helper.make_node("If", ["c"], ["w"], then_branch=inner, else_branch=inner),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["w2"])],
        "else",
        [],
        [helper.make_tensor_value_info("w2", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    before = model.SerializeToString()
    renamed = unique_subgraph_names(model)
    # t once more in the branch met second (make_node orders attributes by name: else first, so
    # the then branch's t is the one renamed); u and v in the second copy of the nested branch
    assert renamed == 3
    branches = {a.name: a.g for a in model.graph.node[0].attribute}
    assert [list(n.output) for n in branches["else_branch"].node] == [["t"], ["w2"]]
    then_branch = branches["then_branch"]
    assert list(then_branch.node[0].output) == ["t__1"]
    nested = then_branch.node[1]
    first, second = nested.attribute[0].g, nested.attribute[1].g  # else_branch, then then_branch
    assert [list(n.input) for n in first.node] == [["t__1"], ["u", "t__1"]]  # the outer t, renamed
    assert [list(n.output) for n in second.node] == [["u__1"], ["v__1"]]
    assert list(second.node[1].input) == ["u__1", "t__1"] and second.output[0].name == "v__1"
    unchanged = onnx.load_model_from_string(before)
    assert unique_subgraph_names(unchanged) == 3  # deterministic
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for c in (True, False):
        x = np.array([-1.5, 2.0], np.float32)
        got = session.run(None, {"x": x, "c": np.array(c)})[0]
        expected = (-np.abs(x) + np.abs(x)) if c else -np.abs(x)
        np.testing.assert_array_equal(got, expected)
