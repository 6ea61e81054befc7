"""The Windows build of the native loader (native/out/windows: libonnx_cooker.dll, oc-run.exe,
oc-probe.exe, test_in_place.exe, cross-compiled by `bash native/build.sh` with MinGW-w64, the MinGW
runtime linked statically) run under Wine (Debian's wine64) against the real onnxruntime.dll of the
PyPI win_amd64 wheels of each target onnxruntime, and checked against the Python loader on Linux:
the Windows file mapping (CreateFileMappingW), LoadLibraryExW, the Windows threads and lock, UTF-8
paths as UTF-16, and the same verdicts on damaged bundles. Wine and MinGW are required here (CI
installs them): without them these tests fail, they are not skipped."""

# ruff: noqa: F811  (the fixtures bundles and native, imported from test_native, are parameters here)
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from onnx_cooker.runtime import open_bundle, unpack_blob
from tests.test_dodo import feeds_for, run_session
from tests.test_native import (  # noqa: F401  (bundles, native: fixtures shared with the Linux tests)
    VERSIONS,
    _manifest_cases,
    _mutations,
    bundles,
    native,
    onnx_numpy,
    run_native,
)

REPO = Path(__file__).resolve().parents[1]
WINE = Path("/usr/lib/wine/wine64")  # Debian's wine64 package (not on PATH)
WINESERVER = Path("/usr/lib/wine/wineserver64")
WHEELS_CACHE = REPO / ".pytest_cache" / "runtimes-win"
WINE_TIMEOUT = 300  # seconds for one program under Wine
PLATFORMS = ("android", "windows-dml")  # an ORT-format bundle and an ONNX one
NON_ASCII = "bündel-モデル-ß"  # a folder name outside every Windows ANSI code page


def win(path: Path | str) -> str:
    """A Linux path as Wine's Z: drive names it (Z: is /), with backslashes."""
    return "Z:" + str(path).replace("/", "\\")


@pytest.fixture(scope="module")
def windows(native: Path) -> Path:
    """native/build.sh's Windows tree (built beside the Linux ones when MinGW-w64 is installed)."""
    folder = native.parent / "windows"
    for name in ("libonnx_cooker.dll", "oc-run.exe", "oc-probe.exe", "test_in_place.exe"):
        assert (folder / name).is_file(), (
            f"{folder / name} was not built: native/build.sh builds the Windows tree when "
            "x86_64-w64-mingw32-gcc is installed (Debian: gcc-mingw-w64-x86-64-win32)"
        )
    return folder


class Wine:
    """One Wine prefix (made once per test module and worker) that runs Windows programs."""

    def __init__(self, prefix: Path) -> None:
        assert WINE.is_file(), f"{WINE} missing: install Debian's wine64 (.ci/run does)"
        self.env = {
            **os.environ,
            "WINEPREFIX": str(prefix),
            "WINEDEBUG": "-all",
            "WINEDLLOVERRIDES": "mscoree,mshtml=",  # no Mono/Gecko installers in a fresh prefix
        }
        self.env.pop("DISPLAY", None)
        self.env.pop("WAYLAND_DISPLAY", None)

    def run(self, exe: Path, args: list, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = self._run_once(exe, args)
        if result.returncode != 0 and not result.stdout and not result.stderr:
            # Our programs say why whenever they fail: a failure with no word at all is Wine's, not
            # starting the program (seen once in ~1,500 runs of the suite, with two test workers
            # loading the machine). Once more; a second silent failure stands.
            result = self._run_once(exe, args)
        if check:
            assert result.returncode == 0, (
                f"{exe.name} {args} failed ({result.returncode}) under Wine:\n"
                f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
            )
        return result

    def _run_once(self, exe: Path, args: list) -> subprocess.CompletedProcess[str]:
        # Output into files, not pipes: a Wine service the program starts inherits its handles, and
        # a pipe would not end before that service does (seconds later)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            done = subprocess.run(
                [str(WINE), str(exe), *[str(a) for a in args]],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=self.env,
                check=False,
                timeout=WINE_TIMEOUT,
            )
            out.seek(0)
            err.seek(0)
            result = subprocess.CompletedProcess(
                done.args,
                done.returncode,
                out.read().decode("utf-8").replace("\r\n", "\n"),  # the C runtime's text mode
                err.read().decode("utf-8", "replace").replace("\r\n", "\n"),
            )
        return result


