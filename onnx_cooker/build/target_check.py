"""The dynamic runtime check: run every blob of a platform in the target's exact onnxruntime.

Each needed onnxruntime version gets an isolated virtual environment, made on first use with the
stock ``venv`` and ``pip`` from the package registry and cached for every build folder of the user
(``<user cache folder>/onnx-cooker/runtimes`` or ``COOK_RUNTIMES_DIR``), safely when two cooks need
the same one at once. There is no DirectML wheel off Windows: the CPU wheel of the same version
stands in for it, which loads the same model formats.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from onnx_cooker.build.check_messages import (
    crashed_message,
    failed_message,
    models_after_crash,
    no_such_version,
)
from onnx_cooker.cook.job import RuntimeCheck
from onnx_cooker.cook.key import tool_versions
from onnx_cooker.errors import CookError
from onnx_cooker.fsutil import STALE_TEMP_SECONDS, write_json
from onnx_cooker.runtime.compat import parse_version
from onnx_cooker.settings.eprules import installed_for

CHECK_TIMEOUT = 1800
# pip's own per-connection time-out: a registry that accepts connections but never answers fails
# in seconds rather than at the whole install's time-out.
PIP_SOCKET_TIMEOUT = 30
# Written last into a finished environment (after pip and the probe); without it the folder is not used.
READY_NAME = "onnx-cooker-ready.json"
PROBE = "import numpy, zstandard, onnxruntime; print(onnxruntime.__version__)"
PROBE_TIMEOUT = 120
# How much longer than COOK_PIP_TIMEOUT a process waits for another one making the same environment.
LOCK_GRACE = 600
OFF_HINT = "set `runtime_check: false` with a `runtime_check_off_reason` in {profile}"
PACKAGE = Path(__file__).resolve().parents[1]  # onnx_cooker/
# What the worker needs of this package; copied beside it so the target environment imports nothing
# of the cooking environment (a PYTHONPATH to our site-packages would bring its onnxruntime along).
WORKER_FILES = (
    "__init__.py",
    "layout.py",
    "cook/__init__.py",
    "cook/compare.py",
    "build/__init__.py",
    "build/target_check_worker.py",
    "build/load_failure.py",
    "build/placement.py",
    "settings/__init__.py",
    "settings/advice.py",
)
WORKER_START = "import sys; sys.path.insert(0, sys.argv.pop(1)); "
WORKER_START += "from onnx_cooker.build.target_check_worker import main; sys.exit(main(sys.argv[1:]))"


class RuntimeCheckError(CookError):
    """A blob does not load or compute correctly in the target's onnxruntime, or no such runtime;
    ``report``: the check's report where it ran (what the models that passed did)."""

    def __init__(self, problem: str, *, report: dict[str, Any] | None = None) -> None:
        super().__init__(problem)
        self.report = report


