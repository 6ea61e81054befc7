"""External weights: ONNX models' big initializers in the blob's weights section (docs/bundle-format.md).

Real cooks, real onnxruntime sessions, real zstd; models built here with onnx.helper, seeded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.cook.weights import AUTO_EXTERNAL_BYTES, MIN_EXTERNAL_TENSOR, externalize, wants_external
from onnx_cooker.layout import blob_path
from onnx_cooker.runtime import BundleError, read_header, session_from_blob, unpack_blob
from onnx_cooker.runtime.sections import WEIGHT_ALIGNMENT
from onnx_cooker.settings.resolve import ProfileError
from tests.models import model_of
from tests.test_cook import job_for, save, settings_for, shipped_settings

CPU = ["CPUExecutionProvider"]
WIDTH = 384  # 384 x 384 float32 = 576 KiB per layer: three layers pass AUTO_EXTERNAL_BYTES


def mlp(layers: int = 3, width: int = WIDTH, seed: int = 11) -> onnx.ModelProto:
    """A MatMul/Add/Relu stack with weights like trained ones (normal, small) and a small constant."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits += [
            numpy_helper.from_array((rng.standard_normal((width, width)) * 0.05).astype(np.float32), f"w{i}"),
            numpy_helper.from_array((rng.standard_normal(width) * 0.05).astype(np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    inits.append(numpy_helper.from_array(np.array([1, -1], np.int64), "shape"))
    nodes.append(helper.make_node("Reshape", [x, "shape"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        inits,
    )
    return model_of(graph)


def feed(width: int = WIDTH) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(3).standard_normal((1, width)).astype(np.float32)}


def run_source(model: onnx.ModelProto) -> np.ndarray:
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, feed())[0]


# --- which models go external ---------------------------------------------------------------------


def test_auto_moves_onnx_weights_out_only_past_the_threshold() -> None:
    onnx_settings = shipped_settings("windows-dml")
    big, small = mlp(), mlp(layers=1, width=64)
    assert sum(t.raw_data.__len__() for t in big.graph.initializer) >= AUTO_EXTERNAL_BYTES
    assert wants_external(onnx_settings, big)
    assert not wants_external(onnx_settings, small)
    assert wants_external(shipped_settings("windows-dml", weights="external"), small)
    assert not wants_external(shipped_settings("windows-dml", weights="inline"), big)
    # ORT format keeps its weights in the flatbuffer, whatever their size.
    assert not wants_external(shipped_settings("android"), big)


def test_external_weights_with_ort_format_is_a_settings_error_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"'weights' external requires 'format' onnx.*set `format: onnx`"):
        settings_for(tmp_path, "format: ort\nweights: external\n")


def test_bad_weights_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"weights"):
        settings_for(tmp_path, "format: onnx\nweights: outside\n")


# --- the graph and its weights --------------------------------------------------------------------


def test_externalize_moves_big_initializers_to_aligned_offsets(tmp_path: Path) -> None:
    model = mlp()
    graph, weights = externalize(onnx.ModelProto.FromString(model.SerializeToString()), "vision/net")

    moved = {t.name for t in weights.tensors}
    # Weights (576 KiB) and biases (1.5 KiB) pass MIN_EXTERNAL_TENSOR; the reshape target does not.
    assert moved == {f"{kind}{i}" for kind in "wb" for i in range(3)}
    graph_model = onnx.load_from_string(graph)
    external = {t.name for t in graph_model.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert external == moved
    inline = {t.name for t in graph_model.graph.initializer} - external
    assert "shape" in inline  # small constants stay in the graph
    assert all(t.offset % WEIGHT_ALIGNMENT == 0 for t in weights.tensors)
    assert weights.file == "net.onnx.data"
    for tensor in graph_model.graph.initializer:
        if tensor.name in moved:
            refs = {e.key: e.value for e in tensor.external_data}
            ref = next(t for t in weights.tensors if t.name == tensor.name)
            assert refs == {"location": "net.onnx.data", "offset": str(ref.offset), "length": str(ref.nbytes)}
    # The pair is an ordinary model with external data: onnxruntime loads it from disk as is.
    (tmp_path / "net.onnx").write_bytes(graph)
    (tmp_path / "net.onnx.data").write_bytes(weights.data)
    session = onnxruntime.InferenceSession(str(tmp_path / "net.onnx"), providers=CPU)
    np.testing.assert_array_equal(session.run(None, feed())[0], run_source(model))


def test_small_tensors_stay_inline() -> None:
    model = mlp(layers=1, width=16)  # 1 KiB weight exactly, 64-byte bias
    _, weights = externalize(model, "tiny")
    assert [t.name for t in weights.tensors] == ["w0"]
    assert weights.tensors[0].nbytes == MIN_EXTERNAL_TENSOR


# --- cooks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["auto", "external"])
def test_windows_cook_ships_external_weights_that_load_and_match_the_source(
    tmp_path: Path, weights: str
) -> None:
    assets = tmp_path / "assets"
    save(mlp(), assets, "net")
    settings = shipped_settings("windows-dml", weights=weights)
    entry = cook(job_for(assets, "net", settings, tmp_path / "build"))

    blob = blob_path(tmp_path / "build" / "windows-dml", "net", "onnx").read_bytes()
    header, _ = read_header(blob)
    assert header.version == 3 and header.weights is not None
    assert entry["weights"] == {
        "file": "net.onnx.data",
        "bytes": header.weights.size,
        "tensors": 6,
        "stored": "raw",
    }
    assert entry["verification"]["outputs"][0]["ok"] is True
    session = session_from_blob(blob, providers=CPU)
    np.testing.assert_allclose(session.run(None, feed())[0], run_source(mlp()), rtol=1e-5, atol=1e-6)


def test_inline_setting_keeps_the_weights_in_the_graph(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(mlp(), assets, "net")
    entry = cook(
        job_for(assets, "net", shipped_settings("windows-dml", weights="inline"), tmp_path / "build")
    )
    header, _ = read_header(blob_path(tmp_path / "build" / "windows-dml", "net", "onnx").read_bytes())
    assert header.weights is None and entry["weights"] is None
    assert {f.section for f in header.frames} == {"graph"}


def test_android_cook_keeps_ort_weights_inline_and_loads(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    save(mlp(), assets, "net")
    entry = cook(job_for(assets, "net", shipped_settings("android"), tmp_path / "build"))
    blob = blob_path(tmp_path / "build" / "android", "net", "ort").read_bytes()
    unpacked = unpack_blob(blob)
    assert unpacked.header.weights is None and entry["weights"] is None
    assert unpacked.model[4:8] == b"ORTM"
    out = session_from_blob(blob, providers=CPU).run(None, feed())[0]
    np.testing.assert_allclose(out, run_source(mlp()), rtol=1e-4, atol=1e-5)


# --- the loader uses raw weights in place ---------------------------------------------------------


def _blob_of(model: onnx.ModelProto, codec: str) -> bytes:
    from onnx_cooker.runtime.writer import Weights, encode_blob

    graph, weights = externalize(onnx.ModelProto.FromString(model.SerializeToString()), "net")
    return encode_blob(
        graph,
        level=3,
        weights=Weights(weights.data, weights.file, weights.tensors, codec),
        model_format="onnx",
        platform="test",
        name="net",
        cook_key="0" * 64,
        min_runtime_version="1.16",
    )


def test_raw_weights_are_used_in_place_not_copied() -> None:
    blob = bytearray(_blob_of(mlp(), "raw"))
    session = session_from_blob(blob, providers=CPU)
    before = session.run(None, feed())[0]
    header, _ = read_header(bytes(blob))
    # Zero the last bias (b2, used by Add at run time, never prepacked) inside the caller's buffer:
    # if onnxruntime had kept a copy, the output would not change.
    ref = next(t for t in header.weights.tensors if t.name == "b2")
    frame = next(f for f in header.frames if f.section == "weights")
    start = frame.data_offset + ref.offset - frame.content_offset
    blob[start : start + ref.nbytes] = bytes(ref.nbytes)
    after = session.run(None, feed())[0]
    assert not np.array_equal(before, after)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_session_keeps_its_weights_alive_after_the_caller_drops_the_blob(codec: str) -> None:
    blob = _blob_of(mlp(), codec)
    session = session_from_blob(blob, providers=CPU)
    del blob
    import gc

    gc.collect()
    np.testing.assert_allclose(session.run(None, feed())[0], run_source(mlp()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_any_thread_count_gives_the_same_model(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_cooker.runtime import writer as blob_module

    monkeypatch.setattr(blob_module, "FRAME_CONTENT_SIZE", 4096)  # many frames
    blob = _blob_of(mlp(), "zstd")
    assert sum(f.section == "weights" for f in read_header(blob)[0].frames) > 10
    out = session_from_blob(blob, providers=CPU, threads=threads).run(None, feed())[0]
    np.testing.assert_allclose(out, run_source(mlp()), rtol=1e-5, atol=1e-6)


def test_damaged_weight_frame_is_a_bundle_error_naming_the_frame() -> None:
    blob = bytearray(_blob_of(mlp(), "zstd"))
    header, _ = read_header(bytes(blob))
    frame = [f for f in header.frames if f.section == "weights"][0]
    blob[frame.offset + frame.size // 2] ^= 0x55
    with pytest.raises(BundleError, match=r"weights frame 1 of \d+ is damaged"):
        session_from_blob(bytes(blob), providers=CPU)


def test_unpack_command_writes_a_model_and_weights_file_onnxruntime_loads(tmp_path: Path) -> None:
    path = tmp_path / "net.onnx.zst"
    path.write_bytes(_blob_of(mlp(), "zstd"))
    result = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.runtime", "unpack", str(path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["net.onnx", "net.onnx.data"]
    session = onnxruntime.InferenceSession(str(tmp_path / "out" / "net.onnx"), providers=CPU)
    np.testing.assert_allclose(session.run(None, feed())[0], run_source(mlp()), rtol=1e-5, atol=1e-6)


NOT_PLAIN = [
    "../escaped.data",
    "/tmp/escaped.data",
    "sub/net.onnx.data",
    "..",
    "",
    "C:net.data",
    "a\\b",
    "w\x1f",
]


def not_plain_blobs() -> list[bytes]:
    """The MLP's blob with its weights file renamed to each of NOT_PLAIN, the header re-sealed (also
    tests/test_native.py's)."""
    from runtime_helpers import repack, split_blob

    blob = _blob_of(mlp(), "raw")
    weights = split_blob(blob)[0]["weights"]
    return [repack(blob, weights={**weights, "file": file}) for file in NOT_PLAIN]


@pytest.mark.parametrize("index", range(len(NOT_PLAIN)), ids=[repr(f) for f in NOT_PLAIN])
def test_a_weights_file_that_is_no_plain_file_name_is_refused_and_nothing_written(
    index: int, tmp_path: Path
) -> None:
    """The header's weights file is what the graph's references name and what `unpack` writes (an
    engine may write it too): a path, a drive, `..` or a control character in it is refused as a
    damaged header before any file is written, by the loader and by `unpack`."""
    blob = not_plain_blobs()[index]
    with pytest.raises(BundleError, match="is not a plain file name"):
        session_from_blob(blob, providers=CPU)
    path = tmp_path / "in" / "net.onnx.ocb"
    path.parent.mkdir()
    path.write_bytes(blob)
    result = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.runtime", "unpack", str(path), str(tmp_path / "in" / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "is not a plain file name" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["in", "net.onnx.ocb"]


def nul_blobs() -> list[bytes]:
    """The MLP's blob with a NUL in its header's strings (the model name, the weights file), the
    header re-sealed: JSON's \\u0000 escape (also tests/test_native.py's)."""
    from runtime_helpers import repack, split_blob

    blob = _blob_of(mlp(), "raw")
    weights = split_blob(blob)[0]["weights"]
    return [repack(blob, name="ne\x00t"), repack(blob, weights={**weights, "file": "net.onnx.data\x00"})]


def test_a_nul_in_a_header_string_is_refused() -> None:
    """cJSON ends a string at the NUL a \\u0000 escape makes, Python keeps the whole string: the
    loaders would read two different names, so both refuse the header (native/src/json.c)."""
    for blob in nul_blobs():
        assert b"\\u0000" in blob
        with pytest.raises(
            BundleError, match="blob header is not valid JSON: a string holds a NUL character"
        ):
            session_from_blob(blob, providers=CPU)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("sub\\..\\..\\net", "makes no plain file name to write"),
        ("net:stream", "makes no plain file name to write"),
        ("net\n", "field 'name' holds a control character"),  # refused with the header, by both loaders
    ],
)
def test_unpack_refuses_a_model_name_that_makes_no_plain_file_name(
    name: str, said: str, tmp_path: Path
) -> None:
    """`unpack` names the model file after the header's model name (its last part): a name that
    would not make a plain file name in the output folder is one error line, and nothing is written."""
    from runtime_helpers import repack

    path = tmp_path / "net.onnx.ocb"
    path.write_bytes(repack(_blob_of(mlp(), "raw"), name=name))
    result = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.runtime", "unpack", str(path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1 and said in result.stderr, result.stderr
    assert not (tmp_path / "out").exists() and "Traceback" not in result.stderr


def unpack_with_stock_tools(blob: bytes, file_name: str, tmp_path: Path) -> Path:
    """Run the commands `inspect` prints for ``blob`` under `set -euo pipefail`, as a careful build
    script would; the folder they wrote. The weights (1.7 MB) follow the graph's extent, so a
    recipe whose pipe stops reading early fails here every time (SIGPIPE, exit 141)."""
    path = tmp_path / file_name
    path.write_bytes(blob)
    shown = subprocess.run(
        [sys.executable, "-m", "onnx_cooker.runtime", "inspect", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    commands = shown.split("# unpack with stock tools:\n", 1)[1]
    work = tmp_path / "stock"
    work.mkdir()
    subprocess.run(["bash", "-c", f"set -euo pipefail\n{commands}"], cwd=work, check=True)
    return work


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_inspect_prints_stock_commands_that_unpack_a_loadable_pair(codec: str, tmp_path: Path) -> None:
    work = unpack_with_stock_tools(_blob_of(mlp(), codec), "net.onnx.zst", tmp_path)
    session = onnxruntime.InferenceSession(str(work / "net.onnx"), providers=CPU)
    np.testing.assert_allclose(session.run(None, feed())[0], run_source(mlp()), rtol=1e-5, atol=1e-6)


# --- models over protobuf's 2 GB limit (the limit lowered, so that small models take that path) ---


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    from onnx_cooker.cook import large

    monkeypatch.setattr(large, "PROTO_LIMIT", 1 << 20)
    monkeypatch.setattr(large, "GRAPH_ROOM", 0)
    return 1 << 20


def test_model_over_the_proto_limit_cooks_for_onnx_with_external_weights(
    tmp_path: Path, small_limit: int
) -> None:
    from onnx_cooker.cook.large import is_large

    model = mlp()
    assert is_large(model)
    assets = tmp_path / "assets"
    save(model, assets, "net")
    entry = cook(job_for(assets, "net", shipped_settings("windows-dml"), tmp_path / "build"))

    blob = blob_path(tmp_path / "build" / "windows-dml", "net", "onnx").read_bytes()
    header, _ = read_header(blob)
    assert header.weights is not None and entry["weights"]["bytes"] == header.weights.size
    assert entry["verification"]["outputs"][0]["ok"] is True
    np.testing.assert_allclose(
        session_from_blob(blob, providers=CPU).run(None, feed())[0], run_source(model), rtol=1e-5, atol=1e-6
    )
    # The temp copies onnxruntime read the model from are gone.
    assert not [p for p in (tmp_path / "build" / "windows-dml").iterdir() if p.name.startswith(".large-")]


def test_model_over_the_proto_limit_for_ort_names_its_size_and_the_settings_to_change(
    tmp_path: Path, small_limit: int
) -> None:
    from onnx_cooker.errors import ModelError

    assets = tmp_path / "assets"
    save(mlp(), assets, "net")
    with pytest.raises(ModelError) as excinfo:
        cook(job_for(assets, "net", shipped_settings("android"), tmp_path / "build"))
    message = str(excinfo.value)
    assert str(assets / "net.onnx") in message and "'android'" in message
    assert "bytes of weights, over the 2 GB limit of the ORT format" in message
    # android's reduced onnxruntime loads ORT format only: `format: onnx` there is a settings error
    assert "`format: onnx`" not in message and "reduced onnxruntime build" in message
    assert "net.cook.yaml" in message and "skip_platforms" in message
    assert not (tmp_path / "build" / "android" / "net.ort.zst").exists()
    # without a reduced build, ONNX in the fixed style at basic (runtime style needs ORT; above basic
    # onnxruntime adds CPU-only ops NNAPI cannot run), which then cooks
    with pytest.raises(ModelError) as excinfo:
        cook(job_for(assets, "net", shipped_settings("android", reduced_build=False), tmp_path / "build"))
    message = str(excinfo.value)
    fix = "set `format: onnx`, `optimization_style: fixed` and `optimization_level: basic` in the `platforms:"
    assert fix + " {android: {...}}`" in message
    fixed = {"format": "onnx", "optimization_style": "fixed", "optimization_level": "basic"}
    fixed = shipped_settings("android", reduced_build=False, **fixed)
    assert cook(job_for(assets, "net", fixed, tmp_path / "build"))["format"] == "onnx"


def test_model_over_the_proto_limit_with_inline_weights_is_refused(tmp_path: Path, small_limit: int) -> None:
    from onnx_cooker.errors import ModelError

    assets = tmp_path / "assets"
    save(mlp(), assets, "net")
    settings = shipped_settings("windows-dml", weights="inline")
    with pytest.raises(
        ModelError, match=r"over protobuf's 2 GB limit, so they cannot stay inline: set `weights: auto`"
    ):
        cook(job_for(assets, "net", settings, tmp_path / "build"))


# --- ORT-format graphs: frames zstd cannot shrink are stored raw --------------------------------


def test_ort_graph_of_float_weights_is_stored_raw_first_and_unpacks_with_stock_tools(tmp_path: Path) -> None:
    from onnx_cooker.runtime.writer import encode_blob

    model = onnx.ModelProto.FromString(mlp(layers=4, width=512).SerializeToString())
    ort_path = tmp_path / "net.ort"
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(ort_path)
    options.add_session_config_entry("session.save_model_format", "ORT")
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=CPU)
    ort_model = ort_path.read_bytes()
    blob = encode_blob(
        ort_model,
        level=3,
        model_format="ort",
        platform="test",
        name="net",
        cook_key="0" * 64,
        min_runtime_version="1.16",
        ort_format_version="6",
    )
    header, _ = read_header(blob)
    # Float weights: zstd gains under 10%. The graph is one raw extent and starts the blob, so that
    # onnxruntime can map the blob file itself.
    assert [(f.codec, f.offset) for f in header.frames if f.section == "graph"] == [("raw", 0)]
    assert blob[: len(ort_model)] == ort_model
    assert unpack_blob(blob).model == ort_model
    out = session_from_blob(blob, providers=CPU).run(None, {"x": feed(512)["x"]})[0]
    ref = onnxruntime.InferenceSession(ort_model, providers=CPU).run(None, {"x": feed(512)["x"]})[0]
    np.testing.assert_array_equal(out, ref)

    work = unpack_with_stock_tools(blob, "net.ort.zst", tmp_path)
    assert (work / "net.ort").read_bytes() == ort_model


# --- compression: speed stores what onnxruntime takes in place raw; size compresses it -----------


def pruned_mlp(zeros: float) -> onnx.ModelProto:
    """``mlp()`` with a share ``zeros`` of each weight matrix set to 0, as magnitude pruning leaves
    it: zstd makes 30% zeros about 28% smaller and 80% zeros about 75% (level 10)."""
    model = mlp()
    rng = np.random.default_rng(5)
    for tensor in model.graph.initializer:
        if tensor.name.startswith("w"):
            array = numpy_helper.to_array(tensor).copy()
            array[rng.random(array.shape) < zeros] = 0
            tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    return model


@pytest.mark.parametrize("platform", ["windows-dml", "android"])
def test_compression_speed_stores_in_place_sections_raw_and_size_compresses_them(
    platform: str, tmp_path: Path
) -> None:
    """The section onnxruntime takes in place (ONNX weights; an ORT model, whose weights its graph
    holds) is raw under the default `compression: speed`, where zstd saves 28% and where it saves 75%
    alike; `compression: size` compresses both. Every blob loads to the source's outputs."""
    section = "weights" if platform == "windows-dml" else "graph"
    for zeros in (0.3, 0.8):
        model = pruned_mlp(zeros)
        name = f"pruned{int(zeros * 100)}"
        save(model, tmp_path / "assets", name)
        for compression, expected in (("speed", "raw"), ("size", "zstd")):
            settings = shipped_settings(platform, compression=compression)
            build = tmp_path / compression
            cook(job_for(tmp_path / "assets", name, settings, build))
            blob = blob_path(build / platform, name, settings.format).read_bytes()
            header, _ = read_header(blob)
            assert {f.codec for f in header.frames if f.section == section} == {expected}, (
                zeros,
                compression,
            )
            session = session_from_blob(blob, providers=CPU)
            np.testing.assert_allclose(session.run(None, feed())[0], run_source(model), rtol=1e-4, atol=1e-5)


def test_compression_must_be_speed_or_size(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"compression.*speed.*size"):
        settings_for(tmp_path, "compression: fast\n")


@pytest.mark.parametrize(("compression", "codec"), [("speed", "raw"), ("size", "zstd")])
def test_an_onnx_graph_is_raw_under_speed_and_zstd_under_size(
    tmp_path: Path, compression: str, codec: str
) -> None:
    """onnxruntime parses an ONNX graph from a copy of its bytes, and a copy is faster than zstd's
    decoding (a 1.8 MB Silero VAD graph: 0.05 ms against 1.95 ms; to a session in 1.32, 9.5 ms
    raw against 11.2 ms as zstd): under `compression: speed` a graph that holds its weights
    (`weights: inline`) is raw where zstd would save 28%; `compression: size` compresses it."""
    save(pruned_mlp(0.3), tmp_path / "assets", "inline")
    settings = shipped_settings("windows-dml", weights="inline", compression=compression)
    cook(job_for(tmp_path / "assets", "inline", settings, tmp_path / "build"))
    blob = blob_path(tmp_path / "build" / "windows-dml", "inline", "onnx").read_bytes()
    header, _ = read_header(blob)
    assert header.weights is None and {f.codec for f in header.frames} == {codec}
    assert (len(blob) < header.graph_size * 0.8) == (codec == "zstd")
    expected = run_source(pruned_mlp(0.3))
    np.testing.assert_allclose(
        session_from_blob(blob, providers=CPU).run(None, feed())[0], expected, rtol=1e-4, atol=1e-5
    )
