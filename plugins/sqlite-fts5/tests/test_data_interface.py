"""sqlite-fts5's data interface: get, scan, indexes, drop, caller keys and operator filters.

The filters are held to :func:`indexplug.filters.matches` by a property test over generated
metadata and filters (SQL must give exactly the passages the reference gives, in scan and in
search); upserts to atomicity by a reader racing a writer; old files to their upgrade path.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from indexplug import Guard, Passage
from indexplug.filters import MAX_FILTER_NODES, MAX_IN_VALUES, matches, parse_filter
from indexplug.outcomes import (
    Got,
    Indexed,
    IndexFailed,
    IndexList,
    IndexStatus,
    Removed,
    Scanned,
    Searched,
)
from indexplug_sqlite_fts5 import SqliteFts5Backend
from indexplug_sqlite_fts5.backend import APPLICATION_ID, SCHEMA_VERSION

# -- generated metadata and filters ---------------------------------------------------------

EDGE_NUMBERS = [
    2**63 - 1,
    2**63,
    2**63 + 1,
    -(2**63),
    -(2**63) - 1,
    2**70,
    2.0**63,
    9.3e18,
    2.0**53,
]
"""Numbers at SQLite's 64-bit edge, where a stored integer becomes a real."""
scalars = st.one_of(
    st.sampled_from(["a", "b", "", "ä", "1", "true", "B", "a b"]),
    st.integers(-2, 2),
    st.sampled_from([0.5, 1.0, -0.0, 2.0, -2.5, 1e300]),
    st.booleans(),
    st.sampled_from(EDGE_NUMBERS),
)
stored = st.one_of(scalars, st.just("a\x00b"))  # SQLite reads a string up to a NUL only
values = st.one_of(st.none(), stored, st.lists(stored, max_size=3))
FIELDS = ["a", 'q"uo.te[0]']
metadatas = st.dictionaries(st.sampled_from(FIELDS), values, max_size=2)
ordered = st.one_of(
    st.sampled_from(["a", "b", "", "ä", "1"]),
    st.integers(-3, 3),
    st.sampled_from([0.5, 1.0, -2.5, *EDGE_NUMBERS]),
)


def field_filters(name: str) -> st.SearchStrategy[dict[str, Any]]:
    nullable = st.one_of(st.none(), scalars)
    op = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), nullable),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(nullable, min_size=1, max_size=3)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), ordered),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    short = scalars.map(lambda v: {name: v})
    return st.one_of(short, op.map(lambda o: {name: {o[0]: o[1]}}))


leaf = st.sampled_from(FIELDS).flatmap(field_filters)
filters = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda fs: {"$and": fs}),
        st.lists(inner, min_size=1, max_size=3).map(lambda fs: {"$or": fs}),
        inner.map(lambda f: {"$not": f}),
    ),
    max_leaves=6,
)


SCALARS = [
    *["a", "b", "", "ä", "1", "true", "B", "a b"],
    *range(-2, 3),
    *[0.5, 1.0, -0.0, 2.0, -2.5, 1e300],
    True,
    False,
    *EDGE_NUMBERS,
]
FIXED = [
    {},
    *({name: v} for name in FIELDS for v in [*SCALARS, None, []]),
    *({"a": v} for v in [[1, "a"], [True, 2.0], [2**63 + 1, "b"], ["", False, -1]]),
    *({"a": v} for v in ["a\x00b", ["b", "a\x00"], "\x00"]),
    {"a\x00b": 1},
    {"a\x00": "a", "q": 2},
]
"""Every value of the pool under each field, so that each generated filter meets every kind
of value (a bool where a number is asked for, a list, null, nothing, strings and keys with a
NUL character); generated metadata is added to it."""


def canonical(metadata: Any) -> str:
    """JSON keeps each value's type: 1, 1.0 and true differ."""
    return json.dumps(metadata, sort_keys=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(metadatas, max_size=12), st.lists(filters, min_size=1, max_size=8))
