"""``python -m indexplug_bench.plugin_overhead``: what installed plugins add to a command's start.

Each command runs as a whole process against a small sqlite-fts5 index, in turns with the same
command restricted to sqlite-fts5 (``INDEXPLUG_PLUGINS=sqlite-fts5,hashing``: only those entry
points load), so a busy minute of the machine lands on both alike.  The difference of the
medians is what the other installed plugins cost a process that does not use them: zero when
discovery imports no backend module.  Wall time and the process's CPU time are both reported
(CPU is less inflated by other work on the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from indexplug_bench import machine
from indexplug_bench.startup import _environment, find_indexplug, prepare

ONLY_SQLITE = "sqlite-fts5,hashing"


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args()
    ip = find_indexplug()
    cmds = {
        "invoke status": [ip, "invoke", "status", "--args", '{"index":"docs"}'],
        "search": [ip, "search", "otters", "--index", "docs", "-k", "5"],
    }
    with tempfile.TemporaryDirectory(prefix="indexplug-overhead-") as tmp:
        work = Path(tmp)
        env = _environment(work)
        env.pop("INDEXPLUG_PLUGINS", None)
        prepare(work, ip, env)
        envs = {"every plugin": env, "sqlite-fts5 only": {**env, "INDEXPLUG_PLUGINS": ONLY_SQLITE}}
        runs: dict[str, list[tuple[float, float]]] = {}
        load_before = os.getloadavg()
        for _ in range(a.repeats):
            for name, argv in cmds.items():
                for which, e in envs.items():
                    runs.setdefault(f"{name} | {which}", []).append(timed(argv, e, work))
        rows = {
            k: {
                "wall_median_ms": round(1000 * statistics.median(w for w, _ in v), 1),
                "cpu_median_ms": round(1000 * statistics.median(c for _, c in v), 1),
            }
            for k, v in runs.items()
        }
    print(
        json.dumps(
            {
                "machine": machine.describe(),
                "repeats": a.repeats,
                "load_before": load_before,
                "load_after": os.getloadavg(),
                "rows": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
