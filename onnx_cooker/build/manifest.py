"""The per-platform manifest: the entries of every cooked model, merged once all cooks are done."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from onnx_cooker.build.check_report import verified_versions
from onnx_cooker.build.placement_check import placements
from onnx_cooker.build.publish import drop_unlisted_entries, publish, retire
from onnx_cooker.cook.budget import measured_variants, shrink_hint
from onnx_cooker.cook.key import BUNDLE_FORMAT, tool_versions
from onnx_cooker.errors import CookError
from onnx_cooker.fsutil import remove_stale_temps, write_json
from onnx_cooker.layout import digest_memo_dir, entry_path
from onnx_cooker.runtime.compat import parse_version
from onnx_cooker.runtime.constants import MANIFEST_NAME, MANIFEST_VERSION


def write_manifest(
    platform_dir: Path,
    platform: str,
    names: Sequence[str],
    check_results: Sequence[Path] = (),
    check_off_reason: str | None = None,
    max_bundle_bytes: int = 0,
) -> Path:
    """Merge the entries of ``names`` into ``platform_dir/manifest.json`` (atomically).

    Each entry's ``verified_on`` lists the onnxruntime versions its blob was run and compared on:
    the cook's own, and the target's exact version from the runtime check (``check_results``).
    """
    checked: dict[str, set[str]] = {}
    placed: dict[str, dict[str, Any]] = {}
    for result in check_results:
        for name, version in verified_versions(result, names).items():
            checked.setdefault(name, set()).add(version)
        placed.update(placements(result, names))
    models = {}
    for name in sorted(names):
        path = entry_path(platform_dir, name)
        try:
            models[name] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CookError(
                f"{path}: cannot read the cooked entry of {name!r} ({exc}); re-run the cook"
            ) from None
        entry = models[name]
        cooked = {entry["cooked_with"]["onnxruntime"]} if "outputs" in entry["verification"] else set()
        entry["verified_on"] = sorted(cooked | checked.get(name, set()), key=parse_version)
        if name in placed:  # where the runtime check found its nodes to run on the target's EPs
            entry["placement"] = placed[name]
    check_bundle_budget(platform, models, max_bundle_bytes, platform_dir.parent)
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "platform": platform,
        "bundle_format": BUNDLE_FORMAT,
        "cooked_with": dict(tool_versions()),
        "runtime_check": {"off": check_off_reason} if check_off_reason is not None else "on",
        "models": models,
    }
    remove_stale_temps(platform_dir)
    publish(platform_dir, models, digest_memo_dir(platform_dir.parent))  # every blob under its name first...
    target = platform_dir / MANIFEST_NAME
    write_json(target, manifest)  # ...then the switch
    retire(platform_dir, models)  # blobs no manifest lists go after a grace period
    drop_unlisted_entries(platform_dir, models)  # and what cooks staged for them, now
    return target


def check_bundle_budget(
    platform: str, models: Mapping[str, Mapping[str, Any]], budget: int, build: Path | None = None
) -> None:
    """Refuse a bundle over ``max_bundle_bytes``, naming its biggest models and what would shrink them
    (measured where another platform of ``build`` cooked the model at a lower precision)."""
    total = sum(entry["blob_size"] for entry in models.values())
    if not budget or total <= budget:
        return
    biggest = sorted(models.items(), key=lambda item: -item[1]["blob_size"])[:3]
    named = "; ".join(
        f"{name} {entry['blob_size']:,} B ({shrink_hint(entry, measured_variants(build, name))})"
        for name, entry in biggest
    )
    raise CookError(
        f"platform {platform!r}: the bundle is {total:,} bytes, over its max_bundle_bytes of {budget:,} "
        f"(no manifest written); biggest: {named}. Set `precision` for those models in their .cook.yaml, "
        "leave some out with `skip_platforms`, or raise max_bundle_bytes"
    )
