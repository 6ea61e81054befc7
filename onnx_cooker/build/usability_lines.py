"""What a manifest task prints of the NNAPI/CoreML usability of its platform's models: each model that
is new or changed since the previous manifest, and one line for the unchanged rest (a one-model
change in a library of hundreds printed a line per model and EP at every cook). Standard library."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnx_cooker.runtime.constants import MANIFEST_NAME


def previous_models(platform_dir: Path) -> dict[str, Any] | None:
    """The models of the manifest in place (before the task writes its own), or None."""
    try:
        models = json.loads((platform_dir / MANIFEST_NAME).read_text(encoding="utf-8"))["models"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return models if isinstance(models, dict) else None


def usability_lines(
    platform: str, models: Mapping[str, Mapping[str, Any]], before: Mapping[str, Any] | None = None
) -> list[str]:
    """How much of each model the platform's NNAPI/CoreML EP would take: a line per EP for each model
    new or re-cooked since ``before`` (the previous manifest's models; None: every model), and one
    line counting the verdicts of the others (the cook report shows each)."""
    lines, unchanged = [], Counter()
    for name, entry in sorted(models.items()):
        previous = before.get(name) if before is not None else None
        same = isinstance(previous, Mapping) and previous.get("cook_key") == entry.get("cook_key")
        for ep, report in entry.get("usability", {}).items():
            if same:
                unchanged[
                    (ep, "not measured" if report.get("error") else report.get("verdict", "unknown"))
                ] += 1
            elif report.get("error"):  # not measured: say why, not "0/0 nodes"
                lines.append(
                    f"  {platform}:{name}: {ep}: not measured ({report['error'].splitlines()[0][:200]})"
                )
            else:
                share = f"{report['supported_nodes']}/{report['nodes']} nodes"
                line = f"  {platform}:{name}: {ep} takes {share} in {report['partitions']} partition(s): "
                line += report["verdict"]
                if report["verdict_if_shapes_fixed"] != report["verdict"]:
                    line += f" ({report['verdict_if_shapes_fixed']} with fixed_dims/fixed_shapes for "
                    line += f"{', '.join(report['dynamic_inputs'])})"
                lines.append(line)
    for ep in sorted({ep for ep, _ in unchanged}):
        counts = {verdict: count for (each, verdict), count in sorted(unchanged.items()) if each == ep}
        verdicts = ", ".join(f"{verdict} {count}" for verdict, count in counts.items())
        lines.append(
            f"  {platform}: {ep}, the {sum(counts.values())} unchanged model(s): {verdicts} "
            "(each in build/report.html)"
        )
    return lines
