"""The blob format (pipeline/runtime/blob.py): layout, stock-tool compatibility, every failure mode."""

from __future__ import annotations

import json
import random
import re
import struct
import subprocess
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_helpers import (
    CPU,
    make_blob,
    mutate,
    pack_header,
    repack,
    run_source,
    sample_input,
    sha256,
    split_blob,
)

from pipeline.runtime import compat
from pipeline.runtime.blob import (
    BLOB_FORMAT_VERSION,
    HEADER_MAGIC,
    SKIPPABLE_MAGIC,
    BlobHeader,
    decode_blob,
    read_header,
)
from pipeline.runtime.errors import (
    BlobTooLargeError,
    BundleError,
    ChecksumMismatchError,
    CorruptBlobError,
    IncompatibleRuntimeError,
    NotABlobError,
    TruncatedBlobError,
    UnsupportedBlobVersionError,
)
from pipeline.runtime.session import session_from_blob

FORMATS = ("onnx", "ort")
ZSTD_FRAME_MAGIC = 0xFD2FB528


@pytest.fixture(scope="module")
def blobs(models: dict[str, bytes]) -> dict[str, bytes]:
    return {fmt: make_blob(model, fmt) for fmt, model in models.items()}


@pytest.fixture(scope="module")
def expected(source: bytes) -> np.ndarray:
    return run_source(source, sample_input())


# --- the happy path -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_returns_identical_bytes_and_header(fmt: str, models: dict[str, bytes]) -> None:
    model = models[fmt]
    blob = make_blob(model, fmt, name="denoiser", cook_key="ab" * 32, platform="android")

    header, decoded = decode_blob(blob)

    assert decoded == model
    assert header == read_header(blob)[0]
    assert header.model_format == fmt
    assert (header.name, header.platform, header.cook_key) == ("denoiser", "android", "ab" * 32)
    assert header.min_runtime_version == "1.16"
    assert header.model_size == len(model)
    assert header.model_sha256 == sha256(model)
    assert header.compressed_size == len(blob) - read_header(blob)[1]
    assert header.ort_format_version == compat.ort_format_version(model)
    # The loader takes any bytes-like object, not only bytes.
    assert decode_blob(memoryview(blob))[1] == model
    assert decode_blob(bytearray(blob))[1] == model


@pytest.mark.parametrize("fmt", FORMATS)
def test_header_to_dict_round_trips_through_json(fmt: str, blobs: dict[str, bytes]) -> None:
    header, _ = read_header(blobs[fmt])
    fields = json.loads(json.dumps(header.to_dict()))
    fields["execution_providers"] = tuple(fields["execution_providers"])
    assert BlobHeader(**fields) == header


def test_byte_layout_matches_the_documented_format(models: dict[str, bytes]) -> None:
    model = models["onnx"]
    blob = make_blob(model, "onnx")

    magic, frame_size = struct.unpack_from("<II", blob, 0)
    header_magic, version, crc = struct.unpack_from("<8sHI", blob, 8)
    payload = blob[22 : 8 + frame_size]
    frame = blob[8 + frame_size :]

    assert magic == SKIPPABLE_MAGIC == 0x184D2A5E
    assert header_magic == HEADER_MAGIC == b"ONNXCOOK"
    assert version == BLOB_FORMAT_VERSION == 1
    assert crc == zlib.crc32(payload)
    assert json.loads(payload)["model_sha256"] == sha256(model)
    assert struct.unpack_from("<I", frame, 0)[0] == ZSTD_FRAME_MAGIC
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == len(model)
    assert params.has_checksum


