"""``bench/results.md`` holds every benchmark's tables: the main bench writes the file, and each
standalone bench (``python -m bench.farm``, ``bench.precision``) keeps its own report in
``bench/results-<name>.md`` and a copy of it in a marked section of ``bench/results.md``, which the
main bench carries over when it rewrites the file. Standard library only."""

from __future__ import annotations

import re
from pathlib import Path

_SECTION = re.compile(r"\n<!-- bench\.(\w+) -->\n.*?\n<!-- /bench\.\1 -->\n", re.S)


def section(name: str, report: str, source: str) -> str:
    """``report`` (a standalone bench's markdown) as a section of results.md: its title made a level-2
    heading that names the file it comes from."""
    title, _, body = report.partition("\n")
    heading = f"## {title.lstrip('# ').strip()} (from [{source}]({source}))"
    return f"\n<!-- bench.{name} -->\n{heading}\n{body.strip()}\n<!-- /bench.{name} -->\n"


def embed(results: Path, name: str, report: str, source: str) -> None:
    """Put (or replace) bench ``name``'s section in ``results``; a missing file gets just that."""
    text = results.read_text(encoding="utf-8") if results.is_file() else ""
    new = section(name, report, source)
    found = next((m for m in _SECTION.finditer(text) if m[1] == name), None)
    text = text[: found.start()] + new + text[found.end() :] if found else text.rstrip("\n") + "\n" + new
    results.write_text(text, encoding="utf-8")


def carry_over(old: str, new: str) -> str:
    """``new`` (the main bench's fresh results.md) with the standalone benches' sections of ``old``."""
    kept = [m[0] for m in _SECTION.finditer(old)]
    return new.rstrip("\n") + "\n" + "".join(kept) if kept else new
