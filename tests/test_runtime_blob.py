"""The blob format (onnx_cooker/runtime/blob.py, header.py): generic header checks, stock-tool
compatibility, every failure mode; legacy version-1 blobs, which the loader still reads. The
version-2 frame layout is tested in tests/test_runtime_blob_v2.py."""

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
    blob_version,
    header_payload,
    header_start,
    make_blob,
    make_blob_v1,
    make_blob_v2,
    mutate,
    pack_header,
    repack,
    run_source,
    sample_input,
    sha256,
    split_blob,
)

from onnx_cooker.runtime import compat
from onnx_cooker.runtime.__main__ import model_file_name, stock_unpack_commands
from onnx_cooker.runtime.blob import decode_blob
from onnx_cooker.runtime.constants import (
    BLOB_FORMAT_VERSION,
    LEGACY_BLOB_FORMAT_VERSION,
    V2_BLOB_FORMAT_VERSION,
)
from onnx_cooker.runtime.errors import (
    BlobTooLargeError,
    BundleError,
    ChecksumMismatchError,
    CorruptBlobError,
    IncompatibleRuntimeError,
    NotABlobError,
    TruncatedBlobError,
    UnsupportedBlobVersionError,
)
from onnx_cooker.runtime.header import (
    HEADER_MAGIC,
    MAX_HEADER_SIZE,
    READABLE_VERSIONS,
    SKIPPABLE_MAGIC,
    TRAILER_SIZE,
    BlobHeader,
    read_header,
)
from onnx_cooker.runtime.session import session_from_blob

FORMATS = ("onnx", "ort")
ZSTD_FRAME_MAGIC = 0xFD2FB528
MAKERS = {
    LEGACY_BLOB_FORMAT_VERSION: make_blob_v1,
    V2_BLOB_FORMAT_VERSION: make_blob_v2,
    BLOB_FORMAT_VERSION: make_blob,
}


@pytest.fixture(scope="module")
def blobs(models: dict[str, bytes]) -> dict[str, bytes]:
    """Blobs as the cooker writes them today (version 3, no weights section)."""
    return {fmt: make_blob(model, fmt) for fmt, model in models.items()}


@pytest.fixture(scope="module")
def v1_blobs(models: dict[str, bytes]) -> dict[str, bytes]:
    """Legacy version-1 blobs of the same models."""
    return {fmt: make_blob_v1(model, fmt) for fmt, model in models.items()}


@pytest.fixture(scope="module")
def v2_blobs(models: dict[str, bytes]) -> dict[str, bytes]:
    """Version-2 blobs of the same models (cookers before blob format 3)."""
    return {fmt: make_blob_v2(model, fmt) for fmt, model in models.items()}


@pytest.fixture(scope="module")
def any_blobs(
    blobs: dict[str, bytes], v1_blobs: dict[str, bytes], v2_blobs: dict[str, bytes]
) -> dict[int, dict[str, bytes]]:
    """Blobs of every readable version, by version, then format."""
    return {
        BLOB_FORMAT_VERSION: blobs,
        V2_BLOB_FORMAT_VERSION: v2_blobs,
        LEGACY_BLOB_FORMAT_VERSION: v1_blobs,
    }


@pytest.fixture(scope="module")
def expected(source: bytes) -> np.ndarray:
    return run_source(source, sample_input())


def test_both_readable_versions_are_tested() -> None:
    assert set(MAKERS) == set(READABLE_VERSIONS) == {1, 2, 3}
    assert BLOB_FORMAT_VERSION == 3 and V2_BLOB_FORMAT_VERSION == 2 and LEGACY_BLOB_FORMAT_VERSION == 1


# --- the happy path -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", READABLE_VERSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_returns_identical_bytes_and_header(
    fmt: str, version: int, models: dict[str, bytes]
) -> None:
    model = models[fmt]
    blob = MAKERS[version](model, fmt, name="denoiser", cook_key="ab" * 32, platform="android")

    header, decoded = decode_blob(blob)

    assert decoded == model
    assert header == read_header(blob)[0]
    assert header.version == blob_version(blob) == version
    assert header.model_format == fmt
    assert (header.name, header.platform, header.cook_key) == ("denoiser", "android", "ab" * 32)
    assert header.min_runtime_version == "1.16"
    assert header.model_size == len(model)
    assert header.model_sha256 == sha256(model)
    trailer = TRAILER_SIZE if version >= 3 else 0
    lead = header.frames[0].size if header.frames and header.frames[0].offset == 0 else 0  # a raw ORT graph
    assert header.compressed_size == len(blob) - (read_header(blob)[1] - lead) - trailer
    assert header.ort_format_version == compat.ort_format_version(model)
    assert header.weights is None
    # The loader takes any bytes-like object, not only bytes.
    assert decode_blob(memoryview(blob))[1] == model
    assert decode_blob(bytearray(blob))[1] == model


