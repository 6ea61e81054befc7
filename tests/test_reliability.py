"""Faults and tampering: concurrent cooks, a full disk, signed bundles (see docs/reliability.md)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from onnx_cooker.build.signing import keygen
from onnx_cooker.runtime import ChecksumMismatchError, SignatureError, decode_blob, open_bundle
from tests.models import conv_bn_relu_model, large_matmul_model, mlp_model

REPO = Path(__file__).resolve().parents[1]
RUNTIMES_CACHE = REPO / ".pytest_cache" / "runtimes"
TRACEBACK = "Traceback (most recent call last)"


def small_project(root: Path) -> Path:
    """The project's code with two tiny models and one platform: fast to cook, small on disk."""
    root.mkdir(parents=True)
    shutil.copy2(REPO / "dodo.py", root / "dodo.py")
    shutil.copytree(REPO / "onnx_cooker", root / "onnx_cooker", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "platforms").mkdir()
    shutil.copy2(REPO / "platforms" / "android.yaml", root / "platforms" / "android.yaml")
    (root / "assets").mkdir()
    onnx.save(conv_bn_relu_model(), root / "assets" / "net.onnx")
    onnx.save(mlp_model(), root / "assets" / "mlp.onnx")
    return root


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COOK_") and k != "PYTHONPATH"}
    return {**base, "COOK_RUNTIMES_DIR": str(RUNTIMES_CACHE), **extra}


def doit(
    project: Path, *args: str, timeout: float | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m doit <args>`` in ``project``; ``timeout``: a run that would hang fails instead."""
    return subprocess.run(
        [sys.executable, "-m", "doit", *args],
        cwd=project,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_bundle_intact(platform_dir: Path, names: set[str]) -> None:
    bundle = open_bundle(platform_dir)  # checks every blob against the manifest
    assert set(bundle.names) == names
    for name in names:
        decode_blob(bundle.read_blob(name))


@pytest.mark.slow
def test_two_cooks_on_one_build_folder_at_once_end_with_a_correct_bundle(tmp_path: Path) -> None:
    project = small_project(tmp_path / "project")
    command = [sys.executable, "-m", "doit", "cook"]
    first, second = (
        subprocess.Popen(
            command, cwd=project, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    )
    outputs = [first.communicate(timeout=600)[0], second.communicate(timeout=600)[0]]
    assert first.returncode == 0 and second.returncode == 0, outputs
    assert all(TRACEBACK not in output for output in outputs)
    # One cooked; the other waited for the build folder, then found everything up to date.
    assert sum(".  cook:android:net" in output for output in outputs) == 1
    assert any("waiting for it to finish" in output for output in outputs)
    assert_bundle_intact(project / "build" / "android", {"net", "mlp"})


# Holds a build folder's lock (as a running `doit cook` does) until its stdin closes.
_HOLD_LOCK = (
    "import sys; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
    "print('held', flush=True); sys.stdin.read()"
)


@pytest.mark.slow
def test_list_does_not_wait_for_a_running_cook_but_cook_does(tmp_path: Path) -> None:
    project = small_project(tmp_path / "project")
    (project / "build").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(project / "build" / ".cook.lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        for command in (["list", "--all"], ["info", "cook:android:net"], ["help", "cook:android:net"]):
            run = doit(project, *command, timeout=60)  # it would wait for ever if it took the lock
            assert "cook:android:net" in run.stdout + run.stderr, (command, run.stdout + run.stderr)
            assert "waiting" not in run.stderr and TRACEBACK not in run.stderr, (command, run.stderr)
        cook = subprocess.Popen(
            [sys.executable, "-m", "doit", "cook"],
            cwd=project,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        waiting = cook.stderr.readline()
        assert waiting == f"another doit process is using {project / 'build'}; waiting for it to finish...\n"
        assert cook.poll() is None and not list((project / "build").glob("android/*"))
    finally:
        holder.communicate(timeout=60)  # closing its stdin releases the lock
    output, errors = cook.communicate(timeout=600)
    assert cook.returncode == 0, output + errors
    assert_bundle_intact(project / "build" / "android", {"net", "mlp"})


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 24 MiB tmpfs (we run as root on this machine kind); unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount_point)], capture_output=True
    )
    assert done.returncode == 0, f"cannot mount a tmpfs to fill up: {done.stderr!r}"
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.slow
def test_full_disk_fails_cleanly_and_keeps_the_previous_bundle(tmp_path: Path, small_disk: Path) -> None:
    project = small_project(tmp_path / "project")
    build = small_disk / "build"
    assert doit(project, "cook", COOK_BUILD_DIR=str(build)).returncode == 0
    platform_dir = build / "android"
    before = {p: p.read_bytes() for p in platform_dir.rglob("*") if p.is_file()}

    # The new version of the model needs ~4 MiB; leave 512 KiB: enough for doit's own small state
    # writes, not for the blob. (With not one block left, doit's sqlite state database fails first
    # and doit prints its own traceback: see docs/reliability.md.)
    large = large_matmul_model(1024, 1024, seed=5)  # 4 MiB of incompressible weights
    onnx.save(large, project / "assets" / "net.onnx")
    stats = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - (512 << 10)))

    run = doit(project, "cook", COOK_BUILD_DIR=str(build))

    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert "No space left on device" in output and "net.onnx" in output, output
    assert TRACEBACK not in output
    after = {
        p: p.read_bytes() for p in platform_dir.rglob("*") if p.is_file() and not p.name.endswith(".tmp")
    }
    assert {p: after.get(p) for p in before} == before  # every previous file intact, byte for byte
    (small_disk / "filler").unlink()
    assert doit(project, "cook", COOK_BUILD_DIR=str(build)).returncode == 0  # space freed: it repairs
    assert_bundle_intact(platform_dir, {"net", "mlp"})


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("signed")
    project = small_project(root / "project")
    private, public = keygen(root / "keys")
    run = doit(project, "cook", COOK_SIGNING_KEY=str(private))
    assert run.returncode == 0, run.stdout + run.stderr
    return project / "build" / "android", private, public


def copy_bundle(platform_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(platform_dir, tmp_path / "bundle"))


@pytest.mark.slow
def test_signed_bundle_opens_with_the_studio_key(signed: tuple[Path, Path, Path]) -> None:
    platform_dir, _, public = signed
    bundle = open_bundle(platform_dir, public_keys=[public.read_bytes()])
    assert set(bundle.names) == {"net", "mlp"}
    assert (platform_dir / "manifest.json.sig").stat().st_size == 64


@pytest.mark.slow
def test_modified_manifest_is_refused(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    platform_dir, _, public = signed
    bundle_dir = copy_bundle(platform_dir, tmp_path)
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    manifest["models"]["net"]["execution_providers"] = ["CPUExecutionProvider"]
    (bundle_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SignatureError, match="matches none of the 1 trusted key"):
        open_bundle(bundle_dir, public_keys=[public.read_bytes()])


@pytest.mark.slow
def test_replaced_blob_is_refused_although_the_manifest_is_signed(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    platform_dir, _, public = signed
    bundle_dir = copy_bundle(platform_dir, tmp_path)
    files = {
        name: entry["file"]
        for name, entry in json.loads((bundle_dir / "manifest.json").read_text())["models"].items()
    }
    (bundle_dir / files["net"]).write_bytes((bundle_dir / files["mlp"]).read_bytes())
    with pytest.raises(ChecksumMismatchError, match=r"net\.[0-9a-f]{16}\.ort\.ocb"):
        open_bundle(bundle_dir, public_keys=[public.read_bytes()])


@pytest.mark.slow
def test_unsigned_or_foreign_signed_bundles_are_refused(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    platform_dir, _, public = signed
    bundle_dir = copy_bundle(platform_dir, tmp_path)
    _, other_public = keygen(tmp_path / "other")
    with pytest.raises(SignatureError, match="matches none"):
        open_bundle(bundle_dir, public_keys=[other_public.read_bytes()])
    (bundle_dir / "manifest.json.sig").unlink()
    with pytest.raises(SignatureError, match=r"not signed \(manifest\.json\.sig missing\)"):
        open_bundle(bundle_dir, public_keys=[public.read_bytes()])
    assert set(open_bundle(bundle_dir).names) == {"net", "mlp"}  # without keys, no signature is asked for


@pytest.mark.slow
def test_key_rotation_trusts_old_and_new_keys_during_the_switch(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    platform_dir, _, old_public = signed
    _, new_public = keygen(tmp_path / "new")
    keys = [new_public.read_bytes(), old_public.read_bytes()]
    assert set(open_bundle(platform_dir, public_keys=keys).names) == {"net", "mlp"}


def onnxruntime_crashing_model() -> onnx.ModelProto:
    """x [b, s, 64] -> Cast fp16, Transpose, MatMul by a fp16 weight, Cast back: a real onnxruntime bug
    (1.24.4, 1.28.0 and 1.32.0 segfault creating a session of it at ORT_ENABLE_ALL; basic and
    extended load it), met by models converted to float16 (a TransformerEncoder's projections)."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((64, 192)).astype(np.float16)
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
            helper.make_node("Transpose", ["x16"], ["t"], perm=[1, 0, 2]),
            helper.make_node("MatMul", ["t", "w"], ["y16"]),
            helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
        ],
        "fp16_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["s", "b", 192])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cooks fork on Linux only")
