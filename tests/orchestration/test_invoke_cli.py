"""``indexplug invoke OP --args JSON``: the same answers on the command line, exit codes by
code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from indexplug.cli.app import app
from indexplug.outcomes import EXIT_CODES
from orchestration_support import check_schema
from typer.testing import CliRunner

runner = CliRunner()


def invoke(op: str, args: Any = None, *extra: str, input: str | None = None) -> tuple[int, Any]:
    argv = ["invoke", op]
    if args is not None:
        argv += ["--args", args if isinstance(args, str) else json.dumps(args)]
    r = runner.invoke(app, [*argv, *extra], input=input)
    return r.exit_code, json.loads(r.stdout)


def test_invoke_prints_the_answer_and_exits_by_code(docs: Path, tmp_path: Path) -> None:
    code, a = invoke("index_folder", {"index": "docs", "path": str(docs)})
    assert code == 0 and check_schema(a)["code"] == "INDEXED"
    code, a = invoke("search", {"index": "docs", "query": "otters"})
    assert code == 0 and a["code"] == "SEARCHED"
    code, a = invoke("search", {"index": "docs", "query": "zeppelin"})
    assert code == EXIT_CODES["NO_MATCH"] == 1 and a["code"] == "NO_MATCH"
    code, a = invoke("search", {"index": "other", "query": "otters"})
    assert code == EXIT_CODES["INDEX_EMPTY"] == 2
    code, a = invoke("search", {"index": "docs"})
    assert code == 64 and a["problem"]["field"] == "query"
    code, a = invoke("search", "{oops")
    assert code == 64 and a["problem"]["field"] == "args"
    code, a = invoke("remove", {"index": "docs", "ids": ["x"]})
    assert code == 77 and a["code"] == "NOT_ALLOWED"
    code, a = invoke("ops")
    assert code == 0 and a["code"] == "LISTED"
    code, a = invoke("batch_search", {"index": "docs", "queries": ["otters", "zeppelin"]})
    assert code == 0 and a["code"] == "BATCH"
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"index": "docs", "query": "kettle", "top_k": 1}))
    code, a = invoke("search", f"@{args}")
    assert code == 0 and len(a["data"]["hits"]) == 1
    code, a = invoke("search", "-", input=json.dumps({"index": "docs", "query": "cats"}))
    assert code == 0 and "Cats" in a["data"]["hits"][0]["passage"]["text"]


def test_invoke_reads_the_same_configuration(write_config: Any) -> None:
    cfg = write_config('[indexes.docs]\nbackend = "fake-memory"\n', "deploy.toml")
    code, a = invoke("status", {"index": "docs"}, "--config", str(cfg))
    assert code == 0 and a["evidence"]["backend"] == "fake-memory"
    code, a = invoke("status", {"index": "docs"})  # no file: the default backend
    assert code == 0 and a["evidence"]["backend"] == "sqlite-fts5"
    code, a = invoke("status", {"index": "nope"}, "--config", str(cfg))
    assert code == 64 and a["problem"]["field"] == "index"
