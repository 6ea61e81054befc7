"""Precision variants (fp16, int8) gated by accuracy against the fp32 source, and size budgets."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.manifest import write_manifest
from onnx_cooker.build.run_job import cook
from onnx_cooker.build.summary import cook_line
from onnx_cooker.errors import CookError, GuardError, ModelError, VerifyError
from onnx_cooker.layout import blob_path
from onnx_cooker.runtime import session_from_blob
from tests.models import conv_bn_relu_model, transformer_block_model
from tests.test_cook import SHIPPED_PLATFORMS, job_for, save, shipped_settings

CPU = ["CPUExecutionProvider"]
SEED = 5


def classifier_model() -> onnx.ModelProto:
    """A small MLP classifier with weights big enough for size ratios to mean something: x [N, 64]
    -> 256 hidden -> 256 hidden -> 10 class scores (rank 2: the gate checks top-1 agreement)."""
    rng = np.random.default_rng(SEED)
    sizes = [(64, 256), (256, 256), (256, 10)]
    nodes, inits, x = [], [], "x"
    for i, (fan_in, fan_out) in enumerate(sizes):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        b = (rng.standard_normal(fan_out) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        out = "y" if i == len(sizes) - 1 else f"h{i}"
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [out if i == len(sizes) - 1 else f"a{i}"]),
        ]
        if i < len(sizes) - 1:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [out]))
        x = out
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def cook_at(tmp_path: Path, model: onnx.ModelProto, platform: str, **settings: object) -> dict:
    save(model, tmp_path / "assets", "m")
    return cook(job_for(tmp_path / "assets", "m", shipped_settings(platform, **settings), tmp_path / "build"))


# weight bytes of the cooked variant / of the fp32 cook: about 2x smaller for fp16, about 4x for int8
# (scales, zero points and the fp32 biases keep it a little above a quarter)
SHRINK = {"fp16": (0.45, 0.55), "int8-dynamic": (0.2, 0.35), "int8-static": (0.2, 0.4)}


@pytest.mark.parametrize("platform", SHIPPED_PLATFORMS)
@pytest.mark.parametrize("precision", sorted(SHRINK))
def test_each_precision_cooks_shrinks_and_passes_the_gate(
    tmp_path: Path, precision: str, platform: str
) -> None:
    if precision == "int8-dynamic" and platform in ("android", "ios"):  # NNAPI and CoreML take QDQ only
        with pytest.raises(
            GuardError, match=r"int8-dynamic makes .* cannot run .* use `precision: int8-static`"
        ):
            cook_at(tmp_path, classifier_model(), platform, precision=precision)
        return
    fp32 = cook_at(tmp_path / "fp32", classifier_model(), platform)
    variant = cook_at(tmp_path / precision, classifier_model(), platform, precision=precision)

    low, high = SHRINK[precision]
    assert low <= variant["weight_bytes"] / fp32["weight_bytes"] <= high, (
        variant["weight_bytes"],
        fp32["weight_bytes"],
    )
    assert variant["blob_size"] < fp32["blob_size"]
    record = variant["precision"]
    assert record["precision"] == precision and record["converter"].startswith("onnxruntime.")
    (row,) = record["accuracy"]["outputs"]
    assert row["name"] == "y" and row["cosine"] >= record["accuracy"]["limits"]["min_cosine"]
    assert row["top1"] is not None and row["top1"] >= record["accuracy"]["limits"]["min_top1"]
    if precision == "int8-static":
        assert record["options"]["calibration"].startswith("the verification inputs")
    assert fp32["precision"] == {"precision": "fp32"}
    # the cook's line says what ships and how far it is from the source, beside its own verification
    line = cook_line(variant)
    assert f", {precision} against the fp32 source: cosine {row['cosine']:.7g}, max abs " in line, line
    assert "against that variant" in line and "fp32 source" not in cook_line(fp32)
    # What ships runs through the loader, and its inputs and outputs keep the source's types.
    blob = blob_path(tmp_path / precision / "build" / platform, "m", variant["format"]).read_bytes()
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    assert session_from_blob(blob, providers=CPU).run(None, {"x": x})[0].dtype == np.float32


def test_calibration_file_is_used_and_recorded(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    buffer = io.BytesIO()
    np.savez(buffer, **{f"x/{k}": rng.standard_normal((8, 64)).astype(np.float32) for k in range(4)})
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "m.calib.npz").write_bytes(buffer.getvalue())
    entry = cook_at(tmp_path, classifier_model(), "android", precision="int8-static")
    assert entry["precision"]["options"]["calibration"] == "m.calib.npz"
    assert entry["precision"]["options"]["calibration_batches"] == 4
    assert "m.calib.npz" in entry["sources"]  # a new calibration set re-cooks the model


def test_a_bad_calibration_set_fails_the_gate_with_the_numbers_and_the_fix(tmp_path: Path) -> None:
    # Calibrated on inputs a thousand times smaller than real ones: every activation saturates.
    buffer = io.BytesIO()
    np.savez(buffer, x=np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32) * 1e-3)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "m.calib.npz").write_bytes(buffer.getvalue())
    with pytest.raises(VerifyError) as failure:
        cook_at(tmp_path, classifier_model(), "console", precision="int8-static")
    message = str(failure.value)
    assert "the int8-static variant fails the accuracy gate against the fp32 source: y: cosine" in message
    assert "calibrate on real inputs (`<model>.calib.npz`, calibrated now on m.calib.npz)" in message
    assert message.startswith(str(tmp_path / "assets" / "m.onnx"))
    assert not (tmp_path / "build" / "console" / ".entries" / "m.json").exists()


def test_the_gate_can_be_tightened_per_model(tmp_path: Path) -> None:
    with pytest.raises(
        VerifyError, match=r"fp16 variant fails the accuracy gate.*y: cosine 0\.9\d{8} < 1\.0"
    ):
        cook_at(tmp_path, conv_bn_relu_model(), "windows-dml", precision="fp16", precision_min_cosine=1.0)


def test_a_blob_over_its_budget_fails_naming_sizes_and_what_would_fit(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as failure:
        cook_at(tmp_path, classifier_model(), "windows-dml", max_blob_bytes=50_000)
    message = str(failure.value)
    assert "over its max_blob_bytes of 50,000" in message and "as fp16" in message and "as int8" in message
    assert cook_at(tmp_path / "ok", classifier_model(), "windows-dml", max_blob_bytes=10_000_000)["blob_size"]


def test_a_bundle_over_its_budget_writes_no_manifest_and_names_the_biggest_models(tmp_path: Path) -> None:
    entry = cook_at(tmp_path, classifier_model(), "windows-dml")
    platform_dir = tmp_path / "build" / "windows-dml"
    with pytest.raises(CookError) as failure:
        write_manifest(platform_dir, "windows-dml", ["m"], max_bundle_bytes=entry["blob_size"] - 1)
    message = str(failure.value)
    assert f"the bundle is {entry['blob_size']:,} bytes, over its max_bundle_bytes" in message
    assert "biggest: m " in message and "(no manifest written)" in message
    assert not (platform_dir / "manifest.json").exists()
    assert write_manifest(platform_dir, "windows-dml", ["m"], max_bundle_bytes=entry["blob_size"]).is_file()
    shown = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.runtime", "inspect", str(platform_dir)],
        capture_output=True,
        text=True,
    )
    assert " m: onnx, " in shown.stdout


def test_inspect_shows_the_precision_and_its_accuracy(tmp_path: Path) -> None:
    cook_at(tmp_path, classifier_model(), "windows-dml", precision="fp16")
    platform_dir = tmp_path / "build" / "windows-dml"
    write_manifest(platform_dir, "windows-dml", ["m"])
    shown = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.runtime", "inspect", str(platform_dir)],
        capture_output=True,
        text=True,
    )
    (shown_line,) = [line for line in shown.stdout.splitlines() if line.startswith("  m: ")]
    assert "fp16 by onnxruntime.transformers.float16.convert_float_to_float16, worst cosine " in shown_line
    assert float(shown_line.split("worst cosine ")[1].split()[0]) >= 0.999
    manifest = json.loads((platform_dir / "manifest.json").read_text())
    assert manifest["models"]["m"]["precision"]["options"]["keep_io_types"] is True


@pytest.mark.parametrize("platform", SHIPPED_PLATFORMS)
@pytest.mark.parametrize("precision", ["fp16", "int8-static"])
@pytest.mark.parametrize(
    "make", [conv_bn_relu_model, transformer_block_model], ids=["convnet", "transformer"]
)
def test_a_conv_net_and_a_transformer_block_pass_the_gate_at_each_precision(
    tmp_path: Path, make: object, precision: str, platform: str
) -> None:
    fp32 = cook_at(tmp_path / "fp32", make(), platform)
    variant = cook_at(tmp_path / precision, make(), platform, precision=precision)
    assert variant["weight_bytes"] < fp32["weight_bytes"]
    rows = variant["precision"]["accuracy"]["outputs"]
    assert all(row["cosine"] >= variant["precision"]["accuracy"]["limits"]["min_cosine"] for row in rows)


def test_an_old_opset_model_is_raised_to_opset_13_before_int8_qdq(tmp_path: Path) -> None:
    """The quantizers raise old models to opset 11 only, where per-channel DequantizeLinear has no
    axis: the shipped IR-3, opset-7 example cooks at int8-static once raised to 13 first."""
    legacy = onnx.load(Path(__file__).resolve().parents[1] / "assets" / "legacy_ir3.onnx")
    assert legacy.opset_import[0].version < 13
    entry = cook_at(tmp_path, legacy, "windows-dml", precision="int8-static")
    assert entry["precision"]["options"]["opset_raised_to"] == 13
    assert entry["verification"]["outputs"][0]["ok"] is True


@pytest.mark.slow
def test_a_variant_passes_the_runtime_check_in_the_targets_exact_onnxruntime(tmp_path: Path) -> None:
    """The runtime check compares at the tolerances the cook verified with (raised for fp16/int8),
    not at the fp32 settings: a whole `doit cook` of windows-dml (onnxruntime 1.24.4) at fp16."""
    import shutil

    from tests.test_reliability import REPO, doit, small_project

    project = small_project(tmp_path / "p")
    shutil.copy2(REPO / "platforms" / "windows-dml.yaml", project / "platforms" / "windows-dml.yaml")
    (project / "assets" / "net.cook.yaml").write_text("precision: fp16\n")
    run = doit(project, "cook:windows-dml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "load and match in onnxruntime 1.24.4" in run.stdout
    manifest = json.loads((project / "build" / "windows-dml" / "manifest.json").read_text())
    assert manifest["models"]["net"]["precision"]["precision"] == "fp16"
    assert "1.24.4" in manifest["models"]["net"]["verified_on"]


def test_the_gate_refuses_a_variant_that_overflows_to_inf_or_nan() -> None:
    from onnx_cooker.cook.precision import accuracy, gate

    source = {"y": np.array([[1.0, 70000.0], [2.0, 3.0]], np.float32)}
    overflowed = {"y": np.array([[1.0, np.inf], [2.0, np.nan]], np.float32)}  # fp16 tops out at 65504
    rows = accuracy(source, overflowed)
    failures = gate(rows, "fp16", {"min_cosine": 0.999, "min_top1": 0.99})
    assert failures == ["y: the variant gives inf/NaN (overflow) where the source is finite"]
    # Where the source itself is not finite, only its finite values are compared.
    same_nan = {"y": np.array([[1.0, np.nan], [2.0, 3.0]], np.float32)}
    assert gate(accuracy(same_nan, same_nan), "fp16", {"min_cosine": 0.999, "min_top1": 0.99}) == []


def _qdq_weight_scales(blob: bytes) -> list[int]:
    """Sizes of the scales of the QDQ weights' DequantizeLinear nodes in a cooked ONNX blob
    (1 per tensor, one per output channel when per channel)."""
    from onnx_cooker.runtime import unpack_blob

    unpacked = unpack_blob(blob)
    model = onnx.load_from_string(bytes(unpacked.model))
    sizes = {t.name: int(np.prod(t.dims)) for t in model.graph.initializer}
    for ref in unpacked.header.weights.tensors if unpacked.header.weights else ():
        sizes[ref.name] = int(np.prod(ref.dims))
    weights = {t.name for t in model.graph.initializer if len(t.dims) == 2}
    weights |= {ref.name for ref in (unpacked.header.weights.tensors if unpacked.header.weights else ())}
    return sorted(
        sizes[node.input[1]]
        for node in model.graph.node
        if node.op_type == "DequantizeLinear" and node.input[0] in weights and len(node.input) > 1
    )


def test_converter_options_are_overridden_per_model_and_recorded(tmp_path: Path) -> None:
    """int8-static defaults to per-channel symmetric QDQ weights; a model turns per-channel off and
    picks entropy calibration; the manifest records the options the converter ran with."""
    default = cook_at(tmp_path / "default", classifier_model(), "windows-dml", precision="int8-static")
    chosen = cook_at(
        tmp_path / "chosen",
        classifier_model(),
        "windows-dml",
        precision="int8-static",
        precision_options={"int8-static": {"per_channel": False, "calibrate_method": "entropy"}},
    )
    assert default["precision"]["options"]["per_channel"] is True
    assert default["precision"]["options"]["calibrate_method"] == "minmax"
    assert chosen["precision"]["options"]["per_channel"] is False
    assert chosen["precision"]["options"]["calibrate_method"] == "entropy"
    assert chosen["cook_key"] != default["cook_key"]
    assert default["verification"]["atol_of_range"] == 0.05  # int8: atol scales with each output
    per_channel, per_tensor = (
        _qdq_weight_scales(blob_path(tmp_path / d / "build" / "windows-dml", "m", "onnx").read_bytes())
        for d in ("default", "chosen")
    )
    assert per_tensor and set(per_tensor) == {1}  # one scale per weight tensor
    assert per_channel and max(per_channel) > 1  # a scale per output channel


def test_fp16_can_ship_fp16_inputs_and_outputs(tmp_path: Path) -> None:
    entry = cook_at(
        tmp_path, classifier_model(), "windows-dml", precision="fp16",
        precision_options={"fp16": {"keep_io_types": False}},
    )  # fmt: skip
    assert entry["precision"]["options"]["keep_io_types"] is False
    assert (
        entry["inputs"][0]["type"] == "tensor(float16)" and entry["outputs"][0]["type"] == "tensor(float16)"
    )
    blob = blob_path(tmp_path / "build" / "windows-dml", "m", "onnx").read_bytes()
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float16)
    assert session_from_blob(blob, providers=CPU).run(None, {"x": x})[0].dtype == np.float16


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"int9": {}}, r"'precision_options' keys must be precisions .*got 'int9'"),
        ({"fp16": {"per_channel": True}}, r"'precision_options\.fp16\.per_channel' is not an option of fp16"),
        ({"int8-static": {"calibrate_method": "kl"}}, r"calibrate_method' must be one of minmax, entropy"),
        ({"int8-dynamic": {"per_channel": "yes"}}, r"per_channel' must be one of true, false; got 'yes'"),
    ],
)
def test_wrong_converter_options_are_refused_with_the_choices(
    tmp_path: Path, options: dict, message: str
) -> None:
    from onnx_cooker.settings.resolve import load_platforms

    (tmp_path / "platforms").mkdir()
    (tmp_path / "platforms" / "target.yaml").write_text(f"precision_options: {json.dumps(options)}\n")
    with pytest.raises(CookError, match=message):
        load_platforms(tmp_path / "platforms", {})


def test_a_budget_message_uses_sizes_measured_on_other_platforms(tmp_path: Path) -> None:
    """Where another platform of the build cooked the model at a lower precision, the budget
    message gives that blob's real size instead of an estimate."""
    save(classifier_model(), tmp_path / "assets", "m")
    build = tmp_path / "build"
    fp16 = cook(job_for(tmp_path / "assets", "m", shipped_settings("ios", precision="fp16"), build))
    with pytest.raises(ModelError) as failure:
        cook(job_for(tmp_path / "assets", "m", shipped_settings("console", max_blob_bytes=50_000), build))
    message = str(failure.value)
    assert f"{fp16['blob_size']:,} B as fp16 (measured: its ios blob)" in message
    assert "as int8 (estimated from its weights)" in message and "about" in message
    fp32 = cook(job_for(tmp_path / "assets", "m", shipped_settings("console"), build))
    with pytest.raises(CookError, match=r"measured: its ios blob"):
        write_manifest(build / "console", "console", ["m"], max_bundle_bytes=fp32["blob_size"] - 1)


