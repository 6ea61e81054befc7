"""Optimize and serialize (step 3 of a cook) with the CPU execution provider only.

The one place where a platform's settings become onnxruntime session options for cooking.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import onnx
import onnxruntime

from onnx_cooker.cook.defaults import drop_default_attributes
from onnx_cooker.cook.facts import default_opset, fbs_graphs, onnx_graphs
from onnx_cooker.cook.large import session_input, tensor_bytes
from onnx_cooker.cook.ortschema import fbs
from onnx_cooker.cook.precisioncasts import strip_precision_casts
from onnx_cooker.cook.ssa import unique_subgraph_names
from onnx_cooker.cook.valueshapes import add_named_shapes, named_shapes, wants_value_shapes, with_value_shapes
from onnx_cooker.errors import ModelError
from onnx_cooker.runtime.compat import parse_version
from onnx_cooker.runtime.constants import Arch, ModelFormat, OptimizationStyle
from onnx_cooker.settings.resolve import CookSettings, onnx_instead

# Never a GPU EP: with DirectML registered, partitioning steals initializers and the saved file has
# no weights (docs/design.md, "Cooking with the CPU EP only").
COOK_PROVIDERS = ["CPUExecutionProvider"]
LEVELS = {
    "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# The ORT format stores tensors of the element types its schema lists (onnxruntime 1.24-1.32: up to
# FLOAT8E5M2FNUZ). onnxruntime writes a model with an INT4, UINT4 or FLOAT4E2M1 initializer in it
# all the same, then refuses it at load ("Unsupported tensor data type '<unknown>'").
ORT_TENSOR_TYPES = frozenset(
    value for key, value in vars(fbs.TensorDataType.TensorDataType).items() if key.isupper() and value
)


def disabled_optimizers(settings: CookSettings) -> list[str]:
    """NCHWc layouts depend on the build machine's vector width: only for x86_64 targets that ask."""
    if settings.arch == Arch.X86_64 and settings.allow_nchwc:
        return []
    return ["NchwcTransformer"]


def session_options(settings: CookSettings, output: Path, saved: str = "save") -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = LEVELS[settings.optimization_level]
    options.optimized_model_filepath = str(output)
    options.log_severity_level = 3  # the NCHWc warning is handled by disabled_optimizers
    # As onnxruntime's own converter does: int8 QDQ kernels are a win on arm only.
    options.add_session_config_entry("session.qdqisint8allowed", "1" if settings.arch == Arch.ARM64 else "0")
    if settings.format == ModelFormat.ORT:
        options.add_session_config_entry("session.save_model_format", "ORT")
        if settings.optimization_style == OptimizationStyle.RUNTIME:
            options.add_session_config_entry("optimization.minimal_build_optimizations", saved)
    return options


def optimize_large(
    model: onnx.ModelProto, settings: CookSettings, work_dir: Path | None = None
) -> onnx.ModelProto:
    """``optimize`` for an ONNX-format model over protobuf's 2 GB limit: the optimized model is saved
    with external data and returned as a proto holding its weights in memory."""
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".optimize-", dir=work_dir) as tmp:
        output = Path(tmp) / "model.onnx"
        options = session_options(settings, output)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", "model.data"
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
        _run(model, settings, options, work_dir)
        optimized = onnx.load_model(str(output), load_external_data=True)
    strip_precision_casts(optimized, lambda stripped: _loads_unoptimized(stripped, work_dir))
    unique_subgraph_names(optimized)
    _drop_unused_opsets(optimized)
    if parse_version(settings.runtime_version) < parse_version(onnxruntime.__version__):
        drop_default_attributes(optimized)
    if wants_value_shapes(settings.runtime_version, settings.name_dimensions):  # inference skips weights
        add_named_shapes(optimized, named_shapes(optimized))
    return optimized


