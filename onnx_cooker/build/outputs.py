"""A cook's outputs: where each file goes, how staged files are put in place, and a cook answered by
the cook cache.

Light on purpose (standard library, plus numpy and zstandard through the blob's layout check): a
cache hit needs neither onnx nor onnxruntime, so a warm agent's doit workers never import them
(onnx_cooker/build/run_job.py imports the cook only on a miss).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from onnx_cooker.build.stamps import hashed_sources, record, recorded_elsewhere, remembered_sources
from onnx_cooker.build.summary import cook_line
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.key import cook_key, recipe_of
from onnx_cooker.farm.cache import Cached, CookCache
from onnx_cooker.fsutil import file_sha256, stage_write
from onnx_cooker.layout import (
    applied_variant_path,
    blob_path,
    cook_stamps_path,
    digest_memo_dir,
    entry_path,
    verify_data_path,
)
from onnx_cooker.runtime.constants import ModelFormat
from onnx_cooker.steptimes import step

Stamps = Mapping[
    str, list[Any]
]  # source path -> [size, mtime_ns, ctime_ns, sha256] (onnx_cooker.build.stamps)


def from_cache(job: CookJob, cache: CookCache) -> tuple[dict[str, Any] | None, str | None, Stamps | None]:
    """The entry of a cache hit, put in place, or None; the cook key looked up (if any), and the
    sources' state and digests it was computed from (for a cook after a miss).

    A lookup needs the sources' digests, not their bytes: remembered from another platform's cook of
    this model while the files are unchanged since (size and times), else hashed from disk without
    holding them in memory."""
    asset = job.asset
    known = remembered_sources(asset, digest_memo_dir(job.platform_dir.parent))
    if known is None:
        with step("read and hash the sources"):
            known = hashed_sources(asset)
    if not known:  # a source changed while it was hashed: the cook reads it and decides
        return None, None, None
    key = cook_key(job.task_key, {Path(path).name: stamp[3] for path, stamp in known.items()})
    return lookup(job, cache, key, known), key, known


def kept_outputs(job: CookJob) -> tuple[dict[str, Any], bool] | None:
    """(entry, moved) of outputs this very cook already wrote, which doit runs the task for again
    though nothing they depend on changed: the project or its build folder moved (moved: doit's
    records name absolute paths), or doit never recorded the cook (a run killed before doit saved
    its state at the end, `doit forget`, `-a`). They count when every output is the file the stamps
    recorded (sha256; by name when moved, else by path) and the entry's cook key is the one the
    sources and settings give now; they are then recorded again, under these paths. Else None (no
    stamps, or a change of sources, settings or outputs: the cook runs)."""
    stamp_file = cook_stamps_path(job.platform_dir, job.asset.name)
    where = dests(job)
    try:
        stamps = json.loads(stamp_file.read_text(encoding="utf-8"))
        files, sources_then = stamps["files"], stamps.get("sources", {})
        entry = json.loads(where["entry"].read_bytes())
        moved = recorded_elsewhere(list(where.values()), stamp_file)
        if moved:
            recorded = {
                role: {Path(p).name: state[3] for p, state in files.items()}.get(path.name)
                for role, path in where.items()
            }
        else:
            recorded = {role: files[str(path)][3] for role, path in where.items() if str(path) in files}
        then = {(Path(p).name if moved else p): state[0] for p, state in sources_then.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    if len(recorded) != len(where) or None in recorded.values():
        return None
    if any(_size(p) != then.get(p.name if moved else str(p)) for p in job.asset.source_files):
        return None  # a source of another size: changed, which the cook finds without hashing it here
    # The key first: a change of sources or settings, what a re-run mostly is, hashes no output.
    memo = digest_memo_dir(job.platform_dir.parent)
    sources = remembered_sources(job.asset, memo) or hashed_sources(job.asset)
    if not sources or entry.get("cook_key") != cook_key(
        job.task_key, {Path(path).name: state[3] for path, state in sources.items()}
    ):
        return None
    try:
        digests = {role: file_sha256(path) for role, path in where.items()}
    except OSError:
        return None
    if digests != recorded:
        return None
    record(
        list(paths(job).values()),
        stamp_file,
        sources=sources,
        digests={where[role]: digest for role, digest in digests.items()},
        memo_dir=memo,
    )
    return entry, moved


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def kept_line(job: CookJob) -> str | None:
    """The cook's line for outputs it keeps (``kept_outputs``), else None."""
    kept = kept_outputs(job)
    if kept is None:
        return None
    entry, moved = kept
    task = f"cook:{job.settings.platform}:{job.asset.name}"
    why = (
        "at a new path"
        if moved
        else f"this cook's by their stamps; `clean {task}` (onnx-cooker or doit) first to cook anew"
    )
    return f"{cook_line(entry)} (in place: the same outputs, {why})\n"


