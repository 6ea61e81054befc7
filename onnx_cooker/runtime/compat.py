"""Which onnxruntime versions can load which models (docs/design.md, "Runtime versions").

Shared by the cooker (static check against a platform's ``runtime_version``) and the loader
(check against the installed onnxruntime before handing it the bytes). Standard library only.
"""

from __future__ import annotations

import functools
import re
import struct

# onnxruntime release -> (newest default-domain opset, newest IR version) it loads.
# Measured per release; a model needs the oldest release whose limits cover it.
RUNTIME_LIMITS: tuple[tuple[tuple[int, int], int, int], ...] = (
    ((1, 16), 19, 9),
    ((1, 17), 20, 9),
    ((1, 20), 21, 10),
    ((1, 22), 22, 10),
    ((1, 24), 25, 13),
    ((1, 28), 26, 13),
    ((1, 32), 28, 14),
)

# ORT format (flatbuffer) version -> oldest onnxruntime that reads it. Version 6 is written since 1.16,
# which is also the oldest release in RUNTIME_LIMITS: older releases are outside what we support.
ORT_FORMAT_MIN_RUNTIME: dict[str, tuple[int, int]] = {"6": (1, 16)}

OLDEST_SUPPORTED: tuple[int, int] = RUNTIME_LIMITS[0][0]
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


@functools.lru_cache(maxsize=256)  # called several times per load with the same few versions
def parse_version(text: str) -> tuple[int, int, int]:
    """``"1.24.4"`` -> ``(1, 24, 4)``; local suffixes such as ``+cu121`` or ``.dev`` are ignored."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise ValueError(f"not a version number: {text!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def format_version(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


def min_runtime_for(*, opset: int, ir_version: int, ort_format_version: str | None) -> tuple[int, int]:
    """Oldest onnxruntime (major, minor) that loads a model with these properties.

    Raises ``ValueError`` when no known release does (opset or IR newer than any listed release,
    or an ORT format version we have no record of).
    """
    needed = OLDEST_SUPPORTED
    for release, max_opset, max_ir in RUNTIME_LIMITS:
        if opset <= max_opset and ir_version <= max_ir:
            needed = release
            break
    else:
        newest = RUNTIME_LIMITS[-1]
        raise ValueError(
            f"opset {opset} / IR {ir_version} is newer than any onnxruntime this cooker knows "
            f"(newest known: {format_version(newest[0])} with opset {newest[1]} / IR {newest[2]})"
        )
    if ort_format_version is not None:
        if ort_format_version not in ORT_FORMAT_MIN_RUNTIME:
            raise ValueError(f"ORT format version {ort_format_version!r} is unknown to this cooker")
        needed = max(needed, ORT_FORMAT_MIN_RUNTIME[ort_format_version])
    return needed


def ort_format_version(model: bytes) -> str | None:
    """The ``ort_version`` string of an ORT-format model, or None when ``model`` is not ORT format.

    Reads the flatbuffer by hand (root table ``InferenceSession``, field 0 a string) so that the
    loader needs no flatbuffers package. Bytes 4-7 of an ORT file are the identifier ``ORTM``.
    """
    if len(model) < 8 or model[4:8] != b"ORTM":
        return None
    try:
        (root,) = struct.unpack_from("<I", model, 0)
        (vtable_delta,) = struct.unpack_from("<i", model, root)
        vtable = root - vtable_delta
        if not 0 <= vtable < len(model) - 2:
            return ""
        (vtable_size,) = struct.unpack_from("<H", model, vtable)
        if vtable_size < 6:
            return ""
        (field_offset,) = struct.unpack_from("<H", model, vtable + 4)
        if field_offset == 0:
            return ""
        string_ref = root + field_offset
        (string_delta,) = struct.unpack_from("<I", model, string_ref)
        (length,) = struct.unpack_from("<I", model, string_ref + string_delta)
        start = string_ref + string_delta + 4
        if length > 64 or start + length > len(model):
            return ""
        return model[start : start + length].decode("ascii", errors="replace")
    except struct.error:
        return ""


# onnxruntime's NOT_IMPLEMENTED for an operator its kernels lack ("Could not find an implementation for
# TensorScatter(24) node with name ''"): the cook's runtime check ran the blob in the platform's own
# onnxruntime, so a loader meeting it runs an older one, or a reduced build without that operator.
_MISSING_KERNEL = re.compile(r"Could not find an implementation for (\S+?\(\d+\)) node")


def missing_kernel(message: str) -> str | None:
    """The operator (``"TensorScatter(24)"``) onnxruntime's error ``message`` has no kernel for, or None."""
    match = _MISSING_KERNEL.search(message)
    return match.group(1) if match else None


_MISSING_ACTION = re.compile(r"Missing action (\S+) for transformer (\S+)")
# An attribute a newer onnxruntime gave one of its own operators (schemas check it in full builds,
# ORT format included): "Unrecognized attribute: weight_prepacked for operator MatMulNBits"
_UNKNOWN_ATTRIBUTE = re.compile(r"Unrecognized attribute: (\S+) for operator (\S+)")


def incompatibility(message: str, name: str, platform: str, installed: str) -> tuple[str, str] | None:
    """What onnxruntime ``installed`` lacks that the blob needs, and what to do (the C loader says the
    same), when its error ``message`` is one an older onnxruntime gives: no kernel for an operator,
    an attribute of an operator it does not know, or no action for a saved runtime optimization that
    a newer one recorded. Else None."""
    if (operator := missing_kernel(message)) is not None:
        return operator, no_kernel_message(operator, name, platform, installed)
    if (match := _UNKNOWN_ATTRIBUTE.search(message)) is not None:
        return match.group(2), (
            f"onnxruntime {installed} does not know attribute {match.group(1)} of operator "
            f"{match.group(2)}, which model '{name}' ({platform}) uses: it is older than the onnxruntime the "
            "platform ships; load it with the platform's onnxruntime (its runtime_version), or cook a "
            f"platform for onnxruntime {installed}"
        )
    if (match := _MISSING_ACTION.search(message)) is None:
        return None
    return match.group(1), (
        f"onnxruntime {installed} cannot replay the saved runtime optimizations of model '{name}' "
        f"({platform}): it has no action {match.group(1)} for {match.group(2)}, which the onnxruntime that "
        "cooked the model recorded; it is older than the onnxruntime the platform ships: load it with the "
        "platform's onnxruntime (its runtime_version), or cook a platform for onnxruntime "
        f"{installed} (optimization_style: fixed needs no replay)"
    )


def no_kernel_message(operator: str, name: str, platform: str, installed: str) -> str:
    """What to do about a blob this onnxruntime has no kernel for (the C loader says the same)."""
    return (
        f"onnxruntime {installed} has no kernel for {operator} (model '{name}', {platform}): it is older "
        "than the onnxruntime the platform ships, or a reduced build without that operator; load it with the "
        "platform's onnxruntime (its runtime_version), rebuild the reduced onnxruntime with the platform's "
        f"required_operators.config (docs/reduced-builds.md), or cook a platform for onnxruntime {installed}"
    )
