"""Topological sorting of a model's nodes before the checker (fp16 converter output, shuffled graphs)."""

from __future__ import annotations

import random

import onnx
from onnx import TensorProto, helper

from onnx_cooker.cook.source import sort_nodes
from tests.models import model_of


def chain(length: int) -> onnx.ModelProto:
    """x -> Relu -> Neg -> ... (``length`` nodes), plus a side branch read at the end."""
    nodes, last = [], "x"
    for i in range(length):
        nodes.append(helper.make_node("Relu" if i % 2 else "Neg", [last], [f"v{i}"], name=f"n{i}"))
        last = f"v{i}"
    nodes.append(helper.make_node("Add", [last, "x"], ["y"], name="out"))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return model_of(graph)


def test_a_sorted_graph_is_left_alone() -> None:
    model = chain(50)
    before = model.SerializeToString()
    assert sort_nodes(model.graph) is False and model.SerializeToString() == before


def test_a_shuffled_graph_of_thousands_of_nodes_is_sorted_into_a_valid_order() -> None:
    model = chain(5000)
    nodes = list(model.graph.node)
    random.Random(7).shuffle(nodes)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    assert sort_nodes(model.graph) is True
    onnx.checker.check_model(model)  # refuses any node placed before what it reads
    assert [n.name for n in model.graph.node] == [f"n{i}" for i in range(5000)] + ["out"]


def test_a_cycle_or_a_missing_value_is_left_for_the_checker_to_name() -> None:
    model = chain(3)
    model.graph.node[0].input[0] = "v2"  # n0 reads n2's output: a cycle
    assert sort_nodes(model.graph) is False
    missing = chain(3)
    missing.graph.node[1].input[0] = "nowhere"
    nodes = list(missing.graph.node)[::-1]
    del missing.graph.node[:]
    missing.graph.node.extend(nodes)
    assert sort_nodes(missing.graph) is False
