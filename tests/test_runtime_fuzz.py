"""Hostile input to the loader's parsers: blob headers and bundle manifests, fuzzed with hypothesis.

Whatever the bytes, ``onnx_cooker.runtime`` raises a ``BundleError`` subclass or succeeds, and what it
accepts is exactly what the cooker wrote: never another model, never a file outside the bundle folder.
Memory stays bounded by what the header declares (and by the limit), and nothing hangs. Damaged
blobs without weights are fuzzed in tests/test_runtime_blob.py; here the header JSON (of legacy
version-1 and of version-2 blobs) and the manifest are reached with valid checksums, version-2 blobs
with a weights section (raw or zstd) are damaged anywhere, and the bundle folder itself is hostile.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from runtime_helpers import (
    CPU,
    CRC_ENTRY_COST,
    extra_crcs,
    fresh_header_cache,
    header_payload,
    keep_alignment,
    make_blob,
    make_blob_v1,
    make_blob_v2,
    make_weighted_blob,
    mutate,
    pack_header,
    peak_allocation,
    repack,
    run_source,
    sample_input,
    split_blob,
    write_bundle,
)

import onnx_cooker.runtime.frames as frames_module
import onnx_cooker.runtime.sections as sections_module
from onnx_cooker.runtime import (
    BlobTooLargeError,
    BundleError,
    ChecksumMismatchError,
    CorruptBlobError,
    ManifestError,
    TruncatedBlobError,
    Unpacked,
    decode_blob,
    open_bundle,
    read_header,
    session_from_blob,
    unpack_blob,
)
from onnx_cooker.runtime.constants import BLOB_FORMAT_VERSION, LEGACY_BLOB_FORMAT_VERSION
from onnx_cooker.runtime.frames import RAW_CRC_PIECE, RAW_PREFIX_SIZE, crc_count
from onnx_cooker.runtime.header import READABLE_VERSIONS
from onnx_cooker.runtime.sections import TENSOR_DTYPES
from onnx_cooker.runtime.writer import Weights
from tests.models import tiny_model

REPO = Path(__file__).resolve().parents[1]
HANG_GUARD = 20  # seconds; the loader answers at once or hangs for ever: this only ends a hung child
FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ_V2 = settings(FUZZ, max_examples=120)  # each example builds an onnxruntime session or two
MODELS = ("denoiser", "upscaler")  # the bundle's two models: ONNX and ORT format of one network
SMALL_PIECE = 256  # RAW_CRC_PIECE where a raw frame should carry many CRC-32s


# --- fixtures: one real model, its blobs, a bundle folder and a secret outside it ----------------


@pytest.fixture(scope="module")
def blobs(models: dict[str, bytes]) -> dict[str, bytes]:
    """Blobs as the cooker writes them today (format version 3, no weights section)."""
    return {
        "denoiser": make_blob(models["onnx"], "onnx", name="denoiser", platform="android"),
        "upscaler": make_blob(models["ort"], "ort", name="upscaler", platform="android"),
    }


@pytest.fixture(scope="module")
def v1_blobs(models: dict[str, bytes]) -> dict[str, bytes]:
    """Legacy version-1 blobs of the same models."""
    return {
        "denoiser": make_blob_v1(models["onnx"], "onnx", name="denoiser", platform="android"),
        "upscaler": make_blob_v1(models["ort"], "ort", name="upscaler", platform="android"),
    }


@pytest.fixture(scope="module")
def v2_blobs(models: dict[str, bytes]) -> dict[str, bytes]:
    """Version-2 blobs of the same models (cookers before format 3)."""
    return {
        "denoiser": make_blob_v2(models["onnx"], "onnx", name="denoiser", platform="android"),
        "upscaler": make_blob_v2(models["ort"], "ort", name="upscaler", platform="android"),
    }


@pytest.fixture(scope="module")
def versioned(
    blobs: dict[str, bytes], v1_blobs: dict[str, bytes], v2_blobs: dict[str, bytes]
) -> dict[int, dict[str, bytes]]:
    return {BLOB_FORMAT_VERSION: blobs, 2: v2_blobs, LEGACY_BLOB_FORMAT_VERSION: v1_blobs}


@pytest.fixture(scope="module")
def expected(source: bytes) -> np.ndarray:
    return run_source(source, sample_input())


@pytest.fixture(scope="module")
def weighted(mlp: Any) -> dict[str, tuple[bytes, bytes, Weights]]:
    """(blob, graph, weights) of a version-2 blob whose weights section is stored raw, or as zstd
    frames (the v2 tests below; version 3 has tests/test_runtime_fuzz_v3.py)."""
    return {codec: make_weighted_blob(mlp, codec, name="mlp", version=2) for codec in ("raw", "zstd")}


def crc_pieces(patch: pytest.MonkeyPatch, size: int) -> None:
    """Make writer and loader check raw content in ``size``-byte pieces (sections.py imports the name)."""
    patch.setattr(frames_module, "RAW_CRC_PIECE", size)
    patch.setattr(sections_module, "RAW_CRC_PIECE", size)
    fresh_header_cache(patch)


@pytest.fixture(scope="module")
def pieced(weighted: dict, mlp: Any) -> dict[int, tuple[bytes, bytes, Weights]]:
    """The raw-weights blob with CRC pieces of RAW_CRC_PIECE (one CRC-32) and of SMALL_PIECE (34)."""
    with pytest.MonkeyPatch.context() as patch:
        crc_pieces(patch, SMALL_PIECE)
        small = make_weighted_blob(mlp, "raw", name="mlp", version=2)
    return {RAW_CRC_PIECE: weighted["raw"], SMALL_PIECE: small}


class Folder:
    """A bundle folder the fuzz tests rewrite the manifest of, and a valid blob outside it."""

    def __init__(self, root: Path, blobs: dict[str, bytes]) -> None:
        self.bundle = write_bundle(
            root / "bundle",
            {name: (blob_format(blob), blob) for name, blob in blobs.items()},
            platform="android",
        )
        (self.bundle / "sub").mkdir()
        (self.bundle / "sub" / "denoiser.onnx.ocb").write_bytes(blobs["denoiser"])
        self.manifest = json.loads((self.bundle / "manifest.json").read_text())
        self.inside = set(blobs.values())
        # Another model's blob, readable, next to the bundle: a loader that follows an entry out of
        # the folder would accept it, since the manifest can name its true size and sha256.
        self.secret = make_blob(tiny_model(seed=1).SerializeToString(), "onnx", name="secret")
        self.outside = root / "outside"
        self.outside.mkdir()
        (self.outside / "secret.onnx.ocb").write_bytes(self.secret)

    def write(self, manifest: Any) -> None:
        (self.bundle / "manifest.json").write_text(json.dumps(manifest))

    def fill_in(self, value: Any) -> Any:
        """``value`` with the placeholders of the strategies below replaced by this folder's facts."""
        if isinstance(value, str):
            if value == "<secret-sha>":
                return hashlib.sha256(self.secret).hexdigest()
            if value == "<secret-size>":
                return len(self.secret)
            return value.replace("<outside>", str(self.outside))
        if isinstance(value, list):
            return [self.fill_in(item) for item in value]
        if isinstance(value, dict):
            return {key: self.fill_in(item) for key, item in value.items()}
        return value