def test_sql_filtering_is_the_reference(metas: list[dict[str, Any]], specs: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as home:
        guard = Guard(SqliteFts5Backend(Path(home)))
        try:
            ps = [
                Passage.create(f"common word {i}", f"mem://p/{i}", metadata=m)
                for i, m in enumerate([*FIXED, *metas])
            ]
            assert isinstance(guard.add("x", ps), Indexed)
            stored = guard.scan("x", limit=1000)
            assert isinstance(stored, Scanned)
            # metadata round-trips exactly, lists and null included
            assert {p.id: canonical(p.metadata) for p in stored.passages} == {
                p.id: canonical(dict(p.metadata)) for p in ps
            }
            for spec in specs:
                f = parse_filter(spec)
                want = sorted(p.id for p in ps if matches(f, p.metadata))
                page = guard.scan("x", filters=spec, limit=1000)
                assert isinstance(page, Scanned), page
                assert [p.id for p in page.passages] == want, spec
                found = guard.search("x", "common", top_k=1000, filters=spec)
                got = sorted(h.passage.id for h in found.hits) if found.code == "SEARCHED" else []
                assert found.code in ("SEARCHED", "NO_MATCH") and got == want, spec
        finally:
            guard.close()


def test_every_operator_with_every_pool_value_is_the_reference(tmp_path: Path) -> None:
    """Each condition of the language, with each value of the pool (the 64-bit edges
    included), over every kind of stored value: exactly the reference's passages."""
    guard = Guard(SqliteFts5Backend(tmp_path))
    ps = [
        Passage.create(f"common word {i}", f"mem://p/{i}", metadata=m) for i, m in enumerate(FIXED)
    ]
    guard.add("x", ps)
    specs: list[dict[str, Any]] = [{"a": {"$exists": b}} for b in (True, False)]
    for v in [*SCALARS, None]:
        specs += [{"a": {op: v}} for op in ("$eq", "$ne")]
        specs += [{"a": {op: [v, "b"]}} for op in ("$in", "$nin")]
        if v is not None and type(v) is not bool:
            specs += [{"a": {op: v}} for op in ("$gt", "$gte", "$lt", "$lte")]
    for spec in specs:
        f = parse_filter(spec)
        page = guard.scan("x", filters=spec, limit=1000)
        assert isinstance(page, Scanned), (spec, page)
        assert [p.id for p in page.passages] == sorted(
            p.id for p in ps if matches(f, p.metadata)
        ), spec
    guard.close()


def test_the_largest_filter_the_language_allows_is_served(tmp_path: Path) -> None:
    """As many ``$in`` lists of as many values as the parser accepts: far more values than
    SQLite takes parameters, still answered exactly."""
    n = MAX_FILTER_NODES - 1  # the $or is a node too
    spec = {
        "$or": [
            {
                "a": {
                    "$in": [
                        f"{i}:{j}" if i % 2 else i * MAX_IN_VALUES + j for j in range(MAX_IN_VALUES)
                    ]
                }
            }
            for i in range(n)
        ]
    }
    f = parse_filter(spec)
    metas = [{"a": 5}, {"a": "3:7"}, {"a": [2 * MAX_IN_VALUES + 1.0]}, {"a": "2:1"}, {"a": True}]
    ps = [
        Passage.create(f"common word {i}", f"mem://p/{i}", metadata=m) for i, m in enumerate(metas)
    ]
    guard = Guard(SqliteFts5Backend(tmp_path))
    guard.add("x", ps)
    want = sorted(p.id for p in ps if matches(f, p.metadata))
    assert len(want) == 3
    page = guard.scan("x", filters=spec, limit=100)
    assert isinstance(page, Scanned), page
    assert [p.id for p in page.passages] == want
    found = guard.search("x", "common", top_k=100, filters=spec)
    assert isinstance(found, Searched) and sorted(h.passage.id for h in found.hits) == want
    guard.close()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"n": 1}, ["int", "float", "list"]),  # 1 == 1.0, never true
        ({"n": True}, ["bool"]),
        ({"n": "1"}, ["str"]),
        ({"n": None}, ["none", "missing", "empty"]),  # null == missing == []
        ({"n": {"$exists": True}}, ["int", "float", "bool", "str", "list", "big"]),
        ({"n": {"$ne": 1}}, ["bool", "str", "none", "missing", "empty", "big"]),
        ({"n": {"$gt": 0}}, ["int", "float", "list", "big"]),  # strings and bools never compare
        ({"n": {"$gt": "0"}}, ["str"]),
        ({"n": {"$gte": 2**63}}, ["big"]),  # past SQLite's integers: still exact
        ({"n": {"$lt": 2**70}}, ["int", "float", "list", "big"]),
        ({"n": {"$gt": 2**63}}, ["big"]),  # 2**63 + 1 is read as the real 2**63 by SQLite
        ({"n": {"$in": [None, "1"]}}, ["str", "none", "missing", "empty"]),
        ({"n": {"$nin": [1, True]}}, ["str", "none", "missing", "empty", "big"]),
    ],
)
def test_filter_edges(tmp_path: Path, spec: dict[str, Any], expected: list[str]) -> None:
    docs = {
        "int": 1,
        "float": 1.0,
        "bool": True,
        "str": "1",
        "list": [5, 1],
        "none": None,
        "empty": [],
        "big": 2**63 + 1,
    }
    ps = [
        Passage.create(f"word {name}", f"mem://{name}", metadata={"name": name, "n": v})
        for name, v in docs.items()
    ]
    ps.append(Passage.create("word missing", "mem://missing", metadata={"name": "missing"}))
    guard = Guard(SqliteFts5Backend(tmp_path))
    guard.add("x", ps)
    page = guard.scan("x", filters=spec, limit=100)
    assert isinstance(page, Scanned)
    assert sorted(str(p.metadata["name"]) for p in page.passages) == sorted(expected)
    guard.close()