@pytest.mark.parametrize("fmt", FORMATS)
def test_stock_zstd_cli_skips_the_header_and_writes_the_model(
    fmt: str, blobs: dict[str, bytes], models: dict[str, bytes], tmp_path: Path
) -> None:
    packed = tmp_path / f"model.{fmt}.zst"
    packed.write_bytes(blobs[fmt])
    out = tmp_path / f"model.{fmt}"

    result = subprocess.run(
        ["zstd", "-d", "-q", str(packed), "-o", str(out)], capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == models[fmt]


def test_ort_format_version_agrees_with_onnxruntimes_flatbuffer_reader(models: dict[str, bytes]) -> None:
    import onnxruntime.tools.ort_format_model  # noqa: F401  (puts ort_flatbuffers_py on sys.path)
    import ort_flatbuffers_py.fbs as fbs

    ort_model = models["ort"]
    theirs = fbs.InferenceSession.InferenceSession.GetRootAsInferenceSession(ort_model, 0).OrtVersion()

    ours = compat.ort_format_version(ort_model)

    assert ours is not None and ours.isdigit()
    assert ours == theirs.decode()
    assert ours in compat.ORT_FORMAT_MIN_RUNTIME
    assert compat.ort_format_version(models["onnx"]) is None
    # Cut-off ORT data is recognised as ORT but yields no version rather than an exception.
    assert compat.ort_format_version(ort_model[:12]) == ""


# --- one crafted blob per failure -----------------------------------------------------------------


def flip(data: bytes, index: int, mask: int = 0x01) -> bytes:
    mutable = bytearray(data)
    mutable[index] ^= mask
    return bytes(mutable)


def header_end(blob: bytes) -> int:
    return read_header(blob)[1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_plain_model_bytes_are_not_a_blob(fmt: str, models: dict[str, bytes]) -> None:
    with pytest.raises(NotABlobError, match=r"does not start with the header frame .*plain \.onnx/\.ort"):
        decode_blob(models[fmt])


def test_random_bytes_are_not_a_blob() -> None:
    data = random.Random(7).randbytes(4096)
    assert struct.unpack_from("<I", data)[0] != SKIPPABLE_MAGIC
    with pytest.raises(NotABlobError, match="not an onnx-cooker blob"):
        decode_blob(data)


def test_plain_zstd_file_is_not_a_blob(models: dict[str, bytes]) -> None:
    with pytest.raises(NotABlobError, match="does not start with the header frame"):
        decode_blob(zstandard.ZstdCompressor().compress(models["onnx"]))


def test_another_tools_skippable_frame_is_not_a_blob() -> None:
    foreign = struct.pack("<II", SKIPPABLE_MAGIC, 16) + b"SOMEOTHERTOOL..."
    with pytest.raises(NotABlobError, match="first zstd frame is not an onnx-cooker header"):
        decode_blob(foreign)


def test_too_short_for_a_header_is_not_a_blob() -> None:
    with pytest.raises(NotABlobError, match="too short to hold a header"):
        decode_blob(b"ONNX")


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (3, r"only 3 bytes long: the header is cut off"),
        (8, r"header alone needs \d+: file cut off"),
        (40, r"header alone needs \d+: file cut off"),
    ],
)
def test_blob_cut_inside_the_header_is_truncated(blobs: dict[str, bytes], cut: int, message: str) -> None:
    with pytest.raises(TruncatedBlobError, match=message):
        decode_blob(blobs["onnx"][:cut])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("keep", [0, 1, 0.5, -1])
def test_blob_cut_inside_the_model_frame_is_truncated(fmt: str, keep: float, blobs: dict[str, bytes]) -> None:
    blob = blobs[fmt]
    start = header_end(blob)
    frame_size = len(blob) - start
    cut = start + (int(frame_size * keep) if isinstance(keep, float) else keep % frame_size)
    present = cut - start
    with pytest.raises(
        TruncatedBlobError, match=rf"is cut off: {present:,} of {frame_size:,} compressed bytes present"
    ):
        decode_blob(blob[:cut])


def test_flipped_byte_in_header_json_fails_the_crc(blobs: dict[str, bytes]) -> None:
    blob = blobs["onnx"]
    with pytest.raises(ChecksumMismatchError, match="blob header checksum mismatch"):
        decode_blob(flip(blob, 30))


def test_flipped_crc_fails_the_crc(blobs: dict[str, bytes]) -> None:
    with pytest.raises(ChecksumMismatchError, match="blob header checksum mismatch"):
        decode_blob(flip(blobs["onnx"], 18))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", ["middle", "content checksum"])
def test_flipped_byte_in_model_data_is_detected(fmt: str, where: str, blobs: dict[str, bytes]) -> None:
    blob = blobs[fmt]
    start = header_end(blob)
    index = (start + len(blob)) // 2 if where == "middle" else len(blob) - 1
    with pytest.raises(
        ChecksumMismatchError,
        match=r"blob of model 'tiny' \(test-platform\): model data is damaged .*checksum",
    ):
        decode_blob(flip(blob, index, 0x40))


def test_damaged_frame_header_is_detected(blobs: dict[str, bytes]) -> None:
    blob = blobs["onnx"]
    # Corrupt the zstd frame magic itself: the model frame can no longer be parsed.
    with pytest.raises(ChecksumMismatchError, match="model frame is damaged"):
        decode_blob(flip(blob, header_end(blob)))


def test_wrong_sha256_in_an_otherwise_consistent_header(blobs: dict[str, bytes]) -> None:
    crafted = repack(blobs["onnx"], model_sha256=sha256(b"another model"))
    with pytest.raises(ChecksumMismatchError, match="sha256 of the model bytes does not match the header"):
        decode_blob(crafted)


