"""The chroma backend in embedded mode: outcomes, fidelity, budgets, embedders, deadlines."""

from __future__ import annotations

import socket
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from chroma_helpers import corpus, full_passage, odd_passages
from indexplug import (
    Guard,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    OverBudget,
    Passage,
    Removed,
    Searched,
)
from indexplug.deadlines import Deadline
from indexplug.embedders.hashing import HashingEmbedder
from indexplug.filters import values_of
from indexplug.passages import provenance_json
from indexplug.plugins import get_registry
from indexplug.protocols import Granularity, Vector
from indexplug_chroma import ChromaBackend, ChromaSettings, fields, sizes
from indexplug_chroma.stores import collection_name

MakeGuard = Callable[..., Guard]


def snapshot(g: Guard, index: str) -> tuple[int, list[str]]:
    st = g.status(index)
    out = g.search(index, "otters glaciers violins", top_k=100)
    ids = sorted(h.passage.id for h in out.hits) if isinstance(out, Searched) else []
    return (st.passages if isinstance(st, IndexStatus) else -1), ids


def test_every_search_outcome(make_guard: MakeGuard) -> None:
    g = make_guard()
    assert isinstance(g.search("docs", "otters"), IndexEmpty)
    ps = corpus(20)
    added = g.add("docs", ps)
    assert isinstance(added, Indexed) and added.added == 20 and added.bytes_used
    out = g.search("docs", "a note about otters and item5", top_k=5)
    assert isinstance(out, Searched) and out.searched == 20 and len(out.hits) == 5
    assert out.hits[0].passage == ps[5]  # exactly as added: text, source, span, metadata
    assert out.scale.name == "cosine" and out.scale.higher_is_better
    assert all(-1.0 <= h.score <= 1.0001 for h in out.hits)
    nm = g.search("docs", "otters", filters={"topic": "astronomy"})
    assert isinstance(nm, NoMatch) and nm.searched == 20
    gone = g.remove("docs", [p.id for p in ps])
    assert isinstance(gone, Removed) and gone.removed == 20
    assert isinstance(g.search("docs", "otters"), IndexEmpty)


def test_a_query_the_embedder_cannot_represent_matches_nothing(make_guard: MakeGuard) -> None:
    g = make_guard()
    g.add("docs", corpus(5))
    # The guard refuses a query with no letter or digit before any backend sees it; the
    # backend itself still answers one whose vector is zero with "nothing matches".
    out = g.backend.search("docs", "🦜🔥 …", top_k=10, deadline=Deadline.after(30.0))
    assert isinstance(out, NoMatch) and out.searched == 5


def test_known_ids_are_reported_and_not_written_again(make_guard: MakeGuard) -> None:
    g = make_guard()
    ps = corpus(6)
    g.add("docs", ps[:4])
    out = g.add("docs", ps)
    assert isinstance(out, Indexed)
    assert (out.added, out.known) == (2, 4)
    assert out.known_ids == [p.id for p in ps[:4]] and out.added_ids == [p.id for p in ps[4:]]
    assert g.status("docs").passages == 6  # type: ignore[union-attr]


def test_filters_follow_the_reference_meaning(make_guard: MakeGuard) -> None:
    """Equality is by JSON type as :func:`indexplug.filters.matches` defines it: ``1`` and
    ``1.0`` are one number (Chroma's typed fields compare both), ``true`` is not ``1``."""
    g = make_guard()
    ps = corpus(20)
    ps.append(full_passage("otters again, weighted one as an int", 99, weight=1, topic="otters"))
    ps.append(full_passage("otters once more, weighted true", 98, weight=True, topic="otters"))
    g.add("docs", ps)
    out = g.search("docs", "otters", top_k=50, filters={"topic": "otters"})
    assert isinstance(out, Searched)
    assert {h.passage.metadata["topic"] for h in out.hits} == {"otters"} and len(out.hits) == 6
    both = g.search("docs", "otters", top_k=50, filters={"topic": "otters", "even": True})
    assert isinstance(both, Searched)
    assert {h.passage.metadata["n"] for h in both.hits} == {0, 10}
    for one in (1, 1.0):
        got = g.search("docs", "otters", top_k=50, filters={"weight": one})
        assert isinstance(got, Searched)
        assert {h.passage.id for h in got.hits} == {ps[2].id, ps[20].id}  # not the bool
    true = g.search("docs", "otters", top_k=50, filters={"weight": True})
    assert isinstance(true, Searched) and [h.passage.id for h in true.hits] == [ps[21].id]


