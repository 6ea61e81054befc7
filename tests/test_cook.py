"""The cook of one (platform, model), without doit, on purpose-built models: each rule of docs/design.md."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.build.summary import cook_line
from onnx_cooker.cook import guard as guard_module
from onnx_cooker.cook.facts import onnx_facts, ort_facts
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.optimize import optimize
from onnx_cooker.cook.source import load_source, normalize
from onnx_cooker.errors import GuardError, ModelError, ProfileError, VerifyError
from onnx_cooker.layout import blob_path, entry_path
from onnx_cooker.runtime import check_blob, decode_blob, session_from_blob
from onnx_cooker.settings.assets import discover
from onnx_cooker.settings.resolve import CookSettings, load_platforms, resolve
from tests.models import RNG_SEED, conv_bn_relu_model, mlp_model, model_of, relu_model

REPO = Path(__file__).resolve().parents[1]
CPU = ["CPUExecutionProvider"]


def settings_for(tmp_path: Path, text: str, name: str = "target") -> CookSettings:
    folder = tmp_path / "platforms"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    platform = next(p for p in load_platforms(folder, {}) if p.name == name)
    return resolve(platform, {}, {})


def shipped_settings(platform_name: str, **overrides: object) -> CookSettings:
    platform = next(p for p in load_platforms(REPO / "platforms", {}) if p.name == platform_name)
    return resolve(platform, overrides, {})


def job_for(assets: Path, name: str, settings: CookSettings, build: Path) -> CookJob:
    asset = next(a for a in discover(assets) if a.name == name)
    return CookJob(asset=asset, settings=settings, platform_dir=build / settings.platform)


def save(model: onnx.ModelProto, folder: Path, name: str) -> Path:
    path = folder / f"{name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("platform", ["windows-dml", "android", "ios", "console"])
def test_cook_round_trip_every_shipped_platform(tmp_path: Path, platform: str) -> None:
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    settings = shipped_settings(platform)
    entry = cook(job_for(assets, "net", settings, tmp_path / "build"))

    blob = blob_path(tmp_path / "build" / platform, "net", settings.format).read_bytes()
    header, model_bytes = decode_blob(blob)
    assert header.model_format == settings.format == entry["format"]
    assert entry_path(tmp_path / "build" / platform, "net").is_file()
    assert entry["verification"]["outputs"][0]["ok"] is True
    # The cooked model computes what the source computes, loaded from memory through the loader.
    feed = {"x": np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)}
    source = onnxruntime.InferenceSession(
        conv_bn_relu_model().SerializeToString(), providers=["CPUExecutionProvider"]
    )
    cooked = session_from_blob(blob, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(cooked.run(None, feed)[0], source.run(None, feed)[0], rtol=1e-4, atol=1e-5)
    # Trap 1: the saved model keeps its weights (BatchNorm folded into the conv, nothing stolen).
    facts = (
        ort_facts(model_bytes) if settings.format == "ort" else onnx_facts(onnx.load_from_string(model_bytes))
    )
    assert facts.initializer_bytes >= 16 * 8 * 3 * 3 * 4


def test_windows_dml_extended_level_would_ship_cpu_only_fused_ops(tmp_path: Path) -> None:
    """Trap 2: `extended` fuses Conv+BN+Relu into com.microsoft FusedConv, which DirectML cannot take."""
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    settings = shipped_settings("windows-dml", optimization_level="extended")
    with pytest.raises(GuardError, match=r"net\.onnx.*windows-dml.*com\.microsoft.*DmlExecutionProvider"):
        cook(job_for(assets, "net", settings, tmp_path / "build"))
    assert not (tmp_path / "build" / "windows-dml" / "net.onnx.ocb").exists()
    assert not entry_path(tmp_path / "build" / "windows-dml", "net").exists()


@pytest.mark.parametrize(
    ("changes", "domain"),
    [({"optimization_level": "extended"}, "com.microsoft"),
     ({"optimization_level": "all", "allow_nchwc": True}, "com.microsoft.nchwc")],
)  # fmt: skip
def test_openvino_gets_no_cpu_only_ops(tmp_path: Path, changes: dict, domain: str) -> None:
    """OpenVINO fails to create a session for NCHWc ops (tests/test_placement.py) and leaves some fused
    ops to the CPU: the guard keeps both out of linux-openvino cooks, naming the EP."""
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    settings = shipped_settings("linux-openvino", **changes)
    with pytest.raises(GuardError) as failure:
        cook(job_for(assets, "net", settings, tmp_path / "build"))
    message = str(failure.value)
    assert "linux-openvino" in message and "OpenVINOExecutionProvider cannot run" in message
    assert f"domain(s) {domain}" in message or f"domain(s) com.microsoft, {domain}" in message
    assert not entry_path(tmp_path / "build" / "linux-openvino", "net").exists()


@pytest.mark.parametrize(("policy", "written"), [("none", None), ("prefer_gpu", "prefer_gpu")])
def test_ep_device_policy_reaches_the_blob_header(tmp_path: Path, policy: str, written: str | None) -> None:
    """The platform's plugin-EP device policy is what the loader applies (tests/test_plugin_eps.py)."""
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    settings = shipped_settings("windows-dml", ep_device_policy=policy)
    cook(job_for(assets, "net", settings, tmp_path / "build"))
    entry = json.loads(entry_path(tmp_path / "build" / "windows-dml", "net").read_text())
    blob = (tmp_path / "build" / "windows-dml" / entry["file"]).read_bytes()
    assert check_blob(blob).header.device_policy == written


