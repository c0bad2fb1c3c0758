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
* **Paths.** ``path`` picks the computation (``fp32``, ``bf16``, ``int8``, ``cuda`` or ``auto``;
  see :mod:`indexplug_sentence_transformers.paths`).  The resolved path is part of the name
  (``sentence-transformers:MODEL@int8,fp32``; nothing for fp32), so an index records it and a
  query is embedded as its passages were.
* **Query and document encoders.** ``encode_query``/``encode_document`` apply the prompts a
  model was trained with (e5, bge...); for models without prompts they equal ``encode``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from indexplug.protocols import Granularity, Readiness, Vector

from indexplug_sentence_transformers import onnx_export, onnx_query
from indexplug_sentence_transformers import paths as paths_mod
from indexplug_sentence_transformers.models import (
    ModelSource,
    dims_from_folder,
    missing_reason,
    resolve_model,
)
from indexplug_sentence_transformers.plugin import PROVIDER

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
    (default: the model's own), ``progress_min`` (default 512), ``query_dtype`` (below).

    ``query_dtype`` is the precision of the model that embeds a *query* (passages are always
    embedded in float32, so the vectors an index stores and the embedding cache holds never
    depend on it): ``float32``; ``bfloat16`` (a bfloat16 copy of the model, about half the
    time of float32 on a CPU with bfloat16 dot products, per-token cosine to the float32
    vectors above 0.9998 on MiniLM); or ``auto`` (the default): bfloat16 for per-token query
    vectors on a CPU that has bfloat16 dot products (``avx512_bf16`` or ``amx_bf16``), float32
    otherwise and for text vectors.  Why only tokens by default: a late-interaction search
    embeds its query on every search (half of its time with MiniLM), and its passages' token
    vectors are stored as int8 codes, a rounding some hundred times coarser than bfloat16's;
    a text vector is compared to float32 passage vectors with nothing coarser in between.
    """

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_seq_length: int | None = None,
        progress_min: int = PROGRESS_MIN,
        query_dtype: str = "auto",
        path: str = "fp32",
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if query_dtype not in QUERY_DTYPES:
            raise ValueError(
                f"query_dtype must be one of {', '.join(QUERY_DTYPES)}, got {query_dtype!r}"
            )
        self.query_dtype = query_dtype
        self._query_model: Any = None
        self.source: ModelSource = resolve_model(model)
        self.requested_path = path
        self.paths: tuple[str, str] = paths_mod.resolve(paths_mod.parse_path(path))
        """(text path, token path), ``auto`` resolved for this machine."""
        self.name = f"{PROVIDER}:{self.source.name}{paths_mod.path_suffix(self.paths)}"
        self._path_models: dict[str, Any] = {}
        self.device = device
        self.batch_size = int(batch_size)
        self.max_seq_length = max_seq_length
        self.progress_min = int(progress_min)
        self._model: Any = None
        self._dims: tuple[int, int] | None = None
        self._load_error: str | None = None
        self._lock = threading.RLock()
        self._onnx_query: dict[bool, onnx_query.QueryEncoder | None] = {}
        """The torch-free query encoders by granularity (True: tokens), once looked up."""
        self._onnx_checked: set[bool] = set()
        self._onnx_exported = False

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
        if "int8" in self.paths and not paths_mod.onnx_installed():
            return Readiness.no(self._no_onnx())
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
        """Load the model (and each path's copy) now, e.g. before timing; raises
        EmbedderUnavailable.  Also writes the torch-free query encoder's export where it
        applies (see :mod:`~indexplug_sentence_transformers.onnx_query`)."""
        for p in set(self.paths):
            self._path_model(p)
        self._export_query_encoder()

    # -- torch-free queries ------------------------------------------------------------------
    def onnx_query_allowed(self, granularity: Granularity = Granularity.TEXT) -> bool:
        """Whether this embedder's queries of ``granularity`` may run on the ONNX float32
        export: that granularity's path computes float32 on the CPU (``fp32``, or ``cuda``
        with no GPU) and queries are not asked for in bfloat16.  (``query_dtype = "auto"``
        allows it: float32 is the reference the bfloat16 default only approximates, and the
        export spares a cold process importing torch.)"""
        path = self._path_for(granularity)
        fp32 = path == "fp32" or (path == "cuda" and not paths_mod.gpu_present())
        on_cpu = self.device in (None, "cpu")
        return fp32 and on_cpu and self.query_dtype != "bfloat16"

    def _query_encoder(
        self, granularity: Granularity = Granularity.TEXT
    ) -> onnx_query.QueryEncoder | None:
        """The torch-free query encoder of ``granularity``, or None (then torch embeds it)."""
        tokens = granularity is Granularity.TOKEN
        if tokens in self._onnx_checked:
            return self._onnx_query.get(tokens)
        with self._lock:
            if tokens not in self._onnx_checked:
                if self.onnx_query_allowed(granularity):
                    self._onnx_query[tokens] = onnx_query.load(
                        self.source.name, self.source.folder(), self.max_seq_length, tokens=tokens
                    )
                self._onnx_checked.add(tokens)
        return self._onnx_query.get(tokens)

    def _export_query_encoder(self) -> None:
        """Write the ONNX export for torch-free queries, once, when torch is loaded anyway
        (one file serves text and token queries).  A failure leaves queries on torch (same
        vectors, slower start)."""
        if self._onnx_exported:
            return
        self._onnx_exported = True
        folder = self.source.folder()
        if (
            folder is None
            or onnx_query.engine() == "torch"
            or not onnx_query.runtime_installed()
            or not onnx_export.exporter_installed()
        ):
            return
        wanted = [
            g
            for g in (Granularity.TEXT, Granularity.TOKEN)
            if self.onnx_query_allowed(g)
            and onnx_query.plan_for(folder, tokens=g is Granularity.TOKEN) is not None
        ]
        if not wanted:
            return
        with self._lock:
            try:
                onnx_query.export(self._load(), self.source.name, folder)
            except Exception:
                return
            self._onnx_checked.clear()  # pick the fresh export up on the next query

    def _no_onnx(self) -> str:
        return (
            f"{self.name}: the int8 path needs onnxruntime, onnx and onnxscript (pip install "
            "'indexplug-sentence-transformers[onnx]'); no other path reproduces its vectors, so "
            "an index built with it cannot be searched without them"
        )

    def effective_path(self, path: str) -> str:
        """What actually runs for ``path`` here: ``cuda`` without a usable GPU runs ``fp32`` on
        the CPU (same vectors within float rounding); ``bf16`` without native bfloat16 runs
        emulated (same vectors, slower)."""
        if path == "cuda":
            import torch

            return "cuda" if torch.cuda.is_available() else "fp32"
        return path

    def _path_model(self, path: str) -> Any:
        """The model object that computes ``path`` (made once, under the lock)."""
        with self._lock:
            if path in self._path_models:
                return self._path_models[path]
            if path == "int8" and not paths_mod.onnx_installed():
                raise EmbedderUnavailable(self._no_onnx())
            model = self._load()
            try:
                made = self._make_path_model(model, self.effective_path(path))
            except EmbedderUnavailable:
                raise
            except Exception as exc:
                raise EmbedderUnavailable(
                    f"{self.name}: preparing the {path} path failed: {type(exc).__name__}: {exc}"
                ) from exc
            self._path_models[path] = made
            return made

    def _make_path_model(self, model: Any, path: str) -> Any:
        import copy

        import torch

        if path == "fp32":
            return model
        if path == "bf16":
            return copy.deepcopy(model).to(torch.bfloat16)
        if path == "cuda":
            return copy.deepcopy(model).to("cuda")
        from indexplug_sentence_transformers import onnx_int8

        folder = self.source.folder()
        if folder is None:
            raise EmbedderUnavailable(f"{self.name}: the model's files are not on disk")
        onnx_file = onnx_int8.export_int8(model, self.source.name, folder)
        quant = copy.deepcopy(model).cpu()
        onnx_int8.run_transformer_with(quant, onnx_int8.session(onnx_file))
        return quant

    # -- embedding ---------------------------------------------------------------------------
    def _encode(self, texts: Sequence[str], granularity: Granularity, *, query: bool) -> Any:
        self._load()
        model = self._path_model(self._path_for(granularity))
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

    def _path_for(self, granularity: Granularity) -> str:
        return self.paths[0] if granularity is Granularity.TEXT else self.paths[1]

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
            runner = self._token_query_model(model)
            features = prepare([text])
            device = getattr(runner, "device", model.device)
            features = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in features.items()}
            out = runner(features)
        return out["token_embeddings"][0]

    def token_query_dtype(self) -> str:
        """The precision per-token query vectors are computed in (``query_dtype`` resolved)."""
        if self.paths[1] != "fp32":
            return "path"  # the token path computes queries as it computed passages
        if self.query_dtype != "auto":
            return self.query_dtype
        on_cpu = self.device in (None, "cpu") and str(self._load().device) == "cpu"
        return "bfloat16" if on_cpu and cpu_has_bf16_dot() else "float32"

    def _token_query_model(self, model: Any) -> Any:
        """``model`` itself, or (``bfloat16``) a bfloat16 copy of it, made once (~45 MB for
        MiniLM); with a token path other than fp32, that path's model."""
        if self.paths[1] != "fp32":
            return self._path_model(self.paths[1])
        if self.token_query_dtype() != "bfloat16":
            return model
        if self._query_model is None:
            import copy

            import torch

            self._query_model = copy.deepcopy(model).to(torch.bfloat16)
        return self._query_model

    def embed_documents(self, texts: Sequence[str], granularity: Granularity) -> list[Vector]:
        if not texts:
            return []
        out = self._encode(texts, granularity, query=False)
        self._export_query_encoder()
        if granularity is Granularity.TEXT:
            return list(_unit(np.asarray(out, dtype=np.float32)))
        return [_normalise_rows(t) for t in out]

    def _onnx_answers(self, granularity: Granularity) -> onnx_query.QueryEncoder | None:
        """The ONNX encoder that embeds this query, if it does (checked per query, as
        ``query_dtype`` may be changed on a live embedder).  Token queries: while the model is
        not loaded (a process that only searches), or with ``query_dtype = "auto"``; once the
        model is loaded, an explicit ``float32`` or ``bfloat16`` is the torch model's own."""
        if not self.onnx_query_allowed(granularity):
            return None
        if (
            granularity is Granularity.TOKEN
            and self._model is not None
            and self.query_dtype != "auto"
        ):
            return None
        return self._query_encoder(granularity)

    def embed_query(self, text: str, granularity: Granularity) -> Vector:
        fast = self._onnx_answers(granularity)
        if fast is not None:
            if granularity is Granularity.TOKEN and granularity not in self.granularities:
                raise ValueError(f"{self.name} does not produce {granularity.value} vectors")
            vec: Vector = (
                fast.encode(text) if granularity is Granularity.TEXT else fast.encode_tokens(text)
            )
            return vec
        if granularity is Granularity.TOKEN:
            direct = self._query_tokens_direct(text)
            if direct is not None:
                return _normalise_rows(direct)
        out = self._encode([text], granularity, query=True)
        if granularity is Granularity.TEXT:
            first: Vector = _unit(np.asarray(out, dtype=np.float32))[0]
            return first
        return _normalise_rows(out[0])


QUERY_DTYPES = ("auto", "float32", "bfloat16")


@lru_cache(maxsize=1)
def cpu_has_bf16_dot() -> bool:
    """Whether this CPU multiplies bfloat16 natively (x86 ``avx512_bf16`` or ``amx_bf16``).
    Elsewhere torch emulates bfloat16 matrix products, which is slower than float32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


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


def _unit(arr: Any) -> Any:
    """Rows rescaled to unit length in float32 (a bfloat16 model normalises in bfloat16, off
    by a few parts in a thousand)."""
    norms = np.linalg.norm(arr, axis=-1, keepdims=True)
    return (arr / np.maximum(norms, 1e-12)).astype(np.float32)


def _normalise_rows(tokens: Any) -> Vector:
    """One unit vector per token (float32, on the CPU)."""
    arr = tokens.detach().float().cpu().numpy() if hasattr(tokens, "detach") else tokens
    arr = np.asarray(arr, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    unit: Vector = (arr / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit
