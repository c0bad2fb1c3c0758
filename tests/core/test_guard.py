"""The guard turns every way a plugin can misbehave into the one outcome it must become."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import indexplug.guard.base as guard_base
import indexplug.guard.checks as guard_checks
import indexplug.guard.run as guard_run
import pytest
from indexplug import (
    Capabilities,
    Guard,
    Hit,
    Indexed,
    IndexEmpty,
    InvalidIndexName,
    InvalidQuery,
    InvalidRequest,
    NoMatch,
    Passage,
    Readiness,
    ScoreScale,
    Searched,
)
from indexplug.outcomes import IndexFailed, IndexTimeout, IndexUnavailable
from indexplug.passages import Source

SCALE = ScoreScale(name="test")
HOLD_BACKSTOP_S = 60.0
"""How long a held plugin waits for its test to let go: far past every deadline here."""
P1 = Passage.create("alpha beta", "mem://1")
P2 = Passage.create("beta gamma", "mem://2")


def hit(rank: int, score: float, p: Passage = P1, scale: str = "test") -> Hit:
    return Hit(rank=rank, score=score, score_scale=scale, passage=p)


class Fake:
    name = "fake"
    description = "scripted"
    score_scale = SCALE
    capabilities = Capabilities()

    def __init__(
        self,
        answer: Any = None,
        *,
        ready: Any = True,
        sleep: float = 0.0,
        hold: threading.Event | None = None,
    ) -> None:
        self.answer = answer
        self.ready = ready
        self.sleep = sleep
        self.hold = hold
        self.calls = 0
        self.answered = 0

    def readiness(self) -> Any:
        if isinstance(self.ready, Exception):
            raise self.ready
        if self.ready is True:
            return Readiness.yes()
        if self.ready is False:
            return Readiness.no("server down")
        return self.ready

    def _answer(self) -> Any:
        self.calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        if self.hold is not None:
            # held until the test lets go (the backstop only frees the thread of a test
            # that died without letting go): a plugin that has not answered yet, whatever
            # the machine's load, with no clock in the test
            self.hold.wait(HOLD_BACKSTOP_S)
        self.answered += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def search(self, index: str, query: str, **kw: Any) -> Any:
        return self._answer()

    def add(self, index: str, passages: Any, **kw: Any) -> Any:
        return self._answer()

    def remove(self, index: str, ids: Any, **kw: Any) -> Any:
        return self._answer()

    def status(self, index: str, **kw: Any) -> Any:
        return self._answer()

    def close(self) -> None:
        pass


def searched(*hits: Hit, searched: int = 5, scale: ScoreScale = SCALE) -> Searched:
    return Searched(index="i", hits=list(hits), searched=searched, scale=scale)


@pytest.mark.parametrize(
    "answer, reason",
    [
        ([P1], "returned list"),
        (None, "returned NoneType"),
        ("ok", "returned str"),
        (Indexed(index="i", added=0, known=0), "returned Indexed"),
        (searched(), "no hits"),
        (searched(hit(2, 1.0)), "ranks must be 1..n"),
        (searched(hit(1, 1.0), hit(2, 2.0, P2)), "out of order"),
        (searched(hit(1, float("nan"))), "non-finite"),
        (searched(hit(1, 1.0, scale="other")), "on scale 'other'"),
        (searched(hit(1, 1.0), scale=ScoreScale(name="other")), "differs from declared"),
        (searched(hit(1, 1.0), hit(2, 0.5, P2), searched=1), "fewer than"),
        (NoMatch(index="other", searched=1), "answered for index 'other'"),
    ],
)
def test_contract_violations_become_index_failed(answer: Any, reason: str) -> None:
    out = Guard(Fake(answer)).search("i", "q", top_k=5)
    assert isinstance(out, IndexFailed)
    assert "contract violation" in out.reason and reason in out.reason
    assert out.backend == "fake"


def test_more_hits_than_top_k_is_a_violation() -> None:
    out = Guard(Fake(searched(hit(1, 2.0), hit(2, 1.0, P2)))).search("i", "q", top_k=1)
    assert isinstance(out, IndexFailed) and "top_k=1" in out.reason


def test_a_raising_plugin_becomes_failed_naming_plugin_and_error() -> None:
    out = Guard(Fake(RuntimeError("disk on fire")), plugin="fakeplug").search("i", "q")
    assert isinstance(out, IndexFailed)
    assert "fakeplug" in out.reason and "RuntimeError: disk on fire" in out.reason


def test_tampered_passages_are_not_served() -> None:
    bad = Passage.from_stored(id=P1.id, text="evil", source={"uri": "mem://1"}, start=0, end=10)
    out = Guard(
        Fake(
            searched(
                Hit.model_construct(
                    rank=1, score=1.0, score_scale="test", passage=bad, untrusted=True
                )
            )
        )
    ).search("i", "q")
    assert isinstance(out, IndexFailed) and out.error_type == "IntegrityError"


def test_overrunning_the_deadline_becomes_timeout_and_releases_the_caller() -> None:
    hold = threading.Event()
    fake = Fake(NoMatch(index="i", searched=1), hold=hold)
    try:
        out = Guard(fake).search("i", "q", deadline_s=0.1)
        assert isinstance(out, IndexTimeout)
        assert out.deadline_s == 0.1
        # released while the plugin still has not answered: it answers only when let go
        assert fake.answered == 0
    finally:
        hold.set()


@pytest.mark.parametrize("ready", [False, Readiness(ready=False), RuntimeError("boom"), "yes"])
def test_not_ready_is_unavailable_without_calling(ready: Any) -> None:
    fake = Fake(NoMatch(index="i", searched=1), ready=ready)
    g = Guard(fake)
    for out in (g.search("i", "q"), g.add("i", [P1]), g.remove("i", ["x"]), g.status("i")):
        assert isinstance(out, IndexUnavailable) and out.reason
    assert fake.calls == 0


def test_good_answers_pass_and_are_stamped() -> None:
    out = Guard(Fake(searched(hit(1, 2.0), hit(2, 1.0, P2)))).search("i", "q", deadline_s=30)
    assert isinstance(out, Searched) and out.backend == "fake" and out.deadline_s == 30
    assert out.elapsed_ms is not None
    assert isinstance(Guard(Fake(IndexEmpty(index="i"))).search("i", "q"), IndexEmpty)


def test_add_counts_must_add_up_and_duplicates_in_a_batch_are_known() -> None:
    lie = Guard(Fake(Indexed(index="i", added=5, known=0))).add("i", [P1, P2])
    assert isinstance(lie, IndexFailed) and "2 distinct" in lie.reason
    ok = Guard(Fake(Indexed(index="i", added=1, known=0))).add("i", [P1, P1])
    assert isinstance(ok, Indexed) and ok.known == 1


@pytest.mark.parametrize("top_k", [0, -1, 10**6, 2.5, True])
def test_bad_top_k_is_a_typed_error(top_k: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        Guard(Fake()).search("i", "q", top_k=top_k)
    assert info.value.field == "top_k"


@pytest.mark.parametrize("query", ["", "   ", "a\x00b", "x" * 100_001])
def test_bad_queries_are_typed_errors(query: str) -> None:
    with pytest.raises(InvalidQuery):
        Guard(Fake()).search("i", query)


def test_bad_index_names_never_reach_the_plugin() -> None:
    fake = Fake()
    with pytest.raises(InvalidIndexName):
        Guard(fake).search("../../etc/passwd", "q")
    assert fake.calls == 0


def test_filters_need_the_capability() -> None:
    with pytest.raises(InvalidRequest, match="filters"):
        Guard(Fake()).search("i", "q", filters={"a": 1})


def test_oversize_writes_are_refused() -> None:
    from indexplug.guard import MAX_WRITE

    with pytest.raises(InvalidRequest, match="over the limit"):
        Guard(Fake()).add("i", [P1] * (MAX_WRITE + 1))


class Cooperative(Fake):
    """A plugin that claims to stop by its deadlines."""

    capabilities = Capabilities(cooperative_deadlines=True)

    def _answer(self) -> Any:
        self.thread = threading.current_thread()
        return super()._answer()


class Pooled(Fake):
    """A plugin that does not claim cooperative deadlines."""

    def _answer(self) -> Any:
        self.thread = threading.current_thread()
        return super()._answer()


@pytest.mark.parametrize("plugin", [Pooled, Cooperative], ids=["pooled", "claims-cooperative"])
def test_every_plugin_runs_on_a_worker_thread(plugin: type[Fake]) -> None:
    """Only a thread the caller does not wait on can be abandoned at the deadline, so no
    claim puts a plugin on the caller's thread."""
    fake = plugin(searched(hit(1, 2.0)))
    out = Guard(fake).search("i", "q", deadline_s=30)
    assert isinstance(out, Searched) and out.deadline_s == 30
    assert fake.thread is not threading.current_thread()  # type: ignore[attr-defined]
    boom = plugin(RuntimeError("disk on fire"))
    failed = Guard(boom).search("i", "q", deadline_s=30)
    assert isinstance(failed, IndexFailed) and "disk on fire" in failed.reason


