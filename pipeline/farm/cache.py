"""A shared cache of cooked results for build farms: a folder or an S3 bucket, keyed by the cook key.

One entry holds everything a cook writes for one (platform, model): the blob, its manifest entry,
and the verification data. Entries are written data first and
their index object last, so a reader never sees half an entry; everything read back is checked like
a blob a game loads (sizes, sha256s, the blob's frames, the cook key in its header) before it is
written into the build. The cache is optional: a store that cannot be reached costs one warning line
and the cook runs locally, unless ``COOK_CACHE_REQUIRED=1``.

Settings, from the environment (read once by ``dodo.py``):

- ``COOK_CACHE``: ``/path``, ``file:///path`` (a folder: local, NFS or SMB mount) or
  ``s3://bucket/prefix`` (any S3-compatible store; endpoint and credentials the standard AWS way:
  ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ...).
- ``COOK_CACHE_MODE``: ``readwrite`` (default; CI agents) or ``read`` (developer machines).
- ``COOK_CACHE_REQUIRED``: ``1`` turns an unreachable cache into a failed cook.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from pipeline.errors import CookError
from pipeline.fsutil import CHUNK_BYTES, atomic_write, copy_hashed, file_sha256, temp_beside
from pipeline.runtime.compat import parse_version

CACHE_ENV = "COOK_CACHE"
MODE_ENV = "COOK_CACHE_MODE"
REQUIRED_ENV = "COOK_CACHE_REQUIRED"
MODES = ("readwrite", "read")
INDEX_VERSION = 1
# What one entry holds: role -> object name under the entry's folder.
ROLES = ("blob", "entry", "verify")
# S3: fail in seconds when the server is down, not after minutes of retries.
S3_CONNECT_TIMEOUT = 5.0
S3_READ_TIMEOUT = 60.0
S3_ATTEMPTS = 2
# Objects up to this size go in one PUT (S3 takes up to 5 GiB in one); bigger ones in parts.
S3_SINGLE_PUT_LIMIT = 4 << 30
S3_PART_BYTES = 256 << 20
S3_PART_THREADS = 2  # parts in flight: build agents have few cores, and the cook has work of its own
MAX_COOK_SECONDS = 7 * 86400  # an index claiming a longer cook is not believed (the summary's "saved")


class CacheError(CookError):
    """The cache cannot be used (unreachable, refused) or returned something that is not an entry."""


@dataclass(frozen=True)
class CacheConfig:
    """Where the cache is and how to use it; picklable (travels in every ``CookJob``)."""

    url: str
    mode: str = "readwrite"
    required: bool = False

    @property
    def writes(self) -> bool:
        return self.mode == "readwrite"


def config_from_env(env: Mapping[str, str]) -> CacheConfig | None:
    """The cache settings, or None when ``COOK_CACHE`` is unset; a bad value is a clear error."""
    url = env.get(CACHE_ENV, "").strip()
    if not url:
        return None
    mode = env.get(MODE_ENV, "readwrite").strip() or "readwrite"
    if mode not in MODES:
        raise CookError(f"{MODE_ENV}={mode!r}: use one of {', '.join(MODES)}")
    scheme = urlparse(url).scheme
    if scheme not in ("", "file", "s3") and not _is_windows_drive(url):
        raise CookError(f"{CACHE_ENV}={url!r}: use a folder path, file:///path or s3://bucket/prefix")
    return CacheConfig(url=url, mode=mode, required=env.get(REQUIRED_ENV, "") == "1")


def _is_windows_drive(url: str) -> bool:
    return len(url) > 2 and url[1] == ":" and url[0].isalpha()


class Store(Protocol):
    """A flat namespace of objects; ``get`` returns None for an object that does not exist.

    Small objects (indexes, check reports) travel as bytes; an entry's files travel as files
    (``get_file``/``put_file``), never whole in memory."""

    description: str

    def get(self, name: str) -> bytes | None: ...

    def put(self, name: str, data: bytes) -> None: ...

    def get_file(self, name: str, dest: Path) -> str | None:
        """Write the object to the new file ``dest`` (fsync'd) and return its sha256; None (and no
        file) when the object does not exist."""
        ...

    def put_file(self, name: str, path: Path) -> None:
        """Store the file ``path`` as the object ``name``, readable whole or not at all."""
        ...

    def touch(self, name: str) -> None:
        """Note that the object was just used (for pruning the least recently used); may do nothing."""
        ...


@dataclass
class FolderStore:
    """Objects as files under ``root``, each written through a temp file and a rename."""

    root: Path
    description: str = ""

    def __post_init__(self) -> None:
        self.description = self.description or str(self.root)

    def get(self, name: str) -> bytes | None:
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CacheError(f"cannot read {self.root / name}: {exc.strerror or exc}") from None

    def put(self, name: str, data: bytes) -> None:
        try:
            # no fsync: every object is checked against its index when read (0.1-0.8 s per 268 MB here)
            atomic_write(self.root / name, data, durable=False)
        except OSError as exc:
            raise CacheError(f"cannot write {self.root / name}: {exc.strerror or exc}") from None

    def get_file(self, name: str, dest: Path) -> str | None:
        """A hard link to the object where the build is on the cache's file system (no bytes written:
        objects are never changed in place, only replaced or deleted), else a copy (fsync'd)."""
        source = self.root / name
        if not source.is_file():
            return None
        try:
            if not _link(source, dest):
                return copy_hashed(source, dest)
            _fsync(dest)  # durable like every build output (cheap: the object's pages are clean)
            return file_sha256(dest)
        except FileNotFoundError:
            if not source.exists():  # pruned or replaced meanwhile
                dest.unlink(missing_ok=True)
                return None
            raise CacheError(f"cannot place {source} at {dest}: its folder is gone") from None
        except OSError as exc:
            dest.unlink(missing_ok=True)
            raise CacheError(f"cannot copy {source} to {dest}: {exc.strerror or exc}") from None

    def put_file(self, name: str, path: Path) -> None:
        """A hard link to the build's file where the cache is on its file system (the build replaces
        its files, never rewrites them), else a copy; then renamed into place."""
        target = self.root / name
        for attempt in (1, 2):  # a prune may remove the fresh folder between mkdir and the link
            temp = temp_beside(target)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                if not _link(path, temp):
                    copy_hashed(path, temp, durable=False)  # checked when read
                os.replace(temp, target)
                return
            except FileNotFoundError:
                if attempt == 2 or not path.exists():
                    raise CacheError(f"cannot write {target}: its folder vanished twice") from None
            except OSError as exc:
                raise CacheError(f"cannot write {target}: {exc.strerror or exc}") from None
            finally:
                temp.unlink(missing_ok=True)

    def touch(self, name: str) -> None:
        """The index's (or report's) mtime is its last use: ``python -m pipeline.farm prune`` removes
        the least recently used. Objects are not touched (builds may hard-link them)."""
        try:
            os.utime(self.root / name)
        except OSError:
            pass  # pruned meanwhile, or a read-only share: the hit stands


def _link(source: Path, dest: Path) -> bool:
    """Hard-link ``source`` as ``dest`` if this system and file system allow it. Not on Windows: a file
    open anywhere there (an editor, a scanner, another agent) blocks renaming or deleting each of its
    links, so a build and the cache must not share files."""
    if os.name == "nt":
        return False
    try:
        os.link(source, dest)
    except FileNotFoundError:
        raise
    except OSError:  # another file system (EXDEV), links refused (EPERM), or none (FAT, some shares)
        return False
    return True


def _fsync(path: Path) -> None:
    """fsync a file through a read-only descriptor (POSIX allows it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class S3Store:
    """Objects in an S3 bucket under a prefix, through boto3 (imported only when used)."""

    bucket: str
    prefix: str
    client: Any = None
    description: str = ""

    def __post_init__(self) -> None:
        self.description = self.description or f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        if self.client is None:
            self.client = _s3_client()

    def _key(self, name: str) -> str:
        return f"{self.prefix.strip('/')}/{name}" if self.prefix.strip("/") else name

    def get(self, name: str) -> bytes | None:
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(name))
            return answer["Body"].read()
        except Exception as exc:  # botocore raises many types; absence is one code among them
            if _s3_code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise CacheError(f"cannot read {self.description}/{name}: {_s3_reason(exc)}") from None

    def put(self, name: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data)
        except Exception as exc:
            raise CacheError(f"cannot write {self.description}/{name}: {_s3_reason(exc)}") from None

    def get_file(self, name: str, dest: Path) -> str | None:
        """The object streamed into ``dest`` and hashed on the way (never whole in memory)."""
        digest = hashlib.sha256()
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(name))
            with open(dest, "xb") as out:
                for chunk in answer["Body"].iter_chunks(CHUNK_BYTES):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except Exception as exc:  # botocore raises many types; absence is one code among them
            dest.unlink(missing_ok=True)
            if _s3_code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise CacheError(f"cannot read {self.description}/{name}: {_s3_reason(exc)}") from None
        return digest.hexdigest()

    def touch(self, name: str) -> None:
        """Nothing: S3 has no cheap way to mark a use; expire entries with a lifecycle rule."""

    def put_file(self, name: str, path: Path) -> None:
        """One PUT streamed from the file; in parts (multipart upload) past ``S3_SINGLE_PUT_LIMIT``.
        S3 shows an object only once its PUT or its multipart upload completed."""
        try:
            if path.stat().st_size <= S3_SINGLE_PUT_LIMIT:
                with path.open("rb") as body:
                    self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=body)
            else:
                from boto3.s3.transfer import TransferConfig

                parts = TransferConfig(
                    multipart_threshold=S3_PART_BYTES,
                    multipart_chunksize=S3_PART_BYTES,
                    max_concurrency=S3_PART_THREADS,
                )
                self.client.upload_file(str(path), self.bucket, self._key(name), Config=parts)
        except Exception as exc:
            raise CacheError(f"cannot write {self.description}/{name}: {_s3_reason(exc)}") from None


@functools.cache  # one client per process: a doit worker runs many cooks, creating one costs ~20 ms
def _s3_client() -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise CacheError(
            "an s3:// cache needs boto3: pip install 'onnx-cooker[s3]' (or pip install boto3)"
        ) from None
    settings: dict[str, Any] = {
        "connect_timeout": S3_CONNECT_TIMEOUT,
        "read_timeout": S3_READ_TIMEOUT,
        "retries": {"max_attempts": S3_ATTEMPTS, "mode": "standard"},
        # Every object is checked against the sha256 of its index: botocore's own CRC pass over each
        # upload and download (its default since 1.36) would hash the same bytes a second time.
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
    }
    try:
        config = Config(**settings)
    except TypeError:  # botocore before 1.36: no such options (and no such default)
        del settings["request_checksum_calculation"], settings["response_checksum_validation"]
        config = Config(**settings)
    return boto3.client("s3", config=config)


def _s3_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _s3_reason(exc: Exception) -> str:
    code = _s3_code(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{code}: {text}" if code and code not in text else text


def open_store(config: CacheConfig) -> Store:
    parsed = urlparse(config.url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise CacheError(f"{CACHE_ENV}={config.url!r} names no bucket: use s3://bucket/prefix")
        return S3Store(bucket=parsed.netloc, prefix=parsed.path.strip("/"))
    return FolderStore(root=folder_path(config.url))


def folder_path(url: str) -> Path:
    """A folder cache's path from ``COOK_CACHE``: a path, or ``file:///path`` (``file:///C:/cache``
    on Windows)."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return Path(url).expanduser()
    path = unquote(parsed.path)
    if len(path) > 2 and path[0] == "/" and _is_windows_drive(path[1:]):
        path = path[1:]
    return Path(path).expanduser()


