"""External weights (part of step 5 of a cook): an ONNX model's big initializers move out of the graph
into the blob's weights section, where the loader hands them to onnxruntime without copying.

The graph keeps standard ONNX external-data references (``location`` = ``<stem>.onnx.data``, offset,
length), so a blob unpacked with stock tools is a model file plus its data file that onnxruntime
loads from disk as usual.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import onnx
from onnx import numpy_helper

from onnx_cooker.runtime.constants import ModelFormat
from onnx_cooker.runtime.sections import TENSOR_DTYPES, WEIGHT_ALIGNMENT, TensorRef
from onnx_cooker.runtime.writer import Weights
from onnx_cooker.settings.resolve import CookSettings

# Initializers smaller than this stay in the graph (shapes, axes, scales: cheaper inline).
MIN_EXTERNAL_TENSOR = 1 << 10
# With `weights: auto`, a model goes external once its movable initializers reach this much.
AUTO_EXTERNAL_BYTES = 1 << 20
_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


def data_file_name(model_name: str) -> str:
    """The weights file a blob of ``model_name`` unpacks to, as its graph refers to it."""
    return f"{PurePosixPath(model_name).name}.onnx.data"


def movable(tensor: onnx.TensorProto) -> int:
    """Bytes ``tensor`` would move to the weights section, or 0 if it stays in the graph."""
    if tensor.data_type not in TENSOR_DTYPES or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return 0
    size = numpy_helper.to_array(tensor).nbytes if not tensor.HasField("raw_data") else len(tensor.raw_data)
    return size if size >= MIN_EXTERNAL_TENSOR else 0


def wants_external(settings: CookSettings, model: onnx.ModelProto) -> bool:
    """Whether this cook stores the model's weights in a separate section (ONNX format only)."""
    if settings.format != ModelFormat.ONNX or settings.weights == "inline":
        return False
    if settings.weights == "external":
        return True
    return sum(movable(t) for t in model.graph.initializer) >= AUTO_EXTERNAL_BYTES


def externalize(model: onnx.ModelProto, model_name: str) -> tuple[bytes, Weights]:
    """The graph with its big main-graph initializers referring to external data, and those weights.

    Tensors are laid out in graph order, each at a WEIGHT_ALIGNMENT-byte offset. Subgraph
    initializers stay inline (onnxruntime injects external initializers into the main graph only).
    """
    file = data_file_name(model_name)
    pieces: list[bytes] = []
    tensors: list[TensorRef] = []
    offset = 0
    for tensor in model.graph.initializer:
        if not movable(tensor):
            continue
        data = numpy_helper.to_array(tensor)
        raw = data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes()
        pad = -offset % WEIGHT_ALIGNMENT
        pieces.extend((bytes(pad), raw))
        offset += pad
        tensors.append(TensorRef(tensor.name, tensor.data_type, tuple(tensor.dims), offset, len(raw)))
        for name in _DATA_FIELDS:
            tensor.ClearField(name)
        del tensor.external_data[:]
        for key, value in (("location", file), ("offset", offset), ("length", len(raw))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        offset += len(raw)
    return model.SerializeToString(), Weights(data=b"".join(pieces), file=file, tensors=tuple(tensors))
