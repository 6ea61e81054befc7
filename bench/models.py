"""The benchmark's inputs: the example assets plus synthetic models built here, seeded.

Graph-bound and weight-bound models, in the shapes exporters write (torch.onnx, tf2onnx):

- ``mobilenet``: MobileNetV2 inverted residuals (1x1 expand, 3x3 depthwise, 1x1 project, ReLU6 as
  ``Clip``), batch norm folded into the convolutions;
- ``resnet18``: basic residual blocks, batch norm folded;
- ``resnet50``: bottleneck residual blocks with their ``BatchNormalization`` nodes kept (an export
  without constant folding: the runtime fuses them at load);
- ``unet``: a segmentation encoder-decoder (``MaxPool`` down, ``ConvTranspose`` up, skip ``Concat``);
- ``transformer``: a BERT-style encoder (token ``Gather``, attention from MatMul/Softmax with a
  padding mask, LayerNormalization, GELU as exporters write it with ``Erf``);
- ``lstm``: two stacked ONNX ``LSTM`` layers (batch first, as torch exports) and a per-step head;
- ``large_graph``: many small nodes (LayerNormalization, MatMul+Add, SiLU, reshape/transpose pairs,
  constant subexpressions), so that loading is dominated by graph work, not by weights;
- ``large_weights``: a few wide MatMul layers whose weights live in ``<stem>.onnx.data`` beside the
  model, so that loading is dominated by bytes;
- ``huge_weights`` (only with ``--huge``): the same over 2 GB, past what the ORT format and a
  protobuf can hold.

Weights are drawn like trained ones, not as uniform noise: normal with a small standard deviation
(about 1/sqrt(fan-in)), each output channel with its own scale, which zstd compresses about as little
as real float32 weights (~1.08x). Only onnx and numpy; the same sizes and seed give the same bytes.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Sequence
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
HUGE_WEIGHTS = "huge_weights"
# Nodes written per block of the large graph (see _graph_block).
NODES_PER_BLOCK = 15
# The verification tolerances of the deep generated models (their .cook.yaml), as a user of such a
# model sets them: fused kernels round differently, and 50 layers add the differences up.
DEEP_MODEL_SETTINGS = "# A deep network: fused kernels round differently.\nrtol: 1.0e-3\natol: 1.0e-4\n"


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """How big the synthetic models are: full run or the CI smoke run."""

    graph_blocks: int  # NODES_PER_BLOCK nodes each
    graph_width: int
    weights_width: int  # the large-weights model has weights_layers layers of width x width
    weights_layers: int
    huge_width: int  # the >2 GB model (--huge): huge_layers layers of huge_width x huge_width
    huge_layers: int
    image: int  # input height and width of the image classifiers
    classes: int
    mobilenet_width: float  # MobileNetV2 width multiplier
    mobilenet_last: int  # channels of its last 1x1 convolution (1280 in the paper)
    resnet18_width: int  # channels of the first stage (64 in ResNet-18)
    resnet50_width: int  # bottleneck width of the first stage (64 in ResNet-50)
    unet_base: int  # channels of the first level (64 in U-Net)
    unet_image: int
    unet_classes: int
    bert_layers: int
    bert_hidden: int
    bert_heads: int
    bert_vocab: int
    bert_seq: int
    lstm_features: int
    lstm_hidden: int
    lstm_seq: int
    lstm_classes: int

    @property
    def graph_nodes(self) -> int:
        return self.graph_blocks * NODES_PER_BLOCK

    @property
    def weights_bytes(self) -> int:
        return self.weights_layers * (self.weights_width * self.weights_width + self.weights_width) * 4

    @property
    def huge_bytes(self) -> int:
        return self.huge_layers * (self.huge_width * self.huge_width + self.huge_width) * 4


FULL = Sizes(
    graph_blocks=150,  # 2,250 nodes
    graph_width=32,
    weights_width=4096,  # 268 MB
    weights_layers=4,
    huge_width=8192,  # 2.4 GB
    huge_layers=9,
    image=160,
    classes=1000,
    mobilenet_width=0.5,  # ~5 MB
    mobilenet_last=704,
    resnet18_width=36,  # ~15 MB
    resnet50_width=34,  # ~30 MB
    unet_base=44,  # ~60 MB
    unet_image=96,
    unet_classes=8,
    bert_layers=4,  # ~21 MB
    bert_hidden=256,
    bert_heads=4,
    bert_vocab=8192,
    bert_seq=128,
    lstm_features=80,  # ~3.5 MB
    lstm_hidden=256,
    lstm_seq=64,
    lstm_classes=32,
)
QUICK = Sizes(
    graph_blocks=8,
    graph_width=16,
    weights_width=512,  # 2.1 MB: over the 1 MiB at which ONNX blobs get a weights section
    weights_layers=2,
    huge_width=512,
    huge_layers=2,
    image=32,
    classes=10,
    mobilenet_width=0.25,
    mobilenet_last=64,
    resnet18_width=4,
    resnet50_width=4,
    unet_base=4,
    unet_image=32,
    unet_classes=2,
    bert_layers=2,  # 1 layer trips an onnxruntime 1.32 bug on reloading basic-optimized ONNX
    bert_hidden=16,
    bert_heads=2,
    bert_vocab=64,
    bert_seq=8,
    lstm_features=8,
    lstm_hidden=8,
    lstm_seq=6,
    lstm_classes=4,
)


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    # Uniform in +-1/sqrt(fan_in), like default initializers: activations stay O(1) through the stack.
    bound = np.float32(1.0 / np.sqrt(fan_in))
    values = rng.random(shape, dtype=np.float32)
    values *= 2 * bound
    values -= bound
    return values


def _trained(
    rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, gain: float = 1.0, axis: int = 0
) -> np.ndarray:
    """Weights shaped like trained ones: normal, std gain/sqrt(fan_in), each slice along ``axis``
    (the output channel) scaled by its own log-normal factor."""
    values = rng.standard_normal(shape, dtype=np.float32)
    values *= np.float32(gain / math.sqrt(fan_in))
    if len(shape) > 1:
        scale = np.exp(rng.normal(0.0, 0.25, shape[axis])).astype(np.float32)
        values *= scale.reshape([-1 if i == axis else 1 for i in range(len(shape))])
    return values


class _Net:
    """Nodes and initializers of one graph being built; every name is prefixed and unique."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._names: set[str] = set()

    def const(self, name: str, array: np.ndarray) -> str:
        assert name not in self._names, name
        self._names.add(name)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str, shape: Sequence[int], fan_in: int, gain: float = 1.0, axis: int = 0) -> str:
        return self.const(name, _trained(self.rng, tuple(shape), fan_in, gain, axis))

    def bias(self, name: str, size: int, std: float = 0.02) -> str:
        return self.const(name, (self.rng.standard_normal(size) * std).astype(np.float32))

    def node(self, op: str, inputs: Sequence[str], output: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output

    # --- convolutions, as exporters write them -----------------------------------------------

    def conv(
        self,
        name: str,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        group: int = 1,
        bias: bool = True,
        gain: float = math.sqrt(2.0),
    ) -> str:
        fan_in = cin // group * kernel * kernel
        w = self.weight(f"{name}.weight", (cout, cin // group, kernel, kernel), fan_in, gain)
        inputs = [x, w] + ([self.bias(f"{name}.bias", cout)] if bias else [])
        pad = kernel // 2
        return self.node(
            "Conv",
            inputs,
            name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=group,
            dilations=[1, 1],
        )

    def batchnorm(self, name: str, x: str, channels: int) -> str:
        """An unfused BatchNormalization with running statistics like a trained network's."""
        rng = self.rng
        scale = self.const(f"{name}.weight", rng.normal(1.0, 0.1, channels).astype(np.float32))
        shift = self.const(f"{name}.bias", rng.normal(0.0, 0.05, channels).astype(np.float32))
        mean = self.const(f"{name}.running_mean", rng.normal(0.0, 0.05, channels).astype(np.float32))
        var = self.const(f"{name}.running_var", rng.uniform(0.8, 1.2, channels).astype(np.float32))
        return self.node("BatchNormalization", [x, scale, shift, mean, var], name, epsilon=1e-5)

    def relu(self, x: str) -> str:
        return self.node("Relu", [x], f"{x}.relu")

    def relu6(self, x: str) -> str:
        """ReLU6 as torch exports it: Clip with its bounds as constant inputs."""
        low = self.const(f"{x}.clip_min", np.array(0.0, np.float32))
        high = self.const(f"{x}.clip_max", np.array(6.0, np.float32))
        return self.node("Clip", [x, low, high], f"{x}.relu6")

    def classifier(self, x: str, channels: int, classes: int) -> str:
        """Global average pool, Flatten, Gemm: the head of an image classifier."""
        pooled = self.node("GlobalAveragePool", [x], "pool")
        flat = self.node("Flatten", [pooled], "flatten", axis=1)
        w = self.weight("fc.weight", (classes, channels), channels)
        return self.node("Gemm", [flat, w, self.bias("fc.bias", classes)], "logits", transB=1)

    # --- transformers ----------------------------------------------------------------------

    def linear(self, name: str, x: str, cin: int, cout: int, gain: float = 1.0) -> str:
        """torch.nn.Linear on a [batch, seq, features] tensor: MatMul then Add."""
        w = self.weight(f"{name}.weight", (cin, cout), cin, gain, axis=1)
        mm = self.node("MatMul", [x, w], f"{name}.matmul")
        return self.node("Add", [mm, self.bias(f"{name}.bias", cout)], name)

    def layernorm(self, name: str, x: str, width: int) -> str:
        scale = self.const(f"{name}.weight", self.rng.normal(1.0, 0.05, width).astype(np.float32))
        shift = self.const(f"{name}.bias", self.rng.normal(0.0, 0.02, width).astype(np.float32))
        return self.node("LayerNormalization", [x, scale, shift], name, axis=-1, epsilon=1e-12)

    def shape(self, name: str, dims: Sequence[int]) -> str:
        return self.const(name, np.array(dims, np.int64))

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, np.array(value, np.float32))

    def model(
        self,
        name: str,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[onnx.ValueInfoProto],
        doc: str,
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name, list(inputs), list(outputs), initializer=self.initializers
        )
        return _model(graph, doc)


def _image_input(size: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])


def _divisible(value: float, divisor: int = 8) -> int:
    """MobileNet's channel rounding (torchvision's _make_divisible)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def build_mobilenet(sizes: Sizes, seed: int = SEED) -> onnx.ModelProto:
    """MobileNetV2: inverted residual blocks (expand, depthwise, project), ReLU6, BN folded."""
    net = _Net(seed + 10)
    width = sizes.mobilenet_width
    # expansion t, channels c, repeats n, first stride s (the paper's table 2)
    config = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2)]
    config.append((6, 320, 1, 1))
    channels = _divisible(32 * width)
    x = net.relu6(net.conv("features.0", "input", 3, channels, 3, stride=2))
    block = 1
    for t, c, n, s in config:
        out = _divisible(c * width)
        for i in range(n):
            p = f"features.{block}"
            hidden = channels * t
            h = x
            if t != 1:
                h = net.relu6(net.conv(f"{p}.expand", h, channels, hidden, 1))
            h = net.relu6(
                net.conv(f"{p}.depthwise", h, hidden, hidden, 3, stride=s if i == 0 else 1, group=hidden)
            )
            h = net.conv(f"{p}.project", h, hidden, out, 1, gain=0.5)
            x = net.node("Add", [x, h], f"{p}.add") if (i > 0 or s == 1) and channels == out else h
            channels = out
            block += 1
    last = sizes.mobilenet_last
    x = net.relu6(net.conv(f"features.{block}", x, channels, last, 1))
    logits = net.classifier(x, last, sizes.classes)
    output = helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, sizes.classes])
    return net.model("mobilenet", [_image_input(sizes.image)], [output], "MobileNetV2, BN folded")


def build_resnet18(sizes: Sizes, seed: int = SEED) -> onnx.ModelProto:
    """ResNet-18: basic blocks of two 3x3 convolutions, BN folded into them (torch.onnx's default)."""
    net = _Net(seed + 20)
    w = sizes.resnet18_width
    x = net.relu(net.conv("conv1", "input", 3, w, 7, stride=2))
    x = net.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = w
    for stage, out in enumerate((w, 2 * w, 4 * w, 8 * w), start=1):
        for i in range(2):
            p = f"layer{stage}.{i}"
            stride = 2 if i == 0 and stage > 1 else 1
            h = net.relu(net.conv(f"{p}.conv1", x, channels, out, 3, stride=stride))
            h = net.conv(f"{p}.conv2", h, out, out, 3, gain=0.5)
            skip = (
                x
                if stride == 1 and channels == out
                else net.conv(f"{p}.downsample", x, channels, out, 1, stride=stride)
            )
            x = net.relu(net.node("Add", [h, skip], f"{p}.add"))
            channels = out
    logits = net.classifier(x, channels, sizes.classes)
    output = helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, sizes.classes])
    return net.model("resnet18", [_image_input(sizes.image)], [output], "ResNet-18, BN folded")


