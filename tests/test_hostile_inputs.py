"""Hostile and broken inputs to the cooker: each gives a clear error naming the file, and nothing is written.

Truncated and garbage models, protobuf with absurd sizes, external data and symlinks that escape the
assets folder, model names unsafe as output paths, and settings files built to blow up a YAML loader.
Anything that could exhaust memory or hang runs in a child process with an address-space limit and a
timeout: the child must print the expected ``CookError``, not be killed or time out.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import zstandard
from onnx import TensorProto, helper, numpy_helper
from runtime_helpers import make_blob, to_ort_format

from onnx_cooker.build.run_job import cook
from onnx_cooker.cook.job import CookJob
from onnx_cooker.errors import CookError, ModelError, ProfileError
from onnx_cooker.settings.assets import discover
from onnx_cooker.settings.resolve import load_model_settings, load_platforms, resolve
from tests.models import matmul_model, model_of, with_symbolic_batch

REPO = Path(__file__).resolve().parents[1]
HANG_GUARD = 120  # seconds; only stops a hung child, asserts nothing about speed
LOAD_LIMIT = 2 << 30  # address space for a child that only reads a model or a settings file
COOK_LIMIT = 3 << 30  # a child that also runs onnxruntime (its thread pools reserve address space)
TRACEBACK = "Traceback (most recent call last)"


# --- helpers ---------------------------------------------------------------------------------------


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def save_with_external_data(folder: Path, name: str, **entries: str) -> Path:
    """``<name>.onnx`` with its weights in ``<name>.onnx.data``; ``entries`` override every tensor's
    ``external_data`` fields (location, offset, length) in the saved model."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    onnx.save_model(
        matmul_model(),
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{name}.onnx.data",
        size_threshold=0,
    )
    model = onnx.load(path, load_external_data=False)
    for tensor in model.graph.initializer:
        fields = {entry.key: entry.value for entry in tensor.external_data} | entries
        del tensor.external_data[:]
        for key, value in fields.items():
            tensor.external_data.add(key=key, value=value)
    return save(model, path)


def job_for(assets: Path, name: str, build: Path, platform: str = "windows-dml") -> CookJob:
    """The job doit would run for (platform, model), built the way ``onnx_cooker.build.plan`` builds it."""
    asset = next(a for a in discover(assets) if a.name == name)
    platforms = load_platforms(REPO / "platforms", {})
    overrides = load_model_settings(asset.settings_path, [p.name for p in platforms])
    settings = resolve(next(p for p in platforms if p.name == platform), overrides, {})
    return CookJob(asset=asset, settings=settings, platform_dir=build / platform)


def files_under(root: Path) -> set[str]:
    """Every file and symlink below ``root`` (directories left out), relative to it."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_symlink() or not p.is_dir()}


def assert_cook_refused(tmp_path: Path, assets: Path, name: str, message: str) -> None:
    """Cooking ``name`` raises a CookError matching ``message`` and writes no file anywhere."""
    before = files_under(tmp_path)
    with pytest.raises(CookError, match=message):
        cook(job_for(assets, name, tmp_path / "build"))
    assert files_under(tmp_path) == before


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


# A child process with an address-space limit: it runs one cooker function on the request it is given
# and prints {"error": <CookError subclass name or None>, "message": ...}. Any other exception is a
# traceback and a nonzero exit; running out of memory is a MemoryError (or the child is killed).
_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from pathlib import Path
    from onnx_cooker.errors import CookError
    request = json.loads(sys.argv[2])
    what = request["what"]
    try:
        if what == "load_source":
            from onnx_cooker.settings.assets import discover
            from onnx_cooker.cook.source import load_source
            assets = discover(Path(request["assets"]))
            load_source(next(a for a in assets if a.name == request["name"]))
        elif what == "load_platforms":
            from onnx_cooker.settings.resolve import load_platforms
            load_platforms(Path(request["path"]), {})
        elif what == "load_model_settings":
            from onnx_cooker.settings.resolve import load_model_settings
            load_model_settings(Path(request["path"]), ["target"])
        elif what == "cook":
            from onnx_cooker.settings.assets import discover
            from onnx_cooker.build.run_job import cook
            from onnx_cooker.cook.job import CookJob
            from onnx_cooker.settings.resolve import load_model_settings, load_platforms, resolve
            asset = next(a for a in discover(Path(request["assets"])) if a.name == request["name"])
            platforms = load_platforms(Path(request["platforms"]), {})
            platform = next(p for p in platforms if p.name == request["platform"])
            overrides = load_model_settings(asset.settings_path, [p.name for p in platforms])
            settings = resolve(platform, overrides, {})
            build = Path(request["build"]) / platform.name
            cook(CookJob(asset=asset, settings=settings, platform_dir=build))
        else:
            raise SystemExit(f"unknown request {what!r}")
    except CookError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    else:
        print(json.dumps({"error": None, "message": ""}))
    """
)


