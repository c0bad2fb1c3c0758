"""Context expansion opens no path a passage names (issue 26).

Neighbours come from the backend's own op, or from a file the index was built from (listed in
its ingest manifest, still a regular file at that real path under a recorded folder, unchanged);
every other case gets one note that says nothing about paths.  Calls that blocked or ate memory
before the fix run bounded: in a daemon thread joined with a timeout, or in a child process with
a timeout and a memory limit.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from indexplug import invoke
from mcp import Client, StdioServerParameters
from orchestration_support import check_schema

T = TypeVar("T")
BOUND_S = 20.0
HASH = "0" * 64
LAUNCHER = Path(__file__).resolve().parent / "mcp_launcher.py"


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


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pipe.md"
    os.mkfifo(path)
    yield path
    release(path)()


def release(fifo: Path) -> Callable[[], None]:
    """Open ``fifo`` for writing, and close it at once: a reader stuck on it gets EOF."""

    def go() -> None:
        for _ in range(100):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                return

    return go


def call(op: str, args: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return check_schema(invoke(op, args, **kw))


def add(index: str, text: str, uri: str) -> None:
    p = {"text": text, "uri": uri, "document_sha256": HASH}
    assert call("add", {"index": index, "passages": [p]})["code"] == "INDEXED"


def context_of(index: str, query: str) -> dict[str, Any]:
    a = call(
        "search",
        {"index": index, "query": query, "top_k": 1, "context": 1, "deadline_s": 3},
    )
    assert a["code"] == "SEARCHED", a["message"]
    ctx = a["data"]["hits"][0]["context"]
    assert isinstance(ctx, dict)
    return ctx


def test_a_passage_naming_a_fifo_is_answered_in_time(fifo: Path) -> None:
    add("hostile", "otters in a pipe", fifo.as_uri())
    ctx = within(BOUND_S, lambda: context_of("hostile", "otters pipe"), release(fifo))
    assert ctx["before"] == [] and ctx["after"] == [] and ctx["note"]
    assert str(fifo) not in ctx["note"]


def test_every_path_a_passage_names_gets_the_same_note(tmp_path: Path, docs: Path) -> None:
    """Whether a path exists, is a folder, a file of another index or changed: one note."""
    call("index_folder", {"index": "docs", "path": str(docs)})
    outside = tmp_path / "outside.md"
    outside.write_text("words outside every index\n")
    (tmp_path / "folder").mkdir()
    uris = {
        "missing": (tmp_path / "no-such-file.md").as_uri(),
        "folder": (tmp_path / "folder").as_uri(),
        "outside": outside.as_uri(),
        "passwd": "file:///etc/passwd",
        "indexed": (docs / "cats.md").as_uri(),  # a real file of the index, wrong passage
        "remote": "https://example.org/otters.md",
    }
    notes = {}
    for word, uri in uris.items():
        add("hostile", f"hostile passage {word}", uri)
        ctx = within(BOUND_S, lambda w=word: context_of("hostile", w))  # type: ignore[misc]
        assert ctx["before"] == [] and ctx["after"] == []
        notes[word] = ctx["note"]
    assert len(set(notes.values())) == 1, notes
    note = notes["missing"]
    assert str(tmp_path) not in note and "Error" not in note


def test_a_passage_naming_dev_zero_reads_nothing(tmp_path: Path) -> None:
    """In a child process limited to 2 GiB: before the fix it read /dev/zero until MemoryError."""
    script = textwrap.dedent(
        """
        import json
        from indexplug import invoke
        p = {"text": "otters at zero", "uri": "file:///dev/zero", "document_sha256": "0" * 64}
        assert invoke("add", {"index": "z", "passages": [p]})["code"] == "INDEXED"
        a = invoke("search", {"index": "z", "query": "otters", "context": 1, "deadline_s": 3})
        print(json.dumps(a["data"]["hits"][0]["context"]))
        """
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "INDEXPLUG_HOME": str(tmp_path / "home")},
            cwd=tmp_path,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("context expansion on file:///dev/zero did not finish in 60 s")
    assert done.returncode == 0, done.stderr[-2000:]
    ctx = json.loads(done.stdout)
    assert ctx["before"] == [] and ctx["after"] == [] and ctx["note"]


def test_a_file_swapped_for_a_link_after_indexing_gets_no_context(
    tmp_path: Path, docs: Path
) -> None:
    call("index_folder", {"index": "docs", "path": str(docs), "max_chars": 300, "overlap": 40})
    ctx = context_of("docs", "paragraph 5 otters")
    assert ctx["note"] is None and ctx["before"] and ctx["after"]
    # the same bytes, but now behind a link that leads out of the indexed folder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(docs / "otters.md", elsewhere / "otters.md")
    (docs / "otters.md").unlink()
    (docs / "otters.md").symlink_to(elsewhere / "otters.md")
    ctx = context_of("docs", "paragraph 5 otters")
    assert ctx["before"] == [] and ctx["after"] == [] and ctx["note"]


def test_context_works_for_a_folder_the_cli_indexed_with_its_own_cut(docs: Path) -> None:
    from indexplug.cli.app import app
    from typer.testing import CliRunner

    args = ["index", str(docs), "--index", "cut", "--max-chars", "300", "--overlap", "40"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    ctx = context_of("cut", "paragraph 5 otters")
    assert ctx["note"] is None and len(ctx["before"]) == 1 and len(ctx["after"]) == 1


CONFIG = """
[defaults]
backend = "sqlite-fts5"
deadline_s = 5
folders = ["allowed"]
"""


def test_over_mcp_links_out_are_not_indexed_and_fifos_block_no_worker(
    tmp_path: Path, fifo: Path
) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "a.md").write_text("Aardvarks eat ants at night.\n")
    (tmp_path / "secret.txt").write_text("Zanzibar launch codes are mauve.\n")
    (allowed / "leak.md").symlink_to("../secret.txt")
    cfg = tmp_path / "indexplug.toml"
    cfg.write_text(CONFIG)
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(LAUNCHER), "serve", "--config", str(cfg)],
        env={
            "INDEXPLUG_HOME": os.environ["INDEXPLUG_HOME"],
            "HF_HUB_OFFLINE": "1",
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        },
        cwd=str(tmp_path),
    )
    add("p1", "otters in a pipe", fifo.as_uri())
    answers: list[dict[str, Any]] = []

    async def tool(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(name, args)
        answer = result.structured_content
        assert isinstance(answer, dict)
        return answer

    async def main() -> None:
        with anyio.fail_after(90):
            async with Client(params) as client:
                a = await tool(client, "index_folder", {"index": "p1", "path": "allowed"})
                assert a["code"] == "INDEXED", a["message"]
                assert a["data"]["skipped_outside"] == 1
                a = await tool(client, "search", {"index": "p1", "query": "zanzibar mauve"})
                assert a["code"] == "NO_MATCH"
                args = {"index": "p1", "query": "otters pipe", "context": 1, "deadline_s": 3}
                with anyio.fail_after(30):
                    async with anyio.create_task_group() as tg:
                        for _ in range(12):

                            async def one() -> None:
                                answers.append(await tool(client, "search", args))

                            tg.start_soon(one)

    try:
        anyio.run(main)
    finally:
        release(fifo)()
    assert len(answers) == 12 and all(a["code"] == "SEARCHED" for a in answers)
    assert all(a["data"]["hits"][0]["context"]["note"] for a in answers)
