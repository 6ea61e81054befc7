"""The cook's checks on real inputs: the verification of the cooked blob through the loader
(against the source's outputs, with the inputs kept for the runtime check), and the precision
variant with its accuracy gate against the fp32 source."""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import onnx
import onnxruntime

from pipeline.cook.axiswalk import pinned_sizes, spatial_dims, spatial_sizes
from pipeline.cook.conditioning import UNIT_FLOATS, ill_conditioned_message, input_swing, swing_text
from pipeline.cook.dims import (
    DEFAULT_DIM_SIZE,
    RETRY_DIM_SIZE,
    SIGNAL_DIM_SIZE,
    SPATIAL_DIM_SIZE,
    WIDE_DIM_SIZE,
    bound_sizes,
    combinations_count,
    signal_sizes,
    unsized_dims,
    wide_sizes,
)
from pipeline.cook.inputs import as_input_types, load_inputs, synthesize_inputs, synthesized_hint
from pipeline.cook.job import CookJob
from pipeline.cook.large import session_input
from pipeline.cook.precision import (
    VERIFY_ATOL_OF_RANGE,
    verify_tolerances,
)
from pipeline.cook.source import SourceRead
from pipeline.cook.verify import (
    CPU_ONLY,
    DEFAULT_LEVEL,
    RANDOM_SEED,
    differences,
    reference_outputs,
    rounding_noise,
    selection_outputs,
    verify,
)
from pipeline.errors import ModelError, VerifyError
from pipeline.isolate import Crash, run_isolated
from pipeline.layout import (
    reference_memo_dir,
)
from pipeline.settings.resolve import CookSettings
from pipeline.steptimes import step


@dataclass(frozen=True)
class VerifyInputs:
    """The verification inputs and where they come from."""

    feeds: dict[str, Any]
    origin: str  # the .inputs.npz file's name, or "synthesized"
    # symbolic dims verify_dims does not size ("?" for a dim without a name) -> the size given them
    free_dims: dict[str, int] = field(default_factory=dict)
    tried: tuple[int, ...] = ()  # the sizes the source was run with them at, in order
    bound: int = 0  # then how many combinations of 1 and 2 (dims bound to each other)
    # the source's outputs on ``feeds`` where finding them ran it (not run again to verify)
    outputs: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # those of free_dims a weight sizes (dims.pinned_sizes): that size in every try
    pinned: dict[str, int] = field(default_factory=dict)


def feeds_for(job: CookJob, model: onnx.ModelProto, read: SourceRead) -> VerifyInputs:
    """The verification inputs: the sample inputs shipped beside the model, else synthesized."""
    asset = job.asset
    if asset.inputs_path is not None:
        feeds = load_inputs(asset.inputs_path, model, read.data[asset.inputs_path])
        return VerifyInputs(as_input_types(model, feeds), asset.inputs_path.name)
    settings_hint, inputs_hint = _hints(job)
    dims = dict(job.settings.verify_dims)
    pinned = {label: size for label, size in pinned_sizes(model).items() if label not in dims}
    dims |= pinned
    unsized = unsized_dims(model, dims)
    feeds = synthesize_inputs(model, dims, settings_hint=settings_hint, inputs_hint=inputs_hint)
    if not unsized:
        return VerifyInputs(feeds, "synthesized", dict(pinned), pinned=pinned)
    sizes, tried, bound = dict.fromkeys(unsized, DEFAULT_DIM_SIZE), (), 0
    # A convolution's free height and width are tried at SPATIAL_DIM_SIZE first: at 1 its kernels
    # read only their centre taps. Then every free dim at 1; where a conv net cannot run on 1x1,
    # at RETRY_DIM_SIZE (all of them), then at WIDE_DIM_SIZE but for a leading batch (a deep conv
    # net downsamples 32 to nothing), then a signal's length at SIGNAL_DIM_SIZE (an audio
    # frontend's STFT window is 400 samples), before the combinations of 1 and 2, which onnxruntime
    # may crash on (an integer division by a length of 0 frames). The outputs of a run that passes
    # are the verification's reference: the source is not run again.
    tiers = (
        (SPATIAL_DIM_SIZE, spatial_sizes(model, unsized, dims)),
        (DEFAULT_DIM_SIZE, sizes),
        (RETRY_DIM_SIZE, dict.fromkeys(unsized, RETRY_DIM_SIZE)),
        (WIDE_DIM_SIZE, wide_sizes(model, unsized, dims, spatial_dims(model))),
        (SIGNAL_DIM_SIZE, signal_sizes(model, unsized)),
    )
    done: list[dict[str, int]] = []
    for size, retried in tiers:
        if retried is None or retried in done:  # no such dims; only a batch is free (a run again)
            continue
        done.append(retried)
        try:
            wider = (
                feeds
                if retried is sizes
                else synthesize_inputs(
                    model, dims, free=retried, settings_hint=settings_hint, inputs_hint=inputs_hint
                )
            )
        except VerifyError:  # too large to synthesize (224 with the batch at 1 may not be)
            continue
        tried += (size,)
        if (outputs := _source_outputs(job, model, wider)) is not None:
            return VerifyInputs(wider, "synthesized", retried | pinned, tried, outputs=outputs, pinned=pinned)
    # Dims bound to each other (a KV cache's total = past + new): each at 1 or 2
    bound = combinations_count(unsized)
    found = run_isolated(lambda: _first_runnable(job, model, dims, unsized))
    if found is not None and not isinstance(found, Crash):
        feeds, sizes = found
    return VerifyInputs(feeds, "synthesized", sizes | pinned, tried, bound, pinned=pinned)


