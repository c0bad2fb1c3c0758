"""The sentence-transformers embedder: text vectors (mean pooled) and token vectors.

Design points, and why:

* **Lazy.** The factory only resolves the model name; torch and the weights load on the first
  embedding (or the first ``dim`` that the config files cannot answer).  Discovery and
  ``indexplug backends`` therefore never pay seconds of imports, and a missing library or model
  shows up as *not ready, because ...* rather than as a plugin that fails to load.
* **One lock.** Hugging Face fast tokenizers are not safe to call from several threads at once
  ("Already borrowed"), and the guard runs ops on a thread pool, so every model call holds the
  embedder's lock.  Throughput comes from batching, not from threads.
* **Normalised float32.** Text vectors come from the model's own pooling (and ``Normalize``
  module) with ``normalize_embeddings=True``; token vectors are each L2-normalised.  A dot
  product is then a cosine, which is what every dense backend assumes.
* **Query and document encoders.** ``encode_query``/``encode_document`` apply the prompts a
  model was trained with (e5, bge...); for models without prompts they equal ``encode``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from indexplug.protocols import Granularity, Readiness, Vector

from indexplug_sentence_transformers.models import (
    ModelSource,
    dims_from_folder,
    missing_reason,
    resolve_model,
)

PROVIDER = "sentence-transformers"
DEFAULT_BATCH_SIZE = 64
PROGRESS_MIN = 512
"""A job of at least this many texts shows a progress bar (when stderr is a terminal)."""


class EmbedderUnavailable(RuntimeError):
    """The model or its libraries cannot be loaded; the message says which and why.

    Backends turn it into ``INDEX_UNAVAILABLE`` (the embedder is not ready) rather than
    ``INDEX_FAILED``: nothing is wrong with the index, and it recovers once the model exists.
    """


class SentenceTransformerEmbedder:
    """``sentence-transformers:MODEL``; see the module docstring.

    Settings (``options`` of the embedder factory): ``device`` (``cpu``, ``cuda``...; default:
    what sentence-transformers picks), ``batch_size`` (default 64), ``max_seq_length``
    (default: the model's own), ``progress_min`` (default 512).
    """

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_seq_length: int | None = None,
        progress_min: int = PROGRESS_MIN,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.source: ModelSource = resolve_model(model)
        self.name = f"{PROVIDER}:{self.source.name}"
        self.device = device
        self.batch_size = int(batch_size)
        self.max_seq_length = max_seq_length
        self.progress_min = int(progress_min)
        self._model: Any = None
        self._dims: tuple[int, int] | None = None
        self._load_error: str | None = None
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.name!r}, {self.source.kind})"

    # -- what it is --------------------------------------------------------------------------
    def _known_dims(self) -> tuple[int, int]:
        if self._dims is None:
            folder = self.source.folder()
            dims = dims_from_folder(folder) if folder is not None else None
            if dims is None:
                model = self._load()
                dims = (_text_dim(model), _token_dim(model))
            self._dims = dims
        return self._dims

    @property
    def dim(self) -> int:
        """The text-vector dimension (read from the config files when they say it)."""
        return self._known_dims()[0]

    @property
    def granularities(self) -> frozenset[Granularity]:
        """Token vectors are offered only when they have the same width as text vectors
        (a model with a Dense projection has wider tokens than texts)."""
        text, token = self._known_dims()
        if text == token:
            return frozenset({Granularity.TEXT, Granularity.TOKEN})
        return frozenset({Granularity.TEXT})

    def readiness(self) -> Readiness:
        if self._model is not None:
            return Readiness.yes()
        if self._load_error is not None:
            return Readiness.no(self._load_error)
        why = missing_reason(self.source)
        return Readiness.no(f"{self.name}: {why}") if why else Readiness.yes()

    # -- loading -----------------------------------------------------------------------------
    def _load(self) -> Any:
        with self._lock:
            if self._model is not None:
                return self._model
            if self._load_error is not None:
                raise EmbedderUnavailable(self._load_error)
            why = missing_reason(self.source)
            if why:
                raise EmbedderUnavailable(f"{self.name}: {why}")
            try:
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(self.source.location, device=self.device)
                if self.max_seq_length:
                    model.max_seq_length = int(self.max_seq_length)
            except Exception as exc:
                # Remembered: loading again would fail the same way, slowly.
                first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                self._load_error = (
                    f"{self.name}: loading '{self.source.location}' failed: "
                    f"{type(exc).__name__}: {first}"
                )
                raise EmbedderUnavailable(self._load_error) from exc
            self._model = model
            return model

    def load(self) -> None:
        """Load the model now (e.g. before timing searches); raises EmbedderUnavailable."""
        self._load()

    # -- embedding ---------------------------------------------------------------------------
    def _encode(self, texts: Sequence[str], granularity: Granularity, *, query: bool) -> Any:
        model = self._load()
        if granularity not in self.granularities:
            raise ValueError(f"{self.name} does not produce {granularity.value} vectors")
        method = getattr(model, "encode_query" if query else "encode_document", model.encode)
        progress = len(texts) >= self.progress_min and sys.stderr.isatty()
        with self._lock:
            if granularity is Granularity.TEXT:
                return method(
                    list(texts),
                    batch_size=self.batch_size,
                    show_progress_bar=progress,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                )
            return method(
                list(texts),
                batch_size=self.batch_size,
                show_progress_bar=progress,
                output_value="token_embeddings",
                convert_to_numpy=False,
            )

    def _query_tokens_direct(self, text: str) -> Any | None:
        """One query's token vectors through the model's modules, without ``encode``.

        A late-interaction search embeds one short query per search, and there ``encode``'s
        own machinery (batch sorting, a progress check, per-item padding trims, tensor copies)
        costs about a tenth of the model's work (measured ~1.5 ms of ~14 ms on a 2-core CPU).
        This runs exactly what ``encode`` runs for one text (the preprocessing, then every
        module in order, under ``inference_mode``), so the vectors are the same; it declines
        (``None``) when the model has a query prompt, which ``encode_query`` would prepend.
        """
        model = self._load()
        if (getattr(model, "prompts", None) or {}).get("query"):
            return None
        prepare = getattr(model, "preprocess", None) or getattr(model, "tokenize", None)
        if prepare is None:
            return None
        import torch

        with self._lock, torch.inference_mode():
            features = prepare([text])
            device = model.device
            features = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in features.items()}
            out = model(features)
        return out["token_embeddings"][0]

    def embed_documents(self, texts: Sequence[str], granularity: Granularity) -> list[Vector]:
        if not texts:
            return []
        out = self._encode(texts, granularity, query=False)
        if granularity is Granularity.TEXT:
            arr = np.asarray(out, dtype=np.float32)
            return list(arr)
        return [_normalise_rows(t) for t in out]

    def embed_query(self, text: str, granularity: Granularity) -> Vector:
        if granularity is Granularity.TOKEN:
            direct = self._query_tokens_direct(text)
            if direct is not None:
                return _normalise_rows(direct)
        out = self._encode([text], granularity, query=True)
        if granularity is Granularity.TEXT:
            first: Vector = np.asarray(out, dtype=np.float32)[0]
            return first
        return _normalise_rows(out[0])


def _text_dim(model: Any) -> int:
    getter = (
        getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    )
    dim = getter()
    if not dim:
        raise EmbedderUnavailable("the model does not report its embedding dimension")
    return int(dim)


def _token_dim(model: Any) -> int:
    first = model[0]
    getter = getattr(first, "get_embedding_dimension", None) or first.get_word_embedding_dimension
    return int(getter())


def _normalise_rows(tokens: Any) -> Vector:
    """One unit vector per token (float32, on the CPU)."""
    arr = tokens.detach().float().cpu().numpy() if hasattr(tokens, "detach") else tokens
    arr = np.asarray(arr, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    unit: Vector = (arr / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit
