"""Groups (wire types 3 and 4) in a blob's graph. No ONNX field is a group, but protobuf's parser,
the one inside onnxruntime, keeps one as an unknown field and skips it, whatever field number it
carries; the loader's wire-format walks (onnx_cooker/runtime/protowire.py) must skip it the same way:
a graph onnxruntime accepts is not refused as malformed, and a field inside a group (a weight's
name, a "location") is nothing to the checks, as it is nothing to onnxruntime. A group protobuf
refuses (left open, closed by another number, nested too deep) is refused as malformed."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime
import pytest
from runtime_helpers import CPU, HEADER_DEFAULTS, split_weights

from onnx_cooker.runtime import CorruptBlobError, session_from_blob
from onnx_cooker.runtime.compat import parse_version
from onnx_cooker.runtime.onnxrefs import (
    check_and_rewrite,
    check_references,
    external_refs,
    read_tensor,
    rewrite_locations,
)
from onnx_cooker.runtime.protowire import MAX_GROUPS, fields
from onnx_cooker.runtime.writer import encode_blob
from tests.models import dense_model
from tests.test_graphcheck import _field, _varint

ONNX_PATHS = ["onnx-shared-initializers", "onnx-external-initializers"]
if parse_version(onnxruntime.__version__) >= (1, 32, 0):
    ONNX_PATHS.append("onnx-file-buffers")


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _group(number: int, body: bytes) -> bytes:
    return _key(number, 3) + body + _key(number, 4)


def _hiding(weight: str) -> bytes:
    """A group (numbered as TensorProto's name field: protobuf reads a known number with another
    wire type as unknown) holding what the checks look for: a weight's name field, an external-data
    entry naming /etc/passwd, a data_location of EXTERNAL, and a nested group of every wire type."""
    entry = _field(1, b"location") + _field(2, b"/etc/passwd")
    inner = _key(3, 0) + _varint(300) + _key(4, 1) + bytes(8) + _key(5, 5) + bytes(4)
    return _group(
        8, _field(8, weight.encode()) + _field(13, entry) + _key(14, 0) + b"\x01" + _group(9, inner)
    )


def _with(message, extra: bytes):
    """``message`` with ``extra`` appended to its bytes (protobuf keeps it as unknown fields)."""
    return type(message).FromString(message.SerializeToString() + extra)


def _grouped_model() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """An MLP, and the same MLP with groups in its graph, a node and a weight's initializer."""
    model = dense_model(64, 256, batch=1, seed=4, activation="Relu", name="mlp")
    grouped = onnx.ModelProto()
    grouped.CopyFrom(model)
    weight = grouped.graph.initializer[0]
    weight.CopyFrom(_with(weight, _hiding(weight.name)))
    grouped.graph.node[0].CopyFrom(_with(grouped.graph.node[0], _hiding(weight.name)))
    grouped.graph.CopyFrom(_with(grouped.graph, _hiding(weight.name)))
    return model, grouped


def test_onnxruntime_skips_a_group_and_what_it_holds(tmp_path) -> None:
    """The premise: onnxruntime loads the grouped model and computes what the plain one does; the
    reference to /etc/passwd inside a group is not read (the weight's data is its raw_data)."""
    model, grouped = _grouped_model()
    assert grouped.SerializeToString().count(b"/etc/passwd") == 3
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": x})
    path = tmp_path / "grouped.onnx"
    path.write_bytes(grouped.SerializeToString())
    got = onnxruntime.InferenceSession(str(path), providers=CPU).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def test_the_walks_skip_a_group_as_protobuf_does() -> None:
    """The field walk yields a group as one field of wire type 3 (its bytes, closing key included)
    and none of the fields inside it, and the tensor reader reads the initializer as the onnx
    package does (name, type, dims; no external data, data_location unset)."""
    _, grouped = _grouped_model()
    weight = grouped.graph.initializer[0]
    data = weight.SerializeToString()
    hiding = _hiding(weight.name)
    walked = list(fields(memoryview(data), 0, len(data)))
    plain = list(fields(memoryview(data), 0, len(data) - len(hiding)))
    assert walked == [*plain, (8, 3, len(data) - len(hiding) + 1, len(data))]
    tensor = read_tensor(data, 0, len(data), dims=True, entries=True)
    assert (tensor.name, tensor.elem_type, list(tensor.dims)) == (
        weight.name,
        weight.data_type,
        list(weight.dims),
    )
    assert tensor.entries == () and tensor.location == 0 == weight.data_location
    graph, weights = split_weights(grouped, "mlp")
    refs = external_refs(graph)  # the cooked weights' references, none from inside a group
    assert {ref.name for ref in refs} == {t.name for t in weights.tensors}
    assert {ref.get("location") for ref in refs} == {weights.file}


