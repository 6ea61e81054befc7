"""The small, seeded ONNX models the tests build (``onnx.helper`` graphs), in one place.

Every builder returns a fresh ModelProto; weights come from ``numpy.random.default_rng(seed)``, so the
same call builds the same bytes. Models only one test needs stay beside that test.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG_SEED = 7
# tiny_model and mixed_weights_model: x [N, 16] -> y [N, 8].
IN_FEATURES = 16
OUT_FEATURES = 8
MLP_HIDDEN = 64


def model_of(graph: onnx.GraphProto, *, opset: int = 17, ir_version: int = 8) -> onnx.ModelProto:
    """``graph`` as a model importing the default domain at ``opset``."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def word_ids_model(
    keys: list[str], shape: list[int], *, echo: bool = False, matmul: bool = False
) -> onnx.ModelProto:
    """words [shape] string -> ids int64 (ai.onnx.ml LabelEncoder: the keys to 10, 11, ..., other
    words to -1); with ``echo`` the words again as an output "echo", with ``matmul`` a float
    x [1, 8] @ W -> y beside them."""
    nodes = [
        helper.make_node(
            "LabelEncoder",
            ["words"],
            ["ids"],
            domain="ai.onnx.ml",
            keys_strings=keys,
            values_int64s=list(range(10, 10 + len(keys))),
            default_int64=-1,
        )
    ]
    inputs = [helper.make_tensor_value_info("words", TensorProto.STRING, shape)]
    outputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, shape)]
    initializers = []
    if echo:
        nodes.append(helper.make_node("Identity", ["words"], ["echo"]))
        outputs.append(helper.make_tensor_value_info("echo", TensorProto.STRING, shape))
    if matmul:
        weight = np.random.default_rng(RNG_SEED).standard_normal((8, 8)).astype(np.float32)
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y"]))
        inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]))
        outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8]))
        initializers.append(numpy_helper.from_array(weight, "w"))
    graph = helper.make_graph(nodes, "words", inputs, outputs, initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    model.ir_version = 8
    return model


def dense_model(
    inputs: int,
    outputs: int,
    *,
    batch: int | None,
    seed: int,
    activation: str | None = None,
    name: str = "dense",
) -> onnx.ModelProto:
    """``y = activation(x @ W + b)``: x [batch, inputs] (``None``: a symbolic batch), W [inputs,
    outputs] then b [outputs] drawn from the seeded generator."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((inputs, outputs)).astype(np.float32)
    bias = rng.standard_normal(outputs).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["pre" if activation else "y"]),
    ]
    if activation:
        nodes.append(helper.make_node(activation, ["pre"], ["y"]))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, outputs])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    model = model_of(graph)
    onnx.checker.check_model(model)
    return model


def tiny_model(seed: int = 0) -> onnx.ModelProto:
    """``y = Relu(x @ W + b)``, x [N, 16] -> y [N, 8]: the runtime loader tests' subject."""
    return dense_model(
        IN_FEATURES, OUT_FEATURES, batch=None, seed=seed, activation="Relu", name=f"tiny{seed}"
    )


def mlp_model() -> onnx.ModelProto:
    """A small MLP (MatMul, Add, Sigmoid), x [1, 8] -> y [1, 4], beside the conv net in projects."""
    return dense_model(8, 4, batch=1, seed=RNG_SEED + 1, activation="Sigmoid", name="mlp")


def matmul_model(seed: int = 11) -> onnx.ModelProto:
    """``y = x @ W + b``, x [2, 8] -> y [2, 4]: real initializers to cut into or move out."""
    return dense_model(8, 4, batch=2, seed=seed, name="matmul")


def mixed_weights_model(seed: int = 0) -> onnx.ModelProto:
    """Like ``tiny_model`` (x: [N, 16] -> y: [N, 8]) but with three initializers big enough to move to
    a blob's weights section, of three data types: float32 ``W1``, int64 ``perm``, float16 ``W2h``.
    The small float32 bias ``b1`` stays in the graph."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((IN_FEATURES, MLP_HIDDEN)).astype(np.float32)
    b1 = rng.standard_normal(MLP_HIDDEN).astype(np.float32)
    perm = rng.integers(0, MLP_HIDDEN, 3 * MLP_HIDDEN).astype(np.int64)
    w2 = rng.standard_normal((3 * MLP_HIDDEN, OUT_FEATURES)).astype(np.float16)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W1"], ["xw"]),
            helper.make_node("Add", ["xw", "b1"], ["pre"]),
            helper.make_node("Relu", ["pre"], ["h"]),
            helper.make_node("Gather", ["h", "perm"], ["picked"], axis=1),
            helper.make_node("Cast", ["W2h"], ["W2"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["picked", "W2"], ["y"]),
        ],
        f"mlp{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, IN_FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, OUT_FEATURES])],
        [
            numpy_helper.from_array(w1, "W1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(perm, "perm"),
            numpy_helper.from_array(w2, "W2h"),
        ],
    )
    model = model_of(graph)
    onnx.checker.check_model(model)
    return model


def large_matmul_model(rows: int, columns: int, *, seed: int) -> onnx.ModelProto:
    """``y = x @ W``, x [1, rows]: ``rows`` x ``columns`` seeded random (incompressible) float32 weights."""
    weights = np.random.default_rng(seed).standard_normal((rows, columns)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, columns])],
        [numpy_helper.from_array(weights, "W")],
    )
    return model_of(graph)


def matmul_stack_model(width: int, layers: int, *, seed: int) -> onnx.ModelProto:
    """``layers`` chained ``x @ W_i`` (x [1, width]), each ``width`` x ``width`` seeded random float32
    weights, scaled to keep the outputs near 1: weights packed one tensor after another."""
    rng = np.random.default_rng(seed)
    nodes, weights, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        weights.append(numpy_helper.from_array(w, f"W{i}"))
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [out]))
        x = out
    graph = helper.make_graph(
        nodes,
        "stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        weights,
    )
    return model_of(graph)


def conv_bn_relu_model() -> onnx.ModelProto:
    """Conv + BatchNormalization + Relu: the pattern CPU optimizers fuse into device-specific ops."""
    rng = np.random.default_rng(RNG_SEED)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "bias"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.random(16).astype(np.float32) + 0.5, "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_bn_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
        initializers,
    )
    return model_of(graph)


def dynamic_image_model(stages: int = 4, branch: bool = False, width: int = 8) -> onnx.ModelProto:
    """A conv net over an image of any height and width (``[1, 3, "height", "width"]``), ``width``
    channels: each stage a
    Conv (stride 2 every other stage) + Relu + Add of the two; with ``branch`` the last stage sits in
    an ``If``'s branches (its condition a graph input). Every shape after the first Conv has
    dimensions shape inference cannot size."""
    rng = np.random.default_rng(RNG_SEED)
    initializers, nodes, x, channels = [], [], "x", 3
    for i in range(stages):
        w = rng.standard_normal((width, channels, 3, 3)).astype(np.float32) * 0.2
        initializers.append(numpy_helper.from_array(w, f"w{i}"))
        stride = 2 if i % 2 else 1
        nodes += [
            helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1], strides=[stride, stride]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            helper.make_node("Add", [f"c{i}", f"r{i}"], [f"s{i}"]),
        ]
        x, channels = f"s{i}", width
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "height", "width"])]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width, None, None])
    if branch:

        def arm(op: str) -> onnx.GraphProto:
            body = [helper.make_node(op, [x], ["t"]), helper.make_node("Relu", ["t"], ["y_arm"])]
            out = helper.make_tensor_value_info("y_arm", TensorProto.FLOAT, [1, width, None, None])
            return helper.make_graph(body, f"{op.lower()}_arm", [], [out])

        inputs.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
        nodes.append(helper.make_node("If", ["flag"], ["y"], then_branch=arm("Neg"), else_branch=arm("Abs")))
    else:
        nodes.append(helper.make_node("Identity", [x], ["y"]))
    return model_of(helper.make_graph(nodes, "dynamic_image", inputs, [output], initializers))


def transposed_weight_model() -> onnx.ModelProto:
    """MatMul by the transpose of a 2-D weight: onnxruntime folds the Transpose at load, reading the
    weight (a refusal of shared initializers that no 4-D weight announces)."""
    rng = np.random.default_rng(RNG_SEED)
    weight = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    nodes = [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("MatMul", ["x", "wt"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "transposed_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    return model_of(graph)


def float_4d_weight_model() -> onnx.ModelProto:
    """x + w with a float32 4-D weight no optimizer reads: onnxruntime 1.24.4 and 1.28.0 accept it
    as a shared initializer, but the loaders' rule (float 4-D weights: Conv kernels) skips that door."""
    rng = np.random.default_rng(RNG_SEED)
    weight = numpy_helper.from_array(rng.standard_normal((1, 4, 8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "float_4d_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [weight],
    )
    return model_of(graph)


def half_conv_model() -> onnx.ModelProto:
    """A float16 Conv + Relu: the CPU EP has no float16 Conv, so onnxruntime puts Casts around it
    and folds the weight's Cast at load, reading it (1.24.4 and 1.28.0 refuse shared initializers)."""
    rng = np.random.default_rng(RNG_SEED)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float16), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "half_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 16, 16, 16])],
        [weight],
    )
    return model_of(graph)


def half_concat_model() -> onnx.ModelProto:
    """Concat of x and a float16 weight: a type-agnostic kernel that nothing folds, so onnxruntime
    1.24.4 and 1.28.0 accept the weight as a shared initializer, while the loaders' rule (16-bit
    float weights are read at load) skips that door."""
    weight = numpy_helper.from_array((np.arange(256 * 64) % 100).astype(np.float16).reshape(256, 64), "w")
    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "w"], ["y"], axis=0)],
        "half_concat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [257, 64])],
        [weight],
    )
    return model_of(graph)


