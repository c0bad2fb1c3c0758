from __future__ import annotations

from pathlib import Path

from indexplug import Searched, open_backend
from indexplug.ingest import index_folder


def write(p: Path, text: str | bytes) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(text if isinstance(text, bytes) else text.encode())


def test_index_reindex_skip_change_and_delete(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write(root / "a.md", "# Alpha\n\nThe aardvark eats ants at night.\n")
    write(root / "sub" / "b.txt", "Bees build hexagonal honeycombs.\n" * 200)
    write(root / "code.py", "def zebra():\n    return 'stripes'\n")
    write(root / "image.png", b"\x89PNG\x00\x00binary")
    write(root / "bad.txt", b"\xff\xfe\xfa not utf8 \x00")
    write(root / ".git" / "config", "secret internals")
    g = open_backend("sqlite-fts5")

    first = index_folder(g, root, "docs", max_chars=400, overlap=50)
    assert first.ok and first.files_indexed == 3 and first.skipped_binary == 1
    assert first.passages_added > 3
    hit = g.search("docs", "aardvark ants")
    assert isinstance(hit, Searched)
    p = hit.hits[0].passage
    assert (
        p.source.uri.endswith("/a.md") and p.source.sha256 and p.document_sha256 == p.source.sha256
    )
    text = (root / "a.md").read_text()
    assert text[p.start : p.end] == p.text
    assert g.search("docs", "internals").code == "NO_MATCH"

    again = index_folder(g, root, "docs", max_chars=400, overlap=50)
    assert again.files_unchanged == 3 and again.passages_added == 0 and again.files_indexed == 0

    write(root / "a.md", "# Alpha\n\nThe armadillo digs burrows.\n")
    (root / "code.py").unlink()
    third = index_folder(g, root, "docs", max_chars=400, overlap=50)
    assert third.files_indexed == 1 and third.files_removed == 1 and third.passages_removed >= 2
    assert g.search("docs", "aardvark").code == "NO_MATCH"
    assert g.search("docs", "zebra stripes").code == "NO_MATCH"
    assert isinstance(g.search("docs", "armadillo"), Searched)
    total = g.status("docs").passages  # type: ignore[union-attr]
    bees = g.search("docs", "bees honeycombs", top_k=1000)
    # every passage but a.md's one (the ingest bookkeeping is no passage)
    assert isinstance(bees, Searched) and len(bees.hits) == total - 1


def test_refused_writes_are_reported_and_retried(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write(root / "a.txt", "small file about otters")
    g = open_backend("sqlite-fts5")
    assert index_folder(g, root, "tiny", max_bytes=150_000).ok
    write(root / "big.txt", "lots of words here " * 50_000)
    report = index_folder(g, root, "tiny", max_bytes=150_000)
    assert not report.ok and "budget" in report.failures[0]
    assert g.status("tiny").passages == 1  # type: ignore[union-attr]  # a.txt's
