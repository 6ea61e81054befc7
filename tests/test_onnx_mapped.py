"""The ``onnx-mapped`` load path: ``Bundle.session`` has onnxruntime map an ONNX blob's raw weights
from the blob file itself, as it maps a loose ``.onnx.data`` (docs/bundle-format.md, "Load paths").
Per-version proofs (every target onnxruntime, the file rewritten under a live session) are in
tests/test_load_paths.py; here: the choice, what is mapped, hostile references, a replaced file."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from runtime_helpers import CPU, HEADER_DEFAULTS, split_weights, write_bundle

from onnx_cooker.runtime import CorruptBlobError, load_info, open_bundle
from onnx_cooker.runtime.compat import parse_version
from onnx_cooker.runtime.errors import SessionCreateError
from onnx_cooker.runtime.loadpaths import (
    FILE_BUFFERS_SINCE,
    MAPPED_WEIGHTS_MIN,
    BlobFile,
    _still_the_checked_file,
)
from onnx_cooker.runtime.pager import can_page
from onnx_cooker.runtime.writer import encode_blob
from tests.models import conv_bn_relu_model, dense_model

X = np.random.default_rng(8).standard_normal((1, 1024)).astype(np.float32)


def onnx_blob(codec: str = "raw", edit=None, outputs: int = 512) -> tuple[bytes, np.ndarray]:
    """An MLP (1024 x ``outputs`` float32 weights) as an ONNX blob (weights ``codec``), and the
    source's output on X."""
    model = dense_model(1024, outputs, batch=1, seed=12, activation="Relu", name="net")
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": X})[0]
    graph, weights = split_weights(model, "net")
    if edit is not None:
        proto = onnx.ModelProto.FromString(graph)
        edit(proto)
        graph = proto.SerializeToString()
    stored = dataclasses.replace(weights, codec=codec)
    return encode_blob(graph, level=3, weights=stored, model_format="onnx", **HEADER_DEFAULTS), expected


def mappings_of(path: Path) -> int:
    return sum(1 for line in Path("/proc/self/maps").read_text().splitlines() if line.endswith(str(path)))


def test_big_raw_weights_of_a_bundle_are_mapped_by_onnxruntime_from_the_blob_file(tmp_path: Path) -> None:
    """From MAPPED_WEIGHTS_MIN up, with prepacking on, where the loader cannot page its own mapping
    (before onnxruntime 1.32, or not Linux): a file onnxruntime maps itself is let go after packing,
    memory the loader lends is not (docs/design.md, "Loading from memory"). From 1.32 on Linux the
    loader's own mapping goes in place and is paged (tests/test_pager.py measures it)."""
    outputs = MAPPED_WEIGHTS_MIN // (1024 * 4)
    blob, expected = onnx_blob(outputs=outputs)
    root = write_bundle(tmp_path / "bundle", {"net": ("onnx", blob)})
    bundle = open_bundle(root)
    paged = can_page() and parse_version(onnxruntime.__version__) >= FILE_BUFFERS_SINCE

    session = bundle.session("net", providers=CPU)

    assert load_info(session).path.value == ("onnx-file-buffers" if paged else "onnx-mapped")
    assert load_info(session).in_place
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)
    mapped = bundle.session("net", providers=CPU, load_path="onnx-mapped")
    np.testing.assert_allclose(mapped.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)
    # with prepacking off nothing is packed twice: the loader's own views are faster
    assert load_info(bundle.session("net", providers=CPU, low_memory=True)).path.value != "onnx-mapped"


def test_onnxruntime_maps_the_blob_file_itself_and_lets_it_go_with_the_session(tmp_path: Path) -> None:
    blob, expected = onnx_blob()
    root = write_bundle(tmp_path / "bundle", {"net": ("onnx", blob)})
    path = next(root.glob("*.ocb")).resolve()
    bundle = open_bundle(root)
    assert load_info(bundle.session("net", providers=CPU)).path.value != "onnx-mapped"  # 2 MB: small

    session = bundle.session("net", providers=CPU, low_memory=True, load_path="onnx-mapped")

    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-5, atol=1e-5)
    # onnxruntime's own mappings of the blob file (one per tensor), not the loader's whole-file map
    assert mappings_of(path) == 2
    del session
    assert mappings_of(path) == 0


def test_weights_stored_as_zstd_frames_are_not_mapped(tmp_path: Path) -> None:
    blob, expected = onnx_blob("zstd")
    root = write_bundle(tmp_path / "bundle", {"net": ("onnx", blob)})
    session = open_bundle(root).session("net", providers=CPU)
    assert load_info(session).path.value != "onnx-mapped"
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(SessionCreateError, match="not one raw extent"):
        open_bundle(root).session("net", providers=CPU, load_path="onnx-mapped")