def test_webgpu_platforms_ship_onnx_only(tmp_path: Path) -> None:
    """The H200 run (bench/results-gpu.md): ORT-format models can fail on the WebGPU EP; the settings
    refuse that combination before cooking, naming the EP, the files and the fix; ONNX cooks."""
    assets = tmp_path / "assets"
    save(conv_bn_relu_model(), assets, "net")
    eps = ["WebGpuExecutionProvider", "CPUExecutionProvider"]
    with pytest.raises(ProfileError) as failure:
        shipped_settings("android", execution_providers=eps)
    message = str(failure.value)
    assert "'format' 'ort' does not run correctly on WebGpuExecutionProvider, the preferred EP" in message
    assert "`format: onnx`" in message
    cook(job_for(assets, "net", shipped_settings("windows-dml", execution_providers=eps), tmp_path / "onnx"))
    assert entry_path(tmp_path / "onnx" / "windows-dml", "net").exists()


def test_nchwc_only_for_x86_64_targets_that_ask(tmp_path: Path) -> None:
    """Trap 2: level `all` adds machine-specific nchwc ops unless the transformer is excluded."""
    model = conv_bn_relu_model()
    base = "format: onnx\noptimization_level: all\nexecution_providers: [CPUExecutionProvider]\n"
    arm = settings_for(tmp_path, base + "arch: arm64\n", "arm")
    x86_opt_in = settings_for(tmp_path, base + "arch: x86_64\nallow_nchwc: true\n", "x86")
    arm_domains = onnx_facts(onnx.load_from_string(optimize(model, arm))).domains_used
    x86_domains = onnx_facts(onnx.load_from_string(optimize(model, x86_opt_in))).domains_used
    assert "com.microsoft.nchwc" not in arm_domains
    assert "com.microsoft.nchwc" in x86_domains


def test_guard_names_nchwc_ops_on_a_target_that_did_not_ask(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, "arch: arm64\nexecution_providers: [CPUExecutionProvider]\n")
    source = onnx_facts(conv_bn_relu_model())
    cooked = source.__class__(**{**source.__dict__, "domains_used": frozenset({"com.microsoft.nchwc"})})
    problems = guard_module.check_domains(source, cooked, settings, ("", "com.microsoft.nchwc"))
    assert len(problems) == 1 and "com.microsoft.nchwc" in problems[0] and "allow_nchwc" in problems[0]


def test_guard_catches_a_model_whose_weights_were_stolen(tmp_path: Path) -> None:
    """A GPU EP during the cook as it was first seen: a saved model with no initializers (the few-KB
    file; docs/design.md, "Cooking with the CPU EP only")."""
    source_model = conv_bn_relu_model()
    broken = onnx.ModelProto()
    broken.CopyFrom(source_model)
    del broken.graph.initializer[:]
    settings = shipped_settings("windows-dml")
    with pytest.raises(GuardError) as failure:
        guard_module.guard(
            source=onnx_facts(source_model),
            cooked=onnx_facts(broken),
            model_size=broken.ByteSize(),
            ort_format_version=None,
            settings=settings,
            preferred_domains=("",),
        )
    message = str(failure.value.in_context(model_path="net.onnx", model_name="net", platform="windows-dml"))
    assert message.startswith(
        "net.onnx (model 'net', platform 'windows-dml'): the cooked model fails its guards"
    )
    assert "weights were dropped" in message and "nothing produces" in message


