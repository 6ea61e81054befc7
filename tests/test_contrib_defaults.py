"""A 4-bit quantized model (onnxruntime's ``MatMulNBits``, how local LLMs ship) cooked for targets
older than the cook's onnxruntime: its optimizers write ``weight_prepacked=0`` on each such node,
which onnxruntime 1.24.4 refuses; the cook drops attributes at their defaults on onnxruntime's own
operators (onnx_cooker/cook/defaults.py, docs/design.md "Newer models, older runtimes")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper

from onnx_cooker.build.run_job import cook
from onnx_cooker.build.target_check import RuntimeCheckError
from onnx_cooker.cook.defaults import drop_default_attributes
from onnx_cooker.layout import blob_path
from onnx_cooker.runtime import decode_blob, session_from_blob
from tests.test_cook import job_for, save, shipped_settings
from tests.test_native import native, ort_library, run_native  # noqa: F401
from tests.test_target_check import OLD_RUNTIME, check_for, run_check


def gpt2_q4(folder: Path) -> onnx.ModelProto:
    """A one-layer GPT-2 (transformers, seeded, a KV cache in and logits out), exported by torch's
    TorchScript exporter and quantized to 4 bits by onnxruntime's own quantizer (MatMulNBits with int8
    activations, accuracy level 4, as LLMs for CPUs ship)."""
    import torch
    import transformers
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    gpt2 = transformers.GPT2LMHeadModel(config).eval()

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt2 = gpt2

        def forward(self, ids, mask, key, value):  # type: ignore[no-untyped-def]
            cache = transformers.DynamicCache()
            cache.update(key, value, 0)
            return self.gpt2(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits

    path = folder / "gpt2.onnx"
    folder.mkdir(parents=True, exist_ok=True)
    sample = (
        torch.randint(0, 256, (1, 3)),
        torch.ones(1, 5, dtype=torch.int64),
        *torch.randn(2, 1, 2, 2, 16),
    )
    free = {"ids": {1: "seq"}, "mask": {1: "total"}, "key": {2: "past"}, "value": {2: "past"}}
    with torch.no_grad():
        torch.onnx.export(
            Step(), sample, str(path), dynamo=False, opset_version=17, input_names=list(free),
            output_names=["logits"], dynamic_axes=free,
        )  # fmt: skip
    quantizer = MatMulNBitsQuantizer(onnx.load(str(path)), block_size=32, is_symmetric=True, accuracy_level=4)
    quantizer.process()
    path.unlink()
    return quantizer.model.model


def basic_optimized(model: onnx.ModelProto, tmp_path: Path) -> onnx.ModelProto:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(tmp_path / "optimized.onnx"))


def attributes(model: onnx.ModelProto) -> dict[str, dict[str, object]]:
    return {
        n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute}
        for n in model.graph.node
        if n.op_type == "MatMulNBits"
    }


def test_the_cooks_onnxruntime_writes_an_attribute_the_older_target_refuses(tmp_path: Path) -> None:
    """The premise, in the installed onnxruntime (1.32): level basic adds weight_prepacked=0 to the
    LM head's MatMulNBits (the quantizer did not write it)."""
    model = gpt2_q4(tmp_path / "export")
    assert not any("weight_prepacked" in found for found in attributes(model).values())
    optimized = basic_optimized(model, tmp_path)
    assert attributes(optimized)["/gpt2/lm_head/MatMul_Q4"]["weight_prepacked"] == 0


def test_attributes_at_their_defaults_on_onnxruntimes_operators_are_dropped(tmp_path: Path) -> None:
    optimized = basic_optimized(gpt2_q4(tmp_path / "export"), tmp_path)
    first = next(n for n in optimized.graph.node if n.name == "/gpt2/lm_head/MatMul_Q4")
    second = onnx.NodeProto()
    second.CopyFrom(first)
    second.name, second.output[0] = "prepacked", "other_logits"
    next(a for a in second.attribute if a.name == "weight_prepacked").i = 1  # not the default: it stays
    optimized.graph.node.append(second)
    # a standard operator's attribute at its default stays (a new one there comes with a new opset)

    optimized.graph.node.append(helper.make_node("Flatten", ["logits"], ["flat"], axis=1))

    dropped = drop_default_attributes(optimized)

    assert dropped == ["MatMulNBits.bits", "MatMulNBits.weight_prepacked"]  # bits=4 is its default too
    found = attributes(optimized)
    assert found[first.name] == {"K": 32, "N": 256, "accuracy_level": 4, "block_size": 32}
    assert found["prepacked"] == {
        "K": 32,
        "N": 256,
        "accuracy_level": 4,
        "block_size": 32,
        "weight_prepacked": 1,
    }
    assert [helper.get_attribute_value(a) for a in optimized.graph.node[-1].attribute] == [1]


