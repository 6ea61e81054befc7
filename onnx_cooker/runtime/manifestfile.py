"""A bundle's ``manifest.json`` as ``open_bundle`` reads it: bounded in size, checked field by field,
and for a signed bundle read together with ``manifest.json.sig`` as one pair.

A re-cook replaces the pair one file at a time (the manifest, its commit point, then the signature:
``onnx_cooker.build.actions.run_manifest``), so a reader can meet the new manifest with the old
signature, or the other way round. The cooker says so: it creates ``manifest.json.signing``
(``SIGNING_NAME``) before it replaces the manifest and removes it once the signature is in place. A
pair that does not verify is read again, for at most ``SETTLE_SECONDS``, only while it is in flux:
the marker is there, or the manifest or signature is no longer the file that was read (device,
inode, size and times). Anything else (an edited manifest, a foreign signature) fails at once, and a
pair that is still in flux at the deadline fails as it is: a signature is never waived.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from .constants import MANIFEST_VERSION, SIGNATURE_NAME, SIGNING_NAME
from .errors import BundleError, ManifestError, SignatureError
from .files import file_identity, open_regular
from .hints import open_hint
from .trust import SIGNATURE_SIZE, verify_signature

MAX_MANIFEST_SIZE = 64 << 20
SETTLE_SECONDS = 2.0  # the longest a signed pair in flux is waited for (a cook takes milliseconds)
_POLL_SECONDS = 0.005
_REQUIRED_ENTRY_FIELDS: dict[str, type] = {"file": str, "format": str, "blob_sha256": str, "blob_size": int}


def read_manifest(manifest_path: Path, given: Path) -> tuple[bytes, tuple[int, ...]]:
    """The manifest's bytes (at most ``MAX_MANIFEST_SIZE``) and the identity of the file read."""
    try:
        stream, size = open_regular(manifest_path)
        with stream:
            identity = file_identity(os.fstat(stream.fileno()))
            raw = stream.read(min(size, MAX_MANIFEST_SIZE) + 1)
    except (OSError, ValueError) as exc:  # ValueError: a path with NUL or a lone surrogate
        raise ManifestError(
            f"cannot read {manifest_path}: {getattr(exc, 'strerror', None) or exc}; {open_hint(given)}"
        ) from None
    if len(raw) > MAX_MANIFEST_SIZE:
        raise ManifestError(
            f"{manifest_path} is larger than {MAX_MANIFEST_SIZE >> 20} MiB; not a manifest: "
            + open_hint(given)
        )
    return raw, identity


def read_signed_manifest(manifest_path: Path, given: Path, public_keys: Sequence[bytes]) -> bytes:
    """The manifest's bytes, signed by one of ``public_keys``; the pair is read again while a cook
    is replacing it (module docstring), else ``SignatureError``."""
    root = manifest_path.parent
    deadline: float | None = None
    while True:
        raw, manifest_identity = read_manifest(manifest_path, given)
        signature, signature_identity = _read_signature(root)
        try:
            verify_signature(raw, signature, public_keys, str(manifest_path))
            return raw
        except SignatureError as exc:
            marker = os.path.lexists(root / SIGNING_NAME)
            changed = _identity(manifest_path) != manifest_identity
            changed = changed or _identity(root / SIGNATURE_NAME) != signature_identity
            if not (marker or changed):
                raise
            now = time.monotonic()
            deadline = now + SETTLE_SECONDS if deadline is None else deadline
            if now >= deadline:
                if marker:
                    raise SignatureError(
                        f"{exc}; {root / SIGNING_NAME} says a cook was replacing the manifest and its "
                        f"signature, and it did not finish within {SETTLE_SECONDS:g} s: if no cook is "
                        "running, one stopped half way; re-run `onnx-cooker cook`"
                    ) from None
                raise
            time.sleep(_POLL_SECONDS)


def _read_signature(root: Path) -> tuple[bytes | None, tuple[int, ...] | None]:
    try:
        stream, _ = open_regular(root / SIGNATURE_NAME)
        with stream:
            return stream.read(SIGNATURE_SIZE + 1), file_identity(os.fstat(stream.fileno()))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise ManifestError(f"cannot read {root / SIGNATURE_NAME}: {exc.strerror or exc}") from None


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        return file_identity(os.stat(path))
    except OSError:
        return None


def check_manifest(manifest: Any, where: Path) -> None:
    """Every field the loader reads, of the type it reads it as (docs/bundle-format.md)."""

    def fail(problem: str) -> BundleError:
        return ManifestError(f"{where}: {problem}; re-run `onnx-cooker cook` to rewrite it")

    if not isinstance(manifest, dict):
        raise fail("the top level is not a JSON object")
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        raise fail(
            f"manifest_version is {manifest.get('manifest_version')!r}, this loader reads {MANIFEST_VERSION}"
        )
    if not isinstance(manifest.get("platform"), str) or not isinstance(manifest.get("models"), dict):
        raise fail("'platform' (string) and 'models' (object) are required")
    for name, entry in manifest["models"].items():
        if not isinstance(entry, dict):
            raise fail(f"entry {name!r} is not an object")
        for key, expected in _REQUIRED_ENTRY_FIELDS.items():
            value = entry.get(key)
            if not isinstance(value, expected) or isinstance(value, bool):
                raise fail(f"entry {name!r} lacks {key!r} ({expected.__name__})")
        if entry["blob_size"] < 0:
            raise fail(f"entry {name!r} has a negative blob_size")
        for key in ("inputs", "outputs"):  # optional; engines read them (the C library refuses the same)
            values = entry.get(key)
            if values is not None and not (
                isinstance(values, list)
                and all(
                    isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("type"), str)
                    for v in values
                )
            ):
                raise fail(f"entry {name!r} has a malformed I/O signature")
        file = PurePosixPath(entry["file"])
        unsafe = any(char in entry["file"] for char in "\\:\0")  # Windows drives, NTFS streams, NUL
        unsafe = unsafe or "" in entry["file"].split("/")  # "a//b", "a/": the C loader refuses them
        if file.is_absolute() or ".." in file.parts or unsafe or not file.parts:
            raise fail(f"entry {name!r} points outside its folder ({entry['file']!r})")