def run_bounded(request: dict[str, str], *, limit: int = LOAD_LIMIT) -> dict[str, str | None]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(limit), json.dumps(request)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )
    assert proc.returncode == 0, (
        f"the child did not end with a CookError (exit {proc.returncode}: killed, out of memory or another "
        f"exception):\n{proc.stderr[-4000:]}"
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- truncated and garbage models ----------------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 1, 2, 0.1, 0.5, 0.9, -1, -3])
def test_truncated_model_is_refused_naming_the_file(tmp_path: Path, keep: float) -> None:
    """Cut after ``keep`` bytes (a float: that share of the file; negative: bytes cut off the end)."""
    data = matmul_model().SerializeToString()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep if keep >= 0 else len(data) + keep
    assets = tmp_path / "assets"
    path = assets / "cut.onnx"
    assets.mkdir()
    path.write_bytes(data[:cut])
    # A cut on a field boundary parses (protobuf has no end marker) but then lacks what the checker needs.
    assert_cook_refused(
        tmp_path,
        assets,
        "cut",
        rf"^{re.escape(str(path))} \(model 'cut', platform '[^']+'\): "
        rf"({NOT_A_MODEL}|the file is empty \(0 bytes\))",
    )


def _zeros(_: Path) -> bytes:
    return bytes(4096)


def _text(_: Path) -> bytes:
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 123\n"


def _cooked_blob(_: Path) -> bytes:
    return make_blob(matmul_model().SerializeToString(), "onnx")


def _plain_zstd(_: Path) -> bytes:
    return zstandard.ZstdCompressor().compress(matmul_model().SerializeToString())


def _ort_format(scratch: Path) -> bytes:
    return to_ort_format(matmul_model().SerializeToString(), scratch)


def _empty(_: Path) -> bytes:
    return b""


NOT_A_MODEL = (
    "(the file is not a readable ONNX model|the model fails the ONNX checker|the file holds no ONNX graph)"
)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (_zeros, NOT_A_MODEL),
        (_text, r"the file is a Git LFS pointer \(\d+ bytes\), not the model: fetch it with `git lfs pull`"),
        (_empty, r"the file is empty \(0 bytes\), not a model"),
        (_cooked_blob, NOT_A_MODEL),
        (_plain_zstd, NOT_A_MODEL),
        (_ort_format, NOT_A_MODEL),
    ],
    ids=["zeros", "lfs-pointer", "empty", "cooked-blob", "zstd", "ort-format"],
)
def test_file_that_is_not_an_onnx_model_is_refused_naming_the_file(
    tmp_path: Path, content: Callable[[Path], bytes], words: str
) -> None:
    """What lands in assets/ by mistake: an unfetched LFS pointer (named as one, with the fix), an
    empty file (it read as a model without opset_import before), a cooked blob, an ORT-format file..."""
    assets = tmp_path / "assets"
    assets.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    data = content(scratch)
    path = assets / "stray.onnx"
    path.write_bytes(data)
    assert_cook_refused(
        tmp_path, assets, "stray", rf"^{re.escape(str(path))} \(model 'stray', platform '[^']+'\): {words}"
    )


# --- protobuf with absurd sizes ------------------------------------------------------------------