def build_resnet50(sizes: Sizes, seed: int = SEED) -> onnx.ModelProto:
    """ResNet-50: bottleneck blocks (1x1, 3x3, 1x1 x4), each convolution followed by its own
    BatchNormalization node, as an export without constant folding leaves them."""
    net = _Net(seed + 30)
    w = sizes.resnet50_width

    def conv_bn(
        name: str, x: str, cin: int, cout: int, kernel: int, stride: int = 1, gain: float = 1.4
    ) -> str:
        return net.batchnorm(
            f"{name}.bn",
            x=net.conv(name, x, cin, cout, kernel, stride=stride, bias=False, gain=gain),
            channels=cout,
        )

    x = net.relu(conv_bn("conv1", "input", 3, w, 7, 2))
    x = net.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = w
    for stage, (blocks, width) in enumerate(
        zip((3, 4, 6, 3), (w, 2 * w, 4 * w, 8 * w), strict=True), start=1
    ):
        out = width * 4
        for i in range(blocks):
            p = f"layer{stage}.{i}"
            stride = 2 if i == 0 and stage > 1 else 1
            h = net.relu(conv_bn(f"{p}.conv1", x, channels, width, 1))
            h = net.relu(conv_bn(f"{p}.conv2", h, width, width, 3, stride))
            h = conv_bn(f"{p}.conv3", h, width, out, 1, gain=0.3)
            skip = x if i > 0 else conv_bn(f"{p}.downsample", x, channels, out, 1, stride, gain=1.0)
            x = net.relu(net.node("Add", [h, skip], f"{p}.add"))
            channels = out
    logits = net.classifier(x, channels, sizes.classes)
    output = helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, sizes.classes])
    return net.model(
        "resnet50", [_image_input(sizes.image)], [output], "ResNet-50, BatchNormalization nodes kept"
    )


