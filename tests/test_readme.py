"""The README's promises that code can check: the Quick start commands and CI running them."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Quick start\n(.*?)^## ", text, re.S | re.M)
    assert section, "README.md has no '## Quick start' section"
    blocks = re.findall(r"```sh\n(.*?)```", section.group(1), re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_quick_start_has_exactly_two_commands_cook_then_tests() -> None:
    install_and_cook, install_and_test = quick_start_commands()
    assert "pip install -e ." in install_and_cook and install_and_cook.endswith("onnx-cooker cook")
    assert '".[test]"' in install_and_test and "pytest" in install_and_test


def test_ci_runs_the_quick_start_test_command() -> None:
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert quick_start_commands()[1] in ci_lines


def test_readme_links_point_at_files_that_exist() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)\)", text)
    assert targets
    missing = [t for t in targets if not t.startswith("http") and not (REPO / t).exists()]
    assert missing == []


def test_every_relative_link_in_the_docs_and_bench_results_resolves() -> None:
    """Links in docs/*.md and bench/*.md resolve from the file that holds them (a bench's generated
    section once linked docs/verification.md from bench/, where no such file is)."""
    pages = [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "bench").glob("*.md")),
    ]
    missing = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code is not links
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if (
                not target.startswith(("http://", "https://", "mailto:"))
                and not (page.parent / target).exists()
            ):
                missing.append(f"{page.relative_to(REPO)}: {target}")
    assert missing == []


def test_bundle_format_page_names_the_current_bundle_format() -> None:
    from onnx_cooker.cook.key import BUNDLE_FORMAT

    assert f"`{BUNDLE_FORMAT}`" in (REPO / "docs" / "bundle-format.md").read_text(encoding="utf-8")


def test_the_tests_the_docs_cite_exist() -> None:
    """docs/*.md cite tests as `test_x.py::test_name` (or `::test_name` after one): a renamed test
    left five citations pointing at nothing in docs/reliability.md."""
    defined = {
        path.name: set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
        for path in (REPO / "tests").glob("test_*.py")
    }
    anywhere = set().union(*defined.values())
    missing = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for file, name in re.findall(r"(test_\w+\.py)?::(test_\w+)", text):
            known = defined.get(file, set()) if file else anywhere
            if name not in known and not any(name.startswith(f"{k}[") for k in known):
                missing.append(f"{page.relative_to(REPO)}: {file}::{name}")
    assert missing == []
