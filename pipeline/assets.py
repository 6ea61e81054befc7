"""Finding the source models of an assets folder and the files that belong to each.

Loaded by ``dodo.py`` at task-loading time: standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError

SETTINGS_SUFFIX = ".cook.yaml"
INPUTS_SUFFIX = ".inputs.npz"
# A model's external data must live beside it as <stem>.onnx.data or <stem>.data, so that the task
# graph can track it without parsing the model when doit loads tasks.
EXTERNAL_DATA_SUFFIXES = (".onnx.data", ".data")
_NAME_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True, kw_only=True)
class AssetModel:
    """One source model: ``name`` is its path under the assets folder without ``.onnx``."""

    name: str
    path: Path
    external_data: tuple[Path, ...]
    settings_path: Path | None
    inputs_path: Path | None

    @property
    def source_files(self) -> tuple[Path, ...]:
        """Every file whose bytes go into the cook (tracked by doit's file_dep)."""
        extra = (self.inputs_path,) if self.inputs_path else ()
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
    return relative.as_posix()


def discover(assets_dir: Path) -> tuple[AssetModel, ...]:
    """Every ``*.onnx`` below ``assets_dir`` (sorted by name), with its sidecar files."""
    if not assets_dir.is_dir():
        raise ModelError(f"assets folder {assets_dir} does not exist; create it or set COOK_ASSETS_DIR")
    models = []
    for path in sorted(assets_dir.rglob("*.onnx")):
        if not path.is_file() or any(part.startswith(".") for part in path.relative_to(assets_dir).parts):
            continue
        stem = path.with_suffix("")
        external = tuple(
            candidate
            for suffix in EXTERNAL_DATA_SUFFIXES
            if (candidate := stem.with_name(stem.name + suffix)).is_file()
        )
        settings = stem.with_name(stem.name + SETTINGS_SUFFIX)
        inputs = stem.with_name(stem.name + INPUTS_SUFFIX)
        models.append(
            AssetModel(
                name=model_name(assets_dir, path),
                path=path,
                external_data=external,
                settings_path=settings if settings.is_file() else None,
                inputs_path=inputs if inputs.is_file() else None,
            )
        )
    return tuple(models)