def build_unet(sizes: Sizes, seed: int = SEED) -> onnx.ModelProto:
    """U-Net: four levels down (two 3x3 conv + ReLU, MaxPool), four up (ConvTranspose, Concat with
    the skip connection, two 3x3 conv + ReLU), a 1x1 convolution to per-pixel class scores."""
    net = _Net(seed + 40)
    b = sizes.unet_base

    def double(name: str, x: str, cin: int, cout: int) -> str:
        x = net.relu(net.conv(f"{name}.conv1", x, cin, cout, 3))
        return net.relu(net.conv(f"{name}.conv2", x, cout, cout, 3))

    skips, x, channels = [], "input", 3
    for level in range(4):
        out = b << level
        x = double(f"down{level}", x, channels, out)
        skips.append((x, out))
        x = net.node("MaxPool", [x], f"down{level}.pool", kernel_shape=[2, 2], strides=[2, 2])
        channels = out
    x = double("bottom", x, channels, b << 4)
    channels = b << 4
    for level in reversed(range(4)):
        skip, skip_channels = skips[level]
        fan_in = channels * 4
        w = net.weight(f"up{level}.upconv.weight", (channels, skip_channels, 2, 2), fan_in, 1.0, axis=1)
        up = net.node(
            "ConvTranspose",
            [x, w, net.bias(f"up{level}.upconv.bias", skip_channels)],
            f"up{level}.upconv",
            kernel_shape=[2, 2],
            strides=[2, 2],
        )
        x = net.node("Concat", [skip, up], f"up{level}.concat", axis=1)
        x = double(f"up{level}", x, 2 * skip_channels, skip_channels)
        channels = skip_channels
    scores = net.conv("head", x, channels, sizes.unet_classes, 1, gain=1.0)
    size = sizes.unet_image
    output = helper.make_tensor_value_info(scores, TensorProto.FLOAT, [1, sizes.unet_classes, size, size])
    return net.model("unet", [_image_input(size)], [output], "U-Net, BN folded")


