"""Build a correctly configured onnxruntime session from a cooked blob held in memory."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnxruntime

from .blob import DEFAULT_MAX_MODEL_SIZE, BlobHeader, Unpacked, unpack_blob
from .compat import format_version, parse_version
from .constants import ALLOWED_CONFIG_PREFIXES, OPTIMIZATION_LEVELS, UNSAFE_CONFIG_ENTRIES
from .errors import IncompatibleRuntimeError, SessionCreateError

log = logging.getLogger("pipeline.runtime")

CPU = "CPUExecutionProvider"
# DirectML can only share a session with the CPU EP (docs/design.md, "DirectML sessions").
EXCLUSIVE_WITH_CPU = frozenset({"DmlExecutionProvider"})
ProviderSpec = str | tuple[str, Mapping[str, Any]]
# progress(stage, fraction): stage "read" (Bundle.session), "decompress", then "session"; fraction 0.0
# when the stage starts and 1.0 when it ends. For a loading screen; called on the caller's thread.
Progress = Callable[[str, float], None]


def no_progress(stage: str, fraction: float) -> None:
    return None


_EXECUTION_MODES = {
    "sequential": onnxruntime.ExecutionMode.ORT_SEQUENTIAL,
    "parallel": onnxruntime.ExecutionMode.ORT_PARALLEL,
}
_LEVEL = onnxruntime.GraphOptimizationLevel
_OPTIMIZATION_LEVELS = dict(
    zip(
        OPTIMIZATION_LEVELS,
        (_LEVEL.ORT_DISABLE_ALL, _LEVEL.ORT_ENABLE_BASIC, _LEVEL.ORT_ENABLE_EXTENDED, _LEVEL.ORT_ENABLE_ALL),
        strict=True,
    )
)


def choose_providers(
    preference: Sequence[str], available: Sequence[str]
) -> tuple[list[str], list[tuple[str, str]]]:
    """The EPs to use, in order, and the (EP, reason) pairs that were skipped.

    Every preferred EP that this onnxruntime build offers, then the CPU EP as the fallback; an EP that
    must run alone with the CPU (DirectML) ends the list.
    """
    chosen: list[str] = []
    skipped: list[tuple[str, str]] = []
    for ep in preference:
        if ep == CPU:
            continue
        if ep not in available:
            skipped.append((ep, "not offered by this onnxruntime build"))
        elif chosen and (ep in EXCLUSIVE_WITH_CPU or chosen[0] in EXCLUSIVE_WITH_CPU):
            skipped.append((ep, f"cannot be combined with {chosen[0]}"))
        else:
            chosen.append(ep)
    chosen.append(CPU)
    return chosen, skipped


def check_runtime(header: BlobHeader, installed: str = onnxruntime.__version__) -> None:
    """Refuse a blob the installed onnxruntime is too old for, before it sees the bytes."""
    needed = parse_version(header.min_runtime_version)
    if parse_version(installed) < needed:
        kind = f"ORT format v{header.ort_format_version}" if header.ort_format_version else "ONNX"
        raise IncompatibleRuntimeError(
            f"model {header.name!r} ({header.platform}, {kind}) needs onnxruntime {format_version(needed)} "
            f"or newer, but {installed} is installed; upgrade onnxruntime to >= {format_version(needed)} "
            "or re-cook for this version (set runtime_version in the platform profile)"
        )


def _apply_session_options(options: onnxruntime.SessionOptions, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if key == "enable_mem_pattern":
            options.enable_mem_pattern = bool(value)
        elif key == "execution_mode":
            options.execution_mode = _EXECUTION_MODES[str(value)]
        elif key == "graph_optimization_level":
            options.graph_optimization_level = _OPTIMIZATION_LEVELS[str(value)]
        elif key in UNSAFE_CONFIG_ENTRIES:
            raise ValueError(f"{key} is refused: {UNSAFE_CONFIG_ENTRIES[key]}")
        elif not key.startswith(ALLOWED_CONFIG_PREFIXES):
            # Other entries (e.g. ep.context_file_path) can make an EP write files: not from a blob.
            raise ValueError(
                f"config entry {key!r} is not allowed in a blob ({', '.join(ALLOWED_CONFIG_PREFIXES)}*)"
            )
        else:
            options.add_session_config_entry(key, str(value))


def session_options_for(
    header: BlobHeader, providers: Sequence[str], base: onnxruntime.SessionOptions | None = None
) -> onnxruntime.SessionOptions:
    """Session options for this blob on these EPs: each EP's required options, saved optimizations.

    ``session.use_ort_model_bytes_for_initializers`` is never set: from Python it reads freed memory
    (docs/design.md, "Loading from memory").
    """
    options = base if base is not None else onnxruntime.SessionOptions()
    for ep in providers:
        try:
            _apply_session_options(options, header.ep_session_options.get(ep, {}))
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise SessionCreateError(f"model {header.name!r}: bad session option for {ep}: {exc}") from None
    # Only reached after decode_blob proved the bytes are the ones the cooker wrote. Set either way:
    # a caller may reuse one SessionOptions object for several blobs.
    replay = "1" if header.saved_runtime_optimizations else "0"
    options.add_session_config_entry("session.enable_saved_runtime_optimizations", replay)
    return options


def _provider_names(providers: Sequence[ProviderSpec]) -> list[str]:
    return [spec if isinstance(spec, str) else spec[0] for spec in providers]


def _with_options(header: BlobHeader, names: Sequence[str]) -> list[ProviderSpec]:
    return [(ep, {k: str(v) for k, v in header.provider_options.get(ep, {}).items()}) for ep in names]


def session_from_blob(
    data: bytes | bytearray | memoryview,
    *,
    providers: Sequence[ProviderSpec] | None = None,
    session_options: onnxruntime.SessionOptions | None = None,
    max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
    threads: int | None = None,
    low_memory: bool = False,
    progress: Progress | None = None,
) -> onnxruntime.InferenceSession:
    """An ``onnxruntime.InferenceSession`` for a cooked blob, created from memory.

    ``providers`` (names, or ``(name, options)`` pairs as onnxruntime takes them) overrides the blob's
    EP preference list; by default the preferred EPs this onnxruntime offers are used, then the CPU.
    The blob's per-EP session options are applied onto ``session_options`` (or fresh options); for a
    blob with external weights those options also receive its initializers, so use them for that
    blob only. Frames are decompressed on ``threads`` threads (default: one per core).

    Weights stored raw are used in place: the session keeps ``data`` alive, and a mutable ``data``
    (bytearray) must not be changed while the session lives.

    ``low_memory`` turns off weight prepacking (``session.disable_prepacking``): the session then
    keeps no packed second copy of MatMul/Conv weights and loads faster, but may run slower. It is
    off by default; measure inference with and without it (bench/results.md) before choosing it.
    ``progress(stage, fraction)``, if given, is called as each stage starts (0.0) and ends (1.0):
    ``"decompress"`` (checks and decompression), then ``"session"`` (onnxruntime builds the session),
    for a loading screen. Raises only ``BundleError`` subclasses.
    """
    report = progress or no_progress
    report("decompress", 0.0)
    unpacked = unpack_blob(data, max_model_size=max_model_size, threads=threads)
    report("decompress", 1.0)
    report("session", 0.0)
    session = session_from_unpacked(
        unpacked, providers=providers, session_options=session_options, low_memory=low_memory
    )
    report("session", 1.0)
    return session


def session_from_unpacked(
    unpacked: Unpacked,
    *,
    providers: Sequence[ProviderSpec] | None = None,
    session_options: onnxruntime.SessionOptions | None = None,
    low_memory: bool = False,
) -> onnxruntime.InferenceSession:
    """``session_from_blob`` after ``unpack_blob``: for callers that drop the compressed blob before
    onnxruntime makes its own copies of the model (``Bundle.session``)."""
    header = unpacked.header
    check_runtime(header)
    if providers is None:
        names, skipped = choose_providers(header.execution_providers, onnxruntime.get_available_providers())
        specs = _with_options(header, names)
        why = "; ".join(f"skipped {ep} ({reason})" for ep, reason in skipped)
        log.info("%s: using %s%s", header.name, ", ".join(names), f"; {why}" if why else "")
    else:
        specs = list(providers)
        names = _provider_names(specs)
        log.info("%s: using %s (given by the caller)", header.name, ", ".join(names))
    options = session_options_for(header, names, session_options)
    if low_memory:
        options.add_session_config_entry("session.disable_prepacking", "1")
    weights = _add_weights(options, unpacked)
    try:
        session = onnxruntime.InferenceSession(unpacked.model, sess_options=options, providers=specs)
    except Exception as exc:  # onnxruntime raises several unrelated types; keep our promise of one
        raise SessionCreateError(
            f"onnxruntime {onnxruntime.__version__} could not create a session for model {header.name!r} "
            f"({header.platform}, {header.model_format}): {exc}"
        ) from None
    if weights:
        # Shared initializers are used in place: their memory must live as long as the session.
        session._onnx_cooker_weights = (unpacked.segments, weights)  # type: ignore[attr-defined]
    return session


def _add_weights(options: onnxruntime.SessionOptions, unpacked: Unpacked) -> list[onnxruntime.OrtValue]:
    """Hand the weights section to onnxruntime without copying it.

    ``add_external_initializers`` satisfies the graph's external-data references (onnxruntime checks
    them while it builds the graph); registering the same values with ``add_initializer`` makes the
    session use that memory in place instead of keeping a copy of its own.
    """
    if unpacked.header.weights is None:
        return []
    names = [ref.name for ref in unpacked.header.weights.tensors]
    values = [
        onnxruntime.OrtValue.ortvalue_from_numpy(unpacked.tensor(ref))
        for ref in unpacked.header.weights.tensors
    ]
    try:
        options.add_external_initializers(names, values)
        for name, value in zip(names, values, strict=True):
            options.add_initializer(name, value)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise SessionCreateError(
            f"model {unpacked.header.name!r}: onnxruntime {onnxruntime.__version__} refused its weights: "
            f"{exc}"
        ) from None
    return values
