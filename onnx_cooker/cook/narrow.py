"""Weights stored narrower than the model computes with them: int8 weights a ``Cast`` turns into
float (a hand-made or exported weight-only quantization: ``Cast`` then ``Mul`` by a scale), float16
weights cast to float32. onnxruntime's ``ConstantFolding`` stores the cast's result, so a cooked model
holds them at the wide type: up to 4x the source's bytes, the quantization's whole saving undone
(docs/design.md, "Weights stored narrow").

``narrow_weights`` finds them in a source; ``keeps_narrow`` is the ``narrow_weights`` setting's
answer for a platform; ``narrow_record`` is what the manifest entry says of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx

from onnx_cooker.cook.facts import onnx_graphs
from onnx_cooker.runtime.constants import ModelFormat
from onnx_cooker.settings.resolve import CookSettings

T = onnx.TensorProto
# Bits per element of the types a Cast can widen (4-bit types are packed two to a byte).
_BITS = {
    T.INT4: 4, T.UINT4: 4, T.FLOAT4E2M1: 4,
    T.INT8: 8, T.UINT8: 8, T.BOOL: 8,
    T.FLOAT8E4M3FN: 8, T.FLOAT8E4M3FNUZ: 8, T.FLOAT8E5M2: 8, T.FLOAT8E5M2FNUZ: 8,
    T.INT16: 16, T.UINT16: 16, T.FLOAT16: 16, T.BFLOAT16: 16,
    T.INT32: 32, T.UINT32: 32, T.FLOAT: 32,
    T.INT64: 64, T.UINT64: 64, T.DOUBLE: 64,
}  # fmt: skip
# Under this many stored bytes in all, narrow weights are left to constant folding either way: the
# folded copies cost little, and folding spares the load the casts.
NARROW_MIN_BYTES = 1 << 20


@dataclass(frozen=True)
class NarrowWeights:
    """The initializers a ``Cast`` widens, in any graph of a model."""

    tensors: int
    types: tuple[str, ...]  # their element types, e.g. ("INT8",)
    stored: int  # their bytes as the source stores them
    widened: int  # their bytes at the types the casts give them


def narrow_weights(model: onnx.ModelProto) -> NarrowWeights | None:
    """The weights that ``Cast`` nodes widen (``NARROW_MIN_BYTES`` of them or more), else None."""
    initializers = {t.name: t for g in onnx_graphs(model.graph) for t in g.initializer}
    found: dict[str, tuple[int, int, int]] = {}  # name -> (type, stored bytes, widened bytes)
    for graph in onnx_graphs(model.graph):
        for node in graph.node:
            if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or not node.input:
                continue
            tensor = initializers.get(node.input[0])
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if tensor is None or to is None or tensor.data_type not in _BITS or to not in _BITS:
                continue
            if _BITS[to] <= _BITS[tensor.data_type]:
                continue
            elements = 1
            for dim in tensor.dims:
                elements *= dim
            stored = (elements * _BITS[tensor.data_type] + 7) // 8
            before = found.get(tensor.name, (tensor.data_type, stored, 0))
            found[tensor.name] = (tensor.data_type, stored, before[2] + elements * _BITS[to] // 8)
    stored = sum(size for _, size, _ in found.values())
    if stored < NARROW_MIN_BYTES:
        return None
    return NarrowWeights(
        tensors=len(found),
        types=tuple(sorted({T.DataType.Name(kind) for kind, _, _ in found.values()})),
        stored=stored,
        widened=sum(wide for _, _, wide in found.values()),
    )


def keeps_narrow(settings: CookSettings) -> bool:
    """Whether the cook stores narrow weights as the source does (``narrow_weights``): ``auto`` keeps
    them in ONNX blobs, whose loader folds them as onnxruntime folds the source's (as fast to run),
    and folds them in ORT blobs, which onnxruntime loads without folding (kept, they are cast at
    every run: twice the run time of a weight-bound model, bench in docs/design.md)."""
    if settings.narrow_weights == "auto":
        return settings.format == ModelFormat.ONNX
    return settings.narrow_weights == "keep"


def folded(narrow: NarrowWeights, source_size: int, cooked_size: int) -> bool:
    """Whether a cooked model of ``cooked_size`` bytes holds the narrow weights folded: it grew by at
    least half of what folding them adds."""
    return cooked_size - source_size >= (narrow.widened - narrow.stored) // 2


def narrow_record(narrow: NarrowWeights, kept: bool) -> dict[str, Any]:
    """The manifest entry's ``narrow_weights``."""
    return {
        "tensors": narrow.tensors,
        "types": list(narrow.types),
        "stored_bytes": narrow.stored,
        "widened_bytes": narrow.widened,
        "kept": kept,
    }
