"""One conformance case, end to end: baseline with plain onnxruntime, then a cook per platform.

The cook goes through the same code path as ``doit cook``: the model and its inputs are written to an
assets folder, found by ``onnx_cooker.settings.assets.discover``, resolved with
``onnx_cooker.settings.resolve.resolve`` and
cooked by ``onnx_cooker.build.run_job.cook``, whose own verification runs on the case's inputs
(``<name>.inputs.npz``). The blob is then loaded with ``onnx_cooker.runtime.session_from_blob`` and
compared with the case's reference outputs.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import yaml

from onnx_cooker.build.run_job import cook
from onnx_cooker.cook.facts import default_opset, onnx_facts, ort_facts
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.source import FIRST_IR_WITHOUT_INITIALIZER_INPUTS
from onnx_cooker.errors import CookError
from onnx_cooker.runtime import BundleError, decode_blob, session_from_blob
from onnx_cooker.runtime.compat import min_runtime_for, parse_version
from onnx_cooker.settings.assets import discover
from onnx_cooker.settings.resolve import CookSettings, Platform, load_model_settings, resolve

from . import outcome
from .cases import Case

CPU = ["CPUExecutionProvider"]
MAX_DETAIL = 400
_WHERE = re.compile(r"^\S+\.onnx \(model '[^']*'(, platform '[^']*')?\):? ")
# The cook of a case whose inputs no .inputs.npz can hold runs with `verify: false` in its .cook.yaml
# (what a user has to do today); the runner still compares the cooked outputs with the references.
UNVERIFIED = "verify: false"


@dataclass
class PlatformResult:
    category: str
    detail: str = ""
    seconds: float = 0.0
    cooked: tuple[int, int] | None = None  # a passing blob's (opset, IR)


@dataclass
class CaseResult:
    kind: str
    name: str
    baseline: str  # "pass" or why plain onnxruntime fails the case
    platforms: dict[str, PlatformResult] = field(default_factory=dict)
    inputs: str = ""  # how the cook's verification got its inputs
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_case(case: Case, platforms: Sequence[Platform], work: Path, build: Path) -> CaseResult:
    """Baseline, then cook and check on every platform. ``work`` is this process's scratch folder;
    ``build`` holds every platform's blobs (the runtime check runs them after all cases)."""
    start = time.perf_counter()
    result = CaseResult(kind=case.kind, name=case.name, baseline=baseline(case))
    if result.baseline == "pass":
        source = onnx.load_model_from_string(case.model)
        result.inputs = "inputs.npz" if sample_inputs(case) is not None else _why_no_npz(case)
        for platform in platforms:
            try:
                result.platforms[platform.name] = cook_and_check(case, source, platform, work, build)
            except Exception as exc:  # a problem of the runner, or settings the probe cannot make
                detail = f"runner error: {type(exc).__name__}: {_first_line(exc)}"
                result.platforms[platform.name] = PlatformResult(category=outcome.CRASH, detail=detail)
    result.seconds = round(time.perf_counter() - start, 3)
    return result


# --- baseline ------------------------------------------------------------------------------------


