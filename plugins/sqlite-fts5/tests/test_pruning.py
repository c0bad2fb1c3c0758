"""Every ranking must give the same answer: the same rows, in the same order, same scores.

The pruned ranking (``pruning``) and the ranking from postings held in memory (``postings``)
are compared with :func:`reference`, which scores every match: BM25 with Lucene's idf, each
phrase's summand FTS5's own one-phrase bm25() rescaled from FTS5's idf to Lucene's, added in the
query's order, ties by rowid.  The comparison is ``==`` (floats included: every path multiplies
and adds the same numbers in the same order, so the scores are bit-identical, not merely close);
:func:`test_scores_are_bm25_with_lucene_idf` checks that reference against BM25 computed from the
tokens themselves.
"""

from __future__ import annotations

import math
import os
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from indexplug import Guard, Indexed, Passage, Searched
from indexplug.outcomes import Hit
from indexplug_sqlite_fts5 import SqliteFts5Backend, postings, pruning
from indexplug_sqlite_fts5.backend import _SCHEMA
from indexplug_sqlite_fts5.hits import hit as make_hit
from indexplug_sqlite_fts5.hits import passage_from_row
from indexplug_sqlite_fts5.query import fts5_phrase, query_terms

SCIFACT = Path(
    os.environ.get(
        "INDEXPLUG_SCIFACT", Path(__file__).resolve().parents[4] / "shared/data/beir/scifact"
    )
)

VOCAB = [f"w{i}" for i in range(40)]
"""A Zipf-like vocabulary: ``w0`` is in most documents, ``w39`` in a handful."""
EXTRA = ["state-of-the-art", "naïve", "x²", "co2", "ünïcödé", "", "and", "the"]
"""Terms that tokenize to several tokens, fold diacritics, are stop words or match nothing."""


def reference(conn: sqlite3.Connection, terms: list[str], k: int) -> list[tuple[int, float]]:
    """Every row matching a term, scored term by term from FTS5's one-phrase bm25()."""
    n_rows = conn.execute("SELECT count(*) FROM fts_docsize").fetchone()[0]
    scores: dict[int, float] = {}
    for term in terms:
        sql = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ?"
        rows = conn.execute(sql, (fts5_phrase(term),)).fetchall()
        n = len(rows)
        lucene = math.log(1 + (n_rows - n + 0.5) / (n + 0.5))
        classic = max(math.log((n_rows - n + 0.5) / (n + 0.5)), 0.0) or 1e-6  # FTS5's floor
        for rowid, bm25 in rows:
            scores[rowid] = scores.get(rowid, 0.0) + bm25 * (-lucene / classic)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]


def new_index(path: Path | str = ":memory:") -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript("BEGIN;" + _SCHEMA + "COMMIT;")
    return conn


def insert(conn: sqlite3.Connection, texts: list[str]) -> None:
    conn.execute("BEGIN")
    last = conn.execute("SELECT coalesce(max(rowid), 0) FROM passages").fetchone()[0]
    conn.executemany(
        'INSERT INTO passages(id, text, source, start, "end", metadata) '
        "VALUES (?, ?, '{}', 0, 0, '{}')",
        [(f"{last + i:064x}", t) for i, t in enumerate(texts, start=1)],
    )
    conn.execute(
        "INSERT INTO fts(rowid, text) SELECT rowid, text FROM passages WHERE rowid > ?", (last,)
    )
    conn.execute("COMMIT")


def delete(conn: sqlite3.Connection, rowids: list[int]) -> None:
    conn.execute("BEGIN")
    for rowid in rowids:
        row = conn.execute("SELECT rowid, text FROM passages WHERE rowid = ?", (rowid,)).fetchone()
        if row is not None:
            conn.execute("INSERT INTO fts(fts, rowid, text) VALUES ('delete', ?, ?)", row)
            conn.execute("DELETE FROM passages WHERE rowid = ?", (rowid,))
    conn.execute("COMMIT")


def pruned(
    conn: sqlite3.Connection, stats: pruning.TermStats, terms: list[str], k: int
) -> list[tuple[int, float]]:
    """The pruned answer, in a read transaction as the backend runs it."""
    conn.execute("BEGIN")
    try:
        stats.sync(conn, conn.execute("PRAGMA data_version").fetchone()[0])
        return pruning.top_k(conn, stats, terms, k, min_postings=0)
    finally:
        conn.execute("ROLLBACK")


