"""The loader ships inside games: it must work with only onnxruntime, numpy, zstandard and the stdlib."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import REPO, make_blob, run_source, sample_input, to_ort_format

from tests.models import tiny_model

COOKING_ONLY = ("onnx", "yaml", "doit", "flatbuffers")

# Runs in a fresh interpreter. argv: blob path, npz path with the input and the expected output,
# and "block" to make the cooking-side packages unimportable before anything else is imported.
CHILD = textwrap.dedent(
    """
    import importlib.abc
    import sys

    COOKING_ONLY = {cooking_only!r}
    blob_path, npz_path, mode = sys.argv[1:4]

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in COOKING_ONLY:
                raise ImportError(f"{{name}} is not available in a game build")
            return None

    if mode == "block":
        sys.meta_path.insert(0, Blocker())
        try:
            import yaml  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("the import blocker does not work")

    if mode == "vendored":  # the folder copied into a game's own package: no `onnx_cooker` at all
        sys.meta_path.insert(0, Blocker())
        COOKING_ONLY = (*COOKING_ONLY, "onnx_cooker")
        import game.onnx_loader as loader
    else:
        import onnx_cooker.runtime as loader

    def leaked():
        return sorted(name for name in sys.modules if name.partition(".")[0] in COOKING_ONLY)

    assert not leaked(), f"importing the loader imported {{leaked()}}"

    import numpy as np

    with open(blob_path, "rb") as stream:
        session = loader.session_from_blob(stream.read(), providers=["CPUExecutionProvider"])
    data = np.load(npz_path)
    np.testing.assert_allclose(session.run(None, {{"x": data["x"]}})[0], data["y"], rtol=1e-6, atol=1e-6)
    assert not leaked(), f"loading a blob imported {{leaked()}}"
    print("OK")
    """
).format(cooking_only=COOKING_ONLY)


@pytest.fixture(scope="module")
def cooked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Per format, a blob file and an npz of (input, expected output), made in this process."""
    root = tmp_path_factory.mktemp("isolation")
    source = tiny_model(seed=4).SerializeToString()
    x = sample_input(seed=9)
    np.savez(root / "expected.npz", x=x, y=run_source(source, x))
    files = {}
    for fmt, model in (("onnx", source), ("ort", to_ort_format(source, root))):
        path = root / f"tiny.{fmt}.zst"
        path.write_bytes(make_blob(model, fmt))
        files[fmt] = (path, root / "expected.npz")
    return files


@pytest.mark.parametrize("fmt", ["onnx", "ort"])
@pytest.mark.parametrize("mode", ["block", "observe"])
def test_loader_runs_without_the_cooking_packages(
    fmt: str, mode: str, cooked: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    # "block": the packages cannot be imported at all. "observe": they are installed, and the loader
    # still must not import them (a lazy import would only fail in a game build, not here).
    run_child(*cooked[fmt], mode, tmp_path, REPO)


def run_child(blob: Path, npz: Path, mode: str, cwd: Path, path: Path) -> None:
    """CHILD in a fresh interpreter with ``path`` as its PYTHONPATH: it must print OK."""
    env = {**os.environ, "PYTHONPATH": str(path), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(blob), str(npz), mode],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"


@pytest.mark.parametrize("fmt", ["onnx", "ort"])
def test_the_loader_folder_copied_into_a_games_package_runs_alone(
    fmt: str, cooked: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """docs/loader.md, "Shipping the loader": `onnx_cooker/runtime/` copied as `game/onnx_loader/` (its
    imports are relative) runs with neither the cooker nor any package named `onnx_cooker` importable."""
    import shutil

    shutil.copytree(REPO / "onnx_cooker" / "runtime", tmp_path / "game" / "onnx_loader",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    (tmp_path / "game" / "__init__.py").write_text("")
    run_child(*cooked[fmt], "vendored", tmp_path, tmp_path)


def test_cooking_packages_are_importable_here() -> None:
    # The "observe" runs above only prove something if these packages could have been imported.
    for name in COOKING_ONLY:
        __import__(name)
        assert name in sys.modules
