"""``serve --http`` sheds connections that hold a file descriptor without a request: one that
sends nothing, one that sends its headers a line at a time (slowloris), one whose body never
comes, one idle after its response; and at the connection cap a new connection closes the
oldest incomplete one, so the token holder is served while a flood fills the cap.  A real
server with small limits (config ``[server]``), and bounded waits (never timed asserts)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from indexplug.http_limits import HttpLimits, default_max_connections
from test_mcp_http import CONFIG, Running, _env, bearer, post, serving

TOKEN = "limits-token-" + "z" * 30
WAIT_S = 60.0
"""The most any wait here lasts: far beyond the 1 s limits, only a failing server reaches it."""


def _port(srv: Running) -> int:
    return int(srv.url.rsplit(":", 1)[1].split("/")[0])


@contextmanager
def limited_server(tmp_path: Path, write_config: Any, **server: float | int) -> Iterator[Running]:
    table = "\n".join(f"{k} = {v}" for k, v in server.items())
    cfg = write_config(CONFIG + f"\n[server]\n{table}\n")
    with serving(tmp_path, cfg, env=_env(tmp_path / "home", INDEXPLUG_TOKEN=TOKEN)) as srv:
        yield srv


def connect(srv: Running) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT_S)
    return s


def closed_by_server(s: socket.socket, timeout: float = WAIT_S) -> bool:
    """Whether the server closes ``s`` within ``timeout`` (EOF or reset); data is read past."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def is_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


LIMITS = {"header_timeout_s": 1, "body_timeout_s": 1, "idle_timeout_s": 1}


def test_silent_slow_bodiless_and_idle_connections_are_closed(
    tmp_path: Path, write_config: Any
) -> None:
    with limited_server(tmp_path, write_config, **LIMITS) as srv:
        silent = connect(srv)
        assert closed_by_server(silent)

        slow = connect(srv)
        slow.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        closed = False
        for _ in range(int(WAIT_S / 0.2)):  # a header line every 0.2 s, never the end
            try:
                slow.sendall(b"X-Slow: 1\r\n")
            except OSError:
                closed = True
                break
            if not is_open(slow):
                closed = True
                break
            time.sleep(0.2)
        assert closed, "a slowloris connection was kept open"

        bodiless = connect(srv)
        bodiless.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")
        assert closed_by_server(bodiless)

        kept = connect(srv)  # a whole request, then nothing: closed once idle
        kept.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        kept.settimeout(WAIT_S)
        assert kept.recv(65536).startswith(b"HTTP/1.1 ")
        assert closed_by_server(kept)
        assert srv.proc.poll() is None


def test_at_the_cap_the_oldest_incomplete_is_closed_and_the_token_holder_served(
    tmp_path: Path, write_config: Any
) -> None:
    cap = 8
    with limited_server(tmp_path, write_config, header_timeout_s=600, max_connections=cap) as srv:
        flood = [connect(srv) for _ in range(3 * cap)]
        response = post(srv.url, bearer(TOKEN))
        assert response.status_code == 200, response.text
        assert "capabilities" in response.text
        # the oldest were displaced, the newest (at most the cap) are still open
        assert all(closed_by_server(s) for s in flood[: 2 * cap])
        assert sum(is_open(s) for s in flood[2 * cap :]) <= cap
        assert is_open(flood[-1])
        for s in flood:
            s.close()


def test_the_default_cap_leaves_room_for_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The soft open-file limit less a quarter of it, and at least 64 less."""
    import resource

    for soft, cap in ((1024, 768), (100, 36), (65536, 49152), (10, 1)):
        monkeypatch.setattr(resource, "getrlimit", lambda _which, s=soft: (s, 1 << 20))
        assert default_max_connections() == cap, soft
        assert HttpLimits().cap() == cap
    assert HttpLimits(max_connections=5).cap() == 5