def _run(
    model: onnx.ModelProto,
    settings: CookSettings,
    options: onnxruntime.SessionOptions,
    work_dir: Path | None,
    also_disabled: tuple[str, ...] = (),
) -> None:
    """Create the cooking session (which writes the optimized model); clean errors otherwise."""
    output = Path(options.optimized_model_filepath)
    try:
        with session_input(model, work_dir) as source:
            onnxruntime.InferenceSession(
                source,
                sess_options=options,
                providers=COOK_PROVIDERS,
                disabled_optimizers=[*disabled_optimizers(settings), *also_disabled],
            )
    except Exception as exc:  # onnxruntime raises Fail, InvalidGraph, NotImplemented, RuntimeError...
        free = shutil.disk_usage(output.parent).free
        if free < 2 * tensor_bytes(model):  # onnxruntime's message does not say why it could not save
            raise ModelError(
                f"cannot save the optimized model into {output.parent}: No space left on device "
                f"({free:,} bytes free); free disk space and run the cook again"
            ) from None
        hint = _hint(str(exc), default_opset(model))
        if settings.format == ModelFormat.ORT and "do not support type" in str(exc):
            hint = f"; the ORT format cannot store optional-typed values: {onnx_instead(settings)}"
        if _loads_unoptimized(model, work_dir):  # onnxruntime's optimizers, or saving, failed on it
            level = settings.optimization_level
            lower = (
                "; `optimization_level: basic` for this model (its .cook.yaml, docs/settings.md) may cook it"
                if level != "basic"
                else "; re-export the model, or leave it out of this platform with `skip_platforms`"
            )
            raise ModelError(
                f"onnxruntime {onnxruntime.__version__} failed to optimize and save the model at "
                f"optimization_level {level}: {str(exc).rstrip(' .')}{hint or lower}"
            ) from None
        raise ModelError(
            f"onnxruntime {onnxruntime.__version__} cannot load the model, with every graph optimization off "
            f"too: {str(exc).rstrip(' .')}{hint or _AS_EXPORTED}"
        ) from None


_AS_EXPORTED = (
    "; onnxruntime refuses the model as the cook hands it over (checked, and its opset and IR made "
    "the target's): check the source file itself (named above) with `python -c \"import onnxruntime; "
    "onnxruntime.InferenceSession('MODEL.onnx')\"`, and re-export it (another exporter version, or "
    "converter options the message points at), or leave it out of this platform with `skip_platforms` "
    "in its .cook.yaml"
)


def _loads_unoptimized(model: onnx.ModelProto, work_dir: Path | None) -> bool:
    """Whether onnxruntime creates a session for ``model`` with every graph optimization off and
    nothing saved (asked after the cooking session failed: which of the two it refused)."""
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        with session_input(model, work_dir) as source:
            onnxruntime.InferenceSession(source, sess_options=options, providers=COOK_PROVIDERS)
    except Exception:  # onnxruntime raises several unrelated types
        return False
    return True


def _refuse_unstorable(data: bytes, settings: CookSettings) -> None:
    """Refuse an ORT-format model holding tensors of an element type its schema lacks (INT4 where
    no fusion took the weights into MatMulNBits): onnxruntime wrote it, but cannot load it."""
    graph = fbs.InferenceSession.InferenceSession.GetRootAs(data, 0).Model().Graph()
    found = []
    for g in fbs_graphs(graph):
        tensors = [g.Initializers(i) for i in range(g.InitializersLength())]
        tensors += [g.SparseInitializers(i).Values() for i in range(g.SparseInitializersLength())]
        found += [t for t in tensors if t.DataType() not in ORT_TENSOR_TYPES]
    if not found:
        return
    names = [f"{t.Name().decode(errors='replace')} ({_type_name(t.DataType())})" for t in found]
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    raise ModelError(
        f"the ORT format of onnxruntime {onnxruntime.__version__} cannot hold tensors of the type of "
        f"{', '.join(names[:5])}{more} (onnxruntime writes such a model but refuses to load it); at "
        "optimization_level extended or all onnxruntime fuses 4-bit DequantizeLinear + MatMul into "
        "MatMulNBits where the graph allows; else store 4-bit weights as onnxruntime's quantizer does "
        "by default (MatMulNBits, packed in uint8: `onnxruntime.quantization.matmul_nbits_quantizer`), "
        "or as int8, or leave this platform out with `skip_platforms` in the model's .cook.yaml"
        + ("" if settings.reduced_build else f" (or cook it as ONNX here: {onnx_instead(settings)})")
    )


