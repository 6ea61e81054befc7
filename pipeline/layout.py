"""Where cooked files go under the build folder. Standard library only (used at task-loading time)."""

from __future__ import annotations

from pathlib import Path

ENTRIES_DIR = ".entries"
STAMPS_DIR = ".stamps"
CHECKS_DIR = ".checks"
# Same values as pipeline.runtime.bundle (kept in step by a test; importing the runtime here would
# load onnxruntime when doit loads tasks).
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
SIGNATURE_NAME = "manifest.json.sig"


def blob_path(platform_dir: Path, name: str, model_format: str) -> Path:
    """Where a cook writes its blob (staging): the manifest task publishes it under a name that
    carries its content hash (pipeline.publish), so that a bundle is replaced as one unit."""
    return platform_dir / ENTRIES_DIR / f"{name}.{model_format}.zst"


def applied_variant_path(platform_dir: Path, name: str) -> Path:
    """A runtime-style model with its saved optimizations applied: only its operators are needed."""
    return platform_dir / ENTRIES_DIR / f"{name}.applied.ort"


def verify_data_path(platform_dir: Path, name: str) -> Path:
    """The verification inputs and the source's outputs, kept for the runtime check."""
    return platform_dir / ENTRIES_DIR / f"{name}.verify.npz"


def runtime_check_path(platform_dir: Path, version: str) -> Path:
    return platform_dir / CHECKS_DIR / f"onnxruntime-{version}.json"


def entry_path(platform_dir: Path, name: str) -> Path:
    """Each cook writes its manifest entry alone, so parallel cooks never share a file."""
    return platform_dir / ENTRIES_DIR / f"{name}.json"


def cook_stamps_path(platform_dir: Path, name: str) -> Path:
    """What a cook task wrote (pipeline.stamps), to notice outputs changed since."""
    return platform_dir / STAMPS_DIR / "cook" / f"{name}.json"


def manifest_stamps_path(platform_dir: Path) -> Path:
    return platform_dir / STAMPS_DIR / "manifest.json"
