"""A cooked platform folder (``build/<platform>/``): its manifest and the blobs it lists."""

from __future__ import annotations

import difflib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

import onnxruntime

from .blob import DEFAULT_MAX_MODEL_SIZE, MAX_HEADER_SIZE, unpack_blob
from .constants import MANIFEST_NAME, MANIFEST_VERSION, SIGNATURE_NAME
from .errors import BundleError, BundleReplacedError, ChecksumMismatchError, ManifestError, UnknownModelError
from .session import Progress, ProviderSpec, no_progress, session_from_unpacked
from .trust import SIGNATURE_SIZE, verify_signature

MAX_MANIFEST_SIZE = 64 << 20
_REQUIRED_ENTRY_FIELDS: dict[str, type] = {"file": str, "format": str, "blob_sha256": str, "blob_size": int}


class Bundle:
    """The models of one cooked platform folder; create it with ``open_bundle``."""

    def __init__(self, root: Path, manifest: Mapping[str, Any], manifest_sha256: str = "") -> None:
        self.root = root
        self.platform: str = manifest["platform"]
        self._models: Mapping[str, Mapping[str, Any]] = manifest["models"]
        self._manifest_sha256 = manifest_sha256

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
        if entry["blob_size"] > max_model_size + (max_model_size >> 8) + MAX_HEADER_SIZE:
            raise ManifestError(f"{self._where()}: model {name!r} declares an oversized blob")
        stream, size, path = self._open_blob(name, entry)
        with stream:
            # read(n) allocates n bytes up front: the file's own size bounds it, not the manifest's word.
            data = stream.read(min(size, entry["blob_size"]) + 1)
        return data, path

    def _check(self, name: str, data: bytes, path: Path) -> None:
        entry = self._entry(name)
        if len(data) != entry["blob_size"] or hashlib.sha256(data).hexdigest() != entry["blob_sha256"]:
            raise ChecksumMismatchError(
                f"{path}: blob does not match the sha256/size recorded in {MANIFEST_NAME}; the file was "
                "damaged or replaced: re-run `doit cook`"
            )

    def verify_blob(self, name: str) -> None:
        """Check model ``name``'s blob file against the manifest's size and sha256, streaming."""
        entry = self._entry(name)
        stream, _, path = self._open_blob(name, entry)
        digest, size = hashlib.sha256(), 0
        with stream:
            while chunk := stream.read(min(1 << 20, entry["blob_size"] + 1 - size)):
                digest.update(chunk)
                size += len(chunk)
        if size != entry["blob_size"] or digest.hexdigest() != entry["blob_sha256"]:
            raise ChecksumMismatchError(
                f"{path}: blob does not match the sha256/size recorded in {MANIFEST_NAME}; the file was "
                "damaged or replaced: re-run `doit cook`"
            )

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
    ) -> onnxruntime.InferenceSession:
        """A session for model ``name``; see ``session_from_blob`` for ``providers``, ``threads``,
        ``low_memory`` and ``progress`` (here also ``"read"``, the file read, and ``"check"``, its sha256
        against the manifest's, before ``"decompress"`` and ``"session"``)."""
        report = progress or no_progress
        report("read", 0.0)
        data, path = self._read(name, max_model_size)
        report("read", 1.0)
        report("check", 0.0)
        self._check(name, data, path)
        report("check", 1.0)
        # read_blob just checked the whole blob against the manifest's sha256 (tampering); the frames'
        # own checksums catch damage: no second hash of the model.
        report("decompress", 0.0)
        unpacked = unpack_blob(
            data, max_model_size=max_model_size, threads=threads, check_sha256=False, check_raw=False
        )
        report("decompress", 1.0)
        # Unless raw weights are used in place, the compressed blob is not needed any more, and
        # onnxruntime is about to copy the model: let it go first, a blob's worth off the peak.
        del data
        report("session", 0.0)
        session = session_from_unpacked(
            unpacked, providers=providers, session_options=session_options, low_memory=low_memory
        )
        report("session", 1.0)
        return session

    def _open_blob(self, name: str, entry: Mapping[str, Any]) -> tuple[BinaryIO, int, Path]:
        """The open blob file of ``name``, its size and path: a regular file inside the bundle folder."""
        path = self.root / entry["file"]
        try:
            real = path.resolve()
            if not real.is_relative_to(self.root.resolve()):
                raise ManifestError(
                    f"{self._where()}: blob of {name!r} at {path} is a link to {real}, outside the bundle "
                    "folder; re-run `doit cook` to rebuild the bundle"
                )
            stream, size = _open_regular(path)
        except FileNotFoundError:
            if self._replaced():
                raise BundleReplacedError(
                    f"{self._where()}: blob of {name!r} ({entry['file']}) is gone: a newer cook replaced "
                    f"the bundle since it was opened; call open_bundle({str(self.root)!r}) again"
                ) from None
            raise ManifestError(
                f"{self._where()}: cannot read blob of {name!r} at {path}: No such file or directory; "
                "re-run `doit cook` to rebuild the bundle"
            ) from None
        except (OSError, ValueError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
            raise ManifestError(
                f"{self._where()}: cannot read blob of {name!r} at {path}: "
                f"{getattr(exc, 'strerror', None) or exc}; re-run `doit cook` to rebuild the bundle"
            ) from None
        return stream, size, path

    def _replaced(self) -> bool:
        """Whether manifest.json on disk is no longer the one this Bundle was opened from."""
        try:
            stream, size = _open_regular(self.root / MANIFEST_NAME)
            with stream:
                current = hashlib.sha256(stream.read(min(size, MAX_MANIFEST_SIZE) + 1)).hexdigest()
        except OSError:
            return True
        return bool(self._manifest_sha256) and current != self._manifest_sha256

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
    path: str | Path, *, verify: bool = True, public_keys: Sequence[bytes] | None = None
) -> Bundle:
    """Open ``build/<platform>/`` (or its manifest.json) and validate the manifest.

    With ``public_keys`` (raw 32-byte or PEM Ed25519 keys), the manifest must carry a signature by
    one of them. With ``verify`` (the default), every blob the manifest lists is checked now against
    its recorded size and sha256, so a damaged or replaced file is refused at start-up rather than at
    first use; ``read_blob``/``session`` check each blob again when they read it.
    """
    root = Path(path)
    manifest_path = root / MANIFEST_NAME if root.is_dir() else root
    root = manifest_path.parent
    try:
        stream, size = _open_regular(manifest_path)
        with stream:
            raw = stream.read(min(size, MAX_MANIFEST_SIZE) + 1)
    except (OSError, ValueError) as exc:  # ValueError: a path with NUL or a lone surrogate
        raise ManifestError(
            f"cannot read {manifest_path}: {getattr(exc, 'strerror', None) or exc}; point open_bundle at a "
            "folder written by `doit cook` (build/<platform>/)"
        ) from None
    if len(raw) > MAX_MANIFEST_SIZE:
        raise ManifestError(f"{manifest_path} is larger than {MAX_MANIFEST_SIZE >> 20} MiB; not a manifest")
    if public_keys is not None:
        verify_signature(raw, _read_signature(root), public_keys, str(manifest_path))
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestError(f"{manifest_path} is not valid JSON ({exc}); re-run `doit cook`") from None
    _check_manifest(manifest, manifest_path)
    bundle = Bundle(root, manifest, hashlib.sha256(raw).hexdigest())
    if verify:
        for name in bundle.names:
            bundle.verify_blob(name)
    return bundle


