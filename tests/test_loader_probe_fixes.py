"""The loader as a game programmer meets it in the field: a signed bundle re-opened while it is
re-cooked, hundreds of live sessions, a working folder that changes, a bundle folder that goes away,
and the natural mistakes (keys, streams, bytes for a path, an empty provider list, the CLI's
output). Each test failed before the fix it covers (docs/loader.md, docs/bundle-format.md)."""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from runtime_helpers import CPU, HEADER_DEFAULTS, REPO, split_weights, write_bundle

from onnx_cooker.build.signing import keygen, sign
from onnx_cooker.runtime import (
    BundleError,
    BundleReplacedError,
    ManifestError,
    MemoryBlob,
    SessionCreateError,
    SignatureError,
    load_info,
    open_bundle,
    session_from_blob,
)
from onnx_cooker.runtime.constants import SIGNATURE_NAME, SIGNING_NAME
from onnx_cooker.runtime.manifestfile import SETTLE_SECONDS
from onnx_cooker.runtime.writer import encode_blob
from tests.models import dense_model, mlp_model

X = np.random.default_rng(5).standard_normal((1, 1024)).astype(np.float32)
RUNTIMES_CACHE = Path(os.environ.get("COOK_RUNTIMES_DIR") or REPO / ".pytest_cache" / "runtimes")


def _bundle(root: Path) -> tuple[Path, np.ndarray]:
    """An ONNX blob of 2 MB with a raw weights section: Bundle.session maps it (onnx-file-buffers)."""
    model = dense_model(1024, 512, batch=1, seed=9, activation="Relu", name="net")
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": X})[0]
    graph, weights = split_weights(model, "net")
    blob = encode_blob(
        graph,
        level=3,
        weights=dataclasses.replace(weights, codec="raw"),
        model_format="onnx",
        **HEADER_DEFAULTS,
    )
    return write_bundle(root, {"net": ("onnx", blob)}), expected


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _mapped(root: Path) -> int:
    text = Path("/proc/self/maps").read_text()
    return sum(1 for line in text.splitlines() if str(root) in line and ".ocb" in line)  # or "(deleted)"


# --- D1: a signed bundle re-opened during a re-cook ----------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COOK_") and k != "PYTHONPATH"}
    return {**base, "COOK_RUNTIMES_DIR": str(RUNTIMES_CACHE), **extra}


@pytest.fixture(scope="module")
def signed_cook(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A project of one model cooked for android with a studio key: (project, private, public)."""
    root = tmp_path_factory.mktemp("signed")
    project = root / "project"
    project.mkdir()
    shutil.copy2(REPO / "dodo.py", project / "dodo.py")
    shutil.copytree(
        REPO / "onnx_cooker", project / "onnx_cooker", ignore=shutil.ignore_patterns("__pycache__")
    )
    (project / "platforms").mkdir()
    shutil.copy2(REPO / "platforms" / "android.yaml", project / "platforms" / "android.yaml")
    (project / "assets").mkdir()
    onnx.save(mlp_model(), project / "assets" / "mlp.onnx")
    private, public = keygen(root / "keys")
    run = subprocess.run(
        [sys.executable, "-m", "doit", "cook"],
        cwd=project,
        env=_env(COOK_SIGNING_KEY=str(private)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return project, private, public


# The manifest task's own code (onnx_cooker.build.actions.run_manifest: publish, manifest, signature,
# operator configs) run again and again, each time with a changed entry: a new manifest and signature.
REPUBLISH = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from pathlib import Path
    from onnx_cooker.build.actions import run_manifest
    platform_dir, key, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    entry = platform_dir / ".entries" / "mlp.json"
    data = json.loads(entry.read_text())
    for index in range(rounds):
        data["republished"] = index
        entry.write_text(json.dumps(data))
        with contextlib.redirect_stdout(io.StringIO()):
            assert run_manifest(platform_dir, "android", ["mlp"], [], None, key) is None
    """
)


