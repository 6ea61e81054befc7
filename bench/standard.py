"""Standard architectures with seeded random weights, exported as a studio exports them.

ResNet-50, ViT-B/16 and a BERT-base encoder, built from the ``transformers`` architectures
(``ResNetConfig()``, ``ViTConfig()`` and ``BertConfig()`` are those models' published shapes) with
weights drawn from a fixed seed, nothing downloaded, and exported by ``torch.onnx.export``'s dynamo
exporter at opset 18 with their weights in ``<stem>.onnx.data``. Used by ``bench.verify_errors``
and ``tests/test_verification.py`` (docs/verification.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEED = 20240611
OPSET = 18
BATCH = 2  # torch.export specializes dims of size 1
SEQUENCE = 128
IMAGE = 224


@dataclass(frozen=True)
class Standard:
    name: str
    kind: str  # one line for the tables
    build: Callable[[], tuple[object, tuple]]  # (module in eval mode, example inputs)
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


def _resnet50() -> tuple[object, tuple]:
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    model = ResNetForImageClassification(ResNetConfig(num_labels=1000)).eval()
    return _logits(model), (torch.randn(BATCH, 3, IMAGE, IMAGE),)


def _vit_b16() -> tuple[object, tuple]:
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    model = ViTForImageClassification(ViTConfig(num_labels=1000)).eval()
    return _logits(model), (torch.randn(BATCH, 3, IMAGE, IMAGE),)


def _bert_base() -> tuple[object, tuple]:
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig()
    model = BertModel(config).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple:
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, config.vocab_size, (BATCH, SEQUENCE))
    mask = torch.ones(BATCH, SEQUENCE, dtype=torch.int64)
    return Encoder().eval(), (ids, mask)


def _logits(model: object) -> object:
    import torch

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values=pixel_values).logits

    return Logits().eval()


STANDARD = (
    Standard("resnet50", "ResNet-50 (transformers ResNetConfig)", _resnet50, ("pixel_values",), ("logits",)),
    Standard("vit_b16", "ViT-B/16 (transformers ViTConfig)", _vit_b16, ("pixel_values",), ("logits",)),
    Standard(
        "bert_base",
        "BERT-base encoder (transformers BertConfig)",
        _bert_base,
        ("input_ids", "attention_mask"),
        ("last_hidden_state", "pooler_output"),
    ),
)


def export(standard: Standard, folder: Path) -> Path:
    """Export ``standard`` into ``folder`` as ``<name>.onnx`` (+ ``.onnx.data``), with sample inputs
    as ``<name>.inputs.npz`` (token ids must lie in the vocabulary, which synthesized inputs do not
    know). Returns the model's path."""
    import torch

    torch.manual_seed(SEED)
    module, example = standard.build()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{standard.name}.onnx"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            example,
            dynamo=True,
            opset_version=OPSET,
            input_names=list(standard.input_names),
            output_names=list(standard.output_names),
            verbose=False,
        )
        program.save(str(path), external_data=True)
    # the dynamo exporter names the data file after the model file: <stem>.onnx.data
    np.savez(
        folder / f"{standard.name}.inputs.npz",
        **{name: value.numpy() for name, value in zip(standard.input_names, example, strict=True)},
    )
    return path
