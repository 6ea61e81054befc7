"""What a task wrote, so that the next ``doit cook`` notices an output changed or damaged since.

doit only checks that a task's targets exist. Each cook and manifest task records, when it
finishes, the size, modification time and sha256 of every file it wrote; a task whose outputs no
longer match is not up to date. The check is cheap: a full hash only when size or time differ.

Standard library only (used at task-loading time).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .cookkey import file_sha256
from .fsutil import write_json

STAMP_VERSION = 1


def _stat(path: Path) -> list[int]:
    info = path.stat()
    # ctime too: a file rewritten with the same size and mtime (`touch -r`, some VCS and sync tools)
    # still gets a new ctime, which no tool can set back.
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def record(outputs: Sequence[Path], stamp_file: Path, sources: Mapping[str, list[Any]] | None = None) -> None:
    """Record size, times and sha256 of every existing path of ``outputs`` in ``stamp_file``, with
    ``sources``: the same, for the source files as the cook read them."""
    files = {str(path): [*_stat(path), file_sha256(path)] for path in outputs if path.is_file()}
    write_json(stamp_file, {"version": STAMP_VERSION, "files": files, "sources": dict(sources or {})})


def changed(outputs: Sequence[Path], stamp_file: Path) -> list[str]:
    """The outputs and recorded sources that differ from what was recorded (every output if nothing
    usable was recorded).

    A file whose size and times match is taken as unchanged; otherwise its sha256 decides (a file
    touched, or copied back unchanged, is not a change).
    """
    try:
        stamps = json.loads(stamp_file.read_text(encoding="utf-8"))
        recorded, sources = dict(stamps["files"]), dict(stamps.get("sources", {}))
    except (OSError, ValueError, KeyError, TypeError):
        return [str(path) for path in outputs]
    different = [str(path) for path in outputs if not _same(path, recorded.get(str(path)))]
    named = {str(path) for path in outputs}  # files recorded beyond the task's fixed outputs
    different += [
        path for path, entry in recorded.items() if path not in named and not _same(Path(path), entry)
    ]
    different += [path for path, entry in sources.items() if not _same(Path(path), entry)]
    return different


def _same(path: Path, entry: Any) -> bool:
    if entry is None:
        return not path.exists()  # nothing recorded: only a file still absent is unchanged
    try:
        if list(entry[:3]) == _stat(path):
            return True
        return file_sha256(path) == entry[3]
    except (OSError, IndexError, TypeError):
        return False


class OutputsIntact:
    """A doit ``uptodate`` check: False (with one line on stderr) when an output changed since the task
    wrote it. A class, not a closure, so that doit's parallel runner can pickle it."""

    def __init__(self, task_name: str, outputs: Sequence[Path], stamp_file: Path) -> None:
        self.task_name, self.outputs, self.stamp_file = task_name, tuple(outputs), stamp_file

    def __call__(self, task: object = None, values: object = None) -> bool:
        if not self.stamp_file.exists():
            # Never recorded: fine for a first cook (its targets are missing anyway); outputs written
            # by an older cooker, or stamps deleted, are cooked again.
            return not any(path.exists() for path in self.outputs)
        different = changed(self.outputs, self.stamp_file)
        if different:
            names = ", ".join(_shown(path) for path in different[:3])
            more = f" and {len(different) - 3} more" if len(different) > 3 else ""
            sys.stderr.write(f"{self.task_name}: {names}{more} changed since the last cook: cooking again\n")
        return not different


def _shown(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
