"""Config-file deployments through the CLI: ``config check``, ``config show``, discovery, and
the same configuration driving every command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from indexplug.cli.app import app
from indexplug.config import load_config
from indexplug.errors import ConfigError
from typer.testing import CliRunner

runner = CliRunner()


def run(*args: str, input: str | None = None) -> Any:
    return runner.invoke(app, list(args), input=input)


def flat(text: str) -> str:
    return " ".join(text.split())


GOOD = """
[defaults]
deadline_s = 5

[indexes.docs]
backend = "sqlite-fts5"
max_bytes = 50_000_000

[indexes.mem]
backend = "fake-memory"
allow_remove = true

[indexes.both]
kind = "fusion"
members = ["docs", "mem"]
"""


def test_check_a_valid_file_reports_each_index(write_config: Any) -> None:
    cfg = write_config(GOOD, "deploy.toml")
    r = run("config", "check", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert "valid" in r.output and "docs" in r.output and "fusion of docs, mem" in r.output
    r = run("config", "check", "--config", str(cfg), "--json")
    data = json.loads(r.output)
    assert data["valid"] and data["ready"] and data["config"] == str(cfg)
    rows = {row["name"]: row for row in data["indexes"]}
    assert rows["docs"]["backend"] == "sqlite-fts5" and rows["docs"]["ready"]
    assert rows["mem"]["allow_remove"] and not rows["docs"]["allow_remove"]
    assert rows["both"]["kind"] == "fusion" and rows["both"]["members"] == ["docs", "mem"]


def test_check_reports_a_backend_that_is_not_ready(write_config: Any, test_backends: None) -> None:
    cfg = write_config(
        """
        [indexes.search]
        backend = "test-down"
        settings = { api_key_env = "INDEXPLUG_TEST_UNSET_KEY" }
        """
    )
    r = run("config", "check", "--config", str(cfg))
    assert r.exit_code == 5, r.output
    out = flat(r.output)
    assert "connection refused" in out
    assert "environment variable INDEXPLUG_TEST_UNSET_KEY is not set" in out


@pytest.mark.parametrize(
    "text, where",
    [
        ("[indexes.docs]\nbakend = 'sqlite-fts5'\n", "[indexes.docs] key 'bakend': Extra inputs"),
        ("[defaults]\ndeadline = 3\n", "[defaults] key 'deadline'"),
        (
            "[indexes.docs]\nbackend = 'nope'\n",
            "[indexes.docs] key 'backend': 'nope' is not installed",
        ),
        ("[indexes.docs]\nmax_bytes = 'big'\n", "[indexes.docs] key 'max_bytes'"),
        ("[indexes.docs]\nsettings = { cache_size = 3 }\n", "[indexes.docs] key 'settings'"),
        ("[indexes.both]\nkind = 'fusion'\n", "[indexes.both] key 'members': a fusion index needs"),
        (
            "[indexes.both]\nkind = 'fusion'\nmembers = ['a', 'b']\n",
            "[indexes.both] key 'members': 'a' is not a configured index",
        ),
        (
            "[indexes.both]\nkind = 'fusion'\nbackend = 'sqlite-fts5'\nmembers = ['a', 'b']\n",
            "[indexes.both] key 'backend': a fusion index has members",
        ),
        (
            "[indexes.docs]\nsettings = { password = 'hunter2' }\n",
            "[indexes.docs] key 'settings.password': secrets are never written in the file",
        ),
        ("[indexes.Bad]\n", "[indexes.Bad]"),
        ("[indexes.docs\n", "not valid TOML"),
        (
            "[indexes.a]\n[indexes.b]\nbackend = 'fake-memory'\n"
            "[indexes.both]\nkind = 'fusion'\nmembers = ['a', 'b']\nfusion = 'sum'\n",
            "[indexes.both] key 'fusion': fusion = 'sum' adds scores",
        ),
    ],
)
def test_problems_name_the_file_the_table_and_the_key(
    write_config: Any, text: str, where: str
) -> None:
    cfg = write_config(text, "bad.toml")
    r = run("config", "check", "--config", str(cfg))
    assert r.exit_code == 64, r.output
    out = flat(r.output)
    assert f"{cfg}:" in out and where in out, out
    assert "Traceback" not in r.output
    # the same problem stops every other command before anything runs
    r = run("search", "q", "--index", "docs", "--config", str(cfg))
    assert r.exit_code == 64 and where in flat(r.output)
    with pytest.raises(ConfigError):
        load_config(cfg)


def test_show_prints_the_effective_configuration_with_secrets_masked(write_config: Any) -> None:
    cfg = write_config(
        """
        [defaults]
        backend = "sqlite-fts5"
        max_bytes = 1_000_000
        allow_remove = true

        [indexes.docs]
        backend = "fake-memory"  # takes any settings
        [indexes.docs.settings]
        busy_timeout_s = 2
        api_key_env = "ES_KEY"
        hosts = ["https://u:pw@h:9200"]
        token_limit = 5
        auth = { session_token_env = "TOK" }

        [indexes.locked]
        allow_remove = false
        """
    )
    r = run("config", "show", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    docs = data["indexes"]["docs"]
    assert docs["backend"] == "fake-memory" and docs["max_bytes"] == 1_000_000
    assert data["indexes"]["locked"]["backend"] == "sqlite-fts5"
    assert docs["allow_remove"] is True and data["indexes"]["locked"]["allow_remove"] is False
    assert docs["settings"]["api_key_env"] == "ES_KEY"  # the name of a variable is not secret
    assert docs["settings"]["hosts"] == ["https://u:****@h:9200"]
    assert docs["settings"]["token_limit"] == "****"
    assert docs["settings"]["auth"] == {"session_token_env": "TOK"}
    assert "pw@" not in r.output and data["path"] == str(cfg)


def test_the_file_is_found_by_env_then_working_folder(
    write_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = write_config("[indexes.here]\n")
    r = run("config", "show")
    assert r.exit_code == 0 and "here" in json.loads(r.output)["indexes"]
    other = write_config("[indexes.there]\n", "other.toml")
    monkeypatch.setenv("INDEXPLUG_CONFIG", str(other))
    assert "there" in json.loads(run("config", "show").output)["indexes"]
    assert "here" in json.loads(run("config", "show", "--config", str(here)).output)["indexes"]
    monkeypatch.setenv("INDEXPLUG_CONFIG", str(tmp_path / "missing.toml"))
    r = run("config", "show")
    assert r.exit_code == 64 and "INDEXPLUG_CONFIG names" in flat(r.output)
    monkeypatch.delenv("INDEXPLUG_CONFIG")
    here.unlink()
    r = run("config", "check")
    assert r.exit_code == 64 and "no indexplug.toml found" in flat(r.output)


def test_one_line_switches_an_index_backend_for_every_entry_point(
    write_config: Any, docs: Path
) -> None:
    from indexplug import invoke

    cfg = write_config('[indexes.docs]\nbackend = "sqlite-fts5"\n')
    assert run("index", str(docs), "--index", "docs").exit_code == 0
    r = run("search", "otters", "--index", "docs", "--json")
    assert json.loads(r.output)["backend"] == "sqlite-fts5"
    a = invoke("search", {"index": "docs", "query": "otters"})
    assert a["code"] == "SEARCHED" and a["evidence"]["backend"] == "sqlite-fts5"
    cfg.write_text(cfg.read_text().replace('"sqlite-fts5"', '"fake-memory"'))
    r = run("status", "--index", "docs", "--json")
    # outcomes name the plugin that provides the backend (one of the test fixtures' plugins)
    assert json.loads(r.output)["backend"] in ("fake-good", "fake-dup")
    a = invoke("search", {"index": "docs", "query": "otters"})
    assert a["code"] == "INDEX_EMPTY" and a["evidence"]["backend"] == "fake-memory"
