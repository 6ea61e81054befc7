"""Node placement in the runtime check: measured on the target's own EP, in its own onnxruntime build.

OpenVINO's EP runs here for real (``onnxruntime-openvino``, on the CPU device), in its own environment
as every target runtime is; DirectML does not run off Windows, which the check must say, not pass.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.placement_check import coverage_failures, placement_lines
from onnx_cooker.build.run_job import cook
from onnx_cooker.build.target_check import RuntimeCheckError, run_check
from onnx_cooker.cook.job import RuntimeCheck
from onnx_cooker.layout import entry_path, runtime_check_path
from tests.models import conv_bn_relu_model, model_of
from tests.runtime_helpers import CPU, RUNTIMES_CACHE, make_blob, to_ort_format
from tests.test_cook import job_for, shipped_settings

REPO = Path(__file__).resolve().parents[1]
OPENVINO_VERSION = "1.24.1"  # platforms/linux-openvino.yaml
OV = "OpenVINOExecutionProvider"
OV_EPS = [OV, "CPUExecutionProvider"]
OV_OPTIONS = {OV: {"device_type": "CPU"}}


def scaler_model() -> onnx.ModelProto:
    """Scaler (ai.onnx.ml), which OpenVINO leaves to the CPU, between two nodes it takes."""
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Scaler", ["m"], ["s"], domain="ai.onnx.ml", offset=[0.5], scale=[2.0]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "scaler",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w],
        value_info=[
            helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 4]),
        ],
    )
    model = model_of(graph)
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    return model


def nchwc_model(tmp_path: Path) -> bytes:
    """Two convolutions, an Add and a GlobalAveragePool, optimized by onnxruntime at level `all` on
    this x86_64 CPU: NCHWc ops, which OpenVINO claims and then cannot compile."""
    rng = np.random.default_rng(5)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "nchwc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])],
        weights,
    )
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "nchwc.onnx")
    onnxruntime.InferenceSession(model_of(graph).SerializeToString(), options, providers=CPU)
    optimized = (tmp_path / "nchwc.onnx").read_bytes()
    assert "com.microsoft.nchwc" in {n.domain for n in onnx.load_from_string(optimized).graph.node}
    return optimized


def platform_of(tmp_path: Path, blobs: dict[str, bytes]) -> Path:
    """A platform folder as the cook leaves it for the check: each blob and its entry (no verification
    data: the check loads each blob and runs it on zeros)."""
    platform_dir = tmp_path / "build" / "target"
    for name, blob in blobs.items():
        (platform_dir / f"{name}.ocb").parent.mkdir(parents=True, exist_ok=True)
        (platform_dir / f"{name}.ocb").write_bytes(blob)
        entry = entry_path(platform_dir, name)
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(json.dumps({"file": f"{name}.ocb"}), encoding="utf-8")
    return platform_dir


def check_of(
    platform_dir: Path, names: list[str], package: str, version: str, **fields: object
) -> RuntimeCheck:
    return RuntimeCheck(
        platform="target",
        runtime_version=version,
        platform_dir=platform_dir,
        names=tuple(names),
        runtimes_dir=RUNTIMES_CACHE,
        result_path=runtime_check_path(platform_dir, version),
        profile=REPO / "platforms" / "linux-openvino.yaml",
        runtime_package=package,
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def openvino_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[RuntimeCheck, dict]:
    """One real check in onnxruntime-openvino: a model OpenVINO takes wholly, one with a CPU fallback,
    each as ONNX and as ORT format."""
    tmp_path = tmp_path_factory.mktemp("openvino")
    conv, scaler = conv_bn_relu_model().SerializeToString(), scaler_model().SerializeToString()
    fields = {"execution_providers": OV_EPS, "provider_options": OV_OPTIONS}
    blobs = {
        "conv": make_blob(conv, "onnx", **fields),
        "conv_ort": make_blob(to_ort_format(conv, tmp_path), "ort", **fields),
        "scaler": make_blob(scaler, "onnx", **fields),
        "scaler_ort": make_blob(to_ort_format(scaler, tmp_path), "ort", **fields),
    }
    platform_dir = platform_of(tmp_path, blobs)
    check = check_of(platform_dir, list(blobs), "onnxruntime-openvino", OPENVINO_VERSION)
    return check, run_check(check)


def test_a_model_wholly_on_the_ep_is_measured_so(openvino_report: tuple[RuntimeCheck, dict]) -> None:
    check, report = openvino_report
    assert report["package"] == "onnxruntime-openvino"
    for name, method in (("conv", "assignment record"), ("conv_ort", "profiler")):
        placement = report["models"][name]["placement"]
        assert placement["measured"] and placement["method"] == method, (name, placement)
        assert placement["nodes"] == {OV: placement["nodes"][OV]} and placement["nodes"][OV] >= 2
        assert placement["coverage"] == 1.0 and placement["cpu_ops"] == []
        assert placement["time_share"] == 1.0
        assert placement["measured_with"] == f"onnxruntime-openvino {OPENVINO_VERSION}"
    assert "2 of 4 model(s) wholly" in placement_lines(check, report)[0]


def test_a_cpu_fallback_is_named_in_both_formats(openvino_report: tuple[RuntimeCheck, dict]) -> None:
    """ONNX: the assignment record. ORT format: that record is empty there, and only the profiler
    shows the Scaler running on the CPU."""
    _, report = openvino_report
    onnx_placement = report["models"]["scaler"]["placement"]
    ort_placement = report["models"]["scaler_ort"]["placement"]
    assert onnx_placement["method"] == "assignment record"
    assert ort_placement["method"] == "profiler"
    # Both methods see the same: OpenVINO (1.24.1) leaves the Scaler, and the MatMul cut off before
    # it, to the CPU, and takes the Relu after it.
    for key in ("nodes", "cpu_ops", "coverage"):
        assert onnx_placement[key] == ort_placement[key], key
    assert "Scaler" in onnx_placement["cpu_ops"]
    nodes = onnx_placement["nodes"]
    assert sum(nodes.values()) == 3 and nodes[OV] >= 1 and nodes["CPUExecutionProvider"] >= 1
    assert onnx_placement["coverage"] == pytest.approx(nodes[OV] / 3, abs=1e-3)
    assert 0 < onnx_placement["time_share"] < 1 and 0 < ort_placement["time_share"] < 1


def test_min_ep_coverage_fails_under_and_passes_over(openvino_report: tuple[RuntimeCheck, dict]) -> None:
    check, report = openvino_report
    strict = check_of(check.platform_dir, list(check.names), "onnxruntime-openvino", OPENVINO_VERSION,
                      min_coverage=(("conv", 1.0), ("scaler", 0.9), ("scaler_ort", 0.2)))  # fmt: skip
    failures, notes = coverage_failures(report, strict)
    assert len(failures) == 1 and notes == []
    placement = report["models"]["scaler"]["placement"]
    share = f"{placement['nodes'][OV]}/3 of its nodes ({placement['coverage']:.1%})"
    assert failures[0].startswith(f"scaler: {share} run on OpenVINOExecutionProvider")
    assert str(strict.profile) in failures[0] and ".cook.yaml" in failures[0]
    assert "min_ep_coverage 0.9" in failures[0] and "Scaler" in failures[0]
    assert "optimization_level" in failures[0] and "format: onnx" not in failures[0]  # ONNX already
    # the same model in ORT format is told that ONNX is a way out
    ort_check = check_of(check.platform_dir, list(check.names), "onnxruntime-openvino", OPENVINO_VERSION,
                         min_coverage=(("scaler_ort", 0.99),))  # fmt: skip
    (ort_failure,), _ = coverage_failures(report, ort_check)
    assert ort_failure.startswith("scaler_ort: ") and "`format: onnx`" in ort_failure
    # ...unless the platform's onnxruntime is a reduced build, which loads ORT format only
    entry = entry_path(check.platform_dir, "scaler_ort")
    kept = entry.read_text()
    try:
        entry.write_text(json.dumps({**json.loads(kept), "settings": {"reduced_build": True}}))
        (ort_failure,), _ = coverage_failures(report, ort_check)
    finally:
        entry.write_text(kept)  # the module's report is shared
    assert "`format: onnx`" not in ort_failure and "reduced onnxruntime build" in ort_failure


def test_an_ep_that_fails_to_create_fails_the_check(tmp_path: Path) -> None:
    """NCHWc ops (level `all` on x86_64): OpenVINO claims them, then cannot compile them. The check
    fails, naming the EP; the session is not quietly made again on the CPU."""
    fields = {"execution_providers": OV_EPS, "provider_options": OV_OPTIONS}
    platform_dir = platform_of(tmp_path, {"nchwc": make_blob(nchwc_model(tmp_path), "onnx", **fields)})
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["nchwc"], "onnxruntime-openvino", OPENVINO_VERSION))
    message = str(failure.value)
    assert (
        "nchwc: OpenVINOExecutionProvider (onnxruntime-openvino 1.24.1) could not create a session" in message
    )
    assert "Nothing was retried on the CPU" in message and "optimization_level: basic" in message
    assert "format: onnx" not in message  # it is ONNX already
    assert "older opset" not in message  # the fix for a runtime too old, not for this
    # with another model under its min_ep_coverage: both in one run (the coverage came a run later)
    scaler = make_blob(scaler_model().SerializeToString(), "onnx", **fields)
    nchwc = make_blob(nchwc_model(tmp_path), "onnx", **fields)
    platform_dir = platform_of(tmp_path / "both", {"nchwc": nchwc, "scaler": scaler})
    check = check_of(platform_dir, ["nchwc", "scaler"], "onnxruntime-openvino", OPENVINO_VERSION,
                     min_coverage=(("scaler", 0.9),))  # fmt: skip
    from onnx_cooker.build.actions import run_runtime_checks

    for name, blob in (("nchwc", nchwc), ("scaler", scaler)):  # as a cook writes them: the check's key
        entry = entry_path(platform_dir, name)
        sha256 = hashlib.sha256(blob).hexdigest()
        entry.write_text(json.dumps({**json.loads(entry.read_text()), "blob_sha256": sha256}))
    failed = run_runtime_checks([check])  # the task's action: what `doit cook` prints
    message = str(failed)
    assert "nchwc: OpenVINOExecutionProvider" in message
    assert "; and under their min_ep_coverage: scaler: " in message and "Scaler" in message, message


def test_a_graph_input_that_is_also_an_output_is_named_when_the_ep_refuses_it(tmp_path: Path) -> None:
    """OpenVINO refuses a graph whose input is also an output ("Duplicate definition"): only the
    exporter can fix that (an Identity before the output), so the check names the output and that
    fix, not optimization settings that cannot help."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "passthrough",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
        ],
    )
    fields = {"execution_providers": OV_EPS, "provider_options": OV_OPTIONS}
    blob = make_blob(model_of(graph).SerializeToString(), "onnx", **fields)
    platform_dir = platform_of(tmp_path, {"passthrough": blob})
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["passthrough"], "onnxruntime-openvino", OPENVINO_VERSION))
    message = str(failure.value)
    assert "passthrough: OpenVINOExecutionProvider (onnxruntime-openvino 1.24.1) could not create" in message
    assert "graph output(s) 'x' are also graph inputs" in message and "Identity node" in message
    assert "optimization_level" not in message and "format: onnx" not in message


