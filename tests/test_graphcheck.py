"""The graph checks of the header-weight load paths (onnx_cooker/runtime/graphcheck.py): proven from
the main graph's initializers and a byte scan where the bytes allow it, by the walk of every node
where they do not, with the walk's verdicts. The refusals themselves, end to end through
``session_from_blob``, are in tests/test_external_refs.py."""

from __future__ import annotations

import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from runtime_helpers import split_weights

from onnx_cooker.runtime import graphcheck
from onnx_cooker.runtime.errors import CorruptBlobError
from onnx_cooker.runtime.graphcheck import (
    _NAME_KEY,
    _defined_once,
    _fields_holding,
    _initializer,
    _layout,
    _walk_header_tensors,
    check_header_tensors,
    check_weight_graph,
)
from onnx_cooker.runtime.onnxrefs import check_references, read_entry
from onnx_cooker.runtime.protowire import fields, occurrences
from tests.models import conv_bn_relu_model, dense_model

REDEFINED = "is defined again outside the main graph's initializers"


def _named(graph: bytes, wanted) -> set[int]:
    """Where the name fields holding a wanted name start (what check_header_tensors passes)."""
    return _fields_holding(graph, _NAME_KEY, {name.encode("utf-8") for name in wanted}, _layout(graph).opaque)


def _main_initializers(graph: bytes) -> list:
    """Every initializer of the main graph, read."""
    return [_initializer(graph, a, b, False) for a, b in _layout(graph).initializers]


