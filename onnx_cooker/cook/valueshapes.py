"""Name every dimension the cooked graph leaves unknown, for onnxruntime before 1.32 to plan memory fast.

onnxruntime plans, while it builds a session, which freed buffer each node output reuses
(``allocation_planner.cc``: ``FindReusableTensor``, ``SameSize``). Two shapes are the same size only
when each dimension has the same value or the same name. A Conv over an image of dynamic height and
width leaves every later shape with dimensions that have neither: no freed buffer ever matches, the
free list grows with the graph, and each output is compared against all of it. Before 1.32 each
comparison also parses both element types from their type strings (``GetElementSize`` ->
``DataTypeUtils::ToTypeProto``), so the planning takes most of the session's creation. onnxruntime's
own shape inference at load leaves such dimensions unnamed; ONNX's (``onnx.shape_inference``) names
each one (``unk__N``), and gives the same name wherever it proves the same size (an elementwise op's
output, say), which is exactly what the planner compares.

So for a platform whose onnxruntime is older than 1.32 the cook writes ONNX's inferred shapes into
the graph (``value_info``) where they hold a named dimension: after optimization for ONNX (onnxruntime
loads the graph as written), before it for the ORT format (onnxruntime stores in the flatbuffer the
shapes it holds for each value, these merged in). Measured (docs/design.md, "Shapes for the memory
planner"): PaddleOCR's v4 detector ready in 30 ms instead of 58 in onnxruntime 1.24.4 (its source
file: 58 ms), 27 instead of 45 in 1.28.0, and as an ORT model in 1.28.0 in 9.7 ms instead of 22.5;
in 1.32 the same graph is 0-8% slower (more to parse, nothing to gain), so it is not written there.
Inference reads weights of 64 KiB and more as their type and dims only (``for_inference``), so a
model over 2 GB is named too, and no model is serialized twice over for it.
The planner's choices stay sound: a name is shared only where ONNX's inference proves the sizes
equal, and onnxruntime refuses (never overruns) a reused buffer that turns out too small.
"""

from __future__ import annotations

import onnx

from onnx_cooker.cook.facts import onnx_graphs
from onnx_cooker.runtime.compat import parse_version

# The first onnxruntime whose planner compares element types without parsing type strings (measured:
# 1.24.4 and 1.28.0 gain 1.4-1.9x on conv nets over dynamic images, 1.32.0 nothing)
PLANNER_FIXED = (1, 32, 0)


def wants_value_shapes(runtime_version: str, name_dimensions: bool = True) -> bool:
    """Whether the platform's onnxruntime plans memory faster with every dimension named (and the
    settings' ``name_dimensions`` does not turn it off)."""
    return name_dimensions and parse_version(runtime_version) < PLANNER_FIXED


def _params(value: onnx.ValueInfoProto) -> set[str]:
    """The names of a tensor's dimensions (none for other types or an unknown rank)."""
    if value.type.WhichOneof("value") != "tensor_type" or not value.type.tensor_type.HasField("shape"):
        return set()
    return {dim.dim_param for dim in value.type.tensor_type.shape.dim if dim.HasField("dim_param")}


# Initializers from this size go to inference as inputs of their type and shape, without their bytes:
# inference reads values only of small tensors (a Reshape's shape), and a model's weights would be
# serialized and parsed twice over (a 1.5 GB model: several GB more at the cook's peak)
BIG_INITIALIZER = 64 << 10


def named_shapes(model: onnx.ModelProto) -> list[list[onnx.ValueInfoProto]]:
    """For each graph of ``model`` (``facts.onnx_graphs`` order) the shapes ONNX's inference gives
    its values where one holds a dimension inference named (a name the model did not have:
    onnxruntime's own inference carries the model's names, a dynamic batch say, and leaves the
    others unknown) and the graph has no entry for that value yet. Nothing (all empty) where
    inference fails: the shapes only speed a load up."""
    graphs = list(onnx_graphs(model.graph))
    try:
        inferred = onnx.shape_inference.infer_shapes(
            for_inference(model), check_type=False, strict_mode=False
        )
    except Exception:  # onnx raises several types (InferenceError, ValidationError, RuntimeError...)
        return [[] for _ in graphs]
    inferred_graphs = list(onnx_graphs(inferred.graph))  # the same walk: each graph and its own
    if len(graphs) != len(inferred_graphs):  # inference changed the structure: take none of it
        return [[] for _ in graphs]
    given = set()  # the model's own dimension names
    for graph in graphs:
        for value in (*graph.input, *graph.output, *graph.value_info):
            given |= _params(value)
    result = []
    for graph, found in zip(graphs, inferred_graphs, strict=True):
        known = {v.name for v in (*graph.value_info, *graph.input, *graph.output)}
        known.update(t.name for t in graph.initializer)
        added = []
        for value in found.value_info:
            if value.name not in known and _params(value) - given:
                added.append(value)
                known.add(value.name)
        result.append(added)
    return result


def add_named_shapes(model: onnx.ModelProto, found: list[list[onnx.ValueInfoProto]]) -> None:
    """Append ``named_shapes(model)``'s entries to ``model``'s graphs, in place."""
    for graph, added in zip(onnx_graphs(model.graph), found, strict=True):
        graph.value_info.extend(added)


def with_value_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with ``named_shapes`` added to each graph's ``value_info`` (the entries it
    had kept as they were, the main graph's inputs and outputs untouched); ``model`` itself where there
    are none."""
    found = named_shapes(model)
    if not any(found):
        return model
    result = onnx.ModelProto()
    result.CopyFrom(model)
    add_named_shapes(result, found)
    return result


def for_inference(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` for inference: its main graph's initializers of ``BIG_INITIALIZER`` bytes or more
    turned into inputs of their type and dims, their bytes left out (the rest copied as it is)."""
    light = onnx.ModelProto(ir_version=model.ir_version)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    graph = model.graph
    light.graph.name = graph.name
    for field in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(light.graph, field).extend(getattr(graph, field))
    inputs = {v.name for v in graph.input}
    for tensor in graph.initializer:
        if tensor.ByteSize() < BIG_INITIALIZER:
            light.graph.initializer.append(tensor)
        elif tensor.name not in inputs:
            light.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
            )
    return light
