"""What a model contains, read the same way from an ONNX proto and from an ORT-format flatbuffer.

The guards compare a cooked model's facts with its source's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from onnx_cooker.cook.ortschema import fbs

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True, kw_only=True)
class ModelFacts:
    ir_version: int
    opset: int  # default-domain opset
    domains_used: frozenset[str]  # node domains in all graphs; "" is the default domain
    inputs: tuple[str, ...]  # main-graph inputs that are not initializers
    outputs: tuple[str, ...]
    initializer_count: int
    initializer_bytes: int
    # Node inputs, in any graph, that nothing provides: no node output, graph input or initializer of
    # that graph or of a graph around it.
    missing_values: tuple[str, ...]
    # Main-graph initializers by name, and the content digests of every graph's initializers.
    weights: Mapping[str, Weight] = field(default_factory=dict)
    contents: frozenset[str] = frozenset()
    # Main-graph nodes by name: (domain, op_type, inputs). onnxruntime keeps the names of nodes it does
    # not rewrite, so a node found in both models by name is the same node.
    nodes: Mapping[str, tuple[str, str, tuple[str, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Weight:
    """An initializer's content, comparable between ONNX and ORT format (same type numbering)."""

    digest: str  # sha256 of the data type and the little-endian bytes, "" when not readable here
    data_type: int
    elements: int
    all_zero: bool


def weight_of(data_type: int, dims: Iterable[int], data: bytes | memoryview | None) -> Weight:
    """``data``: the tensor's little-endian bytes (strings: each length-prefixed); None: not readable."""
    elements = math.prod(dims)
    if data is None:
        return Weight("", data_type, elements, False)
    view = memoryview(data).cast("B")
    digest = hashlib.sha256(f"{data_type}:".encode())
    digest.update(view)
    return Weight(digest.hexdigest(), data_type, elements, not np.frombuffer(view, np.uint8).any())


def feed_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs a caller feeds: those that are not initializers (listed as inputs by IR<4)."""
    initializers = {tensor.name for tensor in graph.initializer}
    return [value for value in graph.input if value.name not in initializers]


def input_tensor_type(value: onnx.ValueInfoProto) -> onnx.TypeProto.Tensor | None:
    """The tensor type a caller feeds to ``value``: its own, or the element's of an optional tensor
    (onnxruntime takes a plain array for ``optional(tensor(...))``); None for sequences and maps."""
    kind = value.type.WhichOneof("value")
    if kind == "tensor_type":
        return value.type.tensor_type
    if kind == "optional_type" and value.type.optional_type.elem_type.HasField("tensor_type"):
        return value.type.optional_type.elem_type.tensor_type
    return None


def fixed_size(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    """A dimension's fixed size, or None where it is free: named (``dim_param``), unset, or negative.
    Some exporters write a free dimension as ``dim_value: -1`` (paddle2onnx: PaddleOCR's models), which
    onnx.proto does not allow but onnxruntime runs as a free dimension."""
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value >= 0 else None


def default_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset import (0: none)."""
    return next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 0)


def _domain(name: str) -> str:
    return "" if name in DEFAULT_DOMAINS else name


# --- ONNX ---------------------------------------------------------------------------------------


