"""The ``onnx-cooker`` command on a studio's own tree: the project file found from any folder of it,
relative paths against that file (and ``COOK_*`` ones against the working directory), ``init``,
and a wheel built from this checkout, installed in a fresh virtual environment outside the
repository, cooking, inspecting and reporting such a tree with the real doit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from onnx_cooker.cli.main import main
from onnx_cooker.cli.project import ProjectError, find_project, load_project

REPO = Path(__file__).resolve().parents[1]
RUNTIMES_CACHE = REPO / ".pytest_cache" / "runtimes"  # the target onnxruntimes the other tests use


def _tree(root: Path, *, pyproject: bool) -> Path:
    """A studio-shaped tree: content/models/<sub>/<model>.onnx, its own platforms/, a project file."""
    models = root / "content" / "models" / "characters"
    models.mkdir(parents=True)
    shutil.copy2(REPO / "assets" / "mnist.onnx", models / "face.onnx")
    (root / "tools").mkdir()
    shutil.copytree(
        REPO / "platforms", root / "platforms", ignore=shutil.ignore_patterns("ios.yaml", "console.yaml")
    )
    table = 'assets = "content/models"\nplatforms = "platforms"\nbuild = "out/cooked"\n'
    if pyproject:
        (root / "pyproject.toml").write_text('[project]\nname = "game"\n\n[tool.onnx-cooker]\n' + table)
    else:
        (root / "cook.toml").write_text(table)
    return root


@pytest.mark.parametrize("pyproject", [False, True])
def test_the_project_file_is_found_from_any_folder_below_it(tmp_path: Path, pyproject: bool) -> None:
    root = _tree(tmp_path / "game", pyproject=pyproject)
    for start in (root, root / "content" / "models" / "characters", root / "tools"):
        project = find_project(start)
        assert project.root == root.resolve()
        assert project.folders == {
            "assets": (root / "content" / "models").resolve(),
            "platforms": (root / "platforms").resolve(),
            "build": (root / "out" / "cooked").resolve(),
        }
    assert load_project(root).file == project.file


def test_cook_variables_override_the_file_relative_to_the_working_directory(tmp_path: Path) -> None:
    root = _tree(tmp_path / "game", pyproject=False)
    project = find_project(root / "tools")
    given = {"COOK_BUILD_DIR": "scratch", "COOK_SIGNING_KEY": "keys/studio.key", "PATH": "x"}
    env = project.environment(given, cwd=root / "tools")
    assert env["COOK_BUILD_DIR"] == str((root / "tools" / "scratch").resolve())
    assert env["COOK_ASSETS_DIR"] == str((root / "content" / "models").resolve())
    # a key path too (it was taken from the project root, unlike the folders and the docs)
    assert env["COOK_SIGNING_KEY"] == str((root / "tools" / "keys" / "studio.key").resolve())
    assert env["PATH"] == "x"


def test_no_project_file_says_how_to_make_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "not-a-cook"\n')  # skipped: no table
    with pytest.raises(ProjectError, match="onnx-cooker init"):
        find_project(tmp_path)
    os.chdir(tmp_path)
    try:
        assert main(["list"]) == 2
    finally:
        os.chdir(REPO)
    assert "run `onnx-cooker init`" in capsys.readouterr().err


def test_a_bad_project_file_is_named_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "cook.toml").write_text('assets = "a"\nasset_dir = "b"\n')
    with pytest.raises(ProjectError, match=r"cook.toml: unknown key\(s\) 'asset_dir'; the keys are assets"):
        find_project(tmp_path)
    (tmp_path / "cook.toml").write_text("assets = [\n")
    with pytest.raises(ProjectError, match="not valid TOML"):
        find_project(tmp_path)
    # a BOM and CRLF lines, as PowerShell 5 writes files: read as the YAML files are
    (tmp_path / "cook.toml").write_bytes(b'\xef\xbb\xbfassets = "content/models"\r\n')
    assert find_project(tmp_path).folders["assets"] == (tmp_path / "content" / "models").resolve()


def test_init_writes_a_project_and_overwrites_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path), "--assets", "content/models"]) == 0
    project = find_project(tmp_path)
    assert project.folders["assets"] == (tmp_path / "content" / "models").resolve()
    assert (tmp_path / "content" / "models").is_dir()
    shipped = sorted(p.name for p in (REPO / "platforms").glob("*.yaml"))
    assert sorted(p.name for p in (tmp_path / "platforms").glob("*.yaml")) == shipped
    # editors find the schema beside the platform files (not the cooker checkout's docs/)
    first = (tmp_path / "platforms" / "android.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=settings.schema.json"
    schema = (tmp_path / "platforms" / "settings.schema.json").read_text()
    assert schema == (REPO / "docs" / "settings.schema.json").read_text()
    before = (tmp_path / "cook.toml").read_text()
    assert main(["init", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "cook.toml").read_text() == before


def test_version_names_what_every_cook_key_holds(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    from onnx_cooker.cook.key import BUNDLE_FORMAT

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"onnx-cooker {metadata.version('onnx-cooker')} (bundle format {BUNDLE_FORMAT}; ")
    assert f"onnxruntime {metadata.version('onnxruntime')}" in line


@pytest.mark.slow
def test_the_sdist_holds_what_a_studio_builds_from_and_no_test_suite(tmp_path: Path) -> None:
    """A studio holding only the released sdist builds the native loader from it (docs/native.md);
    the test suite, which needs the repository's helpers and assets, stays out (it could not run)."""
    import tarfile

    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])",
            str(tmp_path),
        ],
        cwd=REPO,
        check=True,
        timeout=600,
        capture_output=True,
    )
    (sdist,) = tmp_path.glob("onnx_cooker-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in (
        "LICENSE",
        "constraints.txt",
        "platforms/android.yaml",
        "native/build.sh",
        "native/CMakeLists.txt",
        "native/include/onnx_cooker.h",
        "native/include/onnx_cooker.hpp",
        "native/bindings/OnnxCooker.cs",
        "native/src/blob.c",
        "onnx_cooker/runtime/session.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(("tests/", "bench/", "native/out/"))]


def _wheel(where: Path) -> Path:
    """The wheel built from this checkout, in ``where/wheels``."""
    wheels = where / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(REPO),
        ],
        check=True,
        timeout=600,
        capture_output=True,
    )
    (wheel,) = wheels.glob("onnx_cooker-*.whl")
    return wheel