def blob_format(blob: bytes) -> str:
    return read_header(blob)[0].model_format


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, blobs: dict[str, bytes]) -> Folder:
    return Folder(tmp_path_factory.mktemp("fuzz"), blobs)


def use_bundle(folder: Folder, expected: np.ndarray) -> None:
    """Open the folder's bundle and use every model it lists: only BundleError may escape, and what is
    read is a blob of the folder byte for byte, whose session computes what the source computes."""
    for verify in (True, False):
        try:
            bundle = open_bundle(folder.bundle, verify=verify)
        except BundleError as exc:
            event(f"open_bundle(verify={verify}) raised {type(exc).__name__}")
            continue
        assert all(isinstance(name, str) for name in bundle.names)
        for name in (*bundle.names, "no-such-model"):
            try:
                info = bundle.info(name)
                data = bundle.read_blob(name)
            except BundleError:
                continue
            assert isinstance(info, dict) and data in folder.inside
            try:
                session = bundle.session(name, providers=CPU)
            except BundleError:
                continue
            event("a session was made")
            outputs = session.run(None, {"x": sample_input()})
            np.testing.assert_allclose(outputs[0], expected, rtol=1e-5, atol=1e-6)


# --- strategies ----------------------------------------------------------------------------------

# Header text may hold lone surrogates (JSON's \ud800 escapes); manifest text, which becomes file-system
# paths, does not: test_unencodable_paths_are_manifest_errors covers those.
any_text = st.text(st.characters(exclude_categories=()), max_size=16)
path_text = st.text(max_size=16)
json_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.floats() | any_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)
safe_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats() | path_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(path_text, inner, max_size=4),
    max_leaves=12,
)
ESCAPES = [
    "../outside/secret.onnx.ocb",
    "sub/../../outside/secret.onnx.ocb",
    "<outside>/secret.onnx.ocb",
    "//<outside>/secret.onnx.ocb",
    "C:\\outside\\secret.onnx.ocb",
    "C:../outside/secret.onnx.ocb",
    "..\\outside\\secret.onnx.ocb",
    "../outside/secret.onnx.ocb\0.png",
]
IN_FOLDER = [
    "denoiser.onnx.ocb",
    "upscaler.ort.ocb",
    "sub/denoiser.onnx.ocb",
    "./upscaler.ort.ocb",
    "sub//denoiser.onnx.ocb",
]
ODD = [
    "",
    ".",
    "./",
    "sub",
    "sub/",
    "sub/.",
    "manifest.json",
    "missing.ocb",
    "denoiser.onnx.ocb/",
    "\0",
    "a:b",
]
file_paths = (
    st.sampled_from(ESCAPES + IN_FOLDER + ODD)
    | path_text
    | st.lists(
        st.sampled_from(["..", ".", "", "sub", "outside", "secret.onnx.ocb", "denoiser.onnx.ocb"]), max_size=5
    ).map("/".join)
)


def some_fields(
    values: dict[str, st.SearchStrategy[Any]], most: int = 3
) -> st.SearchStrategy[dict[str, Any]]:
    """Mostly one changed field (the others stay valid, so the change is what is tested); up to ``most``."""
    one = st.sampled_from(sorted(values)).flatmap(lambda key: values[key].map(lambda value: {key: value}))
    return one | st.lists(one, min_size=2, max_size=most).map(
        lambda changes: {k: v for c in changes for k, v in c.items()}
    )


entry_values = {
    "file": file_paths,
    "format": st.sampled_from(["onnx", "ort", "tflite", ""]) | safe_json_values,
    "blob_sha256": st.sampled_from(["<secret-sha>", "0" * 64, ""]) | safe_json_values,
    "blob_size": st.sampled_from(["<secret-size>", 0, -1, 2**31, 2**63, 2**64 + 1]) | safe_json_values,
    "model_size": safe_json_values,
    "execution_providers": safe_json_values,
    "extra": safe_json_values,
}
entry_overrides = st.one_of(
    st.just({}),
    some_fields(entry_values),
    # An entry pointing at the secret with its true size and sha256: only the path check stands between.
    st.fixed_dictionaries(
        {
            "file": st.sampled_from(ESCAPES),
            "blob_sha256": st.just("<secret-sha>"),
            "blob_size": st.just("<secret-size>"),
        }
    ),
)
top_values = {
    "manifest_version": st.sampled_from([1, 1.0, True, "1", 2, 0]) | safe_json_values,
    "platform": path_text | safe_json_values,
    "models": safe_json_values,
    "extra": safe_json_values,
}
manifest_plans = st.fixed_dictionaries(
    {
        "models": st.dictionaries(
            path_text, st.tuples(st.sampled_from(MODELS), entry_overrides), min_size=1, max_size=3
        ),
        "top": st.just({}) | some_fields(top_values, most=2),
    }
)