def in_memory(
    conn: sqlite3.Connection,
    stats: pruning.TermStats,
    terms: list[str],
    k: int,
    budget: int = 1 << 30,
) -> list[tuple[int, float]]:
    """The answer ranked from postings in memory, in a read transaction as the backend runs it
    (``budget``: where the held postings start over; a term is held even if alone over it)."""
    conn.execute("BEGIN")
    try:
        stats.sync(conn, conn.execute("PRAGMA data_version").fetchone()[0])
        before = stats.in_memory
        got = postings.top_k(conn, stats, terms, k, budget_bytes=budget)
        assert stats.in_memory == before + 1
        largest = max(len(r) for r, _ in stats.postings.values()) * pruning.BYTES_PER_POSTING
        assert stats.postings_bytes <= max(budget, largest)
        return got
    finally:
        conn.execute("ROLLBACK")


def zipf_doc(rng: random.Random, length: int) -> str:
    words = [VOCAB[min(int(rng.paretovariate(0.9)) - 1, len(VOCAB) - 1)] for _ in range(length)]
    if rng.random() < 0.1:
        words.append(rng.choice(EXTRA[:5]))
    return " ".join(words)


# -- hypothesis: random corpora, queries, k and thresholds ----------------------------------

RANDOM_CORPUS = {
    "seed": st.integers(0, 2**32 - 1),
    "n_docs": st.integers(1, 120),
    "queries": st.lists(
        st.lists(st.sampled_from(VOCAB + EXTRA), min_size=1, max_size=10), min_size=1, max_size=6
    ),
    "k": st.sampled_from([1, 2, 3, 5, 10, 25, 200]),
    "deletions": st.integers(0, 15),
}
"""What both rankings are compared with FTS5 on: a corpus, some deleted, queries and k."""


def random_index(seed: int, n_docs: int, deletions: int) -> sqlite3.Connection:
    rng = random.Random(seed)
    conn = new_index()
    insert(conn, [zipf_doc(rng, rng.randint(1, 30)) for _ in range(n_docs)])
    delete(conn, rng.sample(range(1, n_docs + 1), min(deletions, n_docs - 1)))
    return conn


def as_terms(words: list[str]) -> list[str]:
    """Raw phrases, not just query_terms' output: several tokens, none, or stop words."""
    return [t for t in dict.fromkeys(words) if t] or ["w0"]


@settings(max_examples=120, deadline=None)
@given(
    **RANDOM_CORPUS,
    guess=st.sampled_from([0.01, 0.3, 1.0, 5.0]),
    budget=st.sampled_from([0, 2, 16]),
)
def test_pruned_equals_fts5_on_random_corpora(
    seed: int,
    n_docs: int,
    queries: list[list[str]],
    k: int,
    guess: float,
    budget: int,
    deletions: int,
) -> None:
    # guess: far too low (many candidates), typical, too high (a second round) or above any
    # score (every round fails and the plain query answers).  budget 0 is plain MaxScore.
    conn = random_index(seed, n_docs, deletions)
    stats = pruning.TermStats()
    old = (pruning.FIRST_GUESS, pruning.BUILD_BUDGET)
    pruning.FIRST_GUESS, pruning.BUILD_BUDGET = guess, budget
    try:
        for terms in map(as_terms, queries):
            assert pruned(conn, stats, terms, k) == reference(conn, terms, k), terms
    finally:
        pruning.FIRST_GUESS, pruning.BUILD_BUDGET = old


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    theta_share=st.floats(0.0, 1.0),
    budget=st.sampled_from([0, 1, 3, 8, 256]),
)
def test_candidates_contain_every_row_that_could_reach_the_threshold(
    seed: int, theta_share: float, budget: int
) -> None:
    """The soundness the exactness rests on: a row left out has bounds summing below θ."""
    rng = random.Random(seed)
    conn = new_index()
    docs = [zipf_doc(rng, rng.randint(1, 20)) for _ in range(80)]
    insert(conn, docs)
    terms = rng.sample(VOCAB, rng.randint(1, 12))
    stats = pruning.TermStats()
    stats.sync(conn, 0)
    dfs = stats.doc_freqs(conn, terms)
    bounds = pruning.Bounds.of(terms, dfs, stats.rows)
    assume(bounds.terms)
    theta = bounds.tails[0] * theta_share
    old = pruning.BUILD_BUDGET
    pruning.BUILD_BUDGET = budget
    try:
        expression = pruning.candidate_expression(bounds, theta)
    finally:
        pruning.BUILD_BUDGET = old
    upper = dict(zip(bounds.terms, bounds.upper, strict=True))
    must = {
        rowid
        for rowid, text in enumerate(docs, start=1)
        if sum(u for t, u in upper.items() if t in text.split()) >= theta
    }
    if expression is None:  # "cannot narrow": the caller runs the full query
        return
    got = {r for (r,) in conn.execute("SELECT rowid FROM fts WHERE fts MATCH ?", (expression,))}
    assert must <= got


