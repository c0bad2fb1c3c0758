"""Named tokens of ``serve --http``: each with a name, a scope and optional limits.

Tokens are made with ``indexplug token add`` (printed once; only a SHA-256 kept in a mode-0600
file under INDEXPLUG_HOME), listed without secrets, revoked without restarting the server.  Over
real HTTP (a server process, httpx and the official MCP client): a read token is refused every op
that writes, a token over its requests-per-minute or its requests-at-once is answered 429 with
``Retry-After`` and a typed JSON-RPC error at once, and the history and audit log record the
token's name as the caller."""

from __future__ import annotations

import hmac
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from indexplug import tokens as tk
from indexplug.errors import InvalidRequest
from indexplug.http_tokens import TokenVerifier
from indexplug.mcp_server import TOKEN_FILE
from indexplug.ops import OPS
from mcp import Client
from test_mcp_http import (
    INITIALIZE,
    LAUNCHER,
    MCP_HEADERS,
    _env,
    assert_refused,
    bearer,
    post,
    run_client,
    serving,
    structured,
)

CONFIG = """
[defaults]
backend = "sqlite-fts5"
deadline_s = 5
allow_remove = true
folders = ["files"]

[indexes.docs]
backend = "sqlite-fts5"
history = "full"
"""

# -- the tokens file -------------------------------------------------------------------------


def test_add_keeps_only_a_hash_in_a_private_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = os.umask(0)  # a permissive umask must not leak into the file's mode
    try:
        record, token = tk.add("ci-bot", "read", rpm=30, concurrent=2, home=home)
    finally:
        os.umask(old)
    path = home / tk.TOKENS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert token not in text and token[4:] not in text
    assert tk.hash_token(token) in text and record.sha256 == tk.hash_token(token)
    assert token.startswith(tk.TOKEN_PREFIX) and len(token) >= 40
    assert record.sha256 not in repr(record)
    (got,) = tk.load(home)
    assert got.public() == {
        "name": "ci-bot",
        "scope": "read",
        "rpm": 30,
        "concurrent": 2,
        "created": record.created,
    }
    assert tk.match(tk.load(home), token) == got
    assert tk.match(tk.load(home), token[:-1]) is None
    with pytest.raises(InvalidRequest, match="exists"):
        tk.add("ci-bot", "write", home=home)
    assert tk.revoke("ci-bot", home=home) is True
    assert tk.revoke("ci-bot", home=home) is False
    assert tk.load(home) == []


@pytest.mark.parametrize(
    "name",
    [
        "../etc",
        "a/b",
        "a\\b",
        "",
        " lead",
        "trail ",
        "x" * 65,
        "x" * 100_000,
        "bell\x07",
        "new\nline",
        "esc\x1b[31m",
        "caf\u00e9",
        "rtl\u202eevil",
        "nul\x00",
        ".hidden",
        "-flag",
        "http",
        "Python",
        "stdio",
        "cli",
    ],
)
def test_hostile_token_names_are_refused_with_a_typed_error(tmp_path: Path, name: str) -> None:
    with pytest.raises(tk.InvalidTokenName) as info:
        tk.add(name, "write", home=tmp_path / "home")
    assert info.value.field == "name"
    message = str(info.value)
    assert len(message) < 400 and "\x1b" not in message and "\n" not in message
    assert not (tmp_path / "home" / tk.TOKENS_FILE).exists()


