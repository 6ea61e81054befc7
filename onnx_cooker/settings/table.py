"""The settings table: every setting a platform file, a model's .cook.yaml or COOK_SET_* may give.

One row per setting (name, kind, default, choices or range, check, scope, one-line doc) is the single
source of the validation, the frozen ``CookSettings`` and ``Platform`` fields
(``onnx_cooker/settings/resolve.py``),
the settings table of ``docs/settings.md`` and ``docs/settings.schema.json`` (``settings/docs.py``).
To add a setting: add its row here, then use it (``settings.<name>``) where it matters; regenerate the
docs with ``python -m onnx_cooker.settings.docs --write``.

Imported while doit loads tasks: standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from onnx_cooker.runtime.constants import (
    COMPRESSION_CHOICES,
    DEVICE_POLICIES,
    OPTIMIZATION_LEVELS,
    Arch,
    ModelFormat,
    OptimizationStyle,
    Precision,
)
from onnx_cooker.settings import eprules, precision_options
from onnx_cooker.settings.checks import (
    MAX_DIM_SIZE,
    check_dim_sizes,
    check_names,
    check_one_line,
    check_range,
    check_runtime_version,
    check_shapes,
    describe,
    has_type,
    type_hint,
)

Options = tuple[tuple[str, tuple[tuple[str, str | int | float | bool], ...]], ...]
Check = Callable[[str, Any], list[str]]
# "model": platform files, model files and COOK_SET_*, a CookSettings field (part of the cook key).
# "platform": platform files and COOK_SET_* only, a Platform field (which models, checks, docs).
Scope = Literal["model", "platform"]
AS_ABOVE = ""  # doc of a setting documented in the same docs/settings.md row as the setting before it


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, eq=False)
class Kind:
    """A kind of value: what YAML must give, how CookSettings holds it and how to_dict() gives it back."""

    type: type
    name: str  # for messages: "must be <name>"
    frozen: Any  # the annotation of the frozen form
    freeze: Callable[[Any], Any] = _same
    thaw: Callable[[Any], Any] = _same
    schema: Mapping[str, Any] = field(default_factory=dict)


def _freeze_options(options: Mapping[str, Mapping[str, Any]]) -> Options:
    return tuple(sorted((ep, tuple(sorted(entries.items()))) for ep, entries in options.items()))


_NAME_SCHEMA = {"type": "string", "pattern": r"\S"}
_SIZE_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_DIM_SIZE}
BOOL = Kind(bool, "true or false", bool, schema={"type": "boolean"})
INT = Kind(int, "an integer", int, schema={"type": "integer"})
FLOAT = Kind(float, "a number", float, freeze=float, schema={"type": "number"})
TEXT = Kind(str, "a string", str, schema={"type": "string"})
NAMES = Kind(  # in the given order (execution_providers: order of preference)
    list,
    "a list",
    tuple[str, ...],
    freeze=tuple,
    thaw=list,
    schema={"type": "array", "items": _NAME_SCHEMA},
)
DIM_SIZES = Kind(  # sorted by dim name
    dict,
    "a mapping",
    tuple[tuple[str, int], ...],
    freeze=lambda sizes: tuple(sorted(sizes.items())),
    thaw=dict,
    schema={"type": "object", "propertyNames": _NAME_SCHEMA, "additionalProperties": _SIZE_SCHEMA},
)
SHAPES = Kind(  # sorted by input name
    dict,
    "a mapping",
    tuple[tuple[str, tuple[int, ...]], ...],
    freeze=lambda shapes: tuple(sorted((name, tuple(shape)) for name, shape in shapes.items())),
    thaw=lambda shapes: {name: list(shape) for name, shape in shapes},
    schema={
        "type": "object",
        "propertyNames": _NAME_SCHEMA,
        "additionalProperties": {"type": "array", "items": _SIZE_SCHEMA},
    },
)
EP_OPTIONS = Kind(  # sorted by EP name, then option
    dict,
    "a mapping",
    Options,
    freeze=_freeze_options,
    thaw=lambda options: {ep: dict(entries) for ep, entries in options},
    schema={"type": "object", "propertyNames": _NAME_SCHEMA, "additionalProperties": {"type": "object"}},
)

PRECISION_OPTIONS = Kind(  # sorted by precision, then option
    dict,
    "a mapping",
    Options,
    freeze=_freeze_options,
    thaw=lambda options: {precision: dict(entries) for precision, entries in options},
    schema={"type": "object"},
)


@dataclass(frozen=True, eq=False)
class Setting:
    """One row of the table."""

    name: str
    kind: Kind
    default: Any  # as YAML reads it (lists, dicts); never mutate it
    doc: str  # one line for docs/settings.md's table and the schema; AS_ABOVE: shares the row before
    choices: tuple[str, ...] = ()
    low: float | None = None  # inclusive bounds; a float setting is also always finite
    high: float | None = None
    check: Check | None = None  # more checks, once kind, choices and range passed
    scope: Scope = "model"
    cooked: Callable[[Mapping[str, Any]], Any] | None = None  # the value a cook gets, from all values
    schema: Mapping[str, Any] = field(default_factory=dict)  # JSON Schema beyond kind, choices, range


# Verification (docs/verification.md): the elementwise defaults, and the scale-aware rule beside them.
DEFAULT_RTOL, DEFAULT_ATOL, DEFAULT_VERIFY_SCALE = 1.0e-4, 1.0e-5, 1.0e-5


def _full_runtime_version(values: Mapping[str, Any]) -> str:
    """``1.28`` as ``1.28.0``, as pip's ``==1.28`` reads it: one environment and one cook key for
    the one version (the short form made a second 180 MB environment beside the cached 1.28.0)."""
    version = str(values["runtime_version"])
    return f"{version}.0" if version.count(".") == 1 else version


def _scale_rule(values: Mapping[str, Any]) -> float:
    # Explicit rtol/atol keep their meaning: a team that asks for 1e-5 gets exactly that.
    if (values["rtol"], values["atol"]) != (DEFAULT_RTOL, DEFAULT_ATOL):
        return 0.0
    return float(values["verify_scale"])


def _nchwc_only_on_x86_64(values: Mapping[str, Any]) -> bool:
    # NCHWc ops depend on the build machine's x86 vector width; never ship them to another CPU
    # (docs/design.md, "Operators the target EP cannot run"; onnxruntime's own converter does the same).
    return values["allow_nchwc"] and values["arch"] == Arch.X86_64


# In CookSettings field order (platform first), then the platform-only settings.
SETTINGS: tuple[Setting, ...] = (
    Setting("format", TEXT, "ort", "`ort` (flatbuffer, fast to load, minimal builds) or `onnx`",
            choices=tuple(f.value for f in ModelFormat)),
    Setting("optimization_level", TEXT, "basic", "`basic` (EP-agnostic, standard ops), `extended`, `all`",
            choices=OPTIMIZATION_LEVELS[1:]),  # "disable" would ship an unoptimized model
    Setting("optimization_style", TEXT, "fixed",
            "`fixed`, or `runtime` (ORT only: basic applied; what the level adds beyond basic is saved, and "
            "replayed at load only on the EPs that did not take the nodes)",
            choices=tuple(s.value for s in OptimizationStyle)),
    Setting("allow_nchwc", BOOL, False,
            "allow NCHWc layout ops at level `all`; honoured only for `arch: x86_64`",
            cooked=_nchwc_only_on_x86_64),
    Setting("arch", TEXT, "arm64", "target CPU: `x86_64` or `arm64`", choices=tuple(a.value for a in Arch)),
    Setting("runtime_version", TEXT, "1.32.0",
            "the onnxruntime version the target ships (`1.28` is 1.28.0); cooked models must load there",
            check=check_runtime_version, schema={"pattern": r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"},
            cooked=_full_runtime_version),
    Setting("downgrade", TEXT, "auto",
            "`auto`: a model newer than `runtime_version` loads is lowered to what it loads: its IR version "
            "when it uses no newer IR's feature, its default-domain opset by onnx's version converter (the "
            "result verified against the source like any cook); recorded in `fallbacks`, one warning line. "
            "`never`: such a model fails the cook",
            choices=("auto", "never")),
    Setting("execution_providers", NAMES, ["CPUExecutionProvider"],
            "runtime EPs in order of preference (custom names pass through)",
            check=eprules.check_execution_providers, schema={"minItems": 1, "uniqueItems": True}),
    Setting("provider_options", EP_OPTIONS, {},
            "per-EP options given to the EP at load, e.g. `{DmlExecutionProvider: {device_id: 0}}`; not "
            "ones that may name a file, folder, library or address (see "
            "[what a blob may ask for](#what-a-blob-may-ask-for))",
            check=eprules.check_provider_options, cooked=eprules.listed_provider_options,
            schema={"additionalProperties": eprules.provider_options_schema()}),
    Setting("ep_session_options", EP_OPTIONS, {},
            "per-EP session options (`enable_mem_pattern`, `execution_mode`, `graph_optimization_level`, or "
            "an onnxruntime config entry that only changes how a session computes, such as "
            "`session.intra_op.allow_spinning`: see [what a blob may ask for](#what-a-blob-may-ask-for))",
            check=eprules.check_ep_session_options, cooked=eprules.session_options_with_rules,
            schema={"additionalProperties": eprules.session_options_schema()}),
    Setting("ep_device_policy", TEXT, "none",
            "plugin EPs (onnxruntime >= 1.22, Windows ML): the device selection policy the loader asks "
            "onnxruntime for when the game names no devices: `prefer_gpu`, `prefer_npu`, `prefer_cpu`, "
            "`max_performance`, `max_efficiency`, `min_power`, `default`; `none`: the classic EP list",
            choices=("none", *DEVICE_POLICIES)),
    Setting("min_ep_coverage", FLOAT, 0.0,
            "the runtime check fails a model when less than this share of its nodes runs on the "
            "platform's preferred EP (measured where `runtime_package` runs that EP on the build "
            "machine; elsewhere one line says it was not measured); 0 = record the placement only",
            low=0, high=1),
    Setting("compression_level", INT, 10, "zstd level 1..22", low=1, high=22),  # zstd's levels
    Setting("compression", TEXT, "speed",
            "`speed`: every section of 64 KiB or more is stored raw: onnxruntime takes ONNX weights and an "
            "ORT model in place, without a decompression pass or a copy, and copies an ONNX graph faster "
            "than zstd decodes it (a blob about its source's size); `size`: zstd "
            "wherever it saves 10% (smaller blobs of compressible models, such as int8 or pruned ones, which "
            "then load up to 3x slower: docs/bundle-format.md)",
            choices=COMPRESSION_CHOICES),
    Setting("rtol", FLOAT, DEFAULT_RTOL,
            "elementwise verification tolerances: each output element within atol + rtol times the source's",
            low=0),
    Setting("atol", FLOAT, DEFAULT_ATOL, AS_ABOVE, low=0),
    Setting("verify_scale", FLOAT, DEFAULT_VERIFY_SCALE,
            "an output that misses rtol/atol still verifies when its relative L2 error is at most this "
            "and its largest error at most 10 times this of its largest magnitude, or 4 times what "
            "onnxruntime's own optimizations move the source on the same inputs where that is more "
            "(float32 rounding through deep networks; docs/verification.md), or, for an output a TopK, "
            "ArgMax or NMS computes, within these bounds of the source's output at onnxruntime's default "
            "level (near-ties reordered); applies while rtol and atol keep their defaults, 0 turns it off",
            low=0, cooked=_scale_rule),
    Setting("verify", BOOL, True, "compare cooked outputs with the source's"),
    Setting("verify_dims", DIM_SIZES, {},
            "sizes for symbolic dims when synthesizing verification inputs, e.g. `{batch: 2}`; "
            "a dim not given is 16 but a leading batch, at 1 (64 first where a convolution or pooling "
            "slides over it, as an image's height and width; every dim at 1 where 16 does not run, then 32, "
            "then 224 with a named leading batch at 1, then 16000 for a signal's length, as audio samples; "
            "1 or 2 each where dims are bound, as a KV cache's); a dim named by an expression (`past + 1`) "
            "is computed",
            check=check_dim_sizes),
    Setting("fixed_dims", DIM_SIZES, {},
            "symbolic dims fixed in the cooked model, e.g. `{batch: 1}` (NNAPI/CoreML take far more of a "
            "fixed-shape model)",
            check=check_dim_sizes),
    Setting("fixed_shapes", SHAPES, {},
            "whole input shapes fixed in the cooked model, e.g. `{images: [1, 3, 224, 224]}`",
            check=check_shapes),
    Setting("overridable_initializers", TEXT, "drop",
            "initializers the source also lists as graph inputs (IR 4 and later: inputs a caller may "
            "override, as exporters wrote with `keep_initializers_as_inputs`): `drop` makes them constants "
            "of the cooked model (onnxruntime folds and fuses no initializer a caller may override, e.g. "
            "Conv+BatchNormalization, and warns on every load; the manifest lists only the inputs a game "
            "feeds), recorded in the entry's `fallbacks`; `keep` leaves them overridable",
            choices=("drop", "keep")),
    Setting("reduced_build", BOOL, False,
            "write `required_operators.config` for a reduced onnxruntime build (ORT format only)"),
    Setting("type_reduction", BOOL, False,
            "also write `required_operators_and_types.config` (needs `reduced_build`)"),
    Setting("weights", TEXT, "auto",
            "ONNX format only: `external` puts the model's big initializers (1 KiB and more) in a weights "
            "section of the blob that the loader hands to onnxruntime without copying; `inline` keeps them "
            "in the graph; `auto` = external once they reach 1 MiB. Models over 2 GB need external weights "
            "(and so ONNX format); `external` with `format: ort` is an error",
            choices=("auto", "inline", "external")),
    Setting("name_dimensions", BOOL, True,
            "for a `runtime_version` before 1.32, write into the cooked model the shapes ONNX's inference "
            "gives values whose dimensions onnxruntime cannot size (a conv net over an image of any size), "
            "each unknown dimension named: onnxruntime's memory planner then matches buffers at once instead "
            "of taking up to half the load (docs/design.md, \"Shapes for the memory planner\"); `false` "
            "leaves the shapes as optimization left them"),
    Setting("max_growth", FLOAT, 4.0,
            "a cooked model over this many times its source's size *and* this many bytes larger is cooked "
            "again without onnxruntime's `ConstantFolding` (which stores ConstantOfShape/Expand/Tile outputs "
            "the source computes at run time); recorded in the manifest entry's `fallbacks` and printed as "
            "one warning line; if it is still that large, the cook fails with the sizes",
            low=1),
    Setting("max_growth_bytes", INT, 16777216, AS_ABOVE, low=0),
    Setting("narrow_weights", TEXT, "auto",
            "weights stored narrower than the model computes with them (1 MiB or more of int8 or float16 "
            "initializers a `Cast` widens, e.g. a weight-only quantization: `Cast` then `Mul` by a scale): "
            "`keep` stores them as the source does (cooked without onnxruntime's `ConstantFolding`, which "
            "would store the casts' results: up to 4x the bytes); an ONNX blob's load folds them as "
            "onnxruntime folds the source's, an ORT blob casts them at every run. `fold` stores them folded "
            "(a larger blob that loads faster). `auto`: `keep` for ONNX, `fold` for ORT",
            choices=("auto", "keep", "fold")),
    Setting("precision", TEXT, "fp32",
            "`fp32` (the source as it is), `fp16` (weights and compute; inputs and outputs keep "
            "their types), `int8-dynamic` (onnxruntime's `quantize_dynamic`) or `int8-static` (QDQ by "
            "`quantize_static`, calibrated on `<model>.calib.npz`, else on the verification inputs); "
            "the variant must pass the accuracy gate against the fp32 source",
            choices=tuple(p.value for p in Precision)),
    Setting("precision_keep_ops", NAMES, [],
            "operator types kept in fp32 in a lower-precision variant, e.g. `[Softmax, LayerNormalization]`",
            check=check_names),
    Setting("precision_options", PRECISION_OPTIONS, {},
            "converter options per precision over the defaults, e.g. `{int8-static: {per_channel: false, "
            "calibrate_method: entropy}}`: fp16 `keep_io_types` (true); int8 `per_channel` (dynamic false, "
            "static true), `reduce_range` (false), `weight_type` (int8 or uint8: int8); int8-static "
            "`activation_type` (uint8 or int8: uint8), `activation_symmetric` (false), `weight_symmetric` "
            "(true), `calibrate_method` (minmax, entropy or percentile: minmax)",
            check=precision_options.check, schema=precision_options.schema()),
    Setting("precision_min_cosine", FLOAT, 0.0,
            "the accuracy gate, per output against the fp32 source: smallest cosine similarity and, "
            "for class scores (rank 2), smallest top-1 agreement; 0 = the precision's default "
            "(fp16: 0.999 and 0.99, int8: 0.98 and 0.9)",
            low=0, high=1),
    Setting("precision_min_top1", FLOAT, 0.0, AS_ABOVE, low=0, high=1),
    Setting("max_blob_bytes", INT, 0,
            "size budget of one model's blob; over it the cook fails naming the size and what precision "
            "would fit (0 = no budget)",
            low=0),
    Setting("include", NAMES, ["*"],
            "globs on model names selecting what this platform cooks; a glob that matches no model warns",
            check=check_names, scope="platform"),
    Setting("exclude", NAMES, [], AS_ABOVE, check=check_names, scope="platform"),
    Setting("description", TEXT, "", "one line shown by `doit list --all` beside the platform's tasks",
            check=check_one_line, scope="platform", schema={"pattern": r"^[^\r\n]*$"}),
    Setting("runtime_check", BOOL, True,
            "run every blob in exactly `runtime_version`; turning it off needs a reason", scope="platform"),
    Setting("runtime_check_off_reason", TEXT, "", AS_ABOVE, scope="platform"),
    Setting("runtime_package", TEXT, "onnxruntime",
            "the onnxruntime build the target ships, at `runtime_version`; the runtime check installs it "
            "where it runs on the build machine (`onnxruntime`, `onnxruntime-openvino`) and measures there "
            "where each model's nodes run, else the CPU wheel of that version stands in "
            "(`onnxruntime-directml`, `onnxruntime-qnn`, `onnxruntime-gpu`)",
            choices=tuple(eprules.RUNTIME_PACKAGES), scope="platform"),
    Setting("max_bundle_bytes", INT, 0,
            "size budget of the platform's bundle (all blobs); over it no manifest is written and the cook "
            "fails naming the biggest models (0 = no budget)",
            low=0, scope="platform"),
    Setting("allow_empty", BOOL, False,
            "a platform that selects no model fails the cook (nothing written) unless this is true",
            scope="platform"),
)  # fmt: skip

BY_NAME: Mapping[str, Setting] = MappingProxyType({setting.name: setting for setting in SETTINGS})
DEFAULTS: Mapping[str, Any] = MappingProxyType({setting.name: setting.default for setting in SETTINGS})
COOK_SETTINGS = tuple(setting for setting in SETTINGS if setting.scope == "model")
PLATFORM_SETTINGS = tuple(setting for setting in SETTINGS if setting.scope == "platform")
COOK_KEYS = frozenset(setting.name for setting in COOK_SETTINGS)
PLATFORM_ONLY_KEYS = frozenset(setting.name for setting in PLATFORM_SETTINGS)


def check_value(key: str, value: Any, name: str) -> tuple[Any, list[str]]:
    """Check one value of setting key (written as name) against its row; return it normalized."""
    setting = BY_NAME[key]
    expected_type = setting.kind.type
    expected = "one of " + ", ".join(setting.choices) if setting.choices else setting.kind.name
    if not has_type(value, expected_type) or (setting.choices and value not in setting.choices):
        hint = "" if setting.choices else type_hint(value, expected_type)  # a word, not a quoted number
        return value, [f"{name!r} must be {expected}; got {describe(value)}{hint}"]
    if expected_type is float:
        value = float(value)  # an integer where a number is expected is fine: 1 -> 1.0
    problems = check_range(name, value, setting.low, setting.high)
    if setting.check is not None:
        problems += setting.check(name, value)
    return value, problems


def frozen_values(settings: tuple[Setting, ...], values: Mapping[str, Any]) -> dict[str, Any]:
    """The frozen (hashable, sorted) form of each setting's value: the fields of CookSettings/Platform."""
    return {
        setting.name: setting.kind.freeze(
            values[setting.name] if setting.cooked is None else setting.cooked(values)
        )
        for setting in settings
    }
