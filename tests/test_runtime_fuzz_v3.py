"""Blob format 3 against hostile bytes: damage anywhere, headers that lie about extents (outside the
blob, overlapping each other or the header, misaligned, a trailer pointing anywhere), declared sizes
that would allocate without bound. Whatever the bytes, only BundleError comes out, from memory and
from a mapped file (Bundle.session); what loads computes what the original computes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from runtime_helpers import (
    CPU,
    HEADER_DEFAULTS,
    make_weighted_blob,
    mutate,
    peak_allocation,
    repack,
    sample_input,
    to_ort_format,
    write_bundle,
)

from onnx_cooker.runtime import BundleError, open_bundle, session_from_blob, unpack_blob
from onnx_cooker.runtime.errors import (
    BlobTooLargeError,
    ChecksumMismatchError,
    CorruptBlobError,
    TruncatedBlobError,
)
from onnx_cooker.runtime.frames import crc_count
from onnx_cooker.runtime.header import TRAILER_MAGIC, read_header
from onnx_cooker.runtime.sections import EXTENT_ALIGNMENT
from onnx_cooker.runtime.writer import encode_blob
from tests.models import dense_model
from tests.test_runtime_fuzz import mutations  # the v2 suite's damage: flip, insert, delete, cut

FUZZ = settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
KINDS = ("onnx-raw", "onnx-zstd", "ort-raw", "ort-zstd")


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, np.ndarray, np.ndarray]]:
    """kind -> (blob, input, expected output): ONNX with a raw or zstd weights section, ORT with
    its graph raw (first in the blob) or zstd."""
    model = dense_model(16, 8, batch=None, seed=0, activation="Relu", name="net")
    dense = dense_model(64, 512, batch=None, seed=1, activation="Relu", name="wide")
    x8, x64 = sample_input(), np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    import onnxruntime

    def run(m: Any, x: np.ndarray) -> np.ndarray:
        return onnxruntime.InferenceSession(m.SerializeToString(), providers=CPU).run(None, {"x": x})[0]

    found = {}
    for codec in ("raw", "zstd"):
        blob = make_weighted_blob(dense, codec, name="wide")[0]
        found[f"onnx-{codec}"] = (blob, x64, run(dense, x64))
    ort = to_ort_format(model.SerializeToString(), tmp_path_factory.mktemp("ort"))
    for codec in ("raw", "zstd"):
        blob = encode_blob(ort, level=3, graph_codec=codec, model_format="ort", **HEADER_DEFAULTS)
        found[f"ort-{codec}"] = (blob, x8, run(model, x8))
    assert read_header(found["ort-raw"][0])[0].frames[0].offset == 0
    return found


def event(text: str) -> None:
    try:
        hypothesis_event(text)
    except InvalidArgument:  # called from a plain (parametrized) test
        pass


def check(blob: bytes, original: tuple[bytes, np.ndarray, np.ndarray], folder: Path | None = None) -> None:
    """Only BundleError; a session that is made computes the original's outputs or the blob's
    checked bytes are not the original's (then it must not have loaded)."""
    _, x, expected = original
    for source in ("memory", "file"):
        try:
            if source == "memory":
                session = session_from_blob(blob, providers=CPU)
            else:
                if folder is None:
                    continue
                root = write_bundle(folder / "bundle", {"net": ("onnx", blob)})
                session = open_bundle(root, verify=False).session("net", providers=CPU)
        except BundleError as exc:
            event(f"{source}: {type(exc).__name__}")
            continue
        event(f"{source}: loaded")
        try:
            got = session.run(None, {"x": x})[0]
        except Exception:  # noqa: BLE001  onnxruntime's run error on a graph that loaded
            event(f"{source}: loaded a graph that does not run")
            continue
        if unpack_blob(blob).model == unpack_blob(original[0]).model:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@FUZZ
