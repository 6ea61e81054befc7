"""``onnx-cooker``'s output into a pipe whose reader left early (``onnx-cooker list --all | head``):
the convention of onnx_cooker/stdout.py (quiet, 141, a failure's status stands), plus what the doit
commands need: a stream for doit's reporter that outlives its reader (``Unread``: a cook goes on to
its end), and the flush of what a command printed, told apart from the command's own failure.
``diff --fail-if-grows`` exits with its gate's verdict (onnx_cooker/report/cli.py).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from onnx_cooker.stdout import PIPE_CLOSED, Parser, output_failed, stdout_to_devnull

__all__ = ["PIPE_CLOSED", "Parser", "Unread", "flushed", "output_failed", "reader_left"]


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
