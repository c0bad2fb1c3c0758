"""The RAGatouille engine.

Tests marked ``ragatouille`` need the real libraries (``tox -e ragatouille``): the conformance
kit, persistence across processes, incremental adds, removals, rerank and explain, all over the
local MiniLM checkpoint (``checkpoint=minilm``, built once per machine under
``${INDEXPLUG_CACHE:-~/.cache/indexplug}``).  The others run anywhere: what the backend answers
when RAGatouille is missing or broken (never a silent fallback to the native engine).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus
from indexplug import Guard, get_registry
from indexplug.outcomes import (
    Got,
    Indexed,
    IndexEmpty,
    IndexStatus,
    IndexUnavailable,
    Removed,
    Scanned,
    Searched,
)
from indexplug.testing import (
    BackendConformance,
    BackendFactory,
    ConcurrentWritersConformance,
    DeletionConformance,
    DropConformance,
    FiltersConformance,
    GetConformance,
    IndexesConformance,
    KeysConformance,
    KitSettings,
    MultiprocessWritersConformance,
    OperatorFiltersConformance,
    PersistenceConformance,
    ScanConformance,
    SeparateRecordsConformance,
)
from indexplug_colbert import ColbertBackend, Explanation
from indexplug_colbert.engines import ragatouille as rag_engine
from indexplug_colbert.engines.base import EngineNotInstalled
from indexplug_colbert.settings import IndexFacts

Make = Callable[..., Guard]
OPTIONS = {"engine": "ragatouille", "checkpoint": "minilm"}
real = pytest.mark.ragatouille


# ---------------------------------------------------------------------------------------------
# without the libraries: not ready, never a fallback


def _every_op(g: Guard, index: str) -> list[Any]:
    ps = corpus(2, "new")
    return [
        g.search(index, "alpha"),
        g.add(index, ps),
        g.remove(index, [ps[0].id]),
        g.status(index),
        g.call_extra("rerank", index, query="alpha", passages=ps),
        g.call_extra("explain", index, query="alpha", passage_id=ps[0].id),
        g.call_extra("rebuild", index),
    ]


def _ragatouille_built(home: Path, name: str) -> None:
    """An index the RAGatouille engine built (its facts), as another machine would leave it."""
    IndexFacts(engine="ragatouille", embedder="colbert-checkpoint:x@0", dim=128).write(home / name)


def test_missing_ragatouille_is_not_ready_and_never_falls_back(
    make: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rag_engine, "_installed", lambda: False)
    home = tmp_path / "home"
    make(home).add("native-built", corpus(3))
    _ragatouille_built(home, "rag-built")
    g = make(home, **OPTIONS)
    r = g.readiness()
    assert not r.ready and "ragatouille engine is not installed" in (r.reason or "")
    assert "indexplug-colbert[ragatouille]" in (r.reason or "")
    for index in ("rag-built", "native-built", "new"):
        for out in _every_op(g, index):
            assert isinstance(out, IndexUnavailable), out
            assert "ragatouille engine is not installed" in out.reason
    # Even a caller that accepts the fallback never gets an index RAGatouille built answered by
    # the native engine.
    fb = make(home, fallback="native", **OPTIONS)
    for out in _every_op(fb, "rag-built"):
        assert isinstance(out, IndexUnavailable), out
        assert "cannot serve an index another engine built" in out.reason
    assert make(home).status("native-built").passages == 3  # type: ignore[union-attr]


def test_broken_ragatouille_is_not_ready_with_the_reason(
    make: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed but failing to import (a broken pin): not ready, that reason, every op."""
    monkeypatch.setattr(rag_engine, "_installed", lambda: True)

    def broken() -> Any:
        raise EngineNotInstalled(
            "the ragatouille engine cannot load its libraries (ImportError: boom); install it"
        )

    monkeypatch.setattr(rag_engine, "_libs", broken)
    _ragatouille_built(tmp_path / "home", "rag-built")
    g = make(tmp_path / "home", **OPTIONS)
    r = g.readiness()
    assert not r.ready and "boom" in (r.reason or "")
    for out in _every_op(g, "rag-built"):
        assert isinstance(out, IndexUnavailable), out
        assert "boom" in out.reason


@real
def test_an_unknown_checkpoint_is_not_ready(make: Make) -> None:
    g = make(engine="ragatouille", checkpoint="no-such-org/no-such-colbert")
    r = g.readiness()
    assert not r.ready and "no-such-org/no-such-colbert" in (r.reason or "")
    assert isinstance(g.search("x", "alpha"), IndexUnavailable)


