"""Sessions from blobs (onnx_cooker/runtime/session.py), bundles (bundle.py) and the inspect CLI."""

from __future__ import annotations

import gc
import json
import logging
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from runtime_helpers import (
    CPU,
    REPO,
    make_blob,
    numpy_reference,
    run_source,
    sample_input,
    write_bundle,
)

from onnx_cooker.runtime import open_bundle
from onnx_cooker.runtime.__main__ import stock_unpack_commands
from onnx_cooker.runtime.blob import decode_blob
from onnx_cooker.runtime.errors import (
    BundleError,
    ChecksumMismatchError,
    IncompatibleRuntimeError,
    ManifestError,
    SessionCreateError,
    UnknownModelError,
)
from onnx_cooker.runtime.header import read_header
from onnx_cooker.runtime.session import (
    check_runtime,
    choose_providers,
    session_from_blob,
    session_options_for,
)
from tests.models import tiny_model

DML = "DmlExecutionProvider"
XNNPACK = "XnnpackExecutionProvider"
NNAPI = "NnapiExecutionProvider"
COREML = "CoreMLExecutionProvider"
CPU_EP = "CPUExecutionProvider"
FORMATS = ("onnx", "ort")
ZERO_COPY = "session.use_ort_model_bytes_for_initializers"
SAVED_OPTIMIZATIONS = "session.enable_saved_runtime_optimizations"


def config_entry(options: onnxruntime.SessionOptions, key: str) -> str | None:
    """A session config entry, or None when it was never set (onnxruntime raises for unknown keys)."""
    try:
        return options.get_session_config_entry(key)
    except RuntimeError as exc:
        assert "does not have configuration with key" in str(exc)
        return None


# --- choose_providers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preference", "available", "chosen", "skipped"),
    [
        pytest.param(
            [COREML, CPU_EP],
            [CPU_EP],
            [CPU_EP],
            [(COREML, "not offered by this onnxruntime build")],
            id="unavailable-skipped-with-reason",
        ),
        pytest.param([XNNPACK], [XNNPACK, CPU_EP], [XNNPACK, CPU_EP], [], id="cpu-added-as-fallback"),
        pytest.param([CPU_EP, XNNPACK], [XNNPACK, CPU_EP], [XNNPACK, CPU_EP], [], id="cpu-always-last"),
        pytest.param(
            [NNAPI, XNNPACK, CPU_EP],
            [NNAPI, XNNPACK, CPU_EP],
            [NNAPI, XNNPACK, CPU_EP],
            [],
            id="ordinary-eps-combine",
        ),
        pytest.param(
            [DML, XNNPACK, CPU_EP],
            [DML, XNNPACK, CPU_EP],
            [DML, CPU_EP],
            [(XNNPACK, f"cannot be combined with {DML}")],
            id="dml-only-with-cpu",
        ),
        pytest.param(
            [XNNPACK, DML],
            [DML, XNNPACK, CPU_EP],
            [XNNPACK, CPU_EP],
            [(DML, f"cannot be combined with {XNNPACK}")],
            id="dml-not-joined-to-others",
        ),
        pytest.param(
            [DML, XNNPACK],
            [XNNPACK, CPU_EP],
            [XNNPACK, CPU_EP],
            [(DML, "not offered by this onnxruntime build")],
            id="missing-dml-does-not-block-others",
        ),
        pytest.param([], [CPU_EP], [CPU_EP], [], id="empty-preference"),
    ],
)
def test_choose_providers(
    preference: list[str], available: list[str], chosen: list[str], skipped: list[tuple[str, str]]
) -> None:
    assert choose_providers(preference, available) == (chosen, skipped)


# --- session options ------------------------------------------------------------------------------


def header_of(blob: bytes):
    return read_header(blob)[0]


def test_ep_session_options_reach_the_session(models: dict[str, bytes]) -> None:
    blob = make_blob(
        models["onnx"], "onnx", ep_session_options={CPU_EP: {"session.intra_op.allow_spinning": "0"}}
    )
    session = session_from_blob(blob)
    assert config_entry(session.get_session_options(), "session.intra_op.allow_spinning") == "0"


def test_dml_session_options_apply_only_when_dml_is_used(models: dict[str, bytes]) -> None:
    header = header_of(
        make_blob(
            models["onnx"],
            "onnx",
            execution_providers=[DML, CPU_EP],
            ep_session_options={DML: {"enable_mem_pattern": False, "execution_mode": "sequential"}},
        )
    )

    def parallel_options() -> onnxruntime.SessionOptions:
        options = onnxruntime.SessionOptions()
        options.execution_mode = onnxruntime.ExecutionMode.ORT_PARALLEL
        return options

    with_dml = session_options_for(header, [DML, CPU_EP], parallel_options())
    cpu_only = session_options_for(header, [CPU_EP], parallel_options())

    assert with_dml.enable_mem_pattern is False
    assert with_dml.execution_mode == onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    assert cpu_only.enable_mem_pattern is True
    assert cpu_only.execution_mode == onnxruntime.ExecutionMode.ORT_PARALLEL


