"""What the numbers were measured on: cores, CPU model, memory, versions, date, project commit."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from .project import REPO

PACKAGES = ("onnx", "onnxruntime", "zstandard", "numpy", "doit")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


def sha_instructions() -> str:
    """Whether the CPU has SHA-256 instructions (x86 SHA extensions, Arm SHA2): the native loader's
    sha256 pass runs about 4x faster with them."""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith(("flags", "Features")):
            flags = line.partition(":")[2].split()
            return "yes" if "sha_ni" in flags or "sha2" in flags else "no"
    return "unknown"


def memory_total() -> str:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    return "unknown"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "dodo.py", "onnx_cooker", "platforms")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} (onnx_cooker/dodo.py/platforms with uncommitted changes)" if dirty else head


def describe() -> dict[str, str]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled").strip() or "unknown"
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": f"{os.cpu_count()} logical, {usable} usable by this process",
        "CPU": cpu_model(),
        "SHA-256 instructions": sha_instructions(),
        "memory": memory_total(),
        "OS": platform.platform(),
        "transparent huge pages": thp,
        "Python": platform.python_version(),
    }
    info |= {name: _version(name) for name in PACKAGES}
    info["project commit"] = commit()
    return info
