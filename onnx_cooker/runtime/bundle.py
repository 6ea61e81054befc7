"""A cooked platform folder (``build/<platform>/``): its manifest and the blobs it lists."""

from __future__ import annotations

import difflib
import errno
import hashlib
import json
import mmap
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import onnxruntime

from .blob import DEFAULT_MAX_MODEL_SIZE, check_blob
from .constants import MANIFEST_NAME, ModelFormat
from .devices import DeviceSelection, ProviderSpec
from .errors import (
    BundleError,
    BundleReplacedError,
    ChecksumMismatchError,
    ManifestError,
    UnknownModelError,
    in_file,
)
from .files import NOFOLLOW, file_identity, open_regular, sha256_of, shared_mapping
from .frames import default_threads, run_parallel
from .header import MAX_HEADER_SIZE, load_json
from .hints import open_hint
from .loadpaths import BlobFile
from .manifestfile import MAX_MANIFEST_SIZE, check_manifest, read_manifest, read_signed_manifest
from .pager import PAGER_MIN, drop_mapped_weights
from .session import Progress, load_info, no_progress, session_from_checked
from .smallload import asked, remember, session_again
from .trust import trusted_keys

REBUILD = "re-run `onnx-cooker cook` to rebuild the bundle"
# Blobs under this are read, not mapped (a raw extent starts at 64 KiB: smaller ones hold zstd only).
SMALL_BLOB = 1 << 20
_VERIFY_CHUNK = 1 << 20  # bytes read and hashed at a time when open_bundle checks a blob file
_VERIFY_THREADS = 8  # at most: files read side by side (and a buffer each)


