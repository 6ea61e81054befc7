"""Built-in execution-provider rules, and the checks of the settings that name execution providers.

A rule's ``session_options`` are merged under a platform's ep_session_options, and a setting that
contradicts them is an error explained by ``reason``; ``only_with`` lists the only EPs it may be
combined with; ``domains`` are the operator domains the EP runs; ``usability`` names the onnxruntime
mobile usability check that estimates how much of a model the EP takes (see onnx_cooker/cook/usability.py).
EPs without a rule (custom console EPs) get no session options and the default domain only.

Imported while doit loads tasks: standard library only.
"""

from __future__ import annotations

import difflib
import platform
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from onnx_cooker.runtime.constants import (
    OPTIMIZATION_LEVELS,
    SAFE_CONFIG_ENTRIES,
    SAFE_CONFIG_PREFIXES,
    UNSAFE_CONFIG_ENTRIES,
    UNSAFE_PROVIDER_OPTION_VALUE_CHARACTERS,
    UNSAFE_PROVIDER_OPTION_WORDS,
    unsafe_provider_option,
)
from onnx_cooker.settings.checks import Scalar, check_names, describe, is_name, type_hint


@dataclass(frozen=True)
class EpRule:
    """What the cooker knows of one execution provider."""

    session_options: Mapping[str, Scalar] = field(default_factory=lambda: MappingProxyType({}))
    domains: tuple[str, ...] = ("",)
    only_with: tuple[str, ...] | None = None  # None: combines with any EP
    reason: str = "built-in rule"
    usability: str | None = None
    formats: tuple[str, ...] = ("onnx", "ort")  # the model formats the EP runs correctly