def _type_name(data_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return f"type {data_type}"


# onnxruntime supports default-domain opsets from 7 (older models run only where a legacy kernel is left)
OLDEST_SUPPORTED_OPSET = 7


def _hint(message: str, opset: int) -> str:
    """The fix for onnxruntime failures whose own message names none."""
    if 0 < opset < OLDEST_SUPPORTED_OPSET and "Could not find an implementation" in message:
        return (
            f"; the model imports default-domain opset {opset}, and onnxruntime supports opset "
            f"{OLDEST_SUPPORTED_OPSET} and newer: convert it once with onnx's version converter and cook "
            'the result (verified against the converted model): `python -c "import onnx, '
            f"onnx.version_converter as v; onnx.save(v.convert_version(onnx.load('MODEL.onnx'), "
            f"{OLDEST_SUPPORTED_OPSET}), 'MODEL.onnx')\"`"
        )
    locale = re.search(r"Failed to construct locale with name:([^:\s]*)", message)
    if locale:
        name = locale.group(1) or "(empty)"
        return (
            f"; a StringNormalizer changes case in the locale {name}, which this machine lacks (onnxruntime "
            "needs it installed wherever the model is cooked or run; container images ship without it): "
            "install it (Debian or Ubuntu: `apt-get install locales`, uncomment it in /etc/locale.gen, "
            "`locale-gen`), or give the node a `locale` attribute every target has"
        )
    unknown = re.search(r"(\S+):(\S+)\(-?\d+\) is not a registered function/op", message)
    if unknown:
        domain, op = unknown.groups()
        extensions = (
            " (onnxruntime-extensions' domain: cook the network alone, and run its tokenizer or image or "
            "audio codec in the game's own code around it)"
            if domain == "ai.onnx.contrib"
            else ""
        )
        return (
            f"; operator {op!r} of domain {domain!r} is unknown to onnxruntime (a custom operator)"
            f"{extensions}: the cooker optimizes and verifies with onnxruntime, which registers no "
            "custom-operator library, so re-export the model with standard ONNX operators, or leave it "
            "out of this platform with `skip_platforms` in its .cook.yaml"
        )
    return ""


def optimize(
    model: onnx.ModelProto,
    settings: CookSettings,
    work_dir: Path | None = None,
    *,
    saved: str = "save",
    also_disabled: tuple[str, ...] = (),
) -> bytes:
    """The optimized model in the platform's format, as bytes.

    For the runtime style, ``saved="save"`` records the optimizations beyond basic for replay (what
    ships) and ``saved="apply"`` applies them (used only to list the operators a replay needs).

    onnxruntime only writes optimized models to a file: a temp folder in ``work_dir`` (the build
    folder, where the next manifest write sweeps what a killed cook left) holds it meanwhile.
    """
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    value_shapes = wants_value_shapes(settings.runtime_version, settings.name_dimensions)
    if value_shapes and settings.format == ModelFormat.ORT:  # the flatbuffer keeps the shapes it was given
        model = with_value_shapes(model)
    with tempfile.TemporaryDirectory(prefix=".optimize-", dir=work_dir) as tmp:
        output = Path(tmp) / f"model.{settings.format}"
        _run(model, settings, session_options(settings, output, saved), work_dir, also_disabled)
        data = output.read_bytes()
    if settings.format == ModelFormat.ORT:
        _refuse_unstorable(data, settings)
        return data
    older = parse_version(settings.runtime_version) < parse_version(onnxruntime.__version__)
    return tidy_onnx(data, value_shapes=value_shapes, older_runtime=older)


def tidy_onnx(data: bytes, *, value_shapes: bool = False, older_runtime: bool = False) -> bytes:
    """Take out the CPU EP's fp32 islands of fp16 nodes (precisioncasts.py), give values of sibling
    subgraphs distinct names (ssa.py), drop the opset imports onnxruntime
    adds for every domain it knows but the model does not use, with ``older_runtime`` (a target
    older than this onnxruntime) the attributes its optimizers wrote at their defaults on its own
    operators (defaults.py), and with ``value_shapes`` name the dimensions the graph leaves unknown
    (valueshapes.py).

    Unused imports such as ``ai.onnx.preview`` would otherwise make older runtimes refuse the model.
    """
    model = onnx.load_model_from_string(data)
    strip_precision_casts(model, lambda stripped: _loads_unoptimized(stripped, None))
    unique_subgraph_names(model)  # onnxruntime's own Casts, named alike in sibling subgraphs
    _drop_unused_opsets(model)
    if older_runtime:
        drop_default_attributes(model)
    if value_shapes:  # the model is this function's own: in place
        add_named_shapes(model, named_shapes(model))
    return model.SerializeToString()


def _drop_unused_opsets(model: onnx.ModelProto) -> None:
    used = {node.domain for graph in onnx_graphs(model.graph) for node in graph.node}
    kept = [o for o in model.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(kept)