def _huge_initializer(tensor_data: bytes | None) -> onnx.ModelProto:
    """An initializer whose dims claim 10**12 floats (4 TB) but which holds ``tensor_data`` at most."""
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[10**6, 10**6])
    if tensor_data is not None:
        tensor.raw_data = tensor_data
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["y"])],
        "huge",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10**6, 10**6])],
        [tensor],
    )
    return model_of(graph)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        # ir_version 8, then field 7 (graph) whose length prefix claims 2**40 bytes
        (b"\x08\x08\x3a" + varint(2**40) + bytes(16), "the file is not a readable ONNX model"),
        # field 7 claims 2**31 bytes: just over protobuf's own 2 GB limit
        (b"\x08\x08\x3a" + varint(2**31) + bytes(16), "the file is not a readable ONNX model"),
        (_huge_initializer(None).SerializeToString(), "the model fails the ONNX checker"),
        (_huge_initializer(bytes(16)).SerializeToString(), "the model fails the ONNX checker"),
    ],
    ids=["length-2**40", "length-2**31", "dims-1e12-no-data", "dims-1e12-16-bytes"],
)
def test_absurd_protobuf_sizes_are_refused_in_bounded_memory(
    tmp_path: Path, content: bytes, message: str
) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    path = assets / "absurd.onnx"
    path.write_bytes(content)
    result = run_bounded({"what": "load_source", "assets": str(assets), "name": "absurd"})
    assert result["error"] == "ModelError"
    assert re.match(rf"{re.escape(str(path))} \(model 'absurd'\): {message}", result["message"]), result


@pytest.mark.parametrize(
    "entries",
    [
        {"length": str(10**15)},
        {"offset": str(10**15)},
        {"offset": str(2**63 - 1), "length": str(2**63 - 1)},
        {"length": str(2**31)},
    ],
    ids=["length-1e15", "offset-1e15", "offset-and-length-int64-max", "length-2GiB"],
)
def test_external_data_with_absurd_offset_or_length_is_refused_in_bounded_memory(
    tmp_path: Path, entries: dict[str, str]
) -> None:
    assets = tmp_path / "assets"
    path = save_with_external_data(assets, "absurd", **entries)
    result = run_bounded({"what": "load_source", "assets": str(assets), "name": "absurd"})
    assert result["error"] == "ModelError"
    assert result["message"].startswith(f"{path} (model 'absurd'): cannot read its external data"), result


def test_external_tensor_with_huge_dims_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """The dims claim 10**12 floats; the data file (and the recorded length) holds 128 bytes."""
    assets = tmp_path / "assets"
    path = save_with_external_data(assets, "absurd")
    model = onnx.load(path, load_external_data=False)
    model.graph.initializer[0].ClearField("dims")
    model.graph.initializer[0].dims.extend([10**6, 10**6])
    save(model, path)
    result = run_bounded({"what": "load_source", "assets": str(assets), "name": "absurd"})
    assert result["error"] == "ModelError"
    assert result["message"].startswith(f"{path} (model 'absurd'): the model fails the ONNX checker"), result


@pytest.mark.parametrize(
    "entries",
    [{"offset": "-5"}, {"length": "-1"}, {"length": "12abc"}],
    ids=["negative-offset", "negative-length", "not-a-number"],
)
def test_external_data_with_malformed_offset_or_length_is_refused(
    tmp_path: Path, entries: dict[str, str]
) -> None:
    assets = tmp_path / "assets"
    path = save_with_external_data(assets, "malformed", **entries)
    expected = rf"^{re.escape(str(path))} \(model 'malformed', platform '[^']+'\)"
    assert_cook_refused(tmp_path, assets, "malformed", expected)


@pytest.mark.slow
def test_model_whose_constant_expands_to_40_gb_fails_cleanly_in_bounded_memory(tmp_path: Path) -> None:
    """A few hundred bytes of protobuf whose ConstantOfShape makes a 10**10-float tensor when run."""
    shape = numpy_helper.from_array(np.array([100_000, 100_000], np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node(
                "ConstantOfShape",
                ["shape"],
                ["c"],
                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1]),
            ),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        "bomb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [100_000, 100_000])],
        [shape],
    )
    model = model_of(graph)
    assets, build = tmp_path / "assets", tmp_path / "build"
    path = save(model, assets / "bomb.onnx")
    request = {
        "what": "cook",
        "assets": str(assets),
        "name": "bomb",
        "platforms": str(REPO / "platforms"),
        "platform": "windows-dml",
        "build": str(build),
    }
    result = run_bounded(request, limit=COOK_LIMIT)
    assert result["error"] is not None and result["message"].startswith(f"{path} (model 'bomb'"), result
    assert not build.exists() or files_under(build) == set()


