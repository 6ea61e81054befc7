"""A source whose outputs are random at every run by mistake: a Dropout left in training mode, as
``torch.onnx.export(dynamo=True)`` writes it for a module not put in ``eval()`` (the classic exporter
forces eval mode). Its outputs differ between any two sessions, so the verification could only fail
(or, where onnxruntime's seed happens to line the draws up, pass on one machine and fail the
runtime check on the next) and its advice would be a tolerance that accepts anything. Refused
before the source runs, with the node and the fix."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_cooker.cook.facts import onnx_graphs
from onnx_cooker.cook.job import CookJob
from onnx_cooker.errors import ModelError


def training_dropouts(model: onnx.ModelProto) -> list[str]:
    """The Dropout nodes (opset 12+, in any graph) whose ``training_mode`` is a constant true and whose
    ratio is not a constant 0: each run zeroes a random part of its input."""
    found = []
    for graph in onnx_graphs(model.graph):
        dropouts = [
            node
            for node in graph.node
            if node.op_type == "Dropout" and node.domain in ("", "ai.onnx") and len(node.input) >= 3
        ]
        constants = _constants(graph) if dropouts else {}  # most graphs have none: nothing converted
        for node in dropouts:
            mode = constants.get(node.input[2])
            if mode is None or not bool(mode.reshape(-1)[0]):
                continue
            ratio = constants.get(node.input[1]) if node.input[1] else None
            if ratio is not None and float(ratio.reshape(-1)[0]) == 0.0:
                continue  # keeps every value, scaled by 1: the identity
            found.append(node.name or f"{node.op_type} -> {node.output[0]}")
    return found


def refuse_training_dropout(job: CookJob, model: onnx.ModelProto) -> None:
    """Raise the ModelError that names a source's training-mode Dropouts and the fix, if it has any."""
    nodes = training_dropouts(model)
    if not nodes:
        return
    more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
    named = ", ".join(repr(name) for name in nodes[:3]) + more
    where = job.asset.settings_path or job.asset.path.with_suffix(".cook.yaml")
    raise ModelError(
        f"the source runs Dropout in training mode ({named}: its training_mode input is a constant "
        "true), so every run zeroes a random part of the activations and no two runs agree: what "
        "torch.onnx.export(dynamo=True) writes for a module not in eval mode. Export it again after "
        "`model.eval()`; if the randomness is meant (Monte Carlo dropout), set `verify: false` in "
        f"{where} (nothing can verify random outputs)"
    )


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The graph's one-value initializers and Constant nodes, by name."""
    found: dict[str, np.ndarray] = {}
    for tensor in graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL and math.prod(tensor.dims) == 1:
            found[tensor.name] = numpy_helper.to_array(tensor)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attribute in node.attribute:
                if attribute.name == "value" and math.prod(attribute.t.dims) == 1:
                    found[node.output[0]] = numpy_helper.to_array(attribute.t)
    return found