@pytest.mark.parametrize("version", READABLE_VERSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_header_to_dict_is_what_the_header_frame_holds(
    fmt: str, version: int, any_blobs: dict[int, dict[str, bytes]]
) -> None:
    """``to_dict`` written back as the header's JSON (same length, so frames stay in place) reads back
    as the same header."""
    blob = any_blobs[version][fmt]
    header, end = read_header(blob)
    payload = json.dumps(json.loads(json.dumps(header.to_dict())), sort_keys=True, separators=(",", ":"))
    old = header_payload(blob)
    # Versions 2 and 3 pad the JSON with spaces so that the frames after it land where it says.
    assert payload.encode() == (old.rstrip(b" ") if version >= 2 else old)
    start = header.frames[0].size if header.frames and header.frames[0].offset == 0 else 0  # a raw ORT graph
    rebuilt = blob[:start] + pack_header(payload.encode().ljust(len(old)), version=version) + blob[end:]

    assert read_header(rebuilt) == (header, end)
    assert decode_blob(rebuilt)[0] == header


@pytest.mark.parametrize("version", READABLE_VERSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_stock_tool_recipe_writes_the_model(
    fmt: str, version: int, any_blobs: dict[int, dict[str, bytes]], models: dict[str, bytes], tmp_path: Path
) -> None:
    """What ``python -m onnx_cooker.runtime inspect`` prints to unpack a blob with stock tools (zstd, head,
    tail) gives the model file, for every readable version."""
    packed = tmp_path / f"model.{fmt}.ocb"
    packed.write_bytes(any_blobs[version][fmt])
    header = read_header(packed.read_bytes())[0]
    commands = stock_unpack_commands(header, str(packed))

    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(commands)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert (tmp_path / model_file_name(header)).read_bytes() == models[fmt]


@pytest.mark.parametrize("fmt", FORMATS)
def test_stock_zstd_alone_refuses_a_version_3_blob(fmt: str, blobs: dict[str, bytes], tmp_path: Path) -> None:
    """A version-3 blob is not a zstd file (its files are named .ocb): ``zstd -d`` says so rather than
    writing part of a model."""
    packed = tmp_path / f"model.{fmt}.ocb"
    packed.write_bytes(blobs[fmt])

    result = subprocess.run(
        ["zstd", "-d", "-q", "-f", str(packed), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode != 0 and "unsupported format" in result.stderr


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


# --- one crafted blob per failure of the header, whatever the version -----------------------------


def flip(data: bytes, index: int, mask: int = 0x01) -> bytes:
    mutable = bytearray(data)
    mutable[index] ^= mask
    return bytes(mutable)


def header_end(blob: bytes) -> int:
    return read_header(blob)[1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_plain_model_bytes_are_not_a_blob(fmt: str, models: dict[str, bytes]) -> None:
    # A plain .ort file is named as such: it could also be a version-3 blob cut off at its end.
    expected = (
        "does not start with the header frame .*plain \\.onnx/\\.ort"
        if fmt == "onnx"
        else "plain \\.ort file"
    )
    with pytest.raises(NotABlobError, match=expected):
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


@pytest.mark.parametrize("version", READABLE_VERSIONS)
@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (3, r"only 3 bytes long: the header is cut off"),
        (8, r"header alone needs \d+: file cut off"),
        (40, r"header alone needs \d+: file cut off"),
        (-1, r"header alone needs \d+: file cut off"),
    ],
)
def test_blob_cut_inside_the_header_is_truncated(
    any_blobs: dict[int, dict[str, bytes]], version: int, cut: int, message: str
) -> None:
    blob = any_blobs[version]["onnx"]
    cut = cut % header_end(blob)
    with pytest.raises(TruncatedBlobError, match=message):
        decode_blob(blob[:cut])


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_flipped_byte_in_header_json_fails_the_crc(
    version: int, any_blobs: dict[int, dict[str, bytes]]
) -> None:
    blob = any_blobs[version]["onnx"]
    for index in (22, 30, header_end(blob) - 1):
        with pytest.raises(ChecksumMismatchError, match="blob header checksum mismatch"):
            decode_blob(flip(blob, index))


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_flipped_crc_fails_the_crc(version: int, any_blobs: dict[int, dict[str, bytes]]) -> None:
    with pytest.raises(ChecksumMismatchError, match="blob header checksum mismatch"):
        decode_blob(flip(any_blobs[version]["onnx"], 18))


@pytest.mark.parametrize("version", READABLE_VERSIONS)
@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xffnot json at all", "blob header is not valid JSON"),
        (b"[1, 2, 3]", "blob header is not a JSON object"),
    ],
)
def test_valid_crc_but_unparseable_header(
    payload: bytes, message: str, version: int, any_blobs: dict[int, dict[str, bytes]]
) -> None:
    _, frame = split_blob(any_blobs[version]["onnx"])
    with pytest.raises(CorruptBlobError, match=message):
        decode_blob(pack_header(payload, version=version) + frame)


@pytest.mark.parametrize("version", READABLE_VERSIONS)
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
        ({"name": "evil\nname\x1b[31m"}, "field 'name' holds a control character: re-cook the model"),
        ({"platform": "android\x7f"}, "field 'platform' holds a control character"),
    ],
)
def test_valid_crc_but_invalid_fields(
    changes: dict, message: str, version: int, any_blobs: dict[int, dict[str, bytes]]
) -> None:
    crafted = repack(any_blobs[version]["onnx"], **changes)
    assert blob_version(crafted) == version
    with pytest.raises(CorruptBlobError, match=message):
        decode_blob(crafted)


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_valid_crc_but_missing_fields(version: int, any_blobs: dict[int, dict[str, bytes]]) -> None:
    fields, frame = split_blob(any_blobs[version]["onnx"])
    del fields["cook_key"], fields["model_sha256"]
    with pytest.raises(CorruptBlobError, match="lacks field\\(s\\) cook_key, model_sha256"):
        decode_blob(pack_header(json.dumps(fields).encode(), version=version) + frame)


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_unknown_extra_header_fields_are_ignored(
    version: int, any_blobs: dict[int, dict[str, bytes]], models: dict[str, bytes]
) -> None:
    header, model = decode_blob(repack(any_blobs[version]["onnx"], written_by="cooker 9.9"))
    assert model == models["onnx"]
    assert header.version == version
    assert "written_by" not in header.to_dict()


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_a_header_read_again_is_not_parsed_again(
    version: int, any_blobs: dict[int, dict[str, bytes]]
) -> None:
    # A second load of a blob takes the header parsed from the same checked bytes (another buffer).
    blob = any_blobs[version]["ort"]
    first, end = read_header(blob)
    again, again_end = read_header(bytearray(blob))
    assert again is first and again_end == end
    # What the bytes say, never what was read before: a twin whose header differs in one field.
    other = first.name[:-1] + ("x" if first.name[-1] != "x" else "y")
    twin = repack(blob, same_length=True, name=other)
    assert read_header(twin)[0].name == other and read_header(blob)[0] is first


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_a_damaged_twin_of_a_header_read_before_is_refused(
    version: int, any_blobs: dict[int, dict[str, bytes]]
) -> None:
    blob = any_blobs[version]["onnx"]
    read_header(blob)
    fields, frame = split_blob(blob)
    fields["model_size"] = "big"
    with pytest.raises(CorruptBlobError, match="'model_size' has the wrong type"):
        read_header(pack_header(json.dumps(fields).encode(), version=version) + frame)
    damaged = bytearray(blob)  # and a damaged one is refused by its CRC, before any cache is asked
    damaged[header_start(blob) + 40] ^= 1  # a byte of the JSON
    with pytest.raises(ChecksumMismatchError):
        read_header(bytes(damaged))


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_a_parsed_header_cannot_be_changed(version: int, any_blobs: dict[int, dict[str, bytes]]) -> None:
    # Every load of the same bytes shares one header: a caller's change would reach the next load.
    options = {"CPUExecutionProvider": {"a": 1}}
    blob = repack(any_blobs[version]["onnx"], aligned=True, provider_options=options)
    header, _ = read_header(blob)
    with pytest.raises(TypeError):
        header.provider_options["CPUExecutionProvider"]["a"] = 2  # type: ignore[index]
    with pytest.raises(TypeError):
        header.ep_session_options["CPUExecutionProvider"] = {}  # type: ignore[index]
    assert read_header(blob)[0].provider_options == {"CPUExecutionProvider": {"a": 1}}
    assert json.loads(json.dumps(header.to_dict()))["provider_options"] == {"CPUExecutionProvider": {"a": 1}}


