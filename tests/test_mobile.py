"""Mobile and console targets: runtime-style ORT, reduced-operator configs, usability, fixed shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime.tools.ort_format_model  # noqa: F401  (puts ort_flatbuffers_py on sys.path)
import pytest
from onnxruntime.tools import reduced_build_config_parser

import ort_flatbuffers_py.fbs as fbs  # isort: skip
from onnx_cooker import layout
from onnx_cooker.build.run_job import cook
from onnx_cooker.cook import opconfig
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.optimize import session_options
from onnx_cooker.cook.usability import usability
from onnx_cooker.errors import ModelError
from onnx_cooker.layout import applied_variant_path, blob_path
from onnx_cooker.runtime import decode_blob
from onnx_cooker.runtime.session import session_options_for
from tests.models import conv_bn_relu_model, int4_model, mlp_model, with_symbolic_batch
from tests.test_cook import job_for, save, settings_for, shipped_settings


def ort_operators(data: bytes) -> set[tuple[str, str]]:
    """(domain, op type) of every node of an ORT-format model, read with onnxruntime's flatbuffers."""
    graph = fbs.InferenceSession.InferenceSession.GetRootAs(data, 0).Model().Graph()
    nodes = (graph.Nodes(i) for i in range(graph.NodesLength()))
    return {((node.Domain() or b"").decode() or "ai.onnx", node.OpType().decode()) for node in nodes}


def applied_variant(job: CookJob) -> bytes:
    """The model with its saved optimizations applied, as the cook makes it to list its operators (the
    cook keeps that file only when the operator lists in its entry lack types)."""
    from onnx_cooker.cook.optimize import optimize
    from onnx_cooker.cook.shapes import fix_shapes
    from onnx_cooker.cook.source import load_source

    model = load_source(job.asset)
    fix_shapes(model, job.settings)
    return optimize(model, job.settings, work_dir=job.platform_dir, saved="apply")


def config_operators(path: Path, type_reduction: bool = False) -> set[tuple[str, str]]:
    required, _ = reduced_build_config_parser.parse_config(str(path), type_reduction)
    return {(domain, op) for domain, opsets in required.items() for ops in opsets.values() for op in ops}


RUNTIME_REDUCED = """
format: ort
optimization_level: all
optimization_style: runtime
arch: arm64
execution_providers: [NnapiExecutionProvider, CPUExecutionProvider]
reduced_build: true
"""


