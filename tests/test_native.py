"""The native loader (native/: libonnx_cooker, oc-run, the C++ header), built by `bash native/build.sh`
with gcc under -Wall -Wextra -Werror, its tests under AddressSanitizer and UBSan, and checked
against the Python loader on real cooked bundles in each onnxruntime a shipped platform targets
(the C API library of that version's wheel)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock
from runtime_helpers import make_blob, split_blob, write_bundle

from onnx_cooker.build.target_check import runtime_library
from onnx_cooker.runtime import errors as py_errors
from onnx_cooker.runtime import open_bundle, read_header, unpack_blob
from tests.test_dodo import doit, feeds_for, run_session

REPO = Path(__file__).resolve().parents[1]
NATIVE_OUT = REPO / ".pytest_cache" / "native"
RUNTIMES_CACHE = REPO / ".pytest_cache" / "runtimes"
VERSIONS = ("1.24.4", "1.28.0", "1.32.0")
NATIVE_TIMEOUT = 300  # seconds for one native program (the largest runs take a few)
PLATFORMS = ("android", "console", "ios", "windows-dml")
SANITIZERS = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
}
# The Python loader's exception for each status of the C library (onnx_cooker/runtime/errors.py).
STATUS_OF = {
    py_errors.NotABlobError: "OC_ERR_NOT_A_BLOB",
    py_errors.TruncatedBlobError: "OC_ERR_TRUNCATED",
    py_errors.CorruptBlobError: "OC_ERR_CORRUPT",
    py_errors.ChecksumMismatchError: "OC_ERR_CHECKSUM",
    py_errors.UnsupportedBlobVersionError: "OC_ERR_UNSUPPORTED_VERSION",
    py_errors.BlobTooLargeError: "OC_ERR_TOO_LARGE",
}


@pytest.fixture(scope="session")
def native() -> Path:
    """The sanitizer build (native/build.sh builds release and asan trees; one build per machine,
    shared by the test workers under a lock)."""
    NATIVE_OUT.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(NATIVE_OUT) + ".lock"):
        done = subprocess.run(
            ["bash", str(REPO / "native" / "build.sh"), str(NATIVE_OUT)],
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, f"native/build.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return NATIVE_OUT / "asan"


def run_native(
    args: list, *, check: bool = True, env: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        env={**os.environ, **SANITIZERS, **(env or {})},
        check=False,
        timeout=NATIVE_TIMEOUT,  # a hang (a FIFO read, a lock) fails the test, it does not stall the suite
        **kwargs,
    )
    assert done.returncode not in (86, 87), f"sanitizer report from {args[0]}:\n{done.stderr[-6000:]}"
    if check:
        assert done.returncode == 0, (
            f"{args} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return done


def ort_library(version: str) -> Path:
    """libonnxruntime.so.<version> of that version's wheel (the runtime check's environment)."""
    return runtime_library(version, RUNTIMES_CACHE, REPO / "platforms" / "windows-dml.yaml")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, project_copier: Callable[[Path], Path]) -> Path:
    """The example assets and the exporter-made models (a conv net, a transformer encoder and an
    LSTM, each by torch's TorchScript and dynamo exporters) cooked for every platform with the real
    doit: the build folder. Cooked once per test run: the test workers share it under a lock."""
    from tests.test_exporters import EXPORTERS, NETS, copy_asset, export

    shared = tmp_path_factory.getbasetemp().parent / "native-bundles"  # one per run, across workers
    shared.mkdir(parents=True, exist_ok=True)
    with FileLock(str(shared / "lock")):
        project = shared / "project"
        if not (shared / "done").is_file():
            if project.exists():
                import shutil

                shutil.rmtree(project)
            project_copier(project)
            made = shared / "exported"
            for net in NETS:
                for exporter in EXPORTERS:
                    export(net, exporter, made / exporter / f"{net}.onnx")
                    # the dynamo exporter's .onnx.data keeps its file name: one folder per exporter
                    folder = project / "assets" / "exported" / exporter
                    copy_asset(made / exporter / f"{net}.onnx", folder, net)
                    (folder / f"{net}.cook.yaml").write_text(
                        "verify_dims:\n  batch: 2\n"
                    )  # the dynamic batch
            run = doit(project, "cook")
            assert run.returncode == 0, run.output
            (shared / "done").write_text("cooked")
    return project / "build"


def test_unit_programs_pass_under_the_sanitizers(native: Path) -> None:
    """The C unit tests: the external-reference checker against the Python one on ~14,000 cases
    (named hostile cases, every truncation, bit flips, noise), and the .npy reader and writer."""
    # Exit status 0: C and Python agreed on every case, C freed all it allocated, no sanitizer spoke.
    run_native(
        [
            sys.executable,
            REPO / "native" / "tests" / "onnxrefs_cases.py",
            "--binary",
            native / "test_onnxrefs",
        ]
    )
    run_native([native / "test_npy", sys.executable], cwd=native)
    # SHA-256 (the CPU's SHA instructions where present) equal to libsodium's on every padding case
    sha = json.loads(run_native([native / "test_sha256"]).stdout)
    assert sha["failures"] == 0


def test_the_cpp_header_compiles_strict_and_wraps_the_library(native: Path, bundles: Path) -> None:
    done = run_native(
        [native / "test_cxx_header", bundles / "windows-dml", "big_weights", ort_library("1.32.0")]
    )
    assert "session onnx-file-buffers" in done.stdout
    entry = json.loads((bundles / "windows-dml" / "manifest.json").read_text())["models"]["big_weights"]
    assert f"model file {entry['file']}, {entry['blob_size']} bytes; unknown: ''" in done.stdout
    # from the manifest's bytes and the blob's (a pak's): the unpack level, in place, and the signature
    header = read_header((bundles / "windows-dml" / entry["file"]).read_bytes())[0]
    assert header.weights is not None
    unpacked = f"unpacked: model {header.graph_size} bytes, weights {header.weights.size} bytes in place"
    assert unpacked in done.stdout, done.stdout
    for value in entry["inputs"]:
        assert f"input {value['name']} {value['type']} " in done.stdout
    for dim in entry["inputs"][0]["shape"]:  # Bundle::dims: the same shape without JSON
        size, symbol = (dim, "") if isinstance(dim, int) else (-1, dim or "")
        assert f"first input dim {size} '{symbol}'" in done.stdout, done.stdout
    assert "provider option DmlExecutionProvider device_id=0" in done.stdout
    # windows-dml prefers DirectML, absent from the Linux wheel: the classic list, and why
    assert "eps: CPUExecutionProvider; skipped DmlExecutionProvider (not offered" in done.stdout
    # the engine's own call for it (oc::Runtime::set_ep_appender): DirectML then goes first
    assert "appender eps: DmlExecutionProvider, CPUExecutionProvider; called 1" in done.stdout
    # 1.32 serves the plugin-EP API: its CPU EP is offered as a device, and a policy goes through
    assert "ep device CPUExecutionProvider type 1 " in done.stdout
    assert (
        "policy eps: device policy prefer_cpu (given by the caller); onnxruntime picks among: " in done.stdout
    )
    assert "OC_ERR_UNKNOWN_MODEL" in done.stdout
    # oc::Session as a member: empty, assigned, reassigned (the first released: ASan sees no leak)
    assert "member: empty 1, held 1, reloaded 1" in done.stdout
    # a mistyped model name throws, where the C counts read 0 (no inputs) and -1 (no shape)
    assert "unknown model's signature: OC_ERR_UNKNOWN_MODEL" in done.stdout
    assert "unknown model's dims: OC_ERR_UNKNOWN_MODEL" in done.stdout


def test_engines_build_with_the_library_as_cmake_and_pkg_config_expect(
    native: Path, bundles: Path, tmp_path: Path
) -> None:
    """An engine's own build (native/tests/consumer) takes libonnx_cooker each usual way, and the
    program it links opens every model of a bundle and creates its session: add_subdirectory of a
    static library (the library alone: no tools, tests or -Werror of ours), find_package of an
    installed shared and an installed static library, and pkg-config of both, after moving the
    installed prefix (relocatable); and the README's C++ (oc::Session) through the first two, with
    onnxruntime's header from the library's target in the source tree, the engine's when installed."""
    ort_include = next((NATIVE_OUT / "_deps").glob("onnxruntime-*/include"))
    library = ort_library("1.32.0")

    def cmake(*args: object) -> None:
        for step in (["cmake", *args], None):
            if step is None:
                break
            done = subprocess.run([str(a) for a in step], capture_output=True, text=True, check=False)
            assert done.returncode == 0, f"{step}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    def build(source: Path, tree: Path, *options: str) -> None:
        cmake("-S", source, "-B", tree, "-DCMAKE_BUILD_TYPE=Release", *options)
        cmake("--build", tree, "--parallel", "2")

    def models_of(consumer: Path, platform: str) -> list[list[str]]:
        lines = run_native([consumer, bundles / platform, library]).stdout.splitlines()
        return [line.split(" ") for line in lines]

    def expected(platform: str) -> list[list[str]]:
        bundle = open_bundle(bundles / platform)
        return [
            [name, str(len(bundle.info(name)["inputs"])), str(len(bundle.info(name)["outputs"]))]
            for name in sorted(bundle.names)
        ]

    consumer_src = REPO / "native" / "tests" / "consumer"
    made: dict[str, Path] = {}

    # add_subdirectory, static
    sub = tmp_path / "subdirectory"
    build(
        consumer_src,
        sub,
        "-DOC_CONSUME=subdirectory",
        f"-DOC_NATIVE_DIR={REPO / 'native'}",
        f"-DORT_INCLUDE_DIR={ort_include}",
        "-DBUILD_SHARED_LIBS=OFF",
    )
    built = {path.name for path in (sub / "onnx_cooker").iterdir()}
    programs = {"oc-run", "oc-probe", "test_npy", "test_in_place", "test_ep_appender", "test_threads"}
    programs |= {"test_progress", "test_misuse"}
    assert "libonnx_cooker.a" in built and not built & programs
    made["subdirectory"] = sub / "consumer"
    made_cxx = {"subdirectory": sub / "consumer_cxx"}  # the README's C++: ORT's header came with the target

    # installed (shared and static), the prefix then moved: find_package and pkg-config
    for shared in ("ON", "OFF"):
        tree = tmp_path / f"library-{shared}"
        build(
            REPO / "native",
            tree,
            f"-DORT_INCLUDE_DIR={ort_include}",
            f"-DBUILD_SHARED_LIBS={shared}",
            "-DOC_BUILD_TESTS=OFF",
        )
        cmake("--install", tree, "--prefix", tmp_path / "staging" / shared)
        prefix = tmp_path / f"prefix-{shared}"
        (tmp_path / "staging" / shared).rename(prefix)
        build(
            consumer_src,
            tmp_path / f"package-{shared}",
            "-DOC_CONSUME=package",
            f"-DCMAKE_PREFIX_PATH={prefix}",
            f"-DORT_INCLUDE_DIR={ort_include}",  # the engine's own onnxruntime, for oc::Session
        )
        made[f"find_package {shared}"] = tmp_path / f"package-{shared}" / "consumer"
        made_cxx[f"find_package {shared}"] = tmp_path / f"package-{shared}" / "consumer_cxx"
        flags = subprocess.run(
            ["pkg-config", "--cflags", "--libs", *(["--static"] if shared == "OFF" else []), "onnx_cooker"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")},
        ).stdout.split()
        made[f"pkg-config {shared}"] = tmp_path / f"pkg-config-{shared}"
        cmake_free = [
            "gcc",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            consumer_src / "consumer.c",
            "-o",
            made[f"pkg-config {shared}"],
            *flags,
            f"-Wl,-rpath,{prefix / 'lib'}",
        ]
        done = subprocess.run([str(a) for a in cmake_free], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        # the installed oc-run finds the moved library next to it
        run_native([prefix / "bin" / "oc-run", "--help"])

    for how, consumer in made.items():
        for platform in ("android", "windows-dml") if how == "subdirectory" else ("android",):
            got = models_of(consumer, platform)
            assert [line[:3] for line in got] == expected(platform), how
            # 1.32: ORT bytes in place, ONNX weights as in-memory file buffers (in place)
            paths = {"android": {"ort-in-place"}, "windows-dml": {"onnx-inline", "onnx-file-buffers"}}
            assert {line[3] for line in got} <= paths[platform], (how, got)
            big = "onnx-file-buffers" if platform == "windows-dml" else "ort-in-place"
            assert ["big_weights", "1", "1", big] in got, (how, got)
    for how, consumer in made_cxx.items():  # the README's C++ snippet, oc::Session included
        lines = run_native([consumer, bundles / "android", library]).stdout.splitlines()
        names = sorted(open_bundle(bundles / "android").names)
        assert sorted(line.split(" ")[0] for line in lines) == names, how
        assert "big_weights ort-in-place" in lines, (how, lines)
    assert (
        subprocess.run(
            ["ldd", str(made["find_package OFF"])], capture_output=True, text=True, check=True
        ).stdout.count("onnx_cooker")
        == 0
    )  # static: linked in


def test_a_blob_file_given_for_its_bundle_folder_is_named_as_one(native: Path, bundles: Path) -> None:
    """As the Python loader's open_bundle: the error says it is a blob and what to open instead."""
    blob = bundles / "android" / open_bundle(bundles / "android").info("big_weights")["file"]
    line = json.loads(run_native([native / "oc-probe", "bundle", blob], check=False).stdout.splitlines()[0])
    assert line["status"] == "OC_ERR_MANIFEST"
    assert "is a blob, not a bundle folder: open the folder that holds it" in line["message"], line


def test_a_bundles_manifest_given_for_its_folder_opens_the_bundle(
    native: Path, bundles: Path, tmp_path: Path
) -> None:
    """As the Python loader's open_bundle takes it: the manifest.json path opens its folder's bundle
    (relative too); a file merely ending in "manifest.json" is not taken for one."""
    folder = bundles / "android"
    for given, cwd in (
        (folder / "manifest.json", None),
        ("manifest.json", folder),
        ("./manifest.json", folder),
    ):
        line = json.loads(run_native([native / "oc-probe", "bundle", given], cwd=cwd).stdout.splitlines()[0])
        assert line["status"] == "OC_OK", line
        assert sorted(line["models"]) == sorted(open_bundle(folder / "manifest.json").names), given
    (tmp_path / "not-manifest.json").write_text("{}")
    line = json.loads(
        run_native(
            [native / "oc-probe", "bundle", folder.parent / "not-manifest.json"], check=False
        ).stdout.splitlines()[0]
    )
    assert line["status"] == "OC_ERR_MANIFEST" and "no readable manifest.json" in line["message"], line


def build_root(folder: Path) -> Path:
    """A build folder: platform folders with a manifest (zeta, beta), one without (alpha) and the
    cook's hidden one with a manifest of its own (.stamps), which is not a bundle."""
    for name, manifest in ((".stamps", True), ("alpha", False), ("zeta", True), ("beta", True)):
        (folder / name).mkdir(parents=True)
        if manifest:
            (folder / name / "manifest.json").write_text("{}")
    return folder


def test_a_build_folder_given_for_a_bundle_names_a_platform_to_open(native: Path, tmp_path: Path) -> None:
    """As the Python loader's open_bundle: the build folder above the bundles names one to open."""
    root = build_root(tmp_path / "build")
    line = json.loads(run_native([native / "oc-probe", "bundle", root], check=False).stdout.splitlines()[0])
    assert line["status"] == "OC_ERR_MANIFEST"
    assert (
        f"{root} holds the bundles of its platforms, not one bundle: open one, e.g. {root}/beta"
        in line["message"]
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    line = json.loads(run_native([native / "oc-probe", "bundle", empty], check=False).stdout.splitlines()[0])
    assert "no readable manifest.json" in line["message"] and "holds the bundles" not in line["message"]
    assert "did you mean" not in line["message"]  # nothing near "empty" beside it
    # a mistyped platform folder: the bundle folder beside it with the nearest name (not .stamps)
    for typo, meant in (("zet", "zeta"), ("bta/", "beta"), (".stamp", None), ("gamma", None)):
        probe = run_native([native / "oc-probe", "bundle", f"{root}/{typo}"], check=False)
        message = json.loads(probe.stdout.splitlines()[0])["message"]
        assert (f"did you mean {root}/{meant}?" in message) if meant else ("did you mean" not in message), (
            typo
        )


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_bundle_reads_as_the_python_loader_reads_it(native: Path, bundles: Path, platform: str) -> None:
    lines = [
        json.loads(line)
        for line in run_native([native / "oc-probe", "bundle", bundles / platform]).stdout.splitlines()
    ]
    # through an engine's reader that returns what it has, 1,000 bytes a call at most (a stream,
    # POSIX read()): the library reads on from where each call stopped, and reads the same bundle
    short = run_native(
        [native / "oc-probe", "reader", bundles / platform], env={"OC_PROBE_SHORT_READS": "1000"}
    )
    assert [json.loads(line) for line in short.stdout.splitlines()] == lines
    head, blobs = lines[0], lines[1:]
    bundle = open_bundle(bundles / platform)
    assert head["status"] == "OC_OK" and head["platform"] == platform
    assert sorted(head["models"]) == sorted(bundle.names)
    for line in blobs:
        assert line["status"] == "OC_OK", line
        header = unpack_blob(bundle.read_blob(line["name"])).header
        assert line["format"] == header.model_format
        assert line["graph_size"] == header.graph_size
        assert line["weights_size"] == (header.weights.size if header.weights else 0)
        assert line["execution_providers"] == list(header.execution_providers)
        assert line["saved_runtime_optimizations"] == header.saved_runtime_optimizations
        for ep, options in line["session_options"].items():
            assert options == {k: str(v) for k, v in header.ep_session_options.get(ep, {}).items()}
        info = bundle.info(line["name"])
        for side in ("inputs", "outputs"):
            assert [t["name"] for t in head["models"][line["name"]][side]] == [t["name"] for t in info[side]]
            assert [t["shape"] for t in head["models"][line["name"]][side]] == [
                t["shape"] for t in info[side]
            ]


def test_bytes_given_for_a_model_are_named_for_what_they_are(
    native: Path, bundles: Path, tmp_path: Path
) -> None:
    """An engine that hands a bundle the wrong bytes (another target's pak, another model's entry,
    a damaged read) hears which, besides the file the manifest names: not only "not its blob"."""

    def refusal(platform: str, model: str, data: bytes) -> str:
        given = tmp_path / "given.bin"
        given.write_bytes(data)
        done = run_native(
            [native / "oc-probe", "bundle", bundles / platform, model], env={"OC_PROBE_BYTES": str(given)}
        )
        line = json.loads(done.stdout.splitlines()[1])
        assert line["status"] == "OC_ERR_CHECKSUM", line
        assert (
            f"the {len(data)} bytes given for model '{model}' are not its blob in this bundle: "
            in line["message"]
        )
        file = json.loads((bundles / platform / "manifest.json").read_text())["models"][model]["file"]
        assert f"manifest.json names {file} (" in line["message"], line
        return line["message"]

    def blob(platform: str, model: str) -> bytes:
        return open_bundle(bundles / platform).read_blob(model)

    android = blob("android", "mnist")
    said = refusal("windows-dml", "mnist", android)
    assert "they are the android blob of 'mnist', and this bundle is windows-dml's;" in said, said
    said = refusal("windows-dml", "mnist", blob("windows-dml", "multi_io"))
    assert "they are the blob of model 'multi_io';" in said, said
    damaged = bytearray(blob("windows-dml", "big_weights"))
    damaged[len(damaged) // 2] ^= 0x20  # inside the raw weights: their CRC-32 no longer holds
    said = refusal("windows-dml", "big_weights", bytes(damaged))
    assert "they are a damaged blob, or no blob at all;" in said, said
    # the right bytes still open (the identification runs on refusals only)
    given = tmp_path / "right.bin"
    given.write_bytes(blob("windows-dml", "mnist"))
    done = run_native(
        [native / "oc-probe", "bundle", bundles / "windows-dml", "mnist"], env={"OC_PROBE_BYTES": str(given)}
    )
    assert json.loads(done.stdout.splitlines()[1])["status"] == "OC_OK"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_oc_run_gives_the_python_loaders_outputs(
    native: Path, bundles: Path, platform: str, version: str, tmp_path: Path
) -> None:
    """Every model of every platform's bundle through oc-run (the C library creating the session)
    in each target onnxruntime, against the Python loader's session in this environment; in the
    newest also from the blob file's bytes in memory (``oc-run --blob``)."""
    library = ort_library(version)
    bundle = open_bundle(bundles / platform)
    assets = bundles.parent / "assets"
    for name in bundle.names:
        session = bundle.session(name, providers=["CPUExecutionProvider"])
        inputs_file = assets / f"{name}.inputs.npz"
        feeds = feeds_for(session, inputs_file if inputs_file.is_file() else None)
        expected = run_session(session, feeds)
        folder = tmp_path / name.replace("/", "_")
        folder.mkdir()
        args = []
        for value in session.get_inputs():
            path = folder / f"in-{value.name}.npy"
            np.save(path, feeds[value.name])
            args += ["--in", path]
        run = OcRun(native, library, args, folder, label=f"{platform}/{name} in {version}")
        run.expect(["--bundle", bundles / platform, "--model", name], "out", expected)
        if version == VERSIONS[-1]:  # the blob file read into memory, as an engine reads its archive
            run.expect(["--blob", bundles / platform / bundle.info(name)["file"]], "out-blob", expected)


def oc_run_file_name(output: str) -> str:
    """The file name oc-run gives an output (docs/native.md, "oc-run"), for names under 200 bytes."""
    return "".join("_" if c in '/\\:*?"<>|' or ord(c) < 32 else c for c in output)


@dataclass(frozen=True)
class OcRun:
    """oc-run of one model on the inputs ``args`` (``--in`` files), in one onnxruntime library."""

    native: Path
    library: Path
    args: list
    folder: Path
    label: str

    def expect(self, how: list, out: str, expected: dict[str, np.ndarray]) -> None:
        """oc-run ``how`` (``--bundle``/``--model`` or ``--blob``) writes ``expected`` into ``out``."""
        run_native(
            [self.native / "oc-run", *how, "--ort", self.library, *self.args, "--out", self.folder / out]
        )
        for output, want in expected.items():
            got = np.load(self.folder / out / f"{oc_run_file_name(output)}.npy")
            assert got.dtype == want.dtype and got.shape == want.shape, (self.label, output)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{self.label} ({how[0]})")


def _mutations(blob: bytes, rng: random.Random, count: int) -> list[bytes]:
    """Damaged and hostile versions of ``blob``: bit flips (header, frames, trailer), truncations,
    junk appended or prepended, and header JSON edits re-sealed with a valid CRC (huge sizes,
    frames pointing outside, overlapping or reordered frames, wrong types)."""
    from runtime_helpers import pack_header  # crafted headers with a correct CRC

    cases = []
    for _ in range(count):
        data = bytearray(blob)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        cases.append(bytes(data))
    for cut in sorted(
        {rng.randrange(len(blob)) for _ in range(count // 4)} | {0, 1, 7, 8, 21, len(blob) - 1}
    ):
        cases.append(blob[:cut])
    cases += [blob + b"\0", b"junk" + blob, bytes(64), b"\x5e\x2a\x4d\x18" + bytes(100)]
    # a trailer alone (16-23 bytes) pointing anywhere: no room for a header before it
    cases += [
        pad + b"OCB3TAIL" + offset.to_bytes(8, "little")
        for pad in (b"", b"1234567")
        for offset in (0, 8, 0x1000, (1 << 64) - 1)
    ]
    fields, rest = split_blob(blob)
    start = blob.find(b"ONNXCOOK") - 8
    header_size = int.from_bytes(blob[start + 4 : start + 8], "little")
    edits = [
        ("model_size", 1 << 62),
        ("graph_size", 1 << 40),
        ("compressed_size", -1),
        ("frames", []),
        ("frames", [["graph", "raw", 0, 1 << 50, 1 << 50, 0, []]]),
        ("frames", "x"),
        ("weights", 7),
        ("execution_providers", [1]),
        ("min_runtime_version", "one"),
        ("model_format", "tflite"),
        ("provider_options", {"X": 1}),
        ("ep_session_options", {"CPUExecutionProvider": {"a": [1]}}),
    ]
    for key, value in edits:
        changed = json.loads(json.dumps(fields))
        changed[key] = value
        payload = json.dumps(changed, sort_keys=True, separators=(",", ":")).encode()
        cases.append(blob[:start] + pack_header(payload, version=3) + blob[start + 8 + header_size :])
    # JSON as json.loads reads it: trailing bytes refused, of duplicate keys the last one counts.
    # Same length as the header's own JSON (the cooker pads it with spaces), so the layout still fits.
    original = blob[start + 22 : start + 8 + header_size]
    text = original.rstrip(b" ")
    room = len(original) - len(text)
    prefix = b'{"model_size":1,"platform":"x",'
    for crafted in (
        text + b" " * (room - 1) + b"x" if room else None,  # trailing garbage
        prefix + text[1:] + b" " * (room - len(prefix) + 1) if room >= len(prefix) else None,  # duplicates
    ):
        if crafted is not None:
            assert len(crafted) == len(original)
            cases.append(blob[:start] + pack_header(crafted, version=3) + blob[start + 8 + header_size :])
    for index in range(len(fields["frames"])):
        for position, value in ((2, 1 << 45), (3, 1 << 45), (4, 3), (5, 70000)):
            changed = json.loads(json.dumps(fields))
            changed["frames"][index][position] = value
            payload = json.dumps(changed, sort_keys=True, separators=(",", ":")).encode()
            cases.append(blob[:start] + pack_header(payload, version=3) + blob[start + 8 + header_size :])
    return cases


@pytest.mark.parametrize("platform", ["windows-dml", "android"])
def test_hostile_blobs_get_the_python_loaders_verdict_and_never_crash(
    native: Path, bundles: Path, platform: str, tmp_path: Path
) -> None:
    """Only statuses, no crash, no leak, no sanitizer report: and the same verdict (accepted, or
    refused with the same cause) as the Python loader's unpack_blob on every case."""
    bundle = open_bundle(bundles / platform)
    rng = random.Random(platform)
    files = []
    for name in bundle.names:
        for index, case in enumerate(_mutations(bundle.read_blob(name), rng, 60)):
            path = tmp_path / f"{name.replace('/', '_')}-{index}.ocb"
            path.write_bytes(case)
            files.append(path)
    lines = []
    for start in range(0, len(files), 400):
        done = run_native([native / "oc-probe", "blob", *files[start : start + 400]])
        lines += [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == len(files)
    disagreements = []
    for path, line in zip(files, lines, strict=True):
        try:
            unpack_blob(path.read_bytes())
            expected = "OC_OK"
        except py_errors.UnsupportedBlobVersionError:
            expected = "OC_ERR_UNSUPPORTED_VERSION"
        except py_errors.BundleError as exc:
            expected = STATUS_OF[type(exc)]
        if line["status"] != expected:
            disagreements.append((path.name, expected, line["status"], line["message"]))
    assert not disagreements, f"{len(disagreements)} of {len(files)} differ: {disagreements[:10]}"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("model_format", ["onnx", "ort"])
def test_sessions_compute_from_the_callers_memory_where_the_path_says_so(
    native: Path, version: str, model_format: str, tmp_path: Path
) -> None:
    """The caller's buffer zeroed under a live session (prepacking off) changes its outputs: the
    weights are used in place (ORT format in every version; ONNX weights as file buffers from 1.32,
    as shared initializers in 1.24.4 and 1.28.0); the buffer is freed only after the session and
    blob are released (the blob releases the shared initializers' OrtValues), under AddressSanitizer
    with leak detection. The copying path's copy is shown by the conv net onnxruntime refuses in
    place (test_a_conv_net_refused_as_shared_initializers_loads_along_the_fallback)."""
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
    result = json.loads(
        run_native([native / "test_in_place", ort_library(version), path, offset, len(weight)]).stdout
    )
    expected_path = {
        "ort": "ort-in-place",
        "onnx": "onnx-file-buffers" if version == "1.32.0" else "onnx-shared-initializers",
    }
    assert result["load_path"] == expected_path[model_format]
    assert result["handed_inside_caller_memory"] is True  # the library hands over views, never copies
    assert result["before"] > 1.0
    assert result["after"] == 0.0, result  # y = x @ 0: the session reads the caller's bytes
    # The same bytes one past an aligned address (a pak's buffer): onnxruntime would read every
    # weight (and an ORT table) misaligned in place, which strict-alignment CPUs fault on. The
    # library works from its own aligned copy: same path and outputs, the caller's bytes unread.
    shifted = json.loads(
        run_native(
            [native / "test_in_place", ort_library(version), path, offset, len(weight), "misaligned"]
        ).stdout
    )
    assert shifted["load_path"] == expected_path[model_format]
    assert shifted["handed_inside_caller_memory"] is False
    assert shifted["before"] == shifted["after"] == result["before"], shifted


def onnx_numpy(model) -> bytes:
    from onnx import numpy_helper

    return numpy_helper.to_array(model.graph.initializer[0]).tobytes()


SHARED_VERSIONS = ("1.24.4", "1.28.0")  # onnx-shared-initializers (from 1.32: onnx-file-buffers)


def oc_run_matches_source(
    native: Path, bundle: Path, name: str, library: Path, source, tmp_path: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """oc-run on model ``name`` of ``bundle`` with seeded inputs: its outputs are onnxruntime's on
    the uncooked ``source`` (a ModelProto). Returns the finished oc-run."""
    import onnxruntime

    reference = onnxruntime.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = feeds_for(reference, None)
    expected = run_session(reference, feeds)
    folder = tmp_path / f"run-{name}-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    args = []
    for value in reference.get_inputs():
        np.save(folder / f"in-{value.name}.npy", feeds[value.name])
        args += ["--in", folder / f"in-{value.name}.npy"]
    done = run_native(
        [
            native / "oc-run",
            "--bundle",
            bundle,
            "--model",
            name,
            "--ort",
            library,
            *args,
            "--out",
            folder / "out",
            *extra,
        ]
    )
    for output, want in expected.items():
        got = np.load(folder / "out" / f"{output.replace('/', '_')}.npy")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} output {output}")
    return done


@pytest.mark.parametrize("version", SHARED_VERSIONS)
def test_a_conv_net_refused_as_shared_initializers_loads_along_the_fallback(
    native: Path, version: str, tmp_path: Path
) -> None:
    """onnxruntime 1.24.4 and 1.28.0 refuse the shared-initializer door for conv nets (their
    optimizers read the weights from the referenced file: "cannot get file size [/dev/null]"). The
    bench's ResNet-18 then loads along the copying path from memory (shown to copy: its weights
    zeroed under the live session change nothing) and its MobileNetV2, a mapped blob file, along
    onnx-mapped, both skipping the door (float 4-D weights: so does x + w with such a weight, which
    onnxruntime would have accepted shared, the skip made visible); a float16 Conv skips it too, and
    so does a Concat of a float16 weight, which onnxruntime would have accepted (16-bit float
    weights: the rule's other half, made visible the same way); a model whose refusal no weight
    announces (a Transpose of a weight, folded at load) tries it and takes the copying path.
    All with the source's outputs, the path used reported, onnxruntime's log of a refusal kept quiet."""
    from runtime_helpers import make_weighted_blob

    from bench import models as bench_models
    from tests.models import (
        float_4d_weight_model,
        half_concat_model,
        half_conv_model,
        transposed_weight_model,
    )

    library = ort_library(version)
    resnet = bench_models.build_resnet18(bench_models.QUICK)  # under 1 MiB: a bundle reads it into memory
    mobilenet = bench_models.build_mobilenet(bench_models.FULL)  # ~5 MB: the bundle maps the blob file
    transposed, added = transposed_weight_model(), float_4d_weight_model()
    half_conv, half_concat = half_conv_model(), half_concat_model()
    models = (("resnet18", resnet), ("mobilenet", mobilenet), ("transposed", transposed), ("added", added))
    models += (("half_conv", half_conv), ("half_concat", half_concat))
    blobs = {
        name: make_weighted_blob(model, "raw", name=name, platform="windows-dml")[0] for name, model in models
    }
    assert len(blobs["resnet18"]) < 1 << 20 <= len(blobs["mobilenet"])
    folder = write_bundle(
        tmp_path / "bundle", {name: ("onnx", blob) for name, blob in blobs.items()}, platform="windows-dml"
    )
    for name, model, expected in (
        ("resnet18", resnet, "onnx-external-initializers"),
        ("mobilenet", mobilenet, "onnx-mapped"),
        ("transposed", transposed, "onnx-external-initializers"),
        ("added", added, "onnx-external-initializers"),  # onnx-shared-initializers without the rule
        ("half_conv", half_conv, "onnx-external-initializers"),  # float16: refused, so skipped
        ("half_concat", half_concat, "onnx-external-initializers"),  # shared without the rule
    ):
        done = oc_run_matches_source(native, folder, name, library, model, tmp_path)
        assert f"load path {expected}," in done.stdout, done.stdout
        assert "/dev/null" not in done.stderr, done.stderr  # the refusal is answered, not logged
        # ... and reported (oc_session_create_reported): only where the door was tried
        said = [line for line in done.stdout.splitlines() if line.startswith("refused first: ")]
        if name == "transposed":
            assert said, done.stdout
            assert said[0].startswith("refused first: onnx-shared-initializers refused ("), said
            assert "/dev/null" in said[0], said
        else:  # skipped by rule: no try, no refusal
            assert not said, done.stdout
        # A second and third session in the same process (the refusal remembered) take the same path,
        # and the latest still reports the refusal it skipped
        timed = run_native(
            [native / "oc-run", "--bundle", folder, "--model", name, "--ort", library, "--time", "3"]
        )
        report = json.loads(timed.stdout.splitlines()[-1])
        assert report["load_path"] == expected
        if name == "transposed":
            assert report["refused"] == said[0].removeprefix("refused first: "), report
        else:
            assert report["refused"] is None, report

    # From the caller's memory: the copying path, and it copies (the outputs do not follow the bytes)
    from onnx import numpy_helper

    weight = max(
        (numpy_helper.to_array(t).tobytes() for t in resnet.graph.initializer), key=len
    )  # the largest convolution kernel
    offset = blobs["resnet18"].find(weight)
    assert offset > 0 and blobs["resnet18"].find(weight, offset + 1) == -1
    path = tmp_path / "resnet18.ocb"
    path.write_bytes(blobs["resnet18"])
    result = json.loads(run_native([native / "test_in_place", library, path, offset, len(weight)]).stdout)
    assert result["load_path"] == "onnx-external-initializers"
    assert result["before"] > 0 and result["after"] == result["before"], result  # onnxruntime's own copy


@pytest.mark.parametrize("version", SHARED_VERSIONS)
def test_shared_initializers_refuse_a_header_whose_shapes_are_not_the_graphs(
    native: Path, version: str, tmp_path: Path
) -> None:
    """The shared initializers are made from the blob header's data types and dims: a header that
    declares other dims for a weight than its graph does (same bytes, re-sealed with a valid CRC) is
    refused as corrupt, before onnxruntime is handed a tensor of the wrong shape."""
    from runtime_helpers import make_weighted_blob, pack_header

    from tests.models import large_matmul_model

    source = large_matmul_model(512, 256, seed=9)
    blob = make_weighted_blob(source, "raw", name="swapped")[0]
    start = blob.find(b"ONNXCOOK") - 8
    header_size = int.from_bytes(blob[start + 4 : start + 8], "little")
    text = blob[start + 22 : start + 8 + header_size]
    assert text.count(b"[512,256]") == 1
    crafted = blob[:start] + pack_header(text.replace(b"[512,256]", b"[256,512]"), version=3)
    crafted += blob[start + 8 + header_size :]
    folder = write_bundle(tmp_path / "bundle", {"swapped": ("onnx", crafted)})
    x = np.ones((1, 512), np.float32)
    np.save(tmp_path / "x.npy", x)
    done = run_native(
        [
            native / "oc-run",
            "--bundle",
            folder,
            "--model",
            "swapped",
            "--ort",
            ort_library(version),
            "--in",
            tmp_path / "x.npy",
        ],
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "model 'swapped': blob graph's initializer 'W' is not one initializer of the main graph with the "
        "data type and dims its blob header" in (done.stderr)
    )


def _graph_changes() -> list:
    from tests import test_external_refs as refs

    return [
        (refs._retype, "is not one initializer of the main graph with the data type and dims"),
        (refs._drop_from_the_graph, "is not one initializer of the main graph with the data type and dims"),
        (refs._shadow_in_a_subgraph, "is defined again outside the main graph's initializers"),
        (refs._constant_of_its_name, "is defined again outside the main graph's initializers"),
    ]


@pytest.mark.parametrize("version", SHARED_VERSIONS)
@pytest.mark.parametrize(("change", "message"), _graph_changes())
def test_shared_initializers_refuse_a_graph_that_lacks_retypes_or_redefines_a_listed_weight(
    native: Path, version: str, change, message: str, tmp_path: Path
) -> None:
    """onnxruntime puts a shared initializer in place of every initializer of its name, subgraphs'
    and Constants' too, with the header's type and shape: the same refusals as the Python loader's
    (tests/test_external_refs.py), for a graph that lacks a listed weight, gives it another type, or
    defines its name again in a subgraph or as a Constant."""
    from tests import test_external_refs as refs

    blob, _ = refs._weighted(refs._edit_weight(change))
    folder = write_bundle(tmp_path / "bundle", {"edited": ("onnx", blob)})
    np.save(tmp_path / "x.npy", np.ones((1, 64), np.float32))
    done = run_native(
        [native / "oc-run", "--bundle", folder, "--model", "edited", "--ort", ort_library(version)]
        + ["--in", tmp_path / "x.npy"],
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert message in done.stderr, done.stderr


def _probe_blobs(native: Path, folder: Path, blobs: list[bytes]) -> list[dict]:
    """oc-probe's line for each of ``blobs``, written to files in ``folder`` and opened from memory."""
    files = []
    for index, blob in enumerate(blobs):
        files.append(folder / f"case-{index}.ocb")
        files[-1].write_bytes(blob)
    return [
        json.loads(line) for line in run_native([native / "oc-probe", "blob", *files]).stdout.splitlines()
    ]


def test_a_weights_file_that_is_no_plain_file_name_is_refused(native: Path, tmp_path: Path) -> None:
    """The blob header's weights file is `info.weights_file`, which an engine that unpacks may write:
    a path, a drive, `..` or a control character in it is refused as a damaged header, as the Python
    loader refuses it (tests/test_weights.py)."""
    from tests.test_weights import NOT_PLAIN, not_plain_blobs

    lines = _probe_blobs(native, tmp_path, not_plain_blobs())
    assert len(lines) == len(NOT_PLAIN)
    for file, line in zip(NOT_PLAIN, lines, strict=True):
        assert line["status"] == "OC_ERR_CORRUPT", (file, line)
        assert "'file' is not a plain file name (re-cook the model)" in line["message"], (file, line)


def test_a_nul_in_a_header_string_is_refused(native: Path, tmp_path: Path) -> None:
    """A \\u0000 escape in a header string: cJSON would end the string at its NUL where Python keeps
    it whole, so both loaders refuse the header (tests/test_weights.py)."""
    from tests.test_weights import nul_blobs

    lines = _probe_blobs(native, tmp_path, nul_blobs())
    assert [(line["status"], line["message"]) for line in lines] == [
        ("OC_ERR_CORRUPT", "blob header is not valid JSON")
    ] * len(lines)


def test_nnapi_is_registered_as_onnxruntimes_android_builds_take_it(native: Path, tmp_path: Path) -> None:
    """NNAPI has no name onnxruntime's generic append takes: Android builds export
    OrtSessionOptionsAppendExecutionProvider_Nnapi instead, which the library calls for a blob that
    prefers NNAPI where onnxruntime offers it (every android blob does). No NNAPI runs here: the shim
    (native/tests/nnapi_shim.c) is onnxruntime 1.32.0 listing NNAPI and exporting that function, which
    appends nothing and says it was called; the session then computes on the CPU EP."""
    include = next((NATIVE_OUT / "_deps").glob("onnxruntime-*/include"))
    shim = tmp_path / "libonnxruntime_nnapi_shim.so"
    subprocess.run(
        ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", f"-I{include}", "-o", shim]
        + [REPO / "native" / "tests" / "nnapi_shim.c", "-ldl"],
        check=True,
    )
    from tests.models import dense_model

    model = dense_model(16, 8, batch=1, seed=3, activation="Relu", name="net")
    preferred = ["NnapiExecutionProvider", "XnnpackExecutionProvider", "CPUExecutionProvider"]
    blob = make_blob(model.SerializeToString(), "onnx", name="net", execution_providers=preferred)
    folder = write_bundle(tmp_path / "bundle", {"net": ("onnx", blob)}, platform="android")
    x = np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    done = run_native(
        [native / "oc-run", "--bundle", folder, "--model", "net", "--ort", shim, "--in", tmp_path / "x.npy"]
        + ["--out", tmp_path / "out"],
        env={"OC_SHIM_REAL_ORT": str(ort_library("1.32.0"))},
    )
    assert "nnapi_shim: NNAPI appended to the session options (flags 0)" in done.stderr, done.stderr
    import onnxruntime

    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = want.run(None, {want.get_inputs()[0].name: x})[0]
    got = np.load(tmp_path / "out" / f"{want.get_outputs()[0].name}.npy")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_signature_shapes_read_without_json_as_sizes_and_names(native: Path, tmp_path: Path) -> None:
    """oc_bundle_signature_rank / oc_bundle_signature_dim: sizes, names and free dimensions as the
    manifest gives them; what the cooker never writes (negative, fractional, nested, huge numbers, a
    shape that is no list) reads as free or as no shape, never a crash (the sanitizer build)."""
    from tests.models import dense_model

    blob = make_blob(dense_model(4, 2, batch=1, seed=1).SerializeToString(), "onnx")
    folder = write_bundle(tmp_path / "bundle", {"net": ("onnx", blob)})
    manifest = json.loads((folder / "manifest.json").read_text())
    shapes = {
        "image": ["batch", 3, 224, 224],
        "free": [None, "seq"],
        "scalar": [],
        "odd": [-1, 2.5, [3], 1e30, {"x": 1}, 7],
        "sequence": None,
        "text": "not a list",
    }
    manifest["models"]["net"]["inputs"] = [
        {"name": k, "type": "tensor(float)", "shape": v} for k, v in shapes.items()
    ]
    manifest["models"]["net"]["outputs"] = [{"name": "y", "type": "seq(tensor(float))"}]  # no shape at all
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (line, *_) = [
        json.loads(x)
        for x in run_native([native / "oc-probe", "manifest", folder / "manifest.json"]).stdout.splitlines()
    ]
    assert line["status"] == "OC_OK", line
    got = {t["name"]: t["dims"] for t in line["models"]["net"]["inputs"]}
    assert got == {
        "image": [[-1, "batch"], [3, None], [224, None], [224, None]],
        "free": [[-1, None], [-1, "seq"]],
        "scalar": [],
        "odd": [[-1, None], [-1, None], [-1, None], [-1, None], [-1, None], [7, None]],
        "sequence": None,
        "text": None,
    }, got
    assert [t["dims"] for t in line["models"]["net"]["outputs"]] == [None]
    assert {t["past"] for side in ("inputs", "outputs") for t in line["models"]["net"][side]} == {
        "OC_ERR_INVALID_ARGUMENT"
    }


def test_an_unknown_model_name_gets_the_nearest_and_the_bundles_names(native: Path, tmp_path: Path) -> None:
    """A model name given in another case, or without its folder, is suggested as the name it
    misses; the message lists the bundle's models, as the Python loader's does. A manifest cut off
    is named as JSON that cannot be read, not as JSON of another kind."""
    from tests.models import dense_model

    blob = make_blob(dense_model(4, 2, batch=1, seed=1).SerializeToString(), "onnx")
    (tmp_path / "bundle" / "vision").mkdir(parents=True)
    folder = write_bundle(tmp_path / "bundle", {"mnist": ("onnx", blob), "vision/detector": ("onnx", blob)})
    asked = {"MNIST": "mnist", "detector": "vision/detector", "mnis": "mnist", "mars": None, "mn": None}
    done = run_native([native / "oc-probe", "bundle", folder, *asked])
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["status"] for line in lines] == ["OC_OK"] + ["OC_ERR_UNKNOWN_MODEL"] * 5, done.stdout
    for line, (name, meant) in zip(lines[1:], asked.items(), strict=True):
        # a name sharing one letter ("mars") or two ("mn") gets no guess
        guess = f"; did you mean '{meant}'? it holds" if meant else ", which holds"
        assert line["message"].endswith(
            f": no model '{name}' in this test-platform bundle{guess} 'mnist', 'vision/detector'"
        ), line
    manifest = (folder / "manifest.json").read_bytes()
    (folder / "manifest.json").write_bytes(manifest[: len(manifest) // 2])
    (line,) = [
        json.loads(line) for line in run_native([native / "oc-probe", "bundle", folder]).stdout.splitlines()
    ]
    assert line["status"] == "OC_ERR_MANIFEST"
    assert line["message"].endswith(
        "manifest.json is not valid JSON (cut off, or not UTF-8 JSON); re-run `onnx-cooker cook`"
    ), line


def test_errors_about_a_blob_file_name_it_and_a_damaged_ones_end_with_the_fix(
    native: Path, tmp_path: Path
) -> None:
    """As the Python loader's Bundle.session: a session's failure begins with the blob file's path
    (here the graph names /etc/passwd), and a damaged blob's message (here a header re-sealed with a
    model format no loader knows) ends with the fix."""
    from runtime_helpers import repack

    from tests import test_external_refs as refs

    hostile, _ = refs._weighted(refs._set_location("/etc/passwd"))
    intact, _ = refs._weighted()
    folder = write_bundle(tmp_path / "bundle", {"hostile": ("onnx", hostile), "odd": ("onnx", intact)})
    odd = repack(intact, model_format="tflite")  # then listed in the manifest as it is: sha256 and size
    (folder / "odd.onnx.ocb").write_bytes(odd)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["models"]["odd"].update(blob_sha256=hashlib.sha256(odd).hexdigest(), blob_size=len(odd))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    np.save(tmp_path / "x.npy", np.ones((1, 64), np.float32))
    done = run_native(
        [native / "oc-run", "--bundle", folder, "--model", "hostile", "--ort", ort_library("1.32.0")]
        + ["--in", tmp_path / "x.npy"],
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"oc-run: error: {folder}/hostile.onnx.ocb: model 'tiny': blob graph tensor 'W' "
    ), done.stderr
    assert done.stderr.rstrip().endswith("; re-copy the blob file whole, or re-run `onnx-cooker cook`"), (
        done.stderr
    )
    lines = [
        json.loads(line)
        for line in run_native([native / "oc-probe", "bundle", folder, "odd"]).stdout.splitlines()
    ]
    assert lines[-1]["status"] == "OC_ERR_CORRUPT"
    assert lines[-1]["message"] == (
        f"{folder}/odd.onnx.ocb: blob header names an unknown model format 'tflite'; re-copy the blob file "
        "whole, or re-run `onnx-cooker cook`"
    )


def test_an_ep_given_that_onnxruntime_does_not_offer_names_those_it_offers(
    native: Path, tmp_path: Path
) -> None:
    """--ep with a name this onnxruntime does not offer, a typo or another build's EP: the message
    lists the EPs it offers, whoever refuses the name (the library, or onnxruntime's append)."""
    from tests.models import dense_model

    blob = make_blob(dense_model(4, 2, batch=1, seed=1).SerializeToString(), "onnx", name="net")
    folder = write_bundle(tmp_path / "bundle", {"net": ("onnx", blob)})
    for ep, said in (
        (
            "CPUExecutionProviderr",
            "CPUExecutionProviderr is no execution provider this onnxruntime (1.32.0) offers; ",
        ),
        ("DmlExecutionProvider", "DML execution provider is not supported in this build"),
    ):
        done = run_native(
            [
                native / "oc-run",
                "--bundle",
                folder,
                "--model",
                "net",
                "--ort",
                ort_library("1.32.0"),
                "--ep",
                ep,
            ],
            check=False,
        )
        assert done.returncode == 1 and said in done.stderr, done.stderr
        import onnxruntime  # this venv's wheel: 1.32.0, as the library oc-run loads

        offered = ", ".join(onnxruntime.get_available_providers())
        assert f"offers {offered}" in done.stderr, done.stderr


def test_a_control_character_in_a_models_name_is_refused(native: Path, tmp_path: Path) -> None:
    """The header's model name and platform go into every message and log line: a control character
    in them (a newline, a terminal escape) is refused, as the Python loader refuses it."""
    from runtime_helpers import repack

    from tests.test_weights import _blob_of, mlp

    blob = _blob_of(mlp(), "raw")
    crafted = [repack(blob, name="evil\nname\x1b[31m"), repack(blob, platform="android\x7f")]
    lines = _probe_blobs(native, tmp_path, crafted)
    assert [(line["status"], line["message"]) for line in lines] == [
        ("OC_ERR_CORRUPT", f"blob header field '{field}' holds a control character: re-cook the model")
        for field in ("name", "platform")
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_graph_holding_groups_loads_as_onnxruntime_reads_it(
    native: Path, version: str, tmp_path: Path
) -> None:
    """protobuf skips a group (wire types 3 and 4, which no ONNX field is) whatever it holds: the
    blob of tests/test_wire_groups.py, with groups in its graph, a node and a weight's initializer
    that hold the weight's name and an entry naming /etc/passwd, loads through oc-run with the
    source's outputs (1.24.4 and 1.28.0: shared initializers, whose graph rewrite copies the groups
    whole; 1.32.0: file buffers)."""
    from tests.test_wire_groups import grouped_blob

    model, blob = grouped_blob()
    folder = write_bundle(tmp_path / "bundle", {"grouped": ("onnx", blob)})
    oc_run_matches_source(native, folder, "grouped", ort_library(version), model, tmp_path)


def _manifest_cases(bundle: Path) -> dict[str, Callable[[Path], None]]:
    """name -> an edit of a copy of ``bundle`` (its manifest or its blob files)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = sorted(manifest["models"])
    first, second = names[0], names[1]

    def edit(change: Callable[[dict], None]) -> Callable[[Path], None]:
        def apply(folder: Path) -> None:
            data = json.loads((folder / "manifest.json").read_text())
            change(data)
            (folder / "manifest.json").write_text(json.dumps(data))

        return apply

    def write(text: str) -> Callable[[Path], None]:
        return lambda folder: (folder / "manifest.json").write_text(text)

    def recode(change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
        def apply(folder: Path) -> None:
            path = folder / "manifest.json"
            path.write_bytes(change(path.read_bytes()))

        return apply

    def in_platform(raw: bytes) -> Callable[[bytes], bytes]:  # bytes inside the platform's string
        return lambda text: text.replace(b'"platform": "', b'"platform": "' + raw, 1)

    def entry(key: str, value) -> Callable[[Path], None]:
        return edit(lambda d: d["models"][first].__setitem__(key, value))

    def swap(d: dict) -> None:
        a, b = d["models"][first], d["models"][second]
        for key in ("file", "blob_size", "blob_sha256"):
            a[key], b[key] = b[key], a[key]

    def damage_blob(cut: bool) -> Callable[[Path], None]:
        def apply(folder: Path) -> None:
            path = folder / manifest["models"][first]["file"]
            data = bytearray(path.read_bytes())
            if cut:
                del data[-1]
            else:
                data[len(data) // 2] ^= 0x10
            path.write_bytes(bytes(data))

        return apply

    def link_outside(folder: Path) -> None:  # the blob file a link to an identical file outside
        path = folder / manifest["models"][first]["file"]
        outside = folder.parent / f"{folder.name}-outside.ocb"
        outside.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(outside)

    def fifo(folder: Path) -> None:  # a named pipe where the blob should be: refused, never waited on
        path = folder / manifest["models"][first]["file"]
        path.unlink()
        os.mkfifo(path)

    return {
        "not-json": write("{"),
        "an-array": write("[]"),
        "version-2": edit(lambda d: d.__setitem__("manifest_version", 2)),
        "no-platform": edit(lambda d: d.pop("platform")),
        "models-a-list": edit(lambda d: d.__setitem__("models", [])),
        "entry-a-string": edit(lambda d: d["models"].__setitem__(first, "x")),
        "no-file": edit(lambda d: d["models"][first].pop("file")),
        "negative-size": entry("blob_size", -1),
        "absolute-file": entry("file", "/etc/passwd"),
        "dotdot-file": entry("file", "../outside.ocb"),
        "backslash-file": entry("file", "a\\b.ocb"),
        "drive-file": entry("file", "c:x.ocb"),
        "empty-file": entry("file", ""),
        "missing-file": entry("file", "nope.ocb"),
        "size-off-by-one": edit(
            lambda d: d["models"][first].__setitem__("blob_size", d["models"][first]["blob_size"] + 1)
        ),
        "wrong-sha256": entry("blob_sha256", "0" * 64),
        "inputs-a-string": entry("inputs", "x"),
        "output-without-type": entry("outputs", [{"name": "y"}]),
        "nul-escape": recode(in_platform(b"\\u0000")),
        "blobs-swapped": edit(swap),
        "blob-cut": damage_blob(cut=True),
        "blob-flipped": damage_blob(cut=False),
        "link-outside": link_outside,
        "fifo": fifo,
        # UTF-8 only, a leading BOM allowed, in both loaders (Python decodes with utf-8-sig first)
        "utf8-bom": recode(lambda text: b"\xef\xbb\xbf" + text),
        "utf16": recode(lambda text: text.decode("utf-8").encode("utf-16")),
        "bad-utf8": recode(in_platform(b"\xff")),
        "overlong-utf8": recode(in_platform(b"\xc0\xaf")),
        "surrogate-utf8": recode(in_platform(b"\xed\xa0\x80")),
        "cut-utf8": recode(in_platform(b"\xe2\x82")),
        # not JSON, or no text: Python read them (NaN, a lone surrogate) where cJSON refuses them
        "nan-in-an-unread-field": recode(lambda text: text.replace(b"{", b'{"x": NaN, ', 1)),
        "lone-surrogate-escape": recode(in_platform(b"\\ud800")),
        "surrogate-pair-escape": recode(in_platform(b"\\ud83d\\ude00")),  # a character: read by both
        # an empty path segment (a cooker writes none): Python normalized it away and loaded the blob
        "file-with-a-trailing-slash": edit(
            lambda d: d["models"][first].__setitem__("file", d["models"][first]["file"] + "/")
        ),
        "file-with-a-double-slash": edit(
            lambda d: d["models"][first].__setitem__("file", ".//" + d["models"][first]["file"])
        ),
    }


PY_STATUS = {
    **STATUS_OF,
    py_errors.ManifestError: "OC_ERR_MANIFEST",
    py_errors.UnknownModelError: "OC_ERR_UNKNOWN_MODEL",
}


def _python_verdicts(folder: Path) -> list[str]:
    """The Python loader's verdict on the bundle, then on each model's blob (as oc-probe prints)."""
    try:
        bundle = open_bundle(folder)
    except py_errors.BundleError as exc:
        return [PY_STATUS[type(exc)]]
    verdicts = ["OC_OK"]
    for name in sorted(bundle.names):
        try:
            bundle.session(name, providers=["CPUExecutionProvider"])
            verdicts.append("OC_OK")
        except py_errors.BundleError as exc:
            verdicts.append(PY_STATUS[type(exc)])
    return verdicts


def test_hostile_manifests_and_bundles_get_the_python_loaders_verdict(
    native: Path, bundles: Path, tmp_path: Path
) -> None:
    """Broken and hostile manifests, files out of the folder, damaged or swapped blobs: opened from
    the folder and through reader callbacks (an engine's archive), the C library's statuses are the
    Python loader's exceptions, with no crash, leak or sanitizer report."""
    import shutil

    source = bundles / "windows-dml"
    differ = []
    for case, apply in _manifest_cases(source).items():
        folder = tmp_path / case
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns(".*"))
        apply(folder)
        expected = _python_verdicts(folder)
        for mode in ("bundle", "reader"):
            if mode == "reader" and case == "link-outside":
                continue  # an archive reader serves bytes by name: links are the folder's concern
            lines = [
                json.loads(line)
                for line in run_native([native / "oc-probe", mode, folder]).stdout.splitlines()
            ]
            got = [line["status"] for line in lines]
            if mode == "reader" and got[0] == "OC_OK" and expected[0] != "OC_OK":
                # Through callbacks each blob is checked when it is loaded, not when the bundle is
                # opened: the same cause, on the model it concerns.
                got = next(([s] for s in got if s != "OC_OK"), got)
            if got != expected:
                differ.append(
                    (case, mode, expected, got, [line["message"] for line in lines if line["message"]])
                )
            refusal = next((line for line in lines if line["status"] != "OC_OK"), None)
            if refusal is not None:  # says which file and what to do
                assert "manifest" in refusal["message"] and "cook" in refusal["message"], (case, refusal)
    assert not differ, "\n".join(map(str, differ))


def test_signed_bundles_open_only_with_a_trusted_key(native: Path, tmp_path: Path) -> None:
    """A bundle cooked with COOK_SIGNING_KEY: the C library accepts it with the studio's key (or
    during a rotation, old and new), and refuses a modified manifest, a foreign key, a missing or
    cut signature, and a blob replaced behind the signed manifest: as the Python loader does."""
    import shutil

    from cryptography.hazmat.primitives import serialization

    from onnx_cooker.build.signing import keygen
    from tests.test_reliability import small_project

    project = small_project(tmp_path / "project")
    private, public = keygen(tmp_path / "keys")
    run = doit(project, "cook", env={"COOK_SIGNING_KEY": str(private)})
    assert run.returncode == 0, run.output
    signed = project / "build" / "android"

    def raw(pem: Path) -> str:
        key = serialization.load_pem_public_key(pem.read_bytes())
        return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()

    other = raw(keygen(tmp_path / "other")[1])

    def probe(folder: Path, keys: list[str], mode: str = "bundle") -> list[dict]:
        done = run_native([native / "oc-probe", mode, folder], env={"OC_PROBE_KEYS": ",".join(keys)})
        return [json.loads(line) for line in done.stdout.splitlines()]

    for mode in ("bundle", "reader"):
        lines = probe(signed, [raw(public)], mode)
        assert [line["status"] for line in lines] == ["OC_OK"] * 3, lines
        assert probe(signed, [other, raw(public)], mode)[0]["status"] == "OC_OK"  # rotation
        foreign = probe(signed, [other], mode)[0]
        assert (
            foreign["status"] == "OC_ERR_SIGNATURE"
            and "matches none of the 1 trusted key" in foreign["message"]
        )

    modified = Path(shutil.copytree(signed, tmp_path / "modified"))
    manifest = json.loads((modified / "manifest.json").read_text())
    manifest["models"]["net"]["execution_providers"] = ["CPUExecutionProvider"]
    (modified / "manifest.json").write_text(json.dumps(manifest))
    assert probe(modified, [raw(public)])[0]["status"] == "OC_ERR_SIGNATURE"

    unsigned = Path(shutil.copytree(signed, tmp_path / "unsigned"))
    (unsigned / "manifest.json.sig").write_bytes((unsigned / "manifest.json.sig").read_bytes()[:63])
    assert "not a 64-byte signature" in probe(unsigned, [raw(public)])[0]["message"]
    (unsigned / "manifest.json.sig").unlink()
    missing = probe(unsigned, [raw(public)])[0]
    assert missing["status"] == "OC_ERR_SIGNATURE" and "manifest.json.sig missing" in missing["message"]
    assert probe(unsigned, [])[0]["status"] == "OC_OK"  # without keys, no signature is asked for

    replaced = Path(shutil.copytree(signed, tmp_path / "replaced"))
    files = {
        name: entry["file"]
        for name, entry in json.loads((replaced / "manifest.json").read_text())["models"].items()
    }
    (replaced / files["net"]).write_bytes((replaced / files["mlp"]).read_bytes())
    lines = probe(replaced, [raw(public)])
    assert lines[0]["status"] == "OC_ERR_CHECKSUM" and files["net"] in lines[0]["message"]
    # skip_verify does not lift a signed bundle's check: the replaced blob is refused when loaded
    done = run_native(
        [native / "oc-probe", "bundle", replaced, "net"],
        env={"OC_PROBE_KEYS": raw(public), "OC_PROBE_SKIP_VERIFY": "1"},
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["status"] == "OC_OK" and lines[1]["status"] == "OC_ERR_CHECKSUM", lines


def test_the_csharp_declarations_cover_the_whole_c_abi() -> None:
    import re

    header = (REPO / "native" / "include" / "onnx_cooker.h").read_text()
    functions = set(re.findall(r"^OC_API [^(]*?\b(oc_\w+)\(", header, re.MULTILINE))
    declared = set(
        re.findall(
            r"static extern \S+ (oc_\w+)\(", (REPO / "native" / "bindings" / "OnnxCooker.cs").read_text()
        )
    )
    assert len(functions) > 30
    assert functions == declared, (
        f"missing in C#: {sorted(functions - declared)}; unknown: {sorted(declared - functions)}"
    )


@pytest.mark.parametrize(
    "platform, model", [("windows-dml", "big_weights"), ("android", "mnist"), ("console", "resnet")]
)
def test_csharp_under_mono_opens_lists_loads_and_sees_each_error(
    native: Path, bundles: Path, platform: str, model: str, tmp_path: Path
) -> None:
    """What a Unity script does, under mono: a bundle from manifest bytes in a byte[], models and
    signatures, a blob from a pinned byte[], its recipe, a session created and released, and each
    error status managed code can provoke."""
    exe = tmp_path / "csharp_probe.exe"
    subprocess.run(
        [
            "mcs",
            "-nologo",
            "-warnaserror",
            f"-out:{exe}",
            REPO / "native" / "bindings" / "OnnxCooker.cs",
            REPO / "native" / "tests" / "CsharpProbe.cs",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    release = native.parent / "release"  # mono is not built with the sanitizers: the plain library
    done = subprocess.run(
        ["mono", str(exe), str(bundles / platform), model, str(ort_library("1.32.0"))],
        capture_output=True,
        text=True,
        env={**os.environ, "LD_LIBRARY_PATH": str(release)},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    facts = done.stdout
    names = open_bundle(bundles / platform).names
    assert f"platform: {platform}" in facts
    for name in names:
        assert f"signature: {name} input " in facts and f"signature: {name} output " in facts
    for status in (
        "OC_ERR_UNKNOWN_MODEL",
        "OC_ERR_NOT_A_BLOB",
        "OC_ERR_CHECKSUM",
        "OC_ERR_MANIFEST",
        "OC_ERR_RUNTIME_LOAD",
        "OC_ERR_INVALID_ARGUMENT",
        "OC_ERR_SESSION_CREATE",
    ):
        assert status in facts
    assert "load path: " in facts and facts.rstrip().endswith("ok")
    # oc_session_create_reported: the same path, and no refusal for these models in 1.32
    used = facts.split("load path: ", 1)[1].splitlines()[0]
    assert f"reported: {used}; refused: []" in facts, facts
    # plugin EPs through P/Invoke (1.32 serves their API; its CPU EP is offered as a device)
    assert "plugin eps: 1" in facts and "ep device: CPUExecutionProvider Cpu " in facts
    assert "policy eps: device policy prefer_cpu (given by the caller)" in facts
    assert "device policy: none" in facts
    # the engine's own call for the blob's preferred EP (which this onnxruntime lacks), from a delegate
    entry = json.loads((bundles / platform / "manifest.json").read_text())["models"][model]
    # the blob file by the manifest (oc_bundle_model_file), not by a glob over the folder
    size, file = entry["blob_size"], entry["file"].rsplit("/", 1)[-1]
    assert f"model file: {file} {size} bytes, read {size}" in facts
    assert "unknown model file: True 0" in facts
    # bytes that are not the manifest's blob: named as such, with the file the manifest names
    said = f"bytes given for model '{model}' are not its blob in this bundle: they are a damaged blob, or no"
    assert said in facts and f"; manifest.json names {entry['file']} (" in facts, facts
    preferred = read_header((bundles / platform / entry["file"]).read_bytes())[0]
    first = preferred.execution_providers[0]
    line = facts.split("appender eps: ", 1)[1].splitlines()[0]  # android's XNNPACK: skipped, not offered
    assert line.startswith(f"{first}, CPUExecutionProvider") and line.endswith("; called 1"), facts
    options = preferred.provider_options.get(first, {})
    shown = f" ({next(iter(options))}={next(iter(options.values()))})" if options else ""
    assert f"appender called: {first} with {len(options)} provider options{shown}" in facts, facts
    assert (
        "status a failing appender: OC_ERR_SESSION_CREATE (" in facts
        and f"model '{model}': the engine's appender of {first} failed: no devkit attached)" in facts
    ), facts
    assert "status the CPU EP's appender: OC_ERR_INVALID_ARGUMENT" in facts
    assert (
        "status an empty library path: OC_ERR_INVALID_ARGUMENT (oc_runtime_load: an empty library path;"
        in facts
    )
    # the managed layer (Bundle, Blob, Runtime, Session: IDisposable; OnnxCookerException)
    graph = preferred.graph_size
    weights = preferred.weights.size if preferred.weights is not None else 0
    assert (
        f" {entry['file']} inputs {len(entry['inputs'])} eps {','.join(preferred.execution_providers)}"
        in facts
    )
    assert f" model bytes {graph} weights bytes {weights}" in facts, facts
    for ep, options in preferred.provider_options.items():
        for key, value in options.items():
            assert f"managed provider option: {ep} {key}={value}" in facts
    session_line = facts.split("managed session: ", 1)[1].splitlines()[0]
    assert session_line.endswith(") True") and "CPUExecutionProvider" in session_line, session_line
    assert "managed exception: UnknownModel OC_ERR_UNKNOWN_MODEL" in facts
    for dim in entry["inputs"][0]["shape"]:  # Bundle.Dims: the shape without JSON
        size, symbol = (dim, "-") if isinstance(dim, int) else (-1, dim or "-")
        assert f"managed first input dim: {size} {symbol}" in facts, facts
    # Unity's `using` around a blob whose session lives on: the blob stays open (its bytes pinned)
    # until the session is disposed, and refuses new use; a Runtime likewise (it released nothing
    # and leaked the session before, or unpinned bytes onnxruntime read in place)
    said = "blob disposed before its session: open True, refuses new use True, closed with the session True"
    assert said in facts, facts
    assert "session eps (CPUExecutionProvider (given by the caller)) refused ''" in facts, facts
    assert "runtime disposed before its session: open True, released with it True" in facts, facts
    # a mistyped model name throws, where the C counts read as no inputs; null bytes are an argument error
    assert "managed Signature: UnknownModel" in facts and "managed Dims: UnknownModel" in facts, facts
    assert "managed null bytes: ArgumentNullException" in facts, facts


def test_zstd_frames_decode_in_parallel_and_damage_names_the_frame(native: Path, tmp_path: Path) -> None:
    """A weights section of many zstd frames decodes on several threads (oc_blob_options.threads)
    to the same bytes, and a damaged frame is named as the Python loader names it."""
    import re

    import onnx
    from runtime_helpers import make_weighted_blob

    rng = np.random.default_rng(3)
    weights = (rng.integers(0, 4, size=(1024, 1024)) * 0.5).astype(np.float32)  # compressible: zstd frames
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1024])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1024])],
        [onnx.numpy_helper.from_array(weights, "W")],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    blob = make_weighted_blob(model, "zstd")[0]
    frames = [f for f in split_blob(blob)[0]["frames"] if f[0] == "weights"]
    assert len(frames) >= 4 and all(f[1] == "zstd" for f in frames)  # 1 MiB each: a frame per thread and more
    good = tmp_path / "good.ocb"
    good.write_bytes(blob)
    damaged = bytearray(blob)
    third = frames[2]
    damaged[third[2] + third[3] // 2] ^= 0x01
    bad = tmp_path / "bad.ocb"
    bad.write_bytes(bytes(damaged))
    lines = [
        json.loads(line) for line in run_native([native / "oc-probe", "blob", good, bad]).stdout.splitlines()
    ]
    assert lines[0]["status"] == "OC_OK" and lines[0]["weights_size"] == weights.nbytes
    unpacked = unpack_blob(blob)
    assert lines[0]["weights_fnv"] == fnv1a(b"".join(bytes(view) for _, view in unpacked.segments))
    assert lines[0]["model_fnv"] == fnv1a(unpacked.model)
    with pytest.raises(py_errors.ChecksumMismatchError) as python:
        unpack_blob(bytes(damaged))
    assert lines[1]["status"] == "OC_ERR_CHECKSUM"
    named = re.compile(r"weights frame \d+ of \d+ is damaged")
    assert (
        named.search(lines[1]["message"])[0]
        == named.search(str(python.value))[0]
        == (f"weights frame 3 of {len(frames)} is damaged")
    )


def test_oc_run_blob_refuses_what_is_not_a_blob_file_naming_it(
    native: Path, bundles: Path, tmp_path: Path
) -> None:
    """``oc-run --blob``: a folder, a missing file and a damaged blob are errors naming the file; a
    --model or a second source is a usage error."""
    library = ort_library(VERSIONS[-1])
    bundle = open_bundle(bundles / "android")
    blob = bundles / "android" / bundle.info("mnist")["file"]
    damaged = tmp_path / "damaged.ocb"
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    for path, says in (
        (tmp_path, "not a blob file"),
        (tmp_path / "none.ocb", "not a blob file"),
        (damaged, "damaged"),
    ):
        done = run_native([native / "oc-run", "--blob", path, "--ort", library], check=False)
        assert done.returncode == 1 and f"--blob {path}: " in done.stderr and says in done.stderr, done.stderr
    for extra in (["--model", "mnist"], ["--bundle", bundles / "android"], ["--file", blob]):
        done = run_native([native / "oc-run", "--blob", blob, *extra, "--ort", library], check=False)
        assert done.returncode == 2 and "oc-run: error:" in done.stderr, done.stderr
    timed = run_native([native / "oc-run", "--blob", blob, "--time", "2", "--ort", library])
    line = json.loads(timed.stdout.strip().splitlines()[-1])
    assert (
        len(line["ready_ms"]) == 2
        and line["load_path"] == "ort-bytes"
        or line["load_path"].startswith("ort-")
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_an_operator_onnxruntime_has_no_kernel_for_gets_the_python_loaders_message(
    native: Path, version: str, tmp_path: Path
) -> None:
    """OC_ERR_INCOMPATIBLE_RUNTIME with the Python loader's words (compat.no_kernel_message) where
    onnxruntime has no kernel for an operator of the blob, in each target version."""
    from onnx_cooker.runtime.compat import no_kernel_message
    from tests.test_runtime_session import image_decoder_model

    path = tmp_path / "decoder.ocb"
    path.write_bytes(make_blob(image_decoder_model(), "onnx", name="decoder", platform="android"))
    done = run_native([native / "oc-run", "--blob", path, "--ort", ort_library(version)], check=False)
    expected = no_kernel_message("ImageDecoder(20)", "decoder", "android", version)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == f"oc-run: error: {expected}"


def test_raw_content_crcs_are_read_in_parallel_and_the_first_damaged_piece_is_named(
    native: Path, tmp_path: Path
) -> None:
    """The CRC-32s of a raw extent's 8 MiB pieces are read on several threads (worker w: pieces w,
    w + workers, ...); with two pieces damaged, on different threads, the first one is named, as
    the Python loader and a single thread name it."""
    import re

    from runtime_helpers import make_weighted_blob

    from tests.models import large_matmul_model

    blob = make_weighted_blob(large_matmul_model(2048, 2560, seed=5), "raw")[0]  # 20 MiB: 3 pieces
    (frame,) = [f for f in split_blob(blob)[0]["frames"] if f[0] == "weights"]
    assert frame[1] == "raw" and len(frame[6]) == 3
    content = frame[2] + frame[5]  # offset + pad: where the content starts
    piece = 8 << 20
    damaged = bytearray(blob)
    damaged[content + piece + 100] ^= 0x01  # piece 1 (a second worker's)
    damaged[content + 2 * piece + 100] ^= 0x01  # piece 2 (the first worker's second)
    files = []
    for name, data in (("good", blob), ("bad", bytes(damaged))):
        files.append(tmp_path / f"{name}.ocb")
        files[-1].write_bytes(data)
    lines = [json.loads(x) for x in run_native([native / "oc-probe", "blob", *files]).stdout.splitlines()]
    assert lines[0]["status"] == "OC_OK" and lines[0]["weights_size"] == 2048 * 2560 * 4
    with pytest.raises(py_errors.ChecksumMismatchError) as python:
        unpack_blob(bytes(damaged), threads=1)
    assert lines[1]["status"] == "OC_ERR_CHECKSUM"
    named = re.compile(r"CRC-32 of its content bytes ([\d,]+) to ([\d,]+)")
    c_range = [int(v.replace(",", "")) for v in named.search(lines[1]["message"]).groups()]
    python_range = [int(v.replace(",", "")) for v in named.search(str(python.value)).groups()]
    assert c_range == python_range == [piece, 2 * piece]


def fnv1a(data: bytes) -> str:
    value = 1469598103934665603
    for chunk in np.frombuffer(data, dtype=np.uint8).tolist():
        value = ((value ^ chunk) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


@pytest.mark.parametrize("version", VERSIONS)
def test_large_onnx_weights_load_in_place_from_the_blob_file(
    native: Path, version: str, tmp_path: Path
) -> None:
    """64 MiB and more of raw ONNX weights in a folder bundle, with and without prepacking, in place
    from the library's mapping: from 1.32 as file buffers, in 1.24.4 and 1.28.0 as shared
    initializers (chosen over onnx-mapped by measurement: docs/native.md), each with the source's
    outputs."""

    from runtime_helpers import make_weighted_blob

    from tests.models import large_matmul_model

    source = large_matmul_model(4096, 4200, seed=21)  # 68.8 MB of float32
    blob = make_weighted_blob(source, "raw", name="big", platform="windows-dml")[0]
    folder = write_bundle(tmp_path / "bundle", {"big": ("onnx", blob)}, platform="windows-dml")
    x = np.random.default_rng(2).standard_normal((1, 4096)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = run_session_of(source, x)
    library = ort_library(version)
    # The weights go in place from the library's own mapping (its read pages let go while
    # prepacking reads them), with or without prepacking.
    expected_path = "onnx-file-buffers" if version == "1.32.0" else "onnx-shared-initializers"
    for low, expected in ((False, expected_path), (True, expected_path)):
        out = tmp_path / f"out-{low}"
        done = oc_run_big(
            native, folder, library, tmp_path / "x.npy", out, *(["--low-memory"] if low else [])
        )
        assert f"load path {expected}," in done.stdout, done.stdout
        np.testing.assert_allclose(np.load(out / "y.npy"), want, rtol=1e-5, atol=1e-4)


def oc_run_big(native: Path, bundle: Path, library: Path, x: Path, out: Path, *extra: str):
    """oc-run on model "big" of ``bundle`` with input ``x``, its outputs into ``out``."""
    return run_native(
        [
            native / "oc-run",
            "--bundle",
            bundle,
            "--model",
            "big",
            "--ort",
            library,
            "--in",
            x,
            "--out",
            out,
            *extra,
        ]
    )


def run_session_of(model, x: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_mapped_ort_blob_loads_right_while_its_read_pages_are_let_go(
    native: Path, version: str, tmp_path: Path
) -> None:
    """A 24 MB ORT-format blob from a folder bundle (mapped, prepacking on): the library releases
    the mapping's resident pages while onnxruntime builds the session (they come back from the
    file when read), and the session still computes the source's outputs."""

    from runtime_helpers import make_blob, to_ort_format

    from tests.models import large_matmul_model

    source = large_matmul_model(2048, 3072, seed=23)  # 25 MB of float32
    blob = make_blob(
        to_ort_format(source.SerializeToString(), tmp_path),
        "ort",
        graph_codec="raw",
        name="big",
        platform="android",
    )
    assert len(blob) >= 16 << 20
    folder = write_bundle(tmp_path / "bundle", {"big": ("ort", blob)}, platform="android")
    x = np.random.default_rng(4).standard_normal((1, 2048)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    done = oc_run_big(native, folder, ort_library(version), tmp_path / "x.npy", tmp_path / "out")
    assert "load path ort-in-place," in done.stdout
    np.testing.assert_allclose(
        np.load(tmp_path / "out" / "y.npy"), run_session_of(source, x), rtol=1e-5, atol=1e-4
    )


def test_the_windows_code_paths_compile_with_mingw(native: Path, tmp_path: Path) -> None:
    """Every source of the library, oc-run, the probes and the C++ header compile for Windows
    (MinGW-w64, -Wall -Wextra -Werror -pedantic): the file mapping, threads, paths and onnxruntime's
    UTF-16 paths there, against the system headers of the dependencies (-pedantic, with the C++
    header too). The linked Windows build runs under Wine in tests/test_native_windows.py."""
    import shutil

    include = tmp_path / "include"  # the dependencies' headers (platform-neutral) without glibc's
    include.mkdir()
    for header in ("zstd.h", "zstd_errors.h", "zlib.h", "sodium.h"):
        shutil.copy(Path("/usr/include") / header, include / header)
    zconf = next(
        p
        for p in (Path("/usr/include/x86_64-linux-gnu/zconf.h"), Path("/usr/include/zconf.h"))
        if p.is_file()
    )
    shutil.copy(zconf, include / "zconf.h")
    shutil.copytree("/usr/include/sodium", include / "sodium")
    (include / "cjson").mkdir()
    shutil.copy("/usr/include/cjson/cJSON.h", include / "cjson" / "cJSON.h")
    source = REPO / "native"
    (ort,) = (native.parent / "_deps").glob("onnxruntime-*/include")  # the headers build.sh fetched
    common = [
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        "-include",
        source / "tests" / "mingw_shim.h",
        "-I",
        source / "include",
        "-I",
        source / "src",
        "-I",
        source / "tools",
        "-I",
        include,
        "-I",
        ort,
    ]
    files = [
        *sorted((source / "src").glob("*.c")),
        *sorted((source / "tools").glob("*.c")),
        source / "tests" / "oc_probe.c",
        source / "tests" / "test_in_place.c",
    ]
    for file in files:
        done = subprocess.run(
            [
                "x86_64-w64-mingw32-gcc",
                "-std=c99",
                "-D__USE_MINGW_ANSI_STDIO=1",
                "-DOC_BUILDING_DLL",
                *common,
                "-c",
                file,
                "-o",
                tmp_path / "out.o",
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, f"{file.name} for Windows:\n{done.stderr[-3000:]}"
    done = subprocess.run(
        [
            "x86_64-w64-mingw32-g++",
            "-std=c++17",
            *common,
            "-c",
            source / "tests" / "test_cxx_header.cpp",
            "-o",
            tmp_path / "out.o",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"onnx_cooker.hpp for Windows:\n{done.stderr[-3000:]}"


def _oc_run_on(native: Path, bundle: Path, version: str, ep: str) -> subprocess.CompletedProcess:
    """oc-run on model "gpu" of ``bundle`` with the explicit provider ``ep`` (not checked)."""
    command = [native / "oc-run", "--bundle", bundle, "--model", "gpu", "--ort", ort_library(version)]
    return run_native([*command, "--ep", ep], check=False)


GPU_EPS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


@pytest.fixture(scope="module")
def gpu_preferring_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of one small ONNX model whose blob prefers TensorRT, then CUDA, then the CPU, with
    provider options for both (as a platform profile for NVIDIA machines would cook it)."""
    from runtime_helpers import make_weighted_blob

    from tests.models import large_matmul_model

    blob = make_weighted_blob(
        large_matmul_model(512, 256, seed=9),
        "raw",
        name="gpu",
        execution_providers=[*GPU_EPS[::-1], "CPUExecutionProvider"],
        provider_options={
            "CUDAExecutionProvider": {"device_id": 0, "arena_extend_strategy": "kSameAsRequested"},
            "TensorrtExecutionProvider": {"device_id": 0, "trt_fp16_enable": True},
        },
    )[0]
    return write_bundle(tmp_path_factory.mktemp("gpu") / "bundle", {"gpu": ("onnx", blob)})


@pytest.mark.parametrize("version", VERSIONS)
def test_cuda_and_tensorrt_asked_for_by_name_give_a_clean_error_naming_the_fix(
    native: Path, version: str, gpu_preferring_bundle: Path
) -> None:
    """CUDA and TensorRT go through their V2 option APIs (Create/Update/Append...V2); in the CPU
    libraries here onnxruntime has neither, and an explicit provider list naming one gets a status
    (no crash, no leak) with the model, the EP, onnxruntime's own words and the fix."""
    for ep in GPU_EPS:
        done = _oc_run_on(native, gpu_preferring_bundle, version, ep)
        assert done.returncode == 1, done.stdout + done.stderr
        message = done.stderr
        assert f"onnxruntime {version} refused {ep} for model 'gpu' (test-platform)" in message, message
        kind = "CUDA" if ep.startswith("CUDA") else "TensorRT"
        assert f"{kind} execution provider is not enabled in this build" in message, message  # onnxruntime's
        assert f"this onnxruntime build has no {kind} EP: use the onnxruntime-gpu library" in message, message
        assert f"or pass providers without {ep}" in message, message
        assert "cannot register" not in message


@pytest.mark.parametrize("version", VERSIONS)
def test_a_blob_preferring_gpu_eps_falls_to_the_cpu_where_onnxruntime_lacks_them(
    native: Path, version: str, gpu_preferring_bundle: Path, tmp_path: Path
) -> None:
    """The blob's preferred EPs that this onnxruntime does not offer are left out, as the Python
    loader's choose_providers does: TensorRT and CUDA in a CPU build, so the session runs on the CPU
    with the source's outputs."""
    from tests.models import large_matmul_model

    python = open_bundle(gpu_preferring_bundle).session("gpu")
    assert python.get_providers() == ["CPUExecutionProvider"]
    done = oc_run_matches_source(
        native,
        gpu_preferring_bundle,
        "gpu",
        ort_library(version),
        large_matmul_model(512, 256, seed=9),
        tmp_path,
    )
    assert "session ready" in done.stdout


@pytest.mark.parametrize("version", VERSIONS)
def test_migraphx_and_tensorrt_rtx_go_by_the_short_names_onnxruntime_knows(
    native: Path, version: str, gpu_preferring_bundle: Path
) -> None:
    """SessionOptionsAppendExecutionProvider knows 'MIGraphX' and 'NvTensorRtRtx' in each version
    (an unknown name gets "Unknown provider name"): these CPU builds answer that the EP is not in
    them, and from 1.32 that TensorRT RTX is a plugin EP. Either way onnxruntime's word, with the
    model's name."""
    for ep, short in (
        ("MIGraphXExecutionProvider", "MIGraphX"),
        ("NvTensorRTRTXExecutionProvider", "NvTensorRtRtx"),
    ):
        done = _oc_run_on(native, gpu_preferring_bundle, version, ep)
        assert done.returncode == 1
        message = done.stderr
        assert (
            "model 'gpu'" in message
            and "Unknown provider name" not in message
            and "cannot register" not in message
        )
        if short == "NvTensorRtRtx" and version == "1.32.0":
            assert "'NvTensorRtRtx' execution provider is no longer built into ONNX Runtime" in message, (
                message
            )
        else:
            assert f"{short} execution provider is not supported in this build" in message, message


@pytest.mark.parametrize("version", VERSIONS)
def test_oc_run_feeds_and_writes_string_tensors(native: Path, version: str, tmp_path: Path) -> None:
    """Text models (a word -> id encoder, strings passed through) through oc-run, ONNX and ORT format:
    numpy's '<U' files in, UTF-8 to onnxruntime and back, '<U' files out, non-ASCII and empty words
    included; a string that is not Unicode is refused naming the input."""
    from runtime_helpers import make_blob, to_ort_format

    from tests.models import word_ids_model

    model = word_ids_model(["cat", "h\u00e9", ""], [2, 3], echo=True)
    source = model.SerializeToString()
    folder = write_bundle(
        tmp_path / "bundle",
        {
            "text_onnx": ("onnx", make_blob(source, "onnx", name="text_onnx")),
            "text_ort": ("ort", make_blob(to_ort_format(source, tmp_path), "ort", name="text_ort")),
        },
    )
    words = np.array([["cat", "h\u00e9", "\U0001f600 dog"], ["", "\u4e2d\u6587", "cat"]])
    np.save(tmp_path / "words.npy", words)
    for name in ("text_onnx", "text_ort"):
        out = tmp_path / name
        run_native(
            [native / "oc-run", "--bundle", folder, "--model", name, "--ort", ort_library(version)]
            + ["--in", tmp_path / "words.npy", "--out", out]
        )
        assert np.load(out / "ids.npy").tolist() == [[10, 11, -1], [12, -1, 10]], name
        echo = np.load(out / "echo.npy")
        assert echo.dtype.kind == "U" and echo.tolist() == words.tolist(), (name, echo)
    (tmp_path / "surrogate.npy").write_bytes(
        (tmp_path / "words.npy").read_bytes().replace("c".encode("utf-32-le"), b"\x00\xd8\x00\x00", 1)
    )
    refused = run_native(
        [native / "oc-run", "--bundle", folder, "--model", "text_onnx", "--ort", ort_library(version)]
        + ["--in", tmp_path / "surrogate.npy"],
        check=False,
    )
    assert refused.returncode == 1 and "not a Unicode character" in refused.stderr, refused.stderr


@pytest.mark.parametrize("version", VERSIONS)
def test_oc_run_feeds_an_optional_tensor_input_as_its_tensor(
    native: Path, version: str, tmp_path: Path
) -> None:
    """An optional(tensor) input takes a plain tensor in onnxruntime's C API as in its Python API:
    oc-run feeds it (it refused 'the model wants an optional'), and the branch using it runs."""
    from runtime_helpers import make_blob

    from tests.test_model_classes import optional_input_model

    source = optional_input_model().SerializeToString()
    folder = write_bundle(tmp_path / "bundle", {"opt": ("onnx", make_blob(source, "onnx", name="opt"))})
    x, opt = np.arange(4, dtype=np.float32), np.full(4, 10, np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "opt.npy", opt)
    run_native(
        [native / "oc-run", "--bundle", folder, "--model", "opt", "--ort", ort_library(version)]
        + ["--in", tmp_path / "x.npy", "--in", tmp_path / "opt.npy", "--out", tmp_path / "out"]
    )
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), x + opt)
    np.save(tmp_path / "wrong.npy", opt.astype(np.int64))
    refused = run_native(
        [native / "oc-run", "--bundle", folder, "--model", "opt", "--ort", ort_library(version)]
        + ["--in", tmp_path / "x.npy", "--in", tmp_path / "wrong.npy"],
        check=False,
    )
    assert refused.returncode == 1 and "the file holds int64, the model wants float32" in refused.stderr


def test_oc_run_output_files_stay_in_out_whatever_the_output_names(native: Path, tmp_path: Path) -> None:
    """TensorFlow-style names (`:0`, `/`), a name walking up folders and Windows-reserved characters
    each become one file inside --out; names longer than a file name may be (255 bytes) are cut at a
    character and keep apart by a hash of the whole name."""
    from onnx import TensorProto, helper
    from runtime_helpers import make_blob

    from tests.models import model_of

    long_a, long_b = "a" + "é" * 150 + "a", "a" + "é" * 150 + "b"  # 302 bytes; the 200th is inside an é
    names = ["StatefulPartitionedCall:0", "../up/y", 'a?b*c"<d>|e', long_a, long_b]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], [names[0]])]
        + [helper.make_node("Identity", [names[0]], [name]) for name in names[1:]],
        "names",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [3]) for name in names],
    )
    source = model_of(graph).SerializeToString()
    folder = write_bundle(tmp_path / "bundle", {"names": ("onnx", make_blob(source, "onnx", name="names"))})
    x = np.array([-1, 0, 2], np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "deep" / "out"
    run_native(
        [native / "oc-run", "--bundle", folder, "--model", "names", "--ort", ort_library(VERSIONS[-1])]
        + ["--in", tmp_path / "x.npy", "--out", out]
    )
    files = sorted(path.name for path in out.iterdir())
    cut = [name for name in files if name.startswith("aé")]
    assert sorted(set(files) - set(cut)) == [
        ".._up_y.npy",
        "StatefulPartitionedCall_0.npy",
        "a_b_c__d__e.npy",
    ]
    # cut at 199 bytes (not inside the é that the 200th byte is part of), then ~ and the hash
    assert len(cut) == 2 and all(
        name.startswith("a" + "é" * 99 + "~") and len(name) == 100 + 13 for name in cut
    )
    assert not (tmp_path / "deep" / "up").exists()
    for name in files:
        np.testing.assert_array_equal(np.load(out / name), np.maximum(x, 0))


def test_opening_a_bundle_hashes_its_blobs_without_holding_them_resident(
    native: Path, tmp_path: Path
) -> None:
    """``oc_bundle_open_dir`` checks every blob's sha256 (verify, the default) through a mapping
    that it lets go of a piece at a time: the process's peak resident memory does not grow by the
    bundle's largest blob (it did by all of it: a game that opened its bundle showed that blob in
    its peak whatever model it then loaded), and the blobs still load."""
    from runtime_helpers import make_weighted_blob

    from tests.models import large_matmul_model

    big = make_weighted_blob(large_matmul_model(4096, 8192, seed=31), "raw", name="big")[0]  # 128 MiB
    small = make_weighted_blob(large_matmul_model(64, 32, seed=32), "raw", name="small")[0]
    folder = write_bundle(tmp_path / "bundle", {"big": ("onnx", big), "small": ("onnx", small)})
    done = run_native(
        [
            native / "oc-run",
            "--bundle",
            folder,
            "--model",
            "small",
            "--time",
            1,
            "--ort",
            ort_library("1.32.0"),
        ]
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    grown = report["peak_rss_bytes"] - report["baseline_rss_bytes"]  # the open's peak is in VmHWM
    assert grown < len(big) // 4, f"peak resident memory grew by {grown:,} bytes for a {len(big):,}-byte blob"
    # and the big blob still opens and loads from the same bundle
    assert (
        "load path onnx-file-buffers,"
        in run_native(
            [native / "oc-run", "--bundle", folder, "--model", "big", "--ort", ort_library("1.32.0")]
        ).stdout
    )


def test_opening_a_bundle_names_its_first_damaged_blob_in_name_order(native: Path, tmp_path: Path) -> None:
    """The blobs are hashed side by side at open (one thread per core, up to 8); with several
    damaged, the first in name order is named, as one thread after another named it, every time."""
    from runtime_helpers import make_weighted_blob

    from tests.models import large_matmul_model

    blobs = {}
    for index, name in enumerate(("a_ok", "b_damaged", "c_damaged", "d_ok")):
        model = large_matmul_model(512, 512, seed=index)
        blobs[name] = ("onnx", make_weighted_blob(model, "raw", name=name)[0])
    folder = write_bundle(tmp_path / "bundle", blobs)
    for name in ("b_damaged", "c_damaged"):
        path = folder / f"{name}.onnx.ocb"
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x04
        path.write_bytes(bytes(data))
    for _ in range(5):
        done = run_native(
            [native / "oc-run", "--bundle", folder, "--model", "a_ok", "--ort", ort_library("1.32.0")],
            check=False,
        )
        assert done.returncode != 0
        assert "b_damaged.onnx.ocb: blob does not match the sha256/size" in done.stderr, done.stderr


@pytest.mark.parametrize("version", VERSIONS)
def test_what_an_engine_gets_wrong_is_an_argument_error_and_memory_runs_out_cleanly(
    native: Path, bundles: Path, version: str
) -> None:
    """native/tests/test_misuse.c, under ASan/UBSan: an engine's own onnxruntime taken by its
    OrtGetApiBase (the library asks it for version and API: the same load path as oc_runtime_load);
    version text that is no 1.21+ version refused (it picked load paths and read plugin-EP functions
    past an older table); options that contradict themselves refused (they were ignored); and an
    allocator refusing each allocation in turn gives OC_ERR_OUT_OF_MEMORY, never a damaged-manifest
    verdict, and leaks nothing."""
    done = run_native([native / "test_misuse", ort_library(version), bundles / "windows-dml", "big_weights"])
    cases: dict[str, list[dict]] = {}
    for line in done.stdout.splitlines():
        case = json.loads(line)
        cases.setdefault(case["case"], []).append(case)
    (base,) = cases["from_api_base"]
    assert base["status"] == "OC_OK" and base["version"] == base["onnxruntime"] == version, base
    assert base["session"] == "OC_OK" and base["path"] == base["path_loaded"], base
    refused = cases["from_api with a version that is none"]
    assert [case["version"] for case in refused] == ["garbage", "", "1.20.0"]
    for case in refused:
        assert case["status"] == "OC_ERR_INVALID_ARGUMENT" and not case["runtime"], case
        assert "call oc_runtime_from_api_base, which asks onnxruntime itself" in case["message"]
    assert cases["from_api with the real version"][0]["status"] == "OC_OK"
    for name, words in (
        ("providers NULL with a count", "provider_count is 2 but providers is NULL"),
        ("a negative thread count", "intra_op_threads is -3"),
        ("a blob opened on a negative thread count", "threads is -5"),
    ):
        (case,) = cases[name]
        assert case["status"] == "OC_ERR_INVALID_ARGUMENT" and words in case["message"], case
    assert "out of memory: a wrong verdict" not in cases, cases.get("out of memory: a wrong verdict")
    (sweep,) = cases["out of memory sweep"]
    assert sweep["statuses"] == ["OC_ERR_OUT_OF_MEMORY", "OC_OK"] and sweep["runs"] > 3, sweep
    assert sweep["leaked"] == 0, sweep
