"""The onnx-cooker runtime loader: onnxruntime sessions from cooked blobs, in memory.

Ships inside games: imports only onnxruntime, numpy, zstandard and the standard library.

    from onnx_cooker.runtime import open_bundle
    bundle = open_bundle("build/windows-dml")
    session = bundle.session("mnist")

The names below load on first use (PEP 562), so that the standard-library-only modules of this
package (``constants``, ``compat``) can be imported without loading onnxruntime, as the cooker does
when doit loads its tasks.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the submodule that defines it
_EXPORTS: dict[str, str] = {
    "BLOB_FORMAT_VERSION": "constants",
    "DEFAULT_MAX_MODEL_SIZE": "blob",
    "BlobHeader": "header",
    "Unpacked": "blob",
    "check_blob": "blob",
    "decode_blob": "blob",
    "read_header": "header",
    "unpack_blob": "blob",
    "Bundle": "bundle",
    "open_bundle": "bundle",
    "BlobTooLargeError": "errors",
    "BundleError": "errors",
    "BundleReplacedError": "errors",
    "ChecksumMismatchError": "errors",
    "CorruptBlobError": "errors",
    "IncompatibleRuntimeError": "errors",
    "ManifestError": "errors",
    "NotABlobError": "errors",
    "SessionCreateError": "errors",
    "SignatureError": "errors",
    "TruncatedBlobError": "errors",
    "UnknownModelError": "errors",
    "UnsupportedBlobVersionError": "errors",
    "LoadInfo": "session",
    "MemoryBlob": "memblob",
    "LoadPath": "loadpaths",
    "DEVICE_POLICIES": "constants",
    "DeviceSelection": "devices",
    "SessionPlan": "devices",
    "choose_providers": "devices",
    "plan_session": "devices",
    "register_ep_libraries": "devices",
    "load_info": "session",
    "session_from_blob": "session",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