def test_unknown_engine_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nprobe"):
        rag_engine.RagatouilleSettings.from_options({"nprobe": 2})


# ---------------------------------------------------------------------------------------------
# with the libraries


class TestColbertRagatouilleConformance(
    BackendConformance,
    DeletionConformance,
    DropConformance,
    FiltersConformance,
    GetConformance,
    IndexesConformance,
    KeysConformance,
    OperatorFiltersConformance,
    PersistenceConformance,
    ScanConformance,
    ConcurrentWritersConformance,
    MultiprocessWritersConformance,
    SeparateRecordsConformance,
):
    """The kit, sized for an engine whose every add below 5,000 passages is a full PLAID build
    (RAGatouille's rule): fewer concurrent batches and a smaller scale check than the defaults,
    the same rules."""

    pytestmark = real
    conformance_settings = KitSettings(
        op_deadline_s=900.0,
        threads=2,
        batches_per_thread=2,
        batch_size=3,
        processes=2,
        process_timeout_s=1800.0,
        scale_passages=400,
        scale_batch=200,
        scale_add_s=1200.0,
        scale_search_s=60.0,
    )

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Guard]:
        guard = Guard(ColbertBackend(tmp_path / "home", OPTIONS, get_registry().embedder))
        yield guard
        guard.close()

    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return BackendFactory("colbert", str(tmp_path / "home"), OPTIONS)


class Slow:
    """A guard whose ops get a deadline fit for full PLAID builds on a slow CPU (the guard's
    default of 10 s is for ordinary ops)."""

    DEADLINE = 900.0

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.backend = guard.backend

    def __getattr__(self, op: str) -> Callable[..., Any]:
        fn = getattr(self.guard, op)

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("deadline_s", self.DEADLINE)
            return fn(*args, **kwargs)

        return call


@pytest.fixture
def rmake(make: Make) -> Callable[..., Slow]:
    """``rmake(home=None, **options)``: a RAGatouille-engine backend (local checkpoint)."""

    def factory(home: Path | None = None, **options: Any) -> Slow:
        return Slow(make(home, **{**OPTIONS, **options}))

    return factory


def _kit_like(n: int) -> list[Any]:
    from indexplug.testing.checks import corpus as kit_corpus

    return kit_corpus()[:n]


