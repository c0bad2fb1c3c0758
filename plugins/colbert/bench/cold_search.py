"""Cold late-interaction searches, each a whole process: how long, and whether each exits cleanly.

Two measurements over one small colbert index (native engine) whose token vectors come from
all-MiniLM-L6-v2 (built here, in a temporary ``INDEXPLUG_HOME``, unless ``--home`` names one
already built; building it writes the ONNX export the query encoder runs):

* ``timing``: ``python -c "import indexplug_colbert.engines.native"`` (the store's libraries:
  numpy and the engine's own modules), ``indexplug search`` and ``indexplug invoke search`` run
  in turns, ``--runs`` times each after one untimed round; wall-clock and CPU-time medians.
  ``--with-torch`` adds the same search with its query embedded in torch.
* ``exits``: ``--runs`` consecutive cold ``indexplug invoke search`` processes, with ``--load``
  busy processes running beside them; counts aborts (exit 134, SIGABRT) and every process
  whose exit status does not match the code of the answer it printed.

Usage::

    HF_HUB_OFFLINE=1 python plugins/colbert/bench/cold_search.py timing --runs 9
    HF_HUB_OFFLINE=1 python plugins/colbert/bench/cold_search.py exits --runs 200 --load 2
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

QUERY = "river otters"
TEXTS = {
    "otters.txt": "River otters live in rivers and lakes. They eat fish and crayfish.",
    "bees.txt": "Honey bees collect nectar and pollen; a hive can hold fifty thousand bees.",
    "rust.txt": "Iron rusts when it meets water and oxygen, forming iron oxide.",
    "tides.txt": "Tides rise and fall twice a day, pulled by the moon and the sun.",
    "owls.txt": "Owls hunt at night; their soft feathers make their flight nearly silent.",
}
MODEL = "sentence-transformers:all-MiniLM-L6-v2"


def bin_of(name: str) -> str:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def build(home: Path, env: dict[str, str], backend: str) -> Path:
    """Write ``indexplug.toml`` and index :data:`TEXTS` into ``f1`` (once)."""
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
            [bin_of("indexplug"), "index", str(docs), "--index", "f1", "--config", str(config)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return config


def commands(config: Path) -> dict[str, list[str]]:
    args = json.dumps({"index": "f1", "query": QUERY, "top_k": 3})
    return {
        'python -c "import indexplug_colbert.engines.native"': [
            sys.executable, "-c", "import indexplug_colbert.engines.native",
        ],
        f'indexplug search "{QUERY}" --index f1 -k 3': [
            bin_of("indexplug"), "search", QUERY, "--index", "f1", "-k", "3",
            "--config", str(config),
        ],
        f"indexplug invoke search --args '{args}'": [
            bin_of("indexplug"), "invoke", "search", "--args", args, "--config", str(config),
        ],
    }  # fmt: skip


def timing(config: Path, env: dict[str, str], runs: int, with_torch: bool) -> None:
    cmds = commands(config)
    envs = {k: env for k in cmds}
    if with_torch:  # the same search with its query embedded in torch, for comparison
        label = next(k for k in cmds if "invoke" in k)
        torch_label = f"INDEXPLUG_ST_QUERY_ENGINE=torch {label}"
        cmds[torch_label] = cmds[label]
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


def exits(config: Path, env: dict[str, str], runs: int, load: int) -> int:
    """``runs`` cold ``invoke search`` processes; returns the number of bad exits."""
    from indexplug.outcomes import EXIT_CODES

    argv = commands(config)[next(k for k in commands(config) if "invoke" in k)]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("timing", "exits"))
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--load", type=int, default=0, help="busy processes beside (exits)")
    ap.add_argument("--home", type=Path, help="an INDEXPLUG_HOME to build in / reuse")
    ap.add_argument("--with-torch", action="store_true", help="timing: add a torch-query row")
    a = ap.parse_args()
    home = a.home or Path(tempfile.mkdtemp(prefix="cold-search-"))
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, INDEXPLUG_HOME=str(home), HF_HUB_OFFLINE="1")
    config = build(home, env, "colbert")
    try:
        if a.what == "timing":
            timing(config, env, a.runs, a.with_torch)
            return 0
        return 1 if exits(config, env, a.runs, a.load) else 0
    finally:
        if a.home is None:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
