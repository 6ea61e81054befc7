"""Platform profiles and per-model settings: read, validate and resolve them into ``CookSettings``.

The cascade: built-in defaults -> platform file -> per-model settings -> COOK_SET_* environment.
What each setting is (its kind, default, checks and doc) is a row of ``onnx_cooker/settings/table.py``;
``CookSettings`` and ``Platform`` get their setting fields from it. Files are read strictly
(``yamlstrict``), checked against the table (``settingfiles``), execution-provider rules live in
``eprules``. All problems are collected before one ``ProfileError`` is raised.

Imported by ``dodo.py`` while doit loads tasks: standard library and yaml only.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import field, make_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from onnx_cooker.errors import ProfileError
from onnx_cooker.runtime.constants import ModelFormat, OptimizationStyle
from onnx_cooker.settings import advice
from onnx_cooker.settings.eprules import check_ep_option_names, ep_domains, ep_formats, ep_usability_check
from onnx_cooker.settings.files import (
    ENV_PREFIX,
    MODEL_ONLY_KEYS,
    at_most,
    check_model,
    check_settings,
    env_settings,
)
from onnx_cooker.settings.table import COOK_KEYS, COOK_SETTINGS, DEFAULTS, PLATFORM_SETTINGS, frozen_values
from onnx_cooker.settings.yamlstrict import read_yaml

__all__ = [
    "CookSettings",
    "Platform",
    "ProfileError",
    "ep_domains",
    "ep_usability_check",
    "is_skipped",
    "onnx_instead",
    "load_model_settings",
    "load_platforms",
    "resolve",
]

PLATFORM_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
DEFAULTS_SOURCE = "the defaults (docs/settings.md)"


def _frozen_class(name: str, doc: str, fields: list[tuple[Any, ...]], **methods: Callable[..., Any]) -> type:
    """A frozen, keyword-only dataclass of this module (so that pickle finds it)."""
    namespace = {"__doc__": doc, "__module__": __name__, **methods}
    return make_dataclass(name, fields, namespace=namespace, frozen=True, kw_only=True)


def _to_dict(self: Any) -> dict[str, Any]:
    """Plain JSON-able form (mappings as dicts, tuples as lists) for the manifest and the cook key."""
    values = {setting.name: setting.kind.thaw(getattr(self, setting.name)) for setting in COOK_SETTINGS}
    return {"platform": self.platform, **values}


def _key(self: Any) -> str:
    """sha256 hex of the canonical JSON of to_dict(), the form ``cookkey.task_key`` hashes."""
    text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _selects(self: Any, model_name: str) -> bool:
    """Whether this platform cooks model_name: it matches an include glob and no exclude glob."""
    return _matches_any(model_name, self.include) and not _matches_any(model_name, self.exclude)


# Fields: platform, then every "model"-scope row of the settings table, in its order.
CookSettings = _frozen_class(
    "CookSettings",
    "Everything about one (platform, model) pair that shapes its cooked bundle; hashable and printable.",
    [("platform", str), *((setting.name, setting.kind.frozen) for setting in COOK_SETTINGS)],
    to_dict=_to_dict,
    key=_key,
)
# Fields: name (the file stem, e.g. "windows-dml"), path, every "platform"-scope row of the settings
# table, settings: the cook settings (defaults merged with the file), read-only, and origins: where
# each setting came from (the file, a COOK_SET_ variable, or the defaults: for messages).
Platform = _frozen_class(
    "Platform",
    "One target platform file: which models it cooks and its validated settings.",
    [
        ("name", str),
        ("path", Path),
        *((setting.name, setting.kind.frozen) for setting in PLATFORM_SETTINGS),
        ("settings", Mapping[str, Any], field(hash=False)),
        ("origins", Mapping[str, str], field(hash=False, compare=False)),
    ],
    selects=_selects,
)


def load_platforms(platforms_dir: Path, env: Mapping[str, str]) -> tuple[Platform, ...]:
    """Read and validate every platforms_dir/*.yaml (sorted by name) and the COOK_SET_* variables in env.

    Raises one ProfileError listing every problem in every file. include/exclude/description take the
    environment into account here, since per-model files cannot set them.
    """
    if not platforms_dir.is_dir():
        raise ProfileError(
            f"{platforms_dir}: platform folder not found; create it with one <platform>.yaml per target"
        )
    paths, problems = _platform_files(platforms_dir)
    if not paths:
        problems.append(
            f"{platforms_dir}: no platform files (*.yaml) found; add one per target, e.g. android.yaml"
        )
    env_values, env_origins, env_problems = env_settings(env)
    problems += env_problems
    platforms = []
    for path in paths:
        platform, found = _load_platform(path, env_values, env_origins)
        problems += found
        if platform is not None:
            platforms.append(platform)
    if problems:
        raise ProfileError(problems)
    return tuple(platforms)


def _platform_files(platforms_dir: Path) -> tuple[list[Path], list[str]]:
    """The folder's ``*.yaml`` files, and a problem for each that looks meant as one but would be
    ignored: ``.yml``, ``.YAML`` (a platform that never ships, in a green build), or a ``.yaml`` in
    a subfolder. Hidden files (an editor's ``.#android.yaml`` lock, macOS's ``._android.yaml``) are
    not platforms."""
    paths, problems = [], []
    for path in sorted(platforms_dir.iterdir()):
        if path.name.startswith("."):
            continue
        if path.is_dir():
            nested = sorted(p for p in path.rglob("*") if p.suffix.lower() in (".yaml", ".yml"))
            problems += [
                f"{p}: platform files are read from {platforms_dir} only, not its subfolders; move it "
                f"there (or out of {platforms_dir})"
                for p in nested
                if not any(part.startswith(".") for part in p.relative_to(platforms_dir).parts)
            ]
        elif path.suffix == ".yaml":
            paths.append(path)
        elif path.suffix.lower() in (".yaml", ".yml"):
            target = path.with_suffix(".yaml")
            clash = f" ({target.name} exists: merge the two)" if target.exists() else ""
            problems.append(f"{path}: platform files must end in .yaml; rename it to {target.name}{clash}")
    return paths, problems


def load_model_settings(path: Path | None, platform_names: Collection[str]) -> dict[str, Any]:
    """Read and validate a model's own settings file; {} when the model has none (path is None).

    The result holds only what the file sets, normalized (e.g. 1 -> 1.0 for float settings), ready for
    resolve() and is_skipped().
    """
    if path is None:
        return {}
    data, problems = read_yaml(path)
    values: dict[str, Any] = {}
    if not problems:
        values, problems = check_model(data, str(path), platform_names)
    if problems:
        raise ProfileError(at_most(problems, str(path)))
    return values


def resolve(
    platform: Platform,
    model_settings: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    model_source: str = "per-model settings",
) -> CookSettings:
    """Resolve the settings one model is cooked with on one platform.

    Cascade, in this order: built-in defaults -> platform file -> per-model settings (top level, then its
    `platforms.<name>` section) -> environment (COOK_SET_<KEY>). A later layer replaces a key's whole
    value; mappings such as provider_options are not merged key by key. model_settings is what
    load_model_settings() returned; model_source names its file in problem messages.
    """
    values = dict(platform.settings)
    origins = {key: platform.origins.get(key, DEFAULTS_SOURCE) for key in values}
    section = model_settings.get("platforms", {}).get(platform.name, {})
    layers = [
        (model_source, {k: v for k, v in model_settings.items() if k not in MODEL_ONLY_KEYS}),
        (f"{model_source} (platforms.{platform.name})", section),
    ]
    for source, layer in layers:
        values.update(layer)
        origins.update(dict.fromkeys(layer, source))
    env_values, env_origins, problems = env_settings(env)
    env_values = {key: value for key, value in env_values.items() if key in COOK_KEYS}
    values.update(env_values)
    origins.update({key: env_origins[key] for key in env_values})
    problems += _check_combination(values, origins)
    if problems:
        raise ProfileError(problems)
    return CookSettings(platform=platform.name, **frozen_values(COOK_SETTINGS, values))


def onnx_instead(settings: Any, cook_yaml: str = "the model's .cook.yaml") -> str:
    """``advice.onnx_instead`` for resolved settings."""
    return advice.onnx_instead(
        settings.platform,
        reduced_build=settings.reduced_build,
        runtime_style=settings.optimization_style == OptimizationStyle.RUNTIME,
        cook_yaml=cook_yaml,
    )


def is_skipped(model_settings: Mapping[str, Any], platform_name: str) -> bool:
    """Whether the model's own settings opt it out of platform_name (skip_platforms)."""
    return platform_name in model_settings.get("skip_platforms", ())


def _matches_any(name: str, globs: Sequence[str]) -> bool:
    # fnmatchcase: the same answer on every build machine (fnmatch folds case on Windows only).
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    return value


def _load_platform(
    path: Path, env_values: Mapping[str, Any], env_origins: Mapping[str, str]
) -> tuple[Platform | None, list[str]]:
    source = str(path)
    problems = []
    if not PLATFORM_NAME.fullmatch(path.stem):
        problems.append(
            f"{source}: platform name {path.stem!r} (the file name) must match "
            f"{PLATFORM_NAME.pattern}, e.g. 'windows-dml'; rename the file"
        )
    data, found = read_yaml(path)
    if found:  # not YAML, or not readable: nothing more to say about it
        return None, problems + at_most(found, source)
    values, found = check_settings(data, source, DEFAULTS.keys())
    problems += found
    # The rules between settings too, on the values that passed, so that one bad key does not hide
    # the file's other problems until the next run (a file took three rounds to fix)
    merged = {**DEFAULTS, **values}
    origins = {key: source if key in values else DEFAULTS_SOURCE for key in merged}
    problems += check_ep_option_names(merged, source) + _check_combination(merged, origins)
    problems = at_most(problems, source)
    selection = {**merged, **env_values}
    if not selection["runtime_check"] and not selection["runtime_check_off_reason"].strip():
        problems.append(
            f"{source}: 'runtime_check' is false (here or from {ENV_PREFIX}RUNTIME_CHECK) without "
            "'runtime_check_off_reason'; say why this platform skips the check in its exact onnxruntime "
            "version (e.g. no wheel exists for it)"
        )
    if problems:
        return None, problems
    # the selection's variables (include, exclude, ...); resolve() applies the cook settings' own
    origins |= {key: env_origins[key] for key in env_values if key not in COOK_KEYS}
    return Platform(
        name=path.stem,
        path=path,
        **frozen_values(PLATFORM_SETTINGS, selection),
        settings=_freeze({key: value for key, value in merged.items() if key in COOK_KEYS}),
        origins=MappingProxyType(
            {key: origin for key, origin in origins.items() if origin != DEFAULTS_SOURCE}
        ),
    ), []


def _check_combination(values: Mapping[str, Any], origins: Mapping[str, str]) -> list[str]:
    """Rules between settings, checked on the merged values; each problem names where both came from."""
    problems = []
    if values["optimization_style"] == OptimizationStyle.RUNTIME and values["format"] != ModelFormat.ORT:
        problems.append(
            f"{origins['optimization_style']}: 'optimization_style' runtime requires 'format' ort (saved "
            f"runtime optimizations exist only in ORT format); got format {values['format']!r} from "
            f"{origins['format']}"
        )
    if values["reduced_build"] and values["format"] != ModelFormat.ORT:
        problems.append(
            f"{origins['reduced_build']}: 'reduced_build' requires 'format' ort (reduced onnxruntime builds "
            f"load only ORT-format models); got format {values['format']!r} from {origins['format']}"
        )
    if values["weights"] == "external" and values["format"] == ModelFormat.ORT:
        problems.append(
            f"{origins['weights']}: 'weights' external requires 'format' onnx (an ORT-format model cannot "
            f"refer to weights outside it when loaded from memory); got format {values['format']!r} from "
            f"{origins['format']}: set `format: onnx` for this model or use `weights: auto`"
        )
    preferred = values["execution_providers"][0]
    reason, formats = ep_formats(preferred)
    if values["format"] not in formats:
        problems.append(
            f"{origins['format']}: 'format' {values['format']!r} does not run correctly on {preferred}, the "
            f"preferred EP (from {origins['execution_providers']}): {reason}; set `format: {formats[0]}`"
        )
    if values["type_reduction"] and not values["reduced_build"]:
        problems.append(
            f"{origins['type_reduction']}: 'type_reduction' needs 'reduced_build' true; got false from "
            f"{origins['reduced_build']}: set `reduced_build: true`, or remove `type_reduction`"
        )
    return problems
