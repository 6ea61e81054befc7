"""Regenerate the example ONNX models in ``assets/``.

Run from the repository root::

    python assets/make_assets.py            # writes next to this script
    python assets/make_assets.py OUT_DIR    # writes into OUT_DIR instead

Regeneration is byte-identical: weights come from a fixed-seed numpy generator, every name is fixed,
nothing records a timestamp or a host detail, and the ``.npz`` input files are written with fixed zip
metadata. ``tests/test_assets.py`` regenerates into a temporary folder and compares bytes with the
committed files, so after changing a builder here, rerun this script and commit its output.

Only ``onnx`` and ``numpy`` are used, so the assets can be rebuilt without onnxruntime.
"""

from __future__ import annotations

import argparse
import io
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20240611
PRODUCER_NAME = "onnx-cooker make_assets"
PRODUCER_VERSION = "1.0"
IR_VERSION = 8
OPSET = 17

# Byte-identical regeneration means the layout below must not depend on the host.
_ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)
_ZIP_CREATE_SYSTEM_UNIX = 3
_ZIP_FILE_MODE = 0o644 << 16

DETECTOR_COOK_YAML = (
    "# The batch dimension is symbolic: verify with a batch of 2.\nverify_dims:\n  batch: 2\n"
)

BIG_WEIGHTS_DATA = "big_weights.onnx.data"