def test_runtime_style_saves_optimizations_and_the_loader_replays_them(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    settings = settings_for(tmp_path, RUNTIME_REDUCED)
    entry = cook(job_for(assets, "net", settings, tmp_path / "build"))
    header, model = decode_blob(blob_path(tmp_path / "build" / "target", "net", "ort").read_bytes())
    # Saved, not applied: the shipped model keeps standard ops for NNAPI to take...
    assert header.saved_runtime_optimizations and entry["saved_runtime_optimizations"]
    assert ort_operators(model) == {("ai.onnx", "Conv"), ("ai.onnx", "Relu")}
    # ...and the loader turns on replay only for such blobs.
    options = session_options_for(header, ["CPUExecutionProvider"])
    assert options.get_session_config_entry("session.enable_saved_runtime_optimizations") == "1"
    assert entry["verification"]["outputs"][0]["ok"]


def test_qdq_int8_is_allowed_on_arm_only(tmp_path: Path) -> None:
    arm = settings_for(tmp_path, "arch: arm64\n", "arm")
    x86 = settings_for(tmp_path, "arch: x86_64\n", "x86")
    key = "session.qdqisint8allowed"
    assert session_options(arm, tmp_path / "o.ort").get_session_config_entry(key) == "1"
    assert session_options(x86, tmp_path / "o.ort").get_session_config_entry(key) == "0"


def test_operator_config_lists_exactly_the_cooked_operators_and_parses_back(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    save(mlp_model(), assets, "extra/mlp")
    settings = settings_for(tmp_path, RUNTIME_REDUCED + "type_reduction: true\n")
    platform_dir = tmp_path / "build" / "target"
    jobs = {name: job_for(assets, name, settings, tmp_path / "build") for name in ("net", "extra/mlp")}
    entries = {name: cook(job) for name, job in jobs.items()}
    # the entries' operator lists cover the applied variants: their files are not kept
    assert not any(applied_variant_path(platform_dir, name).exists() for name in entries)

    written = opconfig.write_operator_configs(platform_dir, entries)

    assert [p.name for p in written] == [layout.OPS_CONFIG, layout.OPS_AND_TYPES_CONFIG]
    cooked = set()
    for name, job in jobs.items():
        cooked |= ort_operators(decode_blob(blob_path(platform_dir, name, "ort").read_bytes())[1])
        cooked |= ort_operators(applied_variant(job))
    # After optimization: the replayed FusedConv is required, BatchNormalization (folded away) is not.
    assert ("com.microsoft", "FusedConv") in cooked and ("ai.onnx", "BatchNormalization") not in cooked
    assert config_operators(platform_dir / layout.OPS_CONFIG) == cooked
    assert config_operators(platform_dir / layout.OPS_AND_TYPES_CONFIG, type_reduction=True) == cooked
    text = (platform_dir / layout.OPS_CONFIG).read_text()
    assert "# - extra/mlp.ort" in text and str(tmp_path) not in text


def test_merged_operator_lists_equal_onnxruntimes_own_config_byte_for_byte(tmp_path: Path) -> None:
    """Each cook lists its model's operators and types; the manifest merges them. The result must be
    what onnxruntime's create_config_from_models writes from the cooked files themselves, with and
    without types, and an entry cooked before it carried the lists is read back from its blob."""
    from onnxruntime.tools.ort_format_model.utils import create_config_from_models

    from tests.models import transformer_block_model

    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    save(mlp_model(), assets, "extra/mlp")
    save(transformer_block_model(), assets, "block")
    settings = settings_for(tmp_path, RUNTIME_REDUCED + "type_reduction: true\n")
    platform_dir = tmp_path / "build" / "target"
    names = ("net", "extra/mlp", "block")
    jobs = {name: job_for(assets, name, settings, tmp_path / "build") for name in names}
    entries = {name: cook(job) for name, job in jobs.items()}
    assert all(set(entries[n]["operators"]) == {"ops", "types"} for n in names)
    assert any(entries[n]["operators"]["types"] for n in names)

    files = tmp_path / "files"
    models = []
    for name in names:
        models.append(files / f"{name}.ort")
        models[-1].parent.mkdir(parents=True, exist_ok=True)
        models[-1].write_bytes(decode_blob(blob_path(platform_dir, name, "ort").read_bytes())[1])
        models.append(files / f"{name}.applied.ort")
        models[-1].write_bytes(applied_variant(jobs[name]))
    for config, types in ((layout.OPS_CONFIG, False), (layout.OPS_AND_TYPES_CONFIG, True)):
        create_config_from_models(models, tmp_path / config, enable_type_reduction=types)
    expected = {
        config: (tmp_path / config).read_text().replace(f"{files}/", "")
        for config in (layout.OPS_CONFIG, layout.OPS_AND_TYPES_CONFIG)
    }

    opconfig.write_operator_configs(platform_dir, entries)
    merged = {config: (platform_dir / config).read_text() for config in expected}
    assert merged == expected

    without = {name: {k: v for k, v in e.items() if k != "operators"} for name, e in entries.items()}
    for name in names:  # entries from before the lists existed, with the applied files kept then
        applied_variant_path(platform_dir, name).write_bytes(applied_variant(jobs[name]))
    opconfig.write_operator_configs(platform_dir, without)
    assert {config: (platform_dir / config).read_text() for config in expected} == expected


def slice_model(opset: int) -> onnx.ModelProto:
    """x [4, 8] -> its first two rows, by a Slice of ``opset``: before opset 10 the bounds are
    attributes (onnxruntime records the types of input 0 only), from 10 on they are inputs (input 1's
    type too)."""
    from onnx import TensorProto, helper, numpy_helper

    from tests.models import model_of

    if opset < 10:
        nodes, inits = [helper.make_node("Slice", ["x"], ["y"], starts=[0], ends=[2], axes=[0])], []
    else:
        nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])]
        inits = [
            numpy_helper.from_array(np.array([v], np.int64), n)
            for n, v in (("starts", 0), ("ends", 2), ("axes", 0))
        ]
    graph = helper.make_graph(
        nodes,
        "slice",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        inits,
    )
    return model_of(graph, opset=opset, ir_version=7)


