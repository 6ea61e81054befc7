"""The precision variant of a model (fp16, int8, int4: ``pipeline.cook.precision``) and its accuracy
gate against the fp32 source, on the verification inputs."""

from __future__ import annotations

from typing import Any

import onnx

from pipeline.cook.feeds import cannot_run, feeds_for, refuse_meaningless, source_reference
from pipeline.cook.inputs import as_input_types
from pipeline.cook.job import CookJob
from pipeline.cook.precision import (
    DEFAULT_GATES,
    INT8_STATIC,
    gate,
    gate_error,
    load_calibration,
)
from pipeline.cook.precision import accuracy as precision_accuracy
from pipeline.cook.precision import convert as convert_precision
from pipeline.cook.source import SourceRead, sort_nodes
from pipeline.cook.verify import reference_outputs
from pipeline.settings.precision_options import resolved as resolved_options


def precision_variant(job: CookJob, model: onnx.ModelProto, read: SourceRead) -> tuple[onnx.ModelProto, dict]:
    """The model at the settings' precision (pipeline.cook.precision), and what made it."""
    settings, asset = job.settings, job.asset
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
