"""doit tasks of onnx-cooker: `doit cook` cooks every model in assets/ for every platform.

`doit list --all` shows the sub-tasks; `doit cook:android` cooks one platform,
`doit "cook:*:mnist"` one model everywhere. See README.md.
"""

from pathlib import Path

from pipeline.buildlock import hold_build_lock
from pipeline.tasks import cook_tasks, environment, folders

ENV = environment()
ROOT = Path(__file__).resolve().parent
BUILD = folders(ENV, ROOT).build
hold_build_lock(BUILD)  # a second doit on the same build folder waits; doit keeps its state there

DOIT_CONFIG = {
    "default_tasks": ["cook"],
    # Only the sqlite3 backend is safe with `doit -n` (DESIGN.md trap 9).
    "backend": "sqlite3",
    "dep_file": str(BUILD / ".doit.db"),
}


def task_cook():
    """Cook every model for every platform into build/<platform>/ (blobs + manifest.json)."""
    yield from cook_tasks(ENV, ROOT)
