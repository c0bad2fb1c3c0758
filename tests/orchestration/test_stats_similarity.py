"""``stats`` and ``similarity``, on invoke, its coroutine form (the MCP server's path) and the
CLI: stats counts what a scan reads on sqlite-fts5 (with its own figures) and on a dense test
backend (with its embedder); similarity scores with a dense index's own embedder and answers a
typed NOT_SUPPORTED on a lexical one."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from indexplug import Passage
from indexplug.config import load_config
from indexplug.embedders.hashing import HashingEmbedder
from indexplug.invocation import Invoker, exit_code
from indexplug.protocols import Granularity
from orchestration_support import check_schema
from test_mcp_http import LAUNCHER, _env

CONFIG = """
[defaults]
backend = "sqlite-fts5"

[indexes.docs]
max_bytes = 10000000

[indexes.dense]
backend = "test-dense"
[indexes.dense.settings]
store = "{store}"
dim = 64

[indexes.lazy]
backend = "test-dense"
[indexes.lazy.settings]
store = "{store}"
dim = 64
lazy = true

[indexes.both]
kind = "fusion"
members = ["docs", "dense"]
"""

TEXTS = [
    ("Otters hold hands while they sleep.", "mem://otters", "doc-1"),
    ("Otters eat fish and crabs.", "mem://otters", "doc-1"),
    ("Descale the kettle with vinegar.", "mem://kettle", None),
    ("Cats purr.", "mem://cats", "doc-2"),
]


@pytest.fixture
def inv(tmp_path: Path, write_config: Any, test_backends: None) -> Any:
    cfg = write_config(CONFIG.replace("{store}", tmp_path.name))
    with Invoker(load_config(cfg)) as invoker:
        for index in ("docs", "dense"):
            t = invoker.target(index)
            ps = [
                Passage.create(text, uri, start=n * 100, key=key)
                for n, (text, uri, key) in enumerate(TEXTS)
            ]
            assert t.guard.add(t.index, ps, max_bytes=t.max_bytes).ok
        yield invoker


def both(inv: Invoker, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """The answer of invoke, checked equal to the coroutine form's and against the schema."""
    sync = check_schema(inv.invoke(op, args))
    other = check_schema(asyncio.run(inv.ainvoke(op, args)))
    assert {k: v for k, v in sync.items() if k != "data"} == {
        k: v for k, v in other.items() if k != "data"
    }
    return sync


def test_stats_on_sqlite_fts5_agree_with_what_was_added(inv: Invoker) -> None:
    a = both(inv, "stats", {"index": "docs"})
    assert a["code"] == "STATS" and a["ok"] and exit_code(a) == 0, a
    d = a["data"]
    assert (d["passages"], d["scanned"]) == (4, 4)
    assert d["distinct_sources"] == 3 and d["distinct_keys"] == 2
    lengths = sorted(len(t) for t, _, _ in TEXTS)
    assert d["text_chars"]["min"] == lengths[0] and d["text_chars"]["max"] == lengths[-1]
    assert d["text_chars"]["p50"] == lengths[1]  # nearest rank: the 2nd of 4
    assert d["text_bytes"] == sum(len(t.encode()) for t, _, _ in TEXTS)
    assert d["max_bytes"] == 10_000_000 and 0 < d["bytes_used"] < d["max_bytes"]
    assert d["budget_used"] == pytest.approx(d["bytes_used"] / d["max_bytes"])
    assert d["scale"]["name"] == "fts5_bm25" and d["embedder"] is None
    assert d["last_write"] is not None and d["last_write"] > 1e9
    extras = d["extras"]
    assert extras["pages"] > 0 and extras["page_size"] > 0 and "fts5_data_rows" in extras
    assert d["notes"] == []


def test_stats_on_a_dense_backend_name_its_embedder(inv: Invoker) -> None:
    d = both(inv, "stats", {"index": "dense"})["data"]
    assert (d["passages"], d["scanned"], d["distinct_sources"]) == (4, 4, 3)
    assert (d["embedder"], d["dim"]) == ("hashing:64", 64)
    assert d["scale"]["name"] == "cosine"
    assert d["last_write"] is None and "does not say when" in d["notes"][0]


def test_stats_of_an_index_never_written_and_of_a_fusion(inv: Invoker) -> None:
    d = both(inv, "stats", {"index": "never"})["data"]
    assert (d["passages"], d["scanned"], d["text_chars"]) == (0, 0, None)
    a = both(inv, "stats", {"index": "both"})
    assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "index"
    for bad in ({"index": "../x"}, {"index": "docs", "deadline_s": -1}, {"index": "docs", "x": 1}):
        assert both(inv, "stats", bad)["code"] == "BAD_REQUEST", bad


