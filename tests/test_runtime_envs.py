"""The runtime check's onnxruntime environments: one per version for every build folder of the user,
made once, safely when two processes need the same one at once, never used half made.

The slow tests install a real onnxruntime with the real pip (one install each, from pip's cache
after the first run) into temporary folders; the user's own runtimes cache is never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

import platformdirs
import pytest
from filelock import FileLock

from onnx_cooker.build import target_check
from onnx_cooker.build.config import folders
from onnx_cooker.build.target_check import (
    READY_NAME,
    RuntimeCheckError,
    ensure_runtime,
    environment_dir,
    lock_path,
    sweep_stale_staging,
)
from onnx_cooker.fsutil import STALE_TEMP_SECONDS
from tests.models import relu_model
from tests.test_cook import save
from tests.test_dodo import doit_env

REPO = Path(__file__).resolve().parents[1]
VERSION = "1.24.4"  # windows-dml's, as in test_target_check.py: pip's cache usually has its wheel
PROFILE = Path("platforms/windows-dml.yaml")
TIMEOUT = 600  # seconds; only guards against a hang
# A process that calls ensure_runtime once both processes are ready (argv: runtimes, ready file, go file).
CALLER = """
import sys, time
from pathlib import Path
from onnx_cooker.build.target_check import ensure_runtime
runtimes, ready, go = (Path(arg) for arg in sys.argv[1:4])
ready.touch()
while not go.exists():
    time.sleep(0.01)
print(ensure_runtime(sys.argv[4], runtimes, Path("platforms/windows-dml.yaml")))
"""


def caller(runtimes: Path, name: str, go: Path, version: str = VERSION) -> subprocess.Popen[str]:
    ready = runtimes.parent / f"{name}.ready"
    process = subprocess.Popen(
        [sys.executable, "-c", CALLER, str(runtimes), str(ready), str(go), version],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return process


def imported_version(python: Path) -> str:
    probe = "import numpy, zstandard, onnxruntime; print(onnxruntime.__version__)"
    done = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def fake_environment(env_dir: Path, prints: str) -> None:
    """A folder shaped like an environment whose python prints ``prints`` (what the probe reads)."""
    (env_dir / "bin").mkdir(parents=True)
    python = env_dir / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho {prints}\n")
    python.chmod(0o755)


# --- where the environments are ------------------------------------------------------------------


def test_the_default_runtimes_folder_is_the_users_cache_not_the_build_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    where = folders({"COOK_BUILD_DIR": "build-a"}, tmp_path / "checkout")
    assert where.runtimes == Path(platformdirs.user_cache_dir("onnx-cooker", appauthor=False)) / "runtimes"
    assert where.runtimes == (tmp_path / "cache" / "onnx-cooker" / "runtimes").resolve()
    assert folders({"COOK_BUILD_DIR": "build-b"}, tmp_path / "checkout").runtimes == where.runtimes


def test_a_relative_cook_runtimes_dir_is_taken_from_where_the_command_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import doit.loader

    checkout, start = tmp_path / "checkout", tmp_path / "studio"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(doit.loader, "initial_workdir", None)  # not under doit: the working directory
    env = {"COOK_RUNTIMES_DIR": "envs"}
    assert folders(env, checkout).runtimes == (tmp_path / "envs").resolve()
    # doit moved into the folder of dodo.py before loading it: the folder it was started in counts
    monkeypatch.setattr(doit.loader, "initial_workdir", str(start))
    assert folders(env, checkout).runtimes == (start / "envs").resolve()
    absolute = {"COOK_RUNTIMES_DIR": str(tmp_path / "abs")}
    assert folders(absolute, checkout).runtimes == (tmp_path / "abs").resolve()


# --- finished, unfinished and locked environments, without pip -----------------------------------


def test_a_finished_environment_is_used_without_waiting_for_its_lock(tmp_path: Path) -> None:
    final = environment_dir(tmp_path, VERSION)
    fake_environment(final, "not-even-a-version")
    (final / READY_NAME).write_text("{}")
    held = FileLock(lock_path(final))
    held.acquire()  # as by another process making some environment
    try:
        assert ensure_runtime(VERSION, tmp_path, PROFILE, install_timeout=0.1) == final / "bin" / "python"
    finally:
        held.release()


def test_an_unmarked_environment_that_imports_the_version_is_marked_and_kept(tmp_path: Path) -> None:
    """An environment an older cooker made (no ready marker) is probed once, then marked."""
    final = environment_dir(tmp_path, VERSION)
    fake_environment(final, VERSION)
    inode = final.stat().st_ino
    assert ensure_runtime(VERSION, tmp_path, PROFILE) == final / "bin" / "python"
    assert (final / READY_NAME).is_file() and final.stat().st_ino == inode


def test_a_cook_waiting_for_another_gives_up_naming_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(target_check, "LOCK_GRACE", 0)
    final = environment_dir(tmp_path, VERSION)
    held = FileLock(lock_path(final))
    held.acquire()
    try:
        with pytest.raises(RuntimeCheckError) as failure:
            ensure_runtime(VERSION, tmp_path, PROFILE, install_timeout=0.5)
    finally:
        held.release()
    assert str(lock_path(final)) in str(failure.value) and "COOK_RUNTIMES_DIR" in str(failure.value)
    assert "waiting for another process making the onnxruntime 1.24.4 environment" in capsys.readouterr().err
    assert not final.exists()


def test_the_sweep_keeps_a_staging_folder_whose_environment_is_being_made(tmp_path: Path) -> None:
    busy = tmp_path / ".onnxruntime-1.24.4-py311.abc123"
    idle = tmp_path / ".onnxruntime-1.28.0-py311.def456"
    for folder in (busy, idle):
        folder.mkdir()
        past = time.time() - STALE_TEMP_SECONDS - 60
        os.utime(folder, (past, past))
    held = FileLock(lock_path(environment_dir(tmp_path, "1.24.4")))
    held.acquire()
    try:
        sweep_stale_staging(tmp_path)
    finally:
        held.release()
    assert busy.exists() and not idle.exists()


# --- real pip, real environments -------------------------------------------------------------------


@pytest.mark.slow
def test_two_build_folders_share_one_environment_from_the_users_cache(project: Path, tmp_path: Path) -> None:
    """Two build folders cooked one after the other, with no COOK_RUNTIMES_DIR: the first makes the
    environment in the user's cache folder, the second uses it and makes nothing."""
    for profile in (project / "platforms").glob("*.yaml"):
        if profile.name != "windows-dml.yaml":
            profile.unlink()
    shutil.rmtree(project / "assets")
    save(relu_model(17), project / "assets", "relu")
    cache = tmp_path / "cache"
    env = doit_env({"XDG_CACHE_HOME": str(cache)})
    env.pop("COOK_RUNTIMES_DIR", None)  # the default: the user's cache folder
    env.setdefault("PIP_CACHE_DIR", platformdirs.user_cache_dir("pip"))  # pip's wheels, not the test's
    runtimes = cache / "onnx-cooker" / "runtimes"
    final = environment_dir(runtimes, VERSION)

    def cook(build: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "doit", "cook"],
            cwd=project,
            env={**env, "COOK_BUILD_DIR": build},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "windows-dml: 1 model(s) load and match in onnxruntime 1.24.4" in done.stdout
        assert not (project / build / ".runtimes").exists()
        return done.stdout + done.stderr

    first = cook("build-a")
    assert f"creating the onnxruntime {VERSION} environment for the runtime check in {final}" in first
    assert (final / READY_NAME).is_file()
    before = {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in runtimes.iterdir()}
    marker = (final / READY_NAME).stat().st_mtime_ns

    second = cook("build-b")
    assert "creating" not in second and "waiting" not in second
    after = {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in runtimes.iterdir()}
    assert after == before and (final / READY_NAME).stat().st_mtime_ns == marker


