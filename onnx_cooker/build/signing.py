"""Creating studio signing keys and signing manifests (the cooking side of bundle signatures).

    python -m onnx_cooker.build.signing keygen <folder>      # writes studio-signing.key and .pub

Point ``COOK_SIGNING_KEY`` at the private key and `doit cook` writes ``manifest.json.sig`` beside
every manifest; ship the ``.pub`` file (or its 32 raw bytes) inside the game.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from onnx_cooker.errors import CookError
from onnx_cooker.fsutil import atomic_write
from onnx_cooker.runtime.constants import SIGNATURE_NAME, SIGNING_NAME

PRIVATE_NAME = "studio-signing.key"
PUBLIC_NAME = "studio-signing.pub"


def keygen(folder: Path) -> tuple[Path, Path]:
    """A new Ed25519 key pair in ``folder``; refuses to overwrite an existing private key."""
    folder.mkdir(parents=True, exist_ok=True)
    private_path, public_path = folder / PRIVATE_NAME, folder / PUBLIC_NAME
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never world-readable
    with os.fdopen(fd, "wb") as stream:
        stream.write(private_pem)
    public_path.write_bytes(public_pem)
    return private_path, public_path


def sign(manifest: bytes, private_key: Path) -> bytes:
    """The raw 64-byte Ed25519 signature of ``manifest``."""
    return load_signing_key(private_key).sign(manifest)


def load_signing_key(private_key: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file ``private_key`` (``CookError`` if it is none)."""
    try:
        key = serialization.load_pem_private_key(private_key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise CookError(
            f"COOK_SIGNING_KEY={private_key}: cannot load an unencrypted PEM private key ({exc}); create one "
            "with `python -m onnx_cooker.build.signing keygen <folder>`"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CookError(f"COOK_SIGNING_KEY={private_key}: not an Ed25519 key")
    return key


@contextlib.contextmanager
def replacing_signed_pair(platform_dir: Path) -> Iterator[None]:
    """While the cook replaces ``manifest.json`` and then ``manifest.json.sig`` (``write_signature``
    right after the manifest), ``manifest.json.signing`` says so: a loader that meets the new
    manifest with the old signature, or none, reads the pair again instead of calling it tampered
    (onnx_cooker/runtime/manifestfile.py; docs/bundle-format.md)."""
    marker = platform_dir / SIGNING_NAME
    platform_dir.mkdir(parents=True, exist_ok=True)  # an empty bundle's first manifest makes it
    marker.touch()
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)


def write_signature(manifest: Path, raw: bytes, key: Ed25519PrivateKey | None) -> None:
    """Write manifest.json.sig for the manifest's bytes ``raw``, or remove a stale one when this
    cook does not sign (``key`` None)."""
    signature_path = manifest.with_name(SIGNATURE_NAME)
    if key is None:
        signature_path.unlink(missing_ok=True)
        return
    atomic_write(signature_path, key.sign(raw))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onnx_cooker.build.signing", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    keygen_parser = commands.add_parser("keygen", help="create studio-signing.key and studio-signing.pub")
    keygen_parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        private_path, public_path = keygen(args.folder)
    except FileExistsError:
        print(f"error: {args.folder / PRIVATE_NAME} exists; keep it or move it away first", file=sys.stderr)
        return 1
    print(f"private key (keep secret, give to the build machine as COOK_SIGNING_KEY): {private_path}")
    print(f"public key (ship in the game, pass to open_bundle(..., public_keys=[...])): {public_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
