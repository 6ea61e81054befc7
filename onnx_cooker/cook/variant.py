"""One cooked form of a model: optimize (within the growth limits; models over 2 GB apart), guard,
compress and verify, with no file written; and the fallback forms tried when a runtime-style ORT
blob does not load."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import onnx

from onnx_cooker.cook.checking import verify_blob
from onnx_cooker.cook.facts import onnx_facts, ort_facts
from onnx_cooker.cook.guard import guard
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.large import is_large, tensor_bytes
from onnx_cooker.cook.narrow import NarrowWeights, folded, keeps_narrow, narrow_record, narrow_weights
from onnx_cooker.cook.optimize import optimize, optimize_large
from onnx_cooker.cook.source import SourceRead
from onnx_cooker.cook.weights import externalize, wants_external
from onnx_cooker.errors import CookError, ModelError, VerifyError
from onnx_cooker.runtime.compat import ort_format_version
from onnx_cooker.runtime.constants import ModelFormat, OptimizationStyle
from onnx_cooker.runtime.writer import Weights, encode_blob
from onnx_cooker.settings.resolve import CookSettings, ep_domains, onnx_instead
from onnx_cooker.steptimes import step


@dataclass(frozen=True)
class Variant:
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
    narrow_weights: dict[str, Any] | None = None  # narrow.narrow_record, where the source has them


# When a runtime-style ORT blob does not load (onnxruntime cannot replay some saved runtime
# optimizations, e.g. QDQ selector records: "Not enough produced nodes in the runtime optimization
# record"), the closest forms that may: the fixed style at the same level, then at level basic.
STYLE_FALLBACKS: tuple[dict[str, str], ...] = (
    {"optimization_style": "fixed"},
    {"optimization_style": "fixed", "optimization_level": "basic"},
)
LOAD_FAILURE = "the runtime loader cannot load the cooked blob"
COOK_YAML = ".cook.yaml"


def cook_with_style_fallback(
    job: CookJob,
    model: onnx.ModelProto,
    read: SourceRead,
    key: str,
    reference: onnx.ModelProto,
    sized_by: onnx.ModelProto | None = None,
) -> Variant:
    """The platform's form of the model; for a runtime-style blob that does not load, the first
    fallback form that loads and verifies, recorded. Never a blob that failed to load."""
    try:
        return cook_variant(job, model, read, key, reference, sized_by)
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
            variant = cook_variant(attempt, model, read, key, reference, sized_by)
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


def cook_variant(
    job: CookJob,
    model: onnx.ModelProto,
    read: SourceRead,
    key: str,
    reference: onnx.ModelProto,
    sized_by: onnx.ModelProto | None = None,
) -> Variant:
    """Optimize, guard, compress and verify ``model`` with ``job``'s settings (no file written); the
    blob must compute what ``reference`` computes (``model`` itself, or the model before a downgrade),
    on inputs sized as ``sized_by`` runs them (the fp32 source of a precision variant; default:
    ``reference``)."""
    asset, settings = job.asset, job.settings
    large = is_large(model)
    fallback: dict[str, Any] | None = None
    narrow: dict[str, Any] | None = None
    if large:
        with step("optimize and serialize"):
            proto = _optimize_large(job, model)
        cooked_facts, ort_version, model_size = onnx_facts(proto), None, tensor_bytes(proto)
    else:
        with step("optimize and serialize"):
            cooked, fallback, narrow = _optimize_within_growth(job, model)
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
            compression=settings.compression,
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
            **({"device_policy": settings.ep_device_policy} if settings.ep_device_policy != "none" else {}),
        )
    # In the blob now: a model over 2 GB held three times over during verification is 7 GB more
    proto = graph = weights = None  # type: ignore[assignment]
    try:
        verification, verify_data = verify_blob(job, reference, blob, read, sized_by)
    except VerifyError as exc:
        raise VerifyError(f"verification failed: {exc.problem}") from None
    return Variant(
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
        narrow_weights=narrow,
    )


# What a cook may turn off when the cooked model grows past max_growth: constant folding
# materializes ConstantOfShape/Expand/Tile/Range outputs the source computes at run time.
GROWTH_FALLBACK = ("ConstantFolding",)


def _optimize_within_growth(job: CookJob, model: onnx.ModelProto) -> tuple[bytes, dict | None, dict | None]:
    """The optimized model; when constant folding inflated it past the settings' limits, the model
    cooked again without it (and what was done, for the manifest); and the manifest's record of the
    weights the source stores narrow (narrow.py), cooked without constant folding where kept."""
    settings = job.settings
    source = model.ByteSize()
    narrow = narrow_weights(model)
    keep = narrow is not None and keeps_narrow(settings)
    off = GROWTH_FALLBACK if keep else ()
    cooked = optimize(model, settings, work_dir=job.platform_dir, also_disabled=off)
    if not _inflated(len(cooked), source, settings):
        return cooked, None, _narrow_entry(narrow, source, len(cooked))
    if keep:  # constant folding was off already
        again = cooked
    else:
        again = optimize(model, settings, work_dir=job.platform_dir, also_disabled=GROWTH_FALLBACK)
    limits = f"`max_growth` {settings.max_growth:g}, `max_growth_bytes` {settings.max_growth_bytes:,}"
    if _inflated(len(again), source, settings):
        without = "" if keep else f"{len(cooked):,} bytes, and still "
        raise ModelError(
            f"cooking makes the {source:,}-byte model {without}{len(again):,} bytes without constant "
            f"folding (over {limits}); if that size is expected, raise `max_growth` or `max_growth_bytes` "
            f"in {job.asset.path.with_suffix('.cook.yaml')}"
        )
    return (
        again,
        {
            "disabled_optimizers": list(GROWTH_FALLBACK),
            "why": (
                f"constant folding made the {source:,}-byte model {len(cooked):,} bytes (over {limits}); "
                f"without it, {len(again):,} bytes"
            ),
        },
        _narrow_entry(narrow, source, len(again)),
    )


def _narrow_entry(narrow: NarrowWeights | None, source: int, cooked: int) -> dict | None:
    return None if narrow is None else narrow_record(narrow, kept=not folded(narrow, source, cooked))


def _inflated(cooked: int, source: int, settings: CookSettings) -> bool:
    return cooked > settings.max_growth * source and cooked - source > settings.max_growth_bytes


def _optimize_large(job: CookJob, model: onnx.ModelProto) -> onnx.ModelProto:
    """Optimize a model over protobuf's 2 GB limit: only as ONNX, with its weights external."""
    settings, size = job.settings, tensor_bytes(model)
    section = (
        f"`platforms: {{{settings.platform}: {{...}}}}` section of {job.asset.path.with_suffix(COOK_YAML)}"
    )
    if settings.format == ModelFormat.ORT:
        cook_yaml = str(job.asset.path.with_suffix(COOK_YAML))
        raise ModelError(
            f"the model holds {size:,} bytes of weights, over the 2 GB limit of the ORT format "
            "(a flatbuffer, which cannot refer to weights outside it when loaded from memory)"
            + ("" if settings.reduced_build else "; cook it as ONNX with external weights")
            + f": {onnx_instead(settings, cook_yaml)}"
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