def test_an_ep_that_cannot_run_here_is_not_measured(tmp_path: Path) -> None:
    """DirectML off Windows: the CPU wheel stands in for onnxruntime-directml; the placement says it
    was not measured and why, and a min_ep_coverage on it becomes a note, never a silent pass."""
    fields = {"execution_providers": ["DmlExecutionProvider", "CPUExecutionProvider"]}
    conv = conv_bn_relu_model().SerializeToString()
    platform_dir = platform_of(tmp_path, {"conv": make_blob(conv, "onnx", **fields)})
    check = check_of(platform_dir, ["conv"], "onnxruntime-directml", "1.24.4", min_coverage=(("conv", 0.9),))
    report = run_check(check)
    placement = report["models"]["conv"]["placement"]
    assert report["models"]["conv"]["ok"]
    assert placement == {
        "measured": False,
        "reason": "DirectML runs only on Windows; the onnxruntime CPU wheel stands in here",
        "preferred": "DmlExecutionProvider",
        "measured_with": "onnxruntime (for onnxruntime-directml) 1.24.4",
    }
    failures, notes = coverage_failures(report, check)
    assert failures == [] and len(notes) == 1 and "min_ep_coverage 0.9 not checked" in notes[0]
    assert placement_lines(check, report) == [
        "target: placement on DmlExecutionProvider not measured (DirectML runs only on Windows; the "
        "onnxruntime CPU wheel stands in here)"
    ]


