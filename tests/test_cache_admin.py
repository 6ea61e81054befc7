"""Housekeeping for folder cook caches (``python -m onnx_cooker.farm stats|prune``): real files in a
temporary folder, laid out with ``onnx_cooker.farm.cache``'s own names, their last uses set with
``os.utime``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from onnx_cooker.farm.admin import human_size, main, parse_duration, parse_size
from onnx_cooker.farm.cache import _check_name, _index_name, _object_name, entry_digest
from onnx_cooker.farm.housekeeping import plan_prune, prune, scan

REPO = Path(__file__).resolve().parent.parent
DAY = 86400.0
HOUR = 3600.0


def age(path: Path, seconds: float) -> float:
    """Set ``path``'s atime and mtime to ``seconds`` ago; the timestamp."""
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))
    return stamp


ZERO = "0" * 64  # the sha256 put_entry's indexes list, and its objects are named by


def put_entry(root: Path, key: str, sizes: dict[str, int], days: float) -> str:
    """An entry as ``CookCache.upload`` leaves it: objects, then its index, last used ``days`` ago."""
    digest = entry_digest(key)
    for role, size in sizes.items():
        path = root / _object_name(digest, role, ZERO)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
    files = {role: {"size": size, "sha256": ZERO} for role, size in sizes.items()}
    index = root / _index_name(digest)
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(json.dumps({"version": 1, "cook_key": key, "files": files}))
    age(index, days * DAY)
    return digest


