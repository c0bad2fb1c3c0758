"""Exact top-k BM25 over FTS5 that scores only the rows that can reach the top k.

Scores
------
A row's score for the OR of the query's phrases is the sum over the phrases ``p`` it holds of::

    idf(p) * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl))
    idf(p) = ln(1 + (N - n_p + 0.5) / (n_p + 0.5))

with ``k1 = 1.2``, ``b = 0.75``, ``N`` the rows in the table, ``n_p`` the rows matching ``p``,
``f`` the occurrences of ``p`` in the row and ``D`` its length in tokens.  That ``idf`` is
Lucene's (and Elasticsearch's): always above 0, so every match scores above 0, the score of a
row matching nothing.  FTS5's built-in ``bm25()`` uses the classic ``ln((N - n_p + 0.5) / (n_p +
0.5))`` instead, floored at 1e-6 where that is <= 0: a word in half the rows or more adds
(almost) nothing, and a one-passage index scores its only match 0.0.  No other ``idf`` can be
given to ``bm25()``, and it only reports a row's total over every phrase, so the backend scores
phrase by phrase: FTS5's ``bm25()`` of the one-phrase query ``p`` is exactly minus ``p``'s
summand above with FTS5's ``idf`` (``fts5_aux.c``, ``fts5Bm25Function``: ``idf``, ``avgdl`` and
``D`` do not depend on the other phrases), and :func:`summand_scale` turns it into the summand
with Lucene's (FTS5's tokenizer, stemming and phrase matching; nothing re-implemented).  A row's
score is those summands added phrase by phrase in the query's order, starting from 0.0, in
float64, on every path (here, :mod:`~indexplug_sqlite_fts5.postings` and the filtered search),
so all of them give bit-identical scores and ties are broken by rowid.

Why prune
---------
On SciFact a typical query matches half the corpus, almost all of it through its commonest
terms, although only rows holding some of the rarer terms can reach the top k.  Computing bm25()
costs a row about 1.5-2 µs (an instance array and a docsize lookup); walking the matches without
it costs a tenth as much, so the win is in not scoring hopeless rows.

The bound
---------
A phrase's summand is 0 when the row lacks ``p`` and otherwise *below* ``u(p) = idf(p) * (k1 +
1)`` whatever ``f`` and ``D`` are (the denominator exceeds ``f`` by at least ``k1 * (1 - b) =
0.3``; with at most a million characters in a passage the relative gap is over 1e-7, far above
floating-point error).  So a row whose phrases' ``u`` add up to less than a threshold ``θ``
scores less than ``θ``.

The search
----------
:func:`candidate_expression` writes an FTS5 expression matching exactly the rows whose phrase set
*could* reach ``θ`` (a small AND/OR formula over the phrases, rarest first; past a size budget it
widens to a superset, which is always safe).  :func:`ranked` then scores those rows only: one
statement whose arms are the one-phrase queries, each restricted to the candidates::

    WITH c(id) AS MATERIALIZED (SELECT rowid FROM fts WHERE fts MATCH :candidates)
    SELECT 0, rowid, bm25(fts) FROM fts WHERE fts MATCH :p0 AND +rowid IN (SELECT id FROM c)
    UNION ALL SELECT 1, rowid, bm25(fts) FROM fts WHERE fts MATCH :p1 AND +rowid IN ...

The ``+`` keeps SQLite from handing the rowid list to FTS5 (which would re-parse the query and
recount every idf once per rowid); as a plain filter it costs a lookup per match, and bm25() runs
only for rows that pass it.  If the k-th score is at least ``θ`` no row left out can reach it and
the answer is exact (ties ordered by rowid).  Otherwise ``θ`` drops to the k-th score found,
which is a valid threshold that the next round is sure to pass, or, with fewer than k
candidates, to 0: every match is scored.

``n_p`` and ``N`` are read from the index itself (``count(*)`` of ``MATCH '"p"'`` is what bm25's
``xQueryPhrase`` counts; ``N`` is the first varint of FTS5's averages record) and cached per
connection until ``PRAGMA data_version`` or one of our own writes says the index changed.
"""

from __future__ import annotations

import heapq
import math
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from indexplug_sqlite_fts5.query import fts5_phrase

if TYPE_CHECKING:
    import numpy as np  # annotations only: numpy loads with the postings, when ranking

K1 = 1.2
"""FTS5's bm25 k1 (fixed in ``fts5_aux.c``)."""
IDF_FLOOR = 1e-6
"""FTS5's smallest idf (a phrase in half the rows or more), in its built-in bm25()."""
SLACK = 1e-9
"""Relative widening of the candidate threshold: rounding can only ever add candidates."""