@pytest.fixture(scope="module")
def wine(tmp_path_factory: pytest.TempPathFactory) -> Wine:
    """A Wine prefix, its wineserver kept running for the module (each program would otherwise
    start it and Wine's services again: ~2.5 s a run), with its services started with no handles
    of ours."""
    runner = Wine(tmp_path_factory.mktemp("wineprefix"))
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    server = subprocess.Popen([str(WINESERVER), "-p"], env=runner.env, **quiet)
    try:
        # The prefix is made on the first start (~8 s); cmd.exe is Wine's own
        done = subprocess.run([str(WINE), "cmd", "/c", "exit"], env=runner.env, timeout=WINE_TIMEOUT, **quiet)
        assert done.returncode == 0, "wine64 could not start a program in a new prefix"
        yield runner
    finally:
        subprocess.run([str(WINESERVER), "-k"], env=runner.env, check=False, **quiet)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def windows_ort(version: str) -> Path:
    """onnxruntime.dll of that version's win_amd64 wheel from PyPI (with
    onnxruntime_providers_shared.dll beside it), cached under .pytest_cache."""
    folder = WHEELS_CACHE / version
    dll = folder / "onnxruntime.dll"
    WHEELS_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(WHEELS_CACHE / f"{version}.lock")):
        if not dll.is_file():
            wheels = WHEELS_CACHE / "wheels"
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--python-version",
                    "3.11",
                    "--platform",
                    "win_amd64",
                    f"onnxruntime=={version}",
                    "-d",
                    str(wheels),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            wheel = next(wheels.glob(f"onnxruntime-{version}-*-win_amd64.whl"))
            folder.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(wheel) as archive:
                for name in ("onnxruntime.dll", "onnxruntime_providers_shared.dll"):
                    (folder / name).write_bytes(archive.read(f"onnxruntime/capi/{name}"))
            wheel.unlink()  # the DLLs are what is kept
    return dll


def expected_load_path(blob: bytes, version: str) -> str:
    """The load path on Windows: no /dev/null there (no shared initializers), and a blob file's
    identity has no change time (no onnx-mapped), so ONNX weights before 1.32 are copied."""
    header = unpack_blob(blob).header
    if header.model_format == "ort":
        return "ort-in-place"
    if not header.weights:
        return "onnx-inline"
    return "onnx-file-buffers" if version == "1.32.0" else "onnx-external-initializers"