def _varint(value: int, padding: int = 0) -> bytes:
    """``value`` as a varint, with ``padding`` extra bytes (an encoding protobuf accepts)."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value or padding else 0))
        if not value:
            break
    for left in range(padding, 0, -1):
        out.append(0x80 if left > 1 else 0x00)
    return bytes(out)


def _field(number: int, payload: bytes, key_padding: int = 0, length_padding: int = 0) -> bytes:
    return _varint(number << 3 | 2, key_padding) + _varint(len(payload), length_padding) + payload


def _with_branch_graph() -> tuple[onnx.ModelProto, bytes, list]:
    """A conv net with an ``If`` whose branches hold a Constant and an initializer of other names:
    what real exported models (Silero VAD) look like, proven without the walk."""
    model = conv_bn_relu_model()
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones(3, np.float32)))],
        "branch",
        [],
        [helper.make_tensor_value_info("k", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.zeros(3, np.float32), "branch_only")],
    )
    model.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    model.graph.output.append(helper.make_tensor_value_info("picked", TensorProto.FLOAT, [3]))
    model.graph.node.append(
        helper.make_node("If", ["flag"], ["picked"], then_branch=branch, else_branch=branch)
    )
    graph, weights = split_weights(model, "conv")
    return model, graph, list(weights.tensors)


HIGH_BITS = -1  # a key padding that sets a bit above 32: protobuf keeps the key's low 32 bits


def _shadowing(name: str, key_padding: int, length_padding: int) -> bytes:
    """A subgraph initializer named ``name``, its name field encoded with padded varints."""
    tensor = numpy_helper.from_array(np.zeros(3, np.float32), "")
    tensor.ClearField("name")
    if key_padding == HIGH_BITS:  # key 66 as c2 80 80 80 10
        name_field = (
            bytes([0xC2, 0x80, 0x80, 0x80, 0x10]) + _varint(len(name), length_padding) + name.encode()
        )
    else:
        name_field = _field(8, name.encode(), key_padding, length_padding)
    body = tensor.SerializeToString() + name_field
    graph = _field(5, body) + _field(2, b"branch")  # GraphProto.initializer, name
    attribute = _field(1, b"then_branch") + _field(6, graph)  # AttributeProto.name, g
    return _field(1, _field(1, b"flag") + _field(4, b"If") + _field(5, attribute))  # GraphProto.node


def _cooked(model: onnx.ModelProto, name: str = "net") -> tuple[bytes, list]:
    graph, weights = split_weights(model, name)
    return graph, list(weights.tensors)


@pytest.mark.parametrize(
    "make",
    [
        lambda: _cooked(dense_model(64, 256, batch=1, seed=4, activation="Relu")),
        lambda: _cooked(conv_bn_relu_model()),
    ],
    ids=["mlp", "conv"],
)
def test_a_cooked_graph_is_proven_from_its_initializers_alone(make) -> None:
    graph, tensors = make()
    wanted = {t.name: t for t in tensors}
    assert wanted and _defined_once(graph, wanted, _main_initializers(graph), _named(graph, wanted))
    check_weight_graph(graph, "net.onnx.data", tensors)


def test_subgraphs_and_constants_of_other_names_need_no_walk() -> None:
    _, graph, tensors = _with_branch_graph()
    assert b"Constant" in graph and b"branch_only" in graph
    wanted = {t.name: t for t in tensors}
    assert _defined_once(graph, wanted, _main_initializers(graph), _named(graph, wanted))
    check_header_tensors(graph, tensors)


@pytest.mark.parametrize(("key_padding", "length_padding"), [(0, 0), (1, 0), (0, 2), (3, 1), (HIGH_BITS, 0)])
def test_a_redefinition_is_seen_in_any_varint_encoding(key_padding: int, length_padding: int) -> None:
    """A subgraph initializer of a weight's name, its key or length padded, or its key carrying a
    bit above 32 (protobuf reads all of them as the name): the scan sees it, the walk refuses it."""
    graph, tensors = _cooked(conv_bn_relu_model())
    main = onnx.ModelProto.FromString(graph)
    shadow = _shadowing(tensors[0].name, key_padding, length_padding)
    hostile = graph + _field(7, shadow)  # a second ModelProto.graph field: protobuf merges it in
    if key_padding != HIGH_BITS:  # the onnx package's parser (upb) refuses that key; onnxruntime's
        # reads it (tests/test_external_refs.py::test_onnxruntime_reads_a_key_padded_with_high_bits)
        assert onnx.ModelProto.FromString(hostile).graph.node[-1].op_type == "If"
        assert len(onnx.ModelProto.FromString(hostile).graph.node) == len(main.graph.node) + 1
    wanted = {t.name: t for t in tensors}
    assert not _defined_once(hostile, wanted, _main_initializers(hostile), _named(hostile, wanted))
    with pytest.raises(CorruptBlobError, match=REDEFINED):
        check_header_tensors(hostile, tensors)
    with pytest.raises(CorruptBlobError, match=REDEFINED):
        check_weight_graph(hostile, "net.onnx.data", tensors)


def test_a_constant_named_as_a_weight_is_refused() -> None:
    model, _, _ = _with_branch_graph()
    weight = model.graph.initializer[0].name
    model.graph.node[-1].attribute[0].g.node[0].output[0] = weight
    model.graph.node[-1].attribute[0].g.output[0].name = weight
    graph, tensors = _cooked(model)
    wanted = {t.name: t for t in tensors}
    assert not _defined_once(graph, wanted, _main_initializers(graph), _named(graph, wanted))
    with pytest.raises(CorruptBlobError, match=REDEFINED):
        check_header_tensors(graph, tensors)


def _with_inline_data(shadow: bool = False) -> tuple[bytes, list, list[bytes]]:
    """A cooked conv net that also holds tensor data inline (a 64 KiB ``Constant`` and an ``If``
    branch's 32 KiB initializer: random floats, full of the name key's bytes 0x42 and 0xc2), as
    real graphs hold data a cook leaves in them; with ``shadow``, the branch's initializer has a
    weight's name. Returns the graph, its weights and the inline data's bytes."""
    model = conv_bn_relu_model()
    rng = np.random.default_rng(5)
    big = numpy_helper.from_array(rng.standard_normal(16384).astype(np.float32), "")
    kept = numpy_helper.from_array(rng.standard_normal(8192).astype(np.float32), "branch_big")
    if shadow:
        kept.name = model.graph.initializer[0].name
    branch = helper.make_graph(
        [helper.make_node("Identity", ["branch_big"], ["k"])],
        "branch",
        [],
        [helper.make_tensor_value_info("k", TensorProto.FLOAT, [8192])],
        [kept],
    )
    model.graph.node.append(helper.make_node("Constant", [], ["big"], value=big))
    model.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    model.graph.output.append(helper.make_tensor_value_info("picked", TensorProto.FLOAT, [8192]))
    model.graph.output.append(helper.make_tensor_value_info("big", TensorProto.FLOAT, [16384]))
    model.graph.node.append(
        helper.make_node("If", ["flag"], ["picked"], then_branch=branch, else_branch=branch)
    )
    graph, weights = split_weights(model, "conv")
    return graph, list(weights.tensors), [big.raw_data, kept.raw_data]


def test_inline_tensor_data_is_skipped_by_the_name_scan() -> None:
    """The scan for weights' names skips the bytes of tensor data it proves are data (a Constant's
    and a subgraph initializer's raw_data, found by the layout walk), and nothing else: it finds
    the same name fields, the check the same verdicts."""
    graph, tensors, inline = _with_inline_data()
    opaque = _layout(graph).opaque
    spans = [(at, at + len(data)) for data in inline for at in occurrences(graph, data)]
    assert len(spans) == 3 and sorted(spans) == opaque  # the branch is both of the If's
    names = {t.name.encode("utf-8") for t in tensors}
    assert sum(graph.count(lead, a, b) for a, b in opaque for lead in (b"\x42", b"\xc2")) > 100
    assert _fields_holding(graph, _NAME_KEY, names, opaque) == _fields_holding(graph, _NAME_KEY, names)
    wanted = {t.name: t for t in tensors}
    assert _defined_once(graph, wanted, _main_initializers(graph), _named(graph, wanted))
    check_weight_graph(graph, "conv.onnx.data", tensors)
    check_header_tensors(graph, tensors)


def test_a_big_redefinition_is_refused_with_its_data_skipped() -> None:
    """A subgraph initializer of a weight's name, big enough that the layout walk enters it and
    skips its data: its name field lies outside the data, so the scan still sees it."""
    graph, tensors, inline = _with_inline_data(shadow=True)
    assert len(_layout(graph).opaque) == 3
    with pytest.raises(CorruptBlobError, match=REDEFINED):
        check_weight_graph(graph, "conv.onnx.data", tensors)
    with pytest.raises(CorruptBlobError, match=REDEFINED):
        check_header_tensors(graph, tensors)


def test_a_name_inside_tensor_data_is_no_definition() -> None:
    """A weight's name field written inside a Constant's raw_data is data, not a field (protobuf
    reads the data whole): the check accepts the graph, as the walk does."""
    model = conv_bn_relu_model()
    weight = model.graph.initializer[0].name
    planted = (_field(8, weight.encode()) * 40).ljust(8192, b"\x42")
    value = numpy_helper.from_array(np.frombuffer(planted, np.uint8).copy(), "")
    model.graph.node.append(helper.make_node("Constant", [], ["planted"], value=value))
    model.graph.output.append(helper.make_tensor_value_info("planted", TensorProto.UINT8, [8192]))
    graph, weights = split_weights(model, "conv")
    tensors = list(weights.tensors)
    assert _layout(graph).opaque and _field(8, weight.encode()) in graph
    check_weight_graph(graph, "conv.onnx.data", tensors)
    _walk_header_tensors(graph, {t.name: t for t in tensors})


def _mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4))):
        i = rng.randrange(len(b))
        kind = rng.randrange(5)
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[i] = rng.choice((0x42, 0xC2, 0x12, 0x00, 0x80, 0x7F, rng.randrange(256)))
        elif kind == 2:
            b.insert(i, rng.randrange(256))
        elif kind == 3:
            del b[i]
        else:
            j = min(len(b), i + rng.randrange(1, 24))
            b[i:i] = b[i:j]
    return bytes(b)


def _verdict(check) -> str:
    try:
        check()
    except CorruptBlobError as exc:
        return str(exc)
    return "accepted"


@pytest.mark.parametrize("opaque_min", [graphcheck._OPAQUE_MIN, 16], ids=["default", "every-message"])
def test_the_fast_check_agrees_with_the_walk_on_mutated_graphs(opaque_min: int, monkeypatch) -> None:
    """On thousands of mutations of cooked graphs (the weights' names and the scan's key bytes
    among the bytes changed), what the walk accepts the fast check accepts, and what the walk
    refuses for a reason the fast check refuses with the same message; only where the walk meets
    malformed bytes the fast check never reads (a node's) may it accept, onnxruntime's parser
    refusing them after. Also with the layout walk entering every message of 16 bytes or more, so
    that the tensor data it skips is nearly all of it."""
    monkeypatch.setattr(graphcheck, "_OPAQUE_MIN", opaque_min)
    seeds = [
        _cooked(conv_bn_relu_model()),
        _with_branch_graph()[1:],
        _cooked(dense_model(8, 16, batch=1, seed=1)),
    ]
    seeds.append((seeds[0][0] + _field(7, _shadowing(seeds[0][1][0].name, 1, 1)), seeds[0][1]))
    seeds += [_with_inline_data()[:2], _with_inline_data(shadow=True)[:2]]
    rng = random.Random(20261205)
    kinds: set[str] = set()
    for k in range(4000):
        graph, tensors = seeds[k % len(seeds)]
        data = _mutate(graph, rng)
        for want, got in _fast_and_walk(data, tensors):
            if "not a valid ONNX model" in want + got:
                continue  # malformed bytes: whichever reads them first refuses
            assert got == want, f"mutation {k}: the walk says {want!r}, the fast check {got!r}"
            kinds.add("accepted" if want == "accepted" else "refused")
    assert kinds == {"accepted", "refused"}


def _fast_and_walk(data: bytes, tensors: list) -> list[tuple[str, str]]:
    """(the walks' verdict, the fast check's) for the header check alone, and with the references."""
    wanted = {t.name: t for t in tensors}
    where = {t.name: (t.offset, t.nbytes) for t in tensors}

    def walks() -> None:
        check_references(data, "net.onnx.data", where)
        _walk_header_tensors(data, wanted)

    return [
        (
            _verdict(lambda: _walk_header_tensors(data, wanted)),
            _verdict(lambda: check_header_tensors(data, tensors)),
        ),
        (_verdict(walks), _verdict(lambda: check_weight_graph(data, "net.onnx.data", tensors))),
    ]


def _entry_by_walk(data: bytes) -> tuple[str, str]:
    """An external-data entry as protobuf reads it: of each field given twice, the last."""
    pair = {1: "", 2: ""}
    for number, wire, a, b in fields(memoryview(data), 0, len(data)):
        if number in pair and wire == 2:
            pair[number] = data[a:b].decode("utf-8")
    return pair[1], pair[2]


def test_an_external_data_entry_is_read_as_protobuf_reads_it() -> None:
    """``read_entry`` takes a shortcut for the layout writers use (the key, then the value, each
    with a one-byte length, filling the entry), and only there. Here the value's length is 1 written
    in two bytes (``81 00``) and a second value follows, which protobuf keeps; the entry's size is
    what the shortcut would compute from the byte ``81`` alone, so a shortcut that read that byte as
    the length would return the bytes after it as the value."""
    second = "../" * 41 + "xy"  # 125 bytes: the entry then ends where the shortcut would put its end
    entry = _field(1, b"location") + b"\x12\x81\x00X" + _field(2, second.encode())
    assert len(entry) == len(_field(1, b"location")) + 2 + 0x81
    assert read_entry(entry, 0, len(entry)) == ("location", second) == _entry_by_walk(entry)
    usual = _field(1, b"location") + _field(2, b"net.onnx.data")
    assert read_entry(usual, 0, len(usual)) == ("location", "net.onnx.data") == _entry_by_walk(usual)


def test_entries_read_as_the_walk_reads_them_under_mutation() -> None:
    """On mutated entries (lengths, keys and padding changed), ``read_entry`` returns what the
    field walk returns, or both refuse the bytes."""
    rng = random.Random(20261206)
    seeds = [
        _field(1, b"location") + _field(2, b"net.onnx.data"),
        _field(1, b"offset") + _field(2, b"4096"),
        _field(1, b"length", 1, 1) + _field(2, b"65536", 0, 2),
    ]
    outcomes: set[str] = set()
    for k in range(3000):
        data = _mutate(seeds[k % len(seeds)], rng)
        try:
            want = repr(_entry_by_walk(data))
        except (CorruptBlobError, UnicodeDecodeError):
            want = "refused"
        try:
            got = repr(read_entry(data, 0, len(data)))
        except CorruptBlobError:
            got = "refused"
        assert got == want, f"mutation {k} ({data!r}): the walk reads {want}, read_entry {got}"
        outcomes.add("refused" if want == "refused" else "read")
    assert outcomes == {"read", "refused"}