@pytest.mark.parametrize("plugin", [Pooled, Cooperative], ids=["pooled", "claims-cooperative"])
def test_a_late_answer_is_a_timeout_whatever_it_says(
    plugin: type[Fake], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin that ignores its deadline and answers NO_MATCH after it does not pass that
    off as "no evidence"; and the caller has the timeout at the deadline, not when the plugin
    finally answers."""
    # the caller waits long enough to collect the late NO_MATCH (it always answers after
    # its deadline: it sleeps past it), so the guard, not the clock, must call it a timeout
    monkeypatch.setattr(guard_run, "SETTLE_S", 60.0)
    late = plugin(NoMatch(index="i", searched=1), sleep=0.1)
    out = Guard(late).search("i", "q", deadline_s=0.05)
    assert isinstance(out, IndexTimeout) and out.deadline_s == 0.05
    assert late.answered == 1  # collected, not abandoned
    monkeypatch.undo()
    hold = threading.Event()
    slow = plugin(NoMatch(index="i", searched=1), hold=hold)
    try:
        out = Guard(slow).search("i", "q", deadline_s=0.2)
        assert isinstance(out, IndexTimeout)
        assert slow.answered == 0  # the timeout came while the plugin still held on
    finally:
        hold.set()


class Stuck(Pooled):
    """A plugin whose calls never return until ``release`` is set."""

    name = "stuck"

    def __init__(self) -> None:
        self.release = threading.Event()
        super().__init__(searched(hit(1, 2.0)), hold=self.release)


def test_a_backend_that_never_answers_holds_up_no_other_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each backend has its own threads: one whose calls never return fills only its own, so
    another backend's caller gets its answer, not a timeout spent waiting for a thread."""
    import indexplug.guard.base as guard_mod

    monkeypatch.setattr(guard_mod, "POOL_WORKERS", 2)
    monkeypatch.setattr(guard_mod, "_POOLS", {})
    stuck = Stuck()
    try:
        g = Guard(stuck)
        for _ in range(3):  # more calls than its threads: every one a timeout at its deadline
            assert isinstance(g.search("i", "q", deadline_s=0.05), IndexTimeout)
        assert stuck.answered == 0  # each timeout came while the stuck calls still held on
        healthy = Pooled(searched(hit(1, 2.0)))
        # a deadline no healthy call misses, however loaded the machine: queued behind the
        # stuck threads (held until the end of the test) it would time out instead
        out = Guard(healthy).search("i", "q", deadline_s=30)
        assert isinstance(out, Searched) and healthy.calls == 1
        assert healthy.thread.name.startswith("indexplug-fake")
    finally:
        stuck.release.set()


def test_a_late_answer_finished_after_the_deadline_is_a_timeout_even_if_collected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An answer the plugin gives after its deadline, while the caller is still waiting for
    the guard's checks, is a timeout too (decided by when the plugin answered)."""
    # the caller waits past the deadline long enough to collect the answer, however loaded
    # the machine: the guard must judge it by when the plugin gave it (always after the
    # deadline: the plugin sleeps past it)
    monkeypatch.setattr(guard_run, "SETTLE_S", 60.0)
    late = Pooled(searched(hit(1, 2.0)), sleep=0.06)
    out = Guard(late).search("i", "q", deadline_s=0.05)
    assert isinstance(out, IndexTimeout)
    assert late.answered == 1  # collected, not abandoned


def test_checked_passages_are_remembered_by_content_and_handed_out_as_the_guards_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guard remembers the passages it checked, by digest: an equal passage is not
    hashed again, and comes back as the guard's own copy, never the plugin's object.  A
    passage differing in any field is hashed, and refused when altered."""
    hashed: list[str] = []
    real = guard_checks.passage_id

    def counting(text: str, uri: str, start: int, end: int, key: str | None = None) -> str:
        hashed.append(text)
        return real(text, uri, start, end, key)

    monkeypatch.setattr(guard_checks, "passage_id", counting)
    fake = Fake(searched(hit(1, 2.0)))
    guard = Guard(fake)
    first = guard.search("i", "q")
    assert isinstance(first, Searched) and hashed == [P1.text]
    assert first.hits[0].passage is not P1 and first.hits[0].passage == P1
    again = guard.search("i", "q")
    assert isinstance(again, Searched) and hashed == [P1.text]  # remembered
    assert again.hits[0].passage is first.hits[0].passage  # the guard's copy, shared
    fields = {
        "id": P1.id,
        "text": P1.text,
        "source": P1.source,
        "start": P1.start,
        "end": P1.end,
        "digest": P1.digest,
    }
    same_length = P1.text[:-1] + ("?" if P1.text[-1] != "?" else "!")
    for change in (
        {"text": P1.text + "!"},
        {"text": same_length},
        {"start": P1.start + 1},
        {"end": P1.end + 1},
        {"metadata": {"trusted": True}},
        {"source": Source(uri=P1.source.uri, licence="CC0")},
        {"source": Source(uri=P1.source.uri, provenance="forged")},
        {"document_sha256": "0" * 64},
        {"digest": None},
    ):
        bad = Passage.from_stored(**{**fields, **change})  # type: ignore[arg-type]
        fake.answer = searched(
            Hit.model_construct(rank=1, score=1.0, score_scale="test", passage=bad)
        )
        out = guard.search("i", "q")
        assert isinstance(out, IndexFailed) and out.error_type == "IntegrityError", change


def test_a_remembered_passage_is_not_matched_by_values_of_a_subclass() -> None:
    """A passage equal to one checked before, but with a source value of a ``str`` or
    ``datetime`` subclass (equal to the checked value, able to answer differently later), is
    not the checked passage: it is refused, never matched to the guard's copy."""

    class Text(str):
        pass

    class When(datetime):
        pass

    dated = Passage.create(
        "dated text",
        "file:///dated.txt",
        source=Source(uri="file:///dated.txt", retrieved_at=datetime(2024, 1, 2, tzinfo=UTC)),
    )
    fake = Fake()
    guard = Guard(fake)
    for p in (P1, dated):
        fake.answer = searched(hit(1, 2.0, p))
        assert isinstance(guard.search("i", "q"), Searched)
    for p, sly in (
        (P1, {"uri": Text(P1.source.uri)}),
        (dated, {"retrieved_at": When(2024, 1, 2, tzinfo=UTC)}),
    ):
        source = Source.model_construct(**{**p.source.__dict__, **sly})
        assert source == p.source
        bad = Passage.model_construct(**{**p.__dict__, "source": source})
        fake.answer = searched(
            Hit.model_construct(rank=1, score=1.0, score_scale="test", passage=bad)
        )
        assert isinstance(guard.search("i", "q"), IndexFailed), sly


def test_the_guards_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard_checks, "CHECKED_PASSAGES", 8)
    many = [Passage.create(f"text {n}", "file:///many.txt") for n in range(20)]
    fake = Fake()
    guard = Guard(fake)
    for p in many:
        fake.answer = searched(hit(1, 1.0, p))
        assert isinstance(guard.search("i", "q"), Searched)
    assert 0 < len(guard._checked) <= 8


