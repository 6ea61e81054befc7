"""Precision variants (fp16, int8) made with onnxruntime's own converters, and the accuracy gate.

A platform or model asks for ``precision: fp16 | int8-dynamic | int8-static`` (default ``fp32``: the
source as it is). The variant is made from the checked source before optimizing, then cooked like
any model; the gate compares the variant with the fp32 source on the verification inputs and fails
the cook, with the numbers and a hint, when it drifts past the precision's limits.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.version_converter

from onnx_cooker.cook.facts import default_opset
from onnx_cooker.errors import ModelError, VerifyError
from onnx_cooker.runtime.constants import Precision
from onnx_cooker.settings.precision_options import resolved as resolved_options
from onnx_cooker.settings.resolve import CookSettings

FP32, FP16, INT8_DYNAMIC, INT8_STATIC = (p.value for p in Precision)
INT8_PRECISIONS = frozenset({INT8_DYNAMIC, INT8_STATIC})
PRECISIONS = tuple(p.value for p in Precision)
# Per-channel QuantizeLinear/DequantizeLinear (an axis attribute) exist since opset 13.
QDQ_MIN_OPSET = 13

# The gate's limits when a model sets none: per output, the smallest cosine similarity with the fp32
# source's output and, for class scores (rank 2, more than one class), the smallest share of rows
# whose top-1 class is the source's.
DEFAULT_GATES: Mapping[str, Mapping[str, float]] = {
    FP16: {"min_cosine": 0.999, "min_top1": 0.99},
    INT8_DYNAMIC: {"min_cosine": 0.98, "min_top1": 0.9},
    INT8_STATIC: {"min_cosine": 0.98, "min_top1": 0.9},
}
# The cook's own verification (the cooked blob against the variant it was cooked from, step 6) at no
# tighter than these (rtol, atol): fused fp16 or int8 kernels round differently from the unfused
# variant by far more than fp32 kernels do. A model may loosen them further with rtol/atol.
VERIFY_TOLERANCES: Mapping[str, tuple[float, float]] = {
    FP16: (1e-2, 2e-2),
    INT8_DYNAMIC: (5e-2, 0.15),
    INT8_STATIC: (5e-2, 0.15),
}
# int8: besides the floors above, each output's atol is at least this share of its largest magnitude
# (onnx_cooker.cook.compare): quantization error scales with an output's range, not with a fixed number.
VERIFY_ATOL_OF_RANGE: Mapping[str, float] = {INT8_DYNAMIC: 0.05, INT8_STATIC: 0.05}
# fp16: onnxruntime's converter keeps these in fp32 by default (its own list, plus ops whose fp16
# kernels lose too much on CPU); a model adds more with precision_keep_ops.
FP16_KEEP_DEFAULT = ("Resize", "Range", "RandomNormalLike", "RandomUniformLike")


def convert(
    model: onnx.ModelProto,
    precision: str,
    *,
    keep_ops: tuple[str, ...],
    calibration: list[dict[str, np.ndarray]] | None,
    calibration_origin: str,
    work_dir: Path | None,
    options: Mapping[str, Any] | None = None,
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """The variant of ``model`` at ``precision`` and what made it (for the manifest). ``options``:
    the converter options (``onnx_cooker.settings.precision_options``; default: that precision's defaults)."""
    chosen = options if options is not None else resolved_options(precision, {})
    if precision == FP16:
        return _fp16(model, keep_ops, chosen)
    if precision in (INT8_DYNAMIC, INT8_STATIC):
        return _int8(model, precision, keep_ops, calibration or [], calibration_origin, work_dir, chosen)
    raise ModelError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")


def _fp16(
    model: onnx.ModelProto, keep_ops: tuple[str, ...], options: Mapping[str, Any]
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    block = sorted({*DEFAULT_OP_BLOCK_LIST, *FP16_KEEP_DEFAULT, *keep_ops})
    keep_io_types = bool(options["keep_io_types"])
    try:
        half = convert_float_to_float16(model, keep_io_types=keep_io_types, op_block_list=block)
    except Exception as exc:  # the converter raises whatever its graph walk meets
        raise ModelError(f"onnxruntime's float16 converter failed: {exc}") from None
    record = {
        "precision": FP16,
        "converter": "onnxruntime.transformers.float16.convert_float_to_float16",
        "options": {"keep_io_types": keep_io_types, "op_block_list": block},
    }
    return half, record


def _int8(
    model: onnx.ModelProto,
    precision: str,
    keep_ops: tuple[str, ...],
    calibration: list[dict[str, np.ndarray]],
    calibration_origin: str,
    work_dir: Path | None,
    chosen: Mapping[str, Any],
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    from onnxruntime.quantization import quantize_dynamic

    raised = default_opset(model) < QDQ_MIN_OPSET
    if raised:  # the quantizers raise older models only to opset 11, too old for per-channel QDQ
        model = _converted(model, QDQ_MIN_OPSET)
    excluded = [node.name for node in model.graph.node if node.op_type in keep_ops and node.name]
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix=".quantize-", dir=work_dir) as tmp,
        _without_preprocessing_advice(),
    ):
        source, target = Path(tmp) / "source.onnx", Path(tmp) / "int8.onnx"
        named = _named_nodes(model)
        onnx.save(named, source)
        try:
            options: dict[str, Any] = {**chosen, "nodes_to_exclude": excluded}
            if precision == INT8_DYNAMIC:
                quantize_dynamic(
                    str(source),
                    str(target),
                    per_channel=chosen["per_channel"],
                    reduce_range=chosen["reduce_range"],
                    weight_type=_quant_type(chosen["weight_type"]),
                    nodes_to_exclude=excluded,
                )
                converter = "onnxruntime.quantization.quantize_dynamic"
            else:
                options.update(
                    quant_format="QDQ", calibration=calibration_origin, calibration_batches=len(calibration)
                )
                quantize_qdq(source, target, calibration, nodes_to_exclude=excluded, **chosen)
                converter = "onnxruntime.quantization.quantize_static"
        except Exception as exc:
            raise ModelError(f"onnxruntime's quantizer ({precision}) failed: {exc}") from None
        quantized = onnx.load(target)
    if raised:
        options["opset_raised_to"] = QDQ_MIN_OPSET
    return quantized, {"precision": precision, "converter": converter, "options": options}


@contextlib.contextmanager
def _without_preprocessing_advice() -> Iterator[None]:
    """onnxruntime's quantizers log on the root logger, once per model and platform: "Please consider
    to run pre-processing before quantization" (the cook optimizes the model itself), and a line per
    weight they leave in float ("Axis 1 is out-of-range for weight ... with rank 1", "Expected bias
    ... to be an initializer": a ViT's LayerNorms, thirty lines a cook). The accuracy gate judges
    the result, so their warnings are noise in the cook's output; their errors pass."""

    def advice(record: logging.LogRecord) -> bool:
        quantizer = f"onnxruntime{os.sep}quantization{os.sep}" in record.pathname
        noise = quantizer and record.levelno < logging.ERROR
        return not (noise or str(record.msg).startswith("Please consider"))

    root = logging.getLogger()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def _converted(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    try:
        return onnx.version_converter.convert_version(model, opset)
    except Exception as exc:  # the converter raises RuntimeError/ValidationError per unsupported op
        raise ModelError(
            f"int8 quantization needs opset {opset} or newer (the model has {default_opset(model)}) and "
            f"onnx's version converter cannot raise it: {str(exc).splitlines()[0]}; re-export the model "
            f"at opset >= {opset}"
        ) from None


def _quant_type(name: str) -> Any:
    from onnxruntime.quantization import QuantType

    return {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[name]


def quantize_qdq(
    source: Path,
    target: Path,
    batches: list[dict[str, np.ndarray]],
    *,
    per_channel: bool,
    nodes_to_exclude: list[str] | None = None,
    reduce_range: bool = False,
    activation_type: str = "uint8",
    weight_type: str = "int8",
    activation_symmetric: bool = False,
    weight_symmetric: bool = True,
    calibrate_method: str = "minmax",
) -> None:
    """onnxruntime's ``quantize_static`` to QDQ (by default QUInt8 activations, symmetric QInt8
    weights, MinMax calibration), calibrated on ``batches`` (input name -> array, one dict per
    batch)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        quantize_static,
    )

    methods = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }

    remaining = iter(batches)

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict | None:
            return next(remaining, None)

    quantize_static(
        str(source),
        str(target),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=_quant_type(activation_type),
        weight_type=_quant_type(weight_type),
        per_channel=per_channel,
        reduce_range=reduce_range,
        nodes_to_exclude=nodes_to_exclude or [],
        calibrate_method=methods[calibrate_method],
        extra_options={"ActivationSymmetric": activation_symmetric, "WeightSymmetric": weight_symmetric},
    )


def _named_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose nodes all have names (the quantizers' exclusion lists go by node name)."""
    named = onnx.ModelProto()
    named.CopyFrom(model)
    for index, node in enumerate(named.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
    return named


def load_calibration(path: Path, data: bytes) -> list[dict[str, np.ndarray]]:
    """``<stem>.calib.npz``: arrays named ``<input>`` (one batch) or ``<input>/<k>`` (batch k)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise ModelError(f"{path} is not a readable .npz of calibration inputs ({exc})") from None
    batches: dict[str, dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        name, _, batch = key.partition("/")
        batches.setdefault(batch or "0", {})[name] = value
    return [batches[key] for key in sorted(batches, key=lambda k: (len(k), k))]


def accuracy(source: Mapping[str, np.ndarray], variant: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """Per output: max abs/rel error, cosine similarity and, for class scores, top-1 agreement."""
    rows = []
    for name, want in source.items():
        want, got = _as_scores(want), _as_scores(variant[name])
        row: dict[str, Any] = {"name": name}
        if want.dtype.kind not in "fc" or want.shape != got.shape:
            row.update(max_abs=0.0 if np.array_equal(want, got) else math.inf, cosine=None, top1=None)
            rows.append(row)
            continue
        a, b = want.astype(np.float64).ravel(), got.astype(np.float64).ravel()
        finite = np.isfinite(a)  # compared where the source is finite; the variant must be there too
        if not np.isfinite(b[finite]).all():
            row.update(max_abs=math.inf, max_rel=math.inf, cosine=None, top1=None, overflow=True)
            rows.append(row)
            continue
        a, b = a[finite], b[finite]
        diff = np.abs(a - b)
        row["max_abs"] = float(diff.max()) if diff.size else 0.0
        row["max_rel"] = float((diff / np.maximum(np.abs(a), 1e-12)).max()) if diff.size else 0.0
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        row["cosine"] = float(a @ b / norms) if norms > 0 else (1.0 if np.array_equal(a, b) else 0.0)
        row["top1"] = _top1(want, got) if want.ndim == 2 and want.shape[1] > 1 else None
        rows.append(row)
    return rows


def _as_scores(value: Any) -> np.ndarray:
    """An output as an array; a classifier's ZipMap output (a list of {class: score} maps with the
    same classes) as its scores, one row per map, so that it is compared as numbers (it differed
    whenever a score was rounded)."""
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        keys = list(value[0])
        if all(list(item) == keys for item in value):
            return np.array([[item[key] for key in keys] for item in value], dtype=np.float64)
    return np.asarray(value)


# Source scores closer than this share of a row's largest magnitude are a tie to any lower precision
# (fp16 rounds at 2**-10 of a value: the finest step a variant keeps)
TIE = 2.0**-10


def _top1(want: np.ndarray, got: np.ndarray) -> float:
    """The share of rows whose top class the variant keeps; a row where it picks another class the
    source scores within TIE of its top one counts as kept (a tie: all-equal scores, which argmax
    breaks by rounding, read as 0% agreement before)."""
    w, g = want.astype(np.float64), got.astype(np.float64)
    rows = np.arange(w.shape[0])
    top_w, top_g = w.argmax(axis=1), g.argmax(axis=1)
    margin = w[rows, top_w] - w[rows, top_g]
    return float(np.mean((top_w == top_g) | (margin <= TIE * np.abs(w).max(axis=1))))


def gate(rows: list[dict[str, Any]], precision: str, limits: Mapping[str, float]) -> list[str]:
    """What fails the gate, one phrase per output (empty: passed)."""
    failures = []
    for row in rows:
        if row.get("overflow"):
            failures.append(f"{row['name']}: the variant gives inf/NaN (overflow) where the source is finite")
            continue
        if row.get("cosine") is None and row["max_abs"] != 0.0:
            failures.append(f"{row['name']}: differs (not a float output of the same shape)")
            continue
        if row.get("cosine") is not None and not row["cosine"] >= limits["min_cosine"]:
            failures.append(f"{row['name']}: cosine {row['cosine']:.9f} < {limits['min_cosine']}")
        if row.get("top1") is not None and not row["top1"] >= limits["min_top1"]:
            failures.append(f"{row['name']}: top-1 agreement {row['top1']:.1%} < {limits['min_top1']:.0%}")
    return failures


def gate_error(
    precision: str, failures: list[str], rows: list[dict[str, Any]], calibration: str
) -> VerifyError:
    worst = max((r["max_abs"] for r in rows), default=0.0)
    hint = {
        FP16: "keep the failing ops in fp32 (`precision_keep_ops`), or use fp32",
        INT8_DYNAMIC: "keep sensitive ops in fp32 (`precision_keep_ops`), try int8-static with "
        "calibration data, or use fp16",
        INT8_STATIC: "calibrate on real inputs (`<model>.calib.npz`, calibrated now on "
        f"{calibration}), keep sensitive ops in fp32 (`precision_keep_ops`), or use fp16",
    }[precision]
    return VerifyError(
        f"the {precision} variant fails the accuracy gate against the fp32 source: {'; '.join(failures)} "
        f"(max abs error {worst:.3g}); {hint}, or loosen `precision_min_cosine`/`precision_min_top1`"
    )


def verify_tolerances(settings: CookSettings) -> CookSettings:
    """``settings`` with rtol/atol raised to the precision's floor (fp32: unchanged)."""
    floor = VERIFY_TOLERANCES.get(settings.precision)
    if floor is None:
        return settings
    return replace(settings, rtol=max(settings.rtol, floor[0]), atol=max(settings.atol, floor[1]))
