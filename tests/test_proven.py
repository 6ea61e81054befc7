"""Graphs the reference checks accepted are not walked again (onnx_cooker/runtime/proven.py): only a
graph of the very same bytes, checked against the same header, skips the walk; a refusal is never
kept; the store stays bounded."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from runtime_helpers import CPU
from test_external_refs import _set_location, _weighted

from onnx_cooker.runtime import CorruptBlobError, load_info, loadpaths, proven, session_from_blob
from onnx_cooker.runtime.compat import parse_version

# the check each ONNX path with weights runs, as loadpaths calls it
CHECKS = {
    "onnx-file-buffers": "check_references",
    "onnx-shared-initializers": "check_and_rewrite",
    "onnx-external-initializers": "check_weight_graph",
}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    proven.forget()


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(loadpaths, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loadpaths, name, counted)
    return calls


@pytest.mark.parametrize("path", list(CHECKS))
def test_a_second_load_of_the_same_graph_is_not_walked_again(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "onnx-file-buffers" and parse_version(onnxruntime.__version__) < (1, 32, 0):
        pytest.fail("the test environment must have onnxruntime 1.32+")
    calls = _counting(monkeypatch, CHECKS[path])
    blob, _ = _weighted()
    feed = {"x": np.ones((1, 64), np.float32)}
    outputs = []
    for _ in range(3):
        session = session_from_blob(bytes(blob), providers=CPU, load_path=path)  # new bytes each time
        assert load_info(session).path.value == path
        outputs.append(session.run(None, feed)[0])
    assert len(calls) == 1
    np.testing.assert_array_equal(outputs[0], outputs[2])


def test_a_hostile_graph_is_refused_after_its_good_twin_was_proven() -> None:
    """The good blob's graph is kept; a blob whose graph differs only in the file one weight names
    (a name of the same length) is still walked, and refused, on every load."""
    good, _ = _weighted()
    hostile, _ = _weighted(_set_location("../../etc/pas"))  # as long as "mlp.onnx.data"
    assert len(good) == len(hostile)
    for path in ("onnx-shared-initializers", "onnx-external-initializers"):
        session_from_blob(good, providers=CPU, load_path=path)
        for _ in range(2):
            with pytest.raises(CorruptBlobError, match="refers to '../../etc/pas'"):
                session_from_blob(hostile, providers=CPU, load_path=path)


def test_only_equal_bytes_against_equal_checks_reuse_a_verdict() -> None:
    runs: list[bytes] = []

    def check(graph: bytes):
        def run() -> bytes:
            runs.append(graph)
            return graph.upper()

        return run

    tensors = ("w",)
    graph = b"graph" * 100
    twin = graph[:-1] + b"G"  # one byte differs, same length
    assert proven.proven("k", graph, ("f", tensors), check(graph)) == graph.upper()
    assert proven.proven("k", bytes(bytearray(graph)), ("f", tensors), check(graph)) == graph.upper()
    assert len(runs) == 1  # equal bytes, another object
    proven.proven("k", twin, ("f", tensors), check(twin))
    proven.proven("k", graph, ("g", tensors), check(graph))  # another file
    proven.proven("other", graph, ("f", tensors), check(graph))  # another check
    # equal tensors in another object: found by identity (kept alive by the store, so no other
    # object can take its identity), so checked again, never taken for another's
    proven.proven("k", graph, ("f", tuple(["w"])), check(graph))
    assert runs == [graph, twin, graph, graph, graph]


def test_a_refusal_is_never_kept() -> None:
    runs: list[int] = []

    def refuse() -> None:
        runs.append(1)
        raise CorruptBlobError("refused")

    for _ in range(3):
        with pytest.raises(CorruptBlobError):
            proven.proven("k", b"graph", ("f",), refuse)
    assert len(runs) == 3


def test_the_store_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in range(proven.MAX_ENTRIES + 10):
        proven.proven("k", b"x" * (k + 1), ("f",), lambda: None)  # one entry per length
    assert len(proven._entries) == proven.MAX_ENTRIES
    monkeypatch.setattr(proven, "MAX_BYTES", 4096)
    for k in range(8):
        proven.proven("k", bytes([k]) * (1000 + k), ("f",), lambda: None)
    assert proven._held[0] == sum(len(graph) for _, graph, _ in proven._entries.values()) <= 4096
    proven.forget()
    runs: list[int] = []
    big = bytes(proven.MAX_GRAPH + 1)
    for graph in (big, memoryview(b"in the caller's memory")):
        for _ in range(2):
            proven.proven("k", graph, ("f",), lambda: runs.append(1))
    assert len(runs) == 4 and not proven._entries  # neither kept: checked every time
