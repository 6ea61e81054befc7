"""Real audio frontends with no sample inputs: onnx-asr's preprocessors (Whisper, Kaldi, NeMo,
GigaAM and WeSpeaker features, resamplers between 8 and 48 kHz: STFT, DFT and Scan graphs over
``waveforms [batch_size, N]`` and ``waveforms_lens [batch_size]``), fetched from PyPI as
``python -m bench.real`` fetches its corpus and cooked with the real doit and no ``.cook.yaml``.

Before the cook tried a signal's length (16000 samples), the GigaAM v3 and WeSpeaker frontends,
whose 400-sample window fits none of 1, 32 and 224 samples, failed to cook; and WeSpeaker's crashed
the cook: onnxruntime dies of SIGFPE on it at a batch of 2 or more with fewer samples than a window,
which the sizes tried before 16000 are (tests/test_model_classes.py has a built model of the class).
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
from pipeline.runtime import open_bundle
from tests.test_dodo import doit, run_session

PACKAGE = ("pypi", "onnx-asr==0.12.0")
PLATFORMS = ("android", "windows-dml")
CPU = ["CPUExecutionProvider"]
# The frontends whose window 224 samples do not fill (GigaAM v3's STFT, WeSpeaker's Scan of frames)
NEED_A_SIGNAL = ("gigaam_v3", "gigaam_v3_conv", "wespeaker")


@pytest.fixture(scope="module")
def cooked(tmp_path_factory: pytest.TempPathFactory, project_copier: Callable[[Path], Path]) -> Path:
    """The package's models cooked for android and windows-dml: the project folder."""
    project = project_copier(tmp_path_factory.mktemp("audio") / "project")
    shutil.rmtree(project / "assets")  # the example assets: other tests cook those
    for profile in (project / "platforms").glob("*.yaml"):
        if profile.stem not in PLATFORMS:
            profile.unlink()
    write_assets(fetch((PACKAGE,), project.parent / "packages"), project / "assets")
    run = doit(project, "cook")
    assert run.returncode == 0, run.output
    return project


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_frontend_cooks_unconfigured_and_the_long_windows_at_a_signals_length(
    cooked: Path, platform: str
) -> None:
    assets = sorted(p.stem for p in (cooked / "assets").glob("*.onnx"))
    manifest = json.loads((cooked / "build" / platform / "manifest.json").read_text())["models"]
    assert sorted(manifest) == assets and len(assets) >= 25
    for model, entry in manifest.items():
        verification = entry["verification"]
        assert verification["inputs"] == "synthesized" and all(o["ok"] for o in verification["outputs"])
        if model.endswith(NEED_A_SIGNAL):
            assert verification["default_dims"] == {"N": 16000, "batch_size": 1}, model


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
    for model in sorted(bundle.names):
        got = run_session(bundle.session(model, providers=CPU), feeds)
        source = onnxruntime.InferenceSession(str(cooked / "assets" / f"{model}.onnx"), providers=CPU)
        want = run_session(source, feeds)
        assert got.keys() == want.keys()
        for name, value in want.items():
            assert got[name].shape == value.shape, (model, name)
            np.testing.assert_allclose(got[name], value, rtol=1e-3, atol=1e-3, err_msg=f"{model}: {name}")