@pytest.mark.parametrize(
    ("scope", "rpm", "concurrent", "field"),
    [("admin", None, None, "scope"), ("read", 0, None, "rpm"), ("read", None, -1, "concurrent")],
)
def test_bad_scope_and_limits_are_refused(
    tmp_path: Path, scope: str, rpm: Any, concurrent: Any, field: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        tk.add("ok", scope, rpm=rpm, concurrent=concurrent, home=tmp_path)
    assert info.value.field == field


def test_a_tokens_file_open_to_others_or_a_link_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tk.add("one", "write", home=home)
    path = home / tk.TOKENS_FILE
    path.chmod(0o644)
    with pytest.raises(tk.TokenFileError, match=r"other users \(mode 644\)"):
        tk.load(home)
    with pytest.raises(tk.TokenFileError):
        tk.add("two", "read", home=home)
    book = tk.TokenBook(home)
    assert book.current() == [] and book.problem is not None  # never trusted
    path.chmod(0o600)
    assert [t.name for t in book.current()] == ["one"]  # the change is seen
    elsewhere = tmp_path / "elsewhere.json"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    with pytest.raises(tk.TokenFileError, match="link"):
        tk.load(home)
    with pytest.raises(tk.TokenFileError, match="link"):
        tk.revoke("one", home=home)
    assert book.current() == []
    path.unlink()
    path.write_text("{not json")
    path.chmod(0o600)
    with pytest.raises(tk.TokenFileError, match="cannot be read"):
        tk.load(home)


def test_lookup_compares_every_hash_in_constant_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [tk.add(f"t{i}", "read", home=tmp_path)[1] for i in range(3)]
    stored = tk.load(tmp_path)
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    found = tk.match(stored, made[0])
    assert found is not None and found.name == "t0"
    assert len(calls) == 3  # no early exit at the first match
    calls.clear()
    assert tk.match(stored, "ixp_wrong") is None and len(calls) == 3


def test_the_server_token_is_a_write_token_named_http(tmp_path: Path) -> None:
    _, token = tk.add("reader", "read", home=tmp_path)
    verifier = TokenVerifier(tk.TokenBook(tmp_path), "the-server-token-0123456789")
    legacy = verifier.identify("the-server-token-0123456789")
    assert legacy is not None and (legacy.name, legacy.scope) == ("http", "write")
    named = verifier.identify(token)
    assert named is not None and named.name == "reader"
    assert verifier.identify("the-server-token-012345678") is None


def test_the_reserved_names_are_the_callers_indexplug_records() -> None:
    from indexplug.invoke_records import CALLERS

    assert set(CALLERS) == tk.RESERVED


def test_limiter_never_waits_and_says_when_to_retry() -> None:
    now = [0.0]
    limiter = tk.Limiter(clock=lambda: now[0])
    t = tk.NamedToken(name="t", scope="read", sha256="0" * 64, created=0.0, rpm=2, concurrent=3)
    assert limiter.acquire(t) is None and limiter.acquire(t) is None
    assert limiter.acquire(t) == ("rpm", 30)  # one request back every 30 s
    now[0] = 30.0
    assert limiter.acquire(t) is None
    c = tk.NamedToken(name="c", scope="read", sha256="0" * 64, created=0.0, concurrent=1)
    assert limiter.acquire(c) is None
    assert limiter.acquire(c) == ("concurrent", 1)
    limiter.release(c)
    assert limiter.acquire(c) is None


# -- the CLI ---------------------------------------------------------------------------------


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), "token", *args],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


def add_token(home: Path, name: str, *args: str) -> str:
    r = cli(home, "add", name, *args)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert token.startswith(tk.TOKEN_PREFIX) and token not in r.stderr
    return token


def test_cli_add_list_revoke_and_hostile_names(tmp_path: Path) -> None:
    home = tmp_path / "home"
    token = add_token(home, "ci", "--scope", "write", "--rpm", "60")
    listed = cli(home, "list", "--json")
    assert listed.returncode == 0
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["name"] == "ci" and row["scope"] == "write" and row["rpm"] == 60
    assert row["concurrent"] is None and "sha256" not in row
    assert token not in listed.stdout and tk.hash_token(token) not in listed.stdout
    human = cli(home, "list")
    assert "ci  write  rpm=60" in human.stdout and token not in human.stdout
    for bad in ("../x", "a\x1b[2Jb", "x" * 5000, "http"):
        r = cli(home, "add", bad)
        assert r.returncode == 64 and "Traceback" not in r.stderr, r.stderr
        assert "\x1b" not in r.stderr
    r = cli(home, "add", "ok", "--scope", "admin")
    assert r.returncode == 64 and "scope must be read or write" in r.stderr
    assert cli(home, "revoke", "ci").returncode == 0
    r = cli(home, "revoke", "ci")
    assert r.returncode == 64 and "no token named 'ci'" in r.stderr


