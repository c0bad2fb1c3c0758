"""Search history through ``invoke``: opt-in per index, recorded after the guard for search,
batch_search and log_search, read with ``history``, exported, and cleared only where remove
is allowed (and then audited)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from indexplug.config import Config, Defaults, IndexConfig
from indexplug.invocation import Invoker, exit_code
from indexplug.ops import OPS

PASSAGES = [
    {"text": "otters hold hands while sleeping", "uri": "file:///o.txt"},
    {"text": "cats sleep most of the day", "uri": "file:///c.txt"},
]


def _config(tmp_path: Path | None = None) -> Config:
    return Config(
        defaults=Defaults(
            backend="sqlite-fts5", folders=[str(tmp_path / "out")] if tmp_path else []
        ),
        indexes={
            "full": IndexConfig(backend="sqlite-fts5", history="full", allow_remove=True),
            "hashed": IndexConfig(backend="sqlite-fts5", history="hashed"),
            "quiet": IndexConfig(backend="sqlite-fts5"),
        },
    )


def _history(inv: Invoker, **args: Any) -> list[dict[str, Any]]:
    answer = inv.invoke("history", args)
    assert answer["code"] == "HISTORY", answer
    return list(answer["data"]["records"])


def test_searches_are_recorded_only_where_history_is_on() -> None:
    with Invoker(_config()) as inv:
        for name in ("full", "hashed", "quiet"):
            inv.invoke("add", {"index": name, "passages": PASSAGES})
            got = inv.invoke("search", {"index": name, "query": "otters", "top_k": 3})
            assert got["code"] == "SEARCHED"
        inv.invoke("batch_search", {"index": "full", "queries": ["cats", "zebras"]})
        recs = _history(inv)
    assert [(r["index"], r["op"]) for r in recs] == [
        ("full", "search"),
        ("hashed", "search"),
        ("full", "batch_search"),
        ("full", "batch_search"),
    ]
    full, hashed = recs[0], recs[1]
    assert full["query"] == "otters" and full["top_k"] == 3 and full["outcome"] == "SEARCHED"
    assert full["hits"][0]["rank"] == 1 and len(full["hits"][0]["id"]) == 64
    assert full["caller"] == "python" and full["backend"] == "sqlite-fts5"
    assert full["latency_ms"] >= 0
    assert hashed["query"] is None and hashed["query_hash"] == full["query_hash"]
    assert sorted(r["outcome"] for r in recs[2:]) == ["NO_MATCH", "SEARCHED"]


def test_async_searches_and_filters_are_recorded() -> None:
    with Invoker(_config(), caller="stdio") as inv:
        asyncio.run(inv.ainvoke("add", {"index": "full", "passages": PASSAGES}))
        asyncio.run(
            inv.ainvoke("search", {"index": "full", "query": "otters", "filters": {"lang": "en"}})
        )
        (rec,) = _history(inv, caller="stdio")
    assert rec["filters"] == {"lang": "en"} and rec["outcome"] in ("NO_MATCH", "SEARCHED")


def test_history_pages_and_filters() -> None:
    with Invoker(_config()) as inv:
        inv.invoke("add", {"index": "full", "passages": PASSAGES})
        for q in ("otters", "zebras", "cats"):
            inv.invoke("search", {"index": "full", "query": q})
        first = inv.invoke("history", {"index": "full", "limit": 2})
        assert len(first["data"]["records"]) == 2 and first["data"]["next_after"] is not None
        rest = inv.invoke("history", {"index": "full", "after": first["data"]["next_after"]})
        assert [r["query"] for r in rest["data"]["records"]] == ["cats"]
        assert [r["query"] for r in _history(inv, outcome="NO_MATCH")] == ["zebras"]
        assert _history(inv, since=0, until=1) == []
        assert _history(inv, caller="http") == []


@pytest.mark.parametrize(
    "args",
    [
        {"caller": "x' OR 1=1 --"},
        {"outcome": "searched"},
        {"index": ""},
        {"since": -5},
        {"limit": 5000},
        {"after": "1"},
        {"extra": True},
    ],
)
def test_hostile_history_filters_are_bad_requests(args: dict[str, Any]) -> None:
    with Invoker(_config()) as inv:
        answer = inv.invoke("history", args)
    assert answer["code"] == "BAD_REQUEST" and exit_code(answer) == 64


def test_log_search_records_a_search_run_elsewhere() -> None:
    with Invoker(_config()) as inv:
        hits = [{"id": "b" * 64, "score": 0.03, "rank": 1}]
        logged = inv.invoke(
            "log_search",
            {"index": "full", "query": "fused", "hits": hits, "backend": "fusion"},
        )
        assert logged["code"] == "LOGGED" and logged["data"]["recorded"] is True
        off = inv.invoke("log_search", {"index": "quiet", "query": "fused"})
        assert off["data"] == {"recorded": False, "mode": "off"}
        (rec,) = _history(inv)
    assert rec["op"] == "log_search" and rec["hits"] == hits and rec["backend"] == "fusion"
    bad = Invoker(_config()).invoke("log_search", {"index": "full", "query": "q", "hits": [{}]})
    assert bad["code"] == "BAD_REQUEST"


def test_clear_history_is_gated_as_remove_and_audited() -> None:
    with Invoker(_config()) as inv:
        for name in ("full", "hashed"):
            inv.invoke("search", {"index": name, "query": "otters"})
        refused = inv.invoke("clear_history", {"index": "hashed"})
        assert refused["code"] == "NOT_ALLOWED" and exit_code(refused) == 77
        cleared = inv.invoke("clear_history", {"index": "full"})
        assert cleared["code"] == "CLEARED" and cleared["data"]["cleared"] == 1
        assert [r["index"] for r in _history(inv)] == ["hashed"]
        audit = inv.invoke("audit", {"op": "clear_history"})["data"]["records"]
    assert [(r["index"], r["outcome"], r["counts"]) for r in audit] == [
        ("full", "CLEARED", {"cleared": 1})
    ]
    spec = OPS["clear_history"]
    assert spec.sensitive and not spec.read_only
    assert OPS["history"].read_only and not OPS["history"].sensitive


def test_export_history_writes_a_new_file_under_the_folders(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with Invoker(_config(tmp_path)) as inv:
        inv.invoke("search", {"index": "full", "query": "otters"})
        target = tmp_path / "out" / "h.jsonl"
        got = inv.invoke("export_history", {"path": str(target)})
        assert got["code"] == "EXPORTED" and got["data"]["records"] == 1
        assert json.loads(target.read_text())["query"] == "otters"
        again = inv.invoke("export_history", {"path": str(target)})
        assert again["code"] == "BAD_REQUEST"
        outside = inv.invoke("export_history", {"path": str(tmp_path / "h.jsonl")})
        assert outside["code"] == "BAD_REQUEST" and not (tmp_path / "h.jsonl").exists()


def test_a_damaged_history_never_fails_a_search(tmp_path: Path) -> None:
    from indexplug.history import history_dir

    folder = history_dir()
    folder.mkdir(parents=True)
    (folder / "history.sqlite3").write_bytes(b"not a database" * 100)
    with Invoker(_config()) as inv:
        inv.invoke("add", {"index": "full", "passages": PASSAGES})
        assert inv.invoke("search", {"index": "full", "query": "otters"})["code"] == "SEARCHED"
        assert inv.history_failures == 1  # counted, not raised
        answer = inv.invoke("history", {})
    assert answer["code"] == "INDEX_UNAVAILABLE" and "history" in answer["message"]


CLI_CONFIG = """
[indexes.full]
backend = "sqlite-fts5"
history = "full"
allow_remove = true