def test_a_model_that_crashes_onnxruntime_fails_alone_with_its_fix(tmp_path: Path) -> None:
    """A segfault inside onnxruntime fails that model's cook (a forked child per cook), not doit with
    every other model, nor a `doit -n 2` whose worker died (it hung); the message names the step and a
    fix that works. The optional run of the source at onnxruntime's default level (its rounding noise)
    crashes too, on every platform: isolated on its own, it costs android nothing."""
    project = small_project(tmp_path / "project")  # android (ORT, all): the blob itself loads
    shutil.copy2(REPO / "platforms" / "windows-dml.yaml", project / "platforms" / "windows-dml.yaml")
    onnx.save(onnxruntime_crashing_model(), project / "assets" / "crash.onnx")
    for args in (("cook",), ("-n", "2", "cook")):  # the second: the failed tasks again, in two workers
        run = doit(project, *args, timeout=900)  # a hang fails here
        out = run.stdout + run.stderr
        assert run.returncode in (1, 2), out[-3000:]  # a task failure, not a signal (139 / -11)
        assert "windows-dml: the cook of 'crash' crashed (SIGSEGV) while the cooked blob was loaded" in out
        assert "graph_optimization_level: extended" in out and TRACEBACK not in out
    assert set(open_bundle(project / "build" / "android").names) == {"net", "mlp", "crash"}
    assert not (project / "build" / "windows-dml" / "manifest.json").exists()  # a failed model: none written
    # the fix the message gives: onnxruntime's level at load lowered for this model on this platform
    (project / "assets" / "crash.cook.yaml").write_text(
        "platforms:\n  windows-dml: {ep_session_options: {CPUExecutionProvider: {graph_optimization_level: "
        "extended}}}\n"
    )
    run = doit(project, "cook")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    session = open_bundle(project / "build" / "windows-dml").session("crash")
    x = np.random.default_rng(1).standard_normal((2, 3, 64)).astype(np.float32)
    assert session.run(None, {"x": x})[0].shape == (3, 2, 192)