def put_check(root: Path, key: str, size: int, days: float) -> Path:
    path = root / _check_name(entry_digest(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"{" + b" " * (size - 2) + b"}")
    age(path, days * DAY)
    return path


def put_orphan(root: Path, key: str, size: int, seconds: float) -> Path:
    """Objects without an index (an upload in progress or killed), last changed ``seconds`` ago."""
    folder = (root / _object_name(entry_digest(key), "blob", ZERO)).parent
    folder.mkdir(parents=True)
    (folder / "blob").write_bytes(b"o" * size)
    age(folder / "blob", seconds)
    age(folder, seconds)
    return folder


def put_temp(folder: Path, name: str, size: int, seconds: float) -> Path:
    """A writer's temp file (``onnx_cooker.fsutil.temp_beside``'s pattern), last written ``seconds`` ago."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".{name}.4242.0123456789ab.tmp"
    path.write_bytes(b"t" * size)
    age(path, seconds)
    age(folder, seconds)  # creating the temp changed the folder too
    return path


def present(root: Path, digest: str) -> bool:
    """The entry is whole: its index and its objects folder."""
    index, objects = root / _index_name(digest), (root / _object_name(digest, "blob", ZERO)).parent
    assert index.exists() == objects.exists(), "an entry is removed whole"
    return index.exists()


def snapshot(root: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime) for p in sorted(root.rglob("*"))}


def run(capsys: pytest.CaptureFixture[str], *argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    code = main(list(argv), env={} if env is None else env)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    root = tmp_path / "cook-cache"
    root.mkdir()
    return root


def test_stats_counts_entries_bytes_by_role_last_uses_reports_and_leftovers(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put_entry(cache, "old", {"blob": 1000, "entry": 200, "verify": 300}, days=40)
    put_entry(cache, "big", {"blob": 2_000_000, "entry": 100}, days=5)
    newest = put_entry(cache, "new", {"blob": 500}, days=5.5 / 24)
    put_check(cache, "report-1", 100, days=3)
    put_check(cache, "report-2", 50, days=50)
    put_orphan(cache, "uploading", 700, seconds=HOUR / 2)
    put_orphan(cache, "killed", 300, seconds=2 * HOUR)
    put_temp(cache / "index" / newest[:2], "index", 40, seconds=2 * HOUR)

    code, out = run(capsys, "stats", "--cache", str(cache))

    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"cook cache: {cache}"
    assert lines[1] == "entries: 3, objects 2.00 MB (2002100 bytes)"
    assert lines[2:5] == ["  blob:   2.00 MB (2001500 bytes)", "  entry:  300 bytes", "  verify: 300 bytes"]
    oldest = datetime.fromtimestamp((cache / _index_name(entry_digest("old"))).stat().st_mtime, timezone.utc)
    assert f"oldest last use: {oldest:%Y-%m-%d %H:%M} UTC (40 days ago)" in lines
    assert any(line.startswith("newest last use: ") and line.endswith("(5 h ago)") for line in lines)
    assert "check reports: 2, 150 bytes" in lines
    assert "orphan object folders: 2, 1.00 kB (1000 bytes) (1 older than 1 h, which prune removes)" in lines
    assert "temp files: 1, 40 bytes (1 older than 1 h, which prune removes)" in lines


def test_stats_of_an_empty_cache_and_from_cook_cache_file_url(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, "stats", env={"COOK_CACHE": cache.as_uri()})
    assert code == 0
    assert "entries: 0, objects 0 bytes" in out
    assert "last use: - (no entries)" in out


def test_older_than_removes_exactly_the_entries_and_reports_not_used_since(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = [put_entry(cache, f"old-{days}", {"blob": 1000, "entry": 10}, days) for days in (40, 31)]
    fresh = [put_entry(cache, f"fresh-{days}", {"blob": 1000, "entry": 10}, days) for days in (29, 1)]
    old_report, fresh_report = put_check(cache, "r-old", 64, days=31), put_check(cache, "r-new", 64, days=2)
    # a note of the tool versions a cook was made with (cache.py, "recipes"): pruned like a report
    note = put_check(cache, "n-old", 64, days=31)
    old_note = cache / "recipes" / note.relative_to(cache / "checks")
    old_note.parent.mkdir(parents=True)
    note.rename(old_note)

    code, out = run(capsys, "prune", "--older-than", "30d", "--cache", str(cache))

    assert code == 0
    assert [present(cache, digest) for digest in old + fresh] == [False, False, True, True]
    assert not old_report.exists() and fresh_report.exists() and not old_note.exists()
    assert all((cache / _object_name(d, "blob", ZERO)).stat().st_size == 1000 for d in fresh)
    assert out.splitlines() == [
        "prune: removed 2 entries, 2 check reports, 0 orphan folders, 0 temp files; "
        "freed 2.15 kB (2148 bytes); left 2 entries, 2.02 kB (2020 bytes)"
    ]


def test_max_size_removes_the_least_recently_used_until_under_the_size(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    by_age = {days: put_entry(cache, f"e{days}", {"blob": 1000}, days) for days in (5, 1, 3, 2, 4)}
    report = put_check(cache, "report", 64, days=100)  # --max-size counts entries only

    code, out = run(capsys, "prune", "--max-size", "2.5K", "--cache", str(cache))

    assert code == 0
    assert {days for days, digest in by_age.items() if present(cache, digest)} == {1, 2}
    assert report.exists()
    assert "removed 3 entries" in out and "left 2 entries, 2.00 kB (2000 bytes)" in out


def test_older_than_and_max_size_together(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    by_age = {days: put_entry(cache, f"e{days}", {"blob": 1000}, days) for days in (1, 2, 3, 10, 20)}

    code, _ = run(capsys, "prune", "--older-than", "1w", "--max-size", "1000B", "--cache", str(cache))

    assert code == 0
    assert {days for days, digest in by_age.items() if present(cache, digest)} == {1}


def test_orphans_and_temp_files_are_removed_only_after_an_hour(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live = put_entry(cache, "live", {"blob": 100}, days=0)
    uploading = put_orphan(cache, "uploading", 500, seconds=50 * 60)
    killed = put_orphan(cache, "killed", 700, seconds=61 * 60)
    objects = (cache / _object_name(live, "blob", ZERO)).parent
    young_temp = put_temp(objects, "blob", 30, seconds=10 * 60)
    old_temps = [
        put_temp(objects, "verify", 20, seconds=3 * HOUR),
        put_temp(cache / "index" / live[:2], f"{live}.json", 10, seconds=2 * HOUR),
        put_temp(cache / "checks" / "ab", "ab00.json", 5, seconds=DAY),
    ]

    code, out = run(capsys, "prune", "--max-size", "1TB", "--cache", str(cache))

    assert code == 0
    assert present(cache, live) and (cache / _object_name(live, "blob", ZERO)).exists()
    assert (uploading / "blob").exists() and not killed.exists()
    assert young_temp.exists() and not any(temp.exists() for temp in old_temps)
    assert "removed 0 entries, 0 check reports, 1 orphan folder, 3 temp files; freed 735 bytes;" in out


def test_dry_run_lists_and_removes_nothing(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = put_entry(cache, "old", {"blob": 1000}, days=60)
    put_entry(cache, "new", {"blob": 1000}, days=0)
    put_check(cache, "report", 64, days=60)
    put_orphan(cache, "killed", 700, seconds=2 * HOUR)
    put_temp(cache / "index" / "ab", "x.json", 9, seconds=2 * HOUR)
    before = snapshot(cache)

    code, out = run(
        capsys, "prune", "--older-than", "30d", "--max-size", "0", "--dry-run", "--cache", str(cache)
    )

    assert code == 0
    assert snapshot(cache) == before
    assert f"would remove entry {old[:16]}: 1.00 kB (1000 bytes), last used " in out
    assert any(
        line.startswith("would remove orphan objects/") and line.endswith("(2 h ago)")
        for line in out.splitlines()
    )
    assert "would remove temp file index/ab/.x.json." in out
    assert out.splitlines()[-1] == (
        "prune: would remove 2 entries, 1 check report, 1 orphan folder, 1 temp file; "
        "would free 2.77 kB (2773 bytes); would leave 0 entries, 0 bytes"
    )


def test_an_entry_used_while_pruning_is_kept(cache: Path) -> None:
    digest = put_entry(cache, "hit", {"blob": 100}, days=90)
    found = scan(cache)
    now = time.time()
    plan = plan_prune(found, now, older_than=30 * DAY, max_size=None)
    assert [entry.digest for entry in plan.entries] == [digest]
    os.utime(cache / _index_name(digest))  # a cache hit, between the scan and the removal

    tally = prune(found, plan, now)

    assert present(cache, digest)
    assert tally.entries == 0 and [entry.digest for entry in tally.in_use] == [digest]


def test_hard_linked_objects_are_unlinked_never_changed(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    digest = put_entry(cache, "linked", {"entry": 10}, days=60)
    build_blob = tmp_path / "build" / "net.blob"
    build_blob.parent.mkdir()
    build_blob.write_bytes(b"b" * 5000)
    os.link(build_blob, cache / _object_name(digest, "blob", ZERO))
    half = put_entry(cache, "index-only", {}, days=60)  # objects gone: an entry of 0 bytes

    assert (
        "hard-linked from build folders too: 5.00 kB (5000 bytes)"
        in run(capsys, "stats", "--cache", str(cache))[1]
    )
    code, out = run(capsys, "prune", "--older-than", "30d", "--cache", str(cache))

    assert code == 0
    assert not present(cache, digest) and not (cache / _index_name(half)).exists()
    assert build_blob.read_bytes() == b"b" * 5000
    assert "removed 2 entries" in out and "(of which 5.00 kB (5000 bytes) stay on disk" in out


@pytest.mark.parametrize(
    "argv", [["stats", "--cache", "s3://cook-cache/main"], ["prune", "--older-than", "30d"]]
)
def test_an_s3_cache_is_refused_with_the_lifecycle_advice(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, *argv, env={"COOK_CACHE": "s3://cook-cache/main"})
    assert code == 2
    assert "S3 cache" in out and "lifecycle rule" in out and "docs/build-farms.md" in out


def test_a_missing_or_foreign_folder_or_no_cache_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, "stats", "--cache", str(tmp_path / "nowhere"))
    assert code == 2 and "does not exist" in out
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".notes.tmp").write_text("not a cache")
    code, out = run(capsys, "prune", "--older-than", "1s", "--cache", str(tmp_path / "home"))
    assert code == 2 and "is not a cook cache" in out
    assert (tmp_path / "home" / ".notes.tmp").exists()
    code, out = run(capsys, "stats")
    assert code == 2 and "give --cache PATH or set COOK_CACHE" in out


@pytest.mark.parametrize(
    ("option", "value", "names"),
    [
        ("--max-size", "50XB", "2GiB"),
        ("--max-size", "GB", "500MB"),
        ("--max-size", "1.2.3GB", "1.5TB"),
        ("--older-than", "30", "30d"),
        ("--older-than", "3 days", "2w"),
    ],
)
def test_bad_sizes_and_durations_are_usage_errors_naming_the_forms(
    cache: Path, option: str, value: str, names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["prune", option, value, "--cache", str(cache)], env={})
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"{value!r} is not a" in err and names in err


def test_prune_needs_a_limit(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["prune", "--cache", str(cache)], env={})
    assert (
        stopped.value.code == 2
        and "--older-than DURATION, --max-size SIZE or both" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("100", 100),
        ("100B", 100),
        ("500MB", 500_000_000),
        ("50GB", 50_000_000_000),
        ("1.5TB", 1_500_000_000_000),
        ("2GiB", 2 << 30),
        ("4KiB", 4096),
        ("3k", 3000),
        ("1 TiB", 1 << 40),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "seconds"), [("45s", 45), ("90m", 5400), ("12h", 43200), ("30d", 30 * DAY), ("2w", 14 * DAY)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_human_sizes() -> None:
    assert [human_size(n) for n in (0, 999, 1000, 999_999, 1_630_000_000, 2_500_000_000_000)] == [
        "0 B",
        "999 B",
        "1.00 kB",
        "1.00 MB",
        "1.63 GB",
        "2.50 TB",
    ]


def test_python_m_pipeline_farm_stats(cache: Path) -> None:
    """The command as users type it, in a fresh interpreter that imports neither onnx nor numpy."""
    put_entry(cache, "one", {"blob": 1234, "entry": 56}, days=2)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "onnx_cooker.farm", "stats", "--cache", str(cache)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"cook cache: {cache}\nentries: 1, objects 1.29 kB (1290 bytes)\n" in done.stdout
    assert "(2 days ago)" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "onnx_cooker.farm.admin" in imported
    assert not imported & {"onnx", "onnxruntime", "numpy"}
