"""The C library (native/src/bundle.c) on a signed bundle re-opened while the cooker re-publishes it,
as tests/test_loader_probe_fixes.py proves the Python loader: never a false signature error during
re-cooks, a tampered manifest still refused at once, a marker a stopped cook left waited for within
the bound and named; and a blob file that is missing named for why (a newer cook, a folder gone, a
bundle that lacks it). Under AddressSanitizer and UBSan (the `native` fixture of test_native.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from runtime_helpers import make_blob, write_bundle

from onnx_cooker.build.signing import keygen
from onnx_cooker.runtime.constants import SIGNATURE_NAME, SIGNING_NAME
from tests.models import tiny_model
from tests.test_dodo import doit, doit_env
from tests.test_loader_probe_fixes import signed_late
from tests.test_native import SANITIZERS, native, run_native  # noqa: F401
from tests.test_reliability import small_project

SETTLE_SECONDS = 2.0  # bundle.c's SETTLE_NS, onnx_cooker/runtime/manifestfile.py's SETTLE_SECONDS

# The manifest task's own code (onnx_cooker.build.actions.run_manifest: manifest, signature, operator
# configs) run again and again, each time with a changed entry: a new manifest and signature; then
# the stop file the C prober waits for.
REPUBLISH = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from pathlib import Path
    from onnx_cooker.build.actions import run_manifest
    platform_dir, key, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    stop = Path(sys.argv[4])
    names = sorted(p.stem for p in (platform_dir / ".entries").glob("*.json"))
    entry = platform_dir / ".entries" / (names[0] + ".json")
    data = json.loads(entry.read_text())
    try:
        for index in range(rounds):
            data["republished"] = index
            entry.write_text(json.dumps(data))
            with contextlib.redirect_stdout(io.StringIO()):
                assert run_manifest(platform_dir, "android", names, [], None, key) is None
    finally:
        stop.touch()
    """
)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A small project cooked for android with a studio key: (project, private key, public key hex)."""
    root = tmp_path_factory.mktemp("signed-recook")
    project = small_project(root / "project")
    private, public = keygen(root / "keys")
    run = doit(project, "cook", env={"COOK_SIGNING_KEY": str(private)})
    assert run.returncode == 0, run.output
    return project, private, raw_key(public)


def raw_key(public: Path) -> str:
    """The hex of a .pub file's 32 raw bytes (OC_PROBE_KEYS)."""
    key = serialization.load_pem_public_key(public.read_bytes())
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def tiny_bundle(root: Path) -> Path:
    return write_bundle(root, {"tiny": ("onnx", make_blob(tiny_model(seed=0).SerializeToString(), "onnx"))})


def reopen(build: Path, folder: Path, key: str, stop: Path) -> dict:
    """oc-probe's opens of ``folder`` until ``stop`` exists (once, if it does)."""
    done = run_native([build / "oc-probe", "reopen", folder, stop], env={"OC_PROBE_KEYS": key})
    return json.loads(done.stdout)


