"""Ingest reads only regular files whose real path is inside the folder (issue 26).

Links that lead out (to another folder, ``/etc/passwd``, ``/dev/zero``), FIFOs, sockets,
symlink loops and broken links are skipped, counted under their own names, never fatal; sizes
are capped while reading; the deadline holds while reading; a file that stops being eligible has
its passages removed.  Every call that could hang or eat memory before the fix runs bounded: in
a daemon thread joined with a timeout, or in a child process with a timeout and a memory limit.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from indexplug import Searched, invoke, open_backend
from indexplug.ingest import IngestReport, index_folder

T = TypeVar("T")
BOUND_S = 30.0
SECRET = "Zanzibar launch codes are mauve"


def within(seconds: float, fn: Callable[[], T], unblock: Callable[[], None] | None = None) -> T:
    """``fn()``, failing the test (not hanging it) when it takes longer than ``seconds``."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test below
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        if unblock is not None:
            unblock()
        pytest.fail(f"still running after {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def release_fifo(fifo: Path) -> Callable[[], None]:
    """Open ``fifo`` for writing and close it, so a reader stuck on it gets EOF."""

    def go() -> None:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass

    return go


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    """``allowed/`` with one real text file and every kind of thing ingest must not read."""
    allowed = tmp_path / "allowed"
    outside = tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (allowed / "a.md").write_text("Aardvarks eat ants at night.\n")
    (allowed / "leak.md").symlink_to("../outside/secret.txt")
    (allowed / "passwd.md").symlink_to("/etc/passwd")
    (allowed / "zero.md").symlink_to("/dev/zero")
    (allowed / "outdir").symlink_to(outside, target_is_directory=True)
    os.mkfifo(allowed / "fifo.md")
    (allowed / "loop.md").symlink_to("loop.md")
    (allowed / "ping.md").symlink_to("pong.md")
    (allowed / "pong.md").symlink_to("ping.md")
    (allowed / "broken.md").symlink_to("nothing-here.md")
    (allowed / "same.md").symlink_to("a.md")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(allowed / "sock.md"))
    try:
        yield allowed
    finally:
        sock.close()
        release_fifo(allowed / "fifo.md")()


def check_skips(r: IngestReport | dict[str, Any]) -> None:
    d = r.model_dump() if isinstance(r, IngestReport) else r
    assert d["failures"] == []
    assert d["files_indexed"] == 1 and d["skipped_duplicates"] == 1
    assert d["skipped_outside"] == 3  # leak.md, passwd.md, zero.md
    assert d["skipped_special"] == 2  # fifo.md, sock.md
    assert d["skipped_loops"] == 3  # loop.md, ping.md, pong.md
    assert d["skipped_broken"] == 1


def test_only_regular_files_inside_the_folder_are_read(tree: Path) -> None:
    g = open_backend("sqlite-fts5")
    report = within(BOUND_S, lambda: index_folder(g, tree, "p1"), release_fifo(tree / "fifo.md"))
    check_skips(report)
    assert isinstance(g.search("p1", "aardvarks ants"), Searched)
    assert g.search("p1", "zanzibar launch codes mauve").code == "NO_MATCH"
    assert g.search("p1", "root bin bash nologin daemon").code == "NO_MATCH"
    # deleting the links and indexing again leaves nothing of what they pointed at
    for name in ("leak.md", "passwd.md", "zero.md"):
        (tree / name).unlink()
    again = within(BOUND_S, lambda: index_folder(g, tree, "p1"), release_fifo(tree / "fifo.md"))
    assert again.ok and again.files_unchanged == 1
    assert g.search("p1", "zanzibar launch codes mauve").code == "NO_MATCH"


