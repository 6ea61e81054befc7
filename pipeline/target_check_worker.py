"""Load and run cooked blobs in whatever onnxruntime this interpreter has; print a JSON report.

Runs inside the isolated environment of a target's exact onnxruntime version, started by
``pipeline.target_check``; imports only the runtime loader, numpy and the standard library.

    python -m pipeline.target_check_worker <platform dir> <name> [<name> ...]
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from pipeline.compare import compare
from pipeline.layout import entry_path, verify_data_path
from pipeline.runtime import BundleError, session_from_blob

CPU_ONLY = ["CPUExecutionProvider"]


def check_model(platform_dir: Path, name: str) -> dict[str, Any]:
    entry = json.loads(entry_path(platform_dir, name).read_text(encoding="utf-8"))
    try:
        session = session_from_blob((platform_dir / entry["file"]).read_bytes(), providers=CPU_ONLY)
    except BundleError as exc:
        return {"ok": False, "error": f"cannot load: {exc}"}
    data_path = verify_data_path(platform_dir, name)
    if not data_path.is_file():
        return {"ok": True, "error": None, "outputs": "loaded only (verify is off for this model)"}
    try:
        with np.load(data_path, allow_pickle=False) as data:
            feeds = {k.removeprefix("input/"): data[k] for k in data.files if k.startswith("input/")}
            expected = {k.removeprefix("output/"): data[k] for k in data.files if k.startswith("output/")}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # fails its model, not the check
        return {"ok": False, "error": f"cannot read {data_path.name}: {exc}"}
    try:
        names = list(expected) or None  # no stored outputs (sequences, maps): run, do not compare
        outputs = session.run(names, feeds)
    except Exception as exc:  # onnxruntime's run errors
        return {"ok": False, "error": f"fails to run: {exc}"}
    if names is None:
        return {"ok": True, "error": None, "outputs": "ran (its outputs have no .npz form to compare)"}
    actual = dict(zip(names, outputs, strict=True))
    # The tolerances the cook verified with: the settings', raised for a lower-precision variant.
    tolerances = {**entry["settings"], **entry.get("verification", {})}
    rtol, atol = tolerances["rtol"], tolerances["atol"]
    results = compare(expected, actual, rtol, atol, tolerances.get("atol_of_range", 0.0))
    failed = [r for r in results if not r.ok]
    error = None
    if failed:
        details = ", ".join(f"{r.name}: max abs {r.max_abs:.3g}" for r in failed)
        error = f"outputs differ beyond rtol={rtol:g}, atol={atol:g} ({details})"
    return {"ok": not failed, "error": error, "outputs": [r.__dict__ for r in results]}


def main(argv: list[str]) -> int:
    platform_dir, names = Path(argv[0]), argv[1:]
    report = {
        "onnxruntime": onnxruntime.__version__,
        "models": {n: check_model(platform_dir, n) for n in names},
    }
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