def legacy_ir3_model() -> onnx.ModelProto:
    """IR 3: initializers are also graph inputs; two equal constants invite ConstantSharing."""
    rng = np.random.default_rng(RNG_SEED)
    weight = rng.standard_normal((4, 4)).astype(np.float32)
    tensors = [
        numpy_helper.from_array(weight, "w"),
        numpy_helper.from_array(np.array([0.5], np.float32), "k1"),
        numpy_helper.from_array(np.array([0.5], np.float32), "k2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Mul", ["m", "k1"], ["a"]),
        helper.make_node("Mul", ["a", "k2"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in tensors]
    graph = helper.make_graph(
        nodes, "legacy", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], tensors
    )
    return model_of(graph, opset=7, ir_version=3)


def test_ir3_initializer_inputs_are_normalized_before_basic_optimization(tmp_path: Path) -> None:
    """Trap 3: unnormalized, `basic` leaves a required input with no data; normalized, it cooks."""
    settings = settings_for(tmp_path, "format: onnx\nexecution_providers: [CPUExecutionProvider]\n")
    raw = legacy_ir3_model()
    broken = onnx_facts(onnx.load_from_string(optimize(raw, settings)))
    assert set(broken.inputs) - set(onnx_facts(raw).inputs), (
        "onnxruntime no longer loses IR-3 initializers (docs/design.md, Old models)"
    )
    with pytest.raises(GuardError, match="requires input"):
        guard_module.guard(
            source=onnx_facts(raw),
            cooked=broken,
            model_size=0,
            ort_format_version=None,
            settings=settings,
            preferred_domains=("",),
        )

    normalized = legacy_ir3_model()
    assert normalize(normalized) is True
    assert normalized.ir_version == 4 and [v.name for v in normalized.graph.input] == ["x"]
    cooked = onnx_facts(onnx.load_from_string(optimize(normalized, settings)))
    assert cooked.inputs == ("x",) and cooked.missing_values == ()


def test_shipped_legacy_asset_cooks_for_every_platform(tmp_path: Path) -> None:
    for platform in ("windows-dml", "android"):
        entry = cook(job_for(REPO / "assets", "legacy_ir3", shipped_settings(platform), tmp_path / "build"))
        assert [i["name"] for i in entry["inputs"]] == ["data"]


def test_too_new_opset_rejected_for_old_runtime_accepted_for_new(tmp_path: Path) -> None:
    """Trap 6: opset 26 needs onnxruntime 1.28; windows-dml ships 1.24.4. Without the downgrade
    (tests/test_model_repairs.py) the guard refuses it, naming the opset the target loads."""
    assets = tmp_path / "assets"
    save(relu_model(26), assets, "relu26")
    with pytest.raises(
        GuardError, match=r"opset 26 and onnxruntime 1\.24\.4 \(runtime_version\) loads opset 25 at most"
    ):
        settings = shipped_settings("windows-dml", downgrade="never")
        cook(job_for(assets, "relu26", settings, tmp_path / "build"))
    entry = cook(job_for(assets, "relu26", shipped_settings("android"), tmp_path / "build"))
    assert entry["min_runtime_version"] == "1.28"


def test_garbage_model_fails_with_its_path_and_nothing_written(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "broken.onnx").write_bytes(np.random.default_rng(3).bytes(512))
    with pytest.raises(ModelError, match=r"broken\.onnx.*not a readable ONNX model"):
        cook(job_for(assets, "broken", shipped_settings("android"), tmp_path / "build"))
    assert not (tmp_path / "build").exists() or not any((tmp_path / "build").rglob("*.ocb"))


def test_model_failing_the_checker_is_refused(tmp_path: Path) -> None:
    model = relu_model(17)
    model.graph.node[0].input[0] = "nowhere"
    assets = tmp_path / "assets"
    save(model, assets, "bad")
    with pytest.raises(ModelError, match=r"bad\.onnx.*fails the ONNX checker") as failure:
        cook(job_for(assets, "bad", shipped_settings("android"), tmp_path / "build"))
    # the checker's whole message on one line: the node, and what is wrong with its input
    message = str(failure.value)
    assert "input 'nowhere' of node" in message and "OpType: Relu" in message, message
    assert "is not output of any previous nodes" in message and "\n" not in message, message


def test_sample_inputs_with_wrong_keys_are_refused(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(relu_model(17), assets, "relu")
    np.savez(assets / "relu.inputs.npz", wrong=np.zeros((2, 3), np.float32))
    with pytest.raises(VerifyError, match=r"relu\.inputs\.npz.*missing \['x'\].*unknown \['wrong'\]"):
        cook(job_for(assets, "relu", shipped_settings("android"), tmp_path / "build"))


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (
            np.zeros((2, 3), np.float64),
            r"relu\.inputs\.npz: input 'x' is float64 but the model takes float32",
        ),
        (
            np.zeros((2, 4), np.float32),
            r"relu\.inputs\.npz: input 'x' has shape \[2, 4\] but the model takes \[2, 3\]",
        ),
        (np.zeros((2,), np.float32), r"input 'x' has shape \[2\] but the model takes \[2, 3\]"),
    ],
)
def test_sample_inputs_of_another_type_or_shape_name_the_input_and_the_file(
    tmp_path: Path, array: np.ndarray, message: str
) -> None:
    assets = tmp_path / "assets"
    save(relu_model(17), assets, "relu")
    np.savez(assets / "relu.inputs.npz", x=array)
    with pytest.raises(VerifyError, match=message):
        cook(job_for(assets, "relu", shipped_settings("android"), tmp_path / "build"))