def test_an_outage_makes_the_guard_ask_for_readiness_again() -> None:
    fake = Pooled(IndexUnavailable(index="i", backend="fake", reason="server down"))
    guard = Guard(fake)
    assert isinstance(guard.search("i", "q", deadline_s=30), IndexUnavailable)
    asked = fake.calls
    fake.answer = NoMatch(index="i", searched=1)
    fake.ready = False  # asked again at once, not trusted for READY_TTL_S
    assert isinstance(guard.search("i", "q", deadline_s=30), IndexUnavailable)
    assert fake.calls == asked


@pytest.mark.parametrize("plugin", [Pooled, Cooperative], ids=["pooled", "inline"])
def test_a_plugin_raising_timeout_error_is_a_timeout(plugin: type[Fake]) -> None:
    out = Guard(plugin(TimeoutError("read timed out"))).search("i", "q", deadline_s=30)
    assert isinstance(out, IndexTimeout) and out.deadline_s == 30


class Preparing(Fake):
    """A backend with ``prepare()``: it records when loading ended and which deadline the
    search got."""

    def __init__(self, answer: Any, *, fail: bool = False, hold: threading.Event | None = None):
        super().__init__(answer)
        self.prepared = 0
        self.loaded_at = 0.0
        self.fail = fail
        self.loading = hold
        self.deadlines: list[Any] = []

    def prepare(self) -> None:
        self.prepared += 1
        if self.loading is not None:
            self.loading.wait(10)
        self.loaded_at = time.monotonic()
        if self.fail:
            raise RuntimeError("model missing")

    def search(self, index: str, query: str, **kw: Any) -> Any:
        self.deadlines.append(kw["deadline"])
        return self._answer()


