"""A folder cook cache store (local, NFS or SMB mount): objects as files, written through a temp file
and a rename, shared with build folders by hard link where the file system allows it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from onnx_cooker.farm.store import CacheError
from onnx_cooker.fsutil import atomic_write, copy_hashed, file_sha256, temp_beside


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
        """The index's (or report's) mtime is its last use: ``python -m onnx_cooker.farm prune`` removes
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
