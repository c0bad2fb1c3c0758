"""The audit log through ``invoke``: which changes are recorded (on by default for indexes
that allow remove and for the HTTP server), who is recorded as the caller, the ``audit`` op's
pages and filters, and a change refused when the log cannot record it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from indexplug.audit import AuditLog
from indexplug.config import AuditSettings, Config, Defaults, IndexConfig
from indexplug.invocation import Invoker, exit_code, invoke
from indexplug.ops import OPS

PASSAGES = [
    {"text": "otters hold hands while sleeping", "uri": "file:///o.txt", "key": "otters"},
    {"text": "cats sleep most of the day", "uri": "file:///c.txt"},
]


def _config(**audit: Any) -> Config:
    return Config(
        defaults=Defaults(backend="sqlite-fts5"),
        indexes={
            "open": IndexConfig(backend="sqlite-fts5", allow_remove=True),
            "plain": IndexConfig(backend="sqlite-fts5"),
        },
        audit=AuditSettings(**audit),
    )


def _records(inv: Invoker, **args: Any) -> list[dict[str, Any]]:
    answer = inv.invoke("audit", args)
    assert answer["code"] == "AUDIT", answer
    return list(answer["data"]["records"])


def test_changes_to_an_allow_remove_index_are_recorded_with_ids() -> None:
    with Invoker(_config()) as inv:
        added = inv.invoke("add", {"index": "open", "passages": PASSAGES})
        removed = inv.invoke("remove", {"index": "open", "keys": ["otters"]})
        dropped = inv.invoke("drop", {"index": "open"})
        recs = _records(inv)
    assert [r["op"] for r in recs] == ["add", "remove", "drop"]
    add, rem, drop = recs
    assert add["caller"] == "python" and add["index"] == "open"
    assert add["backend"] == "sqlite-fts5" and add["outcome"] == added["code"] == "INDEXED"
    assert sorted(add["ids"]) == sorted(added["data"]["added_ids"])
    assert add["counts"] == {"added": 2, "known": 0} and add["keys"] == ["otters"]
    assert rem["keys"] == ["otters"] and rem["ids"] == removed["data"]["removed_ids"]
    assert rem["counts"]["removed"] == 1
    assert drop["outcome"] == dropped["code"] and drop["ok"] is True
    assert AuditLog().verify().ok


def test_an_index_without_allow_remove_is_not_audited_by_default() -> None:
    with Invoker(_config()) as inv:
        inv.invoke("add", {"index": "plain", "passages": PASSAGES})
        assert _records(inv) == []


def test_audit_on_records_every_change_and_off_none() -> None:
    with Invoker(_config(enabled="on")) as inv:
        inv.invoke("add", {"index": "plain", "passages": PASSAGES})
        assert [r["index"] for r in _records(inv)] == ["plain"]
    with Invoker(_config(enabled="off")) as inv:
        inv.invoke("add", {"index": "open", "passages": PASSAGES})
        assert len(_records(inv)) == 1  # only the earlier record


def test_a_refused_change_is_recorded_with_its_outcome() -> None:
    with Invoker(_config(enabled="on")) as inv:
        refused = inv.invoke("remove", {"index": "plain", "ids": ["x" * 64]})
        assert refused["code"] == "NOT_ALLOWED"
        (rec,) = _records(inv)
    assert rec["op"] == "remove" and rec["outcome"] == "NOT_ALLOWED" and rec["ok"] is False


def test_the_caller_is_recorded() -> None:
    invoke("add", {"index": "open", "passages": PASSAGES}, config=_config(), caller="cli")
    with Invoker(_config(), caller="stdio") as inv:
        asyncio.run(inv.ainvoke("remove", {"index": "open", "keys": ["otters"]}))
        recs = _records(inv)
    assert [(r["op"], r["caller"]) for r in recs] == [("add", "cli"), ("remove", "stdio")]


def test_the_http_server_audits_every_index() -> None:
    pytest.importorskip("mcp")
    from indexplug.mcp_server import http_app

    with Invoker(_config()) as inv:
        http_app(inv, token="t" * 40)
        assert inv.caller == "http" and inv.audits("plain")
        inv.invoke("add", {"index": "plain", "passages": PASSAGES})
        (rec,) = _records(inv)
    assert rec["caller"] == "http" and rec["index"] == "plain"


def test_pages_and_filters() -> None:
    with Invoker(_config()) as inv:
        for _ in range(3):
            inv.invoke("add", {"index": "open", "passages": PASSAGES})
            inv.invoke("remove", {"index": "open", "keys": ["otters"]})
        first = inv.invoke("audit", {"op": "remove", "limit": 2})
        assert [r["seq"] for r in first["data"]["records"]] == [2, 4]
        nxt = inv.invoke("audit", {"op": "remove", "after": first["data"]["next_after"]})
        assert [r["seq"] for r in nxt["data"]["records"]] == [6]
        assert nxt["data"]["next_after"] is None
        assert _records(inv, caller="nobody") == []
        assert _records(inv, outcome="REMOVED", index="open", since=0, until=1e11)


@pytest.mark.parametrize(
    "args",
    [
        {"caller": "../../etc"},
        {"caller": "a\nb"},
        {"op": "DROP TABLE"},
        {"outcome": "x" * 65},
        {"since": -1},
        {"after": -1},
        {"limit": 0},
        {"limit": 1001},
        {"limit": "10"},
        {"since": float("nan")},
        {"surprise": 1},
    ],
)
def test_hostile_filters_are_bad_requests(args: dict[str, Any]) -> None:
    with Invoker(_config()) as inv:
        answer = inv.invoke("audit", args)
    assert answer["code"] == "BAD_REQUEST" and exit_code(answer) == 64


def test_a_broken_log_answers_audit_broken_up_to_the_break() -> None:
    with Invoker(_config()) as inv:
        for _ in range(3):
            inv.invoke("add", {"index": "open", "passages": PASSAGES})
        log = AuditLog()
        lines = log.log.read_text().splitlines(keepends=True)
        lines[1] = lines[1].replace('"caller": "python"', '"caller": "nobody"')
        log.log.write_text("".join(lines))
        answer = inv.invoke("audit", {})
    assert answer["code"] == "AUDIT_BROKEN" and not answer["ok"]
    assert answer["data"]["first_bad"] == 2
    assert [r["seq"] for r in answer["data"]["records"]] == [1]
    assert exit_code(answer) != 0


def test_no_change_is_made_that_the_log_cannot_record(tmp_path: Path) -> None:
    with Invoker(_config()) as inv:
        inv.invoke("add", {"index": "open", "passages": PASSAGES})
        log = AuditLog()
        log.log.write_text("")  # truncated: the log is no longer trusted
        answer = inv.invoke("remove", {"index": "open", "keys": ["otters"]})
        assert answer["code"] == "INDEX_UNAVAILABLE" and "audit" in answer["message"]
        still = inv.invoke("get", {"index": "open", "keys": ["otters"]})
    assert len(still["data"]["passages"]) == 1


def test_audit_is_a_read_op() -> None:
    spec = OPS["audit"]
    assert spec.read_only and not spec.sensitive


CLI_CONFIG = """
[indexes.open]
backend = "sqlite-fts5"
allow_remove = true

