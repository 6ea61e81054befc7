"""Downgrade (a repair before step 3 of a cook): a model saved by a newer onnx than the target's
onnxruntime knows is lowered to what that onnxruntime loads, when nothing it computes changes.

- **IR version.** The IR version says which *file format features* a model may use, not which
  operators (onnx/onnx.proto, "IR VERSION n published on ..."). ``onnx.helper.make_model`` of
  onnx 1.23 writes IR 14, which onnxruntime 1.24 and 1.28 refuse. A model that uses no feature of
  an IR newer than the target's is the same model at the older IR: its ``ir_version`` is lowered
  (and IR-10 annotations, which nothing computes with, are dropped). One that uses such a feature
  fails, naming it and where it is used.
- **Default-domain opset.** A model importing a newer opset than the target's onnxruntime knows is
  converted by onnx's version converter. The converted model is cooked like any other and verified
  against the source before it ships, so a wrong conversion never ships.

Each repair is recorded in the manifest entry's ``fallbacks`` and printed as one warning line;
``downgrade: never`` (per platform or model) turns both off. docs/design.md, "Newer models, older
runtimes", has the evidence.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import onnx

from onnx_cooker.cook.facts import default_opset, onnx_graphs
from onnx_cooker.cook.large import is_large
from onnx_cooker.errors import ModelError
from onnx_cooker.runtime.compat import RUNTIME_LIMITS, format_version, min_runtime_for, parse_version

T = onnx.TensorProto
# IR version -> the data types it added (onnx/onnx.proto's IR version history). Older IRs' types
# (float8 with IR 9, bfloat16 with IR 4) never matter: every supported onnxruntime loads IR 9.
TYPES_SINCE_IR: dict[int, tuple[int, ...]] = {
    10: (T.UINT4, T.INT4),
    11: (T.FLOAT4E2M1,),
    12: (T.FLOAT8E8M0,),
    13: (T.UINT2, T.INT2),
    14: (T.FLOAT6E2M3, T.FLOAT6E3M2),
}
# What else each IR added, and what a lowered model does with it:
# - IR 10: `overload` of nodes and functions (which function a node calls: refused below IR 10);
#   `metadata_props` of nodes, values, graphs, tensors and functions (annotations: dropped).
# - IR 11: multi-device configurations (`ModelProto.configuration`, `NodeProto.device_configurations`:
#   how to shard the model: refused below IR 11).
# - IR 14: `TypeProto.Opaque` outside ONNX-ML builds; onnxruntime is an ONNX-ML build, where opaque
#   types were always allowed: nothing to check.
NEWEST_IR_KNOWN = max(TYPES_SINCE_IR)
# Node attributes that hold a data type (Cast, EyeLike, Random*, Multinomial, Bernoulli,
# QuantizeLinear/DequantizeLinear `output_dtype`, LayerNormalization `stash_type`, BitCast).
TYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_dtype", "stash_type"})
AUTO, NEVER = "auto", "never"


@dataclass(frozen=True)
class Limits:
    """What the target's onnxruntime loads."""

    runtime: str  # the platform's runtime_version
    opset: int
    ir_version: int


def limits_of(runtime_version: str) -> Limits:
    """The newest default-domain opset and IR that ``runtime_version`` loads (RUNTIME_LIMITS)."""
    release = parse_version(runtime_version)[:2]
    known = [(opset, ir) for since, opset, ir in RUNTIME_LIMITS if since <= release]
    opset, ir = known[-1] if known else RUNTIME_LIMITS[0][1:]
    return Limits(runtime_version, opset, ir)


def oldest_runtime(*, opset: int = 0, ir_version: int = 0) -> str | None:
    """The oldest onnxruntime (major.minor) that loads this opset and IR; None if none known does."""
    try:
        return format_version(min_runtime_for(opset=opset, ir_version=ir_version, ort_format_version=None))
    except ValueError:
        return None