def test_external_data_outside_the_model_folder_is_refused(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    model = conv_bn_relu_model()
    save(model, tmp_path, "elsewhere")  # a copy whose weights we move out of the assets folder
    onnx.save_model(
        model,
        tmp_path / "outside.onnx",
        save_as_external_data=True,
        location="outside.onnx.data",
        size_threshold=0,
    )
    assets.mkdir()
    escaped = onnx.load(tmp_path / "outside.onnx", load_external_data=False)
    for tensor in escaped.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../outside.onnx.data"
    onnx.save(escaped, assets / "escaped.onnx")
    with pytest.raises(ModelError, match=r"escaped\.onnx.*outside the model's folder"):
        load_source(next(a for a in discover(assets) if a.name == "escaped"))


def test_external_data_is_tracked_and_cooked(tmp_path: Path) -> None:
    entry = cook(job_for(REPO / "assets", "big_weights", shipped_settings("console"), tmp_path / "build"))
    assert set(entry["sources"]) == {"big_weights.onnx", "big_weights.onnx.data"}
    assert entry["model_size"] > 1_000_000  # the weights are inside the cooked model


def test_optimum_named_external_data_is_tracked_and_cooked(tmp_path: Path) -> None:
    """Hugging Face Optimum saves big models as model.onnx + model.onnx_data: tracked as it is."""
    assets = tmp_path / "assets"
    assets.mkdir()
    model = conv_bn_relu_model()
    onnx.save_model(
        model,
        assets / "exported.onnx",
        save_as_external_data=True,
        location="exported.onnx_data",
        size_threshold=0,
    )
    (asset,) = discover(assets)
    assert [path.name for path in asset.external_data] == ["exported.onnx_data"]
    entry = cook(job_for(assets, "exported", shipped_settings("windows-dml"), tmp_path / "build"))
    assert set(entry["sources"]) == {"exported.onnx", "exported.onnx_data"}


@pytest.mark.parametrize(
    ("layout", "refusal"),
    [
        ({"location": "weights/w.bin"}, r"'weights/w\.bin' in a subfolder"),
        (
            {"location": "weights.pb"},
            r"keeps its weights in 'weights\.pb', which is not tracked",
        ),  # diffusers
        (
            {"all_tensors_to_one_file": False},
            r"which is not tracked",
        ),  # one file per tensor (torch's old exporter)
        ({"split": True}, r"keeps its weights in 'sub\.onnx\.data2', which is not tracked"),
    ],
    ids=["subfolder", "weights.pb", "file-per-tensor", "part-in-the-tracked-file"],
)
def test_untracked_external_data_is_refused_with_a_fix_that_works(
    tmp_path: Path, layout: dict[str, object], refusal: str
) -> None:
    assets = tmp_path / "assets"
    (assets / "weights").mkdir(parents=True)
    if layout.get("split"):  # half the weights already in sub.onnx.data: onnx.save refused to overwrite it
        model = conv_bn_relu_model()
        for index, tensor in enumerate(model.graph.initializer):
            data = "sub.onnx.data" if index % 2 else "sub.onnx.data2"
            onnx.external_data_helper.set_external_data(tensor, location=data)
        onnx.external_data_helper.write_external_data_tensors(model, str(assets))
        onnx.save_model(model, assets / "sub.onnx")
    else:
        onnx.save_model(
            conv_bn_relu_model(), assets / "sub.onnx", save_as_external_data=True, size_threshold=0, **layout
        )
    with pytest.raises(ModelError, match=refusal) as refused:
        load_source(next(a for a in discover(assets) if a.name == "sub"))
    message = str(refused.value)
    fix = message[message.index("`") + 1 : message.rindex("`")]
    assert fix.startswith("python -c \"import onnx, os; m = onnx.load('sub.onnx')"), message
    # the fix, as the message gives it, run by a shell in the model's folder
    ran = subprocess.run(fix.replace("python", shlex.quote(sys.executable), 1), shell=True, cwd=assets)
    assert ran.returncode == 0
    (asset,) = discover(assets)
    assert [path.name for path in asset.external_data] == ["sub.onnx.data"]
    cook(job_for(assets, "sub", shipped_settings("windows-dml"), tmp_path / "build"))


def test_missing_external_data_is_named_as_missing(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    onnx.save_model(
        conv_bn_relu_model(),
        assets / "lost.onnx",
        save_as_external_data=True,
        location="lost.onnx.data",
        size_threshold=0,
    )
    (assets / "lost.onnx.data").unlink()
    with pytest.raises(ModelError, match=r"'lost\.onnx\.data', which is missing beside the model"):
        load_source(next(a for a in discover(assets) if a.name == "lost"))


def test_scalar_bool_input_is_synthesized_as_an_array(tmp_path: Path) -> None:
    """An If on a scalar bool input (shape ()): verification feeds onnxruntime a 0-d array."""
    rng = np.random.default_rng(RNG_SEED)

    def branch(name: str) -> onnx.GraphProto:
        weight = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), f"w_{name}")
        out = helper.make_tensor_value_info(f"y_{name}", TensorProto.FLOAT, [1, 4])
        return helper.make_graph(
            [helper.make_node("MatMul", ["x", f"w_{name}"], [f"y_{name}"])], name, [], [out], [weight]
        )

    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("then"), else_branch=branch("else"))],
        "if_scalar",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    assets = tmp_path / "assets"
    save(model_of(graph), assets, "gate")
    entry = cook(job_for(assets, "gate", shipped_settings("android"), tmp_path / "build"))
    assert entry["verification"]["inputs"] == "synthesized" and "outputs" in entry["verification"], entry


