"""The cook of one (platform, model): check, optimize, guard, compress, verify, write.

Works without doit; ``pipeline.build.tasks`` wraps it in doit actions.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import onnx

from pipeline.build.manifest import measured_variants, shrink_hint
from pipeline.build.outputs import commit, lookup, paths, staged_files
from pipeline.build.outputs import cook as cook  # the entry point: looks the cache up, then cook_source
from pipeline.cook.downgrade import downgrade, limits_of
from pipeline.cook.facts import feed_inputs, onnx_facts, ort_facts
from pipeline.cook.guard import guard
from pipeline.cook.job import CookJob
from pipeline.cook.key import cook_key, tool_versions
from pipeline.cook.large import is_large, tensor_bytes
from pipeline.cook.optimize import optimize, optimize_large
from pipeline.cook.precision import (
    DEFAULT_GATES,
    FP32,
    INT8_STATIC,
    VERIFY_ATOL_OF_RANGE,
    gate,
    gate_error,
    load_calibration,
    verify_tolerances,
)
from pipeline.cook.precision import accuracy as precision_accuracy
from pipeline.cook.precision import convert as convert_precision
from pipeline.cook.shapes import fix_shapes
from pipeline.cook.source import SourceRead, load_source, read_sources
from pipeline.cook.verify import (
    as_input_types,
    load_inputs,
    reference_outputs,
    rounding_noise,
    synthesize_inputs,
    verify,
)
from pipeline.cook.weights import externalize, wants_external
from pipeline.errors import CookError, ModelError, VerifyError
from pipeline.farm.cache import CookCache
from pipeline.fsutil import json_bytes
from pipeline.layout import (
    reference_memo_dir,
)
from pipeline.runtime.blob import BlobHeader, decode_blob, read_header
from pipeline.runtime.compat import ort_format_version
from pipeline.runtime.constants import ModelFormat, OptimizationStyle
from pipeline.runtime.writer import Weights, encode_blob
from pipeline.settings.precision_options import resolved as resolved_options
from pipeline.settings.resolve import CookSettings, ep_domains
from pipeline.steptimes import step


def io_signature(values: Any) -> list[dict[str, Any]]:
    def dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
        shape = value.type.tensor_type.shape
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in shape.dim]

    return [
        {
            "name": value.name,
            "type": onnx.helper.printable_type(value.type)
            if not value.type.HasField("tensor_type")
            else f"tensor({onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type).lower()})",
            "shape": dims(value) if value.type.HasField("tensor_type") else None,
        }
        for value in values
    ]


def _feeds(job: CookJob, model: onnx.ModelProto, read: SourceRead) -> tuple[dict, str]:
    asset = job.asset
    if asset.inputs_path is not None:
        feeds = load_inputs(asset.inputs_path, model, read.data[asset.inputs_path])
        return as_input_types(model, feeds), asset.inputs_path.name
    settings_hint = str(asset.settings_path or asset.path.with_suffix(".cook.yaml"))
    inputs_hint = str(asset.path.with_suffix(".inputs.npz"))
    dims = dict(job.settings.verify_dims)
    return synthesize_inputs(model, dims, settings_hint=settings_hint, inputs_hint=inputs_hint), "synthesized"


def _verification(
    job: CookJob, model: onnx.ModelProto, blob: bytes, read: SourceRead
) -> tuple[dict[str, Any], bytes | None]:
    """The verification report, and its inputs with the source's outputs (an .npz) for the runtime check."""
    settings = verify_tolerances(job.settings)
    if not settings.verify:
        return {"skipped": "verify is false in the settings"}, None
    with step("verify: the source's outputs"):
        feeds, origin = _feeds(job, model, read)
        _refuse_meaningless(feeds, origin)
        try:
            memo = reference_memo_dir(job.platform_dir.parent)
            reference = reference_outputs(model, feeds, job.platform_dir, memo)
        except Exception as exc:  # onnxruntime errors on the source itself
            raise ModelError(
                f"onnxruntime cannot run the source model on the verification inputs: {exc}"
            ) from None
        noise = _rounding_noise(model, feeds, reference, job) if settings.verify_scale else {}
    with step("verify: the cooked blob, through the loader"):
        results = verify(blob, reference, feeds, settings, noise)
    report = {
        "inputs": origin,
        "rtol": settings.rtol,
        "atol": settings.atol,
        "scale": settings.verify_scale,
        **({"atol_of_range": of_range} if (of_range := VERIFY_ATOL_OF_RANGE.get(settings.precision)) else {}),
        "outputs": [asdict(r) for r in results],
    }
    return report, _verify_data(feeds, reference)