class Bundle:
    """The models of one cooked platform folder; create it with ``open_bundle``."""

    def __init__(
        self,
        root: Path,
        manifest: Mapping[str, Any],
        manifest_sha256: str = "",
        *,
        signed: bool = False,
        map_blobs: bool = True,
    ) -> None:
        self.root = root
        self.platform: str = manifest["platform"]
        self._models: Mapping[str, Mapping[str, Any]] = manifest["models"]
        self._manifest_sha256 = manifest_sha256
        self._signed = signed
        self._map_blobs = map_blobs
        self._hashed: dict[str, tuple[int, ...]] = {}  # name -> identity of the file verify_blob hashed
        self._resolved_root: Path | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._models))

    def info(self, name: str) -> dict[str, Any]:
        """The manifest entry of model ``name`` (a copy)."""
        return json.loads(json.dumps(self._entry(name)))

    def read_blob(self, name: str, *, max_model_size: int = DEFAULT_MAX_MODEL_SIZE) -> bytes:
        """The blob bytes of model ``name``, checked against the manifest's size and sha256."""
        data, path = self._read(name, max_model_size)
        self._check(name, data, path)
        return data

    def _read(self, name: str, max_model_size: int) -> tuple[bytes, Path]:
        entry = self._entry(name)
        stream, size, path = self._open_blob(name, entry, max_model_size)
        with stream:
            # read(n) allocates n bytes up front: the file's own size bounds it, not the manifest's word.
            data = stream.read(min(size, entry["blob_size"]) + 1)
        return data, path

    def _check(self, name: str, data: bytes, path: Path) -> None:
        entry = self._entry(name)
        if len(data) != entry["blob_size"] or hashlib.sha256(data).hexdigest() != entry["blob_sha256"]:
            raise ChecksumMismatchError(
                f"{path}: blob does not match the sha256/size recorded in {MANIFEST_NAME}; the file was "
                "damaged or replaced: re-run `onnx-cooker cook`"
            )

    def verify_blob(self, name: str) -> None:
        """Check model ``name``'s blob file against the manifest's size and sha256, streaming through
        one buffer (a new one per read cost a fresh allocation, and its page faults, each time)."""
        entry = self._entry(name)
        stream, _, path = self._open_blob(name, entry)
        digest, size, limit = hashlib.sha256(), 0, entry["blob_size"] + 1  # one byte more: a longer file
        buffer = memoryview(bytearray(min(_VERIFY_CHUNK, limit)))
        with stream:
            identity = file_identity(os.fstat(stream.fileno()))
            while size < limit and (count := stream.readinto(buffer[: limit - size])):
                digest.update(buffer[:count])  # hashlib lets go of the GIL: blobs hash side by side
                size += count
        if size != entry["blob_size"] or digest.hexdigest() != entry["blob_sha256"]:
            raise ChecksumMismatchError(
                f"{path}: blob does not match the sha256/size recorded in {MANIFEST_NAME}; the file was "
                "damaged or replaced: re-run `onnx-cooker cook`"
            )
        # This very file (inode, size, change time) is now known to hold the manifest's bytes: a
        # session made from it needs no second pass over its raw content (see ``session``).
        self._hashed[name] = identity

    def session(
        self,
        name: str,
        providers: Sequence[ProviderSpec] | None = None,
        *,
        session_options: onnxruntime.SessionOptions | None = None,
        max_model_size: int = DEFAULT_MAX_MODEL_SIZE,
        threads: int | None = None,
        low_memory: bool = False,
        progress: Progress | None = None,
        load_path: str | None = None,
        ep_libraries: Mapping[str, str | os.PathLike[str]] | None = None,
        devices: DeviceSelection | None = None,
    ) -> onnxruntime.InferenceSession:
        """A session for model ``name``; see ``session_from_blob`` for ``providers``, ``threads``,
        ``low_memory``, ``load_path``, ``ep_libraries`` and ``devices`` (plugin EPs) and ``progress``
        (here also ``"read"``, mapping or reading the file, and ``"check"``, its size and identity
        against the manifest, before ``"decompress"`` and ``"session"``). The CRC-32s of raw content
        are checked unless ``open_bundle`` (``verify``) hashed this same file, unchanged since
        (inode, size, modification and change times).

        The blob file is mapped read-only (``open_bundle(map_blobs=False)`` reads it instead): raw
        sections go to onnxruntime straight from the page cache, and the mapping lives as long as
        the last session using it. A signed bundle (``public_keys``) also has the blob's sha256
        checked against the manifest on every load; otherwise the header's identity, the frames'
        checksums and the CRC-32s of raw extents catch a damaged or swapped file.
        """
        report = progress or no_progress
        entry = self._entry(name)
        report("read", 0.0)
        data, fd, path, identity, pin = self._load_pinned(name, entry, max_model_size)
        try:
            report("read", 1.0)
            report("check", 0.0)
            if len(data) != entry["blob_size"] or (self._signed and sha256_of(data) != entry["blob_sha256"]):
                raise ChecksumMismatchError(
                    f"{path}: blob does not match the sha256/size recorded in {MANIFEST_NAME}; the file was "
                    "damaged or replaced: re-run `onnx-cooker cook`"
                )
            report("check", 1.0)
            report("decompress", 0.0)
            # a small blob read (not mapped) and loaded before with the same arguments (smallload.py)
            mine = any(x is not None for x in (fd, session_options, load_path, ep_libraries, devices))
            lane = None if mine else asked(providers, low_memory, max_model_size)
            check = lambda header: self._check_identity(name, entry, header, path)  # noqa: E731
            if (again := session_again(data, lane, report, check)) is not None:
                return again
            # open_bundle hashed this same file (unchanged since: same inode, size and change time):
            # its raw content needs no CRC pass again; zstd frames are checked as they decode anyway.
            # (A signed bundle's load just hashed these very bytes against the manifest.)
            hashed = self._signed or (identity is not None and self._hashed.get(name) == identity)
            checked = check_blob(data, max_model_size=max_model_size, threads=threads, check_raw=not hashed)
            checked.owns_source = fd is not None  # our own mapping: the load path may close it early
            self._check_identity(name, entry, checked.header, path)
            model_file = BlobFile(fd, str(path), by_name=not self._signed) if fd is not None else None
            session = session_from_checked(
                checked,
                providers=providers,
                session_options=session_options,
                low_memory=low_memory,
                progress=report,
                load_path=load_path,
                model_file=model_file,
                ep_libraries=ep_libraries,
                devices=devices,
            )
            if lane is not None:
                remember(checked, session, lane, providers)
        except BundleError as exc:  # named by its file, as the checks here name it
            raise in_file(exc, path) from None
        finally:
            if fd is not None:
                os.close(fd)  # onnxruntime opened (and mapped or read) its own; the mapping needs none
            if pin is not None:
                pin.release()  # the session's own views (if any) now keep the shared mapping alive
        if isinstance(data, mmap.mmap) and not data.closed and (info := load_info(session)) and info.in_place:
            drop_mapped_weights(data, checked)
        return session

    def _load(
        self, name: str, entry: Mapping[str, Any], max_model_size: int
    ) -> tuple[mmap.mmap | bytes, int | None, Path, tuple[int, ...] | None]:
        """``_load_pinned`` without the pin: for a caller that takes its own views of the mapping."""
        data, fd, path, identity, pin = self._load_pinned(name, entry, max_model_size)
        if pin is not None:
            pin.release()
        return data, fd, path, identity

    def _load_pinned(
        self, name: str, entry: Mapping[str, Any], max_model_size: int
    ) -> tuple[mmap.mmap | bytes, int | None, Path, tuple[int, ...] | None, memoryview | None]:
        """The blob file mapped read-only, its descriptor, path, identity and a view that pins the
        mapping until the load's own views hold it; or (``map_blobs=False``, an empty file, or a
        system that cannot map it) its bytes and no descriptor. Loads and sessions of one file share
        one mapping (``shared_mapping``): one descriptor, not one per live session."""
        stream, size, path = self._open_blob(name, entry, max_model_size)
        with stream:
            identity = file_identity(os.fstat(stream.fileno()))
            # A small blob is read: one read costs less than mapping, and nothing of it is used in
            # place that a copy would cost (SMALL_BLOB).
            if self._map_blobs and SMALL_BLOB <= size == entry["blob_size"]:
                # Faulted in at once where the checks read every page anyway (an unhashed or signed
                # blob), and for a small ORT blob (measured faster so, docs/loader.md); else as they
                # are read, which lets a pager drop them. An ONNX blob's load reads little of this
                # mapping (onnx-mapped hands onnxruntime the file and lets it go; file-buffers reads
                # each weight once): populated, a 15 MB blob cost each load about 1 ms more.
                read_all = self._signed or self._hashed.get(name) != identity
                small_ort = size < PAGER_MIN and entry.get("format") == ModelFormat.ORT
                try:
                    pin = shared_mapping(stream.fileno(), size, identity, populate=read_all or small_ort)
                    return pin.obj, os.dup(stream.fileno()), path, identity, pin  # type: ignore[return-value]
                except (OSError, ValueError, OverflowError):
                    stream.seek(0)  # e.g. a file system that cannot map: read it instead
            return stream.read(min(size, entry["blob_size"]) + 1), None, path, identity, None

    def _check_identity(self, name: str, entry: Mapping[str, Any], header: Any, path: Path) -> None:
        """The blob is the one the manifest lists (not another intact blob put in its place)."""
        for key in ("cook_key", "model_sha256"):
            if key in entry and entry[key] != getattr(header, key):
                raise ChecksumMismatchError(
                    f"{path}: blob is not the one {MANIFEST_NAME} lists for {name!r} (its {key} differs); "
                    "the file was replaced: re-run `onnx-cooker cook`"
                )

    def _open_blob(
        self, name: str, entry: Mapping[str, Any], max_model_size: int | None = None
    ) -> tuple[BinaryIO, int, Path]:
        """The open blob file of ``name``, its size and path: a regular file inside the bundle folder
        (and, given ``max_model_size``, a blob the manifest does not declare larger than it allows)."""
        limit = None if max_model_size is None else max_model_size + (max_model_size >> 8) + MAX_HEADER_SIZE
        if limit is not None and entry["blob_size"] > limit:
            raise ManifestError(
                f"{self._where()}: model {name!r} declares an oversized blob ({entry['blob_size']:,} bytes, "
                f"over max_model_size, {max_model_size:,}); raise max_model_size if the model is that large, "
                "else re-run `onnx-cooker cook`"
            )
        path = self.root / entry["file"]
        try:
            if NOFOLLOW and "/" not in entry["file"]:
                # A plain name that is no link lies in the folder: no need to resolve every path
                # component (a fixed cost of each load). A link takes the check below.
                try:
                    stream, size = open_regular(path, nofollow=True)
                    return stream, size, path
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.EMLINK):
                        raise
            real = path.resolve()
            if not real.is_relative_to(self._real_root()):
                raise ManifestError(
                    f"{self._where()}: blob of {name!r} at {path} is a link to {real}, outside the bundle "
                    "folder, which the loader does not follow (a link out may point anywhere); ship the "
                    "bundle's files themselves (copy it with `cp -rL`, or the build's own copy step)"
                )
            stream, size = open_regular(path)
        except FileNotFoundError:
            raise self._gone(name, entry, path) from None
        except (OSError, ValueError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
            fix = "let the game read it (its permissions)" if isinstance(exc, PermissionError) else REBUILD
            raise ManifestError(
                f"{self._where()}: cannot read blob of {name!r} at {path}: "
                f"{getattr(exc, 'strerror', None) or exc}; {fix}"
            ) from None
        return stream, size, path

    def _real_root(self) -> Path:
        """The bundle folder with its links resolved, once (a resolve walks every path component)."""
        if self._resolved_root is None:
            self._resolved_root = self.root.resolve()
        return self._resolved_root

    def _gone(self, name: str, entry: Mapping[str, Any], path: Path) -> BundleError:
        """Why the blob file of ``name`` is missing: a newer manifest replaced this one (open it
        again), the folder or its manifest is gone (moved, deleted, unmounted: no cook did that),
        or the bundle itself lacks the file (re-cook)."""
        manifest = self.root / MANIFEST_NAME
        try:
            stream, size = open_regular(manifest)
            with stream:
                current = hashlib.sha256(stream.read(min(size, MAX_MANIFEST_SIZE) + 1)).hexdigest()
        except OSError as exc:
            if not os.path.isdir(self.root):
                what = f"the bundle folder {self.root} is gone (moved, deleted or unmounted)"
            else:
                what = f"its {MANIFEST_NAME} cannot be read ({exc.strerror or exc})"
            return ManifestError(
                f"{self._where()}: blob of {name!r} ({entry['file']}) is missing and {what} since "
                "open_bundle opened it; open the bundle where it is now (or restore it)"
            )
        if self._manifest_sha256 and current != self._manifest_sha256:
            return BundleReplacedError(
                f"{self._where()}: blob of {name!r} ({entry['file']}) is gone: a newer cook replaced "
                f"the bundle since it was opened; call open_bundle({str(self.root)!r}) again"
            )
        return ManifestError(
            f"{self._where()}: cannot read blob of {name!r} at {path}: No such file or directory; "
            "re-run `onnx-cooker cook` to rebuild the bundle"
        )

    def _entry(self, name: str) -> Mapping[str, Any]:
        try:
            return self._models[name]
        except (KeyError, TypeError):
            close = difflib.get_close_matches(str(name), list(self._models), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; it has {', '.join(self.names) or 'none'}"
            raise UnknownModelError(f"{self._where()} has no model {name!r}{hint}") from None

    def _where(self) -> str:
        return f"bundle {self.root} ({self.platform})"


def open_bundle(
    path: str | Path,
    *,
    verify: bool = True,
    public_keys: Sequence[bytes] | None = None,
    map_blobs: bool = True,
) -> Bundle:
    """Open ``build/<platform>/`` (or its manifest.json) and validate the manifest.

    With ``public_keys`` (raw 32-byte or PEM Ed25519 keys), the manifest must carry a signature by
    one of them. With ``verify`` (the default), every blob the manifest lists is checked now against
    its recorded size and sha256, so a damaged or replaced file is refused at start-up rather than at
    first use; ``read_blob``/``session`` check each blob again when they read it.

    ``map_blobs`` (the default) lets ``Bundle.session`` map blob files instead of reading them. The
    cooker only ever replaces a blob by writing a new file and renaming it, which a mapping
    survives; a tool that truncates or rewrites a mapped blob file in place while a session uses it
    crashes the process with SIGBUS (Linux, macOS; Windows refuses such writes). Pass
    ``map_blobs=False`` where blob files may be changed in place (a network share another machine
    writes, a patcher that edits files): blobs are then read into memory.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"open_bundle takes the path of a bundle folder (build/<platform>) as a str or Path, not "
            f"{type(path).__name__}: to load a blob's bytes, use session_from_blob(data)"
            + ("; for a path held as bytes, os.fsdecode(path)" if isinstance(path, bytes) else "")
        )
    keys = trusted_keys(public_keys) if public_keys is not None else None
    # Absolute now: the bundle stays the one opened whatever the working folder becomes.
    root = Path(path).absolute()
    manifest_path = root / MANIFEST_NAME if root.is_dir() else root
    root = manifest_path.parent
    if keys is not None:
        raw = read_signed_manifest(manifest_path, Path(path), keys)
    else:
        raw = read_manifest(manifest_path, Path(path))[0]
    try:
        manifest = load_json(raw)  # as the C loader reads it
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        fix = open_hint(manifest_path) if manifest_path.name != MANIFEST_NAME else "re-run `onnx-cooker cook`"
        raise ManifestError(f"{manifest_path} is not valid JSON ({exc}); {fix}") from None
    check_manifest(manifest, manifest_path)
    digest = hashlib.sha256(raw).hexdigest()
    bundle = Bundle(root, manifest, digest, signed=keys is not None, map_blobs=map_blobs)
    if verify:  # the blobs side by side, one per core up to 8: the first damaged (in name order) raises
        names = bundle.names
        threads = min(default_threads(), _VERIFY_THREADS)
        run_parallel(lambda index: bundle.verify_blob(names[index]), range(len(names)), threads)
    return bundle
