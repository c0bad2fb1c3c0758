"""``indexplug serve --http``: a real server process on 127.0.0.1, a real HTTP client (httpx) and
the official MCP client.  Every request needs the bearer token; without it (or with a wrong one)
the answer is 401 with a ``WWW-Authenticate`` header.  Also: where the token comes from (made
once with mode 0600 and reused, or the environment), ``--read-only``, ``--no-auth`` and the
one-line errors for a port that cannot be served."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from indexplug.mcp_server import TOKEN_FILE
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from orchestration_support import check_schema

LAUNCHER = Path(__file__).resolve().parent / "mcp_launcher.py"
STARTUP_S = 60.0
URL_LINE = re.compile(r"indexplug MCP server on http://127\.0\.0\.1:(\d+)/mcp")

CONFIG = """
[defaults]
backend = "sqlite-fts5"
deadline_s = 5
allow_remove = true

[indexes.docs]
backend = "sqlite-fts5"

[indexes.empty]
backend = "sqlite-fts5"
"""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@dataclass
class Running:
    url: str
    stderr: Path
    proc: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.stderr.read_text("utf-8", "replace")


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("INDEXPLUG_TOKEN", "INDEXPLUG_CONFIG")}
    env.update({"INDEXPLUG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"})
    env.update(extra)
    return env


@contextmanager
def serving(
    tmp_path: Path, config: Path, *args: str, env: dict[str, str], tag: str = "server"
) -> Iterator[Running]:
    """``indexplug serve --http --port 0 ...`` until the block ends; the URL read from stderr."""
    log = tmp_path / f"{tag}.stderr"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(LAUNCHER), "serve", "--http", "--port", "0"]
            + ["--config", str(config), *args],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            found = URL_LINE.search(log.read_text("utf-8", "replace"))
            if found:
                port = int(found.group(1))
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield Running(f"http://127.0.0.1:{port}/mcp", log, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def post(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """A real HTTP request: MCP's initialize, with ``headers`` added."""
    with httpx.Client(timeout=30) as http:
        return http.post(url, json=INITIALIZE, headers={**MCP_HEADERS, **(headers or {})})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert "capabilities" not in response.text


def run_client(
    url: str,
    token: str | None,
    body: Callable[[Client], Awaitable[None]],
    statuses: list[int] | None = None,
) -> None:
    """The official MCP client over streamable HTTP, sending the token on every request (and
    noting each response's status in ``statuses``)."""

    async def note(response: httpx.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async def main() -> None:
        with anyio.fail_after(120):
            headers = bearer(token) if token else {}
            async with httpx.AsyncClient(
                headers=headers, timeout=30, event_hooks={"response": [note]}
            ) as http:
                transport = streamable_http_client(url, http_client=http)
                async with Client(transport) as client:
                    await body(client)

    anyio.run(main)


def structured(result: Any) -> dict[str, Any]:
    answer = result.structured_content
    assert isinstance(answer, dict)
    check_schema(answer)
    assert result.is_error == (not answer["ok"])
    return answer


def test_http_needs_the_token_made_at_first_start_and_reused(
    tmp_path: Path, write_config: Any
) -> None:
    cfg = write_config(CONFIG)
    home = tmp_path / "home"
    token_file = home / TOKEN_FILE

    with serving(tmp_path, cfg, env=_env(home)) as srv:
        assert token_file.is_file()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32
        log = srv.log()
        assert f"bearer token (made now): {token_file}" in log  # where it is...
        assert token not in log  # ...never the token itself

        assert_refused(post(srv.url))  # no token
        wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
        assert_refused(post(srv.url, bearer(wrong)))  # a wrong token of the same length
        assert_refused(post(srv.url, bearer(token[:-1])))  # a prefix of the token
        assert_refused(post(srv.url, {"Authorization": f"Basic {token}"}))  # another scheme
        ok = post(srv.url, bearer(token))
        assert ok.status_code == 200 and '"serverInfo"' in ok.text
        # The SDK's Host check (DNS rebinding) is still there, behind the token.
        assert post(srv.url, {**bearer(token), "Host": "evil.example"}).status_code == 421

        async def body(client: Client) -> None:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"search", "add", "remove"} <= names
            a = structured(await client.call_tool("search", {"index": "empty", "query": "q"}))
            assert a["code"] == "INDEX_EMPTY"
            a = structured(
                await client.call_tool(
                    "add", {"index": "docs", "passages": [{"text": "otters", "uri": "m://o"}]}
                )
            )
            assert a["code"] == "INDEXED"
            result = await client.call_tool("search", {"index": "docs", "query": "otters"})
            a = structured(result)
            assert a["code"] == "SEARCHED" and a["data"]["hits"][0]["passage"]["text"] == "otters"

        run_client(srv.url, token, body)

        reached: list[str] = []

        async def no_token(client: Client) -> None:
            await client.list_tools()
            reached.append("listed")

        statuses: list[int] = []
        with pytest.raises(Exception):  # the official client, without the token: refused
            run_client(srv.url, None, no_token, statuses)
        assert reached == [] and statuses and set(statuses) == {401}

    before = token_file.stat()
    with serving(tmp_path, cfg, env=_env(home), tag="again") as srv:
        log = srv.log()
        assert f"bearer token: {token_file}" in log and "made now" not in log
        assert token_file.read_text().strip() == token  # reused, not made again
        assert token_file.stat().st_ino == before.st_ino
        assert post(srv.url, bearer(token)).status_code == 200
        assert_refused(post(srv.url))


