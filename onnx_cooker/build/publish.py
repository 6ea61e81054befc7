"""Replacing a bundle as one unit: readers see the complete old bundle or the complete new one.

Cooks write their blobs into ``.entries/`` (staging), never under a name a manifest lists. The
manifest task then *publishes* each blob under a name that carries its content hash
(``<name>.<sha256[:16]>.<format>.ocb``: a published file never changes), writes the new
manifest atomically (the single commit point), and only then retires the blobs the new manifest no
longer lists. A retired blob is deleted once it has been unreferenced for ``GRACE_SECONDS``, so a
reader that opened the previous manifest keeps working meanwhile. After a cook that fails part
way, no manifest is written: the previous manifest and every blob it names stay as they were.

Standard library and doit (through onnx_cooker.build.stamps) only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from onnx_cooker.build.stamps import file_state, known_sha256, remember
from onnx_cooker.errors import CookError
from onnx_cooker.fsutil import copy_hashed, file_sha256, write_json
from onnx_cooker.layout import BLOB_SUFFIX, ENTRIES_DIR, OLD_BLOB_SUFFIXES, STAMPS_DIR

# How long a blob stays after a new manifest stopped listing it: readers that opened the previous
# manifest (an editor hot-reloading, a test runner, a packaging step) finish with it meanwhile.
GRACE_SECONDS = 15 * 60
RETIRED_NAME = "retired.json"


def published_name(name: str, model_format: str, blob_sha256: str) -> str:
    """Where a blob is published in its platform folder (a POSIX path relative to it)."""
    return f"{name}.{blob_sha256[:16]}.{model_format}.{BLOB_SUFFIX}"


def publish(platform_dir: Path, models: Mapping[str, dict[str, Any]], memo_dir: Path | None = None) -> None:
    """Give each entry's blob (``file``, staged) its published name; ``file`` is updated in place.

    A published file with the right sha256 is kept as is (hard-linked or copied once); one that
    differs (damaged) is replaced. ``memo_dir``: the digests the cooks remembered
    (``onnx_cooker.build.stamps``); a file they describe as it is now is not read again, and a hard link of a
    remembered staged blob is remembered too (a link changes the file's ctime, not its bytes).
    """
    for name, entry in models.items():
        staged = platform_dir / entry["file"]
        relative = published_name(name, entry["format"], entry["blob_sha256"])
        target = platform_dir / relative
        if not _holds(target, entry["blob_sha256"], memo_dir):
            remembered = memo_dir is not None and known_sha256(memo_dir, staged) == entry["blob_sha256"]
            if _place(staged, target, entry["blob_sha256"]) and remembered:
                assert memo_dir is not None
                for path in (staged, target):
                    remember(memo_dir, path, [*file_state(path), entry["blob_sha256"]])
        entry["file"] = relative


def _holds(path: Path, sha256: str, memo_dir: Path | None = None) -> bool:
    if memo_dir is not None and known_sha256(memo_dir, path) == sha256:
        return True
    try:
        return file_sha256(path) == sha256
    except OSError:
        return False


def _place(staged: Path, target: Path, sha256: str) -> bool:
    """``staged`` under the name ``target``: a hard link where the file system has them (no copy; then
    True), else a copy, which must have ``sha256``; atomically either way."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.link.tmp")
    temp.unlink(missing_ok=True)
    try:
        os.link(staged, temp)
        linked = True
    except OSError:  # no hard links here: a streamed copy (fsync'd), never the whole blob in memory
        if copy_hashed(staged, temp) != sha256:
            temp.unlink(missing_ok=True)
            raise CookError(
                f"{staged}: its bytes no longer match its manifest entry (damaged since the cook); "
                "run the cook again to cook it anew"
            ) from None
        linked = False
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return linked


def published_files(platform_dir: Path) -> list[Path]:
    """Every published blob in the folder (not the staged ones under dot-folders)."""
    return [
        path
        for suffix in (BLOB_SUFFIX, *OLD_BLOB_SUFFIXES)
        for path in platform_dir.rglob(f"*.{suffix}")
        if not any(part.startswith(".") for part in path.relative_to(platform_dir).parts)
    ]


