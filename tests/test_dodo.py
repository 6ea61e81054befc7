"""End to end: the real `doit` in a subprocess on a temporary copy of the project (tests/conftest.py).

What is cooked must run like its source; what is up to date must stay untouched, and exactly the
tasks whose inputs changed (docs/design.md, "The cook key") must re-run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import onnxruntime.tools.ort_format_model  # noqa: F401  (puts ort_flatbuffers_py on sys.path)
import pytest
import yaml
from onnx import TensorProto, numpy_helper

import ort_flatbuffers_py.fbs as fbs  # isort: skip
from onnx_cooker.build.stamps import known_sha256
from onnx_cooker.layout import digest_memo_dir
from onnx_cooker.runtime import decode_blob, open_bundle, unpack_blob
from onnx_cooker.settings.assets import discover
from onnx_cooker.settings.table import DEFAULTS
from tests.models import large_matmul_model

# Every test here runs the real doit in a subprocess.
pytestmark = pytest.mark.slow

PLATFORMS = ("android", "console", "ios", "linux-openvino", "windows-dml")
FORMATS = {"windows-dml": "onnx", "android": "ort", "ios": "ort", "console": "ort", "linux-openvino": "onnx"}
CPU = ["CPUExecutionProvider"]
RTOL, ATOL = 1e-4, 1e-5
SYMBOLIC_DIMS = {"batch": 2}
INPUT_SEED = 12345
DOIT_TIMEOUT = 600  # seconds; only guards against a hang, asserts nothing about speed
TASK_LINE = re.compile(r"^(\.|--)\s+((?:cook|runtime_check):\S+)\s*$", re.MULTILINE)
TRACEBACK = "Traceback (most recent call last)"
ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


# --- running doit ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DoitRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def ran(self) -> set[str]:
        """Tasks doit executed (`.  <task>`)."""
        return {name for mark, name in TASK_LINE.findall(self.stdout) if mark == "."}

    @property
    def up_to_date(self) -> set[str]:
        """Tasks doit skipped as up to date (`-- <task>`)."""
        return {name for mark, name in TASK_LINE.findall(self.stdout) if mark == "--"}


RUNTIMES_CACHE = Path(__file__).resolve().parents[1] / ".pytest_cache" / "runtimes"


def doit_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without anything that would point doit at another project."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COOK_") and k != "PYTHONPATH"}
    # Every copy shares one cache of target onnxruntime environments (made once, by the first cook).
    env["COOK_RUNTIMES_DIR"] = str(RUNTIMES_CACHE)
    env.update(extra or {})
    return env


def doit(project: Path, *args: str, env: Mapping[str, str] | None = None) -> DoitRun:
    proc = subprocess.run(
        [sys.executable, "-m", "doit", *args],
        cwd=project,
        env=doit_env(env),
        capture_output=True,
        text=True,
        timeout=DOIT_TIMEOUT,
    )
    return DoitRun(proc.returncode, proc.stdout, proc.stderr)


def cook(project: Path, *args: str, env: Mapping[str, str] | None = None) -> DoitRun:
    run = doit(project, *args, "cook", env=env)
    assert run.returncode == 0, f"doit cook failed:\n{run.output}"
    return run


def status(project: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`doit list --all --status` as {task: "R" | "U"}, sub-tasks only (the group task `cook` is always R)."""
    run = doit(project, "list", "--all", "--status", env=env)
    assert run.returncode == 0, run.output
    lines = re.findall(r"^([RU]) ((?:cook|runtime_check):\S+)", run.stdout, re.MULTILINE)
    assert lines, f"no task lines in:\n{run.stdout}"
    return {name: state for state, name in lines}


# --- what the project should cook ------------------------------------------------------------------


def model_names(project: Path) -> list[str]:
    return [asset.name for asset in discover(project / "assets")]


def platform_names(project: Path) -> list[str]:
    return sorted(path.stem for path in (project / "platforms").glob("*.yaml"))


