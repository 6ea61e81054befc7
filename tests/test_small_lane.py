"""A small blob loaded again takes its recipe (onnx_cooker/runtime/smallload.py): the same session, log
line, progress and load info as its first load, and the same refusal as a fresh process for every
damaged or swapped blob."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
from runtime_helpers import CPU, make_blob, mutate, run_in_runtime, run_source, sample_input, write_bundle

from onnx_cooker.runtime import load_info, open_bundle, session_from_blob, smallload
from onnx_cooker.runtime.blob import DEFAULT_MAX_MODEL_SIZE, check_blob
from onnx_cooker.runtime.errors import BundleError, ChecksumMismatchError

# (model format, writer arguments): the three ways a small graph is stored
LAYOUTS = {
    "ort-leading-raw": ("ort", {}),
    "onnx-zstd": ("onnx", {}),
    "onnx-raw-padded": ("onnx", {"graph_codec": "raw"}),
}


@pytest.fixture(autouse=True)
def no_recipes() -> Any:
    smallload.forget()
    yield
    smallload.forget()


@pytest.fixture(params=sorted(LAYOUTS))
def blob(request: pytest.FixtureRequest, models: dict[str, bytes]) -> bytes:
    model_format, writer = LAYOUTS[request.param]
    made = make_blob(models[model_format], model_format, name="tiny", platform="android", **writer)
    frame = check_blob(made).header.frames[0]
    expected = {"ort-leading-raw": ("raw", 0), "onnx-zstd": ("zstd", 0), "onnx-raw-padded": ("raw", 1)}
    assert (frame.codec, min(frame.pad, 1)) == expected[request.param]  # the layout this case is for
    return made


def recipe_for(data: bytes | bytearray, providers: Any = None, low_memory: bool = False) -> bool:
    """Whether a load of ``data`` with these arguments would take a recipe."""
    return smallload.recall(data, smallload.asked(providers, low_memory, DEFAULT_MAX_MODEL_SIZE)) is not None


def general_checks(load: Any) -> int:
    """How many times ``load()`` ran the general way's layout check (``blob.check_layout``)."""
    calls = []

    def seen(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "check_layout":
            calls.append(frame.f_code.co_filename)

    sys.setprofile(seen)
    try:
        load()
    finally:
        sys.setprofile(None)
    return len(calls)


def outcome(data: bytes | bytearray) -> tuple[Any, ...]:
    """What a load of ``data`` gives: its load info and outputs, or the error's type and message."""
    try:
        session = session_from_blob(data)
    except BundleError as exc:
        return (type(exc).__name__, str(exc))
    x = sample_input(seed=5)
    return ("session", load_info(session), session.run(None, {"x": x})[0].tobytes())


def test_a_small_blob_loaded_again_builds_the_same_session_from_its_recipe(
    blob: bytes, source: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    loads = []
    assert not recipe_for(blob)
    for _ in range(2):
        heard: list[tuple[str, float]] = []
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="onnx_cooker.runtime"):
            session = session_from_blob(
                blob, progress=lambda stage, done, into=heard: into.append((stage, done))
            )
        x = sample_input(seed=2)
        np.testing.assert_allclose(
            session.run(None, {"x": x})[0], run_source(source, x), rtol=1e-6, atol=1e-6
        )
        loads.append((load_info(session), heard, [r.getMessage() for r in caplog.records]))
        assert recipe_for(blob)  # kept by the first load, and used by the second
    assert loads[0] == loads[1]
    assert general_checks(lambda: session_from_blob(blob)) == 0  # the recipe's way
    smallload.forget()
    assert general_checks(lambda: session_from_blob(blob)) == 1
    info, heard, lines = loads[1]
    assert info is not None and info.path.value in ("ort-bytes", "onnx-inline") and not info.in_place
    assert heard == [(stage, done) for stage in ("decompress", "session") for done in (0.0, 1.0)]
    assert len(lines) == 1 and "load path" in lines[0]


def test_damage_to_a_blob_loaded_before_is_refused_as_a_fresh_process_refuses_it(blob: bytes) -> None:
    """Every byte position of the blob changed (a bit flipped, a byte inserted, the end cut), loaded
    once after its intact blob made a recipe and once without any: the same outcome, every time."""
    steps: list[list[tuple[str, float, int]]] = []
    for index in range(0, len(blob), max(1, len(blob) // 400)):
        where = index / len(blob)
        steps += [[("flip", where, 1)], [("flip", where, 0x80)]]
    steps += [[("insert", 1.0, 0)], [("truncate", 0.999, 0)], [("delete", 0.5, 0)], [("insert", 0.0, 7)]]
    refused = 0
    for step in steps:
        damaged = mutate(blob, step)
        session_from_blob(blob)  # the intact blob's recipe
        assert recipe_for(blob)
        after_recipe = outcome(damaged)
        smallload.forget()
        assert outcome(damaged) == after_recipe, step
        refused += after_recipe[0] != "session"
    assert refused >= len(steps) * 0.9  # the check that the blob's bytes are checked at all


def test_a_buffer_changed_in_place_after_its_first_load_is_refused_then_loads_once_restored(
    blob: bytes,
) -> None:
    data = bytearray(blob)
    first = outcome(data)
    assert first[0] == "session" and recipe_for(data)
    frame = check_blob(blob).header.frames[0]
    data[frame.data_offset + frame.content_size // 2] ^= 0x10  # inside the graph: same header, same length
    with pytest.raises(ChecksumMismatchError, match="damaged"):
        session_from_blob(data)
    data[frame.data_offset + frame.content_size // 2] ^= 0x10
    assert outcome(data) == first


def test_a_recipe_is_for_the_arguments_it_was_made_with(blob: bytes) -> None:
    options: dict[str, str] = {}
    session_from_blob(blob, providers=[("CPUExecutionProvider", options)])
    assert recipe_for(blob, [("CPUExecutionProvider", options)])
    assert not recipe_for(blob) and not recipe_for(blob, CPU)
    options["arena_extend_strategy"] = "kSameAsRequested"  # the caller's dict, changed: other arguments
    assert not recipe_for(blob, [("CPUExecutionProvider", options)])
    session_from_blob(blob, low_memory=True)
    assert recipe_for(blob, low_memory=True) and not recipe_for(blob)
    session_from_blob(blob)  # a recipe per arguments: loads that alternate keep theirs
    assert recipe_for(blob, low_memory=True) and recipe_for(blob)
    smallload.forget()
    session_from_blob(blob, session_options=onnxruntime.SessionOptions())
    session_from_blob(blob, load_path=load_info(session_from_blob(blob, providers=iter(CPU))).path.value)
    assert not smallload._recipes  # options of the caller's, a path asked for, providers not a list


def test_a_bundles_small_blob_loaded_again_and_a_swapped_one(
    tmp_path: Path, models: dict[str, bytes]
) -> None:
    """``Bundle.session`` takes the recipe too, and still refuses an intact blob of another cook put
    in the file's place (one the process loaded before: a recipe is there for its header)."""
    listed = make_blob(models["ort"], "ort", name="upscaler", platform="android", cook_key="1" * 64)
    other = make_blob(models["ort"], "ort", name="upscaler", platform="android", cook_key="2" * 64)
    assert len(listed) == len(other)
    root = write_bundle(tmp_path / "android", {"upscaler": ("ort", listed)}, platform="android")
    bundle = open_bundle(root, map_blobs=False)
    x = sample_input(seed=4)
    outputs = [bundle.session("upscaler").run(None, {"x": x})[0] for _ in range(2)]
    assert recipe_for(listed)
    assert general_checks(lambda: bundle.session("upscaler")) == 0
    np.testing.assert_array_equal(outputs[0], outputs[1])
    session_from_blob(other)
    assert recipe_for(other)
    (root / "upscaler.ort.ocb").write_bytes(other)
    with pytest.raises(ChecksumMismatchError) as lane:
        bundle.session("upscaler")
    smallload.forget()
    with pytest.raises(ChecksumMismatchError) as fresh:
        bundle.session("upscaler")
    assert str(lane.value) == str(fresh.value)
    assert "is not the one manifest.json lists" in str(lane.value)


LANE_IN_RUNTIME = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); import onnxruntime, numpy as np\n"
    "from onnx_cooker.runtime import session_from_blob, load_info, smallload\n"
    "from onnx_cooker.runtime.blob import DEFAULT_MAX_MODEL_SIZE\n"
    "report = {'onnxruntime': onnxruntime.__version__, 'blobs': []}\n"
    "x = np.load(sys.argv[2])\n"
    "for path in sys.argv[3:]:\n"
    "    blob = open(path, 'rb').read()\n"
    "    first = session_from_blob(blob)\n"
    "    args = smallload.asked(None, False, DEFAULT_MAX_MODEL_SIZE)\n"
    "    again = smallload.session_again(blob, args, lambda s, d: None)\n"
    "    outputs = [s.run(None, {'x': x})[0] for s in (first, again or first)]\n"
    "    same = again is not None and np.array_equal(*outputs)\n"
    "    report['blobs'].append([load_info(first).path.value, same, load_info(again) == load_info(first)])\n"
    "print(json.dumps(report))\n"
)


@pytest.mark.parametrize("version", ["1.24.4", "1.28.0"])
def test_the_lane_in_each_target_onnxruntime(version: str, tmp_path: Path, models: dict[str, bytes]) -> None:
    """The other target versions (the suite's own runs 1.32): a recipe replayed gives the session
    of the first load, for each layout."""
    paths = []
    for case, (model_format, writer) in sorted(LAYOUTS.items()):
        paths.append(tmp_path / f"{case}.ocb")
        paths[-1].write_bytes(make_blob(models[model_format], model_format, name="tiny", **writer))
    np.save(tmp_path / "x.npy", sample_input(seed=6))
    report = run_in_runtime(
        version, tmp_path / "work", ["-c", LANE_IN_RUNTIME, str(tmp_path / "x.npy"), *map(str, paths)]
    )
    assert [path for path, _, _ in report["blobs"]] == ["onnx-inline", "onnx-inline", "ort-bytes"]
    assert all(same and info_same for _, same, info_same in report["blobs"])
