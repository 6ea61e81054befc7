"""Plugin execution providers (onnxruntime >= 1.22, Windows ML's API): ``ep_libraries``, ``devices``
and the blob header's ``device_policy`` (onnx_cooker/runtime/devices.py).

A real plugin EP runs here: onnxruntime-ggml 0.2.0 (onnxruntime 1.30.0), in its own environment
(``run_in_runtime``). Its library registers on the CPU device; it takes whole MLP and 1-D conv
graphs, and with its provider option ``partial`` also parts of a graph (a 1-D conv then a MaxPool:
the pool stays on the CPU EP). Placement is read from onnxruntime itself
(``get_provider_graph_assignment_info``).

onnxruntime before 1.22 has no plugin-EP API, and every onnxruntime the repository tests against
(1.24.4, 1.28.0, 1.32.0) has it: the fallback to the classic list is proven on the pure decision
function ``plan_session`` with ``ep_devices=None``, exactly what the loader passes on such a build.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from runtime_helpers import make_blob, repack, run_source, sample_input, write_bundle

from onnx_cooker.runtime import (
    DEVICE_POLICIES,
    CorruptBlobError,
    SessionCreateError,
    load_info,
    plan_session,
    register_ep_libraries,
    session_from_blob,
)
from onnx_cooker.runtime.header import read_header
from tests.models import model_of, tiny_model

CPU = "CPUExecutionProvider"
DML = "DmlExecutionProvider"
WEBGPU = "WebGpuExecutionProvider"
GGML_RUNTIME = "1.30.0"
GGML_PACKAGE = "onnxruntime-ggml==0.2.0"
RECORD = "session.record_ep_graph_assignment_info"


def conv_pool_model() -> onnx.ModelProto:
    """A 1-D conv (kernel 3) then MaxPool 2, x [1, 2, 16] -> y [1, 4, 8]: ggml (``partial``) takes the
    conv and leaves the pool to the CPU EP; without ``partial`` it declines the graph. (ggml 0.2.0
    claims 2-D Conv nodes too, then fails when the session runs: "only 1-D convolutions".)"""
    weight = np.random.default_rng(5).standard_normal((4, 2, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]),
            helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2], strides=[2]),
        ],
        "conv_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
        [numpy_helper.from_array(weight, "w")],
    )
    return model_of(graph)


# --- the decision, from plain data (what get_ep_devices() offers, faked as plain objects) ---------


def device(ep: str, kind: str = "CPU", vendor_id: int = 0x1022, vendor: str = "AMD") -> Any:
    """An OrtEpDevice as plan_session reads one: ``.ep_name`` and ``.device.type/.vendor_id/.vendor``."""
    return SimpleNamespace(ep_name=ep, device=SimpleNamespace(type=kind, vendor_id=vendor_id, vendor=vendor))


GGML_CPU = device("ggml")
OPENVINO = [device("OpenVINOExecutionProvider", kind, 0x8086, "Intel") for kind in ("CPU", "GPU", "NPU")]


def test_without_the_plugin_api_everything_falls_back_to_the_classic_list() -> None:
    """onnxruntime < 1.22 (``ep_devices=None``): the classic list, whatever the blob or caller ask,
    and the line says why (no test environment is that old: this is the loader's decision on one)."""
    plain = plan_session([WEBGPU, "ggml", CPU], {}, None, available=[CPU], ep_devices=None)
    assert plain.providers == ((CPU, {}),) and plain.devices == () and plain.policy is None
    assert plain.explanation == (
        f"{CPU}; skipped {WEBGPU} (not offered by this onnxruntime build); "
        "skipped ggml (not offered by this onnxruntime build)"
    )
    by_blob = plan_session(
        [CPU], {}, None, available=[CPU], ep_devices=None, blob_policy="prefer_npu", runtime="1.20.1"
    )
    by_caller = plan_session([CPU], {}, "prefer_gpu", available=[CPU], ep_devices=None, runtime="1.20.1")
    for plan, policy in ((by_blob, "prefer_npu"), (by_caller, "prefer_gpu")):
        assert plan.providers == ((CPU, {}),) and plan.policy is None
        assert f"device policy {policy} ignored: onnxruntime 1.20.1 has no plugin-EP API" in plan.explanation
    # Pairs become EP names (a device type cannot be chosen there); a name the build lacks is an error.
    pairs = plan_session(
        [CPU],
        {DML: {"device_id": 1}},
        [(DML, "gpu")],
        available=[DML, CPU],
        ep_devices=None,
        runtime="1.20.1",
    )
    assert pairs.providers == ((DML, {"device_id": "1"}), (CPU, {}))
    assert "cannot pick devices" in pairs.explanation
    with pytest.raises(SessionCreateError, match=r"asks for ggml.*1\.20\.1 does not offer"):
        plan_session(
            [CPU], {}, [("ggml", None)], available=[CPU], ep_devices=None, runtime="1.20.1", model="m"
        )


def test_classic_providers_when_nothing_plugin_related_applies() -> None:
    """The blob prefers only classic EPs: today's list, even where onnxruntime offers EP devices."""
    plan = plan_session(
        [DML, CPU], {DML: {"device_id": 0}}, None, available=[DML, CPU], ep_devices=[GGML_CPU]
    )
    assert plan.providers == ((DML, {"device_id": "0"}), (CPU, {}))
    assert plan.devices == () and plan.names == (DML, CPU)


def test_a_preferred_plugin_ep_runs_on_its_devices_and_the_others_are_skipped_with_reasons() -> None:
    plan = plan_session(
        [WEBGPU, "ggml", DML, CPU],
        {"ggml": {"partial": 1, "threads": 2}},
        None,
        available=[DML, CPU],
        ep_devices=[device(CPU), GGML_CPU, device(DML, "GPU", 0x10DE, "NVIDIA")],
    )
    assert plan.providers is None and plan.policy is None
    assert [(ep, list(found), dict(options)) for ep, found, options in plan.devices] == [
        ("ggml", [GGML_CPU], {"partial": "1", "threads": "2"})
    ]
    assert plan.names == ("ggml", CPU)
    assert plan.explanation == (
        f"ggml on CPU (vendor 0x1022 AMD), then {CPU} for the nodes they do not take (the blob prefers a "
        f"plugin EP); skipped {WEBGPU} (no device offered); skipped {DML} (cannot be combined with ggml)"
    )


def test_pairs_pick_devices_in_order_and_an_ep_without_a_device_is_an_error() -> None:
    plan = plan_session(
        [CPU],
        {},
        [("OpenVINOExecutionProvider", "NPU"), ("OpenVINOExecutionProvider", "gpu"), ("ggml", None)],
        available=[CPU],
        ep_devices=[*OPENVINO, GGML_CPU],
    )
    assert [(ep, list(found)) for ep, found, _ in plan.devices] == [
        ("OpenVINOExecutionProvider", [OPENVINO[2]]),
        ("ggml", [GGML_CPU]),
    ]
    assert plan.explanation.startswith("OpenVINOExecutionProvider on NPU (vendor 0x8086 Intel); ggml on CPU")
    assert (
        "skipped OpenVINOExecutionProvider on GPU (OpenVINOExecutionProvider already chosen)"
        in plan.explanation
    )
    with pytest.raises(SessionCreateError, match=rf"model 'm': devices asks for {WEBGPU}.*no device offered"):
        plan_session(
            [CPU], {}, [("ggml", "cpu"), (WEBGPU, "gpu")], available=[CPU], ep_devices=[GGML_CPU], model="m"
        )
    with pytest.raises(SessionCreateError, match=r"asks for ggml.*ggml on NPU: it offers only CPU"):
        plan_session([CPU], {}, [("ggml", "npu")], available=[CPU], ep_devices=[GGML_CPU])
    for bad in ([("ggml", "tpu")], ["ggml"], [], [(1, "cpu")], "fastest"):
        with pytest.raises(SessionCreateError, match="devices|policy"):
            plan_session([CPU], {}, bad, available=[CPU], ep_devices=[GGML_CPU])


def test_a_policy_the_callers_before_the_blobs() -> None:
    offered = [device(CPU), GGML_CPU]
    blob = plan_session(["ggml", CPU], {}, None, available=[CPU], ep_devices=offered, blob_policy="min_power")
    assert blob.policy == "min_power" and blob.providers is None and blob.devices == ()
    assert blob.explanation.startswith(
        "device policy min_power (from the blob header); onnxruntime picks among:"
    )
    assert "ggml on CPU (vendor 0x1022 AMD)" in blob.explanation
    caller = plan_session(
        [CPU], {}, "prefer_npu", available=[CPU], ep_devices=offered, blob_policy="min_power"
    )
    assert caller.policy == "prefer_npu" and "(given by the caller)" in caller.explanation
    pairs = plan_session(
        [CPU], {}, [("ggml", "cpu")], available=[CPU], ep_devices=offered, blob_policy="min_power"
    )
    assert pairs.policy is None and pairs.devices[0][0] == "ggml"
    # Every policy name maps onto an onnxruntime policy (this onnxruntime: 1.32.0).
    for policy in DEVICE_POLICIES:
        options = onnxruntime.SessionOptions()
        plan_session([CPU], {}, policy, available=[CPU], ep_devices=offered).configure(options)
        assert options.has_providers()


# --- the blob header's device_policy ---------------------------------------------------------------


def test_the_header_device_policy_is_written_only_when_set_and_checked_when_read() -> None:
    model = tiny_model().SerializeToString()
    plain = make_blob(model, "onnx")
    assert b"device_policy" not in plain and read_header(plain)[0].device_policy is None
    with_policy = make_blob(model, "onnx", device_policy="prefer_npu")
    assert read_header(with_policy)[0].device_policy == "prefer_npu"
    for bad, why in (("fastest", "not one of prefer_gpu"), (3, "wrong type")):
        with pytest.raises(CorruptBlobError, match=f"device_policy.*{why}"):
            read_header(repack(plain, device_policy=bad))


# --- on this onnxruntime (1.32.0: the API, no plugin library): the CPU EP's own device ------------


def test_devices_and_policies_on_the_cpu_eps_device(caplog: pytest.LogCaptureFixture) -> None:
    source = tiny_model().SerializeToString()
    x = sample_input()
    expected = run_source(source, x)
    blob = make_blob(source, "onnx", name="tiny")
    policy_blob = make_blob(source, "onnx", name="tiny", device_policy="prefer_cpu")
    with caplog.at_level(logging.INFO, logger="onnx_cooker.runtime"):
        by_pairs = session_from_blob(blob, devices=[(CPU, "CPU")])
        by_policy = session_from_blob(blob, devices="max_efficiency")
        by_header = session_from_blob(policy_blob)
    for session in (by_pairs, by_policy, by_header):
        assert session.get_providers() == [CPU]
        assert load_info(session).providers == (CPU,)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)
    lines = [r.getMessage() for r in caplog.records if r.name == "onnx_cooker.runtime"]
    assert any(line.startswith(f"tiny: using {CPU} on CPU (vendor 0x") for line in lines)
    assert any("device policy max_efficiency (given by the caller)" in line for line in lines)
    assert any("device policy prefer_cpu (from the blob header)" in line for line in lines)
    assert any(line == f"tiny: device policy prefer_cpu chose {CPU}" for line in lines)
    with pytest.raises(SessionCreateError, match="not both"):
        session_from_blob(blob, providers=[CPU], devices="prefer_cpu")
    with pytest.raises(SessionCreateError, match=rf"model 'tiny': devices asks for {WEBGPU}"):
        session_from_blob(blob, devices=[(WEBGPU, "gpu")])


