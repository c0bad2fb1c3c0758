"""The ``cli-startup`` harness runs end to end and keeps its page section (no figures here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from indexplug_bench import startup


def test_quantile_is_a_measured_value() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 6.0, 7.0, 8.0, 9.0]
    assert startup.quantile(values, 0.9) == 9.0
    assert startup.quantile(values, 0.5) == 5.0
    assert startup.quantile([3.0], 0.9) == 3.0


def test_splice_replaces_only_its_own_section(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nother tables\n", "utf-8")
    startup.splice(page, f"{startup.BEGIN}\nfirst\n{startup.END}")
    startup.splice(page, f"{startup.BEGIN}\nsecond\n{startup.END}")
    text = page.read_text("utf-8")
    assert text.startswith("# Benchmarks\n\nother tables\n")
    assert "second" in text and "first" not in text
    assert startup.kept_section(page) == f"{startup.BEGIN}\nsecond\n{startup.END}"


def test_cli_startup_times_every_command_and_writes_the_section(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n", "utf-8")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "indexplug_bench",
            "cli-startup",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--markdown",
            str(page),
        ],
        check=True,
    )
    section = startup.kept_section(page)
    assert section is not None
    for label in startup.commands("indexplug"):
        assert f"| `{label}` |" in section
    # every command succeeded against the index the harness made (exit code 0)
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(startup.commands("indexplug"))
    assert all(line.endswith("| 0 |") for line in rows), rows
    for line in rows:  # wall median, p90, min, CPU median, p90: measured, positive
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 7 and all(float(c) > 0 for c in cells[1:6]), line


def test_report_keeps_the_cli_startup_section(tmp_path: Path) -> None:
    from indexplug_bench.report import merge, render

    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nstale tables\n", "utf-8")
    section = f"{startup.BEGIN}\n## CLI start-up\n\n| command |\n{startup.END}"
    startup.splice(page, section)
    machine = {"cores": 2, "memory_gib": 1, "cpu": "x", "python": "3.11", "platform": "x"}
    results = {"machine": machine, "command": "run", "quality": [], "scale": [], "skipped": {}}
    render(merge([results]), page, tmp_path / "img")
    text = page.read_text("utf-8")
    assert "stale tables" not in text  # the rest was rendered anew
    assert startup.kept_section(page) == section