def symbolic_conv_model() -> onnx.ModelProto:
    """A 3x3 convolution without padding over symbolic height and width: zeros of 1x1 cannot run it."""
    w = numpy_helper.from_array(
        np.random.default_rng(7).standard_normal((4, 3, 3, 3)).astype(np.float32), "w"
    )
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        "symbolic_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    return model_of(graph)


def test_a_dropped_ep_and_unrunnable_zeros_and_a_cpu_platform(tmp_path: Path) -> None:
    """onnxruntime only warns when OpenVINO cannot make its device (`device_type: GPU` on a machine
    without one) and runs everything on the CPU: the loader refuses that session and the check fails,
    naming the EP. A model without verification inputs that zeros cannot run still passes, placed by
    the assignment record alone. A platform that prefers the CPU EP records no placement."""
    conv = conv_bn_relu_model().SerializeToString()
    gpu = {"execution_providers": OV_EPS, "provider_options": {OV: {"device_type": "GPU"}}}
    platform_dir = platform_of(tmp_path / "gpu", {"conv": make_blob(conv, "onnx", **gpu)})
    with pytest.raises(
        RuntimeCheckError, match=r"conv: OpenVINOExecutionProvider .*dropped OpenVINOExecutionProvider"
    ):
        run_check(check_of(platform_dir, ["conv"], "onnxruntime-openvino", OPENVINO_VERSION))

    fields = {"execution_providers": OV_EPS, "provider_options": OV_OPTIONS}
    blobs = {
        "symbolic": make_blob(symbolic_conv_model().SerializeToString(), "onnx", **fields),
        "cpu": make_blob(conv, "onnx", execution_providers=["CPUExecutionProvider"]),
    }
    platform_dir = platform_of(tmp_path / "mixed", blobs)
    report = run_check(check_of(platform_dir, list(blobs), "onnxruntime-openvino", OPENVINO_VERSION))
    symbolic = report["models"]["symbolic"]
    assert symbolic["ok"], symbolic
    placement = symbolic["placement"]
    assert placement["method"] == "assignment record" and placement["coverage"] == 1.0
    assert "time_share" not in placement  # it never ran
    assert report["models"]["cpu"]["ok"] and "placement" not in report["models"]["cpu"]


