"""A shared cache of cooked results for build farms: a folder or an S3 bucket, keyed by the cook key.

One entry holds everything a cook writes for one (platform, model): the blob, its manifest entry,
and the verification data. Entries are written data first and
their index object last, so a reader never sees half an entry; everything read back is checked like
a blob a game loads (sizes, sha256s, the blob's frames, the cook key in its header) before it is
written into the build. The cache is optional: a store that cannot be reached costs one warning line
and the cook runs locally, unless ``COOK_CACHE_REQUIRED=1``.

The settings (``COOK_CACHE``...) and the ``Store`` protocol are in ``onnx_cooker.farm.store``, the
stores in ``onnx_cooker.farm.folder_store`` and ``onnx_cooker.farm.s3_store``, and what makes an entry
sound in ``onnx_cooker.farm.entry_check``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from onnx_cooker.farm.entry_check import PoisonedEntry, check_entry
from onnx_cooker.farm.folder_store import FolderStore
from onnx_cooker.farm.s3_store import S3Store
from onnx_cooker.farm.store import CACHE_ENV, REQUIRED_ENV, ROLES, CacheConfig, CacheError, Store, folder_path
from onnx_cooker.fsutil import atomic_write, temp_beside
from onnx_cooker.runtime.compat import parse_version

INDEX_VERSION = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_COOK_SECONDS = 7 * 86400  # an index claiming a longer cook is not believed (the summary's "saved")


def open_store(config: CacheConfig) -> Store:
    parsed = urlparse(config.url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise CacheError(f"{CACHE_ENV}={config.url!r} names no bucket: use s3://bucket/prefix")
        return S3Store(bucket=parsed.netloc, prefix=parsed.path.strip("/"))
    return FolderStore(root=folder_path(config.url))


def entry_digest(cook_key: str) -> str:
    """The name of a cook key's entry: its sha256 (a cook key is a long JSON-ish string)."""
    return hashlib.sha256(cook_key.encode()).hexdigest()


def _object_name(digest: str, role: str, sha256: str) -> str:
    """An object's name holds its content's sha256: two agents uploading one cook key at once (ORT
    blobs differ from cook to cook), or one killed while it re-uploads an entry, write objects of
    their own, and each index names its own; with one name per role, the index that won could
    describe the other agent's blob, and the entry was refused by every reader after."""
    return f"objects/{digest[:2]}/{digest}/{role}.{sha256[:32]}"


def _index_name(digest: str) -> str:
    return f"index/{digest[:2]}/{digest}.json"


# (key of the cook without the tools' versions, those versions: tool -> version); see cook/key.py
Recipe = tuple[str, Mapping[str, str]]


def _recipe_name(key: str) -> str:
    return f"recipes/{key[:2]}/{key}.json"


def _versions(tools: Mapping[str, str]) -> str:
    return ", ".join(f"{tool} {version}" for tool, version in sorted(tools.items()))


def _check_name(digest: str) -> str:
    return f"checks/{digest[:2]}/{digest}.json"


@dataclass(frozen=True)
class Cached:
    """A checked entry, by role (``blob``, ``entry``, ``verify``): each file placed in a
    temp file beside where the cook writes it (``os.replace`` puts it there), and its sha256."""

    staged: Mapping[str, Path]
    digests: Mapping[str, str]  # sha256 by role, checked against the entry's index

    def discard(self) -> None:
        _unlink_all(self.staged.values())


