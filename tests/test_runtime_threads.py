"""Many threads loading at once, as a game's loading screen does on its job system: in each target
onnxruntime (its own environment), eight threads load the load-path cases (ONNX and ORT format,
weights raw and zstd) from bytes, from the bundle folder and as ``MemoryBlob``s, with and without
``low_memory``, all at the same time and from the same bundle; every session must give the source's
outputs. What they share: the decoding pool and CRC helper (frames.py), the bundle's mappings of
its blob files and their lifetimes (bundle.py), the per-file locks and pagers (pager.py), the
refused-path memory (session.py)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import run_in_runtime, write_bundle

from onnx_cooker.runtime.header import read_header
from tests.test_load_paths import VERSIONS, _cases

THREADS, LOADS = 8, 24  # loads per thread

PROBE = """
import json, random, sys, threading
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import numpy as np, onnxruntime
from onnx_cooker.runtime import MemoryBlob, load_info, open_bundle, session_from_blob

folder, threads, loads = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cases = json.loads((folder / "cases.json").read_text())
bundle = open_bundle(folder / "bundle")
blobs = {c["name"]: (folder / c["blob"]).read_bytes() for c in cases}
inputs = {c["name"]: np.load(folder / c["input"]) for c in cases}
outputs = {c["name"]: np.load(folder / c["output"]) for c in cases}
WAYS = ("bytes", "bytes-low-memory", "bundle", "bundle-low-memory", "memory-blob")
done, failures, paths = [], [], set()

def load(name, way):
    cpu = ["CPUExecutionProvider"]
    if way.startswith("bytes"):
        return session_from_blob(blobs[name], providers=cpu, low_memory=way.endswith("memory"))
    if way.startswith("bundle"):
        return bundle.session(name, providers=cpu, low_memory=way.endswith("memory"))
    path = folder / (name + ".ocb")
    with open(path, "rb") as stream:
        memory = MemoryBlob.read(stream, path.stat().st_size)
    try:
        return session_from_blob(memory, providers=cpu)
    finally:
        memory.close()  # the session keeps what it borrowed

def work(seed):
    pick = random.Random(seed)
    for _ in range(loads):
        name, way = pick.choice(list(blobs)), pick.choice(WAYS)
        try:
            session = load(name, way)
            got = session.run(None, {session.get_inputs()[0].name: inputs[name]})[0]
            paths.add(load_info(session).path.value)
            want = outputs[name]  # low_memory runs other kernels: float32 sums of 1024 in another order
            if not np.allclose(got, want, rtol=1e-4, atol=1e-6 * float(np.abs(want).max())):
                failures.append(f"{name} {way}: outputs differ")
            done.append((name, way))
        except BaseException as exc:
            failures.append(f"{name} {way}: {exc!r}"[:500])

workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
print(json.dumps({"onnxruntime": onnxruntime.__version__, "loads": len(done), "failures": failures,
                  "pairs": sorted({f"{n} {w}" for n, w in done}), "paths": sorted(paths)}))
"""


@pytest.fixture(scope="module")
def case_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("threads")
    cases = _cases(folder)
    blobs = {}
    for case in cases:
        blob = (folder / case["blob"]).read_bytes()
        blobs[case["name"]] = (str(read_header(blob)[0].model_format), blob)
    write_bundle(folder / "bundle", blobs)
    for case in cases:  # the bundle names its files <model>.<format>.ocb: point the probe at them
        case["blob"] = f"bundle/{case['name']}.{blobs[case['name']][0]}.ocb"
    (folder / "cases.json").write_text(json.dumps(cases))
    return folder


@pytest.mark.parametrize("version", VERSIONS)
def test_eight_threads_load_every_way_at_once(version: str, case_folder: Path, tmp_path: Path) -> None:
    report: dict[str, Any] = run_in_runtime(
        version, tmp_path, ["-c", PROBE, str(case_folder), str(THREADS), str(LOADS)]
    )
    assert report["failures"] == []
    assert report["loads"] == THREADS * LOADS
    assert len(report["pairs"]) >= 20  # most of the 5 cases x 5 ways met each other
    assert len(report["paths"]) >= 3  # in-place, copying and mapped paths ran side by side


def test_a_task_on_the_loaders_pool_that_opens_a_bundle_runs_inline(case_folder: Path) -> None:
    """``run_parallel`` called on one of the pool's own threads (``open_bundle`` checks its blobs on
    the pool) runs its tasks inline: waiting there for tasks queued behind itself hung on two
    cores, and every later load of the process with it."""
    from onnx_cooker.runtime import open_bundle
    from onnx_cooker.runtime.frames import run_parallel

    opened: list[object] = []

    def outer() -> None:
        run_parallel(lambda _: opened.append(open_bundle(case_folder / "bundle")), range(4), 2)

    worker = threading.Thread(target=outer, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "a pool task's own run_parallel waited for the pool it occupies"
    assert len(opened) == 4