def test_type_records_of_an_operator_at_two_opsets_merge_as_onnxruntimes_own_config(tmp_path: Path) -> None:
    """A Slice of opset 9 (one typed input) beside a Slice of opset 13 (two): the merge of their type
    records stopped the manifest with a TypeError traceback (a key only one record has); it must
    write what onnxruntime's create_config_from_models writes from the cooked files."""
    from onnxruntime.tools.ort_format_model.utils import create_config_from_models

    assets = tmp_path / "assets"
    save(slice_model(9), assets, "old")
    save(slice_model(13), assets, "new")
    settings = settings_for(tmp_path, RUNTIME_REDUCED + "type_reduction: true\n")
    platform_dir = tmp_path / "build" / "target"
    jobs = {name: job_for(assets, name, settings, tmp_path / "build") for name in ("new", "old")}
    entries = {name: cook(job) for name, job in jobs.items()}
    records = [json.loads(entries[name]["operators"]["types"]["ai.onnx;Slice"]) for name in ("new", "old")]
    assert sorted(records[0]["inputs"]) == ["0", "1"] and sorted(records[1]["inputs"]) == ["0"]

    files = tmp_path / "files"
    files.mkdir()
    for name in entries:  # the shipped models and their saved optimizations applied, as the cook lists
        (files / f"{name}.ort").write_bytes(decode_blob(blob_path(platform_dir, name, "ort").read_bytes())[1])
        (files / f"{name}.applied.ort").write_bytes(applied_variant(jobs[name]))
    create_config_from_models(sorted(files.iterdir()), tmp_path / "expected", enable_type_reduction=True)

    opconfig.write_operator_configs(platform_dir, entries)
    expected = (tmp_path / "expected").read_text().replace(f"{files}/", "")
    assert (platform_dir / layout.OPS_AND_TYPES_CONFIG).read_text() == expected


