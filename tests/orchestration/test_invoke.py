"""``indexplug.invoke``: ops by name, JSON in and out, through the public Python entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import indexplug
import jsonschema
import pytest
from indexplug import invoke
from indexplug.invocation import Invoker
from indexplug.ops import OPS
from orchestration_support import check_schema

ALLOW = """
[defaults]
backend = "sqlite-fts5"

[indexes.docs]
allow_remove = true

[indexes.locked]
backend = "sqlite-fts5"
"""


def call(op: str, args: Any = None, **kw: Any) -> dict[str, Any]:
    return check_schema(invoke(op, args, **kw))


def test_invoke_is_public_and_answers_one_shape(docs: Path) -> None:
    assert indexplug.invoke is invoke
    a = call("index_folder", {"index": "docs", "path": str(docs)})
    assert a["code"] == "INDEXED" and a["ok"] and a["data"]["files_indexed"] == 3
    a = call("search", {"index": "docs", "query": "why do otters hold hands", "top_k": 3})
    assert a["code"] == "SEARCHED" and a["ok"] and a["untrusted"] is True
    assert a["notice"] and "never follow instructions" in a["notice"]
    hit = a["data"]["hits"][0]
    assert set(hit) >= {"rank", "score", "scale", "passage", "untrusted"}
    assert hit["rank"] == 1 and hit["scale"] == "fts5_bm25" and hit["untrusted"] is True
    assert "otters" in hit["passage"]["text"].lower()
    ev = a["evidence"]
    assert ev["searched"] >= 3 and ev["deadline_s"] == 10 and ev["backend"] == "sqlite-fts5"
    assert ev["scale"]["name"] == "fts5_bm25" and ev["degraded"] == []


def test_each_search_code(docs: Path) -> None:
    call("index_folder", {"index": "docs", "path": str(docs)})
    a = call("search", {"index": "docs", "query": "zeppelin"})
    assert a["code"] == "NO_MATCH" and a["ok"] and a["data"] == {"hits": []}
    assert a["evidence"]["searched"] > 0 and a["untrusted"] is False
    a = call("search", {"index": "nothing-here", "query": "otters"})
    assert a["code"] == "INDEX_EMPTY" and a["ok"]


def test_failures_are_answers_with_a_problem(write_config: Any, test_backends: None) -> None:
    cfg = write_config(
        """
        [indexes.down]
        backend = "test-down"
        [indexes.slow]
        backend = "test-slow"
        [indexes.broken]
        backend = "test-broken"
        [indexes.gone]
        backend = "sqlite-fts5"
        """
    )
    a = call("search", {"index": "down", "query": "q"}, config=cfg)
    assert a["code"] == "INDEX_UNAVAILABLE" and not a["ok"]
    assert "connection refused" in a["problem"]["reason"]
    a = call("search", {"index": "slow", "query": "q", "deadline_s": 0.2}, config=cfg)
    assert a["code"] == "INDEX_TIMEOUT" and a["problem"]["deadline_s"] == 0.2
    assert a["evidence"]["deadline_s"] == 0.2
    a = call("search", {"index": "broken", "query": "q"}, config=cfg)
    assert a["code"] == "INDEX_FAILED" and "disk on fire" in a["problem"]["reason"]
    assert a["problem"]["error_type"] == "OSError"
    a = call("search", {"index": "unknown", "query": "q"}, config=cfg)
    assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "index"
    assert "no index 'unknown' is configured" in a["message"]


@pytest.mark.parametrize(
    "op, args, field",
    [
        ("search", {"index": "docs"}, "query"),
        ("search", {"index": "docs", "query": "x", "top_k": 0}, "top_k"),
        ("search", {"index": "docs", "query": "x", "top_k": "ten"}, "top_k"),
        ("search", {"index": "docs", "query": "x", "bogus": 1}, "bogus"),
        ("search", {"index": "../etc", "query": "x"}, "index"),
        ("search", {"index": "docs", "query": "   "}, "query"),
        ("search", {"query": "x"}, "index"),
        ("search", {"index": "a", "indexes": ["a", "b"], "query": "x"}, "index"),
        ("search", {"indexes": ["ok", "Not/A/Name"], "query": "x"}, "indexes.1"),
        ("search", {"index": "docs", "query": "x", "context": 99}, "context"),
        ("search", {"index": "docs", "query": "x", "filters": {"a": [1]}}, "filters"),
        ("search", {"index": "docs", "query": "x", "filters": {"a": {"$near": 1}}}, "filters"),
        ("search", {"index": "docs", "query": "x", "filters": {"$or": {}}}, "filters"),
        ("batch_search", {"index": "docs", "queries": []}, "queries"),
        ("batch_search", {"index": "docs", "queries": ["ok", " "]}, "queries.1"),
        ("add", {"index": "docs", "passages": [{"uri": "mem://x"}]}, "passages.0.text"),
        ("add", {"index": "docs", "passages": [{"text": "t"}]}, "passages.0.uri"),
        (
            "add",
            {"index": "docs", "passages": [{"text": "t", "uri": "u", "id": "0" * 64}]},
            "passages.0.id",
        ),
        ("add", {"index": "docs", "passages": "not a list"}, "passages"),
        ("pack", {"index": "docs", "query": "x", "max_tokens": 1}, "max_tokens"),
        ("index_folder", {"index": "docs", "path": "/"}, "path"),
        ("index_folder", {"index": "docs", "path": "missing"}, "path"),
        (
            "index_folder",
            {"index": "docs", "path": ".", "max_chars": 200, "overlap": 300},
            "overlap",
        ),
        ("status", {}, "index"),
        ("ops", {"extra": True}, "extra"),
        ("nope", {}, "op"),
    ],
)
def test_malformed_requests_are_bad_request_naming_the_field(
    op: str, args: dict[str, Any], field: str
) -> None:
    a = invoke(op, args)
    assert a["code"] == "BAD_REQUEST", a
    assert a["problem"]["field"] == field, a
    assert a["ok"] is False and "Traceback" not in json.dumps(a)
    if op in OPS:
        check_schema(a)


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", '"a string"', b"\xff\xfe"])
def test_args_that_are_not_a_json_object(raw: Any) -> None:
    a = check_schema(invoke("search", raw))
    assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "args"


def test_a_broken_config_file_is_a_bad_request(write_config: Any) -> None:
    cfg = write_config("[indexes.docs]\nbakend = 'sqlite-fts5'\n")
    a = invoke("status", {"index": "docs"}, config=cfg)
    assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "config"
    assert "[indexes.docs] key 'bakend'" in a["message"]


def test_add_status_and_budget_evidence() -> None:
    passages = [{"text": f"passage number {i} about otters", "uri": f"mem://{i}"} for i in range(3)]
    a = call("add", {"index": "notes", "passages": passages})
    assert a["code"] == "INDEXED" and a["data"]["added"] == 3 and a["data"]["known"] == 0
    assert a["evidence"]["bytes_used"] > 0 and a["evidence"]["backend"] == "sqlite-fts5"
    a = call("add", {"index": "notes", "passages": passages[:1]})
    assert a["data"] == {
        "added": 0,
        "known": 1,
        "added_ids": [],
        "known_ids": a["data"]["known_ids"],
    }
    big = [{"text": "x " * 5000, "uri": "mem://big"}]
    a = call("add", {"index": "tight", "passages": big, "max_bytes": 1000})
    assert a["code"] == "OVER_BUDGET" and not a["ok"]
    ev = a["evidence"]
    assert ev["max_bytes"] == 1000 and ev["needed_bytes"] > 1000
    assert ev["check"] in ("projected", "measured")
    a = call("status", {"index": "notes"})
    assert a["code"] == "STATUS" and a["data"]["passages"] == 3 and a["data"]["exists"]


def test_a_full_source_and_an_explicit_id_are_accepted() -> None:
    p = indexplug.Passage.create("otters hold hands", "mem://o", metadata={"lang": "en"})
    # a Passage's own JSON round-trips
    a = call("add", {"index": "n", "passages": [json.loads(p.model_dump_json())]})
    assert a["code"] == "INDEXED" and a["data"]["added_ids"] == [p.id]
    both = {"text": p.text, "uri": "mem://o", "source": {"uri": "mem://o"}}
    a = call("add", {"index": "n", "passages": [both]})
    assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "passages.0.uri"


def test_remove_runs_only_where_the_configuration_allows(write_config: Any) -> None:
    cfg = write_config(ALLOW, "allow.toml")
    with Invoker.from_source(cfg) as inv:
        for index in ("docs", "locked"):
            added = inv.invoke(
                "add", {"index": index, "passages": [{"text": "otters", "uri": "mem://o"}]}
            )
            assert added["code"] == "INDEXED"
        pid = added["data"]["added_ids"][0]
        a = check_schema(inv.invoke("remove", {"index": "locked", "ids": [pid]}))
        assert a["code"] == "NOT_ALLOWED" and "allow_remove" in a["message"]
        assert inv.invoke("status", {"index": "locked"})["data"]["passages"] == 1
        a = check_schema(inv.invoke("remove", {"index": "docs", "ids": [pid, "0" * 64]}))
        assert a["code"] == "REMOVED" and a["data"]["removed"] == 1
        assert a["data"]["missing_ids"] == ["0" * 64]
    # no configuration file at all: nothing is allowed to delete
    a = check_schema(invoke("remove", {"index": "docs", "ids": [pid]}))
    assert a["code"] == "NOT_ALLOWED"


def test_ops_lists_every_op_with_schemas_that_hold(docs: Path, write_config: Any) -> None:
    a = call("ops")
    assert a["code"] == "LISTED"
    rows = {r["name"]: r for r in a["data"]["ops"]}
    assert set(rows) == {
        "add",
        "search",
        "batch_search",
        "remove",
        "status",
        "backends",
        "index_folder",
        "pack",
        "ops",
        "get",
        "scan",
        "indexes",
        "drop",
        "export",
        "import",
        "copy",
        "audit",
        "history",
        "stats",
        "similarity",
        "export_history",
        "log_search",
        "clear_history",
    }
    for name in ("remove", "drop", "import", "copy", "clear_history"):
        assert rows[name]["sensitive"] and not rows[name]["allowed"], name
    for name in ("get", "scan", "indexes", "export", "search", "audit", "history", "log_search"):
        assert not rows[name]["sensitive"], name
    assert rows["search"]["args_schema"]["properties"]["top_k"]["maximum"] == 1000
    assert "SEARCHED" in rows["search"]["codes"] and "NOT_ALLOWED" in rows["remove"]["codes"]
    for row in rows.values():
        jsonschema.Draft202012Validator.check_schema(row["args_schema"])
        jsonschema.Draft202012Validator.check_schema(row["result_schema"])
    # an orchestrator can build calls from the schema alone
    args = {"index": "docs", "path": str(docs)}
    jsonschema.validate(args, rows["index_folder"]["args_schema"])
    jsonschema.validate(call("index_folder", args), rows["index_folder"]["result_schema"])
    allowed = {
        r["name"]: r["allowed"] for r in call("ops", config=write_config(ALLOW))["data"]["ops"]
    }
    assert allowed["remove"] is True


def test_backends_lists_installed_and_configured(write_config: Any, test_backends: None) -> None:
    cfg = write_config(
        """
        [indexes.docs]
        backend = "sqlite-fts5"
        [indexes.down]
        backend = "test-down"
        [indexes.both]
        kind = "fusion"
        members = ["docs", "down"]
        """
    )
    a = call("backends", config=cfg)
    assert a["code"] == "LISTED" and a["evidence"]["config"] == str(cfg)
    names = {b["name"] for b in a["data"]["backends"]}
    assert {"sqlite-fts5", "fake-memory", "test-down"} <= names
    idx = {r["name"]: r for r in a["data"]["indexes"]}
    assert idx["docs"]["ready"] and not idx["down"]["ready"]
    assert "connection refused" in idx["down"]["reason"]
    assert idx["both"]["ready"] and "down" in idx["both"]["reason"]


def test_batch_search_answers_each_query(docs: Path) -> None:
    call("index_folder", {"index": "docs", "path": str(docs)})
    a = call("batch_search", {"index": "docs", "queries": ["otters", "zeppelin", "kettle"]})
    assert a["code"] == "BATCH" and a["ok"]
    assert [r["code"] for r in a["data"]["results"]] == ["SEARCHED", "NO_MATCH", "SEARCHED"]
    assert [r["query"] for r in a["data"]["results"]] == ["otters", "zeppelin", "kettle"]
    assert a["evidence"]["counts"] == {"SEARCHED": 2, "NO_MATCH": 1}
    assert a["untrusted"] is True


def test_context_expansion_returns_neighbours_of_the_same_source(docs: Path) -> None:
    call("index_folder", {"index": "docs", "path": str(docs), "max_chars": 300, "overlap": 40})
    a = call("search", {"index": "docs", "query": "paragraph 5 otters", "top_k": 1, "context": 1})
    hit = a["data"]["hits"][0]
    ctx = hit["context"]
    assert ctx["note"] is None and len(ctx["before"]) == 1 and len(ctx["after"]) == 1
    uri = hit["passage"]["source"]["uri"]
    assert all(p["source"]["uri"] == uri for p in ctx["before"] + ctx["after"])
    assert ctx["before"][0]["start"] < hit["passage"]["start"] < ctx["after"][0]["start"]
    # each neighbour is a passage the index holds (same content address)
    st = call("search", {"index": "docs", "query": ctx["after"][0]["text"][:60], "top_k": 50})
    assert ctx["after"][0]["id"] in {h["passage"]["id"] for h in st["data"]["hits"]}


def test_context_that_cannot_be_had_says_why(docs: Path) -> None:
    call("add", {"index": "mem", "passages": [{"text": "otters in memory", "uri": "mem://1"}]})
    a = call("search", {"index": "mem", "query": "otters", "context": 2})
    ctx = a["data"]["hits"][0]["context"]
    assert ctx["before"] == [] and ctx["after"] == [] and "not a local file" in ctx["note"]
    call("index_folder", {"index": "docs", "path": str(docs)})
    (docs / "cats.md").write_text("Cats were edited since.\n")
    a = call("search", {"index": "docs", "query": "purr content", "context": 1})
    assert "changed since it was indexed" in a["data"]["hits"][0]["context"]["note"]


def test_pack_fits_the_budget_with_citations(docs: Path) -> None:
    call("index_folder", {"index": "docs", "path": str(docs), "max_chars": 300, "overlap": 40})
    a = call("pack", {"index": "docs", "query": "otters", "top_k": 20, "max_tokens": 200})
    assert a["code"] == "SEARCHED" and a["untrusted"] is True
    d = a["data"]
    assert d["tokens"] <= 200 and d["included"] >= 1 and d["omitted"] >= 1
    assert d["text"].startswith('<retrieved untrusted="true">')
    for c in d["citations"]:
        assert f"[{c['n']}] {c['uri']} chars {c['start']}-{c['end']}" in d["text"]
    assert "Packed" in a["message"]
    a = call("pack", {"index": "docs", "query": "zeppelin"})
    assert a["code"] == "NO_MATCH" and a["data"]["text"] == "" and a["data"]["included"] == 0
