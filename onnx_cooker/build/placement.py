"""Where a session's nodes run: node placement per execution provider, measured, not assumed.

``get_providers()`` does not tell (it lists registered EPs, also one that took no node), so this
measures it, each way by the method that tells the truth for the model's format
(docs/design.md, "Proving where a model runs"):

- ONNX: ``session.record_ep_graph_assignment_info`` then ``get_provider_graph_assignment_info()``
  lists every node of the optimized graph with its EP, before an EP compiles its nodes into one.
- ORT format: that API returns nothing, and ``session.disable_cpu_ep_fallback`` does not fire, even
  when nodes run on the CPU. Only the profiler tells: each node that ran, with its EP. A compiling
  EP (OpenVINO) runs its nodes as one fused kernel, so the nodes it took are counted as the nodes a
  CPU-only session of the same blob runs minus those the EP session still runs on the CPU.

Either way the profiler also gives each EP's share of the kernel time of a few runs.

Runs inside a target's own environment (copied there by ``onnx_cooker.build.target_check``) and from
``bench/gpu.py``: onnxruntime, numpy and the standard library only.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnxruntime

CPU = "CPUExecutionProvider"
# Copies between devices that onnxruntime inserts itself: not nodes of the model.
_INSERTED = frozenset({"MemcpyToHost", "MemcpyFromHost"})
_KERNEL = "_kernel_time"
MakeSession = Callable[[onnxruntime.SessionOptions], onnxruntime.InferenceSession]
# Why a preferred EP cannot be measured on a build machine, for the EPs that need hardware or an OS
# a build machine does not have; other EPs missing from the installed package get a generic reason.
NOT_HERE = {
    "DmlExecutionProvider": "DirectML runs only on Windows; the onnxruntime CPU wheel stands in here",
    "NnapiExecutionProvider": "NNAPI runs only on Android devices",
    "CoreMLExecutionProvider": "CoreML runs only on Apple devices",
    "QNNExecutionProvider": "QNN runs only on Qualcomm NPUs (Windows on Arm, Android)",
    "OpenVINOExecutionProvider": "onnxruntime-openvino runs on this check only on Linux x86_64 (Python < "
    "3.14); the onnxruntime CPU wheel of the same version stands in here",
    "CUDAExecutionProvider": "CUDA needs an NVIDIA GPU and onnxruntime-gpu on the build machine",
    "TensorrtExecutionProvider": "TensorRT needs an NVIDIA GPU and onnxruntime-gpu on the build machine",
}


def preferred_ep(providers: list[str] | tuple[str, ...]) -> str:
    """The EP a platform prefers: its first one other than the CPU EP (the CPU EP if it has none)."""
    return next((ep for ep in providers if ep != CPU), CPU)


def not_measurable(ep: str, package: str, available: list[str]) -> str | None:
    """Why ``ep`` cannot be measured in this environment (``package`` installed), else None."""
    if ep in available:
        return None
    if ep in NOT_HERE:
        return NOT_HERE[ep]
    return f"{ep} is not offered by {package} {onnxruntime.__version__} on this build machine"


def synthetic_feeds(session: onnxruntime.InferenceSession) -> dict[str, np.ndarray] | None:
    """Zeros for every input (symbolic dims 1), or None where an input is not a plain tensor."""
    feeds = {}
    for item in session.get_inputs():
        kind = item.type
        if not kind.startswith("tensor(") or kind == "tensor(string)":
            return None
        dtype = {"float": np.float32, "double": np.float64, "float16": np.float16, "bool": np.bool_}.get(
            kind[7:-1], None
        )
        if dtype is None:
            try:
                dtype = np.dtype(kind[7:-1])
            except TypeError:
                return None
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in (item.shape or [])]
        feeds[item.name] = np.zeros(shape, dtype=dtype)
    return feeds


def profiled_kernels(
    make: MakeSession, feeds: Mapping[str, Any] | None, runs: int, assignment: bool = False
) -> tuple[list[tuple[str, str]] | None, dict[str, tuple[str, str]], dict[str, float], bool]:
    """Build a session with the profiler on (and, with ``assignment``, the assignment record), run it
    ``runs`` times on ``feeds`` (None: zeros, where its inputs allow). Returns the assignment record's
    (EP, op type) per node (None: no record), node name -> (EP, op type) of each kernel that ran,
    EP -> microseconds of kernel time, and whether it ran."""
    with tempfile.TemporaryDirectory(prefix="placement-") as folder:
        options = onnxruntime.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "profile")
        if assignment:
            options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        session = make(options)
        nodes = assigned_nodes(session) if assignment else None
        synthetic = feeds is None
        feeds = feeds if feeds is not None else synthetic_feeds(session)
        ran = False
        try:
            for _ in range(runs if feeds is not None else 0):
                session.run(None, dict(feeds or {}))
                ran = True
        except Exception:  # zeros with symbolic dims of 1 need not be inputs the model accepts
            if not synthetic:
                raise
            ran = False
        path = session.end_profiling()
        del session
        with open(path, encoding="utf-8") as file:
            events = json.load(file)
    kernels: dict[str, tuple[str, str]] = {}
    micros: dict[str, float] = {}
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith(_KERNEL):
            continue
        op, ep = str(args.get("op_name", "")), str(args.get("provider", ""))
        if not ep or op in _INSERTED:
            continue
        kernels[event["name"][: -len(_KERNEL)]] = (ep, op)
        micros[ep] = micros.get(ep, 0.0) + float(event.get("dur", 0))
    return nodes, kernels, micros, ran


def assigned_nodes(session: onnxruntime.InferenceSession) -> list[tuple[str, str]] | None:
    """(EP, op type) of every node, from the assignment record (ONNX), or None where this onnxruntime
    has no such record or it is empty (ORT format)."""
    record = getattr(session, "get_provider_graph_assignment_info", None)
    if record is None:
        return None
    try:
        subgraphs = record()
    except Exception:  # onnxruntime's own error types; an older build without the record
        return None
    nodes = [(sub.ep_name, node.op_type) for sub in subgraphs for node in sub.get_nodes()]
    nodes = [(ep, op) for ep, op in nodes if op not in _INSERTED]
    return nodes or None


def measure(
    make: MakeSession,
    make_cpu: MakeSession,
    feeds: Mapping[str, Any] | None,
    model_format: str,
    preferred: str,
    measured_with: str,
    runs: int = 3,
) -> dict[str, Any]:
    """Placement of one model: ``make(options)`` builds the session as the game does (the platform's
    EPs), ``make_cpu(options)`` a CPU-only one (ORT format: the node count). ``feeds`` None: zeros.

    Returns plain data for the manifest: ``nodes`` (EP -> node count), ``coverage`` (share of nodes
    on ``preferred``), ``time_share`` (share of kernel time on it, where it ran), ``cpu_ops`` (op
    types left to the CPU EP), ``method`` and ``measured_with``.
    """
    nodes, kernels, micros, ran = profiled_kernels(make, feeds, runs, assignment=model_format == "onnx")
    if nodes is not None:
        method = "assignment record"
        counts = Counter(ep for ep, _ in nodes)
        cpu_ops = sorted({op for ep, op in nodes if ep == CPU})
    elif not ran:
        return {
            "measured": False,
            "reason": "it has no verification inputs, and zeros (symbolic dims 1) do not run it",
            "preferred": preferred,
            "measured_with": measured_with,
        }
    else:
        method = "profiler"
        _, cpu_kernels, _, _ = profiled_kernels(make_cpu, feeds, 1)
        on_cpu = [op for ep, op in kernels.values() if ep == CPU]
        counts = Counter(ep for ep, _ in kernels.values() if ep != CPU)
        if len(counts) == 1:  # a compiling EP's fused kernels stand for the nodes it took
            ((ep, fused),) = counts.items()
            counts[ep] = max(len(cpu_kernels) - len(on_cpu), fused)
        if on_cpu:
            counts[CPU] = len(on_cpu)
        cpu_ops = sorted(set(on_cpu))
    total = sum(counts.values())
    total_time = sum(micros.values())
    result: dict[str, Any] = {
        "measured": True,
        "nodes": dict(sorted(counts.items())),
        "coverage": round(counts.get(preferred, 0) / total, 4) if total else 1.0,
        "cpu_ops": cpu_ops,
        "method": method,
        "format": model_format,
        "preferred": preferred,
        "measured_with": measured_with,
    }
    if ran and total_time > 0:
        result["time_share"] = round(micros.get(preferred, 0.0) / total_time, 4)
    return result
