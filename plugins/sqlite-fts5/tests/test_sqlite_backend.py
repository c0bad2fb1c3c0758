"""sqlite-fts5 specifics the conformance kit cannot know: files, locks, crashes, FTS5 syntax."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from indexplug import (
    Guard,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    InvalidQuery,
    NoMatch,
    OverBudget,
    Passage,
    Searched,
)
from indexplug.deadlines import Deadline
from indexplug_sqlite_fts5 import SqliteFts5Backend
from indexplug_sqlite_fts5.query import fts5_expression, query_terms

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def corpus(n: int, prefix: str = "doc") -> list[Passage]:
    return [
        Passage.create(
            " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) + f" item{i}",
            f"mem://{prefix}/{i}",
            metadata={"n": i, "even": i % 2 == 0},
        )
        for i in range(n)
    ]


@pytest.fixture
def guard(tmp_path: Path) -> Guard:
    g = Guard(SqliteFts5Backend(tmp_path / "idx"))
    yield g
    g.close()


def test_every_search_outcome(guard: Guard, tmp_path: Path) -> None:
    assert isinstance(guard.search("docs", "alpha"), IndexEmpty)
    assert isinstance(guard.add("docs", corpus(20)), Indexed)
    out = guard.search("docs", "alpha item3", top_k=5)
    assert isinstance(out, Searched) and out.hits[0].passage.source.uri == "mem://doc/3"
    assert out.searched == 20
    nm = guard.search("docs", "nothingmatchesthis")
    assert isinstance(nm, NoMatch) and nm.searched == 20
    (tmp_path / "idx" / "junk.sqlite").write_bytes(b"this is not a database at all" * 100)
    failed = guard.search("junk", "alpha")
    assert isinstance(failed, IndexFailed) and "not" in failed.reason


def test_a_foreign_sqlite_file_is_not_an_index(guard: Guard, tmp_path: Path) -> None:
    (tmp_path / "idx").mkdir(exist_ok=True)
    with sqlite3.connect(tmp_path / "idx" / "foreign.sqlite") as c:
        c.execute("CREATE TABLE t(x)")
    for out in (guard.search("foreign", "x"), guard.add("foreign", corpus(1))):
        assert isinstance(out, IndexFailed) and "not an indexplug index" in out.reason
    with sqlite3.connect(tmp_path / "idx" / "foreign.sqlite") as c:
        assert c.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]


def test_filters_are_equality_on_metadata(guard: Guard) -> None:
    guard.add("docs", corpus(20))
    out = guard.search("docs", "alpha beta", top_k=50, filters={"even": True})
    assert isinstance(out, Searched)
    assert {h.passage.metadata["even"] for h in out.hits} == {True}
    one = guard.search("docs", "alpha", top_k=50, filters={"n": 4})
    assert isinstance(one, Searched) and [h.passage.metadata["n"] for h in one.hits] == [4]


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced',
        "alpha NEAR(beta gamma, 2)",
        "alpha AND OR NOT",
        "text:alpha",
        "^alpha*",
        "(alpha) OR (",
        "'; DROP TABLE passages; --",
        "💥 alpha 💥",
        "שלום alpha مرحبا",
        "NOT",
        "***",
    ],
)
def test_fts5_syntax_is_just_words(guard: Guard, query: str) -> None:
    guard.add("docs", corpus(10))
    if not any(c.isalnum() for c in query):  # no word to search: refused, not a "no match"
        with pytest.raises(InvalidQuery):
            guard.search("docs", query)
        return
    out = guard.search("docs", query)
    assert isinstance(out, Searched | NoMatch), out
    assert guard.status("docs").passages == 10  # type: ignore[union-attr]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(min_size=1, max_size=200))
def test_any_text_makes_a_valid_expression(query: str) -> None:
    expr = fts5_expression(query_terms(query))
    with sqlite3.connect(":memory:") as c:
        c.execute(
            "CREATE VIRTUAL TABLE f USING fts5(t, tokenize='porter unicode61 remove_diacritics 2')"
        )
        c.execute("INSERT INTO f VALUES ('alpha beta')")
        if expr:
            c.execute("SELECT rowid FROM f WHERE f MATCH ?", (expr,)).fetchall()


def test_ten_thousand_word_query(guard: Guard) -> None:
    guard.add("docs", corpus(10))
    out = guard.search("docs", " ".join(f"w{i}" for i in range(10_000)) + " alpha")
    assert isinstance(out, Searched | NoMatch)


def test_deadline_is_enforced_inside_sqlite(guard: Guard) -> None:
    for b in range(4):
        guard.add("big", corpus(2500, prefix=f"b{b}"))
    out = guard.search("big", " ".join(WORDS), top_k=10, deadline_s=0.0005)
    assert isinstance(out, IndexTimeout)
    assert isinstance(guard.search("big", "alpha", top_k=3), Searched)


def test_a_writer_that_cannot_get_the_lock_times_out(guard: Guard, tmp_path: Path) -> None:
    guard.add("docs", corpus(5))
    holder = sqlite3.connect(tmp_path / "idx" / "docs.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        out = guard.add("docs", corpus(3, prefix="late"), deadline_s=0.3)
        # the busy timeout is the deadline: the plugin's own "lock" answer or the guard's
        # "after its deadline", and either way the caller is released while the lock is
        # still held (it is let go only below), so it did not wait for the lock
        assert isinstance(out, IndexTimeout)
        assert isinstance(guard.search("docs", "alpha"), Searched)  # readers still served
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert isinstance(guard.add("docs", corpus(3, prefix="late")), Indexed)


def test_concurrent_readers_and_writers_lose_nothing(guard: Guard) -> None:
    errors: list[object] = []

    def writer(w: int) -> None:
        for b in range(5):
            out = guard.add("conc", corpus(40, prefix=f"w{w}b{b}"), deadline_s=30)
            if not isinstance(out, Indexed):
                errors.append(out)

    def reader() -> None:
        for _ in range(30):
            out = guard.search("conc", "alpha", deadline_s=30)
            if not isinstance(out, Searched | NoMatch | IndexEmpty):
                errors.append(out)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert guard.status("conc").passages == 4 * 5 * 40  # type: ignore[union-attr]


def test_budget_refusal_leaves_the_file_content_identical(guard: Guard, tmp_path: Path) -> None:
    first = guard.add("b", corpus(10), max_bytes=200_000)
    assert isinstance(first, Indexed)
    path = tmp_path / "idx" / "b.sqlite"

    def content() -> list[tuple]:
        with sqlite3.connect(path) as c:
            return c.execute("SELECT id, text FROM passages ORDER BY id").fetchall()

    before = content()
    big = [Passage.create("word " * 20_000, f"mem://big/{i}") for i in range(5)]
    out = guard.add("b", big, max_bytes=10**9)  # asking for more does not raise the budget
    assert isinstance(out, OverBudget) and out.max_bytes == 200_000 and out.needed_bytes > 200_000
    assert content() == before


def test_measured_check_refuses_when_projection_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import indexplug_sqlite_fts5.backend as mod

    monkeypatch.setattr(mod, "PROJECTED_OVERHEAD", 0.0)  # make the projection optimistic
    g = Guard(SqliteFts5Backend(tmp_path / "m"))
    g.add("b", corpus(2), max_bytes=120_000)
    out = g.add("b", [Passage.create("word " * 30_000, "mem://big")])
    assert isinstance(out, OverBudget) and out.check == "measured"
    assert g.status("b").passages == 2  # type: ignore[union-attr]


KILLED_WRITER = textwrap.dedent(
    """
    import sys, os
    from pathlib import Path
    from indexplug import Guard, Passage
    from indexplug_sqlite_fts5 import SqliteFts5Backend
    import indexplug_sqlite_fts5.backend as mod
    real = mod.SqliteFts5Backend._size
    def slow_size(conn):
        sys.stdout.write("in-transaction\\n"); sys.stdout.flush()
        import time; time.sleep(60)
        return real(conn)
    g = Guard(SqliteFts5Backend(Path(sys.argv[1])))
    mod.SqliteFts5Backend._size = staticmethod(slow_size)
    ps = [Passage.create(f"killed write {i}", f"mem://k/{i}") for i in range(500)]
    g.add("crash", ps, deadline_s=120)
    """
)


def test_a_write_killed_with_sigkill_leaves_the_index_as_before(
    guard: Guard, tmp_path: Path
) -> None:
    assert isinstance(guard.add("crash", corpus(7)), Indexed)
    guard.close()
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path / "idx")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "in-transaction"
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    g2 = Guard(SqliteFts5Backend(tmp_path / "idx"))
    assert g2.status("crash").passages == 7  # type: ignore[union-attr]
    out = g2.search("crash", "killed alpha", top_k=20)
    assert isinstance(out, Searched) and all("killed" not in h.passage.text for h in out.hits)
    with sqlite3.connect(tmp_path / "idx" / "crash.sqlite") as c:
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert c.execute("SELECT count(*) FROM passages").fetchone() == (7,)
    assert isinstance(g2.add("crash", corpus(3, prefix="after")), Indexed)


def test_connections_of_finished_threads_are_closed(tmp_path: Path) -> None:
    """Connections are per thread: a caller that runs each request on a new thread must not
    pile up open connections (the guard runs ops on its worker threads, which are reused;
    the backend called directly here, as a thread-per-request server would)."""
    import gc

    backend = SqliteFts5Backend(tmp_path)
    g = Guard(backend)
    assert isinstance(g.add("i", corpus(5)), Indexed)
    answers: list[object] = []
    for _ in range(20):
        t = threading.Thread(
            target=lambda: answers.append(
                backend.search("i", "alpha", top_k=10, deadline=Deadline.after(10))
            )
        )
        t.start()
        t.join()
    gc.collect()
    assert len(answers) == 20 and all(isinstance(a, Searched) for a in answers)
    assert len(backend._all) <= 1  # the guard's worker's (from the add), none of the 20
    backend.close()


def test_a_dropped_index_is_not_served_from_another_threads_connection(tmp_path: Path) -> None:
    """A thread's cached connection to a dropped index must not outlive the drop: once the name
    is used again (from any thread) that thread sees the new file, not the deleted one."""
    from concurrent.futures import ThreadPoolExecutor

    backend = SqliteFts5Backend(tmp_path / "idx")

    def add(n: int) -> None:
        backend.add("m", corpus(n), max_bytes=None, deadline=Deadline.after(10))

    def count() -> int:
        st = backend.status("m", deadline=Deadline.after(10))
        assert isinstance(st, IndexStatus)
        return st.passages

    with ThreadPoolExecutor(1) as first, ThreadPoolExecutor(1) as second:
        first.submit(add, 5).result()
        assert first.submit(count).result() == 5  # the first thread holds a connection
        second.submit(backend.op_drop, "m", deadline=Deadline.after(10)).result()
        second.submit(add, 2).result()
        assert first.submit(count).result() == 2
        first.submit(add, 3).result()  # writes go to the new file too
        assert second.submit(count).result() == 3
    backend.close()


def test_close_leaves_a_connection_in_use_to_its_thread(tmp_path: Path) -> None:
    """Closing a connection that another thread is running a statement on crashes the process
    (as when the guard gives up on a worker at its deadline and the caller closes the backend),
    so close() leaves such a connection to its thread, which closes it when its op ends."""
    backend = SqliteFts5Backend(tmp_path)
    assert isinstance(
        backend.add("w", corpus(2), max_bytes=None, deadline=Deadline.after(10)), Indexed
    )
    blocker = sqlite3.connect(tmp_path / "w.sqlite", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the write lock: the add below waits for it
    answers: list[object] = []
    writer = threading.Thread(
        target=lambda: answers.append(
            backend.add("w", corpus(4), max_bytes=None, deadline=Deadline.after(20))
        )
    )
    writer.start()
    for _ in range(3000):  # bounded (30 s at least): until the writer holds its connection
        busy = [c for c in backend._all if not c.use.acquire(blocking=False) or c.use.release()]
        if busy:
            break
        time.sleep(0.01)
    assert busy, "the writer never took its connection"
    backend.close()
    assert all(not c.closed and c.doomed for c in busy)  # left to the writer
    blocker.execute("COMMIT")
    writer.join(timeout=30)
    assert not writer.is_alive() and isinstance(answers[0], Indexed)
    assert all(c.closed for c in busy)  # closed by the writer when its add ended
    status = backend.status("w", deadline=Deadline.after(10))
    assert isinstance(status, IndexStatus) and status.passages == 4
    blocker.close()
    backend.close()


@pytest.mark.parametrize("filters", [None, {"n": {"$gte": 0}}])
def test_a_full_text_index_emptied_behind_its_records_fails(
    guard: Guard, tmp_path: Path, filters: dict[str, object] | None
) -> None:
    """After FTS5's ``delete-all`` (the records intact), a search that finds nothing, or
    fewer than ``top_k``, answers INDEX_FAILED (not NO_MATCH): the full-text index's row
    count, compared with the records' on every short answer, disagrees."""
    assert isinstance(guard.add("docs", corpus(5)), Indexed)
    assert isinstance(guard.search("docs", "alpha", top_k=50, filters=filters), Searched)
    assert isinstance(guard.search("docs", "nothingmatchesthis", filters=filters), NoMatch)
    with sqlite3.connect(tmp_path / "idx" / "docs.sqlite") as c:
        c.execute("INSERT INTO fts(fts) VALUES('delete-all')")
    for query, top_k in (("alpha", 50), ("nothingmatchesthis", 10)):
        out = guard.search("docs", query, top_k=top_k, filters=filters)
        assert isinstance(out, IndexFailed), out
        assert "full-text index holds 0 row(s)" in out.reason
