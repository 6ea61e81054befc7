"""Keep freed memory for reuse in the cooking processes (glibc): a cook allocates and frees buffers the
size of the model many times over (its bytes, its protobuf, onnxruntime's copies, the optimized
model, the blob), and glibc serves every allocation over 32 MiB with a fresh ``mmap`` that it unmaps
again at ``free``. Every page of every such buffer is then faulted in and cleared anew: measured on
the bench models, 47 s of system time in a 76 s one-process cold cook, against 17 s (and 45 s of
wall time) when freed memory stays in the process for the next buffer. The peak memory stays about
the same (3.0-3.1 against 3.3 GB there): what is kept is what the process needed a moment before.

``tune_allocator`` is called by ``dodo.py`` at task-loading time, so doit's worker processes (forks)
inherit it, and it sets the matching ``MALLOC_*`` variables for the processes a cook starts (the
runtime check's workers). It does nothing off glibc (Windows, macOS, musl) or with
``COOK_ALLOCATOR=system``. Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping, MutableMapping

ALLOCATOR_ENV = "COOK_ALLOCATOR"
CHOICES = ("retain", "system")
# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: give memory back only past 2 GiB free at the top
# The same, for processes started from here (glibc reads these when a process starts).
CHILD_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


# Set by a user who tunes glibc's allocator already: then it is left alone, in every process.
USER_SETTINGS = ("GLIBC_TUNABLES", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def allocator_choice(env: Mapping[str, str]) -> str:
    """``retain`` or ``system``; a value that is neither is one warning line (on stderr) and
    ``system``: a performance setting never stops a build, nor `doit list`."""
    choice = env.get(ALLOCATOR_ENV, "").strip() or CHOICES[0]
    if choice not in CHOICES:
        sys.stderr.write(
            f"warning: {ALLOCATOR_ENV}={choice!r} is not one of {', '.join(CHOICES)}: using system\n"
        )
        return "system"
    return choice


def tune_allocator(env: Mapping[str, str], child_env: MutableMapping[str, str] | None = None) -> bool:
    """Keep freed memory for reuse in this process (and, through ``child_env``, normally
    ``os.environ``, in the processes it starts); True if done. Nothing is changed where the user
    tunes glibc's allocator already (``USER_SETTINGS`` in ``env``)."""
    if allocator_choice(env) == "system" or not sys.platform.startswith("linux"):
        return False
    if any(env.get(name) for name in USER_SETTINGS):
        return False
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    if not (mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return False
    target = os.environ if child_env is None else child_env
    target.update(CHILD_ENV)
    return True


def _glibc_mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc's own symbol: musl's mallopt ignores these)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt
