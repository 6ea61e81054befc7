"""Housekeeping for a folder cook cache: ``python -m pipeline.farm stats|prune``.

A folder cache (``pipeline.farm.cache.FolderStore``) only grows: every new cook key adds an entry, and
nothing removes the entries of models, settings or onnxruntime versions no build asks for any more.
This module reports what a cache folder holds (``stats``) and removes entries that were not used
for a while or the least recently used ones past a size (``prune``). An S3 cache is not handled
here: a bucket lifecycle rule expires its objects (README, "Build farms").

The layout it works on, as ``pipeline.farm.cache`` writes it (``d``: an entry's digest)::

    index/<d[:2]>/<d>.json        an entry's index; its mtime is the entry's last use (a hit touches it)
    objects/<d[:2]>/<d>/<role>    the entry's objects (blob, entry, verify, applied)
    checks/<d[:2]>/<d>.json       a runtime check's report; its mtime is its last use
    .../.<name>.<pid>.<hex>.tmp   a writer's temp file, renamed into place when complete

Writers put objects first and the index last, so an entry is removed the other way round: its index
first (readers then see no entry), then its objects. A reader racing a prune finds an object missing,
warns in one line and cooks again. Objects may be hard links shared with build folders: they are
only ever unlinked, never changed, and unlinking one frees its disk space only when no build folder
links it. Object folders without an index (an upload in progress, or one killed midway) and temp
files are removed only once they are an hour old. Standard library only (with
``pipeline.farm.cache``): no onnx,
onnxruntime or numpy, so that it runs on a file server with a bare Python.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from pipeline.farm.cache import CACHE_ENV, ROLES, _is_windows_drive, folder_path  # standard library only too

INDEX_DIR, OBJECTS_DIR, CHECKS_DIR = "index", "objects", "checks"  # as pipeline.farm.cache names them
# An object folder without an index, or a temp file, younger than this may belong to a live writer.
ORPHAN_GRACE_SECONDS = 3600
EXIT_FAILED, EXIT_USAGE = 1, 2
PROG = "python -m pipeline.farm"
DAY = 86400

_TEMP_NAME = re.compile(r"^\..+\.tmp$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(i?)b?|b)?\s*$", re.IGNORECASE)
_SIZE_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw])\s*$")
_DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": DAY, "w": 7 * DAY}
SIZE_FORMS = "bytes (100), K/M/G/T with an optional B (500MB, 50GB, 1.5TB) or KiB/MiB/GiB/TiB (2GiB)"
DURATION_FORMS = "a number and s, m, h, d or w (45s, 90m, 12h, 30d, 2w)"


class AdminError(Exception):
    """The command cannot run (no cache, an S3 cache, a missing folder): one line, exit code 2."""


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
    sizes: Mapping[str, int]  # st_size by object name (role)
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
    sizes = {path.name: info.st_size for path, info in objects}
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
    reports = _scan_json_tree(root / CHECKS_DIR, temps)
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


# --- reading the command line ----------------------------------------------------------------------


def parse_size(text: str) -> int:
    """``100``, ``500MB``, ``50GB``, ``1.5TB`` (decimal units), ``2GiB`` (binary ones) in bytes."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: use {SIZE_FORMS}")
    number, unit, binary = match.groups()
    power = _SIZE_POWERS[unit.lower()] if unit else 0
    return int(float(number) * ((1024 if binary else 1000) ** power))


