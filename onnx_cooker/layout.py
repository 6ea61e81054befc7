"""Where cooked files go under the build folder. Standard library only (used at task-loading time)."""

from __future__ import annotations

from pathlib import Path

ENTRIES_DIR = ".entries"
STAMPS_DIR = ".stamps"
CHECKS_DIR = ".checks"
# The cook report in the build folder, and what it keeps between runs (onnx_cooker/report/model.py).
REPORT_NAME = "report.html"
REPORT_STATE_DIR = ".report"
# The operator lists written for a reduced onnxruntime build (onnx_cooker.cook.opconfig), without and with
# type reduction.
OPS_CONFIG = "required_operators.config"
OPS_AND_TYPES_CONFIG = "required_operators_and_types.config"


# A blob file: "onnx-cooker blob" (not .zst: stock zstd does not give the model of a blob whose
# sections are raw extents; docs/bundle-format.md). Cookers before blob format 3 wrote ".zst".
BLOB_SUFFIX = "ocb"
OLD_BLOB_SUFFIXES = ("zst",)


def ops_config_names(type_reduction: bool) -> tuple[str, ...]:
    return (OPS_CONFIG, OPS_AND_TYPES_CONFIG) if type_reduction else (OPS_CONFIG,)


def blob_path(platform_dir: Path, name: str, model_format: str) -> Path:
    """Where a cook writes its blob (staging): the manifest task publishes it under a name that
    carries its content hash (onnx_cooker.build.publish), so that a bundle is replaced as one unit."""
    return platform_dir / ENTRIES_DIR / f"{name}.{model_format}.{BLOB_SUFFIX}"


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


def digest_memo_dir(build: Path) -> Path:
    """The sha256s the cooker computed of the files it read and wrote, for doit's file checks
    (onnx_cooker.build.stamps.DigestChecker)."""
    return build / STAMPS_DIR / "digests"


def cache_run_marker_path(build: Path) -> Path:
    """Set by the first cook of a doit run that finds the cook cache unusable, for the others
    (onnx_cooker.farm.cache.CookCache)."""
    return build / STAMPS_DIR / "cache-unusable.json"


def reference_memo_dir(build: Path) -> Path:
    """The source models' outputs on their verification inputs, shared by the platforms' cooks
    (onnx_cooker.cook.verify.reference_outputs)."""
    return build / STAMPS_DIR / "references"


def cook_stamps_path(platform_dir: Path, name: str) -> Path:
    """What a cook task wrote (onnx_cooker.build.stamps), to notice outputs changed since."""
    return platform_dir / STAMPS_DIR / "cook" / f"{name}.json"


def step_times_path(platform_dir: Path, name: str) -> Path:
    """Wall seconds per step of the last cook of ``name`` (onnx_cooker.steptimes; read by the bench)."""
    return platform_dir / STAMPS_DIR / "times" / f"{name}.json"


def cache_record_path(platform_dir: Path, name: str) -> Path:
    """What the cook cache did for the last cook of ``name`` (hit or miss, bytes, time saved), for the
    summary at the end of ``doit cook`` (onnx_cooker.build.progress)."""
    return platform_dir / STAMPS_DIR / "cache" / f"{name}.json"


def check_times_path(platform_dir: Path) -> Path:
    """Wall seconds of the last runtime check, per onnxruntime version (read by the bench)."""
    return platform_dir / STAMPS_DIR / "runtime-check-times.json"


def manifest_stamps_path(platform_dir: Path) -> Path:
    return platform_dir / STAMPS_DIR / "manifest.json"


# The line the runtime check's worker writes to stderr before each model it checks, so that the
# cook can name the model a crash inside onnxruntime (no report at all) happened on.
CHECKING_MODEL = "checking model "