def _pinned_matmul_model() -> onnx.ModelProto:
    """x[n, feat] @ W[20, 8]: the weight pins feat at 20 (no other size runs)."""
    weight = np.random.default_rng(3).standard_normal((20, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "pinned",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "feat"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        [numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("precision", ["fp16", "int8-static"])
def test_a_variant_is_verified_at_the_sizes_its_source_is(
    tmp_path: Path, precision: str, caplog: pytest.LogCaptureFixture
) -> None:
    """onnxruntime's fp16 converter writes its input Casts after the nodes that read them: the cook
    reads the variant's dimensions in node order again, so a weight still pins its input's size and
    a convolution's free height and width are still tried wide, as for the fp32 cook (they read as
    unconstrained before: feat at 16, which MatMul refused, and a conv at 16x16)."""
    for name, model in (("pinned", _pinned_matmul_model()), ("conv", conv_bn_relu_model())):
        if name == "conv":  # free height and width
            model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
            model.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "w"
        fp32 = cook_at(tmp_path / name / "fp32", model, "android")
        variant = cook_at(tmp_path / name / precision, model, "android", precision=precision)
        assert variant["verification"]["default_dims"] == fp32["verification"]["default_dims"], name
    assert fp32["verification"]["default_dims"] == {"h": 64, "w": 64}
    # the quantizer's advice to pre-process (the cook optimizes itself) is not in the cook's output
    assert "Please consider" not in caplog.text


def _linear_regressor() -> onnx.ModelProto:
    """scikit-learn's LinearRegression as skl2onnx writes it (ai.onnx.ml)."""
    node = helper.make_node(
        "LinearRegressor", ["x"], ["y"], domain="ai.onnx.ml", coefficients=[0.5, -1.0, 2.0], intercepts=[0.1]
    )
    graph = helper.make_graph(
        [node],
        "lr",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    model.ir_version = 8
    return model


def _quantized(tmp_path: Path) -> onnx.ModelProto:
    from onnxruntime.quantization import quantize_dynamic

    onnx.save(classifier_model(), tmp_path / "fp32.onnx")
    quantize_dynamic(str(tmp_path / "fp32.onnx"), str(tmp_path / "q.onnx"))
    return onnx.load(tmp_path / "q.onnx")


def _half() -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(classifier_model(), keep_io_types=False)


@pytest.mark.parametrize("precision", ["fp16", "int8-static"])
@pytest.mark.parametrize("kind", ["quantized", "half", "ml"])
def test_a_source_a_precision_cannot_convert_is_refused_with_the_per_model_fix(
    tmp_path: Path, kind: str, precision: str
) -> None:
    """One platform-wide precision over a project holding a model quantized already, one in fp16
    already, or a scikit-learn model: each failed in the converter, the gate or the verification,
    told to ship sample inputs. Refused, naming what the source is and the line that fixes it."""
    model = {"quantized": lambda: _quantized(tmp_path), "half": _half, "ml": _linear_regressor}[kind]()
    said = {
        "quantized": r"the source is quantized already \(.*DynamicQuantizeLinear.*\): converting it again",
        "half": r"the source is in 16-bit floats already",
        "ml": r"the source is a classic machine-learning model \(LinearRegressor\), which the converters",
    }[kind]
    with pytest.raises(ModelError, match=rf"precision {precision} cannot be applied: {said}") as raised:
        cook_at(tmp_path / "cook", model, "android", precision=precision)
    assert f"Add `precision: fp32` to {tmp_path / 'cook' / 'assets' / 'm.cook.yaml'}" in str(raised.value)
    assert cook_at(tmp_path / "fp32", model, "android")["precision"] == {"precision": "fp32"}  # as it is


def test_the_gate_reads_tied_scores_and_zipmap_outputs_as_numbers() -> None:
    """All-equal scores (argmax breaks the tie by rounding) read as 0% top-1 agreement, and a
    classifier's ZipMap output (a list of maps) differed whenever a score was rounded."""
    from onnx_cooker.cook.precision import accuracy

    tied = np.ones((1, 5), np.float32)
    flipped = tied.copy()
    flipped[0, 3] += 1e-4
    assert accuracy({"y": tied}, {"y": flipped})[0]["top1"] == 1.0
    real = np.array([[0.1, 0.9, 0.0], [0.6, 0.4, 0.0]])  # one row truly flipped: still counted
    assert accuracy({"y": real}, {"y": np.array([[0.9, 0.1, 0.0], [0.6, 0.4, 0.0]])})[0]["top1"] == 0.5
    (row,) = accuracy({"p": [{"a": 0.25, "b": 0.75}]}, {"p": [{"a": 0.2501, "b": 0.7499}]})
    assert row["cosine"] > 0.9999 and row["top1"] == 1.0 and 0 < row["max_abs"] < 2e-4, row


def tiny_vit() -> onnx.ModelProto:
    """A two-layer ViT (transformers, seeded weights, 32x32 images in 8x8 patches), exported as a
    studio exports one: its int8-static variant's QDQ pairs compute 0.2 apart at the output between
    float maths (optimizations off) and the int8 kernels onnxruntime's default level runs."""
    import torch
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
    )
    vit = ViTModel(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.vit = vit

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.vit(x).last_hidden_state

    buffer = io.BytesIO()
    torch.onnx.export(
        Hidden().eval(),
        (torch.randn(2, 3, 32, 32),),
        buffer,
        input_names=["pixel_values"],
        output_names=["hidden"],
        dynamic_axes={"pixel_values": {0: "batch"}, "hidden": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    return onnx.load_from_string(buffer.getvalue())


def test_an_int8_variant_verifies_against_the_int8_kernels_a_game_runs(tmp_path: Path) -> None:
    """On an ONNX platform the blob loads at onnxruntime's default level, which runs the variant's
    QDQ pairs as int8 kernels: it failed its own verification against the variant's unoptimized
    (float) run, with advice to loosen verify_scale. It verifies against the default level now, and
    the runtime check accepts either computation (OpenVINO's EP computes the float one)."""
    from onnx_cooker.build.target_check_worker import check_model
    from onnx_cooker.layout import verify_data_path

    entry = cook_at(tmp_path, tiny_vit(), "windows-dml", precision="int8-static")
    (output,) = entry["verification"]["outputs"]
    # it missed the unoptimized run by more than the int8 bounds: the default level passed it
    assert output["ok"] and output["passed_by"] == "default-level", output
    assert output["noise_rel_l2"] > 1e-3, output  # past what noise may raise the bound to (NOISE_CAP)
    assert "(its QDQ pairs run as int8 kernels) against that variant" in cook_line(entry)
    platform_dir = tmp_path / "build" / "windows-dml"
    stored = verify_data_path(platform_dir, "m")
    with np.load(stored) as data:
        arrays = {key: data[key] for key in data.files}
    assert np.abs(arrays["output/hidden"] - arrays["also/hidden"]).max() > 0.1  # the two computations
    assert check_model(platform_dir, "m")["ok"]
    # an EP that computes the float maths (the unoptimized run) matches the second output
    np.savez(
        stored, **{**arrays, "output/hidden": arrays["also/hidden"], "also/hidden": arrays["output/hidden"]}
    )
    assert check_model(platform_dir, "m")["ok"]
    np.savez(
        stored,
        **{k: v for k, v in arrays.items() if k != "also/hidden"} | {"output/hidden": arrays["also/hidden"]},
    )
    assert not check_model(platform_dir, "m")["ok"]  # without it, the CPU EP's int8 kernels differ


def test_the_accuracy_gate_of_an_int8_variant_holds_the_computation_further_from_the_source(
    tmp_path: Path,
) -> None:
    """An int8 variant computes two ways (its QDQ pairs as float maths with optimizations off, as int8
    kernels at onnxruntime's default level, what a game's CPU session runs); the gate measured only
    the first. On these images the kernels are further from the fp32 source: a gate between the two
    passed the variant before."""
    from onnx_cooker.layout import verify_data_path

    save(tiny_vit(), tmp_path / "assets", "m")
    images = (3 * np.random.default_rng(3).standard_normal((2, 3, 32, 32))).astype(np.float32)
    np.savez(tmp_path / "assets" / "m.inputs.npz", pixel_values=images)
    settings = shipped_settings("windows-dml", precision="int8-static")
    entry = cook(job_for(tmp_path / "assets", "m", settings, tmp_path / "build"))
    with np.load(verify_data_path(tmp_path / "build" / "windows-dml", "m")) as data:
        kernels, floats = data["output/hidden"], data["also/hidden"]
    source = onnxruntime.InferenceSession(
        str(tmp_path / "assets" / "m.onnx"), providers=["CPUExecutionProvider"]
    )
    (want,) = source.run(["hidden"], {"pixel_values": images})
    cosines = {"int8 kernels": _cosine(want, kernels), "float maths": _cosine(want, floats)}
    assert cosines["int8 kernels"] < cosines["float maths"] - 1e-4, cosines
    (row,) = entry["precision"]["accuracy"]["outputs"]
    assert row["computed_as"] == "int8 kernels", row
    assert row["cosine"] == pytest.approx(cosines["int8 kernels"], abs=1e-6), (row, cosines)
    # a gate the float maths pass and the kernels miss fails the cook, naming the measured cosine
    between = (cosines["int8 kernels"] + cosines["float maths"]) / 2
    strict = shipped_settings("windows-dml", precision="int8-static", precision_min_cosine=between)
    with pytest.raises(VerifyError, match=r"fails the accuracy gate"):
        cook(job_for(tmp_path / "assets", "m", strict, tmp_path / "strict"))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
