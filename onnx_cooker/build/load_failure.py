"""What the runtime check says of a blob the platform's own onnxruntime cannot load (the worker,
onnx_cooker/build/target_check_worker.py, in the target's environment: standard library and the loader
only). The loader's words assume an onnxruntime older than the platform's; here it is the platform's,
so the fix is the cook's or the platform file's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import onnxruntime

from onnx_cooker.runtime import BundleError
from onnx_cooker.settings.advice import onnx_instead_for

# An attribute of an operator this onnxruntime does not know: the loader's words, or onnxruntime's own
_UNKNOWN_ATTRIBUTE = re.compile(
    r"(?:does not know attribute|Unrecognized attribute:) (\S+) (?:of|for) operator (\w+)"
)


def cannot_load(
    exc: BundleError, model_format: str | None, platform: str, name: str, settings: Mapping[str, Any]
) -> str:
    """The failure of model ``name``'s load in the platform's onnxruntime, with its fix."""
    version = onnxruntime.__version__
    skip = f"or `skip_platforms: [{platform}]` in {name}.cook.yaml"
    if (attribute := _UNKNOWN_ATTRIBUTE.search(str(exc))) is not None:
        # the cook's newer onnxruntime writes attributes of its own operators (MatMulNBits'
        # weight_prepacked from 1.32): in an ONNX graph the cook drops those at their defaults
        fix = (
            f"cook it as ONNX for this platform ({onnx_instead_for(platform, settings)}), where the cook "
            "drops such attributes at their defaults"
            if model_format == "ort"
            else "the cook drops such attributes at their defaults, so the source or the cook's "
            "onnxruntime set this one otherwise: export the model without it"
        )
        return (
            f"cannot load: onnxruntime {version}, the platform's runtime_version, does not know attribute "
            f"{attribute.group(1)} of operator {attribute.group(2)}: {fix}, raise runtime_version if the "
            f"target ships a newer onnxruntime, {skip}"
        )
    operator = getattr(exc, "operator", None)  # IncompatibleRuntimeError's
    if operator is not None and f"has no kernel for {operator}" in str(exc):
        return (
            f"cannot load: onnxruntime {version}, the platform's runtime_version, has no kernel for "
            f"{operator}: raise runtime_version if the target ships a newer onnxruntime, export the model "
            f"without that operator, {skip}"
        )
    return f"cannot load: {exc}"
