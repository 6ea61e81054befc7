"""The moments around a re-cook: real doit runs in a subprocess on a small project."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.runtime import BundleReplacedError, ChecksumMismatchError, open_bundle
from tests.models import int4_model
from tests.test_reliability import REPO, TRACEBACK, doit, small_project


def blobs(project: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (project / "build" / "android").rglob("*.ocb")}


def published(project: Path, name: str) -> Path:
    """The blob of ``name`` that the manifest lists (its content-hashed name)."""
    platform_dir = project / "build" / "android"
    return platform_dir / json.loads((platform_dir / "manifest.json").read_text())["models"][name]["file"]


# --- 4. an empty or missing assets folder does not empty every bundle ----------------------------


@pytest.mark.slow
def test_empty_assets_folder_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    first = doit(project, "cook")
    assert first.returncode == 0, first.stdout + first.stderr
    before = blobs(project)
    manifest = (project / "build" / "android" / "manifest.json").read_bytes()
    (tmp_path / "empty").mkdir()

    run = doit(project, "cook", COOK_ASSETS_DIR=str(tmp_path / "empty"))

    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"{tmp_path / 'empty'} holds no .onnx model" in output
    assert "COOK_ASSETS_DIR" in output and "allow_empty: true" in output
    assert TRACEBACK not in output
    assert blobs(project) == before
    assert (project / "build" / "android" / "manifest.json").read_bytes() == manifest


@pytest.mark.slow
def test_platform_whose_globs_select_nothing_is_an_error(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    profile = project / "platforms" / "android.yaml"
    profile.write_text(profile.read_text() + "include: ['vision/*']\n")
    run = doit(project, "cook")
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"{profile}: platform 'android' selects none of the 2 model(s)" in output
    assert "fix its globs" in output and TRACEBACK not in output
    assert not (project / "build" / "android").exists()


@pytest.mark.slow
def test_platform_every_model_skips_is_named_as_skipped_not_as_wrong_globs(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    for name in ("net", "mlp"):
        (project / "assets" / f"{name}.cook.yaml").write_text("skip_platforms: [android]\n")
    run = doit(project, "cook")
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert "platform 'android' gets none of the 2 model(s)" in output
    assert "mlp, net skip it (`skip_platforms` in their .cook.yaml)" in output
    assert "fix its globs" not in output and TRACEBACK not in output
    assert not (project / "build" / "android").exists()


@pytest.mark.slow
def test_intended_empty_bundle_is_written_with_allow_empty(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    profile = project / "platforms" / "android.yaml"
    profile.write_text(profile.read_text() + "include: ['vision/*']\nallow_empty: true\n")
    run = doit(project, "cook")
    assert run.returncode == 0, run.stdout + run.stderr
    manifest = json.loads((project / "build" / "android" / "manifest.json").read_text())
    assert manifest["models"] == {}


@pytest.mark.slow
def test_allow_empty_is_a_platform_only_setting(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    (project / "assets" / "net.cook.yaml").write_text("allow_empty: true\n")
    run = doit(project, "cook")
    assert run.returncode != 0
    assert "allow_empty" in run.stdout + run.stderr


# --- 2. a source changed while its cook runs is never left stale ---------------------------------


def _cook_stamps(project: Path, name: str) -> dict:
    return json.loads((project / "build" / "android" / ".stamps" / "cook" / f"{name}.json").read_text())


@pytest.mark.slow
def test_source_rewritten_with_the_same_size_and_mtime_is_cooked_again(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    source = project / "assets" / "net.onnx"
    old = source.stat()
    model = onnx.load(source)
    weights = numpy_helper.to_array(model.graph.initializer[0]).copy()
    weights.flat[0] += 1.0  # same dtype and shape: the file keeps its size
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weights, model.graph.initializer[0].name))
    source.write_bytes(model.SerializeToString())
    os.utime(source, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert (source.stat().st_size, source.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)

    run = doit(project, "cook")

    assert run.returncode == 0, run.stdout + run.stderr
    assert "cook:android:net: " in run.stderr and "changed since the last cook" in run.stderr
    manifest = json.loads((project / "build" / "android" / "manifest.json").read_text())
    assert manifest["models"]["net"]["source_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()


def test_source_changed_during_the_cook_is_cooked_again_next_time(tmp_path: Path, monkeypatch) -> None:
    from onnx_cooker.build.run_job import cook
    from onnx_cooker.build.stamps import OutputsIntact
    from onnx_cooker.cook import variant as cook_module
    from onnx_cooker.layout import cook_stamps_path
    from tests.models import mlp_model
    from tests.test_cook import job_for, save, shipped_settings

    assets = tmp_path / "assets"
    source = save(mlp_model(), assets, "net")
    original = source.read_bytes()
    real_optimize = cook_module.optimize

    def optimize_while_an_artist_saves(*args, **kwargs):  # the file changes after the cook read it
        other = mlp_model()
        other.graph.name = "saved again"
        source.write_bytes(other.SerializeToString())
        return real_optimize(*args, **kwargs)

    monkeypatch.setattr(cook_module, "optimize", optimize_while_an_artist_saves)
    job = job_for(assets, "net", shipped_settings("android"), tmp_path / "build")
    entry = cook(job)

    # What was cooked and recorded is what was read, not what is on disk now...
    assert (
        entry["source_sha256"]
        == hashlib.sha256(original).hexdigest()
        != hashlib.sha256(source.read_bytes()).hexdigest()
    )
    # ...so the task is not up to date: the next `doit cook` cooks the new bytes.
    from onnx_cooker.build.tasks import cook_targets

    check = OutputsIntact("cook:android:net", cook_targets(job), cook_stamps_path(job.platform_dir, "net"))
    assert check() is False


# --- 3. a damaged or edited output is rebuilt -----------------------------------------------------


def _flip_keeping_mtime(path: Path, index: int) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[index] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def cooked_project(tmp_path: Path, runtime_check: bool) -> Path:
    project = small_project(tmp_path / "p")
    if not runtime_check:
        profile = project / "platforms" / "android.yaml"
        profile.write_text(profile.read_text() + "runtime_check: false\nruntime_check_off_reason: test\n")
    assert doit(project, "cook").returncode == 0
    return project


@pytest.mark.parametrize("runtime_check", [True, False])
@pytest.mark.slow
def test_flipped_byte_in_a_staged_blob_is_cooked_again(tmp_path: Path, runtime_check: bool) -> None:
    project = cooked_project(tmp_path, runtime_check)
    blob = project / "build" / "android" / ".entries" / "net.ort.ocb"
    _flip_keeping_mtime(blob, len(blob.read_bytes()) // 2)

    run = doit(project, "cook")

    assert run.returncode == 0, run.stdout + run.stderr
    assert "cook:android:net: " in run.stderr and "net.ort.ocb changed since the last cook" in run.stderr
    assert "cook:android:mlp" not in run.stderr  # only the damaged one
    open_bundle(project / "build" / "android")
    again = doit(project, "cook")
    assert again.returncode == 0 and "changed since the last cook" not in again.stderr


@pytest.mark.parametrize("runtime_check", [True, False])
@pytest.mark.slow
def test_flipped_byte_in_a_published_blob_is_published_again(tmp_path: Path, runtime_check: bool) -> None:
    project = cooked_project(tmp_path, runtime_check)
    blob = published(project, "net")
    _flip_keeping_mtime(blob, len(blob.read_bytes()) // 2)
    with pytest.raises(ChecksumMismatchError):
        open_bundle(project / "build" / "android")

    run = doit(project, "cook")

    assert run.returncode == 0, run.stdout + run.stderr
    assert "cook:android: " in run.stderr and f"{blob.name} changed since the last cook" in run.stderr
    open_bundle(project / "build" / "android")  # every blob matches its manifest again
    # And nothing more to do after that.
    again = doit(project, "cook")
    assert again.returncode == 0 and "changed since the last cook" not in again.stderr


@pytest.mark.slow
def test_touched_but_unchanged_output_is_not_cooked_again(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    blob = published(project, "net")
    os.utime(blob, None)
    run = doit(project, "cook")
    assert run.returncode == 0 and "changed since the last cook" not in run.stderr
    assert "cook:android:net" not in {
        line.split()[-1] for line in run.stdout.splitlines() if line.startswith(".")
    }


def test_a_format_switched_back_and_forth_leaves_no_staged_blob_behind_nor_blames_one(tmp_path: Path) -> None:
    """onnx -> ort -> onnx: the re-cook said `.entries/net.onnx.ocb changed since the last cook` (a
    file of the first cook, never touched), and each format's staged blob stayed for good."""
    project = small_project(tmp_path / "p")
    android = project / "platforms" / "android.yaml"
    entries = project / "build" / "android" / ".entries"
    for model_format in ("onnx", "ort", "onnx"):
        android.write_text(f"format: {model_format}\nexecution_providers: [CPUExecutionProvider]\n")
        run = doit(project, "cook")
        assert run.returncode == 0, run.stdout + run.stderr
        assert "changed since the last cook" not in run.stderr, run.stderr
        other = "ort" if model_format == "onnx" else "onnx"
        assert sorted(p.name for p in entries.glob("net.*.ocb")) == [f"net.{model_format}.ocb"]
        assert not list(entries.glob(f"*.{other}.ocb"))


