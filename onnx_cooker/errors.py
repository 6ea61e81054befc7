"""Expected failures on the cooking side, caught in one place (the doit actions) and shown without traceback.

Standard library only: ``onnx_cooker.settings.resolve`` imports this at doit task-loading time.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any


class CookError(Exception):
    """Base of every expected cooking failure: what failed and how to fix it (``problem``), and where
    as data (``model_path``, ``model_name``, ``platform``), which ``str()`` puts in front once.

    Steps raise with the problem alone; the cook adds where with ``in_context`` as the error leaves it.
    """

    def __init__(
        self,
        problem: str,
        *,
        model_path: Path | str | None = None,
        model_name: str | None = None,
        platform: str | None = None,
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.model_path = model_path
        self.model_name = model_name
        self.platform = platform

    def in_context(
        self, *, model_path: Path | str, model_name: str, platform: str | None = None
    ) -> CookError:
        """This error, with the model and platform it happened for (where not already known)."""
        self.model_path = self.model_path or model_path
        self.model_name = self.model_name or model_name
        self.platform = self.platform or platform
        return self

    @property
    def where(self) -> str:
        """``<file> (model 'name', platform 'p')``, as much of it as is known."""
        about = [
            f"model {self.model_name!r}" if self.model_name else "",
            f"platform {self.platform!r}" if self.platform else "",
        ]
        detail = ", ".join(part for part in about if part)
        if self.model_path is None:
            return detail
        return f"{self.model_path} ({detail})" if detail else str(self.model_path)

    def __str__(self) -> str:
        where = self.where
        return f"{where}: {self.problem}" if where else self.problem

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the context through pickling (doit's parallel runner pickles task results).
        context = {"model_path": self.model_path, "model_name": self.model_name, "platform": self.platform}
        return _rebuild, (type(self), self.problem, context)


class ProfileError(CookError):
    """A platform profile or per-model settings file is invalid.

    Carries every problem found, so one run reports them all; ``str()`` lists them one per line.
    """

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))  # each problem names its settings file

    def __reduce__(self) -> tuple[type[ProfileError], tuple[list[str]]]:
        # Keep `problems` intact through pickling (doit's parallel runner pickles task results).
        return type(self), (self.problems,)


class ModelError(CookError):
    """A source model cannot be read, checked or normalized."""


class GuardError(CookError):
    """A cooked model failed a safety guard."""


class VerifyError(CookError):
    """A cooked model does not compute what its source computes."""

    # the outputs that differ (onnx_cooker.cook.compare.OutputDifference), where a comparison failed
    failed: tuple[Any, ...] = ()


def _rebuild(cls: type[CookError], problem: str, context: dict[str, Any]) -> CookError:
    error = cls.__new__(cls)
    CookError.__init__(error, problem, **context)
    return error
