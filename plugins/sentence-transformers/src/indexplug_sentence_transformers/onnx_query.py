"""Query vectors without torch: ``tokenizers`` + ONNX Runtime + numpy.

A cold process that only searches (the CLI, ``indexplug invoke``, an orchestrator shelling out
once per op) would otherwise import torch and sentence-transformers (seconds) to embed one
query.  This module embeds a query with the model's transformer exported to ONNX in
**float32** (no quantisation) and its own ``tokenizer.json``: a text vector with the mean
pooling and normalisation sentence-transformers applies, or (late interaction) one unit vector
per token, as the embedder's token path gives them.  The vectors are the fp32 path's vectors
within float rounding (cosine above 0.99999 on MiniLM; see docs/embedders.md).

* **Never from a hub.** The ONNX file is exported once from the installed model by
  :mod:`~indexplug_sentence_transformers.onnx_export`, in a process that has torch loaded
  anyway (building an index, or the embedder's ``load()``), and cached under
  ``${INDEXPLUG_CACHE:-~/.cache/indexplug}/st-onnx-query/`` keyed by the model files (names,
  sizes, modification times) and the exporter.  Without the file, queries run in torch as
  before.
* **Only where it reproduces the model.** :func:`plan_for` accepts a model folder whose modules
  are a Transformer, mean Pooling and optionally Normalize, with no query prompt and no
  lower-casing done outside the tokenizer; anything else (a Dense layer, CLS pooling, e5's
  ``query:`` prompt) keeps the torch path.  Token vectors are the transformer's output
  itself, so for them (``tokens=True``) any pooling, Normalize or Dense may follow (those act
  on the text vector only); the prompt and lower-casing rules stay.
* **One thread, no spinning.** One query is a few milliseconds of work; a single-threaded
  session starts no thread pool, so nothing native is left running at interpreter exit.

``INDEXPLUG_ST_QUERY_ENGINE=torch`` turns it off.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from indexplug_sentence_transformers import onnx_export

ENGINE_ENV = "INDEXPLUG_ST_QUERY_ENGINE"
ENGINES = ("auto", "torch")
FILE = "model.fp32.onnx"
_export_lock = threading.Lock()


@dataclass(frozen=True)
class QueryPlan:
    """What the torch-free encoder must reproduce for one model folder."""

    folder: Path
    max_seq_length: int
    transformer_dir: Path
    """The folder holding ``tokenizer.json`` (the Transformer module's path; usually the root)."""


def engine() -> str:
    """``INDEXPLUG_ST_QUERY_ENGINE`` (``auto`` unless set to ``torch``)."""
    value = (os.environ.get(ENGINE_ENV) or "auto").strip().lower()
    return value if value in ENGINES else "auto"


def runtime_installed() -> bool:
    """Whether onnxruntime and tokenizers can be imported (import specs only)."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


TEXT_AFTER_TRANSFORMER = (["Pooling"], ["Pooling", "Normalize"])
"""The modules a text vector may pass through after the transformer (mean Pooling checked)."""
TOKENS_AFTER_TRANSFORMER = frozenset({"Pooling", "Normalize", "Dense"})
"""The modules that may follow the transformer for token vectors: they change only the text
vector (``sentence_embedding``), never ``token_embeddings``."""


def plan_for(folder: Path, *, tokens: bool = False) -> QueryPlan | None:
    """The plan for ``folder``, or None when its model is not a plain mean-pooled encoder
    (``tokens``: when its token vectors are not the transformer's own output)."""
    try:
        modules = _read_json(folder / "modules.json")
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        if not kinds or kinds[0] != "Transformer":
            return None
        if tokens:
            if not set(kinds[1:]) <= TOKENS_AFTER_TRANSFORMER:
                return None
        elif kinds[1:] not in TEXT_AFTER_TRANSFORMER or not _mean_pooling(folder, modules[1]):
            return None
        sub = str(modules[0].get("path", "") or "")
        tdir = (folder / sub).resolve() if sub else folder
        st_config = tdir / "sentence_bert_config.json"
        if not st_config.is_file():
            st_config = folder / "sentence_bert_config.json"
        bert = _read_json(st_config) if st_config.is_file() else {}
        if bert.get("do_lower_case"):
            return None
        max_len = int(bert.get("max_seq_length") or 0)
        if max_len <= 0:
            return None
        prompts_file = folder / "config_sentence_transformers.json"
        if prompts_file.is_file():
            cfg = _read_json(prompts_file)
            if (cfg.get("prompts") or {}).get("query") or cfg.get("default_prompt_name"):
                return None
        if not (tdir / "tokenizer.json").is_file() or not (tdir / "config.json").is_file():
            return None
        return QueryPlan(folder=folder, max_seq_length=max_len, transformer_dir=tdir)
    except (OSError, ValueError, TypeError, AttributeError, IndexError, KeyError):
        return None


def _mean_pooling(folder: Path, module: Any) -> bool:
    """Whether the Pooling module's config asks for mean pooling alone, over the prompt too."""
    pooling = _read_json(folder / str(module.get("path", "")) / "config.json")
    mean_only = pooling.get("pooling_mode_mean_tokens") is True and not any(
        v
        for k, v in pooling.items()
        if k.startswith("pooling_mode_") and k != ("pooling_mode_mean_tokens")
    )
    return mean_only and pooling.get("include_prompt", True) is True


def cache_root() -> Path:
    """``${INDEXPLUG_CACHE:-~/.cache/indexplug}/st-onnx-query``."""
    base = os.environ.get("INDEXPLUG_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "indexplug"
    )
    return Path(base) / "st-onnx-query"


def cache_file(model_name: str, folder: Path) -> Path:
    """Where the export of ``folder`` lives.  The key is cheap to compute (file names, sizes and
    modification times, no hashing of the weights) because every cold search computes it."""
    import hashlib

    h = hashlib.sha256(f"{onnx_export.KEY}|fp32|{model_name}".encode())
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".safetensors", ".bin", ".txt"):
            st = path.stat()
            h.update(f"{path.relative_to(folder)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name)[-60:]
    return cache_root() / f"{slug}-{h.hexdigest()[:16]}" / FILE


def export(model: Any, model_name: str, folder: Path) -> Path:
    """Export ``model``'s transformer (a loaded ``SentenceTransformer``) in float32, once."""
    target = cache_file(model_name, folder)
    if target.is_file():
        return target
    with _export_lock:
        if not target.is_file():
            onnx_export.export_transformer(model, target)
    return target


class QueryEncoder:
    """One model's torch-free query encoder (thread-safe: calls hold a lock)."""

    def __init__(self, onnx_file: Path, plan: QueryPlan) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped,unused-ignore]
        from tokenizers import Tokenizer

        self.plan = plan
        tok = Tokenizer.from_file(str(plan.transformer_dir / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(max_length=plan.max_seq_length, strategy="longest_first")
        self._tokenizer = tok
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(onnx_file), opts, providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()

    def _hidden(self, text: str) -> tuple[Any, Any]:
        """The transformer's output for ``text`` (1, tokens, dim) and its mask (1, tokens)."""
        with self._lock:
            enc = self._tokenizer.encode(text)
            ids = np.asarray([enc.ids], dtype=np.int64)
            mask = np.asarray([enc.attention_mask], dtype=np.int64)
            tokens = self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return tokens, mask

    def encode_tokens(self, text: str) -> Any:
        """One unit-length float32 vector per token of ``text`` (special tokens included, as
        sentence-transformers' ``token_embeddings`` gives them), shape (tokens, dim)."""
        tokens, _ = self._hidden(text)
        rows = np.asarray(tokens[0], dtype=np.float32)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        out: Any = (rows / np.maximum(norms, 1e-12)).astype(np.float32)
        return out

    def encode(self, text: str) -> Any:
        """The unit-length float32 vector of ``text`` (mean of its token vectors)."""
        tokens, mask = self._hidden(text)
        weights = mask[..., None].astype(np.float32)
        pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        vec = pooled[0].astype(np.float32)
        out: Any = (vec / max(float(np.linalg.norm(vec)), 1e-12)).astype(np.float32)
        return out


def load(
    model_name: str,
    folder: Path | None,
    max_seq_length: int | None = None,
    *,
    tokens: bool = False,
) -> QueryEncoder | None:
    """The encoder for ``folder`` when it is allowed, installed and already exported; else None
    (the caller then embeds with torch).  Never exports, never imports torch.
    ``max_seq_length`` overrides the model's own truncation, as the embedder option does;
    ``tokens`` asks for an encoder of token vectors (:func:`plan_for`)."""
    if folder is None or engine() == "torch" or not runtime_installed():
        return None
    plan = plan_for(folder, tokens=tokens)
    if plan is None:
        return None
    if max_seq_length:
        plan = QueryPlan(plan.folder, int(max_seq_length), plan.transformer_dir)
    target = cache_file(model_name, folder)
    if not target.is_file():
        return None
    try:
        return QueryEncoder(target, plan)
    except Exception:
        return None  # an unreadable cache entry: torch answers, and a rebuild re-exports