def test_http_token_from_the_environment_and_read_only(tmp_path: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG)
    home = tmp_path / "home"
    token = "env-token-" + "x" * 30
    env = _env(home, INDEXPLUG_TOKEN=token)
    with serving(tmp_path, cfg, "--read-only", env=env) as srv:
        log = srv.log()
        assert "(read-only)" in log and "the environment variable INDEXPLUG_TOKEN" in log
        assert token not in log
        assert not (home / TOKEN_FILE).exists()  # nothing made when the environment has one
        assert_refused(post(srv.url))
        assert_refused(post(srv.url, bearer("env-token-" + "y" * 30)))

        async def body(client: Client) -> None:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {
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
            for name, args in (
                ("add", {"index": "docs", "passages": [{"text": "otters", "uri": "m://o"}]}),
                ("remove", {"index": "docs", "ids": ["0" * 64]}),
                ("index_folder", {"index": "docs", "path": str(tmp_path)}),
            ):
                result = await client.call_tool(name, args)
                a = structured(result)
                assert a["code"] == "NOT_ALLOWED" and result.is_error is True, name
                assert "read-only" in a["message"]
            a = structured(await client.call_tool("search", {"index": "docs", "query": "otters"}))
            assert a["code"] == "INDEX_EMPTY"  # nothing was added

        run_client(srv.url, token, body)


def test_http_no_auth_takes_the_flag_and_warns(tmp_path: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG)
    home = tmp_path / "home"
    with serving(tmp_path, cfg, "--no-auth", env=_env(home)) as srv:
        log = srv.log()
        assert "warning:" in log and "--no-auth" in log and "bearer token:" not in log
        assert not (home / TOKEN_FILE).exists()
        response = post(srv.url)
        assert response.status_code == 200 and '"serverInfo"' in response.text

        async def body(client: Client) -> None:
            a = structured(await client.call_tool("search", {"index": "empty", "query": "q"}))
            assert a["code"] == "INDEX_EMPTY"

        run_client(srv.url, None, body)


def test_http_token_env_named_by_the_config(tmp_path: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG + '\n[server]\ntoken_env = "MY_MCP_TOKEN"\n')
    home = tmp_path / "home"
    token = "config-named-" + "z" * 30
    env = _env(home, MY_MCP_TOKEN=token, INDEXPLUG_TOKEN="ignored-" + "q" * 30)
    with serving(tmp_path, cfg, env=env) as srv:
        assert "the environment variable MY_MCP_TOKEN" in srv.log()
        assert_refused(post(srv.url, bearer("ignored-" + "q" * 30)))
        assert post(srv.url, bearer(token)).status_code == 200


def _serve_fails(
    tmp_path: Path, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), "serve", "--http", *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("port", ["70000", "65536", "-1"])
def test_http_port_out_of_range_is_a_one_line_usage_error(tmp_path: Path, port: str) -> None:
    r = _serve_fails(tmp_path, "--port", port, env=_env(tmp_path / "home"))
    assert r.returncode == 64, r.stderr
    assert "Traceback" not in r.stderr and "OverflowError" not in r.stderr
    assert (
        r.stderr.strip()
        == f"error: --port must be from 1 to 65535 (or 0: any free port), not {port}"
    )


def test_http_port_in_use_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _serve_fails(tmp_path, "--port", str(port), env=_env(tmp_path / "home"))
    assert r.returncode == 64, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot listen on 127.0.0.1:{port}: ")


def test_http_refuses_a_token_file_other_users_can_read(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / TOKEN_FILE).write_text("t" * 40 + "\n")
    (home / TOKEN_FILE).chmod(0o644)
    r = _serve_fails(tmp_path, "--port", "0", env=_env(home))
    assert r.returncode == 64, r.stderr
    assert "Traceback" not in r.stderr
    assert "can be read or written by other users (mode 644)" in r.stderr
