"""Does one MCP session's slow search hold up another session?

A real ``indexplug serve --http --no-auth`` process (streamable HTTP on 127.0.0.1) with three
indexes: ``fast`` (sqlite-fts5, a few hundred passages), ``slow-sync`` (a backend whose search
sleeps ``--slow-s`` seconds in a thread, as a blocking client library would) and
``slow-async`` (the same sleep in a native ``asearch`` coroutine, as Elasticsearch's and
Chroma's HTTP clients are).  Session B searches ``fast`` ``--queries`` times in a row, first
alone, then while session A has ``--slow-calls`` slow searches in flight; the figure is B's
latency (p50 / p95 / max, ms) in each case.

``--path thread`` serves the way the server did before ``Invoker.ainvoke`` (each call on one of
anyio's 40 worker threads) for the comparison; ``--path loop`` (the default) is the server as
it is.  Run with an interpreter that has indexplug with the ``mcp`` extra::

    python contrib/bench/src/indexplug_bench/mcp_concurrency.py --slow-calls 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

URL_LINE = re.compile(r"indexplug MCP server on http://127\.0\.0\.1:(\d+)/mcp")

CONFIG = """
[defaults]
deadline_s = 60

[indexes.fast]
backend = "sqlite-fts5"

[indexes.slow-sync]
backend = "bench-slow"
[indexes.slow-sync.settings]
delay_s = {slow}