@pytest.mark.slow
def test_a_signed_bundle_reopened_during_recooks_never_looks_tampered(
    signed_cook: tuple[Path, Path, Path],
) -> None:
    project, private, public = signed_cook
    platform_dir = project / "build" / "android"
    trusted = [public.read_bytes()]
    cook = subprocess.Popen(
        [sys.executable, "-c", REPUBLISH, str(platform_dir), str(private), "40"],
        cwd=project,
        env=_env(PYTHONPATH=str(project)),
    )
    errors: collections.Counter[str] = collections.Counter()
    opened = 0
    while cook.poll() is None:  # a launcher, or an editor's hot reload, opening it again and again
        try:
            open_bundle(platform_dir, public_keys=trusted, verify=False)
            opened += 1
        except BundleError as exc:
            errors[f"{type(exc).__name__}: {exc}"] += 1
    assert cook.returncode == 0
    assert not errors, (opened, errors.most_common(3))
    assert opened > 40
    assert not (platform_dir / SIGNING_NAME).exists()  # the cook's marker goes with it
    assert open_bundle(platform_dir, public_keys=trusted).names == ("mlp",)


@pytest.mark.slow
def test_a_tampered_signed_manifest_is_still_refused_at_once(
    signed_cook: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    project, _, public = signed_cook
    bundle_dir = Path(shutil.copytree(project / "build" / "android", tmp_path / "bundle"))
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    manifest["models"]["mlp"]["execution_providers"] = ["CPUExecutionProvider"]
    (bundle_dir / "manifest.json").write_text(json.dumps(manifest))
    started = time.monotonic()
    with pytest.raises(SignatureError, match="matches none of the 1 trusted key"):
        open_bundle(bundle_dir, public_keys=[public.read_bytes()])
    assert time.monotonic() - started < SETTLE_SECONDS / 2  # no cook says it is replacing the pair
    # A marker a stopped cook left: waited for, within the bound, then refused all the same
    (bundle_dir / SIGNING_NAME).touch()
    started = time.monotonic()
    with pytest.raises(SignatureError, match=r"matches none.*manifest\.json\.signing says a cook"):
        open_bundle(bundle_dir, public_keys=[public.read_bytes()])
    assert SETTLE_SECONDS <= time.monotonic() - started < SETTLE_SECONDS + 2


def test_a_signature_replaced_while_it_is_read_is_read_again(tmp_path: Path) -> None:
    """The pair in flux with no cook's marker (another tool swapping both): the files' identity
    changed since they were read, so the pair is read again, and the genuine new pair opens."""
    root, _ = _bundle(tmp_path / "bundle")
    private, public = keygen(tmp_path / "keys")
    writer = signed_late(root, private, 0.2)
    writer.start()
    bundle = open_bundle(root, public_keys=[public.read_bytes()])
    writer.join()
    assert bundle.names == ("net",)


# --- D2: one mapping, one descriptor per blob file, whatever the number of live sessions --------


@pytest.mark.slow
def test_live_sessions_of_a_mapped_blob_share_one_mapping_and_descriptor(tmp_path: Path) -> None:
    root, expected = _bundle(tmp_path / "bundle")
    bundle = open_bundle(root)
    fds, maps = _fds(), _mapped(root)
    sessions = [bundle.session("net", providers=CPU) for _ in range(40)]
    assert load_info(sessions[0]).in_place
    assert _fds() - fds <= 1, _fds() - fds  # was one descriptor per session (EMFILE at the limit)
    assert _mapped(root) - maps == 1
    more: list[onnxruntime.InferenceSession] = []

    def load() -> None:
        more.append(bundle.session("net", providers=CPU))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sessions += more
    assert len(sessions) == 48 and _fds() - fds <= 1
    for session in sessions[::9]:
        np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)
    sessions.clear()
    more.clear()
    del session, threads
    gc.collect()
    assert _fds() == fds and _mapped(root) == maps  # closed with the last session using it