def manifest_from(plan: dict[str, Any], folder: Folder) -> dict[str, Any]:
    models = {
        name: {**folder.manifest["models"][base], **overrides}
        for name, (base, overrides) in plan["models"].items()
    }
    return folder.fill_in({**folder.manifest, "models": models, **plan["top"]})


# --- blob headers ----------------------------------------------------------------------------------


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "insert", "delete", "truncate"]),
        st.floats(0, 1, exclude_max=True),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def check_blob(blob: bytes, original: bytes, expected: np.ndarray) -> None:
    """read_header, decode_blob and session_from_blob raise only BundleError; what decodes is ``original``."""
    try:
        read_header(blob)
        _, model = decode_blob(blob)
    except BundleError as exc:
        event(f"decode_blob raised {type(exc).__name__}")
        return
    assert model == original
    for providers in (CPU, None):
        try:
            session = session_from_blob(blob, providers=providers)
        except BundleError as exc:
            event(f"session_from_blob raised {type(exc).__name__}")
            continue
        event("a session was made")
        outputs = session.run(None, {"x": sample_input()})
        np.testing.assert_allclose(outputs[0], expected, rtol=1e-5, atol=1e-6)


@FUZZ
@given(
    name=st.sampled_from(MODELS),
    version=st.sampled_from(READABLE_VERSIONS),
    steps=mutations,
    random=st.binary(max_size=300),
    use_random=st.booleans(),
)
def test_header_json_with_a_valid_crc_raises_only_bundle_errors(
    name: str,
    version: int,
    steps: list[tuple[str, float, int]],
    random: bytes,
    use_random: bool,
    versioned: dict[int, dict[str, bytes]],
    models: dict[str, bytes],
    expected: np.ndarray,
) -> None:
    """The CRC is recomputed over the damaged JSON, so the JSON parser and field checks are reached."""
    blob = versioned[version][name]
    payload = random if use_random else mutate(header_payload(blob), steps)
    _, frame = split_blob(blob)
    check_blob(pack_header(payload, version=version) + frame, models[blob_format(blob)], expected)


version_strings = (
    st.sampled_from(
        [
            "1.16",
            "1.16.0+cu121",
            "99.0",
            "0.0",
            "-1.0",
            " 1.16",
            "1.16\n",
            "\uff11.\uff11\uff16",  # fullwidth digits: str.isdigit but not ASCII
            "1" * 5000 + ".0",
            "1.99999999999999999999999",
            "1..16",
            "",
        ]
    )
    | any_text
)
options = st.dictionaries(
    st.sampled_from(["CPUExecutionProvider", "DmlExecutionProvider", "XnnpackExecutionProvider"]) | any_text,
    st.dictionaries(
        st.sampled_from(
            [
                "enable_mem_pattern",
                "execution_mode",
                "graph_optimization_level",
                "session.use_ort_model_bytes_for_initializers",
                "session.use_ort_model_bytes_directly",
                "session.intra_op.allow_spinning",
                "arena_extend_strategy",
            ]
        )
        | any_text,
        st.sampled_from(["sequential", "parallel", "basic", "all", "disable", True, False, "1", "0"])
        | json_values,
        max_size=3,
    )
    | json_values,
    max_size=3,
)
field_values = {
    "model_format": st.sampled_from(["onnx", "ort", "ONNX", "tflite", ""]) | json_values,
    "platform": any_text | json_values,
    "name": any_text | json_values,
    "model_size": st.integers(-(2**80), 2**80) | json_values,
    "model_sha256": st.sampled_from(["", "0" * 64]) | json_values,
    "compressed_size": st.integers(-(2**80), 2**80) | json_values,
    "cook_key": any_text | json_values,
    "min_runtime_version": version_strings | json_values,
    "ort_format_version": st.sampled_from(["6", "5", "99"]) | json_values,
    "saved_runtime_optimizations": st.booleans() | json_values,
    "execution_providers": st.lists(
        st.sampled_from(["CPUExecutionProvider", "DmlExecutionProvider"]) | any_text
    )
    | json_values,
    "provider_options": options,
    "ep_session_options": options,
    "written_by": json_values,
}


@FUZZ
@given(
    name=st.sampled_from(MODELS),
    version=st.sampled_from(READABLE_VERSIONS),
    changes=some_fields(field_values),
    drop=st.just(set()) | st.sets(st.sampled_from(sorted(field_values)), min_size=1, max_size=2),
    ascii_only=st.booleans(),
)
@pytest.mark.slow
def test_header_fields_of_any_json_value_raise_only_bundle_errors(
    name: str,
    version: int,
    changes: dict[str, Any],
    drop: set[str],
    ascii_only: bool,
    versioned: dict[int, dict[str, bytes]],
    models: dict[str, bytes],
    expected: np.ndarray,
) -> None:
    blob = versioned[version][name]
    fields, frame = split_blob(blob)
    fields = {key: value for key, value in (fields | changes).items() if key not in drop}
    # ensure_ascii=False writes lone surrogates raw: bytes that are not UTF-8 at all.
    payload = json.dumps(fields, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    check_blob(pack_header(payload, version=version) + frame, models[blob_format(blob)], expected)


@FUZZ
@given(
    limit=st.integers(0, 1 << 31),
    excess=st.integers(1, 2**80),
    compressed_size=st.integers(0, 2**80),
    session=st.booleans(),
)
def test_legacy_declared_model_size_over_the_limit_never_allocates(
    limit: int, excess: int, compressed_size: int, session: bool, v1_blobs: dict[str, bytes]
) -> None:
    """Version 1: the header's model_size alone sizes the model."""
    crafted = repack(v1_blobs["denoiser"], model_size=limit + excess, compressed_size=compressed_size)
    if session:
        error, peak = peak_allocation(lambda: session_from_blob(crafted, providers=CPU, max_model_size=limit))
    else:
        error, peak = peak_allocation(lambda: decode_blob(crafted, max_model_size=limit))
    assert isinstance(error, BlobTooLargeError), error
    assert f"declares a {limit + excess:,}-byte model" in str(error)
    assert peak < 1 << 20


def zstd_frame(content: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True).compress(content)


def lying_content(real_size: int, declared: int) -> bytes:
    """A bomb (zeros) when more than declared is real, else incompressible bytes."""
    return bytes(real_size) if real_size > declared else np.random.default_rng(5).bytes(real_size)


def with_content_size(frame: bytes, size: int) -> bytes:
    """``frame`` with the Frame_Content_Size field of its zstd frame header rewritten (4-byte field)."""
    descriptor = frame[4]
    single_segment, dictionary_flag = (descriptor >> 5) & 1, descriptor & 3
    assert descriptor >> 6 == 2, "expected a 4-byte content size field"
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dictionary_flag]
    return frame[:at] + struct.pack("<I", size) + frame[at + 4 :]


