"""Work that may crash a native library, in a child process of its own on Linux: a crash in
onnxruntime (a segfault, an abort) while it optimizes, runs or loads a model ends that model's
cook with a failure naming the step it died in (onnx_cooker/build/actions.py), instead of killing
doit with every other model (and hanging ``doit -n``, whose worker never reports back).

The child is a fork, so it costs a few milliseconds and no imports; it writes its files itself,
and sends back the steps it starts and its result through a pipe. Only a process with no other
Python thread than a multiprocessing queue's feeder forks (a fork copies no other thread, and a
lock one holds would stay held in the child). Elsewhere the work runs in the process itself: on
Windows (no fork), on macOS (a fork that does not exec may crash in the Objective-C runtime that
onnxruntime's frameworks load) and with ``COOK_ISOLATE=0`` (for a debugger).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

from onnx_cooker import steptimes

T = TypeVar("T")
QUEUE_FEEDER = "QueueFeederThread"  # multiprocessing.Queue's thread (the name it gives it)


@dataclass(frozen=True)
class Crash:
    """How the child ended without an outcome: the signal (``SIGSEGV``) or exit status, and the
    last step it started (None: before the first)."""

    how: str
    step: str | None


def can_isolate() -> bool:
    """Whether ``run_isolated`` forks here: Linux, a process with no other Python thread than a
    multiprocessing queue's feeder, and ``COOK_ISOLATE`` not 0."""
    # Linux only: on macOS a fork that does not exec may crash in the Objective-C runtime that
    # onnxruntime's frameworks (CoreML) load; Windows has no fork.
    if not sys.platform.startswith("linux") or os.environ.get("COOK_ISOLATE", "1").strip() == "0":
        return False
    # Python threads of this process's own (a CRC check beside a load) may hold its locks. Not the
    # feeder thread of a multiprocessing queue (a `doit -n` worker's results): the child never
    # touches the queue. The idle threads native libraries start at import (OpenBLAS through numpy,
    # onnxruntime) wait holding none, and glibc's malloc is made safe across fork.
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    return all(t.name == QUEUE_FEEDER for t in others)


def run_isolated(work: Callable[[], T]) -> T | Crash:
    """``work()`` run in a forked child (where ``can_isolate``, else here): its result (pickled
    back), or the ``Crash`` that ended the child first. An exception ``work`` raises is raised here
    again: the same class where it can be rebuilt from its message, else a ``RuntimeError`` carrying
    the child's traceback."""
    if not can_isolate():
        return work()
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    # The parent's garbage not yet collected (a cycle that holds an onnxruntime session) must not be
    # collected in the child: its destructor would wait there for thread-pool threads that exist
    # only in the parent (a cook hung), or crash. Frozen, the child's collector never looks at it;
    # the parent's collects it as before.
    gc.freeze()
    try:
        with warnings.catch_warnings():  # Python 3.12+ warns of any other thread; can_isolate vetted them
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:  # no memory or process left for a child: the work runs here, as unisolated
        gc.unfreeze()
        os.close(read_fd)
        os.close(write_fd)
        return work()
    if pid != 0:
        gc.unfreeze()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child(work, os.fdopen(write_fd, "wb"))
    os.close(write_fd)
    last_step: str | None = None
    outcome: tuple[str, Any] | None = None
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            while True:
                try:
                    kind, value = pickle.load(pipe)
                except (EOFError, pickle.UnpicklingError):  # the child is gone (a message cut short)
                    break
                if kind == "step":
                    last_step = value
                else:
                    outcome = (kind, value)
        _, status = os.waitpid(pid, 0)
    except BaseException:  # Ctrl-C (the child got it too), or anything else: no child left behind
        _kill(pid)
        raise
    if outcome is not None and status == 0:
        kind, value = outcome
        if kind == "raised":
            error, text = value
            child = RuntimeError(f"in a child process:\n{text}")
            if isinstance(error, BaseException):
                raise error from child  # the traceback shown is the child's, where it was raised
            raise child
        return value
    return Crash(_how(status), last_step)


def _child(work: Callable[[], Any], pipe: BinaryIO) -> None:
    code = 0
    try:
        _die_with_parent()
        _no_core_dump()  # a crash is reported; its core (a process holding a model) is not wanted
        steptimes.announce_to(lambda name: _send(pipe, ("step", name)))
        try:
            message: tuple[str, Any] = ("done", work())
        except BaseException as exc:  # noqa: BLE001 - sent to the parent, which raises it
            message = ("raised", (_picklable(exc), traceback.format_exc()))
        _send(pipe, message)
        pipe.close()
    except BaseException:  # noqa: BLE001 - the parent sees no outcome and reports the exit status
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # not the parent's atexit handlers or doit's cleanup: they are the parent's


def _picklable(exc: BaseException) -> BaseException | None:
    """``exc`` if it survives pickling (a CookError with its message and context), else None."""
    try:
        return pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any failure to pickle: the traceback text goes instead
        return None


def _die_with_parent() -> None:
    """Linux: the child is killed when its parent goes (doit -n terminates its workers), instead of
    cooking on with the build folder's lock held."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent went before the call above
        os._exit(70)


def _no_core_dump() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass


def _send(pipe: BinaryIO, message: tuple[str, Any]) -> None:
    pickle.dump(message, pipe)
    pipe.flush()


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"{name}, killed by the out-of-memory killer or by hand" if name == "SIGKILL" else name
    return f"exit status {os.WEXITSTATUS(status)}"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
