"""Exact top-k BM25 from each term's postings held in memory, for indexes that fit a budget.

Why
---
Even pruned (:mod:`indexplug_sqlite_fts5.pruning`), a top-100 search on SciFact spends most of
its time in FTS5 walking the rows that match the query's commonest terms: the 100th score is
low, so little can be pruned.  Libraries that keep their index in memory (bm25s) score the same
query in a fraction of a millisecond.  For an index small enough, this module keeps the same in
memory, derived from the SQLite file and exactly as fresh as it: what FTS5 would compute, read
once per term and reused until the index changes.

The scores (:mod:`indexplug_sqlite_fts5.pruning`, "Scores")
------------------------------------------------------------
A row's score for ``p1 OR p2 OR ...`` is the sum of each phrase's summand, BM25 with Lucene's
idf, and a phrase's summand is FTS5's bm25() of the one-phrase query ``p`` alone times
:func:`~indexplug_sqlite_fts5.pruning.summand_scale`.  So a term's postings are read with
``SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH '"term"'`` (FTS5's own tokenizer, stemming
and phrase matching; nothing re-implemented) and held as summands, and a query's scores are
those summands added in the query's order, starting from 0.0, in float64: the same products and
additions in the same order as the pruned ranking's, so the scores are bit-identical to it and
to the filtered search's.  Ties are broken by rowid, as the others break them.

When
----
Only when every posting of the index could be held within the budget: ``16 bytes x`` the tokens
in the index (FTS5's averages record; a row holds at most one posting per token it contains)
must not exceed ``postings_mb``.  So the cache can never thrash or grow with the corpus: an index
past the budget is searched by the pruned FTS5 query, as before, and memory stays bounded by the
budget whatever the corpus size.  The postings live with the per-connection statistics
(:class:`~indexplug_sqlite_fts5.pruning.TermStats`) and are dropped with them whenever ``PRAGMA
data_version`` or one of the backend's own writes says the index changed; they are read inside
the search's read transaction, so they always describe the snapshot being searched.

The first search to use a term pays for reading its postings (FTS5 scoring the one-phrase query,
about a microsecond a matching row); later searches reuse them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np

from indexplug_sqlite_fts5.pruning import (
    BYTES_PER_POSTING,
    MAX_CACHED_TERMS,
    TermStats,
    summand_scale,
)
from indexplug_sqlite_fts5.query import fts5_phrase

DENSE_SLACK = 8
"""Scores go into an array indexed by rowid when the largest rowid is below this many times the
postings (plus :data:`DENSE_MIN`); past that (rowids spread by deletions), into one entry per
distinct row."""
DENSE_MIN = 65_536
_ONE_TERM_SQL = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ?"

Postings = tuple[np.ndarray, np.ndarray]
"""``(rowids, summands)`` of one term, rowids ascending, each summand the term's share of the
row's score (FTS5's one-term bm25 times :func:`~indexplug_sqlite_fts5.pruning.summand_scale`)."""

_EMPTY: Postings = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))


def term_postings(conn: sqlite3.Connection, stats: TermStats, term: str, budget: int) -> Postings:
    """The postings of ``term``, from ``stats`` or read now (and kept within ``budget``)."""
    cache = stats.cache
    got = cache.terms.get(term)
    if got is not None:
        return got
    rows = conn.execute(_ONE_TERM_SQL, (fts5_phrase(term),)).fetchall()
    if rows:
        both = np.array(rows, dtype=np.float64)
        got = (both[:, 0].astype(np.int64), both[:, 1] * summand_scale(stats.rows, len(rows)))
    else:
        got = _EMPTY
    size = len(rows) * BYTES_PER_POSTING
    with cache.lock:
        if cache.bytes + size > budget or len(cache.terms) >= MAX_CACHED_TERMS:
            # only reachable when distinct query words share postings (``runs`` and
            # ``running`` stem alike) or many words match nothing: start over rather than grow
            cache.terms.clear()
            cache.bytes = 0
        if term not in cache.terms:
            cache.terms[term] = got
            cache.bytes += size
    return got


def top_k(
    conn: sqlite3.Connection,
    stats: TermStats,
    terms: Sequence[str],
    k: int,
    *,
    budget_bytes: int,
) -> list[tuple[int, float]]:
    """``(rowid, score)`` of the best ``k`` rows for the OR of ``terms``, best first: exactly
    what :func:`~indexplug_sqlite_fts5.pruning.ranked` returns for the same terms."""
    lists = [term_postings(conn, stats, t, budget_bytes) for t in terms]
    stats.in_memory += 1
    rowids = np.concatenate([r for r, _ in lists])
    if rowids.size == 0:
        return []
    summands = np.concatenate([s for _, s in lists])
    top = int(rowids.max())
    if top < DENSE_SLACK * rowids.size + DENSE_MIN:
        # bincount adds each bin's weights in input order: the query's phrase order
        sums = np.bincount(rowids, weights=summands, minlength=top + 1)
        seen = np.zeros(top + 1, dtype=bool)
        seen[rowids] = True
        ids = np.flatnonzero(seen)
        scores = sums[ids]
    else:
        ids, where = np.unique(rowids, return_inverse=True)
        scores = np.zeros(ids.size, dtype=np.float64)
        np.add.at(scores, where, summands)  # unbuffered, in input order
    if ids.size > k:
        kth = np.partition(scores, ids.size - k)[ids.size - k]
        keep = scores >= kth
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:k]
    return [(int(ids[i]), float(scores[i])) for i in order]
