"""What every cook cache store shares: the ``Store`` protocol, the cache's settings from the environment
(``CacheConfig``), the roles of an entry's objects, and folder paths from ``COOK_CACHE``.

Standard library only (with ``onnx_cooker.errors``): ``python -m onnx_cooker.farm`` imports it on a file
server with a bare Python. The backends are ``onnx_cooker.farm.folder_store`` and
``onnx_cooker.farm.s3_store``; the cache that uses them is ``onnx_cooker.farm.cache``.

Settings, from the environment (read once by ``dodo.py``):

- ``COOK_CACHE``: ``/path``, ``file:///path`` (a folder: local, NFS or SMB mount) or
  ``s3://bucket/prefix`` (any S3-compatible store; endpoint and credentials the standard AWS way:
  ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ...).
- ``COOK_CACHE_MODE``: ``readwrite`` (default; CI agents) or ``read`` (developer machines).
- ``COOK_CACHE_REQUIRED``: ``1`` turns an unreachable cache into a failed cook.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

from onnx_cooker.errors import CookError

CACHE_ENV = "COOK_CACHE"
MODE_ENV = "COOK_CACHE_MODE"
REQUIRED_ENV = "COOK_CACHE_REQUIRED"
MODES = ("readwrite", "read")
# What one entry holds: role -> object name under the entry's folder.
ROLES = ("blob", "entry", "verify")


class CacheError(CookError):
    """The cache cannot be used (unreachable, refused) or returned something that is not an entry."""


@dataclass(frozen=True)
class CacheConfig:
    """Where the cache is and how to use it; picklable (travels in every ``CookJob``)."""

    url: str
    mode: str = "readwrite"
    required: bool = False
    # A file the cooks of one doit run share (``CookCache``): the first to find the cache unusable
    # writes it, under ``run``, and the others skip the cache without waiting for it in turn.
    run_marker: str = ""
    run: str = ""

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
    if scheme not in ("", "file", "s3") and not is_windows_drive(url):
        raise CookError(f"{CACHE_ENV}={url!r}: use a folder path, file:///path or s3://bucket/prefix")
    return CacheConfig(url=url, mode=mode, required=env.get(REQUIRED_ENV, "") == "1")


def is_windows_drive(url: str) -> bool:
    """Whether ``url`` starts with a Windows drive (``C:``...), which ``urlparse`` takes for a scheme."""
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


def folder_path(url: str) -> Path:
    """A folder cache's path from ``COOK_CACHE``: a path, or ``file:///path`` (``file:///C:/cache``
    on Windows)."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return Path(url).expanduser()
    path = unquote(parsed.path)
    if len(path) > 2 and path[0] == "/" and is_windows_drive(path[1:]):
        path = path[1:]
    return Path(path).expanduser()
