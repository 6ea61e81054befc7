"""Named dimensions for the memory planner of onnxruntime before 1.32 (onnx_cooker/cook/valueshapes.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from onnx_cooker.build.run_job import cook
from onnx_cooker.cook.ortschema import fbs
from onnx_cooker.cook.valueshapes import BIG_INITIALIZER, for_inference, wants_value_shapes, with_value_shapes
from onnx_cooker.layout import blob_path
from onnx_cooker.runtime import decode_blob
from tests.models import conv_bn_relu_model, dynamic_image_model, with_symbolic_batch
from tests.runtime_helpers import run_in_runtime
from tests.test_cook import job_for, save, shipped_settings
from tests.test_weights import small_limit  # noqa: F401 (a fixture)

CPU = ["CPUExecutionProvider"]


def dims(value: onnx.ValueInfoProto) -> list[str | int]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_only_onnxruntime_before_1_32_wants_them() -> None:
    assert wants_value_shapes("1.24.4") and wants_value_shapes("1.28.0") and wants_value_shapes("1.31")
    assert not wants_value_shapes("1.24.4", name_dimensions=False)
    assert (
        not wants_value_shapes("1.32.0")
        and not wants_value_shapes("1.33.1")
        and not wants_value_shapes("2.0")
    )


def test_unknown_dimensions_are_named_where_inference_proves_them_equal() -> None:
    model = dynamic_image_model()
    named = with_value_shapes(model)
    shapes = {v.name: dims(v) for v in named.graph.value_info}
    # every value between the input and the output, each dimension sized or named
    assert set(shapes) == {f"{kind}{i}" for kind in "crs" for i in range(4)}
    assert all(isinstance(d, int) or d.startswith("unk__") for shape in shapes.values() for d in shape)
    # one name where the size is proven the same (Relu and Add keep their input's shape), another
    # after each Conv (its size depends on the stride)
    assert shapes["c0"] == shapes["r0"] == shapes["s0"] == [1, 8, shapes["c0"][2], shapes["c0"][3]]
    assert shapes["c1"][2:] != shapes["c0"][2:]
    # the model's signature as it was, the source untouched
    assert named.graph.input == model.graph.input and named.graph.output == model.graph.output
    assert not model.graph.value_info
    x = np.random.default_rng(0).standard_normal((1, 3, 21, 34)).astype(np.float32)
    run = [
        onnxruntime.InferenceSession(m.SerializeToString(), providers=CPU).run(None, {"x": x})[0]
        for m in (model, named)
    ]
    np.testing.assert_array_equal(run[0], run[1])


def test_big_weights_reach_inference_as_their_shapes_only() -> None:
    """Weights of BIG_INITIALIZER bytes or more go to inference as inputs of their type and dims (the
    model is not serialized twice over for it): the same names, and the copy keeps every weight."""
    model = dynamic_image_model(width=64)
    big = [t.name for t in model.graph.initializer if t.ByteSize() >= BIG_INITIALIZER]
    assert len(big) >= 3
    light = for_inference(model)
    assert not {t.name for t in light.graph.initializer} & set(big)
    assert set(big) <= {v.name for v in light.graph.input}
    named = with_value_shapes(model)
    shapes = {v.name: dims(v) for v in named.graph.value_info}
    assert shapes["c1"][:2] == [1, 64] and shapes["c1"][2].startswith("unk__")
    assert shapes["r1"] == shapes["s1"] == shapes["c1"]
    assert named.graph.initializer == model.graph.initializer and named.graph.input == model.graph.input


def test_a_branch_gets_its_own_values_named_and_entries_present_stay() -> None:
    model = dynamic_image_model(branch=True)
    model.graph.value_info.append(
        onnx.helper.make_tensor_value_info("c2", onnx.TensorProto.FLOAT, [1, 8, "h2", "w2"])
    )
    named = with_value_shapes(model)
    arms = [a.g for n in named.graph.node if n.op_type == "If" for a in n.attribute]
    assert [[v.name for v in arm.value_info] for arm in arms] == [["t"], ["t"]]
    assert all(dims(arm.value_info[0])[2].startswith("unk__") for arm in arms)
    main = {v.name: dims(v) for v in named.graph.value_info}
    assert main["c2"] == [1, 8, "h2", "w2"] and len(named.graph.value_info) == 10  # kept, not doubled
    # Relu and Add carry c2's names: onnxruntime's inference names them so too, nothing to add
    assert "r2" not in main and "s2" not in main and "c3" in main


def test_a_graph_onnxruntime_can_size_is_left_as_it_was() -> None:
    """Fixed shapes, or only the model's own names (a dynamic batch: onnxruntime's inference carries
    it), leave nothing to name."""
    model = conv_bn_relu_model()
    assert with_value_shapes(model) is model
    batch = with_symbolic_batch(conv_bn_relu_model())
    assert with_value_shapes(batch) is batch


def _ort_named_values(model: bytes) -> set[str]:
    """Names of the values whose shape in an ORT-format model holds a named dimension."""
    graph = fbs.InferenceSession.InferenceSession.GetRootAs(model, 0).Model().Graph()
    named = set()
    for i in range(graph.NodeArgsLength()):
        arg = graph.NodeArgs(i)
        info = arg.Type()
        if info is None or info.ValueType() != fbs.TypeInfoValue.TypeInfoValue.tensor_type:
            continue
        tensor = fbs.TensorTypeAndShape.TensorTypeAndShape()
        tensor.Init(info.Value().Bytes, info.Value().Pos)
        shape = tensor.Shape()
        if shape is None:
            continue
        for j in range(shape.DimLength()):
            value = shape.Dim(j).Value()
            if value is not None and value.DimParam():
                named.add(arg.Name().decode())
                break
    return named


@pytest.mark.parametrize(
    "platform, version, named, setting",
    [
        ("windows-dml", "1.24.4", True, True),
        ("console", "1.28.0", True, True),
        ("windows-dml", "1.32.0", False, True),
        ("windows-dml", "1.24.4", False, False),
    ],
)
def test_the_cook_names_them_for_the_platforms_onnxruntime_only(
    tmp_path: Path, platform: str, version: str, named: bool, setting: bool
) -> None:
    """windows-dml (ONNX, 1.24.4) and console (ORT format, 1.28.0) ship the named dimensions, and the
    blob computes the source's outputs in that exact onnxruntime; a platform on 1.32 ships none, nor
    one whose settings say `name_dimensions: false`."""
    assets = tmp_path / "assets"
    model = dynamic_image_model()
    save(model, assets, "net")
    settings = shipped_settings(platform, runtime_version=version, name_dimensions=setting)
    cook(job_for(assets, "net", settings, tmp_path / "build"))
    blob = blob_path(tmp_path / "build" / platform, "net", settings.format).read_bytes()
    _, graph = decode_blob(blob)
    if settings.format == "onnx":
        values = {
            v.name
            for v in onnx.load_from_string(graph).graph.value_info
            if any(d.dim_param for d in v.type.tensor_type.shape.dim)
        }
    else:
        values = _ort_named_values(graph)
    assert bool(values) is named, values
    if named:
        assert {"r0", "s1"} <= values  # values the planner compares, named
    if version == onnxruntime.__version__:
        return  # the cook's own verification ran it here
    # Images of several sizes, each run twice in one session (the second run plans its buffers by the
    # names): each the source's outputs
    rng = np.random.default_rng(2)
    images = [rng.standard_normal((1, 3, h, w)).astype(np.float32) for h, w in ((23, 17), (8, 40), (64, 64))]
    source = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU)
    (tmp_path / "blob.ocb").write_bytes(blob)
    np.savez(tmp_path / "x.npz", *images)
    code = (
        "import sys, json, numpy as np; sys.path.insert(0, sys.argv[1]); import onnxruntime\n"
        "from onnx_cooker.runtime import session_from_blob\n"
        "s = session_from_blob(open(sys.argv[2], 'rb').read(), providers=['CPUExecutionProvider'])\n"
        "xs = np.load(sys.argv[4])\n"
        "np.savez(sys.argv[3], *[s.run(None, {'x': xs[k]})[0] for k in sorted(xs.files) * 2])\n"
        "print(json.dumps({'onnxruntime': onnxruntime.__version__}))"
    )
    run_in_runtime(
        version,
        tmp_path,
        ["-c", code, str(tmp_path / "blob.ocb"), str(tmp_path / "y.npz"), str(tmp_path / "x.npz")],
    )
    got = np.load(tmp_path / "y.npz")
    assert len(got.files) == 2 * len(images)
    for i, y in enumerate(got[f"arr_{k}"] for k in range(len(got.files))):
        expected = source.run(None, {"x": images[i % len(images)]})[0]
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)  # float sums in another order


@pytest.mark.usefixtures("small_limit")
def test_a_model_over_the_proto_limit_is_named_too(tmp_path: Path) -> None:
    """The cook's path for models over protobuf's limit (here lowered to 1 MiB) names them as well:
    inference reads the weights' shapes only."""
    from onnx_cooker.cook.large import is_large

    model = dynamic_image_model(stages=9, width=64)
    assert is_large(model)
    save(model, tmp_path / "assets", "net")
    cook(job_for(tmp_path / "assets", "net", shipped_settings("windows-dml"), tmp_path / "build"))
    blob = blob_path(tmp_path / "build" / "windows-dml", "net", "onnx").read_bytes()
    graph = onnx.load_from_string(decode_blob(blob)[1]).graph
    assert {"r0", "s7"} <= {
        v.name for v in graph.value_info if dims(v)[2:] and str(dims(v)[2]).startswith("unk__")
    }
