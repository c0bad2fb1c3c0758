"""The systems compared: indexplug backends (through the public, guarded API) and the raw
libraries a user would pick instead, each behind the same tiny runner interface.

A runner indexes ``(doc_id, text)`` batches and answers a query with doc ids in rank order.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

MINILM = "sentence-transformers:all-MiniLM-L6-v2"


class Runner(Protocol):
    def index(self, docs: list[tuple[str, str]]) -> None: ...
    def finish(self) -> None: ...
    def search(self, query: str, k: int) -> list[str]: ...
    def size_bytes(self) -> int | None: ...
    def close(self) -> None: ...


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def doc_ids(out: Any, failures: dict[str, int]) -> list[str]:
    """The BEIR doc ids of a search's hits in rank order (each passage's uri ends with its doc
    id); an answer that is not hits or a plain no-match is counted in ``failures`` by code (a
    fused answer missing a leg as ``DEGRADED``)."""
    if out.code == "SEARCHED":
        if getattr(out, "degraded", None):
            failures["DEGRADED"] = failures.get("DEGRADED", 0) + 1
        return [h.passage.source.uri.rsplit("/", 1)[-1] for h in out.hits]
    if out.code != "NO_MATCH":
        failures[out.code] = failures.get(out.code, 0) + 1
    return []


# -- indexplug -------------------------------------------------------------------------------
class IndexplugRunner:
    """An indexplug backend through ``Guard`` (what users call), never the plugin directly."""

    _made = 0

    def __init__(
        self, home: Path, backend: str, options: dict[str, Any], *, one_batch: bool = False
    ) -> None:
        os.environ["INDEXPLUG_HOME"] = str(home)
        from indexplug import Registry

        self.home = home
        self.guard = Registry().backend(backend, options, home=home / backend)
        # A name of its own: a server-backed index (Elasticsearch) outlives the fresh home
        # of a repeat, and a later repeat or corpus must not add into it (re-adding known ids
        # is cheap, so its indexing figure and its search would both be wrong).
        IndexplugRunner._made += 1
        self.index_name = f"bench-{os.getpid()}-{IndexplugRunner._made}"
        self.failures: dict[str, int] = {}
        self.one_batch = one_batch
        """Add the whole corpus in one call at ``finish`` (RAGatouille re-encodes everything it
        holds on every add, so batch by batch would cost the square of the corpus)."""
        self._held: list[Any] = []

    def index(self, docs: list[tuple[str, str]]) -> None:
        from indexplug_bench.warm import bench_passages

        passages = bench_passages(docs)
        if self.one_batch:
            self._held += passages
            return
        for i in range(0, len(passages), 2000):
            self._add(passages[i : i + 2000])

    def _add(self, passages: list[Any]) -> None:
        out = self.guard.add(self.index_name, passages, deadline_s=7200)
        if out.code != "INDEXED":
            raise RuntimeError(f"indexing failed: {out.message}")

    def finish(self) -> None:
        if self._held:
            self._add(self._held)
            self._held = []
        if callable(getattr(self.guard.backend, "op_optimize", None)):
            self.guard.call_extra("optimize", self.index_name, deadline_s=3600)

    def search(self, query: str, k: int) -> list[str]:
        return doc_ids(
            self.guard.search(self.index_name, query, top_k=k, deadline_s=60), self.failures
        )

    def size_bytes(self) -> int | None:
        st = self.guard.status(self.index_name)
        used = getattr(st, "bytes_used", None)
        return int(used) if used is not None else folder_bytes(self.home)

    def close(self) -> None:
        # dropped, not left behind: on a server it would hold memory and disk (1.7 GB for the
        # million-passage corpus) through every later measurement
        if callable(getattr(self.guard.backend, "op_drop", None)):
            self.guard.call_extra("drop", self.index_name, deadline_s=600)
        self.guard.close()


class FusionRunner:
    """An ad hoc fusion (:func:`indexplug.fusion.fuse_targets`, reciprocal rank fusion, k=60)
    of indexplug backends, each leg an :class:`IndexplugRunner` of its own: what
    ``indexplug search --index a --index b`` and a configured ``kind = "fusion"`` index do.
    Indexing feeds every leg (its figure is the legs' together); the size is theirs summed."""

    def __init__(self, home: Path, legs: list[tuple[str, dict[str, Any]]]) -> None:
        from indexplug.fusion import LEG_DEPTH, fuse_targets
        from indexplug.targets import Target

        self.home = home
        self.legs = [IndexplugRunner(home / f"leg{i}", b, o) for i, (b, o) in enumerate(legs)]
        self.fused = fuse_targets(
            [
                Target(index=r.index_name, backend_name=b, guard=r.guard)
                for r, (b, _) in zip(self.legs, legs, strict=True)
            ]
        )
        self.failures: dict[str, int] = {}
        self.note = f"indexing fills every leg; each leg's top {LEG_DEPTH} fused"

    def index(self, docs: list[tuple[str, str]]) -> None:
        for leg in self.legs:
            leg.index(docs)

    def finish(self) -> None:
        for leg in self.legs:
            leg.finish()

    def search(self, query: str, k: int) -> list[str]:
        return doc_ids(self.fused.search(query, top_k=k, deadline_s=60), self.failures)

    def size_bytes(self) -> int | None:
        sizes = [leg.size_bytes() for leg in self.legs]
        return sum(s for s in sizes if s is not None)

    def close(self) -> None:
        self.fused.guard.close()
        for leg in self.legs:
            leg.close()


# -- raw libraries ---------------------------------------------------------------------------
_WORD = re.compile(r"[^\W_]+")


class RawSqlite:
    """Raw ``sqlite3`` with FTS5 as a user would write it.

    ``same_query=False``: every query word quoted and OR-ed (the naive query).
    ``same_query=True``: the exact FTS5 expression the sqlite-fts5 backend builds, so the
    difference to the framework is the framework's own overhead.  Either is ranked by FTS5's
    ``bm25()``, with its classic idf; the backend's scores use Lucene's, so the rankings (and
    nDCG) differ slightly.
    """

    def __init__(self, home: Path, *, same_query: bool) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.path = home / "raw.sqlite"
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE VIRTUAL TABLE f USING fts5(doc_id UNINDEXED, text, "
            "tokenize='porter unicode61 remove_diacritics 2')"
        )
        self.same_query = same_query

    def index(self, docs: list[tuple[str, str]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO f(doc_id, text) VALUES (?, ?)", docs)
        self.db.execute("COMMIT")

    def finish(self) -> None:
        self.db.execute("INSERT INTO f(f) VALUES ('optimize')")

    def expression(self, query: str) -> str:
        if self.same_query:
            from indexplug_sqlite_fts5.query import fts5_expression, query_terms

            return fts5_expression(query_terms(query))
        return " OR ".join(f'"{w}"' for w in dict.fromkeys(_WORD.findall(query.lower())))

    def search(self, query: str, k: int) -> list[str]:
        expr = self.expression(query)
        if not expr:
            return []
        rows = self.db.execute(
            "SELECT doc_id, text FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (expr, k)
        ).fetchall()
        return [r[0] for r in rows]

    def size_bytes(self) -> int:
        return folder_bytes(self.path.parent)

    def close(self) -> None:
        self.db.close()


def _stemmed_tokens(texts: list[str]) -> list[list[str]]:
    import Stemmer
    from bm25s.stopwords import STOPWORDS_EN

    stem = Stemmer.Stemmer("english")
    stop = set(STOPWORDS_EN)
    return [stem.stemWords([w for w in _WORD.findall(t.lower()) if w not in stop]) for t in texts]


class RawBm25s:
    """``bm25s`` in memory, stemmed with English stop words (its documented recipe)."""

    def __init__(self, home: Path) -> None:
        self.ids: list[str] = []
        self.texts: list[str] = []
        self.retriever: Any = None

    def index(self, docs: list[tuple[str, str]]) -> None:
        self.ids += [d for d, _ in docs]
        self.texts += [t for _, t in docs]

    def finish(self) -> None:
        import bm25s
        import Stemmer

        self.stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize(
            self.texts, stopwords="en", stemmer=self.stemmer, show_progress=False
        )
        self.retriever = bm25s.BM25()
        self.retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int) -> list[str]:
        import bm25s

        q = bm25s.tokenize([query], stopwords="en", stemmer=self.stemmer, show_progress=False)
        if not q.ids or not q.ids[0]:
            return []
        docs, _ = self.retriever.retrieve(
            q, k=min(k, len(self.ids)), show_progress=False, n_threads=1
        )
        return [self.ids[int(i)] for i in docs[0]]

    def size_bytes(self) -> int | None:
        return None  # in memory only

    def close(self) -> None:
        pass


class RawRankBm25:
    """``rank_bm25``'s BM25Okapi over the same stemmed tokens."""

    def __init__(self, home: Path) -> None:
        self.ids: list[str] = []
        self.texts: list[str] = []

    def index(self, docs: list[tuple[str, str]]) -> None:
        self.ids += [d for d, _ in docs]
        self.texts += [t for _, t in docs]

    def finish(self) -> None:
        from rank_bm25 import BM25Okapi

        self.bm25 = BM25Okapi(_stemmed_tokens(self.texts))

    def search(self, query: str, k: int) -> list[str]:
        scores = self.bm25.get_scores(_stemmed_tokens([query])[0])
        top = np.argsort(-scores, kind="stable")[:k]
        return [self.ids[int(i)] for i in top if scores[int(i)] > 0]

    def size_bytes(self) -> int | None:
        return None

    def close(self) -> None:
        pass


class RawChroma:
    """Raw ``chromadb`` (embedded), embeddings from the same model, cosine space."""

    def __init__(self, home: Path, embedder_spec: str = MINILM) -> None:
        import chromadb
        from chromadb.config import Settings
        from indexplug import get_embedder

        self.home = home
        self.client = chromadb.PersistentClient(
            path=str(home / "chroma"), settings=Settings(anonymized_telemetry=False)
        )
        # the same search breadth as the indexplug chroma backend's default (ef_search 256;
        # Chroma's own is 100), so the two run the same search
        self.col = self.client.create_collection(
            "raw",
            configuration={"hnsw": {"space": "cosine", "ef_search": 256}},
            embedding_function=None,
        )
        self.embedder = get_embedder(embedder_spec)

    def index(self, docs: list[tuple[str, str]]) -> None:
        from indexplug import Granularity

        if os.environ.get("INDEXPLUG_EMBED_CACHE"):
            # ``run --embed-cache``: the same vectors from the same cache the indexplug dense
            # systems read, so both sides' indexing is the store's own work
            from indexplug.embedcache import cache_for, embed_passages

            from indexplug_bench.warm import bench_passages

            vecs = embed_passages(
                self.embedder,
                bench_passages(docs),
                Granularity.TEXT,
                cache=cache_for(self.embedder),
            )
        else:
            vecs = self.embedder.embed_documents([t for _, t in docs], Granularity.TEXT)
        for i in range(0, len(docs), 2000):
            part = docs[i : i + 2000]
            self.col.add(
                ids=[d for d, _ in part],
                documents=[t for _, t in part],
                embeddings=[v.tolist() for v in vecs[i : i + 2000]],
            )

    def finish(self) -> None:
        pass

    def search(self, query: str, k: int) -> list[str]:
        from indexplug import Granularity

        q = self.embedder.embed_query(query, Granularity.TEXT)
        res = self.col.query(
            query_embeddings=[q.tolist()], n_results=k, include=["documents", "distances"]
        )
        return list(res["ids"][0])

    def size_bytes(self) -> int:
        return folder_bytes(self.home / "chroma")

    def close(self) -> None:
        pass


class RawElastic:
    """The raw ``elasticsearch`` client: a text field and a ``match`` query, as a user writes it.

    The field uses the ``english`` analyzer where the server has it.  Elasticsearch's
    integ-test-zip (what CI and this harness run) ships without the analysis-common module, so
    there the field falls back to the ``standard`` analyzer (no stemming) and ``analyzer`` says
    so; the indexplug elastic backend stems on the client in that case, which is why its nDCG
    can be higher than this raw baseline's.
    """

    def __init__(self, home: Path, url: str) -> None:
        from elasticsearch import BadRequestError, Elasticsearch

        self.es = Elasticsearch(url, request_timeout=120)
        self.name = f"raw-bench-{os.getpid()}"
        self.es.options(ignore_status=404).indices.delete(index=self.name)
        settings = {"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"}
        for analyzer in ("english", "standard"):
            try:
                self.es.indices.create(
                    index=self.name,
                    settings=settings,
                    mappings={"properties": {"text": {"type": "text", "analyzer": analyzer}}},
                )
            except BadRequestError:
                continue
            self.analyzer = analyzer
            self.note = f"{analyzer} analyzer"
            break
        else:
            raise RuntimeError("the server accepted neither the english nor the standard analyzer")

    def index(self, docs: list[tuple[str, str]]) -> None:
        from elasticsearch import helpers

        helpers.bulk(
            self.es,
            ({"_index": self.name, "_id": d, "text": t} for d, t in docs),
            chunk_size=1000,
        )

    def finish(self) -> None:
        self.es.indices.refresh(index=self.name)

    def search(self, query: str, k: int) -> list[str]:
        # the text comes back with each hit, as every other system here returns it (a RAG
        # pipeline needs it); ids alone would be a lighter request than any user makes
        res = self.es.search(
            index=self.name, query={"match": {"text": query}}, size=k, source={"includes": ["text"]}
        )
        return [h["_id"] for h in res["hits"]["hits"]]

    def size_bytes(self) -> int:
        stats = self.es.indices.stats(index=self.name, metric="store")
        return int(stats["_all"]["primaries"]["store"]["size_in_bytes"])

    def close(self) -> None:
        self.es.options(ignore_status=404).indices.delete(index=self.name)
        self.es.close()


class RawElasticSameQuery(RawElastic):
    """The raw client searching the same words, analysed as the indexplug elastic backend
    analyses them, in the simplest index a user would write by hand: one document per passage.

    The passage text stored but not indexed, and a ``terms`` field of English-analysed words
    (the plugin's own analysis, on the client, as the backend does on a server without the
    English analyzer) searched with ``match``, one shard, the whole ``_source`` returned.  The
    backend's index is laid out otherwise: one document per key with its passages nested, so
    that a keyed write is atomic, and searched with a ``nested`` query whose inner hits are the
    passages.  So the difference between the two is the framework's own work (the passage
    count beside the ranked leg, which tells ``NO_MATCH`` from ``INDEX_EMPTY``, provenance,
    checks) plus what the nested layout costs; ``plugins/elastic/bench/layout_parity.py``
    measures the layout's share alone.

    ``orjson``: the client parses answers with orjson, as the backend's client does (the
    client's default is the standard library's ``json``, several times slower on a top-100
    answer): the raw library exactly as the framework uses it underneath, so the framework's
    choice of parser cannot hide its own cost.
    """

    def __init__(self, home: Path, url: str, *, orjson: bool = False) -> None:
        from elasticsearch import Elasticsearch
        from indexplug_elastic.analysis import EnglishAnalysis
        from indexplug_elastic.search import MAX_QUERY_TERMS

        self.analysis = EnglishAnalysis()
        self.max_terms = MAX_QUERY_TERMS
        parser: dict[str, Any] = {}
        if orjson:  # imported only here: the default variant does not need orjson installed
            from elasticsearch.serializer import OrjsonSerializer

            parser["serializer"] = OrjsonSerializer()
        self.es = Elasticsearch(url, request_timeout=120, **parser)
        self.name = f"raw-same-bench-{os.getpid()}-{'orjson' if orjson else 'json'}"
        self.es.options(ignore_status=404).indices.delete(index=self.name)
        self.es.indices.create(
            index=self.name,
            settings={"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"},
            mappings={
                "_source": {"excludes": ["terms"]},
                "properties": {
                    "text": {"type": "text", "index": False},
                    "terms": {"type": "text", "analyzer": "whitespace", "index_options": "freqs"},
                },
            },
        )
        self.note = "the backend's analysis, one document per passage"

    def index(self, docs: list[tuple[str, str]]) -> None:
        from elasticsearch import helpers

        helpers.bulk(
            self.es,
            (
                {"_index": self.name, "_id": d, "text": t, "terms": self.analysis.analyze(t)}
                for d, t in docs
            ),
            chunk_size=1000,
        )

    def finish(self) -> None:
        self.es.indices.refresh(index=self.name)
        self.es.indices.forcemerge(index=self.name, max_num_segments=1)

    def search(self, query: str, k: int) -> list[str]:
        text = " ".join(self.analysis.terms(query)[: self.max_terms])
        if not text:
            return []
        res = self.es.search(index=self.name, query={"match": {"terms": {"query": text}}}, size=k)
        return [h["_id"] for h in res["hits"]["hits"]]


# -- the catalogue ---------------------------------------------------------------------------
@dataclass(frozen=True)
class System:
    name: str
    kind: str  # "indexplug" or "raw"
    make: Callable[[Path, dict[str, Any]], Runner]
    needs: tuple[str, ...] = ()
    """Modules, backends ("backend:NAME"), embedders ("embedder:SPEC") or "elastic-url"."""
    raw_of: str | None = None
    """For an indexplug system: the raw system it is compared with (overhead ratio)."""
    versus: tuple[str, ...] = ()
    """Other systems measured alternating with it, as ``raw_of`` is: those the targets compare
    it with (sqlite-fts5 against bm25s and rank_bm25), or another baseline worth seeing beside
    it (elastic: the raw client with its default parser)."""
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _ip(
    backend: str, *, one_batch: bool = False, **options: Any
) -> Callable[[Path, dict[str, Any]], Runner]:
    def make(home: Path, ctx: dict[str, Any]) -> Runner:
        opts = {k: (ctx["elastic_url_list"] if v == "$ES" else v) for k, v in options.items()}
        return IndexplugRunner(home, backend, opts, one_batch=one_batch)

    return make


SYSTEMS: list[System] = [
    System(
        "indexplug sqlite-fts5",
        "indexplug",
        _ip("sqlite-fts5"),
        ("backend:sqlite-fts5",),
        raw_of="raw sqlite3 FTS5 (same query)",
        versus=("bm25s", "rank_bm25"),
    ),
    System(
        "raw sqlite3 FTS5 (same query)",
        "raw",
        lambda h, c: RawSqlite(h, same_query=True),
        ("indexplug_sqlite_fts5",),
    ),
    System("raw sqlite3 FTS5 (naive OR)", "raw", lambda h, c: RawSqlite(h, same_query=False)),
    System("bm25s", "raw", lambda h, c: RawBm25s(h), ("bm25s", "Stemmer")),
    System("rank_bm25", "raw", lambda h, c: RawRankBm25(h), ("rank_bm25", "Stemmer")),
    System(
        "indexplug chroma (MiniLM)",
        "indexplug",
        _ip("chroma", embedder=MINILM),
        ("backend:chroma", f"embedder:{MINILM}"),
        raw_of="raw chromadb (MiniLM)",
    ),
    System(
        "raw chromadb (MiniLM)",
        "raw",
        lambda h, c: RawChroma(h),
        ("chromadb", f"embedder:{MINILM}"),
    ),
    System(
        "indexplug elastic BM25",
        "indexplug",
        _ip("elastic", hosts="$ES", mode="bm25"),
        ("backend:elastic", "elastic-url"),
        raw_of="raw elasticsearch (same query, orjson)",
        versus=("raw elasticsearch (same query)",),
    ),
    System(
        "indexplug elastic kNN (MiniLM)",
        "indexplug",
        _ip("elastic", hosts="$ES", mode="knn", embedder=MINILM),
        ("backend:elastic", "elastic-url", f"embedder:{MINILM}"),
    ),
    System(
        "indexplug elastic hybrid (MiniLM)",
        "indexplug",
        _ip("elastic", hosts="$ES", mode="hybrid", embedder=MINILM),
        ("backend:elastic", "elastic-url", f"embedder:{MINILM}"),
    ),
    System(
        "raw elasticsearch (match)",
        "raw",
        lambda h, c: RawElastic(h, c["elastic_url"]),
        ("elasticsearch", "elastic-url"),
    ),
    System(
        "raw elasticsearch (same query)",
        "raw",
        lambda h, c: RawElasticSameQuery(h, c["elastic_url"]),
        ("elasticsearch", "indexplug_elastic", "elastic-url"),
        notes="the client's defaults (its answers parsed by the standard library's json)",
    ),
    System(
        "raw elasticsearch (same query, orjson)",
        "raw",
        lambda h, c: RawElasticSameQuery(h, c["elastic_url"], orjson=True),
        ("elasticsearch", "indexplug_elastic", "orjson", "elastic-url"),
        notes="the client as the backend configures it (orjson), the overhead's baseline",
    ),
    System(
        "indexplug colbert native (hashing)",
        "indexplug",
        _ip("colbert", engine="native", embedder="hashing:default"),
        ("backend:colbert",),
    ),
    System(
        "indexplug colbert native (MiniLM tokens)",
        "indexplug",
        _ip("colbert", engine="native", embedder=MINILM),
        ("backend:colbert", f"embedder:{MINILM}"),
    ),
    System(
        # the local MiniLM checkpoint (python -m indexplug_colbert.engines.ragatouille_checkpoint
        # builds it): nothing can be fetched from a model hub here
        "indexplug colbert RAGatouille (local MiniLM checkpoint)",
        "indexplug",
        _ip("colbert", one_batch=True, engine="ragatouille", checkpoint="minilm"),
        ("backend:colbert", "ragatouille"),
    ),
    System(
        "indexplug fusion (sqlite-fts5 + chroma MiniLM, RRF)",
        "indexplug",
        lambda h, c: FusionRunner(h, [("sqlite-fts5", {}), ("chroma", {"embedder": MINILM})]),
        ("backend:sqlite-fts5", "backend:chroma", f"embedder:{MINILM}"),
    ),
    System(
        "indexplug usearch (contrib, MiniLM)",
        "indexplug",
        _ip("usearch", embedder=MINILM),
        ("backend:usearch", f"embedder:{MINILM}"),
    ),
]

SCALE_SYSTEMS = {
    "indexplug sqlite-fts5": _ip("sqlite-fts5"),
    "indexplug elastic BM25": _ip("elastic", hosts="$ES", mode="bm25"),
    "indexplug colbert native (hashing)": _ip(
        "colbert", engine="native", embedder="hashing:default"
    ),
}


def by_name(name: str) -> System:
    for s in SYSTEMS:
        if s.name == name:
            return s
    raise KeyError(name)


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
