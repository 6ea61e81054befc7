"""Writing files so that a reader never sees a half-written one."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

# A writer finishes its temp file in seconds; one untouched this long belongs to a killed process.
STALE_TEMP_SECONDS = 3600
# Scratch folders of the cook's steps (optimizer output, usability check, operator config, runtime
# check worker) inside a platform folder; removed on success, left behind only by a killed cook.
SCRATCH_PREFIXES = (".optimize-", ".usability-", ".opconfig-", ".worker-", ".quantize-")


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
            # (a hard-linked temp keeps its source's old mtime: the build lock keeps this from racing
            # the cooks, whose manifest task this is)
            if temp.stat().st_mtime < cutoff:
                temp.unlink()
        except OSError:
            continue  # another process removed or replaced it first


def temp_beside(path: Path) -> Path:
    """A name for a temp file in ``path``'s folder that no other writer uses (the file is not created).

    The ``.*.tmp`` pattern is what ``remove_stale_temps`` looks for after a killed writer."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def stage_write(path: Path, data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` to a new temp file beside ``path`` (fsync'd unless ``durable`` is false) and
    return it, not yet under its name: ``os.replace(temp, path)`` publishes it. The temp file is
    removed if the write fails. The file gets the usual permissions (0666 less the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_beside(path)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync'd, then renamed.

    An interrupted or failed write leaves the previous file (if any) untouched and no file that
    looks finished; the temp file is removed on failure. ``durable=False`` skips the fsync, for files
    whose readers check them anyway (a power cut can then leave a short file under its final name,
    which such a reader refuses).
    """
    temp = stage_write(path, data, durable=durable)
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


# Files are hashed and copied through one reused buffer: reading a whole file into memory first
# costs fresh pages, which on virtual machines cost more than the hashing (measured: 1.2 s against
# 0.2 s to fetch, check and place a 268 MB blob).
CHUNK_BYTES = 1 << 20


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read through one reused buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as stream:
        while count := stream.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def copy_hashed(source: Path, dest: Path, *, durable: bool = True) -> str:
    """Copy ``source`` to the new file ``dest`` (which must not exist) and return the sha256 of what
    was copied. ``dest`` is removed if the copy fails."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    try:
        with open(source, "rb", buffering=0) as stream, open(dest, "xb") as out:
            while count := stream.readinto(buffer):
                digest.update(view[:count])
                out.write(view[:count])  # buffered: writes all of it, or raises
            out.flush()
            if durable:
                os.fsync(out.fileno())
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return digest.hexdigest()


def json_bytes(value: Any) -> bytes:
    """``value`` as the cooker writes JSON files: indented, keys sorted, a final newline."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def write_json(path: Path, value: Any) -> None:
    """``value`` as ``json_bytes``, written atomically."""
    atomic_write(path, json_bytes(value))