# -- get, scan, indexes, drop ---------------------------------------------------------------


def docs(n: int, key: str | None = None, word: str = "alpha") -> list[Passage]:
    return [
        Passage.create(f"{word} passage {i}", f"mem://{key or 'doc'}/{word}/{i}", key=key)
        for i in range(n)
    ]


@pytest.fixture
def guard(tmp_path: Path) -> Any:
    g = Guard(SqliteFts5Backend(tmp_path / "home"))
    yield g
    g.close()


def test_scan_pages_through_everything_once_in_id_order(guard: Guard) -> None:
    ps = docs(23)
    guard.add("x", ps)
    seen: list[str] = []
    cursor = None
    for _ in range(30):  # bounded: 23 passages in pages of 5 need 5
        page = guard.scan("x", after=cursor, limit=5)
        assert isinstance(page, Scanned)
        seen += [p.id for p in page.passages]
        cursor = page.next_after
        if cursor is None:
            break
    assert seen == sorted(p.id for p in ps)
    exact = guard.scan("x", limit=23)  # a page that is exactly the rest: nothing follows
    assert isinstance(exact, Scanned) and len(exact.passages) == 23 and exact.next_after is None
    past = guard.scan("x", after="f" * 64, limit=5)
    assert isinstance(past, Scanned) and past.passages == [] and past.next_after is None


def test_get_by_id_and_key_lists_what_is_missing(guard: Guard) -> None:
    plain, keyed = docs(3), docs(2, key="k")
    guard.add("x", [*plain, *keyed])
    out = guard.get("x", [plain[1].id, "0" * 64, keyed[0].id], keys=["k", "nope"])
    assert isinstance(out, Got)
    assert {p.id for p in out.passages} == {plain[1].id, keyed[0].id, keyed[1].id}
    assert out.missing_ids == ["0" * 64] and out.missing_keys == ["nope"]
    assert {p.key for p in out.passages if p.id != plain[1].id} == {"k"}
    assert next(p for p in out.passages if p.id == plain[1].id).key is None
    missing = guard.get("absent", [plain[0].id], keys=["k"])
    assert isinstance(missing, Got) and missing.passages == []
    assert missing.missing_ids == [plain[0].id] and missing.missing_keys == ["k"]
    empty = guard.scan("absent", limit=10)
    assert isinstance(empty, Scanned) and empty.passages == [] and empty.next_after is None


def test_indexes_lists_only_our_files_and_changes_no_other(guard: Guard, tmp_path: Path) -> None:
    home = tmp_path / "home"
    listed = guard.indexes()
    assert isinstance(listed, IndexList) and listed.indexes == []  # no home yet
    guard.add("one", docs(3))
    guard.add("two", docs(1))
    guard.remove("one", [docs(3)[0].id])
    with sqlite3.connect(home / "foreign.sqlite") as c:
        c.execute("CREATE TABLE t(x)")
    (home / "junk.sqlite").write_bytes(b"not a database" * 20)
    (home / "empty.sqlite").write_bytes(b"")
    (home / "Bad Name.sqlite").write_bytes(b"")
    before = {p.name: p.read_bytes() for p in home.iterdir() if p.suffix == ".sqlite"}
    listed = guard.indexes()
    assert isinstance(listed, IndexList)
    assert [(i.name, i.passages) for i in listed.indexes] == [("one", 2), ("two", 1)]
    for name in ("foreign.sqlite", "junk.sqlite", "empty.sqlite", "Bad Name.sqlite"):
        assert (home / name).read_bytes() == before[name]
    assert not (home / "foreign.sqlite-wal").exists()


