"""Projects for tests that cook real third-party models fetched from the package registries."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from tests.test_dodo import doit


def bare_project(copy: Callable[[Path], Path], folder: Path, platforms: Iterable[str]) -> Path:
    """A copy of the project in ``folder`` with an empty assets folder (the example assets are other
    tests' subject) and the profiles of ``platforms`` only."""
    project = copy(folder)
    shutil.rmtree(project / "assets")
    (project / "assets").mkdir()
    keep = set(platforms)
    for profile in (project / "platforms").glob("*.yaml"):
        if profile.stem not in keep:
            profile.unlink()
    return project


def cook_all(project: Path) -> Path:
    """``project`` cooked with the real doit (every model, every platform), which must succeed."""
    run = doit(project, "cook")
    assert run.returncode == 0, run.output
    return project