@real
def test_persists_and_reopens_in_another_process(
    rmake: Callable[..., Slow], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    g = rmake(home)
    ps = _kit_like(12)
    assert isinstance(g.add("docs", ps), Indexed)
    here = g.search("docs", "violin strings", top_k=3)
    assert isinstance(here, Searched) and here.hits[0].passage.id == ps[5].id
    st = g.status("docs")
    assert isinstance(st, IndexStatus) and st.details["engine"] == "ragatouille"
    plaid = Path(st.details["plaid"])
    assert (plaid / "metadata.json").is_file() and (plaid / "ivf.pid.pt").is_file()
    assert str(plaid).startswith(str(home / "docs" / "ragatouille"))
    code = (
        "import json, sys\n"
        "from indexplug import Guard, get_registry\n"
        "from indexplug_colbert import ColbertBackend\n"
        f"g = Guard(ColbertBackend({str(home)!r}, {OPTIONS!r}, get_registry().embedder))\n"
        "out = g.search('docs', 'violin strings', top_k=3, deadline_s=900)\n"
        "print(json.dumps([[h.passage.model_dump_json(), h.score] for h in out.hits]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    there = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [p for p, _ in there] == [h.passage.model_dump_json() for h in here.hits]
    assert [s for _, s in there] == pytest.approx([h.score for h in here.hits], abs=1e-4)


@real
def test_remove_tombstones_and_rebuild_compacts(rmake: Callable[..., Slow]) -> None:
    g = rmake()
    ps = _kit_like(12)
    g.add("docs", ps)
    out = g.remove("docs", [ps[0].id, ps[5].id])
    assert isinstance(out, Removed) and out.removed == 2
    st = g.status("docs")
    assert isinstance(st, IndexStatus) and st.passages == 10
    assert st.details["tombstoned"] == 2
    for q in ("fox", "violin strings", ps[5].text):
        found = g.search("docs", q, top_k=50)
        assert isinstance(found, Searched)
        ids = [h.passage.id for h in found.hits]
        assert ps[0].id not in ids and ps[5].id not in ids and len(ids) == 10
    rebuilt = g.call_extra("rebuild", "docs")
    assert isinstance(rebuilt, IndexStatus) and rebuilt.passages == 10
    assert rebuilt.details["tombstoned"] == 0 and rebuilt.details["pids"] < 14
    found = g.search("docs", "glaciers valleys", top_k=1)
    assert isinstance(found, Searched) and found.hits[0].passage.id == ps[7].id
    assert isinstance(g.remove("docs", [p.id for p in ps]), Removed)
    assert isinstance(g.search("docs", "fox"), IndexEmpty)
    assert isinstance(g.add("docs", [ps[0]]), Indexed)
    again = g.search("docs", "fox")
    assert isinstance(again, Searched) and [h.passage.id for h in again.hits] == [ps[0].id]


@real
def test_tiny_collections_index(rmake: Callable[..., Slow]) -> None:
    """One word is far below ColBERT's minimum for training its compression; fillers fix it
    and are never returned."""
    from indexplug import Passage

    g = rmake()
    one = Passage.create("hello", "mem://tiny/0")
    assert isinstance(g.add("tiny", [one]), Indexed)
    out = g.search("tiny", "hello", top_k=10)
    assert isinstance(out, Searched) and [h.passage.id for h in out.hits] == [one.id]
    assert g.status("tiny").details["fillers"] == 2  # type: ignore[union-attr]


@real
def test_rerank_and_explain(rmake: Callable[..., Slow]) -> None:
    g = rmake()
    ps = _kit_like(12)
    g.add("docs", ps)
    rr = g.call_extra("rerank", "docs", query="violin strings", passages=ps[:6])
    assert isinstance(rr, Searched) and len(rr.hits) == 6
    assert rr.hits[0].passage.id == ps[5].id
    ex = g.call_extra("explain", "docs", query="violin strings", passage_id=ps[5].id)
    assert isinstance(ex, Explanation) and len(ex.matches) == 32
    # Both encode the passage afresh (exact vectors), but rerank pads and truncates its batch
    # its own way: close, not equal.
    assert ex.score == pytest.approx(rr.hits[0].score, rel=0.05)
    texts = {m.passage_text for m in ex.matches}
    assert "violin" in texts and "strings" in texts


@real
def test_get_scan_keys_and_filters(rmake: Callable[..., Slow]) -> None:
    """The data interface on this engine: get and scan from its records, a keyed upsert in
    one generation (and by tombstones when nothing is new), filters ranked before top_k."""
    from indexplug import Passage

    g = rmake()
    ps = [
        Passage.create(p.text, p.source.uri, metadata={"n": i, "tags": ["odd"] if i % 2 else None})
        for i, p in enumerate(_kit_like(12))
    ]
    doc = [Passage.create(f"violin strings part {i}", f"mem://doc/{i}", key="D") for i in range(3)]
    assert isinstance(g.add("docs", ps + doc), Indexed)
    got = g.get("docs", [ps[0].id, "f" * 64], keys=["D", "none"])
    assert isinstance(got, Got) and {p.id for p in got.passages} == {ps[0].id, *(p.id for p in doc)}
    assert got.missing_ids == ["f" * 64] and got.missing_keys == ["none"]
    page = g.scan("docs", filters={"n": {"$gte": 6}}, limit=4)
    assert isinstance(page, Scanned) and len(page.passages) == 4 and page.next_after
    rest = g.scan("docs", filters={"n": {"$gte": 6}}, after=page.next_after, limit=10)
    assert isinstance(rest, Scanned) and rest.next_after is None
    ids = [p.id for p in page.passages + rest.passages]
    assert ids == sorted(ids) and set(ids) == {p.id for p in ps[6:]}
    # the best matches for "violin strings" fail the filter: still top_k passing hits
    found = g.search("docs", "violin strings", top_k=3, filters={"tags": "odd"})
    assert isinstance(found, Searched) and len(found.hits) == 3
    assert all(h.passage.metadata["tags"] == ["odd"] for h in found.hits)
    out = g.add("docs", [doc[0], Passage.create("cello bow", "mem://doc/new", key="D")])
    assert isinstance(out, Indexed) and (out.added, out.known, out.replaced) == (1, 1, 2)
    out = g.add("docs", [doc[0]])  # nothing new: the rest of D tombstoned
    assert isinstance(out, Indexed) and (out.added, out.replaced) == (0, 1)
    got = g.get("docs", [], keys=["D"])
    assert isinstance(got, Got) and [p.id for p in got.passages] == [doc[0].id]
    listed = g.indexes()
    assert [(i.name, i.passages) for i in listed.indexes] == [("docs", 13)]  # type: ignore[union-attr]
