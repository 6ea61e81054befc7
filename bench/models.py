"""The benchmark's inputs: the example assets plus two synthetic models built here, seeded.

- ``large_graph``: many small nodes in the shapes exporters write (LayerNormalization, MatMul+Add,
  SiLU, reshape/transpose pairs, constant subexpressions), so that loading is dominated by graph
  work (parsing, resolving, optimizing), not by weights.
- ``large_weights``: a few wide MatMul layers whose float32 weights live in ``<stem>.onnx.data``
  beside the model, so that loading is dominated by bytes.

Only onnx and numpy; the same sizes and seed give the same bytes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20240611
OPSET = 17
IR_VERSION = 8
LARGE_GRAPH = "large_graph"
LARGE_WEIGHTS = "large_weights"
# Nodes written per block of the large graph (see _graph_block).
NODES_PER_BLOCK = 15


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """How big the synthetic models are: full run or the CI smoke run."""

    graph_blocks: int  # NODES_PER_BLOCK nodes each
    graph_width: int
    weights_width: int  # the large-weights model has weights_layers layers of width x width
    weights_layers: int

    @property
    def graph_nodes(self) -> int:
        return self.graph_blocks * NODES_PER_BLOCK

    @property
    def weights_bytes(self) -> int:
        return self.weights_layers * (self.weights_width * self.weights_width + self.weights_width) * 4


FULL = Sizes(graph_blocks=150, graph_width=32, weights_width=4096, weights_layers=4)  # 2,250 nodes, 268 MB
QUICK = Sizes(graph_blocks=8, graph_width=16, weights_width=256, weights_layers=2)


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    # Uniform in +-1/sqrt(fan_in), like default initializers: activations stay O(1) through the stack.
    bound = np.float32(1.0 / np.sqrt(fan_in))
    values = rng.random(shape, dtype=np.float32)
    values *= 2 * bound
    values -= bound
    return values


def _graph_block(i: int, x: str, rng: np.random.Generator, width: int, seq: int) -> tuple[list, list, str]:
    """One pre-norm residual MLP block with the reshape/transpose noise exporters leave behind."""
    p = f"b{i}"
    weights = [
        numpy_helper.from_array(np.ones(width, np.float32), f"{p}.ln.scale"),
        numpy_helper.from_array(np.zeros(width, np.float32), f"{p}.ln.bias"),
        numpy_helper.from_array(_uniform(rng, (width, 2 * width), width), f"{p}.fc1.weight"),
        numpy_helper.from_array(_uniform(rng, (2 * width,), width), f"{p}.fc1.bias"),
        numpy_helper.from_array(_uniform(rng, (2 * width, width), 2 * width), f"{p}.fc2.weight"),
        numpy_helper.from_array(_uniform(rng, (width,), 2 * width), f"{p}.fc2.bias"),
        numpy_helper.from_array(np.array([1, seq, 4, width // 4], np.int64), f"{p}.split_shape"),
        numpy_helper.from_array(np.array([1, seq, width], np.int64), f"{p}.merge_shape"),
        numpy_helper.from_array(np.array(0.5, np.float32), f"{p}.half"),
    ]
    node = helper.make_node
    nodes = [
        node("LayerNormalization", [x, f"{p}.ln.scale", f"{p}.ln.bias"], [f"{p}.ln"], axis=-1),
        node("MatMul", [f"{p}.ln", f"{p}.fc1.weight"], [f"{p}.fc1.mm"]),
        node("Add", [f"{p}.fc1.mm", f"{p}.fc1.bias"], [f"{p}.fc1"]),
        node("Sigmoid", [f"{p}.fc1"], [f"{p}.gate"]),
        node("Mul", [f"{p}.fc1", f"{p}.gate"], [f"{p}.silu"]),
        node("MatMul", [f"{p}.silu", f"{p}.fc2.weight"], [f"{p}.fc2.mm"]),
        node("Add", [f"{p}.fc2.mm", f"{p}.fc2.bias"], [f"{p}.fc2"]),
        node("Reshape", [f"{p}.fc2", f"{p}.split_shape"], [f"{p}.heads"]),
        node("Transpose", [f"{p}.heads"], [f"{p}.heads_t"], perm=[0, 2, 1, 3]),
        node("Transpose", [f"{p}.heads_t"], [f"{p}.heads_back"], perm=[0, 2, 1, 3]),
        node("Reshape", [f"{p}.heads_back", f"{p}.merge_shape"], [f"{p}.merged"]),
        # A constant subexpression (0.5 + 0.5) that constant folding removes.
        node("Add", [f"{p}.half", f"{p}.half"], [f"{p}.unit"]),
        node("Mul", [f"{p}.merged", f"{p}.unit"], [f"{p}.scaled"]),
        node("Identity", [f"{p}.scaled"], [f"{p}.branch"]),
        node("Add", [x, f"{p}.branch"], [f"{p}.out"]),
    ]
    assert len(nodes) == NODES_PER_BLOCK
    return nodes, weights, f"{p}.out"


def build_large_graph(sizes: Sizes, seed: int = SEED) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    width, seq = sizes.graph_width, 8
    nodes, weights, x = [], [], "x"
    for i in range(sizes.graph_blocks):
        block_nodes, block_weights, x = _graph_block(i, x, rng, width, seq)
        nodes += block_nodes
        weights += block_weights
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(
        nodes,
        LARGE_GRAPH,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, width])],
        initializer=weights,
    )
    return _model(graph, f"{sizes.graph_nodes + 1} nodes in {sizes.graph_blocks} residual MLP blocks")


def write_large_weights(folder: Path, sizes: Sizes, seed: int = SEED) -> Path:
    """``large_weights.onnx`` with its weights in ``large_weights.onnx.data``, streamed layer by layer."""
    rng = np.random.default_rng(seed + 1)
    width = sizes.weights_width
    model_path = folder / f"{LARGE_WEIGHTS}.onnx"
    data_name = f"{LARGE_WEIGHTS}.onnx.data"
    initializers, nodes, x = [], [], "x"
    with (folder / data_name).open("wb") as data:
        for i in range(sizes.weights_layers):
            for name, array in (
                (f"fc{i}.weight", _uniform(rng, (width, width), width)),
                (f"fc{i}.bias", _uniform(rng, (width,), width)),
            ):
                proto = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=array.shape)
                offset = data.tell()
                data.write(array.tobytes())
                for key, value in (("location", data_name), ("offset", offset), ("length", array.nbytes)):
                    proto.external_data.add(key=key, value=str(value))
                proto.data_location = TensorProto.EXTERNAL
                initializers.append(proto)
            relu = "Relu" if i < sizes.weights_layers - 1 else "Identity"
            out = f"fc{i}.out" if i < sizes.weights_layers - 1 else "y"
            nodes += [
                helper.make_node("MatMul", [x, f"fc{i}.weight"], [f"fc{i}.mm"]),
                helper.make_node("Add", [f"fc{i}.mm", f"fc{i}.bias"], [f"fc{i}.pre"]),
                helper.make_node(relu, [f"fc{i}.pre"], [out]),
            ]
            x = out
    graph = helper.make_graph(
        nodes,
        LARGE_WEIGHTS,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        initializer=initializers,
    )
    model = _model(graph, f"{sizes.weights_layers} layers of {width}x{width}, weights in {data_name}")
    onnx.save_model(model, str(model_path))
    return model_path


def _model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    return helper.make_model(
        graph,
        producer_name="onnx-cooker bench",
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        doc_string=doc,
    )


def write_assets(examples: Path, folder: Path, sizes: Sizes) -> None:
    """The example assets (copied from ``examples``) plus the two synthetic models, into ``folder``."""
    shutil.copytree(examples, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    onnx.save_model(build_large_graph(sizes), str(folder / f"{LARGE_GRAPH}.onnx"))
    write_large_weights(folder, sizes)
