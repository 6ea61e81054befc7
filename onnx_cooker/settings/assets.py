"""Finding the source models of an assets folder and the files that belong to each.

Loaded by ``dodo.py`` at task-loading time: standard library only.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from onnx_cooker.errors import ModelError

SETTINGS_SUFFIX = ".cook.yaml"
INPUTS_SUFFIX = ".inputs.npz"
CALIB_SUFFIX = ".calib.npz"  # calibration inputs for `precision: int8-static`
# A model's external data must live beside it as <stem>.onnx.data, <stem>.data or <stem>.onnx_data
# (what onnx.save and torch.onnx.export write; Hugging Face Optimum's exports), so that the task
# graph can track it without parsing the model when doit loads tasks.
EXTERNAL_DATA_SUFFIXES = (".onnx.data", ".data", ".onnx_data")
_NAME_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
# Output files add up to 26 characters to a name part (".applied.ort", temp-file suffixes such as
# ".<name>.verify.npz.<8 random>.tmp") and file systems allow 255 per part.
MAX_NAME_PART = 200


@dataclass(frozen=True, kw_only=True)
class AssetModel:
    """One source model: ``name`` is its path under the assets folder without ``.onnx``."""

    name: str
    path: Path
    external_data: tuple[Path, ...]
    settings_path: Path | None
    inputs_path: Path | None
    calib_path: Path | None = None

    @property
    def source_files(self) -> tuple[Path, ...]:
        """Every file whose bytes go into the cook (tracked by doit's file_dep)."""
        extra = tuple(path for path in (self.inputs_path, self.calib_path) if path is not None)
        return (self.path, *self.external_data, *extra)


def model_name(assets_dir: Path, path: Path) -> str:
    """``assets/vision/detector.onnx`` -> ``vision/detector``; refuses names unsafe as output paths."""
    relative = path.relative_to(assets_dir).with_suffix("")
    parts = relative.parts
    if not parts or not all(_NAME_PART.match(part) for part in parts):
        raise ModelError(
            f"{path}: model name {relative.as_posix()!r} cannot be used for output files; rename it to "
            "ASCII letters, digits, '_', '-', '.', '+' (not starting with '.' or '-'): names go into "
            "file names, manifests and engines' asset paths on every platform"
        )
    longest = max(parts, key=len)
    if len(longest) > MAX_NAME_PART:
        raise ModelError(
            f"{path}: model name {relative.as_posix()!r} is too long for output files ({len(longest)} "
            f"characters in one part, at most {MAX_NAME_PART}); shorten it"
        )
    return relative.as_posix()


def _inside(assets_dir: Path, path: Path, name: str) -> None:
    """Everything a model is cooked from must really live in the assets folder (links included)."""
    if not path.resolve().is_relative_to(assets_dir.resolve()):
        raise ModelError(
            f"{path}: a file of model {name!r} is a link to {path.resolve()}, outside the assets folder "
            f"{assets_dir}; copy it into the assets folder so that it is cooked from there"
        )


@dataclass(frozen=True, kw_only=True)
class UnusableModel:
    """A model file that cannot be cooked as it is: its cook tasks fail with ``problem`` (which names
    the file and the fix), while every other model cooks. ``name`` is printable, for task names."""

    name: str
    path: Path
    problem: str


@dataclass(frozen=True, kw_only=True)
class Survey:
    """What an assets folder holds: the models, those that cannot be cooked, and ``strays``: one line
    (the file, why it is ignored, the fix) per file that looks meant for the cook but is never read."""

    models: tuple[AssetModel, ...]
    unusable: tuple[UnusableModel, ...]
    strays: tuple[str, ...]


def discover(assets_dir: Path) -> tuple[AssetModel, ...]:
    """Every ``*.onnx`` below ``assets_dir`` (sorted by name), with its sidecar files; raises the
    first unusable model's ModelError."""
    found = survey(assets_dir)
    if found.unusable:
        raise ModelError(found.unusable[0].problem)
    return found.models


def survey(assets_dir: Path) -> Survey:
    """Every file below ``assets_dir`` (hidden ones and linked folders aside): the models, the model
    files that cannot be cooked, and the files that would be ignored without a word."""
    if not assets_dir.is_dir():
        raise ModelError(f"assets folder {assets_dir} does not exist; create it or set COOK_ASSETS_DIR")
    files = [
        path
        for path in sorted(assets_dir.rglob("*"))
        if not any(part.startswith(".") for part in path.relative_to(assets_dir).parts) and path.is_file()
    ]
    models, unusable = [], []
    for path in files:
        if path.suffix != ".onnx":
            continue
        try:
            models.append(_asset(assets_dir, path))
        except ModelError as exc:
            shown = path.relative_to(assets_dir).with_suffix("").as_posix()
            name = shown.encode("unicode_escape").decode("ascii")  # a task name: one printable line
            unusable.append(UnusableModel(name=name, path=path, problem=str(exc)))
    models, clashing = _case_clashes(models)
    unusable += clashing
    strays = _strays(assets_dir, files, [m.path for m in models], [u.path for u in unusable])
    return Survey(models=tuple(models), unusable=tuple(unusable), strays=strays)


def _case_clashes(models: list[AssetModel]) -> tuple[list[AssetModel], list[UnusableModel]]:
    """Models whose names differ only in case (``Mnist`` and ``mnist``, ``Vision/a`` and ``vision/a``)
    are one file on Windows and macOS and in case-insensitive pak files, and one name to a player of a
    game: each is refused, naming the other."""
    by_folded: dict[str, list[AssetModel]] = {}
    for model in models:
        by_folded.setdefault(model.name.casefold(), []).append(model)
    kept, refused = [], []
    for model in models:
        others = [m.name for m in by_folded[model.name.casefold()] if m is not model]
        if not others:
            kept.append(model)
            continue
        problem = (
            f"{model.path}: model name {model.name!r} differs only in case from "
            f"{', '.join(map(repr, others))}: one file on Windows, macOS and case-insensitive archives; "
            "rename one of them"
        )
        refused.append(UnusableModel(name=model.name, path=model.path, problem=problem))
    return kept, refused


def _asset(assets_dir: Path, path: Path) -> AssetModel:
    name = model_name(assets_dir, path)  # first: a refused name is never used for a file-system call
    _inside(assets_dir, path, name)
    stem = path.with_suffix("")
    external = tuple(
        candidate
        for suffix in EXTERNAL_DATA_SUFFIXES
        if (candidate := stem.with_name(stem.name + suffix)).is_file()
    )
    settings = stem.with_name(stem.name + SETTINGS_SUFFIX)
    inputs = stem.with_name(stem.name + INPUTS_SUFFIX)
    calib = stem.with_name(stem.name + CALIB_SUFFIX)
    for sidecar in (*external, settings, inputs, calib):
        if sidecar.is_file():
            _inside(assets_dir, sidecar, name)
    return AssetModel(
        name=name,
        path=path,
        external_data=external,
        settings_path=settings if settings.is_file() else None,
        inputs_path=inputs if inputs.is_file() else None,
        calib_path=calib if calib.is_file() else None,
    )


# The files beside a model that the cook reads, and what each one is.
SIDECARS = {SETTINGS_SUFFIX: "settings", INPUTS_SUFFIX: "sample-input", CALIB_SUFFIX: "calibration-input"}


def _strays(
    assets_dir: Path, files: list[Path], model_paths: list[Path], unusable_paths: list[Path]
) -> tuple[str, ...]:
    """A line per file named almost like a model or a model's sidecar: ``mnist.ONNX``,
    ``mnist.cook.yml``, ``ghost.cook.yaml`` with no ``ghost.onnx``; other files are not the cook's."""
    # the models (unusable ones too), and the files that will be models once renamed as told
    stems = {path.with_suffix("") for path in (*model_paths, *unusable_paths)}
    stems |= {path.with_name(path.name[:-5]) for path in files if path.name.lower().endswith(".onnx")}
    # near misses are looked for among usable models only: an unusable name is never used for a
    # file-system call
    names = {path.with_suffix("").relative_to(assets_dir).as_posix(): path for path in model_paths}
    lines = []
    present = set(files)
    for path in files:
        name, lower = path.name, path.name.lower()
        if lower.endswith(".onnx") and path.suffix != ".onnx":
            why = "model files end in .onnx (lower case)"
            lines.append(f"{path}: ignored: {why}; {_rename(path, name[:-5] + '.onnx', present)}")
        elif lower.endswith(".cook.yml"):
            why = "settings files end in .cook.yaml"
            lines.append(f"{path}: ignored: {why}; {_rename(path, name[:-4] + '.yaml', present)}")
        for suffix, what in SIDECARS.items():
            if not lower.endswith(suffix):
                continue
            stem = name[: -len(suffix)]
            if not name.endswith(suffix):
                why = f"{what} files end in {suffix} (lower case)"
                lines.append(f"{path}: ignored: {why}; {_rename(path, stem + suffix, present)}")
            elif path.with_name(stem) not in stems:
                lines.append(_orphan(assets_dir, path, suffix, what, names))
    return tuple(lines)


def _rename(path: Path, name: str, present: set[Path]) -> str:
    if path.with_name(name) in present:
        return f"rename it to {name} (there is one already: keep one of the two)"
    return f"rename it to {name}"


def _orphan(assets_dir: Path, path: Path, suffix: str, what: str, names: dict[str, Path]) -> str:
    """``ghost.cook.yaml``: no model named ghost; a near miss of a model's name gets a "did you mean"."""
    name = path.relative_to(assets_dir).as_posix()[: -len(suffix)]
    free = {model.lower(): model for model, model_path in names.items() if not _has(model_path, suffix)}
    close = difflib.get_close_matches(name.lower(), free, n=1)
    fix = f"did you mean {free[close[0]]}{suffix}?" if close else "name it after its model, or remove it"
    return f"{path}: ignored: no model named {name!r} ({name}.onnx) for this {what} file; {fix}"


def _has(model_path: Path, suffix: str) -> bool:
    return model_path.with_name(model_path.name[:-5] + suffix).is_file()