def downgrade(
    model: onnx.ModelProto, limits: Limits, *, mode: str, where: str
) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    """``model`` as ``limits.runtime`` loads it (a new proto when changed) and the fallback records.

    ``where``: the settings file to name in messages. With ``mode`` "never", or when nothing is
    newer than the target, the model is returned unchanged (the guard names what does not load).
    Raises ``ModelError`` when a repair is needed and impossible.
    """
    records: list[dict[str, Any]] = []
    if mode == NEVER:
        return model, records
    if model.ir_version > limits.ir_version:  # before converting: a feature is the first thing to name
        _refuse_newer_features(model, limits, where)
    opset = default_opset(model)
    if opset > limits.opset:
        model = _convert_opset(model, opset, limits, where)
        why = (
            f"onnxruntime {limits.runtime} loads default-domain opset {limits.opset} at most; converted by "
            "onnx's version converter and verified against the source"
        )
        records.append(_record("opset", limits.opset, opset, why))
    if model.ir_version > limits.ir_version:
        was = model.ir_version
        model = _lower_ir(model, limits, where)
        why = (
            f"onnxruntime {limits.runtime} loads IR {limits.ir_version} at most and the model uses no "
            f"feature of {_irs(limits.ir_version + 1, was)}"
        )
        records.append(_record("ir_version", limits.ir_version, was, why))
    return model, records


def _record(what: str, used: int, instead_of: int, why: str) -> dict[str, Any]:
    """A ``fallbacks`` entry of the manifest (printed as one warning line by the cook task)."""
    return {"used": {what: used}, "instead_of": {what: instead_of}, "why": why}


# --- IR ------------------------------------------------------------------------------------------


def newer_ir_features(model: onnx.ModelProto, ir_version: int) -> list[str]:
    """Every use of a format feature newer than ``ir_version`` that lowering cannot drop, each as
    "<feature> (IR <n>): <where>"."""
    found = []
    types = {t: ir for ir, added in TYPES_SINCE_IR.items() if ir > ir_version for t in added}
    for where, data_type in _data_types(model):
        if data_type in types:
            name = T.DataType.Name(data_type).lower()
            found.append(f"{name} (IR {types[data_type]}): {where}")
    if ir_version < 10:
        found += [f"function overloads (IR 10): {where}" for where in _overloads(model)]
    if ir_version < 11:
        if model.configuration:
            found.append("multi-device configurations (IR 11): the model's `configuration`")
        found += [
            f"multi-device configurations (IR 11): node {node.name or node.op_type!r}"
            for graph in onnx_graphs(model.graph)
            for node in graph.node
            if node.device_configurations
        ]
    return list(dict.fromkeys(found))


def _irs(first: int, last: int) -> str:
    return f"IR {first}" if first == last else f"IR {first} to {last}"


def _refuse_newer_features(model: onnx.ModelProto, limits: Limits, where: str) -> None:
    features = newer_ir_features(model, limits.ir_version)
    if features:
        needs = oldest_runtime(ir_version=model.ir_version)
        raise ModelError(
            f"the model is IR {model.ir_version} and uses {_listed(features)}, which onnxruntime "
            f"{limits.runtime} (runtime_version) cannot load: it loads IR {limits.ir_version} at most; raise "
            f"runtime_version to {needs or 'a newer release'} or newer if the target ships it, re-export the "
            f"model without {'it' if len(features) == 1 else 'them'}, or list this platform in the model's "
            f"`skip_platforms` ({where})"
        )


def _lower_ir(model: onnx.ModelProto, limits: Limits, where: str) -> onnx.ModelProto:
    _refuse_newer_features(model, limits, where)  # the converter may have added one
    lowered = onnx.ModelProto()
    lowered.CopyFrom(model)
    lowered.ir_version = limits.ir_version
    if limits.ir_version < 10:
        _drop_annotations(lowered)
    return lowered


def _listed(features: list[str]) -> str:
    shown = "; ".join(features[:5])
    return shown + (f"; and {len(features) - 5} more" if len(features) > 5 else "")


def _all_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto | onnx.FunctionProto]]:
    for graph in onnx_graphs(model.graph):
        yield (f"graph {graph.name!r}" if graph is not model.graph else "the main graph"), graph
    for function in model.functions:
        yield f"function {function.domain}.{function.name}", function
        for node in function.node:
            for attribute in node.attribute:
                for subgraph in (*attribute.graphs, *([attribute.g] if attribute.HasField("g") else [])):
                    for graph in onnx_graphs(subgraph):
                        yield f"graph {graph.name!r} of function {function.name}", graph