def onnx_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from onnx_graphs(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    yield from onnx_graphs(subgraph)


def _onnx_tensor_bytes(tensor: onnx.TensorProto) -> int:
    if tensor.data_type == onnx.TensorProto.STRING:
        return sum(len(value) for value in tensor.string_data)
    itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    return math.prod(tensor.dims) * itemsize


def _onnx_tensor_data(tensor: onnx.TensorProto) -> bytes | None:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None  # not loaded: the cook loads every model's external data before it asks
    if tensor.data_type == onnx.TensorProto.STRING:
        return b"".join(len(value).to_bytes(8, "little") + value for value in tensor.string_data)
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    try:  # typed fields: the values as raw_data would hold them (little-endian, as every target)
        return np.ascontiguousarray(onnx.numpy_helper.to_array(tensor)).tobytes()
    except Exception:  # a type numpy cannot hold here: counted, not compared
        return None


def onnx_weight(tensor: onnx.TensorProto) -> Weight:
    return weight_of(tensor.data_type, tensor.dims, _onnx_tensor_data(tensor))


def _onnx_missing(graph: onnx.GraphProto, outer: frozenset[str] = frozenset()) -> set[str]:
    """Node inputs of ``graph`` and its subgraphs that nothing in scope provides."""
    scope = (
        set(outer) | {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    )
    scope |= {value.name for value in graph.input} | {name for node in graph.node for name in node.output}
    missing = {name for node in graph.node for name in node.input if name and name not in scope}
    inner = frozenset(scope)
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in (*attribute.graphs, *([attribute.g] if attribute.HasField("g") else [])):
                missing |= _onnx_missing(subgraph, inner)
    return missing


def onnx_facts(model: onnx.ModelProto) -> ModelFacts:
    graph = model.graph
    graphs = list(onnx_graphs(graph))
    opset = default_opset(model)
    weights = {tensor.name: onnx_weight(tensor) for tensor in graph.initializer}
    contents = {w.digest for w in weights.values()}
    contents |= {onnx_weight(t).digest for g in graphs[1:] for t in g.initializer}
    return ModelFacts(
        ir_version=model.ir_version,
        opset=opset,
        domains_used=frozenset(_domain(node.domain) for g in graphs for node in g.node),
        inputs=tuple(value.name for value in feed_inputs(graph)),
        outputs=tuple(value.name for value in graph.output),
        initializer_count=sum(len(g.initializer) for g in graphs),
        initializer_bytes=sum(_onnx_tensor_bytes(t) for g in graphs for t in g.initializer),
        missing_values=tuple(sorted(_onnx_missing(graph))),
        weights=weights,
        contents=frozenset(contents - {""}),
        nodes={
            node.name: (_domain(node.domain), node.op_type, tuple(node.input))
            for node in graph.node
            if node.name
        },
    )


# --- ORT format -----------------------------------------------------------------------------------

_FBS_ITEMSIZE = {
    fbs.TensorDataType.TensorDataType.FLOAT: 4,
    fbs.TensorDataType.TensorDataType.UINT8: 1,
    fbs.TensorDataType.TensorDataType.INT8: 1,
    fbs.TensorDataType.TensorDataType.UINT16: 2,
    fbs.TensorDataType.TensorDataType.INT16: 2,
    fbs.TensorDataType.TensorDataType.INT32: 4,
    fbs.TensorDataType.TensorDataType.INT64: 8,
    fbs.TensorDataType.TensorDataType.BOOL: 1,
    fbs.TensorDataType.TensorDataType.FLOAT16: 2,
    fbs.TensorDataType.TensorDataType.DOUBLE: 8,
    fbs.TensorDataType.TensorDataType.UINT32: 4,
    fbs.TensorDataType.TensorDataType.UINT64: 8,
    fbs.TensorDataType.TensorDataType.BFLOAT16: 2,
}


def _fbs_tensor_bytes(tensor: fbs.Tensor.Tensor) -> int:
    if tensor.DataType() == fbs.TensorDataType.TensorDataType.STRING:
        return sum(len(tensor.StringData(i)) for i in range(tensor.StringDataLength()))
    if tensor.RawDataLength():
        return tensor.RawDataLength()
    if tensor.ExternalDataOffset() >= 0:  # data kept after the flatbuffer, in the same file
        count = math.prod(tensor.Dims(i) for i in range(tensor.DimsLength()))
        return count * _FBS_ITEMSIZE.get(tensor.DataType(), 1)
    return 0


def fbs_graphs(graph: fbs.Graph.Graph) -> Iterator[fbs.Graph.Graph]:
    yield graph
    for n in range(graph.NodesLength()):
        node = graph.Nodes(n)
        for a in range(node.AttributesLength()):
            attribute = node.Attributes(a)
            if attribute.G() is not None:
                yield from fbs_graphs(attribute.G())
            for g in range(attribute.GraphsLength()):
                yield from fbs_graphs(attribute.Graphs(g))


def _nodes(graph: fbs.Graph.Graph) -> Iterator[fbs.Node.Node]:
    return (graph.Nodes(n) for n in range(graph.NodesLength()))


def _fbs_weight(tensor: fbs.Tensor.Tensor) -> Weight:
    dims = [tensor.Dims(i) for i in range(tensor.DimsLength())]
    if tensor.DataType() == fbs.TensorDataType.TensorDataType.STRING:
        strings = (tensor.StringData(i) for i in range(tensor.StringDataLength()))
        data: bytes | memoryview | None = b"".join(len(v).to_bytes(8, "little") + v for v in strings)
    elif tensor.RawDataLength():
        data = memoryview(tensor.RawDataAsNumpy())
    elif tensor.ExternalDataOffset() >= 0:
        data = None  # kept after the flatbuffer: not part of this model's bytes
    else:
        data = b""
    return weight_of(tensor.DataType(), dims, data)


def _fbs_names(count: int, get: Callable[[int], bytes]) -> list[str]:
    return [get(i).decode() for i in range(count)]


def _fbs_scope(graph: fbs.Graph.Graph) -> set[str]:
    scope = {graph.Initializers(i).Name().decode() for i in range(graph.InitializersLength())}
    scope |= {
        graph.SparseInitializers(i).Values().Name().decode() for i in range(graph.SparseInitializersLength())
    }
    scope |= set(_fbs_names(graph.InputsLength(), graph.Inputs))
    scope |= {name for node in _nodes(graph) for name in _fbs_names(node.OutputsLength(), node.Outputs)}
    return scope


def _fbs_missing(graph: fbs.Graph.Graph, outer: frozenset[str] = frozenset()) -> set[str]:
    scope = frozenset(outer | _fbs_scope(graph))
    missing = set()
    for node in _nodes(graph):
        missing |= {
            name for name in _fbs_names(node.InputsLength(), node.Inputs) if name and name not in scope
        }
        for a in range(node.AttributesLength()):
            attribute = node.Attributes(a)
            subgraphs = [attribute.Graphs(g) for g in range(attribute.GraphsLength())]
            for subgraph in [*([attribute.G()] if attribute.G() is not None else []), *subgraphs]:
                missing |= _fbs_missing(subgraph, scope)
    return missing


def ort_facts(data: bytes) -> ModelFacts:
    session = fbs.InferenceSession.InferenceSession.GetRootAs(data, 0)
    model = session.Model()
    graph = model.Graph()
    graphs = list(fbs_graphs(graph))
    initializers = {graph.Initializers(i).Name().decode() for i in range(graph.InitializersLength())}
    inputs = _fbs_names(graph.InputsLength(), graph.Inputs)
    opsets = (model.OpsetImport(i) for i in range(model.OpsetImportLength()))
    weights = {
        graph.Initializers(i).Name().decode(): _fbs_weight(graph.Initializers(i))
        for i in range(graph.InitializersLength())
    }
    contents = {w.digest for w in weights.values()}
    contents |= {
        _fbs_weight(g.Initializers(i)).digest for g in graphs[1:] for i in range(g.InitializersLength())
    }
    return ModelFacts(
        ir_version=model.IrVersion(),
        opset=next((o.Version() for o in opsets if _domain((o.Domain() or b"").decode()) == ""), 0),
        domains_used=frozenset(
            _domain((node.Domain() or b"").decode()) for g in graphs for node in _nodes(g)
        ),
        inputs=tuple(name for name in inputs if name not in initializers),
        outputs=tuple(graph.Outputs(i).decode() for i in range(graph.OutputsLength())),
        initializer_count=sum(g.InitializersLength() for g in graphs),
        initializer_bytes=sum(
            _fbs_tensor_bytes(g.Initializers(i)) for g in graphs for i in range(g.InitializersLength())
        ),
        missing_values=tuple(sorted(_fbs_missing(graph))),
        weights=weights,
        contents=frozenset(contents - {""}),
        nodes={
            node.Name().decode(): (
                _domain((node.Domain() or b"").decode()),
                node.OpType().decode(),
                tuple(_fbs_names(node.InputsLength(), node.Inputs)),
            )
            for node in _nodes(graph)
            if node.Name()
        },
    )
