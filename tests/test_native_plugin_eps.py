"""Plugin execution providers in the native loader (native/src/devices.c, plugin_eps.c): the C
decision against the Python loader's ``plan_session`` on the same cases, and a real plugin EP,
onnxruntime-ggml 0.2.0 in onnxruntime 1.30.0 (the C API library of that wheel), registered and put on
its device by ``oc-run --ep-library`` / ``--devices`` under the sanitizers."""

# ruff: noqa: F811  (the fixture native, imported from test_native, is a parameter here)
from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from runtime_helpers import RUNTIMES_CACHE, make_blob, run_source, sample_input, write_bundle

from onnx_cooker.build.target_check import ensure_runtime
from onnx_cooker.runtime import DEVICE_POLICIES as POLICIES
from onnx_cooker.runtime import SessionCreateError, plan_session
from tests.models import tiny_model
from tests.test_native import native, run_native  # noqa: F401  (native: the shared build fixture)

REPO = Path(__file__).resolve().parents[1]
CPU = "CPUExecutionProvider"
DML = "DmlExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"
WEBGPU = "WebGpuExecutionProvider"
GGML_RUNTIME = "1.30.0"
GGML_PACKAGE = "onnxruntime-ggml==0.2.0"
# onnxruntime 1.30.0's CreateEnv leaks one 14-byte string (the same with no plugin EP registered:
# LeakSanitizer's stack is CreateEnv's, called from oc_runtime_load), and the libgomp that ggml's
# wheel bundles leaks 8 bytes of thread state; neither is this library's. A registration onnxruntime
# refuses as "already registered under" loads the library again and calls its CreateEpFactories
# first, then never releases that factory (ggml's Factory::create, 274 bytes).
LSAN_SUPPRESSIONS = "leak:libonnxruntime.so.1.30.0\nleak:libgomp\nleak:onnxruntime_ggml2ep7factory\n"


# --- the decision: C and Python on the same plain-data cases ----------------------------------------


def _case(rng: random.Random, index: int) -> dict[str, Any]:
    pool = [CPU, DML, OPENVINO, WEBGPU, "ggml", "QNNExecutionProvider", "CUDAExecutionProvider"]
    vendors = [(0x8086, "Intel"), (0x1022, "AMD"), (0x10DE, "NVIDIA"), (0x0, "")]
    preference = rng.sample(pool, rng.randint(0, 4))
    if rng.random() < 0.2 and preference:
        preference.append(preference[0])  # a repeated name
    available = [ep for ep in pool if ep not in ("ggml",) and rng.random() < 0.5]
    if CPU not in available:
        available.append(CPU)
    ep_devices = None
    if rng.random() < 0.85:
        ep_devices = [{"ep": CPU, "type": "cpu", "vendor_id": 0x8086, "vendor": "Intel"}]
        for _ in range(rng.randint(0, 4)):
            vendor_id, vendor = rng.choice(vendors)
            ep_devices.append(
                {
                    "ep": rng.choice(["ggml", OPENVINO, WEBGPU, DML, "QNNExecutionProvider"]),
                    "type": rng.choice(["cpu", "gpu", "npu"]),
                    "vendor_id": vendor_id,
                    "vendor": vendor,
                }
            )
    roll = rng.random()
    selection: Any = None
    if roll < 0.2:
        selection = rng.choice([*POLICIES, "bogus", ""])
    elif roll < 0.55:
        selection = [
            [rng.choice(pool + ["ggml", "ggml"]), rng.choice(["cpu", "gpu", "npu", None, None])]
            for _ in range(rng.randint(0, 3))
        ]
        if rng.random() < 0.05 and selection:
            selection[0][1] = "tpu"  # a type that is none
    blob_policy = rng.choice([None, None, None, *POLICIES])
    return {
        "preference": preference,
        "available": available,
        "ep_devices": ep_devices,
        "selection": selection,
        "blob_policy": blob_policy,
        "model": f"m{index}",
        "runtime": rng.choice(["1.20.1", "1.30.0"]),
    }


