"""The cook report (``build/report.html``) and release-to-release diffs. Standard library only.

    python -m pipeline.report BUILD_DIR                 # (re)write BUILD_DIR/report.html
    python -m pipeline.report diff OLD_BUILD NEW_BUILD [--html FILE] [--fail-if-grows 5%]

The page is self-contained (inline CSS, JavaScript and SVG; no network): per platform the bundle
size, a bar per model (shipped blob vs model bytes), a sortable table of the models, what changed
since the previous report of the same build folder, and the failures of the last cook.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.fsutil import atomic_write, write_json
from pipeline.layout import REPORT_NAME, REPORT_STATE_DIR, step_times_path
from pipeline.runtime.constants import MANIFEST_NAME, Precision

# What the last report saw, to say what changed at the next one.
SNAPSHOT_PATH = Path(REPORT_STATE_DIR) / "previous.json"
FAILURES_DIR = Path(REPORT_STATE_DIR) / "failures"
COOKING_STEPS = ("optimize and serialize",)  # a cook that ran these cooked; one that did not was a cache hit


@dataclass(frozen=True)
class Model:
    platform: str
    name: str
    entry: Mapping[str, Any]
    times: Mapping[str, float] = field(default_factory=dict)

    @property
    def precision(self) -> str:
        return (self.entry.get("precision") or {}).get("precision", Precision.FP32.value)

    @property
    def max_abs(self) -> float | None:
        outputs = (self.entry.get("verification") or {}).get("outputs")
        return max((o["max_abs"] for o in outputs), default=0.0) if outputs else None

    @property
    def how(self) -> str:
        if not self.times:
            return "unknown"
        return "cooked" if any(step in self.times for step in COOKING_STEPS) else "cache hit"

    @property
    def usability(self) -> str:
        report = self.entry.get("usability") or {}
        parts = []
        for ep, info in sorted(report.items()) if isinstance(report, Mapping) else ():
            if isinstance(info, Mapping) and "supported_nodes" in info:
                name = ep.removesuffix("ExecutionProvider")
                parts.append(
                    f"{name} {info['supported_nodes']}/{info.get('nodes', '?')} ({info.get('verdict', '?')})"
                )
        return ", ".join(parts)


def read_build(build: Path) -> dict[str, dict[str, Model]]:
    """platform -> model name -> Model, from every ``<platform>/manifest.json`` under ``build``."""
    platforms: dict[str, dict[str, Model]] = {}
    for manifest_path in sorted(build.glob(f"*/{MANIFEST_NAME}")):
        platform_dir = manifest_path.parent
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        models = {}
        for name, entry in sorted(manifest["models"].items()):
            times_path = step_times_path(platform_dir, name)
            times = json.loads(times_path.read_text()) if times_path.is_file() else {}
            models[name] = Model(manifest["platform"], name, entry, times)
        platforms[manifest["platform"]] = models
    return platforms


def record_failure(build: Path, task: str, message: str) -> None:
    """Keep a failed task's message for the report (a later success of the task removes it)."""
    write_json(build / FAILURES_DIR / f"{_file_safe(task)}.json", {"task": task, "message": message})


def clear_failure(build: Path, task: str) -> None:
    (build / FAILURES_DIR / f"{_file_safe(task)}.json").unlink(missing_ok=True)


def clear_failures(build: Path) -> None:
    for path in (build / FAILURES_DIR).glob("*.json"):
        path.unlink(missing_ok=True)


def read_failures(build: Path) -> list[dict[str, str]]:
    folder = build / FAILURES_DIR
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _file_safe(task: str) -> str:
    return task.replace("/", "%2F").replace(":", "%3A")


# --- what changed -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    platform: str
    name: str
    kind: str  # added, removed, re-cooked
    why: str
    old_size: int
    new_size: int
    old_error: float | None = None  # max abs verification error (None: not verified or absent)
    new_error: float | None = None

    @property
    def accuracy(self) -> str:
        """``max abs error a -> b`` for a re-cooked model whose verification error changed."""
        if self.old_error == self.new_error or self.kind != "re-cooked":
            return ""
        old = "not verified" if self.old_error is None else f"{self.old_error:.3g}"
        new = "not verified" if self.new_error is None else f"{self.new_error:.3g}"
        return f"max abs error {old} -> {new}"