def build_transformer(sizes: Sizes, seed: int = SEED) -> onnx.ModelProto:
    """A BERT-style encoder as torch.onnx writes it: token and position embeddings, a padding mask
    from the token ids (id 0), multi-head attention from MatMul/Softmax, GELU with Erf."""
    net = _Net(seed + 50)
    hidden, heads, seq = sizes.bert_hidden, sizes.bert_heads, sizes.bert_seq
    head = hidden // heads
    tokens = net.weight("embeddings.word", (sizes.bert_vocab, hidden), 1, 0.05, axis=1)
    positions = net.weight("embeddings.position", (seq, hidden), 1, 0.02, axis=1)
    x = net.node("Gather", [tokens, "input_ids"], "embeddings.gather", axis=0)
    x = net.node("Add", [x, positions], "embeddings.add")
    x = net.layernorm("embeddings.norm", x, hidden)
    # Padding mask: (ids == 0) * -10000, shaped [1, 1, 1, seq] to add to the attention scores.
    pad = net.node("Equal", ["input_ids", net.const("mask.pad_id", np.array(0, np.int64))], "mask.is_pad")
    pad = net.node("Cast", [pad], "mask.cast", to=TensorProto.FLOAT)
    pad = net.node("Mul", [pad, net.scalar("mask.min", -10000.0)], "mask.scaled")
    mask = net.node("Unsqueeze", [pad, net.shape("mask.axes", [1, 2])], "mask")
    split = net.shape("attention.split_shape", [1, seq, heads, head])
    merge = net.shape("attention.merge_shape", [1, seq, hidden])
    sqrt_head = net.scalar("attention.sqrt_head", math.sqrt(head))
    sqrt2, one, half = (
        net.scalar("gelu.sqrt2", math.sqrt(2.0)),
        net.scalar("gelu.one", 1.0),
        net.scalar("gelu.half", 0.5),
    )
    for i in range(sizes.bert_layers):
        p = f"layer{i}"

        def heads_of(name: str, perm: list[int], p: str = p, x: str = x) -> str:
            projected = net.linear(f"{p}.attention.{name}", x, hidden, hidden)
            shaped = net.node("Reshape", [projected, split], f"{p}.attention.{name}.heads")
            return net.node("Transpose", [shaped], f"{p}.attention.{name}.transposed", perm=perm)

        q = heads_of("query", [0, 2, 1, 3])
        k = heads_of("key", [0, 2, 3, 1])
        v = heads_of("value", [0, 2, 1, 3])
        scores = net.node("MatMul", [q, k], f"{p}.attention.scores")
        scores = net.node("Div", [scores, sqrt_head], f"{p}.attention.scaled")
        scores = net.node("Add", [scores, mask], f"{p}.attention.masked")
        probs = net.node("Softmax", [scores], f"{p}.attention.probs", axis=-1)
        context = net.node("MatMul", [probs, v], f"{p}.attention.context")
        context = net.node("Transpose", [context], f"{p}.attention.context.transposed", perm=[0, 2, 1, 3])
        context = net.node("Reshape", [context, merge], f"{p}.attention.context.merged")
        attended = net.linear(f"{p}.attention.output", context, hidden, hidden, gain=0.5)
        x = net.layernorm(
            f"{p}.attention.norm", net.node("Add", [attended, x], f"{p}.attention.residual"), hidden
        )
        h = net.linear(f"{p}.intermediate", x, hidden, 4 * hidden)
        erf = net.node("Erf", [net.node("Div", [h, sqrt2], f"{p}.gelu.div")], f"{p}.gelu.erf")
        gelu = net.node("Mul", [h, net.node("Add", [erf, one], f"{p}.gelu.add")], f"{p}.gelu.mul")
        gelu = net.node("Mul", [gelu, half], f"{p}.gelu")
        h = net.linear(f"{p}.output", gelu, 4 * hidden, hidden, gain=0.5)
        x = net.layernorm(f"{p}.output.norm", net.node("Add", [h, x], f"{p}.output.residual"), hidden)
    net.node("Identity", [x], "last_hidden_state")
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])]
    return net.model("transformer", inputs, outputs, f"BERT-style encoder, {sizes.bert_layers} layers")