def test_one_line_per_preferred_ep(openvino_report: tuple[RuntimeCheck, dict]) -> None:
    """Models may set their own EPs: the summary names each preferred EP with its own models."""
    check, report = openvino_report
    dml = {"measured": False, "reason": "DirectML runs only on Windows", "preferred": "DmlExecutionProvider"}
    mixed = {**report["models"], "dml": {"ok": True, "placement": dml}}
    lines = placement_lines(check, {**report, "models": mixed})
    assert len(lines) == 2
    assert lines[0].startswith("target: on OpenVINOExecutionProvider (onnxruntime-openvino 1.24.1): 2 of 4")
    assert (
        lines[1] == "target: placement on DmlExecutionProvider not measured (DirectML runs only on Windows)"
    )


@pytest.mark.slow
def test_an_ep_that_fails_at_run_time_fails_the_check_naming_the_way_out(tmp_path: Path) -> None:
    """A Swin transformer (transformers, seeded, exported by torch's TorchScript exporter) cooked for
    linux-openvino (verified on the CPU): OpenVINO compiles it, then fails to run it on the
    verification inputs ("Output names mismatch"). The check fails, naming the EP and what to change."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.SwinConfig(
        image_size=32,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[2, 2],
        window_size=4,
        num_labels=5,
    )
    swin = transformers.SwinForImageClassification(config).eval()
    source = tmp_path / "assets" / "swin.onnx"
    source.parent.mkdir()
    with torch.no_grad():
        torch.onnx.export(
            swin, (torch.randn(1, 3, 32, 32),), str(source), dynamo=False, input_names=["pixel_values"],
            dynamic_axes={"pixel_values": {0: "batch"}}, opset_version=17,
        )  # fmt: skip
    settings = shipped_settings("linux-openvino")
    cook(job_for(source.parent, "swin", settings, tmp_path / "cooked"))  # verified on the CPU
    platform_dir = tmp_path / "cooked" / "linux-openvino"  # the blob, its entry, its verification data
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["swin"], "onnxruntime-openvino", OPENVINO_VERSION))
    message = str(failure.value)
    assert "swin: fails to run on OpenVINOExecutionProvider (onnxruntime-openvino 1.24.1)" in message
    assert "the CPU EP runs this blob" in message and "`execution_providers` without it" in message
    assert "skip_platforms" in message


def test_an_ep_that_fails_only_at_synthesized_sizes_is_checked_at_the_sizes_given(tmp_path: Path) -> None:
    """A max pool in ceil mode whose kernel is larger than the synthesized input, as PaddleOCR's
    recognizers have a 2x2 one over a free height and width: the CPU EP pools a 64x64 input with a
    65x65 kernel to 1x1, and the cook verifies it there; OpenVINO refuses a kernel larger than its
    input. The failure names the synthesized sizes and `verify_dims`; given sizes the game uses,
    the check runs those and passes."""
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[65, 65], strides=[65, 65], ceil_mode=1)],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, None, None])],
    )
    assets = tmp_path / "assets"
    assets.mkdir()
    onnx.save(model_of(graph, opset=17), assets / "pool.onnx")
    settings = shipped_settings("linux-openvino")
    entry = cook(job_for(assets, "pool", settings, tmp_path / "cooked"))
    assert entry["verification"]["default_dims"] == {"height": 64, "width": 64}
    platform_dir = tmp_path / "cooked" / "linux-openvino"
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["pool"], "onnxruntime-openvino", OPENVINO_VERSION))
    message = str(failure.value)
    assert "pool: fails to run on OpenVINOExecutionProvider" in message
    assert "synthesized inputs (height=64, width=64)" in message
    assert "`verify_dims` in pool.cook.yaml" in message

    sized = shipped_settings("linux-openvino", verify_dims={"height": 96, "width": 320})
    cook(job_for(assets, "pool", sized, tmp_path / "sized"))
    sized_dir = tmp_path / "sized" / "linux-openvino"
    run_check(check_of(sized_dir, ["pool"], "onnxruntime-openvino", OPENVINO_VERSION))


def int4_source(assets: Path) -> Path:
    """assets/int4.onnx: an MLP made int4 by onnxruntime's own quantizer (MatMulNBits, block 32)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
        [numpy_helper.from_array((rng.standard_normal((128, 256)) * 0.1).astype(np.float32), "w1"),
         numpy_helper.from_array((rng.standard_normal((256, 64)) * 0.1).astype(np.float32), "w2")],
    )  # fmt: skip
    quantizer = MatMulNBitsQuantizer(model_of(graph), block_size=32, is_symmetric=True, bits=4)
    quantizer.process()
    assets.mkdir(parents=True, exist_ok=True)
    quantizer.model.save_model_to_file(str(assets / "int4.onnx"))
    return assets / "int4.onnx"


