"""The cook of one (platform, model) as a pure function of the job: read the sources once, check
and normalize the model, make its precision variant, repair it for the target onnxruntime, cook
its form for the platform (optimize, guard, compress, verify: onnx_cooker/cook/variant.py), and describe
it for the manifest. Nothing is put in place here: ``onnx_cooker.build.run_job.cook`` runs a job (the
cache lookup, this cook on a miss, the upload, the commit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import onnx

from onnx_cooker.cook.budget import check_blob_budget
from onnx_cooker.cook.downgrade import downgrade, limits_of
from onnx_cooker.cook.facts import feed_inputs, fixed_size
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.key import cook_key, tool_versions
from onnx_cooker.cook.optimize import optimize
from onnx_cooker.cook.precision import (
    FP32,
)
from onnx_cooker.cook.precision_gate import accuracy_gate, precision_variant
from onnx_cooker.cook.randomness import refuse_training_dropout
from onnx_cooker.cook.shapes import fix_shapes
from onnx_cooker.cook.source import SourceRead, drop_initializer_inputs, load_source, read_sources
from onnx_cooker.cook.variant import cook_with_style_fallback
from onnx_cooker.fsutil import json_bytes
from onnx_cooker.layout import (
    blob_path,
)
from onnx_cooker.runtime.blob import decode_blob
from onnx_cooker.runtime.constants import OptimizationStyle
from onnx_cooker.runtime.header import BlobHeader, read_header
from onnx_cooker.steptimes import step

Stamps = Mapping[
    str, list[Any]
]  # source path -> [size, mtime_ns, ctime_ns, sha256] (onnx_cooker.build.stamps)


@dataclass(frozen=True)
class Sources:
    """A job's source files, read once (what is cooked is what is recorded), their sha256s by file
    name, and the cook key they give."""

    read: SourceRead
    digests: dict[str, str]
    key: str


@dataclass(frozen=True)
class Cooked:
    """What a cook made, not yet in place: its files by role (``blob``, ``entry``, ``verify``), their
    sha256s by role, the cook key, and the state of the sources it was cooked from."""

    key: str
    files: dict[str, bytes]
    digests: dict[str, str]
    stamps: Stamps


def overridable_repair(model: onnx.ModelProto, setting: str) -> list[dict[str, Any]]:
    """``overridable_initializers: drop``: the model's initializers listed as inputs made constants,
    as a ``fallbacks`` record (printed as one warning line), or nothing."""
    if setting != "drop" or not (dropped := drop_initializer_inputs(model)):
        return []
    names = ", ".join(dropped[:3]) + (f" and {len(dropped) - 3} more" if len(dropped) > 3 else "")
    why = (
        f"{len(dropped)} initializer(s) the source also lists as graph inputs ({names}) are constants of "
        "the cooked model: onnxruntime folds and fuses no initializer a caller may override; set "
        "overridable_initializers: keep in the model's .cook.yaml to keep them inputs"
    )
    return [
        {
            "used": {"overridable_initializers": 0},
            "instead_of": {"overridable_initializers": len(dropped)},
            "why": why,
        }
    ]


def read_job_sources(job: CookJob, known: Stamps | None = None) -> Sources:
    """Read and hash the job's sources once (``known``: digests the cache lookup just computed, reused
    for files still in the state they were computed in; onnx_cooker.cook.source.read_sources)."""
    with step("read and hash the sources"):
        read = read_sources(job.asset, known)
        digests = {path.name: read.sha256(path) for path in job.asset.source_files}
    return Sources(read=read, digests=digests, key=cook_key(job.task_key, digests))


def cook_sources(job: CookJob, sources: Sources) -> Cooked:
    """Cook the job's model from its ``sources``: the blob, its manifest entry and its verification
    data, as bytes. Raises a ``CookError`` naming what failed and the fix."""
    asset, read, key = job.asset, sources.read, sources.key
    sources_digests = sources.digests
    with step("load, check and normalize"):
        model = load_source(asset, read)
        read.release([asset.path, *asset.external_data])  # parsed: the bytes are not needed again
        fix_shapes(model, job.settings)
        constants = overridable_repair(model, job.settings.overridable_initializers)
        if job.settings.verify:  # random outputs: nothing below could verify them
            refuse_training_dropout(job, model)
    source_model, precision = model, {"precision": job.settings.precision}
    if job.settings.precision != FP32:
        with step("precision variant"):
            model, precision = precision_variant(job, model, read)
    if job.settings.precision != FP32:  # before cooking: a variant that fails the gate costs no cook
        with step("accuracy gate"):
            precision["accuracy"] = accuracy_gate(job, source_model, model, read, precision)
    asked_runtime = job.settings.optimization_style == OptimizationStyle.RUNTIME
    reference = model  # what the cooked blob must compute, whatever the repairs below change
    with step("downgrade"):
        model, repairs = downgrade(
            model,
            limits_of(job.settings.runtime_version),
            mode=job.settings.downgrade,
            where=str(asset.settings_path or asset.path.with_suffix(".cook.yaml")),
        )
    # a precision variant is verified on inputs sized as its fp32 source runs them (a quantized
    # weight read through DequantizeLinear pins no size the variant shows)
    sized_by = source_model if source_model is not reference else None
    variant = cook_with_style_fallback(job, model, read, key, reference, sized_by)
    if repairs or constants:
        variant = replace(variant, fallbacks=[*constants, *repairs, *variant.fallbacks])
    check_blob_budget(job, len(variant.blob), variant.weight_bytes)
    job, settings, blob = variant.job, variant.job.settings, variant.blob
    options = job.settings.to_dict()
    fallback = next((f for f in variant.fallbacks if "disabled_optimizers" in f), None)
    model_size, ort_version, min_runtime = variant.model_size, variant.ort_version, variant.min_runtime
    verification, verify_data = variant.verification, variant.verify_data
    applied = None
    fell_back = asked_runtime and settings.optimization_style != OptimizationStyle.RUNTIME
    if settings.reduced_build and fell_back and variant.cooked is not None:
        applied = variant.cooked  # fell back to the fixed style: the blob's model is the applied one
    elif settings.reduced_build and settings.optimization_style == OptimizationStyle.RUNTIME:
        with step("applied variant (reduced build)"):
            applied = optimize(
                model,
                settings,
                work_dir=job.platform_dir,
                saved="apply",
                also_disabled=tuple(fallback["disabled_optimizers"]) if fallback else (),
            )
    from onnx_cooker.cook.opconfig import (
        model_operators,  # onnxruntime.tools: only cooks that need them import it
    )
    from onnx_cooker.cook.usability import usability

    with step("EP usability report"):
        report = usability(model, settings, work_dir=job.platform_dir)
    operators = None
    if settings.reduced_build:  # this model's share of the platform's reduced-build config
        with step("operator lists"):
            cooked = variant.cooked if variant.cooked is not None else decode_blob(blob)[1]
            operators = model_operators([cooked] if applied is None else [cooked, applied])
    header, _ = read_header(blob)
    entry = {
        "name": asset.name,
        "format": settings.format,
        "file": blob_path(job.platform_dir, asset.name, settings.format)
        .relative_to(job.platform_dir)
        .as_posix(),
        "source_size": sum(
            read.size(path)
            for path in asset.source_files
            if path not in (asset.inputs_path, asset.calib_path)
        ),
        "model_size": model_size,
        "blob_size": len(blob),
        "padding": sum(frame.pad for frame in header.frames),  # zeros before aligned raw extents
        "weights": _weights_entry(header),
        "fallbacks": variant.fallbacks,
        "precision": precision,
        "weight_bytes": variant.weight_bytes,
        "source_sha256": sources_digests[asset.path.name],
        "sources": sources_digests,
        "model_sha256": header.model_sha256,
        "blob_sha256": _sha256(blob),
        "cook_key": key,
        "inputs": io_signature(feed_inputs(model.graph)),
        "outputs": io_signature(model.graph.output),
        "execution_providers": list(settings.execution_providers),
        "provider_options": options["provider_options"],
        "ep_session_options": options["ep_session_options"],
        "saved_runtime_optimizations": settings.optimization_style == OptimizationStyle.RUNTIME,
        "ort_format_version": ort_version,
        "min_runtime_version": min_runtime,
        "cooked_with": dict(tool_versions()),
        "settings": options,
        "verification": verification,
        "usability": report,
    }
    if variant.narrow_weights is not None:
        entry["narrow_weights"] = variant.narrow_weights
    if operators is not None:
        entry["operators"] = operators
    files = {"blob": blob, "entry": json_bytes(entry)}
    if verify_data is not None:
        files["verify"] = verify_data
    # each file hashed once, for the cache index and the up-to-date records
    digests = {role: _sha256(data) for role, data in files.items() if role != "blob"}
    digests["blob"] = entry["blob_sha256"]
    return Cooked(key=key, files=files, digests=digests, stamps=read.stamps)


def io_signature(values: Any) -> list[dict[str, Any]]:
    def dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
        shape = value.type.tensor_type.shape
        return [size if (size := fixed_size(d)) is not None else (d.dim_param or None) for d in shape.dim]

    return [
        {
            "name": value.name,
            "type": type_string(value.type),
            "shape": dims(value) if value.type.HasField("tensor_type") else None,
        }
        for value in values
    ]


def type_string(kind: onnx.TypeProto) -> str:
    """An ONNX type as onnxruntime writes it (``NodeArg.type``): ``tensor(float)``,
    ``seq(map(int64,tensor(float)))`` (a classifier's ZipMap), ``optional(tensor(float))``."""
    which = kind.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        element = onnx.TensorProto.DataType.Name(getattr(kind, which).elem_type).lower()
        return f"{'tensor' if which == 'tensor_type' else 'sparse_tensor'}({element})"
    if which == "sequence_type":
        return f"seq({type_string(kind.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({type_string(kind.optional_type.elem_type)})"
    if which == "map_type":
        key = onnx.TensorProto.DataType.Name(kind.map_type.key_type).lower()
        return f"map({key},{type_string(kind.map_type.value_type)})"
    return onnx.helper.printable_type(kind)  # an opaque type, or none


def _weights_entry(header: BlobHeader) -> dict[str, Any] | None:
    """How the blob stores its weights section, for the manifest (None: the weights are in the graph)."""
    if header.weights is None:
        return None
    codecs = {frame.codec for frame in header.frames if frame.section == "weights"}
    return {
        "file": header.weights.file,
        "bytes": header.weights.size,
        "tensors": len(header.weights.tensors),
        "stored": "raw" if codecs == {"raw"} else "zstd",
    }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