def build_lstm(sizes: Sizes, seed: int = SEED) -> onnx.ModelProto:
    """Two stacked LSTM layers on batch-first features (torch exports the transposes, the squeezes of
    the direction axis and zero initial states), then a per-step linear head."""
    net = _Net(seed + 60)
    hidden, seq = sizes.lstm_hidden, sizes.lstm_seq
    x = net.node("Transpose", ["input"], "to_seq_first", perm=[1, 0, 2])  # [seq, 1, features]
    zeros = net.const("lstm.initial_state", np.zeros((1, 1, hidden), np.float32))
    features = sizes.lstm_features
    for layer in range(2):
        p = f"lstm.{layer}"
        w = net.weight(f"{p}.W", (1, 4 * hidden, features), features, 1.0, axis=1)
        r = net.weight(f"{p}.R", (1, 4 * hidden, hidden), hidden, 1.0, axis=1)
        b = net.const(f"{p}.B", (net.rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32))
        y = net.node(
            "LSTM", [x, w, r, b, "", zeros, zeros], f"{p}.Y", hidden_size=hidden, direction="forward"
        )
        x = net.node("Squeeze", [y, net.shape(f"{p}.squeeze_axes", [1])], f"{p}.out")  # [seq, 1, hidden]
        features = hidden
    x = net.node("Transpose", [x], "to_batch_first", perm=[1, 0, 2])
    scores = net.linear("head", x, hidden, sizes.lstm_classes)
    net.node("Identity", [scores], "scores")
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, sizes.lstm_features])]
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, seq, sizes.lstm_classes])]
    return net.model("lstm", inputs, outputs, "two LSTM layers and a per-step head")


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