def _first_runnable(
    job: CookJob, model: onnx.ModelProto, dims: Mapping[str, int], unsized: list[str]
) -> tuple[dict[str, Any], dict[str, int]] | None:
    """The first of ``bound_sizes`` the source runs with, and its inputs (one session for all)."""
    settings_hint, inputs_hint = _hints(job)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    with session_input(model, job.platform_dir) as source:
        try:
            onnxruntime.set_seed(RANDOM_SEED)
            session = onnxruntime.InferenceSession(source, options, providers=CPU_ONLY)
        except Exception:  # the failure at 1 is reported
            return None
        for sizes in bound_sizes(unsized):
            feeds = synthesize_inputs(
                model, dims, free=sizes, settings_hint=settings_hint, inputs_hint=inputs_hint
            )
            try:
                session.run(None, feeds)
            except Exception:  # onnxruntime's errors on these sizes: the next ones
                continue
            return feeds, sizes
    return None


def _source_outputs(job: CookJob, model: onnx.ModelProto, feeds: Mapping[str, Any]) -> dict[str, Any] | None:
    """The source's outputs on ``feeds``; None where onnxruntime cannot run it on them.

    In a child process of its own (``run_isolated``): onnxruntime crashes on some models at sizes
    they do not take (onnx-asr's WeSpeaker frontend divides by a frame count of 0 with SIGFPE at a
    batch of 2 and fewer than 400 samples), and such a size is one more that does not run, not the
    end of the cook. Where every size fails, the caller runs the first again for its message."""
    memo = reference_memo_dir(job.platform_dir.parent)
    try:
        outputs = run_isolated(lambda: reference_outputs(model, feeds, job.platform_dir, memo))
    except Exception:  # onnxruntime's errors on the source; the caller reports them
        return None
    return None if isinstance(outputs, Crash) else outputs


def source_reference(job: CookJob, model: onnx.ModelProto, inputs: VerifyInputs) -> dict[str, Any]:
    """The source's outputs on ``inputs.feeds``: those found with them, else a run (raises onnxruntime's
    errors)."""
    if inputs.outputs is not None:
        return inputs.outputs
    return reference_outputs(
        model, inputs.feeds, job.platform_dir, reference_memo_dir(job.platform_dir.parent)
    )


def _hints(job: CookJob) -> tuple[str, str]:
    """Where the model's settings file is (or would be), and where its sample inputs would be."""
    settings = job.asset.settings_path or job.asset.path.with_suffix(".cook.yaml")
    return str(settings), str(job.asset.path.with_suffix(".inputs.npz"))


