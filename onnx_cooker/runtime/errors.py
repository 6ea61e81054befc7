"""The loader's exception hierarchy: every failure a game can meet when loading a cooked bundle.

Catch ``BundleError`` to handle them all; each subclass names one cause, and every message says
what failed, where, and how to fix it.
"""

from __future__ import annotations


class BundleError(Exception):
    """Base of every error raised by ``onnx_cooker.runtime``."""


class NotABlobError(BundleError):
    """The bytes are not an onnx-cooker blob (wrong magic)."""


class TruncatedBlobError(BundleError):
    """The blob ends before its header or model data does."""


class ChecksumMismatchError(BundleError):
    """A checksum (header CRC, zstd content checksum, sha256 of the model or blob) does not match."""


class CorruptBlobError(BundleError):
    """The blob is structurally invalid although its checksums may match (crafted or buggy writer)."""


class UnsupportedBlobVersionError(BundleError):
    """The blob was written in a blob-format version this loader does not read."""


class IncompatibleRuntimeError(BundleError):
    """The installed onnxruntime is older than the blob's model needs (opset, IR or ORT format), or
    has no kernel for one of its operators (older than the platform's, or a reduced build without it):
    then ``operator`` names it (``"TensorScatter(24)"``)."""

    operator: str | None = None


class BlobTooLargeError(BundleError):
    """The blob declares a model larger than the configured maximum (decompression-bomb guard)."""


class UnknownModelError(BundleError, KeyError):
    """A bundle has no model of the requested name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ManifestError(BundleError):
    """A bundle's manifest.json is missing, unreadable or malformed."""


class BundleReplacedError(ManifestError):
    """A blob this ``Bundle`` lists is gone because a newer cook replaced the bundle: open it again."""


class SignatureError(BundleError):
    """A bundle's signature is missing, malformed or made by a key the game does not trust."""


class SessionCreateError(BundleError):
    """onnxruntime refused to create a session from an intact blob."""


_DAMAGE = (NotABlobError, TruncatedBlobError, ChecksumMismatchError, CorruptBlobError)
# The end of a damaged or cut-off blob's message: what to do about it
DAMAGED = "; re-copy the blob file whole, or re-run `onnx-cooker cook`"


def in_file(error: BundleError, path: object) -> BundleError:
    """``error`` again (its class and attributes) for a blob read from the file ``path``: its message
    begins with the path, and a damaged blob's ends with the fix where it names none."""
    text = str(error)
    if not text.startswith(str(path)):
        text = f"{path}: {text}"
    if isinstance(error, _DAMAGE) and "onnx-cooker cook" not in text and "re-cook" not in text:
        text += DAMAGED
    named = type(error)(text)
    named.__dict__.update(error.__dict__)
    return named