def test_graph_optimization_level_option(models: dict[str, bytes]) -> None:
    header = header_of(
        make_blob(models["ort"], "ort", ep_session_options={CPU_EP: {"graph_optimization_level": "basic"}})
    )
    options = session_options_for(header, [CPU_EP])
    assert options.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC


def test_bad_session_option_value_is_a_session_create_error(models: dict[str, bytes]) -> None:
    blob = make_blob(
        models["onnx"],
        "onnx",
        execution_providers=[DML, CPU_EP],
        ep_session_options={DML: {"execution_mode": "sideways"}},
    )
    refused = f"model 'tiny': bad session option for {DML}: execution_mode 'sideways'; "
    with pytest.raises(SessionCreateError, match=refused):
        session_options_for(header_of(blob), [DML, CPU_EP])


@pytest.mark.parametrize("saved", [True, False])
def test_saved_runtime_optimizations_flag(saved: bool, models: dict[str, bytes]) -> None:
    blob = make_blob(models["ort"], "ort", saved_runtime_optimizations=saved)
    session = session_from_blob(blob)
    value = config_entry(session.get_session_options(), SAVED_OPTIMIZATIONS)
    # Unset and "0" both leave the saved optimizations unused.
    assert (value == "1") if saved else (value in (None, "0"))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("saved", [True, False])
@pytest.mark.parametrize("providers", [None, [DML, CPU_EP]])
def test_zero_copy_initializers_are_never_enabled(
    fmt: str, saved: bool, providers: list[str] | None, models: dict[str, bytes]
) -> None:
    # docs/design.md, "Loading from memory": from Python this option makes onnxruntime read freed memory.
    header = header_of(
        make_blob(
            models[fmt],
            fmt,
            saved_runtime_optimizations=saved,
            ep_session_options={
                DML: {"enable_mem_pattern": False},
                CPU_EP: {"session.intra_op.allow_spinning": "0"},
            },
        )
    )
    options = session_options_for(header, providers or [CPU_EP])
    assert config_entry(options, ZERO_COPY) is None
    assert config_entry(options, "session.intra_op.allow_spinning") == "0"


def test_header_cannot_enable_zero_copy_initializers(models: dict[str, bytes]) -> None:
    blob = make_blob(models["ort"], "ort", ep_session_options={CPU_EP: {ZERO_COPY: "1"}})
    try:
        session = session_from_blob(blob)
    except SessionCreateError as exc:
        assert ZERO_COPY in str(exc)
        return
    assert config_entry(session.get_session_options(), ZERO_COPY) != "1"


def test_caller_session_options_do_not_leak_between_blobs(models: dict[str, bytes]) -> None:
    shared = onnxruntime.SessionOptions()
    session_from_blob(
        make_blob(models["ort"], "ort", saved_runtime_optimizations=True), session_options=shared
    )
    second = session_from_blob(
        make_blob(models["ort"], "ort", saved_runtime_optimizations=False), session_options=shared
    )
    assert config_entry(second.get_session_options(), SAVED_OPTIMIZATIONS) != "1"


def test_caller_session_options_are_kept(models: dict[str, bytes]) -> None:
    base = onnxruntime.SessionOptions()
    base.intra_op_num_threads = 1
    base.add_session_config_entry("session.inter_op.allow_spinning", "0")
    blob = make_blob(
        models["onnx"], "onnx", ep_session_options={CPU_EP: {"session.intra_op.allow_spinning": "0"}}
    )

    options = session_from_blob(blob, session_options=base).get_session_options()

    assert options.intra_op_num_threads == 1
    assert config_entry(options, "session.inter_op.allow_spinning") == "0"
    assert config_entry(options, "session.intra_op.allow_spinning") == "0"


# --- provider choice and its log line -------------------------------------------------------------


