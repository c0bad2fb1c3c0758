"""The sqlite-fts5 backend: one SQLite file per index, FTS5 with BM25, WAL mode.

Layout of an index file (``<home>/<name>.sqlite``):

* ``meta``: key/value facts kept with the index (schema version, budget, passage count);
* ``passages``: one row per passage with its full provenance as JSON, its metadata as a JSON
  object (filtered in SQL: :mod:`~indexplug_sqlite_fts5.sqlfilter`) and its caller key (indexed,
  for upserts and reads by key);
* ``fts``: an external-content FTS5 table over ``passages.text`` (porter stemming), so text is
  stored once.

The file is marked with SQLite's ``application_id`` so that a file that is not one of our
indexes is reported as such instead of being searched or, worse, written into.

Every write is one ``BEGIN IMMEDIATE`` transaction: a process killed mid-write leaves the file as
it was before that write (SQLite's journal guarantees it), and the budget's measured check runs
inside the transaction, so a refused write is rolled back with nothing kept.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.filters import ALL_OPS, Filter
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    AddOutcome,
    GetOutcome,
    Got,
    Indexed,
    IndexEmpty,
    IndexesOutcome,
    IndexFailed,
    IndexInfo,
    IndexList,
    IndexStatus,
    IndexTimeout,
    NoMatch,
    Removed,
    RemoveOutcome,
    Scanned,
    ScanOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    StatusOutcome,
)
from indexplug.passages import MetadataValue, Passage, Source
from indexplug.protocols import Capabilities, Readiness

from indexplug_sqlite_fts5 import pruning, sqlfilter
from indexplug_sqlite_fts5.hits import hit, passage_from_row, searched_passage
from indexplug_sqlite_fts5.plugin import DESCRIPTION
from indexplug_sqlite_fts5.query import fts5_expression, query_terms

APPLICATION_ID = 0x49504C47  # "IPLG"
SCHEMA_VERSION = 3
SCALE = ScoreScale(
    name="fts5_bm25",
    higher_is_better=True,
    comparable_across_searches=False,
    meaning="BM25 (k1=1.2, b=0.75) over SQLite FTS5's porter-stemmed index with Lucene's idf, "
    "ln(1 + (N - n + 0.5) / (n + 0.5)): every match scores above 0; higher is better; "
    "comparable only within one search.",
)
PROGRESS_STEPS = 20_000
"""SQLite VM instructions between deadline checks: often enough to stop within a few ms,
rarely enough that the Python callback costs nothing measurable."""
PAGE_SIZE = 8192
"""Page size of new index files.  Twice SQLite's default: a write appends half as many WAL
frames (one ``pwrite`` each) and checkpoints copy half as many pages, which measured 2.2x fewer
write calls when indexing SciFact at the same CPU cost; searches read the same pages from the
page cache either way.  Small budgets stay meaningful (an empty index is ~9 pages)."""
AUTOMERGE = 8
"""FTS5 ``automerge`` of new indexes: merge index segments once 8 of a level exist (FTS5's
default is 4).  Bulk adds then rewrite postings half as often, measured 15-25% more passages per
second on SciFact, while a search reads at most a few more segments (the ``optimize`` op merges
them all into one)."""
PROJECTED_OVERHEAD = 2.5
"""Bytes on disk per byte of passage data (row, JSON, FTS5 postings), measured on SciFact."""

_SCHEMA = f"""
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE passages (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    source TEXT NOT NULL,
    document_sha256 TEXT,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    digest TEXT,
    key TEXT
);
CREATE INDEX passages_key ON passages(key) WHERE key IS NOT NULL;
CREATE VIRTUAL TABLE fts USING fts5(
    text, content='passages', content_rowid='rowid',
    tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO fts(fts, rank) VALUES ('automerge', {AUTOMERGE});
INSERT INTO meta(key, value) VALUES ('count', '0');
"""


_STATE_SQL = (
    "SELECT (SELECT value FROM meta WHERE key = 'count'), "
    "(SELECT data_version FROM pragma_data_version()), "
    "EXISTS (SELECT 1 FROM passages)"
)
"""The passage count, whether another connection has written since we last looked, and
whether any row is there at all (a count above zero over no rows is an index whose rows were
deleted behind it)."""
_COLUMNS = (
    'p.id, p.text, p.source, p.document_sha256, p.start, p."end", p.metadata, p.digest, p.key'
)
_ROWS_SQL = (
    f"SELECT p.rowid, {_COLUMNS} FROM passages p WHERE p.rowid IN (SELECT value FROM json_each(?))"
)


class NotAnIndex(Exception):
    """The file exists but is not an indexplug sqlite-fts5 index."""


class Inconsistent(NotAnIndex):
    """The full-text index and the rows it indexes disagree (rows deleted or added behind
    the backend's back): nothing it answers can be trusted, so it answers a failure."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _op(
    fn: Callable[Concatenate[SqliteFts5Backend, _P], _R],
) -> Callable[Concatenate[SqliteFts5Backend, _P], _R]:
    """An op of the backend: the connections it takes are held (see :class:`_Connection`)
    until the outermost op on this thread returns, then released, and those that
    :meth:`SqliteFts5Backend.close` could not close meanwhile are closed here."""

    @functools.wraps(fn)
    def run(self: SqliteFts5Backend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        try:
            return fn(self, *args, **kwargs)
        finally:
            local.depth = depth
            if depth == 0:
                held: list[_Connection] = getattr(local, "held", [])
                local.held = []
                for conn in held:
                    if conn.doomed:
                        conn.shut()
                for conn in reversed(held):
                    conn.use.release()

    return run


class SqliteFts5Backend:
    """See the module docstring.  Settings (``--option KEY=VALUE`` or the config file):

    * ``busy_timeout_s``: longest a writer waits for the write lock (default: its deadline);
    * ``cache_mb``: SQLite page cache per connection (default 64);
    * ``postings_mb``: memory per connection for ranking an index from its postings
      (:mod:`~indexplug_sqlite_fts5.postings`; default 64, 0 turns it off).  An index whose
      postings could exceed it is ranked by FTS5 with pruning instead.
    """

    name = "sqlite-fts5"
    description = DESCRIPTION
    score_scale = SCALE
    capabilities = Capabilities(
        filters=True,
        # every operator, served in SQL with the reference's meaning (sqlfilter)
        filter_operators=ALL_OPS,
        get=True,
        scan=True,
        indexes=True,
        keys=True,
        deletion=True,
        persistence=True,
        concurrent_writers=True,
        multiprocess_writers=True,
        # rows behind an external-content full-text index (the kit's integrity.rows)
        separate_records=True,
        # reads stop in SQLite's progress handler, lock waits in its busy timeout, both set
        # from the op's deadline
        cooperative_deadlines=True,
    )

    def __init__(
        self,
        home: Path,
        *,
        cache_mb: int | str = 64,
        postings_mb: int | str = 64,
        **options: Any,
    ) -> None:
        unknown = set(options) - {"busy_timeout_s"}
        if unknown:
            raise ValueError(f"unknown sqlite-fts5 option(s): {', '.join(sorted(unknown))}")
        self.home = Path(home)
        self.cache_kb = int(cache_mb) * 1024
        if float(postings_mb) < 0:
            raise ValueError("postings_mb must be 0 (off) or more")
        self.postings_bytes = int(float(postings_mb) * 1024 * 1024)
        self.busy_timeout_s = float(options.get("busy_timeout_s", 0)) or None
        self._local = threading.local()
        self._all: weakref.WeakSet[_Connection] = weakref.WeakSet()
        """Every open connection, for :meth:`close`.  Weak: connections are per thread (the
        guard calls this backend on its worker threads), and when a thread ends, its
        thread-local connections are dropped and closed with it instead of piling up here."""
        self._all_lock = threading.Lock()
        self._shared: dict[str, pruning.PostingsCache] = {}
        """Each index's postings cache for its latest state (see :meth:`_shared_postings`)."""
        self._shared_lock = threading.Lock()
        self._searched: set[str] = set()
        """Indexes this backend has answered a search on in this process.  The first is ranked
        by FTS5 (pruned), so that a one-search process (a CLI command) neither imports numpy
        nor reads every posting of its terms; later ones, on any thread, from postings in
        memory.  Per process rather than per thread: which path answers must not depend on
        which of the guard's worker threads happens to run the search."""

    # -- connections ---------------------------------------------------------------------
    def path(self, index: str) -> Path:
        return self.home / f"{index}.sqlite"

    def readiness(self) -> Readiness:
        if "fts5" not in _compile_options():
            return Readiness.no("this Python's SQLite was built without FTS5")
        return Readiness.yes()

    def _hold(self, conn: _Connection) -> None:
        """Hold ``conn`` until this thread's op ends (see :func:`_op`)."""
        if getattr(self._local, "depth", 0) > 0:
            conn.use.acquire()
            held: list[_Connection] = getattr(self._local, "held", None) or []
            held.append(conn)
            self._local.held = held

    def _conn(self, index: str, *, create: bool) -> sqlite3.Connection | None:
        conns: dict[str, _Connection] = getattr(self._local, "conns", None) or {}
        self._local.conns = conns
        conn = conns.get(index)
        path = self.path(index)
        if conn is not None:
            self._hold(conn)
            if not conn.closed and _identity(path) == conn.identity:
                return conn
            # Closed by close(), or the file was deleted (or dropped and created again,
            # perhaps by another thread) under this connection, which still holds the old
            # one: open the file there now.
            conn.shut()
            del conns[index]
        fresh = not path.exists()
        if fresh:
            if not create:
                return None
            self.home.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=10, factory=_Connection
        )
        self._hold(conn)
        try:
            if fresh:
                # before anything is written: a new file gets PAGE_SIZE pages (an existing one
                # keeps its own; SQLite ignores the pragma once the file has content)
                conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            _ensure_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA cache_size=-{self.cache_kb}")
            if conn.execute("PRAGMA application_id").fetchone()[0] == 0:
                # Several threads or processes may create the same index at once: decide
                # under the write lock, so exactly one of them writes the schema.
                conn.execute("BEGIN IMMEDIATE")
                try:
                    empty = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
                    if empty:
                        for stmt in _SCHEMA.split(";"):
                            if stmt.strip():
                                conn.execute(stmt)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                raise NotAnIndex(f"{path.name} is an SQLite file but not an indexplug index")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version in _UPGRADES:
                _upgrade(conn)
            elif version != SCHEMA_VERSION:
                raise NotAnIndex(f"{path.name} has an unknown schema version")
            sqlfilter.register(conn)
        except sqlite3.OperationalError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise NotAnIndex(f"{path.name} is not an SQLite index ({exc})") from exc
        except BaseException:
            conn.close()
            raise
        conn.identity = _identity(path)
        conns[index] = conn
        with self._all_lock:
            self._all.add(conn)
        return conn

    def close(self) -> None:
        """Close every connection no op is running on; one that an op is running on (a
        thread the guard gave up on at its deadline, say) is closed by its thread when that
        op ends.  A later op opens its connection again."""
        with self._all_lock:
            conns = list(self._all)
            self._all.clear()
        for c in conns:
            if c.use.acquire(blocking=False):
                try:
                    c.shut()
                finally:
                    c.use.release()
            else:
                c.doomed = True

    @contextmanager
    def _deadline(self, conn: sqlite3.Connection, deadline: Deadline) -> Iterator[None]:
        at = deadline.at
        conn.set_progress_handler(lambda: 1 if time.monotonic() > at else 0, PROGRESS_STEPS)
        try:
            yield
        finally:
            conn.set_progress_handler(None, 0)

    def _failure(
        self, index: str, exc: BaseException, deadline: Deadline
    ) -> IndexTimeout | IndexFailed:
        """Map SQLite errors to outcomes: interrupted or locked is a timeout, the rest fail."""
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and (
            "interrupted" in text or "locked" in text or "busy" in text
        ):
            why = "the write lock was held by another writer" if "locked" in text else text
            return IndexTimeout(
                index=index, backend=self.name, deadline_s=deadline.seconds, reason=why
            )
        if isinstance(exc, NotAnIndex):
            return IndexFailed(
                index=index, backend=self.name, reason=text, error_type=type(exc).__name__
            )
        return IndexFailed(
            index=index,
            backend=self.name,
            reason=f"SQLite error: {text}",
            error_type=type(exc).__name__,
        )

    def _late(self, index: str, deadline: Deadline) -> IndexTimeout | None:
        """``IndexTimeout`` if the deadline has already passed.  The progress handler only
        fires every ``PROGRESS_STEPS`` instructions, so a small op started after its deadline
        would otherwise answer late, and a late ``NO_MATCH`` would pass for "no evidence"."""
        if deadline.expired():
            return IndexTimeout(
                index=index,
                backend=self.name,
                deadline_s=deadline.seconds,
                reason="the deadline passed before the operation could start",
            )
        return None

    @staticmethod
    def _meta(conn: sqlite3.Connection, key: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _size(conn: sqlite3.Connection) -> int:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(pages) * int(size)

    # -- ops -----------------------------------------------------------------------------
    @_op
    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        if late := self._late(index, deadline):
            return late
        try:
            conn = self._conn(index, create=True)
            assert conn is not None
            busy = min(deadline.remaining(), self.busy_timeout_s or deadline.remaining())
            conn.execute(f"PRAGMA busy_timeout={int(busy * 1000)}")
            with self._deadline(conn, deadline):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    out = self._add_locked(conn, index, passages, max_bytes)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                if isinstance(out, Indexed):
                    conn.execute("COMMIT")
                    self._forget_stats(index)
                else:
                    conn.execute("ROLLBACK")
                return out
        except (sqlite3.Error, NotAnIndex) as exc:
            return self._failure(index, exc, deadline)

    def _add_locked(
        self,
        conn: sqlite3.Connection,
        index: str,
        passages: Sequence[Passage],
        requested: int | None,
    ) -> AddOutcome:
        stored = self._meta(conn, "max_bytes")
        budget = effective_max_bytes(int(stored) if stored else None, requested)
        ids = [p.id for p in passages]
        known: set[str] = set()
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            known.update(
                r[0] for r in conn.execute(f"SELECT id FROM passages WHERE id IN ({marks})", chunk)
            )
        new = [p for p in passages if p.id not in known]
        replaced = self._replace_keys(conn, passages, known)
        size_before = self._size(conn)
        if new and budget is not None:
            payload = sum(len(p.text.encode("utf-8")) + 200 for p in new)
            refused = over_budget(
                index,
                self.name,
                needed=size_before + int(payload * PROJECTED_OVERHEAD),
                max_bytes=budget,
                check="projected",
            )
            if refused:
                return refused
        if stored is None and requested is not None:
            conn.execute("INSERT INTO meta(key, value) VALUES ('max_bytes', ?)", (str(requested),))
        if new:
            last = conn.execute("SELECT coalesce(max(rowid), 0) FROM passages").fetchone()[0]
            conn.executemany(
                "INSERT INTO passages"
                '(id, text, source, document_sha256, start, "end", metadata, digest, key) '
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _stored_rows(new),
            )
            conn.execute(
                "INSERT INTO fts(rowid, text) SELECT rowid, text FROM passages WHERE rowid > ?",
                (last,),
            )
            conn.execute(
                "UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'count'",
                (len(new),),
            )
        size_after = self._size(conn)
        if budget is not None:
            refused = over_budget(
                index, self.name, needed=size_after, max_bytes=budget, check="measured"
            )
            if refused:
                return refused
        out = Indexed.of_batch(
            index=index,
            backend=self.name,
            ids=ids,
            added_ids=[p.id for p in new],
            bytes_used=size_after,
            max_bytes=budget,
        )
        return out.model_copy(update={"replaced": replaced}) if replaced else out

    @staticmethod
    def _replace_keys(
        conn: sqlite3.Connection, passages: Sequence[Passage], known: set[str]
    ) -> int:
        """The upsert of keyed passages, inside the add's transaction: every stored passage of
        a key in the batch that is not itself in the batch is deleted (row, full-text entry and
        count), and a passage of the batch already stored takes the batch's record (its key,
        metadata and provenance: the id covers only the text, uri and span).  Answers how many
        passages were deleted.  One transaction with the insert, so no reader sees both
        versions of a key or neither."""
        by_key: dict[str, set[str]] = {}
        for p in passages:
            if p.key is not None:
                by_key.setdefault(p.key, set()).add(p.id)
        if not by_key:
            return 0
        gone: list[tuple[int, str]] = []
        for key, keep in by_key.items():
            gone += [
                (rowid, text)
                for rowid, pid, text in conn.execute(
                    "SELECT rowid, id, text FROM passages WHERE key = ?", (key,)
                )
                if pid not in keep
            ]
        if gone:
            conn.executemany("INSERT INTO fts(fts, rowid, text) VALUES ('delete', ?, ?)", gone)
            conn.executemany("DELETE FROM passages WHERE rowid = ?", [(r,) for r, _ in gone])
            conn.execute(
                "UPDATE meta SET value = CAST(value AS INTEGER) - ? WHERE key = 'count'",
                (len(gone),),
            )
        again = [p for p in passages if p.key is not None and p.id in known]
        if again:
            # the text, uri and span are the id's, so the full-text entry stays as it is
            conn.executemany(
                "UPDATE passages SET source = ?, document_sha256 = ?, metadata = ?, digest = ?, "
                "key = ? WHERE id = ? AND digest IS NOT ?",
                [(r[2], r[3], r[6], r[7], r[8], r[0], r[7]) for r in _stored_rows(again)],
            )
        return len(gone)

    @_op
    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Filter | Mapping[str, MetadataValue] | None = None,
    ) -> SearchOutcome:
        if late := self._late(index, deadline):
            return late
        try:
            conn = self._conn(index, create=False)
            if conn is None:
                return IndexEmpty(index=index, backend=self.name)
            # One read transaction, so the count, the term statistics the pruning relies on and
            # the matches all come from the same snapshot: a write landing between them would
            # otherwise report fewer passages than hits, or prune with stale bounds.
            conn.execute("BEGIN")
            try:
                with self._deadline(conn, deadline):
                    stats = self._term_stats(index, conn)
                    with self._shared_lock:
                        count, version, any_row = conn.execute(_STATE_SQL).fetchone()
                        shared = self._shared_postings(index, stats, int(version))
                    count = int(count or 0)
                    if count == 0 and not any_row:
                        return IndexEmpty(index=index, backend=self.name)
                    if (count == 0) != (not any_row):
                        raise Inconsistent(
                            f"the index counts {count} passage(s) but its table holds "
                            f"{'some' if any_row else 'none'}: rows were changed behind it"
                        )
                    terms = query_terms(query)
                    if not terms:
                        return NoMatch(index=index, backend=self.name, searched=count)
                    stats.sync(conn, int(version), shared)
                    if filters:
                        ranked = self._filtered(conn, stats, terms, top_k, filters)
                    else:
                        warm = index in self._searched
                        if not warm:
                            self._searched.add(index)
                        if warm and pruning.fits(stats, self.postings_bytes):
                            from indexplug_sqlite_fts5 import postings  # numpy: when used

                            ranked = postings.top_k(
                                conn, stats, terms, top_k, budget_bytes=self.postings_bytes
                            )
                        else:
                            ranked = pruning.top_k(conn, stats, terms, top_k)
                    rows = self._rows(conn, ranked)
                    indexed = stats.rows
                    # a short answer (NO_MATCH among them) may be a full-text index emptied
                    # behind its records: its row count (FTS5's averages record, read already
                    # with the term statistics) must be the passages'
                    if len(rows) < top_k and indexed != count:
                        raise Inconsistent(
                            f"the full-text index holds {indexed} row(s) but the passages "
                            f"table {count}: one was changed behind the other; rebuild "
                            "the index"
                        )
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except (sqlite3.Error, NotAnIndex) as exc:
            return self._failure(index, exc, deadline)
        if not rows:
            return NoMatch(index=index, backend=self.name, searched=count)
        # Built without validation: the guard checks every hit (ranks, scores, scale, ids).
        hits = [
            hit(i, score, SCALE.name, searched_passage(*cols))
            for i, (cols, score) in enumerate(rows, start=1)
        ]
        return Searched.from_stored(
            index=index, backend=self.name, hits=hits, searched=count, scale=SCALE
        )

    def _term_stats(self, index: str, conn: sqlite3.Connection) -> pruning.TermStats:
        """This thread's pruning statistics for ``index``, tied to the connection they came
        from (``PRAGMA data_version`` only compares within one connection)."""
        table: dict[str, tuple[sqlite3.Connection, pruning.TermStats]] | None
        table = getattr(self._local, "stats", None)
        if table is None:
            table = self._local.stats = {}
        entry = table.get(index)
        if entry is None or entry[0] is not conn:
            entry = table[index] = (conn, pruning.TermStats())
        return entry[1]

    def _shared_postings(
        self, index: str, stats: pruning.TermStats, version: int
    ) -> pruning.PostingsCache:
        """The postings cache this thread's connection shares for ``index``, decided under
        ``_shared_lock`` right after the read that began its snapshot.

        Each thread has its own connection (the guard runs ops on a pool of threads), and
        reading a term's postings is most of a search's cost: one cache per connection
        would read every term once per thread.  A connection that saw a change since its
        last search (``data_version``: another connection committed; or its own write, or a
        new connection) starts a new shared cache, which is then the state's: every
        connection that saw no change since its last search is in the state the last one to
        start the cache saw (decisions are made in the order of the snapshots, under the
        lock, and no commit came between), so it joins that cache.  A connection still in
        an older state keeps the older cache, which no newer one reads.
        """
        current = self._shared.get(index)
        if current is None or version != stats.version:
            current = self._shared[index] = pruning.PostingsCache()
        return current

    def _forget_stats(self, index: str) -> None:
        """After a write on this thread's connection, which ``data_version`` does not see."""
        entry = getattr(self._local, "stats", {}).get(index)
        if entry is not None:
            entry[1].invalidate()

    @staticmethod
    def _rows(
        conn: sqlite3.Connection, ranked: Sequence[tuple[int, float]]
    ) -> list[tuple[tuple[Any, ...], float]]:
        """The stored columns of the ranked rowids, in rank order: text is read only for the
        rows returned, never for the matches the ranking looked at."""
        if not ranked:
            return []
        ids = "[" + ",".join(str(rowid) for rowid, _ in ranked) + "]"
        found = {row[0]: row[1:] for row in conn.execute(_ROWS_SQL, (ids,))}
        gone = sum(1 for rowid, _ in ranked if rowid not in found)
        if gone:
            raise Inconsistent(
                f"the full-text index ranked {gone} row(s) that are not in the passages "
                "table (deleted behind it); rebuild the index"
            )
        return [(found[rowid], score) for rowid, score in ranked]

    @staticmethod
    def _filtered(
        conn: sqlite3.Connection,
        stats: pruning.TermStats,
        terms: Sequence[str],
        top_k: int,
        filters: Filter | Mapping[str, MetadataValue],
    ) -> list[tuple[int, float]]:
        """Ranking with metadata filters: the matches that pass the filters (in SQL,
        :mod:`~indexplug_sqlite_fts5.sqlfilter`) are all scored, no pruning, with the same
        scores as an unfiltered search gives them."""
        where, params = sqlfilter.to_sql(filters)
        dfs = stats.doc_freqs(conn, terms)
        found = [(t, df) for t, df in zip(terms, dfs, strict=True) if df > 0]
        if not found:
            return []
        within = (
            "SELECT p.rowid FROM passages p WHERE p.rowid IN "
            f"(SELECT rowid FROM fts WHERE fts MATCH ?) AND ({where})"
        )
        return pruning.ranked(
            conn,
            [t for t, _ in found],
            [pruning.summand_scale(stats.rows, df) for _, df in found],
            top_k,
            within=within,
            params=[fts5_expression([t for t, _ in found]), *params],
        )

    @_op
    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        if late := self._late(index, deadline):
            return late
        try:
            conn = self._conn(index, create=False)
            if conn is None:
                return Removed(index=index, backend=self.name, removed=0, missing_ids=list(ids))
            conn.execute(f"PRAGMA busy_timeout={int(deadline.remaining() * 1000)}")
            with self._deadline(conn, deadline):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    removed: list[str] = []
                    for pid in ids:
                        row = conn.execute(
                            "SELECT rowid, text FROM passages WHERE id = ?", (pid,)
                        ).fetchone()
                        if row is None:
                            continue
                        conn.execute(
                            "INSERT INTO fts(fts, rowid, text) VALUES ('delete', ?, ?)", row
                        )
                        conn.execute("DELETE FROM passages WHERE rowid = ?", (row[0],))
                        removed.append(pid)
                    conn.execute(
                        "UPDATE meta SET value = CAST(value AS INTEGER) - ? WHERE key = 'count'",
                        (len(removed),),
                    )
                    conn.execute("COMMIT")
                    self._forget_stats(index)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        except (sqlite3.Error, NotAnIndex) as exc:
            return self._failure(index, exc, deadline)
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=removed)

    @_op
    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        if late := self._late(index, deadline):
            return late
        try:
            conn = self._conn(index, create=False)
            if conn is None:
                return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
            count = int(self._meta(conn, "count") or 0)
            budget = self._meta(conn, "max_bytes")
            tokens = pruning._averages(conn)[1]
            in_memory = pruning.fits(pruning.TermStats(tokens=tokens), self.postings_bytes)
            return IndexStatus(
                index=index,
                backend=self.name,
                exists=True,
                passages=count,
                bytes_used=self._size(conn),
                max_bytes=int(budget) if budget else None,
                details={
                    "path": str(self.path(index)),
                    "tokens": tokens,
                    # how searches are ranked: from postings held in memory, or by FTS5
                    "ranking": "postings in memory" if in_memory else "fts5 (pruned)",
                },
            )
        except (sqlite3.Error, NotAnIndex) as exc:
            return self._failure(index, exc, deadline)

    # -- the data interface: get, scan, indexes ------------------------------------------
    @_op
    def get(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str], deadline: Deadline
    ) -> GetOutcome:
        """The stored passages with these ids and those of these caller keys, from one read
        snapshot (so a key being replaced comes back whole, old or new)."""
        if late := self._late(index, deadline):
            return late
        try:
            conn = self._conn(index, create=False)
            if conn is None:
                return Got(
                    index=index, backend=self.name, missing_ids=list(ids), missing_keys=list(keys)
                )
            rows: list[tuple[Any, ...]] = []
            conn.execute("BEGIN")
            try:
                with self._deadline(conn, deadline):
                    for column, wanted in (("id", ids), ("key", keys)):
                        if wanted:
                            rows += conn.execute(
                                f"SELECT {_COLUMNS} FROM passages p WHERE p.{column} IN "
                                "(SELECT value FROM json_each(?)) ORDER BY p.key, p.id",
                                (json.dumps(list(wanted), ensure_ascii=False),),
                            ).fetchall()
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except (sqlite3.Error, NotAnIndex) as exc:
            return self._failure(index, exc, deadline)
        found = {row[0]: passage_from_row(row) for row in rows}
        order = {pid: n for n, pid in enumerate(ids)}
        passages = sorted(found.values(), key=lambda p: order.get(p.id, len(order)))
        seen_keys = {p.key for p in passages}
        return Got(
            index=index,
            backend=self.name,
            passages=passages,
            missing_ids=[i for i in ids if i not in found],
            missing_keys=[k for k in keys if k not in seen_keys],
        )

    @_op
    def scan(
        self,
        index: str,
        *,
        filters: Filter | Mapping[str, MetadataValue] | None,
        after: str | None,
        limit: int,
        deadline: Deadline,
    ) -> ScanOutcome:
        """One page in ascending id order: keyset pagination on the ``id`` column's index
        (``id > after ORDER BY id``), the filter applied in SQL; one row past the page tells
        whether more follow."""
        if late := self._late(index, deadline):
            return late
        try:
            conn = self._conn(index, create=False)
            if conn is None:
                return Scanned(index=index, backend=self.name, passages=[], next_after=None)
            where, params = sqlfilter.to_sql(filters) if filters else ("1", [])
            sql = (
                f"SELECT {_COLUMNS} FROM passages p WHERE p.id > ? AND {where} "
                "ORDER BY p.id LIMIT ?"
            )
            with self._deadline(conn, deadline):
                rows = conn.execute(sql, [after or "", *params, limit + 1]).fetchall()
        except (sqlite3.Error, NotAnIndex) as exc:
            return self._failure(index, exc, deadline)
        page = [passage_from_row(row) for row in rows[:limit]]
        more = len(rows) > limit
        return Scanned(
            index=index,
            backend=self.name,
            passages=page,
            next_after=page[-1].id if more and page else None,
        )

    def indexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """The ``*.sqlite`` files of the home that are indexes of this backend, with their
        passage counts.  Each is read through a connection of its own that changes nothing (no
        WAL switch, no schema, no upgrade), so a foreign SQLite file, or any other file that
        happens to end in ``.sqlite``, is left as it is and not listed."""
        found: list[IndexInfo] = []
        try:
            paths = sorted(self.home.glob("*.sqlite")) if self.home.is_dir() else []
            for path in paths:
                if late := self._late("", deadline):
                    return late
                name = path.name[: -len(".sqlite")]
                try:
                    validate_index_name(name)
                except InvalidRequest:
                    continue
                count = _probe(path, deadline)
                if count is not None:
                    found.append(IndexInfo(name=name, passages=count))
        except (sqlite3.Error, OSError) as exc:
            return self._failure("", exc, deadline)
        return IndexList(index="", backend=self.name, indexes=found)

    # -- extras --------------------------------------------------------------------------
    @_op
    def op_stats(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        """The file's own figures for ``stats``: pages, free pages, the WAL's size, the rows of
        FTS5's data table (its segments' leaves and structure), and the last write time (the
        newest modification time of the index file and its WAL)."""
        if late := self._late(index, deadline):
            return late
        try:
            conn = self._conn(index, create=False)
            if conn is None:
                return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
            path = self.path(index)
            wal = path.with_name(path.name + "-wal")
            times = [p.stat().st_mtime for p in (path, wal) if p.exists()]
            details = {
                "pages": int(conn.execute("PRAGMA page_count").fetchone()[0]),
                "page_size": int(conn.execute("PRAGMA page_size").fetchone()[0]),
                "freelist_pages": int(conn.execute("PRAGMA freelist_count").fetchone()[0]),
                "wal_bytes": wal.stat().st_size if wal.exists() else 0,
                "fts5_data_rows": int(conn.execute("SELECT count(*) FROM fts_data").fetchone()[0]),
                "last_write": max(times) if times else None,
            }
            count = int(self._meta(conn, "count") or 0)
        except (sqlite3.Error, NotAnIndex, OSError) as exc:
            return self._failure(index, exc, deadline)
        return IndexStatus(
            index=index, backend=self.name, exists=True, passages=count, details=details
        )

    @_op
    def op_optimize(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        """Merge FTS5 segments into one (faster queries after a large ingest)."""
        if late := self._late(index, deadline):
            return late
        try:
            conn = self._conn(index, create=False)
            if conn is None:
                return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
            conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")
            self._forget_stats(index)
        except (sqlite3.Error, NotAnIndex) as exc:
            return self._failure(index, exc, deadline)
        return self.status(index, deadline=deadline)

    @_op
    def op_drop(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        """Delete the index file (and its WAL) entirely; a sensitive op.  A missing index is
        already dropped; a file of that name that is not one of our indexes (another
        program's SQLite file, say) is refused, never deleted."""
        if late := self._late(index, deadline):
            return late
        path = self.path(index)
        if path.exists() and path.stat().st_size > 0:
            try:
                ours = _probe(path, deadline) is not None
            except sqlite3.Error as exc:
                return self._failure(index, exc, deadline)
            if not ours:
                return IndexFailed(
                    index=index,
                    backend=self.name,
                    reason=f"{path.name} is not an indexplug index; it was not deleted",
                    error_type="NotAnIndex",
                )
        conns = getattr(self._local, "conns", {})
        conn = conns.pop(index, None)
        if conn is not None:
            with conn.use:
                conn.shut()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path(index)}{suffix}").unlink(missing_ok=True)
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)

    @_op
    def tamper(self, index: str, passage_id: str, text: str) -> None:
        """Conformance-kit hook: alter a stored passage behind the backend's back."""
        conn = self._conn(index, create=False)
        assert conn is not None
        conn.execute("UPDATE passages SET text = ? WHERE id = ?", (text, passage_id))
        self._forget_stats(index)

    @_op
    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, object]) -> None:
        """Conformance-kit hook: alter fields of a stored row behind the backend's back
        (``text``, ``metadata``, ``licence``, ``provenance``, ``start``, ``end``, ``key``, and
        ``digest``: ``None`` removes it), its id and digest kept unless named, and its full-text
        postings left as they were (as an edit of the file with another SQLite client would
        leave them)."""
        conn = self._conn(index, create=False)
        if conn is None:
            raise LookupError(f"index {index!r} does not exist")
        row = conn.execute(
            'SELECT text, source, start, "end", metadata, key, digest FROM passages WHERE id = ?',
            (passage_id,),
        ).fetchone()
        if row is None:
            raise LookupError(f"passage {passage_id[:12]} is not in index {index!r}")
        text, source, start, end, metadata, key, digest = row
        src = json.loads(source)
        for name in ("licence", "provenance"):
            if name in changes:
                src[name] = changes[name]
        conn.execute(
            'UPDATE passages SET text = ?, source = ?, start = ?, "end" = ?, metadata = ?, '
            "key = ?, digest = ? WHERE id = ?",
            (
                changes.get("text", text),
                json.dumps(src, ensure_ascii=False),
                changes.get("start", start),
                changes.get("end", end),
                json.dumps(changes["metadata"], ensure_ascii=False)
                if "metadata" in changes
                else metadata,
                changes.get("key", key),
                changes.get("digest", digest),
                passage_id,
            ),
        )
        self._forget_stats(index)

    @_op
    def delete_rows(self, index: str, ids: Sequence[str]) -> None:
        """Conformance-kit hook: delete passages' rows from the ``passages`` table but not
        from the full-text index (nor the count), as a ``DELETE`` run with another SQLite
        client would: searches must then answer ``INDEX_FAILED``, never "nothing here"."""
        conn = self._conn(index, create=False)
        if conn is None:
            raise LookupError(f"index {index!r} does not exist")
        conn.executemany("DELETE FROM passages WHERE id = ?", [(i,) for i in ids])
        self._forget_stats(index)


