"""Cold processes for plugin tests: a small index built by the ``indexplug`` command in a
temporary home, and whole-process searches over it, each checked for an exit code that matches
the answer it printed (an abort at exit reads as a crash to an orchestrator).

Dense plugins (chroma, colbert) use it to prove that a first search in a fresh process answers
and exits cleanly; the backend and embedder are the caller's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from indexplug.outcomes import EXIT_CODES

DOCS = {
    "otters.txt": "River otters live in rivers and eat fish.\n",
    "bees.txt": "Honey bees dance to say where the flowers are.\n",
}
QUERY = "river otters"
EXPECTED_PREFIX = "River otters"


def indexplug_command() -> str:
    """The ``indexplug`` script next to this interpreter (the env under test), else on PATH."""
    here = Path(sys.executable).parent / "indexplug"
    return str(here) if here.exists() else (shutil.which("indexplug") or "indexplug")


@dataclass(frozen=True)
class ColdIndex:
    """A built index: the ``invoke search`` command line over it and its environment."""

    argv: list[str]
    env: dict[str, str]


def build(tmp_path: Path, backend: str, embedder: str, *, timeout_s: float = 600) -> ColdIndex:
    """Index two small files into ``f1`` on ``backend`` with ``embedder`` (``indexplug index``,
    a process of its own, in a home and cache under ``tmp_path``, hubs offline, the default
    query engine) and return the cold search command over it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    config = tmp_path / "indexplug.toml"
    config.write_text(f'[indexes.f1]\nbackend = "{backend}"\nembedder = "{embedder}"\n')
    env = dict(
        os.environ,
        INDEXPLUG_HOME=str(tmp_path / "home"),
        INDEXPLUG_CACHE=str(tmp_path / "cache"),
        HF_HUB_OFFLINE="1",
    )
    for name in ("INDEXPLUG_ST_QUERY_ENGINE", "PYTHONPROFILEIMPORTTIME"):
        env.pop(name, None)
    cli = indexplug_command()
    built = subprocess.run(
        [cli, "index", str(docs), "--index", "f1", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if built.returncode != 0:
        raise AssertionError(f"indexing failed ({built.returncode}): {built.stderr[-2000:]}")
    args = json.dumps({"index": "f1", "query": QUERY, "top_k": 1, "deadline_s": 300})
    return ColdIndex([cli, "invoke", "search", "--args", args, "--config", str(config)], env)


def bad_runs(index: ColdIndex, runs: int) -> list[tuple[int, str, str]]:
    """Run the cold search ``runs`` times; the runs whose exit code does not match the printed
    answer, or whose answer is not SEARCHED with the otters passage first (exit code, answer
    code, the end of stderr).  An empty list is a clean pass."""
    bad = []
    for _ in range(runs):
        proc = subprocess.run(
            index.argv, env=index.env, capture_output=True, text=True, timeout=600
        )
        try:
            answer = json.loads(proc.stdout)
            code = str(answer["code"])
            first = answer["data"]["hits"][0]["passage"]["text"] if code == "SEARCHED" else ""
        except (ValueError, KeyError, IndexError, TypeError):
            bad.append((proc.returncode, "no answer", proc.stderr.strip()[-300:]))
            continue
        if proc.returncode != EXIT_CODES[code] or not first.startswith(EXPECTED_PREFIX):
            bad.append((proc.returncode, code, proc.stderr.strip()[-300:]))
    return bad
