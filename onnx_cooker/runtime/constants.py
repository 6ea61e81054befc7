"""Names and limits shared by the cooker and the loader. Standard library only.

The cooker reads these at doit's task-loading time, where onnxruntime must not be imported:
``onnx_cooker.runtime`` loads its onnxruntime-backed modules lazily, so importing this module (or
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
# Present while a cook replaces manifest.json and its signature (docs/bundle-format.md): a signed
# pair that does not verify meanwhile is read again (runtime/manifestfile.py).
SIGNING_NAME = "manifest.json.signing"

# How a cook weighs a blob's load speed against its size (the `compression` setting; writer.py's
# `_section` picks raw or zstd per section, docs/bundle-format.md says why).
COMPRESSION_CHOICES = ("speed", "size")

# protobuf cannot serialize a message of 2 GiB or more, and flatbuffers (ORT format) cannot address
# more: the one limit behind the loader's default guard, the ORT-format check and large models.
TWO_GIB = 2 << 30

# onnxruntime's graph optimization levels by the names profiles and blobs use, in increasing order.
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")

# Session config entries a blob may carry. A blob comes from a file, so it may ask onnxruntime only
# for what changes how a session computes (kernels, threads' spinning, optimizers, quantized-graph
# rules), never for anything that names a file or folder onnxruntime would read, create or write
# (session.node_partition_config_file, session.optimized_model_filepath, session.enable_profiling,
# session.debug_layout_transformation, session.moe.offload.*, ep.context_file_path, ...). An
# allow-list, so that an entry a newer onnxruntime adds stays refused until it is read and listed
# here; native/src/recipe.c holds the same list (tests/test_session_option_refusals.py). Every
# ``mlas.`` entry is a math-kernel switch. A game that needs another entry sets it on the
# SessionOptions it passes (``session_options=`` / ``oc_session_options.base``).
SAFE_CONFIG_ENTRIES = frozenset(
    {
        "optimization.constant_folding_max_output_size_in_bytes",
        "optimization.disable_specified_optimizers",
        "optimization.enable_cast_chain_elimination",
        "optimization.enable_gelu_approximation",
        "session.allow_released_opsets_only",
        "session.disable_aot_function_inlining",
        "session.disable_cpu_ep_fallback",
        "session.disable_double_qdq_remover",
        "session.disable_prepacking",
        "session.disable_qdq_constant_folding",
        "session.disable_quant_qdq",
        "session.dynamic_block_base",
        "session.enable_dq_matmulnbits_fusion",
        "session.enable_quant_qdq",
        "session.enable_quant_qdq_cleanup",
        "session.force_spinning_stop",
        "session.function_expansion_byte_limit",
        "session.function_expansion_node_limit",
        "session.graph_optimizations_loop_level",
        "session.inter_op.allow_spinning",
        "session.inter_op.spin_backoff_max",
        "session.inter_op.spin_duration_us",
        "session.intra_op.allow_spinning",
        "session.intra_op.spin_backoff_max",
        "session.intra_op.spin_duration_us",
        "session.intra_op_thread_affinities",
        "session.prepack.enable_parallel",
        "session.qdq_matmulnbits_accuracy_level",
        "session.qdq_matmulnbits_block_size",
        "session.qdqisint8allowed",
        "session.set_denormal_as_zero",
        "session.strict_shape_type_inference",
        "session.use_deterministic_compute",
        "session.use_device_allocator_for_initializers",
        "session.use_env_allocators",
        "session.x64quantprecision",
    }
)
SAFE_CONFIG_PREFIXES = ("mlas.",)
# Config entries refused in every blob, with the reason: the load paths set these themselves
# (onnx_cooker/runtime/loadpaths.py), each only where it is proven safe.
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

# Provider options a blob may not carry: those whose name says it may name a file, folder or
# library for the EP to read, create, write or load, or a memory address (QNN backend_path and
# op_packages, OpenVINO cache_dir, load_config and context, CoreML ModelCacheDirectory, TensorRT
# trt_engine_cache_path and trt_extra_plugin_lib_paths, CUDA gpu_external_alloc and
# user_compute_stream, ...), found by the words below in the option's lower-cased name; and any
# value holding a path separator. EPs are many and consoles have their own, so words rather than a
# list per EP. native/src/recipe.c holds the same words. A game that needs such an option passes
# it itself (``providers=[(ep, options)]`` / ``oc_runtime_set_ep_appender``).
UNSAFE_PROVIDER_OPTION_WORDS = (
    "path", "file", "dir", "folder", "cache", "lib", "dump", "save", "load", "context",
    "plugin", "package", "external", "compute_stream", "decrypt", "calibration", "handle", "root",
    "cfg", "config", "uri", "url",
)  # fmt: skip
UNSAFE_PROVIDER_OPTION_VALUE_CHARACTERS = ("/", "\\")


def unsafe_provider_option(key: str, value: object) -> str | None:
    """Why a blob may not carry provider option ``key`` = ``value``, or None where it may."""
    lowered = key.encode("utf-8", "surrogatepass").lower()  # ASCII letters only, as the C library
    for word in UNSAFE_PROVIDER_OPTION_WORDS:
        if word.encode() in lowered:
            return f"its name holds '{word}': it may name a file, folder, library or memory address"
    text = str(value)
    if any(character in text for character in UNSAFE_PROVIDER_OPTION_VALUE_CHARACTERS):
        return "its value holds a path separator"
    return None


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
