"""Guard (step 4 of a cook): refuse a cooked model that is broken or will not run where it ships.

Each check returns problems as sentences; ``guard`` fails once with all of them.
"""

from __future__ import annotations

from collections.abc import Collection

from onnx_cooker.cook.downgrade import limits_of, oldest_runtime
from onnx_cooker.cook.facts import ModelFacts, Weight
from onnx_cooker.errors import GuardError
from onnx_cooker.runtime.compat import ORT_FORMAT_MIN_RUNTIME, format_version, min_runtime_for, parse_version
from onnx_cooker.runtime.constants import TWO_GIB, Arch, ModelFormat, Precision
from onnx_cooker.settings.resolve import CookSettings, onnx_instead

ORT_FORMAT_LIMIT = TWO_GIB  # flatbuffers cannot address more
NCHWC_DOMAIN = "com.microsoft.nchwc"


def check_inputs(source: ModelFacts, cooked: ModelFacts) -> list[str]:
    problems = []
    new_inputs = sorted(set(cooked.inputs) - set(source.inputs))
    if new_inputs:
        problems.append(
            f"the cooked model requires input(s) the source does not have: {', '.join(new_inputs)} "
            "(weights turned into inputs with no data)"
        )
    if set(cooked.outputs) != set(source.outputs):
        problems.append(f"outputs changed from {list(source.outputs)} to {list(cooked.outputs)}")
    return problems


def check_weights(source: ModelFacts, cooked: ModelFacts) -> list[str]:
    """Weights are dropped when the cooked graph reads a value nothing provides (the seed thread's
    file: a GPU EP during the conversion took the initializers, the nodes still read them), or when
    a node the optimizer left as it was reads, under a weight's own name, content that cannot be that
    weight: another type or element count, or all zeros where the source's were not.

    Fewer weight bytes alone are no sign: ConstantSharing keeps one of equal constants, folding and
    fusions replace weights with new ones their nodes read under new names (docs/design.md, "The
    weight guard"). Whether those compute the same is the verification's to prove.
    """
    problems = []
    if cooked.missing_values:
        shown = ", ".join(cooked.missing_values[:5])
        more = f" and {len(cooked.missing_values) - 5} more" if len(cooked.missing_values) > 5 else ""
        problems.append(
            f"weights were dropped: nodes read values that nothing produces or provides ({shown}{more}); "
            f"{_kept(source, cooked)}"
        )
    changed = []
    for name, (domain, op_type, inputs) in cooked.nodes.items():
        if source.nodes.get(name, (None, None, ()))[:2] != (domain, op_type):
            continue  # a node the optimizer made or rewrote
        for slot, value in enumerate(source.nodes[name][2]):
            was, now = source.weights.get(value), cooked.weights.get(value)
            if was is None or now is None or slot >= len(inputs) or inputs[slot] != value:
                continue  # not a weight, or the node now reads another value (shared, folded, fused)
            if now.digest != was.digest and _not_the_same_weight(was, now):
                changed.append(f"{value!r} of node {name!r} ({op_type})")
    if changed:
        problems.append(
            f"weights were dropped: {', '.join(changed[:5])} "
            f"{'holds' if len(changed) == 1 else 'hold'} other content than the source's under the same "
            f"name (another type or size, or zeros); {_kept(source, cooked)}"
        )
    return problems


def _not_the_same_weight(was: Weight, now: Weight) -> bool:
    # Same type and size with other bytes may be onnxruntime rewriting a weight in place (the transpose
    # optimizer can change an initializer only one node reads); zeros in place of content cannot be.
    return (
        was.data_type != now.data_type or was.elements != now.elements or (now.all_zero and not was.all_zero)
    )


def _kept(source: ModelFacts, cooked: ModelFacts) -> str:
    kept = len(source.contents & cooked.contents)
    return (
        f"the cooked model holds {cooked.initializer_count} initializers "
        f"({cooked.initializer_bytes:,} bytes) and {kept} of the source's {len(source.contents)} "
        "distinct weight contents"
    )


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
    # Asked for (allow_nchwc) and made: still only where the preferred EP runs them (the CPU EP).
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
    "Runtime versions"); each cause is named with the number the target allows and a fix that works.

    Returns the problems and the oldest onnxruntime that loads the model (None if none known).
    """
    limits = limits_of(settings.runtime_version)
    runtime = f"onnxruntime {settings.runtime_version} (runtime_version)"
    repair = "set `downgrade: auto` to lower it, " if settings.downgrade == "never" else ""
    problems = []
    if cooked.opset > limits.opset:
        problems.append(
            f"the cooked model imports default-domain opset {cooked.opset} and {runtime} loads opset "
            f"{limits.opset} at most; {repair}re-export it at opset {limits.opset} or older, or raise "
            f"runtime_version to {oldest_runtime(opset=cooked.opset) or 'a newer release'} or newer if "
            "the target ships it"
        )
    if cooked.ir_version > limits.ir_version:
        problems.append(
            f"the cooked model is IR {cooked.ir_version} and {runtime} loads IR {limits.ir_version} at "
            f"most; {repair}re-save it with `ir_version` {limits.ir_version} if it uses no newer format "
            f"feature, or raise runtime_version to "
            f"{oldest_runtime(ir_version=cooked.ir_version) or 'a newer release'} or newer if the target "
            "ships it"
        )
    try:
        needed = min_runtime_for(
            opset=cooked.opset, ir_version=cooked.ir_version, ort_format_version=ort_format_version
        )
    except ValueError as exc:
        return [*problems, f"{exc}; the target's onnxruntime {settings.runtime_version} cannot load it"], None
    target = parse_version(settings.runtime_version)[:2]
    reads_format = ORT_FORMAT_MIN_RUNTIME.get(ort_format_version or "", (0, 0))
    if target < reads_format:
        problems.append(
            f"the cooked model is ORT format v{ort_format_version}, which onnxruntime "
            f"{format_version(reads_format)} and newer read, and {runtime} is older; raise runtime_version "
            f"to {format_version(reads_format)} or newer if the target ships it, or {onnx_instead(settings)}"
        )
    if not problems and target < needed:
        problems.append(f"the cooked model needs onnxruntime {format_version(needed)} or newer")
    return problems, needed


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