def test_a_projected_refusal_leaves_the_index_unchanged(make_guard: MakeGuard) -> None:
    g = make_guard()
    g.add("docs", corpus(10))
    before = snapshot(g, "docs")
    more = corpus(5, tag="more")
    out = g.add("docs", more, max_bytes=1000)
    assert isinstance(out, OverBudget) and out.check == "projected"
    assert out.needed_bytes > out.max_bytes == 1000 and not out.estimate
    assert snapshot(g, "docs") == before
    assert g.status("docs").max_bytes is None  # type: ignore[union-attr]


def test_a_measured_refusal_takes_the_write_back(
    make_guard: MakeGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = make_guard()
    g.add("docs", corpus(10))
    before = snapshot(g, "docs")
    size = g.status("docs").bytes_used  # type: ignore[union-attr]
    assert size
    monkeypatch.setattr(sizes, "projected_bytes", lambda passages, dim: 0)  # let it through
    big = [full_passage("glacier " * 20_000 + str(i), 100 + i) for i in range(3)]
    out = g.add("docs", big, max_bytes=size + 1000)
    assert isinstance(out, OverBudget) and out.check == "measured", out
    assert snapshot(g, "docs") == before
    again = g.add("docs", big)
    assert isinstance(again, Indexed) and again.added == 3  # nothing of the refused write kept


def test_a_refused_first_write_leaves_no_index(make_guard: MakeGuard, tmp_path: Path) -> None:
    g = make_guard()
    out = g.add("fresh", corpus(5), max_bytes=10_000)
    assert isinstance(out, OverBudget)
    assert not (tmp_path / "chroma" / "fresh").exists()
    st = g.status("fresh")
    assert isinstance(st, IndexStatus) and not st.exists


def test_the_first_budget_holds_and_cannot_be_raised(make_guard: MakeGuard) -> None:
    g = make_guard()
    budget = 2_000_000
    first = g.add("docs", corpus(5), max_bytes=budget)
    assert isinstance(first, Indexed) and first.max_bytes == budget
    assert g.status("docs").max_bytes == budget  # type: ignore[union-attr]
    huge = [full_passage("violin " * 50_000 + str(i), 200 + i) for i in range(3)]
    for asked in (budget * 100, None):
        out = g.add("docs", huge, max_bytes=asked)
        assert isinstance(out, OverBudget) and out.max_bytes == budget
    capped = g.add("docs", corpus(3, tag="small"), max_bytes=10)
    assert isinstance(capped, OverBudget) and capped.max_bytes == 10
    assert g.status("docs").max_bytes == budget  # type: ignore[union-attr]


def test_an_embedder_mismatch_is_refused_on_every_op(make_guard: MakeGuard) -> None:
    make_guard().add("docs", corpus(5))
    for spec in ("hashing:128", "hashing:512"):
        other = make_guard(embedder=spec)
        outs = [
            other.search("docs", "otters"),
            other.add("docs", corpus(2, tag="x")),
            other.remove("docs", [corpus(1)[0].id]),
            other.status("docs"),
        ]
        for out in outs:
            assert isinstance(out, IndexFailed), out
            assert "hashing:default (dim 256)" in out.reason and spec in out.reason
            assert out.error_type == "EmbedderMismatch"
    same_name = _RenamedDim("hashing:default", 64)
    g = Guard(
        ChromaBackend(
            make_guard().backend.home,
            ChromaSettings(embedder="hashing:default"),
            embedder_factory=lambda spec: same_name,
        )
    )
    out = g.search("docs", "otters")
    assert isinstance(out, IndexFailed) and "dim 64" in out.reason


class _RenamedDim(HashingEmbedder):
    """An embedder claiming another's name with a different dimension."""

    def __init__(self, name: str, dim: int) -> None:
        super().__init__(dim)
        self.name = name


def test_a_tampered_passage_is_not_served(make_guard: MakeGuard) -> None:
    g = make_guard()
    ps = corpus(5)
    g.add("docs", ps)
    g.backend.tamper("docs", ps[2].id, "altered text about otters")
    out = g.search("docs", "a note about glaciers and item2", top_k=5)
    assert isinstance(out, IndexFailed) and "altered" in out.reason


@pytest.mark.parametrize("plain", [False, True], ids=["provenance-in-document", "plain"])
def test_a_record_altered_in_either_layout_is_not_served(
    make_guard: MakeGuard, plain: bool
) -> None:
    """Both layouts written today keep the digest in the provenance, so metadata, licence,
    provenance or span altered behind the backend (the id and digest kept) is refused."""
    from indexplug_chroma import records

    for n, change in enumerate(
        (
            {"metadata": {"trusted": True}},
            {"licence": "LicenseRef-forged"},
            {"provenance": "forged"},
            {"start": 1, "end": 2},
        )
    ):
        g = make_guard(plain_documents=str(plain).lower())
        index = f"alter{n}{'p' if plain else 'd'}"
        ps = corpus(5)
        g.add(index, ps)
        with g.backend._store.use(index) as client:
            got = g.backend._store.get(client, index).get(
                ids=[ps[2].id], include=["documents", "metadatas"]
            )
        stored = records.from_record(ps[2].id, got["documents"][0], got["metadatas"][0])
        assert stored == ps[2] and stored.digest == ps[2].digest  # round-trips
        g.backend.tamper_record(index, ps[2].id, change)
        out = g.search(index, "a note about glaciers and item2", top_k=5)
        assert isinstance(out, IndexFailed) and out.error_type == "IntegrityError", out
        assert ("id" if "start" in change else "digest") in out.reason


def test_records_deleted_behind_the_vectors_fail_searches(make_guard: MakeGuard) -> None:
    """Chroma keeps records (its SQLite file) apart from vectors (HNSW): a vector whose
    record is gone is INDEX_FAILED, never a shorter answer, "no match" or "empty"; an index
    emptied through the backend is still INDEX_EMPTY."""
    g = make_guard()
    assert g.backend.capabilities.separate_records
    ps = corpus(6)
    g.add("docs", ps)
    g.backend.delete_rows("docs", [ps[3].id])
    out = g.search("docs", "a note about otters and item3", top_k=10)
    assert isinstance(out, IndexFailed) and out.error_type == "Inconsistent", out
    assert "rebuild" in out.reason and ps[3].id[:12] in out.reason
    g.backend.delete_rows("docs", [p.id for p in ps])
    out = g.search("docs", "otters", top_k=10)
    assert isinstance(out, IndexFailed) and out.error_type == "Inconsistent", out
    g.add("fine", ps)
    assert isinstance(g.remove("fine", [p.id for p in ps]), Removed)
    assert isinstance(g.search("fine", "otters"), IndexEmpty)


def test_a_tiny_deadline_times_out_every_op(make_guard: MakeGuard) -> None:
    g = make_guard()
    ps = corpus(5)
    g.add("docs", ps)
    for out in (
        g.search("docs", "otters", deadline_s=1e-6),
        g.add("docs", corpus(2, tag="late"), deadline_s=1e-6),
        g.remove("docs", [ps[0].id], deadline_s=1e-6),
        g.status("docs", deadline_s=1e-6),
    ):
        assert isinstance(out, IndexTimeout) and out.deadline_s == 1e-6, out
    assert g.status("docs").passages == 5  # type: ignore[union-attr]


class _SlowQueries(HashingEmbedder):
    """Embeds documents at once and queries slowly: a search that runs past its deadline."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(256)
        self.delay_s = delay_s

    def embed_query(self, text: str, granularity: Granularity) -> Vector:
        time.sleep(self.delay_s)
        return super().embed_query(text, granularity)


def test_a_search_past_its_deadline_is_a_timeout(tmp_path: Path) -> None:
    backend = ChromaBackend(
        tmp_path / "chroma",
        ChromaSettings(embedder="hashing:default"),
        embedder_factory=lambda spec: _SlowQueries(0.5),
    )
    g = Guard(backend)
    g.add("docs", corpus(5))
    out = g.search("docs", "otters", deadline_s=0.2)
    assert isinstance(out, IndexTimeout)
    # The backend's own answer (it checks the deadline after embedding) says why:
    from indexplug.deadlines import Deadline

    direct = backend.search("docs", "otters", top_k=3, deadline=Deadline.after(0.2))
    assert isinstance(direct, IndexTimeout) and "before querying Chroma" in direct.reason
    g.close()


def test_persistence_and_drop(make_guard: MakeGuard, tmp_path: Path) -> None:
    g = make_guard()
    ps = corpus(8)
    g.add("docs", ps, max_bytes=50_000_000)
    g.close()
    again = make_guard()
    st = again.status("docs")
    assert isinstance(st, IndexStatus) and st.passages == 8 and st.max_bytes == 50_000_000
    assert st.embedder == "hashing:default" and st.details["dim"] == 256
    out = again.search("docs", "otters", top_k=3)
    assert isinstance(out, Searched) and {h.passage.id for h in out.hits} <= {p.id for p in ps}
    assert again.add("docs", ps).known == 8  # type: ignore[union-attr]
    dropped = again.call_extra("drop", "docs")
    assert isinstance(dropped, IndexStatus) and not dropped.exists
    assert not (tmp_path / "chroma" / "docs").exists()
    assert isinstance(again.search("docs", "otters"), IndexEmpty)


class _Counting(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(256)
        self.embedded = 0

    def embed_documents(self, texts: Sequence[str], granularity: Granularity) -> list[Vector]:
        self.embedded += len(texts)
        return super().embed_documents(texts, granularity)

    def embed_query(self, text: str, granularity: Granularity) -> Vector:
        # queries (and the backend's warm-up query) are not passages: not counted
        return HashingEmbedder.embed_documents(self, [text], granularity)[0]


def test_embeddings_are_reused_by_passage_id(tmp_path: Path) -> None:
    counting = _Counting()
    backend = ChromaBackend(
        tmp_path / "chroma",
        ChromaSettings(embedder="hashing:default"),
        embedder_factory=lambda spec: counting,
    )
    g = Guard(backend)
    ps = corpus(30)
    g.add("one", ps)
    assert counting.embedded == 30
    g.add("two", ps)  # another index, same passages: nothing embedded again
    g.call_extra("drop", "one")
    g.add("one", ps + corpus(2, tag="new"))
    assert counting.embedded == 32
    out = g.search("two", "a note about otters and item5", top_k=1)
    assert isinstance(out, Searched) and out.hits[0].passage == ps[5]
    assert counting.embedded == 32
    counting.embedded = 0
    uncached = ChromaBackend(
        tmp_path / "c2",
        ChromaSettings(embedder="hashing:default", embed_cache=False),
        embedder_factory=lambda spec: counting,
    )
    Guard(uncached).add("three", ps)
    assert counting.embedded == 30
    g.close()


def test_threads_adding_the_same_passages_count_each_once(make_guard: MakeGuard) -> None:
    from concurrent.futures import ThreadPoolExecutor

    g = make_guard()
    ps = corpus(40)
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda i: g.add("docs", ps[i % 3 :: 2]), range(8)))
    assert all(isinstance(o, Indexed) for o in outs)
    assert sum(o.added for o in outs) == 40  # type: ignore[union-attr]
    assert g.status("docs").passages == 40  # type: ignore[union-attr]


def test_names_that_chroma_would_refuse_are_mapped(make_guard: MakeGuard) -> None:
    g = make_guard()
    for name in ("a", "x-", "0_", "z" * 64):
        assert isinstance(g.add(name, corpus(2)), Indexed), name
        assert isinstance(g.search(name, "otters"), Searched)
    assert collection_name("x-") == "indexplug.x-.0" and collection_name("ab") == "indexplug.ab"


def test_not_ready_reasons(tmp_path: Path) -> None:
    g = get_registry().backend("chroma", {"embedder": "nosuchprovider:model"}, home=tmp_path)
    r = g.readiness()
    assert not r.ready and "nosuchprovider" in (r.reason or "")
    out = g.search("docs", "otters")
    assert isinstance(out, IndexUnavailable) and "nosuchprovider" in out.reason


def test_options_are_checked_and_the_factory_connects_to_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="mdoe"):
        get_registry().backend("chroma", {"mdoe": "server"}, home=tmp_path)
    with pytest.raises(ValueError, match="mode"):
        ChromaSettings.from_options({"mode": "cloud"})
    s = ChromaSettings.from_options({"port": "8001", "ssl": "true", "embed_cache": "false"})
    assert (s.port, s.ssl, s.embed_cache, s.url) == (8001, True, False, "https://localhost:8001")
    # Connecting to nothing, proven without a clock: any connection the factory tries is
    # recorded (and refused) while it runs.
    tried: list[object] = []

    def no_connect(sock: socket.socket, address: object) -> None:
        tried.append(address)
        raise OSError("the factory tried to connect")

    with monkeypatch.context() as m:
        m.setattr(socket.socket, "connect", no_connect)
        m.setattr(socket.socket, "connect_ex", no_connect)
        g = get_registry().backend(
            "chroma",
            {"mode": "server", "host": "127.0.0.1", "port": 9, "embedder": "hashing:default"},
            home=tmp_path,
        )
    assert tried == []
    r = g.readiness()
    assert not r.ready and "127.0.0.1:9" in (r.reason or "")
    assert isinstance(g.status("docs"), IndexUnavailable)


def test_vectors_are_stored_as_given(make_guard: MakeGuard) -> None:
    g = make_guard()
    ps = corpus(3)
    g.add("docs", ps)
    backend = g.backend
    with backend._store.use("docs") as client:
        coll = backend._store.get(client, "docs")
        got = coll.get(ids=[ps[0].id], include=["embeddings"])
    want = HashingEmbedder(256).embed_documents([ps[0].text], Granularity.TEXT)[0]
    assert np.allclose(np.asarray(got["embeddings"][0]), want, atol=1e-6)
    assert coll.metadata["indexplug:embedder"] == "hashing:default"


def test_odd_passages_come_back_exactly(make_guard: MakeGuard) -> None:
    """Odd passages (1,000,000 characters, combining marks, astral characters, right-to-left
    text, odd metadata keys and values, a very long uri), each found by its own text: stored
    and returned exactly as added, and known when added again."""
    g = make_guard()
    ps = odd_passages()
    assert g.add("odd", ps).added == len(ps)  # type: ignore[union-attr]
    for p in ps:
        out = g.search("odd", p.text[:5000], top_k=1)
        assert isinstance(out, Searched) and out.hits[0].passage == p, p.text[:20]
    assert g.add("odd", ps).known == len(ps)  # type: ignore[union-attr]


def test_searched_follows_writes_of_any_instance(make_guard: MakeGuard) -> None:
    """Embedded counts are cached between writes; every instance's write forgets them."""
    reader, writer = make_guard(), make_guard()
    reader.add("docs", corpus(4))
    assert reader.search("docs", "otters").searched == 4  # type: ignore[union-attr]
    writer.add("docs", corpus(3, tag="more"))
    assert reader.search("docs", "otters").searched == 7  # type: ignore[union-attr]
    writer.remove("docs", [p.id for p in corpus(4)])
    assert reader.search("docs", "otters").searched == 3  # type: ignore[union-attr]


def test_a_cached_count_never_decides_an_answer(make_guard: MakeGuard, tmp_path: Path) -> None:
    """Writes made around indexplug (a raw chromadb client) are not seen in the count until
    it expires, but emptiness is always checked against Chroma itself."""
    g = make_guard(count_ttl_s=60)
    ps = corpus(5)
    g.add("docs", ps)
    assert g.search("docs", "otters").searched == 5  # type: ignore[union-attr]
    backend = g.backend
    with backend._store.use("docs") as client:
        backend._store.get(client, "docs").delete(ids=[p.id for p in ps])  # behind our back
    assert isinstance(g.search("docs", "otters"), IndexEmpty)
    exact = make_guard(count_ttl_s=0)
    assert isinstance(exact.search("docs", "otters"), IndexEmpty)


class _Unreachable:
    """A collection whose graph search never reaches ``hidden``: what Chroma's HNSW does with a
    vector no other node links to (stored, counted, fetched by id, never found by a query)."""

    def __init__(self, coll: object, hidden: set[str]) -> None:
        self._coll, self._hidden, self.queries = coll, hidden, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._coll, name)

    def query(self, **kw: object) -> dict[str, list[list[object]]]:
        self.queries += 1
        n = int(kw.pop("n_results"))  # type: ignore[call-overload]
        res = self._coll.query(n_results=n + len(self._hidden), **kw)  # type: ignore[attr-defined]
        keep = [i for i, pid in enumerate(res["ids"][0]) if pid not in self._hidden][:n]
        rows = ("ids", "documents", "metadatas", "distances")
        return {k: [[v[0][i] for i in keep]] if k in rows and v else v for k, v in res.items()}


