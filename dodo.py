"""doit tasks of onnx-cooker: `doit cook` cooks every model in assets/ for every platform.

`doit list --all` shows the sub-tasks; `doit cook:android` cooks one platform,
`doit "cook:*:mnist"` one model everywhere. See README.md.
"""

from pathlib import Path

from pipeline.build.allocator import tune_allocator
from pipeline.build.config import environment, folders
from pipeline.build.lock import hold_build_lock, prepare_build_folder
from pipeline.build.progress import reporter_for
from pipeline.build.stamps import digest_checker
from pipeline.build.tasks import cook_tasks

ENV = environment()
tune_allocator(
    ENV
)  # freed buffers stay for the next one (pipeline/build/allocator.py); doit's workers inherit it
ROOT = Path(__file__).resolve().parent
BUILD = folders(ENV, ROOT).build
prepare_build_folder(BUILD)  # doit keeps its state there, for every command (`doit list` too)

DOIT_CONFIG = {
    "default_tasks": ["cook"],
    # Only the sqlite3 backend is safe with `doit -n` (docs/design.md, "doit").
    "backend": "sqlite3",
    "dep_file": str(BUILD / ".doit.db"),
    # A live progress line on a terminal; build/report.html at the end of every run.
    "reporter": reporter_for(BUILD),
    # File dependencies checked with the sha256s the cooker already computed (pipeline.build.stamps).
    "check_file_uptodate": digest_checker(BUILD),
}


def task_cook():
    """Cook every model for every platform into build/<platform>/ (blobs + manifest.json)."""
    # Commands that run or clean tasks hold the build folder: a second `doit cook` waits for the
    # first; `doit list`, `info` and `help` do not.
    hold_build_lock(BUILD)
    yield from cook_tasks(ENV, ROOT)