@pytest.mark.parametrize(
    ("real_size", "declared"),
    [(64 << 20, 70_000), (70_000, 32 << 20)],
    ids=["bomb-64MiB-declared-70kB", "70kB-declared-32MiB"],
)
def test_legacy_frame_lying_about_its_content_size_never_allocates_more_than_declared(
    real_size: int, declared: int, v1_blobs: dict[str, bytes]
) -> None:
    """Header and zstd frame header agree on ``declared``; the compressed data holds ``real_size`` bytes."""
    real = lying_content(real_size, declared)
    lying = with_content_size(zstd_frame(real), declared)
    crafted = repack(
        v1_blobs["denoiser"],
        frame=lying,
        compressed_size=len(lying),
        model_size=declared,
        model_sha256=hashlib.sha256(real[:declared]).hexdigest(),
    )
    error, peak = peak_allocation(lambda: decode_blob(crafted))
    assert isinstance(error, ChecksumMismatchError), error
    assert peak < declared + (1 << 20)


# --- version-2 blobs with a weights section: damage anywhere, headers that lie ---------------------


def section_of(unpacked: Unpacked) -> bytes:
    """The weights section an unpacked blob hands out; its segments must tile it exactly."""
    assert unpacked.header.weights is not None
    parts, position = [], 0
    for start, view in unpacked.segments:
        assert start == position
        parts.append(bytes(view))
        position += len(view)
    assert position == unpacked.header.weights.size
    return b"".join(parts)


def check_weighted(
    blob: bytes, original: tuple[bytes, bytes, Weights], expected: np.ndarray, *, frames_changed: bool
) -> None:
    """unpack_blob and session_from_blob raise only BundleError; what unpacks is the original graph, and
    weights that are exactly what the blob holds where its (CRC-checked) header says.

    When ``frames_changed`` (and the header is intact), what unpacks is the original weights too: zstd
    frames carry their content checksums, and raw content a CRC-32 per piece in the header.
    """
    original_blob, graph, weights = original
    try:
        unpacked = unpack_blob(blob)
    except BundleError as exc:
        event(f"unpack_blob raised {type(exc).__name__}")
        return
    event("unpacked")
    header, end = read_header(blob)
    assert unpacked.model == graph
    if header.weights is None:
        assert not any(f.section == "weights" for f in header.frames)
        return
    section = section_of(unpacked)
    for frame in header.frames:
        if frame.section == "weights" and frame.codec == "raw":
            stored = blob[frame.data_offset : frame.data_offset + frame.content_size]
            assert section[frame.content_offset : frame.content_offset + frame.content_size] == stored
    for ref in header.weights.tensors:
        dtype = np.dtype(TENSOR_DTYPES[ref.elem_type])
        want = np.frombuffer(section, dtype, ref.nbytes // dtype.itemsize, ref.offset).reshape(ref.dims)
        np.testing.assert_array_equal(unpacked.tensor(ref), want)
    original_header = read_header(original_blob)[0]
    if frames_changed:
        assert header == original_header and len(blob) == len(original_blob)
        assert section == weights.data, "raw content changed, yet it unpacked (its CRC-32s missed it)"
        if blob != original_blob:
            event("damage that leaves every checked byte intact: unpacked to the original")
    elif header.frames == original_header.frames:
        assert section == weights.data
    same = section == weights.data and header.weights.tensors == original_header.weights.tensors  # type: ignore[union-attr]
    try:
        session = session_from_blob(blob, providers=CPU)
    except BundleError as exc:
        event(f"session_from_blob raised {type(exc).__name__}")
        return
    if same:
        event("a session was made")
        outputs = session.run(None, {"x": sample_input()})
        np.testing.assert_allclose(outputs[0], expected, rtol=1e-5, atol=1e-5)


def with_header(blob: bytes, fields: dict[str, Any], **dumps: Any) -> bytes:
    """``blob``'s frames behind a version-2 header frame holding ``fields`` (CRC recomputed), padded as
    ``keep_alignment`` does: raw content stays on the 64-byte boundaries the loader requires."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), **dumps)
    payload = keep_alignment(text.encode("utf-8", "surrogatepass"), blob)
    return pack_header(payload, version=2) + split_blob(blob)[1]


@FUZZ_V2
@given(codec=st.sampled_from(["raw", "zstd"]), steps=mutations, frames_only=st.booleans())
def test_mutated_v2_blobs_with_weights_raise_only_bundle_errors(
    codec: str,
    steps: list[tuple[str, float, int]],
    frames_only: bool,
    weighted: dict,
    mlp_expected: np.ndarray,
) -> None:
    """Damage anywhere, or (``frames_only``) anywhere after the header, which then reads correctly."""
    original = weighted[codec]
    blob = original[0]
    if frames_only:
        end = read_header(blob)[1]
        damaged = blob[:end] + mutate(blob[end:], steps)
    else:
        damaged = mutate(blob, steps)
    check_weighted(damaged, original, mlp_expected, frames_changed=True)


@FUZZ_V2
@given(codec=st.sampled_from(["raw", "zstd"]), steps=mutations)
def test_v2_header_json_with_a_valid_crc_raises_only_bundle_errors(
    codec: str, steps: list[tuple[str, float, int]], weighted: dict, mlp_expected: np.ndarray
) -> None:
    original = weighted[codec]
    damaged = mutate(header_payload(original[0]), steps)
    crafted = pack_header(damaged, version=2) + split_blob(original[0])[1]
    check_weighted(crafted, original, mlp_expected, frames_changed=False)


counts = (
    st.integers(0, 70)
    | st.sampled_from([64, 512, 586, 4096, 5632, 8704, 8750, 2**31, 2**32, 2**63, 2**64])
    | st.integers(0, 2**70)
    | st.integers(-(2**64), -1)
)
crc_values = (
    st.integers(0, 2**32 - 1)
    | st.sampled_from([0, 2**32 - 1, 2**32, -1, 2**64, True, False, 1.0, "0", None])
    | json_values
)
crc_lists = st.lists(st.integers(0, 2**32 - 1), max_size=3) | st.lists(crc_values, max_size=3) | json_values


def _frame_entry(fields: tuple[Any, ...]) -> list[Any]:
    """[section, codec, size, content size, pad], and a raw frame's CRC-32 list."""
    return [*fields[:5], fields[5]] if fields[1] == "raw" else list(fields[:5])


frame_entries = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["graph", "weights"]),
            st.sampled_from(["zstd", "raw"]),
            counts,
            counts,
            st.integers(0, 70) | counts,
            crc_lists,
        ).map(_frame_entry),
        st.lists(
            st.sampled_from(["graph", "weights", "raw", "zstd", "lz4"]) | counts | crc_lists | json_values,
            max_size=7,
        ),
        json_values,
    ),
    max_size=4,
)
tensor_entries = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["W1", "perm", "W2h", "b1", "x"]) | any_text,
            st.sampled_from([*TENSOR_DTYPES, 0, 8, 14, 16, 17, 23, True, False]) | json_values,
            st.lists(st.integers(0, 300) | counts, max_size=3) | json_values,
            counts,
            counts,
        ).map(list),
        json_values,
    ),
    max_size=4,
)
weights_values = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "file": st.just("mlp.onnx.data") | any_text | json_values,
            "size": counts | json_values,
            "sha256": st.just("0" * 64) | json_values,
            "tensors": tensor_entries | json_values,
        }
    ),
    json_values,
)
v2_values = {
    "graph_size": counts | json_values,
    "frames": frame_entries | json_values,
    "weights": weights_values,
    "model_size": counts,
    "compressed_size": counts,
    "model_format": st.sampled_from(["onnx", "ort"]),
}


