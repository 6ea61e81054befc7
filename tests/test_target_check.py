"""The runtime check: cooked blobs run in the exact onnxruntime version their platform ships."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path

import onnx
import pytest

from onnx_cooker.build.manifest import write_manifest
from onnx_cooker.build.run_job import cook
from onnx_cooker.build.target_check import RuntimeCheckError, ensure_runtime, environment_dir, run_check
from onnx_cooker.cook.job import RuntimeCheck
from onnx_cooker.errors import ProfileError
from onnx_cooker.layout import runtime_check_path
from onnx_cooker.settings.resolve import load_platforms
from tests.models import conv_bn_relu_model, large_matmul_model, relu_model
from tests.test_cook import job_for, save, shipped_settings

RUNTIMES_CACHE = Path(__file__).resolve().parents[1] / ".pytest_cache" / "runtimes"
OLD_RUNTIME = "1.24.4"  # windows-dml's: the newest onnxruntime-directml


def cook_all(tmp_path: Path, platform: str, names: list[str], **overrides: object) -> Path:
    settings = shipped_settings(platform, **overrides)
    for name in names:
        cook(job_for(tmp_path / "assets", name, settings, tmp_path / "build"))
    return tmp_path / "build" / platform


def check_for(platform_dir: Path, names: list[str], version: str, profile: Path) -> RuntimeCheck:
    return RuntimeCheck(
        platform=platform_dir.name,
        runtime_version=version,
        platform_dir=platform_dir,
        names=tuple(names),
        runtimes_dir=RUNTIMES_CACHE,
        result_path=runtime_check_path(platform_dir, version),
        profile=profile,
    )


def test_blobs_run_in_the_target_version_and_the_manifest_says_so(tmp_path: Path) -> None:
    save(conv_bn_relu_model(), tmp_path / "assets", "net")
    platform_dir = cook_all(tmp_path, "windows-dml", ["net"])
    check = check_for(platform_dir, ["net"], OLD_RUNTIME, Path("platforms/windows-dml.yaml"))

    report = run_check(check)

    assert report["onnxruntime"] == OLD_RUNTIME and report["models"]["net"]["ok"]
    assert report["models"]["net"]["outputs"][0]["ok"]
    assert environment_dir(RUNTIMES_CACHE, OLD_RUNTIME).is_dir()
    manifest = json.loads(
        write_manifest(platform_dir, "windows-dml", ["net"], [check.result_path]).read_text()
    )
    assert manifest["models"]["net"]["verified_on"][0] == OLD_RUNTIME
    assert len(manifest["models"]["net"]["verified_on"]) == 2  # and the cooking machine's own version


def test_the_runtime_check_loads_every_way_a_game_would_in_the_target_version(tmp_path: Path) -> None:
    """From memory and from the blob file, each compared with the source; in 1.24.4 a conv net goes
    straight along the copying door from memory (onnxruntime's optimizers would read its float Conv
    weights from the file the shared-initializer door names, and refuse it), with no refused try."""
    save(conv_bn_relu_model(), tmp_path / "assets", "net")
    platform_dir = cook_all(tmp_path, "windows-dml", ["net"], weights="external")
    check = check_for(platform_dir, ["net"], OLD_RUNTIME, Path("platforms/windows-dml.yaml"))

    paths = run_check(check)["models"]["net"]["load_paths"]

    assert set(paths) == {"memory", "file"}
    assert all(p["error"] is None for p in paths.values()), paths
    assert paths["memory"]["path"] == "onnx-external-initializers"
    assert paths["memory"]["refused"] is None
    # From the blob file too: this net's weights are under MIN_RAW_EXTENT, so zstd, with no raw
    # extent for onnxruntime to map (raw ones are, tests/test_load_paths.py's conv-raw)
    assert paths["file"]["path"] == "onnx-external-initializers"


@pytest.mark.slow
def test_the_runtime_check_proves_an_ort_blobs_weights_are_shared_in_place(tmp_path: Path) -> None:
    """android's onnxruntime (1.32.0) loads an ORT blob from memory along ort-shared-initializers (an
    unpromised door): outputs equal to the source, and the caller's weights zeroed change them."""
    save(large_matmul_model(512, 1024, seed=3), tmp_path / "assets", "wide")
    platform_dir = cook_all(tmp_path, "android", ["wide"])
    check = check_for(platform_dir, ["wide"], "1.32.0", Path("platforms/android.yaml"))

    model = run_check(check)["models"]["wide"]

    assert model["ok"], model
    memory = model["load_paths"]["memory"]
    assert memory["path"] == "ort-shared-initializers" and memory["error"] is None, memory
    assert memory["in_place_proof"] == "in place"
    assert model["load_paths"]["file"]["path"] == "ort-mapped"  # the blob file, mapped whole