@pytest.mark.slow
def test_an_ep_computing_within_a_tolerance_gets_the_atol_that_accepts_it(tmp_path: Path) -> None:
    """An int4 model from onnxruntime's own quantizer (MatMulNBits), verified on the CPU: OpenVINO
    computes it in lower precision, a few hundredths off. The check names the per-platform `atol` that
    accepts that difference (not a fix for old runtimes), and with it the check passes."""
    import dataclasses

    source = int4_source(tmp_path / "assets")
    settings = shipped_settings("linux-openvino")
    cook(job_for(source.parent, "int4", settings, tmp_path / "cooked"))  # verified on the CPU
    platform_dir = tmp_path / "cooked" / "linux-openvino"
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["int4"], "onnxruntime-openvino", OPENVINO_VERSION))
    message = str(failure.value)
    assert "int4: on OpenVINOExecutionProvider (onnxruntime-openvino 1.24.1): outputs differ" in message
    assert "older opset" not in message and "skip_platforms" in message
    atol = float(message.split("{linux-openvino: {atol: ")[1].split("}")[0])
    assert "in int4.cook.yaml" in message and 0 < atol < 1
    cook(job_for(source.parent, "int4", dataclasses.replace(settings, atol=atol), tmp_path / "cooked"))
    assert run_check(check_of(platform_dir, ["int4"], "onnxruntime-openvino", OPENVINO_VERSION))["models"][
        "int4"
    ]["ok"]


