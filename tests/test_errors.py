"""Cooking errors carry where they happened as data and put it in front of their message once."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from onnx_cooker.errors import CookError, GuardError, ProfileError, VerifyError


def test_context_is_data_and_formatted_once() -> None:
    error = GuardError("the cooked model fails its guards: weights were dropped")
    assert str(error) == "the cooked model fails its guards: weights were dropped"
    error.in_context(model_path=Path("assets/net.onnx"), model_name="net", platform="android")
    # A second, outer context never overrides what the inner step already knew, nor repeats it.
    error.in_context(model_path=Path("elsewhere.onnx"), model_name="other", platform="ios")
    assert (error.model_path, error.model_name, error.platform) == (Path("assets/net.onnx"), "net", "android")
    assert str(error) == (
        "assets/net.onnx (model 'net', platform 'android'): "
        "the cooked model fails its guards: weights were dropped"
    )
    assert error.problem == "the cooked model fails its guards: weights were dropped"


def test_context_survives_pickling_as_doits_parallel_runner_does() -> None:
    error = VerifyError("verification failed: output 'y' differs").in_context(
        model_path="a/m.onnx", model_name="m", platform="console"
    )
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is VerifyError and str(again) == str(error) and again.platform == "console"
    problems = pickle.loads(pickle.dumps(ProfileError(["a.yaml: bad", "b.yaml: worse"])))
    assert (
        problems.problems == ["a.yaml: bad", "b.yaml: worse"]
        and str(problems) == "a.yaml: bad\nb.yaml: worse"
    )


def test_a_model_without_a_platform_names_the_file_and_the_model(tmp_path: Path) -> None:
    from onnx_cooker.cook.source import load_source
    from onnx_cooker.settings.assets import discover

    (tmp_path / "broken.onnx").write_bytes(b"not a protobuf at all")
    (asset,) = discover(tmp_path)
    with pytest.raises(CookError) as failure:
        load_source(asset)
    assert str(failure.value).startswith(
        f"{asset.path} (model 'broken'): the file is not a readable ONNX model"
    )
    assert failure.value.platform is None
