"""A session option a blob's header asks for that the loaders refuse (a value onnxruntime has no
name for, an entry the load paths own, an entry outside session.*/optimization.*/mlas.*): both
loaders refuse it with the same message, which names the option and the fix. The cooker's settings
check refuses such options (tests/test_profile.py), so these blobs are made here."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_helpers import make_blob

from pipeline.runtime import session_from_blob
from pipeline.runtime.errors import SessionCreateError
from tests.models import tiny_model
from tests.test_native import VERSIONS, native, ort_library, run_native  # noqa: F401

CPU = "CPUExecutionProvider"
FIX = (
    "; the platform's ep_session_options allow the keys and values of docs/settings.md: fix them and "
    "re-cook with this onnx-cooker"
)
REFUSED = {
    "execution_mode": ("sideways", "execution_mode 'sideways'"),
    "graph_optimization_level": ("max", "graph_optimization_level 'max'"),
    "session.load_model_format": (
        "ORT",
        "session.load_model_format is refused: the loader sets it itself, for the load path it proved "
        "(docs/design.md, loading from memory)",
    ),
    "ep.context_file_path": (
        "/tmp/x",
        "config entry 'ep.context_file_path' is not allowed in a blob (session.*, optimization.*, mlas.*)",
    ),
}


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_both_loaders_refuse_a_bad_session_option_naming_it_and_the_fix(
    native: Path,  # noqa: F811
    tmp_path: Path,
    key: str,
) -> None:
    value, words = REFUSED[key]
    blob = make_blob(
        tiny_model().SerializeToString(),
        "onnx",
        execution_providers=[CPU],
        ep_session_options={CPU: {key: value}},
    )
    expected = f"model 'tiny': bad session option for {CPU}: {words}{FIX}"
    with pytest.raises(SessionCreateError) as caught:
        session_from_blob(blob)
    assert str(caught.value) == expected
    (tmp_path / "tiny.ocb").write_bytes(blob)
    done = run_native(
        [native / "oc-run", "--blob", tmp_path / "tiny.ocb", "--ort", ort_library(VERSIONS[-1])], check=False
    )
    assert done.returncode == 1
    assert expected in done.stderr, done.stderr
