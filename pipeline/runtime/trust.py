"""Optional Ed25519 signatures on bundle manifests: a game can refuse a modified bundle.

The manifest lists the sha256 of every blob, and ``open_bundle`` checks the blobs against it, so
one signature over ``manifest.json`` covers the whole bundle. Verifying needs the ``cryptography``
package, imported only when a game asks for signature checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from .constants import SIGNATURE_NAME
from .errors import SignatureError

SIGNATURE_SIZE = 64  # raw Ed25519 signature


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