FIRST_GUESS = 0.25
"""First threshold, as a share of the largest possible score divided by ``k ** GUESS_POWER``.

Only speed depends on it (a guess above the true k-th score costs one more round; below it,
extra candidates).  Measured on SciFact, the k-th best score is at least this share for about
nine queries in ten at k = 10 and k = 100."""
GUESS_POWER = 0.27
MIN_POSTINGS = 500
"""Below this many postings over all terms, scoring every match costs less than planning."""
BUILD_BUDGET = 16
"""Most formula nodes :func:`candidate_expression` writes before widening to a superset."""
MAX_AND_DEPTH = 8
"""Deepest AND nesting in a candidate formula (FTS5's parser has a bounded stack)."""
MAX_CACHED_TERMS = 50_000
MAX_ARMS = 128
"""Most one-phrase queries :func:`ranked` joins in one statement (SQLite allows 500)."""
DF_BATCH = 64

_DF_SQL = "(SELECT count(*) FROM fts WHERE fts MATCH ?)"
_ARM_SQL = "SELECT {i}, rowid, bm25(fts) FROM fts WHERE fts MATCH ?"
_WITHIN_SQL = " AND +rowid IN (SELECT id FROM c)"
CANDIDATES_SQL = "SELECT rowid FROM fts WHERE fts MATCH ?"
"""The rows a candidate expression matches (see :func:`ranked`'s ``within``)."""


class PostingsCache:
    """Terms' postings for one state of an index, and the bytes they hold (kept within the
    backend's ``postings_mb`` by :func:`~indexplug_sqlite_fts5.postings.term_postings`).

    One object may serve several threads' connections at once: each adds under ``lock``.
    """

    __slots__ = ("bytes", "lock", "terms")

    def __init__(self) -> None:
        self.terms: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.bytes = 0
        self.lock = threading.Lock()