def test_drop_answers_missing_and_refuses_a_foreign_file(guard: Guard, tmp_path: Path) -> None:
    gone = guard.drop("never")
    assert isinstance(gone, IndexStatus) and gone.exists is False
    guard.add("x", docs(2))
    dropped = guard.drop("x")
    assert isinstance(dropped, IndexStatus) and not dropped.exists
    again = guard.drop("x")
    assert isinstance(again, IndexStatus) and not again.exists
    with sqlite3.connect(tmp_path / "home" / "theirs.sqlite") as c:
        c.execute("CREATE TABLE t(x)")
    refused = guard.drop("theirs")
    assert isinstance(refused, IndexFailed) and "not an indexplug index" in refused.reason
    assert (tmp_path / "home" / "theirs.sqlite").exists()


# -- caller keys ------------------------------------------------------------------------------


def test_upsert_replaces_a_keys_earlier_passages(guard: Guard) -> None:
    v1, v2 = docs(3, key="doc", word="old"), docs(2, key="doc", word="new")
    other = docs(2, key="other")
    first = guard.add("x", [*v1, *other])
    assert isinstance(first, Indexed) and first.added == 5 and first.replaced == 0
    second = guard.add("x", [v1[0], *v2])  # v1[0] stays: it is in the batch
    assert isinstance(second, Indexed) and second.replaced == 2
    assert second.added == 2 and second.known == 1
    got = guard.get("x", [], keys=["doc", "other"])
    assert isinstance(got, Got)
    assert {p.id for p in got.passages} == {v1[0].id, *(p.id for p in v2), *(p.id for p in other)}
    assert guard.status("x").passages == 5  # type: ignore[union-attr]
    old = guard.search("x", "old", top_k=10)
    assert old.code == "SEARCHED" and [h.passage.id for h in old.hits] == [v1[0].id]  # type: ignore[union-attr]
    same = guard.add("x", [v1[0], *v2])
    assert isinstance(same, Indexed) and same.replaced == 0 and same.known == 3
    removed = guard.remove("x", keys=["doc", "ghost"])
    assert isinstance(removed, Removed) and removed.removed == 3
    assert removed.missing_keys == ["ghost"]


def test_the_same_text_under_another_key_is_a_passage_of_its_own(guard: Guard) -> None:
    """The key is part of the content address: one paragraph in two of the caller's
    documents is two passages, each replaced and removed with its own document."""
    p = docs(1, key="a")[0]
    guard.add("x", [p])
    other = Passage.create(p.text, p.source.uri, key="b", metadata={"v": [1, "a"]})
    assert other.id != p.id
    out = guard.add("x", [other])
    assert isinstance(out, Indexed) and out.added == 1 and out.known == 0 and out.replaced == 0
    got = guard.get("x", [], keys=["a", "b"])
    assert isinstance(got, Got) and got.missing_keys == []
    assert sorted((q.key, q.id) for q in got.passages) == sorted([("a", p.id), ("b", other.id)])
    assert isinstance(guard.remove("x", keys=["a"]), Removed)
    left = guard.get("x", [p.id, other.id])
    assert isinstance(left, Got) and [q.id for q in left.passages] == [other.id]


def test_the_digest_covers_the_key(guard: Guard, tmp_path: Path) -> None:
    p = docs(1, key="mine")[0]
    guard.add("x", [p])
    with sqlite3.connect(tmp_path / "home" / "x.sqlite") as c:
        c.execute("UPDATE passages SET key = 'theirs'")
    for out in (guard.get("x", [p.id]), guard.scan("x", limit=5), guard.search("x", "alpha")):
        assert isinstance(out, IndexFailed), out
    q = docs(1, key="k", word="beta")[0]
    guard.add("y", [q])
    guard.backend.tamper_record("y", q.id, {"key": None})  # type: ignore[attr-defined]
    assert isinstance(guard.get("y", [q.id]), IndexFailed)


def test_an_edit_with_its_digest_removed_is_refused_on_every_read_path(
    guard: Guard, tmp_path: Path
) -> None:
    """Editing a row's licence and metadata and setting its digest to NULL must not launder
    the edit: search, get, scan, export and copy all answer INDEX_FAILED (a digest is never
    computed afresh for a stored passage) and export writes no file."""
    from indexplug import transfer

    p, q = docs(2)
    guard.add("x", [p, q])
    with sqlite3.connect(tmp_path / "home" / "x.sqlite") as c:
        c.execute(
            "UPDATE passages SET source = json_set(source, '$.licence', 'MIT'), "
            "metadata = json_set(metadata, '$.lang', 'fr'), digest = NULL WHERE id = ?",
            (p.id,),
        )
    outs = {
        "search": guard.search("x", "alpha"),
        "get": guard.get("x", [p.id]),
        "scan": guard.scan("x", limit=5),
        "export": transfer.export(guard, "x", tmp_path / "out.jsonl"),
    }
    dst = Guard(SqliteFts5Backend(tmp_path / "other"))
    try:
        outs["copy"] = transfer.copy(guard, "x", dst, "y", home=tmp_path / "state")
    finally:
        dst.close()
    for op, out in outs.items():
        assert isinstance(out, IndexFailed), (op, out)
        assert "no digest" in out.reason, (op, out.reason)
    assert not (tmp_path / "out.jsonl").exists()


