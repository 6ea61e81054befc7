"""The cook report as one self-contained page, ``<build>/report.html``: per platform a size chart and a
table, the changes since the last run, the failures."""

from __future__ import annotations

import html
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from onnx_cooker.fsutil import atomic_write, write_json
from onnx_cooker.layout import REPORT_NAME
from onnx_cooker.report.model import (
    LAST_SEEN_PATH,
    SNAPSHOT_PATH,
    Change,
    Model,
    changes,
    read_build,
    read_failures,
    summary,
)

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left}
th{background:#f6f8fa;cursor:pointer;user-select:none}td.n{text-align:right;font-variant-numeric:tabular-nums}
.fail{background:#ffebe9;border:1px solid #ff8182;padding:8px;white-space:pre-wrap}
.stale{background:#fff8c5;border:1px solid #d4a72c;padding:6px 8px}
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
            "verified on", "EP placement", "EP usability", "cook s", "how"]  # fmt: skip
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
            f"<td>{_e(m.placement)}</td>",
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
        return "<p>Nothing changed since the cook before.</p>"
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
    orphaned: Collection[str] = (),
    banner: str = "",
) -> str:
    body = [f"<h1>{_e(title)}</h1>"]
    if banner:
        body.append(f'<p class="stale">{_e(banner)}</p>')
    if failures:
        body.append(f"<h2>Failures ({len(failures)})</h2>")
        body += [f'<div class="fail"><b>{_e(f["task"])}</b>\n{_e(f["message"])}</div>' for f in failures]
    if not banner:
        body += ["<h2>Changes of the last cook that changed a bundle</h2>", _changes_html(found, first)]
    for platform, models in platforms.items():
        ordered = sorted(models.values(), key=lambda m: -m.entry["blob_size"])
        total = sum(m.entry["blob_size"] for m in ordered)
        failed = failed_tasks(platform, failures)
        stale = " (no platform file)" if platform in orphaned else " (stale)" if failed else ""
        body += [
            f'<section class="platform" data-platform="{_e(platform)}">',
            f"<h2>{_e(platform)}: {len(ordered)} model(s), bundle {_e(_mb(total))} ({total:,} B){stale}</h2>",
        ]
        if platform in orphaned:
            body.append(
                f'<p class="stale">The project has no platform file {_e(platform)}.yaml any more: no cook '
                "updates this bundle, yet a packaging step that ships every bundle folder still ships it. "
                "Delete its folder, or restore the platform file.</p>"
            )
        elif failed:
            body.append(
                f'<p class="stale">The last cook failed here ({_e(", ".join(failed))}): this is the '
                "bundle of an earlier cook, which a game still gets; its sizes are not this run's.</p>"
            )
        body += [
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


def failed_tasks(platform: str, failures: Sequence[Mapping[str, str]]) -> list[str]:
    """The tasks of ``platform`` that failed in the last run (its cooks, manifest and runtime check)."""
    return sorted(
        f["task"]
        for f in failures
        if f["task"].split(":")[1:2] == [platform] and f["task"].split(":")[0] in ("cook", "runtime_check")
    )


def write_plan_failure(build: Path, problem: str) -> Path:
    """``build/report.html`` for a cook that could not be planned (a bad platform file...): the
    problem, and the bundles of the earlier cook marked as such. The previous run's page was left
    as it was: a CI artifact showed a green report for a red build."""
    page = render(
        read_build(build),
        (),
        False,
        [{"task": "cannot plan the cook", "message": problem}],
        banner="Nothing was cooked: the cook could not be planned (below). The bundles on this page are "
        "those of an earlier cook, which a game still gets.",
    )
    target = build / REPORT_NAME
    atomic_write(target, page.encode())
    return target


def write_report(build: Path, orphaned: Collection[str] = (), *, after_cook: bool = False) -> Path:
    """``build/report.html`` from the build's manifests, step times, failures and the bundles before
    the last cook that changed them; ``orphaned``: the bundles of platforms the project no longer has.

    Its changes are those of the last cook that changed a bundle: a cook that changes nothing (a
    CI retry, a no-op run) and a report written again (``after_cook`` False: ``onnx-cooker report``,
    also during a cook) keep showing them, instead of "nothing changed". Only the end of a cook
    (``after_cook``) moves the baseline, and only when the bundles differ from what its last
    report saw."""
    platforms = read_build(build)
    current = summary(platforms)
    baseline, last_seen = _read_json(build / SNAPSHOT_PATH), _read_json(build / LAST_SEEN_PATH)
    if last_seen is None:  # a build folder from before last.json: the previous report's bundles
        last_seen = baseline
    first = last_seen is None
    if not first and current != last_seen:
        baseline = last_seen  # changed since the last cook's report: compare with what it saw
    page = render(platforms, changes(baseline or {}, current), first, read_failures(build), orphaned=orphaned)
    target = build / REPORT_NAME
    atomic_write(target, page.encode())
    if after_cook:
        write_json(build / SNAPSHOT_PATH, baseline if baseline is not None else current)
        write_json(build / LAST_SEEN_PATH, current)
    return target


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --- diff between two builds --------------------------------------------------------------------------