def test_bounds_are_above_every_real_contribution() -> None:
    """Each phrase's share of a row's score (the single-phrase query's) is below u(p)."""
    rng = random.Random(7)
    conn = new_index()
    insert(conn, [zipf_doc(rng, rng.randint(1, 40)) for _ in range(300)])
    stats = pruning.TermStats()
    stats.sync(conn, 0)
    for term, df in zip(VOCAB, stats.doc_freqs(conn, VOCAB), strict=True):
        bound = pruning.idf(stats.rows, df) * (pruning.K1 + 1)
        scale = pruning.summand_scale(stats.rows, df)
        rows = conn.execute(
            "SELECT bm25(fts) FROM fts WHERE fts MATCH ?", (fts5_phrase(term),)
        ).fetchall()
        assert len(rows) == df
        assert all(0 < b * scale < bound for (b,) in rows), term


@settings(max_examples=120, deadline=None)
@given(
    **RANDOM_CORPUS,
    dense=st.booleans(),
    budget=st.sampled_from([1 << 30, 256, 0]),
)
def test_in_memory_equals_fts5_on_random_corpora(
    seed: int,
    n_docs: int,
    queries: list[list[str]],
    k: int,
    deletions: int,
    dense: bool,
    budget: int,
) -> None:
    # dense: scores in an array indexed by rowid, or (forced) one entry per distinct row; a
    # small budget makes the held postings start over mid-search (0: before every term)
    conn = random_index(seed, n_docs, deletions)
    stats = pruning.TermStats()
    old = (postings.DENSE_SLACK, postings.DENSE_MIN)
    if not dense:
        postings.DENSE_SLACK, postings.DENSE_MIN = 0, 0
    try:
        for terms in map(as_terms, queries + queries):  # the second time from held postings
            assert in_memory(conn, stats, terms, k, budget) == reference(conn, terms, k)
    finally:
        postings.DENSE_SLACK, postings.DENSE_MIN = old


def test_tokens_are_the_ones_the_index_holds() -> None:
    """``fits`` rests on the averages record's token total: every row's sizes added up."""
    conn = new_index()
    insert(conn, ["alpha beta gamma", "one two", "x " * 200, "naïve state-of-the-art"])
    delete(conn, [2])
    rows, tokens = pruning._averages(conn)
    sizes = [pruning._varints(b) for (b,) in conn.execute("SELECT sz FROM fts_docsize")]
    assert rows == 3 == len(sizes)
    assert tokens == sum(sum(s) for s in sizes) == 3 + 200 + 5
    assert pruning._varints(bytes([0x81, 0x00, 0x05])) == [128, 5]
    assert pruning._varints(bytes([0x81])) == []
    stats = pruning.TermStats(rows=rows, tokens=tokens)
    assert pruning.fits(stats, tokens * pruning.BYTES_PER_POSTING)
    assert not pruning.fits(stats, tokens * pruning.BYTES_PER_POSTING - 1)
    assert not pruning.fits(pruning.TermStats(), 1 << 30)  # nothing known: never


