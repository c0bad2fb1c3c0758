"""Cold searches, each a whole process, measured: how long they take and whether every process
exits with the code of the answer it printed.

The shared body of the dense plugins' ``bench/cold_search.py`` scripts (chroma, colbert): each
names its backend and the import that stands for its store's own libraries, and :func:`main`
does the rest over one small index embedded with all-MiniLM-L6-v2, built in a temporary
``INDEXPLUG_HOME`` unless ``--home`` names one already built:

* ``timing``: the store's import, ``indexplug search`` and ``indexplug invoke search`` run in
  turns, ``--runs`` times each after one untimed round; wall-clock and CPU-time medians.
  ``--with-torch`` adds the same search with its query embedded in torch.
* ``exits``: ``--runs`` consecutive cold ``indexplug invoke search`` processes, with ``--load``
  busy processes beside them; counts aborts (exit 134, SIGABRT) and every process whose exit
  status does not match the code of the answer it printed.

Figures come from running it, never from the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from indexplug.outcomes import EXIT_CODES
from indexplug.testing.cold import indexplug_command

QUERY = "river otters"
TEXTS = {
    "otters.txt": "River otters live in rivers and lakes. They eat fish and crayfish.",
    "bees.txt": "Honey bees collect nectar and pollen; a hive can hold fifty thousand bees.",
    "rust.txt": "Iron rusts when it meets water and oxygen, forming iron oxide.",
    "tides.txt": "Tides rise and fall twice a day, pulled by the moon and the sun.",
    "owls.txt": "Owls hunt at night; their soft feathers make their flight nearly silent.",
}
MODEL = "sentence-transformers:all-MiniLM-L6-v2"


def processor() -> str:
    """The processor's model name and the core count, as the benchmarks page names them."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def build(home: Path, env: dict[str, str], backend: str) -> Path:
    """Write ``indexplug.toml`` and index :data:`TEXTS` into ``f1`` on ``backend`` (once)."""
    config = home / "indexplug.toml"
    docs = home / "docs"
    if not config.is_file():
        docs.mkdir(parents=True, exist_ok=True)
        for name, text in TEXTS.items():
            (docs / name).write_text(text + "\n", encoding="utf-8")
        config.write_text(
            f'[indexes.f1]\nbackend = "{backend}"\nembedder = "{MODEL}"\n', encoding="utf-8"
        )
        subprocess.run(
            [indexplug_command(), "index", str(docs), "--index", "f1", "--config", str(config)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return config


def commands(config: Path, store_import: str) -> dict[str, list[str]]:
    """The timed commands by label: the store's import first (the floor), then the searches."""
    cli = indexplug_command()
    args = json.dumps({"index": "f1", "query": QUERY, "top_k": 3})
    return {
        f'python -c "import {store_import}"': [sys.executable, "-c", f"import {store_import}"],
        f'indexplug search "{QUERY}" --index f1 -k 3': [
            cli, "search", QUERY, "--index", "f1", "-k", "3", "--config", str(config),
        ],
        f"indexplug invoke search --args '{args}'": [
            cli, "invoke", "search", "--args", args, "--config", str(config),
        ],
    }  # fmt: skip


def _invoke_label(cmds: dict[str, list[str]]) -> str:
    return next(k for k in cmds if "invoke" in k)


def timing(cmds: dict[str, list[str]], env: dict[str, str], runs: int, with_torch: bool) -> None:
    """Print a Markdown table of the ``cmds`` run in turns ``runs`` times (after one untimed
    round): wall and CPU medians, and each over the first command's."""
    envs = {k: env for k in cmds}
    if with_torch:  # the same search with its query embedded in torch, for comparison
        label = _invoke_label(cmds)
        torch_label = f"INDEXPLUG_ST_QUERY_ENGINE=torch {label}"
        cmds = {**cmds, torch_label: cmds[label]}
        envs[torch_label] = dict(env, INDEXPLUG_ST_QUERY_ENGINE="torch")
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    codes: dict[str, set[int]] = {k: set() for k in cmds}
    load_before = os.getloadavg()
    for i in range(runs + 1):
        for label, argv in cmds.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            proc = subprocess.run(argv, env=envs[label], capture_output=True)
            wall = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if i:  # the first round is untimed (disk caches)
                walls[label].append(wall * 1000)
                cpus[label].append(cpu * 1000)
                codes[label].add(proc.returncode)
    first = next(iter(cmds))
    base = statistics.median(walls[first])
    cpu_base = statistics.median(cpus[first])
    print(f"processor: {processor()}, Python {platform.python_version()}")
    print(f"load average before {load_before}, after {os.getloadavg()}; {runs} runs in turns")
    print(
        "| command | wall median (ms) | wall p90 (ms) | wall over the store's import (ms) "
        "| CPU median (ms) | CPU over the store's import (ms) | exit |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, ws in walls.items():
        ws.sort()
        p90 = ws[min(len(ws) - 1, round(0.9 * (len(ws) - 1)))]
        med = statistics.median(ws)
        cpu_med = statistics.median(cpus[label])
        print(
            f"| `{label}` | {med:.0f} | {p90:.0f} | {med - base:+.0f} | {cpu_med:.0f} | "
            f"{cpu_med - cpu_base:+.0f} | {','.join(map(str, sorted(codes[label])))} |"
        )


def exits(argv: list[str], env: dict[str, str], runs: int, load: int) -> int:
    """Run ``argv`` (a cold ``invoke search``) ``runs`` times beside ``load`` busy processes;
    print what happened and return the number of bad exits (aborts and mismatches)."""
    burners = [  # busy loops beside the runs, as other work on the machine would be
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)
    ]
    aborts = mismatches = 0
    seen: dict[int, int] = {}
    try:
        for _ in range(runs):
            proc = subprocess.run(argv, env=env, capture_output=True, text=True)
            seen[proc.returncode] = seen.get(proc.returncode, 0) + 1
            try:
                code = json.loads(proc.stdout)["code"]
                expected = EXIT_CODES.get(code)
            except (ValueError, KeyError, TypeError):
                code, expected = None, None
            if proc.returncode in (134, -6):
                aborts += 1
                print(f"abort: {proc.stderr.strip().splitlines()[-1:]}", flush=True)
            elif proc.returncode != expected:
                mismatches += 1
                print(f"mismatch: exit {proc.returncode}, answer {code}", flush=True)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    print(
        f"processor: {processor()}; {load} busy processes beside; {runs} cold runs; "
        f"load average at the end {os.getloadavg()}"
    )
    print(f"exit statuses: {dict(sorted(seen.items()))}; aborts {aborts}; mismatches {mismatches}")
    return aborts + mismatches


def main(backend: str, store_import: str, description: str, argv: list[str] | None = None) -> int:
    """The command line of a plugin's ``cold_search.py``: ``timing`` or ``exits`` over an
    index on ``backend``; ``store_import`` is the module whose import is the timing's floor."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("what", choices=("timing", "exits"))
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--load", type=int, default=0, help="busy processes beside (exits)")
    ap.add_argument("--home", type=Path, help="an INDEXPLUG_HOME to build in / reuse")
    ap.add_argument("--with-torch", action="store_true", help="timing: add a torch-query row")
    a = ap.parse_args(argv)
    home = a.home or Path(tempfile.mkdtemp(prefix="cold-search-"))
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, INDEXPLUG_HOME=str(home), HF_HUB_OFFLINE="1")
    try:
        config = build(home, env, backend)
        cmds = commands(config, store_import)
        if a.what == "timing":
            timing(cmds, env, a.runs, a.with_torch)
            return 0
        return 1 if exits(cmds[_invoke_label(cmds)], env, a.runs, a.load) else 0
    finally:
        if a.home is None:
            shutil.rmtree(home, ignore_errors=True)
