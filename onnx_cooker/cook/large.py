"""Models over protobuf's 2 GB limit: what the cook hands onnxruntime and the ONNX checker for them.

A ``ModelProto`` holds any amount of weights in memory, but cannot be serialized past 2 GB. Such a
model reaches onnxruntime and the checker as a file saved with its weights as external data, in a
temp folder of the build folder, for as long as they need it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
from onnx import external_data_helper

from onnx_cooker.runtime.constants import TWO_GIB

# protobuf refuses to serialize a message of 2 GiB or more; keep room for the graph itself.
PROTO_LIMIT = TWO_GIB
GRAPH_ROOM = 64 << 20


def tensor_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every tensor the model holds in memory (initializers, attributes, subgraphs)."""
    return sum(tensor.ByteSize() for tensor in external_data_helper._get_all_tensors(model))


def is_large(model: onnx.ModelProto) -> bool:
    """Whether ``model`` is too big to serialize as one protobuf."""
    return tensor_bytes(model) >= PROTO_LIMIT - GRAPH_ROOM


@contextmanager
def session_input(model: onnx.ModelProto, work_dir: Path | None) -> Iterator[bytes | str]:
    """What ``onnxruntime.InferenceSession`` takes for ``model``: its bytes, or (when it is large) the
    path of a copy saved with external data in a temp folder of ``work_dir``, removed afterwards.

    ``model`` is unchanged afterwards (saving moves its weights out; they are read back).
    """
    if not is_large(model):
        yield model.SerializeToString()
        return
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".large-", dir=work_dir) as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save_model(model, str(path), save_as_external_data=True, location="model.onnx.data")
        try:
            yield str(path)
        finally:
            external_data_helper.load_external_data_for_model(model, tmp)