def _unlink_all(paths: Iterable[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


@dataclass
class CookCache:
    """A store used by one cook: lookups, uploads, and the warning lines to show in its summary."""

    config: CacheConfig
    store: Store | None = None
    notes: list[str] = field(default_factory=list)
    hit: bool = False
    refused: bool = False  # an entry was found and refused (then cooked again)
    bytes_in: int = 0  # fetched from the cache (linked, copied or downloaded)
    bytes_up: int = 0  # uploaded
    saved_s: float = 0.0  # the cook time a hit saved: its cook's recorded time less the hit's
    started: float = field(default_factory=time.monotonic)  # this cook's start

    def record(self) -> dict[str, Any]:
        """What the cache did for this cook (``onnx_cooker.layout.cache_record_path``), for the summary."""
        if self.hit:
            result = "hit"
        elif self.refused:
            result = "refused"
        elif self.config.mode == "off":
            result = "unusable"
        else:
            result = "miss"
        return {
            "result": result,
            "bytes_in": self.bytes_in,
            "bytes_up": self.bytes_up,
            "saved_s": round(self.saved_s, 3),
        }

    def __post_init__(self) -> None:
        self.config = _as_this_run_left_it(self.config)

    def _store(self) -> Store | None:
        if self.store is None:
            try:
                self.store = open_store(self.config)
            except CacheError as exc:
                self._unusable(exc)
        return self.store

    def _unusable(self, exc: CacheError, writing: bool = False) -> None:
        if self.config.required:
            raise CacheError(f"the cook cache is required ({REQUIRED_ENV}=1) but unusable: {exc.problem}")
        self.notes.append(f"warning: cook cache unusable, cooking locally: {exc.problem}")
        _mark_this_run(self.config, exc.problem, reads=not writing)
        self.store = None
        self.config = CacheConfig(self.config.url, mode="off")  # one warning per cook

    def fetch(
        self,
        cook_key: str,
        name: str,
        platform: str,
        blob_file: str,
        dests: Mapping[str, Path],
        recipe: Recipe | None = None,
    ) -> Cached | None:
        """The checked entry for ``cook_key``, or None (absent, unreachable, or refused). ``dests``:
        where the cook of this job writes each of its roles (an entry with other roles is refused);
        the entry's files are placed beside them, in temp files, and nothing is left on a refusal.
        ``recipe`` (the key without the tools' versions, and those versions): on a miss, a note if
        the cache holds the same cook made with other versions."""
        if self.config.mode == "off" or (store := self._store()) is None:
            return None
        digest = entry_digest(cook_key)
        staged: dict[str, Path] = {}
        try:
            index = store.get(_index_name(digest))
            if index is None:
                if recipe is not None:
                    self._other_versions(store, name, platform, recipe)
                return None
            digests, cook_seconds = _fetch_files(store, digest, index, cook_key, dests, staged)
            check_entry(staged, cook_key, name, platform, blob_file, digests["blob"])
        except BaseException as exc:
            self.bytes_in += _sizes(staged)  # fetched all the same
            _unlink_all(staged.values())
            if isinstance(exc, PoisonedEntry):
                why = exc.problem
            elif isinstance(exc, (ValueError, TypeError, KeyError, AttributeError)):  # a malformed shape
                why = f"malformed ({exc!r})"
            elif isinstance(exc, CacheError):  # unreachable, refused by the store
                self._unusable(exc)
                return None
            elif isinstance(exc, OSError):  # reading back a file just placed in the build folder
                self._unusable(CacheError(f"cannot read a fetched file: {exc.strerror or exc}"))
                return None
            else:
                raise
            self.refused = True
            self.notes.append(
                f"warning: cook cache entry {digest[:16]} ({name} for {platform}) refused, cooked again: "
                f"{why}"
            )
            return None
        self.hit = True
        self.bytes_in += _sizes(staged)
        self.saved_s += max(cook_seconds - (time.monotonic() - self.started), 0.0)
        store.touch(_index_name(digest))
        return Cached(staged, digests)

    def _other_versions(self, store: Store, name: str, platform: str, recipe: Recipe) -> None:
        """Note a miss caused only by the versions of the cooking tools."""
        key, tools = recipe
        raw = store.get(_recipe_name(key))
        try:
            theirs = json.loads(raw)["tools"] if raw is not None else None
        except (ValueError, KeyError, TypeError):
            return  # a damaged note of a recipe: a hint, not worth a warning
        cooked = raw is not None and store.get(_index_name(entry_digest(json.loads(raw)["cook_key"])))
        if isinstance(theirs, dict) and theirs and theirs != dict(tools) and cooked:  # not pruned since
            self.notes.append(
                f"note: cook cache miss for {name} ({platform}) only because of tool versions: the cache "
                f"has it cooked with {_versions(theirs)}, this machine has {_versions(tools)}; install "
                "the cooking tools with `-c constraints.txt` on every machine to share entries"
            )

    def upload(
        self,
        cook_key: str,
        files: Mapping[str, Path],
        digests: Mapping[str, str],
        recipe: Recipe | None = None,
    ) -> None:
        """Store what a cook wrote (``files``: its files by role, ``digests``: their sha256s): every
        object first, the index last (readers see all or nothing); then the tools' versions under
        ``recipe``'s key, for the note on a miss elsewhere (``fetch``)."""
        if not self.config.writes or (store := self._store()) is None:
            return
        digest = entry_digest(cook_key)
        # cook_seconds: what a hit on this entry saves (the summary at the end of `doit cook`)
        seconds = round(time.monotonic() - self.started, 3)
        index = {"version": INDEX_VERSION, "cook_key": cook_key, "files": {}, "cook_seconds": seconds}
        try:
            for role, path in files.items():
                size = path.stat().st_size
                store.put_file(_object_name(digest, role, digests[role]), path)
                index["files"][role] = {"size": size, "sha256": digests[role]}
                self.bytes_up += size
            store.put(_index_name(digest), json.dumps(index, sort_keys=True).encode())
            if recipe is not None:
                note = {"tools": dict(recipe[1]), "cook_key": cook_key}
                store.put(_recipe_name(recipe[0]), json.dumps(note, sort_keys=True).encode())
        except CacheError as exc:
            self._unusable(exc, writing=True)

    def fetch_check(self, check_key: str, version: str, names: list[str]) -> dict[str, Any] | None:
        """A runtime check's report stored under ``check_key`` (the target onnxruntime version and the
        sha256 of every blob it loaded), if it is one for exactly these models and all of them passed."""
        if self.config.mode == "off" or (store := self._store()) is None:
            return None
        name = _check_name(entry_digest(check_key))
        try:
            raw = store.get(name)
        except CacheError as exc:
            self._unusable(exc)
            return None
        if raw is None:
            return None
        try:
            stored = json.loads(raw)
            report = stored["report"]
            passed = all(report["models"][model]["ok"] is True for model in names)
            same = parse_version(report["onnxruntime"]) == parse_version(version)
            fits = stored["check_key"] == check_key and same
        except (ValueError, KeyError, TypeError):
            passed = fits = False
        if not (passed and fits):
            self.notes.append(f"warning: cook cache check report {name} refused, checking again")
            return None
        self.hit = True
        store.touch(name)
        return report

    def upload_check(self, check_key: str, report: Mapping[str, Any]) -> None:
        if not self.config.writes or (store := self._store()) is None:
            return
        data = json.dumps({"check_key": check_key, "report": report}, sort_keys=True).encode()
        try:
            store.put(_check_name(entry_digest(check_key)), data)  # one object: whole or absent
        except CacheError as exc:
            self._unusable(exc, writing=True)


def _as_this_run_left_it(config: CacheConfig) -> CacheConfig:
    """``config`` as an earlier cook of this doit run left the cache (``_mark_this_run``): off when it
    could not be read, read-only when it could not be written. A required cache is tried by every cook."""
    if not config.run or config.required:
        return config
    try:
        marker = json.loads(Path(config.run_marker).read_text(encoding="utf-8"))
        if marker["run"] != config.run or marker["url"] != config.url:
            return config
        reads = marker["reads"] is True
    except (OSError, ValueError, KeyError, TypeError):
        return config
    if reads or config.mode == "read":
        return dataclasses.replace(config, mode="off")
    return dataclasses.replace(config, mode="read")


def _mark_this_run(config: CacheConfig, problem: str, reads: bool) -> None:
    """Tell the later cooks of this doit run that the cache is unusable (``reads``) or unwritable: the
    first cook waited for it (an unreachable S3 endpoint: 5 s a connection attempt, 60 s a hung
    read), the others skip it. Best effort: a marker that cannot be written costs only time."""
    if not config.run:
        return
    marker = Path(config.run_marker)
    try:
        earlier = json.loads(marker.read_text(encoding="utf-8"))
        if earlier.get("run") == config.run and earlier.get("reads") is True:
            return  # off already; a failed write does not make it read-only
    except (OSError, ValueError, AttributeError):
        pass
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        content = {"run": config.run, "url": config.url, "reads": reads, "problem": problem}
        atomic_write(marker, json.dumps(content).encode(), durable=False)
    except OSError:
        pass


def _fetch_files(
    store: Store,
    digest: str,
    raw_index: bytes,
    cook_key: str,
    dests: Mapping[str, Path],
    staged: dict[str, Path],
) -> tuple[dict[str, str], float]:
    """Place the entry's objects beside ``dests`` (into ``staged``, by role), each checked against the
    size and sha256 its index lists; returns those sha256s by role, and the seconds the entry's cook
    took (0 when its index does not say)."""
    try:
        index = json.loads(raw_index)
        listed = index["files"]
        assert index["version"] == INDEX_VERSION and isinstance(listed, dict)
    except (ValueError, KeyError, TypeError, AssertionError):
        raise PoisonedEntry("its index is not a version-1 index") from None
    if index.get("cook_key") != cook_key:
        raise PoisonedEntry("its index is for another cook key")
    if not {"blob", "entry"} <= set(listed) <= set(ROLES):
        raise PoisonedEntry(f"its index lists {sorted(listed)}")
    if set(listed) != set(dests):
        raise PoisonedEntry(f"it holds {sorted(listed)}, where this cook writes {sorted(dests)}")
    digests = {}
    for role, expected in listed.items():
        dest = dests[role]
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not isinstance(expected, dict) or not _SHA256.fullmatch(str(expected.get("sha256"))):
            raise PoisonedEntry(f"its index lists no sha256 for its {role} object")  # nor a path
        temp = staged[role] = temp_beside(dest)  # removed with the others whatever happens next
        sha256 = store.get_file(_object_name(digest, role, expected["sha256"]), temp)
        if sha256 is None:
            raise PoisonedEntry(f"its {role} object is missing")
        if temp.stat().st_size != expected.get("size") or sha256 != expected.get("sha256"):
            raise PoisonedEntry(f"its {role} object does not match the size and sha256 of its index")
        digests[role] = sha256
    seconds = index.get("cook_seconds")
    plausible = isinstance(seconds, (int, float)) and 0 < seconds < MAX_COOK_SECONDS
    return digests, float(seconds) if plausible else 0.0


def _sizes(staged: Mapping[str, Path]) -> int:
    total = 0
    for path in staged.values():
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total
