"""The verification inputs of a cook: the sample inputs shipped beside the model, else inputs
synthesized at sizes the source runs with (``feeds_for``), and the source's outputs on them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime

from onnx_cooker.cook.axiswalk import (
    collapsed,
    has_strided,
    pinned_sizes,
    spatial_dims,
    spatial_sizes,
    stepped_dims,
)
from onnx_cooker.cook.dims import (
    DEFAULT_DIM_SIZE,
    RETRY_DIM_SIZE,
    SEQUENCE_DIM_SIZE,
    SIGNAL_DIM_SIZE,
    SPATIAL_DIM_SIZE,
    SPATIAL_MAX_BYTES,
    WIDE_DIM_SIZE,
    bound_sizes,
    combinations_count,
    free_shapes,
    signal_sizes,
    unsized_dims,
    wide_sizes,
)
from onnx_cooker.cook.facts import onnx_graphs
from onnx_cooker.cook.inputs import as_input_types, load_inputs, synthesize_inputs, synthesized_hint
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.large import session_input
from onnx_cooker.cook.source import SourceRead
from onnx_cooker.cook.verify import CPU_ONLY, RANDOM_SEED, reference_outputs
from onnx_cooker.errors import ModelError, VerifyError
from onnx_cooker.isolate import Crash, run_isolated
from onnx_cooker.layout import reference_memo_dir


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
    settings_hint, inputs_hint = hints(job)
    dims = dict(job.settings.verify_dims)
    pinned = {label: size for label, size in pinned_sizes(model).items() if label not in dims}
    dims |= pinned
    unsized = unsized_dims(model, dims)
    feeds = synthesize_inputs(model, dims, settings_hint=settings_hint, inputs_hint=inputs_hint)
    if not unsized:
        return VerifyInputs(feeds, "synthesized", dict(pinned), pinned=pinned)
    sizes, tried, bound = dict.fromkeys(unsized, DEFAULT_DIM_SIZE), (), 0
    # A convolution's free height and width are tried at SPATIAL_DIM_SIZE first: at 1 its kernels
    # read only their centre taps. Then every free dim but a batch at SEQUENCE_DIM_SIZE: at 1
    # nothing mixes along a sequence (attention, a recurrence). Then at 1; where a conv net cannot run on 1x1,
    # at RETRY_DIM_SIZE (all of them), then at WIDE_DIM_SIZE but for a leading batch (a deep conv
    # net downsamples 32 to nothing), then a signal's length at SIGNAL_DIM_SIZE (an audio
    # frontend's STFT window is 400 samples), before the combinations of 1 and 2, which onnxruntime
    # may crash on (an integer division by a length of 0 frames). The outputs of a run that passes
    # are the verification's reference: the source is not run again. Sizes at which every output is
    # empty compare nothing: the next ones are tried (and where none gives more, the verification
    # refuses them, naming the fix).
    sliding = spatial_dims(model) | stepped_dims(model)  # not a batch where leading
    tiers = (
        (SPATIAL_DIM_SIZE, spatial_sizes(model, unsized, dims)),
        (
            SEQUENCE_DIM_SIZE,
            None
            if quantizes_dynamically(model)
            else wide_sizes(model, unsized, dims, sliding, SEQUENCE_DIM_SIZE, SPATIAL_MAX_BYTES),
        ),
        (DEFAULT_DIM_SIZE, sizes),
        (RETRY_DIM_SIZE, dict.fromkeys(unsized, RETRY_DIM_SIZE)),
        (WIDE_DIM_SIZE, wide_sizes(model, unsized, dims, sliding)),
        (SIGNAL_DIM_SIZE, signal_sizes(model, unsized)),
    )
    done: list[tuple[int, dict[str, int]]] = []
    for size, retried in tiers:
        if retried is not None and all(retried != other for _, other in done):  # a run again otherwise
            done.append((size, retried))
    # Sizes at which a convolution or pooling leaves one step along a free axis (a wav2vec2-style
    # encoder's one frame from 64 samples) mix nothing after it: tried after all the others
    if has_strided(model):
        symbolic = free_shapes(model, dims)
        mixing = [not collapsed(model, dims, retried, symbolic) for _, retried in done]
        done = [tier for tier, ok in zip(done, mixing, strict=True) if ok] + [
            tier for tier, ok in zip(done, mixing, strict=True) if not ok
        ]
    empty: VerifyInputs | None = None  # the first that ran with every output empty
    for size, retried in done:
        ran = _tier(job, model, dims, retried, pinned, feeds if retried is sizes else None, tried + (size,))
        tried += (size,) if ran is not None else ()
        if isinstance(ran, VerifyInputs) and not all_empty(ran.outputs):
            return ran
        if isinstance(ran, VerifyInputs):  # compares nothing: other sizes first
            empty = empty or ran
    if empty is not None:  # the verification refuses it (checking.verify_blob), naming the fix
        return empty
    # Dims bound to each other (a KV cache's total = past + new): each at 1 or 2
    bound = combinations_count(unsized)
    found = run_isolated(lambda: _first_runnable(job, model, dims, unsized))
    if found is not None and not isinstance(found, Crash):
        feeds, sizes = found
    return VerifyInputs(feeds, "synthesized", sizes | pinned, tried, bound, pinned=pinned)


def _tier(
    job: CookJob,
    model: onnx.ModelProto,
    dims: Mapping[str, int],
    free: dict[str, int],
    pinned: dict[str, int],
    feeds: dict[str, Any] | None,
    tried: tuple[int, ...],
) -> VerifyInputs | bool | None:
    """The inputs at these sizes where the source runs on them (with its outputs); False where it
    does not; None where they are too large to synthesize (224 with the batch at 1 may not be).
    ``feeds``: those already synthesized at these sizes."""
    settings_hint, inputs_hint = hints(job)
    try:
        if feeds is None:
            feeds = synthesize_inputs(
                model, dims, free=free, settings_hint=settings_hint, inputs_hint=inputs_hint
            )
    except VerifyError:
        return None
    if (outputs := _source_outputs(job, model, feeds)) is None:
        return False
    return VerifyInputs(feeds, "synthesized", free | pinned, tried, outputs=outputs, pinned=pinned)


def all_empty(outputs: Mapping[str, Any] | None) -> bool:
    """Whether every output is an empty tensor (size 0): a comparison of them compares nothing."""
    return bool(outputs) and all(
        isinstance(value, np.ndarray) and value.size == 0 for value in outputs.values()
    )


def quantizes_dynamically(model: onnx.ModelProto) -> bool:
    """Whether the model quantizes activations with scales it computes from them (DynamicQuantizeLinear,
    onnxruntime's DynamicQuantize* contrib operators): the sequence tier is not for it. Each scale
    follows the whole tensor, so a value one rounding away moves every value of it a step, and longer
    sequences turn rounding into different outputs between onnxruntime versions and EPs: traceforge's
    int8 decoder (PyPI) verified at 16 against its default-level run, and then differed by 16.7 in
    onnxruntime 1.24.4, the windows-dml target (at a sequence of 1: no difference)."""
    return any(
        node.op_type.startswith("DynamicQuantize") for g in onnx_graphs(model.graph) for node in g.node
    )


def _first_runnable(
    job: CookJob, model: onnx.ModelProto, dims: Mapping[str, int], unsized: list[str]
) -> tuple[dict[str, Any], dict[str, int]] | None:
    """The first of ``bound_sizes`` the source runs with, and its inputs (one session for all)."""
    settings_hint, inputs_hint = hints(job)
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


def hints(job: CookJob) -> tuple[str, str]:
    """Where the model's settings file is (or would be), and where its sample inputs would be."""
    settings = job.asset.settings_path or job.asset.path.with_suffix(".cook.yaml")
    return str(settings), str(job.asset.path.with_suffix(".inputs.npz"))


def cannot_run(job: CookJob, what: str, exc: BaseException, inputs: VerifyInputs) -> ModelError:
    """onnxruntime failed on the verification inputs; where the cook made them up, say how, and the fix."""
    settings_hint, inputs_hint = hints(job)
    hint = ""
    if inputs.origin == "synthesized":
        free = [dim for dim in inputs.free_dims if dim not in inputs.pinned]
        made = synthesized_hint(free, inputs.tried, inputs_hint, settings_hint, inputs.bound, inputs.pinned)
        hint = f"; {made}"
    return ModelError(
        f"onnxruntime cannot run {what} on the verification inputs ({inputs.origin}): {exc}{hint}"
    )


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
