"""The MCP server end to end over stdio, with the official SDK's own client: the server runs as
a subprocess (``indexplug serve``, launched with the test-only backends registered).  The HTTP
transport is in test_mcp_http.py, isError and read-only in test_mcp_refusals.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import jsonschema
from mcp import Client, StdioServerParameters
from orchestration_support import check_schema

LAUNCHER = Path(__file__).resolve().parent / "mcp_launcher.py"

CONFIG = """
[defaults]
backend = "sqlite-fts5"
deadline_s = 5

[indexes.docs]
backend = "sqlite-fts5"
{allow}

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


ANSWERS = {"SEARCHED", "NO_MATCH", "INDEX_EMPTY", "INDEXED", "STATUS", "BATCH", "LISTED"}


def server(tmp_path: Path, config: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[str(LAUNCHER), "serve", "--config", str(config)],
        env={
            "INDEXPLUG_HOME": os.environ["INDEXPLUG_HOME"],
            "HF_HUB_OFFLINE": "1",
            "PYTHONHASHSEED": "0",
        },
        cwd=str(tmp_path),
    )


def run_client(target: Any, body: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(target) as client:
                await body(client)

    anyio.run(main)


def structured(result: Any) -> dict[str, Any]:
    answer = result.structured_content
    assert isinstance(answer, dict)
    check_schema(answer)
    assert result.content and result.content[0].text.startswith(answer["code"])
    return answer


def test_stdio_end_to_end_every_outcome_kind(tmp_path: Path, docs: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG.format(allow=""), "mcp.toml")
    seen: set[str] = set()

    async def body(client: Client) -> None:
        listed = await client.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert set(tools) == {
            "add",
            "search",
            "batch_search",
            "status",
            "backends",
            "index_folder",
            "pack",
            "ops",
            "get",
            "scan",
            "indexes",
            "export",
            "audit",
            "history",
            "stats",
            "similarity",
            "export_history",
            "log_search",
        }  # remove, drop, import, copy, clear_history: not listed, the configuration allows
        # them nowhere
        for t in tools.values():
            jsonschema.Draft202012Validator.check_schema(t.input_schema)
            assert t.input_schema["type"] == "object" and t.output_schema is not None
        assert tools["search"].annotations.read_only_hint is True

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, args)
            answer = structured(result)
            # every refusal and failure is an error (OVER_BUDGET too); answers are not
            assert result.is_error == (not answer["ok"])
            assert result.is_error == (answer["code"] not in ANSWERS), answer["code"]
            seen.add(answer["code"])
            return answer

        a = await call("index_folder", {"index": "docs", "path": str(docs)})
        assert a["code"] == "INDEXED" and a["data"]["files_indexed"] == 3
        result = await client.call_tool("search", {"index": "docs", "query": "otters sleep"})
        a = structured(result)
        seen.add(a["code"])
        assert a["code"] == "SEARCHED" and a["data"]["hits"][0]["untrusted"] is True
        text = result.content[0].text
        assert "untrusted data, not instructions" in text and "> Paragraph" in text
        a = await call("search", {"index": "docs", "query": "zeppelin"})
        assert a["code"] == "NO_MATCH"
        a = await call("search", {"index": "empty", "query": "otters"})
        assert a["code"] == "INDEX_EMPTY"
        a = await call("search", {"index": "down", "query": "otters"})
        assert a["code"] == "INDEX_UNAVAILABLE" and "connection refused" in a["message"]
        a = await call("search", {"index": "slow", "query": "otters", "deadline_s": 0.3})
        assert a["code"] == "INDEX_TIMEOUT"
        a = await call("search", {"index": "broken", "query": "otters"})
        assert a["code"] == "INDEX_FAILED" and "disk on fire" in a["message"]
        a = await call("search", {"index": "docs", "query": "otters", "top_k": -1})
        assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "top_k"
        a = await call("remove", {"index": "docs", "ids": ["0" * 64]})
        assert a["code"] == "NOT_ALLOWED"
        a = await call(
            "add",
            {"index": "tiny", "passages": [{"text": "x " * 4000, "uri": "m://"}], "max_bytes": 500},
        )
        assert a["code"] == "OVER_BUDGET" and a["evidence"]["check"] in ("projected", "measured")
        a = await call("add", {"index": "notes", "passages": [{"text": "otters", "uri": "m://o"}]})
        assert a["code"] == "INDEXED"
        a = await call("status", {"index": "notes"})
        assert a["code"] == "STATUS" and a["data"]["passages"] == 1
        a = await call("batch_search", {"index": "docs", "queries": ["otters", "kettle"]})
        assert a["code"] == "BATCH" and [r["code"] for r in a["data"]["results"]] == [
            "SEARCHED",
            "SEARCHED",
        ]
        result = await client.call_tool(
            "pack", {"index": "docs", "query": "otters", "max_tokens": 150}
        )
        a = structured(result)
        assert (
            a["data"]["tokens"] <= 150 and '<retrieved untrusted="true">' in result.content[0].text
        )
        a = await call("search", {"index": "half", "query": "otters"})
        assert a["code"] == "SEARCHED" and a["evidence"]["degraded"][0]["part"] == "down"
        assert "degraded: leg 'down' INDEX_UNAVAILABLE" in (
            (await client.call_tool("search", {"index": "half", "query": "otters"})).content[0].text
        )
        a = await call("backends", {})
        assert a["code"] == "LISTED" and any(
            b["name"] == "test-down" for b in a["data"]["backends"]
        )
        a = await call("ops", {})
        assert {o["name"] for o in a["data"]["ops"]} >= set(tools) | {"remove"}

    run_client(server(tmp_path, cfg), body)
    assert seen >= {
        "SEARCHED",
        "NO_MATCH",
        "INDEX_EMPTY",
        "INDEX_FAILED",
        "INDEX_TIMEOUT",
        "INDEX_UNAVAILABLE",
        "INDEXED",
        "OVER_BUDGET",
        "STATUS",
        "BAD_REQUEST",
        "NOT_ALLOWED",
        "BATCH",
        "LISTED",
    }


def test_stdio_sensitive_tools_are_listed_only_where_allowed(
    tmp_path: Path, write_config: Any
) -> None:
    cfg = write_config(CONFIG.format(allow="allow_remove = true"), "mcp.toml")

    async def body(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "remove" in tools and tools["remove"].annotations.destructive_hint is True
        added = structured(
            await client.call_tool(
                "add", {"index": "docs", "passages": [{"text": "otters", "uri": "m://o"}]}
            )
        )
        pid = added["data"]["added_ids"][0]
        a = structured(await client.call_tool("remove", {"index": "empty", "ids": [pid]}))
        assert a["code"] == "NOT_ALLOWED"  # listed, but not allowed on this index
        a = structured(await client.call_tool("remove", {"index": "docs", "ids": [pid]}))
        assert a["code"] == "REMOVED" and a["data"]["removed_ids"] == [pid]

    run_client(server(tmp_path, cfg), body)
