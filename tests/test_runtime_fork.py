"""The Python loader in a forked child: a game server that loads its models and then forks its
workers (``multiprocessing``'s default start method on Linux before Python 3.14) must be able to
load blobs in every child. The loader's lasting threads (the decoding pool, the CRC helper) do not
exist in a child, and a lock another thread held at the fork would be held there for good; each is
made anew in the child (onnx_cooker/runtime/frames.py, pager.py, proven.py)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from runtime_helpers import CPU, make_weighted_blob

from onnx_cooker.runtime import pager as pager_module
from onnx_cooker.runtime import session_from_blob
from onnx_cooker.runtime.header import read_header
from tests.models import large_matmul_model

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only; Windows spawns")

ROWS, COLUMNS = 1024, 1536  # 6 MiB of weights: several zstd frames, and raw content checked beside
CHILD_LIMIT = 60  # seconds: a child that hangs is killed by SIGALRM, and the test sees the signal


@pytest.fixture(scope="module")
def blobs() -> dict[str, tuple[bytes, np.ndarray, np.ndarray]]:
    model = large_matmul_model(ROWS, COLUMNS, seed=7)
    x = np.random.default_rng(8).standard_normal((1, ROWS)).astype(np.float32)
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=CPU).run(None, {"x": x})[0]
    found = {}
    for codec in ("zstd", "raw"):
        blob = make_weighted_blob(onnx.ModelProto.FromString(model.SerializeToString()), codec)[0]
        found[codec] = (blob, x, expected)
    frames = [f for f in read_header(found["zstd"][0])[0].frames if f.section == "weights"]
    assert len(frames) > 1 and {f.codec for f in frames} == {"zstd"}  # decoded on the pool
    return found


def _load_and_run(blob: bytes, x: np.ndarray) -> np.ndarray:
    return session_from_blob(blob, providers=CPU, threads=2).run(None, {"x": x})[0]


def _in_child(work) -> int:
    """Fork; run ``work()`` in the child under an alarm; the child's wait status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child: coverage does not follow it)
        code = 1
        try:
            signal.alarm(CHILD_LIMIT)
            code = 0 if work() else 3
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def test_a_forked_child_loads_blobs_after_its_parent_did(blobs: dict) -> None:
    for blob, x, expected in blobs.values():  # the parent's pool and CRC helper now exist
        np.testing.assert_array_equal(_load_and_run(blob, x), expected)

    def child() -> bool:
        return all(np.array_equal(_load_and_run(blob, x), expected) for blob, x, expected in blobs.values())

    status = _in_child(child)
    assert not os.WIFSIGNALED(status), (
        f"the child was killed by signal {os.WTERMSIG(status)} (SIGALRM: it hung on the parent's threads)"
    )
    assert os.WEXITSTATUS(status) == 0


def _worker_load(codec: str) -> bool:
    blob, x, expected = _SHARED[codec]
    return bool(np.array_equal(_load_and_run(blob, x), expected))


_SHARED: dict[str, tuple[bytes, np.ndarray, np.ndarray]] = {}


def test_multiprocessing_fork_workers_load_what_the_parent_loaded(blobs: dict) -> None:
    _SHARED.update(blobs)  # the workers inherit it: nothing big is pickled
    for blob, x, expected in blobs.values():
        np.testing.assert_array_equal(_load_and_run(blob, x), expected)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        result = pool.map_async(_worker_load, ["zstd", "raw", "zstd", "raw"])
        assert result.get(timeout=CHILD_LIMIT) == [True] * 4


def test_a_file_lock_held_by_another_thread_at_the_fork_is_free_in_the_child(tmp_path: Path) -> None:
    if not pager_module.can_page():
        pytest.skip("the file locks exist only where the pager runs (Linux, madvise)")
    big = tmp_path / "blob.ocb"
    big.write_bytes(bytes(pager_module.PAGER_MIN))
    fd = os.open(big, os.O_RDONLY)

    def child() -> bool:
        lock = pager_module.file_lock(fd)
        assert lock is not None
        with lock:  # a load of that file in the child: without the reset it waited forever
            return True

    try:
        status = _in_child_while_held(lambda: pager_module.file_lock(fd), child)
    finally:
        os.close(fd)
    assert not os.WIFSIGNALED(status), f"the child was killed by signal {os.WTERMSIG(status)} (it hung)"
    assert os.WEXITSTATUS(status) == 0


def test_the_proven_graphs_lock_held_at_the_fork_is_free_in_the_child() -> None:
    """A thread that held ``proven``'s lock at the fork never releases it in the child: a load of an
    ONNX blob there (whose graph check goes through it) waited for ever without the reset."""
    from onnx_cooker.runtime import proven

    status = _in_child_while_held(
        lambda: proven._lock, lambda: proven.proven("k", b"graph", ("f",), lambda: True)
    )
    assert not os.WIFSIGNALED(status), f"the child was killed by signal {os.WTERMSIG(status)} (it hung)"
    assert os.WEXITSTATUS(status) == 0


def _in_child_while_held(lock_of, work) -> int:
    """``_in_child(work)`` while another thread holds the lock ``lock_of()`` gives."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        lock = lock_of()
        assert lock is not None
        with lock:
            held.set()
            release.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        return _in_child(work)
    finally:
        release.set()
        thread.join()


def test_a_memory_blobs_lock_held_at_the_fork_is_free_in_the_child(blobs: dict) -> None:
    """A thread loading from a MemoryBlob holds its lock for a moment (the memfd's duplicate): a fork
    then left the lock held in the child, whose loads from that blob waited for ever (16-31 children
    in 40 hung, forking while two threads loaded). Each blob takes a new lock in a forked child."""
    from onnx_cooker.runtime import MemoryBlob

    blob, x, expected = blobs["raw"]
    memory = MemoryBlob.copy(blob)
    try:
        status = _in_child_while_held(
            lambda: memory._lock,
            lambda: np.allclose(
                session_from_blob(memory, providers=CPU).run(None, {"x": x})[0], expected, atol=1e-4
            ),
        )
    finally:
        memory.close()
    assert not os.WIFSIGNALED(status), f"the child was killed by signal {os.WTERMSIG(status)} (it hung)"
    assert os.WEXITSTATUS(status) == 0
