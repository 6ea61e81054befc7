"""Load and run cooked blobs in whatever onnxruntime this interpreter has; print a JSON report.

Runs inside the isolated environment of a target's exact onnxruntime version, started by
``onnx_cooker.build.target_check``; imports only the runtime loader, numpy and the standard library.

Each blob is loaded the ways a game loads it, each compared with the source's outputs: from memory
(``session_from_blob``) and from its file (``Bundle.session``), along the load path the loader
picks in this version (where onnxruntime refuses a faster one for the model, the fallback it takes
is what is compared; the report names the refusal); every load must give the source's outputs.
Where the loader uses behaviour onnxruntime does not promise (``UNPROMISED``), the report also
records whether the weights were used in place: the caller's buffer zeroed after the session was
made, do the outputs change? (Not where optimizers computed new weights: then "not in place".)

Then it measures where the nodes run (``onnx_cooker.build.placement``): each blob loaded as a game
loads it, on the platform's EPs this onnxruntime package offers, its outputs compared there too; an
EP the package cannot run here is recorded as not measured, with the reason.

    python -m onnx_cooker.build.target_check_worker <package> <platform dir> <name> [<name> ...]
"""

from __future__ import annotations

import functools
import json
import mmap
import os
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from onnx_cooker.build.load_failure import cannot_load
from onnx_cooker.build.placement import measure, not_measurable, preferred_ep
from onnx_cooker.cook.compare import RANDOM_SEED, compare
from onnx_cooker.layout import CHECKING_MODEL, entry_path, verify_data_path
from onnx_cooker.runtime import BundleError
from onnx_cooker.runtime import session_from_blob as _session_from_blob
from onnx_cooker.runtime.blob import check_blob as _check_blob
from onnx_cooker.runtime.frames import Frame
from onnx_cooker.runtime.loadpaths import BlobFile, LoadPath
from onnx_cooker.runtime.ortweights import shareable_weights
from onnx_cooker.runtime.session import load_info, session_from_checked
from onnx_cooker.settings.advice import lower_level_helps, onnx_instead_for, tolerance_for

# The cooker loads the blobs it wrote whatever their size: a model over the loader's 2 GiB default is
# checked as a game that raised max_model_size for it loads it.
TRUSTED_SIZE = 1 << 62
session_from_blob = functools.partial(_session_from_blob, max_model_size=TRUSTED_SIZE)
check_blob = functools.partial(_check_blob, max_model_size=TRUSTED_SIZE)

CPU_ONLY = ["CPUExecutionProvider"]
# Paths whose in-place use rests on behaviour onnxruntime does not document: proven on every check.
UNPROMISED = frozenset({LoadPath.ONNX_SHARED_INITIALIZERS, LoadPath.ORT_SHARED_INITIALIZERS})
# for the zeroed copy of _prove_in_place: a path that copies the weights, by format
FALLBACK = {"onnx": LoadPath.ONNX_EXTERNAL_INITIALIZERS, "ort": LoadPath.ORT_BYTES}


