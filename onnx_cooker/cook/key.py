"""The cook key: everything that goes into a bundle, and nothing else (docs/design.md, "The cook key").

Loaded by ``dodo.py`` at task-loading time: standard library only. The versions of onnx and
onnxruntime come from package metadata, so that computing the key never imports them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata
from typing import Any

from onnx_cooker.runtime.constants import BLOB_FORMAT_VERSION, MANIFEST_VERSION

# Bump RECIPE whenever the cooking recipe changes what it writes for the same inputs.
# 2: precision and weight_bytes in every entry; 3: applied variants kept only when needed;
# 4: newer IR / opset lowered for the target (downgrade), the exact weight guard; 5: sections
# onnxruntime takes in place stored raw (`compression: speed`); 6: ONNX graphs raw too under `speed`;
# 7: for onnxruntime before 1.32, the dimensions the graph leaves unknown named (valueshapes.py);
# 8: verification inputs: what a convolution slides over tried at 64 first (axiswalk.spatial_sizes);
# 9: weights stored narrow (int8, float16 a Cast widens) kept so in ONNX blobs (cook/narrow.py);
# verification inputs: free dims a per-feature constant broadcasts against sized by it (axiswalk),
# and free dims but a leading batch at 16 first (dims.SEQUENCE_DIM_SIZE); ids only a Gather reads,
# across its table (inputs.gathered_rows); 10: manifest signatures write sequence, map and optional
# types as onnxruntime names them (seq(map(int64,tensor(float))), not "Unknown type sequence_type");
# 11: an ONNX graph for an older onnxruntime drops the attributes the cook's onnxruntime wrote at
# their defaults on its own operators (defaults.py: MatMulNBits' weight_prepacked); 12: ONNX blobs
# without the CPU EP's float32 islands around fp16 nodes (precisioncasts.py), int8 variants gated on
# their int8 kernels too, and verification inputs: a recurrence's sequence_lens at its length, TopK's
# k >= 1, strings from OneHotEncoder/TfIdfVectorizer tables, sizes where every output is empty or a
# strided frontend leaves one step tried last; 13: initializers an IR>=4 source lists as graph inputs
# made constants (overridable_initializers: drop)
RECIPE = 13
BUNDLE_FORMAT = f"blob{BLOB_FORMAT_VERSION}-manifest{MANIFEST_VERSION}-recipe{RECIPE}"
ONNXRUNTIME_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-directml", "onnxruntime-gpu")


@cache
def tool_versions() -> Mapping[str, str]:
    """Versions of the libraries that shape a cooked model."""
    return {"onnx": _version(("onnx",)), "onnxruntime": _version(ONNXRUNTIME_DISTRIBUTIONS)}


def _version(distributions: Iterable[str]) -> str:
    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def task_key(settings: Mapping[str, Any], model: str) -> str:
    """The part of the key doit compares at load time (``config_changed``): the model's name (its
    blob's header holds it: two models of the same bytes and file name in two folders, or a model
    moved into a folder on one branch, would share a key and refuse each other's cache entry),
    settings and versions.

    Source bytes are tracked by doit's ``file_dep`` instead, so loading tasks never hashes models.
    """
    return canonical_json(
        {"bundle_format": BUNDLE_FORMAT, "model": model, "settings": settings, "tools": tool_versions()}
    )


def cook_key(task_key_text: str, sources: Mapping[str, str]) -> str:
    """The full key recorded in blob and manifest: the task key plus the sha256 of every source file."""
    return hashlib.sha256(canonical_json({"task": task_key_text, "sources": sources}).encode()).hexdigest()


def recipe_of(task_key_text: str, sources: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The key of a cook without the versions of the tools that make it, and those versions: two
    machines whose cook keys differ only because they installed other onnx or onnxruntime releases
    share a recipe (the cook cache says so on a miss; constraints.txt makes them share keys)."""
    task = json.loads(task_key_text)
    tools = task.pop("tools", {})
    digest = hashlib.sha256(canonical_json({"task": task, "sources": dict(sources)}).encode()).hexdigest()
    return digest, tools
