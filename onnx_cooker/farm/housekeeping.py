"""Housekeeping for a folder cook cache: what a cache folder holds (``scan``), what a prune removes
(``plan_prune``) and removing it (``prune``); its command line is ``onnx_cooker.farm.admin``.

A folder cache (``onnx_cooker.farm.folder_store.FolderStore``) only grows: every new cook key adds an
entry, and nothing removes the entries of models, settings or onnxruntime versions no build asks for
any more. This module finds what a cache folder holds and removes entries that were not used for a
while or the least recently used ones past a size. An S3 cache is not handled here: a bucket
lifecycle rule expires its objects (docs/build-farms.md, "S3: a lifecycle rule").

The layout it works on, as ``onnx_cooker.farm.cache`` writes it (``d``: an entry's digest)::

    index/<d[:2]>/<d>.json        an entry's index; its mtime is the entry's last use (a hit touches it)
    objects/<d[:2]>/<d>/<role>.<sha256[:32]>
                                  the entry's objects (blob, entry, verify, applied), named by content
    checks/<d[:2]>/<d>.json       a runtime check's report; its mtime is its last use
    recipes/<r[:2]>/<r>.json      the tool versions a cook was made with (for the note on a miss
                                  caused only by other versions); counted and pruned with reports
    .../.<name>.<pid>.<hex>.tmp   a writer's temp file, renamed into place when complete

Writers put objects first and the index last, so an entry is removed the other way round: its index
first (readers then see no entry), then its objects. A reader racing a prune finds an object missing,
warns in one line and cooks again. Objects may be hard links shared with build folders: they are
only ever unlinked, never changed, and unlinking one frees its disk space only when no build folder
links it. Object folders without an index (an upload in progress, or one killed midway) and temp
files are removed only once they are an hour old. Standard library only: no onnx, onnxruntime or
numpy, so that it runs on a file server with a bare Python.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

INDEX_DIR, OBJECTS_DIR, CHECKS_DIR = "index", "objects", "checks"  # as onnx_cooker.farm.cache names them
RECIPES_DIR = "recipes"  # the tools' versions of a cook, for the note on a miss: pruned like reports
# An object folder without an index, or a temp file, younger than this may belong to a live writer.
ORPHAN_GRACE_SECONDS = 3600

_TEMP_NAME = re.compile(r"^\..+\.tmp$")


# --- what a cache folder holds -------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One file or folder that is not part of an entry: a check report, an orphan folder, a temp file.
    ``mtime``: its last use (reports) or last change (orphans, temp files)."""

    path: Path
    size: int
    mtime: float


@dataclass(frozen=True)
class Entry:
    """An entry: its index and its objects folder. ``last_use``: the index's mtime."""

    digest: str
    index: Path
    objects: Path
    last_use: float
    sizes: Mapping[str, int]  # st_size of its objects by role
    linked: int = 0  # bytes of those objects that have other hard links (build folders)

    @property
    def size(self) -> int:
        return sum(self.sizes.values())


@dataclass(frozen=True)
class Scan:
    """A cache folder at one moment; a writer or a prune running meanwhile may have changed it since."""

    root: Path
    entries: tuple[Entry, ...]
    checks: tuple[Item, ...]
    orphans: tuple[Item, ...]  # object folders without an index
    temps: tuple[Item, ...]

    @property
    def entry_bytes(self) -> int:
        return sum(entry.size for entry in self.entries)


@dataclass(frozen=True)
class _Listing:
    """One folder's subfolders and files (with their lstat), minus what vanished while listed."""

    folders: tuple[Path, ...]
    files: tuple[tuple[Path, os.stat_result], ...]
    mtime: float  # the folder's own


def _list(folder: Path) -> _Listing:
    """``folder``'s contents without following symlinks; empty when it vanished or is no folder."""
    folders: list[Path] = []
    files: list[tuple[Path, os.stat_result]] = []
    try:
        mtime = folder.lstat().st_mtime
        with os.scandir(folder) as items:
            for item in items:
                try:
                    info = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    folders.append(Path(item.path))
                else:
                    files.append((Path(item.path), info))
    except (FileNotFoundError, NotADirectoryError):
        return _Listing((), (), 0.0)
    return _Listing(tuple(sorted(folders)), tuple(sorted(files)), mtime)


def _is_temp(path: Path) -> bool:
    return bool(_TEMP_NAME.match(path.name))


