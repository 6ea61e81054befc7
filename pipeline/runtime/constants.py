"""Names and limits shared by the cooker and the loader. Standard library only.

The cooker reads these at doit's task-loading time, where onnxruntime must not be imported:
``pipeline.runtime`` loads its onnxruntime-backed modules lazily, so importing this module (or
``compat``) costs nothing more.
"""

from __future__ import annotations

from enum import Enum


class ModelFormat(str, Enum):
    """What a platform ships: onnxruntime's flatbuffer format, or an ONNX protobuf."""

    ORT = "ort"
    ONNX = "onnx"


class OptimizationStyle(str, Enum):
    """ORT format only: optimizations applied at cook time, or saved and replayed at load."""

    FIXED = "fixed"
    RUNTIME = "runtime"


class Arch(str, Enum):
    """The target CPU architecture (decides the CPU-specific layouts a cook may use)."""

    X86_64 = "x86_64"
    ARM64 = "arm64"


class Precision(str, Enum):
    """The numeric precision a model ships at (the cooker's `precision` setting)."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8_DYNAMIC = "int8-dynamic"
    INT8_STATIC = "int8-static"


# The blob layout and the manifest that lists blobs (docs/bundle-format.md).
BLOB_FORMAT_VERSION = 3
V2_BLOB_FORMAT_VERSION = 2
LEGACY_BLOB_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
SIGNATURE_NAME = "manifest.json.sig"

# How a cook weighs a blob's load speed against its size (the `compression` setting; writer.py's
# `_section` picks raw or zstd per section, docs/bundle-format.md says why).
COMPRESSION_CHOICES = ("speed", "size")

# protobuf cannot serialize a message of 2 GiB or more, and flatbuffers (ORT format) cannot address
# more: the one limit behind the loader's default guard, the ORT-format check and large models.
TWO_GIB = 2 << 30

# onnxruntime's graph optimization levels by the names profiles and blobs use, in increasing order.
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")

# Session config entries a blob may carry: onnxruntime's own namespaces that change how a session
# runs, never where it writes files (e.g. ep.context_file_path).
ALLOWED_CONFIG_PREFIXES = ("session.", "optimization.", "mlas.")
# Config entries refused in every blob, with the reason: the load paths set these themselves
# (pipeline/runtime/loadpaths.py), each only where it is proven safe.
_OWNED = "the loader sets it itself, for the load path it proved (docs/design.md, loading from memory)"
UNSAFE_CONFIG_ENTRIES: dict[str, str] = {
    key: _OWNED
    for key in (
        "session.use_ort_model_bytes_for_initializers",
        "session.use_ort_model_bytes_directly",
        "session.use_memory_mapped_ort_model",
        "session.load_model_format",
        "session.use_external_initializer_file_buffers_directly",
        "session.model_external_initializers_file_folder_path",
    )
}

# Device selection policies of onnxruntime's plugin-EP API (a blob's ``device_policy``, the platform's
# ``ep_device_policy``), as the loader names them (``devices.POLICY_MEMBERS`` maps them onto
# ``onnxruntime.OrtExecutionProviderDevicePolicy``).
DEVICE_POLICIES = (
    "prefer_gpu",
    "prefer_npu",
    "prefer_cpu",
    "max_performance",
    "max_efficiency",
    "min_power",
    "default",
)
