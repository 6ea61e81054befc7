"""The native loader on real third-party models: silero-vad's six ONNX models (voice activity
detectors with ``If`` subgraphs holding their weights, a float16 one, an opset-18 one, a sequence
model), fetched from PyPI as ``python -m bench.real`` fetches its corpus, cooked for every shipped
platform with the real doit, then run through ``oc-run`` (the sanitizer build) in each target
onnxruntime and through the Python loader on the inputs the cook verified them on."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from bench.real import fetch, write_assets
from onnx_cooker.layout import verify_data_path
from onnx_cooker.runtime import open_bundle
from tests.test_dodo import doit, run_session
from tests.test_native import PLATFORMS, VERSIONS, OcRun, native, ort_library  # noqa: F401

PACKAGE = ("pypi", "silero-vad==6.2.3")
MODELS = 6  # distinct models in that wheel (bench/results-real.md lists them)


@pytest.fixture(scope="module")
def real_build(tmp_path_factory: pytest.TempPathFactory, project_copier: Callable[[Path], Path]) -> Path:
    """The package's models cooked for every platform: the build folder (once per run, shared by the
    test workers under a lock)."""
    shared = tmp_path_factory.getbasetemp().parent / "native-real"
    shared.mkdir(parents=True, exist_ok=True)
    with FileLock(str(shared / "lock")):
        project = shared / "project"
        if not (shared / "done").is_file():
            for stale in (project, shared / "packages"):  # a run that stopped half-way
                if stale.exists():
                    shutil.rmtree(stale)
            project_copier(project)
            shutil.rmtree(project / "assets")  # the example assets: test_native.py runs those
            for profile in (project / "platforms").glob("*.yaml"):
                # linux-openvino: OpenVINO 1.24.1's CPU plugin compiles no If output of dynamic
                # rank, and the cook's runtime check refuses three of these models, naming the fix
                if profile.stem not in PLATFORMS:
                    profile.unlink()
            write_assets(fetch((PACKAGE,), shared / "packages"), project / "assets")
            run = doit(project, "cook")
            assert run.returncode == 0, run.output
            (shared / "done").write_text("cooked")
    return project / "build"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_real_models_give_the_python_loaders_outputs_through_oc_run(
    native: Path,  # noqa: F811
    real_build: Path,
    platform: str,
    version: str,
    tmp_path: Path,
) -> None:
    library = ort_library(version)
    bundle = open_bundle(real_build / platform)
    manifest = json.loads((real_build / platform / "manifest.json").read_text())["models"]
    assert len(bundle.names) == MODELS, bundle.names
    for name in bundle.names:
        with np.load(verify_data_path(real_build / platform, name)) as data:
            feeds = {k.removeprefix("input/"): data[k] for k in data.files if k.startswith("input/")}
        session = bundle.session(name, providers=["CPUExecutionProvider"])
        expected = run_session(session, feeds)
        folder = tmp_path / name
        args: list[object] = []
        for value in manifest[name]["inputs"]:  # the model's input order, as oc-run takes them
            path = folder / f"in-{len(args)}.npy"
            folder.mkdir(exist_ok=True)
            np.save(path, feeds[value["name"]])
            args += ["--in", path]
        run = OcRun(native, library, args, folder, label=f"{platform}/{name} in {version}")
        run.expect(["--bundle", real_build / platform, "--model", name], "out", expected)
        if version == VERSIONS[-1]:  # the blob file's bytes in memory, as an engine reads its archive
            run.expect(["--blob", real_build / platform / manifest[name]["file"]], "out-blob", expected)
