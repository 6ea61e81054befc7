"""The verification of the cooked blob through the loader, against the source's outputs on the
verification inputs (``feeds``), with the inputs kept for the runtime check."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from typing import Any

import numpy as np
import onnx

from onnx_cooker.cook.conditioning import (
    UNIT_FLOATS,
    ill_conditioned_message,
    input_swing,
    nonfinite_outputs,
    swing_text,
)
from onnx_cooker.cook.feeds import (
    VerifyInputs,
    all_empty,
    cannot_run,
    feeds_for,
    hints,
    refuse_meaningless,
    source_reference,
)
from onnx_cooker.cook.inputs import as_input_types, synthesize_inputs
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.precision import (
    FP32,
    INT8_PRECISIONS,
    VERIFY_ATOL_OF_RANGE,
    verify_tolerances,
)
from onnx_cooker.cook.source import SourceRead
from onnx_cooker.cook.verify import (
    DEFAULT_LEVEL,
    differences,
    reference_outputs,
    rounding_noise,
    selection_outputs,
    verify,
)
from onnx_cooker.errors import ModelError, VerifyError
from onnx_cooker.isolate import Crash, run_isolated
from onnx_cooker.layout import (
    reference_memo_dir,
)
from onnx_cooker.settings.resolve import CookSettings
from onnx_cooker.steptimes import step


def verify_blob(
    job: CookJob,
    model: onnx.ModelProto,
    blob: bytes,
    read: SourceRead,
    sized_by: onnx.ModelProto | None = None,
) -> tuple[dict[str, Any], bytes | None]:
    """The verification report, and its inputs with the source's outputs (an .npz) for the runtime
    check. ``sized_by`` (a precision variant's fp32 source) chooses the inputs, in ``model``'s types."""
    settings = verify_tolerances(job.settings)
    if not settings.verify:
        return {"skipped": "verify is false in the settings"}, None
    _refuse_unreadable_outputs(job, model)
    with step("verify: the source's outputs"):
        if sized_by is None:
            inputs = feeds_for(job, model, read)
        else:  # the source's outputs on them are not the variant's: run the variant
            inputs = feeds_for(job, sized_by, read)
            inputs = replace(inputs, feeds=as_input_types(model, inputs.feeds), outputs=None)
        refuse_meaningless(inputs.feeds, inputs.origin)
        reference, noise, default_level = _references(job, model, inputs, settings)
        floats: dict[str, Any] = {}
        blank = nonfinite_outputs(reference)  # NaN all over: inputs outside the model's domain
        if blank and inputs.origin == "synthesized":  # sample inputs are the user's to choose
            inputs, (reference, noise, default_level) = _finite_inputs(job, model, settings, inputs, blank)
            floats = {"floats": UNIT_FLOATS, "normal_floats_nonfinite": blank}
        if all_empty(reference) and inputs.origin == "synthesized":  # nothing to compare
            inputs, (reference, noise, default_level) = _nonempty_inputs(job, model, settings, inputs)
            floats = {"floats": UNIT_FLOATS}
    with step("verify: the cooked blob, through the loader"):
        try:
            results = verify(blob, reference, inputs.feeds, settings, noise, default_level)
        except VerifyError as failure:
            if floats:  # on unit floats already
                raise
            inputs, reference, default_level, results, floats = _on_unit_floats(
                job, model, blob, settings, inputs, failure
            )
    feeds, origin = inputs.feeds, inputs.origin
    # The runtime check compares the target's outputs with what each output verified against
    stored = {
        name: default_level[name] if result.passed_by == DEFAULT_LEVEL else value
        for (name, value), result in zip(reference.items(), results, strict=True)
    }
    # and the unoptimized run as well where that differs: an EP may compute what the optimizations
    # off do (OpenVINO runs an int8 variant's QDQ pairs as float maths, as the unoptimized CPU EP)
    unoptimized = {
        name: reference[name]
        for name, result in zip(reference, results, strict=True)
        if result.passed_by == DEFAULT_LEVEL
    }
    report = {
        "inputs": origin,
        **({"empty_outputs": True} if all_empty(reference) else {}),  # sample inputs: nothing compared
        **({"default_dims": inputs.free_dims} if inputs.free_dims else {}),
        **floats,
        "rtol": settings.rtol,
        "atol": settings.atol,
        "scale": settings.verify_scale,
        **({"atol_of_range": of_range} if (of_range := VERIFY_ATOL_OF_RANGE.get(settings.precision)) else {}),
        "outputs": [asdict(r) for r in results],
    }
    return report, _verify_data(feeds, stored, unoptimized)


def _references(
    job: CookJob, model: onnx.ModelProto, inputs: VerifyInputs, settings: CookSettings
) -> tuple[dict[str, Any], dict[str, tuple[float, float]], dict[str, Any]]:
    """The source's outputs on the inputs, their rounding noise, and the default-level outputs of
    those a selection computes."""
    try:
        reference = source_reference(job, model, inputs)
    except Exception as exc:  # onnxruntime errors on the source itself (or its precision variant)
        precision = job.settings.precision
        what = "the source model" if precision == FP32 else f"its {precision} variant"
        raise cannot_run(job, what, exc, inputs) from None
    noise, default_level = (
        _rounding_noise(model, inputs.feeds, reference, job) if settings.verify_scale else ({}, {})
    )
    # Only outputs a selection computes may take the default level as their reference: elsewhere
    # a difference between the source's two runs is precision lost (MatMulNBits' int8
    # activations), which takes the user's verify_scale. But not in an int8 variant the cook made:
    # its QDQ pairs run as float maths with optimizations off and as int8 kernels at the default
    # level, which is what a game's session computes (measured: a ViT's QDQ variant, 0.22 apart
    # of 2.6 at the output); the accuracy gate judged the precision the user asked for
    if default_level and job.settings.precision not in INT8_PRECISIONS:
        selected = selection_outputs(model)
        default_level = {name: value for name, value in default_level.items() if name in selected}
    return reference, noise, default_level


def _unit_floats(job: CookJob, model: onnx.ModelProto, inputs: VerifyInputs) -> VerifyInputs:
    """Synthesized ``inputs`` drawn again at the same sizes, their floats uniform in [0, 1)."""
    settings_hint, inputs_hint = hints(job)
    free = {**dict(job.settings.verify_dims), **inputs.free_dims}
    feeds = synthesize_inputs(
        model, free, settings_hint=settings_hint, inputs_hint=inputs_hint, unit_floats=True
    )
    return replace(inputs, feeds=feeds, outputs=None)


def _finite_inputs(
    job: CookJob, model: onnx.ModelProto, settings: CookSettings, inputs: VerifyInputs, blank: list[str]
) -> tuple[VerifyInputs, tuple[dict[str, Any], dict[str, tuple[float, float]], dict[str, Any]]]:
    """Synthesized inputs drawn again as floats in [0, 1), where the first ones made outputs NaN all
    over (``conditioning.nonfinite_outputs``), with the source's references on them; a VerifyError
    where the new inputs do too."""
    unit = _unit_floats(job, model, inputs)
    references = _references(job, model, unit, settings)
    if not (blank := nonfinite_outputs(references[0])):
        return unit, references
    raise VerifyError(
        f"the source's output(s) {', '.join(map(repr, blank))} hold no finite value, NaN all over, on "
        f"synthesized inputs (floats from a normal distribution, then {UNIT_FLOATS}): they are outside "
        "what the model computes, and a comparison on them verifies nothing; ship sample inputs from real "
        f"data the model was made for as {hints(job)[1]}"
    )


# Element types onnxruntime's Python API cannot hand back as numpy arrays ("No corresponding Numpy
# type for Tensor Type"): bfloat16, the float8s, int4/uint4, float4
_NO_NUMPY = {
    onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ,
    onnx.TensorProto.FLOAT8E5M2, onnx.TensorProto.FLOAT8E5M2FNUZ, onnx.TensorProto.INT4,
    onnx.TensorProto.UINT4, getattr(onnx.TensorProto, "FLOAT4E2M1", -1),
}  # fmt: skip


def _refuse_unreadable_outputs(job: CookJob, model: onnx.ModelProto) -> None:
    """A model with an output of such a type cannot be verified from Python: say so and how, before
    anything runs (it failed as 'onnxruntime cannot run the source model', advising sample inputs,
    which changed nothing)."""

    def odd(values: Iterable[onnx.ValueInfoProto]) -> list[tuple[str, str]]:
        return [
            (value.name, onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type))
            for value in values
            if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type in _NO_NUMPY
        ]

    outputs = odd(model.graph.output)
    if not outputs or odd(model.graph.input):  # such inputs: their own refusal says it (inputs.py)
        return
    named = ", ".join(f"{name!r} ({kind.lower()})" for name, kind in outputs)
    settings_hint, _ = hints(job)
    raise VerifyError(
        f"cannot verify it: its output(s) {named} have a type onnxruntime's Python API cannot return as "
        f"numpy arrays, so the cook cannot compare them; set `verify: false` in {settings_hint} to cook it "
        "unverified (the runtime check still loads it in the target's onnxruntime), or give the model "
        "float16/float32 outputs (a Cast at its end)"
    )


def _nonempty_inputs(
    job: CookJob, model: onnx.ModelProto, settings: CookSettings, inputs: VerifyInputs
) -> tuple[VerifyInputs, tuple[dict[str, Any], dict[str, tuple[float, float]], dict[str, Any]]]:
    """Synthesized inputs drawn again as floats in [0, 1), where every output of the source was empty
    on the first ones (``feeds.feeds_for`` tried the other sizes), with the source's references on
    them; a VerifyError naming the fixes where every output is empty on those too: a verification
    that compares nothing must not pass."""
    unit = _unit_floats(job, model, inputs)
    references = _references(job, model, unit, settings)
    if not all_empty(references[0]):
        return unit, references
    settings_hint, inputs_hint = hints(job)
    sizes = ", ".join(f"{name}={size}" for name, size in inputs.free_dims.items())
    raise VerifyError(
        f"every output of the source ({', '.join(map(repr, references[0]))}) is empty (size 0) on the "
        f"synthesized inputs{f' ({sizes})' if sizes else ''}, and on {UNIT_FLOATS}: the cooked model's "
        f"outputs would be compared with nothing, and verify nothing; ship sample inputs on which it "
        f"gives outputs as {inputs_hint} (numpy.savez, keys = input names), or set `verify: false` in "
        f"{settings_hint} to cook it unverified"
    )


def _on_unit_floats(
    job: CookJob,
    model: onnx.ModelProto,
    blob: bytes,
    settings: CookSettings,
    inputs: VerifyInputs,
    failure: VerifyError,
) -> tuple[VerifyInputs, dict[str, Any], dict[str, Any], list, dict[str, Any]]:
    """Verification again on floats uniform in [0, 1), where the synthesized inputs are
    ill-conditioned for the source (``conditioning``); re-raises ``failure`` where they are not, and
    says so where sample inputs are."""
    if not settings.verify_scale:  # explicit rtol/atol: the user's bounds, whatever the inputs' swing
        raise failure
    of_range = VERIFY_ATOL_OF_RANGE.get(settings.precision, 0.0)
    try:
        swung = input_swing(model, inputs.feeds, settings, of_range, job.platform_dir)
    except Exception:  # onnxruntime's errors on the nudged inputs: the failure stands as it is
        raise failure from None
    if not swung:
        raise failure
    inputs_hint = hints(job)[1]
    if inputs.origin != "synthesized":
        raise VerifyError(
            f"the cooked model's outputs differ from the source's: {_what_differs(failure)}; but the "
            f"source itself is ill-conditioned on {inputs.origin} (one float32 step up on every input moves "
            f"{swing_text(swung)}), so no bound tells a correct cook from a wrong one on them: make "
            f"{inputs.origin} from real data the model was made for"
        ) from None
    unit = _unit_floats(job, model, inputs)
    feeds = unit.feeds
    try:
        reference, noise, default_level = _references(job, model, unit, settings)
    except ModelError:  # the source does not run on them: the first inputs' failure stands
        raise failure from None
    try:
        results = verify(blob, reference, feeds, settings, noise, default_level)
    except VerifyError as again:
        try:
            still = input_swing(model, feeds, settings, of_range, job.platform_dir)
        except Exception:  # onnxruntime's errors on the nudged inputs: as if well-conditioned
            still = []
        if still:
            raise VerifyError(
                ill_conditioned_message(swung, still, _what_differs(again), inputs_hint)
            ) from None
        raise VerifyError(
            f"{again} (on {UNIT_FLOATS}: the source is ill-conditioned on floats from a normal distribution, "
            f"where one float32 step up on every input moves {swing_text(swung)})"
        ) from None
    moved = {r.name: [r.rel_l2, r.of_range] for r in swung}
    return unit, reference, default_level, results, {"floats": UNIT_FLOATS, "normal_floats_swing": moved}


def _what_differs(error: VerifyError) -> str:
    """The outputs a failed comparison found different, without its advice on bounds."""
    return differences(list(error.failed)) if error.failed else str(error)


def _rounding_noise(
    model: onnx.ModelProto, feeds: Mapping[str, Any], reference: Mapping[str, Any], job: CookJob
) -> tuple[dict[str, tuple[float, float]], dict[str, Any]]:
    """How far onnxruntime's own default-level optimizations move the source's outputs on these
    inputs (onnx_cooker.cook.verify.rounding_noise), and those outputs; none where that run fails (the
    fixed scale applies)."""

    def run() -> dict[str, Any]:
        memo = reference_memo_dir(job.platform_dir.parent)
        return reference_outputs(model, feeds, job.platform_dir, memo, optimized=True)

    try:
        # in a child process of its own: onnxruntime's default level crashes outright on some models
        # (a segfault in a level-3 optimizer), which is as uninformative here as a refusal
        optimized = run_isolated(run)
    except Exception:  # an optimizer onnxruntime applies at its default level fails on this model
        return {}, {}
    if isinstance(optimized, Crash):
        return {}, {}
    return rounding_noise(reference, optimized), optimized


def _verify_data(
    feeds: Mapping[str, Any], reference: Mapping[str, Any], also: Mapping[str, Any] | None = None
) -> bytes:
    """Inputs and source outputs for the runtime check, as an .npz it reads without pickle
    (``also/<name>``: a second output an EP may match instead, the source's unoptimized run).

    Strings are stored as fixed-width unicode. Sequences, optionals and maps have no such form: then
    only the inputs are stored, and the runtime check runs the model without comparing.
    """
    arrays = {f"input/{k}": v for k, v in feeds.items()}
    if all(isinstance(value, np.ndarray) for value in reference.values()):
        arrays |= {f"output/{k}": v for k, v in reference.items()}
        arrays |= {f"also/{k}": v for k, v in (also or {}).items() if isinstance(v, np.ndarray)}
    buffer = io.BytesIO()
    np.savez(
        buffer,
        **{key: value.astype(np.str_) if value.dtype == object else value for key, value in arrays.items()},
    )
    return buffer.getvalue()