def test_cook_key_changes_with_source_bytes_and_settings(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    path = save(relu_model(17), assets, "relu")
    first = cook(job_for(assets, "relu", shipped_settings("android"), tmp_path / "build"))["cook_key"]
    again = cook(job_for(assets, "relu", shipped_settings("android"), tmp_path / "build"))["cook_key"]
    other_settings = cook(
        job_for(assets, "relu", shipped_settings("android", compression_level=3), tmp_path / "build")
    )["cook_key"]
    model = relu_model(17)
    model.doc_string = "changed"
    onnx.save(model, path)
    other_bytes = cook(job_for(assets, "relu", shipped_settings("android"), tmp_path / "build"))["cook_key"]
    assert first == again and len({first, other_settings, other_bytes}) == 3


@pytest.mark.parametrize("sidecar", ["relu.inputs.npz", "relu.cook.yaml"])
def test_sidecar_linking_out_of_the_assets_folder_is_refused(tmp_path: Path, sidecar: str) -> None:
    assets = tmp_path / "assets"
    save(relu_model(17), assets, "relu")
    outside = tmp_path / f"outside-{sidecar}"
    outside.write_bytes(b"")
    (assets / sidecar).symlink_to(outside)
    with pytest.raises(
        ModelError, match=rf"{sidecar.replace('.', '[.]')}.*link to .*outside the assets folder"
    ):
        discover(assets)


def optional_identity_model() -> onnx.ModelProto:
    """Identity on an optional tensor: valid ONNX that the ORT format cannot store."""
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "optional",
        [helper.make_value_info("x", optional)],
        [helper.make_value_info("y", optional)],
    )
    return model_of(graph)


def test_optional_types_in_ort_format_say_to_use_onnx(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, "format: ort\n")
    with pytest.raises(ModelError, match=r"ORT format cannot store optional-typed values.*format: onnx"):
        optimize(optional_identity_model(), settings)
    onnx_settings = settings_for(tmp_path, "format: onnx\n", "onnx-target")
    assert optimize(optional_identity_model(), onnx_settings)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not really a zip"])
def test_empty_or_damaged_sample_inputs_are_a_clean_error(tmp_path: Path, content: bytes) -> None:
    assets = tmp_path / "assets"
    save(relu_model(17), assets, "relu")
    (assets / "relu.inputs.npz").write_bytes(content)
    with pytest.raises(
        VerifyError, match=r"relu\.inputs\.npz: (cannot read sample inputs|not a \.npz archive)"
    ):
        cook(job_for(assets, "relu", shipped_settings("android"), tmp_path / "build"))


def test_ir3_model_with_initializers_missing_from_its_inputs_cooks(tmp_path: Path) -> None:
    """Issue 13: the checker refuses such an IR-3 model ("w in initializer but not in graph input");
    onnxruntime runs it, so the cooker normalizes it to IR 4 before checking and cooks it."""
    model = legacy_ir3_model()
    kept = [value for value in model.graph.input if value.name != "w"]  # "w" no longer listed
    del model.graph.input[:]
    model.graph.input.extend(kept)
    with pytest.raises(onnx.checker.ValidationError, match="in initializer but not in graph input"):
        onnx.checker.check_model(model)
    feed = {"x": np.random.default_rng(2).standard_normal((1, 4)).astype(np.float32)}
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, feed)[0]
    assets = tmp_path / "assets"
    save(model, assets, "legacy")
    for platform in ("windows-dml", "android"):
        entry = cook(job_for(assets, "legacy", shipped_settings(platform), tmp_path / "build"))
        assert entry["verification"]["outputs"][0]["ok"] is True
        blob = blob_path(tmp_path / "build" / platform, "legacy", entry["format"]).read_bytes()
        out = session_from_blob(blob, providers=CPU).run(None, feed)[0]
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def constant_of_shape_model(size: int) -> onnx.ModelProto:
    """A tiny source that computes a ``size`` x ``size`` constant at run time (ConstantOfShape):
    constant folding would store it in the cooked model."""
    shape = numpy_helper.from_array(np.array([size, size], np.int64), "shape")
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])
    graph = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["c"], value=value),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        "grows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])],
        [shape],
    )
    return model_of(graph)


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_constant_folding_that_inflates_a_model_is_turned_off_and_recorded(
    tmp_path: Path, platform: str
) -> None:
    assets = tmp_path / "assets"
    save(constant_of_shape_model(512), assets, "grows")  # 1 MiB folded, from a few hundred bytes
    settings = shipped_settings(platform, max_growth_bytes=65536)
    entry = cook(job_for(assets, "grows", settings, tmp_path / "build"))

    (fallback,) = entry["fallbacks"]
    assert fallback["disabled_optimizers"] == ["ConstantFolding"]
    assert "constant folding made the" in fallback["why"] and "without it" in fallback["why"]
    assert entry["model_size"] < 65536  # the constant is computed at run time again
    assert entry["verification"]["outputs"][0]["ok"] is True
    # With the default limit (16 MiB) the same 1 MiB of folding is accepted and not recorded.
    default = cook(job_for(assets, "grows", shipped_settings(platform), tmp_path / "default"))
    assert default["fallbacks"] == [] and default["model_size"] > 1 << 20


