"""Models as exporters and quantizers write them, cooked for every shipped platform.

Made in the test, seeded, by the tools studios use: ``torch.onnx.export`` (the TorchScript exporter
and the dynamo exporter) of a conv net with batch norm, a transformer encoder and an LSTM;
onnxruntime's ``quantize_dynamic`` and ``quantize_static`` (QDQ) of some of them; the float16
converter; and a model whose external data is over 100 MB. Each one cooks on every platform and
its blob, loaded from memory, computes what the source computes (or the cook fell back and says so).
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from onnx_cooker.build.run_job import cook
from onnx_cooker.layout import blob_path
from onnx_cooker.runtime import session_from_blob
from tests.test_cook import SHIPPED_PLATFORMS, job_for, shipped_settings

# torch exports and quantizers, each model cooked for every platform: tens of seconds.
pytestmark = pytest.mark.slow

SEED = 11
CPU = ["CPUExecutionProvider"]
BATCH = {"batch": 2}  # the exporters' dynamic batch axis, sized for verification


class ConvNet(torch.nn.Module):
    """Conv + BatchNorm + ReLU twice, pooling and a linear head: a classic small vision net."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )
        for module in self.body:
            if isinstance(module, nn.BatchNorm2d):  # trained-looking statistics, not the identity
                module.running_mean.normal_(0.0, 0.1)
                module.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Encoder(torch.nn.Module):
    """Two transformer encoder layers (self-attention, LayerNorm, feed-forward)."""

    def __init__(self) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


class Recurrent(torch.nn.Module):
    """A two-layer LSTM and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.head(y)


@dataclass(frozen=True)
class Net:
    make: Callable[[], torch.nn.Module]
    shape: tuple[
        int, ...
    ]  # the example input's shape, batch first (not 1: torch.export specializes size-1 dims)


NETS = {
    "convnet": Net(ConvNet, (2, 3, 32, 32)),
    "encoder": Net(Encoder, (2, 8, 64)),
    "lstm": Net(Recurrent, (2, 10, 16)),
}
EXPORTERS = ("torchscript", "dynamo")


def export(net_name: str, exporter: str, path: Path) -> None:
    """``torch.onnx.export`` of a seeded net, with a dynamic batch axis, as a user calls it."""
    torch.manual_seed(SEED)
    net = NETS[net_name]
    module = net.make().eval()
    example = (torch.randn(*net.shape),)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation and tracer warnings of the exporters
        if exporter == "dynamo":
            batch = torch.export.Dim("batch", min=1, max=64)
            torch.onnx.export(
                module,
                example,
                str(path),
                dynamo=True,
                input_names=["x"],
                output_names=["y"],
                dynamic_shapes=({0: batch},),
                verbose=False,
            )
        else:
            torch.onnx.export(
                module,
                example,
                str(path),
                dynamo=False,
                input_names=["x"],
                output_names=["y"],
                dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
            )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """Each (net, exporter) exported once per test process, into its own folder."""
    made: dict[tuple[str, str], Path] = {}

    def get(net_name: str, exporter: str) -> Path:
        if (net_name, exporter) not in made:
            folder = tmp_path_factory.mktemp(f"{net_name}-{exporter}")
            export(net_name, exporter, folder / f"{net_name}.onnx")
            made[net_name, exporter] = folder / f"{net_name}.onnx"
        return made[net_name, exporter]

    return get


def copy_asset(source: Path, assets: Path, name: str) -> None:
    """The exported files as the exporter wrote them (the dynamo exporter keeps weights in a
    ``.onnx.data`` file beside the model)."""
    assets.mkdir(parents=True, exist_ok=True)
    for path in source.parent.glob(f"{source.name}*"):
        shutil.copy(path, assets / path.name.replace(source.stem, name, 1))


def assert_blob_matches_source(
    source: Path, blob: bytes, shape: tuple[int, ...], *, rtol: float, atol: float, batch: int = 3
) -> None:
    """The cooked blob, loaded from memory, computes what the source file computes (by default on a
    batch of 3, a size the cook did not verify with)."""
    feed = {"x": np.random.default_rng(SEED).standard_normal((batch, *shape[1:])).astype(np.float32)}
    expected = onnxruntime.InferenceSession(str(source), providers=CPU).run(None, feed)
    got = session_from_blob(blob, providers=CPU).run(None, feed)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("platform", SHIPPED_PLATFORMS)
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("net_name", sorted(NETS))
def test_exported_model_cooks_and_matches_its_source(
    tmp_path: Path, exported: Callable[[str, str], Path], net_name: str, exporter: str, platform: str
) -> None:
    source = exported(net_name, exporter)
    assets = tmp_path / "assets"
    copy_asset(source, assets, net_name)
    settings = shipped_settings(platform, verify_dims=BATCH)  # the default verification rule
    entry = cook(job_for(assets, net_name, settings, tmp_path / "build"))

    assert all(output["ok"] for output in entry["verification"]["outputs"])
    assert entry["fallbacks"] == []
    blob = blob_path(tmp_path / "build" / platform, net_name, settings.format).read_bytes()
    assert_blob_matches_source(source, blob, NETS[net_name].shape, rtol=1e-3, atol=1e-4)


class WideMLP(torch.nn.Module):
    """Four 2560 x 2560 linear layers: 105 MB of float32 weights."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(*(torch.nn.Linear(WIDE, WIDE) for _ in range(4)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.layers(x))


