"""The ``onnx-cooker`` commands (and ``python -m onnx_cooker.report`` / ``onnx_cooker.farm``) writing into a
pipe whose reader left early (``| head``, ``| true``), run for real in subprocesses: no error message,
no traceback, status 141 as for a command SIGPIPE ends (as ``inspect`` does), a failure's own status
kept, and a size gate's verdict whether or not its table was read; and the "did you mean" of a task
pattern that names a model by its file name alone."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUNTIMES = Path(os.environ.get("COOK_RUNTIMES_DIR") or REPO / ".pytest_cache" / "runtimes")
MODEL = REPO / "assets" / "mnist.onnx"
COOKER = Path(sys.executable).with_name("onnx-cooker")  # the console script, as a studio runs it
CLI = [str(COOKER)] if COOKER.is_file() else [sys.executable, "-m", "onnx_cooker.cli"]
COOKER_LINE = shlex.join(CLI)
PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell shows for a command that SIGPIPE ended
# Python's stdout into a pipe is block-buffered, unless PYTHONUNBUFFERED is set: both are checked.
BUFFERING = pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])


def _env(buffered: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COOK_") and k != "PYTHONUNBUFFERED"}
    env |= {"COOK_RUNTIMES_DIR": str(RUNTIMES), "PYTHONPATH": str(REPO)}
    return env if buffered else env | {"PYTHONUNBUFFERED": "1"}


def _project(root: Path, models: list[str]) -> Path:
    """A tiny project: one platform (android), a copy of mnist for each of ``models`` (``a/b/name``)."""
    (root / "platforms").mkdir(parents=True)
    shutil.copy2(REPO / "platforms" / "android.yaml", root / "platforms")
    for name in models:
        add_model(root, name)
    (root / "cook.toml").write_text('assets = "assets"\nplatforms = "platforms"\nbuild = "build"\n')
    return root


def add_model(root: Path, name: str) -> None:
    target = root / "assets" / f"{name}.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(MODEL, target)


def into_closed_pipe(args: list[str], cwd: Path, buffered: bool = True) -> subprocess.CompletedProcess[str]:
    """``args`` with stdout a pipe whose reader has already gone (``... | head`` once head is done)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            args,
            cwd=cwd,
            env=_env(buffered),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
    finally:
        os.close(write_end)


def shell(line: str, cwd: Path, buffered: bool = True) -> subprocess.CompletedProcess[str]:
    """``line`` in bash with ``set -o pipefail``, as a CI step runs it."""
    return subprocess.run(
        f"set -o pipefail; {line}",
        shell=True,
        executable="/bin/bash",
        cwd=cwd,
        env=_env(buffered),
        capture_output=True,
        text=True,
        timeout=600,
    )


