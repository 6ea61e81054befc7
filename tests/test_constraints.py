"""constraints.txt pins every dependency the cook key depends on (docs/cooking.md, "Reproducible
keys"): every runtime dependency of pyproject.toml, each with ``==`` and inside pyproject's own range."""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pins[requirement.name.lower().replace("_", "-")] = spec.version
    return pins


def test_every_dependency_is_pinned_within_its_range() -> None:
    pins = _pins()
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    environment = default_environment() | {"sys_platform": "linux"}
    checked = 0
    for text in dependencies:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue  # e.g. onnxruntime-directml: Windows only
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"constraints.txt does not pin {name}"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {text!r}"
        checked += 1
    assert checked >= 9
    assert {"onnx", "onnxruntime"} <= set(pins)  # the tools the cook key names