class _Weights:
    """Collects initializers drawn from one seeded generator, in a fixed order."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.initializers: list[TensorProto] = []

    def add(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name=name))
        return name

    def uniform(self, name: str, shape: Sequence[int], fan_in: int) -> str:
        # Uniform draws only use the generator's raw doubles, the most version-stable numpy stream;
        # the 1/sqrt(fan_in) bound keeps activations O(1) so every output stays finite.
        bound = 1.0 / np.sqrt(fan_in)
        values = (self.rng.random(tuple(shape)) * 2.0 - 1.0) * bound
        return self.add(name, values.astype(np.float32))

    def conv(self, prefix: str, c_in: int, c_out: int, k: int, bias: bool = True) -> list[str]:
        fan_in = c_in * k * k
        names = [self.uniform(f"{prefix}.weight", (c_out, c_in, k, k), fan_in)]
        if bias:
            names.append(self.uniform(f"{prefix}.bias", (c_out,), fan_in))
        return names

    def batchnorm(self, prefix: str, channels: int) -> list[str]:
        scale = 1.0 + 0.1 * (self.rng.random(channels) * 2.0 - 1.0)
        shift = 0.1 * (self.rng.random(channels) * 2.0 - 1.0)
        mean = 0.1 * (self.rng.random(channels) * 2.0 - 1.0)
        var = 0.5 + self.rng.random(channels)
        return [
            self.add(f"{prefix}.scale", scale.astype(np.float32)),
            self.add(f"{prefix}.bias", shift.astype(np.float32)),
            self.add(f"{prefix}.mean", mean.astype(np.float32)),
            self.add(f"{prefix}.var", var.astype(np.float32)),
        ]


def _conv(name: str, inputs: list[str], output: str, k: int, stride: int = 1, pad: int = 0) -> onnx.NodeProto:
    return helper.make_node(
        "Conv",
        inputs,
        [output],
        name=name,
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
    )


def _max_pool(name: str, x: str, output: str) -> onnx.NodeProto:
    return helper.make_node("MaxPool", [x], [output], name=name, kernel_shape=[2, 2], strides=[2, 2])


def _model(
    graph: onnx.GraphProto, *, ir_version: int = IR_VERSION, opset: int = OPSET, doc: str = ""
) -> onnx.ModelProto:
    return helper.make_model(
        graph,
        producer_name=PRODUCER_NAME,
        producer_version=PRODUCER_VERSION,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=ir_version,
        doc_string=doc,
    )


def build_mnist(rng: np.random.Generator) -> onnx.ModelProto:
    w = _Weights(rng)
    conv1 = w.conv("conv1", 1, 8, 5)
    bn1 = w.batchnorm("bn1", 8)
    conv2 = w.conv("conv2", 8, 16, 5)
    flat_shape = w.add("flatten.shape", np.array([1, 16 * 4 * 4], dtype=np.int64))
    fc_w = w.uniform("fc.weight", (10, 16 * 4 * 4), 16 * 4 * 4)
    fc_b = w.uniform("fc.bias", (10,), 16 * 4 * 4)
    nodes = [
        # Conv -> BatchNormalization -> Relu is the pattern CPU graph optimizers fuse.
        _conv("conv1", ["input", *conv1], "conv1_out", 5),
        helper.make_node("BatchNormalization", ["conv1_out", *bn1], ["bn1_out"], name="bn1", epsilon=1e-5),
        helper.make_node("Relu", ["bn1_out"], ["relu1_out"], name="relu1"),
        _max_pool("pool1", "relu1_out", "pool1_out"),
        _conv("conv2", ["pool1_out", *conv2], "conv2_out", 5),
        helper.make_node("Relu", ["conv2_out"], ["relu2_out"], name="relu2"),
        _max_pool("pool2", "relu2_out", "pool2_out"),
        helper.make_node("Reshape", ["pool2_out", flat_shape], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "mnist",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=w.initializers,
    )
    return _model(graph, doc="MNIST-style CNN with a fusable Conv+BatchNormalization+Relu.")


def _fire(
    w: _Weights, name: str, x: str, c_in: int, squeeze: int, expand: int
) -> tuple[list[onnx.NodeProto], str]:
    sq = w.conv(f"{name}.squeeze", c_in, squeeze, 1)
    e1 = w.conv(f"{name}.expand1x1", squeeze, expand, 1)
    e3 = w.conv(f"{name}.expand3x3", squeeze, expand, 3)
    out = f"{name}_out"
    nodes = [
        _conv(f"{name}.squeeze", [x, *sq], f"{name}_sq", 1),
        helper.make_node("Relu", [f"{name}_sq"], [f"{name}_sq_relu"], name=f"{name}.squeeze_relu"),
        _conv(f"{name}.expand1x1", [f"{name}_sq_relu", *e1], f"{name}_e1", 1),
        helper.make_node("Relu", [f"{name}_e1"], [f"{name}_e1_relu"], name=f"{name}.expand1x1_relu"),
        _conv(f"{name}.expand3x3", [f"{name}_sq_relu", *e3], f"{name}_e3", 3, pad=1),
        helper.make_node("Relu", [f"{name}_e3"], [f"{name}_e3_relu"], name=f"{name}.expand3x3_relu"),
        helper.make_node(
            "Concat", [f"{name}_e1_relu", f"{name}_e3_relu"], [out], name=f"{name}.concat", axis=1
        ),
    ]
    return nodes, out


def build_squeezenet(rng: np.random.Generator) -> onnx.ModelProto:
    w = _Weights(rng)
    stem = w.conv("stem", 3, 16, 3)
    nodes = [
        _conv("stem", ["data", *stem], "stem_out", 3, stride=2, pad=1),
        helper.make_node("Relu", ["stem_out"], ["stem_relu"], name="stem_relu"),
        _max_pool("stem_pool", "stem_relu", "stem_pool"),
    ]
    fire1, x = _fire(w, "fire1", "stem_pool", 16, 8, 16)
    fire2, x = _fire(w, "fire2", x, 32, 8, 16)
    classifier = w.conv("classifier", 32, 10, 1)
    nodes += [
        *fire1,
        *fire2,
        _conv("classifier", [x, *classifier], "classifier_out", 1),
        helper.make_node("Relu", ["classifier_out"], ["classifier_relu"], name="classifier_relu"),
        helper.make_node("GlobalAveragePool", ["classifier_relu"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Softmax", ["flat"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "squeezenet",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        initializer=w.initializers,
    )
    return _model(graph, doc="SqueezeNet-style network with two fire modules.")


def _conv_bn(
    w: _Weights, name: str, x: str, c_in: int, c_out: int, k: int, stride: int, relu: bool
) -> tuple[list[onnx.NodeProto], str]:
    conv = w.conv(f"{name}.conv", c_in, c_out, k, bias=False)
    bn = w.batchnorm(f"{name}.bn", c_out)
    nodes = [
        _conv(f"{name}.conv", [x, *conv], f"{name}_conv", k, stride=stride, pad=k // 2),
        helper.make_node("BatchNormalization", [f"{name}_conv", *bn], [f"{name}_bn"], name=f"{name}.bn"),
    ]
    if not relu:
        return nodes, f"{name}_bn"
    nodes.append(helper.make_node("Relu", [f"{name}_bn"], [f"{name}_relu"], name=f"{name}.relu"))
    return nodes, f"{name}_relu"


def _residual_block(
    w: _Weights, name: str, x: str, c_in: int, c_out: int, stride: int
) -> tuple[list[onnx.NodeProto], str]:
    nodes_a, a = _conv_bn(w, f"{name}.a", x, c_in, c_out, 3, stride, relu=True)
    nodes_b, b = _conv_bn(w, f"{name}.b", a, c_out, c_out, 3, 1, relu=False)
    nodes = nodes_a + nodes_b
    skip = x
    if stride != 1 or c_in != c_out:
        proj = w.conv(f"{name}.proj", c_in, c_out, 1)
        skip = f"{name}_proj"
        nodes.append(_conv(f"{name}.proj", [x, *proj], skip, 1, stride=stride))
    nodes += [
        helper.make_node("Add", [b, skip], [f"{name}_add"], name=f"{name}.add"),
        helper.make_node("Relu", [f"{name}_add"], [f"{name}_out"], name=f"{name}.relu"),
    ]
    return nodes, f"{name}_out"


def build_resnet(rng: np.random.Generator) -> onnx.ModelProto:
    w = _Weights(rng)
    stem, x = _conv_bn(w, "stem", "image", 3, 16, 3, 1, relu=True)
    block1, x = _residual_block(w, "block1", x, 16, 16, 1)
    block2, x = _residual_block(w, "block2", x, 16, 32, 2)
    fc_w = w.uniform("fc.weight", (10, 32), 32)
    fc_b = w.uniform("fc.bias", (10,), 32)
    nodes = [
        *stem,
        *block1,
        *block2,
        helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "resnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=w.initializers,
    )
    return _model(graph, doc="ResNet-style network with an identity and a projection residual block.")


def build_detector(rng: np.random.Generator) -> onnx.ModelProto:
    w = _Weights(rng)
    conv1 = w.conv("conv1", 3, 8, 3)
    conv2 = w.conv("conv2", 8, 16, 3)
    box_w = w.uniform("boxes.weight", (16, 4), 16)
    box_b = w.uniform("boxes.bias", (4,), 16)
    score_w = w.uniform("scores.weight", (16, 5), 16)
    score_b = w.uniform("scores.bias", (5,), 16)
    nodes = [
        _conv("conv1", ["images", *conv1], "conv1_out", 3, pad=1),
        helper.make_node("Relu", ["conv1_out"], ["relu1_out"], name="relu1"),
        _conv("conv2", ["relu1_out", *conv2], "conv2_out", 3, stride=2, pad=1),
        helper.make_node("Relu", ["conv2_out"], ["relu2_out"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["relu2_out"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["features"], name="flatten", axis=1),
        helper.make_node("Gemm", ["features", box_w, box_b], ["boxes"], name="boxes_head"),
        helper.make_node("Gemm", ["features", score_w, score_b], ["scores"], name="scores_head"),
    ]
    graph = helper.make_graph(
        nodes,
        "vision/detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 5]),
        ],
        initializer=w.initializers,
    )
    return _model(graph, doc="Two-headed detector with a symbolic batch dimension.")


def build_big_weights(rng: np.random.Generator) -> onnx.ModelProto:
    w = _Weights(rng)
    w1 = w.uniform("fc1.weight", (256, 512), 256)
    b1 = w.uniform("fc1.bias", (512,), 256)
    w2 = w.uniform("fc2.weight", (512, 256), 512)
    b2 = w.uniform("fc2.bias", (256,), 512)
    nodes = [
        helper.make_node("MatMul", ["x", w1], ["fc1_mm"], name="fc1.matmul"),
        helper.make_node("Add", ["fc1_mm", b1], ["fc1_out"], name="fc1.add"),
        helper.make_node("Relu", ["fc1_out"], ["fc1_relu"], name="fc1.relu"),
        helper.make_node("MatMul", ["fc1_relu", w2], ["fc2_mm"], name="fc2.matmul"),
        helper.make_node("Add", ["fc2_mm", b2], ["y"], name="fc2.add"),
    ]
    graph = helper.make_graph(
        nodes,
        "big_weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        initializer=w.initializers,
    )
    return _model(graph, doc=f"MLP whose weights live in the external data file {BIG_WEIGHTS_DATA}.")


def build_gated(rng: np.random.Generator) -> onnx.ModelProto:
    w = _Weights(rng)
    proj = w.uniform("proj.weight", (16, 4), 16)
    then_branch = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["squared"], name="square")],
        "then_square",
        [],
        [helper.make_tensor_value_info("squared", TensorProto.FLOAT, [1, 16])],
    )
    # The constant lives inside the subgraph so tools that walk nested graphs for initializers are exercised.
    else_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["incremented"], name="increment")],
        "else_increment",
        [],
        [helper.make_tensor_value_info("incremented", TensorProto.FLOAT, [1, 16])],
        initializer=[numpy_helper.from_array(np.array([1.0], dtype=np.float32), name="one")],
    )
    nodes = [
        helper.make_node(
            "If", ["use_square"], ["gated"], name="gate", then_branch=then_branch, else_branch=else_branch
        ),
        helper.make_node("MatMul", ["gated", proj], ["y"], name="proj"),
    ]
    graph = helper.make_graph(
        nodes,
        "gated",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
            helper.make_tensor_value_info("use_square", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=w.initializers,
    )
    return _model(graph, doc="If-gated model: x*x or x+1, then a 16x4 projection.")


def gated_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "x": (rng.random((1, 16)) * 2.0 - 1.0).astype(np.float32),
        "use_square": np.array(True),
    }


def build_multi_io(rng: np.random.Generator) -> onnx.ModelProto:
    w = _Weights(rng)
    mix = w.uniform("mix.weight", (8, 8), 8)
    embedding = w.uniform("embedding", (10, 8), 1)
    nodes = [
        helper.make_node("Add", ["a", "b"], ["a_plus_b"], name="add"),
        helper.make_node("MatMul", ["a_plus_b", mix], ["sum"], name="mix"),
        helper.make_node("Mul", ["a", "b"], ["prod"], name="mul"),
        helper.make_node("Gather", [embedding, "ids"], ["gathered"], name="lookup", axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "multi_io",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4]),
        ],
        [
            helper.make_tensor_value_info("sum", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("prod", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("gathered", TensorProto.FLOAT, [1, 4, 8]),
        ],
        initializer=w.initializers,
    )
    return _model(graph, doc="Three inputs (float and int64) and three outputs, one from a Gather.")


def multi_io_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    a = (rng.random((1, 8)) * 2.0 - 1.0).astype(np.float32)
    b = (rng.random((1, 8)) * 2.0 - 1.0).astype(np.float32)
    # Ids index a 10-row embedding, so keep them in 0..9.
    ids = rng.integers(0, 10, size=(1, 4), dtype=np.int64)
    return {"a": a, "b": b, "ids": ids}


def build_legacy_ir3(rng: np.random.Generator) -> onnx.ModelProto:
    w = _Weights(rng)
    conv1 = w.conv("conv1", 3, 8, 3)
    conv2 = w.conv("conv2", 8, 4, 3)
    # Two distinct initializers with equal one-element values: onnxruntime's ConstantSharing merges
    # such constants, which is what breaks models whose initializers are also graph inputs.
    scale_a = w.add("scale_a", np.array([0.5], dtype=np.float32))
    scale_b = w.add("scale_b", np.array([0.5], dtype=np.float32))
    nodes = [
        _conv("conv1", ["data", *conv1], "conv1_out", 3, pad=1),
        helper.make_node("Mul", ["conv1_out", scale_a], ["conv1_scaled"], name="scale1"),
        helper.make_node("Relu", ["conv1_scaled"], ["relu1_out"], name="relu1"),
        _conv("conv2", ["relu1_out", *conv2], "conv2_out", 3, pad=1),
        helper.make_node("Mul", ["conv2_out", scale_b], ["conv2_scaled"], name="scale2"),
        helper.make_node("GlobalAveragePool", ["conv2_scaled"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["out"], name="flatten", axis=1),
    ]
    # IR < 4 requires every initializer to also be declared as a graph input.
    initializer_inputs = [
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in w.initializers
    ]
    graph = helper.make_graph(
        nodes,
        "legacy_ir3",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 16, 16]), *initializer_inputs],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])],
        initializer=w.initializers,
    )
    return _model(graph, ir_version=3, opset=7, doc="IR 3 / opset 7 model, initializers listed as inputs.")


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write an ``np.load``-compatible .npz whose bytes depend only on ``arrays``.

    ``np.savez`` stamps each zip entry with the current time, so the entries are written by hand.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for key, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asanyarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = _ZIP_CREATE_SYSTEM_UNIX
            info.external_attr = _ZIP_FILE_MODE
            archive.writestr(info, buffer.getvalue())


def write_text(path: Path, text: str) -> None:
    # Bytes, not text mode, so Windows does not turn the newlines into CRLF.
    path.write_bytes(text.encode("utf-8"))


def save_big_weights(model: onnx.ModelProto, path: Path) -> None:
    data_path = path.with_name(BIG_WEIGHTS_DATA)
    # onnx appends to an existing external data file instead of replacing it, so a rerun would grow it.
    data_path.unlink(missing_ok=True)
    # onnx refuses to save when `location` exists relative to the *working directory* (not the model's
    # folder), so running from assets/ with another output folder would fail; look from the output folder.
    previous_cwd = Path.cwd()
    os.chdir(path.parent)
    try:
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=BIG_WEIGHTS_DATA,
            size_threshold=1024,
        )
    finally:
        os.chdir(previous_cwd)


def generate(out_dir: Path) -> list[Path]:
    """Write every asset into ``out_dir`` and return the written paths."""
    out_dir = out_dir.resolve()
    (out_dir / "vision").mkdir(parents=True, exist_ok=True)
    # One generator per asset keeps each asset's bytes stable when another builder changes.
    rngs = [np.random.default_rng([SEED, index]) for index in range(8)]

    written: list[Path] = []

    def save(model: onnx.ModelProto, relative: str) -> None:
        path = out_dir / relative
        onnx.save_model(model, str(path))
        written.append(path)

    save(build_mnist(rngs[0]), "mnist.onnx")
    save(build_squeezenet(rngs[1]), "squeezenet.onnx")
    save(build_resnet(rngs[2]), "resnet.onnx")
    save(build_detector(rngs[3]), "vision/detector.onnx")
    write_text(out_dir / "vision" / "detector.cook.yaml", DETECTOR_COOK_YAML)
    written.append(out_dir / "vision" / "detector.cook.yaml")

    big_path = out_dir / "big_weights.onnx"
    save_big_weights(build_big_weights(rngs[4]), big_path)
    written += [big_path, out_dir / BIG_WEIGHTS_DATA]

    save(build_gated(rngs[5]), "gated.onnx")
    write_npz(out_dir / "gated.inputs.npz", gated_inputs(rngs[5]))
    written.append(out_dir / "gated.inputs.npz")

    save(build_multi_io(rngs[6]), "multi_io.onnx")
    write_npz(out_dir / "multi_io.inputs.npz", multi_io_inputs(rngs[6]))
    written.append(out_dir / "multi_io.inputs.npz")

    save(build_legacy_ir3(rngs[7]), "legacy_ir3.onnx")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out_dir",
        nargs="?",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="folder to write the assets into (default: the folder holding this script)",
    )
    args = parser.parse_args(argv)
    for path in generate(args.out_dir):
        print(f"{path.stat().st_size:>10}  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
