"""The precision variant of a model (fp16, int8, int4: ``onnx_cooker.cook.precision``) and its accuracy
gate against the fp32 source, on the verification inputs."""

from __future__ import annotations

from typing import Any

import onnx

from onnx_cooker.cook.facts import onnx_graphs
from onnx_cooker.cook.feeds import cannot_run, feeds_for, refuse_meaningless, source_reference
from onnx_cooker.cook.inputs import as_input_types
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.precision import (
    DEFAULT_GATES,
    INT8_PRECISIONS,
    INT8_STATIC,
    gate,
    gate_error,
    load_calibration,
)
from onnx_cooker.cook.precision import accuracy as precision_accuracy
from onnx_cooker.cook.precision import convert as convert_precision
from onnx_cooker.cook.source import SourceRead, sort_nodes
from onnx_cooker.cook.verify import reference_outputs
from onnx_cooker.errors import ModelError
from onnx_cooker.isolate import Crash, run_isolated
from onnx_cooker.layout import reference_memo_dir
from onnx_cooker.settings.precision_options import resolved as resolved_options


def precision_variant(job: CookJob, model: onnx.ModelProto, read: SourceRead) -> tuple[onnx.ModelProto, dict]:
    """The model at the settings' precision (onnx_cooker.cook.precision), and what made it."""
    settings, asset = job.settings, job.asset
    refuse_unconvertible(job, model)
    calibration, origin = None, ""
    if settings.precision == INT8_STATIC:
        if asset.calib_path is not None:
            calibration = load_calibration(asset.calib_path, read.data[asset.calib_path])
            origin = asset.calib_path.name
        else:  # no real inputs: the verification inputs, and the manifest says so
            inputs = feeds_for(job, model, read)
            calibration = [inputs.feeds]
            origin = f"the verification inputs ({inputs.origin}); no {asset.name}.calib.npz"
    variant, record = convert_precision(
        model,
        settings.precision,
        keep_ops=settings.precision_keep_ops,
        options=resolved_options(settings.precision, settings.to_dict()["precision_options"]),
        calibration=calibration,
        calibration_origin=origin,
        work_dir=job.platform_dir,
    )
    # onnxruntime's fp16 converter writes its input Casts last: in order again, as the source was,
    # so that the verification reads the variant's dimensions as it read the source's (the sizes a
    # weight pins, a convolution's height and width) and runs it on the same inputs
    sort_nodes(variant.graph)
    return variant, record


# Operators of a model quantized already (QDQ, QOperator, dynamic, 4-bit): a precision applied
# over them quantizes twice or rounds their scales to fp16, and the converted model fails
_QUANTIZED = {
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
    "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits", "QAttention", "QGemm",
    "DynamicQuantizeLSTM", "GatherBlockQuantized",
}  # fmt: skip
# Classic machine-learning operators (scikit-learn's, through skl2onnx): no converter handles them
_ML_MODELS = {
    "TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble", "SVMClassifier", "SVMRegressor",
    "LinearClassifier", "LinearRegressor",
}  # fmt: skip
_HALF = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def refuse_unconvertible(job: CookJob, model: onnx.ModelProto) -> None:
    """A source a platform-wide ``precision`` cannot convert is refused with the fix (precision:
    fp32 for that model: it then ships as it is), not left to fail in the converter, the accuracy
    gate or the verification with a message about sample inputs."""
    nodes = [node for graph in onnx_graphs(model.graph) for node in graph.node]
    ops = {node.op_type for node in nodes}
    quantized = sorted(op for op in ops if op in _QUANTIZED or op.startswith("QLinear"))
    ml = sorted(ops & _ML_MODELS)
    half = any(t.data_type in _HALF for g in onnx_graphs(model.graph) for t in g.initializer) or any(
        v.type.tensor_type.elem_type in _HALF for v in (*model.graph.input, *model.graph.output)
    )
    if quantized:
        what = f"quantized already ({', '.join(quantized[:4])}): converting it again breaks it"
    elif ml:
        what = f"a classic machine-learning model ({', '.join(ml)}), which the converters do not handle"
    elif half:
        what = "in 16-bit floats already (float16/bfloat16 weights or inputs): converting it again breaks it"
    else:
        return
    precision = job.settings.precision
    where = job.asset.settings_path or job.asset.path.with_suffix(".cook.yaml")
    raise ModelError(
        f"precision {precision} cannot be applied: the source is {what}. Add `precision: fp32` to "
        f"{where} (for this model only; it then ships as it is), or give the cook the fp32 model"
    )


def accuracy_gate(
    job: CookJob, source: onnx.ModelProto, variant: onnx.ModelProto, read: SourceRead, record: dict
) -> dict[str, Any]:
    """The variant against the fp32 source on the verification inputs; fails the cook past the gate."""
    settings = job.settings
    inputs = feeds_for(job, source, read)
    feeds, origin = inputs.feeds, inputs.origin
    refuse_meaningless(feeds, origin)
    try:
        want = source_reference(job, source, inputs)
        got = reference_outputs(variant, as_input_types(variant, feeds), job.platform_dir)
    except Exception as exc:  # onnxruntime errors on either model
        what = f"the source or its {settings.precision} variant"
        raise cannot_run(job, what, exc, inputs) from None
    rows = precision_accuracy(want, got)
    if settings.precision in INT8_PRECISIONS and (kernels := _as_int8_kernels(job, variant, feeds)):
        rows = _worse(rows, precision_accuracy(want, kernels))
    defaults = DEFAULT_GATES[settings.precision]
    limits = {
        "min_cosine": settings.precision_min_cosine or defaults["min_cosine"],
        "min_top1": settings.precision_min_top1 or defaults["min_top1"],
    }
    failures = gate(rows, settings.precision, limits)
    if failures:
        calibration = record.get("options", {}).get("calibration", "")
        raise gate_error(settings.precision, failures, rows, calibration)
    return {"inputs": origin, "limits": limits, "outputs": rows}


def _as_int8_kernels(job: CookJob, variant: onnx.ModelProto, feeds: dict[str, Any]) -> dict[str, Any] | None:
    """The int8 variant's outputs at onnxruntime's default level, where its QDQ pairs run as int8
    kernels: what an ONNX platform's session computes (with optimizations off they run as float
    maths; OpenVINO's EP computes those). Remembered for the verification's run of the same; in a
    child of its own (a level-3 optimizer may crash); None where that run fails."""

    def run() -> dict[str, Any]:
        memo, typed = reference_memo_dir(job.platform_dir.parent), as_input_types(variant, feeds)
        return reference_outputs(variant, typed, job.platform_dir, memo, optimized=True)

    try:
        found = run_isolated(run)
    except Exception:  # an optimizer of the default level fails on it: the verification says more
        return None
    return None if isinstance(found, Crash) else found


def _worse(float_rows: list[dict[str, Any]], kernel_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per output, the further of the two computations from the source (by cosine, then max abs
    error), named in ``computed_as``: the gate holds whichever a game's session runs."""
    rows = []
    for floats, kernels in zip(float_rows, kernel_rows, strict=True):
        if floats["cosine"] is not None and kernels["cosine"] is not None:
            kernels_worse = (kernels["cosine"], -kernels["max_abs"]) < (floats["cosine"], -floats["max_abs"])
        else:
            kernels_worse = kernels["max_abs"] > floats["max_abs"]
        worse = kernels if kernels_worse else floats
        rows.append({**worse, "computed_as": "int8 kernels" if kernels_worse else "float maths"})
    return rows