# --- external data and symlinks that escape the assets folder -----------------------------------


@pytest.mark.parametrize(
    "location",
    ["../secret.onnx.data", "sub/../../secret.onnx.data", "/etc/passwd", "ABSOLUTE"],
    ids=["parent", "dotdot-inside", "etc-passwd", "absolute-real-file"],
)
def test_external_data_path_escaping_the_assets_folder_is_refused(tmp_path: Path, location: str) -> None:
    assets = tmp_path / "assets"
    secret = save_with_external_data(tmp_path, "secret")  # a real data file, outside assets/
    if location == "ABSOLUTE":
        location = str(secret.with_suffix(".onnx.data"))
    path = save_with_external_data(assets, "escape", location=location)
    (assets / "escape.onnx.data").unlink()
    assert_cook_refused(
        tmp_path, assets, "escape", rf"^{re.escape(str(path))} .*points at external data .*outside the model"
    )


def test_external_data_sidecar_that_links_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    """``<stem>.onnx.data`` is tracked by name, but it is a symlink to valid weights elsewhere."""
    assets = tmp_path / "assets"
    path = save_with_external_data(assets, "linked")
    outside = tmp_path / "elsewhere.data"
    (assets / "linked.onnx.data").rename(outside)
    (assets / "linked.onnx.data").symlink_to(outside)
    assert_cook_refused(
        tmp_path,
        assets,
        "linked",
        rf"^{re.escape(str(path))}\.data: a file of model 'linked' is a link to .*outside the assets folder",
    )


