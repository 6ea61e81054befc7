"""Checking what one settings file, or the COOK_SET_* environment, gives against the settings table.

Every problem names the file (or environment variable), the key, what was expected and what was
found; unknown keys and platform names get a "did you mean". Imported while doit loads tasks:
standard library and yaml only.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from onnx_cooker.settings.checks import describe
from onnx_cooker.settings.eprules import check_ep_option_names
from onnx_cooker.settings.table import COOK_KEYS, DEFAULTS, PLATFORM_ONLY_KEYS, check_value
from onnx_cooker.settings.yamlstrict import line_of, line_of_problem, parse_yaml

ENV_PREFIX = "COOK_SET_"
# Problems reported per file: enough to fix a real file in one go; a garbage file gets a short answer.
MAX_PROBLEMS_PER_FILE = 20
MODEL_ONLY_KEYS = frozenset({"skip_platforms", "platforms"})
MODEL_KEYS = COOK_KEYS | MODEL_ONLY_KEYS


def at_most(problems: list[str], source: str) -> list[str]:
    """The first MAX_PROBLEMS_PER_FILE problems of one file, and a line saying how many more."""
    if len(problems) <= MAX_PROBLEMS_PER_FILE:
        return problems
    more = len(problems) - MAX_PROBLEMS_PER_FILE
    return [*problems[:MAX_PROBLEMS_PER_FILE], f"{source}: ... and {more:,} more problems in this file"]


def check_settings(
    data: Any,
    source: str,
    allowed: Collection[str],
    prefix: str = "",
) -> tuple[dict[str, Any], list[str]]:
    """Check a mapping of settings: the valid values (normalized) and a problem per invalid key.

    Keys in allowed that are not settings (skip_platforms, platforms) are passed through for the caller.
    """
    if not isinstance(data, dict):
        what = f"{prefix.rstrip('.')!r}" if prefix else "the top level"
        return {}, [f"{source}: {what} must be a mapping of settings (key: value); got {describe(data)}"]
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        if not isinstance(key, str) or key not in allowed:
            problems.append(f"{source}: {_unknown_key(key, prefix, allowed)}{line_of(data, key)}")
        elif key not in DEFAULTS:
            values[key] = value
        else:
            checked, found = check_value(key, value, prefix + key)
            problems += [f"{source}: {problem}{line_of_problem(data, key, problem)}" for problem in found]
            if not found:
                values[key] = checked
    return values, problems


def _unknown_key(key: Any, prefix: str, allowed: Collection[str]) -> str:
    name = f"{prefix}{key}"
    if key in PLATFORM_ONLY_KEYS:
        return f"key {name!r} can only be set in a platform file (platforms/*.yaml), not per model"
    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known settings: {', '.join(sorted(allowed))}"
    return f"key {name!r} is not a known setting; {hint}"


def check_model(data: Any, source: str, platform_names: Collection[str]) -> tuple[dict[str, Any], list[str]]:
    """Check a model's .cook.yaml: its settings, skip_platforms and its per-platform sections."""
    values, problems = check_settings(data, source, MODEL_KEYS)
    problems += check_ep_option_names(values, source)
    if "skip_platforms" in values:
        skipped = values["skip_platforms"]
        if not isinstance(skipped, list) or not all(isinstance(name, str) for name in skipped):
            problems.append(
                f"{source}: 'skip_platforms' must be a list of platform names; got {describe(skipped)}"
            )
            del values["skip_platforms"]
        else:
            problems += [
                f"{source}: 'skip_platforms' names {_unknown_platform(name, platform_names)}"
                for name in skipped
                if name not in platform_names
            ]
    if "platforms" in values:
        values["platforms"], found = _check_platform_sections(values["platforms"], source, platform_names)
        problems += found
    return values, problems


def _check_platform_sections(
    sections: Any,
    source: str,
    platform_names: Collection[str],
) -> tuple[dict[str, Any], list[str]]:
    if not isinstance(sections, dict):
        return {}, [
            f"{source}: 'platforms' must be a mapping of platform name -> settings; got {describe(sections)}"
        ]
    checked: dict[str, Any] = {}
    problems: list[str] = []
    for name, section in sections.items():
        if name not in platform_names:
            problems.append(
                f"{source}: 'platforms' has a section for {_unknown_platform(name, platform_names)}"
                + line_of(sections, name)
            )
            continue
        prefix = f"platforms.{name}."
        checked[name], found = check_settings(section, source, COOK_KEYS, prefix)
        problems += found + check_ep_option_names(checked[name], source, prefix)
    return checked, problems


def _unknown_platform(name: Any, platform_names: Collection[str]) -> str:
    close = difflib.get_close_matches(str(name), platform_names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known platforms: {', '.join(sorted(platform_names))}"
    return f"{name!r}, which is not a platform; {hint}"


def env_settings(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """COOK_SET_<KEY> overrides: the values, the variable that set each key, and the problems."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    problems: list[str] = []
    for variable in sorted(env):
        if not variable.startswith(ENV_PREFIX):
            continue
        key = variable[len(ENV_PREFIX) :].lower()
        source = f"environment variable {variable}"
        if key not in DEFAULTS:
            close = difflib.get_close_matches(key, DEFAULTS, n=1)
            hint = f"; did you mean {ENV_PREFIX}{close[0].upper()}?" if close else ""
            problems.append(f"{source}: {key!r} is not a known setting{hint}")
            continue
        data, found = parse_yaml(env[variable], source)
        if not found:
            data, found = check_value(key, data, key)
            found = [f"{source}: {problem}" for problem in found]
        if found:
            problems += found
        else:
            values[key], origins[key] = data, source
    return values, origins, problems