# -- over real HTTP --------------------------------------------------------------------------


def _args_for(op: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "add": {"index": "docs", "passages": [{"text": "otters", "uri": "m://o"}]},
        "remove": {"index": "docs", "ids": ["0" * 64]},
        "drop": {"index": "docs"},
        "index_folder": {"index": "docs", "path": "files"},
        "export": {"index": "docs", "path": "files/out.jsonl"},
        "import": {"index": "docs", "path": "files/in.jsonl"},
        "copy": {"source": "docs", "index": "other"},
        "export_history": {"path": "files/h.jsonl"},
        "log_search": {"index": "docs", "query": "q"},
        "clear_history": {"index": "docs"},
    }.get(op, {"index": "docs"})


def test_scopes_per_op_and_the_caller_is_the_token_name(tmp_path: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG)
    (tmp_path / "files").mkdir()
    home = tmp_path / "home"
    reader = add_token(home, "reader", "--scope", "read")
    writer = add_token(home, "writer", "--scope", "write")
    writes = sorted(n for n, spec in OPS.items() if not spec.read_only)
    reads = sorted(n for n, spec in OPS.items() if spec.read_only)
    assert {"add", "remove", "drop", "log_search", "clear_history"} <= set(writes)
    with serving(tmp_path, cfg, env=_env(home)) as srv:
        assert "named tokens: 2" in srv.log()
        assert not (home / TOKEN_FILE).exists()  # named tokens exist: no server token made

        async def as_reader(client: Client) -> None:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed == set(reads)
            for op in writes:
                result = await client.call_tool(op, _args_for(op, tmp_path))
                a = structured(result)
                assert a["code"] == "NOT_ALLOWED" and result.is_error, (op, a)
                assert "token 'reader' has the read scope" in a["message"], op
            for op in reads:
                a = structured(await client.call_tool(op, _args_for(op, tmp_path)))
                assert "read scope" not in a["message"], (op, a)
            a = structured(await client.call_tool("search", {"index": "docs", "query": "q"}))
            assert a["code"] in ("INDEX_EMPTY", "NO_MATCH")

        run_client(srv.url, reader, as_reader)

        async def as_writer(client: Client) -> None:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert set(writes) <= listed
            a = structured(await client.call_tool("add", _args_for("add", tmp_path)))
            assert a["code"] == "INDEXED", a
            a = structured(await client.call_tool("search", {"index": "docs", "query": "otters"}))
            assert a["code"] == "SEARCHED"
            audit = structured(await client.call_tool("audit", {"op": "add"}))
            assert [r["caller"] for r in audit["data"]["records"]] == ["writer"]
            hist = structured(await client.call_tool("history", {"index": "docs"}))
            callers = [r["caller"] for r in hist["data"]["records"]]
            assert callers == ["reader", "writer"], callers

        run_client(srv.url, writer, as_writer)


def _initialize(url: str, token: str) -> httpx.Response:
    with httpx.Client(timeout=30) as http:
        return http.post(url, json=INITIALIZE, headers={**MCP_HEADERS, **bearer(token)})


def _assert_limited(response: httpx.Response, limit: str, name: str) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["retry-after"]) >= 1
    body = response.json()
    data = body["error"]["data"]
    assert body["jsonrpc"] == "2.0" and data["code"] == "RATE_LIMITED" and data["ok"] is False
    assert data["limit"] == limit and data["token"] == name
    assert data["retry_after_s"] == int(response.headers["retry-after"])


