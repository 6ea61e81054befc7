"""doit's worker processes (``-n N``) and the cooks they fork end when the process that forked them
does, however it ends.

doit's parallel runner forks its workers with ``multiprocessing`` and never tells them to stop if
it is killed: SIGTERM (a CI job cancelled, a supervisor, ``kill``) or SIGKILL of ``doit -n 2``
left both workers waiting on their task queue for ever, holding the log pipe open, so that
``doit -n 2 cook | tee log`` never ended and the CI step hung until its own time limit. On Linux
each process forked from a main thread now asks the kernel for SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``); a child whose parent died before it asked exits at once. Elsewhere (no
``prctl``) nothing changes. Standard library only: imported when doit loads the tasks.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1
_parent = {"pid": 0, "main_thread": False}
_installed = False


def end_children_with_this_process() -> None:
    """Install the fork hooks, once per process (doit's workers inherit them for their own forks)."""
    global _installed
    if _installed or not sys.platform.startswith("linux") or not hasattr(os, "register_at_fork"):
        return
    _installed = True
    os.register_at_fork(before=_note_parent, after_in_child=_die_with_parent)


def _note_parent() -> None:
    _parent["pid"] = os.getpid()
    # the kernel signals when the forking *thread* ends: only a main thread lives as long as its process
    _parent["main_thread"] = threading.current_thread() is threading.main_thread()


def _die_with_parent() -> None:
    if not _parent["main_thread"]:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != _parent["pid"]:  # the parent died between the fork and the prctl
        os._exit(143)