@pytest.mark.slow
def test_two_processes_needing_one_version_at_once_share_one_install(tmp_path: Path) -> None:
    runtimes, go = tmp_path / "runtimes", tmp_path / "go"
    runtimes.mkdir()
    first, second = caller(runtimes, "first", go), caller(runtimes, "second", go)
    go.touch()  # both have imported everything: they ask at the same moment
    outputs = [process.communicate(timeout=TIMEOUT) for process in (first, second)]

    final = environment_dir(runtimes, VERSION)
    for process, (stdout, stderr) in zip((first, second), outputs, strict=True):
        assert process.returncode == 0, stderr
        assert stdout.strip() == str(final / "bin" / "python")
    errors = "".join(stderr for _, stderr in outputs)
    assert errors.count("creating the onnxruntime") == 1, errors
    assert errors.count("waiting for another process making the onnxruntime") == 1, errors
    assert sorted(path.name for path in runtimes.iterdir()) == [lock_path(final).name, final.name]
    assert (final / READY_NAME).is_file()
    assert imported_version(final / "bin" / "python") == VERSION


@pytest.mark.slow
def test_a_build_killed_part_way_is_never_used_and_a_half_made_environment_is_made_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtimes, go = tmp_path / "runtimes", tmp_path / "go"
    runtimes.mkdir()
    final = environment_dir(runtimes, VERSION)
    go.touch()
    killed = caller(runtimes, "killed", go)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and killed.poll() is None:
        if any((staging / "bin" / "pip").exists() for staging in runtimes.glob(f".{final.name}.*")):
            break  # the venv is made: pip is installing onnxruntime now
        time.sleep(0.05)
    time.sleep(0.5)
    os.killpg(killed.pid, signal.SIGKILL)  # the caller and its pip, mid-install
    killed.communicate(timeout=60)
    assert not final.exists()
    (leftover,) = (path for path in runtimes.glob(f".{final.name}.*") if path.is_dir())

    # And a half-made environment under the final name (a venv without onnxruntime, no marker), as a
    # build in place killed after its venv was made would leave.
    venv.EnvBuilder(with_pip=False).create(final)
    (final / "half-made").touch()

    python = ensure_runtime(VERSION, runtimes, PROFILE)

    assert python == final / "bin" / "python" and (final / READY_NAME).is_file()
    assert not (final / "half-made").exists() and not leftover.exists()
    assert sorted(path.name for path in runtimes.iterdir()) == [lock_path(final).name, final.name]
    err = capsys.readouterr().err
    assert f"{final} is unfinished" in err and "creating the onnxruntime 1.24.4 environment" in err
    assert imported_version(python) == VERSION
