"""Search history: what was searched, on which index, by whom, and what came back.

Records go to an SQLite file, ``INDEXPLUG_HOME/history/history.sqlite3``, in WAL mode (a crash
never corrupts it; at worst the last records not yet written are lost).  A search never waits
for the disk: :meth:`HistoryStore.record` puts the record on a bounded queue (``queue``
records, :data:`DEFAULT_QUEUE`) and returns; one writer thread drains the queue in
transactions.  When the queue is full the record is dropped and counted (``dropped``), so a
slow or stuck disk costs a search one non-blocking ``put`` and nothing more.

Retention: after each batch the writer deletes records older than ``max_age_s`` and all but the
newest ``max_rows``.  Under ``hashed`` the query is kept only as its HMAC-SHA-256 under a salt
made once per home (``history/salt``, mode 0600), so equal queries can be counted and matched
against a known query, but not read back.

This is a storage module: it imports nothing above :mod:`indexplug.home`.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import hmac
import json
import os
import queue
import secrets
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from indexplug.errors import IndexplugError
from indexplug.home import home_dir

DEFAULT_QUEUE = 10_000
DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_AGE_S = 30 * 86400.0
BATCH = 500
"""Records the writer commits in one transaction at most."""
FLUSH_S = 5.0
"""How long a reader waits for queued records to be written before it reads."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS searches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    caller TEXT NOT NULL,
    op TEXT NOT NULL,
    idx TEXT NOT NULL,
    backend TEXT NOT NULL,
    mode TEXT NOT NULL,
    query TEXT,
    query_hash TEXT,
    top_k INTEGER,
    filters TEXT,
    outcome TEXT NOT NULL,
    hits TEXT NOT NULL,
    latency_ms REAL
);
CREATE INDEX IF NOT EXISTS searches_time ON searches(time);
CREATE INDEX IF NOT EXISTS searches_idx ON searches(idx, id);
"""
_COLUMNS = (
    "id",
    "time",
    "caller",
    "op",
    "idx",
    "backend",
    "mode",
    "query",
    "query_hash",
    "top_k",
    "filters",
    "outcome",
    "hits",
    "latency_ms",
)


class HistoryError(IndexplugError):
    """The history file cannot be trusted or opened (a link, damage, I/O)."""


def history_dir() -> Path:
    return home_dir() / "history"


def _regular_or_absent(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise HistoryError(f"{path} is a link or not a regular file: refused")


def _salt(folder: Path) -> bytes:
    """The per-home salt of hashed queries, made once (0600, never through a link)."""
    path = folder / "salt"
    flags = os.O_RDONLY | _NOFOLLOW
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise HistoryError(f"{path} cannot be read (a link?): {exc.strerror or exc}") from None
    with os.fdopen(fd) as fh:
        text = fh.read(200).strip()
    if len(text) != 64:
        raise HistoryError(f"{path} is damaged: refused")
    return bytes.fromhex(text)


class HistoryStore:
    """The search history in ``folder`` (default ``INDEXPLUG_HOME/history``)."""

    def __init__(
        self,
        folder: Path | None = None,
        *,
        queue_size: int = DEFAULT_QUEUE,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_age_s: float = DEFAULT_MAX_AGE_S,
    ) -> None:
        self.folder = Path(folder) if folder is not None else history_dir()
        self.path = self.folder / "history.sqlite3"
        self.max_rows = max_rows
        self.max_age_s = max_age_s
        self.dropped = 0
        """Records dropped because the queue was full (since this store was opened)."""
        self.written = 0
        self.failed = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._open()
        self._salt = _salt(self.folder)
        self._writer = threading.Thread(target=self._drain, name="indexplug-history", daemon=True)
        self._writer.start()

    # -- the file --------------------------------------------------------------------------
    def _open(self) -> None:
        if self.folder.is_symlink():
            raise HistoryError(f"{self.folder} is a link, not the history folder: refused")
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for suffix in ("", "-wal", "-shm"):
            _regular_or_absent(Path(f"{self.path}{suffix}"))
        try:
            con = self._connect()
            try:
                ok = con.execute("PRAGMA quick_check").fetchone()
                if not ok or ok[0] != "ok":
                    raise HistoryError(f"{self.path} is damaged: {ok[0] if ok else 'no answer'}")
                con.executescript(_SCHEMA)
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path} is not a history file or is damaged: {exc}") from None
        with contextlib.suppress(OSError):
            os.chmod(self.path, 0o600)

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        return con

    # -- writing ---------------------------------------------------------------------------
    def query_hash(self, query: str) -> str:
        return hmac.new(self._salt, query.encode(), hashlib.sha256).hexdigest()

    def record(
        self,
        *,
        caller: str,
        op: str,
        index: str,
        backend: str,
        mode: str,
        query: str,
        top_k: int | None,
        filters: Any,
        outcome: str,
        hits: Sequence[tuple[str, float, int]],
        latency_ms: float | None,
        at: float | None = None,
    ) -> bool:
        """Queue one search record; never blocks.  False when the queue was full and the
        record was dropped (counted in :attr:`dropped`)."""
        rec = {
            "time": time.time() if at is None else at,
            "caller": caller,
            "op": op,
            "idx": index,
            "backend": backend,
            "mode": mode,
            "query": query if mode == "full" else None,
            "query_hash": self.query_hash(query),
            "top_k": top_k,
            "filters": None if filters is None else json.dumps(filters, sort_keys=True),
            "outcome": outcome,
            "hits": json.dumps([{"id": i, "score": s, "rank": r} for i, s, r in hits]),
            "latency_ms": latency_ms,
        }
        try:
            self._queue.put_nowait(rec)
        except queue.Full:
            with self._lock:
                self.dropped += 1
            return False
        return True

    def _drain(self) -> None:
        con = self._connect()
        cols = _COLUMNS[1:]
        sql = f"INSERT INTO searches ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        while True:
            first = self._queue.get()
            batch = [first]
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            rows = [tuple(r[c] for c in cols) for r in batch if r is not None]
            try:
                if rows:
                    with con:
                        con.executemany(sql, rows)
                        self._retain(con)
                    self.written += len(rows)
            except sqlite3.Error:
                self.failed += len(rows)
            finally:
                for _ in batch:
                    self._queue.task_done()
            if any(r is None for r in batch):
                con.close()
                return

    def _retain(self, con: sqlite3.Connection) -> None:
        con.execute("DELETE FROM searches WHERE time < ?", (time.time() - self.max_age_s,))
        con.execute(
            "DELETE FROM searches WHERE id <= (SELECT MAX(id) FROM searches) - ?",
            (self.max_rows,),
        )

    def flush(self, timeout: float = FLUSH_S) -> bool:
        """Wait (up to ``timeout`` seconds) until every queued record is written."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline or not self._writer.is_alive():
                return False
            time.sleep(0.005)
        return True

    def close(self) -> None:
        if self._writer.is_alive():
            self.flush()
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=FLUSH_S)
            self._writer.join(timeout=FLUSH_S)

    # -- reading ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        _regular_or_absent(self.path)
        con = self._connect()
        try:
            yield con
        finally:
            con.close()

    @staticmethod
    def _where(
        index: str | None,
        caller: str | None,
        outcome: str | None,
        since: float | None,
        until: float | None,
    ) -> tuple[str, list[Any]]:
        parts: list[str] = []
        params: list[Any] = []
        for column, value in (("idx", index), ("caller", caller), ("outcome", outcome)):
            if value is not None:
                parts.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            parts.append("time >= ?")
            params.append(since)
        if until is not None:
            parts.append("time < ?")
            params.append(until)
        return (" AND ".join(parts) or "1"), params

    def page(
        self,
        *,
        index: str | None = None,
        caller: str | None = None,
        outcome: str | None = None,
        since: float | None = None,
        until: float | None = None,
        after: int = 0,
        limit: int = 100,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Records with ``id > after`` passing the filters, oldest first, and the next cursor.
        Every filter is a bound parameter, never SQL text."""
        self.flush()
        where, params = self._where(index, caller, outcome, since, until)
        sql = (
            f"SELECT {', '.join(_COLUMNS)} FROM searches WHERE {where} AND id > ? "
            "ORDER BY id LIMIT ?"
        )
        with self._reader() as con:
            rows = con.execute(sql, [*params, after, limit + 1]).fetchall()
        out = [_row(r) for r in rows[:limit]]
        more = int(out[-1]["id"]) if len(rows) > limit else None
        return out, more

    def clear(self, *, index: str, before: float | None = None) -> int:
        """Delete ``index``'s records (only those before ``before`` when given)."""
        self.flush()
        where, params = self._where(index, None, None, None, before)
        with self._reader() as con, con:
            return int(con.execute(f"DELETE FROM searches WHERE {where}", params).rowcount)

    def export_jsonl(self, out: IO[str], **filters: Any) -> int:
        """Write every record passing ``filters`` (as :meth:`page` takes) to ``out``, one JSON
        object a line; answer how many."""
        n, after = 0, 0
        while True:
            rows, more = self.page(after=after, limit=1000, **filters)
            for r in rows:
                out.write(json.dumps(r, sort_keys=True) + "\n")
            n += len(rows)
            if more is None:
                return n
            after = more


def _row(r: Sequence[Any]) -> dict[str, Any]:
    rec = dict(zip(_COLUMNS, r, strict=True))
    rec["index"] = rec.pop("idx")
    try:
        rec["hits"] = json.loads(rec["hits"])
        rec["filters"] = None if rec["filters"] is None else json.loads(rec["filters"])
    except (TypeError, ValueError):
        raise HistoryError(f"history record {rec['id']} is damaged") from None
    if not isinstance(rec["hits"], list):
        raise HistoryError(f"history record {rec['id']} is damaged")
    return rec


_STORES: dict[tuple[Path, int, int, float], HistoryStore] = {}
_STORES_LOCK = threading.Lock()


def store(
    *,
    queue_size: int = DEFAULT_QUEUE,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_age_s: float = DEFAULT_MAX_AGE_S,
) -> HistoryStore:
    """The process's store for the current home (one writer thread per home and settings),
    flushed and closed at exit."""
    key = (history_dir().resolve(), queue_size, max_rows, max_age_s)
    with _STORES_LOCK:
        found = _STORES.get(key)
        if found is None or not found._writer.is_alive():
            found = HistoryStore(queue_size=queue_size, max_rows=max_rows, max_age_s=max_age_s)
            _STORES[key] = found
        return found


@atexit.register
def _close_all() -> None:
    with _STORES_LOCK:
        stores = list(_STORES.values())
    for s in stores:
        s.close()