NAMED_CASES = [
    # the blob prefers a plugin EP that offers a device, after one that offers none
    {"preference": [WEBGPU, "ggml", CPU], "available": [CPU], "ep_devices": "ggml"},
    # DirectML with a plugin EP: exclusive with anything but the CPU
    {"preference": [DML, "ggml", CPU], "available": [DML, CPU], "ep_devices": "ggml"},
    # a blob policy passed over for a preferred classic EP
    {
        "preference": [OPENVINO, CPU],
        "available": [OPENVINO, CPU],
        "ep_devices": "ggml",
        "blob_policy": "prefer_npu",
    },
    # no plugin-EP API: policies ignored, pairs by name, a missing name refused
    {"preference": [CPU], "available": [CPU], "ep_devices": None, "blob_policy": "prefer_gpu"},
    {"preference": [CPU], "available": [DML, CPU], "ep_devices": None, "selection": [[DML, "gpu"]]},
    {"preference": [CPU], "available": [CPU], "ep_devices": None, "selection": [["ggml", None]]},
    # pairs: a device type the EP lacks, the same EP twice, nothing named at all
    {"preference": [CPU], "available": [CPU], "ep_devices": "ggml", "selection": [["ggml", "gpu"]]},
    {
        "preference": [CPU],
        "available": [CPU],
        "ep_devices": "ggml",
        "selection": [["ggml", "gpu"], ["ggml", "cpu"]],
    },
    {"preference": [CPU], "available": [CPU], "ep_devices": "ggml", "selection": []},
]


def _named(case: dict[str, Any], index: int) -> dict[str, Any]:
    devices = case["ep_devices"]
    if devices == "ggml":
        devices = [
            {"ep": CPU, "type": "cpu", "vendor_id": 0x8086, "vendor": "Intel"},
            {"ep": "ggml", "type": "cpu", "vendor_id": 0x8086, "vendor": "Intel"},
        ]
    return {
        "selection": None,
        "blob_policy": None,
        "model": f"named{index}",
        "runtime": "1.30.0",
        **case,
        "ep_devices": devices,
    }


def _python(case: dict[str, Any]) -> dict[str, Any]:
    devices = None
    if case["ep_devices"] is not None:
        devices = [
            SimpleNamespace(
                ep_name=d["ep"],
                device=SimpleNamespace(type=d["type"].upper(), vendor_id=d["vendor_id"], vendor=d["vendor"]),
            )
            for d in case["ep_devices"]
        ]
    selection = case["selection"]
    if isinstance(selection, list):
        selection = [tuple(pair) for pair in selection]
    try:
        plan = plan_session(
            case["preference"],
            {},
            selection,
            available=case["available"],
            ep_devices=devices,
            blob_policy=case["blob_policy"],
            model=case["model"],
            runtime=case["runtime"],
        )
    except SessionCreateError as exc:
        return {"status": "OC_ERR_SESSION_CREATE", "message": str(exc)}
    indices = {id(d): i for i, d in enumerate(devices or [])}
    return {
        "status": "OC_OK",
        "message": "",
        "kind": "devices" if plan.devices else "policy" if plan.policy else "classic",
        "names": list(plan.names),
        "devices": [[ep, [indices[id(d)] for d in found]] for ep, found, _ in plan.devices],
        "policy": plan.policy,
        "explanation": plan.explanation,
    }


def _c_words(message: str) -> str:
    """A Python message in the C library's words (its API names where Python names its own)."""
    return message.replace("onnxruntime.get_ep_devices() offers", "GetEpDevices offers").replace(
        "register its library with ep_libraries", "register its library with oc_runtime_register_ep_library"
    )


def test_the_c_decision_is_the_python_loaders_on_every_case(native: Path) -> None:
    """devices.c against plan_session on named cases (each rule) and 3,000 random ones: the same kind
    of plan, EP names, devices, policy and explanation, or the same refusal in the same words."""
    rng = random.Random(2026)
    cases = [_named(case, i) for i, case in enumerate(NAMED_CASES)]
    cases += [_case(rng, i) for i in range(3000)]
    done = run_native([native / "test_devices"], input="".join(json.dumps(c) + "\n" for c in cases))
    got = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(got) == len(cases)
    kinds, refusals, fallbacks = set(), 0, 0
    for case, c in zip(cases, got, strict=True):
        want = _python(case)
        fallbacks += case["ep_devices"] is None  # onnxruntime < 1.22: no GetApi(22), no device to pick
        assert c["status"] == want["status"], (case, c, want)
        if want["status"] != "OC_OK":
            refusals += 1
            expected = _c_words(want["message"])
            if "devices must be a policy" in expected:  # Python quotes the whole selection, C the pair
                head = expected.split(" not ")[0]
                assert c["message"].startswith(head), (case, c["message"], expected)
            else:
                assert c["message"] == expected, case
            continue
        kinds.add(want["kind"])
        assert {k: c.get(k) for k in want} == want, case
    # every kind of plan and every refusal path came up
    assert kinds == {"classic", "devices", "policy"} and refusals > 50 and fallbacks > 100