def _changed(info: os.stat_result) -> float:
    """When a file last changed. A hard link keeps its source's old mtime, so for a file with other
    links the inode's change time (which linking sets) counts too: never older than it should be."""
    return info.st_mtime if info.st_nlink <= 1 else max(info.st_mtime, info.st_ctime)


def _temp_item(path: Path, info: os.stat_result) -> Item:
    return Item(path, info.st_size, _changed(info))


def _scan_json_tree(top: Path, temps: list[Item]) -> dict[str, tuple[Path, os.stat_result]]:
    """The ``<d[:2]>/<d>.json`` files under ``top`` by digest; temp files go to ``temps``."""
    found: dict[str, tuple[Path, os.stat_result]] = {}
    for prefix in _list(top).folders:
        for path, info in _list(prefix).files:
            if _is_temp(path):
                temps.append(_temp_item(path, info))
            elif path.suffix == ".json":
                found[path.stem] = (path, info)
    return found


def _scan_objects(
    root: Path, indexes: Mapping[str, tuple[Path, os.stat_result]], temps: list[Item]
) -> tuple[list[Entry], list[Item]]:
    """Entries (with their object sizes) and orphan object folders; temp files go to ``temps``."""
    entries: list[Entry] = []
    orphans: list[Item] = []
    seen: set[str] = set()
    for prefix in _list(root / OBJECTS_DIR).folders:
        for folder in _list(prefix).folders:
            listing = _list(folder)
            if not listing.mtime:
                continue  # removed while listed
            objects = [(path, info) for path, info in listing.files if not _is_temp(path)]
            temps.extend(_temp_item(path, info) for path, info in listing.files if _is_temp(path))
            digest = folder.name
            if digest in indexes:
                seen.add(digest)
                entries.append(_entry(digest, indexes[digest], folder, objects))
            else:
                changed = max([listing.mtime, *(_changed(info) for _, info in listing.files)])
                orphans.append(Item(folder, _tree_size(listing), changed))
    for digest in sorted(set(indexes) - seen):  # an index whose objects are gone: an entry of 0 bytes
        entries.append(_entry(digest, indexes[digest], root / OBJECTS_DIR / digest[:2] / digest, []))
    return entries, orphans


def _entry(
    digest: str,
    index: tuple[Path, os.stat_result],
    folder: Path,
    objects: Sequence[tuple[Path, os.stat_result]],
) -> Entry:
    """``index``: the index file and its lstat; ``objects``: the object files and theirs."""
    sizes: dict[str, int] = {}
    for path, info in objects:  # by role: racing uploads of one key may have left two blobs
        role = path.name.split(".", 1)[0]
        sizes[role] = sizes.get(role, 0) + info.st_size
    linked = sum(info.st_size for _, info in objects if info.st_nlink > 1)
    return Entry(digest, index[0], folder, index[1].st_mtime, sizes, linked)


def _tree_size(listing: _Listing) -> int:
    """The bytes of a folder's files, subfolders included (temp files are counted as temp files)."""
    own = sum(info.st_size for path, info in listing.files if not _is_temp(path))
    return own + sum(_tree_size(_list(sub)) for sub in listing.folders)


def scan(root: Path) -> Scan:
    """What ``root`` holds. Files that vanish while it is read are left out, never an error."""
    temps: list[Item] = []
    indexes = _scan_json_tree(root / INDEX_DIR, temps)
    reports = _scan_json_tree(root / CHECKS_DIR, temps) | _scan_json_tree(root / RECIPES_DIR, temps)
    entries, orphans = _scan_objects(root, indexes, temps)
    checks = [Item(path, info.st_size, info.st_mtime) for path, info in reports.values()]
    return Scan(
        root=root,
        entries=tuple(sorted(entries, key=lambda entry: (entry.last_use, entry.digest))),
        checks=tuple(sorted(checks, key=lambda item: (item.mtime, item.path))),
        orphans=tuple(sorted(orphans, key=lambda item: (item.mtime, item.path))),
        temps=tuple(sorted(temps, key=lambda item: (item.mtime, item.path))),
    )


# --- what to remove --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What a prune removes, and the entries it keeps."""

    entries: tuple[Entry, ...]
    kept: tuple[Entry, ...]
    checks: tuple[Item, ...]
    orphans: tuple[Item, ...]
    temps: tuple[Item, ...]


