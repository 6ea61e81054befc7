"""``python -m onnx_cooker.report BUILD_DIR`` (re)writes the report; ``python -m onnx_cooker.report diff OLD
NEW`` compares two builds' bundles (a release diff, with a size gate for CI)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from onnx_cooker.fsutil import atomic_write
from onnx_cooker.report.html import render, write_report
from onnx_cooker.report.model import Change, changes, read_build, summary
from onnx_cooker.runtime.constants import MANIFEST_NAME
from onnx_cooker.stdout import Parser, output_failed


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


def _say(text: str, code: int, prog: str) -> int:
    """Print ``text`` and flush, here where stdout's failure can be told apart from others: ``code``,
    or ``onnx_cooker.stdout.output_failed``'s status."""
    try:
        print(text)
        sys.stdout.flush()
    except OSError as exc:
        return output_failed(exc, code, prog, error=1)
    return code


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """``prog``: the command as it was typed (``onnx-cooker diff``), for its help and errors."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["diff"]:
        prog = prog or "python -m onnx_cooker.report diff"
        parser = Parser(prog=prog)
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
        # The gate is decided apart from the table: its status never depends on the table being read
        # (`diff ... --fail-if-grows 5% | head` in CI), and its FAIL lines go to stderr.
        limit = options.fail_if_grows
        grown = {} if limit is None else {p: g for p, g in _growth(old, new).items() if g > limit}
        said = _say(diff_table(found, old, new), 0, prog)  # 141 where the reader left
        if options.html is not None:
            page = render(read_build(options.new), found, False, [], f"diff {options.old} -> {options.new}")
            atomic_write(options.html, page.encode())
        for platform, growth in sorted(grown.items()):
            print(f"FAIL: {platform} grows by {growth:.1%}, over {limit:.1%}", file=sys.stderr)
        return (1 if grown else 0) if limit is not None else said
    prog = prog or "python -m onnx_cooker.report"
    parser = Parser(
        prog=prog,
        description="(Re)write BUILD/report.html. `python -m onnx_cooker.report diff OLD_BUILD NEW_BUILD "
        "[--html FILE] [--fail-if-grows 5%]` compares two builds' bundles instead (see `diff --help`).",
    )
    parser.add_argument("build", type=Path)
    options = parser.parse_args(args)
    return _say(str(write_report(options.build)), 0, prog)