def test_a_blob_the_target_version_cannot_load_fails_the_check(tmp_path: Path) -> None:
    """Cooked for a 1.32 target, an opset-26 model must not pass a check in 1.24.4."""
    save(relu_model(26), tmp_path / "assets", "relu26")
    platform_dir = cook_all(tmp_path, "android", ["relu26"])
    check = check_for(platform_dir, ["relu26"], OLD_RUNTIME, Path("platforms/android.yaml"))

    with pytest.raises(
        RuntimeCheckError, match=r"fail in onnxruntime 1\.24\.4.*relu26.*needs onnxruntime 1\.28"
    ):
        run_check(check)
    assert not check.result_path.exists()


def tensor_scatter_model() -> onnx.ModelProto:
    """TensorScatter-24 (a KV-cache write): onnxruntime 1.32 has a kernel for it, 1.24.4 does not."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("TensorScatter", ["past", "update"], ["present"])],
        "cache",
        [
            onnx.helper.make_tensor_value_info("past", onnx.TensorProto.FLOAT, [1, 8, 4]),
            onnx.helper.make_tensor_value_info("update", onnx.TensorProto.FLOAT, [1, 2, 4]),
        ],
        [onnx.helper.make_tensor_value_info("present", onnx.TensorProto.FLOAT, [1, 8, 4])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 24)])
    model.ir_version = 10
    return model


def test_an_operator_the_platforms_onnxruntime_has_no_kernel_for_names_it_and_the_ways_out(
    tmp_path: Path,
) -> None:
    """Cooked (and verified) in the cook's onnxruntime, a TensorScatter-24 model fails the check in
    1.24.4, which has no kernel for it: the failure names the operator and what to change, in the
    platform's terms (not the loader's advice to load it with the platform's onnxruntime: this is it)."""
    save(tensor_scatter_model(), tmp_path / "assets", "cache")
    platform_dir = cook_all(tmp_path, "android", ["cache"])
    check = check_for(platform_dir, ["cache"], OLD_RUNTIME, Path("platforms/android.yaml"))
    with pytest.raises(RuntimeCheckError) as raised:
        run_check(check)
    message = str(raised.value)
    said = "onnxruntime 1.24.4, the platform's runtime_version, has no kernel for TensorScatter(24)"
    assert said in message, message
    assert "raise runtime_version" in message and "skip_platforms: [android]" in message, message
    assert "NOT_IMPLEMENTED" not in message and "load it with the platform's onnxruntime" not in message


@pytest.mark.slow
def test_an_uninstallable_runtime_says_how_to_turn_the_check_off(tmp_path: Path) -> None:
    profile = tmp_path / "platforms" / "retro.yaml"
    with pytest.raises(RuntimeCheckError) as failure:
        ensure_runtime("0.0.1", tmp_path / "runtimes", profile)
    message = str(failure.value)
    if "cannot install onnxruntime==0.0.1" in message:  # a registry this machine cannot reach
        assert "runtime_check: false" in message and "runtime_check_off_reason" in message, message
    else:  # the registry answered without that version: the fix is the version, not turning off
        said = f"{profile}: the package registry has no onnxruntime 0.0.1 for this Python; its newest: 1."
        assert message.startswith(said), message
        assert message.endswith("; fix `runtime_version` (or `runtime_package`)"), message
    assert str(profile) in message
    # the half-made environment is gone; only its (free) lock file stays
    assert [path.name for path in (tmp_path / "runtimes").iterdir()] == [".onnxruntime-0.0.1-py311.lock"]


