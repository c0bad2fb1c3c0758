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
* Whatever plugins are installed (this file also runs where every plugin is: tox's ``type``
  env), discovery, ``--help`` and a command on sqlite-fts5 load no backend library
  (:data:`BACKEND_LIBRARIES`) and, of each plugin, only the module its entry point names (and
  that module's packages): a process pays for the backend it opens, never for the others.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
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

BACKEND_LIBRARIES = (
    *HEAVY,
    "numpy",
    "scipy",
    "usearch",
    "elastic_transport",
    "orjson",
    "onnx",
    "ragatouille",
    "colbert",
)
"""Libraries that only backends and embedders use: none loads before a backend that needs it
is opened."""

RUN = """
import json, os, sys
sys.argv = ["indexplug", *json.loads(os.environ["BOUNDARY_ARGV"])]
code = 0
try:
    if sys.argv[1:] == ["--import-only"]:
        import indexplug.cli.app
    elif sys.argv[1:] == ["--discover-only"]:
        from indexplug.plugins import get_registry
        reg = get_registry()
        reg.backend_names(), reg.describe_embedders()
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


def plugin_modules_beyond_registration(modules: set[str], *, opened: str = "") -> list[str]:
    """Modules of installed plugins loaded beyond what registration needs: for each entry
    point of the group ``indexplug``, anything of its top-level package other than the module
    the entry point names and that module's packages.  ``opened`` is the top-level package of
    the backend the command uses (its modules are its own business)."""
    allowed: set[str] = set()
    packages: set[str] = set()
    for ep in entry_points(group="indexplug"):
        parts = ep.module.split(".")
        if parts[0] in ("indexplug", opened):
            continue  # core's own (the hashing embedder), and the backend in use
        packages.add(parts[0])
        allowed.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return sorted(m for m in modules if m.split(".")[0] in packages and m not in allowed)


def test_discovery_loads_no_backend_of_any_installed_plugin(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "--discover-only")
    assert code == 0 and "indexplug.plugins" in modules
    assert "indexplug_sqlite_fts5.plugin" in modules  # discovery did load the entry points
    assert present(modules, BACKEND_LIBRARIES) == []
    assert plugin_modules_beyond_registration(modules) == []


def test_help_loads_no_plugin(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "--help")
    assert code == 0
    assert present(modules, BACKEND_LIBRARIES) == []
    assert plugin_modules_beyond_registration(modules) == []


@pytest.mark.parametrize(
    "argv",
    [
        ("invoke", "status", "--args", '{"index":"docs"}'),
        ("status", "--index", "docs"),
        ("search", "otters", "--index", "docs", "-k", "5"),
    ],
    ids=["invoke-status", "status", "search"],
)
def test_a_command_on_sqlite_loads_no_other_backend(
    docs_index: Path, argv: tuple[str, ...]
) -> None:
    code, modules = loaded(docs_index, *argv)
    assert code == 0 and "indexplug_sqlite_fts5.backend" in modules
    assert present(modules, BACKEND_LIBRARIES) == []
    assert plugin_modules_beyond_registration(modules, opened="indexplug_sqlite_fts5") == []