def test_model_file_that_links_out_of_the_assets_folder_is_refused(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    outside = save(matmul_model(), tmp_path / "outside" / "secret.onnx")
    link = assets / "linked.onnx"
    link.symlink_to(outside)
    before = files_under(tmp_path)
    with pytest.raises(ModelError, match=rf"{re.escape(str(link))}.*(outside|link)"):
        cook(job_for(assets, "linked", tmp_path / "build"))  # discover or the cook may refuse it
    assert files_under(tmp_path) == before


def test_model_file_linked_within_the_assets_folder_cooks(tmp_path: Path) -> None:
    """The rule is about content from outside assets/, not about links: an alias inside cooks."""
    assets = tmp_path / "assets"
    save(matmul_model(), assets / "library" / "real.onnx")
    (assets / "alias.onnx").symlink_to(Path("library") / "real.onnx")
    entry = cook(job_for(assets, "alias", tmp_path / "build"))
    assert entry["name"] == "alias" and (tmp_path / "build" / "windows-dml" / entry["file"]).is_file()


def test_directory_links_out_of_and_back_into_assets_are_not_followed(tmp_path: Path) -> None:
    """A symlinked folder is not walked: nothing from outside is cooked, and a link loop ends."""
    assets = tmp_path / "assets"
    save(matmul_model(), assets / "real.onnx")
    save(matmul_model(), tmp_path / "outside" / "secret.onnx")
    (assets / "shared").symlink_to(tmp_path / "outside", target_is_directory=True)
    (assets / "loop").symlink_to(assets, target_is_directory=True)
    assert [asset.name for asset in discover(assets)] == ["real"]


# --- model names that cannot be output paths ----------------------------------------------------


@pytest.mark.parametrize(
    "relative",
    [
        "-rf.onnx",
        "-v/model.onnx",
        "with space.onnx",
        "semi;colon.onnx",
        "drive:stream.onnx",
        "back\\slash.onnx",
        "new\nline.onnx",
        "tab\t.onnx",
        "na\u00efve.onnx",
        "ok/\u2028sep.onnx",
    ],
)
def test_model_name_unsafe_as_an_output_path_is_refused_naming_the_file(
    tmp_path: Path, relative: str
) -> None:
    assets = tmp_path / "assets"
    save(matmul_model(), assets / "fine.onnx")
    path = save(matmul_model(), assets / relative)
    with pytest.raises(
        ModelError, match=rf"^{re.escape(str(path))}: model name .* cannot be used for output files"
    ):
        discover(assets)


@pytest.mark.parametrize("length", [240, 248])
def test_model_name_too_long_for_its_output_files_is_refused_naming_the_file(
    tmp_path: Path, length: int
) -> None:
    assets = tmp_path / "assets"
    path = save(matmul_model(), assets / f"{'m' * length}.onnx")
    with pytest.raises(ModelError, match=rf"^{re.escape(str(path))}: model name"):
        discover(assets)


@pytest.mark.parametrize("relative", [".hidden.onnx", ".cache/model.onnx", "..onnx"])
def test_hidden_model_files_are_ignored(tmp_path: Path, relative: str) -> None:
    """Names starting with '.' are hidden files (editor, VCS, tool caches): never cooked, no error."""
    assets = tmp_path / "assets"
    save(matmul_model(), assets / "fine.onnx")
    save(matmul_model(), assets / relative)
    assert [asset.name for asset in discover(assets)] == ["fine"]


# --- settings files: YAML built to hurt ---------------------------------------------------------


def settings_file(tmp_path: Path, kind: str, text: str | bytes) -> tuple[dict[str, str], Path]:
    """A platform file or a model's .cook.yaml holding ``text``, and the request that loads it."""
    if kind == "platform":
        folder = tmp_path / "platforms"
        folder.mkdir(exist_ok=True)
        path, request = folder / "target.yaml", {"what": "load_platforms", "path": str(folder)}
    else:
        path = tmp_path / "assets" / "model.cook.yaml"
        path.parent.mkdir(exist_ok=True)
        request = {"what": "load_model_settings", "path": str(path)}
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return request, path


def load_settings(request: dict[str, str]) -> None:
    if request["what"] == "load_platforms":
        load_platforms(Path(request["path"]), {})
    else:
        load_model_settings(Path(request["path"]), ["target"])


def billion_laughs(last_line: str, depth: int = 9, width: int = 9) -> str:
    """Nested aliases: lines that expand to 9**9 (387 million) strings if anything walks them.

    ``last_line`` uses the deepest alias, written ``{alias}``.
    """
    lines = ["_l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [
        f"_l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]" for level in range(1, depth)
    ]
    return "\n".join([*lines, last_line.format(alias=f"*l{depth - 1}")]) + "\n"


KINDS = ["platform", "model"]
BOMBS = {
    "billion-laughs-list": {
        "platform": billion_laughs("include: {alias}"),
        "model": billion_laughs("skip_platforms: {alias}"),
    },
    "billion-laughs-in-options": {
        "platform": billion_laughs("provider_options: {{CPUExecutionProvider: {{x: {alias}}}}}"),
        "model": billion_laughs("platforms: {{target: {{verify_dims: {{batch: {alias}}}}}}}"),
    },
    "recursive-list": {"platform": "include: &a [x, *a]\n", "model": "skip_platforms: &a [target, *a]\n"},
    "recursive-mapping": {
        "platform": "provider_options: &a {CPUExecutionProvider: *a}\n",
        "model": "platforms: &a {target: *a}\n",
    },
    "merge-keys": {
        "platform": "_a: &a {format: onnx}\n_b: &b {<<: [*a, *a]}\n<<: [*b, *b]\n",
        "model": "_a: &a {rtol: 1}\n_b: &b {<<: [*a, *a]}\n<<: [*b, *b]\n",
    },
    "deep-nesting": {"platform": "include: " + "[" * 200_000, "model": "platforms: " + "{a: " * 100_000},
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_yaml_bombs_are_refused_in_bounded_memory(tmp_path: Path, kind: str, bomb: str) -> None:
    request, path = settings_file(tmp_path, kind, BOMBS[bomb][kind])
    result = run_bounded(request, limit=1 << 30)
    assert result["error"] == "ProfileError"
    assert result["message"].startswith(f"{path}: "), result


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "value",
    [
        "!!python/object/apply:os.mkdir [{pwned}]",
        "!!python/object/new:os.mkdir [{pwned}]",
        "!!python/name:os.system",
        "!!python/object:pathlib.PosixPath {{}}",
        "!onnx 1.0",
    ],
    ids=["apply", "new", "name", "object", "local-tag"],
)
def test_yaml_tags_that_construct_python_objects_are_refused(tmp_path: Path, kind: str, value: str) -> None:
    pwned = tmp_path / "pwned"
    key = "description" if kind == "platform" else "rtol"
    request, path = settings_file(tmp_path, kind, f"{key}: {value.format(pwned=json.dumps(str(pwned)))}\n")
    with pytest.raises(
        ProfileError, match=rf"^{re.escape(str(path))}: invalid YAML .*constructor for the tag"
    ):
        load_settings(request)
    assert not pwned.exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("KEY: !!binary aGVsbG8=\n", r"b'hello' \(a bytes\)"),
        ("KEY: !!set {a, b}\n", r".* \(a set\)"),
        ("KEY: 2024-01-01\n", r"2024-01-01 \(a date\)"),
        ("KEY: !!timestamp 2024-01-01T10:00:00Z\n", r"2024-01-01 10:00:00\+00:00 \(a datetime\)"),
    ],
    ids=["binary", "set", "date", "timestamp"],
)
def test_safe_yaml_types_that_are_no_setting_type_are_refused(
    tmp_path: Path, kind: str, text: str, found: str
) -> None:
    key = "runtime_version"
    request, path = settings_file(tmp_path, kind, text.replace("KEY", key))
    with pytest.raises(
        ProfileError, match=rf"^{re.escape(str(path))}: '{key}' must be a string; got {found}"
    ):
        load_settings(request)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "content",
    [b"description: a\x00b\n", b"description: a\x1bb\n", b"description: a\x7fb\n"],
    ids=["nul", "esc", "del"],
)
def test_control_characters_are_refused_naming_the_file(tmp_path: Path, kind: str, content: bytes) -> None:
    request, path = settings_file(tmp_path, kind, content)
    with pytest.raises(ProfileError, match=rf"^{re.escape(str(path))}: invalid YAML"):
        load_settings(request)