def retire(platform_dir: Path, listed: Mapping[str, dict[str, Any]], now: float | None = None) -> None:
    """After the new manifest is in place: note when each unlisted blob became unreferenced, and
    delete those unreferenced for longer than GRACE_SECONDS."""
    now = time.time() if now is None else now
    keep = {str(PurePosixPath(entry["file"])) for entry in listed.values()}
    ledger_path = platform_dir / STAMPS_DIR / RETIRED_NAME
    try:
        ledger = {str(k): float(v) for k, v in json.loads(ledger_path.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        ledger = {}
    current = {}
    for path in published_files(platform_dir):
        relative = path.relative_to(platform_dir).as_posix()
        if relative in keep:
            continue
        since = ledger.get(relative, now)
        if now - since >= GRACE_SECONDS:
            path.unlink(missing_ok=True)
            prune_empty_folders(path.parent, platform_dir)  # the last blob of a removed asset folder
        else:
            current[relative] = since
    write_json(ledger_path, current)


class NoRetirementDue:
    """doit's ``uptodate`` of a manifest task: False while the ledger holds a blob unreferenced for
    GRACE_SECONDS, so that the task runs (and ``retire`` deletes it) even when nothing else changed;
    cooks that changed nothing would otherwise leave a deleted model's blob for good. A class, not a
    closure, so that doit's parallel runner can pickle it."""

    def __init__(self, platform_dir: Path) -> None:
        self.ledger = platform_dir / STAMPS_DIR / RETIRED_NAME

    def __call__(self, task: object = None, values: object = None) -> bool:
        try:
            since = json.loads(self.ledger.read_text(encoding="utf-8")).values()
            return not any(time.time() - float(at) >= GRACE_SECONDS for at in since)
        except (OSError, ValueError, TypeError, AttributeError):
            return True  # no ledger (nothing retired), or a damaged one: the next manifest rewrites it


# What a cook stages for a model in .entries/ (onnx_cooker/layout.py), by the end of its file name
_STAGED_ENDS = (".json", ".verify.npz", ".applied.ort", *(f".{f}.{BLOB_SUFFIX}" for f in ("onnx", "ort")))
# What older cookers staged there (blob format 2: `<model>.onnx.zst`), which no cook replaces now
_OLD_STAGED_ENDS = tuple(f".{f}.{suffix}" for f in ("onnx", "ort") for suffix in OLD_BLOB_SUFFIXES)


# The per-model records under .stamps/ (onnx_cooker/layout.py: cook stamps, step times, cache records)
_MODEL_STAMPS = ("cook", "times", "cache")


def drop_unlisted_entries(platform_dir: Path, listed: Collection[str]) -> None:
    """After the new manifest is in place: what cooks staged for models it does not list (a model
    removed from the assets, or from this platform) goes, else it stays on disk for good (the
    staged blob is a hard link of the published one, which retiring then does not free); so do
    their stamps, the folders that leaves empty (a removed or renamed asset folder), and the blobs
    an older cooker staged in a format no cook writes now (after an upgrade)."""
    staged = platform_dir / ENTRIES_DIR
    for path in sorted(staged.rglob("*")) if staged.is_dir() else ():
        relative = path.relative_to(staged).as_posix()
        end = next((end for end in _STAGED_ENDS if relative.endswith(end)), None)
        old = relative.endswith(_OLD_STAGED_ENDS)  # an older cooker's blob: none stages them now
        if path.is_file() and (old or (end is not None and relative.removesuffix(end) not in listed)):
            path.unlink(missing_ok=True)
            prune_empty_folders(path.parent, staged)
    for kind in _MODEL_STAMPS:
        stamps = platform_dir / STAMPS_DIR / kind
        for path in sorted(stamps.rglob("*.json")) if stamps.is_dir() else ():
            if path.relative_to(stamps).as_posix().removesuffix(".json") not in listed:
                path.unlink(missing_ok=True)
                prune_empty_folders(path.parent, stamps)


def prune_empty_folders(folder: Path, root: Path) -> None:
    """Remove ``folder`` and its parents up to ``root`` (kept) while they are empty."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone, or not ours to remove): the folders above are not empty
            return
        folder = folder.parent


def remove_published(platform_dir: Path) -> None:
    """``doit clean``: every published blob and the ledger go with the manifest."""
    for path in published_files(platform_dir):
        path.unlink(missing_ok=True)
    (platform_dir / STAMPS_DIR / RETIRED_NAME).unlink(missing_ok=True)
