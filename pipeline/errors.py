"""Expected failures on the cooking side, caught in one place (the doit actions) and shown without traceback.

Standard library only: ``pipeline.profile`` imports this at doit task-loading time.
"""

from __future__ import annotations

from collections.abc import Iterable


class CookError(Exception):
    """Base of every expected cooking failure; message says what, where, how to fix."""


class ProfileError(CookError):
    """A platform profile or per-model settings file is invalid.

    Carries every problem found, so one run reports them all; ``str()`` lists them one per line.
    """

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))

    def __reduce__(self) -> tuple[type[ProfileError], tuple[list[str]]]:
        # Keep `problems` intact through pickling (doit's parallel runner pickles task results).
        return type(self), (self.problems,)


class ModelError(CookError):
    """A source model cannot be read, checked or normalized."""


class GuardError(CookError):
    """A cooked model failed a safety guard."""


class VerifyError(CookError):
    """A cooked model does not compute what its source computes."""
