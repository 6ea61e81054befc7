"""onnx_cooker/isolate.py: work run in a forked child comes back (its result, its exception), and a child
that a native crash ends comes back as a Crash naming the signal and the last step it started. Each
case runs in a fresh interpreter: only a process with no other Python thread forks, and a pytest
worker has its own threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# isolation forks on Linux only (onnx_cooker/isolate.py: no fork on Windows, macOS's Objective-C runtime)
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cooks fork on Linux only")


def in_fresh_python(code: str, **env: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a new interpreter; that line."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


PRELUDE = """
    import json, os, signal, threading, time
    import numpy as np
    from onnx_cooker.isolate import Crash, can_isolate, run_isolated
    from onnx_cooker.steptimes import step
"""


def test_a_native_crash_comes_back_as_a_crash_naming_the_signal_and_the_step() -> None:
    got = in_fresh_python(
        PRELUDE
        + """
    def work():
        with step("optimize"):
            pass
        with step("verify: the cooked blob"):
            os.kill(os.getpid(), signal.SIGSEGV)  # what a segfault inside onnxruntime delivers
    crash = run_isolated(work)
    aborted = run_isolated(os.abort)
    exited = run_isolated(lambda: os._exit(3))
    print(json.dumps([can_isolate(), crash.how, crash.step, aborted.how, aborted.step, exited.how]))
    """
    )
    assert got == [True, "SIGSEGV", "verify: the cooked blob", "SIGABRT", None, "exit status 3"]


def test_results_and_exceptions_come_back_from_the_child() -> None:
    got = in_fresh_python(
        PRELUDE
        + """
    parent = os.getpid()
    value = run_isolated(lambda: {"pid": os.getpid(), "array": np.arange(4)})
    try:
        run_isolated(lambda: int("not a number"))
        raised = None
    except ValueError as exc:
        raised = str(exc)
    print(json.dumps([value["pid"] != parent, value["array"].tolist(), raised]))
    """
    )
    assert got == [True, [0, 1, 2, 3], "invalid literal for int() with base 10: 'not a number'"]


def test_it_runs_in_the_process_with_another_python_thread_or_when_turned_off() -> None:
    code = (
        PRELUDE
        + """
    stop = threading.Event()
    if os.environ.get("WITH_THREAD"):
        threading.Thread(target=stop.wait).start()
    if os.environ.get("WITH_QUEUE"):  # a `doit -n` worker's results queue starts a feeder thread
        import multiprocessing
        results = multiprocessing.Queue()
        results.put("a task's result")
        time.sleep(0.2)
    here = run_isolated(os.getpid) == os.getpid()
    stop.set()
    print(json.dumps([can_isolate(), here]))
    """
    )
    assert in_fresh_python(code, WITH_THREAD="1") == [False, True]  # a lock it holds would stay held
    assert in_fresh_python(code, COOK_ISOLATE="0") == [False, True]
    assert in_fresh_python(code) == [True, False]
    assert in_fresh_python(code, WITH_QUEUE="1") == [True, False]  # its feeder holds no lock the child takes


def test_the_parents_uncollected_sessions_are_not_collected_in_the_child() -> None:
    """An onnxruntime session the parent dropped in a reference cycle is garbage only its cyclic
    collector frees. Collected in the child (a collection any allocation there may start), its
    destructor waits for thread-pool threads that exist only in the parent: a cook hung (one int8
    cook in three, seen with py-spy in _rounding_noise), or crashed (SIGSEGV every time here). The
    parent's objects are frozen across the fork: the child's collector never looks at them, and
    the parent's still frees them."""
    got = in_fresh_python(
        PRELUDE
        + """
    import gc, weakref
    import onnxruntime
    from tests.models import mlp_model
    model = mlp_model().SerializeToString()
    gc.disable()
    cycles = []
    for _ in range(4):
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        session.run(None, {i.name: np.ones([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
                           for i in session.get_inputs()})
        holder = {"session": session}
        holder["self"] = holder  # freed only by the cyclic collector
        cycles.append(weakref.ref(holder["session"]))
        del session, holder
    signal.alarm(60)  # a hang fails the test instead of stalling the suite
    result = run_isolated(lambda: (gc.collect(), "collected")[1])
    gc.enable()
    gc.collect()
    print(json.dumps([repr(result), all(ref() is None for ref in cycles)]))
    """
    )
    assert got == ["'collected'", True]  # no Crash(how='SIGSEGV'), and the parent freed them