def run_models(
    wine: Wine,
    windows: Path,
    bundle_dir: Path,
    assets: Path,
    names: list[str],
    library: Path,
    version: str,
    work: Path,
) -> None:
    """Each model of the bundle through oc-run.exe (inputs and outputs as .npy under ``work``),
    against the Python loader's session on Linux, with the load path and version it reports. The
    Python sessions run first: onnxruntime's threads in this process are idle by the time Wine runs."""
    bundle = open_bundle(bundle_dir)
    runs = []
    for index, name in enumerate(names):
        session = bundle.session(name, providers=["CPUExecutionProvider"])
        inputs_file = assets / f"{name}.inputs.npz"
        feeds = feeds_for(session, inputs_file if inputs_file.is_file() else None)
        folder = work / f"{index}-{name.replace('/', '_')}"
        folder.mkdir(parents=True)
        args: list = []
        for value in session.get_inputs():
            path = folder / f"in-{value.name}.npy"
            np.save(path, feeds[value.name])
            args += ["--in", win(path)]
        runs.append((name, folder, args, run_session(session, feeds)))
        del session
    for name, folder, args, expected in runs:
        done = wine.run(
            windows / "oc-run.exe",
            [
                "--bundle",
                win(bundle_dir),
                "--model",
                name,
                "--ort",
                win(library),
                *args,
                "--out",
                win(folder / "out"),
            ],
        )
        path = expected_load_path(bundle.read_blob(name), version)
        assert f"session ready: load path {path}, onnxruntime {version}\n" in done.stdout, (name, done.stdout)
        for output, want in expected.items():
            got = np.load(folder / "out" / f"{output.replace('/', '_')}.npy")
            assert got.dtype == want.dtype and got.shape == want.shape, (version, name, output)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{name} in {version}")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_oc_run_exe_under_wine_gives_the_python_loaders_outputs(
    windows: Path,
    wine: Wine,
    bundles: Path,
    platform: str,
    version: str,
    tmp_path: Path,
) -> None:
    """Every model of an ORT-format bundle (android) and an ONNX one (windows-dml) through
    oc-run.exe and onnxruntime.dll: the blobs mapped with CreateFileMappingW or read, the session
    made by the library through LoadLibraryExW'd onnxruntime, the outputs the Python loader's."""
    names = open_bundle(bundles / platform).names
    assert len(names) >= 10
    run_models(
        wine,
        windows,
        bundles / platform,
        bundles.parent / "assets",
        list(names),
        windows_ort(version),
        version,
        tmp_path,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_bundle_and_onnxruntime_in_non_ascii_folders(
    windows: Path,
    wine: Wine,
    bundles: Path,
    version: str,
    tmp_path: Path,
) -> None:
    """UTF-8 paths become UTF-16 on Windows: a bundle, onnxruntime.dll, the inputs and the outputs
    all under a folder named with characters of no ANSI code page (the command line read as UTF-16,
    CreateFileW, _wfullpath, LoadLibraryExW, _wfopen, _wmkdir)."""
    root = tmp_path / NON_ASCII
    library = root / "onnxruntime-ランタイム" / "onnxruntime.dll"
    library.parent.mkdir(parents=True)
    for dll in windows_ort(version).parent.glob("*.dll"):
        shutil.copy(dll, library.parent / dll.name)
    for platform, names in (("windows-dml", ["big_weights", "mnist"]), ("android", ["big_weights"])):
        copy = root / "build" / platform
        shutil.copytree(bundles / platform, copy, ignore=shutil.ignore_patterns(".*"))
        lines = [
            json.loads(line)
            for line in wine.run(windows / "oc-probe.exe", ["bundle", win(copy)]).stdout.splitlines()
        ]
        assert all(line["status"] == "OC_OK" for line in lines), lines
        assert lines[0]["input"] == win(copy) and len(lines) == len(open_bundle(copy).names) + 1
        run_models(
            wine,
            windows,
            copy,
            bundles.parent / "assets",
            names,
            library,
            version,
            root / f"runs-{platform}-é",
        )
    done = wine.run(
        windows / "oc-run.exe",
        ["--bundle", win(root / "missing-ü"), "--model", "x", "--ort", win(library)],
        check=False,
    )
    assert done.returncode == 1 and NON_ASCII in done.stderr and "missing-ü" in done.stderr, done.stderr


def _statuses(lines: list[dict], folder: Path, shown: str) -> list[tuple[str, str]]:
    """(status, message) of each line, the folder's own name in the message made neutral."""
    return [(line["status"], line["message"].replace(shown, "<dir>").replace("\\", "/")) for line in lines]


def test_damaged_and_hostile_bundles_get_the_linux_verdicts(
    native: Path,
    windows: Path,
    wine: Wine,
    bundles: Path,
    tmp_path: Path,
) -> None:
    """A truncated blob, a flipped byte, a missing blob and the other broken manifests of the
    Linux tests: oc-probe.exe gives the status and the message (the folder's name aside) the Linux
    build gives, opened from the folder and through reader callbacks."""
    source = bundles / "windows-dml"
    cases = {
        name: apply
        for name, apply in _manifest_cases(source).items()
        if name not in ("link-outside", "fifo")  # POSIX file kinds: a symlink, a named pipe
    }
    assert {"blob-cut", "blob-flipped", "missing-file"} <= set(cases)
    differ = []
    for case, apply in cases.items():
        folder = tmp_path / case
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns(".*"))
        apply(folder)
        for mode in ("bundle", "reader"):
            linux = [
                json.loads(line)
                for line in run_native([native / "oc-probe", mode, folder]).stdout.splitlines()
            ]
            windows_lines = [
                json.loads(line)
                for line in wine.run(windows / "oc-probe.exe", [mode, win(folder)]).stdout.splitlines()
            ]
            got = _statuses(windows_lines, folder, win(folder))
            want = _statuses(linux, folder, str(folder))
            if got != want:
                differ.append((case, mode, want, got))
    assert not differ, "\n".join(map(str, differ))


