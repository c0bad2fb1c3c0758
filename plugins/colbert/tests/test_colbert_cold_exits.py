"""Cold ``indexplug invoke search`` processes on a MiniLM colbert index: no torch, clean exits.

A search process embeds its query as token vectors with the ONNX export that building the
index wrote (no torch or sentence-transformers import), and every run exits with the status of
the answer it printed (an abort at exit would read as a crash to an orchestrator).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from indexplug.testing import cold

pytestmark = pytest.mark.slow
RUNS = 10


def _imported(importtime_log: str) -> set[str]:
    """Top-level module names in a ``PYTHONPROFILEIMPORTTIME`` log."""
    names = set()
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_cold_colbert_searches_need_no_torch_and_exit_cleanly(tmp_path: Path) -> None:
    index = cold.build(tmp_path, "colbert", "sentence-transformers:all-MiniLM-L6-v2", timeout_s=900)
    first = subprocess.run(
        index.argv,
        env=dict(index.env, PYTHONPROFILEIMPORTTIME="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert json.loads(first.stdout)["code"] == "SEARCHED", first.stderr[-2000:]
    imported = _imported(first.stderr)
    assert "indexplug_colbert" in imported and "onnxruntime" in imported  # the log is read
    assert not imported & {"torch", "sentence_transformers", "transformers"}
    assert cold.bad_runs(index, RUNS) == []