def _rounding_noise(
    model: onnx.ModelProto, feeds: Mapping[str, Any], reference: Mapping[str, Any], job: CookJob
) -> dict[str, tuple[float, float]]:
    """How far onnxruntime's own default-level optimizations move the source's outputs on these
    inputs (pipeline.cook.verify.rounding_noise); none where that run fails (the fixed scale applies)."""
    try:
        optimized = reference_outputs(
            model, feeds, job.platform_dir, reference_memo_dir(job.platform_dir.parent), optimized=True
        )
    except Exception:  # an optimizer onnxruntime applies at its default level fails on this model
        return {}
    return rounding_noise(reference, optimized)


def _refuse_meaningless(feeds: Mapping[str, Any], origin: str) -> None:
    """Inputs that are all NaN make every output NaN, which compares equal: they verify nothing."""
    for name, value in feeds.items():
        if (
            isinstance(value, np.ndarray)
            and value.dtype.kind in "fc"
            and value.size
            and np.isnan(value).all()
        ):
            raise VerifyError(
                f"verification input {name!r} ({origin}) is all NaN, so the cooked model's outputs could not "
                "be compared with the source's; ship sample inputs with real values"
            )


def _verify_data(feeds: Mapping[str, Any], reference: Mapping[str, Any]) -> bytes:
    """Inputs and source outputs for the runtime check, as an .npz it reads without pickle.

    Strings are stored as fixed-width unicode. Sequences, optionals and maps have no such form: then
    only the inputs are stored, and the runtime check runs the model without comparing.
    """
    arrays = {f"input/{k}": v for k, v in feeds.items()}
    if all(isinstance(value, np.ndarray) for value in reference.values()):
        arrays |= {f"output/{k}": v for k, v in reference.items()}
    buffer = io.BytesIO()
    np.savez(
        buffer,
        **{key: value.astype(np.str_) if value.dtype == object else value for key, value in arrays.items()},
    )
    return buffer.getvalue()


@dataclass(frozen=True)
class _Variant:
    """One cooked form of the model: its blob and what the entry says of it."""

    job: CookJob  # with the settings this form was cooked with
    blob: bytes
    model_size: int
    ort_version: str | None
    min_runtime: str
    verification: dict[str, Any]
    verify_data: bytes | None
    fallbacks: list[dict[str, Any]]
    cooked: bytes | None  # the optimized model file, when it fits one protobuf or flatbuffer
    weight_bytes: int  # of the cooked model's initializers


