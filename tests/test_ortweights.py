"""The ORT-format weight walk (onnx_cooker/runtime/ortweights.py) and ``ort-shared-initializers``: where
onnxruntime wrote each weight in its flatbuffer, which weights may be shared (a name a subgraph also
uses may not), hostile flatbuffers, the memfd's holes, and what happens when something reads them (a
real plugin EP that compiles weights from the graph, ggml)."""

from __future__ import annotations

import mmap
import os
import struct
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from runtime_helpers import HEADER_DEFAULTS, run_in_runtime, run_source, to_ort_format

from onnx_cooker.runtime import SessionCreateError, load_info, session_from_blob
from onnx_cooker.runtime.blob import tensor_view
from onnx_cooker.runtime.compat import parse_version
from onnx_cooker.runtime.files import held, memfd_unit, memfd_without
from onnx_cooker.runtime.loadpaths import ORT_SHARED_VERSIONS
from onnx_cooker.runtime.ortweights import MIN_SHARED_WEIGHT, share_weights, shareable_weights
from onnx_cooker.runtime.writer import encode_blob
from tests.models import model_of

CPU = ["CPUExecutionProvider"]
SHARES_HERE = parse_version(onnxruntime.__version__) in ORT_SHARED_VERSIONS


def typed_model() -> onnx.ModelProto:
    """Weights of several types and sizes, each used so that onnxruntime keeps it."""
    rng = np.random.default_rng(11)
    arrays = {
        "w32": rng.standard_normal((128, 256)).astype(np.float32),  # 128 KiB
        "w16": rng.standard_normal((256, 256)).astype(np.float16),  # 128 KiB
        "i32": rng.integers(0, 256, (128, 256)).astype(np.int32),  # 128 KiB
        "small": rng.standard_normal((256,)).astype(np.float32),  # 1 KiB: copied with the graph
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w32"], ["a"]),
        helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["a16", "w16"], ["b16"]),
        helper.make_node("Cast", ["b16"], ["b"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["b", "small"], ["c"]),
        helper.make_node("Gather", ["c", "i32"], ["g"], axis=1),  # indices onnxruntime cannot fold
        helper.make_node("ReduceSum", ["g", "axis"], ["y"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(a, name) for name, a in arrays.items()]
    inits.append(numpy_helper.from_array(np.array([2], np.int64), "axis"))
    graph = helper.make_graph(
        nodes,
        "typed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])],
        inits,
    )
    return model_of(graph, opset=17)


def branch_model() -> onnx.ModelProto:
    """An If whose then-branch holds an initializer named like one of the main graph's ("W"), with other
    values: sharing "W" would hand the branch the main graph's values. "U" is the main graph's alone."""
    rng = np.random.default_rng(12)
    main_w, branch_w, u = (rng.standard_normal((128, 128)).astype(np.float32) for _ in range(3))

    def branch(name: str, weight: str, init: np.ndarray | None) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("MatMul", ["h", weight], [f"{name}_out"])],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [1, 128])],
            [numpy_helper.from_array(init, weight)] if init is not None else [],
        )

    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["a"]),
            helper.make_node("MatMul", ["a", "U"], ["h"]),
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                then_branch=branch("then", "W", branch_w),
                else_branch=branch("else", "U", None),
            ),
        ],
        "branches",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])],
        [numpy_helper.from_array(main_w, "W"), numpy_helper.from_array(u, "U")],
    )
    return model_of(graph, opset=17)


def ort_blob(ort_model: bytes, **fields: Any) -> bytes:
    return encode_blob(
        ort_model, level=3, graph_codec="raw", model_format="ort", **(HEADER_DEFAULTS | fields)
    )