def test_rpm_limit_answers_429_with_retry_after(tmp_path: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG)
    home = tmp_path / "home"
    slow = add_token(home, "slow", "--scope", "read", "--rpm", "2")
    free = add_token(home, "free", "--scope", "read")
    with serving(tmp_path, cfg, env=_env(home)) as srv:
        assert _initialize(srv.url, slow).status_code == 200
        assert _initialize(srv.url, slow).status_code == 200
        _assert_limited(_initialize(srv.url, slow), "rpm", "slow")
        assert _initialize(srv.url, free).status_code == 200  # limits are per token
        assert_refused(post(srv.url, bearer("ixp_" + "x" * 43)))  # unknown: 401, not 429

        errors: list[Any] = []

        async def body(client: Client) -> None:
            await client.list_tools()

        with pytest.raises(Exception) as info:  # the MCP client hears the typed error
            run_client(srv.url, slow, body)
        errors.append(info.value)
        assert "RATE_LIMITED" in repr(errors) or "limited to 2 requests a minute" in repr(errors)


def test_concurrency_limit_answers_429_at_once(tmp_path: Path, write_config: Any) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    cfg = write_config(
        CONFIG + f'\n[indexes.held]\nbackend = "test-gate"\n[indexes.held.settings]\n'
        f'gate = "{gate}"\n'
    )
    home = tmp_path / "home"
    one = add_token(home, "one", "--scope", "read", "--concurrent", "1")
    with serving(tmp_path, cfg, env=_env(home)) as srv:
        answers: list[dict[str, Any]] = []

        async def held(client: Client) -> None:
            result = await client.call_tool(
                "search", {"index": "held", "query": "q", "deadline_s": 120}
            )
            answers.append(structured(result))

        worker = threading.Thread(target=run_client, args=(srv.url, one, held))
        worker.start()
        try:
            end = time.monotonic() + 60
            while not (gate / "reached").exists():  # the call is in flight now
                assert time.monotonic() < end and worker.is_alive(), srv.log()[-2000:]
                time.sleep(0.02)
            _assert_limited(_initialize(srv.url, one), "concurrent", "one")
        finally:
            (gate / "open").write_text("1")
            worker.join(timeout=120)
        assert answers and answers[0]["code"] == "NO_MATCH", answers
        assert _initialize(srv.url, one).status_code == 200  # the slot is free again


def test_revoke_and_add_take_effect_without_a_restart(tmp_path: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG)
    home = tmp_path / "home"
    first = add_token(home, "first", "--scope", "write")
    with serving(tmp_path, cfg, env=_env(home)) as srv:
        assert _initialize(srv.url, first).status_code == 200
        second = add_token(home, "second", "--scope", "read")
        assert _initialize(srv.url, second).status_code == 200
        assert cli(home, "revoke", "first").returncode == 0
        assert_refused(post(srv.url, bearer(first)))
        assert _initialize(srv.url, second).status_code == 200
        (home / tk.TOKENS_FILE).chmod(0o644)  # a file opened to others is not trusted
        assert_refused(post(srv.url, bearer(second)))
        (home / tk.TOKENS_FILE).chmod(0o600)
        assert _initialize(srv.url, second).status_code == 200


def test_serve_refuses_a_tokens_file_open_to_others(tmp_path: Path, write_config: Any) -> None:
    cfg = write_config(CONFIG)
    home = tmp_path / "home"
    add_token(home, "one")
    (home / tk.TOKENS_FILE).chmod(0o640)
    r = subprocess.run(
        [sys.executable, str(LAUNCHER), "serve", "--http", "--port", "0", "--config", str(cfg)],
        cwd=tmp_path,
        env=_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 64 and "Traceback" not in r.stderr
    assert "can be read or written by other users (mode 640)" in r.stderr