def test_similarity_on_a_lexical_index_is_not_supported(inv: Invoker) -> None:
    for args in (
        {"index": "docs", "query": "otters", "texts": ["Otters hold hands."]},
        {"index": "docs", "query": "otters", "ids": ["0" * 64]},
    ):
        a = both(inv, "similarity", args)
        assert a["code"] == "NOT_SUPPORTED" and a["ok"] is False and a["data"] is None, a
        assert exit_code(a) == 69 and "fts5_bm25" in a["message"]


def test_similarity_scores_with_the_index_embedder(inv: Invoker) -> None:
    texts = ["Otters hold hands while they sleep.", "Descale the kettle with vinegar."]
    a = both(inv, "similarity", {"index": "dense", "query": texts[0], "texts": texts})
    assert a["code"] == "SIMILARITY" and a["ok"], a
    d = a["data"]
    assert d["scorer"] == "cosine" and d["scale"]["name"] == "cosine"
    assert [s["n"] for s in d["scores"]] == [0, 1] and d["scores"][0]["id"] is None
    same, other = (s["score"] for s in d["scores"])
    assert same == pytest.approx(1.0, abs=1e-5) and other < same
    e = HashingEmbedder(64)
    q = e.embed_query(texts[0], Granularity.TEXT)
    (v,) = e.embed_documents([texts[1]], Granularity.TEXT)
    assert other == pytest.approx(float(q @ v), abs=1e-5)  # the embedder's own cosine


def test_similarity_with_an_embedder_made_on_first_use(inv: Invoker) -> None:
    texts = ["Otters hold hands.", "Descale the kettle."]
    args = {"query": texts[0], "texts": texts}
    eager = both(inv, "similarity", {"index": "dense", **args})["data"]
    lazy = both(inv, "similarity", {"index": "lazy", **args})["data"]
    assert lazy["scorer"] == "cosine" and lazy["scores"] == eager["scores"]


