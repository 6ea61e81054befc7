"""Where the free dimensions of a model's inputs go: followed from each graph input through the
operators that keep or move axes, to the first operator that gives an axis a meaning. Two uses, for
the sizes the cook synthesizes verification inputs at (``dims``, ``checking.feeds_for``):

- ``pinned_sizes``: a free dim whose size a weight fixes (the feature axis an LSTM's or a MatMul's
  constant weight takes, or a per-feature constant an element-wise operator broadcasts against it);
- ``spatial_dims``: the free dims a convolution or pooling slides over (an image's height and
  width, a 1-D conv's samples), which a size of 1 reduces to each kernel's centre tap.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx

from onnx_cooker.cook.dims import (
    DEFAULT_DIM_SIZE,
    SPATIAL_DIM_SIZE,
    SPATIAL_MAX_BYTES,
    UNNAMED,
    expression_names,
    input_bytes,
    shapes_at,
)
from onnx_cooker.cook.facts import feed_inputs, fixed_size, input_tensor_type

# Operators that keep each axis of their first input where it was (a free dim stays itself)
_AXIS_KEEPING = frozenset(
    {
        "Identity",
        "Cast",
        "Relu",
        "Sigmoid",
        "Tanh",
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Sqrt",
        "LeakyRelu",
        "Clip",
        "Dropout",
        "Softplus",
        "Elu",
        "Selu",
        "HardSigmoid",
        "Erf",
    }
)
# Element-wise operators of two inputs: they keep the axes of one where the other is a constant (an
# image's normalization: ``(x - mean) / std`` with ``mean [1, 3, 1, 1]``); where the constant's size
# at a free axis is over 1, it pins that dim (madmom's ``input [input_dim_0, input_dim_1,
# input_dim_2] * scale [80, 3]``: the model runs with 80 and 3 there, or 1, which it broadcasts)
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div"})
# Operators that slide a window over every axis of their first input from the third on
_SLIDING = frozenset({"Conv", "ConvTranspose", "ConvInteger", "MaxPool", "AveragePool", "LpPool"})

Labels = list[str | None]  # one entry per axis: the free dim's label, or None (fixed, or an expression)


def pinned_sizes(model: onnx.ModelProto) -> dict[str, int]:
    """Free dims whose size a weight fixes: the first input of a MatMul, Gemm, Conv, LSTM, GRU or RNN
    with a constant weight, reached from a graph input through Unsqueeze, Transpose and operators
    that keep axes. A converter that leaves every dim symbolic (madmom's: ``input [input_dim_0,
    input_dim_1]`` into an LSTM whose W is [1, 100, 266]) makes a model that runs at that size only,
    which no tried size finds. A dim two weights size differently is left free (the error names it),
    and so is a dim without a name (those share one size)."""
    weights = {tensor.name: list(tensor.dims) for tensor in model.graph.initializer}
    constants = _constants(model.graph)
    found: dict[str, set[int]] = {}
    for node, axes, attributes in _readers(model.graph):
        if node.op_type in _BROADCASTING:  # followed through a constant: the sizes it gives free axes
            shape = next(list(constants[name].dims) for name in node.input if name in constants)
            for label, size in zip(axes[len(axes) - len(shape) :], shape, strict=True):
                if size > 1 and label not in (None, UNNAMED):
                    found.setdefault(label, set()).add(size)
            continue
        weight = weights.get(node.input[1]) if len(node.input) > 1 else None
        if weight is None:
            continue
        where: tuple[int, int] | None = None  # (axis of the input, the size the weight gives it)
        if node.op_type == "MatMul" and len(weight) >= 2 and axes:
            where = (len(axes) - 1, weight[-2])
        elif node.op_type == "Gemm" and len(weight) == 2 and len(axes) == 2:
            trans_a, trans_b = (attributes[k].i if k in attributes else 0 for k in ("transA", "transB"))
            where = (0 if trans_a else 1, weight[1 if trans_b else 0])
        elif node.op_type == "Conv" and len(weight) >= 3 and len(axes) == len(weight):
            where = (1, weight[1] * (attributes["group"].i if "group" in attributes else 1))
        elif node.op_type in ("LSTM", "GRU", "RNN") and len(weight) == 3 and len(axes) == 3:
            where = (2, weight[2])
        if where is not None and axes[where[0]] not in (None, UNNAMED) and where[1] > 0:
            found.setdefault(axes[where[0]], set()).add(where[1])
    return {label: sizes.pop() for label, sizes in found.items() if len(sizes) == 1}


def spatial_dims(model: onnx.ModelProto) -> set[str]:
    """The free dims that a convolution or pooling slides its window over (UNNAMED for dims without a
    name): the axes from the third on of its first input, reached from a graph input as above and
    through element-wise arithmetic with constants (an image's normalization)."""
    spatial: set[str] = set()
    for node, axes, _ in _readers(model.graph):
        if node.op_type in _SLIDING and len(axes) >= 3:
            spatial.update(label for label in axes[2:] if label is not None)
    return spatial


def stepped_dims(model: onnx.ModelProto) -> set[str]:
    """The free dims a recurrent node (LSTM, GRU, RNN) steps over: its first input's axis 0 (axis 1
    with ``layout`` 1), and those a Scan steps over. Leading, such a dim is a sequence, not a batch
    (madmom's ``[frames, 1, features]``)."""
    stepped: set[str] = set()
    for node, axes, attributes in _readers(model.graph):
        if node.op_type in ("LSTM", "GRU", "RNN") and len(axes) == 3:
            layout = attributes["layout"].i if "layout" in attributes else 0
            stepped.update(label for label in axes[layout : layout + 1] if label not in (None, UNNAMED))
    return stepped | _scanned_dims(model.graph)


def _scanned_dims(graph: onnx.GraphProto) -> set[str]:
    """The free dims a main-graph Scan (opset 9+) steps over: each scan input's axis
    (``scan_input_axes``, default 0), of a graph input it scans directly or through operators that
    keep, move or insert axes (``[frames, 8]`` unsqueezed and transposed to ``[frames, 1, 8]``). At 1 a
    recurrence from a zero state multiplies nothing by its recurrent weights, as an LSTM's does."""
    carried: dict[str, Labels] = {}
    for _ in _readers(graph, carried):  # the walk fills `carried`: every value with an input's axes
        pass
    found: set[str] = set()
    for node in graph.node:
        if node.op_type != "Scan" or node.domain not in ("", "ai.onnx"):
            continue
        attributes = {a.name: a for a in node.attribute}
        count = attributes["num_scan_inputs"].i if "num_scan_inputs" in attributes else 0
        scanned = list(node.input)[len(node.input) - count :] if count > 0 else []
        axes = list(attributes["scan_input_axes"].ints) if "scan_input_axes" in attributes else []
        for index, name in enumerate(scanned):
            dims = carried.get(name)
            if not dims:
                continue
            axis = axes[index] if index < len(axes) else 0
            axis = axis + len(dims) if axis < 0 else axis
            if 0 <= axis < len(dims) and dims[axis] not in (None, UNNAMED):
                found.add(dims[axis])
    return found


def spatial_sizes(
    model: onnx.ModelProto, unsized: list[str], dims: Mapping[str, int]
) -> dict[str, int] | None:
    """SPATIAL_DIM_SIZE for each of ``unsized`` that a convolution or pooling slides over, 1 for the
    rest; None where none is, or where the inputs would pass SPATIAL_MAX_BYTES (dims without a name
    share one size: a batch among them is that size too)."""
    spatial = spatial_dims(model) & set(unsized)
    if not spatial:
        return None
    sizes = {name: SPATIAL_DIM_SIZE if name in spatial else DEFAULT_DIM_SIZE for name in unsized}
    return sizes if input_bytes(model, dims, sizes) <= SPATIAL_MAX_BYTES else None


Reader = tuple[onnx.NodeProto, Labels, dict[str, onnx.AttributeProto]]


def _readers(graph: onnx.GraphProto, axes_of: dict[str, Labels] | None = None) -> Iterator[Reader]:
    """Each main-graph node of the default domain whose first input carries a graph input's axes
    (followed through operators that keep, move or insert axes), with the label at each of its axes.
    The operators that only carry axes on are followed, not yielded; element-wise arithmetic with a
    constant is followed and yielded (with its output's axes). ``axes_of``: filled with each value
    that carries a graph input's axes (given empty)."""
    axes_of = {} if axes_of is None else axes_of
    for value in feed_inputs(graph):
        tensor_type = input_tensor_type(value)
        if tensor_type is not None and tensor_type.HasField("shape"):
            axes_of[value.name] = [_label(dim) for dim in tensor_type.shape.dim]
    constants: dict[str, onnx.TensorProto] | None = None  # made at the first node that needs it
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or not node.input or not node.output:
            continue
        if node.op_type in _BROADCASTING and len(node.input) == 2:
            if constants is None:
                constants = _constants(graph)
            carried = _broadcast(node, axes_of, constants)
            if carried is not None:
                axes_of[node.output[0]] = carried
                yield node, carried, {}  # for the dims its constant pins
            continue
        if node.input[0] not in axes_of:
            continue
        axes = axes_of[node.input[0]]
        attributes = {attribute.name: attribute for attribute in node.attribute}
        if node.op_type in _AXIS_KEEPING:
            axes_of[node.output[0]] = axes
        elif node.op_type == "Transpose":
            perm = list(attributes["perm"].ints) if "perm" in attributes else list(range(len(axes)))[::-1]
            if sorted(perm) == list(range(len(axes))):
                axes_of[node.output[0]] = [axes[i] for i in perm]
        elif node.op_type == "Unsqueeze":
            if constants is None:
                constants = _constants(graph)
            inserted = _unsqueeze_axes(node, attributes, constants)
            if inserted is not None:
                rank, out = len(axes) + len(inserted), list(axes)
                for axis in sorted(a % rank for a in inserted):
                    out.insert(axis, None)
                axes_of[node.output[0]] = out
        else:
            yield node, axes, attributes


def _label(dim: onnx.TensorShapeProto.Dimension) -> str | None:
    if fixed_size(dim) is not None:
        return None
    if not dim.dim_param:
        return UNNAMED
    return dim.dim_param if expression_names(dim.dim_param) is None else None


def _broadcast(
    node: onnx.NodeProto, axes_of: Mapping[str, Labels], constants: Mapping[str, onnx.TensorProto]
) -> Labels | None:
    """The axes of an element-wise node's output, where one input carries axes and the other is a
    constant of no higher rank that widens no dim without a name (those share one size); else None.
    A size over 1 at a named free axis pins that dim (``pinned_sizes``), which stays itself."""
    carried = [name for name in node.input if name in axes_of]
    other = next((name for name in node.input if name not in axes_of), None)
    if len(carried) != 1 or other is None or other not in constants:
        return None
    axes, shape = axes_of[carried[0]], list(constants[other].dims)
    if len(shape) > len(axes):
        return None
    aligned = axes[len(axes) - len(shape) :]
    if any(size != 1 and label == UNNAMED for size, label in zip(shape, aligned, strict=True)):
        return None
    return axes


def _unsqueeze_axes(
    node: onnx.NodeProto,
    attributes: Mapping[str, onnx.AttributeProto],
    constants: Mapping[str, onnx.TensorProto],
) -> list[int] | None:
    """Unsqueeze's axes: its attribute (before opset 13) or its constant second input, else None."""
    if "axes" in attributes:
        return list(attributes["axes"].ints)
    tensor = constants.get(node.input[1]) if len(node.input) > 1 else None
    if tensor is None or tensor.data_type != onnx.TensorProto.INT64:
        return None
    return [int(v) for v in onnx.numpy_helper.to_array(tensor).reshape(-1)]


def _constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """The graph's initializers and Constant nodes' tensors, by name."""
    found = {tensor.name: tensor for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attribute in node.attribute:
                if attribute.name == "value":
                    found[node.output[0]] = attribute.t
    return found


def collapsed(
    model: onnx.ModelProto,
    dims: Mapping[str, int],
    free: Mapping[str, int],
    symbolic: Mapping[str, list[int | None]],
) -> list[str]:
    """The convolutions and poolings whose output these sizes reduce to one step along an axis a free
    dim gives (None there in ``symbolic``, ``free_shapes``): what follows them mixes nothing along it.
    One whose output is the model's is not counted: nothing follows it (a pool in ceil mode whose
    kernel is larger than the input reads all of it into 1x1). A wav2vec2-style encoder turns 64
    samples into one frame through its strided convolutions, and attention's softmax over that one
    frame is 1 whatever its query weights (measured on a random-init wav2vec2 of transformers: its
    first layer's query weights negated give the source's outputs exactly at 64 samples, and differ
    at 224)."""
    outputs = {value.name for value in model.graph.output}
    nodes = [
        n
        for n in model.graph.node
        if n.op_type in _STRIDED and n.domain in ("", "ai.onnx") and n.output and n.output[0] not in outputs
    ]
    if not nodes:
        return []
    shapes = shapes_at(model, dims, free)
    found = []
    for node in nodes:
        at, anywhere = shapes.get(node.output[0]), symbolic.get(node.output[0])
        if at and anywhere and len(at) == len(anywhere):
            if any(
                size == 1 and free_axis is None for size, free_axis in zip(at[2:], anywhere[2:], strict=True)
            ):
                found.append(node.name or node.output[0])
    return found


def has_strided(model: onnx.ModelProto) -> bool:
    """Whether the main graph convolves or pools (``collapsed`` has anything to look at)."""
    return any(n.op_type in _STRIDED and n.domain in ("", "ai.onnx") for n in model.graph.node)


# A Loop's trip count, when a graph input gives it: at the 0 or 1 drawn for integers, its body (and
# its weights) ran once at most, and a wrong one verified
LOOP_TRIPS = 3


def loop_inputs(model: onnx.ModelProto) -> dict[str, int | bool]:
    """Graph inputs a main-graph Loop takes (directly, or through one Cast) as its trip count
    (-> LOOP_TRIPS) or its first condition (-> True: the loop runs)."""
    inputs = {value.name for value in model.graph.input}
    cast = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast" and n.input and n.output}
    found: dict[str, int | bool] = {}
    for node in model.graph.node:
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
            continue
        for index, value in ((0, LOOP_TRIPS), (1, True)):
            name = node.input[index] if len(node.input) > index else ""
            name = cast.get(name, name)
            if name in inputs:
                found[name] = value
    return found


# A convolution or pooling that may shrink an axis (ConvTranspose widens it)
_STRIDED = _SLIDING - {"ConvTranspose"}
# TopK's k where a graph input gives it: drawn as an integer, 0 or 1, and at 0 every output is empty
TOPK_K = 5


def counted_inputs(
    model: onnx.ModelProto, dims: Mapping[str, int], free: int | Mapping[str, int]
) -> dict[str, int]:
    """Graph inputs (directly, or through one Cast) that give a main-graph node a count its other
    inputs bound, with the count at these sizes: an LSTM's, GRU's or RNN's ``sequence_lens`` (input
    4) -> the length its X has along the time axis (drawn as 0 and 1, every sequence ran a step at most,
    and a blob whose recurrent weights were wrong verified); TopK's ``K`` -> min(TOPK_K, the size of
    the axis it selects along) (at 0, every output was empty). 1 where shape inference finds no size."""
    inputs = {value.name for value in feed_inputs(model.graph)}
    cast = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast" and n.input and n.output}
    wanted: list[tuple[str, str, int, int | None]] = []  # (input, the value bounding it, its axis, cap)
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or not node.input:
            continue
        attributes = {attribute.name: attribute.i for attribute in node.attribute}
        if node.op_type in ("LSTM", "GRU", "RNN") and len(node.input) > 4:
            given, axis, cap = node.input[4], attributes.get("layout", 0), None
        elif node.op_type == "TopK" and len(node.input) > 1:
            given, axis, cap = node.input[1], attributes.get("axis", -1), TOPK_K
        else:
            continue
        if (name := cast.get(given, given)) in inputs:
            wanted.append((name, node.input[0], axis, cap))
    if not wanted:
        return {}
    shapes = shapes_at(model, dims, free)
    found: dict[str, int] = {}
    for name, bounding, axis, cap in wanted:
        shape = shapes.get(bounding) or []
        size = shape[axis] if -len(shape) <= axis < len(shape) else None
        count = 1 if size is None else size if cap is None else min(cap, size)
        found[name] = min(found.get(name, count), count)
    return found
