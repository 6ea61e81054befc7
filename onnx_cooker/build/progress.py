"""doit's reporter for `doit cook`: a live progress line on a terminal, the cook report at the end.

On a terminal, one line at the bottom says how many cook tasks are done of how many, which models
are cooking, the time since the start and an estimate of what is left; it is redrawn as tasks start
and end, and cleared before doit's own summary. Off a terminal (CI logs, pipes) the output is doit's
plain lines, unchanged. Either way, the end of a run writes ``<build>/report.html`` (report/html.py),
with the failures of that run. Loaded by dodo.py: standard library and doit only.

A failure is read once: a model that fails on several platforms prints its paragraph the first time
(again only where it fails differently), the tasks held back by a failure (doit's UnmetDependency:
a manifest, a runtime check) print nothing, and the end of the run lists the failed models with
their platforms and the platforms that kept their previous bundle (``Failures``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from doit.exceptions import UnmetDependency
from doit.reporter import ConsoleReporter

CLEAR = "\r\x1b[K"


def is_cook_task(name: str) -> bool:
    """``cook:<platform>:<model>``: one (platform, model) cook, the unit the line counts."""
    return name.startswith("cook:") and name.count(":") >= 2


class CookReporter(ConsoleReporter):
    """ConsoleReporter, plus the live line (terminals only) and the report at the end of a run."""

    build: Path = Path("build")  # set by reporter_for

    def __init__(self, outstream: TextIO, options: dict[str, Any]) -> None:
        super().__init__(outstream, options)
        self.live = bool(getattr(outstream, "isatty", lambda: False)())
        self.total = 0
        self.done = 0  # cook tasks finished: cooked, failed, or found up to date
        self.uptodate = 0
        self.running: dict[str, float] = {}
        self.cook_seconds: list[float] = []
        self.started = time.monotonic()
        self.ran_any = False  # a run that executed or skipped a task (not `doit clean`)
        self.cache = CacheTally()
        self.failed = Failures()

    # --- doit's reporter interface -------------------------------------------------------------------

    def initialize(self, tasks: Any, selected_tasks: Any) -> None:
        super().initialize(tasks, selected_tasks)
        selected = set(selected_tasks or ()) or {"cook"}
        # the cook tasks this run may execute: the selected ones, or those of a selected group
        cooks = [
            name
            for name in tasks
            if is_cook_task(name)
            and (name in selected or any(name.startswith(f"{group}:") for group in selected))
        ]
        self.total = len(cooks)
        from onnx_cooker.report.model import clear_failures

        clear_failures(self.build)  # the report shows the failures of this run
        self.write("".join(format_changes(self.build, {name.split(":")[1] for name in cooks})))

    def execute_task(self, task: Any) -> None:
        self.ran_any = True
        if is_cook_task(task.name):
            self.running[task.name] = time.monotonic()
        if self.live:
            self._draw()
        else:
            super().execute_task(task)

    def add_success(self, task: Any) -> None:
        super().add_success(task)
        self._finished(task)
        if is_cook_task(task.name):
            self.cache.add(self.build, task.name)
        from onnx_cooker.report.model import clear_failure

        clear_failure(self.build, task.name)

    def add_failure(self, task: Any, fail: Any) -> None:
        if self.live:
            self.outstream.write(CLEAR)
        if isinstance(fail, UnmetDependency):  # held back by a failure already shown: not news
            self.failed.held_back(task.name)
            self._finished(task)
            return
        message = fail.get_msg().strip()
        first = self.failed.add(task.name, message)
        if first is None:
            super().add_failure(task, fail)
        else:
            self.write(f"{task.name}: failed as on {first} (above)\n")
        self._finished(task)
        from onnx_cooker.report.model import record_failure

        record_failure(self.build, task.name, message)

    def skip_uptodate(self, task: Any) -> None:
        self.ran_any = True
        if is_cook_task(task.name):
            self.uptodate += 1
        if self.live:
            self._finished(task)
        else:
            super().skip_uptodate(task)
            self._finished(task)

    def complete_run(self) -> None:
        if self.live:
            self.outstream.write(CLEAR)
        super().complete_run()
        stopped = max(self.total - self.done, 0) if self.failed.any else 0
        self.write("".join(f"{line}\n" for line in self.failed.summary(self.build, stopped)))
        if not self.ran_any:
            return
        if self.cache.cooks:
            self.outstream.write(self.cache.summary() + "\n")
        try:
            from onnx_cooker.build.tasks import ORPHANED_BUNDLES
            from onnx_cooker.report.html import write_report

            path = write_report(self.build, orphaned=ORPHANED_BUNDLES, after_cook=True)
            self.outstream.write(f"report: {path}\n")
        except Exception as exc:  # noqa: BLE001  the report never fails a cook
            self.outstream.write(f"warning: cannot write the cook report: {exc}\n")

    # --- the live line -----------------------------------------------------------------------------

    def _finished(self, task: Any) -> None:
        started = self.running.pop(task.name, None)
        if is_cook_task(task.name):
            self.done += 1
            if started is not None:
                self.cook_seconds.append(time.monotonic() - started)
        if self.live:
            self._draw()

    def _draw(self) -> None:
        elapsed = time.monotonic() - self.started
        names = ", ".join(name.split(":", 1)[1] for name in list(self.running)[:3])
        more = f" +{len(self.running) - 3}" if len(self.running) > 3 else ""
        line = f"[{self.done}/{self.total}: {self.done - self.uptodate} cooked, {self.uptodate} up to date] "
        line += f"{names}{more} | {_clock(elapsed)} elapsed{self._left()}"
        width = _width()
        self.outstream.write(CLEAR + line[: width - 1] + "\r")
        self.outstream.flush()

    def _left(self) -> str:
        """``, about M:SS left``: the tasks still to check that will cook, as the share of those
        checked so far that cooked (an incremental cook finds most up to date), at the average pace
        of the cooks so far, as many at a time as now run; empty before a cook has finished."""
        if not self.cook_seconds or self.total <= self.done:
            return ""
        pace = sum(self.cook_seconds) / len(self.cook_seconds)
        share = (self.done - self.uptodate) / self.done
        seconds = pace * (self.total - self.done) * share / max(len(self.running), 1)
        return f", about {_clock(seconds)} left"


class Failures:
    """The failures of one run, so that each is read once: a cook failure is new unless the same
    model failed the same way on another platform; UnmetDependency only holds a task back."""

    def __init__(self) -> None:
        self.models: dict[str, list[str]] = {}  # model -> the platforms its cook failed for
        self.shown: dict[tuple[str, str], str] = {}  # (model, problem) -> the platform it was shown for
        self.others: list[str] = []  # other tasks that failed (a manifest, a runtime check)
        self.held: list[str] = []  # platforms whose manifest was held back: the bundle is unchanged

    @property
    def any(self) -> bool:
        return bool(self.models or self.others or self.held)

    def add(self, task_name: str, message: str) -> str | None:
        """A failed task: None when its failure is news (shown in full), else the platform for
        which the same model's same problem was already shown."""
        if not is_cook_task(task_name):
            self.others.append(task_name)
            return None
        _, platform, model = task_name.split(":", 2)
        self.models.setdefault(model, []).append(platform)
        problem = message.replace(f", platform {platform!r})", ")")  # where, less the platform
        if (model, problem) in self.shown:
            return self.shown[(model, problem)]
        self.shown[(model, problem)] = platform
        return None

    def held_back(self, task_name: str) -> None:
        if task_name.startswith("cook:") and task_name.count(":") == 1:  # a platform's manifest
            self.held.append(task_name.split(":", 1)[1])

    def summary(self, build: Path, not_run: int) -> list[str]:
        """The end of a failed run: the failed models and platforms, and what became of the bundles."""
        if not self.any:
            return []
        lines = ["#" * 40]
        if self.models:
            lines.append(f"failed: {len(self.models)} model(s), for these platforms (each paragraph above):")
            lines += [
                f"  {model}: {', '.join(sorted(platforms))}"
                for model, platforms in sorted(self.models.items())
            ]
        if self.others:
            lines.append(f"failed: {', '.join(self.others)}")
        from onnx_cooker.runtime.constants import MANIFEST_NAME

        kept = [platform for platform in sorted(self.held) if (build / platform / MANIFEST_NAME).is_file()]
        new = [platform for platform in sorted(self.held) if platform not in kept]
        if kept:
            lines.append(f"kept their previous bundle (manifest not rewritten): {', '.join(kept)}")
        if new:
            lines.append(f"no bundle written (none cooked before): {', '.join(new)}")
        if not_run:
            lines.append(
                f"stopped at the first failure (--no-continue): {not_run} cook task(s) did not run; "
                "without --no-continue every model that can be cooked is cooked"
            )
        return lines


