"""Issue 26 ("typed everywhere") through ``invoke`` and ``indexplug invoke``: strict JSON types,
any nesting, NULs, huge numbers, refused settings and the batch's exit rule all end in one
typed answer with a documented exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from indexplug import invoke
from indexplug.cli.app import app
from indexplug.config import Config
from indexplug.invocation import MAX_ARGS_DEPTH, exit_code
from indexplug.ops import BATCH_ORDER, batch_code
from indexplug.outcomes import EXIT_CODES
from orchestration_support import check_schema
from typer.testing import CliRunner

runner = CliRunner()


def cli(op: str, args: str | None = None, *extra: str, input: bytes | None = None) -> Any:
    argv = ["invoke", op] + (["--args", args] if args is not None else []) + list(extra)
    r = runner.invoke(app, argv, input=input)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def bad(answer: dict[str, Any], field: str) -> None:
    assert answer["code"] == "BAD_REQUEST" and answer["ok"] is False, answer
    assert answer["problem"]["field"] == field, answer
    if answer["op"] != "nope":
        check_schema(answer)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (DEEP, "args"),  # RecursionError out of json.loads, in invoke() and on the CLI
        ('{"index": "x", "query": "q", "filters": ' + "[" * 500 + "]" * 500 + "}", "args"),
        ('{"index": "x", "query": "q", "top_k": ' + "9" * 5000 + "}", "args"),  # int limit
        ('{"index": "x", "query": "q", "deadline_s": NaN}', "args"),
        ('{"index": "x", "query": "q", "deadline_s": Infinity}', "args"),
        ('{"index": "x", "query": "q", "top_k": "3"}', "top_k"),  # was accepted as 3
        ('{"index": "x", "query": "q", "top_k": true}', "top_k"),  # was accepted as 1
        ('{"index": "x", "query": "q", "top_k": 3.0}', "top_k"),
        ('{"index": "x", "query": "q", "context": false}', "context"),
        ('{"index": "x", "query": "q", "deadline_s": "5"}', "deadline_s"),
        ('{"index": "x", "queries": ["a", 1]}', "queries.1"),
        ('{"index": "x", "query": 7}', "query"),
        ('{"index": "x", "query": "?!"}', "query"),  # nothing searchable: not NO_MATCH
        ('{"index": "x", "query": "q", "filters": {"a\\u0000b": 1}}', "filters"),
        ('{"index": "x", "path": "a\\u0000b"}', "path"),  # was INDEX_FAILED ValueError
    ],
)
def test_hostile_json_is_a_bad_request_naming_the_field(text: str, field: str) -> None:
    op = "index_folder" if '"path"' in text else "batch_search" if "queries" in text else "search"
    bad(invoke(op, text), field)
    r = cli(op, "-", input=text.encode())
    assert r.exit_code == EXIT_CODES["BAD_REQUEST"]
    bad(json.loads(r.stdout), field)


def test_deep_python_arguments_are_refused_before_validation() -> None:
    nested: Any = "leaf"
    for _ in range(100_000):
        nested = {"k": nested}
    bad(invoke("search", {"index": "x", "query": "q", "filters": nested}), "args")
    cyclic: dict[str, Any] = {"index": "x", "query": "q"}
    cyclic["filters"] = cyclic
    bad(invoke("search", cyclic), "args")
    ok = {"index": "x", "query": "q", "filters": {"a": 1}}
    assert invoke("search", ok)["code"] == "INDEX_EMPTY"
    assert MAX_ARGS_DEPTH >= 4  # passages / passage / source / provenance


def test_input_that_is_not_utf8_json_is_a_bad_request(tmp_path: Path) -> None:
    r = cli("search", "-", input=b'{"index": "x", "query": "\xff\xfe"}')
    assert r.exit_code == EXIT_CODES["BAD_REQUEST"]
    bad(json.loads(r.stdout), "args")
    r = cli("search", f"@{tmp_path}")  # a folder: was an IsADirectoryError
    assert r.exit_code == EXIT_CODES["BAD_REQUEST"] and "Traceback" not in r.output


def test_a_config_path_that_is_no_path_is_a_bad_request() -> None:
    bad(invoke("status", {"index": "x"}, config="bad\x00name.toml"), "config")


def test_a_setting_the_backend_refuses_is_a_bad_request(write_config: Any) -> None:
    cfg = write_config(
        """
        [indexes.docs]
        backend = "sqlite-fts5"
        settings = { bogus = 1 }
        """
    )
    # a file is checked as it is loaded: the configuration is what is wrong
    a = invoke("search", {"index": "docs", "query": "otters"}, config=cfg)
    bad(a, "config")
    assert "'bogus'" in a["message"]
    r = cli("status", json.dumps({"index": "docs"}), "--config", str(cfg))
    assert r.exit_code == EXIT_CODES["BAD_REQUEST"]
    # a configuration made in code reaches the factory: was INDEX_FAILED with a ValueError
    made = Config.model_validate(
        {"indexes": {"docs": {"settings": {"bogus": 1}}, "cache": {"settings": {"cache_mb": "x"}}}}
    )
    a = invoke("search", {"index": "docs", "query": "otters"}, config=made)
    bad(a, "settings.bogus")
    assert "'bogus'" in a["message"]
    bad(invoke("status", {"index": "cache"}, config=made), "settings.cache_mb")


# -- the batch's code ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codes", "overall"),
    [
        (["SEARCHED"], "SEARCHED"),
        (["NO_MATCH", "NO_MATCH"], "NO_MATCH"),
        (["INDEX_EMPTY"], "INDEX_EMPTY"),
        (["INDEX_UNAVAILABLE"] * 3, "INDEX_UNAVAILABLE"),
        (["INDEX_TIMEOUT"] * 2, "INDEX_TIMEOUT"),
        (["BAD_REQUEST"], "BAD_REQUEST"),
        (["SEARCHED", "NO_MATCH"], "SEARCHED"),
        (["NO_MATCH", "INDEX_EMPTY"], "NO_MATCH"),
        (["SEARCHED", "BAD_REQUEST"], "BAD_REQUEST"),
        (["INDEX_TIMEOUT", "BAD_REQUEST"], "INDEX_TIMEOUT"),
        (["INDEX_TIMEOUT", "INDEX_UNAVAILABLE", "SEARCHED"], "INDEX_UNAVAILABLE"),
        (["INDEX_FAILED", "INDEX_UNAVAILABLE"], "INDEX_FAILED"),
        (["SEARCHED", "SOMETHING_NEW"], "INDEX_FAILED"),
    ],
)
def test_the_batch_rule(codes: list[str], overall: str) -> None:
    assert batch_code(codes) == overall
    assert set(BATCH_ORDER) <= set(EXIT_CODES)


def _batch(index: str, queries: list[str], config: Path, **extra: Any) -> dict[str, Any]:
    a = invoke("batch_search", {"index": index, "queries": queries, **extra}, config=config)
    check_schema(a)
    assert a["code"] == "BATCH"
    return a


def test_a_batch_exits_by_its_members(write_config: Any, test_backends: None, docs: Path) -> None:
    cfg = write_config(
        """
        [indexes.down]
        backend = "test-down"
        [indexes.slow]
        backend = "test-slow"
        [indexes.docs]
        backend = "sqlite-fts5"
        """
    )
    a = _batch("down", ["a", "b"], cfg)  # all INDEX_UNAVAILABLE: exited 3 (INDEX_FAILED)
    assert a["evidence"]["overall"] == "INDEX_UNAVAILABLE" and a["ok"] is False
    assert exit_code(a) == EXIT_CODES["INDEX_UNAVAILABLE"] == 5
    a = _batch("slow", ["a", "b"], cfg, deadline_s=0.2)  # all INDEX_TIMEOUT: exited 3
    assert a["evidence"]["overall"] == "INDEX_TIMEOUT" and exit_code(a) == 4
    invoke("index_folder", {"index": "docs", "path": str(docs)}, config=cfg)
    a = _batch("docs", ["otters", "zeppelin"], cfg)
    assert a["evidence"]["overall"] == "SEARCHED" and a["ok"] is True and exit_code(a) == 0
    a = _batch("docs", ["zeppelin", "quixotic"], cfg)
    assert a["evidence"]["overall"] == "NO_MATCH" and a["ok"] is True and exit_code(a) == 1
    a = _batch("docs", ["otters", "?!"], cfg)  # one query with nothing to search
    assert a["evidence"]["counts"] == {"SEARCHED": 1, "BAD_REQUEST": 1}
    assert a["evidence"]["overall"] == "BAD_REQUEST" and a["ok"] is False
    r = cli("batch_search", json.dumps({"index": "down", "queries": ["a"]}), "-c", str(cfg))
    assert r.exit_code == 5


def test_exit_code_of_every_answer_kind() -> None:
    assert exit_code({"code": "LISTED", "ok": True}) == 0
    assert exit_code({"code": "NO_MATCH"}) == 1
    assert exit_code({"code": "BATCH", "evidence": {"overall": "INDEX_EMPTY"}}) == 2
    assert exit_code({"code": "BATCH", "evidence": None}) == 3
    assert exit_code({"code": "WHATEVER"}) == 3
