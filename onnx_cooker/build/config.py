"""The build's configuration from the environment: the assets, platforms, build and runtimes folders
(``COOK_*_DIR``), the signing key (``COOK_SIGNING_KEY``) and the other ``COOK_*`` settings read at
task-loading time.

Imported by ``dodo.py`` on every doit command: standard library only (and ``platformdirs``, a few
milliseconds, imported only for the default runtimes folder).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from onnx_cooker.errors import CookError, ProfileError

# Every COOK_* variable the cooker reads (docs/cooking.md and docs/build-farms.md list them), but
# the COOK_SET_<KEY> overrides, which onnx_cooker.settings checks key by key.
VARIABLES = frozenset({
    "COOK_ASSETS_DIR", "COOK_PLATFORMS_DIR", "COOK_BUILD_DIR", "COOK_RUNTIMES_DIR", "COOK_SIGNING_KEY",
    "COOK_PIP_TIMEOUT", "COOK_ALLOCATOR", "COOK_ISOLATE", "COOK_STRICT", "COOK_CACHE", "COOK_CACHE_MODE",
    "COOK_CACHE_REQUIRED", "COOK_SHARD",
})  # fmt: skip


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """A warning line for each ``COOK_*`` variable the cooker does not read (``COOK_BUILDDIR``,
    ``COOK_CACHE_MOD=read``: silently nothing, where a developer machine then uploads to the shared
    cache), with the variable it may be."""
    import difflib

    lines = []
    for variable in sorted(env):
        if not variable.startswith("COOK_") or variable.startswith("COOK_SET_") or variable in VARIABLES:
            continue
        close = difflib.get_close_matches(variable, VARIABLES, n=1, cutoff=0.7)
        hint = f"did you mean {close[0]}?" if close else f"the variables are {', '.join(sorted(VARIABLES))}"
        lines.append(f"warning: environment variable {variable} is not one the cooker reads; {hint}\n")
    return lines


@dataclass(frozen=True, kw_only=True)
class Folders:
    assets: Path
    platforms: Path
    build: Path
    runtimes: Path
    signing_key: Path | None  # COOK_SIGNING_KEY: sign every manifest with this Ed25519 key


def folders(env: Mapping[str, str], root: Path) -> Folders:
    """The assets, platforms and build folders; ``COOK_ASSETS_DIR`` etc. override them (relative to
    ``root``). The runtimes folder is shared by every build on the machine: the user's cache folder, or
    ``COOK_RUNTIMES_DIR``; the signing key ``COOK_SIGNING_KEY`` (both relative to the folder the command
    was started in)."""

    def pick(variable: str, default: str) -> Path:
        return (root / env.get(variable, default)).resolve()

    return Folders(
        assets=pick("COOK_ASSETS_DIR", "assets"),
        platforms=pick("COOK_PLATFORMS_DIR", "platforms"),
        build=pick("COOK_BUILD_DIR", "build"),
        runtimes=runtimes_folder(env),
        signing_key=(_start_folder() / env["COOK_SIGNING_KEY"]).resolve()
        if env.get("COOK_SIGNING_KEY")
        else None,
    )


def _start_folder() -> Path:
    """The folder the command was started in: relative ``COOK_RUNTIMES_DIR`` and ``COOK_SIGNING_KEY``
    are the user's, from there (doit moves into the folder of dodo.py before loading it, and
    remembers where it started)."""
    loader = sys.modules.get("doit.loader")
    return Path(getattr(loader, "initial_workdir", None) or os.getcwd())


def runtimes_folder(env: Mapping[str, str]) -> Path:
    """Where the runtime check's onnxruntime environments are cached, for every build folder of this
    user: ``COOK_RUNTIMES_DIR``, else ``<the user's cache folder>/onnx-cooker/runtimes``."""
    chosen = env.get("COOK_RUNTIMES_DIR")
    if chosen:
        return (_start_folder() / chosen).resolve()
    import platformdirs  # only here: ~5 ms that a build with COOK_RUNTIMES_DIR never pays

    return (Path(platformdirs.user_cache_dir("onnx-cooker", appauthor=False)) / "runtimes").resolve()


def environment() -> dict[str, str]:
    """The process environment, read once at the edge (dodo.py) and passed in everywhere else."""
    return dict(os.environ)


DEFAULT_PIP_TIMEOUT = 300.0


def _seconds(env: Mapping[str, str], variable: str, default: float) -> float:
    text = env.get(variable, "")
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ProfileError([f"{variable}={text!r}: expected a number of seconds above 0"])
    return value


def _key_digest(signing_key: Path | None) -> str | None:
    if signing_key is None:
        return None
    try:
        return hashlib.sha256(signing_key.read_bytes()).hexdigest()
    except OSError as exc:
        raise CookError(f"COOK_SIGNING_KEY={signing_key}: cannot read the key ({exc.strerror})") from None
