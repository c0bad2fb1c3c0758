"""The harness's modules form no circle: import-linter's acyclic-siblings contract, in this
distribution's pyproject.toml, holds on the code as it stands and catches a circle added."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
LINT = (
    "import sys; from importlinter.cli import lint_imports_command; "
    "sys.exit(lint_imports_command())"
)


def lint_imports(config_file: Path, cwd: Path, pythonpath: Path | None = None) -> str:
    """``lint-imports`` on ``config_file``: the exit status and what it printed."""
    env = None
    if pythonpath is not None:
        import os

        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    done = subprocess.run(
        [sys.executable, "-c", LINT, str(config_file), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    return f"rc={done.returncode}\n{done.stdout}{done.stderr}"


def test_no_module_of_the_harness_imports_one_that_imports_it_back() -> None:
    out = lint_imports(BENCH / "pyproject.toml", BENCH)
    assert out.startswith("rc=0\n"), out
    assert "0 broken" in out, out


def test_a_circle_between_worker_and_paired_fails(tmp_path: Path) -> None:
    """A copy of the harness where paired imports worker again (the circle there was) fails,
    naming both modules."""
    copy = tmp_path / "src" / "indexplug_bench"
    shutil.copytree(BENCH / "src" / "indexplug_bench", copy)
    paired = copy / "paired.py"
    paired.write_text(
        paired.read_text().replace(
            "from indexplug_bench.timing import index_all, pct\n",
            "from indexplug_bench.timing import index_all, pct\nfrom indexplug_bench import worker\n",
        )
    )
    out = lint_imports(BENCH / "pyproject.toml", tmp_path, pythonpath=tmp_path / "src")
    assert not out.startswith("rc=0\n"), out
    assert "- .worker -> .paired" in out, out