def check_model(platform_dir: Path, name: str, package: str = "onnxruntime") -> dict[str, Any]:
    entry = json.loads(entry_path(platform_dir, name).read_text(encoding="utf-8"))
    settings = entry.get("settings") or {}  # the model's resolved settings, for the advice given
    platform = settings.get("platform") or platform_dir.name
    blob_path = platform_dir / entry["file"]
    blob = blob_path.read_bytes()
    try:
        session = session_from_blob(blob, providers=CPU_ONLY)
    except BundleError as exc:
        return {"ok": False, "error": cannot_load(exc, entry.get("format"), platform, name, settings)}
    data_path = verify_data_path(platform_dir, name)
    if not data_path.is_file():
        return _placed_only(blob, None, package, "loaded only (verify is off for this model)", settings)
    try:
        with np.load(data_path, allow_pickle=False) as data:
            feeds = {k.removeprefix("input/"): data[k] for k in data.files if k.startswith("input/")}
            expected = {k.removeprefix("output/"): data[k] for k in data.files if k.startswith("output/")}
            also = {k.removeprefix("also/"): data[k] for k in data.files if k.startswith("also/")}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # fails its model, not the check
        return {"ok": False, "error": f"cannot read {data_path.name}: {exc}"}
    names = list(expected) or None  # no stored outputs (sequences, maps): run, do not compare
    # The tolerances the cook verified with: the settings', raised for a lower-precision variant.
    tolerances = {**entry["settings"], **entry.get("verification", {})}
    noise = {
        output["name"]: (output.get("noise_rel_l2", 0.0), output.get("noise_of_range", 0.0))
        for output in entry.get("verification", {}).get("outputs", [])
    }

    cooked_differences = [o.get("max_abs", 0.0) for o in entry.get("verification", {}).get("outputs", [])]

    def outputs_of(made: onnxruntime.InferenceSession) -> dict[str, Any]:
        return dict(zip(names or [], made.run(names, feeds), strict=True))

    def problem(made: onnxruntime.InferenceSession) -> tuple[str | None, list[Any]]:
        actual = outputs_of(made)
        rtol, atol = tolerances["rtol"], tolerances["atol"]
        bounds = (tolerances.get("atol_of_range", 0.0), tolerances.get("scale", 0.0))
        results = compare(expected, actual, rtol, atol, *bounds, noise)
        for index, r in enumerate(results):  # verified at the default level: or the unoptimized run
            if not r.ok and r.name in also:
                (other,) = compare({r.name: also[r.name]}, {r.name: actual[r.name]}, rtol, atol, *bounds)
                results[index] = other if other.ok else r
        failed = [r for r in results if not r.ok]
        if not failed:
            return None, results
        details = ", ".join(
            f"{r.name}: {r.worst}"
            if r.max_abs == float("inf") and r.worst
            else f"{r.name}: max abs {r.max_abs:.3g}"
            for r in failed
        )
        message = f"outputs differ beyond rtol={rtol:g}, atol={atol:g} ({details})"
        # an explicit atol turns the scale rule off for every output: it must hold the cook's
        # differences and every output's here, not only the failed ones'
        worst = max([r.max_abs for r in results] + cooked_differences)
        accept = tolerance_for(platform, worst, name)
        if accept is not None:
            message += f"; where a difference that size is acceptable, accept it: {accept}"
        return message, results

    try:
        if names is None:
            session.run(None, feeds)
            return _placed_only(
                blob, feeds, package, "ran (its outputs have no .npz form to compare)", settings
            )
        error, results = problem(session)
    except Exception as exc:  # onnxruntime's run errors
        return {"ok": False, "error": f"fails to run: {exc}"}
    cooked_with = (entry.get("cooked_with") or {}).get("onnxruntime")
    if error is not None and cooked_with not in (None, onnxruntime.__version__):
        error += (
            f" (onnxruntime {onnxruntime.__version__} computes it differently from {cooked_with}, the cook's)"
        )
    # the tolerance advice answers this comparison only: not a load path's own mismatch (a loader bug)
    advised = error is not None and "accept it:" in error
    paths = load_paths(blob_path, blob, session, error, problem, outputs_of)
    error = error or (
        f"load path {paths['file']['path']} (from the blob file): {paths['file']['error']}"
        if paths["file"]["error"]
        else None
    )
    placement, placement_error = placement_of(
        blob, feeds, problem, package, settings, sizes_hint=_sizes_hint(entry, name)
    )
    return {
        "ok": (error or placement_error) is None,
        "error": error or placement_error,
        # the fix is in the message: the EP's, or the tolerance for a difference in results
        "advised": (error is None and placement_error is not None) or advised,
        "outputs": [r.__dict__ for r in results],
        "load_paths": paths,
        **({"placement": placement} if placement is not None else {}),
    }