def test_header_model_size_disagreeing_with_the_frame(blobs: dict[str, bytes]) -> None:
    fields, _ = split_blob(blobs["onnx"])
    crafted = repack(blobs["onnx"], model_size=fields["model_size"] + 1)
    with pytest.raises(ChecksumMismatchError, match="model frame does not match its header"):
        decode_blob(crafted)


def test_frame_without_content_checksum_is_refused(models: dict[str, bytes], blobs: dict[str, bytes]) -> None:
    frame = zstandard.ZstdCompressor(write_checksum=False, write_content_size=True).compress(models["onnx"])
    crafted = repack(blobs["onnx"], frame=frame, compressed_size=len(frame))
    with pytest.raises(ChecksumMismatchError, match="model frame does not match its header"):
        decode_blob(crafted)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xffnot json at all", "blob header is not valid JSON"),
        (b"[1, 2, 3]", "blob header is not a JSON object"),
    ],
)
def test_valid_crc_but_unparseable_header(payload: bytes, message: str, blobs: dict[str, bytes]) -> None:
    _, frame = split_blob(blobs["onnx"])
    with pytest.raises(CorruptBlobError, match=message):
        decode_blob(pack_header(payload) + frame)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_size": "1234"}, r"field 'model_size' has the wrong type \(str\)"),
        ({"compressed_size": True}, r"field 'compressed_size' has the wrong type \(bool\)"),
        ({"execution_providers": "CPUExecutionProvider"}, r"field 'execution_providers' has the wrong type"),
        ({"execution_providers": ["CPUExecutionProvider", 3]}, "'execution_providers' must list names"),
        ({"provider_options": {"CPUExecutionProvider": 1}}, "'provider_options' must map provider names"),
        ({"model_format": "tflite"}, "unknown model format 'tflite'"),
        ({"model_size": -1}, "declares a negative size"),
    ],
)
def test_valid_crc_but_invalid_fields(changes: dict, message: str, blobs: dict[str, bytes]) -> None:
    with pytest.raises(CorruptBlobError, match=message):
        decode_blob(repack(blobs["onnx"], **changes))


def test_valid_crc_but_missing_fields(blobs: dict[str, bytes]) -> None:
    fields, frame = split_blob(blobs["onnx"])
    del fields["cook_key"], fields["model_sha256"]
    with pytest.raises(CorruptBlobError, match="lacks field\\(s\\) cook_key, model_sha256"):
        decode_blob(pack_header(json.dumps(fields).encode()) + frame)


def test_unknown_extra_header_fields_are_ignored(blobs: dict[str, bytes], models: dict[str, bytes]) -> None:
    header, model = decode_blob(repack(blobs["onnx"], written_by="cooker 9.9"))
    assert model == models["onnx"]
    assert "written_by" not in header.to_dict()


@pytest.mark.parametrize("declared", [0, 13, (1 << 20) + 1])
def test_implausible_header_size_is_corrupt(declared: int) -> None:
    data = struct.pack("<II", SKIPPABLE_MAGIC, declared) + b"\0" * 64
    with pytest.raises(CorruptBlobError, match=rf"header declares {declared} bytes; a valid header is 14 B"):
        decode_blob(data)


@pytest.mark.parametrize("fmt", FORMATS)
def test_trailing_bytes_after_the_model_frame(fmt: str, blobs: dict[str, bytes]) -> None:
    with pytest.raises(CorruptBlobError, match="has 5 unexpected trailing bytes"):
        decode_blob(blobs[fmt] + b"extra")


@pytest.mark.parametrize("tail", [b"JUNKJUNK", zstandard.ZstdCompressor().compress(b"smuggled")])
def test_extra_data_inside_the_declared_frame_region_is_refused(tail: bytes, blobs: dict[str, bytes]) -> None:
    # The header is consistent (CRC, compressed_size) but the region holds the model frame plus more:
    # `zstd -d` would write the model followed by whatever the second frame holds.
    _, frame = split_blob(blobs["onnx"])
    crafted = repack(blobs["onnx"], frame=frame + tail, compressed_size=len(frame) + len(tail))
    with pytest.raises(BundleError, match="unused data|trailing"):
        decode_blob(crafted)


def test_other_blob_format_version_is_unsupported(blobs: dict[str, bytes]) -> None:
    fields, frame = split_blob(blobs["onnx"])
    crafted = pack_header(json.dumps(fields).encode(), version=2) + frame
    with pytest.raises(
        UnsupportedBlobVersionError,
        match="blob format version 2 is not supported: this loader reads version 1; re-cook",
    ):
        decode_blob(crafted)