def test_a_runtime_check_that_crashes_onnxruntime_names_the_model(tmp_path: Path) -> None:
    """The runtime check's worker runs every model of a platform in one process of the target's
    onnxruntime: a segfault there names the model it was on and what to do, not a stderr tail."""
    from onnx_cooker.build.target_check import RuntimeCheckError, run_check
    from tests.runtime_helpers import make_blob
    from tests.test_placement import check_of, platform_of

    fine = make_blob(mlp_model().SerializeToString(), "onnx")
    crashing = make_blob(onnxruntime_crashing_model().SerializeToString(), "onnx")  # loaded at ALL
    platform_dir = platform_of(tmp_path, {"fine": fine, "crash": crashing})
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["fine", "crash"], "onnxruntime", "1.32.0"))
    message = str(failure.value)
    assert (
        "onnxruntime 1.32.0 crashed (signal 11) loading or running 'crash', as a game shipping it" in message
    )
    assert "skip_platforms" in message and TRACEBACK not in message
    # The models after the crash are checked too (a worker of their own): one run says everything
    # wrong, where each run showed one kind of failure (a probe took three runs)
    names = ["fine", "crash", "after", "crash_too"]
    platform_dir = platform_of(
        tmp_path / "more", {"fine": fine, "crash": crashing, "after": fine, "crash_too": crashing}
    )
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, names, "onnxruntime", "1.32.0"))
    message = str(failure.value)
    assert "running 'crash', as a game" in message, message
    assert "\nand the models after it: " in message and "running 'crash_too', as a game" in message, message
    with pytest.raises(RuntimeCheckError) as failure:
        run_check(check_of(platform_dir, ["crash", "after"], "onnxruntime", "1.32.0"))
    assert "(the 1 model(s) after it load and match)" in str(failure.value)
    checks = platform_dir / ".checks"  # the models after it passed: their report was written there
    assert checks.is_dir() and not list(checks.iterdir())  # as a scratch file, and removed


