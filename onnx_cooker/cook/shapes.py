"""Fix symbolic dimensions or whole input shapes before optimization (per model, per platform).

NNAPI and CoreML take far more of a model whose shapes are fixed; onnxruntime's own
``onnx_model_utils`` helpers do the rewriting.
"""

from __future__ import annotations

import onnx

from onnx_cooker.errors import ModelError
from onnx_cooker.settings.resolve import CookSettings


def fix_shapes(model: onnx.ModelProto, settings: CookSettings) -> bool:
    """Apply the settings' ``fixed_dims`` and ``fixed_shapes`` to ``model``; True if anything was set.

    A dim name the model does not use is ignored (platform-wide settings name dims of some models
    only); an input name it does not have is an error.
    """
    if not settings.fixed_dims and not settings.fixed_shapes:
        return False
    from onnxruntime.tools import onnx_model_utils  # imports torch when installed: only when used

    for name, size in settings.fixed_dims:
        onnx_model_utils.make_dim_param_fixed(model.graph, name, size)
    for input_name, shape in settings.fixed_shapes:
        try:
            onnx_model_utils.make_input_shape_fixed(model.graph, input_name, list(shape))
        except ValueError as exc:
            raise ModelError(f"fixed_shapes.{input_name}: {exc}; fix the model's .cook.yaml") from None
    try:
        onnx_model_utils.fix_output_shapes(model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ModelError(
            f"the fixed shapes do not fit the model: {exc}; fix the model's .cook.yaml"
        ) from None
    return True