[indexes.hashed]
backend = "sqlite-fts5"
history = "hashed"
"""


def test_the_cli_lists_exports_and_clears(tmp_path: Path) -> None:
    from indexplug.cli.app import app
    from typer.testing import CliRunner

    runner = CliRunner()
    cfg = tmp_path / "indexplug.toml"
    cfg.write_text(CLI_CONFIG)
    for index in ("full", "hashed"):
        args = {"index": index, "query": "otters"}
        got = runner.invoke(app, ["invoke", "search", "-a", json.dumps(args), "-c", str(cfg)])
        assert got.exit_code == 2, got.output  # INDEX_EMPTY, and recorded
    got = runner.invoke(app, ["history", "-c", str(cfg)])
    assert got.exit_code == 0, got.output
    recs = [json.loads(line) for line in got.stdout.splitlines()]
    assert [(r["index"], r["caller"], r["query"]) for r in recs] == [
        ("full", "cli", "otters"),
        ("hashed", "cli", None),
    ]
    target = tmp_path / "h.jsonl"
    assert runner.invoke(app, ["history", "export", str(target), "--index", "full"]).exit_code == 0
    assert [json.loads(line)["index"] for line in target.read_text().splitlines()] == ["full"]
    assert runner.invoke(app, ["history", "export", str(target)]).exit_code == 64  # exists
    got = runner.invoke(app, ["history", "clear", "--index", "hashed", "--yes", "-c", str(cfg)])
    assert got.exit_code == 77  # not allowed: 'hashed' does not allow remove
    got = runner.invoke(app, ["history", "clear", "--index", "full", "--yes", "-c", str(cfg)])
    assert got.exit_code == 0, got.output
    got = runner.invoke(app, ["history", "-c", str(cfg)])
    assert [json.loads(line)["index"] for line in got.stdout.splitlines()] == ["hashed"]
    got = runner.invoke(app, ["audit", "--op", "clear_history", "-c", str(cfg)])
    assert [json.loads(line)["caller"] for line in got.stdout.splitlines()] == ["cli"]