@pytest.mark.parametrize("location", ["/dev/zero", "../../etc/passwd", "net.onnx.ocb", ""])
def test_a_graph_naming_any_file_is_refused_before_onnxruntime_maps_anything(
    location: str, tmp_path: Path
) -> None:
    """The loader writes the blob file's name into the references itself, only after checking that
    each names the blob's own weights: a graph naming any other file (the blob file's own name
    included) is refused as on every path."""

    def edit(proto: onnx.ModelProto) -> None:
        for entry in proto.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location

    blob, _ = onnx_blob(edit=edit)
    root = write_bundle(tmp_path / "bundle", {"net": ("onnx", blob)})
    with pytest.raises(
        CorruptBlobError, match=re.escape(f"refers to {location!r}, not the blob's own weights")
    ):
        open_bundle(root).session("net", providers=CPU)


def test_a_file_replaced_under_its_name_is_told_apart_from_the_checked_one(tmp_path: Path) -> None:
    """What ``onnx-mapped`` checks before and after onnxruntime opens the file by name: a re-cook
    renaming a new blob over it in between would have onnxruntime map the wrong bytes."""
    checked = tmp_path / "net.onnx.ocb"
    checked.write_bytes(b"checked")
    fd = os.open(checked, os.O_RDONLY)
    try:
        _still_the_checked_file(BlobFile(fd, str(checked)), str(checked))  # the same file: fine
        newer = tmp_path / ".new"
        newer.write_bytes(b"another")
        newer.replace(checked)
        with pytest.raises(OSError, match="was replaced while it was loaded"):
            _still_the_checked_file(BlobFile(fd, str(checked)), str(checked))
    finally:
        os.close(fd)


def test_a_graph_whose_dims_outgrow_the_header_cannot_read_past_its_tensor(tmp_path: Path) -> None:
    """onnxruntime sizes a read by the graph's dims; the loader writes the header's length into
    every reference, so a graph asking for more than its extent is refused: it never reads on into
    the blob (the next tensor, the header, the trailer)."""
    weight = np.arange(1024 * 512, dtype=np.float32).reshape(1024, 512)  # 2 MB: the blob is mapped
    model = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["w"], ["y"])],
            "echo",
            [],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
            [onnx.numpy_helper.from_array(weight, "w")],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    graph, weights = split_weights(model, "echo")
    proto = onnx.ModelProto.FromString(graph)
    tensor = proto.graph.initializer[0]
    tensor.dims[0] += 4  # 8 KiB more than the header's extent (still inside the file), no length
    kept = [e for e in tensor.external_data if e.key != "length"]
    del tensor.external_data[:]
    tensor.external_data.extend(kept)
    raw = dataclasses.replace(weights, codec="raw")
    blob = encode_blob(
        proto.SerializeToString(), level=3, weights=raw, model_format="onnx", **HEADER_DEFAULTS
    )
    root = write_bundle(tmp_path / "bundle", {"echo": ("onnx", blob)})
    with pytest.raises(SessionCreateError, match="onnx-mapped") as failure:
        open_bundle(root).session("echo", providers=CPU, load_path="onnx-mapped")
    assert "external data size mismatch" in str(failure.value)  # the length the loader wrote


def test_references_get_the_blob_file_its_offsets_and_the_header_lengths() -> None:
    from onnx_cooker.runtime.onnxrefs import rewrite_locations

    def external(name: str, entries: dict[str, str]) -> onnx.TensorProto:
        tensor = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT, dims=[2])
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in entries.items():
            tensor.external_data.add(key=key, value=value)
        return tensor

    graph = onnx.helper.make_graph(
        [],
        "g",
        [],
        [],
        [external("a", {"location": "w", "offset": "64", "length": "8"}), external("b", {"location": "w"})],
    )
    rewritten = onnx.load_from_string(
        rewrite_locations(onnx.helper.make_model(graph).SerializeToString(), "x.ocb", 65536, {"a": 8, "b": 8})
    )
    entries = {t.name: {e.key: e.value for e in t.external_data} for t in rewritten.graph.initializer}
    assert entries == {
        "a": {"location": "x.ocb", "offset": "65600", "length": "8"},
        "b": {"location": "x.ocb", "offset": "65536", "length": "8"},  # no offset meant 0
    }


