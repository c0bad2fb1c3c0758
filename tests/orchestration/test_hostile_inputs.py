"""Hostile input, generated: whatever a caller sends to ``invoke`` or puts on the command line,
the answer is exactly one typed outcome with a documented exit code, never a traceback, and
nothing is written outside ``INDEXPLUG_HOME``.

The arguments are built from each op's own fields with any JSON value (deep nesting, NULs,
huge and non-finite numbers, wrong types) and plausible hostile values (path-like index names,
paths outside the working folder, punctuation-only queries); the argv from every command but
``serve`` (it would serve) and ``conformance`` (it runs the kit), with hostile tokens.  Kept
small (a few dozen examples each, no deadline) so the suite stays well under a minute.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from indexplug import invoke
from indexplug.cli.app import app
from indexplug.invocation import exit_code
from indexplug.ops import OPS
from indexplug.outcomes import EXIT_CODES
from indexplug.transfer import EXIT_CODES as TRANSFER_EXIT_CODES
from orchestration_support import check_schema
from typer.testing import CliRunner

DOCUMENTED = frozenset(EXIT_CODES.values())
"""Every exit status the command line and ``invoke`` document (0-6, 64, 77)."""
ANSWERED = frozenset({0, 1, 2})
"""The exit statuses of answers whose ``ok`` is true: a result, no match, an empty index."""

HOSTILE = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- values ----------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()  # NaN and the infinities included
    | st.text(max_size=12)
    | st.sampled_from(["\x00", "a\x00b", "?!", "../../etc", "x" * 5000, "", " ", "🦦"])
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
deep_values = st.integers(min_value=30, max_value=3000).map(
    lambda n: json.loads("[" * n + "]" * n) if n < 900 else {"deep": n}
)
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "index": st.sampled_from(["docs", "x", "../etc", "a\x00b", "", "A", "a" * 300, "fake-memory"]),
    "indexes": st.lists(st.sampled_from(["docs", "x", "../etc", "", "docs"]), max_size=4),
    "query": st.text(max_size=30) | st.sampled_from(["otters", "?!", "\x00", "x" * 200_000]),
    "queries": st.lists(st.text(max_size=10) | st.just("?!"), max_size=4),
    "top_k": st.integers(min_value=-5, max_value=2000) | st.sampled_from(["3", True, 3.0]),
    "path": st.sampled_from(
        [".", "docs", "docs/a.md", "/", "/etc", "..", "~", "a\x00b", "x" * 5000, "missing"]
    ),
    "filters": st.dictionaries(st.text(max_size=5), _scalars, max_size=3),
    "passages": st.lists(
        st.fixed_dictionaries(
            {"text": st.text(max_size=20), "uri": st.text(max_size=20)},
            optional={"metadata": st.dictionaries(st.text(max_size=4), _scalars, max_size=2)},
        ),
        max_size=3,
    ),
    "ids": st.lists(st.text(max_size=70), max_size=3),
}


@st.composite
def invoke_calls(draw: st.DrawFn) -> tuple[str, Any]:
    """An op (or a name that is none) and its arguments: a mapping, or JSON text."""
    op = draw(st.sampled_from([*OPS, "nope", "", "\x00"]))
    fields = list(OPS[op].args.model_fields) if op in OPS else ["index"]
    keys = st.sampled_from([*fields, "bogus", ""])
    value_for = {k: PLAUSIBLE.get(k, json_values) | json_values | deep_values for k in fields}
    args: dict[str, Any] = {}
    for key in draw(st.lists(keys, max_size=5, unique=True)):
        args[key] = draw(value_for.get(key, json_values))
    form = draw(st.sampled_from(["mapping", "text", "raw"]))
    if form == "mapping":
        return op, args
    if form == "text":
        try:
            return op, json.dumps(args, allow_nan=True)
        except ValueError:  # an integer too long for json to write: send it as it is
            return op, args
    raw = draw(
        st.sampled_from(
            [
                "[" * 50_000 + "]" * 50_000,
                '{"index": "docs", "query": "q", "top_k": ' + "9" * 5000 + "}",
                '{"index": "docs", "query": "q", "deadline_s": NaN}',
                "[]",
                "null",
                '"text"',
                "{",
                "\ufeff{}",
            ]
        )
        | st.text(max_size=30)
        | st.binary(max_size=30)
    )
    return op, raw


# -- the world outside INDEXPLUG_HOME --------------------------------------------------------


def _snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` with what it holds (a file's digest, or 'dir')."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        found[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """A home, a working folder (the current one, with documents) and a sentinel folder; the
    check it returns fails if anything outside the home was created, changed or removed."""
    home, work, sentinel = tmp_path / "home", tmp_path / "work", tmp_path / "sentinel"
    (work / "docs").mkdir(parents=True)
    (work / "docs" / "a.md").write_text("Otters hold hands while they sleep.\n")
    (work / "docs" / "b.md").write_text("Descale the kettle with vinegar.\n")
    sentinel.mkdir()
    (sentinel / "keep.txt").write_text("untouched\n")
    monkeypatch.setenv("INDEXPLUG_HOME", str(home))
    monkeypatch.delenv("INDEXPLUG_CONFIG", raising=False)
    monkeypatch.chdir(work)
    before = {name: _snapshot(tmp_path / name) for name in ("work", "sentinel")}

    def check() -> None:
        assert {p.name for p in tmp_path.iterdir()} <= {"home", "work", "sentinel"}
        for name, seen in before.items():
            assert _snapshot(tmp_path / name) == seen, f"{name} changed"

    return check


# -- the properties --------------------------------------------------------------------------


DEEP_MAPPING = "<a mapping 50,000 levels deep>"


def _deep_mapping(depth: int) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for _ in range(depth):
        nested = {"k": nested}
    return {"index": "docs", "query": "q", "filters": nested}


@HOSTILE
@given(call=invoke_calls())
# the kinds that once escaped as exceptions, always tried (RecursionError, ValueError)
@example(call=("search", "[" * 100_000 + "]" * 100_000))
@example(call=("search", '{"index": "docs", "query": "q", "top_k": ' + "9" * 5000 + "}"))
@example(call=("search", DEEP_MAPPING))  # built in the test: too deep to print
@example(call=("index_folder", {"index": "docs", "path": "x" * 5000}))
@example(call=(["not", "hashable"], None))
@example(call=("export", {"index": "docs", "path": "missing"}))  # no folders: writes nothing
@example(call=("export", {"index": "docs", "path": "docs/a.md"}))
@example(call=("import", {"index": "docs", "path": "/etc/passwd"}))
@example(call=("copy", {"source": "docs", "index": "x"}))
def test_invoke_answers_one_typed_outcome(
    outside: Callable[[], None], call: tuple[str, Any]
) -> None:
    op, args = call
    if args == DEEP_MAPPING:
        args = _deep_mapping(50_000)
    answer = invoke(op, args)
    assert isinstance(answer, dict)
    if isinstance(op, str) and op in OPS:
        assert answer["op"] == op
        assert answer["code"] in OPS[op].codes, answer
        check_schema(json.loads(json.dumps(answer)))  # plain JSON, valid by its own schema
    else:
        assert answer["code"] == "BAD_REQUEST" and answer["problem"]["field"] == "op"
    code = exit_code(answer)
    assert code in DOCUMENTED
    assert answer["ok"] == (code in ANSWERED), answer
    assert "Traceback" not in json.dumps(answer)
    outside()


COMMANDS = [
    "search",
    "add",
    "index",
    "status",
    "remove",
    "invoke",
    "backends",
    "eval",
    "config",
    # the data interface; not export, which writes the file the user at the shell names
    "get",
    "scan",
    "indexes",
    "drop",
    "import",
    "copy",
]
_tokens = st.sampled_from(
    [
        "--index",
        "-i",
        "-k",
        "--json",
        "--option",
        "-o",
        "--backend",
        "--embedder",
        "--deadline",
        "--yes",
        "--config",
        "--args",
        "--max-chars",
        "-",
        "docs",
        ".",
        "..",
        "x",
        "../etc",
        "bogus=1",
        "cache_mb=abc",
        "postings_mb=-1",
        "=",
        "1",
        "0",
        "-1",
        "abc",
        "1e999",
        "nan",
        "{}",
        "[]",
        '{"index": "x", "query": "?!"}',
        "?!",
        "otters",
        "sqlite-fts5",
        "fake-memory",
        "hashing:default",
        "check",
        "show",
        "search",
        "ops",
    ]
) | st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/\\~\x00"), max_size=8)


def _explained(command: str, code: int, output: str) -> bool:
    """Whether the output says what the exit status claims: a usage error (64) says ``error:``
    or shows the usage; any other failure names an outcome with that status (or, for 3, is an
    ``error:`` line: an index that could not be written); 5 is also ``config check``'s "not
    ready".  So a usage error exiting 2 (which reads as INDEX_EMPTY) cannot pass."""
    if code == 0:
        return True
    table = {**EXIT_CODES, **TRANSFER_EXIT_CODES}
    said = {name for name, c in table.items() if c == code and name in output}
    if code == EXIT_CODES["BAD_REQUEST"]:
        return bool(said) or "error:" in output or "Usage:" in output
    if code == EXIT_CODES["INDEX_FAILED"] and "error:" in output:
        return True
    if code == EXIT_CODES["INDEX_UNAVAILABLE"] and command == "config":
        return True
    return bool(said)


