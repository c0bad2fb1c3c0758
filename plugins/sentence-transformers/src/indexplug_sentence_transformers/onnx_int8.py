"""The ``int8`` path: a local ONNX export of the model's transformer, quantised per channel.

Never from a hub: the installed model's transformer is exported in float32 by
:mod:`~indexplug_sentence_transformers.onnx_export` (the same file the torch-free query
encoder runs), then its MatMul weights are quantised with
``quantize_dynamic(per_channel=True)``.  Per-tensor quantisation moves the vectors too far from
float32 to be used (see docs/embedders.md).  The result is cached under
``${INDEXPLUG_CACHE:-~/.cache/indexplug}/st-onnx/`` keyed by the model's files and every option
that changes the output, so a second load costs a file read.

The ONNX session replaces only the transformer module's ``forward``: tokenisation, prompts,
length sorting, batching, pooling and normalisation stay sentence-transformers' own.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from indexplug_sentence_transformers import onnx_export

QUANT = {"per_channel": True, "weight_type": "QInt8", "op_types": ["MatMul"], "reduce_range": False}
_export_lock = threading.Lock()


def cache_root() -> Path:
    """``${INDEXPLUG_CACHE:-~/.cache/indexplug}/st-onnx``."""
    base = os.environ.get("INDEXPLUG_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "indexplug"
    )
    return Path(base) / "st-onnx"


def model_digest(folder: Path) -> str:
    """A digest of a model folder's weights and configs (content, not names or dates)."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".safetensors", ".bin", ".txt"):
            h.update(str(path.relative_to(folder)).encode())
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()[:16]


def cache_key(model_name: str, folder: Path) -> str:
    """The cache entry's name: model, its content, the export and quantisation options, and the
    versions of the libraries that produce the file."""
    import onnxruntime  # type: ignore[import-untyped,unused-ignore]
    import torch

    options = json.dumps(
        {
            "exporter": onnx_export.KEY,
            "quant": QUANT,
            "torch": torch.__version__,
            "ort": onnxruntime.__version__,
        },
        sort_keys=True,
    )
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name)[-60:]
    digest = hashlib.sha256(f"{model_digest(folder)}|{options}".encode()).hexdigest()[:16]
    return f"{slug}-{digest}"


def export_int8(model: Any, model_name: str, folder: Path) -> Path:
    """The cached int8 ONNX file of ``model``'s transformer, exporting it on first use."""
    from onnxruntime.quantization import (  # type: ignore[import-untyped,unused-ignore]
        QuantType,
        quantize_dynamic,
    )

    target = cache_root() / cache_key(model_name, folder) / "model.int8.onnx"
    if target.is_file():
        return target
    with _export_lock:
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            fp32 = onnx_export.export_transformer(model, Path(tmp) / "model.onnx")
            quant = Path(tmp) / "model.int8.onnx"
            quantize_dynamic(
                str(fp32),
                str(quant),
                per_channel=bool(QUANT["per_channel"]),
                reduce_range=bool(QUANT["reduce_range"]),
                weight_type=QuantType.QInt8,
                op_types_to_quantize=list(QUANT["op_types"]),  # type: ignore[call-overload]
            )
            os.replace(quant, target)
    return target


def session(onnx_file: Path, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session (``threads`` intra-op threads; default: torch's count, so
    both paths use the same cores)."""
    import onnxruntime as ort  # type: ignore[import-untyped,unused-ignore]
    import torch

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads or torch.get_num_threads())
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(onnx_file), opts, providers=["CPUExecutionProvider"])


def run_transformer_with(model: Any, sess: Any) -> None:
    """Make ``model``'s first module (the transformer) run ``sess`` instead of torch."""
    import numpy as np
    import torch

    first = model[0]
    out_name = getattr(first, "module_output_name", "token_embeddings") or "token_embeddings"

    def forward(features: dict[str, Any], **_: Any) -> dict[str, Any]:
        feeds = {
            "input_ids": np.ascontiguousarray(features["input_ids"].cpu().numpy(), np.int64),
            "attention_mask": np.ascontiguousarray(
                features["attention_mask"].cpu().numpy(), np.int64
            ),
        }
        features[out_name] = torch.from_numpy(sess.run(None, feeds)[0])
        return features

    first.forward = forward
