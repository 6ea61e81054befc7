"""Reduced-operator build configurations: what a minimal onnxruntime build must contain.

Written per platform over all of its cooked models, in the format onnxruntime's build reads with
``--include_ops_by_config``. Each cook lists its own model's operators and their types with
onnxruntime's own model processor (``model_operators``, kept in the manifest entry and so in the
cook cache); the manifest task only merges those lists, byte for byte what onnxruntime's
``create_config_from_models`` writes for the same models. Entries cooked before they carried the
lists are read back from their blobs with that tool.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from onnx_cooker.errors import CookError
from onnx_cooker.fsutil import atomic_write
from onnx_cooker.layout import OPS_AND_TYPES_CONFIG, applied_variant_path, ops_config_names
from onnx_cooker.runtime.blob import decode_blob
from onnx_cooker.runtime.errors import BundleError

# onnxruntime's writer logs every file at INFO on its own handler; the task prints its own line.
logging.getLogger("ort_format_model.utils").setLevel(logging.WARNING)


def write_operator_configs(platform_dir: Path, entries: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """Write the configs for the entries cooked with ``reduced_build``; returns the files written.

    The operators are those of the cooked models (after optimization). For runtime-style models the
    variant with the saved optimizations applied is included too: replaying them needs its kernels.
    """
    reduced = {name: e for name, e in entries.items() if e["settings"]["reduced_build"]}
    type_reduction = any(e["settings"]["type_reduction"] for e in reduced.values())
    wanted = ops_config_names(type_reduction) if reduced else ()
    for stale in set(ops_config_names(True)) - set(wanted):  # a platform that stopped asking for it
        (platform_dir / stale).unlink(missing_ok=True)
    if not reduced:
        return []
    untyped = sorted(n for n, e in reduced.items() if "operators" in e and e["operators"]["types"] is None)
    if type_reduction and untyped:
        # The cook ran onnxruntime's own type processor (the tool's) over the model and its applied
        # variant, and it failed: the tool fails the same way on the same models.
        raise CookError(
            f"{platform_dir}: onnxruntime's reduced-build tool failed on model {untyped[0]!r} (its "
            "operator type processor cannot name a type the model uses); set `type_reduction: false` in "
            "this platform's file (the build then keeps every type of those operators), or list this "
            "platform in the model's `skip_platforms`"
        )
    try:
        if all("operators" in e for e in reduced.values()):
            return _write_merged(platform_dir, reduced, type_reduction)
        return _write(platform_dir, reduced, type_reduction)  # entries from before they carried lists
    except (BundleError, ValueError, OSError) as exc:
        raise CookError(
            f"{platform_dir}: cannot write the reduced-build operator config ({exc}); run the cook again"
        ) from None


def _create_config(platform_dir: Path, models: list[Path], output: Path, types: bool, root: Path) -> None:
    """onnxruntime's config writer; its failures (it raises anything, e.g. KeyError on a data type it
    does not know) become a CookError naming the model and the setting that avoids it."""
    from onnxruntime.tools.ort_format_model.utils import create_config_from_models

    try:
        create_config_from_models(models, output, enable_type_reduction=types)
        return
    except Exception as exc:  # noqa: BLE001 (onnxruntime's tool: any exception type)
        failure = f"{type(exc).__name__}: {exc}"
    culprit = None
    for model in models:  # which model it chokes on
        try:
            create_config_from_models([model], root / "probe.config", enable_type_reduction=types)
        except Exception:  # noqa: BLE001
            culprit = model.relative_to(root).as_posix().removesuffix(".applied.ort").removesuffix(".ort")
            break
    fix = (
        "set `type_reduction: false` in this platform's file (the build then keeps every type of those "
        "operators)"
        if types
        else "set `reduced_build: false` for this platform"
    )
    which = f"model {culprit!r}" if culprit else "the platform's models"
    raise CookError(
        f"{platform_dir}: onnxruntime's reduced-build tool failed on {which} ({failure}); {fix}, or "
        "list this platform in the model's `skip_platforms`"
    )


def _write(platform_dir: Path, reduced: Mapping[str, Mapping[str, Any]], type_reduction: bool) -> list[Path]:
    written = []
    with tempfile.TemporaryDirectory(prefix=".opconfig-", dir=platform_dir) as tmp:
        root = Path(tmp)
        models = []
        for name, entry in sorted(reduced.items()):
            model_path = root / f"{name}.ort"
            model_path.parent.mkdir(parents=True, exist_ok=True)
            model_path.write_bytes(decode_blob((platform_dir / entry["file"]).read_bytes())[1])
            models.append(model_path)
            applied = applied_variant_path(platform_dir, name)
            if entry.get("saved_runtime_optimizations") and applied.is_file():
                models.append(root / f"{name}.applied.ort")
                models[-1].write_bytes(applied.read_bytes())
        for config in ops_config_names(type_reduction):
            output = root / config
            _create_config(platform_dir, models, output, config == OPS_AND_TYPES_CONFIG, root)
            # Name models by their bundle name, not by this temporary folder.
            text = output.read_text(encoding="utf-8").replace(f"{root}/", "")
            atomic_write(platform_dir / config, text.encode())
            written.append(platform_dir / config)
    return written


def _bytes_processor(data: bytes, required_ops: dict, processors: Any) -> Any:
    """onnxruntime's ORT-model processor over bytes in memory instead of a file (its tools are
    imported here: their package imports torch when it is installed)."""
    from onnxruntime.tools.ort_format_model.ort_model_processor import OrtFormatModelProcessor

    from onnx_cooker.cook.ortschema import fbs

    buffer = bytearray(data)
    if not fbs.InferenceSession.InferenceSession.InferenceSessionBufferHasIdentifier(buffer, 0):
        raise ValueError("not an ORT-format model")
    processor = OrtFormatModelProcessor.__new__(OrtFormatModelProcessor)
    processor._required_ops = required_ops
    processor._buffer = buffer
    processor._model = fbs.InferenceSession.InferenceSession.GetRootAsInferenceSession(buffer, 0).Model()
    processor._op_type_processors = processors
    return processor


def model_operators(models: Sequence[bytes]) -> dict[str, Any]:
    """The operators of ORT-format ``models`` (one cooked model and its applied variant) and the
    types each operator is used with, as onnxruntime's processor records them: ``{"ops": [[domain,
    opset, op], ...], "types": {"domain;op": config entry}}``, ``types`` None when the processor
    cannot name a type the model uses. JSON-ready, merged by ``write_operator_configs``."""
    from onnxruntime.tools.ort_format_model.operator_type_usage_processors import OperatorTypeUsageManager

    try:
        required, manager = _process(models, OperatorTypeUsageManager())
    except Exception:  # noqa: BLE001 (onnxruntime's tool: e.g. KeyError on a type it does not know)
        # Types it cannot name: the operators alone; a typed config then comes from the tool itself,
        # whose failure names the model (write_operator_configs).
        required, _ = _process(models, None)
        return {"ops": _ops(required), "types": None}
    ops = _ops(required)
    types = {}
    for domain, _, op in ops:
        entry = manager.get_config_entry(domain, op)
        if entry is not None:
            types[f"{domain};{op}"] = entry
    return {"ops": ops, "types": types}


def _process(models: Sequence[bytes], manager: Any) -> tuple[dict[str, dict[int, set[str]]], Any]:
    required: dict[str, dict[int, set[str]]] = {}
    for data in models:
        _bytes_processor(data, required, manager).process()
    return required, manager


def _ops(required: Mapping[str, Mapping[int, set[str]]]) -> list[list[Any]]:
    return sorted(
        [domain, opset, op]
        for domain, opsets in required.items()
        for opset, names in opsets.items()
        for op in names
    )


def _union(a: Any, b: Any) -> Any:
    """Two type records of one operator as one: what onnxruntime's processor would hold after
    seeing both models (sets of types per input/output index, or sets of type triples)."""
    if a is None:
        return b
    if b is None:  # a key only one model's record has (an input index only its graph feeds)
        return a
    if isinstance(a, dict):
        return {key: _union(a.get(key), b.get(key)) for key in a.keys() | b.keys()}
    return sorted({tuple(x) if isinstance(x, list) else x for x in [*a, *b]})


def _dump(record: Any) -> str:
    """A merged type record as onnxruntime's processors write one (keys in their order, sorted lists)."""

    def ordered(value: Any) -> Any:
        if isinstance(value, dict):
            keys = sorted(value, key=lambda k: (0, int(k), "") if k.isdigit() else (1, 0, k))
            return {key: ordered(value[key]) for key in keys}
        return [list(x) if isinstance(x, tuple) else x for x in value]

    return json.dumps(ordered(record))


