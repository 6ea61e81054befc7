"""Shared helpers for the runtime-loader tests: blobs, crafted headers (models: tests/models.py)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shutil
import struct
import subprocess
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper

import onnx_cooker.runtime.header as header_module
from onnx_cooker.build.target_check import ensure_runtime
from onnx_cooker.cook.weights import externalize
from onnx_cooker.runtime import smallload
from onnx_cooker.runtime.compat import ort_format_version
from onnx_cooker.runtime.constants import LEGACY_BLOB_FORMAT_VERSION
from onnx_cooker.runtime.header import HEADER_MAGIC, SKIPPABLE_MAGIC, TRAILER_MAGIC, read_header
from onnx_cooker.runtime.sections import EXTENT_ALIGNMENT, WEIGHT_ALIGNMENT
from onnx_cooker.runtime.writer import Weights, encode_blob, encode_blob_v1, encode_blob_v2
from tests.models import IN_FEATURES

REPO = Path(__file__).resolve().parents[1]
CPU = ["CPUExecutionProvider"]

# Defaults of encode_blob's header fields; tests override what they are about.
HEADER_DEFAULTS: dict[str, Any] = {
    "platform": "test-platform",
    "name": "tiny",
    "cook_key": "0" * 64,
    "min_runtime_version": "1.16",
}


def numpy_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """What ``tests.models.tiny_model`` computes, evaluated with numpy from the model's own initializers."""
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    return np.maximum(x @ weights["W"] + weights["b"], 0)


def sample_input(seed: int = 1, rows: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, IN_FEATURES)).astype(np.float32)


def run_source(onnx_bytes: bytes, x: np.ndarray) -> np.ndarray:
    """onnxruntime (CPU) on the uncooked source model: the expected output of every cooked form."""
    return onnxruntime.InferenceSession(onnx_bytes, providers=CPU).run(None, {"x": x})[0]


def to_ort_format(onnx_bytes: bytes, out_dir: Path) -> bytes:
    """The ORT-format file onnxruntime itself writes for ``onnx_bytes`` (CPU EP only, ``basic``)."""
    path = out_dir / "model.ort"
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(path)
    options.add_session_config_entry("session.save_model_format", "ORT")
    onnxruntime.InferenceSession(onnx_bytes, options, providers=CPU)
    return path.read_bytes()


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The model's initializers as numpy arrays, by name."""
    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}


def split_weights(model: onnx.ModelProto, name: str = "mlp") -> tuple[bytes, Weights]:
    """``onnx_cooker.cook.weights.externalize`` on a copy of ``model``: the graph bytes and its weights."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return externalize(copy, name)


def make_blob(model: bytes, model_format: str, **fields: Any) -> bytes:
    """``encode_blob`` (format version 3) with test defaults; the ORT format version is read the way the
    cooker would."""
    header = {**HEADER_DEFAULTS, "ort_format_version": ort_format_version(model), **fields}
    return encode_blob(model, level=3, model_format=model_format, **header)


def make_blob_v2(model: bytes, model_format: str, **fields: Any) -> bytes:
    """A version-2 blob (``encode_blob_v2``, what cookers before format 3 wrote) with the defaults of
    ``make_blob``."""
    header = {**HEADER_DEFAULTS, "ort_format_version": ort_format_version(model), **fields}
    return encode_blob_v2(model, level=3, model_format=model_format, **header)


def make_blob_v1(model: bytes, model_format: str, **fields: Any) -> bytes:
    """A legacy version-1 blob (``encode_blob_v1``) with the defaults of ``make_blob``."""
    header = {**HEADER_DEFAULTS, "ort_format_version": ort_format_version(model), **fields}
    return encode_blob_v1(model, level=3, model_format=model_format, **header)


def make_weighted_blob(
    model: onnx.ModelProto,
    codec: str = "auto",
    *,
    threads: int | None = None,
    version: int = 3,
    **fields: Any,
) -> tuple[bytes, bytes, Weights]:
    """An ONNX blob (format ``version``, 3 or 2) of ``model`` with its big initializers in the weights
    section, stored with ``codec`` ("raw", "zstd" or "auto"); returns (blob, graph bytes, weights)."""
    graph, weights = split_weights(model, fields.get("name", HEADER_DEFAULTS["name"]))
    weights = dataclasses.replace(weights, codec=codec)
    header = {**HEADER_DEFAULTS, **fields}
    encode = encode_blob if version == 3 else encode_blob_v2
    blob = encode(graph, level=3, weights=weights, threads=threads, model_format="onnx", **header)
    return blob, graph, weights


def pack_header(
    payload: bytes, *, version: int = LEGACY_BLOB_FORMAT_VERSION, crc: int | None = None
) -> bytes:
    """A header frame around ``payload`` with a correct CRC unless ``crc`` is given.

    The version defaults to the legacy 1 (crafted version-1 headers); pass ``version=2`` for others.
    """
    prefix = struct.pack("<8sHI", HEADER_MAGIC, version, zlib.crc32(payload) if crc is None else crc)
    return struct.pack("<II", SKIPPABLE_MAGIC, len(prefix) + len(payload)) + prefix + payload


def split_blob(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """The header fields (as JSON data) and what follows the header frame in a well-formed blob: the
    model frame (version 1), all the frames (version 2), or the frames and the trailer (version 3)."""
    header, offset = read_header(blob)
    return header.to_dict(), blob[offset:]


def header_start(blob: bytes) -> int:
    """Where the header frame starts: 0, or (a version-3 blob led by its ORT graph) the trailer's word."""
    if blob[:4] == struct.pack("<I", SKIPPABLE_MAGIC):
        return 0
    magic, offset = struct.unpack_from("<8sQ", blob, len(blob) - 16)
    assert magic == TRAILER_MAGIC
    return offset