def test_similarity_by_id_reads_the_stored_passages(inv: Invoker) -> None:
    t = inv.target("dense")
    page = t.guard.scan(t.index, limit=10)
    by_text = {p.text: p.id for p in page.passages}  # type: ignore[union-attr]
    ids = [by_text[TEXTS[2][0]], "f" * 64, by_text[TEXTS[0][0]]]
    d = both(inv, "similarity", {"index": "dense", "query": TEXTS[0][0], "ids": ids})["data"]
    assert [(s["n"], s["id"]) for s in d["scores"]] == [(0, ids[0]), (2, ids[2])]
    assert d["missing_ids"] == ["f" * 64]
    by_texts = both(
        inv,
        "similarity",
        {"index": "dense", "query": TEXTS[0][0], "texts": [TEXTS[2][0], TEXTS[0][0]]},
    )["data"]
    assert [s["score"] for s in d["scores"]] == pytest.approx(
        [s["score"] for s in by_texts["scores"]]
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"index": "dense", "query": "q"}, None),
        ({"index": "dense", "query": "q", "texts": ["a"], "ids": ["b"]}, None),
        ({"index": "dense", "query": "q", "texts": []}, "texts"),
        ({"index": "dense", "query": "q", "texts": ["  "]}, "texts"),
        ({"index": "dense", "query": "q", "texts": ["a"] * 101}, "texts"),
        ({"index": "dense", "query": "", "texts": ["a"]}, "query"),
        ({"index": "both", "query": "q", "texts": ["a"]}, "index"),
        ({"index": "dense", "query": "q", "ids": [7]}, "ids"),
    ],
)
def test_similarity_refuses_bad_requests(
    inv: Invoker, args: dict[str, Any], field: str | None
) -> None:
    a = both(inv, "similarity", args)
    assert a["code"] == "BAD_REQUEST", a
    if field is not None:
        assert (a["problem"]["field"] or "").startswith(field), a


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), *args],
        cwd=tmp_path,
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_stats_and_similarity(tmp_path: Path, write_config: Any) -> None:
    cfg = str(write_config(CONFIG.replace("{store}", "cli")))
    (tmp_path / "p.jsonl").write_text(json.dumps({"text": "Otters float.", "uri": "m://o"}))
    r = _cli(tmp_path, "add", "p.jsonl", "-i", "docs", "-c", cfg)
    assert r.returncode == 0, r.stderr
    r = _cli(tmp_path, "stats", "-i", "docs", "-c", cfg, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["passages"], d["scanned"], d["distinct_sources"]) == (1, 1, 1)
    r = _cli(tmp_path, "stats", "-i", "docs", "-c", cfg)
    assert r.returncode == 0 and "passages: 1 (scan: 1)" in r.stdout, r.stdout
    r = _cli(tmp_path, "similarity", "-i", "docs", "-c", cfg, "otters", "--text", "otters")
    assert r.returncode == 69 and "fts5_bm25" in r.stderr and "Traceback" not in r.stderr
    r = _cli(tmp_path, "similarity", "-i", "docs", "-c", cfg, "otters")
    assert r.returncode == 64 and "give --text or --id" in r.stderr
    r = _cli(tmp_path, "similarity", "-i", "dense", "-c", cfg, "otters", "-t", "otters", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["scores"][0]["score"] == pytest.approx(1.0, abs=1e-5)
    args = '{"index": "docs", "query": "q", "texts": ["q"]}'
    r = _cli(tmp_path, "invoke", "similarity", "-a", args, "-c", cfg)
    assert r.returncode == 69 and json.loads(r.stdout)["code"] == "NOT_SUPPORTED"


class _TokenOnly:
    """The hashing embedder offering token vectors only (as a late-interaction model does)."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.name, self.dim = "hashing-tokens", 64
        self.granularities = frozenset({Granularity.TOKEN})

    def readiness(self) -> Any:
        return self.inner.readiness()

    def embed_documents(self, texts: Any, granularity: Granularity) -> Any:
        assert granularity is Granularity.TOKEN
        return self.inner.embed_documents(texts, granularity)

    def embed_query(self, text: str, granularity: Granularity) -> Any:
        assert granularity is Granularity.TOKEN
        return self.inner.embed_query(text, granularity)


def test_similarity_with_token_vectors_is_maxsim() -> None:
    import numpy as np
    from indexplug.similarity import _embedded

    e = _TokenOnly()
    query, texts = "otters hold hands", ["otters hold hands", "kettles boil water"]
    ps = [Passage.create(t, f"mem://{i}") for i, t in enumerate(texts)]
    got = _embedded(e, query, ps, [(0, None), (1, None)], [])  # type: ignore[arg-type]
    assert got.scorer == "maxsim" and got.scale is not None and got.scale.name == "maxsim"
    q = e.embed_query(query, Granularity.TOKEN)
    for s, d in zip(got.scores, e.embed_documents(texts, Granularity.TOKEN), strict=True):
        assert s.score == pytest.approx(float(np.max(q @ d.T, axis=1).sum()), abs=1e-4)
    assert got.scores[0].score == pytest.approx(3.0, abs=1e-4)  # each query token found
    assert got.scores[1].score < got.scores[0].score


class _Stuck:
    """A text embedder that raises, or blocks until released: faults a real model can have
    (a missing file, a hung accelerator) and a test cannot make it have on demand."""

    name, dim, granularities = "stuck", 64, frozenset({Granularity.TEXT})

    def __init__(self, *, raises: bool) -> None:
        import threading

        self.raises = raises
        self.release = threading.Event()

    def readiness(self) -> Any:
        from indexplug.protocols import Readiness

        return Readiness.yes()

    def embed_documents(self, texts: Any, granularity: Granularity) -> Any:
        if self.raises:
            raise OSError("model file missing")
        self.release.wait(30)
        return HashingEmbedder(64).embed_documents(texts, granularity)

    def embed_query(self, text: str, granularity: Granularity) -> Any:
        return HashingEmbedder(64).embed_query(text, granularity)


@pytest.mark.parametrize("raises", [True, False])
def test_similarity_embedding_keeps_the_deadline_and_never_raises(
    inv: Invoker, raises: bool
) -> None:
    t = inv.target("dense")
    stuck = _Stuck(raises=raises)
    t.guard.backend.embedder = stuck  # type: ignore[attr-defined]
    try:
        args = {"index": "dense", "query": "otters", "texts": ["Otters."], "deadline_s": 0.5}
        a = check_schema(inv.invoke("similarity", args))
    finally:
        stuck.release.set()
    if raises:
        assert a["code"] == "INDEX_FAILED" and "model file missing" in a["message"], a
    else:
        assert a["code"] == "INDEX_TIMEOUT" and a["ok"] is False, a
    assert exit_code(a) != 0