# --- a real plugin EP through oc-run ----------------------------------------------------------------


@pytest.fixture(scope="module")
def ggml_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """onnxruntime 1.30.0 + onnxruntime-ggml 0.2.0 (its own environment): the C API library, the EP
    library, and a bundle of blobs preferring ggml, or not, or with a header device policy."""
    python = ensure_runtime(
        GGML_RUNTIME, RUNTIMES_CACHE, REPO / "platforms" / "windows-dml.yaml", extras=(GGML_PACKAGE,)
    )
    found = subprocess.run(
        [
            str(python),
            "-c",
            "import onnxruntime, onnxruntime_ggml, pathlib, json;"
            " capi = pathlib.Path(onnxruntime.__file__).parent / 'capi';"
            " print(json.dumps([str(sorted(capi.glob('libonnxruntime.so.*'))[0]),"
            " onnxruntime_ggml.library_path(), onnxruntime_ggml.EP_NAME]))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    ort, library, name = json.loads(found.stdout)
    work = tmp_path_factory.mktemp("native-plugin-eps")
    mlp = tiny_model().SerializeToString()
    preference = [WEBGPU, name, CPU]
    write_bundle(
        work / "bundle",
        {
            "mlp": ("onnx", make_blob(mlp, "onnx", name="mlp", execution_providers=preference)),
            "plain": ("onnx", make_blob(mlp, "onnx", name="plain")),
            "header_policy": (
                "onnx",
                make_blob(mlp, "onnx", name="header_policy", device_policy="prefer_cpu"),
            ),
        },
    )
    np.save(work / "x.npy", sample_input())
    suppressions = work / "lsan.supp"
    suppressions.write_text(LSAN_SUPPRESSIONS)
    return {
        "ort": ort,
        "library": library,
        "name": name,
        "work": work,
        "expected": run_source(mlp, sample_input()),
        "env": {"LSAN_OPTIONS": f"suppressions={suppressions}"},
    }


def oc_run(native: Path, env: dict[str, Any], model: str, *extra: str, check: bool = True, out: str = ""):
    args = [native / "oc-run", "--bundle", env["work"] / "bundle", "--model", model, "--ort", env["ort"]]
    if out:
        args += ["--in", env["work"] / "x.npy", "--out", env["work"] / out]
    return run_native([*args, *extra], check=check, env=env["env"])


# ggml keeps weights as float16 by default: outputs agree with the CPU EP to about 1e-3.
GGML_TOLERANCE = 2e-2


def test_oc_run_registers_a_plugin_ep_and_puts_the_blobs_model_on_its_device(
    native: Path, ggml_env: dict[str, Any]
) -> None:
    """A blob preferring [WebGPU, ggml, CPU]: with the library registered, ggml on the CPU device
    (WebGPU skipped: no device); without it, the classic list. Outputs are the source model's."""
    ep = f"{ggml_env['name']}={ggml_env['library']}"
    plugin = oc_run(native, ggml_env, "mlp", "--ep-library", ep, out="plugin")
    assert "onnxruntime 1.30.0" in plugin.stdout
    assert (
        "eps: ggml on CPU (vendor 0x" in plugin.stdout
        and f"then {CPU} for the nodes they do not take (the blob prefers a plugin EP); "
        f"skipped {WEBGPU} (no device offered)"
        in plugin.stdout
    ), plugin.stdout
    assert "CreateEp ep=ggml" in plugin.stderr  # ggml's own log: onnxruntime really made its EP
    got = np.load(ggml_env["work"] / "plugin" / "y.npy")
    assert np.abs(got - ggml_env["expected"]).max() < GGML_TOLERANCE

    classic = oc_run(native, ggml_env, "mlp", out="classic")
    assert (
        f"eps: {CPU}; skipped {WEBGPU} (not offered by this onnxruntime build); skipped ggml (not offered"
        in (classic.stdout)
    )
    assert "CreateEp" not in classic.stderr
    np.testing.assert_allclose(
        np.load(ggml_env["work"] / "classic" / "y.npy"), ggml_env["expected"], rtol=1e-5
    )


def test_oc_run_devices_pairs_and_policies_reach_onnxruntime(native: Path, ggml_env: dict[str, Any]) -> None:
    ep = f"{ggml_env['name']}={ggml_env['library']}"
    pairs = oc_run(native, ggml_env, "plain", "--ep-library", ep, "--devices", "ggml:cpu", out="pairs")
    assert "(devices given by the caller)" in pairs.stdout and "CreateEp ep=ggml" in pairs.stderr
    assert np.abs(np.load(ggml_env["work"] / "pairs" / "y.npy") - ggml_env["expected"]).max() < GGML_TOLERANCE
    policy = oc_run(native, ggml_env, "plain", "--ep-library", ep, "--devices", "prefer_cpu")
    assert "eps: device policy prefer_cpu (given by the caller); onnxruntime picks among: " in policy.stdout
    assert "ggml on CPU" in policy.stdout
    header = oc_run(native, ggml_env, "header_policy", "--ep-library", ep)
    assert "eps: device policy prefer_cpu (from the blob header)" in header.stdout


def test_oc_run_refuses_what_cannot_be_loaded_or_chosen_and_names_the_fix(
    native: Path, ggml_env: dict[str, Any]
) -> None:
    ep = f"{ggml_env['name']}={ggml_env['library']}"
    wrong = oc_run(native, ggml_env, "plain", "--ep-library", ep, "--devices", "ggml:gpu", check=False)
    assert wrong.returncode == 1
    assert "devices asks for ggml, but none of its devices can be used (ggml on GPU: it offers only CPU)" in (
        wrong.stderr
    )
    assert "register its library with oc_runtime_register_ep_library" in wrong.stderr
    missing = oc_run(native, ggml_env, "plain", "--ep-library", "ggml=/nonexistent/libggml.so", check=False)
    assert missing.returncode == 1
    assert "could not load the EP library /nonexistent/libggml.so (as 'ggml')" in missing.stderr
    assert "check the path" in missing.stderr
    twice = oc_run(
        native,
        ggml_env,
        "plain",
        "--ep-library",
        ep,
        "--ep-library",
        "ggml=/elsewhere/libggml.so",
        check=False,
    )
    assert twice.returncode == 1 and "EP library name 'ggml' is already registered with " in twice.stderr
    again = oc_run(native, ggml_env, "plain", "--ep-library", ep, "--ep-library", ep)  # same: nothing happens
    assert "session ready" in again.stdout
    explicit = oc_run(native, ggml_env, "plain", "--ep", CPU)  # the caller's EPs, said as Python says them
    assert f"eps: {CPU} (given by the caller)" in explicit.stdout
    bogus = oc_run(native, ggml_env, "plain", "--devices", "fastest", check=False)
    assert bogus.returncode == 1 and "unknown device policy 'fastest'" in bogus.stderr
    usage = run_native([native / "oc-run", "--file", "x.onnx", "--devices", "prefer_cpu"], check=False)
    assert usage.returncode == 2 and "--devices and --ep-library go with --bundle" in usage.stderr


def test_a_name_the_engine_registered_itself_is_taken_as_registered(
    native: Path, ggml_env: dict[str, Any]
) -> None:
    """An engine that registered the plugin EP through its own OrtApi on the shared OrtEnv: the
    library's registration of that name succeeds (onnxruntime says "already registered under"), and
    the blob preferring it gets its device (test_cxx_header, the C++ header)."""
    done = run_native(
        [
            native / "test_cxx_header",
            ggml_env["work"] / "bundle",
            "mlp",
            ggml_env["ort"],
            ggml_env["name"],
            ggml_env["library"],
        ],
        env=ggml_env["env"],
    )
    assert "engine registered ggml: ok" in done.stdout
    assert "registered again through the library" in done.stdout
    assert "eps: ggml on CPU (vendor 0x" in done.stdout and "(the blob prefers a plugin EP)" in done.stdout
