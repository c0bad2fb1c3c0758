"""The audit log's store: a hash chain that names the first edited, deleted, reordered, torn or
truncated record, refuses links, and loses no acknowledged record to a kill -9."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from indexplug.audit import GENESIS, AuditError, AuditLog, page, record_hash


def _log(tmp_path: Path, n: int = 4, **kw: int) -> AuditLog:
    log = AuditLog(tmp_path / "audit", **kw)
    for i in range(n):
        log.append(
            op="remove",
            caller="python",
            index=f"i{i % 2}",
            backend="sqlite-fts5",
            outcome="REMOVED",
            ok=True,
            counts={"removed": 1},
            ids=[f"id{i}"],
        )
    return log


def _lines(log: AuditLog) -> list[str]:
    return log.log.read_text().splitlines(keepends=True)


def test_an_intact_log_verifies_and_chains(tmp_path: Path) -> None:
    log = _log(tmp_path)
    verdict = log.verify()
    assert verdict.ok and verdict.records == 4 and verdict.first_bad is None
    recs = [json.loads(line) for line in _lines(log)]
    assert recs[0]["prev"] == GENESIS
    assert [r["seq"] for r in recs] == [1, 2, 3, 4]
    for before, after in itertools.pairwise(recs):
        assert after["prev"] == before["hash"] == record_hash(before)
    assert oct(log.log.stat().st_mode & 0o777) == "0o600"


def test_an_edited_record_is_named(tmp_path: Path) -> None:
    log = _log(tmp_path)
    lines = _lines(log)
    lines[2] = lines[2].replace('"removed": 1', '"removed": 9')
    log.log.write_text("".join(lines))
    verdict = log.verify()
    assert not verdict.ok and verdict.first_bad == 3 and "hash" in verdict.reason
    assert verdict.records == 2


def test_a_deleted_record_is_named(tmp_path: Path) -> None:
    log = _log(tmp_path)
    lines = _lines(log)
    del lines[1]
    log.log.write_text("".join(lines))
    verdict = log.verify()
    assert not verdict.ok and verdict.first_bad == 2


def test_reordered_records_are_named(tmp_path: Path) -> None:
    log = _log(tmp_path)
    lines = _lines(log)
    lines[1], lines[2] = lines[2], lines[1]
    log.log.write_text("".join(lines))
    verdict = log.verify()
    assert not verdict.ok and verdict.first_bad == 2


def test_a_rehashed_edit_still_breaks_the_chain(tmp_path: Path) -> None:
    """Recomputing the edited record's own hash does not help: the next record's prev differs."""
    log = _log(tmp_path)
    lines = _lines(log)
    rec = json.loads(lines[1])
    rec["ids"] = ["someone-else"]
    rec["hash"] = record_hash(rec)
    lines[1] = json.dumps(rec, sort_keys=True) + "\n"
    log.log.write_text("".join(lines))
    verdict = log.verify()
    assert not verdict.ok and verdict.first_bad == 3 and "prev" in verdict.reason


def test_whole_records_cut_from_the_end_are_detected(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.log.write_text("".join(_lines(log)[:2]))
    verdict = log.verify()
    assert not verdict.ok and verdict.first_bad == 3 and "truncated" in verdict.reason
    with pytest.raises(AuditError, match="truncated"):
        log.append(op="add", caller="x", index="i", backend="b", outcome="INDEXED", ok=True)


def test_an_emptied_log_is_detected(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.log.write_text("")
    assert not log.verify().ok
    with pytest.raises(AuditError, match="truncated"):
        log.check()


def test_a_torn_last_line_is_refused_not_repaired(tmp_path: Path) -> None:
    log = _log(tmp_path)
    data = log.log.read_bytes()
    log.log.write_bytes(data[:-10])
    verdict = log.verify()
    assert not verdict.ok and verdict.first_bad == 4 and "torn" in verdict.reason
    with pytest.raises(AuditError, match="torn"):
        log.check()
    assert log.log.read_bytes() == data[:-10]  # nothing rewritten


def test_a_link_in_place_of_the_log_is_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(log.log.read_bytes())
    log.log.unlink()
    log.log.symlink_to(elsewhere)
    verdict = log.verify()
    assert not verdict.ok and "link" in verdict.reason
    with pytest.raises(AuditError, match="link"):
        log.append(op="add", caller="x", index="i", backend="b", outcome="INDEXED", ok=True)
    assert elsewhere.read_bytes().count(b"\n") == 4  # the link's target was not written


def test_an_edited_last_record_refuses_the_next_append(tmp_path: Path) -> None:
    log = _log(tmp_path)
    lines = _lines(log)
    lines[-1] = lines[-1].replace('"id3"', '"idX"')
    log.log.write_text("".join(lines))
    with pytest.raises(AuditError, match="edited"):
        log.append(op="add", caller="x", index="i", backend="b", outcome="INDEXED", ok=True)


def test_ids_above_the_bound_are_counted_not_listed(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit", max_ids=3)
    small = log.append(
        op="remove", caller="c", index="i", backend="b", outcome="REMOVED", ok=True, ids=["a"]
    )
    big = log.append(
        op="remove",
        caller="c",
        index="i",
        backend="b",
        outcome="REMOVED",
        ok=True,
        ids=[str(n) for n in range(10)],
        keys=["k"] * 4,
    )
    assert small["ids"] == ["a"] and small["ids_total"] == 1
    assert big["ids"] == [] and big["ids_total"] == 10
    assert big["keys"] == [] and big["keys_total"] == 4


def test_a_page_filters_and_never_answers_past_a_break(tmp_path: Path) -> None:
    log = _log(tmp_path, 6)
    recs, more, verdict = page(log, index="i1", limit=2)
    assert verdict.ok and [r["seq"] for r in recs] == [2, 4] and more == 4
    recs, more, _ = page(log, index="i1", after=4, limit=2)
    assert [r["seq"] for r in recs] == [6] and more is None
    lines = _lines(log)
    lines[3] = lines[3].replace('"id3"', '"idX"')
    log.log.write_text("".join(lines))
    recs, _, verdict = page(log)
    assert not verdict.ok and [r["seq"] for r in recs] == [1, 2, 3]


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from indexplug.audit import AuditLog

    log = AuditLog(Path(sys.argv[1]))
    n = 0
    while True:
        rec = log.append(op="add", caller="python", index="i", backend="b",
                         outcome="INDEXED", ok=True, ids=[str(n)])
        print(rec["seq"], flush=True)
        n += 1
    """
)


def test_kill_9_loses_no_acknowledged_record(tmp_path: Path) -> None:
    folder = tmp_path / "audit"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    acked = [int(proc.stdout.readline()) for _ in range(40)]  # bounded: 40 records
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    acked += [int(line) for line in proc.stdout.read().split()]
    log = AuditLog(folder)
    verdict = log.verify()
    assert verdict.ok, verdict
    assert verdict.records >= max(acked) == len(acked)
    # and the log goes on after the crash
    rec = log.append(op="add", caller="c", index="i", backend="b", outcome="INDEXED", ok=True)
    assert rec["seq"] == verdict.records + 1 and log.verify().ok
