"""What a model contains, read the same way from an ONNX proto and from an ORT-format flatbuffer.

The guards compare a cooked model's facts with its source's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx

from .ortschema import fbs

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
    missing_values: tuple[str, ...]  # main-graph node inputs that nothing produces


def feed_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs a caller feeds: those that are not initializers (listed as inputs by IR<4)."""
    initializers = {tensor.name for tensor in graph.initializer}
    return [value for value in graph.input if value.name not in initializers]


def _domain(name: str) -> str:
    return "" if name in DEFAULT_DOMAINS else name


def _missing(node_inputs: Iterator[str], available: set[str]) -> tuple[str, ...]:
    return tuple(sorted({name for name in node_inputs if name and name not in available}))


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


def onnx_facts(model: onnx.ModelProto) -> ModelFacts:
    graph = model.graph
    graphs = list(onnx_graphs(graph))
    initializers = {tensor.name for tensor in graph.initializer}
    available = initializers | {value.name for value in graph.input}
    available |= {name for node in graph.node for name in node.output}
    opset = next((o.version for o in model.opset_import if _domain(o.domain) == ""), 0)
    return ModelFacts(
        ir_version=model.ir_version,
        opset=opset,
        domains_used=frozenset(_domain(node.domain) for g in graphs for node in g.node),
        inputs=tuple(value.name for value in feed_inputs(graph)),
        outputs=tuple(value.name for value in graph.output),
        initializer_count=sum(len(g.initializer) for g in graphs),
        initializer_bytes=sum(_onnx_tensor_bytes(t) for g in graphs for t in g.initializer),
        missing_values=_missing((name for node in graph.node for name in node.input), available),
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


def _fbs_graphs(graph: fbs.Graph.Graph) -> Iterator[fbs.Graph.Graph]:
    yield graph
    for n in range(graph.NodesLength()):
        node = graph.Nodes(n)
        for a in range(node.AttributesLength()):
            attribute = node.Attributes(a)
            if attribute.G() is not None:
                yield from _fbs_graphs(attribute.G())
            for g in range(attribute.GraphsLength()):
                yield from _fbs_graphs(attribute.Graphs(g))


def _nodes(graph: fbs.Graph.Graph) -> Iterator[fbs.Node.Node]:
    return (graph.Nodes(n) for n in range(graph.NodesLength()))


def ort_facts(data: bytes) -> ModelFacts:
    session = fbs.InferenceSession.InferenceSession.GetRootAs(data, 0)
    model = session.Model()
    graph = model.Graph()
    graphs = list(_fbs_graphs(graph))
    initializers = {graph.Initializers(i).Name().decode() for i in range(graph.InitializersLength())}
    inputs = [graph.Inputs(i).decode() for i in range(graph.InputsLength())]
    available = initializers | set(inputs)
    available |= {node.Outputs(o).decode() for node in _nodes(graph) for o in range(node.OutputsLength())}
    opsets = (model.OpsetImport(i) for i in range(model.OpsetImportLength()))
    node_inputs = (node.Inputs(i).decode() for node in _nodes(graph) for i in range(node.InputsLength()))
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
        missing_values=_missing(node_inputs, available),
    )