def _probe(path: Path, deadline: Deadline) -> int | None:
    """The passage count of the index file at ``path``, or None when it is not one of ours
    (not SQLite, another application's file, no count).  Reads only: a plain connection in
    ``query_only`` mode, closed before returning."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=max(deadline.remaining(), 0))
    except sqlite3.Error:
        return None
    try:
        conn.execute("PRAGMA query_only = 1")
        if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            return None
        row = conn.execute("SELECT value FROM meta WHERE key = 'count'").fetchone()
        return None if row is None else int(row[0])
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise
        return None
    except sqlite3.DatabaseError:
        return None
    finally:
        conn.close()


class _Connection(sqlite3.Connection):
    """A connection that can be weakly referenced (``sqlite3.Connection`` itself cannot), that
    remembers which file it opened (see :func:`_identity`), and that is held (``use``) by the
    op running on it: closing a connection another thread is running a statement on crashes
    the process, so :meth:`SqliteFts5Backend.close` closes only those it can hold, and marks
    the others ``doomed`` for their thread to close when its op ends."""

    identity: tuple[int, int] | None = None
    closed = False
    doomed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.use = threading.RLock()

    def shut(self) -> None:
        """Close it (idempotent; the caller holds ``use`` or owns the connection)."""
        if not self.closed:
            self.closed = True
            try:
                self.close()
            except sqlite3.Error:
                pass


def _identity(path: Path) -> tuple[int, int] | None:
    """The file at ``path`` as (device, inode), None if there is none: a dropped index whose
    name was used again is another file, which a connection cached for the old one must not
    serve (it would read and write the deleted file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


WAL_SWITCH_S = 10.0
"""Longest a new connection keeps retrying the switch of a new file to WAL."""


def _ensure_wal(conn: sqlite3.Connection) -> None:
    """Put the file in WAL mode (it stays so: the mode is recorded in the file).

    Switching needs the file to itself, and SQLite answers ``database is locked`` at once,
    without its busy handler, while another connection is using it: which is exactly what
    happens when several threads or processes open a new index together.  So the mode is read
    first (an index already in WAL needs nothing) and the switch retried for a while.
    """
    if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
        return
    give_up = time.monotonic() + WAL_SWITCH_S
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > give_up:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _stored_rows(passages: Sequence[Passage]) -> list[tuple[Any, ...]]:
    """The ``passages`` rows for ``passages``.

    A source is serialised once per object (the passages of one document share theirs), by
    pydantic's serializer directly: the same JSON as ``model_dump_json`` without its per-call
    Python overhead, which was a few percent of indexing time.
    """
    to_json = Source.__pydantic_serializer__.to_json
    sources: dict[int, str] = {}  # by id(): every source stays alive for the whole loop
    rows = []
    for p in passages:
        source = sources.get(id(p.source))
        if source is None:
            source = sources[id(p.source)] = to_json(p.source, exclude_none=True).decode()
        metadata = json.dumps(p.metadata, ensure_ascii=False) if p.metadata else "{}"
        rows.append(
            (p.id, p.text, source, p.document_sha256, p.start, p.end, metadata, p.digest, p.key)
        )
    return rows


def _upgrade_from_1(conn: sqlite3.Connection) -> None:
    """Give an index written before digests (schema 1) its ``digest`` column, each row's
    digest computed from the row as it is now: the index is trusted as found at upgrade, and
    every change after it is caught."""
    conn.execute("ALTER TABLE passages ADD COLUMN digest TEXT")
    columns = _COLUMNS.replace(", p.digest, p.key", ", NULL, NULL")
    rows = conn.execute(f"SELECT p.rowid, {columns} FROM passages p").fetchall()
    conn.executemany(
        "UPDATE passages SET digest = ? WHERE rowid = ?",
        [(passage_from_row(r[1:]).expected_digest(), r[0]) for r in rows],
    )


def _upgrade_from_2(conn: sqlite3.Connection) -> None:
    """Give an index written before caller keys (schema 2) its ``key`` column and the index
    on it.  Every row has no key, which is what its digest already covers (a passage without
    a key has the digest it had before keys existed), so no row is rewritten."""
    conn.execute("ALTER TABLE passages ADD COLUMN key TEXT")
    conn.execute("CREATE INDEX passages_key ON passages(key) WHERE key IS NOT NULL")


_UPGRADES = {1: _upgrade_from_1, 2: _upgrade_from_2}
"""Each older schema version and the step that brings it to the next one."""


def _upgrade(conn: sqlite3.Connection) -> None:
    """Bring an index of an older schema to :data:`SCHEMA_VERSION`, step by step, in one
    transaction under the write lock (so one connection does it, and a failure leaves the file
    as it was)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        while version in _UPGRADES:
            _UPGRADES[version](conn)
            version += 1
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


_OPTIONS: list[str] | None = None


def _compile_options() -> str:
    global _OPTIONS
    if _OPTIONS is None:
        with sqlite3.connect(":memory:") as c:
            _OPTIONS = [r[0].lower() for r in c.execute("PRAGMA compile_options")]
            try:
                c.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
                _OPTIONS.append("fts5")
            except sqlite3.Error:
                pass
    return " ".join(_OPTIONS)
