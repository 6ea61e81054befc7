"""Guard (step 4 of a cook): refuse a cooked model that is broken or will not run where it ships.

Each check returns problems as sentences; ``guard`` fails once with all of them.
"""

from __future__ import annotations

from collections.abc import Collection

from .errors import GuardError
from .facts import ModelFacts
from .profile import CookSettings
from .runtime.compat import format_version, min_runtime_for, parse_version
from .runtime.constants import TWO_GIB, Arch, ModelFormat, Precision

ORT_FORMAT_LIMIT = TWO_GIB  # flatbuffers cannot address more
# Constant folding and BatchNorm fusion shrink weights a little; losing half of them is the seed
# thread's broken few-KB file (a GPU EP stole the initializers), never an optimization.
MIN_WEIGHT_RATIO = 0.5
NCHWC_DOMAIN = "com.microsoft.nchwc"


def check_inputs(source: ModelFacts, cooked: ModelFacts) -> list[str]:
    problems = []
    new_inputs = sorted(set(cooked.inputs) - set(source.inputs))
    if new_inputs:
        problems.append(
            f"the cooked model requires input(s) the source does not have: {', '.join(new_inputs)} "
            "(weights turned into inputs with no data)"
        )
    if cooked.missing_values:
        problems.append(f"nodes consume values nothing produces: {', '.join(cooked.missing_values[:5])}")
    if set(cooked.outputs) != set(source.outputs):
        problems.append(f"outputs changed from {list(source.outputs)} to {list(cooked.outputs)}")
    return problems


def check_weights(source: ModelFacts, cooked: ModelFacts) -> list[str]:
    if (
        source.initializer_bytes == 0
        or cooked.initializer_bytes >= MIN_WEIGHT_RATIO * source.initializer_bytes
    ):
        return []
    return [
        f"the cooked model keeps {cooked.initializer_bytes:,} of the source's {source.initializer_bytes:,} "
        f"weight bytes ({cooked.initializer_count} of {source.initializer_count} initializers): weights "
        "were dropped"
    ]


def check_domains(
    source: ModelFacts, cooked: ModelFacts, settings: CookSettings, preferred_domains: Collection[str]
) -> list[str]:
    """Optimization may not add operator domains the platform's preferred EP cannot run
    (docs/design.md, "Operators the target EP cannot run")."""
    problems = []
    preferred = settings.execution_providers[0]
    added = cooked.domains_used - source.domains_used
    if NCHWC_DOMAIN in added and not (settings.arch == Arch.X86_64 and settings.allow_nchwc):
        problems.append(
            f"optimization added {NCHWC_DOMAIN} operators, which depend on the cooking machine's CPU; "
            "lower optimization_level or set arch: x86_64 with allow_nchwc: true"
        )
        added -= {NCHWC_DOMAIN}
    unsupported = sorted(domain for domain in added if domain not in preferred_domains)
    if unsupported:
        problems.append(
            f"optimization added operators of domain(s) {', '.join(unsupported)}, which {preferred} cannot "
            "run, so the model would silently fall back to the CPU; use optimization_level: basic "
            "(or optimization_style: runtime) for this platform"
        )
    return problems


def check_runtime_version(
    cooked: ModelFacts, ort_format_version: str | None, settings: CookSettings
) -> tuple[list[str], tuple[int, int] | None]:
    """The target's onnxruntime must load the cooked opset, IR and ORT format (docs/design.md,
    "Runtime versions").

    Returns the problems and the oldest onnxruntime that loads the model (None if none known).
    """
    target = parse_version(settings.runtime_version)
    try:
        needed = min_runtime_for(
            opset=cooked.opset, ir_version=cooked.ir_version, ort_format_version=ort_format_version
        )
    except ValueError as exc:
        return [f"{exc}; the target's onnxruntime {settings.runtime_version} cannot load it"], None
    if target[:2] >= needed:
        return [], needed
    return [
        f"the cooked model (opset {cooked.opset}, IR {cooked.ir_version}"
        + (f", ORT format v{ort_format_version}" if ort_format_version else "")
        + f") needs onnxruntime {format_version(needed)} or newer, but the platform's runtime_version is "
        f"{settings.runtime_version}; convert the source to an older opset (onnx.version_converter) or "
        "raise runtime_version if the target ships a newer onnxruntime"
    ], needed


def check_size(model_size: int, settings: CookSettings) -> list[str]:
    if settings.format == ModelFormat.ORT and model_size >= ORT_FORMAT_LIMIT:
        return [
            f"the ORT-format model is {model_size:,} bytes, over the 2 GB flatbuffer limit; use format: onnx"
        ]
    return []


# EPs that take no dynamically quantized integer ops (DynamicQuantizeLinear, MatMulInteger): an
# int8-dynamic model would run on their CPU fallback. They take QDQ int8 models (int8-static).
NO_DYNAMIC_INT8 = frozenset({"NnapiExecutionProvider", "CoreMLExecutionProvider", "XnnpackExecutionProvider"})


def check_precision(settings: CookSettings) -> list[str]:
    """The variant must suit the platform's preferred EP (docs/design.md, "Operators the target EP
    cannot run")."""
    preferred = settings.execution_providers[0]
    if settings.precision == Precision.INT8_DYNAMIC and preferred in NO_DYNAMIC_INT8:
        return [
            f"precision int8-dynamic makes DynamicQuantizeLinear/MatMulInteger nodes that {preferred} cannot "
            "run (they would fall back to the CPU); use `precision: int8-static` (QDQ, which it takes) or "
            "`fp16`"
        ]
    return []


def guard(
    *,
    source: ModelFacts,
    cooked: ModelFacts,
    model_size: int,
    ort_format_version: str | None,
    settings: CookSettings,
    preferred_domains: Collection[str],
) -> str:
    """Fail once with every problem; otherwise return the oldest onnxruntime version that loads the model."""
    runtime_problems, needed = check_runtime_version(cooked, ort_format_version, settings)
    problems = [
        *check_inputs(source, cooked),
        *check_weights(source, cooked),
        *check_domains(source, cooked, settings, preferred_domains),
        *runtime_problems,
        *check_size(model_size, settings),
        *check_precision(settings),
    ]
    if problems or needed is None:
        raise GuardError("the cooked model fails its guards: " + "; ".join(problems))
    return format_version(needed)