def cook_gpt2(tmp_path: Path, platform: str) -> tuple[onnx.ModelProto, bytes, str]:
    """The 4-bit GPT-2 cooked for ``platform`` on the CPU EP: (source, blob, target version)."""
    model = gpt2_q4(tmp_path / "export")
    save(model, tmp_path / "assets", "llm")
    settings = shipped_settings(platform, execution_providers=["CPUExecutionProvider"])
    cook(job_for(tmp_path / "assets", "llm", settings, tmp_path / "build"))
    return (
        model,
        blob_path(tmp_path / "build" / platform, "llm", "onnx").read_bytes(),
        settings.runtime_version,
    )


def target_check(tmp_path: Path, platform: str, version: str) -> dict:
    check = check_for(tmp_path / "build" / platform, ["llm"], version, Path(f"platforms/{platform}.yaml"))
    return run_check(check)


@pytest.mark.parametrize("platform", ["windows-dml", "linux-openvino"])
def test_a_4_bit_llm_cooks_for_an_older_onnx_target_and_loads_there(tmp_path: Path, platform: str) -> None:
    model, blob, version = cook_gpt2(tmp_path, platform)
    assert version in (OLD_RUNTIME, "1.24.1")
    _, graph = decode_blob(blob)
    assert not any("weight_prepacked" in found for found in attributes(onnx.load_from_string(graph)).values())
    rng = np.random.default_rng(1)
    feeds = {
        "ids": rng.integers(0, 256, (1, 3)),
        "mask": np.ones((1, 5), np.int64),
        "key": rng.standard_normal((1, 2, 2, 16)).astype(np.float32),
        "value": rng.standard_normal((1, 2, 2, 16)).astype(np.float32),
    }
    source = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        session_from_blob(blob).run(None, feeds)[0], source.run(None, feeds)[0], rtol=1e-4, atol=1e-5
    )
    report = target_check(tmp_path, platform, version)
    assert report["onnxruntime"] == version
    assert report["models"]["llm"]["ok"], report["models"]


def test_without_the_drop_the_older_target_refuses_the_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the drop prevents: the same cook with it turned off fails the runtime check in 1.24.4."""
    from onnx_cooker.cook import optimize

    monkeypatch.setattr(optimize, "drop_default_attributes", lambda model: [])
    _, _, version = cook_gpt2(tmp_path, "windows-dml")
    with pytest.raises(RuntimeCheckError) as failure:
        target_check(tmp_path, "windows-dml", version)
    message = str(failure.value)
    words = "does not know attribute weight_prepacked of operator MatMulNBits: the cook drops such attributes"
    assert f"onnxruntime 1.24.4, the platform's runtime_version, {words}" in message, message


# --- an ORT-format blob with the attribute, loaded by an onnxruntime older than its platform's -----

WORDS = (
    "onnxruntime 1.24.4 does not know attribute weight_prepacked of operator MatMulNBits, which model "
    "'llm' (android) uses: it is older than the onnxruntime the platform ships; load it with the "
    "platform's onnxruntime (its runtime_version), or cook a platform for onnxruntime 1.24.4"
)


def ort_blob(tmp_path: Path) -> Path:
    """The 4-bit GPT-2 saved in the ORT format by this onnxruntime at level basic (as android's cook,
    whose onnxruntime 1.32 knows the attribute), as a blob file."""
    from runtime_helpers import make_blob

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "llm.ort")
    options.add_session_config_entry("session.save_model_format", "ORT")
    model = gpt2_q4(tmp_path / "export").SerializeToString()
    onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    path = tmp_path / "llm.ocb"
    path.write_bytes(make_blob((tmp_path / "llm.ort").read_bytes(), "ort", name="llm", platform="android"))
    return path


def test_an_attribute_an_older_onnxruntime_lacks_is_its_incompatibility_in_python(tmp_path: Path) -> None:
    from runtime_helpers import incompatibility_in

    assert incompatibility_in(OLD_RUNTIME, tmp_path / "work", ort_blob(tmp_path)) == ["MatMulNBits", WORDS]


def test_an_attribute_an_older_onnxruntime_lacks_is_its_incompatibility_in_c(
    native: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    blob = ort_blob(tmp_path)
    done = run_native([native / "oc-run", "--blob", blob, "--ort", ort_library(OLD_RUNTIME)], check=False)
    assert done.returncode == 1
    assert WORDS in done.stderr, done.stderr
    run_native([native / "oc-run", "--blob", blob, "--ort", ort_library("1.32.0")])  # its platform's loads it
