"""Issue 26 ("typed everywhere") and 25.6 ("bad settings are typed"), on the command line and
in the registry: every input ends in one sentence and a documented exit code, never a traceback
or a code that means something else (1 is NO_MATCH, 2 is INDEX_EMPTY)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from indexplug import (
    BackendContext,
    BackendSpec,
    Capabilities,
    IndexEmpty,
    IndexStatus,
    IndexUnavailable,
    InvalidOption,
    InvalidQuery,
    NoMatch,
    Passage,
    Readiness,
    ScoreScale,
    Searched,
    hookimpl,
    open_backend,
)
from indexplug.cli.app import app, one_line
from indexplug.errors import InvalidRequest
from indexplug.outcomes import EXIT_CODES
from indexplug.plugins import Registry, get_registry, reset_registry
from indexplug_sqlite_fts5.plugin import settings as sqlite_settings
from typer.testing import CliRunner

runner = CliRunner()
USAGE = EXIT_CODES["BAD_REQUEST"]
FAILED = EXIT_CODES["INDEX_FAILED"]


def run(*args: str, input: str | None = None) -> Any:
    result = runner.invoke(app, list(args), input=input)
    # every ending is an exit with a code, never an exception escaping the command line
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


# -- usage errors of click itself ------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "otters", "--index", "x", "-k", "abc"],  # click exited 2 (INDEX_EMPTY)
        ["search", "otters", "--index", "x", "--no-such-flag"],
        ["search", "--index", "x"],  # a missing argument
        ["no-such-command"],
        ["index", "--index", "x"],
        [],  # a bare `indexplug` shows the help, as a usage error
        ["config"],
    ],
)
def test_click_usage_errors_exit_with_the_usage_code(argv: list[str]) -> None:
    r = run(*argv)
    assert r.exit_code == USAGE, (argv, r.exit_code, r.output)


def test_a_usage_error_is_one_line_naming_the_option() -> None:
    r = run("search", "otters", "--index", "x", "-k", "abc")
    [line] = error_lines(r.output)
    assert "'-k'" in line and "--help" in line


def test_an_unconfirmed_remove_is_a_usage_exit_not_no_match() -> None:
    # no answer to the prompt (end of input): click aborts with 1, which reads as NO_MATCH
    r = run("remove", "some-id", "--index", "x", input="")
    assert r.exit_code == USAGE


# -- input files and paths -------------------------------------------------------------------


def test_add_of_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    r = run("add", str(tmp_path), "--index", "x")  # was IsADirectoryError, a traceback, exit 1
    assert r.exit_code == USAGE
    [line] = error_lines(r.output)
    assert str(tmp_path) in line


def test_add_of_binary_or_too_deep_input_is_a_usage_error(tmp_path: Path) -> None:
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert run("add", str(binary), "--index", "x").exit_code == USAGE
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    r = run("add", str(deep), "--index", "x")
    assert r.exit_code == USAGE and "line 1" in r.output


def test_a_full_disk_while_indexing_is_index_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("otters hold hands\n")

    def full_disk(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device", "manifests/x.json")

    monkeypatch.setattr("indexplug.ingest.index_folder", full_disk)
    r = run("index", str(docs), "--index", "x")  # was a traceback and exit 1 (NO_MATCH)
    assert r.exit_code == FAILED
    [line] = error_lines(r.output)
    assert "No space left on device" in line


def test_an_unexpected_error_is_one_sentence_and_index_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr("indexplug.cli.app.resolve_target", boom)
    r = run("status", "--index", "x")
    assert r.exit_code == FAILED
    [line] = error_lines(r.output)
    assert "status failed unexpectedly: RecursionError" in line


def test_error_lines_cannot_carry_terminal_escapes_or_line_breaks() -> None:
    assert one_line("a\nb\x1b[31mred\x00") == "a\\nb\\x1b[31mred\\x00"
    r = run("search", "otters", "--index", "x", "--option", "bo\ngus\x1b[2J=1")
    assert r.exit_code == USAGE
    [line] = error_lines(r.output)
    assert "\x1b" not in r.output and "bo\\ngus\\x1b[2J" in line


def test_output_nobody_reads_exits_141_not_no_match(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: every write fails
    env = {**os.environ, "INDEXPLUG_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "indexplug.cli.app", "search", "otters", "--index", "x"],
        stdout=write,
        stderr=subprocess.PIPE,
        env=env,
        timeout=60,
    )
    os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert b"Traceback" not in proc.stderr


# -- settings a factory refuses (25.6) -------------------------------------------------------


def test_an_unknown_setting_is_a_usage_error_naming_it() -> None:
    r = run("search", "otters", "--index", "docs", "--option", "bogus=1")
    assert r.exit_code == USAGE
    [line] = error_lines(r.output)
    assert "bogus" in line


def test_a_setting_too_deep_to_parse_is_refused_as_text() -> None:
    # json.loads raised RecursionError out of --option parsing: exit 3 at best
    r = run("search", "otters", "--index", "docs", "-o", "cache_mb=" + "[" * 100_000)
    assert r.exit_code == USAGE
    [line] = error_lines(r.output)
    assert "cache_mb" in line and len(line) < 2200  # the value echoed, but cut


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"bogus": 1}, "bogus"),
        ({"cache_mb": "abc"}, "cache_mb"),
        ({"cache_mb": [1]}, "cache_mb"),  # was a TypeError from int([1])
        ({"cache_mb": 1.5}, "cache_mb"),
        ({"postings_mb": -1}, "postings_mb"),
        ({"busy_timeout_s": True}, "busy_timeout_s"),
        ({"busy_timeout_s": float("nan")}, "busy_timeout_s"),
    ],
)
def test_sqlite_refuses_bad_settings_naming_them(options: dict[str, Any], option: str) -> None:
    with pytest.raises(InvalidOption) as refused:
        open_backend("sqlite-fts5", options)
    assert refused.value.option == option and option in str(refused.value)
    assert refused.value.field == f"settings.{option}"


def test_sqlite_settings_take_numbers_or_text() -> None:
    assert sqlite_settings({"cache_mb": "32", "postings_mb": 0, "busy_timeout_s": 2}) == {
        "cache_mb": 32,
        "postings_mb": 0.0,
        "busy_timeout_s": 2.0,
    }


class _Store:
    """A minimal backend for the registry tests: it only needs to be made."""

    name = "keywords"
    description = "takes its settings as keyword arguments"
    score_scale = ScoreScale(name="none")
    capabilities = Capabilities()

    def __init__(self, home: Path, *, size: int = 1) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        self.home = home

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Any
    ) -> IndexUnavailable:
        return IndexUnavailable(index=index, reason="this test backend stores nothing")

    def search(
        self, index: str, query: str, *, top_k: int, deadline: Any, filters: Any = None
    ) -> IndexEmpty:
        return IndexEmpty(index=index)

    def remove(self, index: str, ids: Sequence[str], *, deadline: Any) -> IndexUnavailable:
        return IndexUnavailable(index=index, reason="this test backend stores nothing")

    def status(self, index: str, *, deadline: Any) -> IndexStatus:
        return IndexStatus(index=index, exists=False, passages=0)

    def close(self) -> None:
        pass


class _Plugin:
    """Factories the way many third-party plugins write them: settings passed on as keywords
    (an unknown one is a ``TypeError``), or checked with a plain ``ValueError``."""

    @hookimpl
    def indexplug_backends(self) -> list[BackendSpec]:
        return [
            BackendSpec(name="keywords", factory=lambda ctx: _Store(ctx.home, **dict(ctx.options))),
            BackendSpec(name="explicit", factory=_explicit),
        ]


def _explicit(ctx: BackendContext) -> _Store:
    if ctx.options:
        raise InvalidOption("mode", "explicit setting mode is not one this backend knows")
    return _Store(ctx.home)


@pytest.fixture
def registry() -> Registry:
    reg = Registry(load_entrypoints=False)
    reg.register(_Plugin(), name="keyword-plugin")
    return reg


def test_a_factory_typeerror_for_an_unknown_keyword_becomes_invalid_option(
    registry: Registry, tmp_path: Path
) -> None:
    with pytest.raises(InvalidOption) as refused:
        registry.backend("keywords", {"bogus": 1}, home=tmp_path)
    assert refused.value.option == "bogus"
    assert str(refused.value) == "backend 'keywords' has no setting 'bogus'"


def test_a_factory_valueerror_names_the_setting_it_mentions(
    registry: Registry, tmp_path: Path
) -> None:
    with pytest.raises(InvalidOption) as refused:
        registry.backend("keywords", {"size": 0}, home=tmp_path)
    assert refused.value.option == "size" and "size must be a positive integer" in str(
        refused.value
    )


def test_a_factory_error_without_settings_is_the_plugins_own(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: _Store, home: Path, **kw: Any) -> None:
        raise ValueError("the plugin is broken")

    monkeypatch.setattr(_Store, "__init__", broken)
    with pytest.raises(ValueError, match="the plugin is broken") as raised:
        registry.backend("keywords", home=tmp_path)
    assert not isinstance(raised.value, InvalidOption)


def test_a_factorys_own_invalid_option_passes_unchanged(registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match="explicit setting mode") as refused:
        registry.backend("explicit", {"mode": "x"}, home=tmp_path)
    assert refused.value.option == "mode"


@pytest.fixture
def keyword_backends(registry: Registry) -> Iterator[None]:
    reset_registry()
    get_registry().register(_Plugin(), name="keyword-plugin")
    yield
    reset_registry()


def test_the_cli_names_a_setting_a_keyword_factory_refuses(keyword_backends: None) -> None:
    # 25.6: this printed a TypeError traceback and exited 1
    r = run("search", "otters", "--index", "docs", "--backend", "keywords", "-o", "bogus=1")
    assert r.exit_code == USAGE
    [line] = error_lines(r.output)
    assert "no setting 'bogus'" in line


def test_an_embedder_factory_refusing_its_options_is_invalid_option() -> None:
    with pytest.raises(InvalidOption) as refused:
        get_registry().embedder("hashing:default", {"dimension": 128})  # was ignored silently
    assert refused.value.option == "dimension"
    with pytest.raises(InvalidOption) as refused:
        get_registry().embedder("hashing:default", {"dim": "many"})  # was a ValueError
    assert refused.value.option == "dim" and "embedder 'hashing'" in str(refused.value)


# -- queries and filters ---------------------------------------------------------------------


@pytest.mark.parametrize("query", ["?!", "--", "...", "🦦", "¿¡ ~ ^"])
def test_a_query_without_a_word_is_refused_not_no_match(query: str) -> None:
    g = open_backend("sqlite-fts5")
    g.add("n", [Passage.create("otters hold hands", "mem://o"), Passage.create("x y", "mem://x")])
    # was NO_MATCH "(2 searched)": nothing in the query could be searched
    with pytest.raises(InvalidQuery, match="no word to search"):
        g.search("n", query)
    assert isinstance(g.search("n", "otters?!"), Searched)
    r = run("search", query, "--index", "n")
    assert r.exit_code == USAGE


KEYS = ['a"b', '"', "a.b", "$", "", "a\\b", "it's", "x[0]", "é", "a\nb", "$.a", "a b"]


def test_filter_keys_with_any_character_match_on_sqlite() -> None:
    g = open_backend("sqlite-fts5")
    passages = [
        Passage.create(f"otters passage {i}", f"mem://{i}", metadata={key: f"v{i}"})
        for i, key in enumerate(KEYS)
    ]
    g.add("f", passages)
    for i, key in enumerate(KEYS):
        if key.startswith("$"):  # an operator's spelling: refused, never read as a field
            with pytest.raises(InvalidRequest, match="cannot be filtered on"):
                g.search("f", "otters", top_k=50, filters={key: f"v{i}"})
            continue
        out = g.search("f", "otters", top_k=50, filters={key: f"v{i}"})
        # a key holding '"' or '\' never matched: it was quoted into a JSON path
        assert isinstance(out, Searched), (key, out)
        assert [h.passage.id for h in out.hits] == [passages[i].id], key
        assert isinstance(g.search("f", "otters", filters={key: "other"}), NoMatch), key


def test_json_output_of_the_cli_is_unchanged_by_the_group() -> None:
    r = run("backends", "--json")
    assert r.exit_code == 0 and "sqlite-fts5" in {
        b["name"] for b in json.loads(r.output)["backends"]
    }
