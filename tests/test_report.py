"""The cook report (build/report.html) in a real browser, release-to-release diffs, and the live
progress line of `doit cook` under a pseudo-terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from tests.models import mlp_model
from tests.test_reliability import TRACEBACK, doit, env, small_project

pytestmark = pytest.mark.slow  # real doit runs and a browser
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The README shows the example assets' report: `UPDATE_REPORT_SCREENSHOT=1 pytest tests/test_report.py`
# refreshes it; otherwise the screenshot goes to a temporary folder.
DOCS_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "report.png"
# As the machine's own notes advise for a closed network: no background connections at start.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def cooked_examples(tmp_path_factory: pytest.TempPathFactory, project_copier: Callable[[Path], Path]) -> Path:
    """The example assets cooked for every platform by `doit -n 2 cook`: the report it leaves."""
    project = project_copier(tmp_path_factory.mktemp("report") / "project")
    run = doit(project, "-n", "2", "cook")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "report: " in run.stdout
    return project


def manifests(build: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in build.glob("*/manifest.json")}


def test_every_cook_writes_a_self_contained_report(cooked_examples: Path) -> None:
    page = (cooked_examples / "build" / "report.html").read_text()
    assert "First report of this build folder" in page
    for reference in ("http://", "https://", "src=", "<link"):
        assert reference not in page, f"the report refers to something outside itself: {reference}"


def test_the_report_in_headless_chromium(cooked_examples: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    screenshot = (
        DOCS_SCREENSHOT if os.environ.get("UPDATE_REPORT_SCREENSHOT") == "1" else tmp_path / "report.png"
    )

    build = cooked_examples / "build"
    expected = {platform: sorted(m["models"]) for platform, m in manifests(build).items()}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto((build / "report.html").as_uri())
        page.wait_for_load_state("load")
        page.screenshot(path=str(screenshot), full_page=True)

        sections = page.eval_on_selector_all("section.platform", "els => els.map(e => e.dataset.platform)")
        assert sorted(sections) == sorted(expected)
        for platform, names in expected.items():
            section = f'section.platform[data-platform="{platform}"]'
            bars = page.eval_on_selector_all(
                f"{section} svg.chart rect.bar", "els => els.map(e => e.dataset.model)"
            )
            assert sorted(bars) == names  # one bar per model
            rows = page.eval_on_selector_all(
                f"{section} table.models tbody tr", "els => els.map(e => e.dataset.model)"
            )
            assert sorted(rows) == names
        # Sorting: a click on "model" sorts by name, a second click reverses.
        first = f'section.platform[data-platform="{sections[0]}"]'
        page.click(f"{first} table.models th >> text=model")
        ascending = page.eval_on_selector_all(
            f"{first} table.models tbody tr", "els => els.map(e => e.dataset.model)"
        )
        assert ascending == sorted(ascending)
        page.click(f"{first} table.models th >> text=model")
        descending = page.eval_on_selector_all(
            f"{first} table.models tbody tr", "els => els.map(e => e.dataset.model)"
        )
        assert descending == sorted(ascending, reverse=True)
        # Sorting by blob bytes is numeric, not by text.
        page.click(f"{first} table.models th >> text=blob bytes")
        sizes = page.eval_on_selector_all(
            f"{first} table.models tbody tr td:nth-child(5)", "els => els.map(e => Number(e.dataset.v))"
        )
        assert sizes == sorted(sizes)
        browser.close()
    assert requested == [(build / "report.html").as_uri()], requested  # no network, nothing else loaded
    assert screenshot.stat().st_size > 10_000


def test_a_failure_and_the_changes_since_the_last_cook_are_reported(tmp_path: Path) -> None:
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    (project / "assets" / "mlp.onnx").unlink()  # removed
    onnx.save(mlp_model(), project / "assets" / "added.onnx")  # added
    (project / "assets" / "broken.onnx").write_bytes(b"not a model")
    run = doit(project, "--continue", "cook")
    assert run.returncode != 0 and TRACEBACK not in run.stdout + run.stderr
    page = (project / "build" / "report.html").read_text()
    assert "Failures (1)" in page and "cook:android:broken" in page and "not a readable ONNX model" in page
    # The bundle shown is the previous cook's (no manifest was written): the report says so.
    assert (
        "B) (stale)</h2>" in page
        and '<p class="stale">The last cook failed here (cook:android:broken)' in page
    )
    (project / "assets" / "broken.onnx").unlink()
    again = doit(project, "cook")
    assert again.returncode == 0, again.stdout + again.stderr
    page = (project / "build" / "report.html").read_text()
    assert "Failures" not in page and "(stale)" not in page  # fixed: gone from the report
    assert "<td>added</td><td>added</td>" in page and "<td>mlp</td><td>removed</td>" in page


def test_the_changes_stay_those_of_the_last_cook_that_changed_a_bundle(tmp_path: Path) -> None:
    """The report's changes were those since the previous page write: `onnx-cooker report`, a report
    during a cook, or a cook that changed nothing (a CI retry) showed 'nothing changed'. They are now
    the changes of the last cook that changed a bundle, until another cook changes one."""
    from onnx_cooker.report.html import write_report

    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    onnx.save(mlp_model(), project / "assets" / "added.onnx")
    assert doit(project, "cook").returncode == 0
    report = project / "build" / "report.html"
    added = "<td>android</td><td>added</td><td>added</td>"
    assert added in report.read_text()
    write_report(project / "build")  # onnx-cooker report: the page again, the same changes
    assert added in report.read_text()
    noop = doit(project, "cook")  # nothing to cook: the changes stay those of the cook before
    assert noop.returncode == 0 and ".  cook:android:" not in noop.stdout, noop.stdout
    assert added in report.read_text()
    (project / "assets" / "added.onnx").unlink()
    assert doit(project, "cook").returncode == 0  # a cook that changes a bundle moves the baseline
    page = report.read_text()
    assert added not in page and "<td>added</td><td>removed</td>" in page


def test_a_cook_says_once_why_a_bundle_another_onnx_cooker_wrote_cooks_again(tmp_path: Path) -> None:
    """After an upgrade every model cooks again (the cook keys hold the bundle format) and doit says
    nothing of why; the cook now names the platform and both formats, until the bundle is rewritten."""
    from onnx_cooker.cook.key import BUNDLE_FORMAT

    project = small_project(tmp_path / "p")
    first = doit(project, "cook")
    assert first.returncode == 0 and "another onnx-cooker" not in first.stdout, first.stdout
    manifest = project / "build" / "android" / "manifest.json"
    older = {**json.loads(manifest.read_text()), "bundle_format": "blob3-manifest1-recipe11"}
    manifest.write_text(json.dumps(older))  # as an older onnx-cooker left it
    onnx.save(mlp_model(), project / "assets" / "added.onnx")
    upgrade = doit(project, "cook")
    line = (
        "android: its bundle was cooked by another onnx-cooker (bundle format blob3-manifest1-recipe11; "
        f"this one writes {BUNDLE_FORMAT}): every model of it cooks again, once"
    )
    assert upgrade.returncode == 0 and line in upgrade.stdout, upgrade.stdout
    assert json.loads(manifest.read_text())["bundle_format"] == BUNDLE_FORMAT
    again = doit(project, "cook")
    assert again.returncode == 0 and "another onnx-cooker" not in again.stdout, again.stdout


def test_a_cook_that_cannot_be_planned_still_ends_with_a_report_saying_so(tmp_path: Path) -> None:
    """A bad platform file fails the cook before anything runs (exit 3): the previous run's green
    report stayed, and a CI artifact showed a green report for a red build."""
    project = small_project(tmp_path / "p")
    assert doit(project, "cook").returncode == 0
    report = project / "build" / "report.html"
    green = report.read_text()
    android = project / "platforms" / "android.yaml"
    android.write_text(android.read_text() + "fromat: ort\n")
    run = doit(project, "cook")
    assert run.returncode == 3 and TRACEBACK not in run.stdout + run.stderr
    assert f"report: {report}" in run.stderr
    page = report.read_text()
    assert page != green and "Nothing was cooked: the cook could not be planned" in page
    assert "cannot plan the cook" in page and "&#x27;fromat&#x27; is not a known setting" in page
    assert "android: 2 model(s)" in page  # the earlier cook's bundle, which a game still gets
    listed = report.stat().st_mtime_ns
    assert doit(project, "list").returncode != 0  # `list` plans too, and writes no report
    assert report.stat().st_mtime_ns == listed


def test_a_bundle_whose_platform_file_is_gone_is_named_in_the_cook_and_the_report(tmp_path: Path) -> None:
    """A platform file removed: its bundle folder stays (the cook deletes no folder it does not
    plan), but every cook says so with the fix and the report marks it, since a packaging step that
    ships build/*/ would still ship it."""
    project = small_project(tmp_path / "p")
    shutil.copy2(project / "platforms" / "android.yaml", project / "platforms" / "handheld.yaml")
    assert doit(project, "cook").returncode == 0
    (project / "platforms" / "handheld.yaml").unlink()
    run = doit(project, "cook")
    assert run.returncode == 0 and TRACEBACK not in run.stdout + run.stderr
    said = (
        f"warning: {project / 'build' / 'handheld'} holds the bundle of platform 'handheld', which "
        f"{project / 'platforms'} no longer has (handheld.yaml): no cook updates it; delete that folder"
    )
    assert said in run.stderr, run.stderr
    page = (project / "build" / "report.html").read_text()
    assert "B) (no platform file)</h2>" in page and "no platform file handheld.yaml any more" in page
    assert page.count("(no platform file)") == 1  # android's bundle is this cook's
    shutil.rmtree(project / "build" / "handheld")
    quiet = doit(project, "cook")
    assert "holds the bundle of platform" not in quiet.stderr
    assert "no platform file" not in (project / "build" / "report.html").read_text()


def test_diff_names_added_removed_and_changed_models_and_gates_growth(tmp_path: Path) -> None:
    old = small_project(tmp_path / "old")
    assert doit(old, "cook").returncode == 0
    new = tmp_path / "new"
    shutil.copytree(old, new, ignore=shutil.ignore_patterns("build"))
    (new / "assets" / "mlp.onnx").unlink()
    onnx.save(mlp_model(), new / "assets" / "other.onnx")
    (new / "assets" / "net.cook.yaml").write_text("compression_level: 1\n")  # a changed setting
    assert doit(new, "cook").returncode == 0

    command = [sys.executable, "-m", "onnx_cooker.report", "diff", str(old / "build"), str(new / "build")]
    shown = subprocess.run([*command, "--html", str(tmp_path / "diff.html")], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    lines = {tuple(line.split()[:3]) for line in shown.stdout.splitlines()}
    assert {
        ("android", "other", "added"),
        ("android", "mlp", "removed"),
        ("android", "net", "re-cooked"),
    } <= lines
    assert "settings" in next(line for line in shown.stdout.splitlines() if " net " in line)
    assert "android: download " in shown.stdout
    assert (tmp_path / "diff.html").read_text().count('class="bar"') == 2
    gated = subprocess.run([*command, "--fail-if-grows", "0%"], capture_output=True, text=True)
    grows = json.loads((new / "build" / "android" / "manifest.json").read_text())
    total_new = sum(m["blob_size"] for m in grows["models"].values())
    total_old = sum(
        m["blob_size"]
        for m in json.loads((old / "build" / "android" / "manifest.json").read_text())["models"].values()
    )
    assert gated.returncode == (1 if total_new > total_old else 0)
    assert subprocess.run([*command, "--fail-if-grows", "1000%"], capture_output=True).returncode == 0
    bad = subprocess.run([*command[:-1], str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "holds no <platform>/manifest.json" in bad.stderr


def _run_in_pty(project: Path) -> str:
    """`doit cook` with its output on a pseudo-terminal (as in an interactive shell); all it wrote."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "doit", "cook"],
        cwd=project,
        env={**env(), "COLUMNS": "120"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    chunks, deadline = [], time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    process.wait(timeout=60)
    os.close(leader)
    assert process.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_a_live_progress_line_on_a_terminal_and_plain_lines_elsewhere(tmp_path: Path) -> None:
    project = small_project(tmp_path / "tty")
    live = _run_in_pty(project)
    assert "[0/2: 0 cooked, 0 up to date]" in live and "[2/2: 2 cooked, 0 up to date]" in live
    assert "elapsed" in live
    # The line is cleared before doit's summary: the output ends on plain text, not on the line.
    after_last_clear = live.rsplit("\x1b[K", 1)[-1]
    assert "up to date]" not in after_last_clear and after_last_clear.strip().startswith("report: ")
    again = _run_in_pty(project)  # nothing changed: nothing is called cooked
    assert "[2/2: 0 cooked, 2 up to date]" in again and " 1 cooked" not in again, again
    plain = doit(small_project(tmp_path / "pipe"), "cook")
    assert "up to date]" not in plain.stdout and "\x1b[" not in plain.stdout
    assert ".  cook:android:net" in plain.stdout  # doit's own lines, as before


def test_the_estimate_of_an_incremental_cook_counts_only_the_tasks_that_cook(tmp_path: Path) -> None:
    """One changed model among 149 up to date: the estimate multiplied the pace of real cooks by every
    task left to check (about 38 minutes left of an 8 s cook); the share found up to date so far is
    taken as the share of what is left."""
    from onnx_cooker.build.progress import CookReporter

    reporter = CookReporter(io.StringIO(), {})
    reporter.total, reporter.done, reporter.uptodate = 745, 176, 174
    reporter.cook_seconds = [4.0, 4.0]  # the two that cooked, 4 s each
    reporter.running = {"cook:ios:head_059": time.monotonic()}
    left = reporter._left()
    minutes, seconds = (int(part) for part in left.removeprefix(", about ").removesuffix(" left").split(":"))
    assert 10 <= minutes * 60 + seconds <= 60, left  # 569 to check, 2 in 176 cooked: about 26 s
    reporter.done = reporter.uptodate = 0  # nothing finished: no estimate yet
    reporter.cook_seconds = []
    assert reporter._left() == ""