def test_the_walk_finds_each_weight_where_onnxruntime_wrote_it(tmp_path: Path) -> None:
    model = typed_model()
    ort_model = to_ort_format(model.SerializeToString(), tmp_path)
    sources = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}

    found = shareable_weights(ort_model)

    assert [w.name for w in found] == sorted(
        [w.name for w in found], key=lambda name: next(w.offset for w in found if w.name == name)
    )
    assert sources["small"].nbytes < MIN_SHARED_WEIGHT <= sources["w32"].nbytes
    assert {w.name for w in found} == {"w32", "w16", "i32"}  # "small" and "axis" stay in the graph
    view = memoryview(ort_model)
    for weight in found:
        array = tensor_view([(0, view)], weight)
        assert array.dtype == sources[weight.name].dtype and array.shape == sources[weight.name].shape
        assert np.array_equal(array, sources[weight.name]), weight.name
    every = shareable_weights(ort_model, min_bytes=1)
    # onnxruntime aligns raw data to 4 bytes: an int64 is offered only where it lies 8-aligned
    assert {"w32", "w16", "i32", "small"} <= {w.name for w in every} <= {*sources}
    assert all(w.offset % tensor_view([(0, view)], w).itemsize == 0 for w in every)


def test_a_name_a_subgraph_also_holds_is_never_shared(tmp_path: Path) -> None:
    model = branch_model()
    ort_model = to_ort_format(model.SerializeToString(), tmp_path)

    assert [w.name for w in shareable_weights(ort_model)] == ["U"]
    if not SHARES_HERE:
        return
    blob = ort_blob(ort_model + bytes(1 << 20))  # over SMALL_ORT_MODEL: the path is taken
    x = np.random.default_rng(3).standard_normal((1, 128)).astype(np.float32)
    session = session_from_blob(blob, providers=CPU)
    assert load_info(session).path == "ort-shared-initializers"
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        want = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, feeds)[0]
        assert np.allclose(session.run(None, feeds)[0], want, rtol=1e-4, atol=1e-4), cond


def test_hostile_flatbuffers_give_weights_inside_the_bytes_or_none(tmp_path: Path) -> None:
    """Bit flips, junk and truncation anywhere: no exception, and every weight offered lies inside
    the bytes, apart from the others, with the size its type and dims say."""
    ort_model = to_ort_format(branch_model().SerializeToString(), tmp_path)
    rng = np.random.default_rng(7)
    for trial in range(3000):
        data = bytearray(ort_model)
        if trial % 3 == 0:
            data = data[: int(rng.integers(0, len(data)))]
        else:
            for _ in range(int(rng.integers(1, 8))):
                at = int(rng.integers(0, min(len(data), 4096) if trial % 3 == 1 else len(data)))
                data[at] = int(rng.integers(0, 256))
        weights = shareable_weights(bytes(data), min_bytes=1)
        end = 0
        for weight in weights:
            assert end <= weight.offset and weight.offset + weight.nbytes <= len(data)
            end = weight.offset + weight.nbytes
            assert tensor_view([(0, memoryview(bytes(data)))], weight).nbytes == weight.nbytes
    assert shareable_weights(b"") == [] and shareable_weights(b"\xff" * 64) == []