def make_consistent(fields: dict[str, Any], max_crcs: int = 1 << 12) -> None:
    """Make the header's sums agree with its frame list (where it is a list of well-formed entries), and
    give each raw entry's CRC-32 list one entry per RAW_CRC_PIECE of its content (zeros added, or
    entries dropped; up to ``max_crcs``), so that the checks behind the sums and counts are reached."""
    frames = fields.get("frames")
    if not isinstance(frames, list) or not all(isinstance(f, list) and len(f) in (5, 6) for f in frames):
        return
    for frame in frames:
        if len(frame) == 6 and isinstance(frame[5], list) and isinstance(frame[3], int):
            count = crc_count(frame[3])
            if 0 <= count <= max_crcs:
                frame[5] = frame[5][:count] + [0] * (count - len(frame[5]))
    try:
        content = {s: sum(f[3] for f in frames if f[0] == s) for s in ("graph", "weights")}
        fields["compressed_size"] = sum(f[2] for f in frames)
    except TypeError:
        return
    fields["graph_size"] = content["graph"]
    if isinstance(fields.get("weights"), dict):
        fields["weights"]["size"] = content["weights"]
    fields["model_size"] = content["graph"] + content["weights"]


@FUZZ_V2
@given(
    codec=st.sampled_from(["raw", "zstd"]),
    changes=some_fields(v2_values),
    consistent=st.booleans(),
    ascii_only=st.booleans(),
)
def test_v2_layout_fields_of_any_value_raise_only_bundle_errors(
    codec: str,
    changes: dict[str, Any],
    consistent: bool,
    ascii_only: bool,
    weighted: dict,
    mlp_expected: np.ndarray,
) -> None:
    original = weighted[codec]
    fields = json.loads(json.dumps(split_blob(original[0])[0])) | changes
    if consistent:
        make_consistent(fields)
    crafted = with_header(original[0], fields, ensure_ascii=ascii_only)
    check_weighted(crafted, original, mlp_expected, frames_changed=False)