def grouped_blob() -> tuple[onnx.ModelProto, bytes]:
    """The plain MLP, and the blob of the grouped one (raw weights; also tests/test_native.py's)."""
    model, grouped = _grouped_model()
    graph, weights = split_weights(grouped, "mlp")
    assert graph.count(b"/etc/passwd") == 3
    check_references(graph, weights.file, {t.name: (t.offset, t.nbytes) for t in weights.tensors})
    raw = dataclasses.replace(weights, codec="raw")
    return model, encode_blob(graph, level=3, weights=raw, model_format="onnx", **HEADER_DEFAULTS)


def test_the_rewrite_keeps_every_group_where_it_was() -> None:
    """The references' rewrite (the shared-initializer and mapped paths) copies every field it does
    not edit verbatim, groups too, wherever they lie: before the graph field, before an initializer,
    inside one. Only the references' values change."""
    _, grouped = _grouped_model()
    graph, weights = split_weights(grouped, "mlp")
    proto = onnx.ModelProto.FromString(graph)
    body = proto.graph.SerializeToString()
    proto.ClearField("graph")
    before = _group(100, _field(1, b"x"))
    graph = proto.SerializeToString() + before + _field(7, before + body)  # ahead of field 7 and field 5
    extents = {t.name: (t.offset, t.nbytes) for t in weights.tensors}
    for rewritten in (
        rewrite_locations(graph, "blob.ocb", 4096),
        check_and_rewrite(graph, weights.file, extents, "blob.ocb", 4096),
    ):
        assert rewritten.count(before) == graph.count(before) == 2
        assert rewritten.count(_hiding(weights.tensors[0].name)) == graph.count(
            _hiding(weights.tensors[0].name)
        )
        assert rewritten.count(b"/etc/passwd") == 3
        model = onnx.ModelProto.FromString(rewritten)
        locations = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
        assert locations == {"blob.ocb"}


@pytest.mark.parametrize("path", [None, *ONNX_PATHS])
def test_a_blob_whose_graph_holds_groups_loads_on_every_path(path: str | None) -> None:
    """The cooked blob of the grouped model: its groups name a weight and /etc/passwd, and it loads
    on every ONNX load path with the plain model's outputs."""
    model, blob = grouped_blob()
    x = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": x})
    got = session_from_blob(blob, providers=CPU, load_path=path).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (_key(100, 3) + _field(1, b"x"), "a varint runs past its message"),
        (_key(100, 3) + _key(101, 4), "a group closed by another field"),
        (_key(100, 4), "wire type 4"),
        (_key(100, 3) + _key(1, 7), "wire type 7"),
        (_key(100, 3) + _key(1, 2) + _varint(50) + b"short" + _key(100, 4), "a field runs past its message"),
        (
            _key(100, 3) * (MAX_GROUPS + 1) + _key(100, 4) * (MAX_GROUPS + 1),
            f"groups nest over {MAX_GROUPS} deep",
        ),
    ],
    ids=["left-open", "closed-by-another", "close-without-open", "bad-wire-type", "past-the-end", "too-deep"],
)
def test_a_group_protobuf_refuses_is_refused(group: bytes, message: str) -> None:
    """Each malformed group, in a node of a cooked blob's graph, is refused before onnxruntime sees
    it; the onnx package's parser (upb, protobuf's rules) refuses the same node bytes."""
    model = dense_model(64, 256, batch=1, seed=4, activation="Relu", name="mlp")
    node = model.graph.node[0].SerializeToString() + group
    with pytest.raises(Exception):  # noqa: B017, PT011 (upb raises DecodeError, which onnx does not export)
        onnx.NodeProto.FromString(node)
    with pytest.raises(CorruptBlobError, match=f"not a valid ONNX model \\({message}"):
        list(fields(memoryview(node), 0, len(node)))
    tensor = model.graph.initializer[0].SerializeToString() + group
    with pytest.raises(CorruptBlobError, match=f"not a valid ONNX model \\({message}"):
        read_tensor(tensor, 0, len(tensor), dims=True, entries=True)
    # in a weight's initializer of a cooked blob: the load reads it, and refuses the blob
    graph, weights = split_weights(model, "mlp")
    proto = onnx.ModelProto.FromString(graph)
    graph += _field(7, _field(5, proto.graph.initializer[0].SerializeToString() + group))
    raw = dataclasses.replace(weights, codec="raw")
    blob = encode_blob(graph, level=3, weights=raw, model_format="onnx", **HEADER_DEFAULTS)
    for path in [None, *ONNX_PATHS]:
        with pytest.raises(CorruptBlobError, match="not a valid ONNX model"):
            session_from_blob(blob, providers=CPU, load_path=path)