class Flatbuffer:
    """A forward-only flatbuffer writer for hand-made (hostile) ORT models: tables with int32 scalars
    and references, vectors of references, bytes and int64s, strings; references by key, patched
    when the buffer is finished (a key may be referenced any number of times)."""

    def __init__(self) -> None:
        self.data = bytearray(8)  # the root's uoffset, then the file identifier's room
        self.patches: list[tuple[int, str]] = []
        self.where: dict[str, int] = {}

    def _align(self, step: int = 8) -> None:
        self.data += bytes(-len(self.data) % step)

    def table(
        self, key: str, fields: int, scalars: dict[int, int] | None = None, refs: dict[int, str] | None = None
    ) -> None:
        scalars, refs = scalars or {}, refs or {}
        self._align()
        vtable = len(self.data)
        self.data += struct.pack("<HH", 4 + 2 * fields, 4 + 4 * fields) + bytes(2 * fields)
        self._align()
        table = self.where[key] = len(self.data)
        self.data += struct.pack("<i", table - vtable) + bytes(4 * fields)
        for index in {*scalars, *refs}:
            struct.pack_into("<H", self.data, vtable + 4 + 2 * index, 4 + 4 * index)
            if index in scalars:
                struct.pack_into("<i", self.data, table + 4 + 4 * index, scalars[index])
            else:
                self.patches.append((table + 4 + 4 * index, refs[index]))

    def refs(self, key: str, keys: list[str]) -> None:
        self._align()
        start = self.where[key] = len(self.data)
        self.data += struct.pack("<I", len(keys)) + bytes(4 * len(keys))
        self.patches += [(start + 4 + 4 * k, target) for k, target in enumerate(keys)]

    def raw(self, key: str, payload: bytes) -> None:
        self._align(16)
        self.data += bytes(12)  # the payload 16-aligned, after its length
        self.where[key] = len(self.data)
        self.data += struct.pack("<I", len(payload)) + payload

    def int64s(self, key: str, values: list[int]) -> None:
        self._align()
        self.data += bytes(4)
        self.where[key] = len(self.data)
        self.data += struct.pack(f"<I{len(values)}q", len(values), *values)

    def string(self, key: str, text: str) -> None:
        self.raw(key, text.encode() + b"\0")
        struct.pack_into("<I", self.data, self.where[key], len(text.encode()))

    def finish(self, root: str) -> bytes:
        struct.pack_into("<I", self.data, 0, self.where[root])
        self.data[4:8] = b"ORTM"
        for at, key in self.patches:
            struct.pack_into("<I", self.data, at, self.where[key] - at)
        return bytes(self.data)


def hand_made(
    main: list[str], branch: list[str], *, branches: int = 1, shared_branch: bool = False, alias: bool = False
) -> bytes:
    """An ORT-format model by hand: float32 [128, 128] initializers named ``main`` in the main graph;
    one node with ``branches`` GRAPH attributes, each a subgraph holding ``branch`` initializers (all
    one table where ``shared_branch``); ``alias``: the node also has a tensor attribute whose raw
    bytes are the first main initializer's."""
    fb = Flatbuffer()
    fb.table("root", 4, refs={1: "model"})
    fb.table("model", 10, refs={7: "graph"})
    fb.table("graph", 9, refs={0: "inits", 2: "nodes"})
    fb.refs("inits", [f"main{i}" for i in range(len(main))])
    graphs = ["sub0"] * branches if shared_branch else [f"sub{b}" for b in range(branches)]
    attributes = [f"attr{b}" for b in range(branches)] + (["alias"] if alias else [])
    fb.refs("nodes", ["node"])
    fb.table("node", 13, refs={10: "attrs"})
    fb.refs("attrs", attributes)
    for b, graph in enumerate(graphs):
        fb.table(f"attr{b}", 13, scalars={2: 5}, refs={7: graph})
    if alias:
        fb.table("alias", 13, scalars={2: 4}, refs={6: "alias_tensor"})
        fb.table("alias_tensor", 7, scalars={3: 1}, refs={0: "main0_name", 2: "dims", 4: "main0_raw"})
    for graph in dict.fromkeys(graphs):
        fb.table(graph, 9, refs={0: f"{graph}_inits"})
        fb.refs(f"{graph}_inits", [f"{graph}_t{i}" for i in range(len(branch))])
        for i, name in enumerate(branch):
            fb.table(
                f"{graph}_t{i}", 7, scalars={3: 1}, refs={0: f"{graph}_n{i}", 2: "dims", 4: f"{graph}_r{i}"}
            )
            fb.string(f"{graph}_n{i}", name)
            fb.raw(f"{graph}_r{i}", bytes(128 * 128 * 4))
    for i, name in enumerate(main):
        fb.table(f"main{i}", 7, scalars={3: 1}, refs={0: f"main{i}_name", 2: "dims", 4: f"main{i}_raw"})
        fb.string(f"main{i}_name", name)
        fb.raw(f"main{i}_raw", np.full((128, 128), i + 1, np.float32).tobytes())
    fb.int64s("dims", [128, 128])  # last: references only go forward
    return fb.finish("root")


