"""Shared fixtures: temporary copies of the project, for end-to-end tests that run the real doit."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from runtime_helpers import run_source, sample_input, to_ort_format

from tests.models import mixed_weights_model, tiny_model

REPO = Path(__file__).resolve().parent.parent
# What `doit cook` reads; build/ is never copied, so a copy always starts from nothing cooked.
PROJECT_PARTS = ("dodo.py", "onnx_cooker", "platforms", "assets")
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


@pytest.fixture(scope="module")
def mlp() -> Any:
    """A model with float32, int64 and float16 initializers big enough to go to a weights section."""
    return mixed_weights_model(seed=0)


@pytest.fixture(scope="module")
def mlp_expected(mlp: Any) -> np.ndarray:
    """onnxruntime on the source model (all initializers inline): what every cooked form must compute."""
    return run_source(mlp.SerializeToString(), sample_input())


def copy_project(dest: Path) -> Path:
    """Copy dodo.py, onnx_cooker/, platforms/ and assets/ of this repository into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in PROJECT_PARTS:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, dest / part, ignore=_IGNORED)
        else:
            shutil.copy2(source, dest / part)
    return dest


@pytest.fixture(scope="session")
def project_copier() -> Callable[[Path], Path]:
    """``copy_project`` for fixtures of a wider scope than ``project``."""
    return copy_project


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of the project in ``tmp_path/project``, nothing cooked yet."""
    return copy_project(tmp_path / "project")


@pytest.fixture(scope="module")
def source() -> bytes:
    """A tiny seeded model's ONNX bytes (the runtime loader tests' subject)."""
    return tiny_model(seed=0).SerializeToString()


@pytest.fixture(scope="module")
def models(source: bytes, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The same model as ONNX bytes and as the ORT-format file onnxruntime writes for it."""
    return {"onnx": source, "ort": to_ort_format(source, tmp_path_factory.mktemp("ort"))}
