"""What each CLI command imports: the boundary that keeps ``indexplug`` quick to start.

Each command runs in a fresh interpreter (a process of its own, as a person or an orchestrator
runs it) and reports ``sys.modules`` at its exit.  The lists below are the contract:

* :data:`HEAVY` never loads for any of these commands: the libraries of dense backends and
  embedders (torch, transformers, sentence-transformers, chromadb, elasticsearch, onnxruntime)
  and the JSON Schema validator; they belong in factories and the ``ops`` listing.
* :data:`NOT_AT_START` never loads for ``import indexplug.cli.app`` or ``indexplug --help``:
  numpy, rich's console, the backends' registry and the guard with its outcome models.  They
  load when a command runs that needs them (``--help`` loads rich, which lays it out).
* ``search`` loads no ``urllib.request`` (only context expansion reads a ``file:`` URI);
  ``invoke`` prints JSON for a program, so it loads no rich console either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from indexplug.cli import app as cli_app
from indexplug.cli import orchestration
from indexplug.outcomes import EXIT_CODES

HEAVY = (
    "torch",
    "transformers",
    "sentence_transformers",
    "chromadb",
    "elasticsearch",
    "onnxruntime",
    "jsonschema",
)
NOT_AT_START = (
    *HEAVY,
    "numpy",
    "rich.console",
    "rich.table",
    "indexplug.plugins",
    "indexplug.guard",
    "indexplug.outcomes",
    "indexplug.ops",
    "indexplug.invocation",
)
NOT_IN_HELP = tuple(n for n in NOT_AT_START if not n.startswith("rich."))
"""``--help`` is for a person: typer lays it out with rich, and loads nothing else here."""
NOT_IN_SEARCH = (*HEAVY, "urllib.request", "asyncio", "numpy")
"""A search reads no URL: urllib.request (with http.client and email) is context expansion's;
runs no event loop: asyncio is the coroutine API's (the MCP server's); and ranks its one
search by FTS5: numpy (sqlite-fts5's postings in memory) loads from a process's second search."""
NOT_IN_INVOKE = (*NOT_IN_SEARCH, "rich.console", "rich.table", "rich.progress")
NOT_IN_STATUS = NOT_IN_INVOKE

RUN = """
import json, os, sys
sys.argv = ["indexplug", *json.loads(os.environ["BOUNDARY_ARGV"])]
code = 0
try:
    if sys.argv[1:] == ["--import-only"]:
        import indexplug.cli.app
    else:
        from indexplug.cli.app import main
        main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
with open(os.environ["BOUNDARY_OUT"], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def loaded(tmp_path: Path, *argv: str) -> tuple[int, set[str]]:
    """The exit code of ``indexplug ARGV`` in a fresh interpreter and the modules it loaded."""
    report = tmp_path / "modules.json"
    env = {
        **os.environ,
        "INDEXPLUG_HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "BOUNDARY_ARGV": json.dumps(list(argv)),
        "BOUNDARY_OUT": str(report),
    }
    env.pop("INDEXPLUG_CONFIG", None)
    subprocess.run(
        [sys.executable, "-c", RUN],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    got = json.loads(report.read_text())
    return int(got["code"]), set(got["modules"])


def present(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` loaded, a package counted with any of its submodules."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


@pytest.fixture
def docs_index(tmp_path: Path) -> Path:
    """An index ``docs`` of one file, made in ``tmp_path``'s home by the CLI."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "otters.md").write_text("Otters swim in cold rivers and eat fish.\n", "utf-8")
    code, _ = loaded(tmp_path, "index", str(folder), "--index", "docs", "--json")
    assert code == 0
    return tmp_path


def test_importing_the_cli_loads_nothing_a_command_may_not_need(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "--import-only")
    assert code == 0 and "indexplug.cli.app" in modules
    assert present(modules, NOT_AT_START) == []


def test_help_loads_nothing_a_command_may_not_need(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "--help")
    assert code == 0 and "typer" in modules
    assert present(modules, NOT_IN_HELP) == []


def test_invoke_status_loads_no_console_and_no_heavy_library(docs_index: Path) -> None:
    code, modules = loaded(docs_index, "invoke", "status", "--args", '{"index":"docs"}')
    assert code == 0 and "indexplug.invocation" in modules
    assert present(modules, NOT_IN_STATUS) == []


def test_search_loads_no_heavy_library(docs_index: Path) -> None:
    code, modules = loaded(docs_index, "search", "otters", "--index", "docs", "-k", "5")
    assert code == 0 and "rich.table" in modules  # the hits were printed for a person
    assert present(modules, NOT_IN_SEARCH) == []


def test_written_out_exit_codes_are_the_outcome_table() -> None:
    """The CLI names a few exit codes without importing the outcome models."""
    assert cli_app.BAD_INPUT == EXIT_CODES["BAD_REQUEST"]
    assert cli_app.FAILED == EXIT_CODES["INDEX_FAILED"]
    assert orchestration.BAD_INPUT == EXIT_CODES["BAD_REQUEST"]
    assert orchestration.NOT_READY == EXIT_CODES["INDEX_UNAVAILABLE"]
