"""How an ORT-format blob reaches onnxruntime (``ort-mapped``, ``ort-shared-initializers``,
``ort-file``, ``ort-bytes``: loadpaths.py has the table), and the copying door behind the in-place ones.

``session.use_ort_model_bytes_for_initializers`` makes onnxruntime use every tensor of 128 bytes or
more where it lies in the flatbuffer, tensor *attributes* too (``LoadAttributeOrtFormat`` calls the
initializer loader), and its graph check then refuses those: "Data of TensorProto ( tensor name: m)
should be stored in */_ORT_MEM_ADDR_/*, but it is not regular file" (measured in 1.24.4 from bytes,
1.28.0 and 1.32.0 from bytes and mapped: a LightGBM model's ``TreeEnsemble`` 5, whose splits and leaf
weights are tensor attributes; ``LabelEncoder`` 4's keys and values). Such a model loads along
``ort-file`` instead, the same options with that entry set to 0 (a later entry replaces an earlier
one, in each of those versions): onnxruntime copies its tensors.
"""

from __future__ import annotations

import os
from dataclasses import replace

import onnxruntime

from .blob import CheckedBlob
from .files import memfd_with
from .loadtypes import BlobFile, LoadPath, Prepared
from .ortweights import share_weights

ORT_FORMAT_KEY = "session.load_model_format"
BYTES_FOR_INITIALIZERS = "session.use_ort_model_bytes_for_initializers"
# in onnxruntime's refusal of a tensor attribute the flatbuffer's bytes were to be used for
MEMORY_TENSOR_REFUSAL = "_ORT_MEM_ADDR_"


def leading_graph(checked: CheckedBlob, model_file: BlobFile | None) -> bool:
    """Whether the blob file's model (its flatbuffer) starts the file, where onnxruntime can map it."""
    frames = checked.frames("graph")
    return model_file is not None and checked.extent("graph") is not None and frames[0].offset == 0


def prepare_ort(
    path: LoadPath, checked: CheckedBlob, options: onnxruntime.SessionOptions, model_file: BlobFile | None
) -> Prepared:
    """Set up ``options`` (and the model argument) for loading an ORT-format blob along ``path``."""
    if path == LoadPath.ORT_BYTES:
        return Prepared(checked.graph_bytes())
    options.add_session_config_entry(ORT_FORMAT_KEY, "ORT")
    if not leading_graph(checked, model_file):
        model_file = None  # not onnxruntime's to open: the model goes in a memfd
    if path == LoadPath.ORT_FILE:
        return _file_or_memfd(checked, model_file, mapped=False)
    options.add_session_config_entry("session.use_memory_mapped_ort_model", "1")
    options.add_session_config_entry(BYTES_FOR_INITIALIZERS, "1")

    def copying(why: str) -> Prepared | None:
        if MEMORY_TENSOR_REFUSAL not in why:
            return None  # another failure: the copying door would meet it too
        options.add_session_config_entry(BYTES_FOR_INITIALIZERS, "0")
        return replace(_file_or_memfd(checked, model_file, mapped=False), path=LoadPath.ORT_FILE)

    if path == LoadPath.ORT_SHARED_INITIALIZERS:
        extent = checked.extent("graph")
        assert extent is not None
        shared = share_weights(extent, options)
        if shared is None:  # no weight worth sharing: the whole model into the memfd
            return replace(_whole_memfd(checked), path=LoadPath.ORT_MAPPED, fallback=copying)

        def unshared(why: str) -> Prepared | None:
            # the same options, the memfd whole: whatever reads the graph's copy reads the weights
            # (the options keep the shared values: the session uses them, so they stay kept)
            whole = copying(why) or replace(_whole_memfd(checked), path=LoadPath.ORT_MAPPED)
            return replace(whole, keep=shared.keep)

        return Prepared(
            f"/proc/self/fd/{shared.fd}",
            keep=shared.keep,
            cleanup=[lambda: os.close(shared.fd)],
            fallback=unshared,
            distrust=shared.holes_read,
        )
    return replace(_file_or_memfd(checked, model_file, mapped=True), fallback=copying)


def _file_or_memfd(checked: CheckedBlob, model_file: BlobFile | None, *, mapped: bool) -> Prepared:
    """The blob file itself, whose flatbuffer starts it (``mapped``: onnxruntime maps it for the whole
    session), else (None) the model in a sealed memfd."""
    if model_file is None:
        return _whole_memfd(checked)
    checked.release()  # onnxruntime maps or reads the blob file itself: ours would count its pages twice
    return Prepared(model_file.onnxruntime_path(), mapped_fd=model_file.fd if mapped else None)


def _whole_memfd(checked: CheckedBlob) -> Prepared:
    fd = memfd_with(checked)
    return Prepared(f"/proc/self/fd/{fd}", cleanup=[lambda: os.close(fd)])
