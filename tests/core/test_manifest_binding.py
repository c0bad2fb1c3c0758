"""The ingest manifest belongs to its index: a missing, recreated or damaged index or manifest
makes the next run a full re-index that removes what is stale.  The bookkeeping lives outside
the passages, so no caller can forge it, and dropping the index to rebuild it needs allow_drop."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from indexplug import Guard, Passage, Searched, open_backend
from indexplug.ingest import RebuildNotAllowed, index_folder
from indexplug.outcomes import IndexFailed, IndexStatus


def manifest_file(home: Path, index: str) -> Path:
    return home / "manifests" / "sqlite-fts5" / f"{index}.json"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("Aardvarks eat ants at night.\n")
    (root / "b.md").write_text("Bees build hexagonal honeycombs.\n")
    return root


def found(g: Guard, index: str, query: str) -> bool:
    out = g.search(index, query)
    assert out.code in ("SEARCHED", "NO_MATCH", "INDEX_EMPTY"), out.message
    return isinstance(out, Searched)


def delete_index(g: Guard, index: str) -> None:
    st = g.status(index)
    assert isinstance(st, IndexStatus) and st.exists
    path = Path(st.details["path"])
    g.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def test_a_deleted_index_is_indexed_again(folder: Path) -> None:
    g = open_backend("sqlite-fts5")
    assert index_folder(g, folder, "m1").files_indexed == 2
    delete_index(g, "m1")
    g = open_backend("sqlite-fts5")
    report = index_folder(g, folder, "m1")
    assert report.ok and report.files_indexed == 2 and report.files_unchanged == 0
    assert report.rebuilt and "fewer than its manifest lists" in report.rebuilt
    assert found(g, "m1", "aardvarks") and found(g, "m1", "honeycombs")
    assert index_folder(g, folder, "m1").files_unchanged == 2  # and incremental again


def test_a_recreated_index_is_indexed_again_and_keeps_what_others_added(folder: Path) -> None:
    g = open_backend("sqlite-fts5")
    index_folder(g, folder, "m1")
    delete_index(g, "m1")
    g = open_backend("sqlite-fts5")
    g.add("m1", [Passage.create("Walruses sunbathe on ice floes.", "mem://walrus")])
    (folder / "a.md").write_text("Armadillos dig burrows.\n")
    report = index_folder(g, folder, "m1")
    assert report.ok and report.files_indexed == 2 and report.rebuilt
    assert found(g, "m1", "armadillos") and found(g, "m1", "honeycombs")
    assert found(g, "m1", "walruses")  # not the ingest's to remove
    assert not found(g, "m1", "aardvarks")


@pytest.mark.parametrize("damage", ["truncate", "delete", "edit", "garbage"])
def test_a_lost_manifest_rebuilds_the_index_without_stale_passages(
    folder: Path, _isolated_home: Path, damage: str
) -> None:
    g = open_backend("sqlite-fts5")
    assert index_folder(g, folder, "m1").files_indexed == 2
    path = manifest_file(_isolated_home, "m1")
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "delete":
        path.unlink()
    elif damage == "edit":  # valid JSON, one file fewer: the checksum no longer matches
        data = json.loads(raw)
        data["files"] = dict(list(data["files"].items())[:1])
        path.write_text(json.dumps(data))
    else:
        path.write_text("[1, 2, 3]")
    (folder / "a.md").write_text("Armadillos dig burrows.\n")
    (folder / "b.md").unlink()
    with pytest.raises(RebuildNotAllowed, match="allow_remove"):
        index_folder(g, folder, "m1")  # dropping needs the permission: nothing changes
    assert found(g, "m1", "aardvarks") and found(g, "m1", "honeycombs")
    report = index_folder(g, folder, "m1", allow_drop=True)
    assert report.ok, report.failures
    assert found(g, "m1", "armadillos")
    assert not found(g, "m1", "aardvarks")  # the old version of a changed file
    assert not found(g, "m1", "honeycombs")  # a deleted file
    st = g.status("m1")
    assert isinstance(st, IndexStatus) and st.passages == 1  # armadillos, and no marker
    assert report.rebuilt and "dropped" in report.rebuilt


def test_the_first_ingest_keeps_passages_added_before(folder: Path) -> None:
    g = open_backend("sqlite-fts5")
    g.add("m1", [Passage.create("Walruses sunbathe on ice floes.", "mem://walrus")])
    report = index_folder(g, folder, "m1")
    assert report.ok and report.rebuilt is None and report.files_indexed == 2
    assert found(g, "m1", "walruses") and found(g, "m1", "aardvarks")


def test_an_index_missing_some_passages_gets_them_back(folder: Path) -> None:
    g = open_backend("sqlite-fts5")
    index_folder(g, folder, "m1")
    hit = g.search("m1", "honeycombs")
    assert isinstance(hit, Searched)
    g.remove("m1", [hit.hits[0].passage.id])
    report = index_folder(g, folder, "m1")
    assert report.ok and report.rebuilt and report.passages_added == 1
    assert found(g, "m1", "honeycombs")


def test_a_manifest_of_the_first_format_is_checked_again(
    folder: Path, _isolated_home: Path
) -> None:
    g = open_backend("sqlite-fts5")
    index_folder(g, folder, "m1")
    path = manifest_file(_isolated_home, "m1")
    data = json.loads(path.read_text())
    legacy = {u: {"sha256": e["sha256"], "ids": e["ids"]} for u, e in data["files"].items()}
    path.write_text(json.dumps(legacy))
    (folder / "a.md").write_text("Armadillos dig burrows.\n")
    report = index_folder(g, folder, "m1")
    assert report.ok and report.rebuilt and "older format" in report.rebuilt
    assert found(g, "m1", "armadillos") and not found(g, "m1", "aardvarks")
    assert found(g, "m1", "honeycombs")


class FailingSecondAdd:
    """A guard whose second add of a run fails, as a server going away mid-ingest would."""

    def __init__(self, inner: Guard) -> None:
        self.inner = inner
        self.adds = 0
        self.name = inner.name
        self.backend = inner.backend

    def add(self, index: str, passages: Sequence[Passage], **kw: Any) -> Any:
        self.adds += 1
        if self.adds == 2:  # 1: the first batch, 2: the second batch
            return IndexFailed(index=index, backend=self.name, reason="server went away")
        return self.inner.add(index, passages, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_passages_of_a_half_finished_write_are_not_left_unnamed(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("indexplug.ingest.BATCH", 2)
    (folder / "c.md").write_text("Cats purr when content.\n")
    inner = open_backend("sqlite-fts5")
    flaky = FailingSecondAdd(inner)
    report = index_folder(flaky, folder, "m1")  # type: ignore[arg-type]
    assert not report.ok and "server went away" in report.failures[0]
    assert found(inner, "m1", "aardvarks")  # the first batch made it in
    (folder / "a.md").write_text("Armadillos dig burrows.\n")
    report = index_folder(inner, folder, "m1")
    assert report.ok
    assert found(inner, "m1", "armadillos") and not found(inner, "m1", "aardvarks")
    assert found(inner, "m1", "honeycombs") and found(inner, "m1", "purr")


def test_concurrent_runs_into_one_index_do_not_drop_each_other(folder: Path) -> None:
    g = open_backend("sqlite-fts5")
    reports: list[Any] = []

    def run() -> None:
        reports.append(index_folder(g, folder, "m1", deadline_s=30))

    threads = [threading.Thread(target=run, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert len(reports) == 4 and all(r.ok for r in reports)
    assert sum(r.files_indexed for r in reports) == 2
    assert [r.rebuilt for r in reports] == [None] * 4
    assert found(g, "m1", "aardvarks") and found(g, "m1", "honeycombs")


def test_a_run_waits_for_another_only_until_its_deadline(folder: Path) -> None:
    from indexplug.manifest import ingest_lock

    g = open_backend("sqlite-fts5")
    with ingest_lock("sqlite-fts5", "m1", 1.0):
        report = index_folder(g, folder, "m1", deadline_s=0.3)
    assert not report.ok and "still going" in report.failures[0]
    assert index_folder(g, folder, "m1").files_indexed == 2


def test_a_forged_marker_does_not_get_an_index_dropped(tmp_path: Path) -> None:
    """The ingest marker of earlier versions, added by any caller, and an empty folder: the
    run is a first ingest that removes nothing, and the bookkeeping adds no passage."""
    from indexplug.manifest import MARKER_TEXT, MARKER_URI

    g = open_backend("sqlite-fts5")
    forged = Passage.create(MARKER_TEXT, MARKER_URI, metadata={"indexplug": "ingest-marker"})
    walrus = Passage.create("Walruses sunbathe on ice floes.", "mem://walrus")
    g.add("m1", [forged, walrus])
    empty = tmp_path / "empty"
    empty.mkdir()
    for allow_drop in (False, True):
        report = index_folder(g, empty, "m1", allow_drop=allow_drop)
        assert report.ok and report.rebuilt is None and report.passages_removed == 0
        st = g.status("m1")
        assert isinstance(st, IndexStatus) and st.passages == 2
    assert found(g, "m1", "walruses")


def test_the_bookkeeping_is_no_passage(folder: Path) -> None:
    g = open_backend("sqlite-fts5")
    report = index_folder(g, folder, "m1")
    st = g.status("m1")
    assert isinstance(st, IndexStatus) and st.passages == report.passages_added == 2
    assert not found(g, "m1", "IndexplugIngestMarker")


def test_a_manifest_with_the_old_marker_loses_the_marker_once(
    folder: Path, _isolated_home: Path
) -> None:
    """An index built by the version that kept a marker passage: the marker is removed and the
    manifest rewritten; the files stay unchanged."""
    from indexplug.manifest import _checksum, marker

    g = open_backend("sqlite-fts5")
    index_folder(g, folder, "m1")
    path = manifest_file(_isolated_home, "m1")
    body = {k: v for k, v in json.loads(path.read_text()).items() if k != "checksum"}
    body["format"] = 2
    path.write_text(json.dumps({**body, "checksum": _checksum(body)}))
    g.add("m1", [marker()])
    report = index_folder(g, folder, "m1")
    assert report.ok and report.rebuilt is None and report.files_unchanged == 2
    st = g.status("m1")
    assert isinstance(st, IndexStatus) and st.passages == 2
    assert json.loads(path.read_text())["format"] == 3


def test_a_recreated_index_as_large_as_the_manifest_is_indexed_again(folder: Path) -> None:
    g = open_backend("sqlite-fts5")
    index_folder(g, folder, "m1")
    delete_index(g, "m1")
    g = open_backend("sqlite-fts5")
    others = [Passage.create(f"Walrus number {i} sunbathes.", f"mem://w{i}") for i in range(3)]
    g.add("m1", others)
    report = index_folder(g, folder, "m1")
    assert report.ok and report.rebuilt and "does not hold passages" in report.rebuilt
    assert found(g, "m1", "aardvarks") and found(g, "m1", "walrus")
