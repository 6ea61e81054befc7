"""What a failed runtime check says (onnx_cooker/build/target_check.py): each model's failure with its fix
as the worker gave it, the fix for failures that carry none, a worker that crashed, and a version the
package registry does not have."""

from __future__ import annotations

import re
from typing import Any

from onnx_cooker.cook.job import RuntimeCheck
from onnx_cooker.layout import CHECKING_MODEL


def failed_message(check: RuntimeCheck, report: dict[str, Any], failures: list[str]) -> str:
    """The models that fail in the target's onnxruntime, each with its fix: the worker's (an EP's
    advice, a tolerance for a difference in results), else what a missing operator or attribute
    asks for."""
    advised = all(
        report["models"].get(n, {}).get("advised")
        for n in check.names
        if n in report["models"] and not report["models"][n].get("ok")
    )
    hint = (
        ""
        if advised  # each says what to do
        else f". Where onnxruntime {check.runtime_version} lacks an operator version or attribute the "
        f"model uses: convert the source to an older opset if one has it, raise runtime_version in "
        f"{check.profile} if the target ships a newer onnxruntime, or list {check.platform!r} in the "
        "model's `skip_platforms`"
    )
    return (
        f"{check.platform}: {len(failures)} model(s) fail in onnxruntime {check.runtime_version}, the "
        f"version the platform ships: {'; '.join(failures)}{hint}"
    )


def crashed_message(check: RuntimeCheck, returncode: int, stderr: str) -> str:
    """The failure of a worker that died: killed by a signal (a crash inside onnxruntime), naming the
    model it was on; else its own error, with the last lines it wrote."""
    lines = stderr.strip().splitlines()
    started = [line.removeprefix(CHECKING_MODEL) for line in lines if line.startswith(CHECKING_MODEL)]
    tail = " ".join([line for line in lines if not line.startswith(CHECKING_MODEL)][-3:])
    if returncode >= 0 or not started:
        how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        where = f"the runtime check in onnxruntime {check.runtime_version}"
        return f"{check.platform}: {where} failed ({how}): {tail}"
    return (
        f"{check.platform}: onnxruntime {check.runtime_version} crashed (signal {-returncode}) loading or "
        f"running {started[-1]!r}, as a game shipping it would: list {check.platform!r} in that model's "
        f"`skip_platforms`, raise runtime_version in {check.profile} if the target ships a newer "
        "onnxruntime, or try another `optimization_level` for the model; and report it to onnxruntime"
        + (f" ({tail})" if tail else "")
    )


def models_after_crash(check: RuntimeCheck, stderr: str) -> tuple[str, ...]:
    """The models of ``check`` after the one its worker crashed on (none when it named none)."""
    lines = stderr.splitlines()
    started = [line.removeprefix(CHECKING_MODEL) for line in lines if line.startswith(CHECKING_MODEL)]
    if not started or started[-1] not in check.names:
        return ()
    return tuple(check.names[check.names.index(started[-1]) + 1 :])


_PIP_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


def no_such_version(output: str, requirement: str) -> str | None:
    """pip's "No matching distribution" for ``requirement`` in one sentence, with the newest releases
    the registry has for this Python; None for any other failure, or where it lists none."""
    if "No matching distribution found" not in output:
        return None
    package, _, version = requirement.partition("==")
    found = _PIP_VERSIONS.search(output)
    releases = [v for v in (found.group(1).split(", ") if found else []) if re.fullmatch(r"[0-9.]+", v)]
    newest = ", ".join(releases[-4:])  # none at all: more likely a registry this machine cannot reach
    return (
        f"the package registry has no {package} {version} for this Python; its newest: {newest}"
        if releases
        else None
    )