def test_a_large_header_is_parsed_each_time(any_blobs: dict[int, dict[str, bytes]]) -> None:
    # Headers over 64 KiB (tens of thousands of weights) are not kept: the cache stays small.
    blob = repack(any_blobs[LEGACY_BLOB_FORMAT_VERSION]["onnx"], written_by="x" * (70 << 10))
    first, _ = read_header(blob)
    again, _ = read_header(blob)
    assert again == first and again is not first


@pytest.mark.parametrize("declared", [0, 13, MAX_HEADER_SIZE + 1, (1 << 32) - 1])
def test_implausible_header_size_is_corrupt(declared: int) -> None:
    assert MAX_HEADER_SIZE == 16 << 20
    data = struct.pack("<II", SKIPPABLE_MAGIC, declared) + b"\0" * 64
    with pytest.raises(
        CorruptBlobError, match=rf"header declares {declared} bytes; a valid header is 14 B to 16 MiB"
    ):
        decode_blob(data)


@pytest.mark.parametrize("declared", [14, MAX_HEADER_SIZE])
def test_header_sizes_at_the_limits_are_plausible(declared: int) -> None:
    """The bounds are inclusive: such a header is read (here: found cut off), not refused as corrupt."""
    data = struct.pack("<II", SKIPPABLE_MAGIC, declared) + b"\0" * 8
    with pytest.raises(TruncatedBlobError, match=rf"header alone needs {declared + 8}: file cut off"):
        decode_blob(data)


