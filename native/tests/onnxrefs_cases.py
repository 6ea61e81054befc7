"""Compare native/src/onnxrefs.c (oc_check_references) with onnx_cooker/runtime/onnxrefs.py
(check_references) on real ONNX models, hostile variants of them and thousands of mutations.

    cd /work/main && . .venv/bin/activate && python native/tests/onnxrefs_cases.py [--binary PATH]

Without --binary it builds native/tests/test_onnxrefs.c (with src/util.c) under
AddressSanitizer and UndefinedBehaviorSanitizer, runs its built-in cases, then feeds every case
here through ``test_onnxrefs --batch`` and checks, for each, that C and Python both accept or both
refuse (and, where they refuse, with the same message after C's "model '<name>': " prefix), that C
freed what it allocated, and that the sanitizers stayed silent. Exit status 0 when all agree.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from onnx_cooker.runtime.errors import CorruptBlobError  # noqa: E402
from onnx_cooker.runtime.onnxrefs import check_references  # noqa: E402

MODEL_NAME = "vision/detector"
FILE = "weights.onnx.data"
CFLAGS = [
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-g",
    "-O1",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
]


# ---- models ---------------------------------------------------------------------------------------


def externalize(tensor: TensorProto, location: str | None, offset, length, extra=()) -> None:
    """Make ``tensor`` refer to external data: entries in this order (None: left out)."""
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length), *extra):
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)


def mlp(names=("w1", "b1", "w2")) -> tuple[onnx.ModelProto, dict[str, tuple[int, int]]]:
    """Two MatMul+Add layers whose weights are all external (offsets 64-aligned), plus one inline
    initializer; returns the model and the header's {name: (offset, nbytes)}."""
    rng = np.random.default_rng(0)
    arrays = {
        names[0]: rng.standard_normal((8, 16)).astype(np.float32),
        names[1]: rng.standard_normal((16,)).astype(np.float32),
        names[2]: rng.standard_normal((16, 4)).astype(np.float32),
    }
    inits, tensors, offset = [], {}, 0
    for name, array in arrays.items():
        t = numpy_helper.from_array(array, name)
        externalize(t, FILE, offset, array.nbytes)
        tensors[name] = (offset, array.nbytes)
        offset += (array.nbytes + 63) // 64 * 64
        inits.append(t)
    inits.append(numpy_helper.from_array(np.ones((4,), np.float32), "inline_bias"))
    nodes = [
        helper.make_node("MatMul", ["x", names[0]], ["h0"]),
        helper.make_node("Add", ["h0", names[1]], ["h1"]),
        helper.make_node("MatMul", ["h1", names[2]], ["h2"]),
        helper.make_node("Add", ["h2", "inline_bias"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tensors


def ext_constant(name="c", location=FILE, offset=0, length=16) -> TensorProto:
    t = numpy_helper.from_array(np.zeros(4, np.float32), name)
    externalize(t, location, offset, length)
    return t


def edited(edit) -> tuple[bytes, dict]:
    model, tensors = mlp()
    result = edit(model, tensors)
    return model.SerializeToString(), (result if result is not None else tensors)


def field(number: int, payload: bytes) -> bytes:
    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            b, v = v & 0x7F, v >> 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def padded(number: int, wire: int) -> bytes:
    """A key in five varint bytes, the last with a bit above 32 set: protobuf's parser adds them in
    32-bit arithmetic and reads the key (onnxruntime 1.24.4 opens the file such an entry names)."""
    key = number << 3 | wire
    return bytes([key & 0x7F | 0x80, (key >> 7) & 0x7F | 0x80, 0x80, 0x80, 0x10])


def named_cases() -> list[tuple[str, bytes, str | None, dict]]:
    cases = []

    def add(label, edit, file=FILE):
        data, tensors = edited(edit)
        cases.append((label, data, file, tensors))

    def nothing(m, t):
        return None

    add("valid", nothing)
    add("valid, no weights section", nothing, None)
    add("valid, weights named otherwise", nothing, "other.bin")
    add("valid, empty weights name", nothing, "")

    def init(m, name):
        return next(t for t in m.graph.initializer if t.name == name)

    def entry(m, name, key, value):
        for e in init(m, name).external_data:
            if e.key == key:
                e.value = value

    for loc in [
        "/dev/zero",
        "../../etc/passwd",
        "/etc/passwd",
        "/dev/stdin",
        "sub/../../x",
        "C:\\Windows\\x",
        "",
        FILE + "\0",
        "\0" + FILE,
        FILE + " ",
        "WEIGHTS.ONNX.DATA",
        "it's",
        "quo\"te's",
        "é.data",
        "a\nb",
        "*/_ORT_MEM_ADDR_/*",  # onnxruntime's in-memory marker: the offset would be an address
    ]:
        add(f"location {loc!r}", lambda m, t, loc=loc: entry(m, "b1", "location", loc))
    for off in [
        "00",
        "0064",
        "+64",
        "-64",
        " 64",
        "64 ",
        "0x40",
        "64.0",
        "1e2",
        "",
        "18446744073709551680",
        "\u0664",
    ]:
        add(f"offset {off!r}", lambda m, t, off=off: entry(m, "b1", "offset", off))
    for length in ["0", "63", "65", "064", "+64", ""]:
        add(f"length {length!r}", lambda m, t, length=length: entry(m, "b1", "length", length))

    def drop(key, name="b1"):
        def edit(m, t):
            tensor = init(m, name)
            keep = [(e.key, e.value) for e in tensor.external_data if e.key != key]
            del tensor.external_data[:]
            for k, v in keep:
                e = tensor.external_data.add()
                e.key, e.value = k, v

        return edit

    add("no offset, listed at 0", drop("offset", "w1"))
    add("no offset, listed at 512", drop("offset", "b1"))
    add("no length", drop("length", "b1"))
    add("no location", drop("location", "b1"))

    def extra(key, value, name="b1"):
        def edit(m, t):
            e = init(m, name).external_data.add()
            e.key, e.value = key, value

        return edit

    add("checksum key", extra("checksum", "abc"))
    add("unknown key", extra("basepath", "/"))
    add("empty key", extra("", "x"))
    add("key with NUL", extra("offset\0", "0"))
    add("key twice", extra("location", FILE))
    add("offset twice", extra("offset", "512"))
    add("non-ASCII unknown key", extra("lé", "x"))

    def data_location_only(m, t):
        tensor = init(m, "b1")
        del tensor.external_data[:]

    def entries_only(m, t):
        init(m, "b1").data_location = TensorProto.DEFAULT

    add("EXTERNAL, no entries", data_location_only)
    add("entries, DEFAULT location", entries_only)

    def twice(m, t):
        m.graph.initializer.append(init(m, "b1"))

    add("named twice", twice)
    add("not listed", lambda m, t: {k: v for k, v in t.items() if k != "b1"})
    add("listed at another offset", lambda m, t: {**t, "b1": (t["b1"][0] + 64, t["b1"][1])})
    add("listed with another size", lambda m, t: {**t, "b1": (t["b1"][0], t["b1"][1] + 1)})
    add("extra listed tensors", lambda m, t: {**t, "zz": (4096, 4), "a": (0, 1)})

    def rename(new):
        def edit(m, t):
            for tensor in m.graph.initializer:
                if tensor.name == "b1":
                    tensor.name = new
            for node in m.graph.node:
                node.input[:] = [new if i == "b1" else i for i in node.input]
            return {**{k: v for k, v in t.items() if k != "b1"}, new: t["b1"]}

        return edit

    add("non-ASCII name", rename("bïas€😀"))
    add("name with a quote", rename("it's"))
    add("empty name", rename(""))

    def rename_unlisted(new):
        def edit(m, t):
            init(m, "b1").name = new

        return edit

    for new in ["it's", "b1\0", "b\u0085", "tab\there", "quo\"te's", "x" * 300, "é" * 100]:
        add(f"unlisted name {new[:20]!r}", rename_unlisted(new))

    def subgraph(m, t):
        branch = helper.make_graph(
            [helper.make_node("Constant", [], ["o"], value=ext_constant("c"))],
            "branch",
            [],
            [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])],
        )
        m.graph.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=branch, else_branch=branch))
        return {**t, "c": (4096, 16)}

    add("If branch constant", subgraph)

    def branch_initializer(m, t):
        branch = helper.make_graph(
            [helper.make_node("Identity", ["c"], ["o"])],
            "branch",
            [],
            [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])],
            [ext_constant("c")],
        )
        m.graph.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=branch, else_branch=branch))
        return {**t, "c": (0, 16)}

    add("If branch initializer", branch_initializer)

    def constant(m, t):
        m.graph.node.append(helper.make_node("Constant", [], ["k"], value=ext_constant("c")))
        return {**t, "c": (0, 16)}

    add("Constant attribute t", constant)

    def tensors_attr(m, t):
        a = helper.make_attribute("ts", [ext_constant("c")])
        node = helper.make_node("Custom", [], ["k"], domain="x")
        node.attribute.append(a)
        m.graph.node.append(node)
        return {**t, "c": (0, 16)}

    add("attribute tensors", tensors_attr)

    def graphs_attr(m, t):
        g = helper.make_graph([], "inner", [], [], [ext_constant("c")])
        node = helper.make_node("Custom", [], ["k"], domain="x")
        node.attribute.append(helper.make_attribute("gs", [g]))
        m.graph.node.append(node)
        return {**t, "c": (0, 16)}

    add("attribute graphs", graphs_attr)

    def sparse_initializer(m, t):
        values = ext_constant("sv", length=8)
        values.dims[:] = [2]
        indices = numpy_helper.from_array(np.array([0, 3], np.int64), "si")
        m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
        return {**t, "sv": (0, 8)}

    add("sparse initializer", sparse_initializer)

    def sparse_attr(m, t):
        values = numpy_helper.from_array(np.ones(2, np.float32), "sv")
        indices = ext_constant("si", length=16)
        indices.data_type = TensorProto.INT64
        indices.dims[:] = [2]
        m.graph.node.append(
            helper.make_node(
                "Constant", [], ["k"], sparse_value=helper.make_sparse_tensor(values, indices, [4])
            )
        )
        return {**t, "si": (0, 16)}

    add("Constant sparse_value", sparse_attr)

    def training(m, t):
        info = m.training_info.add()
        info.initialization.CopyFrom(helper.make_graph([], "init", [], [], [ext_constant("c")]))
        return {**t, "c": (0, 16)}

    add("training_info initialization", training)

    def training_algorithm(m, t):
        info = m.training_info.add()
        info.algorithm.CopyFrom(
            helper.make_graph([], "algo", [], [], [ext_constant("w1", offset=0, length=512)])
        )

    add("training_info algorithm", training_algorithm)

    def function_node(m, t):
        f = helper.make_function(
            "local",
            "F",
            [],
            ["o"],
            [helper.make_node("Constant", [], ["o"], value=ext_constant("c"))],
            [helper.make_opsetid("", 17)],
        )
        m.functions.append(f)
        return {**t, "c": (0, 16)}

    add("function node", function_node)

    def function_default(m, t):
        f = helper.make_function(
            "local",
            "G",
            [],
            ["o"],
            [helper.make_node("Identity", ["a"], ["o"])],
            [helper.make_opsetid("", 17)],
        )
        f.attribute_proto.append(helper.make_attribute("dflt", ext_constant("c")))
        m.functions.append(f)
        return {**t, "c": (0, 16)}

    add("function attribute default", function_default)

    # written on the wire: a second ModelProto.graph field (protobuf merges them; both are "main")
    model, tensors = mlp()
    data = model.SerializeToString()
    second = field(7, field(5, ext_constant("c").SerializeToString()))
    cases.append(("second graph field", data + second, FILE, {**tensors, "c": (0, 16)}))
    cases.append(("second graph field, unlisted", data + second, FILE, tensors))
    # external_data and data_location keys padded with a bit above 32 (protobuf reads their low 32
    # bits): naming another file (refused), naming the weights as listed (accepted)
    for label, location, listed in (
        ("padded keys, /etc/passwd", "/etc/passwd", False),
        ("padded keys, listed", FILE, True),
    ):
        tensor = numpy_helper.from_array(np.zeros(4, np.float32), "c")
        tensor.ClearField("raw_data")
        pair = field(1, b"location") + field(2, location.encode())
        hidden = tensor.SerializeToString() + padded(13, 2) + bytes([len(pair)]) + pair
        hidden += padded(14, 0) + b"\x01"
        listing = {**tensors, "c": (0, 16)} if listed else tensors
        cases.append((label, data + field(7, field(5, hidden)), FILE, listing))
    # an entry whose value length is padded (81 00: 1), then a second value, which protobuf keeps;
    # the first sized so that reading 0x81 alone as the length ends where the entry ends
    for label, location, listed in (
        ("padded value length, then ../", "../" * 41 + "xy", False),
        ("padded value length, then the weights", FILE, True),
    ):
        tensor = numpy_helper.from_array(np.zeros(4, np.float32), "c")
        tensor.ClearField("raw_data")
        pair = field(1, b"location") + b"\x12\x81\x00X" + field(2, location.encode())
        tensor.data_location = TensorProto.EXTERNAL
        ext = tensor.SerializeToString() + field(13, pair)
        listing = {**tensors, "c": (0, 16)} if listed else tensors
        cases.append((label, data + field(7, field(5, ext)), FILE, listing))

    # groups (wire types 3 and 4; no ONNX field is one): protobuf skips an unknown group whatever
    # it holds and wherever it lies (an entry naming /etc/passwd, an EXTERNAL data_location, a nested
    # group), and refuses one left open, closed by another number or nested over 100 deep
    def group(number: int, body: bytes) -> bytes:
        return bytes([number << 3 | 3]) + body + bytes([number << 3 | 4])

    hiding = group(13, field(13, field(1, b"location") + field(2, b"/etc/passwd")) + b"\x70\x01")
    hiding = group(8, hiding + b"\x18\x05" + b"\x21" + bytes(8) + b"\x2d" + bytes(4) + group(9, b""))
    for label, where in (("group in a weight", 0), ("group in a model", None)):
        model, tensors = mlp()
        if where is None:
            data = model.SerializeToString() + hiding
        else:
            init = model.graph.initializer[where]
            init.CopyFrom(type(init).FromString(init.SerializeToString() + hiding))
            data = model.SerializeToString()
        cases.append((label, data, FILE, tensors))
    model, tensors = mlp()
    data = model.SerializeToString()
    for label, bad in (
        ("group left open", bytes([0x0B]) + field(1, b"x")),
        ("group closed by another", bytes([0x0B, 0x14])),
        ("group close alone", bytes([0x0C])),
        ("group past the end", bytes([0x0B, 0x12, 0x30]) + b"short" + bytes([0x0C])),
        ("group fixed64 past the end", bytes([0x0B, 0x11, 0x00])),
        ("groups 100 deep", bytes([0x0B]) * 100 + bytes([0x0C]) * 100),
        ("groups 101 deep", bytes([0x0B]) * 101 + bytes([0x0C]) * 101),
    ):
        # a "location" after the group: both walks read the tensor, and the group with it
        trailing = field(13, field(1, b"location") + field(2, FILE.encode()))
        cases.append((label, data + field(7, field(5, field(8, b"w1") + bad + trailing)), FILE, tensors))
    # nesting at and past the limit
    for levels in (20, 21, 22, 23):
        graph = field(5, ext_constant("c").SerializeToString())
        for _ in range(levels):
            graph = field(1, field(5, field(6, graph)))
        cases.append((f"nested {levels}", field(7, graph), FILE, {"c": (0, 16)}))
    # inline weights only: nothing to check, even without a weights section
    inline = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["c"], ["y"])],
            "g",
            [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
            [numpy_helper.from_array(np.arange(4, dtype=np.float32), "c")],
        )
    )
    cases.append(("inline only", inline.SerializeToString(), None, {}))
    cases.append(("empty model", b"", None, {}))
    return cases