def _placed_only(
    blob: bytes, feeds: Mapping[str, Any] | None, package: str, outputs: str, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The report of a model whose outputs are not compared: where it runs decides."""
    placement, error = placement_of(blob, feeds, None, package, settings)
    placed = {"placement": placement} if placement is not None else {}
    return {"ok": error is None, "error": error, "outputs": outputs, **placed, "advised": error is not None}


def _sizes_hint(entry: Mapping[str, Any], name: str) -> str:
    """Where the verification inputs were synthesized with free dimensions at sizes of the cook's
    choosing: how to run the check at the sizes the game uses (an EP may refuse only the former:
    OpenVINO fails a PaddleOCR recognizer at height 1 that it runs at 48)."""
    verification = entry.get("verification") or {}
    dims = verification.get("default_dims") or {}
    if verification.get("inputs") != "synthesized" or not dims:
        return ""
    sizes = ", ".join(f"{dim}={size}" for dim, size in dims.items())
    return (
        f"; the check ran it on synthesized inputs ({sizes}): where the game feeds other sizes, give them "
        f"(`verify_dims` in {name}.cook.yaml, or {name}.inputs.npz) and cook again, so that it runs those"
    )


def placement_of(
    blob: bytes,
    feeds: Mapping[str, Any] | None,
    problem: Callable[[onnxruntime.InferenceSession], tuple[str | None, list[Any]]] | None,
    package: str,
    settings: Mapping[str, Any] | None = None,
    *,
    sizes_hint: str = "",
) -> tuple[dict[str, Any] | None, str | None]:
    """Where the blob's nodes run when a game loads it with its preferred EPs in this onnxruntime
    package, and the error that fails the check: the EP fails to create a session (never replaced
    by the CPU behind the platform's back) or computes other outputs than the source. ``sizes_hint``
    ends the message of a run that fails (``_sizes_hint``)."""
    header = check_blob(blob).header
    preferred = preferred_ep(header.execution_providers)
    if preferred == CPU_ONLY[0]:
        return None, None  # the platform prefers the CPU: nothing to prove
    measured_with = f"{package} {onnxruntime.__version__}"
    reason = not_measurable(preferred, package, onnxruntime.get_available_providers())
    if reason is not None:
        return {
            "measured": False,
            "reason": reason,
            "preferred": preferred,
            "measured_with": measured_with,
        }, None

    def make(options: onnxruntime.SessionOptions) -> onnxruntime.InferenceSession:
        return session_from_blob(blob, session_options=options)  # the blob's EPs, as a game loads it

    def make_cpu(options: onnxruntime.SessionOptions) -> onnxruntime.InferenceSession:
        return session_from_blob(blob, providers=CPU_ONLY, session_options=options)

    try:
        placement = measure(make, make_cpu, feeds, header.model_format, preferred, measured_with)
        error = problem(session_from_blob(blob))[0] if problem is not None else None
    except BundleError as exc:
        failed = {"measured": False, "reason": "the session failed", "preferred": preferred}
        return {**failed, "measured_with": measured_with}, (
            f"{preferred} ({measured_with}) could not create a session: {exc}. Nothing was retried on the "
            f"CPU; {_session_hint(blob, header, settings or {}, str(exc))}"
        )
    except Exception as exc:  # noqa: BLE001  onnxruntime's run errors
        failed = {"measured": False, "reason": "the model failed to run", "preferred": preferred}
        return {
            **failed,
            "measured_with": measured_with,
        }, (
            f"fails to run on {preferred} ({measured_with}): {exc}; "
            + ("the CPU EP runs this blob (the cook verified it there), so " if feeds is not None else "")
            + f"{preferred} cannot run this model: give the model "
            "`execution_providers` without it (its .cook.yaml, `platforms:` section for this platform), or "
            "list this platform in its `skip_platforms`" + sizes_hint
        )
    if error:
        error += f"; or take {preferred} out of this model's `execution_providers`, or `skip_platforms`"
    return placement, (f"on {preferred} ({measured_with}): {error}" if error else None)


def _out(platform: str) -> str:  # the EP off this model alone: the other models keep it
    eps = f"`platforms: {{{platform}: {{execution_providers: [CPUExecutionProvider]}}}}`"
    return f"give this model {eps} in its .cook.yaml, or list {platform} in its `skip_platforms`"


def _session_hint(blob: bytes, header: Any, settings: Mapping[str, Any], error: str) -> str:
    """What to try when the preferred EP cannot create a session: a graph input that is also a graph
    output (OpenVINO: "Duplicate definition of name") is named, since only the exporter can fix it;
    an EP that compiles no dynamic shape (OpenVINO's CPU plugin: "dynamic rank") gets the model's
    named free dims fixed (onnx-asr's Kaldi, NeMo, GigaAM and WeSpeaker frontends load so)."""
    try:
        cpu = session_from_blob(blob, providers=CPU_ONLY)
        inputs = {value.name for value in cpu.get_inputs()}
        passed = [value.name for value in cpu.get_outputs() if value.name in inputs]
        free = dict.fromkeys(d for v in cpu.get_inputs() for d in v.shape if isinstance(d, str) and d)
    except Exception:  # noqa: BLE001  the generic advice then
        passed, free = [], {}
    if "dynamic" in error and free:
        sized = ", ".join(f"{dim}: <size>" for dim in free)
        fixed = f"`platforms: {{{header.platform}: {{fixed_dims: {{{sized}}}}}}}`"
        where = f"{fixed} in its .cook.yaml"
        return f"fix its dims at the sizes the game feeds there, {where}; or {_out(header.platform)}"
    if passed:
        return (
            f"graph output(s) {', '.join(map(repr, passed))} are also graph inputs, which some EPs refuse: "
            "export the model with an Identity node before each such output (a name of its own), or "
            + _out(header.platform)
        )
    lower = lower_level_helps(settings.get("optimization_level"))
    advice = "try `optimization_level: basic` for this model; or " if lower else ""
    if header.model_format == "ort":
        advice += f"as ONNX: {onnx_instead_for(header.platform, settings)}; or "
    return advice + _out(header.platform)


def load_paths(
    blob_path: Path,
    blob: bytes,
    session: onnxruntime.InferenceSession,
    error: str | None,
    problem: Callable[[onnxruntime.InferenceSession], tuple[str | None, list[Any]]],
    outputs_of: Callable[[onnxruntime.InferenceSession], Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """The ways a game loads the blob in this onnxruntime, each compared with the source: from
    memory (``session``, made and compared by the caller) and from the blob file; the unpromised
    door's in-place use recorded. Returns {source: {"path", "in_place", "error", ...}}."""
    info = load_info(session)
    report: dict[str, dict[str, Any]] = {
        "memory": {
            "path": info.path.value,
            "in_place": info.in_place,
            "error": error,
            "refused": info.refused,
        }
    }
    try:
        made = _from_file(blob_path)
        file_error, _ = problem(made)
        file_info = load_info(made)
        report["file"] = {"path": file_info.path.value, "in_place": file_info.in_place, "error": file_error}
        del made
    except Exception as exc:  # noqa: BLE001  a BundleError or a run error: this path fails
        report["file"] = {"path": None, "in_place": False, "error": f"{type(exc).__name__}: {exc}"}
    chosen = info.path
    if chosen in UNPROMISED and not error:
        # Outputs equal is the proof that matters (checked above); whether the weights are used in
        # place is recorded: onnxruntime computes new weights of its own where optimizers fuse
        # nodes (Conv+BatchNormalization), on every path.
        try:
            report["memory"]["in_place_proof"] = _prove_in_place(blob, chosen, outputs_of)
        except Exception as exc:  # noqa: BLE001  recorded, not fatal: the loads above passed
            report["memory"]["in_place_proof"] = f"not shown ({type(exc).__name__}: {exc})"
    return report


def _from_file(blob_path: Path) -> onnxruntime.InferenceSession:
    """What ``Bundle.session`` does with a blob file: map it, and offer it to onnxruntime."""
    fd = os.open(blob_path, os.O_RDONLY)
    try:
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        checked = check_blob(mapping)
        return session_from_checked(checked, providers=CPU_ONLY, model_file=BlobFile(fd, str(blob_path)))
    finally:
        os.close(fd)


def _prove_in_place(
    blob: bytes, path: LoadPath, outputs_of: Callable[[onnxruntime.InferenceSession], Mapping[str, Any]]
) -> str:
    """ "in place", "not in place", or "not observable" (the outputs do not depend on the weights'
    values): a session made from a copy of the blob (prepacking off, so that no packed copy hides
    the weights), then the copy's weights zeroed."""
    buffer = bytearray(blob)
    session = session_from_blob(buffer, providers=CPU_ONLY, low_memory=True, load_path=path.value)
    before = outputs_of(session)
    if any(not np.array_equal(np.asarray(v), np.asarray(before[k])) for k, v in outputs_of(session).items()):
        return "not observable (the outputs change from run to run: random operators)"
    header = check_blob(blob).header
    for start, size in _shared_spans(blob, header.frames, path):
        buffer[start : start + size] = bytes(size)
    after = outputs_of(session)
    changed = any(not np.array_equal(np.asarray(before[k]), np.asarray(after[k])) for k in before)
    if changed:
        return "in place"
    # Unchanged: the weights were copied, or the outputs do not depend on their values. A session
    # that copies the zeroed weights tells which.
    zeroed = session_from_checked(
        check_blob(bytes(buffer), check_raw=False),
        providers=CPU_ONLY,
        low_memory=True,
        load_path=FALLBACK[header.model_format].value,
    )
    depends = any(
        not np.array_equal(np.asarray(before[k]), np.asarray(v)) for k, v in outputs_of(zeroed).items()
    )
    return "not in place" if depends else "not observable"


def _shared_spans(blob: bytes, frames: Sequence[Frame], path: LoadPath) -> list[tuple[int, int]]:
    """(offset, size) in the blob of the weights ``path`` hands onnxruntime in place."""
    if path != LoadPath.ORT_SHARED_INITIALIZERS:
        raw = [f for f in frames if f.section == "weights" and f.codec == "raw"]
        return [(f.data_offset, f.content_size) for f in raw]
    graph = next(f for f in frames if f.section == "graph")
    model = memoryview(blob)[graph.data_offset : graph.data_offset + graph.content_size]
    return [(graph.data_offset + w.offset, w.nbytes) for w in shareable_weights(model)]


def main(argv: list[str]) -> int:
    package, platform_dir, names = argv[0], Path(argv[1]), argv[2:]
    onnxruntime.set_seed(RANDOM_SEED)  # random operators draw what the cook's runs drew
    report = {
        "onnxruntime": onnxruntime.__version__,
        "package": package,
        "models": {},
    }
    for name in names:  # the parent names the model a crash (no report at all) happened on
        print(f"{CHECKING_MODEL}{name}", file=sys.stderr, flush=True)
        report["models"][name] = check_model(platform_dir, name, package)
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
