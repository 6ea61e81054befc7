"""Optional Ed25519 signatures on bundle manifests: a game can refuse a modified bundle.

The manifest lists the sha256 of every blob, and ``open_bundle`` checks the blobs against it, so
one signature over ``manifest.json`` covers the whole bundle. Verifying needs the ``cryptography``
package, imported only when a game asks for signature checks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .constants import SIGNATURE_NAME
from .errors import SignatureError

SIGNATURE_SIZE = 64  # raw Ed25519 signature
_EXAMPLE = '[Path("studio-signing.pub").read_bytes()]'


def trusted_keys(public_keys: object) -> list[bytes]:
    """``public_keys`` as a list of bytes, or a ``TypeError`` that says what to pass: a list (or
    other sequence) of public keys, each the 32 raw Ed25519 key bytes or a PEM file's bytes."""
    if isinstance(public_keys, bytes | bytearray | memoryview | str | os.PathLike):
        raise TypeError(
            f"public_keys takes a list of public keys, each bytes (the 32 raw Ed25519 key bytes or a PEM "
            f"file's bytes), not one {type(public_keys).__name__}: e.g. {_EXAMPLE}"
        )
    try:
        keys = list(public_keys)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"public_keys takes a list of public keys (bytes), not {type(public_keys).__name__}: "
            f"e.g. {_EXAMPLE}"
        ) from None
    for index, key in enumerate(keys):
        if isinstance(key, str) and "-----BEGIN" in key:
            what = "PEM text (str): pass its bytes (key.encode(), or the file's read_bytes())"
        elif isinstance(key, str | os.PathLike):
            what = f"a path ({os.fspath(key)!r}): pass the key file's bytes"
        elif isinstance(key, bytes | bytearray | memoryview):
            keys[index] = bytes(key)
            continue
        else:
            what = f"a {type(key).__name__}, not bytes"
        raise TypeError(f"public_keys[{index}] is {what}; e.g. public_keys={_EXAMPLE}")
    return keys


def _public_key(key: bytes):  # -> Ed25519PublicKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    if len(key) == 32:
        return Ed25519PublicKey.from_public_bytes(key)
    try:
        loaded = load_pem_public_key(key)
    except ValueError as exc:
        raise SignatureError(f"a trusted key is neither 32 raw bytes nor a PEM public key ({exc})") from None
    if not isinstance(loaded, Ed25519PublicKey):
        raise SignatureError("a trusted key is not an Ed25519 public key")
    return loaded


def verify_signature(
    manifest: bytes, signature: bytes | None, public_keys: Sequence[bytes], where: str
) -> None:
    """Accept ``manifest`` only if ``signature`` was made by one of ``public_keys``.

    Several keys allow rotation: a game ships the new public key beside the old one before the
    studio starts signing with the new private key.
    """
    try:
        from cryptography.exceptions import InvalidSignature
    except ImportError:
        raise SignatureError(
            "checking bundle signatures needs the 'cryptography' package (pip install cryptography)"
        ) from None
    if signature is None:
        raise SignatureError(f"{where} is not signed ({SIGNATURE_NAME} missing) but a signature is required")
    if len(signature) != SIGNATURE_SIZE:
        raise SignatureError(
            f"{where}: {SIGNATURE_NAME} is {len(signature)} bytes, not a {SIGNATURE_SIZE}-byte signature"
        )
    if not public_keys:
        raise SignatureError("no trusted public key given to check the signature with")
    for key in public_keys:
        try:
            _public_key(key).verify(signature, manifest)
            return
        except InvalidSignature:
            continue
    raise SignatureError(
        f"{where}: the signature matches none of the {len(public_keys)} trusted key(s): the bundle was "
        "modified after cooking, or signed with a key this game does not trust"
    )
