"""Every load path (onnx_cooker/runtime/loadpaths.py) in every onnxruntime a shipped platform targets:
each loads and matches the source, each claim of "weights in place" is shown true (the caller's
buffer zeroed, or the mapped file rewritten, after the session was made: the outputs follow; a
sealed memfd by memory), a copying path shown to copy, and the loader picks the path its
table promises for that version. Each version runs in its own environment (the runtime check's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from runtime_helpers import HEADER_DEFAULTS, make_weighted_blob, run_in_runtime, run_source, to_ort_format

from onnx_cooker.runtime.writer import encode_blob
from tests.models import (
    conv_bn_relu_model,
    dense_model,
    float_4d_weight_model,
    half_concat_model,
    half_conv_model,
    large_matmul_model,
    transposed_weight_model,
)

REPO = Path(__file__).resolve().parents[1]
RUNTIMES_CACHE = REPO / ".pytest_cache" / "runtimes"
VERSIONS = ("1.24.4", "1.28.0", "1.32.0")  # windows-dml; console; android and ios
# What the loader must pick, by version: (ONNX with weights, ORT from memory, ORT from its file).
EXPECTED_AUTO = {
    "1.24.4": ("onnx-shared-initializers", "ort-file", "ort-file"),
    "1.28.0": ("onnx-shared-initializers", "ort-shared-initializers", "ort-mapped"),
    "1.32.0": ("onnx-file-buffers", "ort-shared-initializers", "ort-mapped"),
}


def _cases(folder: Path) -> list[dict[str, Any]]:
    """Blobs of an ONNX MLP (weights raw, weights zstd), and of an 8 MB MatMul in ORT format (graph
    raw, so it starts the blob; graph zstd), each with an input and the source's output."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = []
    onnx_model = dense_model(256, 512, batch=1, seed=3, activation="Relu", name="mlp")
    x_onnx = np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32)
    for codec in ("raw", "zstd"):
        blob = make_weighted_blob(onnx_model, codec)[0]
        cases.append(
            _case(folder, f"onnx-{codec}", blob, x_onnx, run_source(onnx_model.SerializeToString(), x_onnx))
        )
    conv = conv_bn_relu_model()  # optimizers read its initializers: 1.24.4 and 1.28.0 refuse the door
    x_conv = np.random.default_rng(4).standard_normal((1, 8, 16, 16)).astype(np.float32)
    blob = make_weighted_blob(conv, "raw")[0]
    # Conv+BatchNormalization fuse: onnxruntime computes new weights of its own, so nothing of the
    # caller's is used in place, whatever the path (not a claim the probe checks here).
    cases.append(
        _case(folder, "conv-raw", blob, x_conv, run_source(conv.SerializeToString(), x_conv))
        | {"fused": True}
    )
    ort_source = large_matmul_model(1024, 2048, seed=5)
    ort_model = to_ort_format(ort_source.SerializeToString(), folder)
    x_ort = np.random.default_rng(2).standard_normal((1, 1024)).astype(np.float32)
    expected = run_source(ort_source.SerializeToString(), x_ort)
    weight = onnx.numpy_helper.to_array(ort_source.graph.initializer[0]).tobytes()
    for codec in ("raw", "zstd"):
        blob = encode_blob(
            ort_model,
            level=3,
            graph_codec=codec,
            model_format="ort",
            ort_format_version="6",
            **HEADER_DEFAULTS,
        )
        case = _case(folder, f"ort-{codec}", blob, x_ort, expected)
        at = blob.find(weight[:4096]) if codec == "raw" else -1
        if at >= 0:  # the weight's bytes lie in the flatbuffer as they are: rewrite 64 KiB of them
            case |= {"weight_at": at, "weight_bytes": 1 << 16}
        cases.append(case)
    (folder / "cases.json").write_text(json.dumps(cases))
    return cases