def test_a_library_that_does_not_load_is_a_session_create_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "libonnxruntime_missing_ep.so"
    with pytest.raises(SessionCreateError, match=f"could not load the EP library {missing}.*as 'missing'"):
        register_ep_libraries({"missing": missing})
    blob = make_blob(tiny_model().SerializeToString(), "onnx", name="tiny")
    with pytest.raises(SessionCreateError, match=f"model 'tiny': .*{missing}"):
        session_from_blob(blob, ep_libraries={"missing": missing})
    register_ep_libraries({})  # nothing to do


# --- a real plugin EP: onnxruntime-ggml in onnxruntime 1.30.0 ---------------------------------------

PROBE = textwrap.dedent(
    """
    import json, logging, sys, warnings
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import onnxruntime
    import onnxruntime_ggml
    from onnx_cooker.runtime import SessionCreateError, load_info, open_bundle, register_ep_libraries
    from onnx_cooker.runtime import session_from_blob

    cases = Path(sys.argv[2])
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("onnx_cooker.runtime").addHandler(handler)
    logging.getLogger("onnx_cooker.runtime").setLevel(logging.INFO)
    library = {onnxruntime_ggml.EP_NAME: onnxruntime_ggml.library_path()}
    report = {"onnxruntime": onnxruntime.__version__, "ep_name": onnxruntime_ggml.EP_NAME}

    def load(name, **kwargs):
        options = onnxruntime.SessionOptions()
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        del lines[:]
        session = session_from_blob((cases / f"{name}.ocb").read_bytes(), session_options=options, **kwargs)
        x = np.load(cases / f"{name}.x.npy")
        got = session.run(None, {"x": x})[0]
        return {
            "providers": session.get_providers(),
            "load_info": list(load_info(session).providers),
            "placement": [
                [a.ep_name, [n.op_type for n in a.get_nodes()]]
                for a in session.get_provider_graph_assignment_info()
            ],
            "error": float(np.abs(got - np.load(cases / f"{name}.y.npy")).max()),
            "log": list(lines),
        }

    def refusal(call):
        try:
            call()
        except SessionCreateError as exc:
            return str(exc)
        return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        missing = {"ggml": "/nonexistent/libggml.so"}
        report["missing_library"] = refusal(lambda: register_ep_libraries(missing))
        report["whole"] = load("mlp", ep_libraries=library)
        register_ep_libraries(library)  # the same name and path again: nothing happens
        report["other_path"] = refusal(lambda: register_ep_libraries({"ggml": "/elsewhere/libggml.so"}))
        report["partial"] = load("conv_pool", ep_libraries=library)
        report["not_partial"] = load("conv_pool_plain", ep_libraries=library)
        report["classic"] = load("cpu_only")
        report["policy"] = load("cpu_only", devices="prefer_cpu")
        report["header_policy"] = load("header_policy")
        report["pairs"] = load("cpu_only", devices=[("ggml", "CPU")])
        report["no_device"] = refusal(lambda: load("cpu_only", devices=[("WebGpuExecutionProvider", "gpu")]))
        report["wrong_device"] = refusal(lambda: load("cpu_only", devices=[("ggml", "npu")]))
        bundle = open_bundle(cases / "bundle")
        report["bundle"] = bundle.session("mlp", ep_libraries=library).get_providers()
        report["bundle_devices"] = bundle.session("plain", devices=[("ggml", None)]).get_providers()
    report["warnings"] = [str(w.message) for w in caught]
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def ggml(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the probe saw in onnxruntime 1.30.0 with onnxruntime-ggml (one environment start)."""
    from runtime_helpers import run_in_runtime

    work = tmp_path_factory.mktemp("plugin-eps")
    cases = work / "cases"
    cases.mkdir()
    preference = [WEBGPU, "ggml", CPU]
    mlp = tiny_model().SerializeToString()
    conv = conv_pool_model().SerializeToString()
    conv_x = np.random.default_rng(2).standard_normal((1, 2, 16)).astype(np.float32)
    blobs = {
        "mlp": (mlp, sample_input(), {"execution_providers": preference}),
        "conv_pool": (
            conv,
            conv_x,
            {"execution_providers": preference, "provider_options": {"ggml": {"partial": 1}}},
        ),
        "conv_pool_plain": (conv, conv_x, {"execution_providers": preference}),
        "cpu_only": (mlp, sample_input(), {}),
        "header_policy": (mlp, sample_input(), {"device_policy": "prefer_cpu"}),
    }
    for name, (model, x, fields) in blobs.items():
        (cases / f"{name}.ocb").write_bytes(make_blob(model, "onnx", name=name, **fields))
        np.save(cases / f"{name}.x.npy", x)
        np.save(cases / f"{name}.y.npy", run_source(model, x))
    write_bundle(
        cases / "bundle",
        {
            "mlp": ("onnx", (cases / "mlp.ocb").read_bytes()),
            "plain": ("onnx", (cases / "cpu_only.ocb").read_bytes()),
        },
    )
    return run_in_runtime(GGML_RUNTIME, work, ["-c", PROBE, str(cases)], extras=(GGML_PACKAGE,))


# ggml keeps weights as float16 by default: outputs agree with the CPU EP to about 1e-3.
GGML_TOLERANCE = 2e-2


@pytest.mark.slow
def test_a_blob_preferring_the_plugin_ep_runs_wholly_on_it(ggml: dict[str, Any]) -> None:
    whole = ggml["whole"]
    assert ggml["ep_name"] == "ggml"
    assert whole["providers"] == ["ggml", CPU] == whole["load_info"]
    assert whole["placement"] == [["ggml", ["Gemm", "Relu"]]]  # MatMul+Add fused into Gemm, then Relu
    assert whole["error"] < GGML_TOLERANCE
    # The log line says which device was chosen and why the others were skipped.
    (line,) = [line for line in whole["log"] if ": using " in line]
    assert line.startswith("mlp: using ggml on CPU (vendor 0x")
    assert f"then {CPU} for the nodes they do not take (the blob prefers a plugin EP)" in line
    assert f"skipped {WEBGPU} (no device offered)" in line
    assert not ggml["warnings"]  # never both providers= and devices on the options


@pytest.mark.slow
def test_the_blobs_provider_options_reach_the_plugin_ep_and_the_cpu_takes_what_it_leaves(
    ggml: dict[str, Any],
) -> None:
    """With the blob's ``{"ggml": {"partial": 1}}`` ggml takes the conv and the CPU EP the pool;
    without it ggml declines the graph and the CPU EP runs all of it."""
    partial, plain = ggml["partial"], ggml["not_partial"]
    assert partial["placement"] == [["ggml", ["Conv"]], [CPU, ["MaxPool"]]]
    assert plain["placement"] == [[CPU, ["Conv"]], [CPU, ["MaxPool"]]]
    for case in (partial, plain):
        assert case["providers"] == ["ggml", CPU]
        assert case["error"] < GGML_TOLERANCE


@pytest.mark.slow
def test_policies_pairs_and_the_header_policy_choose_the_plugin_ep(ggml: dict[str, Any]) -> None:
    """A blob preferring only the CPU EP stays classic; a policy (the caller's or the header's) lets
    onnxruntime pick among the EP devices, and it picks ggml; pairs name it outright."""
    assert ggml["classic"]["providers"] == [CPU]
    assert ggml["classic"]["log"][0].startswith(f"cpu_only: using {CPU}; load path")
    for name, source in (("policy", "given by the caller"), ("header_policy", "from the blob header")):
        case = ggml[name]
        assert case["providers"] == ["ggml", CPU] == case["load_info"]
        assert case["placement"] == [["ggml", ["Gemm", "Relu"]]]
        assert case["error"] < GGML_TOLERANCE
        assert f"device policy prefer_cpu ({source}); onnxruntime picks among: " in case["log"][0]
        assert "ggml on CPU" in case["log"][0]
        assert case["log"][-1].endswith(f"device policy prefer_cpu chose ggml, {CPU}")
    pairs = ggml["pairs"]
    assert pairs["providers"] == ["ggml", CPU] and pairs["placement"] == [["ggml", ["Gemm", "Relu"]]]
    assert "(devices given by the caller)" in pairs["log"][0]
    assert ggml["bundle"] == ["ggml", CPU] == ggml["bundle_devices"]


@pytest.mark.slow
def test_explicit_devices_that_are_not_offered_and_bad_libraries_are_refused(ggml: dict[str, Any]) -> None:
    assert "model 'cpu_only': devices asks for WebGpuExecutionProvider" in ggml["no_device"]
    assert "no device offered" in ggml["no_device"] and "ggml on CPU" in ggml["no_device"]
    assert "ggml on NPU: it offers only CPU" in ggml["wrong_device"]
    assert "/nonexistent/libggml.so" in ggml["missing_library"]
    assert "cannot open shared object file" in ggml["missing_library"]  # onnxruntime's own words
    assert "already registered with" in ggml["other_path"] and "/elsewhere/libggml.so" in ggml["other_path"]


def test_a_blob_policy_does_not_pass_over_a_preferred_classic_ep() -> None:
    """onnxruntime's policies choose among EP devices only: a blob preferring OpenVINO (a classic EP
    of onnxruntime-openvino) with a device policy keeps its classic list, and the line says why; the
    caller's own policy is still obeyed."""
    ov = "OpenVINOExecutionProvider"
    options = {ov: {"device_type": "CPU"}}
    plan = plan_session(
        [ov, CPU], options, None, available=[ov, CPU], ep_devices=[device(CPU)], blob_policy="prefer_gpu"
    )
    assert plan.policy is None and plan.providers == ((ov, {"device_type": "CPU"}), (CPU, {}))
    assert plan.explanation.endswith(
        f"the blob's device policy prefer_gpu not used: {ov} is a classic EP here"
    )
    asked = plan_session([ov, CPU], options, "prefer_gpu", available=[ov, CPU], ep_devices=[device(CPU)])
    assert asked.policy == "prefer_gpu" and asked.providers is None