def environment_dir(
    runtimes_dir: Path, version: str, package: str = "onnxruntime", extras: Sequence[str] = ()
) -> Path:
    """Where the environment of ``package==version`` (plus the requirements ``extras``) lives."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    if extras:  # e.g. a plugin EP's package: its own environment, named by what it holds
        tag += "-" + hashlib.sha256("\n".join(sorted(extras)).encode()).hexdigest()[:10]
    return runtimes_dir / f"{package}-{version}-{tag}"


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_runtime(
    version: str,
    runtimes_dir: Path,
    profile: Path,
    install_timeout: float = 300.0,
    *,
    package: str = "onnxruntime",
    extras: Sequence[str] = (),
) -> Path:
    """The interpreter of an environment holding exactly ``package==version`` (an onnxruntime build:
    ``onnxruntime``, ``onnxruntime-openvino``, ...) and the requirements ``extras``; made if missing.

    The environments are shared by every build folder and every process of the machine's user. One
    is made under its own lock, in a temp folder renamed into place with its ready marker inside; a
    process that finds the lock taken waits, then uses the finished environment. A folder without the
    marker (an older cooker's, or one half made) is used only once it imports that exact version.
    """
    plain = package == "onnxruntime" and not extras
    if plain and parse_version(tool_versions()["onnxruntime"]) == parse_version(version):
        return Path(sys.executable)  # the cook itself ran this exact version
    final = environment_dir(runtimes_dir, version, package, extras)
    what = f"{package} {version}{' + ' + ', '.join(extras) if extras else ''}"
    if _finished(final):
        return _python(final)
    from filelock import FileLock, Timeout

    wait = install_timeout + LOCK_GRACE
    try:
        runtimes_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(lock_path(final))
        try:
            lock.acquire(blocking=False)
        except Timeout:
            _say(f"waiting for another process making the {what} environment in {final}")
            lock.acquire(timeout=wait)
    except Timeout:
        raise RuntimeCheckError(
            f"{profile}: another process has been making the {what} environment in "
            f"{final} for over {wait:g} s (it holds {lock_path(final)}); stop it, or point "
            "COOK_RUNTIMES_DIR at another folder"
        ) from None
    except OSError as exc:
        raise _unwritable(runtimes_dir, profile, exc) from None
    try:
        if not _finished(final) and not _adopt(final, version):
            _make(version, final, profile, install_timeout, [f"{package}=={version}", *extras])
    except OSError as exc:  # an older cooker's environment this user cannot mark or remove
        raise _unwritable(runtimes_dir, profile, exc) from None
    finally:
        lock.release()
    return _python(final)


def lock_path(env_dir: Path) -> Path:
    """The lock a process holds while it makes (or checks) the environment ``env_dir``."""
    return env_dir.with_name(f".{env_dir.name}.lock")


def _finished(env_dir: Path) -> bool:
    return (env_dir / READY_NAME).is_file() and _python(env_dir).is_file()


def _probe(python: Path, version: str) -> str | None:
    """None when ``python`` imports onnxruntime ``version`` and what the worker needs; else why not."""
    command = [str(python), "-I", "-c", PROBE]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return " ".join(done.stderr.strip().splitlines()[-3:])
    found = (done.stdout.strip().splitlines() or [""])[-1]
    try:
        same = parse_version(found) == parse_version(version)
    except ValueError:
        same = False
    return None if same else f"it imports onnxruntime {found!r}"


def _mark_ready(env_dir: Path, version: str) -> None:
    """Written last: an environment without it is never used as it is."""
    write_json(env_dir / READY_NAME, {"onnxruntime": version, "python": sys.version.split()[0]})


def _adopt(final: Path, version: str) -> bool:
    """Mark an unmarked environment (an older cooker's) ready, if it imports exactly ``version``."""
    if final.is_symlink() or not _python(final).is_file() or _probe(_python(final), version) is not None:
        return False
    _mark_ready(final, version)
    return True


def _discard(path: Path) -> None:
    """Remove a half-made environment: first renamed to a staging name, which the sweep also removes
    should this process be killed part way."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    aside = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    path.rename(aside)
    shutil.rmtree(aside, ignore_errors=True)


def _make(version: str, final: Path, profile: Path, install_timeout: float, requirements: list[str]) -> None:
    """Build the environment ``final`` from ``requirements`` (``requirements[0]`` the onnxruntime
    build) from scratch; the caller holds its lock."""
    runtimes_dir = final.parent
    try:
        for leftover in runtimes_dir.glob(f".{final.name}.*"):  # only the lock holder builds: all dead
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
        if final.exists() or final.is_symlink():
            _say(f"{final} is unfinished or broken (no ready marker, no working onnxruntime); making it anew")
            _discard(final)
        sweep_stale_staging(runtimes_dir)
        staging = make_staging(runtimes_dir, final.name)
    except OSError as exc:
        raise _unwritable(runtimes_dir, profile, exc) from None
    what = " + ".join(r.replace("==", " ") for r in requirements)
    _say(f"creating the {what} environment for the runtime check in {final}")
    try:
        try:
            venv.EnvBuilder(with_pip=True, clear=True).create(staging)
        except subprocess.CalledProcessError as exc:
            raise RuntimeCheckError(
                f"{profile}: cannot create a virtual environment for the runtime check ({exc}); install "
                "Python's venv and ensurepip (e.g. apt-get install python3-venv), or set `runtime_check: "
                f"false` with a `runtime_check_off_reason` in {profile}"
            ) from None
        command = [str(_python(staging)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        command += ["--timeout", str(PIP_SOCKET_TIMEOUT)]
        # onnxruntime before 1.19 was built against numpy 1.x and does not import under numpy 2.
        numpy = "numpy<2" if parse_version(version) < (1, 19, 0) else "numpy"
        command += [*requirements, numpy, "zstandard"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=install_timeout, check=False)
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()
            if missing := no_such_version(output, requirements[0]):
                raise RuntimeCheckError(f"{profile}: {missing}; fix `runtime_version` (or `runtime_package`)")
            tail = " ".join(output.splitlines()[-3:])
            raise RuntimeCheckError(
                f"{profile}: cannot install {' '.join(requirements)} for the runtime check from the package "
                f"registry ({tail}). If the registry cannot be reached from this machine, or no wheel of "
                "that version exists for it, set `runtime_check: false` with a `runtime_check_off_reason` "
                f"in {profile}"
            )
        failure = _probe(_python(staging), version)
        if failure is not None:
            raise RuntimeCheckError(
                f"{profile}: {requirements[0]} installed for the runtime check does not import "
                f"({failure}); {OFF_HINT.format(profile=profile)}"
            )
        _mark_ready(staging, version)
        try:
            staging.rename(final)
        except OSError:
            if not (_finished(final) or _adopt(final, version)):  # an older cooker, which takes no lock
                raise
    except subprocess.TimeoutExpired:
        raise RuntimeCheckError(
            f"{profile}: installing {requirements[0]} for the runtime check timed out after "
            f"{install_timeout:g} s (COOK_PIP_TIMEOUT); if the package registry cannot be reached from "
            f"this machine, {OFF_HINT.format(profile=profile)}"
        ) from None
    except OSError as exc:
        raise RuntimeCheckError(
            f"{profile}: cannot build the runtime-check environment in {runtimes_dir} "
            f"({exc.strerror or exc}: {exc.filename or staging}); free disk space or fix the folder's "
            "permissions"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _unwritable(runtimes_dir: Path, profile: Path, exc: OSError) -> RuntimeCheckError:
    return RuntimeCheckError(
        f"{profile}: cannot create the runtime-check environment in {runtimes_dir} "
        f"({exc.strerror or exc}); make that folder writable for this user (a cache shared between "
        "users needs group write permission), or point COOK_RUNTIMES_DIR at a folder of your own"
    )


def _say(line: str) -> None:
    sys.stderr.write(f"runtime check: {line}\n")  # one write: whole under `doit -n`


def runtime_library(version: str, runtimes_dir: Path, profile: Path) -> Path:
    """The onnxruntime C API library (``libonnxruntime.so.<version>``) of the environment holding
    exactly ``onnxruntime==version`` (made if missing): what the native loader's tools load."""
    python = ensure_runtime(version, runtimes_dir, profile)
    found = subprocess.run(
        [
            str(python),
            "-c",
            "import onnxruntime, pathlib; print(pathlib.Path(onnxruntime.__file__).parent / 'capi')",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    libraries = sorted(Path(found).glob("libonnxruntime.so.*"))
    if not libraries:
        raise RuntimeCheckError(
            f"{profile}: onnxruntime {version} in {found} has no libonnxruntime.so.<version>"
        )
    return libraries[0]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_staging(runtimes_dir: Path, name: str) -> Path:
    """A new folder to build an environment in. mkdtemp makes it 0700; it gets the umask's mode, so
    that a cache shared between users (COOK_RUNTIMES_DIR on a shared disk) is usable by the group."""
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=runtimes_dir))
    staging.chmod(0o777 & ~_umask())
    return staging


def sweep_stale_staging(runtimes_dir: Path) -> None:
    """Remove the staging folders of environment builds killed part way (20-120 MB each): those
    untouched for STALE_TEMP_SECONDS whose environment no process is making (its lock is free)."""
    from filelock import FileLock, Timeout

    cutoff = time.time() - STALE_TEMP_SECONDS
    for staging in runtimes_dir.glob(".onnxruntime-*"):
        try:
            if not staging.is_dir() or staging.is_symlink() or staging.stat().st_mtime >= cutoff:
                continue
            lock = FileLock(runtimes_dir / f"{staging.name.rsplit('.', 1)[0]}.lock")
            lock.acquire(blocking=False)
        except (OSError, Timeout):
            continue
        try:
            shutil.rmtree(staging, ignore_errors=True)
        finally:
            lock.release()


def run_check(check: RuntimeCheck) -> dict[str, Any]:
    """Load and run every blob of the platform in the target onnxruntime; raise if any fails."""
    installs = installed_for(check.runtime_package)
    python = ensure_runtime(
        check.runtime_version, check.runtimes_dir, check.profile, check.install_timeout, package=installs
    )
    with tempfile.TemporaryDirectory(prefix=".worker-", dir=check.platform_dir) as tmp:
        package = Path(tmp) / "onnx_cooker"
        shutil.copytree(
            PACKAGE / "runtime", package / "runtime", ignore=shutil.ignore_patterns("__pycache__")
        )
        for name in WORKER_FILES:
            (package / name).parent.mkdir(exist_ok=True)
            shutil.copy2(PACKAGE / name, package / name)
        # -I: no PYTHONPATH, no user site; only the target environment and the copied loader.
        package = (
            check.runtime_package
            if installs == check.runtime_package
            else f"{installs} (for {check.runtime_package})"
        )
        command = [str(python), "-I", "-c", WORKER_START, tmp, package, str(check.platform_dir), *check.names]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeCheckError(f"{check.platform}: the runtime check timed out") from None
    if done.returncode != 0:
        crashed = crashed_message(check, done.returncode, done.stderr)
        raise RuntimeCheckError(crashed + _the_others(check, models_after_crash(check, done.stderr)))
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if parse_version(report["onnxruntime"]) != parse_version(check.runtime_version):
        raise RuntimeCheckError(
            f"{check.platform}: the runtime check ran onnxruntime {report['onnxruntime']}, not "
            f"{check.runtime_version}; delete "
            f"{environment_dir(check.runtimes_dir, check.runtime_version, installs)}"
        )
    failures = _failures(report, check)
    if failures:
        raise RuntimeCheckError(failed_message(check, report, failures), report=report)
    write_json(check.result_path, report)
    return report


def _the_others(check: RuntimeCheck, rest: tuple[str, ...]) -> str:
    """After a crash on one model, the models after it, in a worker of their own (the crash hid their
    failures until the next run): a sentence to add to the crash's."""
    if not rest:
        return ""
    scratch = check.result_path.with_name(f".rest-{os.getpid()}.json")  # not the platform's report
    try:
        run_check(replace(check, names=rest, result_path=scratch))
    except RuntimeCheckError as exc:
        return f"\nand the models after it: {exc}"
    finally:
        scratch.unlink(missing_ok=True)
    return f"\n(the {len(rest)} model(s) after it load and match)"


def _failures(report: dict[str, Any], check: RuntimeCheck) -> list[str]:
    models = report["models"]
    return [f"{name}: {models[name]['error']}" for name in check.names if not models.get(name, {}).get("ok")]