@pytest.mark.slow
def test_edited_manifest_is_written_again(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    manifest = project / "build" / "android" / "manifest.json"
    good = manifest.read_bytes()
    manifest.write_text(manifest.read_text().replace('"android"', '"androib"', 1))
    run = doit(project, "cook")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "cook:android: " in run.stderr and "manifest.json changed since the last cook" in run.stderr
    assert json.loads(manifest.read_bytes())["platform"] == "android"
    assert json.loads(manifest.read_bytes()) == json.loads(good)


# --- 1. a bundle is replaced as one unit ------------------------------------------------------------

READER = r"""
import sys, time
from onnx_cooker.runtime import BundleError, open_bundle
folder, seconds = sys.argv[1], float(sys.argv[2])
opened = failed = 0
errors = []
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        bundle = open_bundle(folder)  # checks every blob against the manifest
        for name in bundle.names:
            bundle.session(name, providers=["CPUExecutionProvider"])
        opened += 1
    except BundleError as exc:
        failed += 1
        errors.append(f"{type(exc).__name__}: {exc}")
print(opened, failed)
print("\n".join(errors[:3]))
"""


@pytest.mark.slow
def test_readers_never_see_a_half_replaced_bundle(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    before = json.loads((project / "build" / "android" / "manifest.json").read_text())
    profile = project / "platforms" / "android.yaml"
    profile.write_text(profile.read_text() + "compression_level: 3\n")  # every model cooks again

    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(project / "build" / "android"), "15"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    runs = [doit(project, "cook") for _ in range(1)]
    out, err = reader.communicate(timeout=120)

    assert all(run.returncode == 0 for run in runs), runs[0].stdout + runs[0].stderr
    after = json.loads((project / "build" / "android" / "manifest.json").read_text())
    assert {e["file"] for e in after["models"].values()} != {e["file"] for e in before["models"].values()}
    opened, failed = (int(x) for x in out.split("\n", 1)[0].split())
    assert failed == 0, f"a reader saw a broken bundle {failed} time(s): {out}{err}"
    assert opened > 10


@pytest.mark.slow
def test_partly_failed_cook_keeps_the_previous_bundle_loadable(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    before = json.loads((project / "build" / "android" / "manifest.json").read_text())
    profile = project / "platforms" / "android.yaml"
    profile.write_text(profile.read_text() + "compression_level: 3\n")
    (project / "assets" / "mlp.onnx").write_bytes(b"not a model any more")

    run = doit(project, "--continue", "cook")

    assert run.returncode != 0  # mlp fails; net cooked into staging only
    assert json.loads((project / "build" / "android" / "manifest.json").read_text()) == before
    bundle = open_bundle(project / "build" / "android")  # the previous bundle, whole
    for name in bundle.names:
        bundle.session(name, providers=["CPUExecutionProvider"])


@pytest.mark.slow
def test_bundle_opened_before_a_recook_works_then_says_it_was_replaced(tmp_path: Path) -> None:
    from onnx_cooker.build import publish

    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    platform_dir = project / "build" / "android"
    old = open_bundle(platform_dir)
    profile = project / "platforms" / "android.yaml"
    profile.write_text(profile.read_text() + "compression_level: 3\n")
    assert doit(project, "cook").returncode == 0

    # Within the grace period the old blobs are still there: the old Bundle keeps working.
    for name in old.names:
        old.session(name, providers=["CPUExecutionProvider"])
    # Once it has passed, they go; the old Bundle says why rather than "damaged".
    listed = json.loads((platform_dir / "manifest.json").read_text())["models"]
    publish.retire(platform_dir, listed, now=time.time() + publish.GRACE_SECONDS + 1)
    with pytest.raises(BundleReplacedError, match=r"a newer cook replaced the bundle since it was opened"):
        old.session("net", providers=["CPUExecutionProvider"])
    fresh = open_bundle(platform_dir)
    assert sorted(p.name for p in platform_dir.glob("*.ocb")) == sorted(
        Path(e["file"]).name for e in listed.values()
    )
    for name in fresh.names:
        fresh.session(name, providers=["CPUExecutionProvider"])


@pytest.mark.slow
def test_a_removed_models_staged_files_go_with_its_manifest_entry(tmp_path: Path) -> None:
    """What a cook staged for a model (its entry, blob, verification data) goes when the manifest
    no longer lists it; they stayed for good, and the staged blob, a hard link of the published one,
    kept its bytes on disk after retiring deleted that."""
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    staged = project / "build" / "android" / ".entries"
    assert {p.name for p in staged.iterdir() if p.name.startswith("mlp.")} >= {
        "mlp.json",
        "mlp.ort.ocb",
        "mlp.verify.npz",
    }
    kept = sorted(p.name for p in staged.iterdir() if p.name.startswith("net."))
    (project / "assets" / "mlp.onnx").unlink()
    assert doit(project, "cook").returncode == 0
    assert not [p.name for p in staged.iterdir() if p.name.startswith("mlp.")]
    assert sorted(p.name for p in staged.iterdir() if p.name.startswith("net.")) == kept
    assert set(open_bundle(project / "build" / "android").names) == {"net"}


@pytest.mark.slow
def test_published_blob_unpacks_with_the_stock_tool_recipe_and_the_cli(tmp_path: Path) -> None:
    """What ``inspect`` prints (zstd, head, tail) and ``unpack`` write the same model file."""
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    blob = published(project, "net")
    cli = [sys.executable, "-m", "onnx_cooker.runtime"]
    shown = subprocess.run([*cli, "inspect", str(blob)], capture_output=True, text=True, cwd=REPO, check=True)
    recipe = shown.stdout.split("# unpack with stock tools:\n")[1]
    (tmp_path / "stock").mkdir()
    subprocess.run(["bash", "-euo", "pipefail", "-c", recipe], cwd=tmp_path / "stock", check=True)
    subprocess.run([*cli, "unpack", str(blob), str(tmp_path / "cli")], cwd=REPO, check=True)

    stock = (tmp_path / "stock" / "net.ort").read_bytes()
    assert stock[4:8] == b"ORTM"
    assert stock == (tmp_path / "cli" / "net.ort").read_bytes()


# --- 5. smaller defects -----------------------------------------------------------------------------


@pytest.mark.slow
def test_failure_of_onnxruntimes_reduced_build_tool_is_a_clean_error_naming_the_model(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    shutil.copy2(REPO / "platforms" / "console.yaml", project / "platforms" / "console.yaml")
    onnx.save(int4_model(), project / "assets" / "quant.onnx")
    (project / "assets" / "quant.cook.yaml").write_text("skip_platforms: [android]\n")

    run = doit(project, "cook")

    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert TRACEBACK not in output
    assert "onnxruntime's reduced-build tool failed on model 'quant'" in output
    assert "`type_reduction: false`" in output


@pytest.mark.slow
def test_read_only_build_folder_is_one_clear_line(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root ignores permission bits: make the build folder a file instead (as unusable).
        project = small_project(tmp_path / "p")
        (project / "build").write_text("not a folder")
    else:
        project = small_project(tmp_path / "p")
        (project / "build").mkdir()
        (project / "build").chmod(0o555)
    run = doit(project, "cook")
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert TRACEBACK not in output
    assert f"cannot use build folder {project / 'build'}" in output and "COOK_BUILD_DIR" in output


def test_all_nan_sample_inputs_are_refused(tmp_path: Path) -> None:
    from onnx_cooker.build.run_job import cook as cook_one
    from onnx_cooker.errors import VerifyError
    from tests.models import mlp_model
    from tests.test_cook import job_for, save, shipped_settings

    assets = tmp_path / "assets"
    model = mlp_model()
    save(model, assets, "net")
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    np.savez(assets / "net.inputs.npz", **{model.graph.input[0].name: np.full(shape, np.nan, np.float32)})
    with pytest.raises(VerifyError, match=r"is all NaN, so the cooked model's outputs could not be compared"):
        cook_one(job_for(assets, "net", shipped_settings("android"), tmp_path / "build"))


def _graph(nodes: list, inputs: list, outputs: list, opset: int = 17, extra: tuple = ()) -> onnx.ModelProto:
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs),
        opset_imports=[helper.make_opsetid("", opset), *extra],
    )
    model.ir_version = 9
    return model


_X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
_Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
_X8 = helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2])
MESSAGES = {
    "custom-op": (
        _graph(
            [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.studio")],
            [_X],
            [_Y],
            extra=(helper.make_opsetid("com.studio", 1),),
        ),
        None,
        r"operator 'Frobnicate' of domain 'com\.studio' is unknown to onnxruntime.*`skip_platforms`",
    ),
    "extensions-op": (
        _graph(
            [helper.make_node("StringLower", ["x"], ["y"], domain="ai.onnx.contrib")],
            [helper.make_tensor_value_info("x", TensorProto.STRING, ["n"])],
            [helper.make_tensor_value_info("y", TensorProto.STRING, ["n"])],
            extra=(helper.make_opsetid("ai.onnx.contrib", 1),),
        ),
        None,
        r"operator 'StringLower' of domain 'ai\.onnx\.contrib' is unknown to onnxruntime \(a custom "
        r"operator\) \(onnxruntime-extensions' domain: cook the network alone, .*`skip_platforms`",
    ),
    "missing-locale": (
        _graph(
            [
                helper.make_node(
                    "StringNormalizer", ["x"], ["y"], case_change_action="LOWER", locale="xx_XX.UTF-8"
                )
            ],
            [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
            [helper.make_tensor_value_info("y", TensorProto.STRING, [2])],
        ),
        None,
        r"a StringNormalizer changes case in the locale xx_XX\.UTF-8, which this machine lacks.*`locale-gen`",
    ),
    "opset-too-new": (
        _graph([helper.make_node("Relu", ["x"], ["y"])], [_X], [_Y], opset=30),
        None,
        r"imports opset 30, newer than any onnxruntime.*convert_version\(model, 28\)",
    ),
    "no-outputs": (
        _graph([helper.make_node("Relu", ["x"], ["y"])], [_X], []),
        None,
        r"has no graph outputs.*re-export it with its outputs listed",
    ),
    "npz-not-a-zip": (
        _graph([helper.make_node("Relu", ["x"], ["y"])], [_X], [_Y]),
        lambda path: path.write_bytes(b"not a zip at all"),
        r"not a \.npz archive.*numpy\.savez",
    ),
    "float8-inputs": (
        _graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], [_X8], [_Y], opset=19),
        lambda path: np.savez(path, x=np.zeros(2, dtype=__import__("ml_dtypes").float8_e4m3fn)),
        r"input\(s\) \['x'\] are stored as raw bytes.*set `verify: false`",
    ),
}


@pytest.mark.parametrize("case", sorted(MESSAGES))
def test_errors_say_the_cause_and_the_fix(case: str, tmp_path: Path) -> None:
    from onnx_cooker.build.run_job import cook as cook_one
    from onnx_cooker.errors import CookError
    from tests.test_cook import job_for, save, shipped_settings

    model, inputs, expected = MESSAGES[case]
    assets = tmp_path / "assets"
    source = save(model, assets, "m")
    if inputs is not None:
        inputs(assets / "m.inputs.npz")
    with pytest.raises(CookError) as failure:
        cook_one(job_for(assets, "m", shipped_settings("android"), tmp_path / "build"))
    message = str(failure.value)
    assert message.startswith(str(source))
    assert re.search(expected, message), message


def test_digest_checker_uses_a_remembered_sha256_only_while_the_file_is_unchanged(tmp_path: Path) -> None:
    from onnx_cooker.build.stamps import DigestChecker, file_state, remember

    memo = tmp_path / "memo"
    source = tmp_path / "model.onnx"
    source.write_bytes(b"weights" * 1000)
    remember(memo, source, [*file_state(source), "remembered"])  # not the true digest: proves no read
    checker = DigestChecker()
    DigestChecker.memo_dir = memo
    try:
        assert checker.get_state(str(source), None)[2] == "remembered"
        source.write_bytes(b"WEIGHTS" * 1000)  # same size, new content: the memo no longer applies
        true = hashlib.sha256(source.read_bytes()).hexdigest()
        assert checker.get_state(str(source), None)[2] == true
        state = (source.stat().st_mtime - 1, source.stat().st_size, true)
        assert not checker.check_modified(str(source), source.stat(), state)  # touched, same bytes
        assert checker.check_modified(str(source), source.stat(), (state[0], state[1], "other"))
    finally:
        DigestChecker.memo_dir = None


def test_doit_records_the_cookers_sha256s_and_a_touched_source_is_not_cooked_again(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    source = project / "assets" / "net.onnx"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    import sqlite3

    with sqlite3.connect(project / "build" / ".doit.db") as db:
        state = "\n".join(str(row) for row in db.execute("SELECT * FROM doit"))
    assert digest in state  # doit's state holds the cooker's sha256 of the source, not an md5
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 5_000_000_000))
    again = doit(project, "cook")
    assert again.returncode == 0, again.stderr
    assert ".  cook:android:net" not in again.stdout and "-- cook:android:net" in again.stdout


