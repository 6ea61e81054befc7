"""One doit process at a time per build folder: a second one waits instead of racing the first.

doit's state database and the manifests are per build folder; two `doit cook` runs on the same
folder would interleave their writes. Standard library only (taken when dodo.py loads).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO

LOCK_NAME = ".cook.lock"
_held: list[IO[str]] = []  # kept open (and locked) until the process exits


def _lock(handle: IO[str], blocking: bool) -> bool:
    if os.name == "nt":
        import msvcrt

        # LK_LOCK retries for about 10 s, then raises: loop for a blocking wait.
        while True:
            try:
                msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK if blocking else msvcrt.LK_NBLCK, 1)
                return True
            except OSError:
                if not blocking:
                    return False
    import fcntl

    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def hold_build_lock(build: Path) -> None:
    """Block until no other process holds ``build``'s lock, then hold it until this process exits."""
    try:
        build.mkdir(parents=True, exist_ok=True)
        handle = (build / LOCK_NAME).open("a+", encoding="utf-8")
    except OSError as exc:  # a read-only or foreign build folder: one line, not a traceback
        sys.stderr.write(
            f"ERROR: cannot use build folder {build}: {exc.strerror or exc} ({exc.filename or build}); "
            "make it writable, or point COOK_BUILD_DIR at a folder you can write\n"
        )
        raise SystemExit(3) from None
    if not _lock(handle, blocking=False):
        sys.stderr.write(f"another doit process is using {build}; waiting for it to finish...\n")
        _lock(handle, blocking=True)
    _held.append(handle)
