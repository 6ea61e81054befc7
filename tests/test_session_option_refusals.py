"""What a blob's header may ask of onnxruntime, and what both loaders refuse with the same message
naming the option and the fix: a session option value onnxruntime has no name for, a config entry
the load paths own or one not on the allow-list (those that name files onnxruntime reads or
writes among them), and a provider option whose name or value may point at a file, folder, library
or memory address. The cooker's settings check refuses such options (tests/test_profile.py,
test_settings_schema.py), so these blobs are made here, as an attacker would."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from runtime_helpers import make_blob

from onnx_cooker.runtime import session_from_blob
from onnx_cooker.runtime.constants import (
    SAFE_CONFIG_ENTRIES,
    SAFE_CONFIG_PREFIXES,
    UNSAFE_CONFIG_ENTRIES,
    UNSAFE_PROVIDER_OPTION_WORDS,
)
from onnx_cooker.runtime.errors import SessionCreateError
from tests.models import tiny_model
from tests.test_native import REPO, VERSIONS, native, ort_library, run_native  # noqa: F401

CPU = "CPUExecutionProvider"
FIX = (
    "; the platform's ep_session_options allow the keys and values of docs/settings.md: fix them and "
    "re-cook with this onnx-cooker"
)
REFUSED = {
    "execution_mode": ("sideways", "execution_mode 'sideways'"),
    "graph_optimization_level": ("max", "graph_optimization_level 'max'"),
    "session.load_model_format": (
        "ORT",
        "session.load_model_format is refused: the loader sets it itself, for the load path it proved "
        "(docs/design.md, loading from memory)",
    ),
}
UNLISTED = (
    " (it is not in the loader's list of entries that only change how a session computes, "
    "docs/settings.md; others may name files onnxruntime reads or writes); a game that needs it sets "
    "it on the session options it passes"
)
# entries that name files onnxruntime 1.32 reads, creates or writes; one no onnxruntime knows yet
for _key in (
    "ep.context_file_path",
    "session.node_partition_config_file",
    "session.optimized_model_filepath",
    "session.enable_profiling",
    "session.debug_layout_transformation",
    "session.moe.offload.derived_cache_dir",
    "session.some_future_entry",
):
    REFUSED[_key] = ("1", f"config entry '{_key}' is not one a blob may carry{UNLISTED}")


def oc_run_blob(native: Path, tmp_path: Path, blob: bytes) -> subprocess.CompletedProcess[str]:  # noqa: F811
    """oc-run on ``blob`` (a file in ``tmp_path``) in the newest target onnxruntime."""
    (tmp_path / "tiny.ocb").write_bytes(blob)
    return run_native(
        [native / "oc-run", "--blob", tmp_path / "tiny.ocb", "--ort", ort_library(VERSIONS[-1])], check=False
    )


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_both_loaders_refuse_a_bad_session_option_naming_it_and_the_fix(
    native: Path,  # noqa: F811
    tmp_path: Path,
    key: str,
) -> None:
    value, words = REFUSED[key]
    blob = make_blob(
        tiny_model().SerializeToString(),
        "onnx",
        execution_providers=[CPU],
        ep_session_options={CPU: {key: value}},
    )
    expected = f"model 'tiny': bad session option for {CPU}: {words}{FIX}"
    with pytest.raises(SessionCreateError) as caught:
        session_from_blob(blob)
    assert str(caught.value) == expected
    done = oc_run_blob(native, tmp_path, blob)
    assert done.returncode == 1
    assert expected in done.stderr, done.stderr


PROVIDER_FIX = (
    "; a blob may not choose where an EP reads, writes or loads from: remove it from the platform's "
    "provider_options and re-cook, and have the game pass it itself (docs/settings.md)"
)
NAME_WORDS = "it may name a file, folder, library or memory address"
# (EP, option, value) -> why it is refused; the EPs need not exist here: the check comes first
PROVIDER_REFUSED = {
    ("QNNExecutionProvider", "backend_path", "libQnnHtp.so"): f"its name holds 'path': {NAME_WORDS}",
    ("OpenVINOExecutionProvider", "cache_dir", "cache"): f"its name holds 'dir': {NAME_WORDS}",
    ("TensorrtExecutionProvider", "trt_engine_cache_enable", "1"): f"its name holds 'cache': {NAME_WORDS}",
    ("CoreMLExecutionProvider", "ModelCacheDirectory", "x"): f"its name holds 'dir': {NAME_WORDS}",
    ("CUDAExecutionProvider", "gpu_external_alloc", "4096"): f"its name holds 'external': {NAME_WORDS}",
    ("ConsoleGpuExecutionProvider", "Shader_Library", "x"): f"its name holds 'lib': {NAME_WORDS}",
    ("OpenVINOExecutionProvider", "device_type", "CPU/../../x"): "its value holds a path separator",
    ("DmlExecutionProvider", "device_filter", "C:\\gpu"): "its value holds a path separator",
}


@pytest.mark.parametrize("case", sorted(PROVIDER_REFUSED), ids=lambda case: f"{case[0]}.{case[1]}")
def test_both_loaders_refuse_a_provider_option_that_may_point_at_a_file_or_address(
    native: Path,  # noqa: F811
    tmp_path: Path,
    case: tuple[str, str, str],
) -> None:
    ep, key, value = case
    blob = make_blob(
        tiny_model().SerializeToString(),
        "onnx",
        execution_providers=[ep, CPU],
        provider_options={ep: {key: value}},
    )
    why = PROVIDER_REFUSED[case]
    expected = f"model 'tiny': provider option '{key}' for {ep} is refused: {why}{PROVIDER_FIX}"
    # also where the caller names other EPs: a blob that asks for it is refused, whatever runs it
    for providers in (None, [CPU]):
        with pytest.raises(SessionCreateError) as caught:
            session_from_blob(blob, providers=providers)
        assert str(caught.value) == expected
    done = oc_run_blob(native, tmp_path, blob)
    assert done.returncode == 1
    assert expected in done.stderr, done.stderr


def test_options_that_only_change_computing_still_load_in_both(
    native: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The allow-list and the words leave the options platforms use alone: a blob with allowed
    config entries (an mlas one too) and provider options of the CPU EP loads in both loaders."""
    blob = make_blob(
        tiny_model().SerializeToString(),
        "onnx",
        execution_providers=[CPU],
        ep_session_options={
            CPU: {
                "session.intra_op.allow_spinning": "0",
                "session.set_denormal_as_zero": "1",
                "mlas.use_lut_gemm": "0",
                "execution_mode": "sequential",
            }
        },
        provider_options={"DmlExecutionProvider": {"device_id": 0, "device_filter": "gpu"}},
    )
    session = session_from_blob(blob)
    assert session.get_session_options().get_session_config_entry("session.set_denormal_as_zero") == "1"
    done = oc_run_blob(native, tmp_path, blob)
    assert done.returncode == 0, done.stderr


def _c_strings(source: str, array: str) -> list[str]:
    body = source.split(f"static const char *const {array}[] = {{", 1)[1].split("};", 1)[0]
    return re.findall(r'"([^"]*)"', body)


def test_the_c_library_holds_the_python_loaders_lists() -> None:
    """One rule in two languages: native/src/recipe.c's lists are constants.py's, word for word."""
    source = (REPO / "native" / "src" / "recipe.c").read_text()
    assert sorted(_c_strings(source, "SAFE_ENTRIES")) == sorted(SAFE_CONFIG_ENTRIES)
    assert tuple(_c_strings(source, "SAFE_PREFIXES")) == SAFE_CONFIG_PREFIXES
    assert sorted(_c_strings(source, "OWNED_ENTRIES")) == sorted(UNSAFE_CONFIG_ENTRIES)
    assert tuple(_c_strings(source, "UNSAFE_WORDS")) == UNSAFE_PROVIDER_OPTION_WORDS
