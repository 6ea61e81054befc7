"""What the cook report reads: each platform's manifest and step times (``Model``), the failures of
the last run, and what changed since the run before (``changes``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onnx_cooker.fsutil import write_json
from onnx_cooker.layout import REPORT_STATE_DIR, step_times_path
from onnx_cooker.runtime.constants import MANIFEST_NAME, Precision

# What the report's changes compare against: the bundles before the last cook that changed them
SNAPSHOT_PATH = Path(REPORT_STATE_DIR) / "previous.json"
# The bundles as the last cook's report saw them: a cook that changes nothing keeps the baseline
LAST_SEEN_PATH = Path(REPORT_STATE_DIR) / "last.json"
FAILURES_DIR = Path(REPORT_STATE_DIR) / "failures"
COOKING_STEPS = ("optimize and serialize",)  # a cook that ran these cooked; one that did not was a cache hit


@dataclass(frozen=True)
class Model:
    platform: str
    name: str
    entry: Mapping[str, Any]
    times: Mapping[str, float] = field(default_factory=dict)

    @property
    def precision(self) -> str:
        return (self.entry.get("precision") or {}).get("precision", Precision.FP32.value)

    @property
    def max_abs(self) -> float | None:
        outputs = (self.entry.get("verification") or {}).get("outputs")
        return max((o["max_abs"] for o in outputs), default=0.0) if outputs else None

    @property
    def how(self) -> str:
        if not self.times:
            return "unknown"
        return "cooked" if any(step in self.times for step in COOKING_STEPS) else "cache hit"

    @property
    def placement(self) -> str:
        """Measured coverage of the preferred EP (the runtime check's), or why it was not measured."""
        placement = self.entry.get("placement")
        if not isinstance(placement, Mapping):
            return ""
        ep = str(placement.get("preferred", "")).removesuffix("ExecutionProvider")
        if not placement.get("measured"):
            return f"{ep}: not measured"
        cpu = placement.get("cpu_ops") or []
        return f"{ep} {placement.get('coverage', 0):.0%}" + (f" (CPU: {', '.join(cpu)})" if cpu else "")

    @property
    def usability(self) -> str:
        report = self.entry.get("usability") or {}
        parts = []
        for ep, info in sorted(report.items()) if isinstance(report, Mapping) else ():
            if isinstance(info, Mapping) and "supported_nodes" in info:
                name = ep.removesuffix("ExecutionProvider")
                parts.append(
                    f"{name} {info['supported_nodes']}/{info.get('nodes', '?')} ({info.get('verdict', '?')})"
                )
        return ", ".join(parts)


def read_build(build: Path) -> dict[str, dict[str, Model]]:
    """platform -> model name -> Model, from every ``<platform>/manifest.json`` under ``build``."""
    platforms: dict[str, dict[str, Model]] = {}
    for manifest_path in sorted(build.glob(f"*/{MANIFEST_NAME}")):
        platform_dir = manifest_path.parent
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        models = {}
        for name, entry in sorted(manifest["models"].items()):
            times_path = step_times_path(platform_dir, name)
            times = json.loads(times_path.read_text()) if times_path.is_file() else {}
            models[name] = Model(manifest["platform"], name, entry, times)
        platforms[manifest["platform"]] = models
    return platforms


def record_failure(build: Path, task: str, message: str) -> None:
    """Keep a failed task's message for the report (a later success of the task removes it)."""
    write_json(build / FAILURES_DIR / f"{_file_safe(task)}.json", {"task": task, "message": message})


def clear_failure(build: Path, task: str) -> None:
    (build / FAILURES_DIR / f"{_file_safe(task)}.json").unlink(missing_ok=True)


def clear_failures(build: Path) -> None:
    for path in (build / FAILURES_DIR).glob("*.json"):
        path.unlink(missing_ok=True)


def read_failures(build: Path) -> list[dict[str, str]]:
    folder = build / FAILURES_DIR
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _file_safe(task: str) -> str:
    return task.replace("/", "%2F").replace(":", "%3A")


# --- what changed -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    platform: str
    name: str
    kind: str  # added, removed, re-cooked
    why: str
    old_size: int
    new_size: int
    old_error: float | None = None  # max abs verification error (None: not verified or absent)
    new_error: float | None = None

    @property
    def accuracy(self) -> str:
        """``max abs error a -> b`` for a re-cooked model whose verification error changed."""
        if self.old_error == self.new_error or self.kind != "re-cooked":
            return ""
        old = "not verified" if self.old_error is None else f"{self.old_error:.3g}"
        new = "not verified" if self.new_error is None else f"{self.new_error:.3g}"
        return f"max abs error {old} -> {new}"


def summary(platforms: Mapping[str, Mapping[str, Model]]) -> dict[str, dict[str, dict[str, Any]]]:
    """What a diff compares, per platform and model: sizes, key, sources, settings, tools, accuracy."""
    return {
        platform: {
            name: {
                "blob_size": m.entry["blob_size"],
                "cook_key": m.entry.get("cook_key"),
                "sources": m.entry.get("sources"),
                "settings": m.entry.get("settings"),
                "cooked_with": m.entry.get("cooked_with"),
                "max_abs": m.max_abs,
                "precision": m.precision,
            }
            for name, m in models.items()
        }
        for platform, models in platforms.items()
    }


def _differ(key: str, before: Any, after: Any) -> bool:
    """Whether a recorded value changed. Settings are resolved in full, so keys only one side has are
    the settings another version of the cooker knows (defaults it added or dropped), not the user's
    change: they compare on the keys both have (an upgrade is 'the cooker's bundle format')."""
    if key == "settings" and isinstance(before, Mapping) and isinstance(after, Mapping):
        return any(before[key] != after[key] for key in before.keys() & after.keys())
    return before != after


def changes(old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]]) -> list[Change]:
    found = []
    for platform in sorted(set(old) | set(new)):
        before, after = old.get(platform, {}), new.get(platform, {})
        for name in sorted(set(before) | set(after)):
            if name not in before:
                found.append(Change(platform, name, "added", "new model", 0, after[name]["blob_size"]))
            elif name not in after:
                found.append(
                    Change(platform, name, "removed", "no longer cooked", before[name]["blob_size"], 0)
                )
            elif before[name]["cook_key"] != after[name]["cook_key"]:
                b, a = before[name], after[name]
                why = [
                    what
                    for what, key in (
                        ("source", "sources"),
                        ("settings", "settings"),
                        ("tool versions", "cooked_with"),
                    )
                    if _differ(key, b.get(key), a.get(key))
                ] or ["the cooker's bundle format"]
                found.append(
                    Change(
                        platform,
                        name,
                        "re-cooked",
                        ", ".join(why),
                        b["blob_size"],
                        a["blob_size"],
                        b.get("max_abs"),
                        a.get("max_abs"),
                    )
                )
    return found


# --- the page -----------------------------------------------------------------------------------------