def test_a_removed_asset_folder_leaves_no_empty_folders_or_stamps_behind(tmp_path: Path) -> None:
    """Retiring deleted files only: a removed or renamed asset folder left its empty folder tree in
    every bundle and in .entries/, and its models' stamps in .stamps/ for good."""
    project = small_project(tmp_path / "p")
    zone = project / "assets" / "world" / "zone1"
    zone.mkdir(parents=True)
    shutil.move(project / "assets" / "mlp.onnx", zone / "mlp.onnx")
    assert doit(project, "cook").returncode == 0
    platform_dir = project / "build" / "android"
    assert (platform_dir / "world" / "zone1").is_dir() and (
        platform_dir / ".stamps" / "cook" / "world"
    ).is_dir()
    shutil.rmtree(project / "assets" / "world")
    assert doit(project, "cook").returncode == 0
    for below in (".entries", ".stamps/cook", ".stamps/times"):
        assert not (platform_dir / below / "world").exists(), below  # staged files and stamps go at once
    assert (platform_dir / "world" / "zone1").is_dir()  # the blob stays for its grace
    ledger = platform_dir / ".stamps" / "retired.json"
    ledger.write_text(json.dumps({name: at - 3600 for name, at in json.loads(ledger.read_text()).items()}))
    assert doit(project, "cook").returncode == 0
    assert not (platform_dir / "world").exists()  # the blob went, and the folders it leaves empty
    assert (platform_dir / "manifest.json").is_file() and (
        platform_dir / ".stamps" / "cook" / "net.json"
    ).is_file()


