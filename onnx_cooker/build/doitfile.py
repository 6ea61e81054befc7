"""The cook's doit definitions, for any project: ``DOIT_CONFIG`` and ``task_cook`` for a project
root and an environment.

The repository's ``dodo.py`` and the ``onnx-cooker`` command both load their tasks from here, so
doit's state, parallelism and incrementality are the same either way. A studio's own ``dodo.py``
can take the cook into its larger build::

    from pathlib import Path
    from onnx_cooker.build.doitfile import cook_namespace

    globals().update(cook_namespace(Path(__file__).resolve().parent))  # DOIT_CONFIG and task_cook

Imported on every doit command: standard library and the light build modules only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from onnx_cooker.build.allocator import tune_allocator
from onnx_cooker.build.config import environment, folders
from onnx_cooker.build.lifetime import end_children_with_this_process
from onnx_cooker.build.lock import hold_build_lock, prepare_build_folder
from onnx_cooker.build.progress import reporter_for
from onnx_cooker.build.stamps import digest_checker
from onnx_cooker.build.tasks import cook_tasks


def cook_namespace(root: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``DOIT_CONFIG`` and ``task_cook`` for the project at ``root`` (its ``assets/``, ``platforms/``
    and ``build/``, or where the ``COOK_*`` variables of ``env`` say; default: the process's)."""
    env = dict(environment() if env is None else env)
    end_children_with_this_process()  # `doit -n N` killed: its workers and their cooks end too
    tune_allocator(env)  # freed buffers stay for the next one (allocator.py); doit's workers inherit it
    build = folders(env, root).build
    prepare_build_folder(build)  # doit keeps its state there, for every command (`list` too)
    config = {
        "default_tasks": ["cook"],
        # One bad model must not stop the others (`--no-continue` stops at the first failure): its
        # platforms keep their previous bundle, and the run ends non-zero, naming it.
        "continue": True,
        # Only the sqlite3 backend is safe with `doit -n` (docs/design.md, "doit").
        "backend": "sqlite3",
        "dep_file": str(build / ".doit.db"),
        # A live progress line on a terminal; build/report.html at the end of every run.
        "reporter": reporter_for(build),
        # File dependencies checked with the sha256s the cooker already computed (stamps.py).
        "check_file_uptodate": digest_checker(build),
    }
    return {"DOIT_CONFIG": config, "task_cook": _task_cook(env, root, build)}


def _task_cook(env: Mapping[str, str], root: Path, build: Path) -> Callable[[], Iterator[dict]]:
    def task_cook() -> Iterator[dict]:
        # Commands that run or clean tasks hold the build folder: a second cook waits for the
        # first; `list`, `info` and `help` do not.
        hold_build_lock(build)
        yield from cook_tasks(env, root)

    task_cook.__doc__ = "Cook every model for every platform into build/<platform>/ (blobs + manifest.json)."
    return task_cook
