"""The cook key and the light modules that mirror runtime constants without importing the runtime."""

from __future__ import annotations

import json

from pipeline import cookkey, layout
from pipeline.runtime import blob, bundle


def test_light_copies_of_runtime_constants_stay_in_step() -> None:
    assert layout.MANIFEST_NAME == bundle.MANIFEST_NAME
    assert layout.MANIFEST_VERSION == bundle.MANIFEST_VERSION
    assert cookkey.BUNDLE_FORMAT.startswith(
        f"blob{blob.BLOB_FORMAT_VERSION}-manifest{bundle.MANIFEST_VERSION}-"
    )


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


def test_profile_allows_exactly_the_config_entries_the_loader_accepts() -> None:
    from pipeline import profile
    from pipeline.runtime import session

    assert profile._CONFIG_PREFIXES == session.ALLOWED_CONFIG_PREFIXES


def test_profile_forbids_exactly_what_the_loader_refuses_and_knows_the_oldest_runtime() -> None:
    from pipeline import profile
    from pipeline.runtime import compat, session

    assert set(profile._FORBIDDEN_CONFIG_ENTRIES) == session._UNSAFE_CONFIG_KEYS
    assert profile.OLDEST_RUNTIME == compat.OLDEST_SUPPORTED