def test_readers_never_see_both_versions_of_a_key_or_neither(guard: Guard) -> None:
    versions = [docs(3, key="doc", word="red"), docs(2, key="doc", word="blue")]
    expected = [{p.id for p in v} for v in versions]
    guard.add("x", versions[0])
    done = threading.Event()
    seen: list[set[str]] = []

    def writer() -> None:
        try:
            for i in range(40):
                out = guard.add("x", versions[(i + 1) % 2])
                assert isinstance(out, Indexed) and out.replaced in (2, 3)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reads = 0
    while not done.is_set() and reads < 5000:  # bounded either way
        got = guard.get("x", [], keys=["doc"])
        assert isinstance(got, Got)
        seen.append({p.id for p in got.passages})
        found = guard.search("x", "passage", top_k=10)
        assert isinstance(found, Searched)
        seen.append({h.passage.id for h in found.hits})
        reads += 1
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert seen and all(ids in expected for ids in seen), [
        ids for ids in seen if ids not in expected
    ]


# -- old files --------------------------------------------------------------------------------

SCHEMA_2 = f"""
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = 2;
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE passages (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL,
    source TEXT NOT NULL, document_sha256 TEXT, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    metadata TEXT NOT NULL, digest TEXT
);
CREATE VIRTUAL TABLE fts USING fts5(
    text, content='passages', content_rowid='rowid',
    tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO meta(key, value) VALUES ('count', '1');
"""
"""The schema of version 2 (before caller keys), as that release wrote it."""


def old_file(path: Path, version: int, p: Passage) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = SCHEMA_2.replace("user_version = 2", f"user_version = {version}")
    if version == 1:
        schema = schema.replace("metadata TEXT NOT NULL, digest TEXT", "metadata TEXT NOT NULL")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript("BEGIN;" + schema + "COMMIT;")
    columns = 'id, text, source, start, "end", metadata' + (", digest" if version == 2 else "")
    row = [p.id, p.text, p.source.model_dump_json(exclude_none=True), p.start, p.end]
    row += [json.dumps(dict(p.metadata))] + ([p.digest] if version == 2 else [])
    conn.execute(f"INSERT INTO passages({columns}) VALUES ({','.join('?' * len(row))})", row)
    conn.execute("INSERT INTO fts(rowid, text) SELECT rowid, text FROM passages")
    conn.close()


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_file_is_upgraded_and_still_served(tmp_path: Path, version: int) -> None:
    p = Passage.create("an old passage about alpha", "mem://old", metadata={"tags": ["x", "y"]})
    old_file(tmp_path / "old.sqlite", version, p)
    with sqlite3.connect(tmp_path / "old.sqlite") as c:
        columns = [r[1] for r in c.execute("PRAGMA table_info(passages)")]
        assert "key" not in columns and ("digest" in columns) == (version == 2)
    guard = Guard(SqliteFts5Backend(tmp_path))
    found = guard.search("old", "alpha", filters={"tags": "y"})
    assert isinstance(found, Searched) and found.hits[0].passage == p
    got = guard.get("old", [p.id])
    assert isinstance(got, Got) and got.passages == [p]
    keyed = docs(2, key="k")
    out = guard.add("old", keyed)
    assert isinstance(out, Indexed) and out.added == 2
    replaced = guard.add("old", keyed[:1])
    assert isinstance(replaced, Indexed) and replaced.replaced == 1
    listed = guard.indexes()
    assert isinstance(listed, IndexList) and [(i.name, i.passages) for i in listed.indexes] == [
        ("old", 2)
    ]
    guard.close()
    with sqlite3.connect(tmp_path / "old.sqlite") as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        plan = c.execute("EXPLAIN QUERY PLAN SELECT id FROM passages WHERE key = 'k'").fetchall()
        assert "passages_key" in str(plan)
