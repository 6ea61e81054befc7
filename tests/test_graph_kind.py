"""A blob's header names its model format, and onnxruntime reads any model with ``ORTM`` at bytes 4-7
as an ORT one: a header that says otherwise (a writer's bug, or bytes made to look like a blob) is
refused by both loaders before the graph goes anywhere, raw or zstd; the C library did, through
onnxruntime's flatbuffer verifier, for ORT headers only, and the Python loader loaded both. A damaged
blob whose damage makes the same mismatch still gets the damage's message."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from runtime_helpers import make_blob, to_ort_format

from onnx_cooker.runtime import session_from_blob, unpack_blob
from onnx_cooker.runtime.errors import ChecksumMismatchError, CorruptBlobError
from tests.models import tiny_model
from tests.test_native import _probe_blobs, native  # noqa: F401

CPU = ["CPUExecutionProvider"]
SAYS_ORT = "its header says ORT format, but its graph is not an ORT model"
SAYS_ONNX = "its header says ONNX format, but its graph is an ORT-format model"


def mismatched(tmp_path: Path) -> list[tuple[bytes, str]]:
    """(blob, the refusal's words): each format's graph under the other's header, raw and zstd."""
    onnx_model = tiny_model().SerializeToString()
    ort_model = to_ort_format(onnx_model, tmp_path)
    return [
        (make_blob(model, said, graph_codec=codec, **extra), words)
        for model, said, extra, words in (
            (onnx_model, "ort", {"ort_format_version": "5"}, SAYS_ORT),
            (ort_model, "onnx", {}, SAYS_ONNX),
        )
        for codec in ("raw", "zstd")
    ]


def test_a_header_naming_the_other_format_is_refused_by_the_python_loader(tmp_path: Path) -> None:
    for blob, words in mismatched(tmp_path):
        for load in (functools.partial(session_from_blob, providers=CPU), unpack_blob):
            with pytest.raises(CorruptBlobError) as caught:
                load(blob)
            assert f"blob of model 'tiny' (test-platform): {words}" in str(caught.value)
            assert str(caught.value).endswith("re-run `onnx-cooker cook`")


def test_a_header_naming_the_other_format_is_refused_by_the_c_library(
    native: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    cases = mismatched(tmp_path)
    lines = _probe_blobs(native, tmp_path, [blob for blob, _ in cases])
    for (_, words), line in zip(cases, lines, strict=True):
        assert line["status"] == "OC_ERR_CORRUPT", line
        assert f"blob of model 'tiny' (test-platform): {words}" in line["message"], line


def test_damage_that_hides_the_ort_identifier_is_named_as_damage(
    native: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    ort_model = to_ort_format(tiny_model().SerializeToString(), tmp_path)
    blob = bytearray(make_blob(ort_model, "ort"))
    assert blob[4:8] == b"ORTM"  # a raw ORT graph leads the blob
    blob[5] ^= 0x20
    with pytest.raises(ChecksumMismatchError, match="graph frame 1 of 1 is damaged"):
        session_from_blob(bytes(blob), providers=CPU)
    (line,) = _probe_blobs(native, tmp_path, [bytes(blob)])
    assert line["status"] == "OC_ERR_CHECKSUM", line
