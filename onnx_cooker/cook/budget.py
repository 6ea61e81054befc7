"""Size budgets: what a lower precision would make of a blob, measured where another platform of the
build cooked the model at that precision, else estimated from its weights (for the errors of
``max_blob_bytes`` here and ``max_bundle_bytes`` in onnx_cooker/build/manifest.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnx_cooker.cook.job import CookJob
from onnx_cooker.errors import ModelError
from onnx_cooker.layout import entry_path
from onnx_cooker.runtime.constants import Precision


def shrink_hint(entry: Mapping[str, Any], measured: Mapping[str, tuple[int, str]] | None = None) -> str:
    """What a lower precision would make of a blob: measured, where ``measured`` (precision ->
    (blob size, platform), from ``measured_variants``) has it, else estimated from its weight bytes."""
    precision = (entry.get("precision") or {}).get("precision", Precision.FP32.value)
    if precision != Precision.FP32:
        return f"already {precision}"
    weights = entry.get("weight_bytes") or 0
    estimates = {
        Precision.FP16.value: entry["blob_size"] - weights // 2,
        "int8": entry["blob_size"] - weights * 3 // 4,
    }
    found = dict(measured or {})
    parts = []
    for lower in (Precision.FP16.value, Precision.INT8_DYNAMIC.value, Precision.INT8_STATIC.value):
        if lower in found:
            size, where = found[lower]
            parts.append(f"{size:,} B as {lower} (measured: its {where} blob)")
    estimated = [
        f"about {size:,} B as {name}"
        for name, size in estimates.items()
        if not any(key.startswith(name) for key in found)
    ]
    if estimated:
        parts.append(", ".join(estimated) + " (estimated from its weights)")
    return "fp32; " + "; ".join(parts)


def measured_variants(build: Path | None, name: str) -> dict[str, tuple[int, str]]:
    """The smallest blob of model ``name`` per lower precision among the platforms cooked in
    ``build`` so far: precision -> (blob size, platform)."""
    found: dict[str, tuple[int, str]] = {}
    if build is None or not build.is_dir():
        return found
    for platform_dir in sorted(build.iterdir()):
        path = entry_path(platform_dir, name)
        if platform_dir.name.startswith(".") or not path.is_file():
            continue
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            precision, size = entry["precision"]["precision"], int(entry["blob_size"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # an entry being rewritten, or from an older cook: nothing measured there
        if precision != Precision.FP32 and (precision not in found or size < found[precision][0]):
            found[precision] = (size, platform_dir.name)
    return found


def check_blob_budget(job: CookJob, size: int, weight_bytes: int) -> None:
    """Refuse a blob of ``size`` bytes over the job's ``max_blob_bytes``, saying what would shrink it."""
    budget = job.settings.max_blob_bytes
    if budget and size > budget:
        estimate = shrink_hint(
            {
                "blob_size": size,
                "weight_bytes": weight_bytes,
                "precision": {"precision": job.settings.precision},
            },
            measured_variants(job.platform_dir.parent, job.asset.name),
        )
        raise ModelError(
            f"the blob is {size:,} bytes, over its max_blob_bytes of {budget:,} ({estimate}); set "
            f"`precision` in {job.asset.path.with_suffix('.cook.yaml')}, or raise max_blob_bytes"
        )