def test_blobs_an_older_cooker_staged_go_when_the_manifest_is_next_written(tmp_path: Path) -> None:
    """A cooker of blob format 2 staged `.entries/<model>.<format>.zst`; after an upgrade no cook
    writes those names again, and they stayed for good (the size of the old bundle)."""
    from tests.models import dense_model

    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    staged = project / "build" / "android" / ".entries"
    old = [staged / "net.ort.zst", staged / "mlp.onnx.zst"]
    for path in old:
        path.write_bytes(b"a blob of format 2")
    onnx.save(
        dense_model(8, 4, batch=1, seed=99, activation="Sigmoid", name="mlp"), project / "assets" / "mlp.onnx"
    )
    assert doit(project, "cook").returncode == 0  # the manifest is written again
    assert not any(path.exists() for path in old)
    assert (staged / "net.json").is_file() and (staged / "mlp.json").is_file()


def test_a_removed_models_blob_goes_after_its_grace_though_nothing_else_changes(tmp_path: Path) -> None:
    """Retired blobs were deleted only when a manifest was written again: after a model was removed,
    cooks that changed nothing kept its blob for good. The manifest task now runs once one is due."""
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    platform_dir = project / "build" / "android"
    removed = json.loads((platform_dir / "manifest.json").read_text())["models"]["mlp"]["file"]
    (project / "assets" / "mlp.onnx").unlink()
    assert doit(project, "cook").returncode == 0
    assert (platform_dir / removed).is_file()  # within its grace: a reader of the old manifest may use it
    quiet = doit(project, "cook")
    assert quiet.returncode == 0 and ".  cook:android" not in quiet.stdout  # nothing due, nothing ran
    ledger = platform_dir / ".stamps" / "retired.json"
    aged = {name: at - 3600 for name, at in json.loads(ledger.read_text()).items()}
    ledger.write_text(json.dumps(aged))
    swept = doit(project, "cook")
    assert swept.returncode == 0 and not (platform_dir / removed).exists(), swept.stdout
    assert doit(project, "cook").stdout.count(".  ") == 0  # and then nothing again