EP_RULES: Mapping[str, EpRule] = MappingProxyType(
    {
        "DmlExecutionProvider": EpRule(
            session_options=MappingProxyType({"enable_mem_pattern": False, "execution_mode": "sequential"}),
            only_with=("CPUExecutionProvider",),
            reason="DirectML requires memory patterns off and sequential execution, one Run at a time per "
            "session, and can only be combined with the CPU EP; see docs/design.md, DirectML sessions",
            # CPU-side fusions (FusedConv, FusedGemm in com.microsoft) are CPU kernels DirectML cannot
            # take (docs/design.md, "Operators the target EP cannot run"): only the default domain may
            # be added by optimization for DML targets.
            domains=("",),
        ),
        "CPUExecutionProvider": EpRule(domains=("", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc")),
        # OpenVINO compiles the graph with its own ONNX front end: NCHWc ops make session creation
        # fail ("OpenVINO does not support the following ONNX operations: com.microsoft.nchwc.Conv"),
        # and of the CPU-only fused ops of com.microsoft it takes some (FusedConv) and leaves others
        # to the CPU (docs/design.md, "Operators the target EP cannot run"): the default domain only.
        "OpenVINOExecutionProvider": EpRule(domains=("",)),
        # Measured on an NVIDIA H200 (bench/results-gpu.md): onnxruntime 1.32.0 with the WebGPU plugin
        # EP (onnxruntime-ep-webgpu 0.4.0) runs every ONNX blob of the bench, but an ORT-format
        # transformer fails at its first Gather ("All inputs must be tensors on WebGPU buffers") at
        # every optimization level and load path, also loaded by onnxruntime itself from a .ort file.
        "WebGpuExecutionProvider": EpRule(
            domains=("",),
            formats=("onnx",),
            reason="onnxruntime's WebGPU EP fails ORT-format models whose Gather reads an initializer "
            '(docs/design.md, "Operators the target EP cannot run")',
        ),
        "NnapiExecutionProvider": EpRule(usability="nnapi"),
        "XnnpackExecutionProvider": EpRule(),
        "CoreMLExecutionProvider": EpRule(usability="coreml"),
    }
)
_UNKNOWN_EP_RULE = EpRule()

# The EP names of onnxruntime's builds (case-sensitive, as onnxruntime compares them): a name that is
# one of these but for case, a short name, or a one-letter slip is a typo the session would pass
# over silently (custom console EPs, named otherwise, pass through).
ONNXRUNTIME_EPS = (
    "ACLExecutionProvider", "ArmNNExecutionProvider", "AzureExecutionProvider", "CANNExecutionProvider",
    "CoreMLExecutionProvider", "CPUExecutionProvider", "CUDAExecutionProvider", "DmlExecutionProvider",
    "DnnlExecutionProvider", "JsExecutionProvider", "MIGraphXExecutionProvider", "NnapiExecutionProvider",
    "NvTensorRTRTXExecutionProvider", "OpenVINOExecutionProvider", "QNNExecutionProvider",
    "RknpuExecutionProvider", "ROCMExecutionProvider", "SNPEExecutionProvider", "TensorrtExecutionProvider",
    "VitisAIExecutionProvider", "VSINPUExecutionProvider", "WebGpuExecutionProvider",
    "WebNNExecutionProvider", "XnnpackExecutionProvider",
)  # fmt: skip
_SUFFIX = "executionprovider"


def _meant_ep(ep: str) -> str | None:
    """The onnxruntime EP name ``ep`` is a slip of, or None (a known name, or a name of its own)."""
    if ep in ONNXRUNTIME_EPS:
        return None
    folded = ep.lower()
    for known in ONNXRUNTIME_EPS:
        if folded in (known.lower(), known.lower().removesuffix(_SUFFIX)):
            return known
    close = difflib.get_close_matches(ep, ONNXRUNTIME_EPS, n=1, cutoff=0.95)
    return close[0] if close else None


# The onnxruntime builds a platform may name as the one its target ships (``runtime_package``) ->
# what the runtime check installs in its own environment on a build machine to stand in for it: the
# package itself where it runs there, else the CPU wheel of the same version, which loads the same
# model formats (its EP's placement is then recorded as not measured, with the reason).
RUNTIME_PACKAGES: Mapping[str, str] = MappingProxyType(
    {
        "onnxruntime": "onnxruntime",
        "onnxruntime-directml": "onnxruntime",  # Windows only
        "onnxruntime-openvino": "onnxruntime-openvino",  # Linux x86_64 and Windows wheels
        "onnxruntime-qnn": "onnxruntime",  # Windows on Arm / x64 only, and a Qualcomm NPU
        "onnxruntime-gpu": "onnxruntime",  # an NVIDIA GPU and CUDA, which build machines rarely have
    }
)


def installed_for(package: str) -> str:
    """What the runtime check installs on this build machine for the target's ``package``: itself
    where its wheel runs here, else the CPU wheel of the same version (``RUNTIME_PACKAGES``).
    onnxruntime-openvino has wheels for Linux x86_64 and Windows only, up to Python 3.13, and the
    Windows one needs OpenVINO's own libraries installed beside it: here it runs on Linux x86_64."""
    wanted = RUNTIME_PACKAGES[package]
    if wanted == "onnxruntime-openvino" and not (
        sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64") and sys.version_info < (3, 14)
    ):
        return "onnxruntime"
    return wanted


# Per-EP session options a profile may set; any other name must be an onnxruntime config entry,
# which always contains a dot (e.g. "session.intra_op.allow_spinning") and takes a string.
SESSION_OPTIONS: Mapping[str, type | tuple[str, ...]] = MappingProxyType(
    {
        "enable_mem_pattern": bool,
        "execution_mode": ("sequential", "parallel"),
        "graph_optimization_level": OPTIMIZATION_LEVELS,
    }
)


def ep_rule(execution_provider: str) -> EpRule:
    return EP_RULES.get(execution_provider, _UNKNOWN_EP_RULE)


def ep_formats(execution_provider: str) -> tuple[str, tuple[str, ...]]:
    """Why, and which model formats an EP runs correctly (both, for EPs without a rule)."""
    rule = ep_rule(execution_provider)
    return rule.reason, rule.formats


def ep_domains(execution_provider: str) -> tuple[str, ...]:
    """Operator domains an EP can run ("" is the default ONNX domain); EPs without a rule get ("",)."""
    return ep_rule(execution_provider).domains


def ep_usability_check(execution_provider: str) -> str | None:
    """The mobile usability check that applies to an EP ("nnapi", "coreml"), if any."""
    return ep_rule(execution_provider).usability


# --- what a cook gets ------------------------------------------------------------------------------


def listed_provider_options(values: Mapping[str, Any]) -> dict[str, Mapping[str, Scalar]]:
    """provider_options of the listed execution providers only (a model may drop an EP)."""
    providers = tuple(values["execution_providers"])
    return {ep: options for ep, options in values["provider_options"].items() if ep in providers}


def session_options_with_rules(values: Mapping[str, Any]) -> dict[str, dict[str, Scalar]]:
    """Every listed EP's session options: its built-in rule's under the user's."""
    user = values["ep_session_options"]
    return {ep: {**ep_rule(ep).session_options, **user.get(ep, {})} for ep in values["execution_providers"]}


# --- checks ----------------------------------------------------------------------------------------


def check_execution_providers(name: str, value: list[Any]) -> list[str]:
    problems = check_names(name, value)
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
    problems += [
        f"{name!r} lists {ep!r}, which no onnxruntime knows: did you mean {meant!r}? (onnxruntime "
        "compares EP names exactly, and a session would pass over this one; a console's own EP with a "
        "name of its own is fine)"
        for ep in dict.fromkeys(value)
        if (meant := _meant_ep(ep))
    ]
    for ep in dict.fromkeys(value):
        rule = ep_rule(ep)
        if rule.only_with is None:
            continue
        others = [other for other in dict.fromkeys(value) if other != ep and other not in rule.only_with]
        if others:
            problems.append(
                f"{name!r}: {ep} can only be combined with {', '.join(rule.only_with)}; got "
                f"{', '.join(others)} ({rule.reason})"
            )
    return problems


def check_provider_options(name: str, value: dict[Any, Any]) -> list[str]:
    problems = []
    for ep, options in value.items():
        found = _check_ep_mapping(name, ep, options)
        if not found:
            found = [
                f"'{name}.{ep}.{option}' must be a string, number or boolean; got {describe(item)}"
                for option, item in options.items()
                if not isinstance(item, Scalar)
            ]
        if not found:
            found = [
                f"'{name}.{ep}.{option}' cannot travel in a blob: {why} (the loaders refuse it, since a blob "
                "may not choose where an EP reads, writes or loads from); have the game pass it itself "
                "(providers=[(ep, options)] in Python, oc_runtime_set_ep_appender in C)"
                for option, item in options.items()
                if (why := unsafe_provider_option(option, item))
            ]
        problems += found
    return problems


def check_ep_session_options(name: str, value: dict[Any, Any]) -> list[str]:
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


def check_ep_option_names(values: Mapping[str, Any], source: str, prefix: str = "") -> list[str]:
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


def _check_ep_mapping(name: str, ep: Any, options: Any) -> list[str]:
    if not is_name(ep):
        return [f"{name!r} keys must be execution provider names; got {describe(ep)}"]
    if not isinstance(options, dict):
        return [f"'{name}.{ep}' must be a mapping of option -> value; got {describe(options)}"]
    return [
        f"'{name}.{ep}' keys must be non-empty strings; got {describe(option)}"
        for option in options
        if not is_name(option)
    ]


def _check_session_option(name: str, option: str, value: Any) -> list[str]:
    if option in UNSAFE_CONFIG_ENTRIES:
        return [f"{name!r} must not be set: {UNSAFE_CONFIG_ENTRIES[option]}"]
    if "." in option:
        if option not in SAFE_CONFIG_ENTRIES and not option.startswith(SAFE_CONFIG_PREFIXES):
            close = difflib.get_close_matches(option, sorted(SAFE_CONFIG_ENTRIES), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            return [
                f"{name!r} cannot travel in a blob: {hint}only the onnxruntime config entries of "
                "docs/settings.md that change how a session computes may (others, such as "
                "session.optimized_model_filepath, name files onnxruntime reads or writes); set others "
                "on the session options the game passes"
            ]
        if isinstance(value, str):
            return []
        return [
            f"{name!r} is an onnxruntime config entry and must be a string; got {describe(value)}"
            f"{type_hint(value, str)}"
        ]
    if option not in SESSION_OPTIONS:
        close = difflib.get_close_matches(option, SESSION_OPTIONS, n=1)
        hint = (
            f"did you mean {close[0]!r}?"
            if close
            else "known options: " + ", ".join(SESSION_OPTIONS) + ", or a config entry like 'session.x'"
        )
        return [f"{name!r} is not a known session option; {hint}"]
    allowed = SESSION_OPTIONS[option]
    if allowed is bool:
        if isinstance(value, bool):
            return []
        return [f"{name!r} must be true or false; got {describe(value)}{type_hint(value, bool)}"]
    if value in allowed and isinstance(value, str):
        return []
    return [f"{name!r} must be one of {', '.join(allowed)}; got {describe(value)}"]


def _check_ep_rule(name: str, ep: str, options: Mapping[str, Any]) -> list[str]:
    """A built-in EP rule's session options are requirements: the user may repeat them, not change them."""
    rule = ep_rule(ep)
    return [
        f"'{name}.{ep}.{option}' must be {required!r} for {ep}; got {options[option]!r} ({rule.reason})"
        for option, required in rule.session_options.items()
        if option in options and options[option] != required
    ]


# --- JSON Schema (docs/settings.schema.json) -------------------------------------------------------


def session_options_schema() -> dict[str, Any]:
    """One EP's session options as JSON Schema: the known options, or an allowed config entry (a string)."""
    known: dict[str, Any] = {
        option: {"type": "boolean"} if allowed is bool else {"enum": list(allowed)}
        for option, allowed in SESSION_OPTIONS.items()
    }
    known.update({entry: {"type": "string"} for entry in sorted(SAFE_CONFIG_ENTRIES)})
    prefixes = "|".join(re.escape(prefix) for prefix in SAFE_CONFIG_PREFIXES)
    return {
        "type": "object",
        "properties": known,
        "patternProperties": {rf"^({prefixes})": {"type": "string"}},
        "additionalProperties": False,
    }


def provider_options_schema() -> dict[str, Any]:
    """One EP's provider options as JSON Schema: scalars, no name holding a word of
    ``UNSAFE_PROVIDER_OPTION_WORDS`` (ASCII case ignored: JSON Schema patterns take no flags) and no
    string value holding a path separator."""

    def any_case(word: str) -> str:
        return "".join(f"[{c}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)

    words = "|".join(any_case(word) for word in UNSAFE_PROVIDER_OPTION_WORDS)
    separators = "".join(re.escape(c) for c in UNSAFE_PROVIDER_OPTION_VALUE_CHARACTERS)
    return {
        "type": "object",
        "propertyNames": {"type": "string", "pattern": r"\S", "not": {"pattern": f"({words})"}},
        "additionalProperties": {
            "type": ["string", "number", "boolean"],
            "not": {"type": "string", "pattern": f"[{separators}]"},
        },
    }