@pytest.mark.slow
def test_an_attribute_the_cooks_onnxruntime_wrote_into_ort_names_the_onnx_way(tmp_path: Path) -> None:
    """onnxruntime 1.32 writes MatMulNBits' `weight_prepacked` attribute into every ORT-format save,
    and 1.24.4 refuses it ("Unrecognized attribute"): the check names cooking it as ONNX for that
    platform (the attribute may also be the source's own, so the usual fixes follow)."""
    import dataclasses

    source = int4_source(tmp_path / "assets")
    settings = dataclasses.replace(shipped_settings("console"), runtime_version="1.24.4", reduced_build=False)
    cook(job_for(source.parent, "int4", settings, tmp_path / "cooked"))
    platform_dir = tmp_path / "cooked" / "console"
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["int4"], "onnxruntime", "1.24.4"))
    message = str(failure.value)
    assert "does not know attribute weight_prepacked of operator MatMulNBits" in message, message
    assert "cook it as ONNX for this platform" in message, message
    assert "set `format: onnx`" in message and "raise runtime_version" in message


def test_a_difference_in_results_in_the_target_runtime_names_the_atol(tmp_path: Path) -> None:
    """Where the target's onnxruntime computes a model differently from the cook's (an fp16 model off
    by one ulp in 1.24): the check names the `atol` that accepts it, not an older opset. Here the cook's
    stored outputs are moved by 0.003 to stand for the other onnxruntime's results."""
    from onnx_cooker.layout import verify_data_path

    assets = tmp_path / "assets"
    assets.mkdir()
    onnx.save(conv_bn_relu_model(), assets / "net.onnx")
    cook(job_for(assets, "net", shipped_settings("android"), tmp_path / "cooked"))
    platform_dir = tmp_path / "cooked" / "android"
    data_path = verify_data_path(platform_dir, "net")
    with np.load(data_path) as data:
        arrays = {key: data[key] + (0.003 if key.startswith("output/") else 0) for key in data.files}
    np.savez(data_path, **arrays)
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["net"], "onnxruntime", "1.32.0"))
    message = str(failure.value)
    assert "net: outputs differ beyond" in message and "older opset" not in message
    assert "accept it: `platforms: {android: {atol: 0.007}}` in net.cook.yaml" in message
    assert "computes it differently" not in message  # the cook's onnxruntime is this one