def test_row_count_is_the_one_bm25_uses() -> None:
    conn = new_index()
    insert(conn, [f"w{i % 7} w{i % 3}" for i in range(300)])
    delete(conn, list(range(1, 40)))
    assert (
        pruning._row_count(conn)
        == 261
        == conn.execute("SELECT count(*) FROM fts_docsize").fetchone()[0]
    )
    assert pruning._varint(bytes([0x81, 0x00])) == 128
    assert pruning._varint(bytes([0xFF] * 8 + [0x01])) == (2**56 - 1) << 8 | 1
    assert pruning._varint(bytes([0x81])) == 0  # truncated: unknown


def test_statistics_follow_writes_from_other_connections(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    writer = new_index(path)
    insert(writer, [f"common w{i % 5}" + (" rare" if i % 50 == 0 else "") for i in range(500)])
    reader = sqlite3.connect(path, isolation_level=None)
    stats = pruning.TermStats()
    terms = ["rare", "common", "w1"]
    for k in (1, 5, 50):
        assert pruned(reader, stats, terms, k) == reference(reader, terms, k)
    before = dict(stats.df)
    insert(writer, ["rare rare rare common"] * 40)  # rare is no longer rare
    for k in (1, 5, 50):
        assert pruned(reader, stats, terms, k) == reference(reader, terms, k)
    assert stats.df["rare"] == before["rare"] + 40
    for k in (1, 5, 50):
        assert in_memory(reader, stats, terms, k) == reference(reader, terms, k)
    held = len(stats.postings["rare"][0])
    insert(writer, ["rare common"] * 7)
    for k in (1, 5, 50):
        assert in_memory(reader, stats, terms, k) == reference(reader, terms, k)
    assert len(stats.postings["rare"][0]) == held + 7


# -- through the backend and the guard ------------------------------------------------------


@pytest.fixture(params=["in memory", "pruned"])
def guard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Guard]:
    """The backend ranking from postings in memory (its default for an index this small) and,
    with ``postings_mb=0``, by the pruned FTS5 query."""
    mb = 64 if request.param == "in memory" else 0
    g = Guard(SqliteFts5Backend(tmp_path / "idx", postings_mb=mb))
    yield g
    g.close()


_SEEN_STATS: list[tuple[object, str, pruning.TermStats]] = []
"""Every (backend, index, statistics) a search used, whichever worker thread ran it."""


