"""The search history store: bounded queue (a stuck disk drops and counts, never blocks),
retention by rows and age, bound-parameter filters, and a file that is a link or damaged is
refused."""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from indexplug.history import HistoryError, HistoryStore


def _rec(h: HistoryStore, **kw: Any) -> bool:
    args: dict[str, Any] = {
        "caller": "python",
        "op": "search",
        "index": "docs",
        "backend": "sqlite-fts5",
        "mode": "full",
        "query": "otters",
        "top_k": 10,
        "filters": None,
        "outcome": "SEARCHED",
        "hits": [("a" * 64, 1.5, 1)],
        "latency_ms": 1.0,
    }
    args.update(kw)
    return h.record(**args)


def test_records_are_written_and_paged(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    try:
        for i in range(5):
            assert _rec(h, index="docs" if i % 2 else "other", caller=f"c{i}")
        rows, more = h.page(index="other", limit=2)
        assert [r["caller"] for r in rows] == ["c0", "c2"] and more == rows[-1]["id"]
        rows, more = h.page(index="other", after=more, limit=2)
        assert [r["caller"] for r in rows] == ["c4"] and more is None
        assert rows[0]["hits"] == [{"id": "a" * 64, "score": 1.5, "rank": 1}]
        assert oct(h.path.stat().st_mode & 0o777) == "0o600"
    finally:
        h.close()


def test_hashed_keeps_no_query_text(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    try:
        _rec(h, mode="hashed", query="secret diagnosis")
        _rec(h, mode="hashed", query="secret diagnosis")
        rows, _ = h.page()
        assert all(r["query"] is None for r in rows)
        assert rows[0]["query_hash"] == rows[1]["query_hash"] == h.query_hash("secret diagnosis")
        h.flush()
    finally:
        h.close()
    assert b"secret diagnosis" not in b"".join(p.read_bytes() for p in (tmp_path / "h").iterdir())


def test_filters_are_parameters_not_sql(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    try:
        _rec(h)
        rows, _ = h.page(index="x' OR '1'='1")
        assert rows == []
        assert h.clear(index="x'; DROP TABLE searches; --") == 0
        assert len(h.page()[0]) == 1
    finally:
        h.close()


def test_retention_by_rows_and_by_age(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h", max_rows=3, max_age_s=3600)
    try:
        _rec(h, at=time.time() - 7200, caller="old")
        for i in range(5):
            _rec(h, caller=f"c{i}")
        h.flush()
        _rec(h, caller="last")
        rows, _ = h.page()
        assert [r["caller"] for r in rows] == ["c3", "c4", "last"]
    finally:
        h.close()


def test_a_stuck_disk_drops_and_counts_never_blocks(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h", queue_size=4)
    # The writer thread opens its own connection when it starts; let it finish that (one
    # written record proves it) so the lock below races nothing but the records under test.
    assert _rec(h, caller="first") and h.flush()
    blocker = sqlite3.connect(h.path, timeout=10)
    try:
        blocker.execute("BEGIN EXCLUSIVE")  # the writer now waits on the file
        accepted = [_rec(h, caller=f"c{i}") for i in range(50)]
        assert accepted.count(False) == h.dropped > 0
    finally:
        blocker.rollback()
        blocker.close()
    try:
        assert h.flush()
        rows, _ = h.page(limit=1000)
        assert len(rows) == accepted.count(True) + 1
    finally:
        h.close()


def test_clear_by_index_and_time(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    try:
        _rec(h, at=time.time() - 100, caller="old")
        _rec(h, caller="new")
        _rec(h, index="other")
        assert h.clear(index="docs", before=time.time() - 50) == 1
        assert [r["caller"] for r in h.page(index="docs")[0]] == ["new"]
        assert h.clear(index="docs") == 1
        assert [r["index"] for r in h.page()[0]] == ["other"]
    finally:
        h.close()


def test_export_jsonl(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    try:
        for i in range(3):
            _rec(h, caller=f"c{i}")
        buf = io.StringIO()
        assert h.export_jsonl(buf, caller="c1") == 1
        (line,) = buf.getvalue().splitlines()
        assert json.loads(line)["caller"] == "c1"
    finally:
        h.close()


def test_a_link_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "h"
    folder.mkdir()
    other = tmp_path / "elsewhere.sqlite3"
    sqlite3.connect(other).close()
    (folder / "history.sqlite3").symlink_to(other)
    with pytest.raises(HistoryError, match="link"):
        HistoryStore(folder)


def test_a_damaged_file_is_refused(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    _rec(h)
    h.close()
    data = h.path.read_bytes()
    h.path.write_bytes(data[:100] + b"\xff" * 200 + data[300:])
    with pytest.raises(HistoryError):
        HistoryStore(tmp_path / "h")


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from indexplug.history import HistoryStore

    h = HistoryStore(Path(sys.argv[1]))
    n = 0
    while True:
        h.record(caller="python", op="search", index="docs", backend="b", mode="full",
                 query=f"q{n}", top_k=10, filters=None, outcome="SEARCHED",
                 hits=[("x", 1.0, 1)], latency_ms=1.0)
        n += 1
        if n % 20 == 0:
            h.flush()
            print(n, flush=True)
    """
)


def test_kill_9_while_writing_leaves_a_sound_file(tmp_path: Path) -> None:
    folder = tmp_path / "h"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    flushed = [int(proc.stdout.readline()) for _ in range(10)]  # bounded: 200 records
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    h = HistoryStore(folder)  # quick_check passes, or this raises
    try:
        rows, _ = h.page(limit=1000)
        queries = {r["query"] for r in rows}
        assert {f"q{n}" for n in range(max(flushed))} <= queries
    finally:
        h.close()
