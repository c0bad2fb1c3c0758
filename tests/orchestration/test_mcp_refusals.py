"""Over MCP, ``isError`` is true for every refusal and failure (an answer that is not ``ok``),
including ``OVER_BUDGET`` and a batch whose queries got no answer; a read-only server offers only
the ops that read.  The server runs in-process (the SDK's own client) for the outcome table, and
as ``indexplug serve --read-only`` over stdio for the flag."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from indexplug.config import load_config
from indexplug.invocation import Invoker
from indexplug.mcp_server import build_server, is_error
from mcp import Client, StdioServerParameters
from orchestration_support import check_schema

LAUNCHER = Path(__file__).resolve().parent / "mcp_launcher.py"

CONFIG = """
[defaults]
backend = "sqlite-fts5"
deadline_s = 5

[indexes.docs]
backend = "sqlite-fts5"
allow_remove = {allow}

[indexes.empty]
backend = "sqlite-fts5"

[indexes.down]
backend = "test-down"

[indexes.slow]
backend = "test-slow"

[indexes.broken]
backend = "test-broken"

[indexes.half]
kind = "fusion"
members = ["docs", "down"]
"""

READS = {
    "search",
    "batch_search",
    "pack",
    "status",
    "backends",
    "ops",
    "get",
    "scan",
    "indexes",
    "audit",
    "history",
    "stats",
    "similarity",
}


def run_client(target: Any, body: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(target) as client:
                await body(client)

    anyio.run(main)


def answer_of(result: Any) -> dict[str, Any]:
    answer = result.structured_content
    assert isinstance(answer, dict)
    check_schema(answer)
    assert result.content[0].text.startswith(answer["code"])
    return answer


# (label, tool, args, the code expected, isError expected)
CASES: list[tuple[str, str, dict[str, Any], str, bool]] = [
    ("searched", "search", {"index": "docs", "query": "otters"}, "SEARCHED", False),
    ("no match", "search", {"index": "docs", "query": "zeppelin"}, "NO_MATCH", False),
    ("empty", "search", {"index": "empty", "query": "otters"}, "INDEX_EMPTY", False),
    ("degraded fusion", "search", {"index": "half", "query": "otters"}, "SEARCHED", False),
    ("unavailable", "search", {"index": "down", "query": "otters"}, "INDEX_UNAVAILABLE", True),
    (
        "timeout",
        "search",
        {"index": "slow", "query": "otters", "deadline_s": 0.3},
        "INDEX_TIMEOUT",
        True,
    ),
    ("failed", "search", {"index": "broken", "query": "otters"}, "INDEX_FAILED", True),
    ("bad request", "search", {"index": "docs", "query": "q", "top_k": -1}, "BAD_REQUEST", True),
    ("not allowed", "remove", {"index": "docs", "ids": ["0" * 64]}, "NOT_ALLOWED", True),
    (
        "over budget",
        "add",
        {"index": "tiny", "passages": [{"text": "x " * 4000, "uri": "m://"}], "max_bytes": 500},
        "OVER_BUDGET",
        True,
    ),
    (
        "all-unavailable batch",
        "batch_search",
        {"index": "down", "queries": ["otters", "kettle"]},
        "BATCH",
        True,
    ),
    (
        "answered batch",
        "batch_search",
        {"index": "docs", "queries": ["otters", "zeppelin"]},
        "BATCH",
        False,
    ),
    ("pack failure", "pack", {"index": "down", "query": "otters"}, "INDEX_UNAVAILABLE", True),
    ("status", "status", {"index": "docs"}, "STATUS", False),
    ("listing", "backends", {}, "LISTED", False),
]


def test_is_error_is_true_for_every_refusal_and_failure(
    tmp_path: Path, write_config: Any, test_backends: None
) -> None:
    cfg = load_config(write_config(CONFIG.format(allow="false")))
    invoker = Invoker(cfg)
    got: dict[str, tuple[str, bool]] = {}
    follows_ok: dict[str, bool] = {}

    async def body(client: Client) -> None:
        added = answer_of(
            await client.call_tool(
                "add",
                {"index": "docs", "passages": [{"text": "Otters hold hands.", "uri": "m://o"}]},
            )
        )
        assert added["code"] == "INDEXED"
        for label, tool, args, _, _ in CASES:
            result = await client.call_tool(tool, args)
            answer = answer_of(result)
            got[label] = (answer["code"], bool(result.is_error))
            follows_ok[label] = result.is_error == (not answer["ok"])
        # index_folder whose writes all failed (the index is unavailable): not ok, an error.
        docs = tmp_path / "folder"
        docs.mkdir()
        (docs / "a.md").write_text("Otters hold hands while they sleep.\n")
        result = await client.call_tool("index_folder", {"index": "down", "path": str(docs)})
        answer = answer_of(result)
        got["folder into an unavailable index"] = (answer["code"], bool(result.is_error))

    with invoker:
        run_client(build_server(invoker), body)
    expected = {label: (code, err) for label, _, _, code, err in CASES}
    expected["folder into an unavailable index"] = ("INDEX_UNAVAILABLE", True)
    assert got == expected
    assert all(follows_ok.values()) and len(follows_ok) == len(CASES)


def test_is_error_follows_ok() -> None:
    assert is_error({"code": "OVER_BUDGET", "ok": False}) is True
    assert is_error({"code": "BATCH", "ok": False}) is True
    assert is_error({"code": "BATCH", "ok": True}) is False
    assert is_error({"code": "NO_MATCH", "ok": True}) is False


def test_read_only_server_offers_only_reads(
    tmp_path: Path, write_config: Any, test_backends: None
) -> None:
    cfg = load_config(write_config(CONFIG.format(allow="true")))
    invoker = Invoker(cfg)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("Cats purr.\n")

    async def body(client: Client) -> None:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == READS  # remove is allowed by the configuration, yet not offered
        for name, args in (
            ("add", {"index": "docs", "passages": [{"text": "otters", "uri": "m://o"}]}),
            ("index_folder", {"index": "docs", "path": str(folder)}),
            ("remove", {"index": "docs", "ids": ["0" * 64]}),
        ):
            result = await client.call_tool(name, args)
            answer = answer_of(result)
            assert answer["code"] == "NOT_ALLOWED" and result.is_error is True, name
            assert "read-only" in answer["message"]
        answer = answer_of(await client.call_tool("search", {"index": "docs", "query": "cats"}))
        assert answer["code"] == "INDEX_EMPTY"  # nothing was written

    with invoker:
        assert invoker.invoke("status", {"index": "docs"})["code"] == "STATUS"
        run_client(build_server(invoker, read_only=True), body)
        # The same invoker still writes through a server that is not read-only.
        full = build_server(invoker)

        async def writes(client: Client) -> None:
            writes = {
                "add",
                "index_folder",
                "export",
                "remove",
                "drop",
                "import",
                "copy",
                "export_history",
                "log_search",
                "clear_history",
            }
            assert READS | writes == {t.name for t in (await client.list_tools()).tools}

        run_client(full, writes)


def test_stdio_read_only_flag(tmp_path: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG.format(allow="true"), "mcp.toml")
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(LAUNCHER), "serve", "--read-only", "--config", str(cfg)],
        env={
            "INDEXPLUG_HOME": os.environ["INDEXPLUG_HOME"],
            "HF_HUB_OFFLINE": "1",
            "PYTHONHASHSEED": "0",
        },
        cwd=str(tmp_path),
    )

    async def body(client: Client) -> None:
        assert {t.name for t in (await client.list_tools()).tools} == READS
        result = await client.call_tool(
            "add", {"index": "docs", "passages": [{"text": "otters", "uri": "m://o"}]}
        )
        assert answer_of(result)["code"] == "NOT_ALLOWED" and result.is_error is True

    run_client(params, body)
