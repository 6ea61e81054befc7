"""One unit of cooking work, built at task-loading time. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .assets import AssetModel
from .profile import CookSettings


@dataclass(frozen=True, kw_only=True)
class RuntimeCheck:
    """Run a platform's blobs in the exact onnxruntime version they were cooked for."""

    platform: str
    runtime_version: str
    platform_dir: Path
    names: tuple[str, ...]
    runtimes_dir: Path
    result_path: Path
    profile: Path
    install_timeout: float = 300.0  # COOK_PIP_TIMEOUT: seconds for pip to install a runtime


@dataclass(frozen=True, kw_only=True)
class CookJob:
    """Everything one (platform, model) cook needs; picklable for ``doit -n``."""

    asset: AssetModel
    settings: CookSettings
    task_key: str
    platform_dir: Path
