"""The MCP server runs calls on its event loop (``Invoker.ainvoke``): one session's slow
searches do not hold up another session, and long writes send progress notifications to a
client that asked for them.  In process, with the official client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from indexplug.config import load_config
from indexplug.invocation import Invoker
from indexplug.mcp_server import build_server
from mcp import Client
from orchestration_plugins import StoreBackend

CONFIG = """
[defaults]
deadline_s = 30

[indexes.slow]
backend = "test-store"
[indexes.slow.settings]
delay_s = 3.0

[indexes.fast]
backend = "test-store"
"""

SLOW_CALLS = 60
"""More than anyio's default of 40 worker threads, which calls on threads shared."""


def test_a_slow_session_does_not_hold_up_another(
    tmp_path: Path, write_config: Any, test_backends: None
) -> None:
    StoreBackend.STORES.clear()
    order: list[str] = []
    with Invoker(load_config(write_config(CONFIG))) as invoker:
        server = build_server(invoker)

        async def slow_session() -> None:
            async with Client(server) as client:

                async def one() -> None:
                    r = await client.call_tool("search", {"index": "slow", "query": "otters"})
                    assert r.structured_content["code"] == "INDEX_EMPTY"
                    order.append("slow")

                async with anyio.create_task_group() as tg:
                    for _ in range(SLOW_CALLS):
                        tg.start_soon(one)

        async def fast_session() -> None:
            async with Client(server) as client:
                await anyio.sleep(0.5)  # the slow calls are under way
                for _ in range(3):
                    r = await client.call_tool("status", {"index": "fast"})
                    assert r.structured_content["code"] == "STATUS"
                    r = await client.call_tool("search", {"index": "fast", "query": "otters"})
                    assert r.structured_content["code"] == "INDEX_EMPTY"
                    order.append("fast")

        async def main() -> None:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow_session)
                    tg.start_soon(fast_session)

        anyio.run(main)
    # every fast answer came while the slow searches were still sleeping
    assert order[:3] == ["fast"] * 3 and order.count("slow") == SLOW_CALLS


def test_long_writes_send_progress_notifications(
    tmp_path: Path, write_config: Any, test_backends: None
) -> None:
    StoreBackend.STORES.clear()
    (tmp_path / "files").mkdir()
    cfg = CONFIG + '\n[indexes.fast2]\nbackend = "test-store"\nallow_remove = true\n'
    cfg = cfg.replace("[defaults]", '[defaults]\nfolders = ["files"]')
    passages = [{"text": f"otter {i} naps", "uri": f"mem://{i}"} for i in range(600)]
    seen: dict[str, list[tuple[float, float | None]]] = {"add": [], "copy": [], "plain": []}
    with Invoker(load_config(write_config(cfg))) as invoker:
        server = build_server(invoker)

        async def body() -> None:
            async with Client(server) as client:

                def hear(op: str) -> Any:
                    async def callback(done: float, total: float | None, msg: str | None) -> None:
                        seen[op].append((done, total))

                    return callback

                r = await client.call_tool(
                    "add", {"index": "fast", "passages": passages}, progress_callback=hear("add")
                )
                assert r.structured_content["code"] == "INDEXED"
                r = await client.call_tool(
                    "copy", {"source": "fast", "index": "fast2"}, progress_callback=hear("copy")
                )
                assert r.structured_content["code"] == "COPIED", r.structured_content
                r = await client.call_tool("search", {"index": "fast", "query": "otter"})
                assert r.structured_content["code"] == "SEARCHED"

        async def main() -> None:
            with anyio.fail_after(60):
                await body()

        anyio.run(main)
    assert seen["add"] == [(256.0, 600.0), (512.0, 600.0), (600.0, 600.0)]
    assert seen["copy"] and seen["copy"][-1] == (600.0, 600.0)
    assert [d for d, _ in seen["copy"]] == sorted(d for d, _ in seen["copy"])


def test_progress_over_stdio_follows_the_progress_token(tmp_path: Path, write_config: Any) -> None:
    """Over JSON-RPC the client's progressToken (set by the SDK for a progress_callback) is
    what makes the server send notifications/progress."""
    from test_mcp import run_client, server

    cfg = write_config('[defaults]\nbackend = "sqlite-fts5"\n', "stdio.toml")
    passages = [{"text": f"otter {i} naps by the river", "uri": f"mem://{i}"} for i in range(300)]
    heard: list[tuple[float, float | None]] = []

    async def body(client: Client) -> None:
        async def callback(done: float, total: float | None, msg: str | None) -> None:
            heard.append((done, total))

        r = await client.call_tool(
            "add", {"index": "p", "passages": passages}, progress_callback=callback
        )
        assert r.structured_content["code"] == "INDEXED"
        r = await client.call_tool("add", {"index": "p", "passages": passages[:1]})
        assert r.structured_content["code"] == "INDEXED"

    run_client(server(tmp_path, cfg), body)
    assert heard == [(256.0, 300.0), (300.0, 300.0)]