def cook_tasks(
    project: Path, platforms: list[str] | None = None, models: list[str] | None = None
) -> set[str]:
    """The model tasks ``cook:<platform>:<model>`` (default: every platform, every model)."""
    platforms = platforms or platform_names(project)
    models = models or model_names(project)
    return {f"cook:{p}:{m}" for p in platforms for m in models}


def manifest_tasks(platforms: list[str]) -> set[str]:
    """The platform-level tasks: the manifest ``cook:<p>`` and the check in the target's onnxruntime."""
    return {f"cook:{p}" for p in platforms} | {f"runtime_check:{p}" for p in platforms}


def every_task(project: Path) -> set[str]:
    return cook_tasks(project) | manifest_tasks(platform_names(project))


def blob_files(build: Path) -> dict[str, tuple[int, int]]:
    """Every blob a cook wrote (staged under ``.entries/``) -> (inode, mtime_ns): a rewrite (atomic
    replace) changes both. The manifest publishes them under content-hashed names (not counted)."""
    return {
        path.relative_to(build).as_posix(): (path.stat().st_ino, path.stat().st_mtime_ns)
        for path in build.glob("*/.entries/**/*.ocb")
    }


def blob_name(platform: str, model: str) -> str:
    return f"{platform}/.entries/{model}.{FORMATS[platform]}.ocb"


def rewritten(before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]]) -> set[str]:
    assert set(after) == set(before), "blobs appeared or disappeared"
    return {name for name in before if after[name] != before[name]}


# --- source models and their outputs ---------------------------------------------------------------


