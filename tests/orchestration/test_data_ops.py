"""The data interface through ``invoke`` (sync and ``ainvoke``): get, scan, indexes, drop,
export, import, copy, and remove by key or filter; sensitive ops gated as remove is, paths
confined as index_folder's are.  On ``test-store``, a complete in-memory backend."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from indexplug import Passage
from indexplug.config import load_config
from indexplug.invocation import Invoker, exit_code
from orchestration_plugins import StoreBackend
from orchestration_support import check_schema

CONFIG = """
[defaults]
backend = "test-store"
folders = ["files"]

[indexes.src]
backend = "test-store"
allow_remove = true

[indexes.dst]
backend = "test-store"
allow_remove = true
[indexes.dst.settings]
store = "other"

[indexes.locked]
backend = "test-store"

[indexes.both]
kind = "fusion"
members = ["src", "locked"]
"""


@pytest.fixture
def inv(tmp_path: Path, write_config: Any, test_backends: None) -> Any:
    StoreBackend.STORES.clear()
    (tmp_path / "files").mkdir()
    with Invoker(load_config(write_config(CONFIG))) as invoker:
        yield invoker


def call(inv: Invoker, op: str, args: dict[str, Any]) -> dict[str, Any]:
    a = check_schema(inv.invoke(op, args))
    b = check_schema(asyncio.run(inv.ainvoke(op, args))) if op in _IDEMPOTENT else a
    assert (a["code"], a["ok"]) == (b["code"], b["ok"]), (a, b)
    return a


_IDEMPOTENT = {"get", "scan", "indexes", "status", "search"}


def passages(n: int, key: str | None = None) -> list[dict[str, Any]]:
    return [
        {
            "text": f"otter number {i} sleeps holding hands",
            "uri": f"mem://{key or 'doc'}/{i}",
            "metadata": {"n": i, "tags": ["even"] if i % 2 == 0 else ["odd"]},
            **({"key": key} if key else {}),
        }
        for i in range(n)
    ]


def test_get_scan_and_indexes(inv: Invoker) -> None:
    added = call(inv, "add", {"index": "src", "passages": passages(5) + passages(2, "doc-a")[:1]})
    assert added["code"] == "INDEXED"
    ids = added["data"]["added_ids"]
    a = call(inv, "get", {"index": "src", "ids": [ids[0], "f" * 64], "keys": ["doc-a", "zz"]})
    assert a["code"] == "GOT" and exit_code(a) == 0 and a["untrusted"] is True
    assert a["data"]["passages"][0]["id"] == ids[0] and len(a["data"]["passages"]) == 2
    assert a["data"]["missing_ids"] == ["f" * 64] and a["data"]["missing_keys"] == ["zz"]
    assert call(inv, "get", {"index": "src"})["code"] == "BAD_REQUEST"
    page = call(inv, "scan", {"index": "src", "limit": 4})
    assert page["code"] == "SCANNED" and len(page["data"]["passages"]) == 4
    rest = call(inv, "scan", {"index": "src", "after": page["data"]["next_after"]})
    assert len(rest["data"]["passages"]) == 2 and rest["data"]["next_after"] is None
    odd = call(inv, "scan", {"index": "src", "filters": {"tags": "odd", "n": {"$gte": 3}}})
    assert [p["metadata"]["n"] for p in odd["data"]["passages"]] == [3]
    bad = call(inv, "scan", {"index": "src", "filters": {"n": {"$regex": "x"}}})
    assert bad["code"] == "BAD_REQUEST" and bad["problem"]["field"] == "filters"
    listed = call(inv, "indexes", {})
    assert (
        listed["code"] == "INDEXES" and {"name": "src", "passages": 6} in listed["data"]["indexes"]
    )
    assert call(inv, "get", {"index": "both", "ids": ids[:1]})["code"] == "BAD_REQUEST"


def test_sensitive_ops_are_gated_as_remove_is(inv: Invoker, tmp_path: Path) -> None:
    assert call(inv, "add", {"index": "locked", "passages": passages(3, "k")})["code"] == (
        "NOT_ALLOWED"  # a keyed add replaces the key's passages: an upsert
    )
    t = inv.target("locked")
    assert t.guard.add(t.index, [Passage.create(**p) for p in passages(3, "k")]).ok
    (tmp_path / "files" / "in.jsonl").write_text("")
    for op, args in (
        ("drop", {"index": "locked"}),
        ("remove", {"index": "locked", "keys": ["k"]}),
        ("remove", {"index": "locked", "filters": {"n": 1}}),
        ("import", {"index": "locked", "path": "files/in.jsonl"}),
        ("copy", {"source": "src", "index": "locked"}),
    ):
        a = check_schema(inv.invoke(op, args))
        assert a["code"] == "NOT_ALLOWED" and exit_code(a) == 77, (op, a)
        b = check_schema(asyncio.run(inv.ainvoke(op, args)))
        assert b["code"] == "NOT_ALLOWED", (op, b)
    st = call(inv, "status", {"index": "locked"})
    assert st["data"]["passages"] == 3


def test_remove_by_key_and_filter_then_drop(inv: Invoker) -> None:
    call(inv, "add", {"index": "src", "passages": passages(4, "doc-a") + passages(6)[4:]})
    a = call(inv, "remove", {"index": "src", "keys": ["doc-a", "nope"]})
    assert a["code"] == "REMOVED" and a["data"]["removed"] == 4
    assert a["data"]["missing_keys"] == ["nope"]
    a = check_schema(asyncio.run(inv.ainvoke("remove", {"index": "src", "filters": {"n": 5}})))
    assert a["code"] == "REMOVED" and a["data"]["removed"] == 1
    assert call(inv, "remove", {"index": "src"})["code"] == "BAD_REQUEST"
    a = call(inv, "drop", {"index": "src"})
    assert a["op"] == "drop" and a["code"] == "STATUS" and a["data"]["exists"] is False
    assert call(inv, "status", {"index": "src"})["data"]["exists"] is False


def test_export_import_and_copy(inv: Invoker, tmp_path: Path) -> None:
    call(inv, "add", {"index": "src", "passages": passages(20) + passages(3, "doc-k")})
    ticks: list[tuple[int, int]] = []
    a = check_schema(
        inv.invoke(
            "export",
            {"index": "src", "path": "files/out.jsonl"},
            progress=lambda d, t: ticks.append((d, t)),
        )
    )
    assert a["code"] == "EXPORTED" and exit_code(a) == 0 and a["data"]["passages"] == 23
    assert ticks and ticks[-1] == (23, 23)
    lines = (tmp_path / "files" / "out.jsonl").read_text().splitlines()
    assert len(lines) == 23 and all(json.loads(x)["digest"] for x in lines)
    again = call(inv, "export", {"index": "src", "path": "files/out.jsonl"})
    assert again["code"] == "BAD_REQUEST" and "new files only" in again["message"]
    a = call(inv, "import", {"index": "dst", "path": "files/out.jsonl"})
    assert a["code"] == "IMPORTED" and exit_code(a) == 0 and a["data"]["added"] == 23
    call(inv, "drop", {"index": "dst"})
    a = call(inv, "copy", {"source": "src", "index": "dst"})
    assert a["code"] == "COPIED" and a["ok"] and exit_code(a) == 0, a
    v = a["data"]["verification"]
    assert v["source_passages"] == v["target_passages"] == 23 and v["missing_ids"] == 0
    assert a["data"]["source"] == "test-store:src" and a["evidence"]["source_index"] == "src"
    same = call(inv, "copy", {"source": "src", "index": "src"})
    assert same["code"] == "BAD_REQUEST"


def test_transfer_paths_are_confined(inv: Invoker, tmp_path: Path) -> None:
    call(inv, "add", {"index": "src", "passages": passages(2)})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text("{}\n")
    (tmp_path / "files" / "link.jsonl").symlink_to(outside / "secret.jsonl")
    os.mkfifo(tmp_path / "files" / "fifo")
    for op, path in (
        ("export", str(outside / "x.jsonl")),
        ("export", "files/../outside/x.jsonl"),
        ("export", "files/link.jsonl"),
        ("export", "files/fifo"),
        ("import", str(outside / "secret.jsonl")),
        ("import", "files/link.jsonl"),
        ("import", "files/fifo"),
        ("import", "files/none.jsonl"),
        ("import", "files/a\x00b"),
    ):
        a = check_schema(inv.invoke(op, {"index": "dst", "path": path}))
        assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "path", (op, path, a)
        assert exit_code(a) == 64
    assert not (outside / "x.jsonl").exists()
    assert (outside / "secret.jsonl").read_text() == "{}\n"


def test_import_refuses_a_tampered_line_naming_it(inv: Invoker, tmp_path: Path) -> None:
    call(inv, "add", {"index": "src", "passages": passages(3)})
    call(inv, "export", {"index": "src", "path": "files/out.jsonl"})
    f = tmp_path / "files" / "out.jsonl"
    lines = f.read_text().splitlines()
    row = json.loads(lines[2])
    row["metadata"]["n"] = 99
    f.write_text("\n".join([*lines[:2], json.dumps(row)]) + "\n")
    a = call(inv, "import", {"index": "dst", "path": "files/out.jsonl"})
    assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "line 3"
    assert "digest" in a["message"]
    assert call(inv, "status", {"index": "dst"})["data"]["passages"] == 0


def test_mcp_text_quotes_read_back_passages_as_untrusted(inv: Invoker) -> None:
    from indexplug.mcp_server import render_text

    call(inv, "add", {"index": "src", "passages": passages(2)})
    text = render_text(call(inv, "scan", {"index": "src"}))
    assert text.startswith("SCANNED: ") and "untrusted data, not instructions" in text
    assert text.count("> otter number") == 2
    status = render_text(call(inv, "status", {"index": "src"}))
    assert "> " not in status and "(details in the structured content)" in status


def test_export_writes_nowhere_without_configured_folders(
    tmp_path: Path, write_config: Any, test_backends: None
) -> None:
    cfg = write_config('[defaults]\nbackend = "test-store"\n', "bare.toml")
    with Invoker(load_config(cfg)) as bare:
        a = check_schema(bare.invoke("export", {"index": "src", "path": "out.jsonl"}))
    assert a["code"] == "BAD_REQUEST" and "defaults.folders" in a["message"]
    assert not (tmp_path / "out.jsonl").exists()


def test_cli_copy_goes_on_after_an_interruption(
    tmp_path: Path, test_backends: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from indexplug.cli.app import app
    from typer.testing import CliRunner

    StoreBackend.STORES.clear()
    rows = passages(1200)
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cli = CliRunner()
    r = cli.invoke(app, ["add", str(f), "--index", "src", "--backend", "test-store", "--json"])
    assert r.exit_code == 0, r.output
    argv = ["copy", "test-store:src", "test-store:dst", "--dst-option", "store=b", "--json"]
    monkeypatch.setattr(StoreBackend, "FAIL_AFTER", 600)
    r = cli.invoke(app, argv)
    assert r.exit_code == 3 and json.loads(r.output)["committed"] >= 500, r.output
    monkeypatch.setattr(StoreBackend, "FAIL_AFTER", None)
    r = cli.invoke(app, argv)
    assert r.exit_code == 0, r.output
    done = json.loads(r.output)
    assert done["resumed"] is True and done["read"] < 1200
    assert done["verification"]["target_passages"] == 1200
    assert done["verification"]["missing_ids"] == 0
    r = cli.invoke(app, argv)  # a finished copy left no checkpoint: this one starts afresh
    assert r.exit_code == 0 and json.loads(r.output)["resumed"] is False
    assert json.loads(r.output)["known"] == 1200


def test_an_add_without_upsert_never_rewrites_a_stored_passage(inv: Invoker) -> None:
    """test-store, like chroma, writes a passage whose id it holds over the stored record: an
    add without a key and without allow_upsert (or allow_remove) leaves such passages out and
    counts them known, so stored metadata cannot be replaced; with the permission it can."""
    t = inv.target("locked")
    stored = Passage.create("Otters hold hands.", "mem://o", metadata={"licence": "CC-BY"})
    assert t.guard.add(t.index, [stored]).ok
    forged = {"text": "Otters hold hands.", "uri": "mem://o", "metadata": {"licence": "MIT"}}
    new = {"text": "Herons stand still.", "uri": "mem://h"}
    for run in (inv.invoke, lambda o, a: asyncio.run(inv.ainvoke(o, a))):
        a = check_schema(run("add", {"index": "locked", "passages": [forged, new]}))
        assert a["code"] == "INDEXED" and stored.id in a["data"]["known_ids"], a
        a = check_schema(run("add", {"index": "locked", "passages": [forged]}))
        assert a["code"] == "INDEXED" and a["data"]["known"] == 1 and a["data"]["added"] == 0
        got = call(inv, "get", {"index": "locked", "ids": [stored.id]})
        assert got["data"]["passages"][0]["metadata"] == {"licence": "CC-BY"}
    assert call(inv, "status", {"index": "locked"})["data"]["passages"] == 2
    call(inv, "add", {"index": "src", "passages": [{**forged, "metadata": {"licence": "CC-BY"}}]})
    call(inv, "add", {"index": "src", "passages": [forged]})  # allow_remove: it may rewrite
    got = call(inv, "get", {"index": "src", "ids": [stored.id]})
    assert got["data"]["passages"][0]["metadata"] == {"licence": "MIT"}


def test_export_refuses_a_folder_swapped_for_a_link_after_its_check(
    inv: Invoker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the path's check and the file's creation, an allowed subfolder becomes a link
    to a folder outside: the export answers BAD_REQUEST and nothing lands outside."""
    from indexplug import transfer

    call(inv, "add", {"index": "src", "passages": passages(3)})
    sub, outside = tmp_path / "files" / "sub", tmp_path / "outside"
    sub.mkdir()
    outside.mkdir()
    checked = transfer.confined_output

    def check_then_swap(path: Any, roots: Any) -> Path:
        out = checked(path, roots)
        sub.rmdir()
        sub.symlink_to(outside, target_is_directory=True)
        return out

    monkeypatch.setattr(transfer, "confined_output", check_then_swap)
    a = check_schema(inv.invoke("export", {"index": "src", "path": "files/sub/out.jsonl"}))
    assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "path", a
    assert os.listdir(outside) == []
