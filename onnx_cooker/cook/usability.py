"""How much of a model NNAPI or CoreML would take: onnxruntime's mobile usability checker, per EP.

The checker estimates partitions from operator support lists shipped with onnxruntime; the
result goes into the manifest and the end-of-cook summary so teams know before they ship.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import onnx.shape_inference
from onnxruntime.tools import onnx_model_utils
from onnxruntime.tools.mobile_helpers import usability_checker

from onnx_cooker.settings.resolve import CookSettings, ep_usability_check

PartitionCheck = Callable[[onnx.ModelProto, bool], Any]
CHECKS: dict[str, PartitionCheck] = {
    "nnapi": usability_checker.check_nnapi_partitions,
    # MLProgram is the CoreML format onnxruntime uses by default on current iOS.
    "coreml": lambda model, fixed: usability_checker.check_coreml_partitions(
        model, fixed, "coreml_supported_mlprogram_ops.md"
    ),
}
_QUIET = logging.getLogger("onnx_cooker.cook.usability.checker")
_QUIET.setLevel(logging.ERROR)


def _summary(info: Any) -> dict[str, Any]:
    return {
        "nodes": info.num_nodes,
        "supported_nodes": info.num_supported_nodes,
        "supported_share": round(info.num_supported_nodes / info.num_nodes, 4) if info.num_nodes else 0.0,
        "partitions": info.num_partitions,
        # suitability() divides by the node count; optimization can fold a model to no node at all.
        "verdict": info.suitability().name.lower() if info.num_nodes else "yes",
        "unsupported_ops": sorted(info.unsupported_ops),
    }


def usability(model: onnx.ModelProto, settings: CookSettings, work_dir: Path | None = None) -> dict[str, Any]:
    """Per EP of the platform that has a usability check: node share, partitions, verdicts.

    ``verdict`` is for the model as cooked; ``verdict_if_shapes_fixed`` says what fixing the dynamic
    inputs (``fixed_dims`` / ``fixed_shapes``) would give, so a blocked model says how to unblock it.
    """
    checks = {ep: check for ep in settings.execution_providers if (check := ep_usability_check(ep))}
    if not checks:
        return {}
    try:
        return _usability(model, checks, work_dir)
    except Exception as exc:  # advisory: onnxruntime's checker fails on valid models
        # Seen on the ONNX backend suite: Transpose without `perm` (IndexError), no value_info after
        # shape inference (ValueError), onnx's strict shape inference (InferenceError).
        return {ep: _unknown(f"{type(exc).__name__}: {exc}") for ep in checks}


def _unknown(error: str) -> dict[str, Any]:
    return {
        "nodes": 0,
        "supported_nodes": 0,
        "supported_share": 0.0,
        "partitions": 0,
        "verdict": "unknown",
        "unsupported_ops": [],
        "dynamic_inputs": [],
        "verdict_if_shapes_fixed": "unknown",
        "error": f"onnxruntime's usability checker failed: {error}",
    }


def _usability(model: onnx.ModelProto, checks: dict[str, str], work_dir: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=".usability-", dir=work_dir) as tmp:
        source, optimized = Path(tmp) / "model.onnx", Path(tmp) / "model.basic.onnx"
        onnx.save_model(model, source)
        # As the checker's own analyze_model: basic optimizations first, as the cook applies them.
        onnx_model_utils.optimize_model(source, optimized)
        shaped = _with_shapes(optimized, Path(tmp) / "model.shaped.onnx")
    dynamic_inputs, _ = usability_checker.check_shapes(shaped.graph, _QUIET)
    report = {}
    for ep, check_name in checks.items():
        check = CHECKS[check_name]
        result = _summary(check(shaped, True))
        result["dynamic_inputs"] = [value.name for value in dynamic_inputs]
        result["verdict_if_shapes_fixed"] = (
            _summary(check(shaped, False))["verdict"] if dynamic_inputs else result["verdict"]
        )
        report[ep] = result
    return report


def _with_shapes(path: Path, scratch: Path) -> onnx.ModelProto:
    """onnxruntime's ``ModelProtoWithShapeInfo`` without its ``__del__``, which prints an ignored
    AttributeError into the cook's output whenever strict shape inference fails (a sparse
    initializer): the same strict inference, and the same fallback through a file for models over
    2 GB (where ``infer_shapes`` returns an empty graph)."""
    model = onnx.load(str(path))
    shaped = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    if len(model.graph.node) > 0 and len(shaped.graph.node) == 0:
        onnx.shape_inference.infer_shapes_path(str(path), str(scratch), strict_mode=True)
        shaped = onnx.load(str(scratch))
    return shaped