def blob_version(blob: bytes) -> int:
    """The format version a blob's header frame names (read without checking anything else)."""
    return struct.unpack_from("<H", blob, header_start(blob) + 16)[0]


def header_payload(blob: bytes) -> bytes:
    """The JSON bytes of a blob's header frame (after the frame prefix, 8 B, and header prefix, 14 B)."""
    _, offset = read_header(blob)
    return blob[header_start(blob) + 22 : offset]


def keep_alignment(payload: bytes, blob: bytes) -> bytes:
    """``payload`` padded with spaces (still valid JSON) so that a header frame around it ends where
    ``blob``'s header frame ends, modulo WEIGHT_ALIGNMENT: ``blob``'s frames put behind it move by a
    multiple of 64 bytes, and their raw content stays on the 64-byte boundaries the loader requires."""
    room = len(header_payload(blob)) - len(payload)
    return payload + b" " * (room % WEIGHT_ALIGNMENT)


def repack(
    blob: bytes,
    *,
    frame: bytes | None = None,
    same_length: bool = False,
    aligned: bool = False,
    **changes: Any,
) -> bytes:
    """``blob`` with header fields changed (and optionally other bytes after the header), CRC recomputed,
    in the blob's own format version.

    ``same_length`` pads the JSON with spaces to its old length, so that the frames of a version-2
    blob stay at the offsets they were written at. ``aligned`` pads it only as far as ``keep_alignment``
    does: the frames move by a multiple of 64 bytes. Either keeps raw frame content aligned; without
    them a version-2 blob with raw frames is refused ("raw content not at a 64-byte boundary").
    """
    fields, old_frame = split_blob(blob)
    fields.update(changes)
    payload = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    if blob_version(blob) >= 3:
        return _repack_v3(blob, fields, changes, frame)
    if same_length:
        room = len(header_payload(blob)) - len(payload)
        assert room >= 0, "the changed header no longer fits in the old one"
        payload += b" " * room
    elif aligned:
        payload = keep_alignment(payload, blob)
    return pack_header(payload, version=blob_version(blob)) + (old_frame if frame is None else frame)


def _repack_v3(blob: bytes, fields: dict[str, Any], changes: dict[str, Any], frame: bytes | None) -> bytes:
    """``repack`` of a version-3 blob: its frames list their offsets, so the header keeps its length
    where the new JSON fits (padded with spaces), else grows by whole EXTENT_ALIGNMENTs with the
    offsets of the frames behind it moved along."""
    start = header_start(blob)
    old = len(header_payload(blob))
    rest = split_blob(blob)[1] if frame is None else frame
    grow = 0
    while True:
        shifted = dict(fields)
        if grow:
            shifted["frames"] = [
                [f[0], f[1], f[2] + grow if f[2] > start else f[2], *f[3:]] for f in fields["frames"]
            ]
        payload = json.dumps(shifted, sort_keys=True, separators=(",", ":")).encode()
        if len(payload) <= old + grow:
            payload += b" " * (old + grow - len(payload))
            break
        grow += EXTENT_ALIGNMENT
    body = rest[:-16] if frame is None else rest
    trailer = struct.pack("<8sQ", TRAILER_MAGIC, start)
    tail = trailer if frame is None else b""
    # The frames keep their bytes; behind a header grown by whole EXTENT_ALIGNMENTs, raw extents
    # stay aligned.
    return blob[:start] + pack_header(payload, version=3) + body + tail


# What parsing a blob header costs per CRC-32 it lists (measured: about 19 bytes: its JSON text, a list,
# then a tuple). Headers that declare huge raw content list one CRC-32 per RAW_CRC_PIECE of it: memory in
# proportion to the header's own bytes, never to the content it declares.
CRC_ENTRY_COST = 24