WIDE = 2560


@pytest.mark.parametrize("platform", SHIPPED_PLATFORMS)
def test_exported_model_with_external_data_over_100_mb_cooks(tmp_path: Path, platform: str) -> None:
    """The dynamo exporter writes the weights to ``wide.onnx.data``; over 100 MB of it cooks."""
    torch.manual_seed(SEED)
    assets = tmp_path / "assets"
    assets.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            WideMLP().eval(),
            (torch.randn(2, WIDE),),
            str(assets / "wide.onnx"),
            dynamo=True,
            input_names=["x"],
            output_names=["y"],
            external_data=True,
            verbose=False,
        )
    data = assets / "wide.onnx.data"
    assert data.stat().st_size > 100e6 and (assets / "wide.onnx").stat().st_size < 1e6
    settings = shipped_settings(platform, rtol=1e-3, atol=1e-4)
    entry = cook(job_for(assets, "wide", settings, tmp_path / "build"))

    assert entry["verification"]["outputs"][0]["ok"] is True
    assert entry["source_size"] > 100e6
    blob = blob_path(tmp_path / "build" / platform, "wide", settings.format).read_bytes()
    assert_blob_matches_source(assets / "wide.onnx", blob, (2, WIDE), rtol=1e-3, atol=1e-4, batch=2)