def _open_regular(path: Path) -> tuple[BinaryIO, int]:
    """Open ``path`` for reading, and its size, if it is a regular file: opening a named pipe blocks
    until a writer comes (for ever), and a device (/dev/zero) never ends."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return os.fdopen(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


def _read_signature(root: Path) -> bytes | None:
    try:
        stream, _ = _open_regular(root / SIGNATURE_NAME)
        with stream:
            return stream.read(SIGNATURE_SIZE + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(f"cannot read {root / SIGNATURE_NAME}: {exc.strerror or exc}") from None


def _check_manifest(manifest: Any, where: Path) -> None:
    def fail(problem: str) -> BundleError:
        return ManifestError(f"{where}: {problem}; re-run `doit cook` to rewrite it")

    if not isinstance(manifest, dict):
        raise fail("the top level is not a JSON object")
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        raise fail(
            f"manifest_version is {manifest.get('manifest_version')!r}, this loader reads {MANIFEST_VERSION}"
        )
    if not isinstance(manifest.get("platform"), str) or not isinstance(manifest.get("models"), dict):
        raise fail("'platform' (string) and 'models' (object) are required")
    for name, entry in manifest["models"].items():
        if not isinstance(entry, dict):
            raise fail(f"entry {name!r} is not an object")
        for key, expected in _REQUIRED_ENTRY_FIELDS.items():
            value = entry.get(key)
            if not isinstance(value, expected) or isinstance(value, bool):
                raise fail(f"entry {name!r} lacks {key!r} ({expected.__name__})")
        if entry["blob_size"] < 0:
            raise fail(f"entry {name!r} has a negative blob_size")
        file = PurePosixPath(entry["file"])
        unsafe = any(char in entry["file"] for char in "\\:\0")  # Windows drives, NTFS streams, NUL
        if file.is_absolute() or ".." in file.parts or unsafe or not file.parts:
            raise fail(f"entry {name!r} points outside its folder ({entry['file']!r})")
