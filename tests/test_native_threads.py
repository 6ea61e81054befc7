"""The C library under an engine's async loading: eight threads open blobs of one bundle and make
sessions with one runtime, from blobs of their own and from blobs the other threads use at the
same time (native/tests/test_threads.c, under AddressSanitizer and UBSan), in each target
onnxruntime. Every blob a thread opens must hold the bytes the same blob holds opened alone.

Before the fix, the bundle lent one zstd decompression context to every open: two threads decoding
at once crashed inside libzstd or reported intact frames as damaged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from runtime_helpers import make_weighted_blob, write_bundle

from tests.models import large_matmul_model
from tests.test_load_paths import VERSIONS
from tests.test_native import NATIVE_TIMEOUT, bundles, native, ort_library, run_native  # noqa: F401

REPO = Path(__file__).resolve().parents[1]

THREADS, ROUNDS = 8, 6


def _run(build: Path, version: str, bundle: Path) -> dict:
    done = run_native([build / "test_threads", ort_library(version), bundle, THREADS, ROUNDS], check=False)
    lines = done.stdout.strip().splitlines()
    assert lines, f"test_threads printed nothing ({done.returncode}):\n{done.stderr[-4000:]}"
    report = json.loads(lines[-1])
    assert report["failures"] == 0, report["first_failure"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert report["opens"] == THREADS * ROUNDS and report["sessions"] == 2 * THREADS * ROUNDS
    return report


@pytest.fixture(scope="module")
def compressed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four ONNX models whose 2 MB of weights are zstd frames: most of an open is decoding."""
    blobs = {}
    for seed in range(4):
        model = large_matmul_model(512, 1024, seed=seed)
        blobs[f"m{seed}"] = ("onnx", make_weighted_blob(model, "zstd", name=f"m{seed}")[0])
    return write_bundle(tmp_path_factory.mktemp("threads") / "bundle", blobs)


@pytest.mark.parametrize("version", VERSIONS)
def test_threads_open_blobs_of_one_bundle_and_make_sessions_with_one_runtime_at_once(
    native: Path,  # noqa: F811
    bundles: Path,  # noqa: F811
    compressed: Path,
    version: str,
) -> None:
    assert _run(native, version, compressed)["models"] == 4
    for platform in ("android", "windows-dml"):  # the cooked example and exported models
        assert _run(native, version, bundles / platform)["models"] >= 8


def test_threads_share_without_a_data_race_under_threadsanitizer(
    native: Path,  # noqa: F811
    bundles: Path,  # noqa: F811
    compressed: Path,
) -> None:
    """The same program built with ThreadSanitizer (native/build.sh's tsan tree): no race between
    the library's own accesses, or libzstd's as it calls them, is reported (the bundle's old shared
    zstd context gave 12 reports). onnxruntime is not instrumented: its own reports are suppressed
    (native/tests/tsan.supp says why)."""
    program = native.parent / "tsan" / "test_threads"
    assert program.is_file(), "native/build.sh built no ThreadSanitizer tree: install libtsan2 (gcc)"
    options = f"suppressions={REPO / 'native' / 'tests' / 'tsan.supp'} exitcode=88 halt_on_error=0"
    # gcc 12's ThreadSanitizer cannot map its shadow under some kernels' address randomization
    # (vm.mmap_rnd_bits=32): run it with randomization off, as util-linux's setarch does
    no_aslr = ["setarch", os.uname().machine, "-R"] if shutil.which("setarch") else []
    for bundle in (compressed, bundles / "android"):
        done = subprocess.run(
            [*no_aslr, str(program), str(ort_library("1.32.0")), str(bundle), str(THREADS), "4"],
            capture_output=True,
            text=True,
            env={**os.environ, "TSAN_OPTIONS": options},
            timeout=NATIVE_TIMEOUT,
            check=False,
        )
        assert "ThreadSanitizer" not in done.stderr, done.stderr[-6000:]
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1])["failures"] == 0


@pytest.mark.parametrize("platform", ["android", "windows-dml"])
def test_progress_reaches_the_calling_thread_in_stages_from_0_to_1(
    native: Path,  # noqa: F811
    bundles: Path,  # noqa: F811
    platform: str,
) -> None:
    """A loading screen's view (native/tests/test_progress.c): opening a bundle reports "check" from
    0.0 to 1.0 while its blobs are hashed on several threads; opening a blob "read", "check" and
    "decompress"; creating its session "session"; every call on the calling thread, each stage
    starting at 0.0 and ending at 1.0 without going back."""
    name = sorted(json.loads((bundles / platform / "manifest.json").read_text())["models"])[0]
    done = run_native([native / "test_progress", ort_library("1.32.0"), bundles / platform, name])
    events = json.loads(done.stdout.strip().splitlines()[-1])["events"]
    assert all(on_caller for *_, on_caller in events), events
    expected = {0: ["check"], 1: ["read", "check", "decompress"], 2: ["session"]}
    for step, stages in expected.items():
        mine = [(stage, fraction) for s, stage, fraction, _ in events if s == step]
        order = [stage for i, (stage, _) in enumerate(mine) if i == 0 or mine[i - 1][0] != stage]
        assert order == stages, (step, mine)
        for stage in stages:
            fractions = [fraction for s, fraction in mine if s == stage]
            assert fractions[0] == 0.0 and fractions[-1] == 1.0, (step, stage, fractions)
            # each stage starts once and ends once: a loading bar counting stages counts each one
            assert fractions.count(0.0) == 1 and fractions.count(1.0) == 1, (step, stage, fractions)
            assert fractions == sorted(fractions), (step, stage, fractions)