def merged_config(records: Sequence[Mapping[str, Any]], files: Sequence[str], with_types: bool) -> str:
    """The config onnxruntime's ``create_config_from_models`` writes for ``files`` (the cooked model
    files as its header lists them), from their ``model_operators`` records."""
    required: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    types: dict[str, Any] = {}
    for record in records:
        for domain, opset, op in record["ops"]:
            required[domain][int(opset)].add(op)
        for key, entry in (record["types"] or {}).items():
            types[key] = _union(types.get(key), json.loads(entry))
    lines = ["# Generated from model/s:\n"]
    lines += [f"# - {name}\n" for name in sorted(files, key=lambda n: PurePosixPath(n).parts)]
    for domain in sorted(required):
        for opset in sorted(required[domain]):
            entries = [
                op + (_dump(types[f"{domain};{op}"]) if with_types and f"{domain};{op}" in types else "")
                for op in sorted(required[domain][opset])
            ]
            lines.append(f"{domain};{opset};{','.join(entries)}\n")
    return "".join(lines)


def _write_merged(
    platform_dir: Path, reduced: Mapping[str, Mapping[str, Any]], type_reduction: bool
) -> list[Path]:
    records = [entry["operators"] for entry in reduced.values()]  # each covers its applied variant
    files = [f"{name}.ort" for name in reduced]
    # the applied variants the records cover, named as the tool names them (their files are not kept)
    files += [f"{name}.applied.ort" for name, e in reduced.items() if e.get("saved_runtime_optimizations")]
    written = []
    for config in ops_config_names(type_reduction):
        text = merged_config(records, files, config == OPS_AND_TYPES_CONFIG)
        atomic_write(platform_dir / config, text.encode())
        written.append(platform_dir / config)
    return written