def _data_types(model: onnx.ModelProto) -> Iterator[tuple[str, int]]:
    """(where, data type) for every tensor, value and type attribute of the model."""
    for where, graph in _all_graphs(model):
        if isinstance(graph, onnx.GraphProto):
            for tensor in graph.initializer:
                yield f"initializer {tensor.name!r}", tensor.data_type
            for sparse in graph.sparse_initializer:
                yield f"sparse initializer {sparse.values.name!r}", sparse.values.data_type
            for value in (*graph.input, *graph.output, *graph.value_info):
                for data_type in _type_elements(value.type):
                    yield f"value {value.name!r}", data_type
        for node in graph.node:
            label = f"node {node.name or node.op_type!r} ({node.op_type}) in {where}"
            for attribute in node.attribute:
                if attribute.name in TYPE_ATTRIBUTES and attribute.type == onnx.AttributeProto.INT:
                    yield f"attribute {attribute.name} of {label}", attribute.i
                for tensor in (*attribute.tensors, *([attribute.t] if attribute.HasField("t") else [])):
                    yield f"tensor attribute {attribute.name} of {label}", tensor.data_type
                for tp in (*attribute.type_protos, *([attribute.tp] if attribute.HasField("tp") else [])):
                    for data_type in _type_elements(tp):
                        yield f"type attribute {attribute.name} of {label}", data_type
    for where, data_type in _inferred_types(model):
        yield where, data_type


def _inferred_types(model: onnx.ModelProto) -> Iterator[tuple[str, int]]:
    """Types of the intermediate values that onnx's shape inference finds (the model is left as is)."""
    if is_large(model):
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # inference cannot type every model; what it cannot see, the other walks did
        return
    for graph in onnx_graphs(inferred.graph):
        for value in graph.value_info:
            for data_type in _type_elements(value.type):
                yield f"value {value.name!r}", data_type


def _type_elements(tp: onnx.TypeProto) -> Iterator[int]:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        yield tp.tensor_type.elem_type
    elif kind == "sparse_tensor_type":
        yield tp.sparse_tensor_type.elem_type
    elif kind == "sequence_type":
        yield from _type_elements(tp.sequence_type.elem_type)
    elif kind == "optional_type":
        yield from _type_elements(tp.optional_type.elem_type)
    elif kind == "map_type":
        yield tp.map_type.key_type
        yield from _type_elements(tp.map_type.value_type)


def _overloads(model: onnx.ModelProto) -> Iterator[str]:
    for function in model.functions:
        if function.overload:
            yield f"function {function.domain}.{function.name} (overload {function.overload!r})"
    for where, graph in _all_graphs(model):
        for node in graph.node:
            if node.overload:
                yield f"node {node.name or node.op_type!r} in {where} (overload {node.overload!r})"


def _drop_annotations(model: onnx.ModelProto) -> None:
    """Remove the IR-10 `metadata_props` of nodes, values, graphs, tensors and functions (the model's
    own `metadata_props` are as old as IR 1 and stay)."""
    for _, graph in _all_graphs(model):
        del graph.metadata_props[:]
        for node in graph.node:
            del node.metadata_props[:]
            for attribute in node.attribute:
                for tensor in (*attribute.tensors, *([attribute.t] if attribute.HasField("t") else [])):
                    del tensor.metadata_props[:]
        if isinstance(graph, onnx.GraphProto):
            for value in (*graph.input, *graph.output, *graph.value_info):
                del value.metadata_props[:]
            for tensor in graph.initializer:
                del tensor.metadata_props[:]
        else:
            for value in graph.value_info:
                del value.metadata_props[:]


# --- opset ---------------------------------------------------------------------------------------


def _convert_opset(model: onnx.ModelProto, opset: int, limits: Limits, where: str) -> onnx.ModelProto:
    needs = oldest_runtime(opset=opset)
    choices = (
        f"raise runtime_version to {needs or 'a newer release'} or newer if the target ships it, re-export "
        f"the model at opset {limits.opset} or older, or list this platform in the model's `skip_platforms` "
        f"({where})"
    )
    if is_large(model):
        raise ModelError(
            f"the model imports default-domain opset {opset} and onnxruntime {limits.runtime} "
            f"(runtime_version) loads opset {limits.opset} at most; onnx's version converter cannot "
            f"convert a model over 2 GB; {choices}"
        )
    try:
        converted = onnx.version_converter.convert_version(model, limits.opset)
        onnx.checker.check_model(converted)
    except Exception as exc:  # the converter raises RuntimeError, ValidationError, IndexError...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"the model imports default-domain opset {opset} and onnxruntime {limits.runtime} "
            f"(runtime_version) loads opset {limits.opset} at most; onnx's version converter cannot convert "
            f"it ({reason}); {choices}"
        ) from None
    converted.ir_version = model.ir_version  # the converter may stamp its own; lowered next if needed
    return converted