def test_a_model_that_stays_too_big_fails_naming_the_sizes_and_the_settings(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(mlp_model(), assets, "mlp")
    settings = shipped_settings("android", max_growth=1.0, max_growth_bytes=0)  # any growth at all
    with pytest.raises(
        ModelError, match=r"and still [\d,]+ bytes without constant folding.*raise `max_growth`"
    ):
        cook(job_for(assets, "mlp", settings, tmp_path / "build"))


def qdq_attention_model(tmp_path: Path) -> Path:
    """A small attention stack quantized to QDQ int8 by onnxruntime's quantize_static: its saved
    runtime optimizations (QDQ selector records) cannot be replayed by onnxruntime 1.32."""
    from onnx_cooker.cook.precision import quantize_qdq

    rng = np.random.default_rng(RNG_SEED)
    width, seq = 64, 8
    nodes, inits, x = [], [], "x"
    for i in range(2):
        for name in ("wq", "wk", "wv"):
            inits.append(
                numpy_helper.from_array(
                    (rng.standard_normal((width, width)) * 0.1).astype(np.float32), f"{name}{i}"
                )
            )
        inits += [
            numpy_helper.from_array((rng.standard_normal(width) * 0.1).astype(np.float32), f"b{i}"),
            numpy_helper.from_array(np.ones(width, np.float32), f"g{i}"),
            numpy_helper.from_array(np.zeros(width, np.float32), f"be{i}"),
        ]
        nodes += [
            helper.make_node("MatMul", [x, f"wq{i}"], [f"q{i}"]),
            helper.make_node("MatMul", [x, f"wk{i}"], [f"k{i}"]),
            helper.make_node("MatMul", [x, f"wv{i}"], [f"v{i}"]),
            helper.make_node("Transpose", [f"k{i}"], [f"kt{i}"], perm=[0, 2, 1]),
            helper.make_node("MatMul", [f"q{i}", f"kt{i}"], [f"s{i}"]),
            helper.make_node("Softmax", [f"s{i}"], [f"p{i}"], axis=-1),
            helper.make_node("MatMul", [f"p{i}", f"v{i}"], [f"a{i}"]),
            helper.make_node("Add", [f"a{i}", f"b{i}"], [f"ab{i}"]),
            helper.make_node("Add", [f"ab{i}", x], [f"r{i}"]),
            helper.make_node("LayerNormalization", [f"r{i}", f"g{i}", f"be{i}"], [f"n{i}"], axis=-1),
        ]
        x = f"n{i}"
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, width])],
        inits,
    )
    model = model_of(graph)
    source = tmp_path / "float.onnx"
    onnx.save(model, source)
    batches = [{"x": rng.standard_normal((1, seq, width)).astype(np.float32)} for _ in range(8)]
    target = tmp_path / "assets" / "qdq.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    quantize_qdq(source, target, batches, per_channel=False)  # onnxruntime's quantize_static, QDQ
    return target


@pytest.mark.slow
def test_runtime_style_blob_that_does_not_load_falls_back_and_says_so(tmp_path: Path) -> None:
    qdq_attention_model(tmp_path)
    entry = cook(job_for(tmp_path / "assets", "qdq", shipped_settings("android"), tmp_path / "build"))

    (fallback,) = entry["fallbacks"]
    assert fallback["instead_of"] == {"optimization_style": "runtime"}
    assert fallback["used"]["optimization_style"] == "fixed"
    assert "runtime optimization record" in fallback["why"]
    assert entry["saved_runtime_optimizations"] is False
    assert entry["verification"]["outputs"][0]["ok"] is True
    blob = blob_path(tmp_path / "build" / "android", "qdq", "ort").read_bytes()
    feed = {"x": np.random.default_rng(3).standard_normal((1, 8, 64)).astype(np.float32)}
    assert session_from_blob(blob, providers=CPU).run(None, feed)[0].shape == (1, 8, 64)


