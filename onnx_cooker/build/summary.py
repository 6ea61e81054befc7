"""The line each cook prints (and the report shows): what was cooked, its size, how it verified.

Loaded with the tasks on every doit command: the standard library only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def cook_line(entry: Mapping[str, Any]) -> str:
    """The line a cook prints: the blob, its size against the source's and why, how it verified,
    and a warning line per fallback the cook took."""
    verification = entry["verification"]
    if "outputs" in verification:
        worst = max((o["max_abs"] for o in verification["outputs"]), default=0.0)
        dims = "".join(f", {d}={n}" for d, n in verification.get("default_dims", {}).items())
        floats = verification.get("floats")  # normal floats were ill-conditioned (cook.conditioning)
        drawn = f", {floats}" if floats else ""
        checked = f"verified ({verification['inputs']} inputs{drawn}{dims}), max abs error {worst:.2g}"
        if blank := verification.get("normal_floats_nonfinite"):  # outside the model's domain
            named = ", ".join(map(repr, blank))
            checked += f" (the source's {named} on floats from a normal distribution: no finite value)"
        elif verification.get("empty_outputs"):  # sample inputs (synthesized ones are refused)
            checked += (
                f", but every output is empty on {verification['inputs']}: nothing was compared; sample "
                "inputs on which the model gives outputs verify it"
            )
        elif floats:
            checked += (
                " (the source's outputs on floats from a normal distribution move beyond the bounds when "
                "the inputs move by one float step)"
            )
        if moved := ", ".join(  # its figures are then against the source's default-level run (cook.verify)
            f"{o['name']!r} by relative L2 {o['noise_rel_l2']:.2g}"
            for o in verification["outputs"]
            if o.get("passed_by") == "default-level"
        ):
            precision = (entry.get("precision") or {}).get("precision", "fp32")
            why = (
                "its QDQ pairs run as int8 kernels"
                if str(precision).startswith("int8")
                else "a selection such as TopK over near-ties, reordered"
            )
            checked += (
                f" against onnxruntime's default-level run of the source, which moves {moved} from its "
                f"unoptimized run ({why})"
            )
    else:
        checked = "NOT verified (verify: false)"
    if (variant := _variant_text(entry.get("precision"))) is not None:
        checked = f"{variant}; {checked} against that variant"
    size = f"{entry['blob_size']:,} B from {entry['source_size']:,} B of source"
    notes = [_why_larger(entry)] if entry["blob_size"] > entry["source_size"] else []
    narrow = entry.get("narrow_weights")
    if narrow is not None and narrow["kept"]:
        when = "at every run" if entry["format"] == "ort" else "as onnxruntime loads the blob"
        notes.append(f"{_narrow_text(narrow)} stored as the source does, cast {when}")
    if notes:
        size += f" ({'; '.join(notes)})"
    # The shipped name (<model>.<content hash>.<format>.ocb) is given when the manifest is written.
    line = f"{entry['settings']['platform']}:{entry['name']}: {entry['format']} blob of {size}, {checked}"
    for fallback in entry.get("fallbacks", []):
        if "disabled_optimizers" in fallback:
            done = f"without {', '.join(fallback['disabled_optimizers'])}"
        else:
            done = "with " + ", ".join(f"{k} {v}" for k, v in fallback["used"].items())
        line += f"\n  warning: {entry['name']} cooked {done}: {fallback['why']}"
    return line


def _variant_text(precision: Any) -> str | None:
    """``fp16 against the fp32 source: cosine 0.99999, max abs 0.0025`` for a blob cooked at a lower
    precision (its accuracy rows, the worst output's), else None."""
    if not isinstance(precision, Mapping) or precision.get("precision") in (None, "fp32"):
        return None
    rows = (precision.get("accuracy") or {}).get("outputs") or []
    text = f"{precision['precision']}"
    if rows:
        cosine = min((r["cosine"] for r in rows if r.get("cosine") is not None), default=None)
        worst = max(r.get("max_abs", 0.0) for r in rows)
        shown = f"cosine {cosine:.7g}, " if cosine is not None else ""
        text += f" against the fp32 source: {shown}max abs {worst:.2g}"
    return text


def _why_larger(entry: Mapping[str, Any]) -> str:
    """Why a blob can be larger than its source: what the blob adds, and why compression did not
    make up for it."""
    narrow = entry.get("narrow_weights")
    if narrow is not None and not narrow["kept"]:  # the likeliest cause by far: say it alone
        grown = narrow["widened_bytes"] - narrow["stored_bytes"]
        return (
            f"larger: constant folding stored {_narrow_text(narrow)} as what its casts make of them "
            f"({grown:+,} B); `narrow_weights: keep` stores them as the source does: a smaller blob"
            + (" whose runs cast them" if entry["format"] == "ort" else "")
        )
    added = ["the blob's header and checksums"]
    if (padding := entry.get("padding", 0)) >= 1024:  # an entry cached before the field has none
        added.insert(0, f"{padding:,} B of zeros that put its raw sections on 64 KiB boundaries")
    if entry["format"] == "ort":
        added.append("the ORT format's kernel tables")
    if narrow is not None:  # kept as stored: not float weights, whatever compression made of them
        return f"larger: {' and '.join(added)}"
    larger = f"larger: {' and '.join(added)}"
    if entry["settings"].get("compression", "speed") != "speed":
        return f"{larger}; its weights barely compress"
    if entry["format"] == "ort":  # its graph, weights inside, starts the blob raw at any size
        return f"{larger}; `compression: speed` stores an ORT model raw, to load it in place"
    # an ONNX section stored raw lies on a 64 KiB boundary after the header (an entry cached
    # before `padding` was recorded: judged by the source's size)
    raw = entry["padding"] > 0 if "padding" in entry else entry["source_size"] >= 64 << 10
    if raw:
        return f"{larger}; `compression: speed` stores sections of 64 KiB or more raw, to load in place"
    return larger


def _narrow_text(narrow: Mapping[str, Any]) -> str:
    """E.g. "the model's 38 INT8 weights (22,533,888 B)"."""
    plural = "s" if narrow["tensors"] != 1 else ""
    types = "/".join(narrow["types"])
    return f"the model's {narrow['tensors']} {types} weight{plural} ({narrow['stored_bytes']:,} B)"