def test_hand_made_models_share_what_onnxruntime_would_replace_and_nothing_else() -> None:
    names = lambda model: [w.name for w in shareable_weights(model)]  # noqa: E731
    assert names(hand_made(["W", "U"], ["V"], branches=2)) == ["W", "U"]
    model = hand_made(["W", "U"], [])
    assert np.array_equal(
        tensor_view([(0, memoryview(model))], shareable_weights(model)[1]), np.full((128, 128), 2, np.float32)
    )
    # onnxruntime (and its Python binding) reads names up to a NUL: "W\0x" in a subgraph is "W"
    assert names(hand_made(["W", "U"], ["W\0x"])) == ["U"]
    assert names(hand_made(["W\0x", "U"], [])) == ["U"]
    # another tensor whose raw bytes are a weight's would read its hole, unseen
    assert names(hand_made(["W", "U"], [], alias=True)) == ["U"]
    # a subgraph reached twice: onnxruntime's writer never shares a table; a walk that followed
    # every reference would take 2^32 steps for 32 nested levels of two such attributes
    assert names(hand_made(["W", "U"], ["V"], branches=2, shared_branch=True)) == []


def test_the_memfd_holds_only_what_was_written_and_a_read_hole_shows(tmp_path: Path) -> None:
    """The premise of the check: a hole takes no memory until a mapping reads it, and then it does;
    where the kernel gives memfds huge pages (a write would cover a hole's edges) there is no door."""
    model = memoryview(os.urandom(1 << 20))
    if memfd_unit() > mmap.PAGESIZE:
        assert share_weights(model, onnxruntime.SessionOptions()) is None
        return
    fd, written = memfd_without(model, [(8192, 512 << 10)])
    try:
        assert written < (1 << 20) - (400 << 10)
        assert os.pread(fd, 16, 0) == bytes(model[:16]) and os.pread(fd, 4, 8192 + 4096) == bytes(4)
        assert held(fd) == written  # a read() of a hole allocates nothing
        with mmap.mmap(fd, 1 << 20, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as mapping:
            assert mapping[8192 + 65536] == 0
        assert held(fd) > written
    finally:
        os.close(fd)


@pytest.mark.skipif(
    not SHARES_HERE, reason="the installed onnxruntime is not one ort-shared-initializers is proven on"
)
def test_shared_weights_are_the_callers_bytes_and_the_holes_stay_unread(tmp_path: Path) -> None:
    model = typed_model()
    ort_model = to_ort_format(model.SerializeToString(), tmp_path)
    options = onnxruntime.SessionOptions()
    for key in ("session.use_memory_mapped_ort_model", "session.use_ort_model_bytes_for_initializers"):
        options.add_session_config_entry(key, "1")
    options.add_session_config_entry("session.load_model_format", "ORT")
    options.add_session_config_entry("session.disable_prepacking", "1")
    buffer = bytearray(ort_model)
    shared = share_weights(memoryview(buffer), options)
    assert shared is not None
    try:
        session = onnxruntime.InferenceSession(f"/proc/self/fd/{shared.fd}", options, providers=CPU)
        x = np.random.default_rng(2).standard_normal((1, 128)).astype(np.float32)
        before = session.run(None, {"x": x})[0]
        assert np.allclose(before, run_source(model.SerializeToString(), x), rtol=1e-2, atol=1e-2)
        assert shared.holes_read() is None
        w32 = next(w for w in shareable_weights(ort_model) if w.name == "w32")
        # a hole is the whole pages inside a weight: its first and last bytes are in the memfd
        assert os.pread(shared.fd, 16, w32.offset) == bytes(buffer[w32.offset : w32.offset + 16])
        end = w32.offset + w32.nbytes
        assert os.pread(shared.fd, 16, end - 16) == bytes(buffer[end - 16 : end])
        buffer[w32.offset : w32.offset + w32.nbytes] = bytes(w32.nbytes)  # the caller's, after the fact
        assert not np.array_equal(before, session.run(None, {"x": x})[0])
    finally:
        os.close(shared.fd)


@pytest.mark.skipif(
    not SHARES_HERE, reason="the installed onnxruntime is not one ort-shared-initializers is proven on"
)
def test_a_callers_session_options_take_shared_weights_once(tmp_path: Path) -> None:
    """They keep bare pointers to the shared values after the load (onnxruntime can neither copy nor
    clear them): a second load with them is refused, not given the first model's weights; options
    that save the optimized model (which reads every weight) get ort-mapped."""
    ort_model = to_ort_format(typed_model().SerializeToString(), tmp_path)
    blob = ort_blob(ort_model + bytes(1 << 20))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    assert (
        load_info(session_from_blob(blob, providers=CPU, session_options=options)).path
        == "ort-shared-initializers"
    )
    with pytest.raises(SessionCreateError, match="already hold the weights of model 'tiny'"):
        session_from_blob(blob, providers=CPU, session_options=options)
    saving = onnxruntime.SessionOptions()
    saving.optimized_model_filepath = str(tmp_path / "saved.ort")
    assert load_info(session_from_blob(blob, providers=CPU, session_options=saving)).path == "ort-mapped"
    again = onnxruntime.SessionOptions()
    again.optimized_model_filepath = str(tmp_path / "again.ort")
    with pytest.raises(SessionCreateError, match="save the optimized model"):
        session_from_blob(blob, providers=CPU, session_options=again, load_path="ort-shared-initializers")


GGML_PROBE = textwrap.dedent(
    """
    import json, mmap, sys
    sys.path.insert(0, sys.argv[1])
    from pathlib import Path
    import numpy as np, onnxruntime, onnxruntime_ggml
    from onnx_cooker.runtime import SessionCreateError, load_info, session_from_blob
    from onnx_cooker.runtime import loadpaths, session as loader_session

    folder = Path(sys.argv[2])
    blob = (folder / "wide.ocb").read_bytes()
    x, want = np.load(folder / "x.npy"), np.load(folder / "y.npy")
    library = {onnxruntime_ggml.EP_NAME: onnxruntime_ggml.library_path()}
    report = {"onnxruntime": onnxruntime.__version__}

    def load(**kwargs):
        try:
            session = session_from_blob(blob, ep_libraries=library, **kwargs)
        except SessionCreateError as exc:
            return {"error": str(exc)}
        info = load_info(session)
        got = session.run(None, {"x": x})[0]
        return {"path": info.path.value, "refused": info.refused, "providers": session.get_providers(),
                "error_max": float(np.abs(got - want).max())}

    report["auto"] = load()
    report["forced"] = load(load_path="ort-shared-initializers")
    # The loader never picks the door for a plugin EP; made to here, as it would be for an EP that
    # read the graph's copy with the CPU EP alone, the session is thrown away for ort-mapped.
    loadpaths.ORT_SHARED_VERSIONS = frozenset({(1, 30, 0)})
    loader_session.no_sharing = lambda plan, options: None
    report["made_to"] = load()
    report["again"] = load()
    # the fallback session still uses the shared values over the caller's buffer: it keeps it
    loader_session._REFUSED.clear()
    with open(folder / "wide.ocb", "rb") as stream:
        mapping = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    session = session_from_blob(mapping, ep_libraries=library)
    try:
        mapping.close()
        report["kept"] = False
    except BufferError:
        report["kept"] = load_info(session).path.value
    print(json.dumps(report))
    """
)


@pytest.mark.slow
def test_an_ep_that_reads_the_graphs_copy_of_the_weights_never_computes_with_the_holes(
    tmp_path: Path,
) -> None:
    """ggml compiles the weights it takes from the graph's initializers while the session is built:
    with the weights shared, it would read the memfd's holes (zeros; its outputs all 0, seen). The
    loader takes ort-mapped for it; forced, the door fails with the reason; and a session that read
    a hole is thrown away for ort-mapped, remembered for the model's next loads."""
    rng = np.random.default_rng(4)
    weight = rng.standard_normal((256, 512)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])],
        [numpy_helper.from_array(weight, "W")],
    )
    model = model_of(graph)
    folder = tmp_path / "cases"
    folder.mkdir()
    ort_model = to_ort_format(model.SerializeToString(), folder)
    preference = ("ggml", "CPUExecutionProvider")
    (folder / "wide.ocb").write_bytes(
        ort_blob(ort_model + bytes(1 << 20), name="wide", execution_providers=preference)
    )
    x = rng.standard_normal((1, 256)).astype(np.float32)
    np.save(folder / "x.npy", x)
    np.save(folder / "y.npy", run_source(model.SerializeToString(), x))

    report = run_in_runtime(
        "1.30.0", tmp_path / "work", ["-c", GGML_PROBE, str(folder)], extras=("onnxruntime-ggml==0.2.0",)
    )

    tolerance = 5e-2  # ggml keeps weights as float16
    auto = report["auto"]
    assert auto["path"] == "ort-mapped" and auto["providers"][0] == "ggml" and auto["error_max"] < tolerance
    assert "proven for the CPU EP alone" in report["forced"]["error"]
    made_to = report["made_to"]
    assert made_to["path"] == "ort-mapped" and made_to["error_max"] < tolerance, made_to
    assert "ort-shared-initializers not used" in made_to["refused"]
    assert report["again"]["path"] == "ort-mapped" and report["again"]["refused"] == made_to["refused"]
    assert report["kept"] == "ort-mapped"