# ---- mutations -----------------------------------------------------------------------------------


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        if not b:
            break
        kind = rng.randrange(7)
        i = rng.randrange(len(b))
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[i] = rng.randrange(256)
        elif kind == 2:
            b[i] = rng.choice((0x00, 0x7F, 0x80, 0xFF, 0x70, 0x01, 0x02, 0x0A, 0x3A, 0x6A))
        elif kind == 3:
            b.insert(i, rng.randrange(256))
        elif kind == 4:
            del b[i]
        elif kind == 5:
            j = min(len(b), i + rng.randrange(1, 32))
            b[i:i] = b[i:j]
        else:
            del b[i:]
    return bytes(b)


def mutation_cases(seeds: list[tuple[str, bytes, dict]], count: int) -> list:
    rng = random.Random(20240607)
    cases = []
    for label, data, tensors in seeds:
        for n in range(len(data) + 1):  # every truncation
            cases.append((f"{label} cut at {n}", data[:n], FILE, tensors))
    for k in range(count):
        label, data, tensors = seeds[k % len(seeds)]
        cases.append((f"{label} mutation {k}", mutate(data, rng), FILE, tensors))
    edges = [
        0x00,
        0x41,
        0x7F,
        0x80,
        0x8F,
        0x90,
        0x9F,
        0xA0,
        0xBF,
        0xC0,
        0xC1,
        0xC2,
        0xDF,
        0xE0,
        0xE1,
        0xEC,
        0xED,
        0xEE,
        0xEF,
        0xF0,
        0xF1,
        0xF3,
        0xF4,
        0xF5,
        0xFF,
    ]
    for k in range(count // 3):  # names (and keys) of odd bytes: as strict as Python's UTF-8 decoder
        raw = bytes(rng.choice(edges) for _ in range(rng.randrange(1, 5)))
        entry = field(1, b"location") + field(2, FILE.encode())
        tensor = (
            field(8, raw) + field(13, entry)
            if k % 2
            else field(8, b"w") + field(13, field(1, raw) + field(2, b"x"))
        )
        cases.append((f"bytes {raw!r}", field(7, field(5, tensor)), FILE, {"w": (0, 16)}))
    for k in range(count // 4):  # random bytes behind "location" (never skipped by the fast path)
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(400)))
        cases.append((f"noise {k}", b"location" + noise, FILE, {}))
        cases.append((f"noise {k} after", noise + b"\x70\x01", FILE, {}))
    return cases