def test_a_file_that_becomes_a_link_out_is_removed_as_gone(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    (allowed / "a.md").write_text("Aardvarks eat ants at night.\n")
    (allowed / "b.md").write_text("Bees build hexagonal honeycombs.\n")
    g = open_backend("sqlite-fts5")
    assert index_folder(g, allowed, "p1").files_indexed == 2
    (allowed / "b.md").unlink()
    (allowed / "b.md").symlink_to(tmp_path / "secret.txt")
    report = index_folder(g, allowed, "p1")
    assert report.ok and report.files_removed == 1 and report.skipped_outside == 1
    assert g.search("p1", "bees honeycombs").code == "NO_MATCH"
    assert g.search("p1", "zanzibar launch codes mauve").code == "NO_MATCH"
    # a file that turns binary is no longer eligible either
    (allowed / "a.md").write_bytes(b"\x00\x01binary now")
    report = index_folder(g, allowed, "p1")
    assert report.skipped_binary == 1 and report.files_removed == 1
    assert g.search("p1", "aardvarks").code == "INDEX_EMPTY"  # its last file is gone


def test_sizes_are_capped_while_reading_not_only_from_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from indexplug.confine import Refused, Why, read_confined, real_path

    folder = tmp_path / "folder"
    folder.mkdir()
    big = folder / "big.txt"
    big.write_bytes(b"x" * 5000)
    roots = [real_path(folder)]
    assert read_confined(big, roots, max_bytes=5000)[1] == b"x" * 5000
    true_stat = os.stat

    def small_stat(path: Any, *args: Any, **kw: Any) -> os.stat_result:
        st = true_stat(path, *args, **kw)
        fields = list(st[:10])
        fields[6] = 10  # st_size: the file claims to be tiny (it grew after stat, say)
        return os.stat_result(fields)

    monkeypatch.setattr("indexplug.confine.os.stat", small_stat)
    with pytest.raises(Refused) as err:
        read_confined(big, roots, max_bytes=100)
    assert err.value.why is Why.TOO_LARGE
    monkeypatch.setattr("indexplug.ingest.MAX_FILE_BYTES", 100)
    report = index_folder(open_backend("sqlite-fts5"), folder, "capped")
    assert report.ok and report.skipped_too_large == 1 and report.files_indexed == 0


def test_reading_honours_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "a.txt").write_text("Slowly read otters.\n" * 50)
    g = open_backend("sqlite-fts5")
    assert index_folder(g, folder, "slow").files_indexed == 1
    size = (folder / "a.txt").write_text("Slowly read otters, changed.\n" * 50)
    true_read = os.read
    read = [0]

    def slow_read(fd: int, n: int) -> bytes:
        time.sleep(0.2)  # at least 0.2 s a read, however loaded the machine
        chunk = true_read(fd, min(n, 16))
        read[0] += len(chunk)
        return chunk

    monkeypatch.setattr("indexplug.confine.os.read", slow_read)
    report = within(BOUND_S, lambda: index_folder(g, folder, "slow", deadline_s=1.0))
    # reading the whole file takes 18 s of these reads: it stopped at its deadline, long
    # before the end (a count of bytes, not a clock, so load cannot make it fail)
    assert read[0] < size, (read[0], size)
    assert not report.ok and "timed out" in report.failures[0]
    assert report.files_removed == 0  # a slow read is not a verdict on the file
    assert isinstance(g.search("slow", "slowly read otters"), Searched)


def test_invoke_index_folder_is_confined_and_a_loop_is_not_fatal(
    tree: Path, write_config: Callable[[str], Path]
) -> None:
    cfg = write_config('[defaults]\nbackend = "sqlite-fts5"\nfolders = ["allowed"]\n')
    a = within(
        BOUND_S,
        lambda: invoke("index_folder", {"index": "p1", "path": "allowed"}, config=cfg),
        release_fifo(tree / "fifo.md"),
    )
    assert a["code"] == "INDEXED", a["message"]
    check_skips(a["data"])
    a = invoke("search", {"index": "p1", "query": "zanzibar launch codes mauve"}, config=cfg)
    assert a["code"] == "NO_MATCH"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_the_cli_skips_fifos_devices_and_loops(tree: Path, tmp_path: Path) -> None:
    """``indexplug index`` in a child process: bounded in time and memory, no traceback."""
    code = "from indexplug.cli.app import main; main()"
    env = {**os.environ, "INDEXPLUG_HOME": str(tmp_path / "cli-home")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, "index", str(tree), "--index", "p1", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        release_fifo(tree / "fifo.md")()
        pytest.fail("indexplug index did not finish in 60 s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    check_skips(json.loads(done.stdout))


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str) -> Path:
        path = tmp_path / "indexplug.toml"
        path.write_text(text)
        return path

    return write
