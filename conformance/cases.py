"""The ONNX backend test cases as plain data: model bytes, named inputs, reference outputs, tolerances.

onnx ships its backend tests in two shapes (``onnx/backend/test/loader``): ``node`` cases are built in
memory by the ``expect()`` calls of ``onnx.backend.test.case.node`` (``case.model`` and
``case.data_sets`` set, ``case.model_dir`` None), the other kinds are folders with ``model.onnx`` and
``test_data_set_*/{input,output}_<i>.pb``, read here the way onnx's own runner does
(``Runner._load_proto``: the i-th file has the type of the i-th graph input or output).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.loader import load_model_tests

KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")

# A value fed to or returned by a model: a tensor, a sequence (list) of values, or None (an empty
# optional).
Value = Any


@dataclass(frozen=True)
class DataSet:
    inputs: dict[str, Value]  # by graph input name, in graph order
    outputs: list[Value]  # by position, as the model's graph outputs


@dataclass(frozen=True)
class Case:
    kind: str
    name: str
    model: bytes
    data_sets: tuple[DataSet, ...]
    rtol: float
    atol: float


def load_cases(kinds: Sequence[str] = KINDS) -> list[onnx.backend.test.case.test_case.TestCase]:
    """The loader's test cases of these kinds; node cases already hold their model and data."""
    return [case for kind in kinds for case in load_model_tests(kind=kind)]


def materialize(test_case: Any) -> Case:
    """Model bytes and named data sets of one loader case (reads the folder of a non-node case)."""
    if test_case.model is not None:
        model = test_case.model
        raw_sets = test_case.data_sets
    else:
        model = onnx.load_model(os.path.join(test_case.model_dir, "model.onnx"))
        raw_sets = [_read_data_set(model, folder) for folder in _data_set_folders(test_case.model_dir)]
    names = [value.name for value in model.graph.input]
    data_sets = tuple(
        DataSet(
            inputs={names[i]: to_value(item) for i, item in enumerate(inputs)},
            outputs=[to_value(item) for item in outputs],
        )
        for inputs, outputs in raw_sets
    )
    return Case(
        kind=test_case.kind,
        name=test_case.name,
        model=model.SerializeToString(),
        data_sets=data_sets,
        rtol=test_case.rtol,
        atol=test_case.atol,
    )


def _data_set_folders(model_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(model_dir, "test_data_set_*")))


def _read_data_set(model: onnx.ModelProto, folder: str) -> tuple[list[Value], list[Value]]:
    def read(prefix: str, values: Sequence[onnx.ValueInfoProto]) -> list[Value]:
        count = len(glob.glob(os.path.join(folder, f"{prefix}_*.pb")))
        return [_read_proto(os.path.join(folder, f"{prefix}_{i}.pb"), values[i].type) for i in range(count)]

    return read("input", model.graph.input), read("output", model.graph.output)


def _read_proto(path: str, type_proto: onnx.TypeProto) -> Value:
    with open(path, "rb") as stream:
        data = stream.read()
    kind = type_proto.WhichOneof("value")
    proto = {
        "tensor_type": onnx.TensorProto,
        "sequence_type": onnx.SequenceProto,
        "optional_type": onnx.OptionalProto,
        "map_type": onnx.MapProto,
    }[kind]()
    proto.ParseFromString(data)
    return to_value(proto)


def to_value(item: Any) -> Value:
    """numpy arrays (never 0-d numpy scalars or TensorProtos), lists for sequences, dicts for maps."""
    if isinstance(item, onnx.TensorProto):
        return numpy_helper.to_array(item)
    if isinstance(item, onnx.SequenceProto):
        return [to_value(element) for element in numpy_helper.to_list(item)]
    if isinstance(item, onnx.OptionalProto):
        return to_value(numpy_helper.to_optional(item))
    if isinstance(item, onnx.MapProto):
        return {key: to_value(value) for key, value in numpy_helper.to_dict(item).items()}
    if isinstance(item, list | tuple):
        return [to_value(element) for element in item]
    if item is None or isinstance(item, dict | np.ndarray):
        return item
    return np.asarray(item)