@pytest.fixture(autouse=True)
def _record_term_stats(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real = SqliteFts5Backend._term_stats

    def recording(self: SqliteFts5Backend, index: str, conn: Any) -> pruning.TermStats:
        stats = real(self, index, conn)
        if not any(s is stats for _, _, s in _SEEN_STATS):
            _SEEN_STATS.append((self, index, stats))
        return stats

    monkeypatch.setattr(SqliteFts5Backend, "_term_stats", recording)
    yield
    _SEEN_STATS.clear()


def ranked_by(g: Guard, index: str) -> tuple[int, int]:
    """(searches ranked in memory, searches ranked by the pruned query), over every worker
    thread the guard ran this backend's searches on."""
    mine = [s for b, i, s in _SEEN_STATS if b is g.backend and i == index]
    return sum(s.in_memory for s in mine), sum(sum(s.rounds) for s in mine)


def passages(rng: random.Random, n: int, prefix: str) -> list[Passage]:
    return [
        Passage.create(zipf_doc(rng, rng.randint(3, 40)), f"mem://{prefix}/{i}") for i in range(n)
    ]


def guarded_reference(path: Path, query: str, k: int) -> list[tuple[str, float]]:
    with sqlite3.connect(path) as conn:
        ranked = reference(conn, query_terms(query), k)
        ids = dict(conn.execute("SELECT rowid, id FROM passages"))
    return [(ids[r], s) for r, s in ranked]


def test_guarded_search_equals_fts5_across_writes(guard: Guard, tmp_path: Path) -> None:
    """Own writes (which ``data_version`` does not report) must refresh the statistics too."""
    rng = random.Random(3)
    path = tmp_path / "idx" / "docs.sqlite"
    queries = [" ".join(rng.sample(VOCAB, rng.randint(1, 8))) for _ in range(25)]
    batches = [passages(rng, 400, f"b{b}") for b in range(3)]
    for b, batch in enumerate(batches):
        assert isinstance(guard.add("docs", batch), Indexed)
        if b == 2:
            gone = [p.id for p in batches[0][:150]]
            assert guard.remove("docs", gone).removed == 150  # type: ignore[union-attr]
        for q in queries:
            for k in (1, 10, 100):
                out = guard.search("docs", q, top_k=k)
                assert isinstance(out, Searched)
                got = [(h.passage.id, h.score) for h in out.hits]
                assert got == guarded_reference(path, q, k), (q, k)
    on = guard.backend.postings_bytes > 0  # type: ignore[attr-defined]
    # the process's first search on the index is ranked by FTS5 (pruned), so that a one-search
    # process loads no numpy; the rest, on whichever thread, are ranked in memory
    in_memory = ranked_by(guard, "docs")[0]
    assert in_memory == (3 * 25 * 3 - 1 if on else 0)


def _realistic_corpus() -> tuple[list[Passage], list[str]]:
    """SciFact (5,183 abstracts, 300 test queries) where it is on the machine; elsewhere a
    seeded corpus of the same size with a Zipf-distributed vocabulary and queries of 2 to 12
    words from across the frequency range, so the comparison always runs on text of
    realistic shape (a common head, a long tail) rather than being skipped."""
    if (SCIFACT / "corpus.jsonl").is_file():
        from indexplug.evaluation import corpus_passages, load_beir

        ds = load_beir(SCIFACT)
        return list(corpus_passages(ds)), list(ds.queries.values())
    rng = random.Random(11)
    vocab = [f"t{i}x" for i in range(20_000)]
    weights = [1.0 / (r + 1) for r in range(len(vocab))]
    docs = [" ".join(rng.choices(vocab, weights, k=rng.randint(40, 250))) for _ in range(5_183)]
    ps = [Passage.create(t, f"synthetic://{i}") for i, t in enumerate(docs)]
    queries = [
        " ".join(rng.choice(vocab[: rng.choice((50, 2_000, 20_000))]) for _ in range(n))
        for n in (rng.randint(2, 12) for _ in range(300))
    ]
    return ps, queries


@pytest.mark.slow
def test_realistic_corpus_pruned_equals_fts5(tmp_path: Path) -> None:
    ps, queries = _realistic_corpus()
    g = Guard(SqliteFts5Backend(tmp_path))
    for i in range(0, len(ps), 1000):
        assert isinstance(g.add("scifact", ps[i : i + 1000]), Indexed)
    path = tmp_path / "scifact.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    stats, memory = pruning.TermStats(), pruning.TermStats()
    for q in queries:
        terms = query_terms(q)
        for k in (1, 10, 100, 1000):
            expected = reference(conn, terms, k)
            assert pruned(conn, stats, terms, k) == expected, (q, k)
            assert in_memory(conn, memory, terms, k) == expected, (q, k)
    for q in queries[:100]:
        out = g.search("scifact", q, top_k=100)
        assert isinstance(out, Searched)
        assert [(h.passage.id, h.score) for h in out.hits] == guarded_reference(path, q, 100)
    # SciFact's postings fit the default 64 MB: all but each worker thread's first search are
    # ranked in memory
    assert 50 <= ranked_by(g, "scifact")[0] < 100
    g.close()


# -- hits built without validation ----------------------------------------------------------


def test_fast_hits_are_the_models_pydantic_would_build() -> None:
    p = Passage.create(
        "Some text about alpha.", "mem://a/1", start=3, metadata={"n": 1, "ok": True}
    )
    row = (
        p.id,
        p.text,
        p.source.model_dump_json(exclude_none=True),
        None,
        3,
        p.end,
        '{"n": 1, "ok": true}',
        p.digest,
        None,
    )
    q = passage_from_row(row)
    assert q == p and q.model_fields_set == p.model_fields_set
    assert q.model_dump_json() == p.model_dump_json()
    slow = Hit.model_construct(
        rank=2, score=1.5, score_scale="s", passage=q, untrusted=True, vector=None
    )
    fast = make_hit(2, 1.5, "s", q)
    assert fast == slow and fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump_json() == slow.model_dump_json()
    assert Hit.model_validate_json(fast.model_dump_json()) == fast
    with pytest.raises(Exception):
        fast.rank = 3  # type: ignore[misc]
    altered = passage_from_row((p.id, "tampered", *row[2:]))
    assert altered.expected_id() != altered.id  # still built; the guard refuses to serve it
    relabelled = passage_from_row((*row[:6], '{"n": 2, "ok": true}', p.digest, None))
    assert relabelled.expected_digest() != relabelled.digest
    assert math.isfinite(fast.score)


def test_an_index_past_the_postings_budget_is_ranked_by_fts5(tmp_path: Path) -> None:
    rng = random.Random(4)
    docs = passages(rng, 600, "p")
    budget = Guard(SqliteFts5Backend(tmp_path / "a", postings_mb=0.01))  # 10,485 bytes
    roomy = Guard(SqliteFts5Backend(tmp_path / "b"))
    for g in (budget, roomy):
        assert isinstance(g.add("docs", docs), Indexed)
    for q in ["w0 w3 w17", "w1 w39", "w2"] * 3:
        a, b = budget.search("docs", q, top_k=20), roomy.search("docs", q, top_k=20)
        assert isinstance(a, Searched) and isinstance(b, Searched)
        assert [(h.passage.id, h.score) for h in a.hits] == [
            (h.passage.id, h.score) for h in b.hits
        ]
    assert ranked_by(budget, "docs")[0] == 0
    assert ranked_by(roomy, "docs")[0] >= 1  # a thread's first search is FTS5's, pruned
    assert budget.status("docs").details["ranking"] == "fts5 (pruned)"  # type: ignore[union-attr]
    assert roomy.status("docs").details["ranking"] == "postings in memory"  # type: ignore[union-attr]
    stats = next(st for b, i, st in _SEEN_STATS if b is roomy.backend and st.in_memory)
    assert 0 < stats.postings_bytes <= stats.tokens * pruning.BYTES_PER_POSTING
    with pytest.raises(ValueError, match="postings_mb"):
        SqliteFts5Backend(tmp_path / "c", postings_mb=-1)
    budget.close()
    roomy.close()


def test_no_pruning_below_the_size_threshold_and_with_filters(guard: Guard) -> None:
    rng = random.Random(11)
    guard.add("small", passages(rng, 30, "s"))
    out = guard.search("small", "w0 w1 w5", top_k=5)
    assert isinstance(out, Searched) and len(out.hits) == 5
    out = guard.search("small", "w0 w1 w5", top_k=5, filters={"nope": 1})
    assert out.code == "NO_MATCH"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8))
