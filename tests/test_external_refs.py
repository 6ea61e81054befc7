"""External-data references in a blob's graph (onnx_cooker/runtime/onnxrefs.py): only the weights the
loader supplies may be named; anything else is refused with a BundleError before onnxruntime sees
the graph, on every load path. The wire-format reader agrees with the onnx package."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from runtime_helpers import CPU, HEADER_DEFAULTS, split_weights

from onnx_cooker.runtime import CorruptBlobError, SessionCreateError, session_from_blob
from onnx_cooker.runtime.errors import BundleError
from onnx_cooker.runtime.onnxrefs import check_references, external_refs, rewrite_locations
from onnx_cooker.runtime.writer import encode_blob
from tests.models import dense_model

ONNX_PATHS = ("onnx-file-buffers", "onnx-shared-initializers", "onnx-external-initializers")
# the last: onnxruntime's own in-memory marker, whose offset is read as an address (refused by
# onnxruntime 1.24.4, 1.28.0 and 1.32.0 in a loaded model too: docs/design.md, "Loading from memory")
HOSTILE = (
    "/dev/stdin",
    "/dev/zero",
    "../../etc/passwd",
    "/etc/passwd",
    "sub/../../x",
    "C:\\Windows\\x",
    "",
    "*/_ORT_MEM_ADDR_/*",
)


def _weighted(edit=None) -> tuple[bytes, onnx.ModelProto]:
    """An ONNX blob of an MLP with raw weights; ``edit(graph_model)`` changes its graph first."""
    model = dense_model(64, 256, batch=1, seed=4, activation="Relu", name="mlp")
    graph, weights = split_weights(model, "mlp")
    proto = onnx.ModelProto.FromString(graph)
    if edit is not None:
        edit(proto)
    raw = dataclasses.replace(weights, codec="raw")
    return encode_blob(
        proto.SerializeToString(), level=3, weights=raw, model_format="onnx", **HEADER_DEFAULTS
    ), proto


def _set_location(location: str):
    def edit(proto: onnx.ModelProto) -> None:
        for entry in proto.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location

    return edit


def _applicable(path: str) -> bool:
    import onnxruntime

    from onnx_cooker.runtime.compat import parse_version

    return path != "onnx-file-buffers" or parse_version(onnxruntime.__version__) >= (1, 32, 0)


@pytest.mark.parametrize("location", HOSTILE)
@pytest.mark.parametrize("path", [None, *ONNX_PATHS])
def test_a_graph_naming_another_file_is_refused_on_every_load_path(location: str, path: str | None) -> None:
    if path is not None and not _applicable(path):
        pytest.fail(f"{path} needs onnxruntime 1.32+: the test environment must have it")
    blob, _ = _weighted(_set_location(location))
    with pytest.raises(
        CorruptBlobError, match=re.escape(f"refers to {location!r}, not the blob's own weights")
    ) as refused:
        session_from_blob(blob, providers=CPU, load_path=path)
    # named by the blob it came from, once
    assert str(refused.value).startswith("blob of model 'tiny' (test-platform): blob graph tensor 'W' ")


def test_the_intact_blob_loads_on_every_load_path() -> None:
    """The premise of the refusals above: the same blob, unedited, loads along each path."""
    blob, _ = _weighted()
    x = np.ones((1, 64), np.float32)
    outputs = [session_from_blob(blob, providers=CPU, load_path=p).run(None, {"x": x})[0] for p in ONNX_PATHS]
    for other in outputs[1:]:
        np.testing.assert_array_equal(other, outputs[0])


def _external_constant(location: str) -> TensorProto:
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), "c")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return tensor


def test_a_reference_in_a_subgraph_or_a_graph_only_blob_is_refused() -> None:
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["o"], value=_external_constant("mlp.onnx.data"))],
        "branch",
        [],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("If", ["b"], ["y"], then_branch=branch, else_branch=branch)],
            "g",
            [helper.make_tensor_value_info("b", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        )
    )
    blob = encode_blob(model.SerializeToString(), level=3, model_format="onnx", **HEADER_DEFAULTS)
    with pytest.raises(
        CorruptBlobError, match="refers to external data, but the blob has no weights section"
    ):
        session_from_blob(blob, providers=CPU)
    with pytest.raises(CorruptBlobError, match="outside the main graph's initializers"):
        check_references(model.SerializeToString(), "mlp.onnx.data", {"c": (0, 16)})


def test_a_reference_with_another_offset_or_a_second_name_is_refused() -> None:
    def shift(proto: onnx.ModelProto) -> None:
        for entry in proto.graph.initializer[0].external_data:
            if entry.key == "offset":
                entry.value = str(int(entry.value) + 64)

    blob, _ = _weighted(shift)
    with pytest.raises(CorruptBlobError, match="offset or length differs from the blob header's"):
        session_from_blob(blob, providers=CPU)

    def twice(proto: onnx.ModelProto) -> None:
        proto.graph.initializer.append(proto.graph.initializer[0])

    blob, _ = _weighted(twice)
    with pytest.raises(CorruptBlobError, match="is not one of the blob's weights, or is named twice"):
        session_from_blob(blob, providers=CPU)


def test_the_reader_finds_what_onnx_finds_and_the_rewrite_is_onnxs_edit() -> None:
    _, proto = _weighted()
    data = proto.SerializeToString()
    theirs = [
        t
        for t in onnx.external_data_helper._get_all_tensors(proto)
        if t.data_location == TensorProto.EXTERNAL
    ]

    ours = external_refs(data)

    assert [r.name for r in ours] == [t.name for t in theirs] and len(ours) >= 2
    assert all(r.initializer for r in ours)
    assert [dict(r.entries) for r in ours] == [{e.key: e.value for e in t.external_data} for t in theirs]
    rewritten = onnx.ModelProto.FromString(rewrite_locations(data, "null"))
    _set_location("null")(proto)
    for tensor in proto.graph.initializer[1:]:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "null"
    assert rewritten == proto


def test_a_graph_without_any_location_is_not_parsed() -> None:
    """The common graph-only blob: no byte string "location", nothing to refuse, nothing parsed
    (random bytes then raise nothing)."""
    assert external_refs(b"\xff" * 1000) == []


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=400))
def test_hostile_bytes_give_only_corrupt_blob_errors(noise: bytes) -> None:
    data = b"location" + noise  # never skipped by the fast path
    try:
        refs = external_refs(data)
        check_references(data, "w", {})
    except CorruptBlobError:
        return
    assert isinstance(refs, list)


def test_deeply_nested_subgraphs_are_refused_not_recursed_for_ever() -> None:
    """Written on the wire directly (protobuf itself refuses to build so deep a message)."""
    graph = _field(5, _external_constant("w").SerializeToString())  # GraphProto.initializer
    for _ in range(70):  # GraphProto.node -> NodeProto.attribute -> AttributeProto.g
        graph = _field(1, _field(5, _field(6, graph)))
    with pytest.raises(BundleError, match="nests subgraphs over 64 deep"):
        external_refs(_field(7, graph))  # ModelProto.graph


def _field(number: int, payload: bytes) -> bytes:
    size, length = len(payload), bytearray()
    while True:
        length.append((size & 0x7F) | (0x80 if size > 0x7F else 0))
        size >>= 7
        if not size:
            break
    return bytes([number << 3 | 2]) + bytes(length) + payload


HEADER_TENSOR_PATHS = ("onnx-shared-initializers", "onnx-external-initializers")


def _edit_weight(change):
    def edit(proto: onnx.ModelProto) -> None:
        change(proto, proto.graph.initializer[0])

    return edit


def _swap_dims(proto: onnx.ModelProto, weight: TensorProto) -> None:
    weight.dims[0], weight.dims[1] = weight.dims[1], weight.dims[0]  # the same bytes, another shape


def _retype(proto: onnx.ModelProto, weight: TensorProto) -> None:
    weight.data_type = TensorProto.INT32  # the same bytes, another type


def _shadow_in_a_subgraph(proto: onnx.ModelProto, weight: TensorProto) -> None:
    branch = helper.make_graph(
        [helper.make_node("Identity", [weight.name], ["o"])],
        "branch",
        [],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.zeros(3, np.float32), weight.name)],
    )
    proto.graph.input.append(helper.make_tensor_value_info("b", TensorProto.BOOL, []))
    proto.graph.node.append(helper.make_node("If", ["b"], ["extra"], then_branch=branch, else_branch=branch))


def _constant_of_its_name(proto: onnx.ModelProto, weight: TensorProto) -> None:
    value = numpy_helper.from_array(np.zeros(3, np.float32))
    branch = helper.make_graph(
        [helper.make_node("Constant", [], [weight.name], value=value)],
        "branch",
        [],
        [helper.make_tensor_value_info(weight.name, TensorProto.FLOAT, [3])],
    )
    proto.graph.input.append(helper.make_tensor_value_info("b", TensorProto.BOOL, []))
    proto.graph.node.append(helper.make_node("If", ["b"], ["extra"], then_branch=branch, else_branch=branch))


def _drop_from_the_graph(proto: onnx.ModelProto, weight: TensorProto) -> None:
    proto.graph.initializer.remove(weight)


@pytest.mark.parametrize("path", HEADER_TENSOR_PATHS)
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_swap_dims, r"with dims \[256, 64\] in the graph, but 1 with dims \[64, 256\] in the blob header"),
        (_retype, r"is data type 6 with dims \[64, 256\] in the graph, but 1 with dims"),
        (_shadow_in_a_subgraph, "is defined again outside the main graph's initializers"),
        (_constant_of_its_name, "is defined again outside the main graph's initializers"),
        (_drop_from_the_graph, "is listed in the blob header but is no initializer of the graph"),
    ],
)
def test_where_onnxruntime_takes_a_weight_from_the_header_the_graph_must_agree(change, message, path) -> None:
    """Shared and external initializers are tensors the loader makes from the header's type and
    dims, and onnxruntime puts them in place of every initializer of that name, subgraphs' too: a
    graph that disagrees is refused before onnxruntime sees it (not a session computing with a
    weight of another shape, or an error at the first run)."""
    blob, _ = _weighted(_edit_weight(change))
    with pytest.raises(CorruptBlobError, match=message):
        session_from_blob(blob, providers=CPU, load_path=path)


def test_an_external_tensor_without_a_location_is_refused_by_onnxruntime() -> None:
    """The reference scan skips graphs holding no "location" key; a tensor marked EXTERNAL without
    one is then onnxruntime's to refuse, and it does, before any file is opened."""
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), "c")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Constant", [], ["y"], value=tensor)],
            "g",
            [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        )
    )
    graph = model.SerializeToString()
    assert b"location" not in graph and external_refs(graph) == []
    blob = encode_blob(graph, level=3, model_format="onnx", **HEADER_DEFAULTS)
    with pytest.raises(SessionCreateError, match="Missing 'location'"):
        session_from_blob(blob, providers=CPU)