def test_no_config_without_reduced_build(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    settings = settings_for(tmp_path, "format: ort\n")
    entries = {"net": cook(job_for(assets, "net", settings, tmp_path / "build"))}
    assert opconfig.write_operator_configs(tmp_path / "build" / "target", entries) == []


def dynamic_batch_model() -> onnx.ModelProto:
    """A conv net with a symbolic batch: NNAPI cannot take nodes whose input shapes are dynamic."""
    return with_symbolic_batch(conv_bn_relu_model())


def test_fixing_the_batch_dim_changes_the_nnapi_verdict(tmp_path: Path) -> None:
    dynamic = settings_for(tmp_path, RUNTIME_REDUCED + "verify_dims: {batch: 2}\n", "dynamic")
    fixed = settings_for(tmp_path, RUNTIME_REDUCED + "fixed_dims: {batch: 1}\n", "fixed")

    before = usability(dynamic_batch_model(), dynamic)["NnapiExecutionProvider"]
    assert before["dynamic_inputs"] == ["x"] and before["supported_nodes"] == 0
    assert before["verdict"] == "no" and before["verdict_if_shapes_fixed"] == "yes"

    assets = tmp_path / "assets"
    save(dynamic_batch_model(), assets, "net")
    entry = cook(job_for(assets, "net", fixed, tmp_path / "build"))
    after = entry["usability"]["NnapiExecutionProvider"]
    assert after["verdict"] == "yes" and after["supported_nodes"] == after["nodes"] > 0
    assert entry["inputs"][0]["shape"] == [1, 8, 16, 16] and entry["outputs"][0]["shape"] == [1, 16, 16, 16]


def test_fixed_shapes_for_a_whole_input_and_a_wrong_input_name(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(dynamic_batch_model(), assets, "net")
    good = shipped_settings("ios", fixed_shapes={"x": [3, 8, 16, 16]})
    assert cook(job_for(assets, "net", good, tmp_path / "build"))["inputs"][0]["shape"] == [3, 8, 16, 16]
    bad = shipped_settings("ios", fixed_shapes={"image": [1, 8, 16, 16]})
    with pytest.raises(ModelError, match=r"net\.onnx.*fixed_shapes\.image.*not found.*x"):
        cook(job_for(assets, "net", bad, tmp_path / "build"))


def test_desktop_and_console_platforms_have_no_mobile_usability_report(tmp_path: Path) -> None:
    assert usability(conv_bn_relu_model(), shipped_settings("console")) == {}
    assert usability(conv_bn_relu_model(), shipped_settings("windows-dml")) == {}


def test_console_passes_its_custom_ep_through_to_blob_and_manifest(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    settings = shipped_settings("console")
    entry = cook(job_for(assets, "net", settings, tmp_path / "build"))
    header, _ = decode_blob(blob_path(tmp_path / "build" / "console", "net", "ort").read_bytes())
    assert (
        entry["execution_providers"] == list(header.execution_providers) == list(settings.execution_providers)
    )
    assert settings.execution_providers[0] not in {"CPUExecutionProvider", "DmlExecutionProvider"}
    assert settings.reduced_build and settings.type_reduction


def test_a_platform_that_stops_asking_loses_its_stale_configs(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    platform_dir = tmp_path / "build" / "target"
    typed = settings_for(tmp_path, RUNTIME_REDUCED + "type_reduction: true\n")
    opconfig.write_operator_configs(
        platform_dir, {"net": cook(job_for(assets, "net", typed, tmp_path / "build"))}
    )
    assert (platform_dir / layout.OPS_AND_TYPES_CONFIG).is_file()
    plain = settings_for(tmp_path, "format: ort\n")
    assert (
        opconfig.write_operator_configs(
            platform_dir, {"net": cook(job_for(assets, "net", plain, tmp_path / "build"))}
        )
        == []
    )
    assert (
        not (platform_dir / layout.OPS_CONFIG).exists()
        and not (platform_dir / layout.OPS_AND_TYPES_CONFIG).exists()
    )


def test_applied_variants_are_not_kept_and_untyped_models_refuse_a_typed_config(tmp_path: Path) -> None:
    """The entries' operator lists cover the applied variants, so their files (as big as the model) are
    neither kept nor cached. A model whose types onnxruntime's processor cannot name (int4) gets a
    config without types; with type reduction, a clear error naming it, as onnxruntime's tool gives."""
    from onnx_cooker.errors import CookError
    from onnx_cooker.farm.cache import CookCache
    from onnx_cooker.farm.store import CacheConfig

    assets = tmp_path / "assets"
    save(int4_model(), assets, "quant")
    save(mlp_model(), assets, "mlp")
    settings = settings_for(tmp_path, RUNTIME_REDUCED + "type_reduction: true\n")
    cache = tmp_path / "cache"
    for build in ("first", "second"):
        hits = CookCache(CacheConfig(url=str(cache)))
        entries = {
            name: cook(job_for(assets, name, settings, tmp_path / build), hits) for name in ("quant", "mlp")
        }
        platform_dir = tmp_path / build / settings.platform
        assert hits.hit is (build == "second")
        assert entries["quant"]["operators"]["types"] is None and entries["mlp"]["operators"]["types"]
        assert not any(applied_variant_path(platform_dir, name).exists() for name in entries)
    # by role (objects are named <role>.<sha256>): no applied variant among them
    stored = sorted(path.name.split(".", 1)[0] for path in (cache / "objects").rglob("*") if path.is_file())
    assert stored == sorted(["blob", "entry", "verify"] * 2)

    with pytest.raises(CookError, match=r"tool failed on model 'quant'.*`type_reduction: false`"):
        opconfig.write_operator_configs(platform_dir, entries)
    untyped = {
        name: {**e, "settings": {**e["settings"], "type_reduction": False}} for name, e in entries.items()
    }
    (written,) = opconfig.write_operator_configs(platform_dir, untyped)
    assert {op for _, op in config_operators(written)} == {"Cast", "Gemm", "Sigmoid"}  # MatMul+Add fused


def test_a_usability_check_that_failed_says_why_in_the_summary() -> None:
    """onnxruntime's checker fails on some valid models (every node output a graph output): the end of
    the cook says so and why, not "takes 0/0 nodes in 0 partition(s): unknown"."""
    from onnx_cooker.build.usability_lines import usability_lines
    from onnx_cooker.cook.usability import _unknown

    failed = _unknown("ValueError: Run onnx.shape_inference first\nand more lines")
    lines = usability_lines("android", {"m": {"usability": {"NnapiExecutionProvider": failed}}})
    assert lines == [
        "  android:m: NnapiExecutionProvider: not measured (onnxruntime's usability checker failed: "
        "ValueError: Run onnx.shape_inference first)"
    ]


def test_the_manifest_prints_usability_for_what_changed_and_counts_the_rest(tmp_path: Path) -> None:
    """A one-model change in a large library printed the NNAPI usability of every model at every
    cook (298 lines of 1,083 for 150 models): the models new or re-cooked get their lines, the
    unchanged ones one line per EP counting their verdicts."""
    from tests.models import dense_model
    from tests.test_dodo import cook as doit_cook
    from tests.test_reliability import small_project

    project = small_project(tmp_path / "p")
    first = doit_cook(project)
    assert "android:net: NnapiExecutionProvider takes" in first.stdout, first.stdout
    assert "android:mlp: NnapiExecutionProvider takes" in first.stdout
    onnx.save(
        dense_model(8, 4, batch=1, seed=99, activation="Sigmoid", name="mlp"), project / "assets" / "mlp.onnx"
    )
    second = doit_cook(project)
    assert "android:mlp: NnapiExecutionProvider takes" in second.stdout, second.stdout
    assert "android:net: NnapiExecutionProvider" not in second.stdout
    (summary,) = [line for line in second.stdout.splitlines() if "unchanged model(s)" in line]
    assert summary.startswith("  android: NnapiExecutionProvider, the 1 unchanged model(s): ")
    assert summary.endswith("1 (each in build/report.html)"), summary
