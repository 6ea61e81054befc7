"""Shared helpers for the runtime-loader tests: tiny models built inline, blobs, crafted headers."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from pipeline.runtime.blob import BLOB_FORMAT_VERSION, HEADER_MAGIC, SKIPPABLE_MAGIC, encode_blob, read_header
from pipeline.runtime.compat import ort_format_version

REPO = Path(__file__).resolve().parents[1]
CPU = ["CPUExecutionProvider"]
IN_FEATURES = 16
OUT_FEATURES = 8

# Defaults of encode_blob's header fields; tests override what they are about.
HEADER_DEFAULTS: dict[str, Any] = {
    "platform": "test-platform",
    "name": "tiny",
    "cook_key": "0" * 64,
    "min_runtime_version": "1.16",
}


def tiny_model(seed: int = 0) -> onnx.ModelProto:
    """``y = Relu(x @ W + b)`` with seeded weights; small, yet its weights are real initializers."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((IN_FEATURES, OUT_FEATURES)).astype(np.float32)
    bias = rng.standard_normal(OUT_FEATURES).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["pre"]),
            helper.make_node("Relu", ["pre"], ["y"]),
        ],
        f"tiny{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, IN_FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, OUT_FEATURES])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def numpy_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """What ``tiny_model`` computes, evaluated with numpy from the model's own initializers."""
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    return np.maximum(x @ weights["W"] + weights["b"], 0)


def sample_input(seed: int = 1, rows: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, IN_FEATURES)).astype(np.float32)


def run_source(onnx_bytes: bytes, x: np.ndarray) -> np.ndarray:
    """onnxruntime (CPU) on the uncooked source model: the expected output of every cooked form."""
    return onnxruntime.InferenceSession(onnx_bytes, providers=CPU).run(None, {"x": x})[0]


def to_ort_format(onnx_bytes: bytes, out_dir: Path) -> bytes:
    """The ORT-format file onnxruntime itself writes for ``onnx_bytes`` (CPU EP only, ``basic``)."""
    path = out_dir / "model.ort"
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(path)
    options.add_session_config_entry("session.save_model_format", "ORT")
    onnxruntime.InferenceSession(onnx_bytes, options, providers=CPU)
    return path.read_bytes()


def make_blob(model: bytes, model_format: str, **fields: Any) -> bytes:
    """``encode_blob`` with test defaults; the ORT format version is read the way the cooker would."""
    header = {**HEADER_DEFAULTS, "ort_format_version": ort_format_version(model), **fields}
    return encode_blob(model, level=3, model_format=model_format, **header)


def pack_header(payload: bytes, *, version: int = BLOB_FORMAT_VERSION, crc: int | None = None) -> bytes:
    """A header frame around ``payload`` with a correct CRC unless ``crc`` is given."""
    prefix = struct.pack("<8sHI", HEADER_MAGIC, version, zlib.crc32(payload) if crc is None else crc)
    return struct.pack("<II", SKIPPABLE_MAGIC, len(prefix) + len(payload)) + prefix + payload


def split_blob(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """The header fields (as JSON data) and the model frame of a well-formed blob."""
    header, offset = read_header(blob)
    return header.to_dict(), blob[offset:]


def repack(blob: bytes, *, frame: bytes | None = None, **changes: Any) -> bytes:
    """``blob`` with header fields changed (and optionally another model frame), CRC recomputed."""
    fields, old_frame = split_blob(blob)
    fields.update(changes)
    payload = json.dumps(fields, sort_keys=True).encode()
    return pack_header(payload) + (old_frame if frame is None else frame)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_bundle(
    root: Path, blobs: dict[str, tuple[str, bytes]], *, platform: str = "test-platform", **extra: Any
) -> Path:
    """A bundle folder as the cooker lays it out: one blob file per model and a manifest.json.

    ``blobs`` maps a model name to (format, blob bytes). Entries carry informational fields beyond
    what the loader requires, as the cooker's manifest does.
    """
    root.mkdir(parents=True, exist_ok=True)
    models = {}
    for name, (model_format, blob) in blobs.items():
        file = f"{name}.{model_format}.zst"
        (root / file).write_bytes(blob)
        header, _ = read_header(blob)
        models[name] = {
            "file": file,
            "format": model_format,
            "blob_sha256": sha256(blob),
            "blob_size": len(blob),
            "model_size": header.model_size,
            "cook_key": header.cook_key,
            "execution_providers": list(header.execution_providers),
        }
    manifest = {"manifest_version": 1, "platform": platform, "models": models, **extra}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


def mutate(data: bytes, steps: list[tuple[str, float, int]]) -> bytes:
    """Apply (kind, where in 0..1, byte) steps: flip bits, insert a byte, delete one, truncate."""
    out = bytearray(data)
    for kind, where, value in steps:
        if not out:
            break
        index = min(int(where * len(out)), len(out) - 1)
        if kind == "flip":
            out[index] ^= value or 1
        elif kind == "insert":
            out.insert(int(where * len(out)), value)  # where == 1 appends
        elif kind == "delete":
            del out[index]
        else:
            del out[index:]
    return bytes(out)
