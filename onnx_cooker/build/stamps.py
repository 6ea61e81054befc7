"""What a task wrote, so that the next ``doit cook`` notices an output changed or damaged since.

doit only checks that a task's targets exist. Each cook and manifest task records, when it
finishes, the size, modification time and sha256 of every file it wrote; a task whose outputs no
longer match is not up to date. The check is cheap: a full hash only when size or time differ.

Standard library and doit only (used at task-loading time).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from doit.dependency import FileChangedChecker

from onnx_cooker.fsutil import atomic_write, file_sha256, json_bytes, write_json
from onnx_cooker.layout import digest_memo_dir

STAMP_VERSION = 1


def file_state(path: Path) -> list[int]:
    info = path.stat()
    # ctime too: a file rewritten with the same size and mtime (`touch -r`, some VCS and sync tools)
    # still gets a new ctime, which no tool can set back.
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def record(
    outputs: Sequence[Path],
    stamp_file: Path,
    sources: Mapping[str, list[Any]] | None = None,
    digests: Mapping[Path, str] | None = None,
    memo_dir: Path | None = None,
) -> None:
    """Record size, times and sha256 of every existing path of ``outputs`` in ``stamp_file``, with
    ``sources``: the same, for the source files as the cook read them. ``digests``: the sha256 of
    outputs the caller just wrote from memory (not read back). With ``memo_dir``, a digest remembered
    there for a file as it is now is used too, and every recorded file is remembered there for
    ``DigestChecker``."""
    known = digests or {}

    def sha256(path: Path) -> str:
        remembered = known_sha256(memo_dir, path) if memo_dir is not None else None
        return known.get(path) or remembered or file_sha256(path)

    files = {str(path): [*file_state(path), sha256(path)] for path in outputs if path.is_file()}
    write_json(stamp_file, {"version": STAMP_VERSION, "files": files, "sources": dict(sources or {})})
    if memo_dir is not None:
        for path, entry in [*files.items(), *(sources or {}).items()]:
            remember(memo_dir, Path(path), entry)


def _memo_path(memo_dir: Path, path: Path) -> Path:
    return memo_dir / f"{hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:32]}.json"


def remember(memo_dir: Path, path: Path, entry: Sequence[Any]) -> None:
    """Keep ``path``'s [size, mtime_ns, ctime_ns, sha256] for ``known_sha256``."""
    # no fsync: a memo lost or cut short by a power cut reads as absent, and the file is hashed again
    atomic_write(_memo_path(memo_dir, path), json_bytes([str(path.absolute()), *entry]), durable=False)


def known_sha256(memo_dir: Path, path: Path) -> str | None:
    """The sha256 remembered for ``path`` if the file is still as it was then (size and times), else None."""
    try:
        memo = json.loads(_memo_path(memo_dir, path).read_text(encoding="utf-8"))
        if memo[0] == str(path.absolute()) and list(memo[1:4]) == file_state(path):
            return str(memo[4])
    except (OSError, ValueError, IndexError, TypeError):
        pass
    return None


def memoized_sha256(memo_dir: Path | None, path: Path) -> str:
    """``path``'s sha256: the one remembered in ``memo_dir`` for the file as it is now, else read and
    then remembered. A source that a checkout, a copy or ``touch`` gave new times, its bytes the
    same, is read once, not at every no-op cook of every platform (a 2 GB model: gigabytes a run)."""
    if memo_dir is None:
        return file_sha256(path)
    remembered = known_sha256(memo_dir, path)
    if remembered is not None:
        return remembered
    before = file_state(path)
    digest = file_sha256(path)
    if file_state(path) == before:  # not changed while it was read
        remember(memo_dir, path, [*before, digest])
    return digest


