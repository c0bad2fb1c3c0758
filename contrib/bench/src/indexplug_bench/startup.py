"""``python -m indexplug_bench cli-startup``: each ``indexplug`` command timed as a whole process.

What a person at a prompt, or an orchestrator that shells out once per op, waits for is the
whole process: the interpreter starting, the imports, the op and the exit.  Each command runs
``--repeats`` times in turns with ``python -c pass`` (the interpreter's own floor, timed in the
same run), each a fresh process, so a slow minute of the machine lands on every command alike.
The commands run against a small sqlite-fts5 index made in a temporary ``INDEXPLUG_HOME``, with
no configuration file in reach (``INDEXPLUG_CONFIG`` unset, the working and user config folders
temporary).
"""

from __future__ import annotations

import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from indexplug_bench import machine

BEGIN = "<!-- cli-startup:begin -->"
END = "<!-- cli-startup:end -->"
"""The markers around this section of ``docs/benchmarks.md`` (``report`` keeps it)."""

QUERY = "otters"


def commands(indexplug: str) -> dict[str, list[str]]:
    """The timed commands by label: the interpreter's floor, then the CLI's."""
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "indexplug --help": [indexplug, "--help"],
        'indexplug invoke status --args \'{"index":"docs"}\'': [
            indexplug,
            "invoke",
            "status",
            "--args",
            '{"index":"docs"}',
        ],
        f"indexplug search {QUERY} --index docs -k 5": [
            indexplug,
            "search",
            QUERY,
            "--index",
            "docs",
            "-k",
            "5",
        ],
        "indexplug status --index docs": [indexplug, "status", "--index", "docs"],
        "indexplug backends": [indexplug, "backends"],
    }


def find_indexplug() -> str:
    """The ``indexplug`` console script of this interpreter's environment (else on PATH)."""
    beside = Path(sys.executable).parent / "indexplug"
    if beside.is_file():
        return str(beside)
    found = shutil.which("indexplug")
    if found is None:
        raise SystemExit("no indexplug command next to this Python or on PATH")
    return found


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank, so a value that was measured)."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


def _environment(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "INDEXPLUG_CONFIG"}
    env.update(
        INDEXPLUG_HOME=str(work / "home"),
        XDG_CONFIG_HOME=str(work / "config"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        COLUMNS="80",
    )
    return env


def prepare(work: Path, indexplug: str, env: dict[str, str], files: int = 20) -> None:
    """A folder of ``files`` small Markdown files indexed as ``docs`` (sqlite-fts5)."""
    folder = work / "corpus"
    folder.mkdir(parents=True)
    for i in range(files):
        (folder / f"note{i:03d}.md").write_text(
            f"# Note {i}\n\nOtters number {i} swim in cold rivers and eat fish.\n"
            f"Beavers build dams of wood number {i * 7}.\n",
            "utf-8",
        )
    subprocess.run(
        [indexplug, "index", str(folder), "--index", "docs", "--json"],
        cwd=work,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def measure(repeats: int, *, warmup: int = 1) -> dict[str, Any]:
    """Time every command ``repeats`` times in turns (after ``warmup`` untimed rounds, which
    fill the file cache as any second run would find it); the rows and the machine's load."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    indexplug = find_indexplug()
    with tempfile.TemporaryDirectory(prefix="indexplug-startup-") as tmp:
        work = Path(tmp)
        (work / "config").mkdir()
        env = _environment(work)
        prepare(work, indexplug, env)
        cmds = commands(indexplug)
        times: dict[str, list[float]] = {label: [] for label in cmds}
        cpu: dict[str, list[float]] = {label: [] for label in cmds}
        codes: dict[str, set[int]] = {label: set() for label in cmds}
        load_before = os.getloadavg()
        clock_start = machine.cpu_clock()
        for round_ in range(warmup + repeats):
            order = list(cmds.items())
            if round_ % 2:
                order.reverse()
            for label, argv in order:
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                done = subprocess.run(
                    argv,
                    cwd=work,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
                elapsed = time.perf_counter() - t0
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                codes[label].add(done.returncode)
                if round_ >= warmup:
                    times[label].append(elapsed * 1000.0)
                    used = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                    cpu[label].append(used * 1000.0)
        steal = machine.steal_pct(clock_start, machine.cpu_clock())
        load_after = os.getloadavg()
    rows = [
        {
            "command": label,
            "median_ms": round(statistics.median(ts), 1),
            "p90_ms": round(quantile(ts, 0.9), 1),
            "min_ms": round(min(ts), 1),
            "cpu_median_ms": round(statistics.median(cpu[label]), 1),
            "cpu_p90_ms": round(quantile(cpu[label], 0.9), 1),
            "runs": len(ts),
            "exit_codes": sorted(codes[label]),
        }
        for label, ts in times.items()
    ]
    return {
        "rows": rows,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "steal_pct": steal,
    }


def markdown(result: dict[str, Any], command: str, machine_info: dict[str, Any]) -> str:
    """The section of ``docs/benchmarks.md``, between :data:`BEGIN` and :data:`END`."""
    lines = [
        BEGIN,
        "## CLI start-up, each command a whole process",
        "",
        f"`{command}` on {machine_info['cpu']} ({machine_info['cores']} cores, Python "
        f"{machine_info['python']}), {result['started']}.  Load average (1, 5, 15 min) "
        f"{tuple(result['load_before'])} before and {tuple(result['load_after'])} after; "
        f"CPU stolen by the host: {result['steal_pct']}%.  Each command ran "
        f"{result['rows'][0]['runs']} times in turns with `python -c pass` (after one untimed "
        "round), each a fresh process, against a sqlite-fts5 index of 20 small files, output "
        "discarded.  *Wall* is the time from start to exit; *CPU* is the process's user and "
        "system time, which other work on the machine inflates less than wall time (a process "
        "that waits for a core counts the wait in wall time only).",
        "",
        "| command | wall median (ms) | wall p90 (ms) | wall min (ms) | CPU median (ms) "
        "| CPU p90 (ms) | exit code |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        codes = ", ".join(str(c) for c in r["exit_codes"])
        lines.append(
            f"| `{r['command']}` | {r['median_ms']} | {r['p90_ms']} | {r['min_ms']} "
            f"| {r['cpu_median_ms']} | {r['cpu_p90_ms']} | {codes} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def splice(page: Path, section: str) -> None:
    """Put ``section`` on ``page`` in place of its earlier one (else at the end)."""
    text = page.read_text("utf-8") if page.is_file() else ""
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    page.write_text(text, "utf-8")


def kept_section(page: Path) -> str | None:
    """The section already on ``page`` (for ``report``, which rewrites the rest)."""
    if not page.is_file():
        return None
    text = page.read_text("utf-8")
    if BEGIN not in text or END not in text:
        return None
    return BEGIN + text.partition(BEGIN)[2].partition(END)[0] + END
