"""The build folder: made when dodo.py loads, and held by one doit process at a time.

doit opens its state database in the build folder for every command, so dodo.py makes the folder
(or says in one line why it cannot) when it loads. The lock (``filelock``, on ``.cook.lock``) is
taken only by doit commands that run tasks or change the build folder: a second `doit cook` on the
same folder waits for the first instead of interleaving its writes, while `doit list`, `doit info`
and `doit help` never wait for a running cook. Standard library only until the lock is taken.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

LOCK_NAME = ".cook.lock"
# doit commands that only read the tasks and doit's state: they run beside a cook.
READ_ONLY_COMMANDS = frozenset({"list", "info", "help", "dumpdb", "tabcompletion"})
_held: dict[Path, Any] = {}  # the locks this process holds, until it exits


def _refuse(build: Path, exc: OSError) -> NoReturn:
    """A read-only or foreign build folder: one line, not a traceback."""
    sys.stderr.write(
        f"ERROR: cannot use build folder {build}: {exc.strerror or exc} ({exc.filename or build}); "
        "make it writable, or point COOK_BUILD_DIR at a folder you can write\n"
    )
    raise SystemExit(3) from None


def prepare_build_folder(build: Path) -> None:
    """Make ``build`` (doit keeps its state there); exit with one line if it cannot be written."""
    try:
        build.mkdir(parents=True, exist_ok=True)
        if not os.access(build, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(build))
    except OSError as exc:
        _refuse(build, exc)


def doit_command() -> str | None:
    """The name of the doit command ("run", "list", ...) loading the tasks, or None outside doit.

    doit hands the running command to its task loader only, not to dodo.py: it is found on the
    stack of the task-creator call.
    """
    command_class = getattr(sys.modules.get("doit.cmd_base"), "Command", None)
    frame = sys._getframe(1)
    while command_class is not None and frame is not None:
        command = frame.f_locals.get("self")
        if isinstance(command, command_class):
            return command.name
        frame = frame.f_back
    return None


def hold_build_lock(build: Path) -> None:
    """Unless the doit command only reads: wait until no other process holds ``build``'s lock, then
    hold it until this process exits. Outside doit (no command found) the lock is taken too."""
    if doit_command() in READ_ONLY_COMMANDS or build in _held:
        return
    from filelock import FileLock, Timeout

    lock = FileLock(build / LOCK_NAME)
    try:
        try:
            lock.acquire(blocking=False)
        except Timeout:
            sys.stderr.write(f"another doit process is using {build}; waiting for it to finish...\n")
            lock.acquire()
    except OSError as exc:
        _refuse(build, exc)
    _held[build] = lock