def _parity_cases() -> list[tuple[str, bytes, str | None, dict]]:
    """The C/Python parity suite's cases (native/tests/onnxrefs_cases.py): real graphs, hostile
    variants and mutations of them."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "native" / "tests" / "onnxrefs_cases.py"
    spec = importlib.util.spec_from_file_location("onnxrefs_cases", path)
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    named = cases.named_cases()
    seeds = [(label, data, tensors) for label, data, _, tensors in named][:40]
    # EXTERNAL with "location" only in the name: no entry, so the check refuses it (a null location)
    tensor = cases.field(8, b"location") + bytes([14 << 3, 1])  # name, data_location EXTERNAL
    bare = ("EXTERNAL, no entries", cases.field(7, cases.field(5, tensor)), cases.FILE, {"location": (0, 4)})
    # an offset that str.isdigit() takes and int() refuses: refused by the check, never a ValueError
    entries = b"".join(
        cases.field(13, cases.field(1, key) + cases.field(2, value))
        for key, value in ((b"location", cases.FILE.encode()), (b"offset", "\u00b2".encode()))
    )
    odd = (
        "offset '\u00b2'",
        cases.field(7, cases.field(5, cases.field(8, b"w") + entries)),
        cases.FILE,
        {"w": (0, 4)},
    )
    return [*named, bare, odd, *cases.mutation_cases(seeds, 1500)]


def test_check_and_rewrite_decides_and_writes_as_the_check_then_the_rewrite() -> None:
    """The load paths that rewrite references check them in the same walk (check_and_rewrite): on
    every parity case it accepts and refuses what check_references does, with the same message
    unless the bytes are malformed (then the walk that meets the damage first names it), and
    writes what rewrite_locations writes."""
    from onnx_cooker.runtime.onnxrefs import check_and_rewrite

    compared = refused = 0
    for label, data, file, tensors in _parity_cases():
        if file is None:
            continue  # no weights section: the rewriting paths are not taken
        lengths = {name: nbytes for name, (_, nbytes) in tensors.items()}
        try:
            check_references(data, file, tensors)
            want: str | bytes = rewrite_locations(data, "blob.ocb", 65536, lengths)
        except CorruptBlobError as exc:
            want = str(exc)
        try:
            got: str | bytes = check_and_rewrite(data, file, tensors, "blob.ocb", 65536, lengths)
        except CorruptBlobError as exc:
            got = str(exc)
        compared += 1
        refused += isinstance(want, str)
        assert isinstance(got, str) == isinstance(want, str), f"{label}: {want!r:.200} / {got!r:.200}"
        if got != want:
            assert isinstance(got, str) and "not a valid ONNX model" in got + want, f"{label}: {want} / {got}"
    assert compared > 1000 and 100 < refused < compared - 100  # both verdicts, many times


def _padded_key(number: int, wire: int) -> bytes:
    """A field key as five varint bytes whose last one sets a bit above 32: protobuf's parser adds
    them in 32-bit arithmetic and reads the key; a decoder of the whole value reads another field."""
    key = number << 3 | wire
    return bytes([key & 0x7F | 0x80, (key >> 7) & 0x7F | 0x80, 0x80, 0x80, 0x10])


def _hidden_reference(location: str, name: str = "hidden") -> bytes:
    """A TensorProto whose external_data entry and data_location are written behind padded keys."""
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), name)
    tensor.ClearField("raw_data")
    entry = _field(1, b"location") + _field(2, location.encode())
    padded_entry = _padded_key(13, 2) + bytes([len(entry)]) + entry
    return tensor.SerializeToString() + padded_entry + _padded_key(14, 0) + b"\x01"


def test_onnxruntime_reads_a_key_padded_with_high_bits(tmp_path) -> None:
    """The premise of the next test: onnxruntime opens the file such a reference names (measured
    in 1.24.4 too), so the loader's walks must read keys as protobuf does (protowire.py)."""
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["x", "w"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    graph = model.graph.SerializeToString() + _field(5, _hidden_reference("no_such_weights.bin", "w"))
    model.ClearField("graph")
    path = tmp_path / "padded.onnx"
    path.write_bytes(model.SerializeToString() + _field(7, graph))
    import onnxruntime

    with pytest.raises(Exception, match="no_such_weights.bin"):
        onnxruntime.InferenceSession(str(path), providers=CPU)


@pytest.mark.parametrize("path", [None, *ONNX_PATHS])
def test_a_reference_behind_padded_keys_is_refused_on_every_load_path(path: str | None) -> None:
    """A main-graph initializer naming /etc/passwd through an external_data entry and a
    data_location whose keys carry a bit above 32 (protobuf merges the second graph field in)."""
    if path is not None and not _applicable(path):
        pytest.fail(f"{path} needs onnxruntime 1.32+: the test environment must have it")
    model = dense_model(64, 256, batch=1, seed=4, activation="Relu", name="mlp")
    graph, weights = split_weights(model, "mlp")
    hostile = graph + _field(7, _field(5, _hidden_reference("/etc/passwd")))
    assert [ref.get("location") for ref in external_refs(hostile)][-1] == "/etc/passwd"
    with pytest.raises(CorruptBlobError, match=re.escape("refers to '/etc/passwd'")):
        check_references(hostile, weights.file, {t.name: (t.offset, t.nbytes) for t in weights.tensors})
    raw = dataclasses.replace(weights, codec="raw")
    blob = encode_blob(hostile, level=3, weights=raw, model_format="onnx", **HEADER_DEFAULTS)
    with pytest.raises(CorruptBlobError, match=re.escape("refers to '/etc/passwd'")):
        session_from_blob(blob, providers=CPU, load_path=path)