def entry_digest(cook_key: str) -> str:
    """The name of a cook key's entry: its sha256 (a cook key is a long JSON-ish string)."""
    return hashlib.sha256(cook_key.encode()).hexdigest()


def _object_name(digest: str, role: str) -> str:
    return f"objects/{digest[:2]}/{digest}/{role}"


def _index_name(digest: str) -> str:
    return f"index/{digest[:2]}/{digest}.json"


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
        """What the cache did for this cook (``pipeline.layout.cache_record_path``), for the summary."""
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

    def _store(self) -> Store | None:
        if self.store is None:
            try:
                self.store = open_store(self.config)
            except CacheError as exc:
                self._unusable(exc)
        return self.store

    def _unusable(self, exc: CacheError) -> None:
        if self.config.required:
            raise CacheError(f"the cook cache is required ({REQUIRED_ENV}=1) but unusable: {exc.problem}")
        self.notes.append(f"warning: cook cache unusable, cooking locally: {exc.problem}")
        self.store = None
        self.config = CacheConfig(self.config.url, mode="off")  # one warning per cook

    def fetch(
        self,
        cook_key: str,
        name: str,
        platform: str,
        blob_file: str,
        dests: Mapping[str, Path],
    ) -> Cached | None:
        """The checked entry for ``cook_key``, or None (absent, unreachable, or refused). ``dests``:
        where the cook of this job writes each of its roles (an entry with other roles is refused);
        the entry's files are placed beside them, in temp files, and nothing is left on a refusal."""
        if self.config.mode == "off" or (store := self._store()) is None:
            return None
        digest = entry_digest(cook_key)
        staged: dict[str, Path] = {}
        try:
            index = store.get(_index_name(digest))
            if index is None:
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
            self.notes.append(f"warning: cook cache entry {digest[:16]} refused, cooked again: {why}")
            return None
        self.hit = True
        self.bytes_in += _sizes(staged)
        self.saved_s += max(cook_seconds - (time.monotonic() - self.started), 0.0)
        store.touch(_index_name(digest))
        return Cached(staged, digests)

    def upload(self, cook_key: str, files: Mapping[str, Path], digests: Mapping[str, str]) -> None:
        """Store what a cook wrote (``files``: its files by role, ``digests``: their sha256s): every
        object first, the index last (readers see all or nothing)."""
        if not self.config.writes or (store := self._store()) is None:
            return
        digest = entry_digest(cook_key)
        # cook_seconds: what a hit on this entry saves (the summary at the end of `doit cook`)
        seconds = round(time.monotonic() - self.started, 3)
        index = {"version": INDEX_VERSION, "cook_key": cook_key, "files": {}, "cook_seconds": seconds}
        try:
            for role, path in files.items():
                size = path.stat().st_size
                store.put_file(_object_name(digest, role), path)
                index["files"][role] = {"size": size, "sha256": digests[role]}
                self.bytes_up += size
            store.put(_index_name(digest), json.dumps(index, sort_keys=True).encode())
        except CacheError as exc:
            self._unusable(exc)

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
            self._unusable(exc)