@FUZZ_V2
@given(
    codec=st.sampled_from(["raw", "zstd"]),
    index=st.integers(0, 1),
    delta=st.integers(1, 2**40) | st.integers(1, 64),
    grow=st.booleans(),
)
def test_v2_frames_reaching_past_the_blob_or_short_of_its_end_are_refused(
    codec: str, index: int, delta: int, grow: bool, weighted: dict
) -> None:
    """A frame made longer or shorter, the sums kept consistent: the frames no longer end where the blob
    does. Refused by the size check, before anything is allocated or decoded."""
    blob = weighted[codec][0]
    fields = json.loads(json.dumps(split_blob(blob)[0]))
    frame = fields["frames"][index]
    delta = (
        delta
        if grow
        else -min(delta, frame[2] - 1 - (RAW_PREFIX_SIZE + frame[4] if frame[1] == "raw" else 0))
    )
    assume(delta != 0)
    frame[2] += delta
    if frame[1] == "raw":  # a raw frame's size is its prefix, padding and content
        frame[3] += delta
    make_consistent(fields, max_crcs=1 << 18)  # 2**40 more bytes of raw content: 131,072 more CRCs
    crafted = with_header(blob, fields)
    error, peak = peak_allocation(lambda: unpack_blob(crafted, max_model_size=1 << 62))
    if codec == "raw" and index == 0 and delta % 64:
        # The raw weights frame behind the graph frame moved off its 64-byte boundary: refused first.
        assert isinstance(error, CorruptBlobError), error
        assert "frame 2: raw content not at a 64-byte boundary" in str(error), error
    elif grow:
        assert isinstance(error, TruncatedBlobError), error
    elif frame[:2] == ["weights", "raw"]:  # less raw content: a smaller section, which tensors overrun
        assert isinstance(error, CorruptBlobError), error
        assert re.search("unexpected trailing bytes|lies outside the weights section", str(error)), error
    else:
        assert isinstance(error, CorruptBlobError) and "unexpected trailing bytes" in str(error), error
    assert peak < (1 << 20) + CRC_ENTRY_COST * extra_crcs(fields, blob)


@FUZZ_V2
@given(codec=st.sampled_from(["raw", "zstd"]), data=st.data())
def test_v2_frame_sizes_moved_between_frames_are_refused(
    codec: str, data: st.DataObject, weighted: dict
) -> None:
    """Frame sizes shuffled with their sum kept: every frame still lies inside the blob, but not where
    a frame of its kind starts or ends."""
    blob = weighted[codec][0]
    fields = json.loads(json.dumps(split_blob(blob)[0]))
    graph, weights = fields["frames"]
    moved = data.draw(st.integers(-(graph[2] - 1), weights[2] - 1 - RAW_PREFIX_SIZE).map(lambda m: m or 1))
    graph[2] += moved
    weights[2] -= moved
    if weights[1] == "raw":
        weights[3] -= moved
    make_consistent(fields)
    with pytest.raises((ChecksumMismatchError, CorruptBlobError)):
        unpack_blob(with_header(blob, fields), max_model_size=1 << 62)


@FUZZ_V2
@given(
    codec=st.sampled_from(["raw", "zstd"]),
    elem_type=st.sampled_from(sorted(TENSOR_DTYPES)),
    offset=st.integers(0, 8704 + 128) | st.integers(0, 2**66),
    count=st.integers(0, 8704 + 64) | st.integers(0, 2**66),
)
def test_v2_tensor_anywhere_is_refused_outside_the_section_and_read_exactly_inside(
    codec: str, elem_type: int, offset: int, count: int, weighted: dict
) -> None:
    blob, _, weights = weighted[codec]
    dtype = np.dtype(TENSOR_DTYPES[elem_type])
    entry = ["extra", elem_type, [count], offset, count * dtype.itemsize]
    fields = json.loads(json.dumps(split_blob(blob)[0]))
    fields["weights"]["tensors"].append(entry)
    crafted = with_header(blob, fields)
    inside = offset % dtype.itemsize == 0 and offset + count * dtype.itemsize <= len(weights.data)
    if not inside:
        with pytest.raises(CorruptBlobError, match="lies outside the weights section or is misaligned"):
            unpack_blob(crafted)
        return
    unpacked = unpack_blob(crafted)
    ref = unpacked.header.weights.tensors[-1]  # type: ignore[union-attr]
    tensor = unpacked.tensor(ref)
    assert tensor.dtype == dtype and tensor.shape == (count,)
    assert tensor.tobytes() == weights.data[offset : offset + count * dtype.itemsize]


CRC_EDITS = ("value", "replace", "insert", "delete", "swap", "flip-bit")


@FUZZ_V2
@given(piece=st.sampled_from([RAW_CRC_PIECE, SMALL_PIECE]), edit=st.sampled_from(CRC_EDITS), data=st.data())
def test_v2_mutated_crc_lists_raise_only_bundle_errors(
    piece: int, edit: str, data: st.DataObject, pieced: dict, mlp_expected: np.ndarray
) -> None:
    """The raw frame's CRC-32 list replaced by any value, or one entry changed, added, dropped, or two
    swapped: refused with a BundleError unless the list is still the true one."""
    original = pieced[piece]
    with pytest.MonkeyPatch.context() as patch:
        crc_pieces(patch, piece)  # the loader reads the blob with the pieces it was written with
        fields = json.loads(json.dumps(split_blob(original[0])[0]))
        entry = fields["frames"][1]
        true = list(entry[5])
        assert len(true) == crc_count(len(original[2].data)) == (34 if piece == SMALL_PIECE else 1)
        crcs = entry[5]
        some = st.integers(0, len(crcs) - 1)
        if edit == "value":
            entry[5] = data.draw(
                crc_lists | st.lists(crc_values, min_size=len(true) - 1, max_size=len(true) + 1)
            )
        elif edit == "replace":
            crcs[data.draw(some)] = data.draw(crc_values)
        elif edit == "insert":
            crcs.insert(data.draw(st.integers(0, len(crcs))), data.draw(crc_values))
        elif edit == "delete":
            del crcs[data.draw(some)]
        elif edit == "swap":
            i, j = data.draw(some), data.draw(some)
            crcs[i], crcs[j] = crcs[j], crcs[i]
        else:
            crcs[data.draw(some)] ^= 1 << data.draw(st.integers(0, 31))
        crafted = with_header(original[0], fields)
        try:
            unpack_blob(crafted)
        except BundleError as exc:
            event(f"unpack_blob raised {type(exc).__name__}")
        else:
            # True == 1 and 1.0 == 1 in Python: compare the JSON, where they differ.
            assert json.dumps(entry[5]) == json.dumps(true), "a CRC-32 list other than the true one passed"
            event("the true CRC-32 list")
        check_weighted(crafted, original, mlp_expected, frames_changed=False)