@pytest.mark.slow
def test_a_signed_bundle_reopened_by_c_during_recooks_never_looks_tampered(
    native: Path,  # noqa: F811
    signed: tuple[Path, Path, str],
    tmp_path: Path,
) -> None:
    project, private, key = signed
    platform_dir = project / "build" / "android"
    stop = tmp_path / "stop"
    prober = subprocess.Popen(
        [native / "oc-probe", "reopen", platform_dir, stop],
        env={**doit_env(), **SANITIZERS, "OC_PROBE_KEYS": key},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        cook = subprocess.run(
            [sys.executable, "-c", REPUBLISH, str(platform_dir), str(private), "60", str(stop)],
            cwd=project,
            env=doit_env({"PYTHONPATH": str(project)}),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        out, err = prober.communicate(timeout=120)
    finally:
        stop.touch()
        if prober.poll() is None:
            prober.kill()
            prober.wait()
    assert cook.returncode == 0, cook.stderr[-3000:]
    assert prober.returncode == 0, err[-4000:]
    result = json.loads(out)
    assert result["failed"] == 0, result  # before the fix: a false OC_ERR_SIGNATURE in about half the opens
    assert result["opened"] > 60, result
    assert not (platform_dir / SIGNING_NAME).exists()  # the cook's marker goes with it
    assert reopen(native, platform_dir, key, stop)["opened"] == 1


@pytest.mark.slow
def test_a_tampered_signed_manifest_is_still_refused_at_once_by_c(
    native: Path,  # noqa: F811
    signed: tuple[Path, Path, str],
    tmp_path: Path,
) -> None:
    project, _, key = signed
    bundle = Path(shutil.copytree(project / "build" / "android", tmp_path / "bundle"))
    stop = tmp_path / "stop"
    stop.touch()
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["models"]["net"]["execution_providers"] = ["CPUExecutionProvider"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = reopen(native, bundle, key, stop)
    assert result["failed"] == 1 and "matches none of the 1 trusted key" in result["messages"][0], result
    assert result["longest_ms"] < 1000 * SETTLE_SECONDS / 4, result  # nothing says the pair is in flux
    # A marker a stopped cook left: waited for, within the bound, then refused all the same
    (bundle / SIGNING_NAME).touch()
    result = reopen(native, bundle, key, stop)
    message = result["messages"][0] if result["messages"] else ""
    assert result["failed"] == 1 and "OC_ERR_SIGNATURE" in message, result
    assert "matches none" in message and "manifest.json.signing says a cook" in message, result
    assert 1000 * SETTLE_SECONDS <= result["longest_ms"] < 1000 * (SETTLE_SECONDS + 1), result
    # A signature gone with no marker and nothing changing: refused at once
    (bundle / SIGNING_NAME).unlink()
    (bundle / SIGNATURE_NAME).unlink()
    result = reopen(native, bundle, key, stop)
    assert result["failed"] == 1 and "manifest.json.sig missing" in result["messages"][0], result
    assert result["longest_ms"] < 1000 * SETTLE_SECONDS / 4, result


def test_a_signature_replaced_while_c_reads_it_is_read_again(
    native: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The new manifest in place, its signature not yet: the C library reads the pair again until the
    signature (renamed over the old one) and the manifest verify, then opens the bundle."""
    root = tiny_bundle(tmp_path / "bundle")
    private, public = keygen(tmp_path / "keys")
    raw = raw_key(public)
    writer = signed_late(root, private, 0.6)
    stop = tmp_path / "stop"
    stop.touch()
    writer.start()
    try:
        result = reopen(native, root, raw, stop)
    finally:
        writer.join()
    assert result["opened"] == 1 and result["failed"] == 0, result
    assert 0 < result["longest_ms"] < 1000 * SETTLE_SECONDS, result


def _probe_then(build: Path, folder: Path, name: str, change, tmp_path: Path) -> dict:
    """oc-probe opens ``folder``, then (once ``change()`` has run) model ``name``'s blob: its line."""
    go = tmp_path / "go"
    prober = subprocess.Popen(
        [build / "oc-probe", "bundle", folder, name],
        env={**doit_env(), **SANITIZERS, "OC_PROBE_WAIT_FOR": str(go)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert prober.stdout is not None
        opened = json.loads(prober.stdout.readline())
        assert opened["status"] == "OC_OK", opened
        change()
        go.touch()
        out, err = prober.communicate(timeout=120)
    finally:
        if prober.poll() is None:
            prober.kill()
            prober.wait()
    assert prober.returncode == 0, err[-4000:]
    go.unlink()
    return json.loads(out.splitlines()[0])


def test_c_names_why_a_blob_file_is_missing(native: Path, tmp_path: Path) -> None:  # noqa: F811
    """A folder gone is not 'replaced by a newer cook'; a newer manifest says open the bundle again;
    a bundle that lacks the file says re-cook (Bundle._gone's three causes)."""

    def fresh(name: str) -> tuple[Path, Path]:
        root = tiny_bundle(tmp_path / name)
        blob = root / json.loads((root / "manifest.json").read_text())["models"]["tiny"]["file"]
        return root, blob

    root, blob = fresh("gone")
    line = _probe_then(native, root, "tiny", lambda: shutil.rmtree(root), tmp_path)
    assert line["status"] == "OC_ERR_MANIFEST", line
    assert f"the bundle folder {root} is gone (moved, deleted or unmounted)" in line["message"], line
    assert "newer cook" not in line["message"] and "onnx-cooker cook" not in line["message"], line

    root, blob = fresh("replaced")

    def newer() -> None:
        manifest = json.loads((root / "manifest.json").read_text())
        (root / "manifest.json").write_text(json.dumps({**manifest, "note": "a newer cook"}))
        blob.unlink()

    line = _probe_then(native, root, "tiny", newer, tmp_path)
    assert line["status"] == "OC_ERR_MANIFEST", line
    assert "a newer cook replaced the bundle since it was opened" in line["message"], line
    assert f'oc_bundle_open_dir("{root}") again' in line["message"], line

    root, blob = fresh("lacking")
    line = _probe_then(native, root, "tiny", blob.unlink, tmp_path)
    assert line["status"] == "OC_ERR_MANIFEST" and line["message"].startswith(str(blob)), line
    assert "is missing; re-run `onnx-cooker cook`" in line["message"], line
    assert "newer cook" not in line["message"] and "is gone" not in line["message"], line


def test_c_keeps_a_bundle_opened_by_a_relative_path_after_a_change_of_working_folder(
    native: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """As Bundle's root in Python: the folder is made absolute at the open, so a game's chdir between
    opening the bundle and its blobs does not send the blob files' paths elsewhere."""
    root = tiny_bundle(tmp_path / "game" / "bundle")
    done = subprocess.run(
        [native / "oc-probe", "bundle", "bundle", "tiny"],
        cwd=root.parent,
        env={**doit_env(), **SANITIZERS, "OC_PROBE_CHDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    opened, blob = (json.loads(line) for line in done.stdout.splitlines()[:2])
    assert opened["status"] == "OC_OK", opened
    assert blob["status"] == "OC_OK", blob