def test_any_terms_rank_to_the_same_answer(words: list[str]) -> None:
    rng = random.Random(5)
    conn = new_index()
    insert(
        conn,
        [zipf_doc(rng, rng.randint(1, 25)) + " " + " ".join(words[: i % 3]) for i in range(150)],
    )
    terms = query_terms(" ".join(words + ["w0", "w3", "w20"]))
    stats, memory = pruning.TermStats(), pruning.TermStats()
    for k in (1, 7, 60):
        expected = reference(conn, terms, k)
        assert pruned(conn, stats, terms, k) == expected
        assert in_memory(conn, memory, terms, k) == expected


def test_threads_share_postings_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each thread has its own connection; once each has searched, a term's postings are
    read once for all of them while the index does not change (a cache per connection read
    them once a thread)."""
    from concurrent.futures import ThreadPoolExecutor

    from indexplug.deadlines import Deadline

    backend = SqliteFts5Backend(tmp_path)
    g = Guard(backend)
    pools = [ThreadPoolExecutor(1) for _ in range(3)]
    try:
        assert isinstance(g.add("docs", passages(random.Random(5), 300, "s")), Indexed)

        def search(pool: ThreadPoolExecutor, query: str) -> Any:
            return pool.submit(
                lambda: backend.search("docs", query, top_k=10, deadline=Deadline.after(30))
            ).result()

        for pool in pools:  # each thread's first search (the process's first: by FTS5)
            search(pool, VOCAB[-1])
        reads: list[str] = []
        real = postings.term_postings

        def counting(conn: Any, stats: pruning.TermStats, term: str, budget: int) -> Any:
            if term not in stats.postings:
                reads.append(term)
            return real(conn, stats, term, budget)

        monkeypatch.setattr(postings, "term_postings", counting)
        query = " ".join(VOCAB[:6])
        for pool in pools * 2:
            assert isinstance(search(pool, query), Searched)
        assert sorted(reads) == sorted(set(query_terms(query)))
    finally:
        for pool in pools:
            pool.shutdown()
        g.close()


def test_threads_sharing_postings_see_every_write(tmp_path: Path) -> None:
    """A thread whose connection last searched before a write (on another thread) ranks
    the index as it is now, exactly as FTS5 does, never from postings of before."""
    rng = random.Random(8)
    backend = SqliteFts5Backend(tmp_path)
    g = Guard(backend)
    path = tmp_path / "docs.sqlite"
    queries = [" ".join(rng.sample(VOCAB, rng.randint(1, 6))) for _ in range(6)]
    try:
        from concurrent.futures import ThreadPoolExecutor

        from indexplug.deadlines import Deadline

        with ThreadPoolExecutor(1) as a, ThreadPoolExecutor(1) as b:
            for batch in range(3):
                assert isinstance(g.add("docs", passages(rng, 200, f"w{batch}")), Indexed)
                for q in queries:
                    for pool in (a, b, a):
                        out = pool.submit(
                            lambda q=q: backend.search(
                                "docs", q, top_k=20, deadline=Deadline.after(30)
                            )
                        ).result()
                        assert isinstance(out, Searched)
                        got = [(h.passage.id, h.score) for h in out.hits]
                        assert got == guarded_reference(path, q, 20), q
    finally:
        g.close()


def test_searched_passages_are_remembered_by_exact_values() -> None:
    """A search's passage built before from a row of exactly the same values is reused; a
    row whose values are equal but of another type (``0.0`` for ``0``) is built anew, so the
    guard sees (and refuses) what is really stored."""
    from indexplug_sqlite_fts5.hits import searched_passage

    p = Passage.create("remembered text", "mem://remembered")
    row = (p.id, p.text, '{"uri":"mem://remembered"}', None, 0, p.end, "{}", p.digest, None)
    first = searched_passage(*row)
    assert first == p
    assert searched_passage(*row) is first
    floated = searched_passage(*row[:4], 0.0, *row[5:])
    assert floated is not first and type(floated.start) is float
    g = Guard(SqliteFts5Backend(Path("/nonexistent-never-used")))
    try:
        scale = SqliteFts5Backend.score_scale

        def checked(passage: Passage) -> object:
            out = Searched.from_stored(
                index="docs",
                backend="sqlite-fts5",
                hits=[make_hit(1, 1.0, scale.name, passage)],
                searched=1,
                scale=scale,
            )
            return g._checked_search(out, 10, 1.0, 0.0)

        assert isinstance(checked(first), Searched)
        assert not isinstance(checked(floated), Searched)
    finally:
        g.close()


# -- scores: BM25 with Lucene's idf, above 0 for every match --------------------------------


def lucene_bm25(docs: list[list[str]], terms: list[str]) -> dict[int, float]:
    """BM25 (k1 = 1.2, b = 0.75) with Lucene's idf from the tokens themselves, by rowid."""
    n_rows = len(docs)
    avgdl = sum(len(d) for d in docs) / n_rows
    scores: dict[int, float] = {}
    for term in terms:
        n = sum(term in d for d in docs)
        idf = math.log(1 + (n_rows - n + 0.5) / (n + 0.5))
        for rowid, doc in enumerate(docs, start=1):
            f = doc.count(term)
            if f:
                norm = 1.2 * (1 - 0.75 + 0.75 * len(doc) / avgdl)
                scores[rowid] = scores.get(rowid, 0.0) + idf * f * 2.2 / (f + norm)
    return scores


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_docs=st.integers(1, 60))
def test_scores_are_bm25_with_lucene_idf(seed: int, n_docs: int) -> None:
    """Whatever share of the rows a word is in (all of them included), its matches score its
    BM25 with Lucene's idf, computed here from the tokens: above 0."""
    rng = random.Random(seed)
    docs = [zipf_doc(rng, rng.randint(1, 30)).split() for _ in range(n_docs)]
    docs = [[w for w in d if w in VOCAB] or ["w0"] for d in docs]
    conn = new_index()
    insert(conn, [" ".join(d) for d in docs])
    stats, memory = pruning.TermStats(), pruning.TermStats()
    terms = rng.sample(VOCAB[:12], rng.randint(1, 6))
    expected = lucene_bm25(docs, terms)
    for got in (
        reference(conn, terms, 1000),
        pruned(conn, stats, terms, 1000),
        in_memory(conn, memory, terms, 1000),
    ):
        assert {r for r, _ in got} == set(expected)
        for rowid, score in got:
            assert score > 0
            assert math.isclose(score, expected[rowid], rel_tol=1e-9), (rowid, terms)