def test_a_build_folder_given_for_a_bundle_names_a_platform_under_wine(
    windows: Path, wine: Wine, tmp_path: Path
) -> None:
    """FindFirstFileW's side of the build-folder hint: the same platform as on Linux."""
    from tests.test_native import build_root

    root = build_root(tmp_path / "build")
    (line,) = [
        json.loads(x) for x in wine.run(windows / "oc-probe.exe", ["bundle", win(root)]).stdout.splitlines()
    ]
    assert line["status"] == "OC_ERR_MANIFEST"
    assert "holds the bundles of its platforms, not one bundle: open one, e.g. " in line["message"]
    assert line["message"].endswith("/beta"), line
    (line,) = [
        json.loads(x)
        for x in wine.run(windows / "oc-probe.exe", ["bundle", win(root / "zet")]).stdout.splitlines()
    ]
    assert line["message"].endswith("did you mean " + win(root / "zeta") + "?"), line  # a mistyped platform


def test_damaged_blobs_get_the_linux_verdicts(
    native: Path,
    windows: Path,
    wine: Wine,
    bundles: Path,
    tmp_path: Path,
) -> None:
    """Bit flips, truncations, junk and re-sealed hostile headers of two blobs (ONNX and ORT
    format), opened from memory by oc-probe.exe: the Linux build's status for every case."""
    import random

    files = []
    for platform, name in (("windows-dml", "big_weights"), ("android", "mnist")):
        blob = open_bundle(bundles / platform).read_blob(name)
        for index, case in enumerate(_mutations(blob, random.Random(platform), 40)):
            path = tmp_path / f"{platform}-{index}.ocb"
            path.write_bytes(case)
            files.append(path)
    linux = [
        json.loads(line) for line in run_native([native / "oc-probe", "blob", *files]).stdout.splitlines()
    ]
    windows_lines = [
        json.loads(line)
        for line in wine.run(windows / "oc-probe.exe", ["blob", *map(win, files)]).stdout.splitlines()
    ]
    assert len(linux) == len(windows_lines) == len(files)
    differ = [
        (path.name, a["status"], b["status"], b["message"])
        for path, a, b in zip(files, linux, windows_lines, strict=True)
        if (a["status"], a["message"]) != (b["status"], b["message"])
    ]
    assert not differ, f"{len(differ)} of {len(files)} differ: {differ[:10]}"
    assert {line["status"] for line in linux} >= {
        "OC_OK",
        "OC_ERR_TRUNCATED",
        "OC_ERR_CHECKSUM",
        "OC_ERR_CORRUPT",
    }


