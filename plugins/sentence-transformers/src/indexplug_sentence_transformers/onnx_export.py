"""The one ONNX exporter of this package: a model's transformer, float32, any batch and length.

Both ONNX paths start from the same file: :mod:`~indexplug_sentence_transformers.onnx_query`
(torch-free queries, text and token vectors) runs it as written, and
:mod:`~indexplug_sentence_transformers.onnx_int8` (the ``int8`` path) quantises it.  What it
holds is the first module of a sentence-transformers model (its Hugging Face transformer) as
``forward(input_ids, attention_mask) -> token_embeddings`` (the last hidden state), so pooling,
normalisation and prompts stay with the caller.

The exporter is torch's supported one: ``torch.onnx.export(..., dynamo=True)`` captures the
model with ``torch.export`` and translates it with onnxscript (the ``[onnx]`` extra).  The
TorchScript exporter it replaces is deprecated for removal.  Batch and sequence axes are
dynamic (the tests run one query of any length and batches of many), the weights are stored
inside the file (one file to cache and replace atomically), and nothing is printed.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

OPSET = 18
"""The ONNX opset written (the lowest the dynamo exporter targets)."""
KEY = f"torch.export/opset={OPSET}"
"""What cache keys record about the exporter (a file another exporter wrote is not reused)."""
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "token_embeddings"
EXAMPLE_SHAPE = (2, 8)
"""The example batch traced: neither axis is 1, so neither is specialised to a constant."""


def exporter_installed() -> bool:
    """Whether the exporter's libraries are importable: torch, onnx and onnxscript."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "onnx", "onnxscript"))


def export_transformer(model: Any, target: Path) -> Path:
    """Write ``model``'s transformer (a loaded ``SentenceTransformer``) to ``target`` in float32.

    The file appears whole or not at all (written beside ``target``, then renamed).  The
    model is put in eval mode for the export and restored after.
    """
    import torch

    auto = model[0].auto_model

    class Transformer(torch.nn.Module):  # type: ignore[misc,unused-ignore]
        """``forward(input_ids, attention_mask)`` calling the model by keyword."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.ones(*EXAMPLE_SHAPE, dtype=torch.long)
    # The sequence axis is bounded by the model's position table (torch.export refuses a range
    # the model's guards do not cover, and torch.onnx.export then retries slower strategies).
    # The mask's axes are the ids' axes (torch.export finds that itself); naming them once
    # keeps the exporter from warning that a name is given twice.
    positions = getattr(getattr(auto, "config", None), "max_position_embeddings", None)
    longest = (
        int(positions) if isinstance(positions, int) and positions > EXAMPLE_SHAPE[1] else None
    )
    auto_dim = torch.export.Dim.AUTO
    shapes = {
        "input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("tokens", max=longest)},
        "attention_mask": {0: auto_dim, 1: auto_dim},
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        was_training = auto.training
        auto.eval()
        # the exporter logs a warning per torchvision operator it cannot register when
        # torchvision is not installed (it is not needed for a text transformer)
        registration = logging.getLogger("torch.onnx._internal.exporter._registration")
        level = registration.level
        registration.setLevel(logging.ERROR)
        try:
            with torch.no_grad():
                torch.onnx.export(
                    Transformer(auto).eval(),
                    (ids, torch.ones_like(ids)),
                    str(out),
                    input_names=list(INPUTS),
                    output_names=[OUTPUT],
                    dynamic_shapes=shapes,
                    opset_version=OPSET,
                    dynamo=True,
                    external_data=False,
                    verbose=False,
                    report=False,
                )
        finally:
            registration.setLevel(level)
            auto.train(was_training)
        os.replace(out, target)
    return target
