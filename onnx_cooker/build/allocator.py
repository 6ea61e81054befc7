"""Keep freed memory for reuse in the cooking processes (glibc): a cook allocates and frees buffers the
size of the model many times over (its bytes, its protobuf, onnxruntime's copies, the optimized
model, the blob), and glibc serves every allocation over 32 MiB with a fresh ``mmap`` that it unmaps
again at ``free``. Every page of every such buffer is then faulted in and cleared anew: measured on
the bench models, 47 s of system time in a 76 s one-process cold cook, against 17 s (and 45 s of
wall time) when freed memory stays in the process for the next buffer. The peak memory stays about
the same (3.0-3.1 against 3.3 GB there): what is kept is what the process needed a moment before.

``tune_allocator`` is called by ``dodo.py`` at task-loading time, so doit's worker processes (forks)
inherit it, and it sets the matching ``MALLOC_*`` variables for the processes a cook starts (the
runtime check's workers). After each cook, ``release_if_short`` gives the kept memory back when the
machine runs short of it. It does nothing off glibc (Windows, macOS, musl) or with
``COOK_ALLOCATOR=system``. Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

ALLOCATOR_ENV = "COOK_ALLOCATOR"
CHOICES = ("retain", "system")
# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: give memory back only past 2 GiB free at the top
# The same, for processes started from here (glibc reads these when a process starts).
CHILD_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


# After a cook, the memory a process keeps goes back to the system when less than this share of the
# machine's memory is available: `doit -n N` workers each keep their biggest cook's peak otherwise.
# (Giving it back after every cook instead cost 15% of a one-process cold cook: 50.3 s against 42.9.)
LOW_MEMORY_SHARE = 0.25
MEMINFO = Path("/proc/meminfo")
_tuned = False  # set by tune_allocator in this process (doit's forked workers inherit it)

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
    global _tuned
    _tuned = True
    return True


def release_if_short(meminfo: Path = MEMINFO) -> bool:
    """After a cook: give the memory this process keeps back to the system (``malloc_trim``) if the
    allocator was tuned here and the machine is short of memory (``memory_short``); True if done."""
    if not _tuned or not memory_short(_read(meminfo)):
        return False
    return release()


def release() -> bool:
    """Give the free memory this process keeps back to the system now (glibc's ``malloc_trim``)."""
    trim = _glibc("malloc_trim")
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


def memory_short(meminfo: str, share: float = LOW_MEMORY_SHARE) -> bool:
    """Whether ``MemAvailable`` is under ``share`` of ``MemTotal`` in ``/proc/meminfo``'s text (False
    when either is missing)."""
    fields = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0])
    total, available = fields.get("MemTotal"), fields.get("MemAvailable")
    return bool(total and available is not None and available < share * total)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""


def _glibc_mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def _glibc(name: str) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """A function of glibc (None elsewhere: musl, macOS, Windows)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc's own symbol: musl's mallopt ignores these)
        return getattr(libc, name)
    except (OSError, AttributeError, TypeError):
        return None
