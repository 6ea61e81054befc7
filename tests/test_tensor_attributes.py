"""ORT-format models whose operators take tensor attributes load along a copying path, not refused.

atspm-detector from PyPI ships LightGBM models as ``TreeEnsemble`` (ai.onnx.ml 5), whose splits and
leaf weights are tensor attributes. Every ORT platform refused them: with
``session.use_ort_model_bytes_for_initializers`` onnxruntime takes those tensors from the flatbuffer
in place too, and its graph check then refuses them ("should be stored in */_ORT_MEM_ADDR_/*, but it
is not regular file"; 1.24.4 from bytes, 1.28.0 and 1.32.0 from bytes and mapped). ``LabelEncoder``
4's keys and values are the same: the model here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from runtime_helpers import CPU, HEADER_DEFAULTS, run_in_runtime, to_ort_format, write_bundle

from onnx_cooker.runtime.writer import encode_blob
from tests.models import RNG_SEED
from tests.test_model_classes import cook_unconfigured
from tests.test_native import native, oc_run_matches_source, ort_library, run_native  # noqa: F401

KEYS = 64  # 512 bytes of int64 keys: onnxruntime takes tensors from 128 bytes in place


def label_matmul_model() -> onnx.ModelProto:
    """ids [batch] -> LabelEncoder (64 keys to 64 floats) -> labels [batch]; x [1, 512] @ W [512, 640] -> y
    (1.3 MB: an ORT model that loads in place, with a weight worth sharing)."""
    rng = np.random.default_rng(RNG_SEED)
    encoder = helper.make_node(
        "LabelEncoder",
        ["ids"],
        ["labels"],
        domain="ai.onnx.ml",
        keys_tensor=numpy_helper.from_array(np.arange(KEYS, dtype=np.int64), "keys"),
        values_tensor=numpy_helper.from_array(rng.standard_normal(KEYS).astype(np.float32), "values"),
        default_tensor=numpy_helper.from_array(np.array([-1.0], np.float32), "default"),
    )
    graph = helper.make_graph(
        [encoder, helper.make_node("MatMul", ["x", "w"], ["y"])],
        "tensor_attributes",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512]),
        ],
        [
            helper.make_tensor_value_info("labels", TensorProto.FLOAT, ["batch"]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 640]),
        ],
        [numpy_helper.from_array(rng.standard_normal((512, 640)).astype(np.float32), "w")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 4)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def feeds() -> dict[str, np.ndarray]:
    x = np.random.default_rng(RNG_SEED + 1).standard_normal((1, 512)).astype(np.float32)
    return {"ids": np.array([3, 63, 64, 0], np.int64), "x": x}


def test_the_cook_verifies_such_a_model_for_an_ort_platform(tmp_path: Path) -> None:
    entry = cook_unconfigured(label_matmul_model(), "labels", "android", tmp_path)
    assert entry["format"] == "ort"
    assert all(output["ok"] for output in entry["verification"]["outputs"])


PROBE = """
import json, mmap, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import numpy as np, onnxruntime
from onnx_cooker.runtime import load_info, session_from_blob
from onnx_cooker.runtime.blob import check_blob
from onnx_cooker.runtime.errors import SessionCreateError
from onnx_cooker.runtime.loadpaths import BlobFile
from onnx_cooker.runtime.session import session_from_checked

folder = Path(sys.argv[2])
with np.load(folder / "io.npz") as data:
    inputs = {k[3:]: data[k] for k in data.files if k.startswith("in/")}
    want = {k[4:]: data[k] for k in data.files if k.startswith("out/")}

def report(session):
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
    info = load_info(session)
    matches = all(np.allclose(got[k], v, rtol=1e-4, atol=1e-5) for k, v in want.items())
    return {"path": info.path.value, "refused": info.refused, "matches": matches}