@pytest.mark.parametrize("version", READABLE_VERSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_trailing_bytes_after_the_last_frame(
    fmt: str, version: int, any_blobs: dict[int, dict[str, bytes]]
) -> None:
    blob = any_blobs[version][fmt]
    if blob[4:8] == b"ORTM":  # a raw ORT graph leads the blob: its trailer, then the bytes added
        with pytest.raises(CorruptBlobError, match="blob has bytes added after its trailer"):
            decode_blob(blob + b"extra")
        return
    with pytest.raises(CorruptBlobError, match="has 5 unexpected trailing bytes"):
        decode_blob(blob + b"extra")


@pytest.mark.parametrize("version", [0, BLOB_FORMAT_VERSION + 1, 0xFFFF])
def test_other_blob_format_version_is_unsupported(version: int, blobs: dict[str, bytes]) -> None:
    assert version not in READABLE_VERSIONS
    crafted = pack_header(header_payload(blobs["onnx"]), version=version) + split_blob(blobs["onnx"])[1]
    with pytest.raises(
        UnsupportedBlobVersionError,
        match=rf"blob format version {version} is not supported: this loader reads versions 1, 2, 3; re-cook",
    ):
        decode_blob(crafted)


@pytest.mark.parametrize("version", READABLE_VERSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_model_over_max_model_size_is_refused(
    fmt: str, version: int, any_blobs: dict[int, dict[str, bytes]], models: dict[str, bytes]
) -> None:
    blob = any_blobs[version][fmt]
    size = len(models[fmt])
    with pytest.raises(
        BlobTooLargeError,
        match=rf"declares a {size:,}-byte model, over the limit of {size - 1:,} bytes; raise max_model_size",
    ):
        decode_blob(blob, max_model_size=size - 1)
    assert decode_blob(blob, max_model_size=size)[1] == models[fmt]


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


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_deeply_nested_header_json_is_corrupt(version: int, any_blobs: dict[int, dict[str, bytes]]) -> None:
    _, frame = split_blob(any_blobs[version]["onnx"])
    with pytest.raises(CorruptBlobError, match="not valid JSON"):
        decode_blob(pack_header(b"[" * 200_000, version=version) + frame)


# --- legacy version-1 blobs: the header frame, then one zstd frame holding the model file ---------


@pytest.mark.parametrize("fmt", FORMATS)
def test_legacy_header_to_dict_round_trips_through_json(fmt: str, v1_blobs: dict[str, bytes]) -> None:
    header, _ = read_header(v1_blobs[fmt])
    fields = json.loads(json.dumps(header.to_dict()))
    fields["execution_providers"] = tuple(fields["execution_providers"])
    assert "version" not in fields and "frames" not in fields and "graph_size" not in fields
    assert BlobHeader(**fields) == header
    assert header.version == LEGACY_BLOB_FORMAT_VERSION
    assert (header.graph_size, header.frames, header.weights) == (None, (), None)


def test_legacy_byte_layout_matches_the_documented_format(models: dict[str, bytes]) -> None:
    model = models["onnx"]
    blob = make_blob_v1(model, "onnx")

    magic, frame_size = struct.unpack_from("<II", blob, 0)
    header_magic, version, crc = struct.unpack_from("<8sHI", blob, 8)
    payload = blob[22 : 8 + frame_size]
    frame = blob[8 + frame_size :]

    assert magic == SKIPPABLE_MAGIC == 0x184D2A5E
    assert header_magic == HEADER_MAGIC == b"ONNXCOOK"
    assert version == LEGACY_BLOB_FORMAT_VERSION == 1
    assert crc == zlib.crc32(payload)
    fields = json.loads(payload)
    assert fields["model_sha256"] == sha256(model)
    assert fields["model_size"] == len(model)
    assert fields["compressed_size"] == len(frame)
    assert not {"graph_size", "frames", "weights"} & set(fields)
    assert struct.unpack_from("<I", frame, 0)[0] == ZSTD_FRAME_MAGIC
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == len(model)
    assert params.has_checksum
    # Exactly one frame: it ends where the blob does.
    assert zstandard.ZstdDecompressor().decompress(frame, allow_extra_data=False) == model


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("keep", [0, 1, 0.5, -1])
def test_legacy_blob_cut_inside_the_model_frame_is_truncated(
    fmt: str, keep: float, v1_blobs: dict[str, bytes]
) -> None:
    blob = v1_blobs[fmt]
    start = header_end(blob)
    frame_size = len(blob) - start
    cut = start + (int(frame_size * keep) if isinstance(keep, float) else keep % frame_size)
    present = cut - start
    with pytest.raises(
        TruncatedBlobError, match=rf"is cut off: {present:,} of {frame_size:,} compressed bytes present"
    ):
        decode_blob(blob[:cut])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", ["middle", "content checksum"])
def test_legacy_flipped_byte_in_model_data_is_detected(
    fmt: str, where: str, v1_blobs: dict[str, bytes]
) -> None:
    blob = v1_blobs[fmt]
    start = header_end(blob)
    index = (start + len(blob)) // 2 if where == "middle" else len(blob) - 1
    with pytest.raises(
        ChecksumMismatchError,
        match=r"blob of model 'tiny' \(test-platform\): model data is damaged .*checksum",
    ):
        decode_blob(flip(blob, index, 0x40))


def test_legacy_damaged_frame_header_is_detected(v1_blobs: dict[str, bytes]) -> None:
    blob = v1_blobs["onnx"]
    # Corrupt the zstd frame magic itself: the model frame can no longer be parsed.
    with pytest.raises(ChecksumMismatchError, match="model frame is damaged"):
        decode_blob(flip(blob, header_end(blob)))


def test_legacy_wrong_sha256_in_an_otherwise_consistent_header(v1_blobs: dict[str, bytes]) -> None:
    crafted = repack(v1_blobs["onnx"], model_sha256=sha256(b"another model"))
    with pytest.raises(ChecksumMismatchError, match="sha256 of the model bytes does not match the header"):
        decode_blob(crafted)
    # check_sha256=False (a caller that verified the whole blob already) skips only that pass.
    assert decode_blob(crafted, check_sha256=False)[1] == decode_blob(v1_blobs["onnx"])[1]


def test_legacy_header_model_size_disagreeing_with_the_frame(v1_blobs: dict[str, bytes]) -> None:
    fields, _ = split_blob(v1_blobs["onnx"])
    for size in (fields["model_size"] + 1, fields["model_size"] - 1):
        crafted = repack(v1_blobs["onnx"], model_size=size)
        with pytest.raises(ChecksumMismatchError, match="model frame does not match its header"):
            decode_blob(crafted)


def test_legacy_frame_without_content_checksum_is_refused(
    models: dict[str, bytes], v1_blobs: dict[str, bytes]
) -> None:
    frame = zstandard.ZstdCompressor(write_checksum=False, write_content_size=True).compress(models["onnx"])
    crafted = repack(v1_blobs["onnx"], frame=frame, compressed_size=len(frame))
    with pytest.raises(ChecksumMismatchError, match="model frame does not match its header"):
        decode_blob(crafted)


def test_legacy_frame_without_content_size_is_refused(
    models: dict[str, bytes], v1_blobs: dict[str, bytes]
) -> None:
    frame = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compress(models["onnx"])
    crafted = repack(v1_blobs["onnx"], frame=frame, compressed_size=len(frame))
    with pytest.raises(ChecksumMismatchError, match="model frame does not match its header"):
        decode_blob(crafted)


@pytest.mark.parametrize("tail", [b"JUNKJUNK", zstandard.ZstdCompressor().compress(b"smuggled")])
def test_legacy_extra_data_inside_the_declared_frame_region_is_refused(
    tail: bytes, v1_blobs: dict[str, bytes]
) -> None:
    # The header is consistent (CRC, compressed_size) but the region holds the model frame plus more:
    # `zstd -d` would write the model followed by whatever the second frame holds.
    _, frame = split_blob(v1_blobs["onnx"])
    crafted = repack(v1_blobs["onnx"], frame=frame + tail, compressed_size=len(frame) + len(tail))
    with pytest.raises(BundleError, match="unused data|trailing"):
        decode_blob(crafted)


def test_legacy_header_with_version_2_fields_is_still_read_as_version_1(
    v1_blobs: dict[str, bytes], models: dict[str, bytes]
) -> None:
    """Version-2 fields in a version-1 header are unknown extras there: ignored, not trusted."""
    crafted = repack(v1_blobs["onnx"], graph_size=1, frames=[["graph", "zstd", 1, 1, 0]], weights={"x": 1})
    header, model = decode_blob(crafted)
    assert model == models["onnx"]
    assert (header.version, header.graph_size, header.frames, header.weights) == (1, None, (), None)


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


def test_legacy_terabyte_declaration_is_refused_before_allocating(v1_blobs: dict[str, bytes]) -> None:
    crafted = repack(v1_blobs["onnx"], model_size=10**12)

    error, peak, elapsed = _peak_python_allocation(lambda: decode_blob(crafted))

    assert isinstance(error, BlobTooLargeError)
    assert "declares a 1,000,000,000,000-byte model" in str(error)
    assert peak < 1 << 20
    assert elapsed < 1.0


def test_legacy_terabyte_declaration_under_a_raised_limit_still_allocates_nothing(
    v1_blobs: dict[str, bytes],
) -> None:
    # With the limit out of the way the frame's own content size (the real one) disagrees with the
    # header: the loader must notice that before sizing any buffer from either number.
    crafted = repack(v1_blobs["onnx"], model_size=10**12)

    error, peak, elapsed = _peak_python_allocation(lambda: decode_blob(crafted, max_model_size=10**13))

    assert isinstance(error, ChecksumMismatchError)
    assert "model frame does not match its header" in str(error)
    assert peak < 1 << 20
    assert elapsed < 1.0


# --- fuzzing: damaged blobs raise BundleError subclasses and nothing else -------------------------

mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.floats(0, 1, exclude_max=True), st.just(0)),
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True), st.just(0)),
)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(FORMATS),
    version=st.sampled_from(READABLE_VERSIONS),
    steps=st.lists(mutation, min_size=1, max_size=3),
)
def test_mutated_blobs_raise_only_bundle_errors(
    fmt: str,
    version: int,
    steps: list[tuple[str, float, int]],
    any_blobs: dict[int, dict[str, bytes]],
    models: dict[str, bytes],
    expected,
) -> None:
    damaged = mutate(any_blobs[version][fmt], steps)
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
            *(struct.pack("<II8sH", SKIPPABLE_MAGIC, 40, HEADER_MAGIC, v) for v in READABLE_VERSIONS),
        ]
    ),
    body=st.binary(max_size=600),
)
def test_random_bytes_raise_only_bundle_errors(prefix: bytes, body: bytes) -> None:
    with pytest.raises(BundleError):
        session_from_blob(prefix + body, providers=CPU)