@given(kind=st.sampled_from(KINDS), steps=mutations)
def test_mutated_v3_blobs_raise_only_bundle_errors(kind: str, steps: list, originals: dict) -> None:
    check(mutate(originals[kind][0], steps), originals[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_v3_blobs_from_a_mapped_file_raise_only_bundle_errors(
    kind: str, originals: dict, tmp_path: Path
) -> None:
    """The same through Bundle.session (the blob file mapped), on a fixed set of damage."""
    blob = originals[kind][0]
    for index, where in enumerate((0.0, 0.001, 0.3, 0.5, 0.9, 0.99, 0.9999)):
        for kind_of in ("flip", "truncate", "insert"):
            check(mutate(blob, [(kind_of, where, 0x40)]), originals[kind], tmp_path / f"{index}-{kind_of}")


def _fields(blob: bytes) -> dict[str, Any]:
    return json.loads(json.dumps(read_header(blob)[0].to_dict()))


def _rebuilt(blob: bytes, fields: dict[str, Any]) -> bytes:
    """``blob`` with a header frame of ``fields`` (same place, CRC right): padded to its old length
    where it fits, else grown by whole extent alignments, the frames behind it moved along."""
    return repack(blob, **fields)


entries = st.lists(
    st.tuples(
        st.sampled_from(["graph", "weights", "other"]),
        st.sampled_from(["raw", "zstd", "x"]),
        st.integers(0, 2**40) | st.integers(0, 1 << 17),
        st.integers(0, 2**40) | st.integers(0, 1 << 17),
        st.integers(0, 2**40) | st.integers(0, 1 << 17),
        st.integers(0, 1 << 17),
    ),
    max_size=4,
)


@FUZZ
@given(kind=st.sampled_from(KINDS), frames=entries, crcs=st.lists(st.integers(0, 2**33), max_size=3))
def test_v3_frame_lists_of_any_value_raise_only_bundle_errors(
    kind: str, frames: list, crcs: list, originals: dict
) -> None:
    blob = originals[kind][0]
    fields = _fields(blob)
    fields["frames"] = [[*f, crcs] if f[1] == "raw" else list(f) for f in frames]
    error, peak = peak_allocation(lambda: check(_rebuilt(blob, fields), originals[kind]))
    assert error is None, error
    assert peak < 64 << 20  # nothing sized from the lie


@pytest.mark.parametrize("kind", ["onnx-raw", "ort-raw"])
@pytest.mark.parametrize(
    "lie",
    [
        "outside",
        "overlaps-header",
        "misaligned",
        "padding-too-big",
        "two-raw-extents",
        "zstd-after-raw",
        "gap",
        "trailer-elsewhere",
        "no-trailer",
    ],
)
def test_lying_extents_are_refused(kind: str, lie: str, originals: dict) -> None:
    blob = originals[kind][0]
    fields = _fields(blob)
    frames = fields["frames"]
    raw = next(f for f in frames if f[1] == "raw")
    if lie == "outside":
        raw[3] += 1 << 30
        raw[4] += 1 << 30
    elif lie == "overlaps-header":
        raw[2] -= EXTENT_ALIGNMENT if raw[2] else -1
    elif lie == "misaligned":
        raw[2] += 1
        raw[3] -= 1
        raw[5] -= 1
    elif lie == "padding-too-big":
        raw[5] += EXTENT_ALIGNMENT
        raw[3] += EXTENT_ALIGNMENT
    elif lie == "two-raw-extents":
        frames.append([raw[0], "raw", raw[2] + raw[3], 0, 0, 0, []])
    elif lie == "zstd-after-raw":
        frames.append([raw[0], "zstd", raw[2] + raw[3], 9, 1, 0])
    elif lie == "gap":
        frames[-1][2] += 1
    if lie in ("trailer-elsewhere", "no-trailer"):
        start = struct.unpack_from("<Q", blob, len(blob) - 8)[0]
        tail = b"" if lie == "no-trailer" else struct.pack("<8sQ", TRAILER_MAGIC, start + 3)
        crafted = blob[:-16] + tail
    else:
        crafted = _rebuilt(blob, fields)
    with pytest.raises((CorruptBlobError, TruncatedBlobError, BundleError)) as caught:
        session_from_blob(crafted, providers=CPU)
    assert isinstance(caught.value, BundleError)
    with pytest.raises(BundleError):
        unpack_blob(crafted)


def test_a_nonzero_byte_in_a_raw_extents_padding_is_damage(originals: dict) -> None:
    """The padding before an aligned raw extent must be zeros: any other byte, at either end of it,
    is refused as damage (the check compares against zeros: a mutation that skipped it fails)."""
    blob = originals["onnx-raw"][0]
    frame = next(f for f in read_header(blob)[0].frames if f.codec == "raw" and f.pad)
    for at in (frame.offset + frame.prefix, frame.data_offset - 1):
        damaged = bytearray(blob)
        damaged[at] = 0x40
        with pytest.raises(ChecksumMismatchError, match="damaged padding"):
            session_from_blob(bytes(damaged), providers=CPU)


@FUZZ
@given(
    kind=st.sampled_from(KINDS),
    extra=st.integers(0, 2**44) | st.integers(0, 1 << 20),
    limit=st.integers(0, 2**45) | st.integers(0, 1 << 21),
)
def test_v3_declared_sizes_never_allocate_more_than_the_limit(
    kind: str, extra: int, limit: int, originals: dict
) -> None:
    """A header declaring more content than its extents hold: refused over the limit before
    anything is allocated, else by the layout, before any buffer is sized from the header."""
    assume(extra)
    blob = originals[kind][0]
    fields = _fields(blob)
    section = "weights" if kind.startswith("onnx") else "graph"
    fields["model_size"] += extra
    if section == "graph":
        fields["graph_size"] += extra
    else:
        fields["weights"]["size"] += extra
    last = [f for f in fields["frames"] if f[0] == section][-1]
    last[4] += extra
    if last[1] == "raw":  # its CRC-32 list grows with it, so that only the sizes lie
        last[3] += extra
        last[6] = last[6] + [0] * (crc_count(last[4]) - len(last[6]))
    fields["compressed_size"] = sum(f[3] for f in fields["frames"])
    crafted = _rebuilt(blob, fields)
    error, peak = peak_allocation(lambda: session_from_blob(crafted, providers=CPU, max_model_size=limit))
    assert isinstance(error, BundleError), error
    # (A leading ORT graph cannot grow consistently: the header sits where it ends.)
    if fields["model_size"] > limit and kind != "ort-raw":
        assert isinstance(error, BlobTooLargeError), error
    assert peak < (1 << 20) + 2 * len(blob) + 24 * crc_count(extra)
