"""What the runtime check found about where each model runs (``onnx_cooker.build.placement`` measures
it in the target's environment): the minimum coverage enforced, one line for the cook's output, the
placements recorded in the manifest."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnx_cooker.build.check_report import read_result
from onnx_cooker.cook.job import RuntimeCheck
from onnx_cooker.layout import entry_path
from onnx_cooker.settings.advice import lower_level_helps, onnx_instead_for


def coverage_failures(report: dict[str, Any], check: RuntimeCheck) -> tuple[list[str], list[str]]:
    """The models whose measured share of nodes on the preferred EP is under their
    ``min_ep_coverage``, each with the operators left to the CPU and what to do; and one note per
    model with such a minimum whose placement could not be measured here (never a silent pass)."""
    failures: list[str] = []
    notes: list[str] = []
    for name, need in check.min_coverage:
        placement = report["models"].get(name, {}).get("placement")
        if not need or placement is None:
            continue
        ep = placement.get("preferred", "the preferred EP")
        if not placement.get("measured"):
            notes.append(
                f"{check.platform}:{name}: min_ep_coverage {need:g} not checked: placement on {ep} not "
                f"measured ({placement.get('reason')})"
            )
        elif placement["coverage"] < need:
            ops = ", ".join(placement.get("cpu_ops", [])) or "none named"
            nodes = placement.get("nodes", {})
            share = f"{nodes.get(ep, 0)}/{sum(nodes.values())} of its nodes ({placement['coverage']:.1%})"
            settings = _settings(check, name)
            as_onnx = (
                ""
                if placement.get("format") == "onnx"
                else f"as ONNX ({onnx_instead_for(check.platform, settings)}), "
            )
            lower = (  # fused CPU-only ops stay on the CPU
                "a lower `optimization_level` (fused CPU-only ops stay on the CPU), "
                if lower_level_helps(settings.get("optimization_level"))
                else ""
            )
            failures.append(
                f"{name}: {share} run on {ep}, under min_ep_coverage {need:g} (left to the CPU: {ops}; "
                f"{placement['measured_with']}). Try {lower}{as_onnx}a model without those operators, or a "
                f"lower `min_ep_coverage` for this model (its .cook.yaml; the platform's: {check.profile})"
            )
    return failures, notes


def _settings(check: RuntimeCheck, name: str) -> dict[str, Any]:
    """This model's settings as its manifest entry records them (none if it cannot be read)."""
    try:
        settings = json.loads(entry_path(check.platform_dir, name).read_text(encoding="utf-8"))["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return settings if isinstance(settings, dict) else {}


def placement_lines(check: RuntimeCheck, report: dict[str, Any]) -> list[str]:
    """One line per preferred EP (models may set their own EPs) on where the platform's models run:
    measured coverage, or why it was not measured."""
    by_ep: dict[str, dict[str, dict[str, Any]]] = {}
    for name, model in report["models"].items():
        if model.get("placement"):
            by_ep.setdefault(model["placement"].get("preferred", "its preferred EP"), {})[name] = model[
                "placement"
            ]
    lines = []
    for ep, placed in by_ep.items():
        tool = next(iter(placed.values())).get("measured_with", "")
        unmeasured = [p for p in placed.values() if not p.get("measured")]
        if len(unmeasured) == len(placed):
            lines.append(f"{check.platform}: placement on {ep} not measured ({unmeasured[0].get('reason')})")
            continue
        partial = [
            f"{name} {p['coverage']:.1%} (CPU: {', '.join(p['cpu_ops']) or '-'})"
            for name, p in placed.items()
            if p.get("measured") and p["coverage"] < 1
        ]
        whole = sum(1 for p in placed.values() if p.get("measured") and p["coverage"] >= 1)
        tail = f"; {'; '.join(partial)}" if partial else ""
        extra = f"; {len(unmeasured)} not measured" if unmeasured else ""
        lines.append(
            f"{check.platform}: on {ep} ({tool}): {whole} of {len(placed)} model(s) wholly{tail}{extra}"
        )
    return lines


def placements(result_path: Path, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Model name -> where a passed runtime check found its nodes to run (``placement.measure``), or
    why that was not measured."""
    report = read_result(result_path)
    models = report["models"]
    return {
        n: models[n]["placement"] for n in names if models.get(n, {}).get("ok") and "placement" in models[n]
    }
