"""Output into a pipe whose reader left early (``onnx-cooker list --all | head``) or onto a full disk,
one way for every command (``onnx-cooker``, ``python -m onnx_cooker.report``, ``python -m onnx_cooker.farm``;
the loader's own ``python -m onnx_cooker.runtime`` does the same in its light way): no traceback, no error
message for a reader that left, and the status a command that SIGPIPE ends has in a shell, 141.

Python ignores SIGPIPE, so a write into such a pipe raises ``BrokenPipeError``; Python's recipe (the
"Note on SIGPIPE" of its ``signal`` documentation) sends what is still printed to /dev/null, so that
the interpreter's last flush does not fail again. A command whose status says more than its output
keeps it: a failure's status stands. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import IO

PIPE_CLOSED = 128 + getattr(signal, "SIGPIPE", 13)


def stdout_to_devnull() -> None:
    """What is still printed goes to /dev/null."""
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


def output_failed(exc: OSError, code: int = 0, prog: str = "onnx-cooker", error: int = 2) -> int:
    """stdout failed. A reader that left is no error: ``code`` where that is a failure, else 141.
    Another error (a full disk) is one line naming ``prog``, unless ``code`` says a failure already,
    and the status ``error``."""
    stdout_to_devnull()
    if isinstance(exc, BrokenPipeError):
        return code or PIPE_CLOSED
    if not code:
        print(f"{prog}: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
    return code or error


class Parser(argparse.ArgumentParser):
    """argparse's ``--help`` drops its output's error (into a closed pipe: exit 0 unbuffered, 120 and
    "Exception ignored" buffered): here it ends as any other output's (``output_failed``)."""

    def print_help(self, file: IO[str] | None = None) -> None:
        try:
            (file or sys.stdout).write(self.format_help())
            (file or sys.stdout).flush()
        except OSError as exc:
            self.exit(output_failed(exc, 0, self.prog or "onnx-cooker"))
