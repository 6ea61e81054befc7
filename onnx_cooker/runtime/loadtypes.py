"""What the load paths are called, and what a prepared load hands onnxruntime (``loadpaths.py``
chooses and prepares them)."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .files import has_memfd


class LoadPath(str, Enum):
    ONNX_INLINE = "onnx-inline"
    ONNX_FILE_BUFFERS = "onnx-file-buffers"
    ONNX_SHARED_INITIALIZERS = "onnx-shared-initializers"
    ONNX_EXTERNAL_INITIALIZERS = "onnx-external-initializers"
    ONNX_MAPPED = "onnx-mapped"
    ORT_MAPPED = "ort-mapped"
    ORT_SHARED_INITIALIZERS = "ort-shared-initializers"
    ORT_FILE = "ort-file"
    ORT_BYTES = "ort-bytes"

    @property
    def in_place(self) -> bool:
        """Whether onnxruntime uses the blob's (or the memfd's) bytes for the weights, uncopied."""
        return self in IN_PLACE


IN_PLACE = frozenset(
    {
        LoadPath.ONNX_FILE_BUFFERS,
        LoadPath.ONNX_SHARED_INITIALIZERS,
        LoadPath.ONNX_EXTERNAL_INITIALIZERS,  # after a copy it throws away: slower, not bigger
        LoadPath.ONNX_MAPPED,
        LoadPath.ORT_MAPPED,
        LoadPath.ORT_SHARED_INITIALIZERS,
    }
)


@dataclass
class BlobFile:
    """The open blob file a blob was mapped from (``Bundle.session``): onnxruntime may map it itself."""

    fd: int
    path: str
    # Whether onnxruntime may open it again by name (onnx-mapped): not for a signed bundle, whose
    # blob's sha256 was checked on these bytes and must not be swapped in between.
    by_name: bool = True

    def onnxruntime_path(self) -> str:
        """A path naming exactly the file that was checked (on Linux its descriptor, not its name)."""
        return f"/proc/self/fd/{self.fd}" if has_memfd() else self.path


@dataclass
class Prepared:
    """What to hand ``InferenceSession``, what the session must keep alive, and what to undo after;
    ``fallback(why)``: where onnxruntime refuses this path (``why``: its message), the same options
    completed for a copying path, its ``path`` set (see ``prepare``); None where that refusal would
    meet the copying path too."""

    model: bytes | str
    keep: list[Any] = field(default_factory=list)
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    fallback: Callable[[str], Prepared | None] | None = None
    # After the session is made, before ``cleanup``: why it must be thrown away for the fallback.
    distrust: Callable[[], str | None] | None = None
    # The path taken where it is not the one asked for (nothing to share: ort-mapped).
    path: LoadPath | None = None
    # After the session is made: raises OSError if what onnxruntime read may not be what was checked.
    confirm: Callable[[], None] | None = None
    # The descriptor of the file onnxruntime maps itself for the whole session (the blob file, its
    # flatbuffer first): its pages can be let go while the session is built (pager.py).
    mapped_fd: int | None = None
    # (mapping, start, length): weights onnxruntime reads in place from the loader's own mapping of
    # the blob file, whose pages can be let go while the session is built (pager.ExtentPager).
    own_pages: tuple[mmap.mmap, int, int] | None = None


@dataclass(frozen=True)
class LoadInfo:
    """How a session was loaded (``load_info(session)``): the load path and whether its weights are
    onnxruntime's own copy or the blob's bytes used in place."""

    path: LoadPath
    in_place: bool
    providers: tuple[str, ...]
    refused: str | None = None  # the faster path onnxruntime refused for this model first, and why
