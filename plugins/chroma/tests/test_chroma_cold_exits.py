"""Cold ``indexplug invoke search`` processes on a MiniLM chroma index exit cleanly.

A process used to abort at exit (SIGABRT, "terminate called without an active exception")
after printing a correct answer: a daemon thread that loaded the model in the background was
still inside torch when the interpreter shut down.  Every run here must exit with the status of
the answer it printed; a cold search must also not need torch (the ONNX query encoder).
"""

from __future__ import annotations

from pathlib import Path

from indexplug.testing import cold

RUNS = 10


def test_cold_searches_exit_with_their_answers_code(tmp_path: Path) -> None:
    index = cold.build(tmp_path, "chroma", "sentence-transformers:all-MiniLM-L6-v2")
    assert cold.bad_runs(index, RUNS) == []