# What the manifest, the summary line and the report read of an entry, with the type they expect.
ENTRY_FIELDS: Mapping[str, type] = {
    "name": str,
    "format": str,
    "file": str,
    "blob_size": int,
    "blob_sha256": str,
    "cook_key": str,
    "source_size": int,
    "model_size": int,
    "settings": dict,
    "verification": dict,
    "cooked_with": dict,
    "execution_providers": list,
    "fallbacks": list,
}


def _operators_shape_ok(value: Any) -> bool:
    """The shape ``opconfig.model_operators`` writes: ops as [domain, opset, op], types by "domain;op"."""
    if not isinstance(value, dict) or set(value) != {"ops", "types"}:
        return False
    ops, types = value["ops"], value["types"]
    return (
        isinstance(ops, list)
        and all(
            isinstance(op, list)
            and len(op) == 3
            and isinstance(op[0], str)
            and type(op[1]) is int
            and isinstance(op[2], str)
            for op in ops
        )
        and (types is None or isinstance(types, dict))
        and all(isinstance(k, str) and isinstance(v, str) for k, v in (types or {}).items())
    )


def _check_verify_data(data: bytes) -> None:
    import io
    import zipfile

    import numpy as np

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            names = archive.files
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise PoisonedEntry(f"its verification data is not an .npz ({exc})") from None
    if not any(name.startswith("input/") for name in names):
        raise PoisonedEntry("its verification data holds no inputs")