def baseline(case: Case) -> str:
    """`pass`, or why plain onnxruntime (CPU, default options) fails the case on its own."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # its errors are the failure reasons recorded here
    try:
        session = onnxruntime.InferenceSession(case.model, options, providers=CPU)
    except Exception as exc:
        return f"load: {_first_line(exc)}"
    return _run_and_compare(session, case, "run") or "pass"


def _run_and_compare(session: onnxruntime.InferenceSession, case: Case, stage: str) -> str | None:
    names = [value.name for value in onnx.load_model_from_string(case.model).graph.output]
    for data_set in case.data_sets:
        try:
            actual = session.run(names[: len(data_set.outputs)], dict(data_set.inputs))
        except Exception as exc:
            return f"{stage}: {_first_line(exc)}"
        for name, want, got in zip(names, data_set.outputs, actual, strict=False):
            problem = outcome.mismatch(want, got, case.rtol, case.atol, name)
            if problem:
                return f"compare: {problem}"
    return None


# --- cooking ---------------------------------------------------------------------------------------


def sample_inputs(case: Case) -> dict[str, np.ndarray] | None:
    """The first data set's inputs as the cooker's ``.inputs.npz`` takes them, or None if it cannot."""
    feeds = {name: _npz_value(value) for name, value in case.data_sets[0].inputs.items()}
    return None if any(value is None for value in feeds.values()) else feeds


def _npz_value(value: Any) -> np.ndarray | None:
    """The cooker reads the file without pickle, so strings are stored as fixed-width unicode (what a
    user has to do too); sequences, optionals and types numpy cannot save plainly have no npz form.
    """
    if not isinstance(value, np.ndarray):
        return None
    if value.dtype.kind == "O":
        return value.astype(np.str_) if all(isinstance(item, str) for item in value.flat) else None
    return value if value.dtype.kind in "biufcU" else None


def _why_no_npz(case: Case) -> str:
    for name, value in case.data_sets[0].inputs.items():
        if _npz_value(value) is not None:
            continue
        if isinstance(value, np.ndarray):
            what = f"has dtype {value.dtype}"
        else:
            what = "an empty optional" if value is None else f"a {type(value).__name__}"
            what = f"is {what}"
        return f"{UNVERIFIED}: input {name!r} {what}, which an .inputs.npz cannot hold"
    return "synthesized"


def refusal_reason(case: Case, source: onnx.ModelProto, settings: CookSettings) -> tuple[str, dict] | None:
    """Why the platform cannot take this model at all, and the settings under which it could.

    Decided apart from the cooker: the source's opset/IR against the platform's runtime_version
    (docs/design.md, "Runtime versions"), and whether onnxruntime itself can write the model in ORT format.
    """
    too_old = runtime_too_old(source, settings)
    if too_old is not None:
        return too_old, {"runtime_version": onnxruntime.__version__}
    if settings.format == "ort" and not _ort_format_can_hold(case):
        return "ORT format cannot hold the model (onnxruntime cannot write it as ORT)", _onnx_format(settings)
    return None


def _onnx_format(settings: CookSettings) -> dict[str, Any]:
    """Overrides that cook for ONNX format instead: every setting that requires ORT format goes too."""
    overrides: dict[str, Any] = {"format": "onnx"}
    if settings.optimization_style == "runtime":
        overrides["optimization_style"] = "fixed"
    for key in ("reduced_build", "type_reduction"):
        if getattr(settings, key, False):
            overrides[key] = False
    return overrides


def runtime_too_old(source: onnx.ModelProto | tuple[int, int], settings: CookSettings) -> str | None:
    """Why ``settings.runtime_version`` cannot load ``source`` (a model, or its opset and IR), or None."""
    if isinstance(source, tuple):
        opset, ir_version = source
    else:
        opset = default_opset(source)
        ir_version = max(source.ir_version, FIRST_IR_WITHOUT_INITIALIZER_INPUTS)
    try:
        needed = min_runtime_for(opset=opset, ir_version=ir_version, ort_format_version=None)
    except ValueError:
        needed = (sys.maxsize, 0)
    if parse_version(settings.runtime_version)[:2] >= needed:
        return None
    return (
        f"runtime too old: opset {opset}, IR {ir_version} need a newer onnxruntime "
        f"than {settings.runtime_version}"
    )


def _ort_format_can_hold(case: Case) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.optimized_model_filepath = str(Path(folder) / "model.ort")
        options.add_session_config_entry("session.save_model_format", "ORT")
        try:
            onnxruntime.InferenceSession(case.model, options, providers=CPU)
        except Exception:
            return False
    return True


def cook_and_check(
    case: Case, source: onnx.ModelProto, platform: Platform, work: Path, build: Path
) -> PlatformResult:
    start = time.perf_counter()
    model_settings = {} if sample_inputs(case) is not None else {"verify": False}
    result, settings = _cook_and_check(case, platform, model_settings, work, build)
    if result.category == outcome.PASS:
        # A source newer than the target may be lowered (docs/design.md, "Newer models, older
        # runtimes"); what must load there is the cooked blob's opset and IR.
        too_old = runtime_too_old(result.cooked, settings) if result.cooked is not None else None
        if too_old is not None:
            result = PlatformResult(category=outcome.WRONG_ACCEPT, detail=f"cooked although {too_old}")
    elif result.category == outcome.COOK_FAIL:
        refusal = refusal_reason(case, source, settings)
        if refusal is not None:
            # Refusing is right; prove the rest of the cook works where the platform could take it.
            why, probe_settings = refusal
            checked, _ = _cook_and_check(case, platform, {**model_settings, **probe_settings}, work, build)
            if checked.category == outcome.PASS:
                result = PlatformResult(category=outcome.REFUSED, detail=f"{why}; cook said: {result.detail}")
            else:
                result = PlatformResult(
                    category=outcome.PROBE_FAIL,
                    detail=f"{why}; with {probe_settings}: {checked.category}: {checked.detail}",
                )
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def _cook_and_check(
    case: Case, platform: Platform, model_settings: Mapping[str, Any], work: Path, build: Path
) -> tuple[PlatformResult, CookSettings]:
    """Cook as ``doit cook`` does (assets folder, per-model settings file, resolve), then run the blob."""
    # Cook into an empty folder: the cooker sweeps a target's folder for stale temp files on every
    # write, which grows with the number of models there. Passing blobs move to ``build`` after.
    assets, scratch = work / "assets", work / "build"
    for folder in (assets, scratch):
        shutil.rmtree(folder, ignore_errors=True)
    assets.mkdir(parents=True)
    (assets / f"{case.name}.onnx").write_bytes(case.model)
    feeds = sample_inputs(case)
    if feeds is not None:
        np.savez(assets / f"{case.name}.inputs.npz", **feeds)
    if model_settings:
        (assets / f"{case.name}.cook.yaml").write_text(yaml.safe_dump(dict(model_settings)), encoding="utf-8")
    (asset,) = discover(assets)
    overrides = load_model_settings(asset.settings_path, [platform.name])
    settings = resolve(platform, overrides, {}, model_source=str(asset.settings_path or asset.path))
    job = CookJob(asset=asset, settings=settings, platform_dir=scratch / settings.platform)
    try:
        entry = cook(job)
    except CookError as exc:
        detail = f"{type(exc).__name__}: {clean(str(exc), work, scratch)}"
        return PlatformResult(category=outcome.COOK_FAIL, detail=detail), settings
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"
        detail = f"{type(exc).__name__} at {where}: {exc}"
        return PlatformResult(category=outcome.CRASH, detail=detail), settings
    blob = (job.platform_dir / entry["file"]).read_bytes()
    try:
        session = session_from_blob(blob, providers=CPU)
    except BundleError as exc:
        detail = f"{type(exc).__name__}: {clean(str(exc), work, scratch)}"
        return PlatformResult(category=outcome.LOAD_FAIL, detail=detail), settings
    problem = _run_and_compare(session, case, "run")
    if problem is None:
        _move_tree(job.platform_dir, build / settings.platform)
        return PlatformResult(category=outcome.PASS, cooked=_opset_and_ir(blob)), settings
    category = outcome.MISMATCH if problem.startswith("compare:") else outcome.LOAD_FAIL
    return PlatformResult(category=category, detail=problem), settings


def _opset_and_ir(blob: bytes) -> tuple[int, int]:
    """The cooked model's default-domain opset and IR version, read from the blob."""
    header, model = decode_blob(blob)
    facts = ort_facts(model) if header.model_format == "ort" else onnx_facts(onnx.load_from_string(model))
    return facts.opset, facts.ir_version


def _move_tree(source: Path, target: Path) -> None:
    for path in source.rglob("*"):
        if path.is_file():
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            path.replace(destination)


def clean(text: str, work: Path, build: Path) -> str:
    """The message without the cooker's "<file> (model ..., platform ...): " prefix and temp paths."""
    text = text.replace(str(work / "assets") + "/", "").replace(str(work), "<work>")
    return _shorten(_WHERE.sub("", text.replace(str(build), "<build>")))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return _shorten(text.splitlines()[0] if text else type(exc).__name__)


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."
