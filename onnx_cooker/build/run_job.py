"""Running one cook job, top to bottom: look the cook cache up, cook on a miss, upload, commit.

``cook`` is the entry point (doit's cook actions call it, and so can a script). A cache hit needs
neither onnx nor onnxruntime (onnx_cooker/build/outputs.py checks and commits what the cache holds), so
``onnx_cooker.cook.run`` is imported only for a real cook; ``look_up`` is the lookup alone, for a caller
that cooks a miss elsewhere (doit's actions: in a forked child, onnx_cooker/build/actions.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from onnx_cooker.build.outputs import Stamps, commit, from_cache, lookup, paths, staged_files
from onnx_cooker.cook.job import CookJob
from onnx_cooker.cook.key import recipe_of
from onnx_cooker.errors import CookError
from onnx_cooker.farm.cache import CookCache
from onnx_cooker.fsutil import atomic_write, json_bytes, write_json
from onnx_cooker.layout import cache_record_path, step_times_path
from onnx_cooker.steptimes import recording, step


@dataclass
class Miss:
    """A cache lookup that found nothing, and what it computed for the cook that follows: the key
    looked up, the sources' state and digests, the time its steps took."""

    key: str | None
    known: Stamps | None
    times: dict[str, float] = field(default_factory=dict)


def cook(job: CookJob, cache: CookCache | None = None, miss: Miss | None = None) -> dict[str, Any]:
    """Cook one model for one platform; writes its blob and manifest entry, returns the entry.

    With a ``cache``, an entry stored under the same cook key (and checked) is written instead of
    cooking, and what a cook writes is stored; ``miss``: ``look_up`` already found nothing there.
    Raises a ``CookError`` whose message names the model file, the platform and the fix; nothing is
    written unless every step passed.
    """
    with _in_context(job), recording() as times:
        if miss is not None:
            times.update(miss.times)
            entry, looked_up, known = None, miss.key, miss.known
        else:
            entry, looked_up, known = from_cache(job, cache) if cache is not None else (None, None, None)
        if entry is None:
            entry = _cook_on_a_miss(job, cache, looked_up, known)
        _finish(job, cache, times)
        return entry


def look_up(job: CookJob, cache: CookCache) -> dict[str, Any] | Miss:
    """The cache lookup of ``cook`` alone (neither onnx nor onnxruntime): the entry of a hit, put in
    place and recorded as ``cook`` records it, or the ``Miss`` to hand ``cook``."""
    with _in_context(job), recording() as times:
        entry, looked_up, known = from_cache(job, cache)
        if entry is None:
            return Miss(looked_up, known, times)
        _finish(job, cache, times)
        return entry


@contextmanager
def _in_context(job: CookJob) -> Iterator[None]:
    """A ``CookError`` naming the model file and platform; an ``OSError`` as one that says what to do."""
    context = {"model_path": job.asset.path, "model_name": job.asset.name, "platform": job.settings.platform}
    try:
        yield
    except CookError as exc:
        raise exc.in_context(**context) from None
    except OSError as exc:  # a full disk, a permission: the previous bundle stays as it was
        raise CookError(
            f"cannot write {exc.filename or 'a file'} ({exc.strerror or exc}); free disk space or "
            "fix permissions, then run the cook again (the previous blob, if any, is untouched)",
            **context,
        ) from None


def _finish(job: CookJob, cache: CookCache | None, times: dict[str, float]) -> None:
    write_json(step_times_path(job.platform_dir, job.asset.name), times)
    _record_cache_use(job, cache)


def _cook_on_a_miss(
    job: CookJob, cache: CookCache | None, looked_up: str | None, known: Stamps | None
) -> dict[str, Any]:
    """Cook from the sources (read once: the lookup's digests ``known`` are reused where the files did
    not change), store the result in ``cache``, put it in place; the entry."""
    from onnx_cooker.cook.run import cook_sources, read_job_sources  # heavy: onnx and onnxruntime

    sources = read_job_sources(job, known)
    if cache is not None and sources.key != looked_up:  # a source changed since it was hashed for the lookup
        entry = lookup(job, cache, sources.key, sources.read.stamps)
        if entry is not None:
            return entry
    cooked = cook_sources(job, sources)
    with staged_files(cooked.files, paths(job)) as staged:
        if cache is not None:  # before the commit: a required cache that refuses fails the task
            with step("cook cache upload"):
                cache.upload(cooked.key, staged, cooked.digests, recipe_of(job.task_key, sources.digests))
        with step("write the outputs"):
            return commit(job, staged, cooked.stamps, cooked.digests)


def _record_cache_use(job: CookJob, cache: CookCache | None) -> None:
    """What the cache did for this cook, for the summary at the end of ``doit cook``."""
    path = cache_record_path(job.platform_dir, job.asset.name)
    try:
        if cache is None:
            path.unlink(missing_ok=True)
        else:  # a statistic: lost to a power cut, it is only missing from one summary
            atomic_write(path, json_bytes(cache.record()), durable=False)
    except OSError:
        pass  # the cook is done and in place: a missing statistic does not undo it