def test_a_model_that_pins_its_style_gets_no_fallback(tmp_path: Path) -> None:
    qdq_attention_model(tmp_path)
    (tmp_path / "assets" / "qdq.cook.yaml").write_text(
        "platforms:\n  android:\n    optimization_style: runtime\n"
    )
    with pytest.raises(VerifyError, match=r"runtime optimization record.*pins `optimization_style`"):
        cook(job_for(tmp_path / "assets", "qdq", shipped_settings("android"), tmp_path / "build"))


SHIPPED_PLATFORMS = ("android", "ios", "console", "windows-dml", "linux-openvino")


@pytest.mark.parametrize("platform", SHIPPED_PLATFORMS)
def test_dynamically_quantized_model_cooks_and_matches_its_source(tmp_path: Path, platform: str) -> None:
    """onnxruntime's quantize_dynamic (int8 weights, DynamicQuantizeLinear, MatMulInteger)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(mlp_model(), tmp_path / "float.onnx")
    (tmp_path / "assets").mkdir()
    quantize_dynamic(
        str(tmp_path / "float.onnx"), str(tmp_path / "assets" / "dyn.onnx"), weight_type=QuantType.QInt8
    )
    entry = cook(job_for(tmp_path / "assets", "dyn", shipped_settings(platform), tmp_path / "build"))
    assert entry["verification"]["outputs"][0]["ok"] is True and entry["fallbacks"] == []


@pytest.mark.parametrize("platform", SHIPPED_PLATFORMS)
def test_fp16_model_from_onnxruntimes_converter_cooks(tmp_path: Path, platform: str) -> None:
    """onnxruntime's float16 converter with keep_io_types writes its input Casts after the nodes
    that read them: the checker refuses that order, onnxruntime runs it; the cooker sorts the nodes."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(conv_bn_relu_model(), keep_io_types=True)
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(model)
    save(model, tmp_path / "assets", "half")
    # fp16 kernels fused or not round differently: tolerances as a user of an fp16 model sets them.
    settings = shipped_settings(platform, rtol=1e-2, atol=5e-2)
    entry = cook(job_for(tmp_path / "assets", "half", settings, tmp_path / "build"))
    assert entry["verification"]["outputs"][0]["ok"] is True
    assert [i["type"] for i in entry["inputs"]] == ["tensor(float)"]  # the io types are kept


def test_platforms_share_the_sources_reference_outputs(tmp_path: Path) -> None:
    """The source is run once per model and inputs, not once per platform: the second platform's cook
    reads the remembered outputs (shown by remembering wrong ones: its verification then fails)."""
    from onnx_cooker.layout import reference_memo_dir

    assets, build = tmp_path / "assets", tmp_path / "build"
    save(mlp_model(), assets, "net")
    cook(job_for(assets, "net", shipped_settings("android"), build))
    memo = reference_memo_dir(build)
    remembered = sorted(memo.glob("*.npz"))  # optimizations off, and the default level (rounding noise)
    assert len(remembered) == 2
    cook(job_for(assets, "net", shipped_settings("console"), build))
    assert sorted(memo.glob("*.npz")) == remembered  # same model, same inputs: one reference

    for path in remembered:
        with np.load(path) as data:
            wrong = {key: data[key] * 2 + 1 for key in data.files}
        np.savez(path, **wrong)
    with pytest.raises(VerifyError, match="outputs differ from the source"):
        cook(job_for(assets, "net", shipped_settings("ios"), build))

    model = mlp_model()
    model.graph.initializer[0].raw_data = bytes(len(model.graph.initializer[0].raw_data))
    save(model, assets, "net")  # another source: another reference, computed
    cook(job_for(assets, "net", shipped_settings("ios"), build))
    assert len(list(memo.glob("*.npz"))) == 4