[indexes.slow-async]
backend = "bench-slow-async"
[indexes.slow-async.settings]
delay_s = {slow}
"""


# -- the server process ------------------------------------------------------------------------


def serve(config: str, path: str) -> None:
    """Register the slow backends, then run ``indexplug serve --http`` in this process."""
    from indexplug import BackendSpec, Capabilities, IndexStatus, NoMatch, Readiness, hookimpl
    from indexplug.outcomes import ScoreScale
    from indexplug.plugins import get_registry

    class Slow:
        name = "bench-slow"
        description = "sleeps, then finds nothing"
        score_scale = ScoreScale(name="bench")
        capabilities = Capabilities()

        def __init__(self, delay_s: float) -> None:
            self.delay_s = delay_s

        def readiness(self) -> Readiness:
            return Readiness.yes()

        def search(self, index: str, query: str, **kw: Any) -> Any:
            time.sleep(self.delay_s)
            return NoMatch(index=index, searched=1)

        def add(self, index: str, passages: Any, **kw: Any) -> Any:
            raise RuntimeError("read-only")

        def remove(self, index: str, ids: Any, **kw: Any) -> Any:
            raise RuntimeError("read-only")

        def status(self, index: str, **kw: Any) -> Any:
            return IndexStatus(index=index, exists=True, passages=1)

        def close(self) -> None:
            pass

    class SlowAsync(Slow):
        name = "bench-slow-async"

        async def asearch(self, index: str, query: str, **kw: Any) -> Any:
            await asyncio.sleep(self.delay_s)
            return NoMatch(index=index, searched=1)

    class Plugin:
        @hookimpl
        def indexplug_backends(self) -> list[BackendSpec]:
            return [
                BackendSpec(
                    name="bench-slow",
                    factory=lambda ctx: Slow(float(ctx.options.get("delay_s", 2.0))),
                ),
                BackendSpec(
                    name="bench-slow-async",
                    factory=lambda ctx: SlowAsync(float(ctx.options.get("delay_s", 2.0))),
                ),
            ]

    get_registry().register(Plugin(), name="bench-slow-backends")
    if path == "thread":  # the server before ainvoke: every call on one of anyio's threads
        import anyio.to_thread
        from indexplug.invocation import Invoker

        async def on_a_thread(self: Any, op: str, args: Any = None, **kw: Any) -> Any:
            return await anyio.to_thread.run_sync(self.invoke, op, args)

        Invoker.ainvoke = on_a_thread  # type: ignore[method-assign]
    from indexplug.cli.app import main

    sys.argv = ["indexplug", "serve", "--http", "--no-auth", "--port", "0", "--config", config]
    main()


# -- the clients -------------------------------------------------------------------------------


async def _session(url: str) -> Any:
    import httpx2 as httpx  # the MCP SDK's own HTTP client
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx.AsyncClient(timeout=600)
    client = Client(streamable_http_client(url, http_client=http))
    await client.__aenter__()
    return http, client


async def _close(pair: Any) -> None:
    http, client = pair
    await client.__aexit__(None, None, None)
    await http.aclose()


async def _b_latencies(client: Any, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        r = await client.call_tool("search", {"index": "fast", "query": q, "top_k": 10})
        out.append((time.perf_counter() - t0) * 1000)
        code = r.structured_content["code"]
        if code not in ("SEARCHED", "NO_MATCH"):
            raise RuntimeError(f"session B got {code}: {r.structured_content['message']}")
    return out


def _summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50": round(statistics.median(ms), 1),
        "p95": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 1),
        "max": round(ms[-1], 1),
    }


async def measure(url: str, slow_calls: int, queries: list[str]) -> dict[str, Any]:
    b = await _session(url)
    a = await _session(url)
    try:
        await _b_latencies(b[1], queries[:3])  # warm: the fast index opened, caches filled
        result: dict[str, Any] = {"alone": _summary(await _b_latencies(b[1], queries))}
        for kind in ("slow-sync", "slow-async"):
            done = 0

            async def slow(kind: str = kind) -> None:
                nonlocal done
                await a[1].call_tool("search", {"index": kind, "query": "x"})
                done += 1

            tasks = [asyncio.create_task(slow()) for _ in range(slow_calls)]
            await asyncio.sleep(0.5)  # the slow calls are in flight
            lat = await _b_latencies(b[1], queries)
            in_flight = slow_calls - done
            await asyncio.gather(*tasks)
            result[kind] = {**_summary(lat), "slow_in_flight_after_b": in_flight}
        return result
    finally:
        await _close(a)
        await _close(b)


def start_server(tmp: Path, slow_s: float, path: str) -> tuple[subprocess.Popen[bytes], str]:
    cfg = tmp / "bench.toml"
    cfg.write_text(CONFIG.format(slow=slow_s))
    log = tmp / "server.log"
    env = {**os.environ, "INDEXPLUG_HOME": str(tmp / "home"), "HF_HUB_OFFLINE": "1"}
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(cfg), "--path", path],
            env=env,
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = URL_LINE.search(log.read_text("utf-8", "replace"))
        if found:
            try:
                socket.create_connection(("127.0.0.1", int(found.group(1))), timeout=0.5).close()
                return proc, f"http://127.0.0.1:{found.group(1)}/mcp"
            except OSError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server did not start: {log.read_text()[-2000:]}")


def fill_fast(url: str, n: int) -> list[str]:
    """Add ``n`` passages to ``fast`` and answer the queries session B will ask."""
    words = [
        "otter",
        "river",
        "kettle",
        "lamp",
        "paper",
        "night",
        "harbour",
        "sleep",
        "hands",
        "stone",
    ]
    texts = [
        f"note {i}: " + " ".join(words[(i * 3 + j) % len(words)] for j in range(12))
        for i in range(n)
    ]

    async def run() -> None:
        pair = await _session(url)
        try:
            for i in range(0, n, 500):
                batch = [
                    {"text": t, "uri": f"mem://fast/{i + k}"}
                    for k, t in enumerate(texts[i : i + 500])
                ]
                r = await pair[1].call_tool("add", {"index": "fast", "passages": batch})
                if r.structured_content["code"] != "INDEXED":
                    raise RuntimeError(r.structured_content["message"])
        finally:
            await _close(pair)

    asyncio.run(run())
    return [f"{words[i % len(words)]} {words[(i + 4) % len(words)]}" for i in range(40)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slow-calls", type=int, default=100)
    ap.add_argument("--slow-s", type=float, default=10.0)
    ap.add_argument("--passages", type=int, default=2000)
    ap.add_argument("--path", choices=["loop", "thread"], default="loop")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.path)
        return
    with tempfile.TemporaryDirectory() as d:
        proc, url = start_server(Path(d), args.slow_s, args.path)
        try:
            queries = fill_fast(url, args.passages)
            result = asyncio.run(measure(url, args.slow_calls, queries))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        json.dumps(
            {
                "path": args.path,
                "slow_calls": args.slow_calls,
                "slow_s": args.slow_s,
                "queries": 40,
                "b_latency_ms": result,
                "processor": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(),
                "load_1_5_15": load,
                "python": platform.python_version(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
