"""Every path that deletes or replaces stored passages passes the gate ``remove`` passes.

The op audit: every op in the catalogue is classified here, either as destructive (with the
requests that would delete or replace passages) or as one that cannot lose a passage (with
why).  Each destructive request is sent (``invoke`` and ``ainvoke``, the MCP server's path)
for an index whose configuration does not allow it: it must answer ``NOT_ALLOWED`` and lose
nothing; the same request for an index that allows it must change the index, so each probe is
shown to be a real destructive path.  An op added to the catalogue without a classification
fails :func:`test_every_op_is_classified`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from indexplug import Passage
from indexplug.config import load_config
from indexplug.invocation import Invoker, exit_code
from indexplug.manifest import MARKER_TEXT, MARKER_URI, manifest_path
from indexplug.ops import OPS
from indexplug.outcomes import Scanned
from orchestration_support import check_schema

CONFIG = """
[defaults]
backend = "sqlite-fts5"
folders = ["files"]

[indexes.locked]

[indexes.upsert]
allow_upsert = true

[indexes.open]
allow_remove = true

[indexes.src]
allow_remove = true

[indexes.both]
kind = "fusion"
members = ["open", "locked"]
"""

Probe = Callable[[Invoker, str, Path], dict[str, Any]]
"""Prepares one destructive request for an index (it may write files or damage a manifest)
and returns its arguments."""


def _stored(text: str, uri: str, key: str | None = None, n: int = 0) -> Passage:
    return Passage.create(text, uri, metadata={"n": n}, key=key)


def seed(inv: Invoker, index: str) -> None:
    """Three passages under key doc-1 and two without a key, written past the gate."""
    t = inv.target(index)
    keyed = [
        _stored(f"Otter {i} of doc one floats.", f"mem://doc-1/{i}", "doc-1", i) for i in range(3)
    ]
    loose = [
        _stored(f"Heron {i} stands still.", f"mem://heron/{i}", None, 10 + i) for i in range(2)
    ]
    assert t.guard.add(t.index, keyed + loose).ok


def snapshot(inv: Invoker, index: str) -> list[tuple[str, str, str, str | None]]:
    t = inv.target(index)
    out: list[tuple[str, str, str, str | None]] = []
    after = None
    while True:
        page = t.guard.scan(t.index, after=after, limit=100)
        if not isinstance(page, Scanned):
            return out  # no index (dropped): nothing stored
        out += [
            (p.id, p.text, json.dumps(p.metadata, sort_keys=True), p.key) for p in page.passages
        ]
        if page.next_after is None:
            return out
        after = page.next_after


def _ids(inv: Invoker, index: str) -> list[str]:
    return [row[0] for row in snapshot(inv, index)]


def _keyed_add(inv: Invoker, index: str, tmp: Path) -> dict[str, Any]:
    return {"index": index, "passages": [{"text": "x", "uri": "mem://x", "key": "doc-1"}]}


def _import(inv: Invoker, index: str, tmp: Path) -> dict[str, Any]:
    seed(inv, "src")
    t = inv.target("src")
    assert t.guard.add(t.index, [_stored("Replacement.", "mem://doc-1/new", "doc-1")]).ok
    name = f"files/src-{index}.jsonl"
    out = inv.invoke("export", {"index": "src", "path": name})
    assert out["code"] == "EXPORTED", out
    return {"index": index, "path": name}


def _copy(inv: Invoker, index: str, tmp: Path) -> dict[str, Any]:
    t = inv.target("src")
    assert t.guard.add(t.index, [_stored("A new otter.", "mem://doc-1/9", "doc-1")]).ok
    return {"source": "src", "index": index}


def _copy_restart(inv: Invoker, index: str, tmp: Path) -> dict[str, Any]:
    return {**_copy(inv, index, tmp), "restart": True}


def _lost_manifest_rebuild(inv: Invoker, index: str, tmp: Path) -> dict[str, Any]:
    """index_folder whose manifest was damaged next to an index holding passages: only a drop
    of the whole index could make it right."""
    folder = tmp / "files" / f"docs-{index}"
    folder.mkdir(parents=True)
    (folder / "a.md").write_text("Aardvarks eat ants at night.\n")
    first = inv.invoke("index_folder", {"index": index, "path": str(folder)})
    assert first["code"] == "INDEXED", first
    manifest_path("sqlite-fts5", index).write_text("[1, 2, 3]")
    return {"index": index, "path": str(folder)}


DESTRUCTIVE: dict[str, list[tuple[str, Probe]]] = {
    "add": [("an add with a key replaces the key's passages", _keyed_add)],
    "remove": [
        ("by id", lambda inv, i, _: {"index": i, "ids": _ids(inv, i)[:1]}),
        ("by key", lambda inv, i, _: {"index": i, "keys": ["doc-1"]}),
        ("by filter", lambda inv, i, _: {"index": i, "filters": {"n": {"$gte": 0}}}),
    ],
    "drop": [("the whole index", lambda inv, i, _: {"index": i})],
    "import": [("a file whose key replaces the index's", _import)],
    "copy": [("into an index that holds passages", _copy), ("restarting", _copy_restart)],
    "index_folder": [("a rebuild after a lost manifest", _lost_manifest_rebuild)],
}
"""Ops with a path that deletes or replaces stored passages, and the requests that take it."""

CANNOT_LOSE: dict[str, str] = {
    "search": "reads",
    "batch_search": "reads",
    "pack": "reads",
    "status": "reads",
    "get": "reads",
    "scan": "reads",
    "indexes": "reads",
    "backends": "reads the installation",
    "ops": "reads the catalogue",
    "export": "writes only a new file under the configured folders, never the index",
    "audit": "reads",
    "history": "reads",
    "export_history": "writes only a new file under the configured folders, never the index",
    "log_search": "appends one search-history record, never touches the index",
    "stats": "reads",
    "similarity": "reads",
}
"""Ops that cannot lose a stored passage (add without a key and index_folder's incremental runs
are covered by test_writes_that_need_no_permission_lose_nothing)."""

OTHER_RECORDS: dict[str, str] = {
    "clear_history": "deletes search history, not passages; gated as remove is, proved by "
    "test_history_ops.py::test_clear_history_is_gated_as_remove_and_audited",
}
"""Ops that delete what indexplug records rather than stored passages: sensitive, so gated as
remove is, and proved by their own tests."""


def test_every_op_is_classified() -> None:
    classified = set(DESTRUCTIVE) | set(CANNOT_LOSE) | set(OTHER_RECORDS)
    assert len(classified) == len(DESTRUCTIVE) + len(CANNOT_LOSE) + len(OTHER_RECORDS)
    assert set(OPS) == classified, f"classify these ops for the gate: {set(OPS) ^ classified}"
    for name, spec in OPS.items():
        if spec.sensitive:
            assert name in DESTRUCTIVE or name in OTHER_RECORDS, name
        if name in OTHER_RECORDS:
            assert spec.sensitive, name
        if name in CANNOT_LOSE and CANNOT_LOSE[name] == "reads":
            assert spec.read_only, name


@pytest.fixture
def inv(tmp_path: Path, write_config: Any) -> Any:
    (tmp_path / "files").mkdir()
    with Invoker(load_config(write_config(CONFIG))) as invoker:
        yield invoker


CASES = [(op, why, probe) for op, probes in DESTRUCTIVE.items() for why, probe in probes]


@pytest.mark.parametrize(("op", "why", "probe"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_a_destructive_path_without_the_permission_is_refused(
    inv: Invoker, tmp_path: Path, op: str, why: str, probe: Probe
) -> None:
    seed(inv, "locked")
    args = probe(inv, "locked", tmp_path)
    before = snapshot(inv, "locked")
    assert before
    for run in (inv.invoke, lambda o, a: asyncio.run(inv.ainvoke(o, a))):
        a = check_schema(run(op, args))
        assert a["code"] == "NOT_ALLOWED" and exit_code(a) == 77, (op, why, a)
        assert snapshot(inv, "locked") == before, (op, why)
    # the same request where the configuration allows it does change the index
    seed(inv, "open")
    args = probe(inv, "open", tmp_path)
    before = snapshot(inv, "open")
    a = check_schema(inv.invoke(op, args))
    assert a["ok"], (op, why, a)
    assert snapshot(inv, "open") != before, (op, why)


def test_a_fusion_needs_the_permission_on_every_member(inv: Invoker) -> None:
    a = inv.invoke("remove", {"index": "both", "keys": ["doc-1"]})
    assert a["code"] == "NOT_ALLOWED"


def test_allow_upsert_allows_a_keyed_add_and_nothing_else(inv: Invoker) -> None:
    seed(inv, "upsert")
    a = inv.invoke("add", _keyed_add(inv, "upsert", Path()))
    assert a["code"] == "INDEXED", a
    keys = [row[3] for row in snapshot(inv, "upsert")]
    assert keys.count("doc-1") == 1  # the key's three passages replaced by one
    for op, args in (
        ("remove", {"index": "upsert", "keys": ["doc-1"]}),
        ("drop", {"index": "upsert"}),
    ):
        assert inv.invoke(op, args)["code"] == "NOT_ALLOWED"


def test_writes_that_need_no_permission_lose_nothing(inv: Invoker, tmp_path: Path) -> None:
    """An add without a key (the same passage with other metadata is known, not replaced),
    index_folder into an index holding the marker of earlier versions with an empty folder (a
    first ingest removes nothing), and export."""
    seed(inv, "locked")
    t = inv.target("locked")
    forged = Passage.create(MARKER_TEXT, MARKER_URI, metadata={"indexplug": "ingest-marker"})
    assert t.guard.add(t.index, [forged]).ok
    before = snapshot(inv, "locked")
    same = {"text": "Heron 0 stands still.", "uri": "mem://heron/0", "metadata": {"n": 99}}
    a = inv.invoke("add", {"index": "locked", "passages": [same]})
    assert a["code"] == "INDEXED" and a["data"]["known"] == 1, a
    (tmp_path / "files" / "empty").mkdir()
    a = inv.invoke("index_folder", {"index": "locked", "path": "files/empty"})
    assert a["code"] == "INDEXED" and a["data"]["rebuilt"] is None, a
    assert a["data"]["passages_removed"] == 0
    a = inv.invoke("export", {"index": "locked", "path": "files/out.jsonl"})
    assert a["code"] == "EXPORTED", a
    assert snapshot(inv, "locked") == before
    status = inv.invoke("status", {"index": "locked"})
    assert status["data"]["passages"] == len(before) == 6
