"""Platform profiles and per-model settings: read, validate and resolve them into ``CookSettings``.

``pipeline/defaults.yaml`` holds the built-in value of every setting and is the list of allowed keys;
a value's expected type is the type of its default, refined by the small tables below. Every problem
names the file (or environment variable), the key, what was expected and what was found, and all
problems are collected before one ``ProfileError`` is raised.

Imported by ``dodo.py`` while doit loads tasks: standard library and yaml only.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from .errors import ProfileError
from .runtime.compat import OLDEST_SUPPORTED
from .runtime.constants import (
    ALLOWED_CONFIG_PREFIXES,
    OPTIMIZATION_LEVELS,
    UNSAFE_CONFIG_ENTRIES,
    Arch,
    ModelFormat,
    OptimizationStyle,
)

DEFAULTS_PATH = Path(__file__).with_name("defaults.yaml")
MAX_SETTINGS_FILE_BYTES = 1024 * 1024
ENV_PREFIX = "COOK_SET_"
# Problems reported per file: enough to fix a real file in one go; a garbage file gets a short answer.
MAX_PROBLEMS_PER_FILE = 20
# Largest dimension size a profile may give (verify_dims, fixed_dims, fixed_shapes): int32, as the
# mobile EPs take; ONNX dims are int64, and protobuf refuses anything larger.
MAX_DIM_SIZE = 2**31 - 1
PLATFORM_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")

Scalar = str | int | float | bool
Options = tuple[tuple[str, tuple[tuple[str, Scalar], ...]], ...]

_CHOICES: dict[str, tuple[str, ...]] = {
    "format": tuple(f.value for f in ModelFormat),
    "optimization_level": OPTIMIZATION_LEVELS[1:],  # "disable" would ship an unoptimized model
    "optimization_style": tuple(s.value for s in OptimizationStyle),
    "arch": tuple(a.value for a in Arch),
    "weights": ("auto", "inline", "external"),
}
_RANGES: dict[str, tuple[float, float | None]] = {
    "compression_level": (1, 22),  # zstd's levels
    "max_growth": (1, None),
    "max_growth_bytes": (0, None),
    "rtol": (0, None),
    "atol": (0, None),
}
_RUNTIME_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")
# Per-EP session options a profile may set; any other name must be an onnxruntime config entry,
# which always contains a dot (e.g. "session.intra_op.allow_spinning") and takes a string.
_SESSION_OPTIONS: dict[str, type | tuple[str, ...]] = {
    "enable_mem_pattern": bool,
    "execution_mode": ("sequential", "parallel"),
    "graph_optimization_level": OPTIMIZATION_LEVELS,
}
_PLATFORM_ONLY_KEYS = frozenset(
    {"include", "exclude", "description", "runtime_check", "runtime_check_off_reason", "allow_empty"}
)
_MODEL_ONLY_KEYS = frozenset({"skip_platforms", "platforms"})
_UNKNOWN_EP_RULE: Mapping[str, Any] = {"session_options": {}, "domains": [""]}
_TYPE_NAMES = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a mapping",
}


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (plain PyYAML keeps the last one),
    and anchors/aliases: settings never need them, and nested aliases ("billion laughs") expand
    exponentially once the values are walked."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not allowed in settings files; write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in first_lines:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given at line {first_lines[key] + 1}); give each key once",
                    key_node.start_mark,
                )
            first_lines[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _load_defaults() -> tuple[dict[str, Any], dict[str, Mapping[str, Any]]]:
    data = yaml.load(DEFAULTS_PATH.read_text(encoding="utf-8"), Loader=_StrictLoader)
    settings = {key: value for key, value in data.items() if not key.startswith("_")}
    return settings, data["_execution_providers"]


_DEFAULTS, _EP_RULES = _load_defaults()
_DEFAULTS_SOURCE = f"built-in defaults ({DEFAULTS_PATH.name})"
_COOK_KEYS = frozenset(_DEFAULTS) - _PLATFORM_ONLY_KEYS
_MODEL_KEYS = _COOK_KEYS | _MODEL_ONLY_KEYS


@dataclass(frozen=True, kw_only=True)
class CookSettings:
    """Everything about one (platform, model) pair that shapes its cooked bundle; hashable and printable."""

    platform: str
    format: str
    optimization_level: str
    optimization_style: str
    allow_nchwc: bool  # already False unless arch is x86_64
    arch: str
    runtime_version: str
    execution_providers: tuple[str, ...]  # in order of preference
    provider_options: Options  # only for listed EPs, sorted by EP name then option
    ep_session_options: Options  # every listed EP: built-in rules under the user's options, sorted
    compression_level: int
    rtol: float
    atol: float
    verify: bool
    verify_dims: tuple[tuple[str, int], ...]  # sorted by dim name
    fixed_dims: tuple[tuple[str, int], ...]  # sorted by dim name
    fixed_shapes: tuple[tuple[str, tuple[int, ...]], ...]  # sorted by input name
    reduced_build: bool
    type_reduction: bool
    weights: str  # auto | inline | external: where an ONNX model's big initializers go in the blob
    max_growth: float  # cooked / source size that, with max_growth_bytes more, counts as inflated
    max_growth_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (mappings as dicts, tuples as lists) for the manifest and the cook key."""
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["execution_providers"] = list(self.execution_providers)
        data["provider_options"] = {ep: dict(options) for ep, options in self.provider_options}
        data["ep_session_options"] = {ep: dict(options) for ep, options in self.ep_session_options}
        data["verify_dims"] = dict(self.verify_dims)
        data["fixed_dims"] = dict(self.fixed_dims)
        data["fixed_shapes"] = {name: list(shape) for name, shape in self.fixed_shapes}
        return data

    def key(self) -> str:
        """sha256 hex of the canonical JSON of to_dict(), the form ``cookkey.task_key`` hashes."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Platform:
    """One target platform file: which models it cooks and its validated settings."""

    name: str  # file stem, e.g. "windows-dml"
    path: Path
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    description: str
    runtime_check: bool  # verify the blobs in an environment with exactly runtime_version installed
    runtime_check_off_reason: str
    allow_empty: bool = False  # an empty bundle is intended, not a wrong assets folder
    # Cook settings (all keys but include/exclude/description): defaults merged with the file, read-only.
    settings: Mapping[str, Any] = field(hash=False)

    def selects(self, model_name: str) -> bool:
        """Whether this platform cooks model_name: it matches an include glob and no exclude glob."""
        return _matches_any(model_name, self.include) and not _matches_any(model_name, self.exclude)


def load_platforms(platforms_dir: Path, env: Mapping[str, str]) -> tuple[Platform, ...]:
    """Read and validate every platforms_dir/*.yaml (sorted by name) and the COOK_SET_* variables in env.

    Raises one ProfileError listing every problem in every file. include/exclude/description take the
    environment into account here, since per-model files cannot set them.
    """
    if not platforms_dir.is_dir():
        raise ProfileError(
            f"{platforms_dir}: platform folder not found; create it with one <platform>.yaml per target"
        )
    paths = sorted(platforms_dir.glob("*.yaml"))
    problems = [
        f"{path}: platform files must end in .yaml; rename it to {path.stem}.yaml"
        for path in sorted(platforms_dir.glob("*.yml"))
    ]
    if not paths:
        problems.append(
            f"{platforms_dir}: no platform files (*.yaml) found; add one per target, e.g. android.yaml"
        )
    env_values, _, env_problems = _env_settings(env)
    problems += env_problems
    platforms = []
    for path in paths:
        platform, found = _load_platform(path, env_values)
        problems += found
        if platform is not None:
            platforms.append(platform)
    if problems:
        raise ProfileError(problems)
    return tuple(platforms)


def load_model_settings(path: Path | None, platform_names: Collection[str]) -> dict[str, Any]:
    """Read and validate a model's own settings file; {} when the model has none (path is None).

    The result holds only what the file sets, normalized (e.g. 1 -> 1.0 for float settings), ready for
    resolve() and is_skipped().
    """
    if path is None:
        return {}
    data, problems = _read_yaml(path)
    values: dict[str, Any] = {}
    if not problems:
        values, problems = _check_model(data, str(path), platform_names)
    if problems:
        raise ProfileError(_at_most(problems, str(path)))
    return values


def _at_most(problems: list[str], source: str) -> list[str]:
    if len(problems) <= MAX_PROBLEMS_PER_FILE:
        return problems
    more = len(problems) - MAX_PROBLEMS_PER_FILE
    return [*problems[:MAX_PROBLEMS_PER_FILE], f"{source}: ... and {more:,} more problems in this file"]


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
    origins = {
        key: str(platform.path) if value != _freeze(_DEFAULTS[key]) else _DEFAULTS_SOURCE
        for key, value in values.items()
    }
    section = model_settings.get("platforms", {}).get(platform.name, {})
    layers = [
        (model_source, {k: v for k, v in model_settings.items() if k not in _MODEL_ONLY_KEYS}),
        (f"{model_source} (platforms.{platform.name})", section),
    ]
    for source, layer in layers:
        values.update(layer)
        origins.update(dict.fromkeys(layer, source))
    env_values, env_origins, problems = _env_settings(env)
    env_values = {key: value for key, value in env_values.items() if key in _COOK_KEYS}
    values.update(env_values)
    origins.update({key: env_origins[key] for key in env_values})
    problems += _check_combination(values, origins)
    if problems:
        raise ProfileError(problems)
    return _cook_settings(platform.name, values)


def is_skipped(model_settings: Mapping[str, Any], platform_name: str) -> bool:
    """Whether the model's own settings opt it out of platform_name (skip_platforms)."""
    return platform_name in model_settings.get("skip_platforms", ())


def ep_domains(execution_provider: str) -> tuple[str, ...]:
    """Operator domains an EP can run ("" is the default ONNX domain); EPs without a rule get ("",)."""
    return tuple(_ep_rule(execution_provider)["domains"])


def ep_usability_check(execution_provider: str) -> str | None:
    """The mobile usability check that applies to an EP ("nnapi", "coreml"), if any."""
    return _ep_rule(execution_provider).get("usability")


def _ep_rule(execution_provider: str) -> Mapping[str, Any]:
    return _EP_RULES.get(execution_provider, _UNKNOWN_EP_RULE)


def _matches_any(name: str, globs: Sequence[str]) -> bool:
    # fnmatchcase: the same answer on every build machine (fnmatch folds case on Windows only).
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def _cook_settings(platform_name: str, values: Mapping[str, Any]) -> CookSettings:
    providers = tuple(values["execution_providers"])
    user_session_options = values["ep_session_options"]
    session_options = {
        ep: {**_ep_rule(ep)["session_options"], **user_session_options.get(ep, {})} for ep in providers
    }
    return CookSettings(
        platform=platform_name,
        format=values["format"],
        optimization_level=values["optimization_level"],
        optimization_style=values["optimization_style"],
        # NCHWc ops depend on the build machine's x86 vector width; never ship them to another CPU
        # (DESIGN trap 2, as onnxruntime's own converter does).
        allow_nchwc=values["allow_nchwc"] and values["arch"] == Arch.X86_64,
        arch=values["arch"],
        runtime_version=values["runtime_version"],
        execution_providers=providers,
        provider_options=_freeze_options(
            {ep: options for ep, options in values["provider_options"].items() if ep in providers}
        ),
        ep_session_options=_freeze_options(session_options),
        compression_level=values["compression_level"],
        rtol=float(values["rtol"]),
        atol=float(values["atol"]),
        verify=values["verify"],
        verify_dims=tuple(sorted(values["verify_dims"].items())),
        fixed_dims=tuple(sorted(values["fixed_dims"].items())),
        fixed_shapes=tuple(sorted((name, tuple(shape)) for name, shape in values["fixed_shapes"].items())),
        reduced_build=values["reduced_build"],
        type_reduction=values["type_reduction"],
        weights=values["weights"],
        max_growth=float(values["max_growth"]),
        max_growth_bytes=values["max_growth_bytes"],
    )


def _freeze_options(options: Mapping[str, Mapping[str, Scalar]]) -> Options:
    return tuple(sorted((ep, tuple(sorted(entries.items()))) for ep, entries in options.items()))


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    return value


# --- reading files --------------------------------------------------------------------------------


def _load_platform(path: Path, env_values: Mapping[str, Any]) -> tuple[Platform | None, list[str]]:
    source = str(path)
    problems = []
    if not PLATFORM_NAME.fullmatch(path.stem):
        problems.append(
            f"{source}: platform name {path.stem!r} (the file name) must match "
            f"{PLATFORM_NAME.pattern}, e.g. 'windows-dml'; rename the file"
        )
    data, found = _read_yaml(path)
    if not found:
        values, found = _check_settings(data, source, _DEFAULTS.keys())
    problems += _at_most(found, source)
    if problems:
        return None, problems
    merged = {**_DEFAULTS, **values}
    origins = {key: source if key in values else _DEFAULTS_SOURCE for key in merged}
    problems = _check_ep_option_names(merged, source) + _check_combination(merged, origins)
    selection = {**merged, **env_values}
    if not selection["runtime_check"] and not selection["runtime_check_off_reason"].strip():
        problems.append(
            f"{source}: 'runtime_check' is false (here or from {ENV_PREFIX}RUNTIME_CHECK) without "
            "'runtime_check_off_reason'; say why this platform skips the check in its exact onnxruntime "
            "version (e.g. no wheel exists for it)"
        )
    if problems:
        return None, problems
    return Platform(
        name=path.stem,
        path=path,
        include=tuple(selection["include"]),
        exclude=tuple(selection["exclude"]),
        description=selection["description"],
        runtime_check=selection["runtime_check"],
        runtime_check_off_reason=selection["runtime_check_off_reason"],
        allow_empty=selection["allow_empty"],
        settings=_freeze({key: value for key, value in merged.items() if key in _COOK_KEYS}),
    ), []


def _read_yaml(path: Path) -> tuple[Any, list[str]]:
    """Parse one settings file strictly; an empty file (or only comments) is an empty mapping."""
    source = str(path)
    try:
        with path.open("rb") as stream:
            # Read at most one byte past the limit: a huge file is refused without being read or parsed.
            raw = stream.read(MAX_SETTINGS_FILE_BYTES + 1)
    except OSError as exc:
        return None, [f"{source}: cannot read the file: {exc.strerror or exc}"]
    if len(raw) > MAX_SETTINGS_FILE_BYTES:
        return None, [
            f"{source}: file is larger than the 1 MiB limit for settings files; refusing to "
            "read it (is this really a settings file?)"
        ]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [
            f"{source}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ]
    data, problems = _parse_yaml(text, source)
    return ({} if data is None and not problems else data), problems


def _parse_yaml(text: str, source: str) -> tuple[Any, list[str]]:
    try:
        return yaml.load(text, Loader=_StrictLoader), []
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        context = ""
        if exc.context:
            started = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
            context = f" ({exc.context}{started})"
        return None, [f"{source}: invalid YAML{where}: {exc.problem}{context}"]
    except yaml.YAMLError as exc:
        return None, [f"{source}: invalid YAML: {exc}"]
    except RecursionError:
        return None, [f"{source}: invalid YAML: nested too deeply"]
    except ValueError as exc:  # from PyYAML's constructors: a 5000-digit integer, a date like 2024-13-45
        return None, [f"{source}: invalid YAML: a value cannot be read ({exc})"]


def _env_settings(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """COOK_SET_<KEY> overrides: the values, the variable that set each key, and the problems."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    problems: list[str] = []
    for variable in sorted(env):
        if not variable.startswith(ENV_PREFIX):
            continue
        key = variable[len(ENV_PREFIX) :].lower()
        source = f"environment variable {variable}"
        if key not in _DEFAULTS:
            close = difflib.get_close_matches(key, _DEFAULTS, n=1)
            hint = f"; did you mean {ENV_PREFIX}{close[0].upper()}?" if close else ""
            problems.append(f"{source}: {key!r} is not a known setting{hint}")
            continue
        data, found = _parse_yaml(env[variable], source)
        if not found:
            data, found = _check_value(key, data, key)
            found = [f"{source}: {problem}" for problem in found]
        if found:
            problems += found
        else:
            values[key], origins[key] = data, source
    return values, origins, problems


# --- checking settings ----------------------------------------------------------------------------


def _check_model(data: Any, source: str, platform_names: Collection[str]) -> tuple[dict[str, Any], list[str]]:
    values, problems = _check_settings(data, source, _MODEL_KEYS)
    problems += _check_ep_option_names(values, source)
    if "skip_platforms" in values:
        skipped = values["skip_platforms"]
        if not isinstance(skipped, list) or not all(isinstance(name, str) for name in skipped):
            problems.append(
                f"{source}: 'skip_platforms' must be a list of platform names; got {_describe(skipped)}"
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
            f"{source}: 'platforms' must be a mapping of platform name -> settings; got {_describe(sections)}"
        ]
    checked: dict[str, Any] = {}
    problems: list[str] = []
    for name, section in sections.items():
        if name not in platform_names:
            problems.append(
                f"{source}: 'platforms' has a section for {_unknown_platform(name, platform_names)}"
            )
            continue
        prefix = f"platforms.{name}."
        checked[name], found = _check_settings(section, source, _COOK_KEYS, prefix)
        problems += found + _check_ep_option_names(checked[name], source, prefix)
    return checked, problems


def _unknown_platform(name: Any, platform_names: Collection[str]) -> str:
    close = difflib.get_close_matches(str(name), platform_names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known platforms: {', '.join(sorted(platform_names))}"
    return f"{name!r}, which is not a platform; {hint}"


def _check_settings(
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
        return {}, [f"{source}: {what} must be a mapping of settings (key: value); got {_describe(data)}"]
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        if not isinstance(key, str) or key not in allowed:
            problems.append(f"{source}: {_unknown_key(key, prefix, allowed)}")
        elif key not in _DEFAULTS:
            values[key] = value
        else:
            checked, found = _check_value(key, value, prefix + key)
            problems += [f"{source}: {problem}" for problem in found]
            if not found:
                values[key] = checked
    return values, problems


def _unknown_key(key: Any, prefix: str, allowed: Collection[str]) -> str:
    name = f"{prefix}{key}"
    if key in _PLATFORM_ONLY_KEYS:
        return f"key {name!r} can only be set in a platform file (platforms/*.yaml), not per model"
    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known settings: {', '.join(sorted(allowed))}"
    return f"key {name!r} is not a known setting; {hint}"


def _check_value(key: str, value: Any, name: str) -> tuple[Any, list[str]]:
    """Check one value against its default's type, the choices and the range; return it normalized."""
    default = _DEFAULTS[key]
    expected = "one of " + ", ".join(_CHOICES[key]) if key in _CHOICES else _TYPE_NAMES[type(default)]
    if not _has_type_of(value, default) or (key in _CHOICES and value not in _CHOICES[key]):
        return value, [f"{name!r} must be {expected}; got {_describe(value)}{_type_hint(value, default)}"]
    if isinstance(default, float):
        value = float(value)  # an integer where a number is expected is fine: 1 -> 1.0
    problems = _check_range(key, value, name)
    extra_check = _VALUE_CHECKS.get(key)
    if extra_check is not None:
        problems += extra_check(name, value)
    return value, problems


def _has_type_of(value: Any, default: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):  # bool is not an int here
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    return isinstance(value, type(default))


def _type_hint(value: Any, default: Any) -> str:
    if isinstance(value, str) and isinstance(default, bool):
        return "; write true or false without quotes"
    if (
        isinstance(value, str)
        and isinstance(default, float)
        and re.fullmatch(r"[0-9]+[eE][-+]?[0-9]+", value)
    ):
        return f"; YAML reads {value} as text: write it with a dot, e.g. 1.0e-3"
    if isinstance(value, str) and isinstance(default, int | float) and _is_number(value):
        return "; write the number without quotes"
    if isinstance(value, int | float) and not isinstance(value, bool) and isinstance(default, str):
        return "; put it in quotes (unquoted, YAML reads it as a number: 1.20 becomes 1.2)"
    return ""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, int):
        return f"{value} (an integer)"
    if isinstance(value, float):
        return f"{value!r} (a float)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{value} (a {type(value).__name__})"


def _check_range(key: str, value: Any, name: str) -> list[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{name!r} must be a finite number; got {value!r}"]
    if key not in _RANGES:
        return []
    low, high = _RANGES[key]
    if high is None and value < low:
        return [f"{name!r} must be >= {low}; got {value!r}"]
    if high is not None and not low <= value <= high:
        return [f"{name!r} must be between {low} and {high}; got {value!r}"]
    return []


def _check_runtime_version(name: str, value: str) -> list[str]:
    if not _RUNTIME_VERSION.fullmatch(value):
        return [f'{name!r} must be an onnxruntime version like "1.24" or "1.24.4"; got {value!r}']
    major, minor = (int(part) for part in value.split(".")[:2])
    if (major, minor) < OLDEST_SUPPORTED:
        oldest = ".".join(map(str, OLDEST_SUPPORTED))
        return [
            f"{name!r} is {value}, older than {oldest}, the oldest onnxruntime this cooker targets (ORT "
            f"format v6 and the measured opset limits start there); use {oldest} or newer"
        ]
    return []


def _check_one_line(name: str, value: str) -> list[str]:
    return [f"{name!r} must be one line; got {value!r}"] if "\n" in value or "\r" in value else []


def _check_names(name: str, value: list[Any]) -> list[str]:
    return [
        f"'{name}[{index}]' must be a non-empty string; got {_describe(item)}"
        for index, item in enumerate(value)
        if not _is_name(item)
    ]


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _check_execution_providers(name: str, value: list[Any]) -> list[str]:
    problems = _check_names(name, value)
    if not value:
        problems.append(
            f"{name!r} must list at least one execution provider, in order of preference; got an empty list"
        )
    if problems:
        return problems
    problems += [
        f"{name!r} lists {ep!r} more than once; list each execution provider once"
        for ep in sorted({ep for ep in value if value.count(ep) > 1})
    ]
    for ep in dict.fromkeys(value):
        rule = _ep_rule(ep)
        if "only_with" not in rule:
            continue
        others = [other for other in dict.fromkeys(value) if other != ep and other not in rule["only_with"]]
        if others:
            problems.append(
                f"{name!r}: {ep} can only be combined with {', '.join(rule['only_with'])}; got "
                f"{', '.join(others)} ({rule['reason']})"
            )
    return problems


def _check_provider_options(name: str, value: dict[Any, Any]) -> list[str]:
    problems = []
    for ep, options in value.items():
        found = _check_ep_mapping(name, ep, options)
        if not found:
            found = [
                f"'{name}.{ep}.{option}' must be a string, number or boolean; got {_describe(item)}"
                for option, item in options.items()
                if not isinstance(item, Scalar)
            ]
        problems += found
    return problems


def _check_ep_session_options(name: str, value: dict[Any, Any]) -> list[str]:
    problems = []
    for ep, options in value.items():
        found = _check_ep_mapping(name, ep, options)
        if not found:
            for option, item in options.items():
                found += _check_session_option(f"{name}.{ep}.{option}", option, item)
        if not found:
            found = _check_ep_rule(name, ep, options)
        problems += found
    return problems


def _check_ep_mapping(name: str, ep: Any, options: Any) -> list[str]:
    if not _is_name(ep):
        return [f"{name!r} keys must be execution provider names; got {_describe(ep)}"]
    if not isinstance(options, dict):
        return [f"'{name}.{ep}' must be a mapping of option -> value; got {_describe(options)}"]
    return [
        f"'{name}.{ep}' keys must be non-empty strings; got {_describe(option)}"
        for option in options
        if not _is_name(option)
    ]


def _check_session_option(name: str, option: str, value: Any) -> list[str]:
    if option in UNSAFE_CONFIG_ENTRIES:
        return [f"{name!r} must not be set: {UNSAFE_CONFIG_ENTRIES[option]}"]
    if "." in option:
        if not option.startswith(ALLOWED_CONFIG_PREFIXES):
            return [
                f"{name!r}: only onnxruntime config entries starting with "
                f"{', '.join(ALLOWED_CONFIG_PREFIXES)} may travel in a blob (others, such as "
                "ep.context_file_path, can make an EP write files)"
            ]
        if isinstance(value, str):
            return []
        return [
            f"{name!r} is an onnxruntime config entry and must be a string; got {_describe(value)}"
            f"{_type_hint(value, '')}"
        ]
    if option not in _SESSION_OPTIONS:
        close = difflib.get_close_matches(option, _SESSION_OPTIONS, n=1)
        hint = (
            f"did you mean {close[0]!r}?"
            if close
            else "known options: " + ", ".join(_SESSION_OPTIONS) + ", or a config entry like 'session.x'"
        )
        return [f"{name!r} is not a known session option; {hint}"]
    allowed = _SESSION_OPTIONS[option]
    if allowed is bool:
        if isinstance(value, bool):
            return []
        return [f"{name!r} must be true or false; got {_describe(value)}{_type_hint(value, False)}"]
    if value in allowed and isinstance(value, str):
        return []
    return [f"{name!r} must be one of {', '.join(allowed)}; got {_describe(value)}"]


def _check_ep_rule(name: str, ep: str, options: Mapping[str, Any]) -> list[str]:
    """A built-in EP rule's session options are requirements: the user may repeat them, not change them."""
    rule = _ep_rule(ep)
    return [
        f"'{name}.{ep}.{option}' must be {required!r} for {ep}; got {options[option]!r} "
        f"({rule.get('reason', 'built-in rule')})"
        for option, required in rule["session_options"].items()
        if option in options and options[option] != required
    ]


def _check_verify_dims(name: str, value: dict[Any, Any]) -> list[str]:
    problems = []
    for dim, size in value.items():
        if not _is_name(dim):
            problems.append(f"{name!r} keys must be symbolic dimension names; got {_describe(dim)}")
        elif isinstance(size, bool) or not isinstance(size, int) or size < 1:
            problems.append(f"'{name}.{dim}' must be an integer >= 1; got {_describe(size)}")
        elif size > MAX_DIM_SIZE:
            problems.append(f"'{name}.{dim}' must be at most {MAX_DIM_SIZE:,}; got {size:,}")
    return problems


def _check_fixed_shapes(name: str, value: dict[Any, Any]) -> list[str]:
    problems = []
    for input_name, shape in value.items():
        if not _is_name(input_name):
            problems.append(f"{name!r} keys must be input names; got {_describe(input_name)}")
        elif not isinstance(shape, list) or not all(
            isinstance(size, int) and not isinstance(size, bool) and size >= 1 for size in shape
        ):
            problems.append(f"'{name}.{input_name}' must be a list of integers >= 1; got {_describe(shape)}")
        elif max(shape, default=1) > MAX_DIM_SIZE:
            problems.append(
                f"'{name}.{input_name}' sizes must be at most {MAX_DIM_SIZE:,}; got {max(shape):,}"
            )
    return problems


def _check_globs(name: str, value: list[Any]) -> list[str]:
    return _check_names(name, value)


_VALUE_CHECKS: dict[str, Callable[[str, Any], list[str]]] = {
    "runtime_version": _check_runtime_version,
    "description": _check_one_line,
    "execution_providers": _check_execution_providers,
    "provider_options": _check_provider_options,
    "ep_session_options": _check_ep_session_options,
    "verify_dims": _check_verify_dims,
    "fixed_dims": _check_verify_dims,
    "fixed_shapes": _check_fixed_shapes,
    "include": _check_globs,
    "exclude": _check_globs,
}


def _check_ep_option_names(values: Mapping[str, Any], source: str, prefix: str = "") -> list[str]:
    """Options for an EP that the same file does not list are almost always a misspelt EP name."""
    if "execution_providers" not in values:
        return []
    providers = values["execution_providers"]
    return [
        f"{source}: '{prefix}{key}' has options for {ep!r}, which is not in "
        f"'{prefix}execution_providers' ({', '.join(providers)}); fix the name or list the EP"
        for key in ("provider_options", "ep_session_options")
        for ep in values.get(key, {})
        if ep not in providers
    ]


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
    if values["type_reduction"] and not values["reduced_build"]:
        problems.append(
            f"{origins['type_reduction']}: 'type_reduction' needs 'reduced_build' true; got false from "
            f"{origins['reduced_build']}"
        )
    return problems