def plan_prune(found: Scan, now: float, older_than: float | None, max_size: int | None) -> Plan:
    """Entries unused for ``older_than`` seconds, then the least recently used ones until the rest
    total at most ``max_size`` bytes; check reports unused for ``older_than``; orphans and temp files
    older than ``ORPHAN_GRACE_SECONDS``."""
    kept = list(found.entries)  # oldest last use first
    doomed: list[Entry] = []
    if older_than is not None:
        doomed = [entry for entry in kept if entry.last_use < now - older_than]
        kept = kept[len(doomed) :]
    if max_size is not None:
        total = sum(entry.size for entry in kept)
        while kept and total > max_size:
            total -= kept[0].size
            doomed.append(kept.pop(0))
    checks = [item for item in found.checks if older_than is not None and item.mtime < now - older_than]
    grace = now - ORPHAN_GRACE_SECONDS
    return Plan(
        entries=tuple(doomed),
        kept=tuple(kept),
        checks=tuple(checks),
        orphans=tuple(item for item in found.orphans if item.mtime < grace),
        temps=tuple(item for item in found.temps if item.mtime < grace),
    )


# --- removing ------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What a prune removed; ``linked``: bytes of removed files that other hard links keep on disk."""

    entries: int = 0
    entry_bytes: int = 0
    checks: int = 0
    orphans: int = 0
    temps: int = 0
    other_bytes: int = 0  # check reports, orphans, temp files
    linked: int = 0
    in_use: list[Entry] = field(default_factory=list)  # used while pruning: kept
    failures: list[str] = field(default_factory=list)

    @property
    def freed(self) -> int:
        return self.entry_bytes + self.other_bytes


def _unlink(path: Path, tally: Tally) -> os.stat_result | None:
    """Unlink ``path``; its lstat from just before, or None when it had vanished or could not go."""
    try:
        info = path.lstat()
        path.unlink()
    except FileNotFoundError:
        return None
    except OSError as exc:
        tally.failures.append(f"cannot remove {path}: {exc.strerror or exc}")
        return None
    if info.st_nlink > 1:
        tally.linked += info.st_size
    return info


def _remove_folder(folder: Path, tally: Tally, grace: float) -> int:
    """Unlink everything under ``folder`` (symlinks not followed) but temp files changed since
    ``grace`` (a writer's), then the folder if that emptied it; the bytes unlinked. A folder a writer
    is using stays, and becomes an orphan folder."""
    listing = _list(folder)
    removed = sum(_remove_folder(sub, tally, grace) for sub in listing.folders)
    for path, found in listing.files:
        if _is_temp(path) and _changed(found) >= grace:
            continue
        info = _unlink(path, tally)
        removed += info.st_size if info else 0
    try:
        folder.rmdir()
    except OSError:
        pass  # gone already, or not empty: a writer is using it
    return removed


def _remove_entry(entry: Entry, tally: Tally, grace: float) -> None:
    """The index first (readers then see no entry), then the objects; an entry used since the scan
    (its index touched or replaced) is kept."""
    try:
        current = entry.index.lstat()
    except FileNotFoundError:
        return  # another prune took it
    if current.st_mtime != entry.last_use:
        tally.in_use.append(entry)
        return
    if _unlink(entry.index, tally) is None:
        return
    tally.entries += 1
    tally.entry_bytes += _remove_folder(entry.objects, tally, grace)


def _remove_orphan(found: Scan, item: Item, tally: Tally, grace: float) -> None:
    digest = item.path.name
    if (found.root / INDEX_DIR / digest[:2] / f"{digest}.json").exists():
        return  # its writer finished the entry since the scan
    if not item.path.is_dir():
        return  # another prune took it
    tally.orphans += 1
    tally.other_bytes += _remove_folder(item.path, tally, grace)


def prune(found: Scan, plan: Plan, now: float) -> Tally:
    """Remove what ``plan`` lists: temp files, entries, check reports, then orphan folders."""
    tally = Tally()
    grace = now - ORPHAN_GRACE_SECONDS
    for item in plan.temps:
        if (info := _unlink(item.path, tally)) is not None:
            tally.temps += 1
            tally.other_bytes += info.st_size
    for entry in plan.entries:
        _remove_entry(entry, tally, grace)
    for item in plan.checks:
        if (info := _unlink(item.path, tally)) is not None:
            tally.checks += 1
            tally.other_bytes += info.st_size
    for item in plan.orphans:
        _remove_orphan(found, item, tally, grace)
    return tally