def cannot_run(job: CookJob, what: str, exc: BaseException, inputs: VerifyInputs) -> ModelError:
    """onnxruntime failed on the verification inputs; where the cook made them up, say how, and the fix."""
    settings_hint, inputs_hint = _hints(job)
    hint = ""
    if inputs.origin == "synthesized":
        free = [dim for dim in inputs.free_dims if dim not in inputs.pinned]
        made = synthesized_hint(free, inputs.tried, inputs_hint, settings_hint, inputs.bound, inputs.pinned)
        hint = f"; {made}"
    return ModelError(
        f"onnxruntime cannot run {what} on the verification inputs ({inputs.origin}): {exc}{hint}"
    )


def verify_blob(
    job: CookJob, model: onnx.ModelProto, blob: bytes, read: SourceRead
) -> tuple[dict[str, Any], bytes | None]:
    """The verification report, and its inputs with the source's outputs (an .npz) for the runtime check."""
    settings = verify_tolerances(job.settings)
    if not settings.verify:
        return {"skipped": "verify is false in the settings"}, None
    with step("verify: the source's outputs"):
        inputs = feeds_for(job, model, read)
        refuse_meaningless(inputs.feeds, inputs.origin)
        reference, noise, default_level = _references(job, model, inputs, settings)
    floats: dict[str, Any] = {}
    with step("verify: the cooked blob, through the loader"):
        try:
            results = verify(blob, reference, inputs.feeds, settings, noise, default_level)
        except VerifyError as failure:
            inputs, reference, default_level, results, floats = _on_unit_floats(
                job, model, blob, settings, inputs, failure
            )
    feeds, origin = inputs.feeds, inputs.origin
    # The runtime check compares the target's outputs with what each output verified against
    stored = {
        name: default_level[name] if result.passed_by == DEFAULT_LEVEL else value
        for (name, value), result in zip(reference.items(), results, strict=True)
    }
    report = {
        "inputs": origin,
        **({"default_dims": inputs.free_dims} if inputs.free_dims else {}),
        **floats,
        "rtol": settings.rtol,
        "atol": settings.atol,
        "scale": settings.verify_scale,
        **({"atol_of_range": of_range} if (of_range := VERIFY_ATOL_OF_RANGE.get(settings.precision)) else {}),
        "outputs": [asdict(r) for r in results],
    }
    return report, _verify_data(feeds, stored)


def _references(
    job: CookJob, model: onnx.ModelProto, inputs: VerifyInputs, settings: CookSettings
) -> tuple[dict[str, Any], dict[str, tuple[float, float]], dict[str, Any]]:
    """The source's outputs on the inputs, their rounding noise, and the default-level outputs of
    those a selection computes."""
    try:
        reference = source_reference(job, model, inputs)
    except Exception as exc:  # onnxruntime errors on the source itself
        raise cannot_run(job, "the source model", exc, inputs) from None
    noise, default_level = (
        _rounding_noise(model, inputs.feeds, reference, job) if settings.verify_scale else ({}, {})
    )
    # Only outputs a selection computes may take the default level as their reference: elsewhere
    # a difference between the source's two runs is precision lost (MatMulNBits' int8
    # activations), which takes the user's verify_scale
    if default_level:
        selected = selection_outputs(model)
        default_level = {name: value for name, value in default_level.items() if name in selected}
    return reference, noise, default_level


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
    settings_hint, inputs_hint = _hints(job)
    if inputs.origin != "synthesized":
        raise VerifyError(
            f"the cooked model's outputs differ from the source's: {_what_differs(failure)}; but the "
            f"source itself is ill-conditioned on {inputs.origin} (one float32 step up on every input moves "
            f"{swing_text(swung)}), so no bound tells a correct cook from a wrong one on them: make "
            f"{inputs.origin} from real data the model was made for"
        ) from None
    feeds = synthesize_inputs(
        model,
        {**dict(job.settings.verify_dims), **inputs.free_dims},
        settings_hint=settings_hint,
        inputs_hint=inputs_hint,
        unit_floats=True,
    )
    unit = replace(inputs, feeds=feeds, outputs=None)
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
    inputs (pipeline.cook.verify.rounding_noise), and those outputs; none where that run fails (the
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


def refuse_meaningless(feeds: Mapping[str, Any], origin: str) -> None:
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