def quantize(kind: str, source: Path, target: Path, shape: tuple[int, ...]) -> None:
    """onnxruntime.quantization as its documentation runs it: pre-processing, then dynamic int8 or
    static QDQ int8 calibrated on seeded inputs."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from onnx_cooker.cook.precision import quantize_qdq

    target.parent.mkdir(parents=True, exist_ok=True)
    inline = target.with_name("float.onnx")  # the tool loses a .onnx.data file kept beside the model
    onnx.save(onnx.load(source), inline)
    prepared = target.with_name("prepared.onnx")
    # Symbolic shape inference trips on the TorchScript encoder's attention reshapes: the
    # quantization tool's own problem, and its documented switch.
    quant_pre_process(str(inline), str(prepared), skip_symbolic_shape=True)
    if kind == "dynamic":
        quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8)
        return
    rng = np.random.default_rng(SEED)
    batches = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(8)]
    quantize_qdq(prepared, target, batches, per_channel=True)  # onnxruntime's quantize_static, QDQ


QUANTIZED = [
    ("dynamic", "encoder", "torchscript"),
    ("dynamic", "lstm", "dynamo"),
    ("qdq", "convnet", "dynamo"),
    ("qdq", "encoder", "torchscript"),
]
# onnxruntime 1.32 cannot replay the runtime optimizations it saves for these (QDQ attention).
REPLAY_FAILS = {("qdq", "encoder")}
# int8 kernels fused by the cook's optimizer and the unfused QDQ source round differently, by up to
# a step or two of the output's quantization scale: tolerances as a user of an int8 model sets them.
INT8_TOLERANCES = {"rtol": 1e-2, "atol": 0.15}


@pytest.mark.parametrize("platform", SHIPPED_PLATFORMS)
@pytest.mark.parametrize(("kind", "net_name", "exporter"), QUANTIZED)
def test_quantized_export_cooks_and_matches_its_source(
    tmp_path: Path,
    exported: Callable[[str, str], Path],
    kind: str,
    net_name: str,
    exporter: str,
    platform: str,
) -> None:
    source = tmp_path / "work" / f"{net_name}.onnx"
    quantize(kind, exported(net_name, exporter), source, NETS[net_name].shape)
    assets = tmp_path / "assets"
    copy_asset(source, assets, net_name)
    settings = shipped_settings(platform, verify_dims=BATCH, **INT8_TOLERANCES)
    entry = cook(job_for(assets, net_name, settings, tmp_path / "build"))

    assert all(output["ok"] for output in entry["verification"]["outputs"])
    if (kind, net_name) in REPLAY_FAILS and settings.optimization_style == "runtime":
        # Its saved selector records cannot be replayed: the cook fell back (docs/design.md,
        # "Runtime-style replay of QDQ models").
        (fallback,) = entry["fallbacks"]
        assert fallback["instead_of"] == {"optimization_style": "runtime"}
        assert "runtime optimization record" in fallback["why"]
    else:
        assert entry["fallbacks"] == []
    blob = blob_path(tmp_path / "build" / platform, net_name, settings.format).read_bytes()
    assert_blob_matches_source(source, blob, NETS[net_name].shape, **INT8_TOLERANCES)


FP16_TOLERANCES = {"rtol": 1e-2, "atol": 5e-2}  # fp16 kernels fused or not round differently


@pytest.mark.parametrize("platform", SHIPPED_PLATFORMS)
@pytest.mark.parametrize("net_name", ["convnet", "encoder"])
def test_fp16_export_cooks_and_matches_its_source(
    tmp_path: Path, exported: Callable[[str, str], Path], net_name: str, platform: str
) -> None:
    """An exported net turned to fp16 by onnxruntime's converter, inputs and outputs kept float32."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    half = convert_float_to_float16(onnx.load(exported(net_name, "dynamo")), keep_io_types=True)
    source = tmp_path / "work" / f"{net_name}.onnx"
    source.parent.mkdir()
    onnx.save(half, source)
    assets = tmp_path / "assets"
    copy_asset(source, assets, net_name)
    settings = shipped_settings(platform, verify_dims=BATCH, **FP16_TOLERANCES)
    entry = cook(job_for(assets, net_name, settings, tmp_path / "build"))

    assert all(output["ok"] for output in entry["verification"]["outputs"])
    assert [i["type"] for i in entry["inputs"]] == ["tensor(float)"]
    assert entry["fallbacks"] == []
    blob = blob_path(tmp_path / "build" / platform, net_name, settings.format).read_bytes()
    assert_blob_matches_source(source, blob, NETS[net_name].shape, **FP16_TOLERANCES)


@pytest.mark.slow
@pytest.mark.parametrize(("platform", "version"), [("windows-dml", "1.24.4"), ("console", "1.28.0")])
def test_exported_models_load_in_the_older_targets_exact_runtime(
    tmp_path: Path, exported: Callable[[str, str], Path], platform: str, version: str
) -> None:
    """Every net by both exporters, cooked with the defaults, passes the runtime check in the exact
    onnxruntime of the platforms that ship the oldest ones (what writes their manifest)."""
    from tests.test_target_check import check_for, run_check

    names = sorted(NETS)
    for exporter in EXPORTERS:  # a folder each: the exported files keep their names
        assets, build = tmp_path / exporter / "assets", tmp_path / exporter / "build"
        for name in names:
            copy_asset(exported(name, exporter), assets, name)
            cook(job_for(assets, name, shipped_settings(platform, verify_dims=BATCH), build))
        check = check_for(build / platform, names, version, Path(f"platforms/{platform}.yaml"))

        report = run_check(check)

        assert report["onnxruntime"] == version
        assert all(report["models"][name]["ok"] for name in names), (exporter, report["models"])
