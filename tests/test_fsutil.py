"""Atomic writes: permissions, failure clean-up, and scraps of killed writers."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from onnx_cooker.fsutil import STALE_TEMP_SECONDS, atomic_write, remove_stale_temps


def test_written_file_gets_umask_permissions_not_private_ones(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a" / "blob.zst", b"data")
    finally:
        os.umask(old)
    path = tmp_path / "a" / "blob.zst"
    assert path.read_bytes() == b"data"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "blob.zst"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):  # fails after the temp file exists, as a full disk would
        atomic_write(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert list(tmp_path.glob(".*.tmp")) == []


def test_stale_temps_of_killed_writers_are_removed_live_ones_kept(tmp_path: Path) -> None:
    stale = tmp_path / ".blob.zst.abc123.tmp"
    live = tmp_path / ".blob.zst.def456.tmp"
    other = tmp_path / ".other.zst.abc123.tmp"
    for path in (stale, live, other):
        path.write_bytes(b"partial")
    old = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    nested = tmp_path / "vision" / ".detector.ort.zst.abc123.tmp"
    nested.parent.mkdir()
    nested.write_bytes(b"partial")
    os.utime(nested, (old, old))
    remove_stale_temps(tmp_path)
    assert not stale.exists() and not other.exists() and not nested.exists()
    assert live.exists()


def test_scratch_folders_of_killed_cooks_are_removed(tmp_path: Path) -> None:
    old_scratch, live_scratch = tmp_path / ".optimize-abc", tmp_path / ".worker-def"
    for folder in (old_scratch, live_scratch):
        folder.mkdir()
        (folder / "model.ort").write_bytes(b"partial")
    old = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(old_scratch, (old, old))
    remove_stale_temps(tmp_path)
    assert not old_scratch.exists() and live_scratch.exists()