# ---- running -------------------------------------------------------------------------------------


def python_result(data: bytes, file, tensors) -> str:
    try:
        check_references(data, file, tensors)
    except CorruptBlobError as exc:
        return f"ERR 6 model {MODEL_NAME!r}: {exc}"
    return "OK"


def known_repr_difference(python: str, c: str) -> bool:
    """C quotes names as Python's repr() does, except that it cuts them at 128 bytes ("'...") and
    leaves non-ASCII characters as they are where repr() escapes the non-printable ones."""
    return (
        "'..." in c
        or '"...' in c
        or re.search(r"\\(u[0-9a-f]{4}|U[0-9a-f]{8}|x[a-f][0-9a-f])", python) is not None
    )


def encode(data: bytes, file, tensors) -> bytes:
    name = MODEL_NAME.encode()
    out = [struct.pack("<I", len(name)), name]
    if file is None:
        out.append(struct.pack("<I", 0xFFFFFFFF))
    else:
        f = file.encode()
        out += [struct.pack("<I", len(f)), f]
    items = sorted((k.encode(), v) for k, v in tensors.items())
    out.append(struct.pack("<I", len(items)))
    for k, (offset, nbytes) in items:
        out += [struct.pack("<I", len(k)), k, struct.pack("<QQ", offset, nbytes)]
    out += [struct.pack("<Q", len(data)), data]
    return b"".join(out)


