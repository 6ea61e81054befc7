"""The dynamic runtime check: run every blob of a platform in the target's exact onnxruntime.

Each needed onnxruntime version gets an isolated virtual environment, made on first use with the
stock ``venv`` and ``pip`` from the package registry and cached (``build/.runtimes`` or
``COOK_RUNTIMES_DIR``). There is no DirectML wheel off Windows: the CPU wheel of the same version
stands in for it, which loads the same model formats.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.cook.job import RuntimeCheck
from pipeline.cook.key import tool_versions
from pipeline.errors import CookError
from pipeline.fsutil import STALE_TEMP_SECONDS, write_json
from pipeline.runtime.compat import parse_version

CHECK_TIMEOUT = 1800
# pip's own per-connection time-out: a registry that accepts connections but never answers fails
# in seconds rather than at the whole install's time-out.
PIP_SOCKET_TIMEOUT = 30
OFF_HINT = "set `runtime_check: false` with a `runtime_check_off_reason` in {profile}"
PACKAGE = Path(__file__).resolve().parents[1]  # pipeline/
# What the worker needs of this package; copied beside it so the target environment imports nothing
# of the cooking environment (a PYTHONPATH to our site-packages would bring its onnxruntime along).
WORKER_FILES = (
    "__init__.py",
    "layout.py",
    "cook/__init__.py",
    "cook/compare.py",
    "build/__init__.py",
    "build/target_check_worker.py",
)
WORKER_START = "import sys; sys.path.insert(0, sys.argv.pop(1)); "
WORKER_START += "from pipeline.build.target_check_worker import main; sys.exit(main(sys.argv[1:]))"


class RuntimeCheckError(CookError):
    """A blob does not load or compute correctly in the target's onnxruntime, or no such runtime."""


def environment_dir(runtimes_dir: Path, version: str) -> Path:
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return runtimes_dir / f"onnxruntime-{version}-{tag}"


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_runtime(version: str, runtimes_dir: Path, profile: Path, install_timeout: float = 300.0) -> Path:
    """The interpreter of an environment holding exactly ``onnxruntime==version``; made if missing.

    The environment is built in a temp folder and renamed into place, so a killed or concurrent
    build never leaves a half-made one under the final name.
    """
    if parse_version(tool_versions()["onnxruntime"]) == parse_version(version):
        return Path(sys.executable)  # the cook itself ran this exact version
    final = environment_dir(runtimes_dir, version)
    if _python(final).is_file():
        return _python(final)
    try:
        runtimes_dir.mkdir(parents=True, exist_ok=True)
        sweep_stale_staging(runtimes_dir)
        staging = make_staging(runtimes_dir, final.name)
    except OSError as exc:
        raise RuntimeCheckError(
            f"{profile}: cannot create the runtime-check environment in {runtimes_dir} "
            f"({exc.strerror or exc}); make that folder writable for this user (a cache shared between "
            "users needs group write permission), or point COOK_RUNTIMES_DIR at a folder of your own"
        ) from None
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
        command += [f"onnxruntime=={version}", numpy, "zstandard"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=install_timeout, check=False)
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise RuntimeCheckError(
                f"{profile}: cannot install onnxruntime=={version} for the runtime check from the package "
                f"registry ({tail}). If the registry cannot be reached from this machine, or no wheel of "
                "that version exists for it, set `runtime_check: false` with a `runtime_check_off_reason` "
                f"in {profile}"
            )
        try:
            staging.rename(final)
        except OSError:
            if not _python(final).is_file():  # another cook won the race when the folder exists
                raise
    except subprocess.TimeoutExpired:
        raise RuntimeCheckError(
            f"{profile}: installing onnxruntime=={version} for the runtime check timed out after "
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
    return _python(final)


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
    """Remove the staging folders of environment builds killed part way (20-120 MB each); a live
    build touches its folder far more often than STALE_TEMP_SECONDS."""
    cutoff = time.time() - STALE_TEMP_SECONDS
    for staging in runtimes_dir.glob(".onnxruntime-*"):
        try:
            if staging.is_dir() and staging.stat().st_mtime < cutoff:
                shutil.rmtree(staging, ignore_errors=True)
        except OSError:
            continue


def run_check(check: RuntimeCheck) -> dict[str, Any]:
    """Load and run every blob of the platform in the target onnxruntime; raise if any fails."""
    python = ensure_runtime(check.runtime_version, check.runtimes_dir, check.profile, check.install_timeout)
    with tempfile.TemporaryDirectory(prefix=".worker-", dir=check.platform_dir) as tmp:
        package = Path(tmp) / "pipeline"
        shutil.copytree(
            PACKAGE / "runtime", package / "runtime", ignore=shutil.ignore_patterns("__pycache__")
        )
        for name in WORKER_FILES:
            (package / name).parent.mkdir(exist_ok=True)
            shutil.copy2(PACKAGE / name, package / name)
        # -I: no PYTHONPATH, no user site; only the target environment and the copied loader.
        command = [str(python), "-I", "-c", WORKER_START, tmp, str(check.platform_dir), *check.names]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeCheckError(f"{check.platform}: the runtime check timed out") from None
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeCheckError(
            f"{check.platform}: the runtime check in onnxruntime {check.runtime_version} crashed: {tail}"
        )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if parse_version(report["onnxruntime"]) != parse_version(check.runtime_version):
        raise RuntimeCheckError(
            f"{check.platform}: the runtime check ran onnxruntime {report['onnxruntime']}, not "
            f"{check.runtime_version}; delete {environment_dir(check.runtimes_dir, check.runtime_version)}"
        )
    failures = _failures(report, check)
    if failures:
        raise RuntimeCheckError(
            f"{check.platform}: {len(failures)} model(s) fail in onnxruntime {check.runtime_version}, the "
            f"version the platform ships: {'; '.join(failures)}. Convert the source to an older opset or "
            f"raise runtime_version in {check.profile} if the target ships a newer onnxruntime"
        )
    write_json(check.result_path, report)
    return report


def _failures(report: dict[str, Any], check: RuntimeCheck) -> list[str]:
    models = report["models"]
    return [f"{name}: {models[name]['error']}" for name in check.names if not models.get(name, {}).get("ok")]


def verified_versions(result_path: Path, names: Sequence[str]) -> dict[str, str]:
    """Model name -> the onnxruntime version a passed runtime check ran it on."""
    if not result_path.is_file():
        return {}
    try:
        report = json.loads(result_path.read_text(encoding="utf-8"))
    except ValueError:
        raise RuntimeCheckError(f"{result_path} is damaged; delete it and run `doit cook` again") from None
    return {name: report["onnxruntime"] for name in names if report["models"].get(name, {}).get("ok")}
