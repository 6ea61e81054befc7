"""No silent surprises in asset discovery, and one failure read once (docs/assets.md).

A file that looks meant for the cook but is never read (a settings file with no model, a near miss
of a model's name, ``.cook.yml``, ``.ONNX``) gives one ``warning:`` line per run, or fails the run
under ``COOK_STRICT=1``. A model whose name or settings file is unusable does not stop the planning:
its tasks fail with the problem while every other model cooks. A failing model prints its paragraph
once, no UnmetDependency wall, and the run ends with the failed models and the bundles kept.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from onnx_cooker.build.plan import strict_from_env
from onnx_cooker.errors import ModelError, ProfileError
from onnx_cooker.runtime import decode_blob
from onnx_cooker.runtime.constants import MANIFEST_NAME
from onnx_cooker.settings.assets import discover, survey
from tests.test_dodo import (
    PLATFORMS,
    TRACEBACK,
    blob_name,
    cook,
    cook_tasks,
    doit,
    every_task,
)

REPO = Path(__file__).resolve().parents[1]
WARNING = re.compile(r"^warning: (.*)$", re.MULTILINE)

# The four surprises of a new user, each: the file, then what its one line must say.
STRAYS = {
    "ghost.cook.yaml": ["no model named 'ghost'", "name it after its model, or remove it"],
    "tiny-mlp.cook.yaml": ["no model named 'tiny-mlp'", "did you mean tiny_mlp.cook.yaml?"],
    "tiny_mlp.cook.yml": ["settings files end in .cook.yaml", "rename it to tiny_mlp.cook.yaml"],
    "mnist.ONNX": ["model files end in .onnx", "rename it to mnist.onnx"],
}
# Sample and calibration inputs follow the same rule as settings files.
SIDECAR_STRAYS = {
    "ghost.inputs.npz": ["no model named 'ghost'", "sample-input file"],
    "tiny-mlp.calib.npz": ["no model named 'tiny-mlp'", "did you mean tiny_mlp.calib.npz?"],
    "mnist.Inputs.npz": ["end in .inputs.npz (lower case)", "rename it to mnist.inputs.npz"],
}


def add_tiny_mlp(assets: Path) -> None:
    """The model the near misses are near: a copy of mnist named tiny_mlp."""
    shutil.copyfile(REPO / "assets" / "mnist.onnx", assets / "tiny_mlp.onnx")


def write_stray(assets: Path, name: str) -> Path:
    path = assets / name
    if name.lower().endswith(".onnx"):
        path.write_bytes((REPO / "assets" / "mnist.onnx").read_bytes())
    elif name.endswith(".npz"):
        np.savez(path, x=np.zeros(1, np.float32))
    else:
        path.write_text("rtol: 1.0e-3\n", encoding="utf-8")
    return path


# --- discovery itself (fast) -----------------------------------------------------------------------


def test_the_shipped_assets_give_no_warning() -> None:
    found = survey(REPO / "assets")
    assert found.strays == () and found.unusable == ()
    assert [model.name for model in found.models] == [model.name for model in discover(REPO / "assets")]


@pytest.mark.parametrize("name", sorted({**STRAYS, **SIDECAR_STRAYS}))
def test_each_stray_gives_one_line_naming_the_file_and_the_fix(tmp_path: Path, name: str) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    shutil.copyfile(REPO / "assets" / "squeezenet.onnx", assets / "squeezenet.onnx")
    add_tiny_mlp(assets)
    (assets / "notes.txt").write_text("not the cook's\n", encoding="utf-8")  # other files: no word
    path = write_stray(assets, name)

    found = survey(assets)

    (line,) = found.strays
    assert line.startswith(f"{path}: ignored: ")
    for words in {**STRAYS, **SIDECAR_STRAYS}[name]:
        assert words in line, line
    assert sorted(model.name for model in found.models) == ["squeezenet", "tiny_mlp"]


def test_a_near_miss_in_another_folder_is_suggested_with_its_folder(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    (assets / "vision").mkdir(parents=True)
    shutil.copyfile(REPO / "assets" / "vision" / "detector.onnx", assets / "vision" / "detector.onnx")
    (assets / "detector.cook.yaml").write_text("rtol: 1.0e-3\n", encoding="utf-8")

    (line,) = survey(assets).strays

    assert "did you mean vision/detector.cook.yaml?" in line


def test_settings_of_a_model_to_be_renamed_are_not_called_orphans(tmp_path: Path) -> None:
    """``mnist.ONNX`` gets its line; its ``mnist.cook.yaml`` is right once the model is renamed."""
    assets = tmp_path / "assets"
    assets.mkdir()
    write_stray(assets, "mnist.ONNX")
    (assets / "mnist.cook.yaml").write_text("rtol: 1.0e-3\n", encoding="utf-8")

    (line,) = survey(assets).strays

    assert "mnist.ONNX" in line


def test_an_unusable_model_name_is_set_aside_by_survey_and_refused_by_discover(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    shutil.copyfile(REPO / "assets" / "mnist.onnx", assets / "mnist.onnx")
    shutil.copyfile(REPO / "assets" / "mnist.onnx", assets / "new\nline.onnx")

    found = survey(assets)

    assert [model.name for model in found.models] == ["mnist"]
    (unusable,) = found.unusable
    assert unusable.name == "new\\nline"  # printable: it names doit tasks
    assert "cannot be used for output files" in unusable.problem
    with pytest.raises(ModelError, match="cannot be used for output files"):
        discover(assets)


def test_model_names_that_differ_only_in_case_are_both_refused(tmp_path: Path) -> None:
    """`Mnist` and `mnist` (or `Vision/a` and `vision/a`) are one file on Windows and macOS and one
    name to a player: both are set aside naming the other, and the rest of the assets still cook."""
    assets = tmp_path / "assets"
    for relative in ("Mnist.onnx", "mnist.onnx", "Vision/a.onnx", "vision/a.onnx", "vision/b.onnx"):
        (assets / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "assets" / "mnist.onnx", assets / relative)
    if len(list(assets.rglob("*.onnx"))) < 5:
        pytest.skip("this file system ignores case: such assets cannot exist here (CI runs on Linux)")
    found = survey(assets)
    assert [model.name for model in found.models] == ["vision/b"]
    problems = {model.name: model.problem for model in found.unusable}
    assert sorted(problems) == ["Mnist", "Vision/a", "mnist", "vision/a"]
    assert "model name 'mnist' differs only in case from 'Mnist'" in problems["mnist"]
    assert "rename one of them" in problems["Vision/a"]


def test_a_non_ascii_model_name_is_refused_naming_ascii(tmp_path: Path) -> None:
    """é is a letter: the message must say which letters (a user reads 'letters' and sees one)."""
    assets = tmp_path / "assets"
    assets.mkdir()
    shutil.copyfile(REPO / "assets" / "mnist.onnx", assets / "d\u00e9tecteur.onnx")
    (unusable,) = survey(assets).unusable
    assert "rename it to ASCII letters, digits" in unusable.problem


@pytest.mark.parametrize(("value", "strict"), [("", False), ("0", False), ("1", True), ("true", True)])
def test_cook_strict_values(value: str, strict: bool) -> None:
    assert strict_from_env({"COOK_STRICT": value}) is strict


def test_cook_strict_refuses_a_value_it_does_not_know() -> None:
    with pytest.raises(ProfileError, match="COOK_STRICT='maybe'"):
        strict_from_env({"COOK_STRICT": "maybe"})


# --- the real doit -------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_stray_warns_once_per_run_and_the_cook_goes_on(project: Path) -> None:
    assets = project / "assets"
    add_tiny_mlp(assets)
    paths = {name: write_stray(assets, name) for name in {**STRAYS, **SIDECAR_STRAYS}}

    run = cook(project)

    warnings = WARNING.findall(run.stderr)
    assert len(warnings) == len(paths), run.stderr  # one per file, not one per platform
    for name, path in paths.items():
        (line,) = [line for line in warnings if line.startswith(f"{path}: ")]
        assert all(words in line for words in {**STRAYS, **SIDECAR_STRAYS}[name]), line
    assert "warning:" not in run.stdout
    assert run.ran == every_task(project)
    listed = doit(project, "list")
    assert listed.returncode == 0 and len(WARNING.findall(listed.stderr)) == len(paths)


@pytest.mark.slow
def test_an_include_or_exclude_glob_matching_no_model_warns_with_the_fix(project: Path) -> None:
    """exclude: ["vison/*"] (a typo) excludes nothing and says nothing: the models it meant to keep
    out ship. A glob that matches no model is named, once a run; "*" and globs that match are not."""
    profile = project / "platforms" / "android.yaml"
    profile.write_text(profile.read_text() + 'include: ["*"]\nexclude: ["vison/*", "mnist"]\n')
    run = cook(project)
    assert run.returncode == 0, run.output
    (line,) = WARNING.findall(run.stderr)
    assert line == (
        f"{profile}: exclude glob 'vison/*' matches none of the {len(discover(project / 'assets'))} model(s) "
        "in the assets; fix it or remove it (`onnx-cooker list --all` lists the models)"
    )
    assert "cook:android:mnist" not in run.ran and "cook:ios:mnist" in run.ran
    # a glob from a COOK_SET_ variable is the variable's (not the file's), once for every platform
    listed = doit(project, "list", env={"COOK_SET_EXCLUDE": '["nothing*"]'})
    assert listed.returncode == 0, listed.stderr
    assert WARNING.findall(listed.stderr) == [
        f"environment variable COOK_SET_EXCLUDE: exclude glob 'nothing*' matches none of the "
        f"{len(discover(project / 'assets'))} model(s) in the assets; fix it or remove it (`onnx-cooker list "
        "--all` lists the models)"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STRAYS))
def test_cook_strict_fails_the_run_for_each_stray(project: Path, name: str) -> None:
    add_tiny_mlp(project / "assets")
    path = write_stray(project / "assets", name)

    run = doit(project, "cook", env={"COOK_STRICT": "1"})

    assert run.returncode != 0
    assert TRACEBACK not in run.output
    assert "warning:" not in run.output
    (line,) = [line for line in run.stderr.splitlines() if line.startswith(f"{path}: ")]
    assert all(words in line for words in STRAYS[name]), line
    assert "COOK_STRICT=1" in run.stderr
    assert run.ran == set() and not list((project / "build").rglob("*.ocb"))


BROKEN_SETTINGS = {
    "invalid YAML": ("rtol: [1.0e-3\n", "invalid YAML at line 2"),
    "unknown setting": ("rtoll: 1.0e-3\n", "did you mean 'rtol'?"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BROKEN_SETTINGS))
def test_a_broken_settings_file_fails_its_model_alone(project: Path, case: str) -> None:
    text, words = BROKEN_SETTINGS[case]
    settings = project / "assets" / "mnist.cook.yaml"
    settings.write_text(text, encoding="utf-8")

    listed = doit(project, "list", "--all")
    helped = doit(project, "help", "cook")
    run = doit(project, "--continue", "cook")

    assert listed.returncode == 0, listed.output
    assert helped.returncode == 0, helped.output
    assert re.search(r"^cook:android:mnist\s+cook mnist for android: fails", listed.stdout, re.M)
    assert run.returncode != 0 and TRACEBACK not in run.output
    assert run.output.count("TaskFailed - taskid:cook:") == 1, run.output  # its paragraph, once
    paragraph = run.output.split("TaskFailed - taskid:cook:", 1)[1]
    assert str(settings) in paragraph.split("\n\n", 1)[0] and words in paragraph, paragraph
    assert "UnmetDependency" not in run.output
    assert_the_others_cooked(project, "mnist")
    assert re.search(rf"^  mnist: {', '.join(sorted(PLATFORMS))}$", run.stdout, re.M), run.stdout

    settings.unlink()  # fixed: the model cooks, the manifests follow
    assert cook(project).ran >= cook_tasks(project, models=["mnist"])


@pytest.mark.slow
def test_a_model_name_unusable_for_output_files_fails_its_model_alone(project: Path) -> None:
    bad = project / "assets" / "with space.onnx"
    shutil.copyfile(project / "assets" / "mnist.onnx", bad)

    listed = doit(project, "list", "--all")
    run = doit(project, "--continue", "cook")

    assert listed.returncode == 0, listed.output
    assert "cook:android:with space" in listed.stdout
    assert run.returncode != 0 and TRACEBACK not in run.output
    assert run.output.count(f"{bad}: model name 'with space' cannot be used") == 1, run.output
    assert "UnmetDependency" not in run.output
    assert_the_others_cooked(project, "with space")


def assert_the_others_cooked(project: Path, failed: str) -> None:
    build = project / "build"
    names = [model.name for model in survey(project / "assets").models if model.name != failed]
    assert names
    for platform in PLATFORMS:
        for name in names:
            decode_blob((build / blob_name(platform, name)).read_bytes())
        assert not (build / platform / MANIFEST_NAME).exists()  # a model failed: no bundle yet


@pytest.mark.slow
def test_a_failing_model_is_read_once_and_the_bundles_are_kept(project: Path) -> None:
    cook(project)
    manifests = {p: (project / "build" / p / MANIFEST_NAME).read_bytes() for p in PLATFORMS}
    broken = project / "assets" / "broken.onnx"
    broken.write_bytes(np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes())

    run = doit(project, "--continue", "cook")

    assert run.returncode != 0 and TRACEBACK not in run.output
    assert run.output.count("the file is not a readable ONNX model") == 1, run.output
    assert "UnmetDependency" not in run.output
    summary = run.stdout[run.stdout.rindex("#" * 40) :]
    assert re.search(rf"^  broken: {', '.join(sorted(PLATFORMS))}$", summary, re.M), summary
    kept = f"kept their previous bundle (manifest not rewritten): {', '.join(sorted(PLATFORMS))}"
    assert kept in summary, summary
    assert {p: (project / "build" / p / MANIFEST_NAME).read_bytes() for p in PLATFORMS} == manifests
