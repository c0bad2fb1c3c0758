"""The command line's own faults: input read without a bound, a closed pipe or a closed
standard output, a home that is a file, and a copy of an index onto itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from indexplug.cli import inputs
from indexplug.cli.app import app
from indexplug.outcomes import EXIT_CODES
from typer.testing import CliRunner

runner = CliRunner()
CLI = [sys.executable, "-c", "from indexplug.cli.app import main; main()"]


@pytest.fixture
def small_bound(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 4096)
    return 4096


def test_add_from_an_endless_file_is_refused(small_bound: int) -> None:
    r = runner.invoke(app, ["add", "/dev/zero", "--index", "z"])
    assert r.exit_code == EXIT_CODES["BAD_REQUEST"]
    assert f"more than {small_bound:,} bytes" in r.output and "Traceback" not in r.output


def test_invoke_args_from_an_endless_file_is_refused(small_bound: int) -> None:
    r = runner.invoke(app, ["invoke", "status", "--args", "@/dev/zero"])
    assert r.exit_code == EXIT_CODES["BAD_REQUEST"]
    assert f"more than {small_bound:,} bytes" in r.output


def test_input_under_the_bound_is_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_bytes(b"x" * 5000)
    assert inputs.read_input(f, limit=5000) == b"x" * 5000
    with pytest.raises(inputs.InvalidRequest, match="more than 4,999 bytes"):
        inputs.read_input(f, limit=4999)


def _add(tmp_path: Path, index: str, n: int) -> None:
    f = tmp_path / f"{index}.jsonl"
    f.write_text(
        "".join(
            json.dumps({"text": f"otter fact {i}", "uri": f"mem://{i}"}) + "\n" for i in range(n)
        )
    )
    r = runner.invoke(app, ["add", str(f), "--index", index])
    assert r.exit_code == 0, r.output


def test_export_to_a_closed_pipe_exits_141_quietly(tmp_path: Path) -> None:
    _add(tmp_path, "big", 3000)
    proc = subprocess.Popen(
        [*CLI, "export", "-", "--index", "big"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 141, err
    assert err == ""


def test_closed_standard_output_is_an_error(tmp_path: Path) -> None:
    _add(tmp_path, "o", 2)
    for argv in (["search", "otter", "--index", "o"], ["invoke", "status", "--args", "{}"]):
        proc = subprocess.run(
            [*CLI, *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(1),  # `cmd >&-`
            timeout=120,
        )
        assert proc.returncode == EXIT_CODES["BAD_REQUEST"], proc.stderr
        assert b"standard output is closed" in proc.stderr


def test_a_home_that_is_a_file_is_unavailable_not_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "not-a-folder"
    home.write_text("")
    monkeypatch.setenv("INDEXPLUG_HOME", str(home))
    r = runner.invoke(app, ["search", "x", "--index", "t1", "--json"])
    assert r.exit_code == EXIT_CODES["INDEX_UNAVAILABLE"], r.output
    answer = json.loads(r.output)
    assert answer["code"] == "INDEX_UNAVAILABLE" and "is a file, not a folder" in r.output


def test_copy_onto_itself_is_refused(tmp_path: Path) -> None:
    _add(tmp_path, "t1", 2)
    before = runner.invoke(app, ["status", "--index", "t1", "--json"]).output
    r = runner.invoke(app, ["copy", "sqlite-fts5:t1", "sqlite-fts5:t1"])
    assert r.exit_code == EXIT_CODES["BAD_REQUEST"]
    assert "the source and the target are the same index" in r.output
    after = runner.invoke(app, ["status", "--index", "t1", "--json"]).output
    assert json.loads(after)["passages"] == json.loads(before)["passages"] >= 2
