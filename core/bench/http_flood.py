"""A connection flood against ``indexplug serve --http``, and whether the token holder gets in.

Starts the server under a small open-file limit (``--nofile``, default 1,024), opens ``--idle``
connections that send nothing and ``--slow`` slowloris ones that send a header line every
second and never finish, then times one authenticated MCP ``initialize`` (the token holder),
and watches for ``--watch`` seconds how many flood connections the server closed and when.

    python core/bench/http_flood.py                 # 1,100 idle, 300 slowloris, ulimit -n 1024

Prints one JSON object (the figures in docs/security.md, "Connection floods").  Needs the
``mcp`` extra; opens ``idle + slow`` sockets itself, so it raises its own soft open-file limit
to the hard one.
"""

from __future__ import annotations

import argparse
import errno
import http.client
import json
import os
import platform
import re
import resource
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = "from indexplug.cli.app import main; main()"
URL_LINE = re.compile(r"indexplug MCP server on http://127\.0\.0\.1:(\d+)/mcp")
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


def start_server(home: Path, token: str, nofile: int) -> tuple[subprocess.Popen[bytes], int]:
    log = home / "server.stderr"

    def limit() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

    env = {**os.environ, "INDEXPLUG_HOME": str(home), "INDEXPLUG_TOKEN": token}
    env.pop("INDEXPLUG_CONFIG", None)
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", CLI, "serve", "--http", "--port", "0"],
            cwd=home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            preexec_fn=limit,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = URL_LINE.search(log.read_text("utf-8", "replace"))
        if found:  # printed before uvicorn listens: wait until it does
            try:
                socket.create_connection(("127.0.0.1", int(found.group(1))), timeout=0.5).close()
                return proc, int(found.group(1))
            except OSError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server did not start: {log.read_text()[-2000:]}")


def open_many(port: int, n: int) -> list[socket.socket]:
    """``n`` connections, begun without waiting for each, 100 at a time 50 ms apart (all at
    once, those over the listen backlog are dropped by the kernel before the server sees them,
    and linger on this side only)."""
    out = []
    for i in range(n):
        if i and i % 100 == 0:
            time.sleep(0.05)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        out.append(s)
    return out


def closed_by_peer(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (readable with EOF, or reset)."""
    try:
        poller = select.poll()
        poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(0):
            return False
        return s.recv(4096) == b""
    except OSError as exc:
        return exc.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN, errno.ECONNREFUSED)


def token_holder(port: int, token: str) -> tuple[int | str, float]:
    started = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request(
            "POST",
            "/mcp",
            body=json.dumps(INITIALIZE),
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "authorization": f"Bearer {token}",
            },
        )
        status: int | str = conn.getresponse().status
        conn.close()
    except OSError as exc:
        status = f"{type(exc).__name__}: {exc}"
    return status, round(time.monotonic() - started, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=1100)
    ap.add_argument("--slow", type=int, default=300)
    ap.add_argument("--nofile", type=int, default=1024)
    ap.add_argument("--watch", type=float, default=15.0)
    a = ap.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    token = secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(Path(tmp), token, a.nofile)
        try:
            t0 = time.monotonic()
            idle = open_many(port, a.idle)
            slow = open_many(port, a.slow)
            time.sleep(1.0)
            status, took = token_holder(port, token)
            ticks = 0
            closed_at: dict[int, float] = {}
            next_line = time.monotonic()
            while time.monotonic() - t0 < a.watch:
                if time.monotonic() >= next_line:  # slowloris: one more header line a second
                    line = b"X-Slow: 1\r\n" if ticks else b"POST /mcp HTTP/1.1\r\nHost: x\r\n"
                    for s in slow:
                        if id(s) not in closed_at:
                            try:
                                s.send(line)
                            except OSError:
                                pass
                    ticks += 1
                    next_line += 1.0
                for s in idle + slow:
                    if id(s) not in closed_at and closed_by_peer(s):
                        closed_at[id(s)] = time.monotonic() - t0
                time.sleep(0.1)
            slow_times = sorted(closed_at[id(s)] for s in slow if id(s) in closed_at)
            print(
                json.dumps(
                    {
                        "processor": platform.processor() or platform.machine(),
                        "nofile": a.nofile,
                        "token_holder_status": status,
                        "token_holder_s": took,
                        "idle_closed": sum(id(s) in closed_at for s in idle),
                        "idle": a.idle,
                        "slow_closed": len(slow_times),
                        "slow": a.slow,
                        "slow_closed_after_s": [round(slow_times[0], 1), round(slow_times[-1], 1)]
                        if slow_times
                        else None,
                        "watched_s": a.watch,
                        "server_exited": proc.poll(),
                    },
                    indent=2,
                )
            )
            for s in idle + slow:
                s.close()
            if proc.poll() is not None:
                print((Path(tmp) / "server.stderr").read_text()[-3000:], file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(15)


if __name__ == "__main__":
    main()