def test_a_blob_file_replaced_on_disk_gets_a_mapping_of_its_own(tmp_path: Path) -> None:
    """The shared mapping is the file's (device, inode, size, times): a new file is mapped anew."""
    root, expected = _bundle(tmp_path / "bundle")
    first = open_bundle(root).session("net", providers=CPU)
    blob = next(root.glob("*.ocb"))
    copy = blob.with_name(".copy")
    shutil.copyfile(blob, copy)
    copy.replace(blob)  # the same bytes in a new file, as a re-cook publishes
    second = open_bundle(root).session("net", providers=CPU)
    assert _mapped(root) == 2  # the first's (of the replaced file) and the second's
    for session in (first, second):
        np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)


# --- D3: the bundle is the folder opened, whatever the working folder; a gone folder says so ----


def test_a_bundle_opened_by_a_relative_path_survives_a_change_of_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, expected = _bundle(tmp_path / "game" / "bundle")
    monkeypatch.chdir(tmp_path / "game")
    bundle = open_bundle("bundle", verify=False)
    assert bundle.root == tmp_path / "game" / "bundle"
    monkeypatch.chdir(tmp_path)
    session = bundle.session("net", providers=CPU)
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)


def test_a_bundle_folder_that_is_gone_is_not_called_replaced(tmp_path: Path) -> None:
    root, _ = _bundle(tmp_path / "bundle")
    bundle = open_bundle(root)
    shutil.rmtree(root)  # uninstalled, moved, or its share unmounted: no cook ran
    with pytest.raises(
        ManifestError, match=r"bundle folder .*bundle is gone \(moved, deleted or unmounted\)"
    ) as caught:
        bundle.session("net", providers=CPU)
    assert not isinstance(caught.value, BundleReplacedError)
    assert "newer cook" not in str(caught.value)


def test_a_bundle_a_newer_manifest_replaced_still_says_so(tmp_path: Path) -> None:
    root, _ = _bundle(tmp_path / "bundle")
    bundle = open_bundle(root)
    manifest = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps({**manifest, "note": "a newer cook"}))
    next(root.glob("*.ocb")).unlink()
    with pytest.raises(BundleReplacedError, match=f"call open_bundle\\('{root}'\\) again"):
        bundle.session("net", providers=CPU)


# --- D5, D6, D7: the natural mistakes say what to pass --------------------------------------------


@pytest.mark.parametrize("signed", [True, False])
def test_public_keys_of_the_wrong_type_say_what_to_pass(tmp_path: Path, signed: bool) -> None:
    root, _ = _bundle(tmp_path / "bundle")
    private, public = keygen(tmp_path / "keys")
    if signed:
        (root / SIGNATURE_NAME).write_bytes(sign((root / "manifest.json").read_bytes(), private))
    for keys, message in [
        ([public.read_text()], r"public_keys\[0\] is PEM text \(str\)"),
        ([str(public)], r"public_keys\[0\] is a path"),
        ([public], r"public_keys\[0\] is a path"),
        (public.read_bytes(), r"a list of public keys.*not one bytes"),
        (str(public), r"a list of public keys.*not one str"),
        ([1234], r"public_keys\[0\] is a int, not bytes"),
    ]:
        with pytest.raises(TypeError, match=message) as caught:
            open_bundle(root, public_keys=keys)  # type: ignore[arg-type]
        assert 'Path("studio-signing.pub").read_bytes()' in str(caught.value)
    if signed:
        assert open_bundle(root, public_keys=[bytearray(public.read_bytes())]).names == ("net",)


def test_memory_blob_read_takes_a_stream_and_says_so_for_a_path(tmp_path: Path) -> None:
    root, expected = _bundle(tmp_path / "bundle")
    blob = next(root.glob("*.ocb"))
    data = blob.read_bytes()
    with pytest.raises(TypeError, match=r"takes an open stream, not a path .*open\(path, 'rb'\)"):
        MemoryBlob.read(str(blob), len(data))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"MemoryBlob\.copy\(data\)"):
        MemoryBlob.read(data, len(data))  # type: ignore[arg-type]

    class ReadOnly:  # an archive's stream with read() and nothing else
        def __init__(self, payload: bytes) -> None:
            self._payload, self._at = payload, 0

        def read(self, size: int = -1) -> bytes:
            piece = self._payload[self._at : self._at + min(size, 100_000)]
            self._at += len(piece)
            return piece

    with MemoryBlob.read(ReadOnly(data + b"next"), len(data)) as memory:  # type: ignore[arg-type]
        session = session_from_blob(memory, providers=CPU)
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected, rtol=1e-4, atol=1e-4)