def test_default_providers_log_the_choice_and_every_skipped_ep(
    models: dict[str, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    blob = make_blob(models["onnx"], "onnx", name="upscaler", execution_providers=[DML, XNNPACK, CPU_EP])
    expected, skipped = choose_providers([DML, XNNPACK, CPU_EP], onnxruntime.get_available_providers())

    with caplog.at_level(logging.INFO, logger="onnx_cooker.runtime"):
        session = session_from_blob(blob)

    assert session.get_providers() == expected
    records = [r for r in caplog.records if r.name == "onnx_cooker.runtime"]
    assert len(records) == 1
    message = records[0].getMessage()
    assert message.startswith(f"upscaler: using {', '.join(expected)}")
    assert skipped, "this machine should lack at least one of DirectML/XNNPACK"
    for ep, reason in skipped:
        assert f"skipped {ep} ({reason})" in message


def test_explicit_providers_override_the_blob(
    models: dict[str, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    blob = make_blob(
        models["onnx"],
        "onnx",
        execution_providers=[DML, CPU_EP],
        ep_session_options={DML: {"enable_mem_pattern": False}},
    )
    with caplog.at_level(logging.INFO, logger="onnx_cooker.runtime"):
        session = session_from_blob(blob, providers=[(CPU_EP, {})])

    assert session.get_providers() == [CPU_EP]
    # DirectML is not used, so its session options are not applied either.
    assert session.get_session_options().enable_mem_pattern is True
    assert f"tiny: using {CPU_EP} (given by the caller)" in caplog.text
    assert "skipped" not in caplog.text


# --- outputs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_outputs_match_the_source_after_the_blob_buffer_is_gone(
    fmt: str, models: dict[str, bytes], source: bytes
) -> None:
    x = sample_input(rows=5)
    expected = run_source(source, x)
    blob = bytearray(make_blob(models[fmt], fmt))
    size = len(blob)

    session = session_from_blob(blob)
    # Drop the blob and fill the heap with same-size buffers of garbage, so a session that still
    # pointed into the blob (or into the decompressed copy) would read something else.
    del blob
    gc.collect()
    garbage = [bytearray(b"\xa5") * n for n in (size, len(models[fmt])) for _ in range(16)]

    actual = session.run(None, {"x": x})[0]
    assert len(garbage) == 32
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(actual, numpy_reference(tiny_model(seed=0), x), rtol=1e-5, atol=1e-5)


def test_intact_blob_of_a_broken_model_is_a_session_create_error() -> None:
    blob = make_blob(b"\x08\x07definitely not a protobuf model", "onnx", name="broken")
    with pytest.raises(
        SessionCreateError,
        match=rf"onnxruntime {onnxruntime.__version__} could not create a session for model 'broken' "
        r"\(test-platform, onnx, load path onnx-inline\)",
    ):
        session_from_blob(blob)


def test_check_runtime_compares_against_the_given_version(models: dict[str, bytes]) -> None:
    header = header_of(make_blob(models["ort"], "ort", min_runtime_version="1.16"))
    check_runtime(header, installed="1.16.0")
    check_runtime(header, installed="1.32.0+cpu")
    with pytest.raises(
        IncompatibleRuntimeError,
        match=r"\(test-platform, ORT format v6\) needs onnxruntime 1\.16\.0 .* but 1\.15\.1",
    ):
        check_runtime(header, installed="1.15.1")


# --- bundles --------------------------------------------------------------------------------------


@pytest.fixture
def bundle_dir(tmp_path: Path, models: dict[str, bytes]) -> Path:
    return write_bundle(
        tmp_path / "android",
        {
            "denoiser": ("onnx", make_blob(models["onnx"], "onnx", name="denoiser", platform="android")),
            "upscaler": ("ort", make_blob(models["ort"], "ort", name="upscaler", platform="android")),
        },
        platform="android",
        cooker="onnx-cooker test",
    )


def write_manifest(root: Path, manifest: object) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest))


def manifest_of(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


@pytest.mark.parametrize("via", ["folder", "manifest"])
def test_open_bundle_by_folder_or_manifest(via: str, bundle_dir: Path) -> None:
    bundle = open_bundle(bundle_dir if via == "folder" else bundle_dir / "manifest.json")
    assert bundle.root == bundle_dir
    assert bundle.platform == "android"
    assert bundle.names == ("denoiser", "upscaler")


def test_bundle_info_is_the_manifest_entry_and_a_copy(bundle_dir: Path) -> None:
    bundle = open_bundle(str(bundle_dir))
    info = bundle.info("upscaler")
    assert info == manifest_of(bundle_dir)["models"]["upscaler"]
    assert info["file"] == "upscaler.ort.ocb"
    info["file"] = "changed"
    assert bundle.info("upscaler")["file"] == "upscaler.ort.ocb"


@pytest.mark.parametrize("name", ["denoiser", "upscaler"])
def test_bundle_session_outputs(name: str, bundle_dir: Path, source: bytes) -> None:
    bundle = open_bundle(bundle_dir)
    x = sample_input(seed=3)
    session = bundle.session(name, providers=CPU)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], run_source(source, x), rtol=1e-6, atol=1e-6)
    header, _ = decode_blob(bundle.read_blob(name))
    assert (header.name, header.model_format) == (name, bundle.info(name)["format"])