@pytest.mark.parametrize("kind", [*KINDS, "environment"])
@pytest.mark.parametrize(
    "value",
    ["9" * 5000, "2024-13-45", "2024-02-30 25:61:00"],
    ids=["int-5000-digits", "month-13", "february-30th"],
)
def test_yaml_scalars_python_cannot_convert_are_refused(tmp_path: Path, kind: str, value: str) -> None:
    if kind == "environment":
        (tmp_path / "platforms").mkdir()
        (tmp_path / "platforms" / "target.yaml").write_text("")
        with pytest.raises(ProfileError, match=r"^environment variable COOK_SET_RUNTIME_VERSION: "):
            load_platforms(tmp_path / "platforms", {"COOK_SET_RUNTIME_VERSION": value})
        return
    request, path = settings_file(tmp_path, kind, f"runtime_version: {value}\n")
    with pytest.raises(ProfileError, match=rf"^{re.escape(str(path))}: "):
        load_settings(request)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow
def test_many_problems_give_a_bounded_message(tmp_path: Path, kind: str) -> None:
    lines = [f"k{index:06d}: {index}\n" for index in range(16_000)]
    request, path = settings_file(tmp_path, kind, "".join(lines))
    with pytest.raises(ProfileError, match=rf"^{re.escape(str(path))}: key 'k000000' is not") as caught:
        load_settings(request)
    assert len(str(caught.value)) <= 64 * 1024


# What tests/test_profile.py checks for platform files, for a model's .cook.yaml.


def test_model_settings_duplicate_key_in_a_platform_section_is_refused(tmp_path: Path) -> None:
    request, path = settings_file(tmp_path, "model", "platforms:\n  target:\n    rtol: 1\n    rtol: 2\n")
    with pytest.raises(
        ProfileError,
        match=rf"^{re.escape(str(path))}: invalid YAML at line 4, column 5: duplicate key 'rtol' "
        r"\(first given at line 3\)",
    ):
        load_settings(request)


def test_model_settings_over_1_mib_are_refused_before_parsing(tmp_path: Path) -> None:
    request, path = settings_file(tmp_path, "model", b"{" * (1024 * 1024 + 1))
    with pytest.raises(ProfileError, match=rf"^{re.escape(str(path))}: file is larger than the 1 MiB limit"):
        load_settings(request)