def remembered_sources(asset: Any, memo_dir: Path) -> dict[str, list[Any]] | None:
    """[size, mtime_ns, ctime_ns, sha256] of each of ``asset``'s source files, as remembered in
    ``memo_dir`` while they are unchanged since; None unless every one of them is."""
    found = {}
    for path in asset.source_files:
        try:
            state = file_state(path)
        except OSError:
            return None
        digest = known_sha256(memo_dir, path)
        if digest is None:
            return None
        found[str(path)] = [*state, digest]
    return found


def hashed_sources(asset: Any) -> dict[str, list[Any]] | None:
    """[size, mtime_ns, ctime_ns, sha256] of each of ``asset``'s source files, hashed from disk without
    holding them in memory (what a cache lookup needs); None if one changed while it was hashed."""
    found = {}
    for path in asset.source_files:
        try:
            before = file_state(path)
            digest = file_sha256(path)
            if file_state(path) != before:
                return None
        except OSError:
            return None
        found[str(path)] = [*before, digest]
    return found


class DigestChecker(FileChangedChecker):
    """doit's file-dependency check with the cooker's sha256s: doit's default (``md5``) hashes every
    file dependency again when a task finishes (every source once per platform, every blob again for
    the runtime check: gigabytes on big models), where the cook has just hashed them. Same rules as
    doit's: an unchanged mtime means unchanged, a new size means changed, else the digests decide. A
    digest the cooker remembered (``memo_dir``, set by dodo.py) for the file as it is now is used
    instead of reading the file."""

    memo_dir: ClassVar[Path | None] = None

    def check_modified(self, file_path: str, file_stat: os.stat_result, state: Sequence[Any]) -> bool:
        timestamp, size, digest = state
        if file_stat.st_mtime == timestamp:
            return False
        if file_stat.st_size != size:
            return True
        return bool(digest != self._sha256(Path(file_path)))

    def get_state(self, dep: str, current_state: Sequence[Any] | None) -> tuple[float, int, str] | None:
        timestamp = os.path.getmtime(dep)
        if current_state and current_state[0] == timestamp:
            return None
        return timestamp, os.path.getsize(dep), self._sha256(Path(dep))

    def _sha256(self, path: Path) -> str:
        return memoized_sha256(self.memo_dir, path)


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
        if list(entry[:3]) == file_state(path):
            return True
        # remembered for the file as it is now (a link since, new times), else read and remembered
        return memoized_sha256(DigestChecker.memo_dir, path) == entry[3]
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
        if different and recorded_elsewhere(self.outputs, self.stamp_file):  # the cook keeps them if whole
            sys.stderr.write(f"{self.task_name}: outputs recorded at another path (a moved folder)\n")
        elif different:
            names = ", ".join(_shown(path) for path in different[:3])
            more = f" and {len(different) - 3} more" if len(different) > 3 else ""
            sys.stderr.write(
                f"{self.task_name}: {names}{more} {_why(different, self.stamp_file)}: cooking again\n"
            )
        return not different


def _why(different: Sequence[str], stamp_file: Path) -> str:
    """``changed since the last cook``, unless every path was one the last cook did not write (a
    leftover of another format, or of settings since changed): then that, which is what it is."""
    try:
        stamps = json.loads(stamp_file.read_text(encoding="utf-8"))
        recorded = {*stamps["files"], *stamps.get("sources", {})}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "changed since the last cook"
    if all(path not in recorded for path in different):
        return "not written by the last cook (left by a cook of other settings)"
    return "changed since the last cook"


def recorded_elsewhere(outputs: Sequence[Path], stamp_file: Path) -> bool:
    """Whether ``stamp_file`` recorded files, none of them at the paths of ``outputs``: the project
    or its build folder moved since (``outputs.kept_outputs``)."""
    try:
        files = json.loads(stamp_file.read_text(encoding="utf-8"))["files"]
        return bool(files) and not any(str(path) in files for path in outputs)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _shown(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path


def digest_checker(build: Path) -> type[DigestChecker]:
    """``DigestChecker`` using the digests remembered in ``build`` (doit instantiates the class)."""
    DigestChecker.memo_dir = digest_memo_dir(build)
    return DigestChecker
