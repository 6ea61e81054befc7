"""One unit of cooking work, built at task-loading time. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from onnx_cooker.cook import key as cookkey
from onnx_cooker.settings.assets import AssetModel
from onnx_cooker.settings.resolve import CookSettings


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
    runtime_package: str = "onnxruntime"  # the onnxruntime build the target ships (runtime_package)
    min_coverage: tuple[tuple[str, float], ...] = ()  # (model, its min_ep_coverage) where it is set


@dataclass(frozen=True, kw_only=True)
class CookJob:
    """Everything one (platform, model) cook needs; picklable for ``doit -n``.

    ``task_key`` is derived from the model's name and settings (and the tool versions) when the job
    is made.
    """

    asset: AssetModel
    settings: CookSettings
    platform_dir: Path
    task_key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_key", cookkey.task_key(self.settings.to_dict(), self.asset.name))