def _declare_more(fields: dict[str, Any], graph_extra: int, weights_extra: int) -> None:
    graph, weights = fields["frames"]
    graph[3] += graph_extra
    weights[3] += weights_extra
    if weights[1] == "raw":
        weights[2] += weights_extra
    make_consistent(fields, max_crcs=1 << 22)  # 2**44 more bytes of raw content: 2**21 more CRCs


@FUZZ_V2
@given(
    codec=st.sampled_from(["raw", "zstd"]),
    graph_extra=st.integers(0, 2**44) | st.integers(0, 1 << 20),
    weights_extra=st.integers(0, 2**44) | st.integers(0, 1 << 20),
    limit=st.integers(0, 2**45) | st.integers(0, 1 << 21),
    session=st.booleans(),
)
def test_v2_declared_sizes_never_allocate_more_than_the_limit(
    codec: str, graph_extra: int, weights_extra: int, limit: int, session: bool, weighted: dict
) -> None:
    """A consistent header declaring more graph or weights content than its frames hold: over the
    limit it is refused before anything is allocated; under it, the frames' own sizes give it away,
    still before any buffer is sized from the header."""
    assume(graph_extra or weights_extra)
    blob = weighted[codec][0]
    fields = json.loads(json.dumps(split_blob(blob)[0]))
    _declare_more(fields, graph_extra, weights_extra)
    crafted = with_header(blob, fields)
    if session:
        error, peak = peak_allocation(lambda: session_from_blob(crafted, providers=CPU, max_model_size=limit))
    else:
        error, peak = peak_allocation(lambda: unpack_blob(crafted, max_model_size=limit))
    if fields["model_size"] > limit:
        assert isinstance(error, BlobTooLargeError), error
        assert f"declares a {fields['model_size']:,}-byte model" in str(error)
    elif codec == "raw" and weights_extra:
        assert isinstance(error, TruncatedBlobError), error
    else:
        assert isinstance(error, ChecksumMismatchError) and "does not match its header" in str(error), error
    assert peak < (1 << 20) + CRC_ENTRY_COST * extra_crcs(fields, blob)


@pytest.mark.parametrize("section", ["graph", "weights"])
@pytest.mark.parametrize(
    ("real_size", "declared"),
    [(64 << 20, 70_000), (70_000, 32 << 20)],
    ids=["bomb-64MiB-declared-70kB", "70kB-declared-32MiB"],
)
def test_v2_frame_lying_about_its_content_size_never_allocates_more_than_declared(
    section: str, real_size: int, declared: int, weighted: dict
) -> None:
    """Header and zstd frame header agree on ``declared``; the compressed data holds ``real_size`` bytes."""
    blob, graph, weights = weighted["zstd"]
    lying = with_content_size(zstd_frame(lying_content(real_size, declared)), declared)
    fields = json.loads(json.dumps(split_blob(blob)[0]))
    graph_frame, weights_frame = fields["frames"]
    frames = split_blob(blob)[1]
    if section == "graph":
        fields["frames"][0] = ["graph", "zstd", len(lying), declared, 0]
        frames = lying + frames[graph_frame[2] :]
    else:
        fields["frames"][1] = ["weights", "zstd", len(lying), declared, 0]
        frames = frames[: graph_frame[2]] + lying
    make_consistent(fields)
    payload = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    crafted = pack_header(payload, version=2) + frames
    error, peak = peak_allocation(lambda: unpack_blob(crafted, threads=1))
    assert isinstance(error, ChecksumMismatchError), error
    assert f"{section} frame 1 of 1 is damaged" in str(error)
    assert peak < declared + (1 << 20)


# --- bundle manifests ------------------------------------------------------------------------------


@FUZZ
@given(manifest=json_values | st.binary(max_size=200))
def test_random_manifests_raise_only_bundle_errors(
    manifest: Any, folder: Folder, expected: np.ndarray
) -> None:
    path = folder.bundle / "manifest.json"
    if isinstance(manifest, bytes):
        path.write_bytes(manifest)
    else:
        folder.write(manifest)
    use_bundle(folder, expected)


@FUZZ
@given(plan=manifest_plans)
@pytest.mark.slow
def test_manifest_entries_of_any_value_raise_only_bundle_errors(
    plan: dict[str, Any], folder: Folder, expected: np.ndarray
) -> None:
    """Real entries with fields replaced: hostile paths, the secret's true size and sha, any JSON value."""
    folder.write(manifest_from(plan, folder))
    use_bundle(folder, expected)


@FUZZ
@given(steps=mutations, indent=st.sampled_from([None, 2]))
@pytest.mark.slow
def test_mutated_manifest_bytes_raise_only_bundle_errors(
    steps: list[tuple[str, float, int]], indent: int | None, folder: Folder, expected: np.ndarray
) -> None:
    text = json.dumps(folder.manifest, indent=indent).encode()
    (folder.bundle / "manifest.json").write_bytes(mutate(text, steps))
    use_bundle(folder, expected)


def test_the_fuzzed_folder_is_a_valid_bundle(folder: Folder, expected: np.ndarray) -> None:
    """The fuzz tests start from a bundle that opens, reads and runs (else they would prove nothing)."""
    folder.write(folder.manifest)
    bundle = open_bundle(folder.bundle)
    assert bundle.names == MODELS
    assert {bundle.read_blob(name) for name in MODELS} == folder.inside
    np.testing.assert_allclose(
        bundle.session("upscaler", providers=CPU).run(None, {"x": sample_input()})[0],
        expected,
        rtol=1e-5,
        atol=1e-6,
    )
    secret = {**folder.manifest["models"]["denoiser"], "file": "../outside/secret.onnx.ocb"}
    folder.write(folder.fill_in({**folder.manifest, "models": {"denoiser": secret}}))
    with pytest.raises(ManifestError, match="points outside its folder"):
        open_bundle(folder.bundle)