def _wrap_collections(
    backend: ChromaBackend, monkeypatch: pytest.MonkeyPatch, wrap: Callable[[object], object]
) -> None:
    """Searches of ``backend`` see every collection through ``wrap`` (a fault injected)."""
    real = ChromaBackend._search_handle

    def handle(self: ChromaBackend, client: object, index: str, emb: object) -> object:
        got = real(self, client, index, emb)  # type: ignore[arg-type]
        return None if got is None else (wrap(got[0]), *got[1:])

    monkeypatch.setattr(backend, "_search_handle", handle.__get__(backend))


def _hide(backend: ChromaBackend, monkeypatch: pytest.MonkeyPatch, hidden: set[str]) -> None:
    _wrap_collections(backend, monkeypatch, lambda coll: _Unreachable(coll, hidden))


EVERY = "a note about otters and item5"
"""A query asked for all 30 passages of ``corpus(30)`` in the fault tests below."""


def _indexed(make_guard: MakeGuard) -> tuple[Guard, list[Passage], Searched]:
    """30 passages indexed, and the answer to :data:`EVERY` before any fault."""
    g = make_guard()
    ps = corpus(30)
    assert isinstance(g.add("docs", ps), Indexed)
    full = g.search("docs", EVERY, top_k=30)
    assert isinstance(full, Searched) and len(full.hits) == 30
    return g, ps, full


