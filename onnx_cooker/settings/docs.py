"""Documents generated from the settings table: the settings reference's table (``docs/settings.md``)
and the JSON Schema that editors use to complete and check ``platforms/*.yaml``
(``docs/settings.schema.json``).

    python -m onnx_cooker.settings.docs --schema          # print the JSON Schema
    python -m onnx_cooker.settings.docs --settings-table  # print docs/settings.md's settings table
    python -m onnx_cooker.settings.docs --write           # rewrite both (docs/settings.md: its table only)

tests/test_settings_schema.py keeps the committed files equal to what this module generates.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from onnx_cooker.settings.table import AS_ABOVE, SETTINGS, Setting

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "docs" / "settings.schema.json"
SETTINGS_DOC_PATH = ROOT / "docs" / "settings.md"
SCHEMA_LINE = "# yaml-language-server: $schema=../docs/settings.schema.json"
SETTINGS_TABLE_HEADER = ("| key | default | meaning |", "|---|---|---|")
# The settings table of docs/settings.md: its header and every table line after it.
SETTINGS_TABLE = re.compile(re.escape(SETTINGS_TABLE_HEADER[0]) + r"\n(?:\|.*\n)*")
_YAML_INDICATORS = tuple("-?:,[]{}#&*!|>'\"%@`")


def rows() -> list[tuple[list[Setting], str]]:
    """The settings grouped as docs/settings.md shows them (AS_ABOVE joins the row before), each with its
    doc."""
    grouped: list[tuple[list[Setting], str]] = []
    for setting in SETTINGS:
        if setting.doc == AS_ABOVE:
            grouped[-1][0].append(setting)
        else:
            scope = " (platform files only)" if setting.scope == "platform" else ""
            grouped.append(([setting], setting.doc + scope))
    return grouped


def yaml_text(value: Any) -> str:
    """A default as one would write it in a platform file (flow style)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value if _is_plain(value) else json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(yaml_text(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {yaml_text(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"no YAML text for {value!r}")


def _float_text(value: float) -> str:
    if value == 0 or abs(value) >= 1e-3:
        return repr(value)
    mantissa, exponent = f"{value:e}".split("e")
    mantissa = mantissa.rstrip("0")
    return f"{mantissa}0e{int(exponent)}" if mantissa.endswith(".") else f"{mantissa}e{int(exponent)}"


def _is_plain(text: str) -> bool:
    if not text or text.startswith(_YAML_INDICATORS) or text != text.strip():
        return False
    try:
        return yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


def settings_table() -> str:
    """docs/settings.md's settings table, one row per setting or group of settings that share a doc."""
    lines = list(SETTINGS_TABLE_HEADER)
    for settings, doc in rows():
        keys = ", ".join(f"`{setting.name}`" for setting in settings)
        defaults = ", ".join(f"`{yaml_text(setting.default)}`" for setting in settings)
        lines.append(f"| {keys} | {defaults} | {doc} |")
    return "\n".join(lines) + "\n"


def schema() -> dict[str, Any]:
    """JSON Schema (draft-07, as yaml-language-server reads it) of a platform file."""
    properties = {setting.name: _property(setting, doc) for settings, doc in rows() for setting in settings}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "onnx-cooker platform file (platforms/<name>.yaml)",
        "description": "Generated from onnx_cooker/settings/table.py by `python -m onnx_cooker.settings.docs "
        "--write`; do not edit. The cooker's own checks are the authority: they also check rules "
        "between settings and name the fix.",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }


def _property(setting: Setting, doc: str) -> dict[str, Any]:
    found: dict[str, Any] = {"description": doc, "default": setting.default, **setting.kind.schema}
    if setting.choices:
        found["enum"] = list(setting.choices)
    if setting.low is not None:
        found["minimum"] = setting.low
    if setting.high is not None:
        found["maximum"] = setting.high
    return {**found, **setting.schema}


def schema_text() -> str:
    return json.dumps(schema(), indent=2) + "\n"


def doc_with_table(doc: str) -> str:
    """doc (docs/settings.md's text) with its settings table replaced by the generated one."""
    if len(SETTINGS_TABLE.findall(doc)) != 1:
        raise ValueError(
            f"{SETTINGS_DOC_PATH.name} must hold exactly one table starting {SETTINGS_TABLE_HEADER[0]!r}"
        )
    return SETTINGS_TABLE.sub(lambda _: settings_table(), doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onnx_cooker.settings.docs",
        description="Generate docs/settings.md's settings table and docs/settings.schema.json from "
        "onnx_cooker/settings/table.py.",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--schema", action="store_true", help="print docs/settings.schema.json")
    what.add_argument("--settings-table", action="store_true", help="print docs/settings.md's settings table")
    what.add_argument("--write", action="store_true", help="rewrite the schema and docs/settings.md's table")
    args = parser.parse_args(argv)
    if args.schema:
        sys.stdout.write(schema_text())
    elif args.settings_table:
        sys.stdout.write(settings_table())
    else:
        SCHEMA_PATH.write_text(schema_text(), encoding="utf-8")
        doc = SETTINGS_DOC_PATH.read_text(encoding="utf-8")
        SETTINGS_DOC_PATH.write_text(doc_with_table(doc), encoding="utf-8")
        sys.stdout.write(f"wrote {SCHEMA_PATH} and the settings table of {SETTINGS_DOC_PATH}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