class CacheTally:
    """What the cook cache did for the cook tasks this run executed, from each one's record
    (``onnx_cooker.layout.cache_record_path``, written by the task in its worker process)."""

    RESULTS = ("hit", "miss", "refused", "unusable")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.RESULTS, 0)
        self.bytes_in = self.bytes_up = 0
        self.saved_s = 0.0

    @property
    def cooks(self) -> int:
        return sum(self.counts.values())

    def add(self, build: Path, task_name: str) -> None:
        from onnx_cooker.layout import cache_record_path

        _, platform, model = task_name.split(":", 2)
        try:
            record = json.loads(cache_record_path(build / platform, model).read_text(encoding="utf-8"))
            result = record["result"]
            self.counts[result] += 1
            self.bytes_in += int(record["bytes_in"])
            self.bytes_up += int(record["bytes_up"])
            self.saved_s += float(record["saved_s"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # no cache for this cook (no record), or a record from another cooker version

    def summary(self) -> str:
        """One line: ``cook cache: 60 hits, 4 misses; 1.63 GB in, 0.21 GB up; about 1:35 of cooking
        saved``."""
        words = {
            "hit": ("hit", "hits"),
            "miss": ("miss", "misses"),
            "refused": ("refused (cooked again)",) * 2,
        }
        words["unusable"] = ("cooked without it (unusable)", "cooked without it (unusable)")
        parts = [
            f"{count} {words[result][count != 1]}"
            for result, count in self.counts.items()
            if count or result in ("hit", "miss")
        ]
        from onnx_cooker.farm.admin import human_size  # standard library only, as this module

        moved = f"{human_size(self.bytes_in)} in, {human_size(self.bytes_up)} up"
        return f"cook cache: {', '.join(parts)}; {moved}; about {_clock(self.saved_s)} of cooking saved"


def format_changes(build: Path, platforms: set[str]) -> list[str]:
    """A line for each platform whose bundle an onnx-cooker of another bundle format wrote: every
    model of it cooks again (its cook keys hold the format), and doit would not say why."""
    from onnx_cooker.cook.key import BUNDLE_FORMAT

    lines = []
    for platform in sorted(platforms):
        try:
            manifest = json.loads((build / platform / "manifest.json").read_text(encoding="utf-8"))
            written = manifest["bundle_format"]
        except (OSError, ValueError, TypeError, KeyError):
            continue  # none yet, or not one to compare: the cook says what is wrong with it
        if isinstance(written, str) and written != BUNDLE_FORMAT:
            lines.append(
                f"{platform}: its bundle was cooked by another onnx-cooker (bundle format {written}; this "
                f"one writes {BUNDLE_FORMAT}): every model of it cooks again, once (docs/bundle-format.md, "
                '"Upgrading onnx-cooker")\n'
            )
    return lines


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def _width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


def reporter_for(build: Path) -> type[CookReporter]:
    """The reporter class doit instantiates (DOIT_CONFIG['reporter']), bound to this build folder."""
    return type("CookReporter", (CookReporter,), {"build": build})