def test_a_word_in_most_passages_still_scores_its_matches_above_zero(tmp_path: Path) -> None:
    """A word in 3 passages of 4 (FTS5's bm25() gives it an idf of 1e-6) and the only passage
    of an index: every search path scores each match its BM25 with Lucene's idf, plainly
    above the 0 of a passage that does not match."""
    import asyncio

    texts = ["alpha beta", "alpha alpha gamma", "alpha delta epsilon zeta", "omega"]
    expected = lucene_bm25([t.split() for t in texts], ["alpha"])
    assert set(expected) == {1, 2, 3}
    for mb in (64, 0):  # ranked from postings in memory, or by FTS5 (pruned)
        g = Guard(SqliteFts5Backend(tmp_path / f"mb{mb}", postings_mb=mb))
        try:
            ps = [
                Passage.create(t, f"mem://most/{i}", metadata={"lang": "en"})
                for i, t in enumerate(texts, start=1)
            ]
            assert isinstance(g.add("most", ps), Indexed)
            ids = {p.id: i for i, p in enumerate(ps, start=1)}
            outs = [
                g.search("most", "alpha", top_k=10),  # the first search: FTS5, pruned
                g.search("most", "alpha", top_k=10),  # later ones: postings in memory
                g.search("most", "alpha", top_k=10, filters={"lang": "en"}),
                asyncio.run(g.asearch("most", "alpha", top_k=10)),
            ]
            for out in outs:
                assert isinstance(out, Searched)
                got = {ids[h.passage.id]: h.score for h in out.hits}
                assert got.keys() == expected.keys()  # "omega" is not a match
                for rowid, score in got.items():
                    assert round(score, 3) > 0.0
                    assert math.isclose(score, expected[rowid], rel_tol=1e-9)
            first, second = outs[0], outs[1]
            assert isinstance(first, Searched) and isinstance(second, Searched)
            assert [(h.passage.id, h.score) for h in first.hits] == [
                (h.passage.id, h.score) for h in second.hits
            ]
            assert isinstance(g.add("one", [Passage.create("alpha", "mem://one")]), Indexed)
            for _ in range(2):
                one = g.search("one", "alpha", top_k=3)
                assert isinstance(one, Searched) and len(one.hits) == 1
                assert math.isclose(one.hits[0].score, math.log(1 + 0.5 / 1.5) * 2.2 / 2.2)
        finally:
            g.close()


def test_batch_searches_score_a_common_word_above_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``batch_search`` (its queries on a pool of threads, or awaited) scores as search does."""
    import asyncio

    from indexplug import invoke
    from indexplug.invocation import Invoker

    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    texts = ["alpha beta", "alpha alpha gamma", "alpha delta epsilon zeta", "omega"]
    added = invoke(
        "add",
        {
            "index": "most",
            "passages": [{"text": t, "uri": f"mem://m/{i}"} for i, t in enumerate(texts)],
        },
    )
    assert added["code"] == "INDEXED"
    expected = sorted(lucene_bm25([t.split() for t in texts], ["alpha"]).values(), reverse=True)
    args = {"index": "most", "queries": ["alpha"] * 4, "top_k": 10}

    async def awaited() -> Any:
        with Invoker() as invoker:
            return await invoker.ainvoke("batch_search", args)

    for answer in (invoke("batch_search", args), asyncio.run(awaited())):
        results = answer["data"]["results"]
        assert len(results) == 4
        for result in results:
            scores = [h["score"] for h in result["data"]["hits"]]
            assert len(scores) == 3 and all(round(s, 3) > 0.0 for s in scores)
            assert all(math.isclose(s, e, rel_tol=1e-9) for s, e in zip(scores, expected))
