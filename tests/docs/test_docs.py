"""Every code example in docs/ is executed, so none goes stale.

* ```python blocks run, each in a fresh namespace with its own indexplug home;
* ```bash blocks: every ``indexplug ...`` command line in them is parsed by the real CLI (the
  command and each option must exist), and those marked to run (a block whose first line is
  ``# run``) are executed through the CLI and must exit 0.
* the JSON in ```json blocks of the MCP page parses.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
import typer
from indexplug.cli.app import app

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)


def blocks(lang: str) -> list[tuple[str, int, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text("utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                line = text[: m.start()].count("\n") + 1
                found.append((str(page.relative_to(DOCS)), line, m.group(2)))
    return found


PY = blocks("python")
SH = blocks("bash")


def test_the_docs_have_examples() -> None:
    assert len(PY) >= 3 and len(SH) >= 3


@pytest.mark.parametrize("page, line, code", PY, ids=[f"{p}:{n}" for p, n, _ in PY])
def test_python_examples_run(page: str, line: int, code: str, tmp_path: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_example_{line}"}
    exec(compile(code, f"docs/{page}:{line}", "exec"), namespace)


def _indexplug_lines(code: str) -> list[list[str]]:
    out = []
    for raw in code.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|;", raw.split("#", 1)[0]):
            words = shlex.split(part.strip()) if part.strip() else []
            if words and words[0].endswith("indexplug"):
                out.append(words[1:])
    return out


CMDS = [(p, n, args) for p, n, code in SH for args in _indexplug_lines(code)]


@pytest.mark.parametrize("page, line, args", CMDS, ids=[f"{p}:{n}:{a[:1]}" for p, n, a in CMDS])
def test_cli_lines_in_the_docs_parse(page: str, line: int, args: list[str]) -> None:
    root = typer.main.get_command(app)
    ctx = root.make_context("indexplug", list(args), resilient_parsing=False)
    cmd_name, cmd, rest = root.resolve_command(ctx, list(args))
    assert cmd is not None, f"{page}:{line}: unknown command {args}"
    while isinstance(cmd, click.Group):
        sub_ctx = cmd.make_context(cmd_name or "", rest)
        cmd_name, cmd, rest = cmd.resolve_command(sub_ctx, rest)
    cmd.make_context(cmd_name or "", rest)  # raises on unknown options or missing arguments


RUN = [(p, n, code) for p, n, code in SH if code.startswith("# run")]


@pytest.mark.parametrize("page, line, code", RUN, ids=[f"{p}:{n}" for p, n, _ in RUN])
def test_runnable_shell_examples_exit_zero(page: str, line: int, code: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    (tmp_path / "my-notes").mkdir(exist_ok=True)
    (tmp_path / "my-notes" / "otters.md").write_text("Otters hold hands while they sleep.")
    runner = CliRunner()
    for args in _indexplug_lines(code):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, f"{page}:{line}: indexplug {' '.join(args)}\n{result.output}"


def test_json_examples_parse() -> None:
    for page, line, code in blocks("json"):
        json.loads(code), f"{page}:{line}"