def relu_model(opset: int) -> onnx.ModelProto:
    """One Relu, x [2, 3] -> y [2, 3], importing ``opset`` (IR 10)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return model_of(graph, opset=opset, ir_version=10)


def with_symbolic_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the first dimension of its first input and output named ``batch``."""
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


def transformer_block_model(width: int = 64, seq: int = 8, seed: int = RNG_SEED) -> onnx.ModelProto:
    """One encoder block: single-head self-attention (MatMul, Softmax), residual + LayerNormalization,
    a ReLU feed-forward of 2x width, residual + LayerNormalization. x [1, seq, width] -> y."""
    rng = np.random.default_rng(seed)

    def weight(name: str, rows: int, cols: int) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32), name
        )

    inits = [weight(n, width, width) for n in ("wq", "wk", "wv", "wo")]
    inits += [weight("w1", width, 2 * width), weight("w2", 2 * width, width)]
    inits += [numpy_helper.from_array(np.full((), np.sqrt(width), np.float32), "scale")]
    for i in (1, 2):
        inits += [
            numpy_helper.from_array(np.ones(width, np.float32), f"g{i}"),
            numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}"),
        ]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Div", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["a"]),
        helper.make_node("MatMul", ["a", "wo"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["r1"]),
        helper.make_node("LayerNormalization", ["r1", "g1", "b1"], ["n1"], axis=-1),
        helper.make_node("MatMul", ["n1", "w1"], ["f1"]),
        helper.make_node("Relu", ["f1"], ["f1r"]),
        helper.make_node("MatMul", ["f1r", "w2"], ["f2"]),
        helper.make_node("Add", ["f2", "n1"], ["r2"]),
        helper.make_node("LayerNormalization", ["r2", "g2", "b2"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, width])],
        inits,
    )
    return model_of(graph)