def test_open_bundle_given_bytes_points_to_session_from_blob(tmp_path: Path) -> None:
    root, _ = _bundle(tmp_path / "bundle")
    with pytest.raises(TypeError, match=r"use session_from_blob\(data\)"):
        open_bundle(next(root.glob("*.ocb")).read_bytes())  # type: ignore[arg-type]


def test_an_empty_provider_list_is_refused_not_reported_as_no_ep(tmp_path: Path) -> None:
    root, _ = _bundle(tmp_path / "bundle")
    data = next(root.glob("*.ocb")).read_bytes()
    with pytest.raises(SessionCreateError, match=r"providers=\[\] names no execution provider"):
        session_from_blob(data, providers=[])
    with pytest.raises(SessionCreateError, match=r"providers=\[\]"):
        open_bundle(root).session("net", providers=())
    assert load_info(session_from_blob(data)).providers == ("CPUExecutionProvider",)


# --- D4: python -m onnx_cooker.runtime --------------------------------------------------------------


def _cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "onnx_cooker.runtime", *args],
        cwd=REPO,
        capture_output="stdout" not in kwargs,
        stderr=subprocess.PIPE if "stdout" in kwargs else None,
        text=True,
        timeout=120,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.slow
def test_unpack_blames_the_output_folder_and_names_a_blob_for_a_bundle(tmp_path: Path) -> None:
    root, _ = _bundle(tmp_path / "bundle")
    blob = next(root.glob("*.ocb"))
    done = _cli("unpack", str(blob), "/proc/no-such-folder")
    assert done.returncode == 1
    assert "cannot write into the output folder /proc/no-such-folder" in done.stderr, done.stderr
    (tmp_path / "afile").write_text("")
    done = _cli("unpack", str(blob), str(tmp_path / "afile"))
    assert done.returncode == 1 and "is a file, not a folder" in done.stderr and "Errno" not in done.stderr
    done = _cli("unpack", str(root), str(tmp_path / "out"))
    assert done.returncode == 1 and "Errno" not in done.stderr
    assert f"is a folder; unpack takes one blob file (.ocb), e.g. {blob}" in done.stderr, done.stderr
    done = _cli("unpack", str(blob), str(tmp_path / "out"))
    assert done.returncode == 0 and (tmp_path / "out" / "tiny.onnx").is_file()


def test_inspect_into_a_closed_pipe_stops_quietly(tmp_path: Path) -> None:
    root, _ = _bundle(tmp_path / "bundle")
    read_end, write_end = os.pipe()
    os.close(read_end)  # `inspect ... | head` once head has gone
    try:
        done = _cli("inspect", str(next(root.glob("*.ocb"))), stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr  # as a command SIGPIPE ends (128 + 13)
    assert done.stderr == "", done.stderr


def signed_late(root: Path, private: Path, delay: float) -> threading.Thread:
    """A signed bundle at ``root`` caught mid-swap, as another tool might leave it: a new manifest in
    place, the cook's marker there, its signature still the old one; the returned thread (not started)
    renames the new signature over the old one after ``delay`` seconds and removes the marker."""
    manifest = root / "manifest.json"
    (root / SIGNATURE_NAME).write_bytes(sign(manifest.read_bytes(), private))
    new = json.loads(manifest.read_text())
    new["note"] = "re-cooked"
    new_bytes = json.dumps(new).encode()
    (root / SIGNING_NAME).touch()
    manifest.write_bytes(new_bytes)  # the new manifest is in place, its signature is not yet

    def finish() -> None:
        time.sleep(delay)
        staged = root / ".sig.tmp"
        staged.write_bytes(sign(new_bytes, private))
        staged.replace(root / SIGNATURE_NAME)
        (root / SIGNING_NAME).unlink()

    return threading.Thread(target=finish)