def _same_answer(out: object, full: Searched) -> None:
    """``out`` answers :data:`EVERY` as ``full`` did: the same passages in the same order."""
    assert isinstance(out, Searched) and out.searched == 30
    assert [h.passage for h in out.hits] == [h.passage for h in full.hits]
    assert [h.score for h in out.hits] == pytest.approx([h.score for h in full.hits], abs=1e-5)


def test_passages_the_graph_cannot_reach_are_found_by_an_exact_scan(
    make_guard: MakeGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    g, ps, full = _indexed(make_guard)
    hidden = {ps[5].id, ps[17].id}
    _hide(g.backend, monkeypatch, hidden)
    # Asked for every passage: the graph's short answer is completed, in the same order.
    _same_answer(g.search("docs", EVERY, top_k=30), full)
    # The same with a filter: 6 passages are about otters, one of them hidden.
    otters = g.search("docs", "a note about otters", top_k=10, filters={"topic": "otters"})
    assert isinstance(otters, Searched)
    assert {h.passage.id for h in otters.hits} == {
        p.id for p in ps if p.metadata["topic"] == "otters"
    }
    # Asked for fewer than stored: approximate, like HNSW (no exact scan on every search).
    few = g.search("docs", EVERY, top_k=3)
    assert isinstance(few, Searched) and len(few.hits) == 3
    assert ps[5].id not in {h.passage.id for h in few.hits}


class _Unflushed:
    """A collection whose vector index Chroma has not written yet: its ``query`` fails as a
    Chroma server's does while a first write is being flushed (a race a test cannot time)."""

    def __init__(self, coll: object) -> None:
        self._coll = coll

    def __getattr__(self, name: str) -> object:
        return getattr(self._coll, name)

    def query(self, **kwargs: object) -> dict:
        from chromadb.errors import InternalError

        raise InternalError(
            "Error executing plan: Internal error: Error creating hnsw segment reader: "
            "Nothing found on disk"
        )


def test_a_vector_index_not_yet_on_disk_is_searched_exactly(
    make_guard: MakeGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    g, ps, full = _indexed(make_guard)
    _wrap_collections(g.backend, monkeypatch, _Unflushed)
    _same_answer(g.search("docs", EVERY, top_k=30), full)
    few = g.search("docs", EVERY, top_k=3)
    assert isinstance(few, Searched) and [h.passage for h in few.hits] == [
        h.passage for h in full.hits[:3]
    ]
    otters = g.search("docs", "a note about otters", top_k=10, filters={"topic": "otters"})
    assert isinstance(otters, Searched)
    assert {h.passage.id for h in otters.hits} == {
        p.id for p in ps if p.metadata["topic"] == "otters"
    }


def test_two_instances_on_one_home_share_one_chroma_system(tmp_path: Path) -> None:
    """chromadb builds a folder's shared system without a lock: two clients created at once
    for one folder could get two systems on one SQLite file.  Both instances add at once."""
    import threading

    backends = [
        ChromaBackend(tmp_path / "c", ChromaSettings.from_options({"embedder": "hashing:default"}))
        for _ in range(4)
    ]
    guards = [Guard(b, plugin="chroma") for b in backends]
    barrier = threading.Barrier(len(guards))
    outs: list[object] = []

    def add(i: int, g: Guard) -> None:
        barrier.wait()
        outs.append(g.add("docs", corpus(10, tag=f"w{i}") + corpus(2, tag="shared")))

    threads = [threading.Thread(target=add, args=(i, g)) for i, g in enumerate(guards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(o, Indexed) for o in outs), outs
    assert sum(o.added for o in outs) == 42  # type: ignore[attr-defined]
    systems = {id(b._store._open["docs"][0]._system) for b in backends}  # type: ignore[attr-defined]
    assert len(systems) == 1
    st = guards[0].status("docs")
    assert isinstance(st, IndexStatus) and st.passages == 42
    for g in guards:
        g.close()


def test_the_model_loads_before_the_first_search_not_in_the_background(tmp_path: Path) -> None:
    """Readiness loads nothing and starts no thread (a daemon thread still inside torch at
    exit aborted the process); the guard's first search lets the backend prepare, once."""
    import threading

    from indexplug import Guard

    class Warming(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__(256)
            self.queries: list[str] = []

        def embed_query(self, text: str, granularity: Granularity) -> Vector:
            self.queries.append(text)
            return super().embed_query(text, granularity)

    emb = Warming()
    backend = ChromaBackend(
        tmp_path / "chroma",
        ChromaSettings(embedder="hashing:default"),
        embedder_factory=lambda spec: emb,
    )
    threads = set(threading.enumerate())
    assert backend.readiness().ready and backend.readiness().ready
    assert emb.queries == [] and set(threading.enumerate()) == threads
    g = Guard(backend)
    assert isinstance(g.add("w", corpus(2)), Indexed)
    emb.queries.clear()
    for _ in range(2):
        g.search("w", "alpha", top_k=1, deadline_s=30)
    assert emb.queries == ["warm up", "alpha", "alpha"]  # prepared once, before the first
    backend.close()


def test_new_collections_search_with_ef_256_unless_told(make_guard: MakeGuard) -> None:
    """Chroma's default ef_search (100) cost SciFact nDCG@10 0.637 against 0.6451 exact."""
    for options, want in (({}, 256), ({"ef_search": 100}, 100)):
        g = make_guard(**options)
        index = f"ef{want}"
        assert isinstance(g.add(index, corpus(3)), Indexed)
        with g.backend._store.use(index) as client, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # chromadb's own, on reading it
            conf = client.get_collection(collection_name(index)).configuration
        assert conf["hnsw"]["ef_search"] == want and conf["hnsw"]["space"] == "cosine"


def test_a_record_holds_its_provenance_after_its_text_and_old_records_still_read() -> None:
    """Chroma reads a record's metadata back one row per key, so the provenance rides in the
    document after the text and a record has metadata only for the typed filter fields and
    its digest (``m.*`` copies in collections made before those); records written in the two
    earlier layouts (the provenance in one ``ip.prov``
    key, before that a key per field) come back the same."""
    import json

    from indexplug_chroma import records

    for p in [*corpus(5), *odd_passages()]:
        doc, meta = records.to_record(p)
        assert (
            doc.startswith(p.text)
            and doc.count(records.SEPARATOR) == p.text.count(records.SEPARATOR) + 1
        )
        assert records.split_document(doc) == (p.text, provenance_json(p))
        # the metadata: the typed filter fields and the digest, and nothing else
        assert meta is not None and meta[fields.DIGEST_FIELD] == p.digest
        assert {k: sorted(map(repr, v)) for k, v in fields.decode(meta).items()} == {
            k: sorted({repr(v) for v in values_of(p.metadata, k)})
            for k in p.metadata
            if values_of(p.metadata, k)
        }
        old_doc, old_meta = records.to_record(p, typed=False)
        assert old_doc == doc and all(k.startswith(records.META_PREFIX) for k in old_meta or {})
        assert records.from_record(p.id, doc, meta) == p
        before = records.to_record(p, plain_document=True)
        assert before == (p.text, {records.PROV: provenance_json(p), **(meta or {})})
        assert records.from_record(p.id, *before) == p
        oldest: dict[str, object] = {
            records.SOURCE: p.source.model_dump_json(exclude_none=True),
            records.START: p.start,
            records.END: p.end,
            records.META: json.dumps(p.metadata, ensure_ascii=False),
            **(meta or {}),
        }
        if p.document_sha256:
            oldest[records.DOC] = p.document_sha256
        # the first layout had no digest: the passage comes back without one, which the
        # guard refuses to serve ("re-index it")
        assert records.from_record(p.id, p.text, oldest) == p.model_copy(update={"digest": None})
    with pytest.raises(ValueError, match="no provenance"):
        records.from_record("x" * 64, "a text someone else stored", None)
    # a cached provenance is shared, so no caller can change it: the metadata is read-only
    p = corpus(1)[0]
    a = records.from_record(p.id, *records.to_record(p))
    with pytest.raises(TypeError, match="read-only"):
        a.metadata["topic"] = "changed"
    assert records.from_record(p.id, *records.to_record(p)) == p


def test_hits_come_back_the_same_whichever_way_a_records_layout_sends_them() -> None:
    """Chroma's answer becomes hits in one pass when every record holds its provenance as
    one string (after its text, or in the earlier ``ip.prov`` key), and a record at a time
    otherwise (a record in the oldest layout, a broken one); both ways give
    the same hits, ranked 1..n after dropping non-finite distances, and a record that is not
    a passage is named."""
    import json
    import math

    from indexplug_chroma import records
    from indexplug_chroma.reads import _hits

    ps = [*corpus(4), *odd_passages()]
    docs = [records.to_record(p)[0] for p in ps]
    metas = [records.to_record(p)[1] for p in ps]
    dists = [0.1 * i for i in range(len(ps))]
    dists[1] = math.nan  # a degenerate stored vector: no similarity, dropped

    def answer(
        documents: list[str], metadatas: list[dict[str, object] | None]
    ) -> dict[str, list[list[object]]]:
        return {
            "ids": [[p.id for p in ps]],
            "documents": [documents],
            "metadatas": [metadatas],
            "distances": [dists],
        }

    kept = [p for i, p in enumerate(ps) if i != 1]
    fast = _hits(answer(docs, metas))
    assert [h.passage for h in fast] == kept
    assert [h.rank for h in fast] == list(range(1, len(kept) + 1))
    assert [h.score for h in fast] == [1.0 - d for i, d in enumerate(dists) if i != 1]
    # records of the layout before among them: the text as the document, the provenance in
    # a key (with the filterable copies beside it)
    before = [records.to_record(p, plain_document=True) for p in ps]
    mixed_docs = [before[i][0] if i % 2 else d for i, d in enumerate(docs)]
    mixed_metas: list[dict[str, object] | None] = [
        before[i][1] if i % 2 else m for i, m in enumerate(metas)
    ]
    assert _hits(answer(mixed_docs, mixed_metas)) == fast
    p0 = ps[0]
    oldest: dict[str, object] = {
        records.SOURCE: p0.source.model_dump_json(exclude_none=True),
        records.START: p0.start,
        records.END: p0.end,
        records.META: json.dumps(p0.metadata),
    }
    if p0.document_sha256:
        oldest[records.DOC] = p0.document_sha256
    no_digest = fast[0].model_copy(
        update={"passage": fast[0].passage.model_copy(update={"digest": None})}
    )
    assert _hits(answer([p0.text, *docs[1:]], [oldest, *metas[1:]])) == [
        no_digest,
        *fast[1:],
    ]
    for broken in (
        f"{ps[2].text}{records.SEPARATOR}{{not json",  # provenance that does not parse
        ps[2].text.replace(records.SEPARATOR, ""),  # no provenance at all
    ):
        with pytest.raises(ValueError, match=f"stored record {ps[2].id[:12]}"):
            _hits(answer([*docs[:2], broken, *docs[3:]], metas))


def test_plain_documents_keep_the_text_alone_in_chromas_document(make_guard: MakeGuard) -> None:
    """``plain_documents=true`` creates collections whose documents other Chroma clients read
    as plain text (the provenance in a metadata key); a collection keeps the layout it was
    created with whoever writes to it later, and both search the same."""
    from indexplug_chroma import records
    from indexplug_chroma.collection import IN_DOCUMENT, RECORDS_KEY

    ps = corpus(6)
    plain, default = make_guard(plain_documents="true"), make_guard()
    for first, then, index in ((plain, default, "plain"), (default, plain, "indoc")):
        assert isinstance(first.add(index, ps[:3]), Indexed)
        assert isinstance(then.add(index, ps[3:]), Indexed)
    for index, in_document in (("plain", False), ("indoc", True)):
        with default.backend._store.use(index) as client:
            coll = client.get_collection(collection_name(index))
            got = coll.get(include=["documents", "metadatas"])
        assert coll.metadata[RECORDS_KEY] == (IN_DOCUMENT if in_document else "metadata")
        stored = dict(zip(got["ids"], zip(got["documents"], got["metadatas"], strict=True)))
        for p in ps:
            assert stored[p.id] == records.to_record(p, plain_document=not in_document)
            assert (stored[p.id][0] == p.text) is not in_document
        for g in (plain, default):
            out = g.search(index, ps[0].text, top_k=6)
            assert isinstance(out, Searched)
            assert {h.passage.id: h.passage for h in out.hits} == {p.id: p for p in ps}
    with pytest.raises(ValueError, match="plain_documents must be true or false"):
        ChromaSettings.from_options({"plain_documents": "sometimes"})


def test_records_of_the_first_layout_have_no_digest_and_are_refused(
    make_guard: MakeGuard,
) -> None:
    """The first layout (a metadata key per field) had no place for a digest and is no longer
    written; a record still in it is refused with a reason that says to re-index, never
    served unvouched for."""
    import json

    from indexplug_chroma import records

    g = make_guard(plain_documents="true")
    ps = corpus(4)
    g.add("old", ps)
    with g.backend._store.use("old") as client:
        coll = client.get_collection(collection_name("old"))
        got = coll.get(ids=[ps[1].id], include=["embeddings"])
        p = ps[1]
        first: dict[str, object] = {
            records.SOURCE: p.source.model_dump_json(exclude_none=True),
            records.START: p.start,
            records.END: p.end,
            records.META: json.dumps(p.metadata),
            **{records.META_PREFIX + k: v for k, v in p.metadata.items()},
        }
        coll.delete(ids=[p.id])
        coll.add(ids=[p.id], embeddings=got["embeddings"], documents=[p.text], metadatas=[first])
    out = g.search("old", "a note about glaciers and item1", top_k=4)
    assert isinstance(out, IndexFailed) and out.error_type == "IntegrityError", out
    assert "no digest" in out.reason and "re-index" in out.reason
