"""Real audio models cooked with no sample inputs and no ``.cook.yaml``: onnx-asr's preprocessors
(Whisper, Kaldi, NeMo, GigaAM and WeSpeaker features, resamplers between 8 and 48 kHz: STFT, DFT and
Scan graphs over ``waveforms [batch_size, N]`` and ``waveforms_lens [batch_size]``) and silero-vad's
six voice activity detectors, fetched from PyPI as ``python -m bench.real`` fetches its corpus
(without the sample inputs it writes for the detectors) and cooked with the real doit.

Before the cook tried a signal's length (16000 samples), the GigaAM v3 and WeSpeaker frontends,
whose 400-sample window fits none of 1, 32 and 224 samples, failed to cook; and WeSpeaker's crashed
the cook: onnxruntime dies of SIGFPE on it at a batch of 2 or more with fewer samples than a window,
which the sizes tried before 16000 are. Silero VAD v5 (``input [?, ?]``, ``state [2, ?, 128]``)
runs at 224 only, which the cook did not try while its dims without a name included a batch.
tests/test_model_classes.py has a built model of each class.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from bench.real import fetch, write_assets
from onnx_cooker.runtime import open_bundle
from tests.realmodels import bare_project, cook_all
from tests.test_dodo import doit, run_session

PACKAGES = (("pypi", "onnx-asr==0.12.0"), ("pypi", "silero-vad==6.2.3"))
PLATFORMS = ("android", "windows-dml")
CPU = ["CPUExecutionProvider"]
FRONTENDS = "onnx_asr_"  # the preprocessors' model names start so (bench.real's naming)
# The frontends whose window 224 samples do not fill (GigaAM v3's STFT, WeSpeaker's Scan of frames)
NEED_A_SIGNAL = ("gigaam_v3", "gigaam_v3_conv", "wespeaker")
SILERO_V5 = "silero_vad_data_silero_vad"  # dims without a name, over a batch


@pytest.fixture(scope="module")
def cooked(tmp_path_factory: pytest.TempPathFactory, project_copier: Callable[[Path], Path]) -> Path:
    """The packages' models cooked for android and windows-dml: the project folder."""
    project = bare_project(project_copier, tmp_path_factory.mktemp("audio") / "project", PLATFORMS)
    write_assets(fetch(PACKAGES, project.parent / "packages"), project / "assets")
    for inputs in (project / "assets").glob("*.inputs.npz"):  # what bench.real ships for the detectors
        inputs.unlink()
    return cook_all(project)


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_model_cooks_unconfigured_at_the_sizes_its_class_needs(cooked: Path, platform: str) -> None:
    assets = sorted(p.stem for p in (cooked / "assets").glob("*.onnx"))
    manifest = json.loads((cooked / "build" / platform / "manifest.json").read_text())["models"]
    assert sorted(manifest) == assets and len(assets) >= 34
    for model, entry in manifest.items():
        verification = entry["verification"]
        assert verification["inputs"] == "synthesized" and all(o["ok"] for o in verification["outputs"])
        if model.endswith(NEED_A_SIGNAL):
            assert verification["default_dims"] == {"N": 16000, "batch_size": 1}, model
    assert manifest[SILERO_V5]["verification"]["default_dims"] == {"?": 224}


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_cooked_frontends_compute_what_their_sources_do_on_a_batch_of_speech_lengths(
    cooked: Path, platform: str
) -> None:
    """Two waveforms of 1.0 and 0.6 s at 16 kHz (a batch and lengths the cook never ran), through
    the bundle, against the source model in this onnxruntime."""
    bundle = open_bundle(cooked / "build" / platform)
    rng = np.random.default_rng(7)
    feeds = {
        "waveforms": (rng.standard_normal((2, 16000)) * 0.1).astype(np.float32),
        "waveforms_lens": np.array([16000, 9600], np.int64),
    }
    frontends = sorted(name for name in bundle.names if name.startswith(FRONTENDS))
    assert len(frontends) == 29
    for model in frontends:
        assert_same_outputs(cooked, bundle.session(model, providers=CPU), model, feeds)


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_cooked_silero_v5_computes_what_its_source_does_on_a_16khz_chunk(cooked: Path, platform: str) -> None:
    """The detector as it is used (a 512-sample chunk at 16 kHz, a zero state), which the cook's
    synthesized inputs (224 chunks of 224, a sample rate of 0 or 1) never ran."""
    feeds = {
        "input": (np.random.default_rng(3).standard_normal((1, 512)) * 0.1).astype(np.float32),
        "state": np.zeros((2, 1, 128), np.float32),
        "sr": np.array(16000, np.int64),
    }
    session = open_bundle(cooked / "build" / platform).session(SILERO_V5, providers=CPU)
    assert_same_outputs(cooked, session, SILERO_V5, feeds)


def assert_same_outputs(
    project: Path, session: onnxruntime.InferenceSession, model: str, feeds: dict[str, np.ndarray]
) -> None:
    got = run_session(session, feeds)
    source = onnxruntime.InferenceSession(str(project / "assets" / f"{model}.onnx"), providers=CPU)
    want = run_session(source, feeds)
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].shape == value.shape, (model, name)
        np.testing.assert_allclose(got[name], value, rtol=1e-3, atol=1e-3, err_msg=f"{model}: {name}")


@pytest.mark.slow
def test_openvinos_refusal_of_dynamic_shapes_names_the_fixed_dims_that_load(
    cooked: Path, tmp_path: Path, project_copier: Callable[[Path], Path]
) -> None:
    """OpenVINO's CPU plugin compiles no dynamic shape ("to_shape was called on a dynamic shape" for
    the Kaldi frontend's Range), so the runtime check in onnxruntime-openvino refuses the model; its
    message names the model's free dims to fix for the platform, and with them fixed it loads."""
    project = bare_project(project_copier, tmp_path / "project", ["linux-openvino"])
    kaldi = f"{FRONTENDS}preprocessors_data_kaldi"
    shutil.copy2(cooked / "assets" / f"{kaldi}.onnx", project / "assets" / f"{kaldi}.onnx")

    refused = doit(project, "cook")
    assert refused.returncode != 0
    fixed = "`platforms: {linux-openvino: {fixed_dims: {batch_size: <size>, N: <size>}}}`"
    assert f"fix its dims at the sizes the game feeds there, {fixed} in its .cook.yaml" in refused.output

    settings = "platforms: {linux-openvino: {fixed_dims: {batch_size: 1, N: 16000}}}\n"
    (project / "assets" / f"{kaldi}.cook.yaml").write_text(settings)
    run = doit(project, "cook")
    assert run.returncode == 0, run.output
    manifest = json.loads((project / "build" / "linux-openvino" / "manifest.json").read_text())
    assert manifest["models"][kaldi]["inputs"][0]["shape"] == [1, 16000]