def test_a_loading_screen_hears_each_stage_start_and_end(bundle_dir: Path) -> None:
    heard: list[tuple[str, float]] = []
    bundle = open_bundle(bundle_dir)
    bundle.session("upscaler", providers=CPU, progress=lambda stage, done: heard.append((stage, done)))
    stages = ["read", "check", "decompress", "session"]
    assert heard == [(stage, done) for stage in stages for done in (0.0, 1.0)]
    heard.clear()
    session_from_blob(bundle.read_blob("denoiser"), providers=CPU, progress=lambda s, d: heard.append((s, d)))
    assert heard == [(stage, done) for stage in stages[2:] for done in (0.0, 1.0)]


def test_unknown_model_suggests_a_near_miss(bundle_dir: Path) -> None:
    bundle = open_bundle(bundle_dir)
    with pytest.raises(
        UnknownModelError, match=r"has no model 'denoisr'; did you mean 'denoiser'\?"
    ) as caught:
        bundle.session("denoisr")
    assert isinstance(caught.value, KeyError)
    with pytest.raises(UnknownModelError, match=r"has no model 'zzz'; it has denoiser, upscaler"):
        bundle.info("zzz")


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"cannot read .*manifest\.json: No such file or directory"):
        open_bundle(tmp_path)
    with pytest.raises(ManifestError, match="cannot read .*nowhere"):
        open_bundle(tmp_path / "nowhere")


