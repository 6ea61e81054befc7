"""onnxruntime's generated ORT-format (flatbuffers) reader, ``fbs``, without importing
``onnxruntime.tools``: that package's ``__init__`` imports torch when it is installed (1.3 s in every
cook process), and the reader needs none of it. ``onnxruntime.tools.ort_format_model`` itself only
puts its folder on ``sys.path`` for ``ort_flatbuffers_py``; this does the same.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _schema_folder() -> str:
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("onnxruntime is not installed")
    return str(Path(next(iter(spec.submodule_search_locations))) / "tools" / "ort_format_model")


if _schema_folder() not in sys.path:
    sys.path.append(_schema_folder())

import ort_flatbuffers_py.fbs as fbs  # noqa: E402

__all__ = ["fbs"]
