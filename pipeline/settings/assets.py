"""Finding the source models of an assets folder and the files that belong to each.

Loaded by ``dodo.py`` at task-loading time: standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ModelError

SETTINGS_SUFFIX = ".cook.yaml"
INPUTS_SUFFIX = ".inputs.npz"
CALIB_SUFFIX = ".calib.npz"  # calibration inputs for `precision: int8-static`
# A model's external data must live beside it as <stem>.onnx.data or <stem>.data, so that the task
# graph can track it without parsing the model when doit loads tasks.
EXTERNAL_DATA_SUFFIXES = (".onnx.data", ".data")
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
            "letters, digits, '_', '-', '.', '+' (not starting with '.' or '-')"
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


def discover(assets_dir: Path) -> tuple[AssetModel, ...]:
    """Every ``*.onnx`` below ``assets_dir`` (sorted by name), with its sidecar files."""
    if not assets_dir.is_dir():
        raise ModelError(f"assets folder {assets_dir} does not exist; create it or set COOK_ASSETS_DIR")
    models = []
    for path in sorted(assets_dir.rglob("*.onnx")):
        if not path.is_file() or any(part.startswith(".") for part in path.relative_to(assets_dir).parts):
            continue
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
        models.append(
            AssetModel(
                name=name,
                path=path,
                external_data=external,
                settings_path=settings if settings.is_file() else None,
                inputs_path=inputs if inputs.is_file() else None,
                calib_path=calib if calib.is_file() else None,
            )
        )
    return tuple(models)