# --- a hostile bundle folder: links, special files, unencodable names ---------------------------


@pytest.fixture
def bundle_dir(tmp_path: Path, blobs: dict[str, bytes]) -> Path:
    return write_bundle(
        tmp_path / "android",
        {name: (blob_format(blob), blob) for name, blob in blobs.items()},
        platform="android",
    )


def set_entry(root: Path, name: str, **fields: Any) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["models"][name].update(fields)
    (root / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("verify", [True, False])
def test_blob_that_links_out_of_the_bundle_folder_is_refused(
    verify: bool, bundle_dir: Path, blobs: dict[str, bytes], tmp_path: Path
) -> None:
    """The link's target is byte for byte the blob the manifest records: only the link gives it away."""
    outside = tmp_path / "elsewhere" / "denoiser.onnx.ocb"
    outside.parent.mkdir()
    (bundle_dir / "denoiser.onnx.ocb").rename(outside)
    (bundle_dir / "denoiser.onnx.ocb").symlink_to(outside)
    with pytest.raises(ManifestError, match=r"denoiser.*(outside|link)"):
        open_bundle(bundle_dir, verify=verify).read_blob("denoiser")


@pytest.mark.parametrize("replacement", ["symlink-loop", "dangling-symlink", "directory"])
def test_blob_path_that_is_no_readable_file_is_a_manifest_error(replacement: str, bundle_dir: Path) -> None:
    path = bundle_dir / "denoiser.onnx.ocb"
    path.unlink()
    if replacement == "symlink-loop":
        path.symlink_to(path.name)
    elif replacement == "dangling-symlink":
        path.symlink_to("gone.onnx.ocb")
    else:
        path.mkdir()
    with pytest.raises(ManifestError, match=r"cannot read blob of 'denoiser'"):
        open_bundle(bundle_dir)
    with pytest.raises(ManifestError, match=r"cannot read blob of 'denoiser'"):
        open_bundle(bundle_dir, verify=False).read_blob("denoiser")


def run_children(code: str, *runs: list[str], limit: int | None = None) -> list[tuple[int, str, str]]:
    """Run ``code`` once per argument list, all at once, each in a child process (optionally with an
    address-space limit); (exit code, stdout, stderr) of each. A child still blocked after HANG_GUARD
    seconds is killed and fails the test."""
    prelude = ""
    if limit is not None:
        prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in runs
    ]
    deadline = time.monotonic() + HANG_GUARD
    results, hung = [], []
    for args, child in zip(runs, children, strict=True):
        try:
            out, err = child.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            hung.append(args)
        else:
            results.append((child.returncode, out, err))
    if hung:
        pytest.fail(f"the loader was still blocked after {HANG_GUARD} s with {hung}")
    return results


USE_BUNDLE = """
    import sys
    from onnx_cooker.runtime import BundleError, open_bundle
    try:
        bundle = open_bundle(sys.argv[1], verify=sys.argv[2] == "verify")
        bundle.read_blob(sys.argv[3])
    except BundleError as exc:
        print(type(exc).__name__, exc)
    else:
        print("read")
"""


def test_named_pipe_in_the_bundle_folder_does_not_hang(tmp_path: Path, blobs: dict[str, bytes]) -> None:
    runs = []
    for special, verify in [
        ("manifest.json", "no-verify"),
        ("denoiser.onnx.ocb", "no-verify"),
        ("denoiser.onnx.ocb", "verify"),
    ]:
        root = write_bundle(
            tmp_path / f"{special}-{verify}",
            {name: (blob_format(blob), blob) for name, blob in blobs.items()},
        )
        (root / special).unlink()
        os.mkfifo(root / special)
        runs.append([str(root), verify, "denoiser"])
    for code, out, err in run_children(USE_BUNDLE, *runs):
        assert code == 0, err
        assert out.startswith("ManifestError"), out


def test_read_blob_memory_is_bounded_by_the_file_not_the_manifest(bundle_dir: Path) -> None:
    set_entry(bundle_dir, "denoiser", blob_size=1900 << 20)  # under the default 2 GiB + 1 MiB limit
    ((code, out, err),) = run_children(
        USE_BUNDLE, [str(bundle_dir), "no-verify", "denoiser"], limit=1536 << 20
    )
    assert code == 0, err[-3000:]
    assert out.startswith("ChecksumMismatchError"), out


def test_open_bundle_streams_instead_of_trusting_the_declared_size(bundle_dir: Path) -> None:
    """Verification at start-up reads the file in chunks: the declared size costs no memory."""
    set_entry(bundle_dir, "denoiser", blob_size=1900 << 20)
    ((code, out, err),) = run_children(USE_BUNDLE, [str(bundle_dir), "verify", "denoiser"], limit=1536 << 20)
    assert code == 0, err[-3000:]
    assert out.startswith("ChecksumMismatchError ") and "denoiser.onnx.ocb: blob does not match" in out, out


@pytest.mark.parametrize("where", ["entry", "entry-verified", "bundle-path", "bundle-path-nul"])
def test_unencodable_paths_are_manifest_errors(where: str, bundle_dir: Path) -> None:
    if where.startswith("entry"):
        set_entry(bundle_dir, "denoiser", file="denoiser\ud800.onnx.ocb")  # json.dumps writes \ud800
        # refused as the manifest's text, as cJSON refuses it (the C loader reaches the same verdict)
        with pytest.raises(
            ManifestError, match=r"manifest\.json is not valid JSON \(a string holds a lone surrogate"
        ):
            open_bundle(bundle_dir, verify=where == "entry-verified").read_blob("denoiser")
    else:
        path = f"{bundle_dir}/\ud800" if where == "bundle-path" else f"{bundle_dir}/\0"
        with pytest.raises(ManifestError, match="cannot read"):
            open_bundle(path)