def int4_model() -> onnx.ModelProto:
    """Casts through int4: a type onnxruntime's operator-type processor cannot name."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["q"], to=TensorProto.INT4),
            helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT),
        ],
        "int4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return model_of(graph, opset=21, ir_version=10)


def shared_constants_model(ir_version: int, blocks: int = 96) -> onnx.ModelProto:
    """Many identical small constants, as exporters generate them (Unsqueeze/Squeeze axes, scalar
    factors), beside one 16x16 weight: onnxruntime's ConstantSharing keeps one of each, so the cooked
    model holds about a third of the source's weight bytes and loses nothing. x [1, 16] -> y [1, 16].
    IR < 4 lists every initializer as a graph input too."""
    rng = np.random.default_rng(RNG_SEED)
    weight = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
    initializers = [numpy_helper.from_array(weight, "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"], name="project")]
    for i in range(blocks):
        initializers += [
            numpy_helper.from_array(np.array([0], np.int64), f"axes{i}"),
            numpy_helper.from_array(np.array([0], np.int64), f"again{i}"),
            numpy_helper.from_array(np.array([0.5], np.float32), f"half{i}"),
        ]
        nodes += [
            helper.make_node("Unsqueeze", [f"h{i}", f"axes{i}"], [f"u{i}"], name=f"unsqueeze{i}"),
            helper.make_node("Squeeze", [f"u{i}", f"again{i}"], [f"s{i}"], name=f"squeeze{i}"),
            helper.make_node("Mul", [f"s{i}", f"half{i}"], [f"m{i}"], name=f"scale{i}"),
            helper.make_node("Add", [f"m{i}", f"h{i}"], [f"h{i + 1}"], name=f"residual{i}"),
        ]
    nodes[-1].output[0] = "y"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])]
    if ir_version < 4:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in initializers]
    graph = helper.make_graph(
        nodes,
        "shared_constants",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        initializers,
    )
    return model_of(graph, opset=13, ir_version=ir_version)


def todays_onnx_model(seed: int = RNG_SEED) -> onnx.ModelProto:
    """A Gemm + Relu + Softmax classifier saved as ``onnx.helper.make_model`` saves it in onnx 1.23:
    IR 14, opset 28 (pinned, so that the bytes do not follow the installed onnx). x [2, 8] -> y [2, 4]."""
    rng = np.random.default_rng(seed)
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="dense", transB=1),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
        ],
        "todays_onnx",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [
            numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        ],
    )
    return model_of(graph, opset=28, ir_version=14)


def tanh_loop_body(elem_type: int) -> onnx.GraphProto:
    """A Loop body: y_out = tanh(y_in @ W), W read from the outer graph, the condition passed on."""
    return helper.make_graph(
        [
            helper.make_node("MatMul", ["y_in", "W"], ["mm"]),
            helper.make_node("Tanh", ["mm"], ["y_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_in", elem_type, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_out", elem_type, None),
        ],
    )