def test_zstd_frames_decode_on_windows_threads(
    native: Path,
    windows: Path,
    wine: Wine,
    tmp_path: Path,
) -> None:
    """A weights section of many zstd frames decodes on several threads (CreateThread, one per
    core) to the Linux build's bytes; a damaged frame is named as on Linux; a session made from it
    by oc-run.exe gives the source's outputs."""
    import onnx
    from runtime_helpers import make_weighted_blob, split_blob, write_bundle

    rng = np.random.default_rng(3)
    weights = (rng.integers(0, 4, size=(1024, 1024)) * 0.5).astype(np.float32)  # compressible
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1024])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1024])],
        [onnx.numpy_helper.from_array(weights, "W")],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    blob = make_weighted_blob(model, "zstd", name="frames")[0]
    frames = [f for f in split_blob(blob)[0]["frames"] if f[0] == "weights"]
    assert len(frames) >= 4 and all(f[1] == "zstd" for f in frames)
    good = tmp_path / "good.ocb"
    good.write_bytes(blob)
    damaged = bytearray(blob)
    damaged[frames[2][2] + frames[2][3] // 2] ^= 0x01
    bad = tmp_path / "bad.ocb"
    bad.write_bytes(bytes(damaged))
    linux = [
        json.loads(line) for line in run_native([native / "oc-probe", "blob", good, bad]).stdout.splitlines()
    ]
    on_windows = [
        json.loads(line)
        for line in wine.run(windows / "oc-probe.exe", ["blob", win(good), win(bad)]).stdout.splitlines()
    ]
    assert on_windows[0]["status"] == "OC_OK" and on_windows[0]["weights_fnv"] == linux[0]["weights_fnv"]
    assert on_windows[0]["model_fnv"] == linux[0]["model_fnv"]
    assert on_windows[1]["status"] == "OC_ERR_CHECKSUM"
    assert f"weights frame 3 of {len(frames)} is damaged" in on_windows[1]["message"]
    folder = write_bundle(tmp_path / "bundle", {"frames": ("onnx", blob)})
    x = rng.standard_normal((1, 1024)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    done = wine.run(
        windows / "oc-run.exe",
        [
            "--bundle",
            win(folder),
            "--model",
            "frames",
            "--ort",
            win(windows_ort("1.32.0")),
            "--in",
            win(tmp_path / "x.npy"),
            "--out",
            win(tmp_path / "out"),
        ],
    )
    assert "load path onnx-file-buffers," in done.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), x @ weights, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("version", VERSIONS)
def test_oc_run_exe_times_sessions_under_wine(
    windows: Path,
    wine: Wine,
    bundles: Path,
    version: str,
) -> None:
    """--time N: N fresh sessions (the blob opened and closed each time), one JSON line with the
    median, each time, the working set (K32GetProcessMemoryInfo) and the load path."""
    for platform, name in (("android", "resnet"), ("windows-dml", "big_weights")):
        bundle = bundles / platform
        done = wine.run(
            windows / "oc-run.exe",
            ["--bundle", win(bundle), "--model", name, "--ort", win(windows_ort(version)), "--time", "3"],
        )
        timing = json.loads(done.stdout.strip().splitlines()[-1])
        assert len(timing["ready_ms"]) == 3 and all(t > 0 for t in timing["ready_ms"]), timing
        assert sorted(timing["ready_ms"])[1] == pytest.approx(timing["ready_ms_median"], abs=1e-3)
        assert timing["peak_rss_bytes"] >= timing["baseline_rss_bytes"] > 1 << 20, timing
        assert timing["load_path"] == expected_load_path(open_bundle(bundle).read_blob(name), version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("model_format", ["onnx", "ort"])
def test_in_place_from_the_callers_memory_under_wine(
    windows: Path, wine: Wine, version: str, model_format: str, tmp_path: Path
) -> None:
    """test_in_place.exe: the caller's buffer zeroed under a live session (prepacking off). ORT
    format (every version) and ONNX file buffers (1.32) compute from the caller's bytes on Windows
    too; before 1.32 ONNX weights are copied there (no shared initializers without /dev/null), and
    zeroing them changes nothing."""
    from runtime_helpers import make_blob, make_weighted_blob, to_ort_format

    from tests.models import large_matmul_model

    source = large_matmul_model(512, 256, seed=9)
    weight = onnx_numpy(source)
    if model_format == "onnx":
        blob = make_weighted_blob(source, "raw")[0]
    else:
        blob = make_blob(to_ort_format(source.SerializeToString(), tmp_path), "ort", graph_codec="raw")
    offset = blob.find(weight)
    assert offset > 0 and blob.find(weight, offset + 1) == -1
    path = tmp_path / "model.ocb"
    path.write_bytes(blob)
    done = wine.run(
        windows / "test_in_place.exe", [win(windows_ort(version)), win(path), offset, len(weight)]
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    path_used = expected_load_path(blob, version)
    assert result["load_path"] == path_used
    assert result["handed_inside_caller_memory"] is True
    assert result["before"] > 1.0
    if path_used == "onnx-external-initializers":
        assert result["after"] == result["before"], result  # onnxruntime's own copy
    else:
        assert result["after"] == 0.0, result  # y = x @ 0: the session reads the caller's bytes


def test_the_windows_binaries_need_only_system_dlls(windows: Path) -> None:
    """The MinGW runtime (libgcc, winpthreads) is linked in: beside onnxruntime.dll, the programs
    need only Windows' own DLLs and libonnx_cooker.dll."""
    system = {"kernel32.dll", "msvcrt.dll", "advapi32.dll", "shell32.dll", "libonnx_cooker.dll"}
    for binary in (windows / "libonnx_cooker.dll", windows / "oc-run.exe", windows / "oc-probe.exe"):
        dump = subprocess.run(
            ["x86_64-w64-mingw32-objdump", "-p", str(binary)], capture_output=True, text=True, check=True
        ).stdout
        needed = {line.split()[-1].lower() for line in dump.splitlines() if "DLL Name:" in line}
        assert needed and needed <= system, (binary.name, needed)