def test_the_check_can_be_turned_off_only_with_a_reason(tmp_path: Path) -> None:
    folder = tmp_path / "platforms"
    folder.mkdir()
    (folder / "retro.yaml").write_text("runtime_check: false\n")
    with pytest.raises(ProfileError, match=r"retro\.yaml.*runtime_check.*runtime_check_off_reason"):
        load_platforms(folder, {})
    (folder / "retro.yaml").write_text('runtime_check: false\nruntime_check_off_reason: "no wheel for 1.9"\n')
    (platform,) = load_platforms(folder, {})
    assert not platform.runtime_check and platform.runtime_check_off_reason == "no wheel for 1.9"


def test_turning_the_check_off_from_the_environment_needs_a_reason_too(tmp_path: Path) -> None:
    folder = tmp_path / "platforms"
    folder.mkdir()
    (folder / "retro.yaml").write_text("runtime_version: '1.16'\n")
    with pytest.raises(ProfileError, match=r"retro\.yaml.*COOK_SET_RUNTIME_CHECK.*runtime_check_off_reason"):
        load_platforms(folder, {"COOK_SET_RUNTIME_CHECK": "false"})
    env = {"COOK_SET_RUNTIME_CHECK": "false", "COOK_SET_RUNTIME_CHECK_OFF_REASON": "offline build farm"}
    (platform,) = load_platforms(folder, env)
    assert platform.runtime_check_off_reason == "offline build farm"


def test_runtime_versions_older_than_the_oldest_supported_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "platforms"
    folder.mkdir()
    (folder / "retro.yaml").write_text("runtime_version: '1.15.1'\n")
    with pytest.raises(ProfileError, match=r"1\.15\.1, older than 1\.16.*use 1\.16 or newer"):
        load_platforms(folder, {})


def test_environment_folders_get_the_umasks_mode_for_a_shared_cache(tmp_path: Path) -> None:
    from onnx_cooker.build.target_check import make_staging

    old = os.umask(0o002)  # a group-shared cache
    try:
        staging = make_staging(tmp_path, "onnxruntime-1.24.4-py311")
    finally:
        os.umask(old)
    assert stat.S_IMODE(staging.stat().st_mode) == 0o775


def test_stale_staging_folders_of_killed_builds_are_swept(tmp_path: Path) -> None:
    from onnx_cooker.build.target_check import sweep_stale_staging
    from onnx_cooker.fsutil import STALE_TEMP_SECONDS

    stale = tmp_path / ".onnxruntime-1.24.4-py311.abc123"
    live = tmp_path / ".onnxruntime-1.28.0-py311.def456"
    kept = tmp_path / "onnxruntime-1.24.4-py311"
    for folder in (stale, live, kept):
        (folder / "lib").mkdir(parents=True)
    past = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(stale, (past, past))
    os.utime(kept, (past, past))
    sweep_stale_staging(tmp_path)
    assert not stale.exists() and live.exists() and kept.exists()


def test_unwritable_runtimes_folder_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    profile = tmp_path / "platforms" / "retro.yaml"
    blocked = tmp_path / "runtimes"
    blocked.write_text("a file where the cache folder should be")
    with pytest.raises(RuntimeCheckError) as failure:
        ensure_runtime("0.0.1", blocked, profile)
    message = str(failure.value)
    assert str(blocked) in message and "COOK_RUNTIMES_DIR" in message and str(profile) in message


@pytest.mark.slow
def test_a_registry_that_never_answers_times_out_with_the_hint(tmp_path: Path, monkeypatch) -> None:
    """A real pip against a local server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    profile = tmp_path / "platforms" / "retro.yaml"
    try:
        with pytest.raises(RuntimeCheckError) as failure:
            ensure_runtime("1.24.4", tmp_path / "runtimes", profile, install_timeout=8)
    finally:
        server.close()
    message = str(failure.value)
    assert "timed out after 8 s (COOK_PIP_TIMEOUT)" in message
    assert (
        "runtime_check: false" in message
        and "runtime_check_off_reason" in message
        and str(profile) in message
    )
