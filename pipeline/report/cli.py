"""``python -m pipeline.report BUILD_DIR`` (re)writes the report; ``python -m pipeline.report diff OLD
NEW`` compares two builds' bundles (a release diff, with a size gate for CI)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline.fsutil import atomic_write
from pipeline.report.html import render, write_report
from pipeline.report.model import Change, changes, read_build, summary
from pipeline.runtime.constants import MANIFEST_NAME


def diff_table(found: Sequence[Change], old: Mapping, new: Mapping) -> str:
    lines = [f"{'platform':<14} {'model':<28} {'change':<10} {'size delta':>14}  why"]
    for c in found:
        accuracy = f"; {c.accuracy}" if c.accuracy else ""
        size = f"{c.new_size - c.old_size:>+14,}"
        lines.append(f"{c.platform:<14} {c.name:<28} {c.kind:<10} {size}  {c.why}{accuracy}")
    for platform in sorted(set(old) | set(new)):
        before = sum(m["blob_size"] for m in old.get(platform, {}).values())
        after = sum(m["blob_size"] for m in new.get(platform, {}).values())
        growth = f" ({(after - before) / before:+.1%})" if before else ""
        lines.append(f"{platform}: download {before:,} -> {after:,} B, {after - before:+,} B{growth}")
    return "\n".join(lines)


def _growth(old: Mapping, new: Mapping) -> dict[str, float]:
    growth = {}
    for platform in set(old) | set(new):
        before = sum(m["blob_size"] for m in old.get(platform, {}).values())
        after = sum(m["blob_size"] for m in new.get(platform, {}).values())
        growth[platform] = (after - before) / before if before else (float("inf") if after else 0.0)
    return growth


def _percent(text: str) -> float:
    try:
        return float(text.rstrip("%")) / 100
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage like 5%") from None


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m pipeline.report diff") -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["diff"]:
        parser = argparse.ArgumentParser(prog=prog)
        parser.add_argument("old", type=Path)
        parser.add_argument("new", type=Path)
        parser.add_argument("--html", type=Path, help="also write the diff as a self-contained page")
        parser.add_argument(
            "--fail-if-grows",
            type=_percent,
            metavar="PERCENT",
            help="exit 1 when a platform's download grows by more than this, e.g. 5%%",
        )
        options = parser.parse_args(args[1:])
        for folder in (options.old, options.new):
            if not any(folder.glob(f"*/{MANIFEST_NAME}")):
                parser.error(f"{folder} holds no <platform>/{MANIFEST_NAME}: give two cooked build folders")
        old, new = summary(read_build(options.old)), summary(read_build(options.new))
        found = changes(old, new)
        print(diff_table(found, old, new))
        if options.html is not None:
            page = render(read_build(options.new), found, False, [], f"diff {options.old} -> {options.new}")
            atomic_write(options.html, page.encode())
        if options.fail_if_grows is not None:
            grown = {p: g for p, g in _growth(old, new).items() if g > options.fail_if_grows}
            if grown:
                for platform, growth in sorted(grown.items()):
                    print(
                        f"FAIL: {platform} grows by {growth:.1%}, over {options.fail_if_grows:.1%}",
                        file=sys.stderr,
                    )
                return 1
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.report",
        description="(Re)write BUILD/report.html. `python -m pipeline.report diff OLD_BUILD NEW_BUILD "
        "[--html FILE] [--fail-if-grows 5%]` compares two builds' bundles instead (see `diff --help`).",
    )
    parser.add_argument("build", type=Path)
    options = parser.parse_args(args)
    print(write_report(options.build))
    return 0
