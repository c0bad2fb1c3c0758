"""What a person reads: ``backends`` and ``search`` fit an 80-column terminal, sources are shown
relative to the working folder, and ``index`` shows its progress on a terminal only."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from indexplug.cli import app as cli_app
from indexplug.cli.app import app, display_uri
from typer.testing import CliRunner

WIDTH = 80


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An 80-column terminal (``COLUMNS=80``, so rich's console is 80 wide), working in
    ``tmp_path`` with its own ``INDEXPLUG_HOME`` and no configuration in reach."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("INDEXPLUG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    for console in (cli_app.out, cli_app.err):  # made anew, 80 wide
        monkeypatch.setattr(console, "_console", None)
    yield tmp_path
    for console in (cli_app.out, cli_app.err):
        console._console = None  # the next test makes its own


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout


def test_the_console_is_80_wide_in_these_tests(narrow: Path) -> None:
    assert cli_app.out.get().width == WIDTH


def test_backends_fit_80_columns_with_every_value_whole(narrow: Path) -> None:
    code, text = run("backends")
    assert code == 0, text
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "…" not in text  # nothing cut to fit
    code, listing = run("backends", "--json")
    row = next(b for b in json.loads(listing)["backends"] if b["name"] == "sqlite-fts5")
    caps = [k for k, v in row["capabilities"].items() if v is True]
    assert len(caps) >= 3
    words = text.split()
    for cap in caps:  # each capability name whole on a line, not folded or cut
        assert cap in words or f"{cap}," in words, cap
    # the description reads as its words, in order, across the lines it wraps onto
    assert " ".join(row["description"].split()) in " ".join(
        line.strip() for line in text.splitlines() if line.strip()
    ).replace("description ", "")


def test_backends_in_a_real_80_column_process(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": str(WIDTH), "INDEXPLUG_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "indexplug.cli.app", "backends"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert any(line.startswith("sqlite-fts5") for line in lines)
    assert "multiprocess_writers" in done.stdout.split() or "multiprocess_writers," in (
        done.stdout.split()
    )


def _long_corpus(root: Path) -> Path:
    folder = root / "project" / "documentation"
    folder.mkdir(parents=True)
    (folder / "otters-and-their-rivers.md").write_text(
        "Otters swim in cold rivers and eat fish; they keep their fur dry with oils and "
        "spend most of the day in the water, resting on the banks at dusk.\n",
        "utf-8",
    )
    return folder


def test_search_fits_80_columns_and_shows_sources_relative(narrow: Path) -> None:
    folder = _long_corpus(narrow)
    code, _ = run("index", str(folder), "--index", "docs")
    assert code == 0
    code, text = run("search", "otters", "--index", "docs", "-k", "5")
    assert code == 0, text
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    relative = "project/documentation/otters-and-their-rivers.md"
    assert any(relative in line for line in lines), text  # whole, on one line
    assert "file://" not in text
    flat = " ".join(line.strip("│ ") for line in lines)
    assert "spend most of the day in the water" in " ".join(flat.split())
    # --json keeps the URI as stored
    code, raw = run("search", "otters", "--index", "docs", "-k", "5", "--json")
    uri = json.loads(raw)["hits"][0]["passage"]["source"]["uri"]
    assert uri.startswith("file://") and uri.endswith(relative)


def test_display_uri_is_relative_only_under_the_working_folder(tmp_path: Path) -> None:
    inside = (tmp_path / "docs" / "a b.md").as_uri()
    assert display_uri(inside, cwd=tmp_path) == "docs/a b.md"
    assert display_uri(inside, cwd=tmp_path / "docs") == "a b.md"
    elsewhere = (tmp_path.parent / "other.md").as_uri()
    assert display_uri(elsewhere, cwd=tmp_path) == elsewhere
    assert display_uri("https://example.org/x.md", cwd=tmp_path) == "https://example.org/x.md"
    assert display_uri("doc:42", cwd=tmp_path) == "doc:42"
    assert display_uri(tmp_path.as_uri(), cwd=tmp_path) == tmp_path.as_uri()


def _index_with_stderr_on_a_terminal(root: Path, *extra: str) -> tuple[int, str, str]:
    """``indexplug index`` of 40 files with its stderr on a pseudo-terminal: the exit code,
    what it wrote there and its stdout."""
    folder = root / "many"
    folder.mkdir()
    for i in range(40):
        (folder / f"note{i:02d}.md").write_text(f"Note {i} about otters and rivers.\n", "utf-8")
    main, side = pty.openpty()
    env = {**os.environ, "INDEXPLUG_HOME": str(root / "home"), "COLUMNS": str(WIDTH)}
    env.pop("INDEXPLUG_CONFIG", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "indexplug.cli.app", "index", str(folder), "-i", "n", *extra],
            env=env,
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=side,
            timeout=120,
        )
        os.close(side)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main)
    return done.returncode, b"".join(chunks).decode("utf-8", "replace"), done.stdout.decode()


def test_index_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    code, shown, stdout = _index_with_stderr_on_a_terminal(tmp_path)
    assert code == 0
    assert "indexing" in shown and "40/40" in shown, shown
    assert "indexed 40 file(s)" in stdout and "40/40" not in stdout


def test_index_shows_no_progress_with_json_even_on_a_terminal(tmp_path: Path) -> None:
    code, shown, stdout = _index_with_stderr_on_a_terminal(tmp_path, "--json")
    assert code == 0
    assert shown == ""
    assert json.loads(stdout)["files_indexed"] == 40


def test_index_shows_no_progress_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    folder = tmp_path / "few"
    folder.mkdir()
    for i in range(5):
        (folder / f"n{i}.md").write_text(f"note {i}\n", "utf-8")
    env = {**os.environ, "INDEXPLUG_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "indexplug.cli.app", "index", str(folder), "-i", "few"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert done.stderr == ""
    assert "indexed 5 file(s)" in done.stdout


def test_scan_and_get_fit_80_columns_with_sources_relative(narrow: Path) -> None:
    notes = narrow / "notes"
    notes.mkdir()
    (notes / "otters.md").write_text(
        "Otters hold hands while they sleep so that they do not drift apart. " * 3
    )
    (notes / "kettle.md").write_text("Descale the kettle with vinegar once a month.\n")
    code, _ = run("index", str(notes), "--index", "n")
    assert code == 0
    code, text = run("scan", "--index", "n")
    assert code == 0, text
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "notes/otters.md" in text and "notes/kettle.md" in text
    assert "file://" not in text  # shown relative to the working folder
    code, listing = run("scan", "--index", "n", "--json")
    pid = next(p["id"] for p in json.loads(listing)["passages"] if "kettle" in p["text"])
    code, text = run("get", pid, "--index", "n")
    assert code == 0 and "Descale the kettle" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= WIDTH


def _stderr_on_a_terminal(root: Path, *argv: str) -> tuple[int, str]:
    """``indexplug ARGV`` with its stderr on a pseudo-terminal: its exit code and what it
    wrote there."""
    main, side = pty.openpty()
    env = {**os.environ, "INDEXPLUG_HOME": str(root / "home"), "COLUMNS": str(WIDTH)}
    env.pop("INDEXPLUG_CONFIG", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "indexplug.cli.app", *argv],
            env=env,
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=side,
            timeout=120,
        )
        os.close(side)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main)
    return done.returncode, b"".join(chunks).decode("utf-8", "replace")


def test_copy_and_add_show_progress_on_a_terminal(tmp_path: Path) -> None:
    rows = [{"text": f"otter {i} by the river", "uri": f"mem://o/{i}"} for i in range(600)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, shown = _stderr_on_a_terminal(tmp_path, "add", "p.jsonl", "-i", "src")
    assert code == 0 and "adding" in shown and "600/600" in shown, shown
    code, shown = _stderr_on_a_terminal(tmp_path, "copy", "sqlite-fts5:src", "sqlite-fts5:dst")
    assert code == 0, shown
    assert "copying" in shown and "600/600" in shown, shown
    assert "600 id(s), 0 missing" in shown