def write_matmul_stack(folder: Path, name: str, width: int, layers: int, seed: int) -> Path:
    """``<name>.onnx`` with its weights in ``<name>.onnx.data``, streamed layer by layer: ``layers``
    MatMul+Add layers of ``width`` x ``width`` float32, ReLU between them."""
    rng = np.random.default_rng(seed)
    model_path = folder / f"{name}.onnx"
    data_name = f"{name}.onnx.data"
    initializers, nodes, x = [], [], "x"
    with (folder / data_name).open("wb") as data:
        for i in range(layers):
            for tensor_name, array in (
                (f"fc{i}.weight", _trained(rng, (width, width), width, 1.4, axis=1)),
                (f"fc{i}.bias", (rng.standard_normal(width) * 0.02).astype(np.float32)),
            ):
                proto = TensorProto(name=tensor_name, data_type=TensorProto.FLOAT, dims=array.shape)
                offset = data.tell()
                data.write(array.tobytes())
                for key, value in (("location", data_name), ("offset", offset), ("length", array.nbytes)):
                    proto.external_data.add(key=key, value=str(value))
                proto.data_location = TensorProto.EXTERNAL
                initializers.append(proto)
                del array
            relu = "Relu" if i < layers - 1 else "Identity"
            out = f"fc{i}.out" if i < layers - 1 else "y"
            nodes += [
                helper.make_node("MatMul", [x, f"fc{i}.weight"], [f"fc{i}.mm"]),
                helper.make_node("Add", [f"fc{i}.mm", f"fc{i}.bias"], [f"fc{i}.pre"]),
                helper.make_node(relu, [f"fc{i}.pre"], [out]),
            ]
            x = out
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        initializer=initializers,
    )
    model = _model(graph, f"{layers} layers of {width}x{width}, weights in {data_name}")
    onnx.save_model(model, str(model_path))
    return model_path