def lookup(job: CookJob, cache: CookCache, key: str, sources: Stamps) -> dict[str, Any] | None:
    """The entry stored under ``key``, checked and put in place (``sources``: the state of the source
    files the key was computed from, recorded with it), or None."""
    staged_as = blob_path(job.platform_dir, job.asset.name, job.settings.format)
    with step("cook cache lookup"):
        cached = cache.fetch(
            key,
            job.asset.name,
            job.settings.platform,
            staged_as.relative_to(job.platform_dir).as_posix(),
            dests(job),
            recipe_of(job.task_key, {Path(path).name: stamp[3] for path, stamp in sources.items()}),
        )
    if cached is None:
        return None
    return _commit_cached(job, cached, sources)


def _commit_cached(job: CookJob, cached: Cached, sources: Stamps) -> dict[str, Any]:
    try:
        with step("write the outputs"):
            return commit(job, cached.staged, sources, cached.digests)
    finally:
        cached.discard()  # after a failure (a committed file is gone from its temp name already)


def paths(job: CookJob) -> dict[str, Path]:
    """Where a cook writes each file it can write, by role."""
    platform_dir, name = job.platform_dir, job.asset.name
    return {
        "blob": blob_path(platform_dir, name, job.settings.format),
        "entry": entry_path(platform_dir, name),
        "verify": verify_data_path(platform_dir, name),
    }


def dests(job: CookJob) -> dict[str, Path]:
    """Where a cook of this job's settings writes its files, by role: a cache entry for it must hold
    exactly these roles."""
    return {role: path for role, path in paths(job).items() if role != "verify" or job.settings.verify}


def commit(
    job: CookJob, staged: Mapping[str, Path], sources: Stamps, digests: Mapping[str, str]
) -> dict[str, Any]:
    """Put what a cook made (or a cache entry holds), staged beside its place by role, each file in
    place with one rename, the manifest entry last; record it all with the files' sha256s
    (``digests``, by role) and the sources' state, for the up-to-date checks. Returns the entry."""
    where = paths(job)
    if "verify" not in staged:  # verify is off: no task lists the file
        where["verify"].unlink(missing_ok=True)
    applied_variant_path(job.platform_dir, job.asset.name).unlink(missing_ok=True)  # older cooks kept it
    for other in ModelFormat:  # a blob staged by a cook of this model in the other format
        if other != job.settings.format:
            blob_path(job.platform_dir, job.asset.name, other.value).unlink(missing_ok=True)
    for role in ("verify", "blob", "entry"):  # the entry last: it names the others
        if role in staged:
            os.replace(staged[role], where[role])
    record(
        list(where.values()),
        cook_stamps_path(job.platform_dir, job.asset.name),
        sources=sources,
        digests={where[role]: digest for role, digest in digests.items()},
        memo_dir=digest_memo_dir(job.platform_dir.parent),
    )
    return json.loads(where["entry"].read_bytes())


@contextmanager
def staged_files(files: Mapping[str, bytes], where: Mapping[str, Path]) -> Iterator[dict[str, Path]]:
    """``files`` (by role) written to temp files beside ``where[role]``, fsync'd; whatever is still
    under a temp name when the block ends (a failure before ``commit``) is removed."""
    staged: dict[str, Path] = {}
    try:
        with step("write the outputs"):
            for role, data in files.items():
                staged[role] = stage_write(where[role], data)
        yield staged
    finally:
        for temp in staged.values():
            temp.unlink(missing_ok=True)