def test_the_command_line_names_a_missing_path_and_the_bundle_meant(
    bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m onnx_cooker.runtime inspect/unpack` of a path that is not there: one line saying so,
    with the bundle folder beside it that a typo missed, not a bare errno."""
    from onnx_cooker.runtime.__main__ import main as runtime_main

    assert runtime_main(["inspect", str(bundle_dir.parent / "andriod")]) == 1
    assert runtime_main(["unpack", str(bundle_dir / "nope.ocb"), str(bundle_dir.parent / "out")]) == 1
    first, second = capsys.readouterr().err.splitlines()
    assert (
        first == f"error: {bundle_dir.parent / 'andriod'}: no such file or folder; did you mean {bundle_dir}?"
    )
    assert second.endswith("nope.ocb: no such file or folder; give a blob (.ocb)")  # unpack takes no folder


def test_paths_that_are_not_a_bundle_folder_name_the_one_to_open(bundle_dir: Path) -> None:
    """A blob file, or the build folder above the platforms' bundles, given where a bundle folder
    or its bytes belong: the error names what to pass instead."""
    blob = bundle_dir / "upscaler.ort.ocb"
    with pytest.raises(ManifestError, match=r"upscaler\.ort\.ocb is a blob, not a bundle: open its folder"):
        open_bundle(blob)
    (bundle_dir.parent / "ios").mkdir()  # a platform folder without a bundle yet is not offered
    (bundle_dir.parent / ".stamps").mkdir()  # nor the cook's own hidden folders, manifest or not
    (bundle_dir.parent / ".stamps" / "manifest.json").write_text("{}")
    with pytest.raises(
        ManifestError, match=r"holds the bundles of android: open one, e\.g\. open_bundle\('.*android'\)"
    ):
        open_bundle(bundle_dir.parent)
    with pytest.raises(ManifestError, match=r"did you mean open_bundle\('.*android'\)\?"):
        open_bundle(bundle_dir.parent / "andriod")  # a mistyped platform folder beside a bundle
    with pytest.raises(ManifestError) as failure:
        open_bundle(bundle_dir.parent / "windows")
    assert "did you mean" not in str(failure.value)  # nothing near
    # a bundle whose manifest.json is there but cannot be read (a pipe, a folder) is a bundle to cook
    (bundle_dir.parent / "broken" / "manifest.json").mkdir(parents=True)
    with pytest.raises(ManifestError) as failure:
        open_bundle(bundle_dir.parent / "broken")
    assert "re-run `onnx-cooker cook`" in str(failure.value) and "holds the bundles" not in str(failure.value)
    for path in (blob, str(blob)):
        with pytest.raises(TypeError, match=r"takes a blob's bytes, not a path .*open_bundle\(folder\)"):
            session_from_blob(path)  # type: ignore[arg-type]


def image_decoder_model() -> bytes:
    """An operator onnx defines and onnxruntime has no kernel for (ImageDecoder-20, in 1.24.4, 1.28.0
    and 1.32.0 alike): what a blob meets in an older onnxruntime, or a reduced build, than it was
    checked in."""
    import onnx

    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("ImageDecoder", ["encoded"], ["image"])],
        "decoder",
        [onnx.helper.make_tensor_value_info("encoded", onnx.TensorProto.UINT8, [64])],
        [onnx.helper.make_tensor_value_info("image", onnx.TensorProto.UINT8, None)],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model.SerializeToString()


def test_an_operator_this_onnxruntime_has_no_kernel_for_is_an_incompatible_runtime_with_the_fixes() -> None:
    """onnxruntime's NOT_IMPLEMENTED ("Could not find an implementation for X(N) node") is an
    ``IncompatibleRuntimeError`` naming the operator and the ways out (the platform's onnxruntime, a
    reduced build's operator config, a platform for this version), not onnxruntime's bare text."""
    blob = make_blob(image_decoder_model(), "onnx", name="decoder", platform="android")
    with pytest.raises(IncompatibleRuntimeError) as raised:
        session_from_blob(blob)
    message = str(raised.value)
    assert message.startswith(f"onnxruntime {onnxruntime.__version__} has no kernel for ImageDecoder(20) ")
    assert "(model 'decoder', android)" in message and "required_operators.config" in message
    assert "NOT_IMPLEMENTED" not in message


def test_a_missing_kernel_is_not_retried_along_the_copying_path(tmp_path: Path) -> None:
    """In 1.24.4 weights go along onnx-shared-initializers with a copying fallback for the models its
    optimizers refuse; a kernel onnxruntime lacks fails every path alike, so it is raised at once (no
    second session built with a copy of the weights) as the IncompatibleRuntimeError above."""
    import onnx
    from runtime_helpers import make_weighted_blob, run_in_runtime

    weights = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("ImageDecoder", ["encoded"], ["image"]),
            onnx.helper.make_node("MatMul", ["x", "W"], ["y"]),
        ],
        "decoder",
        [
            onnx.helper.make_tensor_value_info("encoded", onnx.TensorProto.UINT8, [64]),
            onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 512]),
        ],
        [
            onnx.helper.make_tensor_value_info("image", onnx.TensorProto.UINT8, None),
            onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 512]),
        ],
        [onnx.numpy_helper.from_array(weights, "W")],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])
    model.ir_version = 9
    blob = tmp_path / "decoder.ocb"
    blob.write_bytes(make_weighted_blob(model, "raw", name="decoder", platform="windows-dml")[0])
    code = (
        "import json, logging, sys; sys.path.insert(0, sys.argv[1]); import onnxruntime\n"
        "from onnx_cooker.runtime import session_from_blob, IncompatibleRuntimeError\n"
        "records = []\n"
        "handler = logging.Handler(); handler.emit = lambda r: records.append(r.getMessage())\n"
        "logging.getLogger('onnx_cooker.runtime').addHandler(handler)\n"
        "logging.getLogger('onnx_cooker.runtime').setLevel(logging.INFO)\n"
        "try:\n"
        "    session_from_blob(open(sys.argv[2], 'rb').read()); raised = None\n"
        "except IncompatibleRuntimeError as exc:\n"
        "    raised = [exc.operator, str(exc)]\n"
        "print(json.dumps({'onnxruntime': onnxruntime.__version__, 'raised': raised, 'log': records}))\n"
    )
    report = run_in_runtime("1.24.4", tmp_path / "work", ["-c", code, str(blob)])
    assert report["raised"] is not None and report["raised"][0] == "ImageDecoder(20)", report
    assert any("load path onnx-shared-initializers" in line for line in report["log"]), report["log"]
    assert not any("loading along" in line for line in report["log"]), report["log"]


def test_an_ep_this_onnxruntime_package_lacks_is_named_as_missing(models: dict[str, bytes]) -> None:
    missing = next(
        ep
        for ep in ("CUDAExecutionProvider", "TensorrtExecutionProvider")
        if ep not in onnxruntime.get_available_providers()
    )
    with pytest.raises(
        SessionCreateError,
        match=rf"{missing} is not in this onnxruntime package \(onnxruntime "
        rf"{re.escape(onnxruntime.__version__)} offers .*CPUExecutionProvider\); install",
    ):
        session_from_blob(make_blob(models["onnx"], "onnx"), providers=[missing, CPU_EP])


def test_providers_onnxruntime_cannot_use_are_refused_naming_the_fix(models: dict[str, bytes]) -> None:
    """One string instead of a list is a programming error (TypeError, the list to pass); a name
    onnxruntime does not know (it would say "Unknown Provider Type: ...") is refused naming the nearest
    name it knows and the EPs this build offers."""
    blob = make_blob(models["onnx"], "onnx")
    with pytest.raises(
        TypeError, match=re.escape("providers takes a list of EP names, e.g. ['CPUExecutionProvider']")
    ):
        session_from_blob(blob, providers=CPU_EP)
    offered = ", ".join(onnxruntime.get_available_providers())
    typo = re.escape(
        "'CPUExecutionprovider' is no execution provider onnxruntime knows; did you mean "
        f"'CPUExecutionProvider'? this onnxruntime offers {offered}"
    )
    with pytest.raises(SessionCreateError, match=typo):
        session_from_blob(blob, providers=["CPUExecutionprovider"])
    with pytest.raises(SessionCreateError, match=r"'Xyz' is no execution provider onnxruntime knows; this"):
        session_from_blob(blob, providers=[("Xyz", {}), CPU_EP])


def test_manifest_that_is_not_json(bundle_dir: Path) -> None:
    (bundle_dir / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match=r"manifest\.json is not valid JSON .*re-run `onnx-cooker cook`"):
        open_bundle(bundle_dir)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(manifest_version=2), "manifest_version is 2, this loader reads 1"),
        (lambda m: m.pop("manifest_version"), "manifest_version is None, this loader reads 1"),
        (lambda m: m.pop("platform"), r"'platform' \(string\) and 'models' \(object\) are required"),
        (lambda m: m.update(models=[]), r"'platform' \(string\) and 'models' \(object\) are required"),
        (lambda m: m["models"].update(extra="x.ocb"), "entry 'extra' is not an object"),
        (
            lambda m: m["models"]["denoiser"].pop("blob_sha256"),
            r"entry 'denoiser' lacks 'blob_sha256' \(str\)",
        ),
        (
            lambda m: m["models"]["denoiser"].update(blob_size=True),
            r"entry 'denoiser' lacks 'blob_size' \(int\)",
        ),
        (lambda m: m["models"]["denoiser"].update(blob_size=-1), "entry 'denoiser' has a negative blob_size"),
    ],
)
def test_malformed_manifest(edit, message: str, bundle_dir: Path) -> None:
    manifest = manifest_of(bundle_dir)
    edit(manifest)
    write_manifest(bundle_dir, manifest)
    with pytest.raises(ManifestError, match=rf"manifest\.json: {message}; re-run `onnx-cooker cook`"):
        open_bundle(bundle_dir)


def test_manifest_that_is_not_an_object(bundle_dir: Path) -> None:
    write_manifest(bundle_dir, ["denoiser"])
    with pytest.raises(ManifestError, match="the top level is not a JSON object"):
        open_bundle(bundle_dir)


@pytest.mark.parametrize("file", ["../x.ocb", "/etc/passwd", "sub/../../x.ocb", "sub\\x.ocb", "", "."])
def test_manifest_entry_pointing_outside_its_folder(file: str, bundle_dir: Path) -> None:
    manifest = manifest_of(bundle_dir)
    manifest["models"]["denoiser"]["file"] = file
    write_manifest(bundle_dir, manifest)
    with pytest.raises(
        ManifestError, match=rf"entry 'denoiser' points outside its folder \({re.escape(repr(file))}\)"
    ):
        open_bundle(bundle_dir)


@pytest.mark.parametrize("file", ["C:/Windows/win.ini", "C:x.ocb"])
def test_manifest_entry_with_a_windows_drive(file: str, bundle_dir: Path) -> None:
    # On Windows, Path(root) / "C:/Windows/win.ini" is C:/Windows/win.ini: outside the bundle.
    manifest = manifest_of(bundle_dir)
    manifest["models"]["denoiser"]["file"] = file
    write_manifest(bundle_dir, manifest)
    with pytest.raises(ManifestError, match="points outside its folder"):
        open_bundle(bundle_dir)


def test_manifest_entry_with_a_nul_byte(bundle_dir: Path) -> None:
    manifest = manifest_of(bundle_dir)
    manifest["models"]["denoiser"]["file"] = "denoiser\0.onnx.ocb"
    write_manifest(bundle_dir, manifest)
    # refused as JSON, as the C loader refuses it (cJSON would end the name at the NUL)
    with pytest.raises(
        ManifestError, match=r"manifest.json is not valid JSON \(a string holds a NUL character"
    ):
        open_bundle(bundle_dir).session("denoiser")


@pytest.mark.parametrize("name", ["denoiser", "upscaler"])
def test_a_blob_damaged_after_open_bundle_is_named_by_its_file_with_the_fix(
    name: str, bundle_dir: Path
) -> None:
    """Through a bundle, the blob's own checks (here its header CRC, and a byte of its model frame)
    name the blob file and the fix, as the manifest checks do (open_bundle(verify=False) leaves them
    to the load; a file changed after open_bundle meets them too)."""
    bundle = open_bundle(bundle_dir, verify=False)
    path = bundle_dir / bundle.info(name)["file"]
    intact = path.read_bytes()
    header_end = intact.index(b"ONNXCOOK") + 40 if name == "denoiser" else len(intact) - 200
    for at in (header_end, len(intact) // 3):
        damaged = bytearray(intact)
        damaged[at] ^= 0x10
        path.write_bytes(bytes(damaged))
        with pytest.raises(BundleError) as refused:
            bundle.session(name, providers=CPU)
        message = str(refused.value)
        assert message.startswith(f"{path}: ") and message.count(str(path)) == 1, message
        assert "re-run `onnx-cooker cook`" in message or "re-cook" in message, message
    path.write_bytes(intact)
    bundle.session(name, providers=CPU)


def test_a_blob_declared_over_max_model_size_names_the_setting(bundle_dir: Path) -> None:
    manifest = manifest_of(bundle_dir)
    manifest["models"]["denoiser"]["blob_size"] = 3 << 30
    write_manifest(bundle_dir, manifest)
    bundle = open_bundle(bundle_dir, verify=False)
    for load in (lambda: bundle.session("denoiser", providers=CPU), lambda: bundle.read_blob("denoiser")):
        with pytest.raises(ManifestError, match=r"oversized blob \(3,221,225,472 bytes, over max_model_size"):
            load()


def test_a_big_blob_file_given_for_its_bundle_names_the_folder_to_open(tmp_path: Path) -> None:
    """A blob over the manifest's 64 MiB limit passed to open_bundle: the same hint as a small one."""
    blob = tmp_path / "big.onnx.ocb"
    with blob.open("wb") as stream:
        stream.truncate((64 << 20) + 1)
    with pytest.raises(ManifestError, match=re.escape(f"open its folder (open_bundle({str(tmp_path)!r}))")):
        open_bundle(blob)


def test_missing_blob_file(bundle_dir: Path) -> None:
    (bundle_dir / "denoiser.onnx.ocb").unlink()
    missing = r"cannot read blob of 'denoiser' at .*denoiser\.onnx\.ocb: No such file"
    with pytest.raises(ManifestError, match=missing):
        open_bundle(bundle_dir)  # verified at start-up...
    bundle = open_bundle(bundle_dir, verify=False)
    with pytest.raises(ManifestError, match=missing):
        bundle.session("denoiser")  # ...and again at first use


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="POSIX links")
def test_a_blob_file_that_is_a_link_loads_only_if_it_stays_in_the_folder(
    bundle_dir: Path, tmp_path: Path, source: bytes
) -> None:
    """A plain file opens without resolving its path; a link is followed and checked."""
    blob = bundle_dir / "upscaler.ort.ocb"
    inside = bundle_dir / "kept" / "upscaler.bin"
    inside.parent.mkdir()
    blob.rename(inside)
    blob.symlink_to(Path("kept") / "upscaler.bin")
    x = sample_input(seed=3)
    session = open_bundle(bundle_dir).session("upscaler", providers=CPU)  # a link inside the folder
    np.testing.assert_allclose(session.run(None, {"x": x})[0], run_source(source, x), rtol=1e-6, atol=1e-6)
    outside = tmp_path / "elsewhere.ocb"
    inside.rename(outside)
    blob.unlink()
    blob.symlink_to(outside)
    with pytest.raises(
        ManifestError,
        match=r"blob of 'upscaler' at .* is a link to .*elsewhere\.ocb, outside the bundle folder, which the "
        r"loader does not follow .*; ship the bundle's files themselves \(copy it with `cp -rL`",
    ):
        open_bundle(bundle_dir, verify=False).session("upscaler", providers=CPU)


@pytest.mark.parametrize("damage", ["flip", "append", "truncate"])
def test_blob_changed_on_disk(damage: str, bundle_dir: Path) -> None:
    path = bundle_dir / "upscaler.ort.ocb"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x10
    elif damage == "append":
        data += b"\0"
    else:
        del data[-1]
    path.write_bytes(bytes(data))
    changed = r"upscaler\.ort\.ocb: blob does not match the sha256/size recorded in manifest"
    with pytest.raises(ChecksumMismatchError, match=changed):
        open_bundle(bundle_dir)
    bundle = open_bundle(bundle_dir, verify=False)
    # A load checks the size, then (unsigned bundles) the frames' own checksums: no second sha256.
    damaged = r"upscaler'.*graph frame 1 of 1 is damaged" if damage == "flip" else changed
    with pytest.raises(ChecksumMismatchError, match=damaged):
        bundle.session("upscaler")


def test_open_bundle_names_the_first_damaged_blob_in_name_order(bundle_dir: Path) -> None:
    """open_bundle checks the blob files side by side (one per core); with every blob damaged, the
    error still names the first in name order, as checking them one after another did."""
    for file in ("denoiser.onnx.ocb", "upscaler.ort.ocb"):
        data = bytearray((bundle_dir / file).read_bytes())
        data[len(data) // 3] ^= 0x01
        (bundle_dir / file).write_bytes(bytes(data))
    for _ in range(5):
        with pytest.raises(ChecksumMismatchError, match=r"denoiser\.onnx\.ocb: blob does not match"):
            open_bundle(bundle_dir)


def test_oversized_blob_declaration_is_refused_before_reading(bundle_dir: Path) -> None:
    manifest = manifest_of(bundle_dir)
    manifest["models"]["denoiser"]["blob_size"] = 1 << 40
    write_manifest(bundle_dir, manifest)
    with pytest.raises(ManifestError, match="model 'denoiser' declares an oversized blob"):
        open_bundle(bundle_dir, verify=False).session("denoiser")
    with pytest.raises(ChecksumMismatchError, match="denoiser"):
        open_bundle(bundle_dir)  # at start-up the file's real size already disagrees


# --- python -m onnx_cooker.runtime inspect -----------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "onnx_cooker.runtime", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
    )


def test_inspect_blob_prints_the_header(bundle_dir: Path) -> None:
    path = bundle_dir / "upscaler.ort.ocb"
    result = run_cli("inspect", str(path))
    assert result.returncode == 0, result.stderr
    text, commands = result.stdout.split("# unpack with stock tools:\n")
    printed = json.loads(text)
    header = read_header(path.read_bytes())[0]
    assert printed == {"file": str(path), **header.to_dict()}
    assert commands.splitlines() == stock_unpack_commands(header, str(path))
    first = header.frames[0]
    assert commands.splitlines()[0].startswith(f"head -c {first.offset + first.size} {path} | tail -c +")


@pytest.mark.parametrize("given", ["folder", "manifest.json"])
def test_inspect_bundle_lists_its_models(bundle_dir: Path, given: str) -> None:
    """A bundle folder, or its manifest.json (read as a blob before: "not an onnx-cooker blob")."""
    path = bundle_dir if given == "folder" else bundle_dir / "manifest.json"
    result = run_cli("inspect", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"bundle {path} (platform android): 2 model(s)"
    manifest = manifest_of(bundle_dir)["models"]
    for name, line in zip(("denoiser", "upscaler"), lines[1:], strict=True):
        entry = manifest[name]
        assert line == (
            f"  {name}: {entry['format']}, {entry['file']}, {entry['blob_size']:,} B"
            f" (model {entry['model_size']:,} B)"
        )


@pytest.mark.parametrize(
    "change",
    [
        {"model_size": "big"},
        {"placement": {"measured": 1, "coverage": "x"}},
        {"inputs": [1]},
        {"inputs": 5},
        {"cooked_with": ["onnx"]},
    ],
    ids=["model_size", "placement", "input", "inputs", "cooked_with"],
)
def test_inspect_of_a_manifest_entry_of_wrong_types_is_one_error_line(change: dict, bundle_dir: Path) -> None:
    """Fields only `inspect` prints (the loader never reads them) of the wrong type: one line naming
    the manifest, the model and the fix, not a traceback."""
    manifest = manifest_of(bundle_dir)
    manifest["models"]["upscaler"].update(change)
    write_manifest(bundle_dir, manifest)
    result = run_cli("inspect", str(bundle_dir))
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert result.stderr.startswith(f"error: {bundle_dir / 'manifest.json'}: ")  # open_bundle's or inspect's
    assert "'upscaler'" in result.stderr and "re-run `onnx-cooker cook`" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("target", ["garbage", "missing", "empty-dir"])
def test_inspect_failure_is_one_error_line(target: str, tmp_path: Path) -> None:
    path = tmp_path / target
    if target == "garbage":
        path.write_bytes(random.Random(5).randbytes(256))
    elif target == "empty-dir":
        path.mkdir()
    result = run_cli("inspect", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_buffer_that_is_not_one_run_of_bytes_is_a_type_error_saying_what_to_pass(
    models: dict[str, bytes],
) -> None:
    """A strided view or a list is a programming error: a TypeError naming what a blob is, not
    memoryview's own "casts are restricted to C-contiguous views"; a numpy uint8 array is a blob."""
    from onnx_cooker.runtime import MemoryBlob, unpack_blob

    blob = make_blob(models["onnx"], "onnx")
    strided = memoryview(bytearray(blob + blob))[::2]
    for wrong in (strided, [1, 2, 3]):
        for call in (session_from_blob, unpack_blob, MemoryBlob.copy):
            with pytest.raises(
                TypeError, match=r"a blob is one contiguous buffer of bytes .* pass the blob's bytes"
            ):
                call(wrong)
    assert session_from_blob(np.frombuffer(blob, dtype=np.uint8)).get_outputs()
