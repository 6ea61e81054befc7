"""The per-platform manifest: the entries of every cooked model, merged once all cooks are done."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .cookkey import BUNDLE_FORMAT, tool_versions
from .errors import CookError
from .fsutil import atomic_write
from .layout import MANIFEST_NAME, MANIFEST_VERSION, entry_path


def write_manifest(platform_dir: Path, platform: str, names: Sequence[str]) -> Path:
    """Merge the entries of ``names`` into ``platform_dir/manifest.json`` (atomically)."""
    models = {}
    for name in sorted(names):
        path = entry_path(platform_dir, name)
        try:
            models[name] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CookError(
                f"{path}: cannot read the cooked entry of {name!r} ({exc}); re-run `doit cook`"
            ) from None
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "platform": platform,
        "bundle_format": BUNDLE_FORMAT,
        "cooked_with": dict(tool_versions()),
        "models": models,
    }
    target = platform_dir / MANIFEST_NAME
    atomic_write(target, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return target