def _fresh_venv(where: Path) -> Path:
    """A new virtual environment holding only the wheel built from this checkout; the wheel's
    dependencies come from the test environment's site-packages, added by path (not as a site
    folder: its editable install of this checkout stays inactive there)."""
    wheel = _wheel(where)
    env_dir = where / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


@pytest.mark.slow
def test_init_finds_the_shipped_profiles_wherever_pip_put_the_wheel(tmp_path: Path) -> None:
    """`pip install --target` (and `--user`, `--prefix`) put the profiles under that folder's
    share/onnx-cooker, not the interpreter's: init looked only there and refused, saying to reinstall."""
    target = tmp_path / "target"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(_wheel(tmp_path)),
        ],
        check=True,
        timeout=600,
        capture_output=True,
    )
    assert sorted(p.name for p in (target / "share" / "onnx-cooker" / "platforms").glob("*.yaml"))
    path = os.pathsep.join([str(target), sysconfig.get_path("purelib")])  # the wheel, then its dependencies
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import os, sys; sys.path[:0] = sys.argv[1].split(os.pathsep); "
            "from onnx_cooker.cli.main import main; sys.exit(main(['init', sys.argv[2]]))",
            path,
            str(tmp_path / "game"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = sorted(p.name for p in (REPO / "platforms").glob("*.yaml"))
    assert sorted(p.name for p in (tmp_path / "game" / "platforms").glob("*.yaml")) == shipped


@pytest.mark.slow
def test_a_wheel_in_a_fresh_venv_cooks_a_studio_tree_from_its_root_and_from_a_subfolder(
    tmp_path: Path,
) -> None:
    python = _fresh_venv(tmp_path / "install")
    command = python.with_name("onnx-cooker")
    root = _tree(tmp_path / "game", pyproject=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COOK_") and k != "PYTHONPATH"}
    env["COOK_RUNTIMES_DIR"] = str(RUNTIMES_CACHE)

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(command), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
        )

    where = subprocess.run(
        [str(python), "-c", "import onnx_cooker; print(onnx_cooker.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (
        str(REPO) not in where and str(tmp_path / "install") in where
    )  # the wheel's copy, not this checkout

    cooked = run("cook", "-n", "2", cwd=root)
    assert cooked.returncode == 0, cooked.stdout[-3000:] + cooked.stderr[-3000:]
    build = root / "out" / "cooked"
    manifest = json.loads((build / "android" / "manifest.json").read_text())
    assert list(manifest["models"]) == ["characters/face"]
    assert (build / ".doit.db").exists() and not (REPO / "out").exists()

    again = run("cook", cwd=root / "content" / "models" / "characters")  # from a subfolder: up to date
    assert again.returncode == 0, again.stderr[-3000:]
    assert "cook:android:characters/face" not in again.stdout.replace("-- cook:android:characters/face", "")

    listed = run("list", "--all", cwd=root / "tools")
    assert "cook:windows-dml:characters/face" in listed.stdout and "cook:ios" not in listed.stdout

    inspected = run("inspect", "out/cooked/android", cwd=root)
    assert inspected.returncode == 0 and "characters/face: ort" in inspected.stdout
    assert "    in  input: tensor(float) [1, 1, 28, 28]" in inspected.stdout  # the signature
    assert "    out logits: tensor(float) [1, 10]" in inspected.stdout
    assert "cooked with onnx " in inspected.stdout and ", onnxruntime " in inspected.stdout  # the key's tools

    reported = run("report", cwd=root / "tools")
    assert reported.returncode == 0 and Path(reported.stdout.strip()) == build / "report.html"
    assert "characters/face" in (build / "report.html").read_text()

    initialized = run("init", str(tmp_path / "new"), cwd=tmp_path)  # platform files from the wheel's data
    assert initialized.returncode == 0, initialized.stderr
    assert (tmp_path / "new" / "platforms" / "windows-dml.yaml").is_file()


def test_a_studio_dodo_py_takes_the_project_file_as_onnx_cooker_does(tmp_path: Path) -> None:
    """docs/cooking.md's dodo.py for a studio's own doit build: the tasks come from the project file's
    folders (not <root>/assets), with COOK_* overriding it; no project file: one line, no traceback."""
    root = _tree(tmp_path / "game", pyproject=False)
    snippet = (REPO / "docs" / "cooking.md").read_text(encoding="utf-8").split("```python\n")[1]
    (root / "dodo.py").write_text(snippet.split("```")[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("COOK_")}
    env["PYTHONPATH"] = str(REPO)

    def doit_list(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "doit", "list", "--all"],
            cwd=root,
            env={**env, **extra},
            capture_output=True,
            text=True,
            check=False,
        )

    listed = doit_list()
    assert listed.returncode == 0, listed.stderr
    assert "cook:android:characters/face" in listed.stdout
    assert (root / "out" / "cooked").is_dir() and not (root / "build").exists()  # the file's build folder
    (tmp_path / "other").mkdir()
    shutil.copy2(REPO / "assets" / "squeezenet.onnx", tmp_path / "other" / "tree.onnx")
    overridden = doit_list(COOK_ASSETS_DIR=str(tmp_path / "other"))
    assert "cook:android:tree" in overridden.stdout and "characters/face" not in overridden.stdout
    (root / "cook.toml").unlink()
    missing = doit_list()
    assert missing.returncode != 0
    assert "no cook.toml" in missing.stderr and "Traceback" not in missing.stderr


def test_a_task_pattern_matching_no_task_is_an_error_with_the_near_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """doit runs nothing for a pattern that matches no task and exits 0: a typo passed for a cook."""
    root = _tree(tmp_path / "game", pyproject=False)
    os.chdir(root)
    try:
        assert main(["cook", "cook:*:characters/fase"]) == 2
        assert main(["cook", "cook:andriod:*"]) == 2
        assert main(["cook", "cook:andriod"]) == 2  # an exact name: doit's own error suggested nothing
    finally:
        os.chdir(REPO)
    err = capsys.readouterr().err
    assert "no cook task matches 'cook:*:characters/fase'" in err
    assert "did you mean 'cook:*:characters/face'?" in err and "did you mean 'cook:android:*'?" in err
    assert "no cook task matches 'cook:andriod'" in err and "did you mean 'cook:android'?" in err
    assert not (root / "out" / "cooked" / "android").exists()  # nothing was cooked


def test_info_of_a_task_that_does_not_exist_is_an_error_with_the_near_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """doit's info raised a KeyError traceback for a mistyped task name."""
    root = _tree(tmp_path / "game", pyproject=False)
    os.chdir(root)
    try:
        assert main(["info", "cook:android:characters/fase"]) == 2
    finally:
        os.chdir(REPO)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert "no cook task matches 'cook:android:characters/fase'" in captured.err
    assert "did you mean 'cook:android:characters/face'?" in captured.err


def test_help_lists_commands_variables_and_doit_options() -> None:
    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "onnx_cooker.cli", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    top = run("--help")
    assert all(command in top for command in ("init", "cook", "inspect", "report", "diff", "cache", "keygen"))
    cook = run("cook", "--help")
    assert "COOK_CACHE" in cook and "COOK_SET_<KEY>" in cook  # the variables it reads
    assert "--continue" in cook and "--process" in cook  # doit's own options of `run`
    assert "onnx-cooker cook [TASK" in cook and "onnx-cooker run" not in cook  # as it is typed here
    assert "True in a cook]" in cook  # the cook's own default, not doit's
    assert "prune" in run("cache", "--help") and "--fail-if-grows" in run("diff", "--help")
    report = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.report", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "diff OLD_BUILD NEW_BUILD" in " ".join(report.stdout.split())  # wrapped by argparse


def test_a_listing_cut_short_by_its_reader_is_no_error() -> None:
    done = subprocess.run(
        f"{sys.executable} -m onnx_cooker.cli list --all | head -1",
        shell=True,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.startswith("cook ")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_folder_options_win_over_the_file_and_the_variables(tmp_path: Path) -> None:
    root = _tree(tmp_path / "game", pyproject=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COOK_")} | {"COOK_BUILD_DIR": "from-env"}
    done = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.cli", "--build", "../elsewhere", "list", "--all"],
        cwd=root / "tools",
        env=env | {"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "cook:android:characters/face" in done.stdout
    assert (root / "elsewhere" / ".doit.db").exists()  # doit's state in the build folder named
    assert not (root / "tools" / "from-env").exists() and not (root / "out").exists()


def test_a_misspelled_cook_variable_is_named_with_the_one_meant(tmp_path: Path) -> None:
    """COOK_BUILDDIR or COOK_CACHE_MOD=read did nothing, silently (a developer machine then uploads
    to the shared cache); COOK_SET_ typos were already caught."""
    from tests.test_reliability import doit, small_project

    project = small_project(tmp_path / "p")
    run = doit(project, "list", COOK_BUILDDIR="out", COOK_CACHE_MOD="read")
    assert run.returncode == 0, run.stderr
    said = "warning: environment variable COOK_BUILDDIR is not one the cooker reads; did you mean "
    assert said + "COOK_BUILD_DIR?" in run.stderr
    assert "COOK_CACHE_MOD is not one the cooker reads; did you mean COOK_CACHE_MODE?" in run.stderr
    quiet = doit(project, "list", COOK_BUILD_DIR="out", COOK_SET_COMPRESSION_LEVEL="3")
    assert "warning" not in quiet.stderr, quiet.stderr


def test_the_variables_the_cooker_reads_are_the_documented_ones() -> None:
    import re

    from onnx_cooker.build.config import VARIABLES

    tables = "".join(
        (REPO / "docs" / page).read_text(encoding="utf-8") for page in ("cooking.md", "build-farms.md")
    )
    documented = set(re.findall(r"^\| `(COOK_[A-Z_]+)` \|", tables, re.M))
    assert documented == VARIABLES, documented ^ VARIABLES  # and COOK_SET_<KEY>, checked key by key
