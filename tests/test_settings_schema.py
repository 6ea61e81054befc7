"""The settings table as the single source: docs/settings.md's table and docs/settings.schema.json are
generated from it and kept equal here; the schema validates the shipped platform files and agrees
with the cooker's own checks on wrong values; CookSettings and Platform get their fields from it."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from onnx_cooker.errors import ProfileError
from onnx_cooker.settings.docs import (
    SCHEMA_LINE,
    SCHEMA_PATH,
    SETTINGS_DOC_PATH,
    SETTINGS_TABLE,
    rows,
    schema,
    schema_text,
    settings_table,
    yaml_text,
)
from onnx_cooker.settings.resolve import CookSettings, Platform, load_platforms
from onnx_cooker.settings.table import AS_ABOVE, COOK_SETTINGS, DEFAULTS, PLATFORM_SETTINGS, SETTINGS

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "platforms").glob("*.yaml"))
REGENERATE = "regenerate with `python -m onnx_cooker.settings.docs --write`"


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    committed = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(committed)
    validator_class.check_schema(committed)
    return validator_class(committed)


def test_committed_schema_is_the_generated_one() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), REGENERATE


def test_settings_doc_table_is_the_generated_one() -> None:
    (table,) = SETTINGS_TABLE.findall(SETTINGS_DOC_PATH.read_text(encoding="utf-8"))
    assert table == settings_table(), REGENERATE


def test_settings_table_has_a_row_per_setting_or_group() -> None:
    lines = settings_table().splitlines()
    assert lines[:2] == ["| key | default | meaning |", "|---|---|---|"]
    assert len(lines) == 2 + len(rows()) and all(line.count(" | ") == 2 for line in lines[2:])
    assert (
        "| `rtol`, `atol` | `1.0e-4`, `1.0e-5` | elementwise verification tolerances: each output element "
        "within atol + rtol times the source's |" in lines
    )
    assert '| `include`, `exclude` | `["*"]`, `[]` |' in settings_table()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_schema_validates_the_shipped_platform_file(path: Path, validator: Any) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == SCHEMA_LINE
    assert (path.parent / SCHEMA_LINE.split("$schema=")[1]).resolve() == SCHEMA_PATH
    validator.validate(yaml.safe_load(text))


def test_schema_accepts_every_default_spelled_out(validator: Any) -> None:
    validator.validate(dict(DEFAULTS))


# Each wrong file, refused by the schema (in an editor) and by the cooker (with its own message).
WRONG = {
    "unknown key": {"optimisation_level": "basic"},
    "not a choice": {"format": "tflite"},
    "out of range": {"compression_level": 99},
    "below the minimum": {"rtol": -1.0},
    "quoted boolean": {"verify": "yes"},
    "version as a number": {"runtime_version": 1.2},
    "version text": {"runtime_version": "latest"},
    "no provider": {"execution_providers": []},
    "repeated provider": {"execution_providers": ["CPUExecutionProvider", "CPUExecutionProvider"]},
    "empty glob": {"include": [""]},
    "two-line description": {"description": "a\nb"},
    "dimension size 0": {"verify_dims": {"batch": 0}},
    "shape size 0": {"fixed_shapes": {"images": [1, 0]}},
    "option as a list": {"provider_options": {"CPUExecutionProvider": {"arena": [1]}}},
    "unknown session option": {"ep_session_options": {"CPUExecutionProvider": {"execution_mod": "parallel"}}},
    "session option choice": {"ep_session_options": {"CPUExecutionProvider": {"execution_mode": "fast"}}},
    "config entry as a number": {
        "ep_session_options": {"CPUExecutionProvider": {"session.intra_op.allow_spinning": 0}}
    },
    "config entry that writes files": {
        "ep_session_options": {"CPUExecutionProvider": {"ep.context_file_path": "x"}}
    },
    "unsafe config entry": {
        "ep_session_options": {"CPUExecutionProvider": {"session.use_ort_model_bytes_directly": "1"}}
    },
    "config entry naming a file": {
        "ep_session_options": {"CPUExecutionProvider": {"session.node_partition_config_file": "x"}}
    },
    "config entry not on the list": {"ep_session_options": {"CPUExecutionProvider": {"session.x_y": "1"}}},
    "option naming a folder": {"provider_options": {"OpenVINOExecutionProvider": {"Cache_Dir": "c"}}},
    "option loading a library": {"provider_options": {"QNNExecutionProvider": {"backend_path": "l"}}},
    "provider option value, a path": {"provider_options": {"DmlExecutionProvider": {"device_id": "../0"}}},
}


@pytest.mark.parametrize("data", WRONG.values(), ids=WRONG.keys())
def test_schema_and_cooker_refuse_a_wrong_value(data: dict[str, Any], validator: Any, tmp_path: Path) -> None:
    assert not validator.is_valid(data)
    (tmp_path / "target.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ProfileError):
        load_platforms(tmp_path, {})


def test_schema_and_cooker_accept_a_full_platform(validator: Any, tmp_path: Path) -> None:
    data = {
        "format": "onnx",
        "arch": "x86_64",
        "runtime_version": "1.24",
        "execution_providers": ["DmlExecutionProvider", "CPUExecutionProvider"],
        "provider_options": {"DmlExecutionProvider": {"device_id": 0, "name": "x", "on": True}},
        "ep_session_options": {
            "CPUExecutionProvider": {"session.intra_op.allow_spinning": "0", "mlas.use_lut_gemm": "1"}
        },
        "rtol": 0,
        "fixed_shapes": {"images": [1, 3, 224, 224]},
        "include": ["vision/*"],
        "runtime_check": False,
        "runtime_check_off_reason": "no wheel",
    }
    validator.validate(data)
    (tmp_path / "target.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    load_platforms(tmp_path, {})


def test_every_choice_is_documented() -> None:
    docs = {setting.name: doc for settings, doc in rows() for setting in settings}
    for setting in SETTINGS:
        assert all(f"`{choice}`" in docs[setting.name] for choice in setting.choices), setting.name


def test_table_rows_are_well_formed() -> None:
    assert SETTINGS[0].doc != AS_ABOVE
    assert len({setting.name for setting in SETTINGS}) == len(SETTINGS)
    for setting in SETTINGS:
        assert "\n" not in setting.doc and "|" not in setting.doc, setting.name
        assert yaml.safe_load(f"key: {yaml_text(setting.default)}")["key"] == setting.default, setting.name
    assert set(schema()["properties"]) == set(DEFAULTS)


def test_frozen_classes_get_their_fields_from_the_table() -> None:
    cook_fields = [field.name for field in dataclasses.fields(CookSettings)]
    assert cook_fields == ["platform", *(setting.name for setting in COOK_SETTINGS)]
    platform_fields = [field.name for field in dataclasses.fields(Platform)]
    assert platform_fields == [
        "name",
        "path",
        *(setting.name for setting in PLATFORM_SETTINGS),
        "settings",
        "origins",
    ]
    assert CookSettings.__module__ == Platform.__module__ == "onnx_cooker.settings.resolve"


def test_the_shipped_platforms_table_lists_every_shipped_platform() -> None:
    """docs/settings.md's first table is the newcomer's list of targets: one row per platforms/*.yaml."""
    text = SETTINGS_DOC_PATH.read_text(encoding="utf-8")
    table = text[text.index("| platform | format |") :].split("\n\n")[0]
    listed = sorted(line.split("`")[1] for line in table.splitlines()[2:])
    platforms = SETTINGS_DOC_PATH.parent.parent / "platforms"
    assert listed == sorted(path.stem for path in platforms.glob("*.yaml"))


def test_the_models_settings_paragraph_names_every_platform_only_key() -> None:
    """docs/settings.md says which keys a model's .cook.yaml may not set; the list had fallen behind
    the code's (runtime_package and max_bundle_bytes were missing)."""
    from onnx_cooker.settings.table import PLATFORM_ONLY_KEYS

    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    paragraph = re.search(r"`<stem>\.cook\.yaml`: settings for this model:(.*?), plus", text, re.S)
    assert paragraph is not None
    named = set(re.findall(r"`(\w+)`", paragraph.group(1).split(";")[0]))
    assert named == set(PLATFORM_ONLY_KEYS)
