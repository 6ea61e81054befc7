"""A platform's runtime-check report as the check wrote it (``onnx_cooker.build.target_check``), for the
manifest, the placement lines and the next check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnx_cooker.build.target_check import RuntimeCheckError


def verified_versions(result_path: Path, names: Sequence[str]) -> dict[str, str]:
    """Model name -> the onnxruntime version a passed runtime check ran it on."""
    report = read_result(result_path)
    return {name: report["onnxruntime"] for name in names if report["models"].get(name, {}).get("ok")}


def read_result(result_path: Path) -> dict[str, Any]:
    """A runtime check's report as written (no models: never run)."""
    if not result_path.is_file():
        return {"models": {}}
    try:
        return json.loads(result_path.read_text(encoding="utf-8"))
    except ValueError:
        raise RuntimeCheckError(f"{result_path} is damaged; delete it and run the cook again") from None