def test_a_signed_bundle_never_lets_onnxruntime_reopen_the_blob_by_name(tmp_path: Path) -> None:
    """Its blob's sha256 is checked on the mapped bytes at every load: what onnxruntime reads must
    be those bytes, not a file opened again by name later."""
    from cryptography.hazmat.primitives import serialization

    from onnx_cooker.build.signing import keygen, sign
    from onnx_cooker.runtime.constants import SIGNATURE_NAME

    blob, expected = onnx_blob(outputs=MAPPED_WEIGHTS_MIN // (1024 * 4))
    root = write_bundle(tmp_path / "bundle", {"net": ("onnx", blob)})
    private, public = keygen(tmp_path / "keys")
    (root / SIGNATURE_NAME).write_bytes(sign((root / "manifest.json").read_bytes(), private))
    key = serialization.load_pem_public_key(public.read_bytes()).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    bundle = open_bundle(root, public_keys=[key])

    session = bundle.session("net", providers=CPU)

    assert load_info(session).path.value != "onnx-mapped"
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(SessionCreateError, match="signed bundle"):
        bundle.session("net", providers=CPU, load_path="onnx-mapped")


def test_only_proven_onnxruntime_versions_resolve_the_blob_by_name(tmp_path: Path) -> None:
    from onnx_cooker.runtime.blob import check_blob
    from onnx_cooker.runtime.loadpaths import LoadPath, choose_load_path, why_not

    blob, _ = onnx_blob(outputs=MAPPED_WEIGHTS_MIN // (1024 * 4))
    checked = check_blob(blob)
    model_file = BlobFile(-1, str(tmp_path / "net.onnx.ocb"))
    assert choose_load_path(checked, "1.28.0", model_file=model_file) == LoadPath.ONNX_MAPPED
    assert choose_load_path(checked, "1.24.4", model_file=model_file) == LoadPath.ONNX_MAPPED
    assert choose_load_path(checked, "1.30.0", model_file=model_file) != LoadPath.ONNX_MAPPED
    # 1.32 reads the loader's own mapping in place, paged where that can be done (Linux)
    paged = LoadPath.ONNX_FILE_BUFFERS if can_page() else LoadPath.ONNX_MAPPED
    assert choose_load_path(checked, "1.32.0", model_file=model_file) == paged
    assert "not one of the versions proven" in why_not(LoadPath.ONNX_MAPPED, checked, "1.30.0", model_file)


def test_before_1_32_a_bundle_maps_what_the_shared_door_would_refuse(tmp_path: Path) -> None:
    """Before onnxruntime 1.32 the shared-initializer door is refused for conv nets, and the
    copying path costs a first load more than mapping (choose_load_path): a bundle's conv weights go
    onnx-mapped at any size, with prepacking on. An MLP's small weights, whose door opens, are
    shared from the loader's mapping as from bytes; from 64 MiB (MAPPED_WEIGHTS_MIN) they are mapped
    too. From bytes, with prepacking off, from a signed bundle and from 1.32 the choice is unchanged."""
    from onnx_cooker.runtime.blob import check_blob
    from onnx_cooker.runtime.loadpaths import LoadPath, choose_load_path, optimizers_read_weights

    mlp = check_blob(onnx_blob()[0])  # 2 MB
    graph, weights = split_weights(conv_bn_relu_model(), "net")
    raw = dataclasses.replace(weights, codec="raw")
    conv = check_blob(encode_blob(graph, level=3, weights=raw, model_format="onnx", **HEADER_DEFAULTS))
    assert optimizers_read_weights(conv) and not optimizers_read_weights(mlp)
    model_file = BlobFile(-1, str(tmp_path / "net.onnx.ocb"))
    signed = BlobFile(-1, str(tmp_path / "net.onnx.ocb"), by_name=False)
    for old in ("1.24.4", "1.28.0"):
        assert choose_load_path(conv, old, model_file=model_file) == LoadPath.ONNX_MAPPED
        assert choose_load_path(mlp, old, model_file=model_file) == LoadPath.ONNX_SHARED_INITIALIZERS
        assert choose_load_path(conv, old, model_file=model_file, low_memory=True) != LoadPath.ONNX_MAPPED
        assert choose_load_path(conv, old, model_file=signed) != LoadPath.ONNX_MAPPED
        assert choose_load_path(conv, old) == LoadPath.ONNX_EXTERNAL_INITIALIZERS
        assert choose_load_path(mlp, old) == LoadPath.ONNX_SHARED_INITIALIZERS
    # 1.32 reads the loader's own mapping in place (paged on Linux; small weights: views elsewhere)
    for checked in (conv, mlp):
        assert choose_load_path(checked, "1.32.0", model_file=model_file) == LoadPath.ONNX_FILE_BUFFERS
