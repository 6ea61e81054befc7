"""What a conformance run found: everything its report (report.py) and its gate (run.py) need."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .exclusions import Exclusion


@dataclass
class Summary:
    """Everything the report and the gate need."""

    results: list[dict[str, Any]]
    platforms: list[str]
    exclusions: dict[str, Exclusion]
    unexplained: list[dict[str, str]] = field(default_factory=list)
    excluded: list[dict[str, str]] = field(default_factory=list)
    stale: list[dict[str, str]] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> "<platform>:<outcome>" -> n
    runtime_checks: dict[str, dict[str, Any]] = field(default_factory=dict)  # platform -> what ran
    seconds: float = 0.0
    cook_seconds: float = 0.0
    jobs: int = 0
    versions: dict[str, str] = field(default_factory=dict)
    date: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "platforms": self.platforms,
            "unexplained": self.unexplained,
            "excluded": self.excluded,
            "stale": self.stale,
            "counts": self.counts,
            "runtime_checks": self.runtime_checks,
            "seconds": self.seconds,
            "cook_seconds": self.cook_seconds,
            "jobs": self.jobs,
            "versions": self.versions,
            "date": self.date,
            "results": self.results,
        }