@pytest.mark.parametrize("max_abs", [3e-7, 1e-5, 4.88e-4, 0.0231, 0.5, 7.3, 1.2e6])
def test_the_advised_atol_is_a_float_yaml_reads_and_accepts_the_difference(max_abs: float) -> None:
    """What the advice prints is pasted into a .cook.yaml: PyYAML must read a number (it reads
    `2e-05` as text), and that number must accept the difference it was made for."""
    import yaml

    from onnx_cooker.settings.advice import tolerance_for

    line = tolerance_for("ios", max_abs, "m")
    assert line is not None and line.endswith(" in m.cook.yaml")
    atol = yaml.safe_load(line.split("`")[1])["platforms"]["ios"]["atol"]
    assert isinstance(atol, (int, float)) and not isinstance(atol, bool)
    assert max_abs < atol <= max(20 * max_abs, 1e-6)
    assert tolerance_for("ios", float("inf"), "m") is None and tolerance_for("ios", float("nan"), "m") is None


def fp16_mlp() -> onnx.ModelProto:
    """Two fp16 MatMuls and a Relu, fp16 in and out: the CPU EP has no fp16 kernel for them, so its
    partitioning wraps them in Casts to float32 (``InsertedPrecisionFreeCast_*``)."""
    rng = np.random.default_rng(11)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float16), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float16), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fp16_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 8])],
        weights,
    )
    return model_of(graph)


@pytest.mark.parametrize(("platform", "level"), [("windows-dml", "basic"), ("linux-openvino", "basic"),
                                                  ("linux-openvino", "all")])  # fmt: skip
def test_an_fp16_model_ships_its_fp16_nodes_not_the_cpu_eps_float32_islands(
    tmp_path: Path, platform: str, level: str
) -> None:
    """The cook's CPU EP ran the fp16 nodes in float32 between Casts, and the blob kept them: DirectML
    ran every fp16 MatMul in float32, and OpenVINO left the model on the CPU (0 of its nodes, where
    the source ran wholly on OpenVINO). The blob holds the source's fp16 nodes and weights now."""
    from onnx_cooker.cook.precisioncasts import PREFIX
    from onnx_cooker.runtime import decode_blob

    source = fp16_mlp()
    settings = shipped_settings(platform, optimization_level=level)
    entry = cook(job_for(_saved(source, tmp_path / "assets"), "m", settings, tmp_path / "build"))
    _, model_bytes = decode_blob((tmp_path / "build" / platform / entry["file"]).read_bytes())
    cooked = onnx.load_from_string(model_bytes)
    assert [n.op_type for n in cooked.graph.node] == ["MatMul", "Relu", "MatMul"], cooked.graph.node
    assert not any(n.name.startswith(PREFIX) for n in cooked.graph.node)
    assert {t.data_type for t in cooked.graph.initializer} == {TensorProto.FLOAT16}
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float16)
    want = onnxruntime.InferenceSession(source.SerializeToString(), providers=CPU).run(None, {"x": x})
    got = onnxruntime.InferenceSession(model_bytes, providers=CPU).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])  # the CPU EP puts its Casts back at load
    if platform == "linux-openvino":  # and OpenVINO's EP takes the whole model, as it takes the source
        check = check_of(tmp_path / "build" / platform, ["m"], "onnxruntime-openvino", OPENVINO_VERSION)
        placement = run_check(check)["models"]["m"]["placement"]
        assert placement["coverage"] == 1.0 and placement["cpu_ops"] == [], placement


def _saved(model: onnx.ModelProto, assets: Path) -> Path:
    assets.mkdir(parents=True, exist_ok=True)
    onnx.save(model, assets / "m.onnx")
    return assets
