"""What a cache entry fetched into a build must be: ``check_entry`` refuses one (``PoisonedEntry``)
unless its manifest entry, blob and verification data are sound and name its cook key.

Used by ``onnx_cooker.farm.cache``; numpy and ``onnx_cooker.runtime.blob`` are imported only when an entry
is checked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnx_cooker.farm.store import CacheError

# What the manifest, the summary line and the report read of an entry, with the type they expect.
ENTRY_FIELDS: Mapping[str, type] = {
    "name": str,
    "format": str,
    "file": str,
    "blob_size": int,
    "blob_sha256": str,
    "cook_key": str,
    "source_size": int,
    "model_size": int,
    "settings": dict,
    "verification": dict,
    "cooked_with": dict,
    "execution_providers": list,
    "fallbacks": list,
}


def _operators_shape_ok(value: Any) -> bool:
    """The shape ``opconfig.model_operators`` writes: ops as [domain, opset, op], types by "domain;op"."""
    if not isinstance(value, dict) or set(value) != {"ops", "types"}:
        return False
    ops, types = value["ops"], value["types"]
    return (
        isinstance(ops, list)
        and all(
            isinstance(op, list)
            and len(op) == 3
            and isinstance(op[0], str)
            and type(op[1]) is int
            and isinstance(op[2], str)
            for op in ops
        )
        and (types is None or isinstance(types, dict))
        and all(isinstance(k, str) and isinstance(v, str) for k, v in (types or {}).items())
    )


def _check_verify_data(data: bytes) -> None:
    import io
    import zipfile

    import numpy as np

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            names = archive.files
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise PoisonedEntry(f"its verification data is not an .npz ({exc})") from None
    if not any(name.startswith("input/") for name in names):
        raise PoisonedEntry("its verification data holds no inputs")


class PoisonedEntry(CacheError):
    """An entry whose bytes are not what its index or its key promise: ignored and cooked again."""


def check_entry(
    files: Mapping[str, Path],
    cook_key: str,
    name: str,
    platform: str,
    blob_file: str,
    blob_sha256: str,
) -> None:
    """Refuse an entry (its files by role) unless its blob is what its entry says (size and sha256,
    the way ``Bundle`` checks a blob before a game loads it), its header and frame layout are sound,
    and everything names ``cook_key``. ``blob_sha256``: the blob's digest, computed by the caller
    (against the index).

    The frames are not decompressed: the blob's sha256 equals the one its cook recorded after
    verifying that very blob through the loader, so decompressing it again proves nothing more."""
    try:
        entry = json.loads(files["entry"].read_bytes())
    except ValueError as exc:
        raise PoisonedEntry(f"its manifest entry is not JSON ({exc})") from None
    blob_size, header = _blob_layout(files["blob"])
    if not isinstance(entry, dict):
        raise PoisonedEntry("its manifest entry is not a JSON object")
    missing = [key for key, kind in ENTRY_FIELDS.items() if not isinstance(entry.get(key), kind)]
    if missing:
        raise PoisonedEntry(f"its manifest entry lacks {missing}")
    if "operators" in entry and not _operators_shape_ok(entry["operators"]):
        raise PoisonedEntry("its manifest entry's operator lists are malformed")
    if "verify" in files:
        _check_verify_data(files["verify"].read_bytes())
    expected = {"cook key": cook_key, "name": name, "platform": platform}
    found_header = {"cook key": header.cook_key, "name": header.name, "platform": header.platform}
    found_entry = {
        "cook key": entry.get("cook_key"),
        "name": entry.get("name"),
        "platform": (entry.get("settings") or {}).get("platform"),
    }
    for what, value in expected.items():
        if found_header[what] != value or found_entry[what] != value:
            raise PoisonedEntry(f"its blob or entry is for another {what}")
    if entry.get("blob_sha256") != blob_sha256 or entry.get("blob_size") != blob_size:
        raise PoisonedEntry("its blob does not match the sha256 and size of its manifest entry")
    if entry.get("file") != blob_file:
        raise PoisonedEntry(f"its entry names the blob {entry.get('file')!r}, not {blob_file!r}")


def _blob_layout(path: Path) -> tuple[int, Any]:
    """The blob file's size and header, after checking its header (and CRC), sizes and frame layout
    (models over 2 GiB included). Mapped where the file system allows it (only the header and the
    frames' first bytes are touched), else read. Anything the checks raise on hostile bytes refuses
    the entry."""
    import mmap

    from onnx_cooker.runtime.blob import check_layout

    with path.open("rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        try:
            view: Any = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except (OSError, ValueError):  # a file system without mappings (some FUSE, 9p)
            view = stream.read()
        problem = None
        try:
            header, _ = check_layout(view, max_model_size=1 << 62)
        except Exception as exc:  # noqa: BLE001  BundleError, or struct/index errors on crafted bytes
            problem = f"{type(exc).__name__}: {exc}"
        if isinstance(view, mmap.mmap):
            try:
                view.close()
            except BufferError:  # a slice still held somewhere: freed with it
                pass
    if problem is not None:
        raise PoisonedEntry(f"its blob is damaged ({problem})")
    return size, header