class PoisonedEntry(CacheError):
    """An entry whose bytes are not what its index or its key promise: ignored and cooked again."""


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
        temp = staged[role] = temp_beside(dest)  # removed with the others whatever happens next
        sha256 = store.get_file(_object_name(digest, role), temp)
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


def check_entry(
    files: Mapping[str, Path],
    cook_key: str,
    name: str,
    platform: str,
    blob_file: str,
    blob_sha256: str,
) -> None:
    """Refuse an entry (its files by role) unless its blob is what its entry says (size and sha256,
    the way ``Bundle`` checks a blob before a game loads it), its header and frame layout are sound,
    and everything names ``cook_key``. ``blob_sha256``: the blob's digest, computed by the caller
    (against the index).

    The frames are not decompressed: the blob's sha256 equals the one its cook recorded after
    verifying that very blob through the loader, so decompressing it again proves nothing more."""
    try:
        entry = json.loads(files["entry"].read_bytes())
    except ValueError as exc:
        raise PoisonedEntry(f"its manifest entry is not JSON ({exc})") from None
    blob_size, header = _blob_layout(files["blob"])
    if not isinstance(entry, dict):
        raise PoisonedEntry("its manifest entry is not a JSON object")
    missing = [key for key, kind in ENTRY_FIELDS.items() if not isinstance(entry.get(key), kind)]
    if missing:
        raise PoisonedEntry(f"its manifest entry lacks {missing}")
    if "operators" in entry and not _operators_shape_ok(entry["operators"]):
        raise PoisonedEntry("its manifest entry's operator lists are malformed")
    if "verify" in files:
        _check_verify_data(files["verify"].read_bytes())
    expected = {"cook key": cook_key, "name": name, "platform": platform}
    found_header = {"cook key": header.cook_key, "name": header.name, "platform": header.platform}
    found_entry = {
        "cook key": entry.get("cook_key"),
        "name": entry.get("name"),
        "platform": (entry.get("settings") or {}).get("platform"),
    }
    for what, value in expected.items():
        if found_header[what] != value or found_entry[what] != value:
            raise PoisonedEntry(f"its blob or entry is for another {what}")
    if entry.get("blob_sha256") != blob_sha256 or entry.get("blob_size") != blob_size:
        raise PoisonedEntry("its blob does not match the sha256 and size of its manifest entry")
    if entry.get("file") != blob_file:
        raise PoisonedEntry(f"its entry names the blob {entry.get('file')!r}, not {blob_file!r}")


def _blob_layout(path: Path) -> tuple[int, Any]:
    """The blob file's size and header, after checking its header (and CRC), sizes and frame layout
    (models over 2 GiB included). Mapped where the file system allows it (only the header and the
    frames' first bytes are touched), else read. Anything the checks raise on hostile bytes refuses
    the entry."""
    import mmap

    from pipeline.runtime.blob import check_layout

    with path.open("rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        try:
            view: Any = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except (OSError, ValueError):  # a file system without mappings (some FUSE, 9p)
            view = stream.read()
        problem = None
        try:
            header, _ = check_layout(view, max_model_size=1 << 62)
        except Exception as exc:  # noqa: BLE001  BundleError, or struct/index errors on crafted bytes
            problem = f"{type(exc).__name__}: {exc}"
        if isinstance(view, mmap.mmap):
            try:
                view.close()
            except BufferError:  # a slice still held somewhere: freed with it
                pass
    if problem is not None:
        raise PoisonedEntry(f"its blob is damaged ({problem})")
    return size, header
