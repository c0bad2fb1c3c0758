"""Where the bearer token of ``serve --http`` comes from, and how it is checked: the config names
an environment variable (never the token), else INDEXPLUG_TOKEN, else a file in INDEXPLUG_HOME
made once with mode 0600 and reused; a token file other users can read is refused; the token is
compared in constant time."""

from __future__ import annotations

import hmac
import os
import stat
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from indexplug.config import load_config
from indexplug.errors import ConfigError
from indexplug.mcp_server import (
    TOKEN_ENV,
    TOKEN_FILE,
    StaticTokenVerifier,
    server_token,
)


@pytest.fixture
def no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def test_token_is_made_once_with_mode_0600_then_reused(tmp_path: Path, no_env_token: None) -> None:
    home = tmp_path / "home"
    old = os.umask(0)  # a permissive umask must not leak into the file's mode
    try:
        first = server_token(home=home)
    finally:
        os.umask(old)
    path = home / TOKEN_FILE
    assert first.made is True and first.where == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert path.read_text() == first.value + "\n" and len(first.value) >= 32
    assert first.value not in repr(first)  # the token stays out of logs and reprs
    second = server_token(home=home)
    assert second.made is False and second.value == first.value
    assert [p.name for p in home.iterdir()] == [TOKEN_FILE]  # no temporary file left behind
    other = server_token(home=tmp_path / "other-home")
    assert other.value != first.value  # random per home


def test_token_file_other_users_can_read_is_refused(tmp_path: Path, no_env_token: None) -> None:
    home = tmp_path / "home"
    server_token(home=home)
    path = home / TOKEN_FILE
    path.chmod(0o640)
    with pytest.raises(ConfigError, match=r"other users \(mode 640\); run chmod 600"):
        server_token(home=home)
    path.chmod(0o600)
    assert server_token(home=home).made is False


def test_token_file_that_is_a_link_or_too_short_is_refused(
    tmp_path: Path, no_env_token: None
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("t" * 40)
    target.chmod(0o600)
    (home / TOKEN_FILE).symlink_to(target)
    with pytest.raises(ConfigError, match="cannot read the token file"):
        server_token(home=home)
    (home / TOKEN_FILE).unlink()
    (home / TOKEN_FILE).write_text("short\n")
    (home / TOKEN_FILE).chmod(0o600)
    with pytest.raises(ConfigError, match="too short"):
        server_token(home=home)


def test_environment_token_wins_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv(TOKEN_ENV, "  from-the-environment-1234  ")
    got = server_token(home=home)
    assert got.value == "from-the-environment-1234"
    assert got.where == f"the environment variable {TOKEN_ENV}" and got.made is False
    assert not home.exists()
    monkeypatch.setenv(TOKEN_ENV, "short")
    with pytest.raises(ConfigError, match="too short"):
        server_token(home=home)
    monkeypatch.setenv(TOKEN_ENV, "has a space in it, long enough")
    with pytest.raises(ConfigError, match="without spaces"):
        server_token(home=home)


def test_config_token_env_wins_and_must_be_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "the-generic-variable-1234")
    monkeypatch.setenv("MY_MCP_TOKEN", "the-named-variable-12345")
    got = server_token("MY_MCP_TOKEN", home=tmp_path / "home")
    assert got.value == "the-named-variable-12345" and "MY_MCP_TOKEN" in got.where
    monkeypatch.delenv("MY_MCP_TOKEN")
    with pytest.raises(ConfigError, match="token_env names MY_MCP_TOKEN, which is not set"):
        server_token("MY_MCP_TOKEN", home=tmp_path / "home")


def test_config_names_the_token_variable_never_the_token(write_config: Any) -> None:
    cfg = load_config(write_config('[server]\ntoken_env = "MY_MCP_TOKEN"\n'))
    assert cfg.server.token_env == "MY_MCP_TOKEN"
    assert cfg.masked()["server"] == {  # the name, never a token; and the connection limits
        "token_env": "MY_MCP_TOKEN",
        "header_timeout_s": 10.0,
        "body_timeout_s": 30.0,
        "idle_timeout_s": 5.0,
    }
    with pytest.raises(ConfigError, match=r"\[server\] key 'token': secrets are never written"):
        load_config(write_config('[server]\ntoken = "s3cret-s3cret-s3cret"\n', "bad.toml"))
    with pytest.raises(ConfigError, match=r"\[server\] key 'token_env'"):
        load_config(write_config('[server]\ntoken_env = ""\n', "empty.toml"))


def test_verifier_accepts_only_the_token_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = "the-right-token-0123456789"
    verifier = StaticTokenVerifier(token)
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)

    def verify(candidate: str) -> Any:
        return anyio.run(verifier.verify_token, candidate)

    accepted = verify(token)
    assert accepted is not None and accepted.token == token
    for wrong in ("", token[:-1], token + "x", token.upper(), "the-right-token-012345678é"):
        assert verify(wrong) is None, wrong
    assert len(calls) == 6 and all(b == token.encode() for _, b in calls)


def test_token_file_that_is_a_fifo_is_refused_at_once(tmp_path: Path, no_env_token: None) -> None:
    """A FIFO in the token file's place would block the server's start until someone wrote
    to it; it is refused like any file that is not a regular one."""
    home = tmp_path / "home"
    home.mkdir()
    os.mkfifo(home / TOKEN_FILE, 0o600)
    got: list[BaseException] = []

    def read() -> None:
        try:
            server_token(home=home)
        except BaseException as exc:
            got.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # a blocked open never returns: the test fails instead of hanging
    assert not reader.is_alive(), "reading a FIFO token file blocked"
    assert len(got) == 1 and isinstance(got[0], ConfigError)
    assert "not a regular file" in str(got[0])