def cook_source(
    job: CookJob,
    cache: CookCache | None,
    looked_up: str | None = None,
    known: Mapping[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """Cook one model for one platform from its sources (``pipeline.build.outputs.cook`` looked the cache
    up first, under ``looked_up``, with the sources' digests ``known``), store the result in
    ``cache`` and put it in place; the entry."""
    asset = job.asset
    with step("read and hash the sources"):
        read = read_sources(asset, known)  # each source read once: what is cooked is what is recorded
        sources = {path.name: read.sha256(path) for path in asset.source_files}
    key = cook_key(job.task_key, sources)
    if cache is not None and key != looked_up:  # a source changed since it was hashed for the lookup
        entry = lookup(job, cache, key, read.stamps)
        if entry is not None:
            return entry
    with step("load, check and normalize"):
        model = load_source(asset, read)
        fix_shapes(model, job.settings)
    source_model, precision = model, {"precision": job.settings.precision}
    if job.settings.precision != FP32:
        with step("precision variant"):
            model, precision = _precision_variant(job, model, read)
    if job.settings.precision != FP32:  # before cooking: a variant that fails the gate costs no cook
        with step("accuracy gate"):
            precision["accuracy"] = _accuracy_gate(job, source_model, model, read, precision)
    asked_runtime = job.settings.optimization_style == OptimizationStyle.RUNTIME
    reference = model  # what the cooked blob must compute, whatever the repairs below change
    with step("downgrade"):
        model, repairs = downgrade(
            model,
            limits_of(job.settings.runtime_version),
            mode=job.settings.downgrade,
            where=str(asset.settings_path or asset.path.with_suffix(".cook.yaml")),
        )
    variant = _cook_with_style_fallback(job, model, read, key, reference)
    if repairs:
        variant = replace(variant, fallbacks=[*repairs, *variant.fallbacks])
    _check_blob_budget(job, variant)
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
    from pipeline.cook.opconfig import (
        model_operators,  # onnxruntime.tools: only cooks that need them import it
    )
    from pipeline.cook.usability import usability

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
        "file": paths(job)["blob"].relative_to(job.platform_dir).as_posix(),
        "source_size": sum(
            len(read.data[path])
            for path in asset.source_files
            if path not in (asset.inputs_path, asset.calib_path)
        ),
        "model_size": model_size,
        "blob_size": len(blob),
        "weights": _weights_entry(header),
        "fallbacks": variant.fallbacks,
        "precision": precision,
        "weight_bytes": variant.weight_bytes,
        "source_sha256": sources[asset.path.name],
        "sources": sources,
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
    if operators is not None:
        entry["operators"] = operators
    files = {"blob": blob, "entry": json_bytes(entry)}
    if verify_data is not None:
        files["verify"] = verify_data
    # each file hashed once, for the cache index and the up-to-date records
    digests = {role: _sha256(data) for role, data in files.items() if role != "blob"}
    digests["blob"] = entry["blob_sha256"]
    with staged_files(files, paths(job)) as staged:
        if cache is not None:  # before the commit: a required cache that refuses fails the task
            with step("cook cache upload"):
                cache.upload(key, staged, digests)
        with step("write the outputs"):
            return commit(job, staged, read.stamps, digests)


def _precision_variant(
    job: CookJob, model: onnx.ModelProto, read: SourceRead
) -> tuple[onnx.ModelProto, dict]:
    """The model at the settings' precision (pipeline.cook.precision), and what made it."""
    settings, asset = job.settings, job.asset
    calibration, origin = None, ""
    if settings.precision == INT8_STATIC:
        if asset.calib_path is not None:
            calibration = load_calibration(asset.calib_path, read.data[asset.calib_path])
            origin = asset.calib_path.name
        else:  # no real inputs: the verification inputs, and the manifest says so
            feeds, inputs = _feeds(job, model, read)
            calibration, origin = [feeds], f"the verification inputs ({inputs}); no {asset.name}.calib.npz"
    return convert_precision(
        model,
        settings.precision,
        keep_ops=settings.precision_keep_ops,
        options=resolved_options(settings.precision, settings.to_dict()["precision_options"]),
        calibration=calibration,
        calibration_origin=origin,
        work_dir=job.platform_dir,
    )


def _accuracy_gate(
    job: CookJob, source: onnx.ModelProto, variant: onnx.ModelProto, read: SourceRead, record: dict
) -> dict[str, Any]:
    """The variant against the fp32 source on the verification inputs; fails the cook past the gate."""
    settings = job.settings
    feeds, origin = _feeds(job, source, read)
    _refuse_meaningless(feeds, origin)
    try:
        want = reference_outputs(source, feeds, job.platform_dir, reference_memo_dir(job.platform_dir.parent))
        got = reference_outputs(variant, as_input_types(variant, feeds), job.platform_dir)
    except Exception as exc:  # onnxruntime errors on either model
        raise ModelError(
            f"onnxruntime cannot run the source or its {settings.precision} variant: {exc}"
        ) from None
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


def _check_blob_budget(job: CookJob, variant: _Variant) -> None:
    budget, size = job.settings.max_blob_bytes, len(variant.blob)
    if budget and size > budget:
        estimate = shrink_hint(
            {
                "blob_size": size,
                "weight_bytes": variant.weight_bytes,
                "precision": {"precision": job.settings.precision},
            },
            measured_variants(job.platform_dir.parent, job.asset.name),
        )
        raise ModelError(
            f"the blob is {size:,} bytes, over its max_blob_bytes of {budget:,} ({estimate}); set "
            f"`precision` in {job.asset.path.with_suffix('.cook.yaml')}, or raise max_blob_bytes"
        )


# When a runtime-style ORT blob does not load (onnxruntime cannot replay some saved runtime
# optimizations, e.g. QDQ selector records: "Not enough produced nodes in the runtime optimization
# record"), the closest forms that may: the fixed style at the same level, then at level basic.
STYLE_FALLBACKS: tuple[dict[str, str], ...] = (
    {"optimization_style": "fixed"},
    {"optimization_style": "fixed", "optimization_level": "basic"},
)
LOAD_FAILURE = "the runtime loader cannot load the cooked blob"


def _cook_with_style_fallback(
    job: CookJob, model: onnx.ModelProto, read: SourceRead, key: str, reference: onnx.ModelProto
) -> _Variant:
    """The platform's form of the model; for a runtime-style blob that does not load, the first
    fallback form that loads and verifies, recorded. Never a blob that failed to load."""
    try:
        return _cook_variant(job, model, read, key, reference)
    except VerifyError as exc:
        if LOAD_FAILURE not in str(exc) or job.settings.optimization_style != OptimizationStyle.RUNTIME:
            raise
        if _style_pinned(job):
            raise VerifyError(
                f"{exc.problem}; the model pins `optimization_style` in its .cook.yaml, so no fallback was "
                "tried: remove that line to let the cook fall back to the fixed style"
            ) from None
        first = exc.problem
    tried = []
    for change in STYLE_FALLBACKS:
        attempt = replace(job, settings=replace(job.settings, **change))
        described = ", ".join(f"{k} {v}" for k, v in change.items())
        try:
            variant = _cook_variant(attempt, model, read, key, reference)
        except CookError as exc:  # a guard or the verification refuses this form too: the next one
            tried.append(f"{described}: {exc.problem}")
            continue
        why = first.removeprefix("verification failed: ")
        record = {"used": change, "instead_of": {"optimization_style": "runtime"}, "why": why}
        return replace(variant, fallbacks=[record, *variant.fallbacks])
    raise VerifyError(f"{first}; no fallback loads either ({'; '.join(tried)})")


def _style_pinned(job: CookJob) -> bool:
    """Whether the model's own settings file sets optimization_style (top level or for this platform)."""
    path = job.asset.settings_path
    if path is None or not path.is_file():
        return False
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return False
    section = (data.get("platforms") or {}).get(job.settings.platform) or {}
    return "optimization_style" in data or "optimization_style" in section


def _cook_variant(
    job: CookJob, model: onnx.ModelProto, read: SourceRead, key: str, reference: onnx.ModelProto
) -> _Variant:
    """Optimize, guard, compress and verify ``model`` with ``job``'s settings (no file written); the
    blob must compute what ``reference`` computes (``model`` itself, or the model before a downgrade)."""
    asset, settings = job.asset, job.settings
    large = is_large(model)
    fallback: dict[str, Any] | None = None
    if large:
        with step("optimize and serialize"):
            proto = _optimize_large(job, model)
        cooked_facts, ort_version, model_size = onnx_facts(proto), None, tensor_bytes(proto)
    else:
        with step("optimize and serialize"):
            cooked, fallback = _optimize_within_growth(job, model)
        ort_version = ort_format_version(cooked)
        cooked_facts = (
            ort_facts(cooked)
            if settings.format == ModelFormat.ORT
            else onnx_facts(onnx.load_from_string(cooked))
        )
        model_size = len(cooked)
    with step("guard"):
        min_runtime = guard(
            source=onnx_facts(model),
            cooked=cooked_facts,
            model_size=model_size,
            ort_format_version=ort_version,
            settings=settings,
            preferred_domains=ep_domains(settings.execution_providers[0]),
        )
    options = settings.to_dict()
    with step("compress"):
        graph, weights = (
            externalize(proto, asset.name) if large else _split_weights(cooked, settings, asset.name)
        )
        blob = encode_blob(
            graph,
            level=settings.compression_level,
            weights=weights,
            model_format=settings.format,
            platform=settings.platform,
            name=asset.name,
            cook_key=key,
            min_runtime_version=min_runtime,
            ort_format_version=ort_version,
            saved_runtime_optimizations=settings.optimization_style == OptimizationStyle.RUNTIME,
            execution_providers=settings.execution_providers,
            provider_options=options["provider_options"],
            ep_session_options=options["ep_session_options"],
        )
    try:
        verification, verify_data = _verification(job, reference, blob, read)
    except VerifyError as exc:
        raise VerifyError(f"verification failed: {exc.problem}") from None
    return _Variant(
        job=job,
        blob=blob,
        model_size=model_size,
        ort_version=ort_version,
        min_runtime=min_runtime,
        verification=verification,
        verify_data=verify_data,
        fallbacks=[fallback] if fallback else [],
        cooked=None if large else cooked,
        weight_bytes=cooked_facts.initializer_bytes,
    )


# What a cook may turn off when the cooked model grows past max_growth: constant folding
# materializes ConstantOfShape/Expand/Tile/Range outputs the source computes at run time.
GROWTH_FALLBACK = ("ConstantFolding",)


def _optimize_within_growth(job: CookJob, model: onnx.ModelProto) -> tuple[bytes, dict | None]:
    """The optimized model and, when constant folding inflated it past the settings' limits, the
    model cooked again without it (and what was done, for the manifest)."""
    settings = job.settings
    source = model.ByteSize()
    cooked = optimize(model, settings, work_dir=job.platform_dir)
    if not _inflated(len(cooked), source, settings):
        return cooked, None
    again = optimize(model, settings, work_dir=job.platform_dir, also_disabled=GROWTH_FALLBACK)
    limits = f"`max_growth` {settings.max_growth:g}, `max_growth_bytes` {settings.max_growth_bytes:,}"
    if _inflated(len(again), source, settings):
        raise ModelError(
            f"cooking makes the {source:,}-byte model {len(cooked):,} bytes, and still "
            f"{len(again):,} bytes without constant folding (over {limits}); if that size is expected, "
            f"raise `max_growth` or `max_growth_bytes` in {job.asset.path.with_suffix('.cook.yaml')}"
        )
    return again, {
        "disabled_optimizers": list(GROWTH_FALLBACK),
        "why": (
            f"constant folding made the {source:,}-byte model {len(cooked):,} bytes (over {limits}); "
            f"without it, {len(again):,} bytes"
        ),
    }


def _inflated(cooked: int, source: int, settings: CookSettings) -> bool:
    return cooked > settings.max_growth * source and cooked - source > settings.max_growth_bytes


def _optimize_large(job: CookJob, model: onnx.ModelProto) -> onnx.ModelProto:
    """Optimize a model over protobuf's 2 GB limit: only as ONNX, with its weights external."""
    settings, size = job.settings, tensor_bytes(model)
    section = (
        f"`platforms: {{{settings.platform}: {{...}}}}` section of {job.asset.path.with_suffix('.cook.yaml')}"
    )
    if settings.format == ModelFormat.ORT:
        raise ModelError(
            f"the model holds {size:,} bytes of weights, over the 2 GB limit of the ORT format "
            "(a flatbuffer, which cannot refer to weights outside it when loaded from memory); cook it as "
            f"ONNX with external weights: set `format: onnx` and `optimization_style: fixed` for it in the "
            f"{section}, or list this platform in its `skip_platforms`"
        )
    if settings.weights == "inline":
        raise ModelError(
            f"the model holds {size:,} bytes of weights, over protobuf's 2 GB limit, so they "
            f"cannot stay inline: set `weights: auto` (or `external`) for it in the {section}"
        )
    return optimize_large(model, settings, work_dir=job.platform_dir)


def _split_weights(cooked: bytes, settings: CookSettings, name: str) -> tuple[bytes, Weights | None]:
    """The graph section and, when the settings want them apart, the weights section."""
    if settings.format != ModelFormat.ONNX or settings.weights == "inline":
        return cooked, None
    model = onnx.load_from_string(cooked)
    if not wants_external(settings, model):
        return cooked, None
    return externalize(model, name)


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
