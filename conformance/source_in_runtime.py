"""Run source models of ONNX backend cases in whatever onnxruntime this interpreter has; print JSON.

Started by ``runtime_check`` with the python of a platform's exact-version environment, to tell a
target runtime that cannot run the model at all (a correct refusal) from a cooked blob that broke.
Imports only numpy, onnxruntime and ``outcome`` (numpy only), found beside this file.

    python source_in_runtime.py <folder with cases.json, <name>.onnx, <name>.npz>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime
from outcome import mismatch


def run(folder: Path, case: dict) -> str:
    """`pass`, or how this onnxruntime fails the source model against the case's references."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    try:
        session = onnxruntime.InferenceSession(
            (folder / f"{case['name']}.onnx").read_bytes(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        return f"load: {str(exc).strip().splitlines()[0]}"
    with np.load(folder / f"{case['name']}.npz", allow_pickle=False) as data:
        feeds = {key.removeprefix("input/"): data[key] for key in data.files if key.startswith("input/")}
        expected = [data[f"output/{i}"] for i in range(len(case["outputs"]))]
    try:
        actual = session.run(case["outputs"], feeds)
    except Exception as exc:
        return f"run: {str(exc).strip().splitlines()[0]}"
    for name, want, got in zip(case["outputs"], expected, actual, strict=True):
        problem = mismatch(want, got, case["rtol"], case["atol"], name)
        if problem:
            return f"compare: {problem}"
    return "pass"


def main(folder: Path) -> int:
    cases = json.loads((folder / "cases.json").read_text(encoding="utf-8"))
    report = {"onnxruntime": onnxruntime.__version__, "cases": {c["name"]: run(folder, c) for c in cases}}
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
