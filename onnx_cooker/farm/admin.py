"""The command line of a folder cook cache's housekeeping: ``python -m onnx_cooker.farm stats|prune``.

It reads its arguments and ``COOK_CACHE``, runs ``onnx_cooker.farm.housekeeping`` (what the cache folder
holds, what a prune removes) and prints what it found or did. An S3 cache is not handled here: a
bucket lifecycle rule expires its objects (docs/build-farms.md, "S3: a lifecycle rule"). Standard
library only (with
``onnx_cooker.farm.store`` and ``onnx_cooker.farm.housekeeping``): no onnx, onnxruntime or numpy, so that
it runs on a file server with a bare Python.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from onnx_cooker.farm.housekeeping import (
    CHECKS_DIR,
    INDEX_DIR,
    OBJECTS_DIR,
    ORPHAN_GRACE_SECONDS,
    Plan,
    Scan,
    Tally,
    plan_prune,
    prune,
    scan,
)
from onnx_cooker.farm.store import (  # standard library only too
    CACHE_ENV,
    ROLES,
    folder_path,
    is_windows_drive,
)
from onnx_cooker.stdout import Parser, output_failed

EXIT_FAILED, EXIT_USAGE = 1, 2
PROG = "python -m onnx_cooker.farm"
DAY = 86400

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(i?)b?|b)?\s*$", re.IGNORECASE)
_SIZE_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw])\s*$")
_DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": DAY, "w": 7 * DAY}
SIZE_FORMS = "bytes (100), K/M/G/T with an optional B (500MB, 50GB, 1.5TB) or KiB/MiB/GiB/TiB (2GiB)"
DURATION_FORMS = "a number and s, m, h, d or w (45s, 90m, 12h, 30d, 2w)"


class AdminError(Exception):
    """The command cannot run (no cache, an S3 cache, a missing folder): one line, exit code 2."""


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
            "cache's objects with a lifecycle rule on the bucket instead (docs/build-farms.md, "
            '"S3: a lifecycle rule")'
        )
    if parsed.scheme not in ("", "file") and not is_windows_drive(url):
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


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--cache", metavar="PATH", help=f"the cache folder (a path or file:///path; default: ${CACHE_ENV})"
    )
    parser = Parser(
        prog=prog,
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


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, *, prog: str = PROG) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.command == "prune" and args.older_than is None and args.max_size is None:
        parser.error("prune: give --older-than DURATION, --max-size SIZE or both")
    try:
        root = cache_root(args.cache, os.environ if env is None else env)
    except AdminError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        lines, code = _run(args, root)
    except OSError as exc:  # an unreadable folder in the cache (vanished files are never an error)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:  # printed once the work is done: a reader that leaves early changes nothing it did
        print("\n".join(lines))
        sys.stdout.flush()
    except OSError as exc:
        return output_failed(exc, code, prog, error=EXIT_FAILED)
    return code


def _run(args: argparse.Namespace, root: Path) -> tuple[list[str], int]:
    """What to print, and the exit status."""
    now = time.time()
    found = scan(root)
    if args.command == "stats":
        return stats_lines(found, now), 0
    plan = plan_prune(found, now, args.older_than, args.max_size)
    if args.dry_run:
        return [*dry_run_lines(found, plan, now), summary(found, plan, None)], 0
    tally = prune(found, plan, now)
    for failure in tally.failures:
        print(f"warning: {failure}", file=sys.stderr)
    return [summary(found, plan, tally)], EXIT_FAILED if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
