"""A studio's project: ``[tool.onnx-cooker]`` in a ``pyproject.toml``, or a ``cook.toml``, found by
walking up from the working directory, naming the assets, platforms and build folders relative to
that file. ``COOK_*`` variables override it (relative ones against the working directory), and the
command line overrides both.

    # cook.toml (or the same keys under [tool.onnx-cooker] in pyproject.toml)
    assets = "content/models"      # source models and their .cook.yaml / .inputs.npz files
    platforms = "platforms"        # one <platform>.yaml per target
    build = "build"                # bundles, the report and doit's state
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnx_cooker.errors import CookError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROJECT_FILE = "cook.toml"
PYPROJECT = "pyproject.toml"
TABLE = "onnx-cooker"
# key in the project file -> the variable that overrides it -> default (relative to the file)
KEYS = {
    "assets": ("COOK_ASSETS_DIR", "assets"),
    "platforms": ("COOK_PLATFORMS_DIR", "platforms"),
    "build": ("COOK_BUILD_DIR", "build"),
}


class ProjectError(CookError):
    """No project file, or one that cannot be used."""


@dataclass(frozen=True)
class Project:
    file: Path  # the cook.toml or pyproject.toml it was read from
    root: Path  # its folder: what relative paths in it are relative to
    folders: dict[str, Path]  # "assets", "platforms", "build" -> absolute path

    def environment(self, env: Mapping[str, str], cwd: Path) -> dict[str, str]:
        """``env`` with each ``COOK_*_DIR`` set to an absolute path: the variable's own value
        (relative to ``cwd``) where it is set, else the project file's; ``COOK_RUNTIMES_DIR`` and
        ``COOK_SIGNING_KEY`` relative to ``cwd`` too."""
        out = dict(env)
        for key, (variable, _) in KEYS.items():
            given = env.get(variable)
            out[variable] = str((cwd / given).resolve() if given else self.folders[key])
        for variable in ("COOK_RUNTIMES_DIR", "COOK_SIGNING_KEY"):  # paths too, from where the user is
            given = env.get(variable)
            if given:
                out[variable] = str((cwd / given).resolve())
        return out


def _table(path: Path) -> dict | None:
    """The onnx-cooker settings in ``path`` (None: a pyproject.toml without them)."""
    try:
        # utf-8-sig: a BOM (PowerShell 5's `Set-Content -Encoding UTF8` writes one), as the YAML files take it
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProjectError(f"{path}: not valid TOML ({exc}); fix the file") from None
    if path.name == PYPROJECT:
        table = data.get("tool", {}).get(TABLE)
        return table if isinstance(table, dict) or table is None else {"": table}
    return data


def _in_folder(folder: Path) -> Project | None:
    """The project whose file is in ``folder`` (a cook.toml first), or None."""
    for name in (PROJECT_FILE, PYPROJECT):
        path = folder / name
        if path.is_file() and (table := _table(path)) is not None:  # None: another tool's pyproject
            return _project(path, table)
    return None


def find_project(start: Path) -> Project:
    """The project whose file is in ``start`` or the nearest folder above it."""
    for folder in (start, *start.parents):
        if (project := _in_folder(folder)) is not None:
            return project
    raise ProjectError(
        f"no {PROJECT_FILE}, and no pyproject.toml with a [tool.{TABLE}] table, in {start} or any "
        f"folder above it; run `onnx-cooker init` in your project's root folder to create one "
        f"(or `onnx-cooker --project PATH ...` to point at one)"
    )


def load_project(path: Path) -> Project:
    """The project of the file ``path`` (a cook.toml, or a pyproject.toml with [tool.onnx-cooker]),
    or of the project file in the folder ``path``."""
    if path.is_dir():
        if (project := _in_folder(path)) is not None:
            return project
        raise ProjectError(f"{path} has no {PROJECT_FILE} and no [tool.{TABLE}] in a pyproject.toml")
    if not path.is_file():
        raise ProjectError(f"{path}: no such file; give a cook.toml, a pyproject.toml or their folder")
    table = _table(path)
    if table is None:
        raise ProjectError(f"{path} has no [tool.{TABLE}] table; add one (see `onnx-cooker init --help`)")
    return _project(path, table)


def _project(path: Path, table: dict) -> Project:
    where = f"{path}" + (f" [tool.{TABLE}]" if path.name == PYPROJECT else "")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ProjectError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
            f"{', '.join(KEYS)} (folders, relative to the file)"
        )
    root = path.resolve().parent
    resolved = {}
    for key, (_, default) in KEYS.items():
        value = table.get(key, default)
        if not isinstance(value, str) or not value:
            raise ProjectError(f"{where}: {key} must be a folder path (a string), not {value!r}")
        resolved[key] = (root / os.path.expanduser(value)).resolve()
    return Project(file=path.resolve(), root=root, folders=resolved)


def project_tasks(folder: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``DOIT_CONFIG`` and ``task_cook`` for a studio's own ``dodo.py`` in ``folder``: the project
    whose file is there (``cook.toml``, or ``[tool.onnx-cooker]`` in ``pyproject.toml``), its folders
    as ``onnx-cooker`` takes them, each overridden by its ``COOK_*`` variable (default: the
    process's environment). A missing or bad project file ends doit with its message, no traceback."""
    from onnx_cooker.build.doitfile import cook_namespace  # the cook's modules: not for `onnx-cooker --help`

    try:
        project = load_project(folder)
    except ProjectError as exc:
        raise SystemExit(f"error: {exc}") from None
    return cook_namespace(project.root, project.environment(os.environ if env is None else env, Path.cwd()))