def test_a_blob_larger_for_its_alignment_says_so(tmp_path: Path) -> None:
    """An 82 kB ONNX graph is stored raw under `compression: speed`, its extent on a 64 KiB boundary:
    the entry counts those zeros and the cook line names them, not the header."""
    assets = tmp_path / "assets"
    assets.mkdir()
    shutil.copy(REPO / "assets" / "resnet.onnx", assets / "resnet.onnx")
    entry = cook(job_for(assets, "resnet", shipped_settings("windows-dml"), tmp_path / "build"))

    header = check_blob(blob_path(tmp_path / "build" / "windows-dml", "resnet", "onnx").read_bytes()).header
    assert entry["padding"] == sum(frame.pad for frame in header.frames) > 32 << 10
    line = cook_line(entry)
    assert f"larger: {entry['padding']:,} B of zeros that put its raw sections on 64 KiB boundaries" in line
    unpadded = cook_line(entry | {"padding": 0})
    assert "(larger: the blob's header and checksums" in unpadded and "zeros" not in unpadded
    # Under the default `compression: speed` nothing was compressed: the line says so, not that the
    # weights "barely compress"; under `size` the weights were tried.
    assert "`compression: speed` stores sections of 64 KiB or more raw" in line
    assert "compression: speed" not in unpadded  # no raw section: all zstd frames
    size = cook_line(entry | {"settings": entry["settings"] | {"compression": "size"}})
    assert "its weights barely compress" in size and "compression: speed" not in size
    ort = cook_line(entry | {"format": "ort", "padding": 0})
    assert "`compression: speed` stores an ORT model raw, to load it in place" in ort
    # an entry cached before `padding` was recorded: judged by the source's size (82 kB here)
    older = cook_line({key: value for key, value in entry.items() if key != "padding"})
    assert "zeros" not in older and "stores sections of 64 KiB or more raw" in older


def double_tree_model() -> onnx.ModelProto:
    """A one-leaf TreeEnsembleRegressor over doubles, as skl2onnx writes a regressor converted with
    DoubleTensorType: the ONNX checker takes it, onnxruntime refuses to load it ("Type (tensor(double))
    of output arg ... does not match expected type (tensor(float))")."""
    tree = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["variable"],
        domain="ai.onnx.ml",
        n_targets=1,
        nodes_treeids=[0],
        nodes_nodeids=[0],
        nodes_featureids=[0],
        nodes_values=[0.0],
        nodes_modes=["LEAF"],
        nodes_truenodeids=[0],
        nodes_falsenodeids=[0],
        target_treeids=[0],
        target_nodeids=[0],
        target_ids=[0],
        target_weights=[1.5],
    )
    graph = helper.make_graph(
        [tree],
        "double_tree",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, ["N", 2])],
        [helper.make_tensor_value_info("variable", TensorProto.DOUBLE, ["N", 1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    model.ir_version = 8
    return model


def test_a_model_onnxruntime_cannot_load_at_all_is_named_so_with_the_way_out(tmp_path: Path) -> None:
    """Not "failed to optimize and save" into a folder gone by the time the message is read: the
    model fails with every optimization off too, so the message says onnxruntime refuses the model
    itself, and how to check and re-export it."""
    onnx.checker.check_model(double_tree_model())  # the checker takes it
    with pytest.raises(ModelError) as refused:
        optimize(double_tree_model(), settings_for(tmp_path, "format: onnx\n"))
    message = str(refused.value)
    assert "cannot load the model, with every graph optimization off too: " in message, message
    assert (
        "does not match expected type (tensor(float)); onnxruntime refuses the model as the cook" in message
    )
    assert "re-export it" in message and "skip_platforms" in message and ".optimize-" not in message


def test_manifest_signatures_write_every_type_as_onnxruntime_names_it() -> None:
    """A classifier's ZipMap output was "Unknown type sequence_type" in the manifest (and so in
    `inspect` and the C library's signatures): every type is now written as onnxruntime's
    ``NodeArg.type`` writes it."""
    from onnx_cooker.cook.run import io_signature

    scalar = helper.make_tensor_type_proto(TensorProto.FLOAT, [])
    kinds = {
        "label": helper.make_tensor_type_proto(TensorProto.INT64, ["N"]),
        "probabilities": helper.make_sequence_type_proto(
            helper.make_map_type_proto(TensorProto.INT64, scalar)
        ),
        "named": helper.make_sequence_type_proto(helper.make_map_type_proto(TensorProto.STRING, scalar)),
        "parts": helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT16, None)),
        "maybe": helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.DOUBLE, [2])),
    }
    values = [helper.make_value_info(name, kind) for name, kind in kinds.items()]
    nodes = [
        helper.make_node("Constant", [], ["label"], value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Constant", [], ["p"], value=numpy_helper.from_array(np.ones((1, 2), np.float32))),
        helper.make_node("ZipMap", ["p"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1]),
        helper.make_node("ZipMap", ["p"], ["named"], domain="ai.onnx.ml", classlabels_strings=["a", "b"]),
        helper.make_node("Cast", ["p"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("SplitToSequence", ["h"], ["parts"], axis=1),
        helper.make_node("Constant", [], ["d"], value=numpy_helper.from_array(np.ones(2, np.float64))),
        helper.make_node("Optional", ["d"], ["maybe"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "kinds", [], values),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
    )
    model.ir_version = 8
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    written = {entry["name"]: entry["type"] for entry in io_signature(model.graph.output)}
    assert written == {output.name: output.type for output in session.get_outputs()}
    assert written["probabilities"] == "seq(map(int64,tensor(float)))"
