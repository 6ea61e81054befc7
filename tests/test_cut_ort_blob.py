"""An ORT blob starts with its flatbuffer and ends with a trailer pointing back at its header, so one
cut off at its end no longer says it is a blob. Where its header is still there (the cut fell after
the flatbuffer), both loaders now call it cut off (TruncatedBlobError, OC_ERR_TRUNCATED: re-copy it),
and a blob with bytes added after its trailer corrupt; only a cut inside the flatbuffer, which leaves
a plain (cut) ORT model, is still "not a blob". The same verdict and message from both loaders."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from runtime_helpers import make_blob, to_ort_format

from onnx_cooker.runtime import session_from_blob
from onnx_cooker.runtime.errors import CorruptBlobError, NotABlobError, TruncatedBlobError
from tests.models import tiny_model
from tests.test_native import _probe_blobs, native  # noqa: F401

DAMAGED = "; re-copy the blob file whole, or re-run `onnx-cooker cook`"
VERDICTS = {
    TruncatedBlobError: ("OC_ERR_TRUNCATED", f"blob is cut off at its end: its trailer is missing{DAMAGED}"),
    CorruptBlobError: ("OC_ERR_CORRUPT", f"blob has bytes added after its trailer{DAMAGED}"),
    NotABlobError: ("OC_ERR_NOT_A_BLOB", "an ORT-format model without the cooker's trailer at its end"),
}


def cases(tmp_path: Path) -> list[tuple[str, bytes, type]]:
    blob = make_blob(to_ort_format(tiny_model().SerializeToString(), tmp_path), "ort")
    (header,) = struct.unpack_from("<Q", blob, len(blob) - 8)  # the trailer points at the header
    assert blob[4:8] == b"ORTM" and 0 < header < len(blob)
    return [
        ("inside the flatbuffer", blob[: header - 10], NotABlobError),
        ("in the header frame's magic", blob[: header + 12], NotABlobError),
        ("just after the header's magic", blob[: header + 16], TruncatedBlobError),
        ("inside the header", blob[: header + 200], TruncatedBlobError),
        ("inside the trailer", blob[:-1], TruncatedBlobError),
        ("bytes added", blob + b"\0junk", CorruptBlobError),
    ]


def test_a_cut_off_ort_blob_is_named_cut_off_by_the_python_loader(tmp_path: Path) -> None:
    for where, data, error in cases(tmp_path):
        with pytest.raises(error) as caught:
            session_from_blob(data)
        assert VERDICTS[error][1] in str(caught.value), where


def test_a_cut_off_ort_blob_is_named_cut_off_by_the_c_library(
    native: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    found = cases(tmp_path)
    lines = _probe_blobs(native, tmp_path, [data for _, data, _ in found])
    for (where, _, error), line in zip(found, lines, strict=True):
        status, words = VERDICTS[error]
        assert line["status"] == status and words in line["message"], (where, line)