def cook(root: Path, *args: str) -> None:
    done = subprocess.run([*CLI, *args, "cook"], cwd=root, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def game(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cooked project of three models whose build grew from two (``<root>/old``: the build before)."""
    root = _project(tmp_path_factory.mktemp("pipes") / "game", ["top", "vision/face"])
    cook(root)
    shutil.copytree(root / "build", root / "old", ignore=shutil.ignore_patterns(".doit.db*"))
    add_model(root, "world/streaming/tree")
    cook(root)
    return root


# --- D2: a size gate's status never depends on whether its table was read ---------------------------


@BUFFERING
def test_a_size_gate_fails_into_a_closed_pipe_and_says_why_on_stderr(game: Path, buffered: bool) -> None:
    """Every platform grows by half (two models -> three): ``--fail-if-grows 5%`` fails, read or not.
    Before: ``onnx-cooker diff ... | true`` exited 0 without its FAIL lines (or 120), and
    ``python -m onnx_cooker.report diff ... | true`` died of a BrokenPipeError traceback."""
    gate = ["diff", "old", "build", "--fail-if-grows", "5%"]
    read = subprocess.run([*CLI, *gate], cwd=game, env=_env(buffered), capture_output=True, text=True)
    assert read.returncode == 1 and read.stderr.startswith("FAIL: android grows by 5"), read.stderr
    assert "android" in read.stdout
    for args in ([*CLI, *gate], [sys.executable, "-m", "onnx_cooker.report", *gate]):
        done = into_closed_pipe(args, game, buffered)
        assert (done.returncode, done.stderr) == (1, read.stderr)
    for reader in ("true", "head -1"):
        done = shell(f"{COOKER_LINE} diff old build --fail-if-grows 5% | {reader}", game, buffered)
        assert (done.returncode, done.stderr) == (1, read.stderr)


@BUFFERING
def test_a_size_gate_that_passes_into_a_closed_pipe_exits_0(game: Path, buffered: bool) -> None:
    for args in ([*CLI, "diff"], [sys.executable, "-m", "onnx_cooker.report", "diff"]):
        done = into_closed_pipe([*args, "old", "build", "--fail-if-grows", "60%"], game, buffered)
        assert (done.returncode, done.stderr) == (0, "")


# --- D7: every command into a closed pipe: quiet, 141, failures keep their status ------------------------

COMMANDS = {
    "list": ["list"],
    "list --all": ["list", "--all"],
    "info": ["info", "cook:android"],
    "help": ["help"],
    "cook --help": ["cook", "--help"],
    "--help": ["--help"],
    "cook (up to date)": ["cook"],
    "inspect": ["inspect", "build/android"],
    "report": ["report"],
    "diff": ["diff", "old", "build"],
    "cache stats": ["cache", "stats", "--cache", "cache"],
    "cache --help": ["cache", "--help"],
}


@BUFFERING
def test_every_command_into_a_closed_pipe_stops_quietly_with_141(game: Path, buffered: bool) -> None:
    """Before: ``list``, ``info`` and ``help`` exited 2 with "Broken pipe", ``cache stats`` 1 with
    "python -m onnx_cooker.farm: error: [Errno 32] Broken pipe", ``cook`` 3 with doit's traceback,
    ``--help`` 120 with "Exception ignored" when buffered."""
    (game / "cache").mkdir(exist_ok=True)
    commands = {name: [*CLI, *args] for name, args in COMMANDS.items()}
    commands["python -m onnx_cooker.report diff"] = [
        sys.executable,
        "-m",
        "onnx_cooker.report",
        "diff",
        "old",
        "build",
    ]
    commands["python -m onnx_cooker.report"] = [sys.executable, "-m", "onnx_cooker.report", "build"]
    commands["python -m onnx_cooker.farm stats"] = [
        sys.executable,
        "-m",
        "onnx_cooker.farm",
        "stats",
        "--cache",
        "cache",
    ]
    commands["init"] = [*CLI, "init", str(game.parent / f"new-{buffered}")]
    commands["keygen"] = [*CLI, "keygen", str(game.parent / f"keys-{buffered}")]
    found = {name: into_closed_pipe(args, game, buffered) for name, args in commands.items()}
    assert {name: (done.returncode, done.stderr) for name, done in found.items()} == {
        name: (PIPE_CLOSED, "") for name in commands
    }
    assert (game.parent / f"new-{buffered}" / "cook.toml").is_file()  # the work was done, only unread


def test_a_listing_into_a_pipe_that_head_closes_is_no_error_message(game: Path) -> None:
    done = shell(f"{COOKER_LINE} list --all | true", game)
    assert (done.returncode, done.stderr) == (PIPE_CLOSED, "")
    done = shell(f"{COOKER_LINE} list --all | head -1", game)
    assert done.stdout.startswith("cook") and "rror" not in done.stderr, done.stderr


def test_a_cook_into_a_closed_pipe_cooks_everything_and_a_failed_one_keeps_its_status(
    game: Path, tmp_path: Path
) -> None:
    """The reader leaving does not stop the cook half-way (nor print doit's traceback, exit 3)."""
    done = into_closed_pipe([*CLI, "--build", str(tmp_path / "fresh"), "cook"], game)
    assert (done.returncode, done.stderr) == (PIPE_CLOSED, "")
    manifest = json.loads((tmp_path / "fresh" / "android" / "manifest.json").read_text())
    assert sorted(manifest["models"]) == ["top", "vision/face", "world/streaming/tree"]
    broken = _project(tmp_path / "broken", [])
    (broken / "assets").mkdir()
    (broken / "assets" / "bad.onnx").write_bytes(b"no model")
    failed = subprocess.run([*CLI, "cook"], cwd=broken, env=_env(), capture_output=True, text=True)
    assert failed.returncode not in (0, PIPE_CLOSED)
    shutil.rmtree(broken / "build")
    done = into_closed_pipe([*CLI, "cook"], broken)
    assert done.returncode == failed.returncode, done.stderr
    assert "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_output_onto_a_full_disk_is_one_line_not_a_traceback(game: Path) -> None:
    """Before, a traceback or "Exception ignored ... No space left on device" (status 120)."""
    (game / "cache").mkdir(exist_ok=True)
    for args in (
        ["--help"],
        ["list", "--all"],
        ["cook"],
        ["diff", "old", "build"],
        ["cache", "stats", "--cache", "cache"],
    ):
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                [*CLI, *args], cwd=game, env=_env(), stdout=full, stderr=subprocess.PIPE, text=True
            )
        assert done.returncode not in (0, PIPE_CLOSED), (args, done.stderr)
        assert done.stderr.count("\n") == 1 and "No space left on device" in done.stderr, (args, done.stderr)


def test_cache_errors_name_the_command_as_it_was_typed(game: Path) -> None:
    done = subprocess.run(
        [*CLI, "cache", "stats", "--cache", "no-such-cache"],
        cwd=game,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith("onnx-cooker cache: error: cache folder"), (
        done.stderr
    )
    done = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.farm", "stats", "--cache", "no-such-cache"],
        cwd=game,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith("python -m onnx_cooker.farm: error:"), done.stderr


# --- D4: "did you mean" for a model named by its file name --------------------------------------------


def test_a_pattern_naming_a_model_by_its_file_name_suggests_the_model_in_its_folder(tmp_path: Path) -> None:
    """Before: ``cook:*:mlp_003`` suggested the top-level ``mlp_090`` (cooking the suggestion cooked
    another model), and ``cook:*:big_56mb`` nothing."""
    root = _project(
        tmp_path / "game",
        ["mlp_090", "vision/mlp_003", "world/streaming/big_56mb", "ai/nav/head", "ai/combat/head", "head_77"],
    )

    def hint(pattern: str) -> str:
        done = subprocess.run([*CLI, "cook", pattern], cwd=root, env=_env(), capture_output=True, text=True)
        assert done.returncode == 2 and f"no cook task matches {pattern!r}" in done.stderr, done.stderr
        return done.stderr.partition("; did you mean ")[2].strip()

    assert hint("cook:*:mlp_003") == "'cook:*:vision/mlp_003'?"
    assert hint("cook:*:big_56mb") == "'cook:*:world/streaming/big_56mb'?"
    assert hint("cook:andriod:mlp_003") == "'cook:android:vision/mlp_003'?"
    assert hint("cook:*:head") == "'cook:*:ai/combat/head' or 'cook:*:ai/nav/head'?"  # never head_77
    assert hint("cook:*:big_56mv") == "'cook:*:world/streaming/big_56mb'?"  # a near miss in a subfolder
    assert hint("cook:*:mlp_09") == "'cook:*:mlp_090'?"
    assert not (root / "build" / "android").exists()  # nothing was cooked