@pytest.mark.parametrize("fmt", FORMATS)
def test_model_over_max_model_size_is_refused(
    fmt: str, blobs: dict[str, bytes], models: dict[str, bytes]
) -> None:
    size = len(models[fmt])
    with pytest.raises(
        BlobTooLargeError,
        match=rf"declares a {size:,}-byte model, over the limit of {size - 1:,} bytes; raise max_model_size",
    ):
        decode_blob(blobs[fmt], max_model_size=size - 1)
    assert decode_blob(blobs[fmt], max_model_size=size)[1] == models[fmt]


def _peak_python_allocation(call) -> tuple[BaseException, int, float]:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        call()
    except Exception as exc:  # returned to the test, which checks its type
        error = exc
    else:
        raise AssertionError("expected an exception")
    finally:
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, peak, elapsed


def test_terabyte_declaration_is_refused_before_allocating(blobs: dict[str, bytes]) -> None:
    crafted = repack(blobs["onnx"], model_size=10**12)

    error, peak, elapsed = _peak_python_allocation(lambda: decode_blob(crafted))

    assert isinstance(error, BlobTooLargeError)
    assert "declares a 1,000,000,000,000-byte model" in str(error)
    assert peak < 1 << 20
    assert elapsed < 1.0


def test_terabyte_declaration_under_a_raised_limit_still_allocates_nothing(blobs: dict[str, bytes]) -> None:
    # With the limit out of the way the frame's own content size (the real one) disagrees with the
    # header: the loader must notice that before sizing any buffer from either number.
    crafted = repack(blobs["onnx"], model_size=10**12)

    error, peak, elapsed = _peak_python_allocation(lambda: decode_blob(crafted, max_model_size=10**13))

    assert isinstance(error, ChecksumMismatchError)
    assert "model frame does not match its header" in str(error)
    assert peak < 1 << 20
    assert elapsed < 1.0


@pytest.mark.parametrize("fmt", FORMATS)
def test_blob_for_a_newer_runtime_is_refused(fmt: str, models: dict[str, bytes]) -> None:
    blob = make_blob(models[fmt], fmt, min_runtime_version="99.0")
    installed = re.escape(onnxruntime.__version__)
    kind = "ORT format v6" if fmt == "ort" else "ONNX"
    with pytest.raises(
        IncompatibleRuntimeError,
        match=rf"\(test-platform, {kind}\) needs onnxruntime 99\.0(\.0)? or newer, but {installed} is "
        r"installed; upgrade onnxruntime .* or re-cook",
    ):
        session_from_blob(blob, providers=CPU)


def test_unparseable_min_runtime_version_is_a_bundle_error(models: dict[str, bytes]) -> None:
    blob = make_blob(models["onnx"], "onnx", min_runtime_version="latest")
    with pytest.raises(CorruptBlobError, match="min_runtime_version"):
        session_from_blob(blob, providers=CPU)


def test_deeply_nested_header_json_is_corrupt(blobs: dict[str, bytes]) -> None:
    _, frame = split_blob(blobs["onnx"])
    with pytest.raises(CorruptBlobError, match="not valid JSON"):
        decode_blob(pack_header(b"[" * 200_000) + frame)


# --- fuzzing: damaged blobs raise BundleError subclasses and nothing else -------------------------

mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.floats(0, 1, exclude_max=True), st.just(0)),
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True), st.just(0)),
)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(FORMATS), steps=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_blobs_raise_only_bundle_errors(
    fmt: str, steps: list[tuple[str, float, int]], blobs: dict[str, bytes], models: dict[str, bytes], expected
) -> None:
    damaged = mutate(blobs[fmt], steps)
    try:
        session = session_from_blob(damaged, providers=CPU)
    except BundleError:
        return
    # A harmless mutation (e.g. inside a field the format ignores) must still give the real model.
    assert decode_blob(damaged)[1] == models[fmt]
    np.testing.assert_allclose(session.run(None, {"x": sample_input()})[0], expected, rtol=1e-5, atol=1e-6)


@settings(max_examples=200, deadline=None, database=None)
@given(
    prefix=st.sampled_from(
        [
            b"",
            struct.pack("<I", SKIPPABLE_MAGIC),
            struct.pack("<II", SKIPPABLE_MAGIC, 40),
            struct.pack("<II8sH", SKIPPABLE_MAGIC, 40, HEADER_MAGIC, BLOB_FORMAT_VERSION),
        ]
    ),
    body=st.binary(max_size=600),
)
def test_random_bytes_raise_only_bundle_errors(prefix: bytes, body: bytes) -> None:
    with pytest.raises(BundleError):
        session_from_blob(prefix + body, providers=CPU)
