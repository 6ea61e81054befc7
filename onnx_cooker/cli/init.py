"""``onnx-cooker init``: a commented ``cook.toml``, the shipped platform profiles and an assets folder,
in a studio's project folder. Nothing is overwritten."""

from __future__ import annotations

import sysconfig
from importlib import metadata
from pathlib import Path

from onnx_cooker.cli.project import PROJECT_FILE, ProjectError
from onnx_cooker.settings.docs import schema_text

SCHEMA_LINE = "# yaml-language-server:"
SCHEMA_FILE = "settings.schema.json"

COOK_TOML = """\
# onnx-cooker project file: `onnx-cooker cook` from this folder or any folder below it.
# Folders are relative to this file; COOK_ASSETS_DIR, COOK_PLATFORMS_DIR and COOK_BUILD_DIR
# override them. The same keys may live under [tool.onnx-cooker] in a pyproject.toml instead.

# Source models: <name>.onnx (+ <name>.onnx.data), optional <name>.cook.yaml settings and
# <name>.inputs.npz verification inputs; subfolders make names like characters/face.
assets = "{assets}"

# One <platform>.yaml per target: format, optimization, EPs, onnxruntime version, compression...
platforms = "platforms"

# Bundles (build/<platform>/), the report (build/report.html) and doit's state.
build = "build"
"""


def shipped_platforms() -> Path:
    """The platform profiles this installation ships: the checkout's ``platforms/`` (an editable
    install), else the copy the wheel installed as data files under ``share/onnx-cooker/platforms``
    of the prefix pip installed it to (a venv, ``--user``, ``--prefix``: three folders above the
    package's site folder; ``--target``: the target folder itself), or where its installed files'
    record puts them, or under the interpreter's default data folder."""
    package = Path(__file__).resolve().parents[1]  # onnx_cooker/
    checkout = package.parent / "platforms"
    if checkout.is_dir() and (package.parent / "pyproject.toml").is_file():
        return checkout
    shared = Path("share", "onnx-cooker", "platforms")
    candidates = [folder / shared for folder in (package.parent, *list(package.parent.parents)[:3])]
    try:
        files = metadata.distribution("onnx-cooker").files or []
    except metadata.PackageNotFoundError:
        files = []
    candidates += [
        Path(str(f.locate())).parent for f in files if f.match("share/onnx-cooker/platforms/*.yaml")
    ]
    candidates.append(Path(sysconfig.get_path("data")) / shared)
    for folder in dict.fromkeys(candidates):
        if any(folder.glob("*.yaml")):
            return folder
    raise ProjectError(
        f"the shipped platform profiles are missing (looked in {checkout} and under "
        f"{', '.join(str(c) for c in dict.fromkeys(candidates))}); reinstall onnx-cooker "
        "(`pip install --force-reinstall onnx-cooker`)"
    )


def init(folder: Path, *, assets: str = "assets") -> str:
    """Write ``folder/cook.toml``, ``folder/platforms/*.yaml`` and ``folder/<assets>/``; what was done."""
    project = folder / PROJECT_FILE
    if project.exists():
        raise ProjectError(f"{project} already exists: nothing written (edit it, or remove it first)")
    folder.mkdir(parents=True, exist_ok=True)
    done = []
    platforms = folder / "platforms"
    platforms.mkdir(exist_ok=True)
    for source in sorted(shipped_platforms().glob("*.yaml")):
        target = platforms / source.name
        if target.exists():
            done.append(f"kept {target} (already there)")
            continue
        # The shipped comment points into the cooker's checkout: here it names the schema beside it.
        lines = [
            line
            for line in source.read_text(encoding="utf-8").splitlines()
            if not line.startswith(SCHEMA_LINE)
        ]
        text = "\n".join([f"{SCHEMA_LINE} $schema={SCHEMA_FILE}", *lines]) + "\n"
        target.write_text(text, encoding="utf-8")
        done.append(f"wrote {target}")
    schema = platforms / SCHEMA_FILE  # what editors complete and check platform files with
    if not schema.exists():
        schema.write_text(schema_text(), encoding="utf-8")
        done.append(f"wrote {schema} (editors read it through each platform file's first line)")
    (folder / assets).mkdir(parents=True, exist_ok=True)
    project.write_text(COOK_TOML.format(assets=assets), encoding="utf-8")
    done.append(f"wrote {project}")
    done.append(f"next: put your .onnx models in {folder / assets}, then run `onnx-cooker cook`")
    return "\n".join(done)