@pytest.mark.parametrize(
    ("content", "where"),
    [
        ("rtol: 1  # caf\u00e9\n".encode("latin-1"), r"byte 0xe9 at offset 14"),
        ("verify_dims: {batch: 1}\n".encode("utf-16"), r"byte 0xff at offset 0"),
        (b"rtol: 1\n\xed\xa0\x80\n", r"byte 0xed at offset 8"),  # a UTF-8-encoded surrogate
    ],
    ids=["latin-1", "utf-16", "surrogate"],
)
def test_model_settings_that_are_not_utf8_are_refused(tmp_path: Path, content: bytes, where: str) -> None:
    request, path = settings_file(tmp_path, "model", content)
    with pytest.raises(ProfileError, match=rf"^{re.escape(str(path))}: not valid UTF-8 \({where}\)"):
        load_settings(request)


# --- absurd values in settings, met only when cooking -------------------------------------------


def symbolic_batch_model() -> onnx.ModelProto:
    return with_symbolic_batch(matmul_model())


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            "verify_dims: {batch: 1000000000000}\n",
            id="verify_dims-1e12",
        ),
        pytest.param(
            "verify_dims: {batch: 2147483647}\n",
            id="verify_dims-int32-max",
        ),
        pytest.param(
            "verify_dims: {batch: 2}\nfixed_dims: {batch: 100000000000000000000}\n",
            id="fixed_dims-1e20",
        ),
        pytest.param("fixed_shapes: {x: [100000000000000000000, 8]}\n", id="fixed_shapes-1e20"),
    ],
)
@pytest.mark.slow
def test_absurd_dimension_sizes_in_settings_fail_cleanly_in_bounded_memory(tmp_path: Path, text: str) -> None:
    assets, build = tmp_path / "assets", tmp_path / "build"
    path = save(symbolic_batch_model(), assets / "dyn.onnx")
    (assets / "dyn.cook.yaml").write_text(text)
    request = {
        "what": "cook",
        "assets": str(assets),
        "name": "dyn",
        "platforms": str(REPO / "platforms"),
        "platform": "windows-dml",
        "build": str(build),
    }
    result = run_bounded(request, limit=COOK_LIMIT)
    assert result["error"] is not None, result
    key = text.splitlines()[-1].split(":")[0]
    # Refused with the model file (the cook) or with its .cook.yaml (the settings check) named.
    assert result["message"].startswith(str(path.with_suffix(""))) and key in result["message"], result
    assert not build.exists() or files_under(build) == set()


# --- end to end: the real doit --------------------------------------------------------------------


@pytest.mark.slow
def test_doit_cook_refuses_an_escaping_asset_with_one_message_per_platform(project: Path) -> None:
    assets = project / "assets"
    path = save_with_external_data(assets, "escape", location="../escape.onnx.data")
    (assets / "escape.onnx.data").rename(project / "escape.onnx.data")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COOK_") and k != "PYTHONPATH"}
    env["COOK_RUNTIMES_DIR"] = str(REPO / ".pytest_cache" / "runtimes")

    run = subprocess.run(
        [sys.executable, "-m", "doit", "--continue", "cook:*:escape"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    assert TRACEBACK not in output
    platforms = sorted(p.stem for p in (project / "platforms").glob("*.yaml"))
    # the message once (onnx_cooker/build/progress.py), then a line for each other platform
    blocks = re.findall(
        r"^TaskFailed - taskid:cook:([^:\n]+):escape\n(.*?)(?:\n\n|\Z)", output, re.MULTILINE | re.DOTALL
    )
    assert len(blocks) == 1, f"not one failure paragraph for escape:\n{output}"
    ((first, message),) = blocks
    assert str(path) in message and "outside the model's folder" in message, message
    for platform in platforms:
        assert platform == first or f"cook:{platform}:escape: failed as on {first} (above)" in output, output
    report_state = project / "build" / ".report"  # the report lists the failure: that is its job
    assert not [p for p in (project / "build").rglob("*escape*") if report_state not in p.parents], (
        "something of the refused model was written"
    )