@HOSTILE
@given(
    argv=st.tuples(st.sampled_from(COMMANDS), st.lists(_tokens, max_size=6)),
    stdin=st.binary(max_size=40) | st.just(b"[" * 20_000) | st.just(b"y\n"),
)
# the kinds that once exited 1 or 2 with a traceback or click's own codes, always tried
@example(argv=("search", ["otters", "--index", "x", "-k", "abc"]), stdin=b"")
@example(argv=("add", ["..", "--index", "x"]), stdin=b"")
@example(argv=("remove", ["some-id", "--index", "x"]), stdin=b"")
@example(argv=("search", ["otters", "--index", "x", "-o", "bogus=1"]), stdin=b"")
@example(argv=("invoke", ["search", "--args", "-"]), stdin=b"[" * 100_000)
def test_the_command_line_exits_with_a_documented_code(
    outside: Callable[[], None], argv: tuple[str, list[str]], stdin: bytes
) -> None:
    command, rest = argv
    result = CliRunner().invoke(app, [command, *rest], input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        argv,
        repr(result.exception),
    )
    assert result.exit_code in DOCUMENTED, (argv, result.exit_code, result.output)
    assert _explained(command, result.exit_code, result.output), (argv, result.output)
    assert "Traceback" not in result.output
    outside()
