"""Reduced-operator build configurations: what a minimal onnxruntime build must contain.

Written per platform over all of its cooked models, by onnxruntime's own config writer, in the
format its build reads with ``--include_ops_by_config``.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxruntime.tools.ort_format_model.utils import create_config_from_models

from .errors import CookError
from .fsutil import atomic_write
from .layout import OPS_AND_TYPES_CONFIG, applied_variant_path, ops_config_names
from .runtime.blob import decode_blob
from .runtime.errors import BundleError

# onnxruntime's writer logs every file at INFO on its own handler; the task prints its own line.
logging.getLogger("ort_format_model.utils").setLevel(logging.WARNING)


def write_operator_configs(platform_dir: Path, entries: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """Write the configs for the entries cooked with ``reduced_build``; returns the files written.

    The operators are those of the cooked models (after optimization). For runtime-style models the
    variant with the saved optimizations applied is included too: replaying them needs its kernels.
    """
    reduced = {name: e for name, e in entries.items() if e["settings"]["reduced_build"]}
    type_reduction = any(e["settings"]["type_reduction"] for e in reduced.values())
    wanted = ops_config_names(type_reduction) if reduced else ()
    for stale in set(ops_config_names(True)) - set(wanted):  # a platform that stopped asking for it
        (platform_dir / stale).unlink(missing_ok=True)
    if not reduced:
        return []
    try:
        return _write(platform_dir, reduced, type_reduction)
    except (BundleError, ValueError, OSError) as exc:
        raise CookError(
            f"{platform_dir}: cannot write the reduced-build operator config ({exc}); run `doit cook` again"
        ) from None


def _create_config(platform_dir: Path, models: list[Path], output: Path, types: bool, root: Path) -> None:
    """onnxruntime's config writer; its failures (it raises anything, e.g. KeyError on a data type it
    does not know) become a CookError naming the model and the setting that avoids it."""
    try:
        create_config_from_models(models, output, enable_type_reduction=types)
        return
    except Exception as exc:  # noqa: BLE001 (onnxruntime's tool: any exception type)
        failure = f"{type(exc).__name__}: {exc}"
    culprit = None
    for model in models:  # which model it chokes on
        try:
            create_config_from_models([model], root / "probe.config", enable_type_reduction=types)
        except Exception:  # noqa: BLE001
            culprit = model.relative_to(root).as_posix().removesuffix(".applied.ort").removesuffix(".ort")
            break
    fix = (
        "set `type_reduction: false` in this platform's file (the build then keeps every type of those "
        "operators)"
        if types
        else "set `reduced_build: false` for this platform"
    )
    which = f"model {culprit!r}" if culprit else "the platform's models"
    raise CookError(
        f"{platform_dir}: onnxruntime's reduced-build tool failed on {which} ({failure}); {fix}, or "
        "list this platform in the model's `skip_platforms`"
    )


def _write(platform_dir: Path, reduced: Mapping[str, Mapping[str, Any]], type_reduction: bool) -> list[Path]:
    written = []
    with tempfile.TemporaryDirectory(prefix=".opconfig-", dir=platform_dir) as tmp:
        root = Path(tmp)
        models = []
        for name, entry in sorted(reduced.items()):
            model_path = root / f"{name}.ort"
            model_path.parent.mkdir(parents=True, exist_ok=True)
            model_path.write_bytes(decode_blob((platform_dir / entry["file"]).read_bytes())[1])
            models.append(model_path)
            applied = applied_variant_path(platform_dir, name)
            if entry.get("saved_runtime_optimizations") and applied.is_file():
                models.append(root / f"{name}.applied.ort")
                models[-1].write_bytes(applied.read_bytes())
        for config in ops_config_names(type_reduction):
            output = root / config
            _create_config(platform_dir, models, output, config == OPS_AND_TYPES_CONFIG, root)
            # Name models by their bundle name, not by this temporary folder.
            text = output.read_text(encoding="utf-8").replace(f"{root}/", "")
            atomic_write(platform_dir / config, text.encode())
            written.append(platform_dir / config)
    return written