def parse_duration(text: str) -> float:
    """``45s``, ``90m``, ``12h``, ``30d``, ``2w`` in seconds."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: use {DURATION_FORMS}")
    return float(match.group(1)) * _DURATION_SECONDS[match.group(2)]


def cache_root(given: str | None, env: Mapping[str, str]) -> Path:
    """The cache folder from ``--cache`` or else ``COOK_CACHE``: a path or ``file:///path``."""
    source = "--cache" if given else CACHE_ENV
    url = (given if given else env.get(CACHE_ENV, "")).strip()
    if not url:
        raise AdminError(f"no cook cache: give --cache PATH or set {CACHE_ENV}")
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        raise AdminError(
            f"{source} {url} is an S3 cache: this command handles folder caches only; expire an S3 "
            'cache\'s objects with a lifecycle rule on the bucket instead (README, "Build farms")'
        )
    if parsed.scheme not in ("", "file") and not _is_windows_drive(url):
        raise AdminError(f"{source} {url!r}: use a folder path or file:///path")
    path = folder_path(url)
    if not path.is_dir():
        raise AdminError(f"cache folder {path} ({source}) does not exist or is not a folder")
    has_layout = any((path / part).is_dir() for part in (INDEX_DIR, OBJECTS_DIR, CHECKS_DIR))
    try:
        empty = not any(path.iterdir())
    except OSError as exc:
        raise AdminError(f"cannot read cache folder {path}: {exc.strerror or exc}") from None
    if not (has_layout or empty):
        raise AdminError(f"{path} ({source}) is not a cook cache: it has no index/, objects/ or checks/")
    return path


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--cache", metavar="PATH", help=f"the cache folder (a path or file:///path; default: ${CACHE_ENV})"
    )
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Housekeeping for a folder cook cache (an S3 cache: use a bucket lifecycle rule).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{stats,prune}")
    commands.add_parser(
        "stats",
        parents=[common],
        help="what the cache holds",
        description="Entries, their bytes by role, check reports, last uses and leftovers of a cache.",
    )
    pruning = commands.add_parser(
        "prune",
        parents=[common],
        help="remove old or least recently used entries",
        description=(
            "Remove entries whose last use (a hit) is older than --older-than, then the least recently "
            "used ones until the entries total at most --max-size; check reports unused for "
            "--older-than; object folders without an index and temp files once they are an hour old "
            "(a writer may still be at work on younger ones)."
        ),
    )
    pruning.add_argument(
        "--older-than",
        type=parse_duration,
        metavar="DURATION",
        help=f"remove entries and check reports not used for this long: {DURATION_FORMS}",
    )
    pruning.add_argument(
        "--max-size",
        type=parse_size,
        metavar="SIZE",
        help=(
            "then remove the least recently used entries until the entries' objects total at most "
            f"SIZE (check reports, leftovers and indexes are not counted): {SIZE_FORMS}"
        ),
    )
    pruning.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    return parser


# --- output --------------------------------------------------------------------------------------


def human_size(size: int) -> str:
    """``1.63 GB``: decimal units, three significant digits or more; plain bytes below 1 kB."""
    if size < 1000:
        return f"{size} B"
    value, unit = size / 1000, "kB"
    for bigger in ("MB", "GB", "TB", "PB"):
        if round(value, 2) < 1000:
            break
        value, unit = value / 1000, bigger
    return f"{value:.2f} {unit}"


def sized(size: int) -> str:
    """``1.63 GB (1630000000 bytes)``, or ``512 bytes``."""
    return f"{size} bytes" if size < 1000 else f"{human_size(size)} ({size} bytes)"