def test_prepare_runs_once_before_the_first_deadline_starts() -> None:
    fake = Preparing(searched(hit(1, 1.0)))
    g = Guard(fake)
    assert type(g.search("i", "alpha", top_k=1, deadline_s=5)) is Searched
    assert type(g.search("i", "alpha", top_k=1, deadline_s=5)) is Searched
    assert fake.prepared == 1
    first = fake.deadlines[0]
    # the deadline was made after loading ended: its whole allowance was left for the search
    assert first.at - first.seconds >= fake.loaded_at


def test_async_search_prepares_too() -> None:
    import asyncio

    fake = Preparing(searched(hit(1, 1.0)))
    g = Guard(fake)
    out = asyncio.run(g.asearch("i", "alpha", top_k=1, deadline_s=5))
    assert type(out) is Searched and fake.prepared == 1
    assert fake.deadlines[0].at - fake.deadlines[0].seconds >= fake.loaded_at


def test_a_failing_prepare_leaves_the_op_to_answer() -> None:
    fake = Preparing(searched(hit(1, 1.0)), fail=True)
    g = Guard(fake)
    assert type(g.search("i", "alpha", top_k=1, deadline_s=5)) is Searched
    assert fake.prepared == 1


def test_a_prepare_that_does_not_finish_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard_base, "PREPARE_S", 0.05)
    hold = threading.Event()
    fake = Preparing(searched(hit(1, 1.0)), hold=hold)
    g = Guard(fake)
    try:
        assert type(g.search("i", "alpha", top_k=1, deadline_s=5)) is Searched
        assert fake.loaded_at == 0.0  # the search did not wait for the load to end
    finally:
        hold.set()
