"""Writing files so that a reader never sees a half-written one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

# A writer finishes its temp file in seconds; one untouched this long belongs to a killed process.
STALE_TEMP_SECONDS = 3600
# Scratch folders of the cook's steps (optimizer output, usability check, operator config, runtime
# check worker) inside a platform folder; removed on success, left behind only by a killed cook.
SCRATCH_PREFIXES = (".optimize-", ".usability-", ".opconfig-", ".worker-", ".quantize-")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_stale_temps(folder: Path, now: float | None = None) -> None:
    """Delete the temp files under ``folder`` left behind by killed writers (never a live writer's).

    Run once per platform folder (when its manifest is written), not on every write: a glob per
    write would make a folder of N models cost N^2.
    """
    cutoff = (now if now is not None else time.time()) - STALE_TEMP_SECONDS
    for scratch in [p for prefix in SCRATCH_PREFIXES for p in folder.glob(f"{prefix}*")]:
        try:
            if scratch.is_dir() and scratch.stat().st_mtime < cutoff:
                shutil.rmtree(scratch, ignore_errors=True)
        except OSError:
            continue
    for temp in folder.rglob(".*.tmp"):
        try:
            if temp.stat().st_mtime < cutoff:
                temp.unlink()
        except OSError:
            continue  # another process removed or replaced it first


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync'd, then renamed.

    An interrupted or failed write leaves the previous file (if any) untouched and no file that
    looks finished; the temp file is removed on failure. The file gets the usual permissions
    (0666 less the umask), not mkstemp's private 0600. ``durable=False`` skips the fsync, for files
    whose readers check them anyway (cook cache objects: a power cut can then leave a short file
    under its final name, which the reader refuses).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            if hasattr(os, "fchmod"):  # POSIX; Windows has no mode bits to widen
                os.fchmod(stream.fileno(), 0o666 & ~_umask())
            stream.write(data)
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_bytes(value: Any) -> bytes:
    """``value`` as the cooker writes JSON files: indented, keys sorted, a final newline."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def write_json(path: Path, value: Any) -> None:
    """``value`` as ``json_bytes``, written atomically."""
    atomic_write(path, json_bytes(value))