def write_large_weights(folder: Path, sizes: Sizes, seed: int = SEED) -> Path:
    """``large_weights.onnx`` with its weights in ``large_weights.onnx.data``."""
    return write_matmul_stack(folder, LARGE_WEIGHTS, sizes.weights_width, sizes.weights_layers, seed + 1)


def write_huge_weights(folder: Path, sizes: Sizes, seed: int = SEED) -> Path:
    """``huge_weights.onnx`` with over 2 GB of weights in ``huge_weights.onnx.data`` (``--huge``)."""
    return write_matmul_stack(folder, HUGE_WEIGHTS, sizes.huge_width, sizes.huge_layers, seed + 2)


def _model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    return helper.make_model(
        graph,
        producer_name="onnx-cooker bench",
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        doc_string=doc,
    )


@dataclass(frozen=True)
class Generated:
    """One synthetic model of the set: its name, what kind it is, how it is built."""

    name: str
    kind: str  # one line for the report
    build: Callable[[Sizes], onnx.ModelProto]
    deep: bool = False  # gets DEEP_MODEL_SETTINGS as its .cook.yaml


# In-memory models; large_weights (streamed to disk) is written apart.
GENERATED = (
    Generated(
        "mobilenet", "conv net: MobileNetV2 inverted residuals, depthwise-separable", build_mobilenet, True
    ),
    Generated("resnet18", "conv net: ResNet-18 basic blocks, BN folded", build_resnet18, True),
    Generated(
        "resnet50", "conv net: ResNet-50 bottlenecks, BatchNormalization nodes kept", build_resnet50, True
    ),
    Generated("unet", "conv net: U-Net encoder-decoder, ConvTranspose and Concat", build_unet, True),
    Generated(
        "transformer",
        "transformer: BERT-style encoder, attention from MatMul/Softmax",
        build_transformer,
        True,
    ),
    Generated("lstm", "recurrent: two ONNX LSTM layers and a linear head", build_lstm, True),
    Generated(LARGE_GRAPH, "graph-bound: residual MLP blocks of small nodes", build_large_graph),
)
SYNTHETIC = (*(g.name for g in GENERATED), LARGE_WEIGHTS)


def write_assets(examples: Path, folder: Path, sizes: Sizes) -> None:
    """The example assets (copied from ``examples``) plus the synthetic models, into ``folder``."""
    shutil.copytree(examples, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    for generated in GENERATED:
        onnx.save_model(generated.build(sizes), str(folder / f"{generated.name}.onnx"))
        if generated.deep:
            (folder / f"{generated.name}.cook.yaml").write_text(DEEP_MODEL_SETTINGS)
    write_large_weights(folder, sizes)