@dataclass
class TermStats:
    """What the bound needs about one index, as one connection last saw it.

    ``PRAGMA data_version`` changes when *another* connection commits; writes made on the same
    connection do not change it, so the backend calls :meth:`invalidate` after its own writes.
    """

    version: int | None = None
    rows: int = 0
    tokens: int = 0
    """Tokens in the whole index (FTS5's averages record): bounds how many postings it holds."""
    df: dict[str, int] = field(default_factory=dict)
    cache: PostingsCache = field(default_factory=lambda: PostingsCache())
    """Terms' postings held in memory (:mod:`indexplug_sqlite_fts5.postings`): this
    connection's own, or one shared by every connection that saw the same state of the index
    (see :meth:`sync`)."""
    rounds: list[int] = field(default_factory=lambda: [0, 0, 0])
    """How many searches were answered after 1, 2 and 3+ rounds (for tuning and tests)."""
    in_memory: int = 0
    """How many searches were ranked from postings in memory instead (for tests)."""

    @property
    def postings(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return self.cache.terms

    @property
    def postings_bytes(self) -> int:
        return self.cache.bytes

    def invalidate(self) -> None:
        self.version = None

    def sync(
        self, conn: sqlite3.Connection, version: int, shared: PostingsCache | None = None
    ) -> None:
        """Drop what was learnt if the index changed since, then make sure ``rows`` is known.

        ``shared``: the postings this connection's state shares with others (the caller
        decides which, see ``SqliteFts5Backend._shared_postings``); without it, a change
        starts a cache of this connection's own.
        """
        if version != self.version:
            self.df.clear()
            self.cache = PostingsCache()
            self.rows, self.tokens = _averages(conn)
            self.version = version
        if shared is not None:
            self.cache = shared

    def doc_freqs(self, conn: sqlite3.Connection, terms: Sequence[str]) -> list[int]:
        """Rows matching each term's phrase: exactly what bm25 counts for its idf."""
        missing = [t for t in dict.fromkeys(terms) if t not in self.df]
        if len(self.df) + len(missing) > MAX_CACHED_TERMS:
            self.df.clear()
        for i in range(0, len(missing), DF_BATCH):
            chunk = missing[i : i + DF_BATCH]
            sql = "SELECT " + ", ".join([_DF_SQL] * len(chunk))
            counts = conn.execute(sql, [fts5_phrase(t) for t in chunk]).fetchone()
            self.df.update(zip(chunk, (int(n) for n in counts), strict=True))
        return [self.df[t] for t in terms]


def _row_count(conn: sqlite3.Connection) -> int:
    """``N`` as bm25 sees it: the first varint of FTS5's averages record (``%_data`` row 1).

    Returns 0 (no pruning) if the record is missing or unreadable.
    """
    return _averages(conn)[0]


def _averages(conn: sqlite3.Connection) -> tuple[int, int]:
    """FTS5's averages record (``%_data`` row 1): the rows, and the tokens of every column
    added up (the varints after the row count, one a column).  ``(0, 0)`` if missing or
    unreadable, which turns pruning and in-memory postings off."""
    row = conn.execute("SELECT block FROM fts_data WHERE id = 1").fetchone()
    if row is None or not isinstance(row[0], bytes) or not row[0]:
        return 0, 0
    values = _varints(row[0])
    if not values:
        return 0, 0
    return values[0], sum(values[1:])


def _varint(buf: bytes) -> int:
    """SQLite's varint (big-endian, 7 bits a byte, the 9th byte whole), as FTS5 writes it."""
    got = _varints(buf[:9], limit=1)
    return got[0] if got else 0  # truncated: treat as unknown


def _varints(buf: bytes, limit: int | None = None) -> list[int]:
    """The whole varints at the start of ``buf`` (at most ``limit``); a truncated one ends it."""
    out: list[int] = []
    value = used = 0
    for byte in buf:
        if used == 8:
            out.append((value << 8) | byte)
            value = used = 0
        else:
            value = (value << 7) | (byte & 0x7F)
            used += 1
            if byte >= 0x80:
                continue
            out.append(value)
            value = used = 0
        if limit is not None and len(out) >= limit:
            break
    return out


def idf(rows: int, df: int) -> float:
    """Lucene's idf, ``ln(1 + (N - n + 0.5) / (n + 0.5))``: above 0 for every ``n <= N``.

    ``N`` below ``n`` (an averages record that contradicts the counts) is taken as ``n``.
    """
    rows = max(rows, df)
    return math.log(1.0 + (rows - df + 0.5) / (df + 0.5))


def fts5_idf(rows: int, df: int) -> float:
    """FTS5's idf in its built-in bm25(), computed as ``fts5Bm25GetData`` does."""
    value = math.log((rows - df + 0.5) / (df + 0.5))
    return value if value > 0.0 else IDF_FLOOR


def summand_scale(rows: int, df: int) -> float:
    """What FTS5's one-phrase bm25() of a phrase matching ``df`` of ``rows`` rows is multiplied
    by to give the phrase's summand with Lucene's idf (its sign included: bm25() is negated)."""
    return -idf(rows, df) / fts5_idf(max(rows, df), df)


def ranked(
    conn: sqlite3.Connection,
    terms: Sequence[str],
    scales: Sequence[float],
    k: int,
    *,
    within: str | None = None,
    params: Sequence[object] = (),
) -> list[tuple[int, float]]:
    """``(rowid, score)`` of the best ``k`` rows for the OR of ``terms``, best first (ties by
    rowid), each score the phrases' summands added in the query's order (module docstring).

    ``scales``: each term's :func:`summand_scale`.  ``within``: an SQL query (``params``) of the
    rowids to score; the others are left out.  Terms that match nothing may be left out of
    ``terms`` (they add nothing).
    """
    by_term: list[list[tuple[int, float]]] = [[] for _ in terms]
    for start in range(0, len(terms), MAX_ARMS):
        chunk = terms[start : start + MAX_ARMS]
        arm = _ARM_SQL + (_WITHIN_SQL if within else "")
        arms = [arm.format(i=start + i) for i in range(len(chunk))]
        sql = " UNION ALL ".join(arms)
        if within:
            sql = f"WITH c(id) AS MATERIALIZED ({within}) {sql}"
        for i, rowid, bm25 in conn.execute(sql, [*params, *(fts5_phrase(t) for t in chunk)]):
            by_term[i].append((rowid, bm25))
    scores: dict[int, float] = {}
    for scale, postings in zip(scales, by_term, strict=True):
        for rowid, bm25 in postings:
            scores[rowid] = scores.get(rowid, 0.0) + bm25 * scale
    return heapq.nsmallest(k, scores.items(), key=_order)


def _order(item: tuple[int, float]) -> tuple[float, int]:
    return -item[1], item[0]


@dataclass(frozen=True)
class Bounds:
    """The query's matchable phrases, highest bound first, with the bounds' suffix sums."""

    terms: tuple[str, ...]
    upper: tuple[float, ...]
    tails: tuple[float, ...]
    """``tails[i] = sum(upper[i:])``; ``tails[0]`` bounds any row's score."""

    @classmethod
    def of(cls, terms: Sequence[str], dfs: Sequence[int], rows: int) -> Bounds:
        pairs = sorted(
            ((idf(rows, df) * (K1 + 1.0), t) for t, df in zip(terms, dfs, strict=True) if df > 0),
            key=lambda p: -p[0],
        )
        upper = tuple(u for u, _ in pairs)
        tails = [0.0] * (len(upper) + 1)
        for i in range(len(upper) - 1, -1, -1):
            tails[i] = tails[i + 1] + upper[i]
        return cls(tuple(t for _, t in pairs), upper, tuple(tails))


def candidate_expression(bounds: Bounds, theta: float) -> str | None:
    """An FTS5 expression matching every row whose phrases' bounds add up to ``theta`` or more.

    Rows it leaves out score below ``theta``.  ``None`` when it cannot narrow the search (every
    row could reach ``theta``, or none could): the caller then runs the full query.  The
    formula follows the recursion ``reach(i, θ) = (t_i AND reach(i+1, θ - u_i)) OR reach(i+1, θ)``
    over the phrases, rarest first; when it grows past :data:`BUILD_BUDGET` nodes or
    :data:`MAX_AND_DEPTH` nested ANDs, a branch becomes ``t_i OR ... OR t_j`` for the shortest
    run whose absence already rules ``θ`` out (a superset of the branch).
    """
    budget = [BUILD_BUDGET]
    terms, upper, tails = bounds.terms, bounds.upper, bounds.tails
    n = len(terms)

    def widen(i: int, th: float) -> list[str]:
        j = i
        while j < n and tails[j] >= th:
            j += 1
        return [fts5_phrase(t) for t in terms[i:j]]

    def reach(i: int, th: float, depth: int) -> list[str] | None:
        """OR-ed clauses for ``reach(i, th)``; ``None`` stands for "every row" (``th <= 0``)."""
        if th <= 0.0:
            return None
        if i >= n or tails[i] < th:
            return []
        if budget[0] <= 0 or depth >= MAX_AND_DEPTH:
            return widen(i, th)
        budget[0] -= 1
        phrase = fts5_phrase(terms[i])
        rest = reach(i + 1, th - upper[i], depth + 1)
        if rest is None:
            clauses = [phrase]
        elif not rest:
            clauses = []
        elif len(rest) == 1:
            clauses = [f"({phrase} AND {rest[0]})"]
        else:
            clauses = [f"({phrase} AND ({' OR '.join(rest)}))"]
        others = reach(i + 1, th, depth)
        assert others is not None  # th > 0 here
        return clauses + others

    clauses = reach(0, theta, 0)
    if not clauses:
        return None
    return " OR ".join(clauses)


def first_threshold(bounds: Bounds, k: int) -> float:
    """The first round's guess at the k-th best score (see :data:`FIRST_GUESS`)."""
    return float(bounds.tails[0] * FIRST_GUESS / (k**GUESS_POWER))


def top_k(
    conn: sqlite3.Connection,
    stats: TermStats,
    terms: Sequence[str],
    k: int,
    *,
    min_postings: int = MIN_POSTINGS,
) -> list[tuple[int, float]]:
    """``(rowid, score)`` of the best ``k`` rows for the OR of ``terms``, best first.

    Exactly what :func:`ranked` gives when it scores every match, usually at a fraction of its
    cost (see the module docstring).  ``stats`` must have been :meth:`~TermStats.sync`-ed in
    the same read transaction.
    """
    dfs = stats.doc_freqs(conn, terms)
    found = [(t, df) for t, df in zip(terms, dfs, strict=True) if df > 0]
    if not found:
        return []
    matched = [t for t, _ in found]
    scales = [summand_scale(stats.rows, df) for _, df in found]
    if stats.rows <= 0 or sum(dfs) < min_postings or max(dfs) > stats.rows:
        # small enough to score everything, or counts that contradict N: do not prune
        return ranked(conn, matched, scales, k)
    bounds = Bounds.of(terms, dfs, stats.rows)
    slack = SLACK * bounds.tails[0]
    theta = first_threshold(bounds, k)
    for round_no in range(3):
        candidates = candidate_expression(bounds, theta - slack) if theta > 0 else None
        if candidates is None:
            stats.rounds[min(round_no, 2)] += 1
            return ranked(conn, matched, scales, k)
        rows = ranked(conn, matched, scales, k, within=CANDIDATES_SQL, params=(candidates,))
        if len(rows) == k and rows[-1][1] >= theta:
            stats.rounds[min(round_no, 2)] += 1
            return rows
        # a lower threshold that the next round must pass, or every match
        theta = rows[-1][1] if len(rows) == k else 0.0
    stats.rounds[2] += 1
    return ranked(conn, matched, scales, k)


BYTES_PER_POSTING = 16
"""A rowid (int64) and its summand (float64), as :mod:`~indexplug_sqlite_fts5.postings` holds
them."""


def fits(stats: TermStats, budget_bytes: int) -> bool:
    """Whether every posting of the index ``stats`` describes can be held in ``budget_bytes``
    (``stats`` synced in the current read transaction).  Here, not in ``postings``, so that
    deciding (and ``status`` saying) how an index is ranked does not import numpy."""
    return stats.tokens > 0 and stats.tokens * BYTES_PER_POSTING <= budget_bytes