def _case(folder: Path, name: str, blob: bytes, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    (folder / f"{name}.ocb").write_bytes(blob)
    np.save(folder / f"{name}.in.npy", x)
    np.save(folder / f"{name}.out.npy", y)
    return {"name": name, "blob": f"{name}.ocb", "input": f"{name}.in.npy", "output": f"{name}.out.npy"}


@pytest.fixture(scope="module")
def case_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("load-paths")
    _cases(folder)
    return folder


def _probe(version: str, case_folder: Path, tmp_path: Path) -> dict[str, Any]:
    probe = str(REPO / "tests" / "load_path_probe.py")
    return run_in_runtime(version, tmp_path, [probe, str(case_folder)])["cases"]


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_every_load_path_loads_matches_and_keeps_its_in_place_promise(
    version: str, case_folder: Path, tmp_path: Path
) -> None:
    cases = _probe(version, case_folder, tmp_path)

    onnx_auto, ort_memory_auto, ort_file_auto = EXPECTED_AUTO[version]
    # Small raw weights from a blob file load in place as from memory (from 1.32 as views of the
    # loader's mapping; before it shared, where the door opens); onnx-mapped, forced below, is proven
    # all the same (tests/test_onnx_mapped.py has the choice for big ones). Before 1.32 onnxruntime
    # maps the blob file of a conv net, whose door it would refuse, at any size.
    conv_file_auto = onnx_auto if version == "1.32.0" else "onnx-mapped"
    assert cases["onnx-raw"]["auto"] == {"memory": onnx_auto, "file": onnx_auto}
    assert cases["conv-raw"]["auto"]["file"] == conv_file_auto  # its forced path matches, below
    # From its file a conv net loads along that path at once: no refused door first (before 1.32)
    assert cases["conv-raw"]["used_file"] == {"path": conv_file_auto, "refused": None, "matches": True}
    assert cases["ort-raw"]["auto"] == {"memory": ort_memory_auto, "file": ort_file_auto}
    tried = {path for case in cases.values() for path in case["paths"]}
    # The fallbacks are tried in every version: they are what an unproven version gets.
    assert {"onnx-external-initializers/memory", "ort-bytes/memory"} <= tried
    if version == "1.32.0":
        assert "onnx-file-buffers/memory" in tried
    shown = 0
    for name, case in cases.items():
        for key, result in case["paths"].items():
            if name == "conv-raw" and key.startswith("onnx-shared-initializers") and not result["loads"]:
                # Forced, the door is refused, safely: /dev/null holds nothing to read (1.24.4, 1.28.0:
                # "cannot get file size"; 1.32.0: "Random-access reads require a regular file").
                assert "/dev/null" in result["error"]
                continue
            assert result["loads"], f"{name} {key}: {result.get('error')}"
            assert result["matches"], f"{name} {key} computes something else"
            if result["in_place"] is not None:
                shown += 1
                assert result["in_place"] == result["claims_in_place"], (
                    f"{name} {key}: claims in place {result['claims_in_place']}, shown {result['in_place']}"
                )
    # The proofs ran: the ONNX paths on raw weights, the ORT paths by file rewrite or memory.
    assert shown >= 4
    raw = cases["onnx-raw"]["paths"]
    assert raw[f"{onnx_auto}/memory"]["in_place"] is True
    assert raw["onnx-mapped/file"]["in_place"] is True  # the file rewritten: the outputs follow
    assert cases["conv-raw"]["paths"]["onnx-mapped/file"]["matches"]  # optimizers read it: a real file
    # The fallback copies while it loads, then uses the blob's weights (add_initializer) all the same.
    assert raw["onnx-external-initializers/memory"]["in_place"] is True
    if ort_file_auto == "ort-mapped":
        assert cases["ort-raw"]["paths"]["ort-mapped/file"]["in_place"] is True
        assert cases["ort-raw"]["paths"]["ort-mapped/memory"]["in_place"] is True
        # the caller's buffer zeroed after the session was made: the outputs follow
        assert cases["ort-raw"]["paths"]["ort-shared-initializers/memory"]["in_place"] is True
        # a zstd graph has no raw extent to share: decoded into the memfd whole
        assert cases["ort-zstd"]["auto"]["memory"] == "ort-mapped"
    assert cases["ort-raw"]["paths"]["ort-bytes/memory"]["in_place"] is False
    # The loader's own choice always loads and matches. A conv net, whose float 4-D weights
    # onnxruntime's optimizers read from the referenced file (the door refused, forced, above), goes
    # straight along the fallback, still in place, without the refused try (1.24.4 and 1.28.0).
    assert all(case["used"]["matches"] for case in cases.values())
    conv = cases["conv-raw"]["used"]
    if onnx_auto == "onnx-shared-initializers":
        assert conv == {"path": "onnx-external-initializers", "refused": None, "matches": True}
        assert cases["onnx-raw"]["used"] == {"path": onnx_auto, "refused": None, "matches": True}
    else:
        assert conv == {"path": onnx_auto, "refused": None, "matches": True}


@pytest.mark.parametrize("version", ["1.24.4", "1.28.0"])
def test_weights_optimizers_read_skip_the_shared_door_before_it_is_tried(version: str) -> None:
    """Blobs with float32 4-D weights (Conv kernels) or 16-bit float weights, which onnxruntime's
    optimizers read from the referenced file, go straight along the copying door; other weights,
    int8 conv kernels among them, still try the shared door first (the choice, made in this process
    for ``version``; that onnxruntime refuses or accepts the door for these models is
    tests/test_native.py's)."""
    from onnx_cooker.runtime.blob import check_blob
    from onnx_cooker.runtime.loadpaths import LoadPath, choose_load_path, optimizers_read_weights

    conv = conv_bn_relu_model()
    int8 = conv_bn_relu_model()
    int8.graph.initializer[0].CopyFrom(
        onnx.numpy_helper.from_array(np.ones((16, 8, 3, 3), np.int8), int8.graph.initializer[0].name)
    )
    chosen = {}
    added, mlp = float_4d_weight_model(), transposed_weight_model()
    models = (("conv", conv), ("added", added), ("int8", int8), ("mlp", mlp))
    models += (("half_conv", half_conv_model()), ("half_concat", half_concat_model()))
    for name, model in models:
        checked = check_blob(make_weighted_blob(model, "raw")[0])
        chosen[name] = (optimizers_read_weights(checked), choose_load_path(checked, version))
    assert chosen == {
        "conv": (True, LoadPath.ONNX_EXTERNAL_INITIALIZERS),
        "added": (True, LoadPath.ONNX_EXTERNAL_INITIALIZERS),  # a door it would open: skipped all the same
        "half_conv": (True, LoadPath.ONNX_EXTERNAL_INITIALIZERS),
        "half_concat": (True, LoadPath.ONNX_EXTERNAL_INITIALIZERS),  # would open too
        "int8": (False, LoadPath.ONNX_SHARED_INITIALIZERS),
        "mlp": (False, LoadPath.ONNX_SHARED_INITIALIZERS),
    }


REMEMBER_PROBE = """
import json, logging, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from onnx_cooker.runtime import load_info, session_from_blob

class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []
    def emit(self, record):
        self.lines.append(record.getMessage())

log = logging.getLogger("onnx_cooker.runtime")
log.setLevel(logging.INFO)
heard = Lines()
log.addHandler(heard)
blob = Path(sys.argv[2]).read_bytes()
report = []
for _ in range(2):
    heard.lines.clear()
    info = load_info(session_from_blob(blob, providers=["CPUExecutionProvider"]))
    report.append({"path": info.path.value, "refused": info.refused,
                   "tried": any("loading along" in line for line in heard.lines)})
import onnxruntime
print(json.dumps({"onnxruntime": onnxruntime.__version__, "loads": report}))
"""


@pytest.mark.slow
def test_a_model_refused_the_shared_door_goes_straight_to_the_copying_path_next_time(tmp_path: Path) -> None:
    """onnxruntime 1.28.0 refuses shared initializers for a model whose weight it folds at load (a
    Transpose of a 2-D weight: "cannot get file size [/dev/null]"), which no 4-D weight announces:
    the first load pays the refused try and says so, the next loads of that model in the process go
    straight to onnx-external-initializers (LoadInfo.refused still tells why)."""
    from runtime_helpers import run_in_runtime

    path = tmp_path / "transposed.ocb"
    path.write_bytes(make_weighted_blob(transposed_weight_model(), "raw")[0])
    report = run_in_runtime("1.28.0", tmp_path / "work", ["-c", REMEMBER_PROBE, str(path)])
    first, second = report["loads"]
    assert first["path"] == second["path"] == "onnx-external-initializers"
    assert first["tried"] and "/dev/null" in first["refused"]
    assert not second["tried"] and second["refused"] == first["refused"]
