"""The cook key."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

from onnx_cooker.cook import key as cookkey
from tests.models import mlp_model
from tests.test_cook import job_for, save, shipped_settings


def test_task_key_holds_name_settings_versions_and_format_only() -> None:
    key = json.loads(cookkey.task_key({"format": "ort"}, "m"))
    assert set(key) == {"bundle_format", "model", "settings", "tools"}
    assert key["tools"]["onnx"] != "not installed" and key["tools"]["onnxruntime"] != "not installed"
    assert cookkey.task_key({"format": "ort"}, "m") != cookkey.task_key({"format": "onnx"}, "m")
    # the same bytes as a/m and b/m (a model moved into a folder on one branch): two keys, since
    # each blob's header names its model (one key made them refuse each other's cache entry)
    assert cookkey.task_key({"format": "ort"}, "a/m") != cookkey.task_key({"format": "ort"}, "b/m")


def test_cook_key_depends_on_every_source_hash() -> None:
    task = cookkey.task_key({"format": "ort"}, "m")
    base = cookkey.cook_key(task, {"m.onnx": "a", "m.onnx.data": "b"})
    assert base == cookkey.cook_key(task, {"m.onnx.data": "b", "m.onnx": "a"})
    assert base != cookkey.cook_key(task, {"m.onnx": "a", "m.onnx.data": "c"})


def test_a_cook_job_derives_its_task_key_from_its_settings(tmp_path: Path) -> None:
    save(mlp_model(), tmp_path / "assets", "net")
    job = job_for(tmp_path / "assets", "net", shipped_settings("android"), tmp_path / "build")
    assert job.task_key == cookkey.task_key(job.settings.to_dict(), "net")
    assert pickle.loads(pickle.dumps(job)).task_key == job.task_key  # as `doit -n` hands it to a worker
    other = dataclasses.replace(job, settings=shipped_settings("ios"))
    assert other.task_key == cookkey.task_key(other.settings.to_dict(), "net") != job.task_key