def _counting_memfds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from onnx_cooker.runtime import ortweights

    written: list[int] = []
    real = ortweights.memfd_without

    def counted(model, holes):
        written.append(len(model))
        return real(model, holes)

    monkeypatch.setattr(ortweights, "memfd_without", counted)
    monkeypatch.setattr(ortweights, "_KEPT", type(ortweights._KEPT)())  # none kept from other tests
    return written


@pytest.mark.skipif(not SHARES_HERE, reason="ort-shared-initializers is for the versions it is proven in")
def test_a_second_load_of_equal_bytes_maps_the_same_memfd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memfd of the flatbuffer without its holes is written once per distinct bytes: a second
    load of an equal blob (other bytes objects) maps it again; a blob of the same size whose bytes
    differ outside the holes (another weight's name) gets its own; outputs are each model's."""
    written = _counting_memfds(monkeypatch)
    model = typed_model()
    ort_model = to_ort_format(model.SerializeToString(), tmp_path)
    renamed = model_of(typed_model().graph, opset=17)
    for node in renamed.graph.node:
        node.input[:] = ["w33" if name == "w32" else name for name in node.input]
    renamed.graph.initializer[0].name = "w33"  # same length: the same flatbuffer size
    (tmp_path / "other").mkdir()
    other = to_ort_format(renamed.SerializeToString(), tmp_path / "other")
    padding = bytes((1 << 20) + 4096)  # over SMALL_ORT_MODEL: the path is taken
    x = np.random.default_rng(5).standard_normal((1, 128)).astype(np.float32)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": x})[0]
    for flatbuffer in (ort_model, ort_model, other, other):
        session = session_from_blob(bytes(ort_blob(flatbuffer + padding)), providers=CPU)
        assert load_info(session).path == "ort-shared-initializers"
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
    assert len(ort_model) == len(other) and ort_model != other
    assert len(written) == 2  # one memfd each: the renamed model's bytes differ outside the holes


@pytest.mark.skipif(not SHARES_HERE, reason="ort-shared-initializers is for the versions it is proven in")
def test_a_kept_memfd_whose_hole_was_read_is_never_used_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of a hole gives it a page of zeros, which would hide the next read: the kept memfd is
    dropped and a new one written."""
    from onnx_cooker.runtime import ortweights

    written = _counting_memfds(monkeypatch)
    ort_model = to_ort_format(typed_model().SerializeToString(), tmp_path)
    blob = ort_blob(ort_model + bytes((1 << 20) + 4096))
    session_from_blob(blob, providers=CPU)
    (kept,) = ortweights._KEPT.values()
    first = os.fstat(kept.fd).st_ino
    mapping = mmap.mmap(kept.fd, 0, prot=mmap.PROT_READ)
    hole = next(w.offset for w in kept.weights) + mmap.PAGESIZE  # inside the first weight's hole
    assert mapping[hole] == 0 and held(kept.fd) > kept.written  # the page the read gave it
    mapping.close()
    session_from_blob(blob, providers=CPU)
    assert len(written) == 2
    (again,) = ortweights._KEPT.values()
    assert os.fstat(again.fd).st_ino != first and held(again.fd) == again.written  # a new one, unread


def test_kept_memfds_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_cooker.runtime import ortweights

    monkeypatch.setattr(ortweights, "_KEPT", type(ortweights._KEPT)())
    fds = []
    for size in range(1, ortweights._KEPT_MAX + 5):
        model = memoryview(bytes(size * 100))
        fd, count = memfd_without(model, [])
        ortweights._keep(model, [], [], fd, count)
        kept_fd = ortweights._KEPT[len(model)].fd
        fds.append((kept_fd, os.fstat(kept_fd).st_ino))
        os.close(fd)
    assert list(ortweights._KEPT) == [size * 100 for size in range(5, ortweights._KEPT_MAX + 5)]

    def still_open(fd: int, inode: int) -> bool:
        try:
            return os.fstat(fd).st_ino == inode
        except OSError:
            return False

    assert not any(still_open(*old) for old in fds[:4])  # the oldest, dropped and closed
    assert all(still_open(*kept) for kept in fds[4:])
    big = memoryview(bytes(ortweights._KEPT_MAX_BYTES + 1))
    fd, count = memfd_without(big, [])
    ortweights._keep(big, [], [], fd, count)
    os.close(fd)
    assert len(big) not in ortweights._KEPT  # too much to compare: written each time


def test_kept_memfds_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_cooker.runtime import ortweights

    monkeypatch.setattr(ortweights, "_KEPT", type(ortweights._KEPT)())
    monkeypatch.setattr(ortweights, "_KEPT_TOTAL", 10_000)
    for size in (4000, 4001, 4002):
        model = memoryview(bytes(size))
        fd, count = memfd_without(model, [])
        ortweights._keep(model, [], [], fd, count)
        os.close(fd)
    assert list(ortweights._KEPT) == [4001, 4002]  # the oldest dropped to stay under the total


def _kept_weights(size: int) -> list:
    from onnx_cooker.runtime import ortweights

    return ortweights._KEPT[size].weights


@pytest.mark.skipif(not SHARES_HERE, reason="ort-shared-initializers is for the versions it is proven in")
def test_a_kept_memfd_is_not_used_for_bytes_at_another_alignment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Equal bytes whose weights lie misaligned in the caller's memory share other weights: the model
    is walked again and gets a memfd of its own, never the kept one's weights list."""
    written = _counting_memfds(monkeypatch)
    ort_model = to_ort_format(typed_model().SerializeToString(), tmp_path)
    padded = ort_model + bytes((1 << 20) + 4096)
    extent = memoryview(bytearray(padded))
    first = share_weights(extent, onnxruntime.SessionOptions())
    assert first is not None
    os.close(first.fd)
    shifted = memoryview(bytearray(b"\0\0" + padded))[2:]  # two bytes on: float16 weights stay aligned
    second = share_weights(shifted, onnxruntime.SessionOptions())
    assert second is not None
    os.close(second.fd)
    assert len(written) == 2  # walked and written again: only the float16 weight shared now
    assert [w.name for w in _kept_weights(len(shifted))] == ["w16"]
