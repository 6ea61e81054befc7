"""Tests for onnx_cooker.settings.resolve: platform files, per-model settings, the cascade, the settings
key."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from onnx_cooker.errors import CookError, ProfileError
from onnx_cooker.settings.docs import SCHEMA_LINE
from onnx_cooker.settings.eprules import EP_RULES
from onnx_cooker.settings.resolve import (
    CookSettings,
    Platform,
    ep_domains,
    is_skipped,
    load_model_settings,
    load_platforms,
    resolve,
)
from onnx_cooker.settings.table import DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_DIR = ROOT / "platforms"
SHIPPED = ("android", "console", "ios", "linux-openvino", "windows-dml")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def platforms_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "platforms"
    folder.mkdir()
    return folder


def load_one(
    platforms_dir: Path, text: str, name: str = "target", env: dict[str, str] | None = None
) -> Platform:
    write(platforms_dir / f"{name}.yaml", text)
    (platform,) = load_platforms(platforms_dir, env or {})
    return platform


def problems_of(excinfo: pytest.ExceptionInfo[ProfileError]) -> list[str]:
    return excinfo.value.problems


# --- shipped platforms ---------------------------------------------------------------------------


def test_shipped_platforms_are_the_five_targets() -> None:
    assert tuple(p.name for p in load_platforms(SHIPPED_DIR, {})) == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_platform_loads_and_resolves(name: str) -> None:
    platform = {p.name: p for p in load_platforms(SHIPPED_DIR, {})}[name]
    settings = resolve(platform, {}, {})
    assert settings.platform == name
    assert platform.description and "\n" not in platform.description
    assert platform.selects("any/model")
    assert settings.execution_providers[-1] == "CPUExecutionProvider"
    assert {ep for ep, _ in settings.ep_session_options} == set(settings.execution_providers)
    assert re.fullmatch(r"[0-9a-f]{64}", settings.key())
    assert json.loads(json.dumps(settings.to_dict())) == settings.to_dict()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_platform_file_starts_with_the_schema_line_then_an_intent_comment(name: str) -> None:
    schema_line, intent = (SHIPPED_DIR / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[:2]
    assert schema_line == SCHEMA_LINE
    assert intent.startswith("# ") and len(intent) > 20


def test_windows_dml_gets_directml_session_rules() -> None:
    platform = {p.name: p for p in load_platforms(SHIPPED_DIR, {})}["windows-dml"]
    data = resolve(platform, {}, {}).to_dict()
    assert data["format"] == "onnx" and data["arch"] == "x86_64" and data["runtime_version"] == "1.24.4"
    assert data["ep_session_options"]["DmlExecutionProvider"] == {
        "enable_mem_pattern": False,
        "execution_mode": "sequential",
    }
    assert data["provider_options"] == {"DmlExecutionProvider": {"device_id": 0}}


def test_defaults_pass_their_own_validation(platforms_dir: Path) -> None:
    explicit = load_one(platforms_dir, yaml.safe_dump(dict(DEFAULTS)), name="explicit")
    write(platforms_dir / "explicit.yaml", "")
    empty = load_one(platforms_dir, "", name="explicit")
    assert resolve(explicit, {}, {}) == resolve(empty, {}, {})


def test_ep_domains_from_the_data_table() -> None:
    for ep, rule in EP_RULES.items():
        assert ep_domains(ep) == rule.domains
    assert "com.microsoft.nchwc" in ep_domains("CPUExecutionProvider")
    assert ep_domains("ConsoleGpuExecutionProvider") == ("",)


def test_a_consoles_own_ep_names_pass_where_slips_of_onnxruntimes_do_not(platforms_dir: Path) -> None:
    """Names of their own (a console's EP, two letters off a known one) pass through; the slips of
    the message table above are refused."""
    for ep in ("ConsoleGpuExecutionProvider", "AgcExecutionProvider", "MyNpuExecutionProvider"):
        platform = load_one(platforms_dir, f"execution_providers: [{ep}, CPUExecutionProvider]\n")
        assert resolve(platform, {}, {}).execution_providers[0] == ep


def test_profile_imports_only_stdlib_and_yaml() -> None:
    code = (
        "import sys, onnx_cooker.settings.resolve; "
        "print(sorted({'onnx', 'onnxruntime', 'numpy', 'doit'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- problems in platform files ------------------------------------------------------------------


def test_unknown_key_has_did_you_mean(platforms_dir: Path) -> None:
    with pytest.raises(
        ProfileError,
        match=re.escape(
            "android.yaml: key 'optimisation_level' is not a known setting; "
            "did you mean 'optimization_level'?"
        ),
    ):
        load_one(platforms_dir, "optimisation_level: basic\n", name="android")


def test_every_problem_in_every_file_is_reported_at_once(platforms_dir: Path) -> None:
    write(platforms_dir / "android.yaml", "optimisation_level: basic\nformat: tflite\n")
    write(platforms_dir / "good.yaml", "format: onnx\n")
    write(platforms_dir / "ios.yaml", "compression_level: 99\nverify: 'yes'\n")
    with pytest.raises(ProfileError) as excinfo:
        load_platforms(platforms_dir, {"COOK_SET_RTOL": "-1"})
    problems = problems_of(excinfo)
    assert len(problems) == 5
    assert str(excinfo.value) == "\n".join(problems)
    expected = [
        "COOK_SET_RTOL",
        "android.yaml: key 'optimisation_level'",
        "android.yaml: 'format'",
        "ios.yaml: 'compression_level'",
        "ios.yaml: 'verify'",
    ]
    for problem, start in zip(problems, expected, strict=True):
        assert start in problem
    assert isinstance(excinfo.value, CookError)


def test_duplicate_keys_are_refused(platforms_dir: Path) -> None:
    text = "format: ort\narch: arm64\nformat: onnx\n"
    with pytest.raises(
        ProfileError,
        match=r"target\.yaml: invalid YAML at line 3, column 1: "
        r"duplicate key 'format' \(first given at line 1\)",
    ):
        load_one(platforms_dir, text)


def test_duplicate_keys_in_nested_mapping_are_refused(platforms_dir: Path) -> None:
    text = "verify_dims:\n  batch: 1\n  batch: 2\n"
    with pytest.raises(ProfileError, match=r"line 3.*duplicate key 'batch'"):
        load_one(platforms_dir, text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "format: ort\n  arch: arm64\n",
            r"invalid YAML at line 2, column 7: mapping values are not allowed here",
        ),
        (
            "format: ort\nexecution_providers: [CPUExecutionProvider\n",
            r"invalid YAML at line 3, column 1: .*\(while parsing a flow sequence at line 2\)",
        ),
    ],
)
def test_yaml_syntax_error_names_the_line(platforms_dir: Path, text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=r"target\.yaml: " + message):
        load_one(platforms_dir, text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- format\n", "the top level must be a mapping of settings (key: value); got a list"),
        ("just text\n", "the top level must be a mapping of settings (key: value); got 'just text'"),
        (
            "verify: 'true'\n",
            "'verify' must be true or false; got 'true'; write true or false without quotes",
        ),
        ("allow_nchwc: 1\n", "'allow_nchwc' must be true or false; got 1 (an integer)"),
        ("compression_level: 3.0\n", "'compression_level' must be an integer; got 3.0 (a float)"),
        ("compression_level: true\n", "'compression_level' must be an integer; got true (a boolean)"),
        (
            "compression_level: '3'\n",
            "'compression_level' must be an integer; got '3'; write the number without quotes",
        ),
        ("rtol: null\n", "'rtol' must be a number; got nothing (null)"),
        # YAML 1.1 reads an exponent without a dot or a sign as text: the fix, not "without quotes"
        (
            "max_bundle_bytes: 4e7\n",
            "'max_bundle_bytes' must be an integer; got '4e7'; YAML reads 4e7 as text: write 40000000",
        ),
        (
            "rtol: 1.0e3\n",
            "'rtol' must be a number; got '1.0e3'; YAML reads 1.0e3 as text: write it with a dot and a "
            "signed exponent, 1.0e+3",
        ),
        (
            "atol: 2e-5\n",
            "'atol' must be a number; got '2e-5'; YAML reads 2e-5 as text: write it with a dot and a "
            "signed exponent, 2.0e-5",
        ),
        (
            "runtime_version: 1.20\n",
            "'runtime_version' must be a string; got 1.2 (a float); put it in quotes",
        ),
        (
            "execution_providers: CPUExecutionProvider\n",
            "'execution_providers' must be a list; got 'CPUExecutionProvider'",
        ),
        (
            "execution_providers: [CPUExecutionProvider, 3]\n",
            "'execution_providers[1]' must be a non-empty string",
        ),
        ("include: ['']\n", "'include[0]' must be a non-empty string; got ''"),
        (
            "execution_providers: [CoreMLExecutionprovider, CPUExecutionProvider]\n",
            "'execution_providers' lists 'CoreMLExecutionprovider', which no onnxruntime knows: did you "
            "mean 'CoreMLExecutionProvider'?",
        ),
        (
            "execution_providers: [CUDA]\n",
            "'execution_providers' lists 'CUDA', which no onnxruntime knows: did you mean "
            "'CUDAExecutionProvider'?",
        ),
        ("provider_options: []\n", "'provider_options' must be a mapping; got a list"),
        (
            "provider_options: {CPUExecutionProvider: {arena: [1]}}\n",
            "'provider_options.CPUExecutionProvider.arena' must be a string, number or boolean; got a list",
        ),
        (
            "provider_options: {CPUExecutionProvider: 1}\n",
            "'provider_options.CPUExecutionProvider' must be a mapping of option -> value; got 1",
        ),
        (
            "provider_options: {QNNExecutionProvider: {backend_path: libQnnHtp.so}}\n",
            "'provider_options.QNNExecutionProvider.backend_path' cannot travel in a blob: its name holds "
            "'path': it may name a file, folder, library or memory address (the loaders refuse it",
        ),
        (
            "provider_options: {OpenVINOExecutionProvider: {device_type: CPU/x}}\n",
            "'provider_options.OpenVINOExecutionProvider.device_type' cannot travel in a blob: its value "
            "holds a path separator",
        ),
        (
            "ep_session_options: {CPUExecutionProvider: {session.optimized_model_filepth: x}}\n",
            "'ep_session_options.CPUExecutionProvider.session.optimized_model_filepth' cannot travel in a "
            "blob: only the onnxruntime config entries",
        ),
        (
            "ep_session_options: {CPUExecutionProvider: {session.intra_op.allow_spining: '0'}}\n",
            "'ep_session_options.CPUExecutionProvider.session.intra_op.allow_spining' cannot travel in a "
            "blob: did you mean 'session.intra_op.allow_spinning'?",
        ),
        ("verify_dims: {batch: 0}\n", "'verify_dims.batch' must be an integer >= 1; got 0 (an integer)"),
        ("verify_dims: {batch: 2.0}\n", "'verify_dims.batch' must be an integer >= 1; got 2.0 (a float)"),
        ('description: "two\\nlines"\n', "'description' must be one line"),
    ],
)
def test_wrong_types_are_reported(platforms_dir: Path, text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=r"target\.yaml: " + re.escape(message)):
        load_one(platforms_dir, text)


@pytest.mark.parametrize(
    ("key", "value", "choices"),
    [
        ("format", "tflite", "ort, onnx"),
        ("optimization_level", "fast", "basic, extended, all"),
        ("optimization_style", "saved", "fixed, runtime"),
        ("arch", "x86", "x86_64, arm64"),
    ],
)
def test_enum_values_are_checked(platforms_dir: Path, key: str, value: str, choices: str) -> None:
    with pytest.raises(
        ProfileError, match=re.escape(f"target.yaml: '{key}' must be one of {choices}; got '{value}'")
    ):
        load_one(platforms_dir, f"{key}: {value}\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("compression_level: 0\n", "'compression_level' must be between 1 and 22; got 0"),
        ("compression_level: 23\n", "'compression_level' must be between 1 and 22; got 23"),
        ("rtol: -1.0e-3\n", "'rtol' must be >= 0; got -0.001"),
        ("atol: -1\n", "'atol' must be >= 0; got -1.0"),
        ("atol: .nan\n", "'atol' must be a finite number; got nan"),
        ("rtol: .inf\n", "'rtol' must be a finite number; got inf"),
    ],
)
def test_ranges_are_checked(platforms_dir: Path, text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        load_one(platforms_dir, text)


def test_integer_is_accepted_where_a_number_is_expected(platforms_dir: Path) -> None:
    settings = resolve(load_one(platforms_dir, "rtol: 0\natol: 1\n"), {}, {})
    assert settings.rtol == 0.0 and isinstance(settings.rtol, float)
    assert settings == resolve(load_one(platforms_dir, "rtol: 0.0\natol: 1.0\n"), {}, {})


@pytest.mark.parametrize("version", ["1", "v1.24", "1.24.4.1", "latest", "1.24-rc1", "1.24.4\n"])
def test_runtime_version_must_be_a_version(platforms_dir: Path, version: str) -> None:
    with pytest.raises(ProfileError, match=r"'runtime_version' must be an onnxruntime version like"):
        load_one(platforms_dir, f"runtime_version: {json.dumps(version)}\n")


@pytest.mark.parametrize("version", ["1.24", "1.24.4", "10.0.12"])
def test_runtime_version_accepts_x_y_and_x_y_z(platforms_dir: Path, version: str) -> None:
    assert resolve(load_one(platforms_dir, f"runtime_version: '{version}'\n"), {}, {}).runtime_version == {
        "1.24": "1.24.0"
    }.get(version, version)


def test_execution_providers_must_be_non_empty(platforms_dir: Path) -> None:
    with pytest.raises(ProfileError, match="'execution_providers' must list at least one execution provider"):
        load_one(platforms_dir, "execution_providers: []\n")


def test_execution_providers_must_not_repeat(platforms_dir: Path) -> None:
    with pytest.raises(ProfileError, match="lists 'CPUExecutionProvider' more than once"):
        load_one(platforms_dir, "execution_providers: [CPUExecutionProvider, CPUExecutionProvider]\n")


@pytest.mark.parametrize("options", ["{execution_mode: parallel}", "{enable_mem_pattern: true}"])
def test_directml_session_rules_cannot_be_overridden(platforms_dir: Path, options: str) -> None:
    text = f"""\
        execution_providers: [DmlExecutionProvider, CPUExecutionProvider]
        ep_session_options: {{DmlExecutionProvider: {options}}}
        """
    with pytest.raises(
        ProfileError,
        match=r"ep_session_options\.DmlExecutionProvider\.\w+' must be .* "
        r"\(DirectML requires memory patterns off and sequential execution",
    ):
        load_one(platforms_dir, text)


def test_directml_session_rules_may_be_repeated_and_extended(platforms_dir: Path) -> None:
    text = """\
        execution_providers: [DmlExecutionProvider, CPUExecutionProvider]
        ep_session_options:
          DmlExecutionProvider: {execution_mode: sequential, "session.disable_cpu_ep_fallback": "0"}
        """
    options = resolve(load_one(platforms_dir, text), {}, {}).to_dict()["ep_session_options"]
    assert options["DmlExecutionProvider"] == {
        "enable_mem_pattern": False,
        "execution_mode": "sequential",
        "session.disable_cpu_ep_fallback": "0",
    }


def test_directml_combines_only_with_cpu(platforms_dir: Path) -> None:
    with pytest.raises(
        ProfileError,
        match="DmlExecutionProvider can only be combined with CPUExecutionProvider; "
        "got NnapiExecutionProvider",
    ):
        load_one(platforms_dir, "execution_providers: [DmlExecutionProvider, NnapiExecutionProvider]\n")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("{execution_mod: sequential}", "is not a known session option; did you mean 'execution_mode'?"),
        ("{execution_mode: ORT_PARALLEL}", "must be one of sequential, parallel; got 'ORT_PARALLEL'"),
        ("{graph_optimization_level: 99}", "must be one of disable, basic, extended, all; got 99"),
        (
            "{enable_mem_pattern: 'false'}",
            "must be true or false; got 'false'; write true or false without quotes",
        ),
        (
            "{session.intra_op.allow_spinning: 0}",
            "is an onnxruntime config entry and must be a string; got 0",
        ),
        (
            "{session.use_ort_model_bytes_for_initializers: '1'}",
            "must not be set: the loader sets it itself, for the load path it proved",
        ),
    ],
)
def test_session_options_are_checked(platforms_dir: Path, options: str, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        load_one(platforms_dir, f"ep_session_options: {{CPUExecutionProvider: {options}}}\n")


def test_options_for_an_unlisted_execution_provider_are_refused(platforms_dir: Path) -> None:
    text = """\
        execution_providers: [DmlExecutionProvider, CPUExecutionProvider]
        provider_options: {DmlExecutionProvidr: {device_id: 0}}
        """
    with pytest.raises(
        ProfileError,
        match="'provider_options' has options for 'DmlExecutionProvidr', which is "
        "not in 'execution_providers'",
    ):
        load_one(platforms_dir, text)


def test_runtime_style_requires_ort_format(platforms_dir: Path) -> None:
    with pytest.raises(
        ProfileError,
        match=r"target\.yaml: 'optimization_style' runtime requires 'format' ort.*"
        r"got format 'onnx' from .*target\.yaml",
    ):
        load_one(platforms_dir, "format: onnx\noptimization_style: runtime\n")


def test_runtime_style_conflict_from_model_names_both_sources(platforms_dir: Path, tmp_path: Path) -> None:
    platform = load_one(platforms_dir, "format: onnx\n")
    model_file = write(tmp_path / "assets" / "m.cook.yaml", "optimization_style: runtime\n")
    model = load_model_settings(model_file, [platform.name])
    with pytest.raises(
        ProfileError,
        match=r"m\.cook\.yaml: 'optimization_style' runtime requires 'format' ort.*"
        r"from .*target\.yaml",
    ):
        resolve(platform, model, {}, model_source=str(model_file))


def test_a_conflict_names_the_file_that_set_a_value_equal_to_the_default(platforms_dir: Path) -> None:
    """``format: ort`` written in the platform file is the file's, not "built-in defaults", though
    it equals the default (COOK_SET_WEIGHTS=external on android named the defaults)."""
    assert DEFAULTS["format"] == "ort"
    platform = load_one(platforms_dir, "format: ort\n")
    with pytest.raises(ProfileError) as excinfo:
        resolve(platform, {}, {"COOK_SET_WEIGHTS": "external"})
    said = str(excinfo.value)
    assert "environment variable COOK_SET_WEIGHTS: 'weights' external requires 'format' onnx" in said, said
    assert re.search(r"got format 'ort' from \S*target\.yaml", said), said
    # a key the file leaves out still comes from the defaults
    with pytest.raises(ProfileError, match=r"got format 'ort' from the defaults \(docs/settings\.md\)"):
        resolve(load_one(platforms_dir, "# nothing\n"), {}, {"COOK_SET_WEIGHTS": "external"})


def test_empty_file_means_all_defaults(platforms_dir: Path) -> None:
    platform = load_one(platforms_dir, "# nothing to change\n")
    assert resolve(platform, {}, {}).format == "ort"
    assert platform.include == ("*",) and platform.exclude == () and platform.description == ""


def test_big_file_is_refused_before_parsing(platforms_dir: Path) -> None:
    path = platforms_dir / "big.yaml"
    path.write_bytes(b"[" * (1024 * 1024 + 1))  # would be a YAML error (or a deep recursion) if parsed
    with pytest.raises(ProfileError, match=r"big\.yaml: file is larger than the 1 MiB limit") as excinfo:
        load_platforms(platforms_dir, {})
    assert "YAML" not in str(excinfo.value)


def test_non_utf8_file_is_refused(platforms_dir: Path) -> None:
    (platforms_dir / "latin.yaml").write_bytes("description: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ProfileError, match=r"latin\.yaml: not valid UTF-8 \(byte 0xe9 at offset 16\)"):
        load_platforms(platforms_dir, {})


@pytest.mark.parametrize("missing", [True, False])
def test_missing_or_empty_platform_folder(tmp_path: Path, missing: bool) -> None:
    folder = tmp_path / "platforms"
    if not missing:
        folder.mkdir()
    with pytest.raises(ProfileError, match="not found" if missing else r"no platform files \(\*\.yaml\)"):
        load_platforms(folder, {})


def test_platform_name_must_be_lowercase_slug(platforms_dir: Path) -> None:
    with pytest.raises(ProfileError, match=r"Windows DML\.yaml: platform name 'Windows DML'"):
        load_one(platforms_dir, "format: onnx\n", name="Windows DML")


def test_yml_extension_is_not_silently_ignored(platforms_dir: Path) -> None:
    write(platforms_dir / "android.yaml", "")
    write(platforms_dir / "ios.yml", "")
    with pytest.raises(ProfileError, match=r"ios\.yml: platform files must end in \.yaml"):
        load_platforms(platforms_dir, {})


# --- per-model settings --------------------------------------------------------------------------


def test_no_model_file_means_no_overrides() -> None:
    assert load_model_settings(None, SHIPPED) == {}


def test_skip_platforms(tmp_path: Path) -> None:
    model = load_model_settings(write(tmp_path / "m.cook.yaml", "skip_platforms: [ios]\n"), SHIPPED)
    assert is_skipped(model, "ios") and not is_skipped(model, "android")
    assert not is_skipped({}, "ios")


def test_skip_platforms_unknown_name_has_did_you_mean(tmp_path: Path) -> None:
    path = write(tmp_path / "m.cook.yaml", "skip_platforms: [andriod]\n")
    with pytest.raises(
        ProfileError,
        match=r"m\.cook\.yaml: 'skip_platforms' names 'andriod', which is not a platform; "
        r"did you mean 'android'\?",
    ):
        load_model_settings(path, SHIPPED)


def test_platform_section_unknown_name_has_did_you_mean(tmp_path: Path) -> None:
    path = write(tmp_path / "m.cook.yaml", "platforms:\n  window-dml: {format: ort}\n")
    with pytest.raises(
        ProfileError,
        match="'platforms' has a section for 'window-dml', which is not a platform; "
        "did you mean 'windows-dml'",
    ):
        load_model_settings(path, SHIPPED)


@pytest.mark.parametrize("key", ["include", "exclude", "description"])
def test_platform_only_keys_are_refused_per_model(tmp_path: Path, key: str) -> None:
    path = write(tmp_path / "m.cook.yaml", f"{key}: []\n")
    with pytest.raises(ProfileError, match=f"key '{key}' can only be set in a platform file"):
        load_model_settings(path, SHIPPED)


def test_model_file_problems_are_all_reported(tmp_path: Path) -> None:
    text = """\
        compresion_level: 3
        platforms:
          ios: {format: tflite, skip_platforms: [android]}
        """
    with pytest.raises(ProfileError) as excinfo:
        load_model_settings(write(tmp_path / "m.cook.yaml", text), SHIPPED)
    problems = problems_of(excinfo)
    assert len(problems) == 3
    assert "did you mean 'compression_level'?" in problems[0]
    assert "'platforms.ios.format' must be one of ort, onnx; got 'tflite'" in problems[1]
    assert "key 'platforms.ios.skip_platforms' is not a known setting" in problems[2]


# --- the cascade ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        ((), 10),
        (("platform",), 2),
        (("platform", "model"), 3),
        (("platform", "model", "section"), 4),
        (("platform", "model", "section", "env"), 5),
        (("model", "env"), 5),
        (("section",), 4),
    ],
)
def test_cascade_order(platforms_dir: Path, tmp_path: Path, layers: tuple[str, ...], expected: int) -> None:
    platform = load_one(platforms_dir, "compression_level: 2\n" if "platform" in layers else "")
    model_text = "compression_level: 3\n" if "model" in layers else ""
    if "section" in layers:
        model_text += "platforms:\n  target: {compression_level: 4}\n"
    model = load_model_settings(write(tmp_path / "m.cook.yaml", model_text), [platform.name])
    env = {"COOK_SET_COMPRESSION_LEVEL": "5"} if "env" in layers else {}
    assert resolve(platform, model, env).compression_level == expected


def test_model_section_applies_only_to_its_platform(platforms_dir: Path, tmp_path: Path) -> None:
    write(platforms_dir / "other.yaml", "")
    write(platforms_dir / "target.yaml", "")
    platforms = {p.name: p for p in load_platforms(platforms_dir, {})}
    model = load_model_settings(
        write(tmp_path / "m.cook.yaml", "platforms:\n  other: {verify: false}\n"), platforms
    )
    assert resolve(platforms["other"], model, {}).verify is False
    assert resolve(platforms["target"], model, {}).verify is True


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("no", False), ("true", True)])
def test_env_value_is_parsed_as_yaml(platforms_dir: Path, value: str, expected: bool) -> None:
    platform = load_one(platforms_dir, "")
    assert resolve(platform, {}, {"COOK_SET_VERIFY": value}).verify is expected


def test_env_parse_error_names_the_variable(platforms_dir: Path) -> None:
    write(platforms_dir / "target.yaml", "")
    env = {"COOK_SET_EXECUTION_PROVIDERS": "[CPUExecutionProvider"}
    with pytest.raises(
        ProfileError, match=r"^environment variable COOK_SET_EXECUTION_PROVIDERS: invalid YAML"
    ):
        load_platforms(platforms_dir, env)


def test_env_wrong_value_names_the_variable(platforms_dir: Path) -> None:
    platform = load_one(platforms_dir, "")
    with pytest.raises(
        ProfileError,
        match=re.escape(
            "environment variable COOK_SET_COMPRESSION_LEVEL: 'compression_level' must be between 1 and 22"
        ),
    ):
        resolve(platform, {}, {"COOK_SET_COMPRESSION_LEVEL": "40"})


def test_env_unknown_setting_has_did_you_mean(platforms_dir: Path) -> None:
    write(platforms_dir / "target.yaml", "")
    with pytest.raises(
        ProfileError,
        match="COOK_SET_COMPRESION_LEVEL: 'compresion_level' is not a known "
        "setting; did you mean COOK_SET_COMPRESSION_LEVEL?",
    ):
        load_platforms(platforms_dir, {"COOK_SET_COMPRESION_LEVEL": "3"})


def test_unrelated_environment_is_ignored(platforms_dir: Path) -> None:
    platform = load_one(platforms_dir, "")
    assert resolve(platform, {}, {"PATH": "/bin", "COOK_VERIFY": "nope"}) == resolve(platform, {}, {})


def test_allow_nchwc_is_honoured_only_on_x86_64(platforms_dir: Path) -> None:
    assert resolve(load_one(platforms_dir, "allow_nchwc: true\narch: x86_64\n"), {}, {}).allow_nchwc
    arm = resolve(load_one(platforms_dir, "allow_nchwc: true\narch: arm64\n"), {}, {})
    assert not arm.allow_nchwc
    assert arm == resolve(load_one(platforms_dir, "arch: arm64\n"), {}, {})


def test_model_dropping_an_ep_drops_its_options(tmp_path: Path) -> None:
    platform = {p.name: p for p in load_platforms(SHIPPED_DIR, {})}["windows-dml"]
    model = load_model_settings(
        write(tmp_path / "m.cook.yaml", "execution_providers: [CPUExecutionProvider]\n"), SHIPPED
    )
    settings = resolve(platform, model, {})
    assert settings.provider_options == ()
    assert settings.ep_session_options == (("CPUExecutionProvider", ()),)


# --- the settings key ----------------------------------------------------------------------------

PLAIN = """\
format: ort
compression_level: 7
execution_providers: [XnnpackExecutionProvider, CPUExecutionProvider]
provider_options:
  XnnpackExecutionProvider: {intra_op_num_threads: 2, threads_spin: false}
verify_dims: {batch: 1, seq: 16}
"""
COMMENTED_AND_REORDERED = """\
# same settings, other order, with comments
verify_dims: {seq: 16, batch: 1}   # synthesized input sizes
provider_options:
  XnnpackExecutionProvider:
    threads_spin: false
    intra_op_num_threads: 2
execution_providers:   # order of preference matters, so it stays
  - XnnpackExecutionProvider
  - CPUExecutionProvider
compression_level: 7
format: ort
"""


def key_of(platforms_dir: Path, text: str) -> str:
    return resolve(load_one(platforms_dir, text), {}, {}).key()


def test_key_ignores_comments_and_key_order(platforms_dir: Path) -> None:
    assert key_of(platforms_dir, PLAIN) == key_of(platforms_dir, COMMENTED_AND_REORDERED)


def test_model_key_ignores_comments_and_key_order(platforms_dir: Path, tmp_path: Path) -> None:
    platform = load_one(platforms_dir, "")
    keys = {
        resolve(platform, load_model_settings(write(tmp_path / "m.cook.yaml", text), ["target"]), {}).key()
        for text in (PLAIN, COMMENTED_AND_REORDERED)
    }
    assert len(keys) == 1


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("compression_level: 7", "compression_level: 8"),
        ("intra_op_num_threads: 2", "intra_op_num_threads: 3"),
        ("seq: 16", "seq: 32"),
        (
            "[XnnpackExecutionProvider, CPUExecutionProvider]",
            "[CPUExecutionProvider, XnnpackExecutionProvider]",
        ),
        ("format: ort", "format: onnx"),
    ],
)
def test_key_changes_with_a_value(platforms_dir: Path, old: str, new: str) -> None:
    assert old in PLAIN
    assert key_of(platforms_dir, PLAIN) != key_of(platforms_dir, PLAIN.replace(old, new))


def test_key_depends_on_the_platform(platforms_dir: Path) -> None:
    write(platforms_dir / "a.yaml", "")
    write(platforms_dir / "b.yaml", "")
    a, b = load_platforms(platforms_dir, {})
    assert resolve(a, {}, {}).key() != resolve(b, {}, {}).key()


def test_cook_settings_is_frozen_and_hashable(platforms_dir: Path) -> None:
    settings = resolve(load_one(platforms_dir, PLAIN), {}, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.format = "onnx"  # type: ignore[misc]
    twin = resolve(load_one(platforms_dir, COMMENTED_AND_REORDERED), {}, {})
    assert hash(settings) == hash(twin) and len({settings, twin}) == 1
    assert "compression_level=7" in repr(settings)
    with pytest.raises(TypeError):
        CookSettings("target")  # type: ignore[misc]  # keyword-only


def test_platform_settings_are_read_only(platforms_dir: Path) -> None:
    platform = load_one(platforms_dir, PLAIN)
    with pytest.raises(TypeError):
        platform.settings["format"] = "onnx"  # type: ignore[index]
    with pytest.raises(TypeError):
        platform.settings["provider_options"]["XnnpackExecutionProvider"]["threads_spin"] = True
    hash(platform)


# --- selection -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "selected"),
    [
        ("vision/resnet", True),
        ("vision/tiny/resnet", True),
        ("vision/resnet_debug", False),
        ("audio/whisper", False),
        ("Vision/resnet", False),
        ("text/bert", True),
    ],
)
def test_include_and_exclude_select_models(platforms_dir: Path, model: str, selected: bool) -> None:
    platform = load_one(platforms_dir, "include: ['vision/*', text/bert]\nexclude: ['*_debug']\n")
    assert platform.selects(model) is selected


def test_env_can_narrow_the_selection(platforms_dir: Path) -> None:
    platform = load_one(platforms_dir, "", env={"COOK_SET_INCLUDE": "['audio/*']"})
    assert platform.selects("audio/whisper") and not platform.selects("vision/resnet")


def test_profile_error_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(ProfileError(["a.yaml: one", "b.yaml: two"])))
    assert error.problems == ["a.yaml: one", "b.yaml: two"] and str(error) == "a.yaml: one\nb.yaml: two"


def test_a_problem_with_a_key_names_its_line(platforms_dir: Path, tmp_path: Path) -> None:
    write(
        platforms_dir / "android.yaml",
        "# Android\nformat: ort\n\noptimisation_level: basic\ncompression_level: 99\n",
    )
    with pytest.raises(ProfileError) as excinfo:
        load_platforms(platforms_dir, {})
    problems = problems_of(excinfo)
    assert (
        problems[0].startswith("android.yaml: key 'optimisation_level'")
        or "optimisation_level" in problems[0]
    )
    assert [problem.rsplit(" ", 2)[-2:] for problem in problems] == [["(line", "4)"], ["(line", "5)"]]
    model = write(
        tmp_path / "assets" / "m.cook.yaml",
        "precision: fp16\nplatforms:\n  ios:\n    compression_level: 0\n  window-dml: {format: ort}\n",
    )
    with pytest.raises(ProfileError) as excinfo:
        load_model_settings(model, SHIPPED)
    problems = problems_of(excinfo)
    assert any("'platforms.ios.compression_level'" in p and p.endswith("(line 4)") for p in problems), (
        problems
    )
    assert any("'window-dml', which is not a platform" in p and p.endswith("(line 5)") for p in problems), (
        problems
    )


def test_a_short_runtime_version_is_that_version_point_zero(tmp_path: Path) -> None:
    """`runtime_version: "1.28"` (the form the cooker's own message offers) is 1.28.0, as pip's
    `==1.28` reads it: the same environment as "1.28.0" and the same cook key, where it made a second
    180 MB environment beside the cached 1.28.0 (and failed offline)."""
    from onnx_cooker.build.target_check import environment_dir

    short = resolve(load_one(tmp_path / "a", 'runtime_version: "1.28"\n'), {}, {})
    full = resolve(load_one(tmp_path / "b", 'runtime_version: "1.28.0"\n'), {}, {})
    assert short.runtime_version == full.runtime_version == "1.28.0"
    assert environment_dir(tmp_path, short.runtime_version) == environment_dir(tmp_path, "1.28.0")
    assert short == full


def test_platform_files_that_would_be_ignored_are_named_and_hidden_files_are_not_platforms(
    platforms_dir: Path,
) -> None:
    """`ps5.YAML` or `sub/handheld.yaml` never shipped, in a green build; an editor's lock file
    (`.#android.yaml`, a dangling link) or macOS's `._android.yaml` failed every platform."""
    write(platforms_dir / "android.yaml", "")
    write(platforms_dir / "ps5.YAML", "")
    write(platforms_dir / "sub" / "handheld.yaml", "")
    write(platforms_dir / "._android.yaml", "\x00\x05junk")
    (platforms_dir / ".#android.yaml").symlink_to("user@host.1234:1700000000")
    with pytest.raises(ProfileError) as excinfo:
        load_platforms(platforms_dir, {})
    problems = problems_of(excinfo)
    assert len(problems) == 2, problems
    assert "ps5.YAML: platform files must end in .yaml; rename it to ps5.yaml" in problems[0]
    assert (
        "handheld.yaml: platform files are read from" in problems[1] and "not its subfolders" in problems[1]
    )
    (platforms_dir / "ps5.YAML").unlink()
    (platforms_dir / "sub" / "handheld.yaml").unlink()
    assert [p.name for p in load_platforms(platforms_dir, {})] == ["android"]


def test_one_bad_key_does_not_hide_the_files_other_problems(platforms_dir: Path) -> None:
    """A misspelled key stopped the rules between settings: `type_reduction` without
    `reduced_build` and a check turned off without a reason came a run later each."""
    write(platforms_dir / "game.yaml", "fromat: ort\ntype_reduction: true\nruntime_check: false\n")
    with pytest.raises(ProfileError) as excinfo:
        load_platforms(platforms_dir, {})
    problems = problems_of(excinfo)
    assert len(problems) == 3, problems
    assert "key 'fromat' is not a known setting; did you mean 'format'? (line 1)" in problems[0]
    assert problems[1].endswith(
        "'type_reduction' needs 'reduced_build' true; got false from the defaults (docs/settings.md): "
        "set `reduced_build: true`, or remove `type_reduction`"
    )
    assert "'runtime_check' is false" in problems[2] and "without 'runtime_check_off_reason'" in problems[2]


def test_a_number_for_a_setting_of_named_choices_gets_the_choices_not_quotes(platforms_dir: Path) -> None:
    with pytest.raises(ProfileError) as excinfo:
        load_one(platforms_dir, "optimization_level: 2\n")
    (problem,) = problems_of(excinfo)
    assert problem.endswith(
        "'optimization_level' must be one of basic, extended, all; got 2 (an integer) (line 1)"
    )


def test_a_problem_inside_a_nested_key_names_that_keys_line(platforms_dir: Path) -> None:
    """It named the line of the top key (`provider_options` at 2, not `model_cache_dir` at 5)."""
    write(
        platforms_dir / "game.yaml",
        "execution_providers: [XnnpackExecutionProvider, CPUExecutionProvider]\n"
        "provider_options:\n"
        "  XnnpackExecutionProvider:\n"
        "    intra_op_num_threads: 2\n"
        "    model_cache_dir: x\n"
        "ep_session_options:\n"
        "  CPUExecutionProvider:\n"
        "    session.intra_op.allow_spinning: '0'\n"
        "    session.optimized_model_filepth: x\n"
        "fixed_dims:\n"
        "  batch: 1\n"
        "  seq: 0\n",
    )
    with pytest.raises(ProfileError) as excinfo:
        load_platforms(platforms_dir, {})
    lines = {problem.split("'")[1]: problem.rsplit("(line ", 1)[-1] for problem in problems_of(excinfo)}
    assert lines == {
        "provider_options.XnnpackExecutionProvider.model_cache_dir": "5)",
        "ep_session_options.CPUExecutionProvider.session.optimized_model_filepth": "9)",
        "fixed_dims.seq": "12)",
    }, problems_of(excinfo)
