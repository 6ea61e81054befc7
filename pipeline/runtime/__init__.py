"""The onnx-cooker runtime loader: onnxruntime sessions from cooked blobs, in memory.

Ships inside games: imports only onnxruntime, numpy, zstandard and the standard library.

    from pipeline.runtime import open_bundle
    bundle = open_bundle("build/windows-dml")
    session = bundle.session("mnist")
"""

from .blob import (
    BLOB_FORMAT_VERSION,
    DEFAULT_MAX_MODEL_SIZE,
    BlobHeader,
    Unpacked,
    decode_blob,
    read_header,
    unpack_blob,
)
from .bundle import Bundle, open_bundle
from .errors import (
    BlobTooLargeError,
    BundleError,
    BundleReplacedError,
    ChecksumMismatchError,
    CorruptBlobError,
    IncompatibleRuntimeError,
    ManifestError,
    NotABlobError,
    SessionCreateError,
    SignatureError,
    TruncatedBlobError,
    UnknownModelError,
    UnsupportedBlobVersionError,
)
from .session import choose_providers, session_from_blob

__all__ = [
    "BLOB_FORMAT_VERSION",
    "DEFAULT_MAX_MODEL_SIZE",
    "BlobHeader",
    "BlobTooLargeError",
    "Bundle",
    "BundleError",
    "BundleReplacedError",
    "ChecksumMismatchError",
    "CorruptBlobError",
    "IncompatibleRuntimeError",
    "ManifestError",
    "NotABlobError",
    "SessionCreateError",
    "SignatureError",
    "TruncatedBlobError",
    "UnknownModelError",
    "Unpacked",
    "UnsupportedBlobVersionError",
    "choose_providers",
    "decode_blob",
    "open_bundle",
    "read_header",
    "session_from_blob",
    "unpack_blob",
]
