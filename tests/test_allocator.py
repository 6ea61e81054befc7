"""The cooking processes keep freed memory for reuse (onnx_cooker.build.allocator): glibc then serves a big
buffer from memory a previous buffer used, instead of a fresh mmap faulted in page by page."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onnx_cooker.build.allocator import ALLOCATOR_ENV, CHILD_ENV, tune_allocator

# A fresh process: 64 MiB allocated after the tuning (or not); how many more bytes glibc mmapped.
PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from onnx_cooker.build.allocator import tune_allocator

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]

    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = MallInfo2
    tuned = tune_allocator({"COOK_ALLOCATOR": sys.argv[1]}, child_env={})
    before = mallinfo2().hblkhd
    buffer = bytearray(64 << 20)
    print(tuned, mallinfo2().hblkhd - before)
    """
)


def _probe(choice: str) -> tuple[bool, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, choice], capture_output=True, text=True, check=True, timeout=60
    )
    tuned, mapped = done.stdout.split()
    return tuned == "True", int(mapped)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator: Linux only")
def test_big_buffers_come_from_reusable_memory_not_fresh_mappings() -> None:
    tuned, mapped = _probe("system")
    assert not tuned and mapped >= 64 << 20  # glibc's default: a fresh mapping for the buffer
    assert _probe("retain") == (True, 0)  # tuned: from the heap, where freed memory stays


def test_processes_a_cook_starts_inherit_it_and_a_users_own_tuning_is_left_alone() -> None:
    child: dict[str, str] = {}
    if tune_allocator({}, child_env=child):
        assert child == CHILD_ENV
    else:  # not glibc: nothing is changed
        assert child == {}
    for own in ({"MALLOC_TRIM_THRESHOLD_": "12345"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0"}):
        untouched: dict[str, str] = {}
        assert tune_allocator(own, child_env=untouched) is False and untouched == {}
    untouched = {}
    assert tune_allocator({ALLOCATOR_ENV: "system"}, child_env=untouched) is False and untouched == {}


def test_an_unknown_choice_is_one_warning_and_the_system_allocator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    untouched: dict[str, str] = {}
    assert tune_allocator({ALLOCATOR_ENV: "fast"}, child_env=untouched) is False and untouched == {}
    assert (
        capsys.readouterr().err
        == "warning: COOK_ALLOCATOR='fast' is not one of retain, system: using system\n"
    )


def test_a_machine_short_of_memory_is_read_from_meminfo() -> None:
    from onnx_cooker.build.allocator import memory_short

    assert memory_short("MemTotal:       1000 kB\nMemFree: 10 kB\nMemAvailable:    200 kB\n")
    assert not memory_short("MemTotal:       1000 kB\nMemAvailable:    300 kB\n")
    assert not memory_short("MemTotal: 1000 kB\n")  # no MemAvailable (very old kernels): never short
    assert not memory_short("")


RELEASE_PROBE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from onnx_cooker.build import allocator

    def rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096

    short = Path(sys.argv[1])
    short.write_text("MemTotal: 1000 kB\\nMemAvailable: 10 kB\\n")
    plenty = Path(sys.argv[2])
    plenty.write_text("MemTotal: 1000 kB\\nMemAvailable: 900 kB\\n")
    assert allocator.tune_allocator({}, child_env={})
    buffer = bytearray(256 << 20)  # touched: zero-filled by Python
    del buffer
    kept = rss()
    assert not allocator.release_if_short(plenty)
    assert rss() > kept - (64 << 20)  # plenty of memory: kept for the next cook
    assert allocator.release_if_short(short)
    print(kept - rss())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator: Linux only")
def test_kept_memory_goes_back_when_the_machine_runs_short(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", RELEASE_PROBE, str(tmp_path / "short"), str(tmp_path / "plenty")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 200 << 20  # most of the 256 MiB the freed buffer left in the heap
