"""Where a cook's time goes: wall seconds per step, written beside the cook's stamps for the bench.

Standard library only. ``recording()`` collects the ``step(...)`` timings of the code it wraps (a
context variable, so concurrent cooks in threads keep theirs apart); outside it, ``step`` costs a
lookup and records nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_current: ContextVar[dict[str, float] | None] = ContextVar("cook_step_times", default=None)
# Told each step's name as it starts (onnx_cooker/isolate.py: a cook's child process tells its parent,
# so that a crash can be placed); None: nobody.
_announce: Callable[[str], None] | None = None


def announce_to(listener: Callable[[str], None] | None) -> None:
    """Have ``listener`` told the name of every step as it starts, in this process."""
    global _announce
    _announce = listener


@contextmanager
def recording() -> Iterator[dict[str, float]]:
    times: dict[str, float] = {}
    token = _current.set(times)
    try:
        yield times
    finally:
        _current.reset(token)


@contextmanager
def step(name: str) -> Iterator[None]:
    if _announce is not None:
        _announce(name)
    times = _current.get()
    start = time.perf_counter()
    try:
        yield
    finally:
        if times is not None:
            times[name] = times.get(name, 0.0) + time.perf_counter() - start