def summary(platforms: Mapping[str, Mapping[str, Model]]) -> dict[str, dict[str, dict[str, Any]]]:
    """What a diff compares, per platform and model: sizes, key, sources, settings, tools, accuracy."""
    return {
        platform: {
            name: {
                "blob_size": m.entry["blob_size"],
                "cook_key": m.entry.get("cook_key"),
                "sources": m.entry.get("sources"),
                "settings": m.entry.get("settings"),
                "cooked_with": m.entry.get("cooked_with"),
                "max_abs": m.max_abs,
                "precision": m.precision,
            }
            for name, m in models.items()
        }
        for platform, models in platforms.items()
    }


def changes(old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]]) -> list[Change]:
    found = []
    for platform in sorted(set(old) | set(new)):
        before, after = old.get(platform, {}), new.get(platform, {})
        for name in sorted(set(before) | set(after)):
            if name not in before:
                found.append(Change(platform, name, "added", "new model", 0, after[name]["blob_size"]))
            elif name not in after:
                found.append(
                    Change(platform, name, "removed", "no longer cooked", before[name]["blob_size"], 0)
                )
            elif before[name]["cook_key"] != after[name]["cook_key"]:
                b, a = before[name], after[name]
                why = [
                    what
                    for what, key in (
                        ("source", "sources"),
                        ("settings", "settings"),
                        ("tool versions", "cooked_with"),
                    )
                    if b.get(key) != a.get(key)
                ] or ["the cooker's bundle format"]
                found.append(
                    Change(
                        platform,
                        name,
                        "re-cooked",
                        ", ".join(why),
                        b["blob_size"],
                        a["blob_size"],
                        b.get("max_abs"),
                        a.get("max_abs"),
                    )
                )
    return found