[indexes.plain]
backend = "sqlite-fts5"
"""


def test_cli_changes_are_recorded_and_verified(tmp_path: Path) -> None:
    import json

    from indexplug.cli.app import app
    from typer.testing import CliRunner

    runner = CliRunner()
    cfg = tmp_path / "indexplug.toml"
    cfg.write_text(CLI_CONFIG)
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    for index in ("open", "plain"):
        got = runner.invoke(app, ["add", str(jsonl), "--index", index, "-c", str(cfg)])
        assert got.exit_code == 0, got.output
    got = runner.invoke(
        app, ["remove", "--index", "open", "--key", "otters", "--yes", "-c", str(cfg)]
    )
    assert got.exit_code == 0, got.output
    got = runner.invoke(app, ["audit", "-c", str(cfg)])
    assert got.exit_code == 0, got.output
    recs = [json.loads(line) for line in got.stdout.splitlines()]
    assert [(r["op"], r["index"], r["caller"]) for r in recs] == [
        ("add", "open", "cli"),
        ("remove", "open", "cli"),
    ]  # 'plain' does not allow remove: not audited by default
    assert recs[1]["keys"] == ["otters"] and recs[1]["counts"]["removed"] == 1
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("Badgers dig.\n")
    got = runner.invoke(app, ["index", str(folder), "--index", "open", "-c", str(cfg)])
    assert got.exit_code == 0, got.output
    got = runner.invoke(app, ["audit", "--op", "index_folder", "-c", str(cfg)])
    (rec,) = [json.loads(line) for line in got.stdout.splitlines()]
    assert rec["outcome"] == "INDEXED" and rec["ok"] and rec["counts"]["passages_added"] == 1
    assert rec["detail"] == {"path": str(folder)}
    assert runner.invoke(app, ["audit", "verify"]).exit_code == 0
    log = AuditLog()
    log.log.write_text(log.log.read_text().replace('"cli"', '"someone"', 1))
    got = runner.invoke(app, ["audit", "verify", "--json"])
    assert got.exit_code == 3
    assert json.loads(got.stdout)["first_bad"] == 1
    # a log cut short refuses the next change (exit 5), and nothing is removed
    status = ["status", "--index", "open", "--json", "-c", str(cfg)]
    before = json.loads(runner.invoke(app, status).stdout)["passages"]
    assert before > 0
    log.log.write_text("")
    got = runner.invoke(app, ["drop", "--index", "open", "--yes", "-c", str(cfg)])
    assert got.exit_code == 5 and "audit log" in got.output
    assert json.loads(runner.invoke(app, status).stdout)["passages"] == before
