"""Output into a pipe whose reader left early (``onnx-cooker list --all | head``): no error message,
no traceback, and the status a command that SIGPIPE ends has in a shell, 141, as ``inspect`` gives.

Python ignores SIGPIPE, so a write into such a pipe raises ``BrokenPipeError``; Python's recipe
(the "Note on SIGPIPE" of its ``signal`` documentation) sends what is still printed to /dev/null,
so that the interpreter's last flush does not fail again. A command whose status says more than
its output keeps it: a failure's status stands, and ``diff --fail-if-grows`` exits with its gate's
verdict (pipeline/report/cli.py; it and pipeline/farm/admin.py, below this layer, have their own
``_output_failed``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import IO, Any, TextIO

PIPE_CLOSED = 128 + getattr(signal, "SIGPIPE", 13)


def reader_left(code: int = 0) -> int:
    """What is still printed goes to /dev/null; the status: ``code`` where that is a failure, else 141."""
    stdout_to_devnull()
    return code or PIPE_CLOSED


def flushed(code: int) -> int:
    """``code``, once stdout is flushed here, where its failure can be told apart from the command's."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        return output_failed(exc, code)
    return code


def output_failed(exc: OSError, code: int = 0) -> int:
    """stdout failed: a reader that left is no error (``reader_left``); another error (a full disk)
    is one line, unless ``code`` says a failure already, and status 2."""
    if isinstance(exc, BrokenPipeError):
        return reader_left(code)
    stdout_to_devnull()
    if not code:
        print(f"onnx-cooker: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
    return code or 2


def stdout_to_devnull() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass
    finally:
        os.close(devnull)


class Unread:
    """doit's output stream for a cook: once it fails (its reader has left: ``cook | head``), what
    doit still writes goes to /dev/null and the cook goes on to its end (``error`` says why), instead
    of stopping half-way with doit's traceback."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.error: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as exc:
            self._failed(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        self.error = self.error or exc
        stdout_to_devnull()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding...
        return getattr(self.stream, name)


class Parser(argparse.ArgumentParser):
    """argparse's ``--help`` drops its output's error, so ``--help | head`` exited 0 unbuffered and
    120 (with "Exception ignored") buffered: here it ends as every other output's."""

    def print_help(self, file: IO[str] | None = None) -> None:
        try:
            (file or sys.stdout).write(self.format_help())
            (file or sys.stdout).flush()
        except OSError as exc:
            self.exit(output_failed(exc))