def build(out: Path) -> Path:
    native = ROOT / "native"
    binary = out / "test_onnxrefs"
    subprocess.run(
        [
            "gcc",
            *CFLAGS,
            "-I",
            str(native / "include"),
            "-I",
            str(native / "src"),
            str(native / "tests" / "test_onnxrefs.c"),
            str(native / "src" / "onnxrefs.c"),
            str(native / "src" / "util.c"),
            "-o",
            str(binary),
        ],
        check=True,
    )
    return binary


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", type=Path)
    parser.add_argument("--mutations", type=int, default=6000)
    parser.add_argument("--verbose", action="store_true", help="print the C result of each named case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binary = args.binary or build(Path(tmp))
        env = {
            **os.environ,
            "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
            "UBSAN_OPTIONS": "print_stacktrace=1",
        }
        builtin = subprocess.run([str(binary)], capture_output=True, text=True, env=env)
        print(builtin.stdout.strip() or builtin.stderr.strip())
        if builtin.returncode != 0:
            print(builtin.stderr)
            return 1

        named = named_cases()
        seeds = [
            (label, data, tensors)
            for label, data, file, tensors in named
            if label
            in (
                "valid",
                "If branch constant",
                "sparse initializer",
                "function attribute default",
                "location '/dev/zero'",
                "nested 21",
                "group in a weight",
            )
        ]
        cases = named + mutation_cases(seeds, args.mutations)
        stdin = b"".join(encode(data, file, tensors) for _, data, file, tensors in cases)
        run = subprocess.run([str(binary), "--batch"], input=stdin, capture_output=True, env=env)
        if run.returncode != 0 or run.stderr:
            print(
                f"C program failed (status {run.returncode}):\n{run.stderr.decode(errors='replace')[-4000:]}"
            )
            return 1
        lines = run.stdout.decode("utf-8", errors="surrogateescape").split("\n")[:-1]
        assert len(lines) == len(cases), (len(lines), len(cases))

        verdicts = messages = leaks = repr_only = 0
        named_labels = {n[0] for n in named}
        accepted = 0
        for (label, data, file, tensors), c_line in zip(cases, lines, strict=True):
            want = python_result(data, file, tensors)
            if c_line.endswith(" LEAK"):
                leaks += 1
                print(f"LEAK {label}")
            if (want == "OK") != (c_line == "OK"):
                verdicts += 1
                print(f"VERDICT {label}: python {want!r}, C {c_line!r}")
            elif want != c_line and known_repr_difference(want, c_line):
                repr_only += 1
            elif want != c_line:
                messages += 1
                print(f"MESSAGE {label}:\n  python {want!r}\n  C      {c_line!r}")
            accepted += want == "OK"
            if "--verbose" in sys.argv and label in named_labels:
                print(f"{label}: {c_line}")
        print(
            f"{len(cases)} cases ({len(named)} named, {len(cases) - len(named)} mutated; "
            f"{accepted} accepted): "
            f"{verdicts} verdict disagreements, {messages} message differences, {leaks} leaks; "
            f"{repr_only} known quoting differences (names cut at 128 bytes, "
            "non-printable non-ASCII characters "
            "left unescaped)"
        )
        return 1 if verdicts or leaks or messages else 0


if __name__ == "__main__":
    sys.exit(main())
