"""The cook key."""

from __future__ import annotations

import json

from pipeline import cookkey


def test_task_key_holds_settings_versions_and_format_only() -> None:
    key = json.loads(cookkey.task_key({"format": "ort"}))
    assert set(key) == {"bundle_format", "settings", "tools"}
    assert key["tools"]["onnx"] != "not installed" and key["tools"]["onnxruntime"] != "not installed"
    assert cookkey.task_key({"format": "ort"}) != cookkey.task_key({"format": "onnx"})


def test_cook_key_depends_on_every_source_hash() -> None:
    task = cookkey.task_key({"format": "ort"})
    base = cookkey.cook_key(task, {"m.onnx": "a", "m.onnx.data": "b"})
    assert base == cookkey.cook_key(task, {"m.onnx.data": "b", "m.onnx": "a"})
    assert base != cookkey.cook_key(task, {"m.onnx": "a", "m.onnx.data": "c"})
