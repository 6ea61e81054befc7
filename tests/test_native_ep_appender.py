"""The engine's own EPs in the native loader: ``oc_runtime_set_ep_appender`` (a console's EP, which
its onnxruntime build appends through a function of its own) run by ``test_ep_appender`` under the
sanitizers in onnxruntime 1.24.4, 1.28.0 and 1.32.0, on ONNX and ORT blobs that prefer an EP no
onnxruntime here offers."""

# ruff: noqa: F811  (the fixture native, imported from test_native, is a parameter here)
from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtime_helpers import make_blob, to_ort_format

from onnx_cooker.runtime import session_from_blob
from tests.models import tiny_model
from tests.test_native import VERSIONS, native, ort_library, run_native  # noqa: F401

EP = "ConsoleGpuExecutionProvider"
CPU = "CPUExecutionProvider"
OPTIONS = {"device_id": "0", "queue": "async"}


def _blob(model_format: str, folder: Path) -> bytes:
    """tiny_model with its batch named "batch", as a blob preferring EP with provider options."""
    model = tiny_model()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    source = model.SerializeToString()
    graph = to_ort_format(source, folder) if model_format == "ort" else source
    return make_blob(
        graph, model_format, name="net", execution_providers=[EP, CPU], provider_options={EP: OPTIONS}
    )


@pytest.mark.parametrize("model_format", ["onnx", "ort"])
@pytest.mark.parametrize("version", VERSIONS)
def test_an_engines_appender_puts_its_ep_on_the_sessions_options(
    native: Path, tmp_path: Path, version: str, model_format: str
) -> None:
    blob = _blob(model_format, tmp_path)
    path = tmp_path / f"net.{model_format}.ocb"
    path.write_bytes(blob)
    done = run_native([native / "test_ep_appender", ort_library(version), path, EP])
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    steps = {line["step"]: line for line in lines if "step" in line}
    checks = {line["check"]: line for line in lines if "check" in line}

    # Without an appender an EP onnxruntime does not offer is passed over, as the Python loader does.
    none = steps["no appender"]
    assert none["status"] == "OC_OK" and none["calls"] == 0 and none["first_dim"] == -1, none
    python = session_from_blob(blob)
    assert python.get_providers() == [CPU]
    assert none["explanation"] == f"{CPU}; skipped {EP} (not offered by this onnxruntime build)", none

    # With one, the blob's preference takes the EP as offered and the appender gets the blob's provider
    # options; what it put on the options (the batch fixed at 1) is in the session it made (ONNX: an
    # ORT-format model is loaded as saved, without the graph pass that applies such overrides).
    fixed = 1 if model_format == "onnx" else -1
    with_it = steps["appender"]
    assert with_it["status"] == "OC_OK", with_it
    assert with_it["calls"] == 1 and with_it["ep"] == EP, with_it
    assert sorted(with_it["options"].rstrip(";").split(";")) == sorted(f"{k}={v}" for k, v in OPTIONS.items())
    assert with_it["first_dim"] == fixed, with_it
    assert with_it["explanation"] == f"{EP}, {CPU}", with_it

    # Its failure is the session's: the status, the model, the EP and the appender's own words.
    failed = steps["failing appender"]
    assert failed["status"] == "OC_ERR_SESSION_CREATE" and failed["calls"] == 2, failed
    assert failed["message"].startswith(f"{path}: "), failed
    words = f"model 'net': the engine's appender of {EP} failed: no {EP} device in this devkit"
    assert words in failed["message"], failed

    # The caller's providers naming it go through it too (low_memory besides).
    given = steps["providers"]
    assert given["status"] == "OC_OK" and given["calls"] == 3 and given["first_dim"] == fixed, given

    # Removed: the blob's preference passes over it again; named by the caller, it is refused with
    # what this onnxruntime offers.
    passed_over = steps["removed, blob's preference"]
    assert passed_over["status"] == "OC_OK" and passed_over["calls"] == 3, passed_over
    assert passed_over["first_dim"] == -1, passed_over
    refused = steps["removed, providers"]
    assert refused["status"] == "OC_ERR_SESSION_CREATE" and refused["calls"] == 3, refused
    assert f"{EP} is no execution provider this onnxruntime ({version}) offers" in refused["message"], refused

    assert checks["cpu"]["status"] == checks["empty"]["status"] == "OC_ERR_INVALID_ARGUMENT"
    assert checks["null runtime"]["status"] == "OC_ERR_INVALID_ARGUMENT"
    assert checks["remove unknown"]["status"] == "OC_OK"
    # 16 places, one kept by the removed appender: 15 more are taken, the 16th is refused
    assert checks["table"] == {"check": "table", "taken": 15, "status": "OC_ERR_INVALID_ARGUMENT"}


def test_the_model_is_the_one_the_appender_was_asked_for(tmp_path: Path) -> None:
    """The blob the test gives test_ep_appender is what it says: a free batch named "batch", the EP
    preferred with its options (so a first_dim of 1 above can only come from the appender)."""
    from onnx_cooker.runtime import read_header

    blob = _blob("onnx", tmp_path)
    header, _ = read_header(blob)
    assert list(header.execution_providers) == [EP, CPU]
    assert dict(header.provider_options[EP]) == OPTIONS
    session = session_from_blob(blob)
    assert session.get_inputs()[0].shape[0] == "batch"
    assert tiny_model().graph.input[0].name == session.get_inputs()[0].name