def feeds_for(session: onnxruntime.InferenceSession, inputs_path: Path | None) -> dict[str, np.ndarray]:
    """The asset's sample inputs if it ships them, else seeded inputs matching the signature."""
    if inputs_path is not None:
        with np.load(inputs_path) as archive:
            return {key: archive[key] for key in archive.files}
    rng = np.random.default_rng(INPUT_SEED)
    feeds = {}
    for value in session.get_inputs():
        shape = tuple(SYMBOLIC_DIMS[d] if isinstance(d, str) else d for d in value.shape)
        dtype = ORT_DTYPES[value.type]
        if dtype is np.bool_:
            feeds[value.name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, 4, size=shape).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def run_session(
    session: onnxruntime.InferenceSession, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


@dataclass(frozen=True)
class Expected:
    feeds: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


def source_outputs(assets_dir: Path) -> dict[str, Expected]:
    """Each source model run by plain onnxruntime (its own path, so external data loads as usual)."""
    expected = {}
    for asset in discover(assets_dir):
        session = onnxruntime.InferenceSession(str(asset.path), providers=CPU)
        feeds = feeds_for(session, asset.inputs_path)
        expected[asset.name] = Expected(feeds, run_session(session, feeds))
    return expected


def assert_runs_like_source(build: Path, platform: str, name: str, expected: Expected) -> None:
    session = open_bundle(build / platform).session(name, providers=CPU)
    actual = run_session(session, expected.feeds)
    assert set(actual) == set(expected.outputs), f"{platform}/{name}: outputs {sorted(actual)}"
    for output, want in expected.outputs.items():
        np.testing.assert_allclose(
            actual[output], want, rtol=RTOL, atol=ATOL, err_msg=f"{platform}/{name} output {output!r}"
        )


def change_one_weight(path: Path) -> None:
    """Re-save the model with the first element of its first float initializer changed."""
    model = onnx.load(str(path))
    tensor = next(t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT)
    values = numpy_helper.to_array(tensor).copy()
    values.flat[0] += 0.5
    tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    onnx.save(model, str(path))


# --- one cooked copy shared by the tests that only read it -----------------------------------------


@dataclass(frozen=True)
class Cooked:
    project: Path
    first: DoitRun

    @property
    def build(self) -> Path:
        return self.project / "build"


@pytest.fixture(scope="module")
def cooked(tmp_path_factory: pytest.TempPathFactory, project_copier: Callable[[Path], Path]) -> Cooked:
    project = project_copier(tmp_path_factory.mktemp("cooked") / "project")
    return Cooked(project, doit(project, "cook"))


@pytest.fixture(scope="module")
def expected(cooked: Cooked) -> dict[str, Expected]:
    return source_outputs(cooked.project / "assets")


# --- 1. the first cook ------------------------------------------------------------------------------


def test_first_cook_runs_every_task_and_writes_a_manifest_per_platform(cooked: Cooked) -> None:
    assert cooked.first.returncode == 0, cooked.first.output
    assert platform_names(cooked.project) == sorted(PLATFORMS)
    assert cooked.first.ran == every_task(cooked.project)
    assert sorted(p.parent.name for p in cooked.build.glob("*/manifest.json")) == sorted(PLATFORMS)
    # Every blob was run in the exact onnxruntime its platform ships, e.g. 1.24.4 for windows-dml.
    for platform in PLATFORMS:
        manifest = json.loads((cooked.build / platform / "manifest.json").read_text())
        target = yaml.safe_load((cooked.project / "platforms" / f"{platform}.yaml").read_text())[
            "runtime_version"
        ]
        assert manifest["runtime_check"] == "on"
        assert all(target in entry["verified_on"] for entry in manifest["models"].values()), platform
        # Where the nodes run: measured on OpenVINO for linux-openvino (every node of every example);
        # elsewhere the preferred EP cannot run on this machine, and the manifest says so.
        for name, entry in manifest["models"].items():
            placement = entry["placement"]
            if platform == "linux-openvino":
                assert placement["measured"] and placement["coverage"] == 1.0, (name, placement)
                assert placement["measured_with"] == "onnxruntime-openvino 1.24.1"
            else:
                assert placement["measured"] is False and placement["reason"], (platform, name, placement)
    assert "linux-openvino: on OpenVINOExecutionProvider (onnxruntime-openvino 1.24.1)" in cooked.first.output
    assert (
        "windows-dml: placement on DmlExecutionProvider not measured (DirectML runs only"
        in cooked.first.output
    )


@pytest.mark.parametrize("platform", PLATFORMS)
def test_first_cook_bundle_runs_like_the_source(
    cooked: Cooked, expected: dict[str, Expected], platform: str
) -> None:
    assert cooked.first.returncode == 0, cooked.first.output
    manifest = json.loads((cooked.build / platform / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["platform"] == platform
    assert sorted(manifest["models"]) == sorted(model_names(cooked.project))
    for name, entry in manifest["models"].items():
        blob = cooked.build / platform / entry["file"]
        assert blob.is_file(), f"{blob} listed in the manifest but missing"
        assert entry["format"] == FORMATS[platform]
        assert re.fullmatch(
            rf"{re.escape(Path(name).name)}\.[0-9a-f]{{16}}\.{FORMATS[platform]}\.ocb", blob.name
        )
        assert entry["blob_sha256"].startswith(blob.name.split(".")[-3])
        unpacked = unpack_blob(blob.read_bytes())
        header, model = unpacked.header, unpacked.model
        assert (header.model_format, header.platform, header.name) == (FORMATS[platform], platform, name)
        if FORMATS[platform] == "ort":
            assert model[4:8] == b"ORTM", f"{blob}: not an ORT-format model"
        else:
            # A model file and, with external weights, its data file beside it: what stock tools unpack.
            unpacked_dir = cooked.build.parent / "unpacked" / platform / name
            unpacked_dir.mkdir(parents=True, exist_ok=True)
            (unpacked_dir / "model.onnx").write_bytes(model)
            if header.weights is not None:
                data = b"".join(bytes(view) for _, view in unpacked.segments)
                (unpacked_dir / header.weights.file).write_bytes(data)
            onnx.checker.check_model(str(unpacked_dir / "model.onnx"))
        assert_runs_like_source(cooked.build, platform, name, expected[name])


# --- 2.-7. what re-runs ----------------------------------------------------------------------------


def test_second_cook_runs_nothing(cooked: Cooked) -> None:
    assert cooked.first.returncode == 0, cooked.first.output
    before = blob_files(cooked.build)
    second = cook(cooked.project)
    assert second.ran == set()
    assert second.up_to_date == every_task(cooked.project)
    assert rewritten(before, blob_files(cooked.build)) == set()


def test_changed_model_bytes_recook_that_model_on_every_platform_only(project: Path) -> None:
    cook(project)
    before = blob_files(project / "build")
    mnist = project / "assets" / "mnist.onnx"
    old_bytes = mnist.read_bytes()
    change_one_weight(mnist)
    assert mnist.read_bytes() != old_bytes

    run = cook(project)

    assert run.ran == cook_tasks(project, models=["mnist"]) | manifest_tasks(list(PLATFORMS))
    assert run.up_to_date == every_task(project) - run.ran
    assert rewritten(before, blob_files(project / "build")) == {blob_name(p, "mnist") for p in PLATFORMS}
    new = source_outputs(project / "assets")["mnist"]
    for platform in PLATFORMS:
        assert_runs_like_source(project / "build", platform, "mnist", new)


def test_touching_a_model_recooks_nothing(project: Path) -> None:
    cook(project)
    before = blob_files(project / "build")
    mnist = project / "assets" / "mnist.onnx"
    later = mnist.stat().st_mtime + 3600
    os.utime(mnist, (later, later))

    run = cook(project)

    assert run.ran == set()
    assert rewritten(before, blob_files(project / "build")) == set()
    # Its bytes were read once and their sha256 remembered for the file as it is now: the next
    # no-op cooks (every platform's check, every run) do not read it again, as they did before.
    memo = digest_memo_dir(project / "build")
    assert known_sha256(memo, mnist) == hashlib.sha256(mnist.read_bytes()).hexdigest()
    again = cook(project)
    assert again.ran == set()
    assert known_sha256(memo, mnist) == hashlib.sha256(mnist.read_bytes()).hexdigest()


def test_changed_platform_value_recooks_that_platform_only(project: Path) -> None:
    cook(project)
    before = blob_files(project / "build")
    ios = project / "platforms" / "ios.yaml"
    ios.write_text(ios.read_text(encoding="utf-8") + "compression_level: 3\n", encoding="utf-8")

    run = cook(project)

    assert run.ran == cook_tasks(project, platforms=["ios"]) | manifest_tasks(["ios"])
    assert rewritten(before, blob_files(project / "build")) == {
        blob_name("ios", m) for m in model_names(project)
    }


def test_platform_yaml_edits_that_change_no_setting_recook_nothing(project: Path) -> None:
    cook(project)
    before = blob_files(project / "build")
    ios = project / "platforms" / "ios.yaml"
    original = ios.read_text(encoding="utf-8")
    lines = [line for line in original.splitlines() if line.strip()]
    default_level = DEFAULTS["compression_level"]
    edits = {
        "a comment": "\n".join(["# a comment that changes nothing", *lines]),
        "keys reordered": "\n".join(reversed(lines)),
        "a default spelled out": "\n".join([*lines, f"compression_level: {default_level}"]),
    }
    for what, text in edits.items():
        assert text + "\n" != original
        ios.write_text(text + "\n", encoding="utf-8")
        run = cook(project)
        assert run.ran == set(), f"{what} in ios.yaml re-ran {sorted(run.ran)}"
    assert rewritten(before, blob_files(project / "build")) == set()


def test_changed_model_settings_recook_that_model_only(project: Path) -> None:
    cook(project)
    before = blob_files(project / "build")
    settings = project / "assets" / "vision" / "detector.cook.yaml"
    settings.write_text(settings.read_text(encoding="utf-8") + "rtol: 0.001\n", encoding="utf-8")

    run = cook(project)

    assert run.ran == cook_tasks(project, models=["vision/detector"]) | manifest_tasks(list(PLATFORMS))
    assert rewritten(before, blob_files(project / "build")) == {
        blob_name(p, "vision/detector") for p in PLATFORMS
    }
    manifest = json.loads((project / "build" / "ios" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["models"]["vision/detector"]["settings"]["rtol"] == 0.001


def test_another_onnxruntime_version_recooks_everything(cooked: Cooked, tmp_path: Path) -> None:
    assert cooked.first.returncode == 0, cooked.first.output
    tasks = cook_tasks(cooked.project)
    before = status(cooked.project)
    assert {name: before[name] for name in tasks} == dict.fromkeys(tasks, "U")
    fake = tmp_path / "fake-site"
    dist_info = fake / "onnxruntime-99.0.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime\nVersion: 99.0.0\n")
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('onnxruntime'))"],
        env=doit_env({"PYTHONPATH": str(fake)}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "99.0.0"

    after = status(cooked.project, env={"PYTHONPATH": str(fake)})

    assert {name: after[name] for name in tasks} == dict.fromkeys(tasks, "R")


# --- 8. parallel cook ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory, project_copier: Callable[[Path], Path]) -> Cooked:
    project = project_copier(tmp_path_factory.mktemp("parallel") / "project")
    return Cooked(project, doit(project, "-n", "2", "cook"))


def _tensor(tensor: Any) -> tuple:
    raw = tensor.RawDataAsNumpy()
    return (
        tensor.Name(),
        tensor.DataType(),
        tuple(tensor.DimsAsNumpy()) if tensor.DimsLength() else (),
        raw.tobytes() if tensor.RawDataLength() else b"",
    )


def _graph(graph: Any) -> tuple:
    def attribute(a: Any) -> tuple:
        subgraphs = [_graph(a.G())] if a.G() is not None else []
        subgraphs += [_graph(a.Graphs(i)) for i in range(a.GraphsLength())]
        return (
            a.Name(),
            a.Type(),
            a.F(),
            a.I(),
            a.S(),
            _tensor(a.T()) if a.T() else None,
            a.IntsAsNumpy().tobytes() if a.IntsLength() else b"",
            a.FloatsAsNumpy().tobytes() if a.FloatsLength() else b"",
            tuple(subgraphs),
        )

    nodes = [graph.Nodes(i) for i in range(graph.NodesLength())]
    return (
        tuple(_tensor(graph.Initializers(i)) for i in range(graph.InitializersLength())),
        tuple(graph.Inputs(i) for i in range(graph.InputsLength())),
        tuple(graph.Outputs(i) for i in range(graph.OutputsLength())),
        tuple(
            (
                n.Name(),
                n.Domain(),
                n.OpType(),
                n.SinceVersion(),
                tuple(n.Inputs(i) for i in range(n.InputsLength())),
                tuple(n.Outputs(i) for i in range(n.OutputsLength())),
                tuple(attribute(n.Attributes(i)) for i in range(n.AttributesLength())),
            )
            for n in nodes
        ),
    )


def _canonical(model: bytes) -> bytes:
    """The model bytes, except for ORT format: its graph and weights, field by field.

    onnxruntime 1.32 writes the ORT file's kernel-type-string table in hash-map order, so two cooks of
    the same model differ in those bytes only; everything that defines the model must be equal.
    """
    if model[4:8] != b"ORTM":
        return model
    session = fbs.InferenceSession.InferenceSession.GetRootAs(model, 0)
    onnx_model = session.Model()
    opsets = tuple(
        (onnx_model.OpsetImport(i).Domain(), onnx_model.OpsetImport(i).Version())
        for i in range(onnx_model.OpsetImportLength())
    )
    return repr((session.OrtVersion(), onnx_model.IrVersion(), opsets, _graph(onnx_model.Graph()))).encode()


def _model_digests(build: Path, platform: str) -> dict[str, str]:
    return {
        path.relative_to(build).as_posix(): hashlib.sha256(
            _canonical(decode_blob(path.read_bytes())[1])
        ).hexdigest()
        for path in sorted((build / platform).glob(".entries/**/*.ocb"))
    }


@pytest.mark.parametrize("platform", PLATFORMS)
def test_parallel_cook_gives_the_serial_cooks_models(cooked: Cooked, parallel: Cooked, platform: str) -> None:
    assert parallel.first.returncode == 0, parallel.first.output
    # Under -n, doit's task lines and the actions' output interleave mid-line: ask doit's state instead.
    assert set(status(parallel.project).items()) == {(task, "U") for task in every_task(parallel.project)}
    serial = _model_digests(cooked.build, platform)
    in_parallel = _model_digests(parallel.build, platform)
    assert sorted(in_parallel) == sorted(serial) and len(serial) == len(model_names(cooked.project))
    differ = sorted(name for name in serial if serial[name] != in_parallel[name])
    assert differ == [], f"cooked model bytes differ between two cooks of the same inputs: {differ}"


# --- 9.-10. clean and list -------------------------------------------------------------------------


def test_clean_removes_blobs_entries_and_manifests(project: Path) -> None:
    cook(project)
    build = project / "build"
    assert list(build.rglob("*.ocb"))

    run = doit(project, "clean")

    assert run.returncode == 0, run.output
    files = sorted(p.relative_to(build).as_posix() for p in build.rglob("*") if p.is_file())
    assert files == [".cook.lock", ".doit.db"], "doit clean left files behind"  # doit state and its lock
    assert set(status(project).values()) == {"R"}


def test_list_shows_platforms_and_models_with_their_docs(cooked: Cooked) -> None:
    top = doit(cooked.project, "list")
    assert top.returncode == 0, top.output
    assert re.search(r"^cook\s+Cook every model for every platform", top.stdout, re.MULTILINE), top.stdout

    run = doit(cooked.project, "list", "--all")

    assert run.returncode == 0, run.output
    docs = dict(re.findall(r"^((?:cook|runtime_check):\S+)\s+(.+?)\s*$", run.stdout, re.MULTILINE))
    assert set(docs) == every_task(cooked.project)
    for platform in PLATFORMS:
        profile = yaml.safe_load((cooked.project / "platforms" / f"{platform}.yaml").read_text())
        assert docs[f"cook:{platform}"] == profile["description"]
    assert (
        docs["cook:windows-dml:vision/detector"]
        == "cook vision/detector for windows-dml (onnx, basic, fixed)"
    )
    assert docs["cook:android:mnist"] == "cook mnist for android (ort, all, runtime)"


# --- 11.-12. bad input -----------------------------------------------------------------------------


def test_garbage_model_fails_alone_with_one_paragraph_and_no_traceback(project: Path) -> None:
    broken = project / "assets" / "broken.onnx"
    broken.write_bytes(np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes())

    run = doit(project, "cook")  # no --continue: one bad model does not stop the others

    assert run.returncode != 0
    assert TRACEBACK not in run.output and "did not run" not in run.output
    # one paragraph for the model (the first platform it failed for), a line for each other platform
    blocks = re.findall(
        r"^TaskFailed - taskid:cook:([^:\n]+):broken\n(.*?)(?:\n\n|\Z)", run.output, re.MULTILINE | re.DOTALL
    )
    assert len(blocks) == 1, f"not one paragraph for broken:\n{run.output}"
    ((first, message),) = blocks
    assert "\n" not in message.strip() and str(broken) in message, message
    for platform in set(PLATFORMS) - {first}:
        assert f"cook:{platform}:broken: failed as on {first} (above)" in run.output
    assert "UnmetDependency" not in run.output
    assert re.search(rf"^  broken: {', '.join(sorted(PLATFORMS))}$", run.stdout, re.MULTILINE), run.stdout
    build = project / "build"
    for platform in PLATFORMS:
        assert not (build / blob_name(platform, "broken")).exists()
        for name in model_names(project):
            if name != "broken":
                decode_blob((build / blob_name(platform, name)).read_bytes())


def test_unknown_platform_key_stops_before_cooking_with_a_hint(project: Path) -> None:
    android = project / "platforms" / "android.yaml"
    text = android.read_text(encoding="utf-8")
    assert "\noptimization_level:" in text
    android.write_text(text.replace("\noptimization_level:", "\noptimisation_level:"), encoding="utf-8")

    run = doit(project, "cook")

    assert run.returncode != 0
    assert run.ran == set()
    assert str(android) in run.output
    assert "optimisation_level" in run.output
    assert "did you mean 'optimization_level'" in run.output
    assert TRACEBACK not in run.output
    assert not list((project / "build").rglob("*.ocb"))


# --- 13. interrupted cooks -------------------------------------------------------------------------

LARGE_SHAPE = (1024, 10240)  # 40 MiB of float32 weights, inline: long enough to be killed mid-write


def write_large_model(path: Path, seed: int) -> None:
    onnx.save(large_matmul_model(*LARGE_SHAPE, seed=seed), str(path))


def assert_nothing_half_written(build: Path, when: str) -> None:
    for path in build.rglob("*"):
        if not path.is_file():
            continue
        name = path.name
        if name.endswith(".ocb"):
            decode_blob(path.read_bytes())  # raises on a truncated or damaged blob
        elif name.endswith(".json"):
            json.loads(path.read_text(encoding="utf-8"))
        elif name.endswith(".config"):  # reduced-build operator lists parse back completely
            text = path.read_text(encoding="utf-8")
            assert text.startswith("# Generated from model/s:") and text.endswith("\n"), f"{when}: {path}"
        elif name.endswith(".npz"):  # verification data for the runtime check
            np.load(path).close()
        elif name == "report.html":  # the cook report, written at the end of a run, atomically
            assert path.read_text(encoding="utf-8").endswith("</html>\n"), f"{when}: {path}"
        elif name.endswith(".applied.ort"):  # operator-list input written whole or not at all
            assert fbs.InferenceSession.InferenceSession.GetRootAs(path.read_bytes(), 0).Model() is not None
        else:
            scratch_dirs = (".optimize-", ".usability-", ".opconfig-", ".worker-", ".quantize-")
            scratch = any(part.startswith(scratch_dirs) for part in path.parts)
            temp = name.startswith(".") and name.endswith(".tmp")
            state = name.startswith((".doit.db", ".cook.lock"))
            assert state or temp or scratch, f"{when}: unexpected file {path}"


def test_killed_cooks_never_leave_a_half_written_blob(tmp_path: Path, project: Path) -> None:
    assets, platforms, build = tmp_path / "large-assets", tmp_path / "android-only", tmp_path / "build"
    assets.mkdir()
    platforms.mkdir()
    (platforms / "android.yaml").write_bytes((project / "platforms" / "android.yaml").read_bytes())
    scratch = tmp_path / "tmp"  # where the cooker's own temp files go, not the system's
    scratch.mkdir()
    env = {
        "COOK_ASSETS_DIR": str(assets),
        "COOK_PLATFORMS_DIR": str(platforms),
        "COOK_BUILD_DIR": str(build),
        "TMPDIR": str(scratch),
    }
    model = assets / "large.onnx"
    write_large_model(model, seed=0)
    cook(project, env=env)
    blob = build / "android" / ".entries" / "large.ort.ocb"
    assert blob.is_file()

    # Fixed delays land anywhere in the cook; the last run is killed as soon as the blob's temp file
    # shows up, i.e. while the blob is being written.
    for seed, delay in enumerate((0.5, 1.0, 2.0, 3.0, None), start=1):
        when = f"killed after {delay} s" if delay else "killed while writing the blob"
        write_large_model(model, seed)  # new bytes each time, so that every run has a cook to do
        with (tmp_path / f"run{seed}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "doit", "cook"],
                cwd=project,
                env=doit_env(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            if delay:
                time.sleep(delay)
            else:
                temp_files = set(blob.parent.glob(".*.tmp"))
                while proc.poll() is None and set(blob.parent.glob(".*.tmp")) <= temp_files:
                    time.sleep(0.002)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=DOIT_TIMEOUT)
        assert_nothing_half_written(build, when)
        assert blob.is_file(), f"{when}: the previous blob is gone"

    cook(project, env=env)
    expected = source_outputs(assets)["large"]
    assert_runs_like_source(build, "android", "large", expected)
    assert_nothing_half_written(build, "after the final cook")


# --- 14.-15. folders and imports -------------------------------------------------------------------


def test_folders_come_from_the_environment(project: Path, tmp_path: Path) -> None:
    platforms_there, models_there = ["console", "handheld"], ["mnist", "vision/detector"]
    assets, platforms, build = tmp_path / "other-assets", tmp_path / "other-platforms", tmp_path / "out"
    (assets / "vision").mkdir(parents=True)
    platforms.mkdir()
    for relative in [f"{m}.onnx" for m in models_there] + ["vision/detector.cook.yaml"]:
        (assets / relative).write_bytes((project / "assets" / relative).read_bytes())
    (platforms / "console.yaml").write_bytes((project / "platforms" / "console.yaml").read_bytes())
    (platforms / "handheld.yaml").write_text(
        textwrap.dedent("""\
        description: "a handheld that only exists in this test"
        execution_providers: [CPUExecutionProvider]
        """)
    )
    env = {"COOK_ASSETS_DIR": str(assets), "COOK_PLATFORMS_DIR": str(platforms), "COOK_BUILD_DIR": str(build)}

    run = cook(project, env=env)

    assert run.ran == {f"cook:{p}:{m}" for p in platforms_there for m in models_there} | manifest_tasks(
        platforms_there
    )
    assert not (project / "build").exists()
    assert (build / ".doit.db").is_file()
    assert (
        sorted(p.name for p in build.iterdir() if p.is_dir() and not p.name.startswith("."))
        == platforms_there
    )
    expected = source_outputs(assets)
    for platform in platforms_there:
        assert open_bundle(build / platform).names == tuple(models_there)
        for name in models_there:
            assert_runs_like_source(build, platform, name, expected[name])
    assert cook(project, env=env).ran == set()


def test_loading_dodo_imports_neither_onnx_nor_onnxruntime(cooked: Cooked) -> None:
    script = textwrap.dedent("""\
        import json, runpy, sys
        namespace = runpy.run_path("dodo.py")
        tasks = [t for t in namespace["task_cook"]() if t.get("name", "") is not None]  # not group docs
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("onnx", "onnxruntime"))
        print(json.dumps({"tasks": len(tasks), "heavy": heavy}))
        """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cooked.project,
        env=doit_env(),
        capture_output=True,
        text=True,
        timeout=DOIT_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["tasks"] == len(every_task(cooked.project))
    assert result["heavy"] == []


def test_settings_that_do_not_resolve_are_all_reported_before_cooking(project: Path) -> None:
    """Two models whose own files conflict with the platforms: both named in one error, nothing cooked."""
    for name in ("mnist", "resnet"):
        (project / "assets" / f"{name}.cook.yaml").write_text("format: onnx\n")  # android/ios: runtime style

    run = doit(project, "cook")

    assert run.returncode != 0 and TRACEBACK not in run.output
    assert "mnist.cook.yaml" in run.output and "resnet.cook.yaml" in run.output
    assert "optimization_style' runtime requires 'format' ort" in run.output
    assert not list((project / "build").rglob("*.ocb"))


def test_a_cook_line_names_the_model_not_its_staging_file_and_explains_a_larger_blob() -> None:
    from onnx_cooker.build.summary import cook_line

    entry = {
        "name": "vision/detector",
        "format": "ort",
        "file": ".entries/vision/detector.ort.ocb",
        "settings": {"platform": "android"},
        "blob_size": 9_271,
        "source_size": 7_123,
        "verification": {"inputs": "synthesized", "outputs": [{"max_abs": 2e-7}]},
    }
    line = cook_line(entry)
    assert line.startswith("android:vision/detector: ort blob of 9,271 B from 7,123 B of source (larger: ")
    assert ".entries" not in line and "kernel tables" in line and "max abs error 2e-07" in line
    smaller = cook_line(entry | {"format": "onnx", "blob_size": 5_000})
    assert "larger" not in smaller and smaller.startswith("android:vision/detector: onnx blob of 5,000 B")
