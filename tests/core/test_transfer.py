"""Moving an index: export, import and copy (indexplug.transfer), on a complete in-memory
backend (the orchestration tests' ``test-store``) driven through the guard."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from indexplug.errors import InvalidRequest
from indexplug.guard import Guard
from indexplug.outcomes import Got, IndexFailed, IndexStatus, IndexTimeout
from indexplug.passages import Passage
from indexplug.transfer import (
    Copied,
    Exported,
    Imported,
    confined_output,
    copy,
    export,
    import_,
    open_confined,
    passage_line,
    state_path,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "orchestration"))
from orchestration_plugins import StoreBackend

WORDS = "otter river kettle cat sleep hands paper night lamp".split()


@pytest.fixture(autouse=True)
def _fresh_stores() -> None:
    StoreBackend.STORES.clear()


def corpus(n: int, keyed: int = 0) -> list[Passage]:
    out = []
    for i in range(n):
        text = f"passage {i} " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(5))
        out.append(
            Passage.create(
                text,
                f"file:///docs/{i}.md",
                metadata={"n": i, "tags": ["a", "b"] if i % 2 else None, "f": 1.0},
                key=f"doc-{i % keyed}" if keyed and i % 3 == 0 else None,
            )
        )
    return out


def guard(store: str = "a", **kw: object) -> Guard:
    return Guard(StoreBackend(store=store, **kw))  # type: ignore[arg-type]


def filled(n: int = 30, keyed: int = 0, store: str = "a") -> Guard:
    g = guard(store)
    assert g.add("src", corpus(n, keyed)).code == "INDEXED"
    return g


def test_export_then_import_round_trips_every_field(tmp_path: Path) -> None:
    g = filled(1200, keyed=7)
    out = tmp_path / "dump.jsonl"
    seen: list[tuple[int, int]] = []
    exp = export(g, "src", out, progress=lambda d, t: seen.append((d, t)))
    assert isinstance(exp, Exported) and exp.passages == 1200 and exp.bytes == out.stat().st_size
    assert seen[-1] == (1200, 1200) and len(seen) == 3  # pages of 500
    lines = out.read_text().splitlines()
    first = json.loads(lines[0])
    assert set(first) == {
        "id",
        "text",
        "source",
        "document_sha256",
        "start",
        "end",
        "metadata",
        "digest",
        "key",
    }
    assert [json.loads(x)["id"] for x in lines] == sorted(json.loads(x)["id"] for x in lines)
    h = guard("b")
    imp = import_(h, "dst", out)
    assert isinstance(imp, Imported) and (imp.lines, imp.added, imp.known) == (1200, 1200, 0)
    again = import_(h, "dst", out)
    assert isinstance(again, Imported) and (again.added, again.known) == (0, 1200)
    originals = {p.id: p for p in corpus(1200, keyed=7)}
    got = h.get("dst", list(originals))
    assert isinstance(got, Got) and not got.missing_ids
    for p in got.passages:
        assert p == originals[p.id]  # key, metadata types (1.0 stays float), digest


def test_import_refuses_a_tampered_line_by_number_and_writes_nothing() -> None:
    good = [passage_line(p) for p in corpus(3)]
    bad = json.loads(good[1])
    bad["text"] = bad["text"] + " changed"
    for line, why in (
        (json.dumps(bad), "id does not match"),
        (json.dumps({**json.loads(good[1]), "metadata": {"n": 1.5}}), "digest does not match"),
        ("[1, 2]", "not an object"),
        ("{not json", "not JSON"),
        (json.dumps({k: v for k, v in json.loads(good[1]).items() if k != "digest"}), "digest"),
        ("[" * 100_000, "nested too deeply"),
    ):
        g = guard("x")
        data = "\n".join([good[0], line, good[2]]).encode()
        with pytest.raises(InvalidRequest) as caught:
            import_(g, "dst", io.BytesIO(data))
        assert caught.value.field == "line 2" and why in str(caught.value), (why, caught.value)
        st = g.status("dst")
        assert isinstance(st, IndexStatus) and st.passages == 0


def test_a_keyed_import_keeps_each_key_in_one_add(tmp_path: Path) -> None:
    # 10 passages of one key: with batches of 4 a split key would replace its own passages
    ps = [Passage.create(f"part {i} of one document", "file:///k.md", key="k") for i in range(10)]
    data = "".join(passage_line(p) + "\n" for p in ps).encode()
    g = guard("k")
    out = import_(g, "dst", io.BytesIO(data), batch=4)
    assert isinstance(out, Imported) and out.added == 10
    st = g.status("dst")
    assert isinstance(st, IndexStatus) and st.passages == 10


def test_copy_keeps_ids_keys_and_provenance_and_verifies() -> None:
    src = filled(1100, keyed=40)
    dst = guard("b")
    ticks: list[int] = []
    out = copy(src, "src", dst, "dst", progress=lambda d, t: ticks.append(d))
    assert isinstance(out, Copied), out
    assert out.code == "COPIED" and out.ok and out.read == 1100 and out.added == 1100
    v = out.verification
    assert (v.source_passages, v.target_passages, v.missing_ids, v.ids_checked) == (
        1100,
        1100,
        0,
        1100,
    )
    assert v.scales_agree and len(v.queries) == 5 and all(q.agree for q in v.queries)
    assert ticks[-1] == 1100
    originals = corpus(1100, keyed=40)
    got = dst.get("dst", [p.id for p in originals])
    assert isinstance(got, Got) and sorted(got.passages, key=lambda p: p.id) == sorted(
        originals, key=lambda p: p.id
    )
    assert not state_path("test-store:src", "test-store:dst").exists()


def test_copy_resumes_after_an_interruption_without_duplicates() -> None:
    src = filled(1600, keyed=30)
    broken = guard("b", fail_after=1000)
    out = copy(src, "src", broken, "dst")
    assert isinstance(out, IndexFailed) and out.committed is not None and out.committed >= 500
    checkpoint = state_path("test-store:src", "test-store:dst")
    assert checkpoint.exists() and json.loads(checkpoint.read_text())["after"]
    again = copy(src, "src", guard("b"), "dst")
    assert isinstance(again, Copied) and again.ok and again.resumed
    assert again.read < 1600  # went on from the checkpoint
    assert again.verification.target_passages == 1600 and again.verification.missing_ids == 0


def test_copy_reports_a_mismatch_and_skips_queries_across_scales() -> None:
    src = filled(50)
    other = guard("c", scale="another_scale")
    out = copy(src, "src", other, "dst")
    assert isinstance(out, Copied) and out.ok and not out.verification.scales_agree
    assert out.verification.queries == [] and "not compared" in out.verification.note
    # a target that already held a passage of its own: counts differ, ids all there -> ok
    extra = Passage.create("something else entirely", "file:///x.md")
    dst = guard("d")
    dst.add("dst", [extra])
    out = copy(src, "src", dst, "dst")
    assert isinstance(out, Copied) and out.ok and out.verification.target_before == 1
    assert out.verification.queries == [] and "held other passages" in out.verification.note
    # passages lost behind the copy's back: the check fails
    from indexplug.transfer import verify

    dst.remove("dst", [corpus(50)[3].id])
    check = verify(src, "src", dst, "dst", 0)
    assert not isinstance(check, IndexFailed)
    assert check.missing_ids == 1 and not check.ok  # type: ignore[union-attr]


def test_paths_are_confined(tmp_path: Path) -> None:
    root = tmp_path / "allowed"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(passage_line(corpus(1)[0]) + "\n")
    (root / "leak.jsonl").symlink_to(outside / "secret.jsonl")
    roots = [os.path.realpath(root)]
    with pytest.raises(InvalidRequest, match="outside"):
        open_confined(root / "leak.jsonl", roots)
    with pytest.raises(InvalidRequest, match="outside"):
        open_confined(outside / "secret.jsonl", roots)
    with pytest.raises(InvalidRequest, match="does not exist"):
        open_confined(root / "none.jsonl", roots)
    os.mkfifo(root / "fifo")
    with pytest.raises(InvalidRequest, match="not a regular file"):
        open_confined(root / "fifo", roots)
    with pytest.raises(InvalidRequest, match="outside"):
        confined_output(outside / "x.jsonl", roots)
    with pytest.raises(InvalidRequest, match="outside"):
        confined_output(root / ".." / "outside" / "x.jsonl", roots)
    with pytest.raises(InvalidRequest, match="not a regular file"):
        confined_output(root / "leak.jsonl", roots)
    assert confined_output(root / "new.jsonl", roots) == Path(roots[0]) / "new.jsonl"
    (root / "ok.jsonl").write_text("")
    with open_confined(root / "ok.jsonl", roots) as f:
        assert f.read() == b""


def test_sample_queries_compare_scores_and_ids_above_the_cut() -> None:
    from indexplug.transfer import _compare

    a, b = filled(20, store="a"), guard("b")
    ps = corpus(20)
    b.add("src", ps[:19] + [Passage.create("otter otter river", "file:///other.md")])
    q = "otter river kettle"
    same = _compare(q, a.search("src", q, top_k=5), a.search("src", q, top_k=5))
    assert same.agree and len(same.source_top) == 5
    other = _compare(q, a.search("src", q, top_k=20), b.search("src", q, top_k=20))
    assert not other.agree
    empty = _compare(q, a.search("none", q), b.search("none", q))
    assert empty.agree and empty.source_top == ["<INDEX_EMPTY>"]
    # a copy whose sample queries differ is a mismatch, not a success
    from indexplug.transfer import Verification

    v = Verification(
        source_passages=1,
        target_passages=1,
        target_before=0,
        ids_checked=1,
        missing_ids=0,
        scales_agree=True,
        queries=[other],
    )
    assert not v.ok


def _deadlines_seen(g: Guard, seen: list[tuple[str, object]]) -> None:
    """Record the ``deadline_s`` of every read and write ``g`` is asked for."""
    for name in ("status", "scan", "get", "search", "add"):
        real = getattr(g, name)

        def spy(*args: object, _real: object = real, _name: str = name, **kw: object) -> object:
            seen.append((_name, kw.get("deadline_s")))
            return _real(*args, **kw)  # type: ignore[operator]

        setattr(g, name, spy)


def test_export_and_copy_pass_the_callers_deadline_to_every_call(tmp_path: Path) -> None:
    """The passage count inside export and copy, and copy's final check, run within the
    caller's deadline (not the default one): a locked store answers INDEX_TIMEOUT at the
    deadline asked for."""
    src, dst = filled(40, keyed=5), guard("b")
    seen: list[tuple[str, object]] = []
    _deadlines_seen(src, seen)
    _deadlines_seen(dst, seen)
    # a deadline no default has, and long enough for a loaded machine to meet it
    asked = 45.5
    assert isinstance(export(src, "src", tmp_path / "out.jsonl", deadline_s=asked), Exported)
    out = copy(src, "src", dst, "dst", deadline_s=asked, home=tmp_path)
    assert isinstance(out, Copied) and out.ok, out
    ops = {name for name, _ in seen}
    assert {"status", "scan", "get", "search", "add"} <= ops
    assert [c for c in seen if c[1] != asked] == []


def test_a_count_that_times_out_stops_export_and_copy(tmp_path: Path) -> None:
    src, dst = filled(10), guard("b")
    late = IndexTimeout(index="src", backend="test-store", deadline_s=1.0)
    scans: list[object] = []
    src.status = lambda *a, **kw: late  # type: ignore[method-assign]
    real_scan = src.scan

    def scan(*a: Any, **kw: Any) -> Any:
        scans.append(a)
        return real_scan(*a, **kw)

    src.scan = scan  # type: ignore[method-assign]
    assert export(src, "src", tmp_path / "out.jsonl", deadline_s=1.0) == late
    assert not (tmp_path / "out.jsonl").exists()
    assert copy(src, "src", dst, "dst", deadline_s=1.0, home=tmp_path) == late
    assert scans == []


def test_export_never_lands_outside_when_its_folder_is_swapped_for_a_link(
    tmp_path: Path,
) -> None:
    """The folder checked by confined_output is swapped for a link that leads out before the
    export opens it (the race, made deterministic): the export refuses and writes nothing
    anywhere, because its folder is opened from the root without following links."""
    src = filled(5)
    root, outside = tmp_path / "allowed", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    roots = [os.path.realpath(root)]
    for exclusive in (True, False):
        target = confined_output(root / "sub" / "out.jsonl", roots)
        (root / "sub").rename(root / "moved")
        (root / "sub").symlink_to(outside, target_is_directory=True)
        with pytest.raises(InvalidRequest, match="no longer a folder inside"):
            export(src, "src", target, exclusive=exclusive, roots=roots)
        assert os.listdir(outside) == [] and os.listdir(root / "moved") == []
        (root / "sub").unlink()
        (root / "moved").rename(root / "sub")
    out = export(src, "src", confined_output(root / "sub" / "out.jsonl", roots), roots=roots)
    assert isinstance(out, Exported) and out.passages == 5
    assert os.listdir(root / "sub") == ["out.jsonl"] and out.bytes > 0