def when(timestamp: float, now: float) -> str:
    """``2024-05-01 12:30 UTC (40 days ago)``; under a day ``(5 h ago)``, under an hour ``(7 min ago)``."""
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    seconds = max(0.0, now - timestamp)
    if seconds >= DAY:
        since = _count(int(seconds // DAY), "day")
    elif seconds >= 3600:
        since = f"{int(seconds // 3600)} h"
    else:
        since = f"{int(seconds // 60)} min"
    return f"{moment} ({since} ago)"


def _count(count: int, word: str) -> str:
    """``1 entry``, ``2 entries``, ``3 temp files``."""
    plural = word[:-1] + "ies" if word.endswith("y") and word[-2:-1] not in "aeiou" else word + "s"
    return f"{count} {word if count == 1 else plural}"


def _role_order(roles: Iterable[str]) -> list[str]:
    return sorted(roles, key=lambda role: (ROLES.index(role) if role in ROLES else len(ROLES), role))


def stats_lines(found: Scan, now: float) -> list[str]:
    by_role: dict[str, int] = {}
    for entry in found.entries:
        for role, size in entry.sizes.items():
            by_role[role] = by_role.get(role, 0) + size
    lines = [
        f"cook cache: {found.root}",
        f"entries: {len(found.entries)}, objects {sized(found.entry_bytes)}",
    ]
    width = max([len(role) for role in by_role] + [0])
    lines += [f"  {role + ':':<{width + 1}} {sized(by_role[role])}" for role in _role_order(by_role)]
    linked = sum(entry.linked for entry in found.entries)
    if linked:
        lines.append(f"  hard-linked from build folders too: {sized(linked)} (pruning them frees no disk)")
    if found.entries:
        lines.append(f"oldest last use: {when(found.entries[0].last_use, now)}")
        lines.append(f"newest last use: {when(found.entries[-1].last_use, now)}")
    else:
        lines.append("last use: - (no entries)")
    lines.append(f"check reports: {len(found.checks)}, {sized(sum(item.size for item in found.checks))}")
    grace = now - ORPHAN_GRACE_SECONDS
    for what, items in (("orphan object folders", found.orphans), ("temp files", found.temps)):
        stale = sum(1 for item in items if item.mtime < grace)
        lines.append(
            f"{what}: {len(items)}, {sized(sum(item.size for item in items))}"
            f" ({stale} older than 1 h, which prune removes)"
        )
    return lines


def _relative(found: Scan, path: Path) -> str:
    try:
        return str(path.relative_to(found.root))
    except ValueError:
        return str(path)


def dry_run_lines(found: Scan, plan: Plan, now: float) -> list[str]:
    lines = [
        f"would remove entry {entry.digest[:16]}: {sized(entry.size)}, last used {when(entry.last_use, now)}"
        for entry in plan.entries
    ]
    for what, items in (("check report", plan.checks), ("orphan", plan.orphans), ("temp file", plan.temps)):
        lines += [
            f"would remove {what} {_relative(found, item.path)}: {sized(item.size)}, {when(item.mtime, now)}"
            for item in items
        ]
    return lines


def summary(found: Scan, plan: Plan, tally: Tally | None) -> str:
    """One line: what was (or, for ``tally`` None, would be) removed, freed and left."""
    if tally is None:
        removed = [len(plan.entries), len(plan.checks), len(plan.orphans), len(plan.temps)]
        freed = sum(entry.size for entry in plan.entries)
        freed += sum(item.size for item in (*plan.checks, *plan.orphans, *plan.temps))
        left, left_bytes = len(plan.kept), sum(entry.size for entry in plan.kept)
        linked = sum(entry.linked for entry in plan.entries)
        verb, freeing, leaving = "would remove", "would free", "would leave"
    else:
        removed = [tally.entries, tally.checks, tally.orphans, tally.temps]
        freed, linked = tally.freed, tally.linked
        removed_digests = {entry.digest for entry in plan.entries} - {entry.digest for entry in tally.in_use}
        left = len(found.entries) - tally.entries
        left_bytes = sum(entry.size for entry in found.entries if entry.digest not in removed_digests)
        verb, freeing, leaving = "removed", "freed", "left"
    words = ("entry", "check report", "orphan folder", "temp file")
    parts = ", ".join(_count(count, word) for count, word in zip(removed, words, strict=True))
    line = f"prune: {verb} {parts}; {freeing} {sized(freed)}"
    if linked:
        line += f" (of which {sized(linked)} stay on disk: hard-linked from build folders)"
    line += f"; {leaving} {_count(left, 'entry')}, {sized(left_bytes)}"
    if tally is not None and tally.in_use:
        line += f" ({len(tally.in_use)} used while pruning, kept)"
    return line


# --- the command ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "prune" and args.older_than is None and args.max_size is None:
        parser.error("prune: give --older-than DURATION, --max-size SIZE or both")
    try:
        root = cache_root(args.cache, os.environ if env is None else env)
    except AdminError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _run(args, root)
    except OSError as exc:  # an unreadable folder in the cache (vanished files are never an error)
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _run(args: argparse.Namespace, root: Path) -> int:
    now = time.time()
    found = scan(root)
    if args.command == "stats":
        print("\n".join(stats_lines(found, now)))
        return 0
    plan = plan_prune(found, now, args.older_than, args.max_size)
    if args.dry_run:
        for line in dry_run_lines(found, plan, now):
            print(line)
        print(summary(found, plan, None))
        return 0
    tally = prune(found, plan, now)
    for failure in tally.failures:
        print(f"warning: {failure}", file=sys.stderr)
    print(summary(found, plan, tally))
    return EXIT_FAILED if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