# --- the page -----------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left}
th{background:#f6f8fa;cursor:pointer;user-select:none}td.n{text-align:right;font-variant-numeric:tabular-nums}
.fail{background:#ffebe9;border:1px solid #ff8182;padding:8px;white-space:pre-wrap}
svg text{font-size:11px}.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
"""
_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, column) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var down = th.dataset.order !== 'asc';
      th.dataset.order = down ? 'asc' : 'desc';
      rows.sort(function (a, b) {
        var x = a.cells[column].dataset.v || a.cells[column].textContent;
        var y = b.cells[column].dataset.v || b.cells[column].textContent;
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return down ? c : -c;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _mb(size: float) -> str:
    return f"{size / 1e6:,.2f} MB" if size >= 1e5 else f"{size / 1e3:,.1f} kB"


def _chart(platform: str, models: Sequence[Model]) -> str:
    """One horizontal bar per model: the shipped blob, over a lighter bar of the model bytes."""
    width, label, row = 720, 200, 18
    biggest = max((max(m.entry["blob_size"], m.entry.get("model_size", 0)) for m in models), default=1) or 1
    scale = (width - label - 90) / biggest
    parts = [
        f'<svg class="chart" data-platform="{_e(platform)}" width="{width}" height="{row * len(models) + 4}">'
    ]
    for i, m in enumerate(models):
        y = i * row + 2
        blob, model = m.entry["blob_size"], m.entry.get("model_size", 0)
        name = _e(m.name)
        parts += [
            f'<text x="{label - 6}" y="{y + 12}" text-anchor="end">{name}</text>',
            f'<rect class="model-bytes" x="{label}" y="{y + 2}" width="{model * scale:.1f}" height="12" '
            'fill="#c8e1ff"/>',
            f'<rect class="bar" data-model="{name}" x="{label}" y="{y + 4}" '
            f'width="{max(blob * scale, 1):.1f}" height="8" fill="#0969da">'
            f"<title>{name}: {blob:,} B shipped, {model:,} B model</title></rect>",
            f'<text x="{label + max(blob, model) * scale + 4:.1f}" y="{y + 12}">{_e(_mb(blob))}</text>',
        ]
    parts.append("</svg>")
    return "".join(parts)


def _table(models: Sequence[Model]) -> str:
    head = ["model", "format", "precision", "EPs", "blob bytes", "model bytes", "max abs error",
            "verified on", "EP usability", "cook s", "how"]  # fmt: skip
    rows = []
    for m in models:
        error = "not verified" if m.max_abs is None else f"{m.max_abs:.3g}"
        seconds = sum(m.times.values())
        cells = [
            f"<td>{_e(m.name)}</td>",
            f"<td>{_e(m.entry.get('format', ''))}</td>",
            f"<td>{_e(m.precision)}</td>",
            f"<td>{_e(', '.join(m.entry.get('execution_providers', [])))}</td>",
            f'<td class="n" data-v="{m.entry["blob_size"]}">{m.entry["blob_size"]:,}</td>',
            f'<td class="n" data-v="{m.entry.get("model_size", 0)}">{m.entry.get("model_size", 0):,}</td>',
            f'<td class="n" data-v="{-1 if m.max_abs is None else m.max_abs}">{_e(error)}</td>',
            f"<td>{_e(', '.join(m.entry.get('verified_on', [])))}</td>",
            f"<td>{_e(m.usability)}</td>",
            f'<td class="n" data-v="{seconds:.3f}">{seconds:.2f}</td>',
            f"<td>{_e(m.how)}</td>",
        ]
        rows.append(f'<tr data-model="{_e(m.name)}">{"".join(cells)}</tr>')
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(rows)
    return f'<table class="sortable models"><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>'


def _changes_html(found: Sequence[Change], first: bool) -> str:
    if first:
        return "<p>First report of this build folder: nothing to compare with.</p>"
    if not found:
        return "<p>Nothing changed since the previous cook.</p>"
    rows = "".join(
        f"<tr><td>{_e(c.platform)}</td><td>{_e(c.name)}</td><td>{_e(c.kind)}</td>"
        f"<td>{_e(c.why + (f'; {c.accuracy}' if c.accuracy else ''))}</td>"
        f'<td class="n">{c.new_size - c.old_size:+,}</td></tr>'
        for c in found
    )
    head = "<tr><th>platform</th><th>model</th><th>change</th><th>why</th><th>size delta, B</th></tr>"
    return f'<table class="sortable changes"><thead>{head}</thead><tbody>{rows}</tbody></table>'


def render(
    platforms: Mapping[str, Mapping[str, Model]],
    found: Sequence[Change],
    first: bool,
    failures: Sequence[Mapping[str, str]],
    title: str = "onnx-cooker: cook report",
) -> str:
    body = [f"<h1>{_e(title)}</h1>"]
    if failures:
        body.append(f"<h2>Failures ({len(failures)})</h2>")
        body += [f'<div class="fail"><b>{_e(f["task"])}</b>\n{_e(f["message"])}</div>' for f in failures]
    body += ["<h2>Changes since the previous cook</h2>", _changes_html(found, first)]
    for platform, models in platforms.items():
        ordered = sorted(models.values(), key=lambda m: -m.entry["blob_size"])
        total = sum(m.entry["blob_size"] for m in ordered)
        body += [
            f'<section class="platform" data-platform="{_e(platform)}">',
            f"<h2>{_e(platform)}: {len(ordered)} model(s), bundle {_e(_mb(total))} ({total:,} B)</h2>",
            '<p class="legend"><span style="background:#0969da"></span>shipped blob'
            '<span style="background:#c8e1ff"></span>model bytes</p>',
            _chart(platform, ordered),
            _table(ordered),
            "</section>",
        ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + f"<script>{_JS}</script></body></html>\n"
    )


def write_report(build: Path) -> Path:
    """``build/report.html`` from the build's manifests, step times, failures and previous report."""
    platforms = read_build(build)
    current = summary(platforms)
    snapshot = build / SNAPSHOT_PATH
    first = not snapshot.is_file()
    previous = {} if first else json.loads(snapshot.read_text(encoding="utf-8"))
    page = render(platforms, changes(previous, current), first, read_failures(build))
    target = build / REPORT_NAME
    atomic_write(target, page.encode())
    write_json(snapshot, current)
    return target


# --- diff between two builds --------------------------------------------------------------------------


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


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["diff"]:
        parser = argparse.ArgumentParser(prog="python -m pipeline.report diff")
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
    parser = argparse.ArgumentParser(prog="python -m pipeline.report", description="write BUILD/report.html")
    parser.add_argument("build", type=Path)
    options = parser.parse_args(args)
    print(write_report(options.build))
    return 0

