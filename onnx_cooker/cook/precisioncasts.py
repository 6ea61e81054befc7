"""Take out of a cooked ONNX graph the fp32 islands onnxruntime's CPU EP made of its fp16 nodes.

When the CPU EP has no fp16 kernel for a node (MatMul, Gemm, Relu... in 1.24-1.32), onnxruntime's
partitioning (``InsertCastTransformer``, at every optimization level, even with all of them off)
puts a Cast to float32 in front of it and a Cast back to float16 after it, named
``InsertedPrecisionFreeCast_<value>``, drops the Cast pairs between neighbours, and at level
``all`` folds the Casts of weights into float32 initializers. The optimized model onnxruntime
writes keeps all of it: a CPU-only rewrite that the cook's CPU EP made, shipped to GPUs and NPUs.
A DirectML session then ran every "fp16" MatMul in float32 and held float32 copies of the
weights; OpenVINO's EP, offered a graph of Casts, left the model on the CPU (0 of 3 nodes where
the source ran wholly on OpenVINO). Taken out here, each EP gets the model's own fp16 nodes, and
the CPU EP puts its Casts back at load, as it does for the source.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_cooker.cook.ssa import subgraphs

PREFIX = "InsertedPrecisionFreeCast_"
_HALF = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def strip_precision_casts(model: onnx.ModelProto, loads: Callable[[onnx.ModelProto], bool]) -> int:
    """Remove onnxruntime's inserted precision Casts from ``model``, in place, and return how many;
    0 (the model untouched) where there are none, or where the graph without them is not one
    ``loads`` accepts (an island whose float32 weights do not go back to fp16 exactly)."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    count = _strip(stripped.graph)
    if count == 0 or not loads(stripped):
        return 0
    model.CopyFrom(stripped)
    return count


def _strip(graph: onnx.GraphProto) -> int:
    count = sum(_strip(subgraph) for node in graph.node for subgraph in subgraphs(node))
    mapping: dict[str, str] = {}  # an inserted float32 value -> the fp16 value it stands for
    kept = []
    for node in graph.node:
        pair = _inserted_pair(node)
        if pair is None:
            kept.append(node)
            continue
        inserted, original = pair
        mapping[inserted] = original
    if not mapping:
        return count
    island = [node for node in kept if any(name.startswith(PREFIX) for name in (*node.input, *node.output))]
    if not _weights_back_to_half(graph, island):
        return count
    del graph.node[:]
    graph.node.extend(kept)
    _rename(graph, mapping)
    # the island's own values were float32: their value_info would now contradict their producers
    others = [value for value in graph.value_info if not value.name.startswith(PREFIX)]
    del graph.value_info[:]
    graph.value_info.extend(others)
    return count + len(mapping)


def _inserted_pair(node: onnx.NodeProto) -> tuple[str, str] | None:
    """(inserted value, original value) of one of onnxruntime's precision Casts, else None."""
    if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or not node.name.startswith(PREFIX):
        return None
    if len(node.input) != 1 or len(node.output) != 1:
        return None
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    source, target = node.input[0], node.output[0]
    if to == onnx.TensorProto.FLOAT and target.startswith(PREFIX):  # fp16 in front of the node
        return target, source
    if to in _HALF and source.startswith(PREFIX):  # back to fp16 after it
        return source, target
    return None


def _weights_back_to_half(graph: onnx.GraphProto, island: list[onnx.NodeProto]) -> bool:
    """Turn the float32 initializers the island's nodes read (Casts of fp16 weights that level
    ``all`` folded) back into fp16, where that is exact; False where one is not (keep the Casts)."""
    read = {name for node in island for name in node.input}
    for tensor in graph.initializer:
        if tensor.name not in read or tensor.data_type != onnx.TensorProto.FLOAT:
            continue
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            return False
        values = numpy_helper.to_array(tensor)
        half = values.astype(np.float16)
        if not np.array_equal(half.astype(np.float32), values, equal_nan=True):
            return False
        tensor.CopyFrom(numpy_helper.from_array(half, tensor.name))
    return True


def _rename(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    for node in graph.node:
        node.input[:] = [mapping.get(name, name) for name in node.input]
        node.output[:] = [mapping.get(name, name) for name in node.output]
        for subgraph in subgraphs(node):  # a nested graph reading an outer inserted value
            _rename_uses(subgraph, mapping)


def _rename_uses(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    defined = {name for node in graph.node for name in node.output}
    defined |= {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    outer = {old: new for old, new in mapping.items() if old not in defined}
    if not outer:
        return
    for node in graph.node:
        node.input[:] = [outer.get(name, name) for name in node.input]
        for subgraph in subgraphs(node):
            _rename_uses(subgraph, outer)
    for value in graph.output:
        value.name = outer.get(value.name, value.name)
