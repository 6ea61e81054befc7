"""Give every value a model's subgraphs define a name no other graph of the model defines.

onnxruntime's partitioning inserts a Cast in front of each fp16 node the CPU EP has no fp16 kernel
for, named after the value it reads (``InsertedPrecisionFreeCast_<value>``). When both branches of
an If (or a Loop body and a branch) read the same outer value, both get a Cast of the same name,
and the optimized model onnxruntime writes is one onnxruntime itself then refuses: "Graph must be
in single static assignment (SSA) form, however 'InsertedPrecisionFreeCast_ly' has been used as
output names multiple times" (1.32.0, every optimization level, even with all of them off). A
value a subgraph defines is visible only in that subgraph and the graphs nested in it, so renaming
it there, and its uses there, keeps what the model computes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx


def unique_subgraph_names(model: onnx.ModelProto) -> int:
    """Rename, in place, each value a subgraph defines (input, initializer, node output) whose name
    another graph defines too (the main graph's, or a graph met earlier); the count renamed."""
    seen = set(_defined(model.graph))
    renamed = 0
    for node in model.graph.node:
        for subgraph in subgraphs(node):
            renamed += _fix(subgraph, seen)
    return renamed


def _fix(graph: onnx.GraphProto, seen: set[str]) -> int:
    mapping: dict[str, str] = {}
    for name in _defined(graph):
        if name in seen:
            mapping[name] = _fresh(name, seen)
        seen.add(mapping.get(name, name))
    if mapping:
        _rename(graph, mapping, own=True)
    renamed = len(mapping)
    for node in graph.node:
        for subgraph in subgraphs(node):
            renamed += _fix(subgraph, seen)
    return renamed


def _rename(graph: onnx.GraphProto, mapping: Mapping[str, str], *, own: bool) -> None:
    """``mapping`` applied to ``graph``: its definitions too where they are its own (``own``), else
    only its uses of outer values (a nested graph), leaving names the nested graph defines itself."""
    if not own:
        mapping = {old: new for old, new in mapping.items() if old not in set(_defined(graph))}
        if not mapping:
            return
    else:
        for value in (*graph.input, *graph.value_info):
            value.name = mapping.get(value.name, value.name)
        for tensor in graph.initializer:
            tensor.name = mapping.get(tensor.name, tensor.name)
        for sparse in graph.sparse_initializer:
            sparse.values.name = mapping.get(sparse.values.name, sparse.values.name)
    for value in graph.output:
        value.name = mapping.get(value.name, value.name)
    if not own:  # a nested graph's value_info of an outer value it reads
        for value in graph.value_info:
            value.name = mapping.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [mapping.get(name, name) for name in node.input]
        if own:
            node.output[:] = [mapping.get(name, name) for name in node.output]
        for subgraph in subgraphs(node):
            _rename(subgraph, mapping, own=False)


def _defined(graph: onnx.GraphProto) -> Iterator[str]:
    yield from (value.name for value in graph.input if value.name)
    yield from (tensor.name for tensor in graph.initializer if tensor.name)
    yield from (tensor.values.name for tensor in graph.sparse_initializer if tensor.values.name)
    yield from (name for node in graph.node for name in node.output if name)


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs a node's attributes hold (If's branches, Loop's and Scan's bodies)."""
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def _fresh(name: str, seen: set[str]) -> str:
    index = 1
    while f"{name}__{index}" in seen:
        index += 1
    return f"{name}__{index}"
