"""The shape of the code (docs/architecture.md): the layers of ``onnx_cooker/`` as pyproject.toml's
import-linter contracts state them, no import circle anywhere in the tree, no module of
``onnx_cooker/`` over 400 lines, few modules left at the top, and a docstring on every subpackage
saying what it is and what it may import."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_LINES = 400
MAX_TOP_MODULES = 8  # entry points and package-wide basics (errors, fsutil, layout, steptimes)


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_layer_contracts_hold() -> None:
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout
    assert '"onnx_cooker.cli",' in (REPO / "pyproject.toml").read_text()  # the command sits on top


LAYERS = "build orchestrates cook, farm and report"
LIGHT_LOADER = "the loader games ship imports no cooking dependency"


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # the loader reaching up into the build layer
        ("onnx_cooker/runtime/constants.py", "import onnx_cooker.build.tasks", LAYERS),
        # two packages of one layer
        ("onnx_cooker/report/model.py", "import onnx_cooker.farm.cache", LAYERS),
        # a cooking dependency in the loader games ship
        ("onnx_cooker/runtime/errors.py", "import yaml", LIGHT_LOADER),
    ],
)
def test_an_import_against_a_contract_breaks_it(
    module: str, line: str, contract: str, tmp_path: Path
) -> None:
    shutil.copytree(
        REPO / "onnx_cooker", tmp_path / "onnx_cooker", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0
    assert "0 broken" not in done.stdout
    broken = done.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken and line.split()[-1] in broken  # names the contract and the import


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_in_the_whole_tree() -> None:
    graph = grimp.build_graph("onnx_cooker", "conformance", "bench", "tests", include_external_packages=False)
    assert len(graph.modules) > 100
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c", "d"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_module_of_pipeline_is_over_400_lines() -> None:
    sizes = {
        path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in (REPO / "onnx_cooker").rglob("*.py")
    }
    assert len(sizes) > 40
    assert {path: lines for path, lines in sizes.items() if lines > MAX_LINES} == {}


def test_few_modules_at_the_top_and_each_subpackage_says_what_it_is() -> None:
    top = sorted(path.name for path in (REPO / "onnx_cooker").glob("*.py") if path.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, top
    packages = sorted(path.parent for path in (REPO / "onnx_cooker").glob("*/__init__.py"))
    assert len(packages) >= 5
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "import" in doc, f"{package.name}: its docstring must say what it may import"