@pytest.mark.slow
def test_ctrl_c_during_a_cook_says_one_line_and_the_next_cook_finishes(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) mid-cook: one line saying what to do, no
    traceback of whatever was waiting (doit's worker queue, a cook's isolated child), exit 130 as
    shells expect; the next cook finishes and the bundle is whole."""
    project = small_project(tmp_path / "project")
    # its own process group, as a terminal's foreground job
    cook, seen = _parallel_cook_under_way(project, start_new_session=True)
    os.killpg(cook.pid, signal.SIGINT)
    rest, _ = cook.communicate(timeout=120)
    output = "".join(seen) + rest
    assert cook.returncode == 130, output
    assert TRACEBACK not in output and "KeyboardInterrupt" not in output, output
    assert "onnx-cooker: interrupted; nothing half-written was published" in output, output
    again = doit(project, "cook", timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert_bundle_intact(project / "build" / "android", {"net", "mlp"})


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_parallel_cook_leaves_no_worker_behind_and_its_log_pipe_ends(
    tmp_path: Path, sent: signal.Signals
) -> None:
    """SIGTERM (a cancelled CI job, a supervisor) or SIGKILL to `onnx-cooker cook -n 2` alone, not its
    process group: its doit workers waited on their queue for ever, holding the log pipe open, and
    `onnx-cooker cook -n 2 | tee log` never ended. They end with it now, and the pipe closes."""
    cook, _ = _parallel_cook_under_way(small_project(tmp_path / "project"))
    workers = _children(cook.pid)
    assert len(workers) >= 2, workers
    cook.send_signal(sent)
    try:
        cook.communicate(timeout=60)  # ends only when no process holds the pipe's write end
    except subprocess.TimeoutExpired:
        left = [pid for pid in workers if _alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        cook.communicate()
        pytest.fail(f"the log pipe stayed open: workers {left} outlived the killed cook")
    deadline = time.monotonic() + 10  # the pipe closes as they exit, a moment before they are gone
    while [pid for pid in workers if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if _alive(pid)]


def _parallel_cook_under_way(project: Path, **popen: Any) -> tuple[subprocess.Popen[str], list[str]]:
    """`onnx-cooker cook -n 2` in ``project`` (a cook.toml of defaults), once a cook task has
    started (its workers are there), and the lines it printed until then."""
    (project / "cook.toml").write_text("")  # onnx-cooker's project file: the defaults
    cook = subprocess.Popen(
        [sys.executable, "-m", "onnx_cooker.cli", "cook", "-n", "2"],
        cwd=project,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )
    assert cook.stdout is not None
    seen = []
    for line in cook.stdout:
        seen.append(line)
        if line.startswith(".  cook:android:"):
            break
    return cook, seen


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie (its parent gone, not reaped yet) runs no more


def test_cooks_doit_lost_track_of_keep_their_outputs_and_a_changed_model_still_cooks(tmp_path: Path) -> None:
    """doit saves its records at the end of a run: a cook killed after some models were cooked (a CI
    timeout, the OOM killer) ran every finished cook again, cooking anew without a cache. A cook whose
    outputs are the files its stamps recorded at these paths, for the cook key its sources and
    settings give now, keeps them; a model changed since is cooked."""
    from tests.models import dense_model
    from tests.test_dodo import cook as doit_cook

    project = small_project(tmp_path / "game")
    doit_cook(project)
    blobs = {p.name: p.read_bytes() for p in (project / "build" / "android").glob("*.ocb")}
    (project / "build" / ".doit.db").unlink()  # what a run killed before doit wrote its records leaves
    onnx.save(
        dense_model(8, 4, batch=1, seed=99, activation="Sigmoid", name="mlp"), project / "assets" / "mlp.onnx"
    )
    after = doit_cook(project)
    kept = "(in place: the same outputs, this cook's by their stamps; `clean cook:android:net` (onnx-cooker"
    assert after.stdout.count(kept) == 1, after.stdout
    assert "cook:android:mlp" in after.ran and after.stdout.count("(in place") == 1, after.stdout
    now = {p.name: p.read_bytes() for p in (project / "build" / "android").glob("*.ocb")}
    net = [name for name in blobs if name.startswith("net.")]
    assert net and all(now[name] == blobs[name] for name in net)  # net's blob as it was
    assert now.keys() != blobs.keys()  # mlp's is another, of the changed model
    again = doit_cook(project)
    assert not any(task.startswith("cook:") for task in again.ran), again.stdout  # recorded now


def test_a_moved_project_and_one_changed_model_redo_only_what_changed(tmp_path: Path) -> None:
    """doit's records name absolute paths: a project moved to another path ran every task again,
    each cook cooking anew; and one changed model re-ran the runtime check of every model. A cook
    whose outputs are the ones its stamps recorded (sha256, by name) for the same cook key now takes
    them where they are, and a model whose last check passed for the same blob is not checked again."""
    from tests.models import dense_model
    from tests.test_dodo import cook as doit_cook

    project = small_project(tmp_path / "here")
    doit_cook(project)
    onnx.save(
        dense_model(8, 4, batch=1, seed=99, activation="Sigmoid", name="mlp"), project / "assets" / "mlp.onnx"
    )
    changed = doit_cook(project)
    assert changed.ran & {"cook:android:net", "cook:android:mlp"} == {"cook:android:mlp"}
    assert (
        "android: 2 model(s) load and match in onnxruntime 1.32.0 (1 of them as their last check here"
        in changed.stdout
    )
    blobs = {p.name: p.read_bytes() for p in (project / "build" / "android").glob("*.ocb")}
    moved = shutil.move(project, tmp_path / "there")
    after = doit_cook(Path(moved))
    assert after.stdout.count("(in place: the same outputs, at a new path)") == 2, after.stdout
    assert "cook:android:net: outputs recorded at another path (a moved folder)" in after.stderr
    assert "changed since the last cook" not in after.stderr  # they did not: the folder moved
    assert "(2 of them as their last check here: the same blobs)" in after.stdout
    assert {p.name: p.read_bytes() for p in (Path(moved) / "build" / "android").glob("*.ocb")} == blobs
    again = doit_cook(Path(moved))
    assert not any(task.startswith("cook:") for task in again.ran), again.stdout  # recorded at the new paths