def from_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        checked = check_blob(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
        model_file = BlobFile(fd, str(path))
        return session_from_checked(checked, providers=["CPUExecutionProvider"], model_file=model_file)
    finally:
        os.close(fd)

memory = (folder / "memory.ocb").read_bytes()  # its own cook key: its own refusal memo
result = {"onnxruntime": onnxruntime.__version__, "file": report(from_file(folder / "file.ocb"))}
result["file_again"] = report(from_file(folder / "file.ocb"))
# what the fallback session borrows stays alive with it: the caller's copy gone, memory churned
import gc
session = session_from_blob(bytearray(memory), providers=["CPUExecutionProvider"])
gc.collect()
churn = [bytearray(b"x" * len(memory)) for _ in range(4)]
result["memory"] = report(session)
result["memory_again"] = report(session_from_blob(memory, providers=["CPUExecutionProvider"]))
forced = "ort-mapped" if onnxruntime.__version__ >= "1.28" else "ort-file"
try:
    report(session_from_blob(memory, providers=["CPUExecutionProvider"], load_path=forced))
    result["forced"] = None
except SessionCreateError as exc:
    result["forced"] = str(exc)
print(json.dumps(result))
"""


@pytest.mark.parametrize("version", ["1.24.4", "1.28.0", "1.32.0"])
def test_the_loader_copies_what_onnxruntime_refuses_in_place(version: str, tmp_path: Path) -> None:
    model = label_matmul_model()
    ort_model = to_ort_format(model.SerializeToString(), tmp_path)
    folder = tmp_path / "cases"
    folder.mkdir()
    for name, key in (("file", "1"), ("memory", "2")):
        header = {**HEADER_DEFAULTS, "name": "labels", "cook_key": key * 64}
        blob = encode_blob(ort_model, level=3, model_format="ort", ort_format_version="6", **header)
        (folder / f"{name}.ocb").write_bytes(blob)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, feeds())
    outputs = dict(zip(["labels", "y"], want, strict=True))
    arrays = {f"in/{k}": v for k, v in feeds().items()} | {f"out/{k}": v for k, v in outputs.items()}
    np.savez(folder / "io.npz", **arrays)

    result = run_in_runtime(version, tmp_path / "work", ["-c", PROBE, str(folder)])
    assert all(result[k]["matches"] for k in ("file", "file_again", "memory", "memory_again"))
    if version == "1.24.4":  # no in-place ORT door to refuse: onnxruntime reads the model itself
        assert result["file"] == result["memory"] == {"path": "ort-file", "refused": None, "matches": True}
        assert result["forced"] is None
        return
    # The in-place door is refused, once; the copying path loads, and the next load goes straight there
    for first, again, door in (
        ("file", "file_again", "ort-mapped"),
        ("memory", "memory_again", "ort-shared"),
    ):
        assert result[first]["path"] == "ort-file"
        assert result[first]["refused"].startswith(f"{door}")
        assert "INVALID_GRAPH" in result[first]["refused"] and "LabelEncoder" in result[first]["refused"]
        assert result[again] == result[first]
    # A path the caller forces gets no fallback: onnxruntime's refusal, as a SessionCreateError
    assert "load path ort-mapped" in result["forced"] and "_ORT_MEM_ADDR_" in result["forced"]


@pytest.mark.parametrize("version", ["1.24.4", "1.28.0", "1.32.0"])
def test_the_native_loader_copies_them_too(
    native: Path,  # noqa: F811
    version: str,
    tmp_path: Path,
) -> None:
    """The C library's in-place ORT door (``use_ort_model_bytes_for_initializers``) is refused in
    every version: the session is made along ort-bytes (the flatbuffer borrowed, its tensors copied),
    the refusal reported, and the next sessions of the process go straight there."""
    model = label_matmul_model()
    header = {**HEADER_DEFAULTS, "name": "labels", "platform": "android"}
    blob = encode_blob(
        to_ort_format(model.SerializeToString(), tmp_path),
        level=3,
        model_format="ort",
        ort_format_version="6",
        **header,
    )
    folder = write_bundle(tmp_path / "bundle", {"labels": ("ort", blob)}, platform="android")
    library = ort_library(version)
    done = oc_run_matches_source(native, folder, "labels", library, model, tmp_path)
    assert "load path ort-bytes," in done.stdout, done.stdout
    said = [line for line in done.stdout.splitlines() if line.startswith("refused first: ")]
    assert said and said[0].startswith("refused first: ort-in-place refused ("), done.stdout
    timed = run_native(
        [native / "oc-run", "--bundle", folder, "--model", "labels", "--ort", library, "--time", "3"]
    )
    report = json.loads(timed.stdout.splitlines()[-1])
    assert report["load_path"] == "ort-bytes"
    assert report["refused"] == said[0].removeprefix("refused first: ")