def extra_crcs(fields: dict[str, Any], original: bytes) -> int:
    """How many more CRC-32s the header ``fields`` (JSON data) list than ``original``'s header does."""

    def count(frames: list[Any]) -> int:
        return sum(
            len(f[5]) for f in frames if isinstance(f, list) and len(f) == 6 and isinstance(f[5], list)
        )

    return count(fields["frames"]) - count(split_blob(original)[0]["frames"])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_bundle(
    root: Path, blobs: dict[str, tuple[str, bytes]], *, platform: str = "test-platform", **extra: Any
) -> Path:
    """A bundle folder as the cooker lays it out: one blob file per model and a manifest.json.

    ``blobs`` maps a model name to (format, blob bytes). Entries carry informational fields beyond
    what the loader requires, as the cooker's manifest does.
    """
    root.mkdir(parents=True, exist_ok=True)
    models = {}
    for name, (model_format, blob) in blobs.items():
        file = f"{name}.{model_format}.ocb"
        (root / file).write_bytes(blob)
        header, _ = read_header(blob)
        models[name] = {
            "file": file,
            "format": model_format,
            "blob_sha256": sha256(blob),
            "blob_size": len(blob),
            "model_size": header.model_size,
            "cook_key": header.cook_key,
            "execution_providers": list(header.execution_providers),
        }
    manifest = {"manifest_version": 1, "platform": platform, "models": models, **extra}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


def peak_allocation(call: Callable[[], object]) -> tuple[BaseException | None, int]:
    """The exception ``call`` raised (or None) and the peak of Python allocations while it ran."""
    error = None
    tracemalloc.start()
    try:
        call()
    except Exception as exc:  # returned to the test, which checks its type
        error = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return error, peak


def mutate(data: bytes, steps: list[tuple[str, float, int]]) -> bytes:
    """Apply (kind, where in 0..1, byte) steps: flip bits, insert a byte, delete one, truncate."""
    out = bytearray(data)
    for kind, where, value in steps:
        if not out:
            break
        index = min(int(where * len(out)), len(out) - 1)
        if kind == "flip":
            out[index] ^= value or 1
        elif kind == "insert":
            out.insert(int(where * len(out)), value)  # where == 1 appends
        elif kind == "delete":
            del out[index]
        else:
            del out[index:]
    return bytes(out)


RUNTIMES_CACHE = REPO / ".pytest_cache" / "runtimes"  # the target onnxruntimes every test shares


def run_in_runtime(
    version: str,
    work: Path,
    args: list[str],
    timeout: float = 600,
    *,
    package: str = "onnxruntime",
    extras: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run ``python -I <args>`` in the own environment of ``package`` ``version`` (and ``extras``, e.g.
    a plugin EP's package) with a copy of the loader in ``work/onnx_cooker`` (passed as the first
    argument after ``args[0]``'s script or ``-c`` code); the JSON object its last line prints,
    checked to come from that onnxruntime version."""
    profile = REPO / "platforms" / "windows-dml.yaml"
    python = ensure_runtime(version, RUNTIMES_CACHE, profile, package=package, extras=extras)
    shutil.copytree(REPO / "onnx_cooker" / "runtime", work / "onnx_cooker" / "runtime")
    shutil.copy2(REPO / "onnx_cooker" / "__init__.py", work / "onnx_cooker" / "__init__.py")
    head = 2 if args[0] == "-c" else 1
    done = subprocess.run(
        [str(python), "-I", *args[:head], str(work), *args[head:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["onnxruntime"] == version
    return report


def fresh_header_cache(patch: Any) -> None:
    """Parse headers afresh, through ``patch`` (a ``pytest.MonkeyPatch``), in a test that changes the
    loader's layout constants: the loader keeps headers parsed under its real ones
    (``header._cached_header``), which the patch puts back with the constants."""
    fresh = functools.lru_cache(maxsize=64)(header_module._header_from_json)
    patch.setattr(header_module, "_cached_header", fresh)
    smallload.forget()  # recipes of small blobs made under the real constants (smallload.py)


INCOMPATIBLE_LOAD = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); import onnxruntime\n"
    "from onnx_cooker.runtime import session_from_blob, IncompatibleRuntimeError\n"
    "try:\n"
    "    session_from_blob(open(sys.argv[2], 'rb').read()); raised = None\n"
    "except IncompatibleRuntimeError as exc:\n"
    "    raised = [exc.operator, str(exc)]\n"
    "print(json.dumps({'onnxruntime': onnxruntime.__version__, 'raised': raised}))\n"
)


def incompatibility_in(version: str, work: Path, blob: Path) -> list[str] | None:
    """The Python loader's IncompatibleRuntimeError loading ``blob`` in onnxruntime ``version``'s own
    environment: [its operator, its message], or None when the blob loads there."""
    return run_in_runtime(version, work, ["-c", INCOMPATIBLE_LOAD, str(blob)])["raised"]
