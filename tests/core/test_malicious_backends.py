"""Backends written to get past the guard: each must fail closed.

Every way a plugin might pass unchecked hits, answer late, share or change passages after the
guard saw them, or return foreign types answers ``INDEX_FAILED`` (or ``INDEX_TIMEOUT`` for the
late ones), and nothing it keeps or changes afterwards reaches the caller.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from indexplug import Capabilities, Guard, Hit, NoMatch, Passage, Readiness, ScoreScale, Searched
from indexplug.errors import InvalidRequest
from indexplug.outcomes import (
    Explained,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    Neighbours,
    TokenMatch,
)
from indexplug.passages import Metadata, Source

SCALE = ScoreScale(name="test")
P1 = Passage.create("alpha beta", "mem://1", metadata={"topic": "otters"})
P2 = Passage.create("beta gamma", "mem://2")


class Scripted:
    """Answers whatever ``answer`` makes of the call (a value, or a callable of the index)."""

    name = "scripted"
    description = "a backend that answers what the test says"
    score_scale = SCALE
    capabilities = Capabilities(cooperative_deadlines=True)

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def _out(self, index: str) -> Any:
        return self.answer(index) if callable(self.answer) else self.answer

    def search(self, index: str, query: str, **_: Any) -> Any:
        return self._out(index)

    def add(self, index: str, passages: Any, **_: Any) -> Any:
        return self._out(index)

    def remove(self, index: str, ids: Any, **_: Any) -> Any:
        return self._out(index)

    def status(self, index: str, **_: Any) -> Any:
        return self._out(index)

    def close(self) -> None:
        pass


def built(hits: list[Any], *, searched: int = 5, index: str = "i") -> Searched:
    """An answer built the unvalidated way, so it can hold anything."""
    return Searched.from_stored(
        index=index, backend="scripted", hits=hits, searched=searched, scale=SCALE
    )


def raw_hit(rank: Any = 1, score: Any = 1.0, passage: Any = P1, scale: Any = "test") -> Hit:
    return Hit.model_construct(
        rank=rank, score=score, score_scale=scale, passage=passage, untrusted=True
    )


def search(answer: Any, **kw: Any) -> Any:
    return Guard(Scripted(answer)).search("i", "q", **kw)


def refused(out: Any, error_type: str = "ContractViolation") -> bool:
    return isinstance(out, IndexFailed) and out.error_type == error_type


# -- unchecked hits ----------------------------------------------------------------------


class HitList(list):  # type: ignore[type-arg]
    """A list that claims to have been checked already (the removed shortcut's shape)."""

    checked = True


class SneakyHit(Hit):
    @property
    def passage(self) -> Passage:  # type: ignore[override]
        return P2


class SneakyPassage(Passage):
    pass


class LyingText(str):
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


class LyingFloat(float):
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param([raw_hit()], id="a bare list"),
        pytest.param(None, id="None"),
        pytest.param({"hits": []}, id="a dict"),
        pytest.param(built(HitList([raw_hit()])), id="a list subclass claiming checked"),
        pytest.param(built(["a bare str"]), id="a str for a hit"),
        pytest.param(built([raw_hit(rank=7)]), id="a hit ranked 7"),
        pytest.param(built([raw_hit(rank=True)]), id="a bool rank"),
        pytest.param(built([raw_hit(score="1.0")]), id="a str score"),
        pytest.param(built([raw_hit(score=float("nan"))]), id="a NaN score"),
        pytest.param(built([raw_hit(scale="other")]), id="another scale"),
        pytest.param(built([raw_hit(), raw_hit(rank=2, score=2.0)]), id="scores out of order"),
        pytest.param(built([raw_hit(passage="text")]), id="a str passage"),
        pytest.param(built([SneakyHit.model_construct(**raw_hit().__dict__)]), id="a Hit subclass"),
        pytest.param(
            built([raw_hit(passage=SneakyPassage.model_construct(**P1.__dict__))]),
            id="a Passage subclass",
        ),
        pytest.param(built([raw_hit()], searched=0), id="searched fewer than the hits"),
        pytest.param(built([raw_hit()], searched=True), id="a bool searched"),
        pytest.param(built([]), id="an empty SEARCHED"),
        pytest.param(built([raw_hit()], index="other"), id="answered for another index"),
        pytest.param(
            type("Sub", (Searched,), {})(index="i", hits=[raw_hit()], searched=5, scale=SCALE),
            id="a Searched subclass",
        ),
        pytest.param(
            NoMatch.model_construct(index="i", backend="", searched="x"), id="a malformed NoMatch"
        ),
    ],
)
def test_foreign_answers_fail_closed(answer: Any) -> None:
    out = search(answer, top_k=5)
    assert refused(out), out


def test_a_text_that_lies_about_equality_is_refused() -> None:
    liar = Passage.model_construct(**{**P1.__dict__, "text": LyingText("evil")})
    assert refused(search(built([raw_hit(passage=liar)])))
    meta = Metadata({"topic": LyingFloat(1.0)})
    odd = Passage.model_construct(**{**P1.__dict__, "metadata": meta})
    assert refused(search(built([raw_hit(passage=odd)])))


@pytest.mark.parametrize(
    "change",
    [
        {"text": "evil"},
        {"metadata": Metadata({"topic": "trusted"})},
        {"source": Source(uri="mem://1", licence="CC0")},
        {"source": Source(uri="mem://1", provenance="forged")},
        {"start": 1},
        {"digest": None},
        {"digest": "0" * 64},
    ],
)
def test_altered_passages_are_integrity_failures(change: dict[str, Any]) -> None:
    bad = Passage.model_construct(**{**P1.__dict__, **change})
    assert refused(search(built([raw_hit(passage=bad)])), "IntegrityError")


# -- late answers ------------------------------------------------------------------------


def test_a_late_answer_is_a_timeout_even_when_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller waits long enough to collect an answer given after the deadline (the plugin
    sleeps past it), so the guard, not the clock, must call it a timeout."""
    import indexplug.guard.run as guard_module

    monkeypatch.setattr(guard_module, "SETTLE_S", 60.0)
    answered: list[bool] = []

    def late(index: str) -> Any:
        time.sleep(0.08)
        answered.append(True)
        return NoMatch(index=index, searched=3)

    out = search(late, deadline_s=0.05)
    assert isinstance(out, IndexTimeout), out
    assert answered == [True]


def test_a_plugin_that_never_answers_releases_the_caller_at_its_deadline() -> None:
    """The timeout comes while the plugin still holds on (it answers only when the test lets
    go, with a backstop far past the deadline), so no clock is needed to prove it."""
    hold = threading.Event()
    answered: list[bool] = []

    def stuck(index: str) -> Any:
        hold.wait(60)
        answered.append(True)
        return NoMatch(index=index, searched=3)

    try:
        out = search(stuck, deadline_s=0.05)
        assert isinstance(out, IndexTimeout), out
        assert answered == []
    finally:
        hold.set()


# -- passages changed after the guard saw them -------------------------------------------


def test_a_passage_changed_after_the_answer_does_not_reach_the_caller() -> None:
    mine = Passage.create("alpha beta", "mem://1", metadata={"topic": "otters"})
    guard = Guard(Scripted(built([raw_hit(passage=mine)])))
    out = guard.search("i", "q")
    assert isinstance(out, Searched)
    object.__setattr__(mine, "text", "rewritten after the guard looked")
    mine.__dict__["metadata"] = {"topic": "trusted"}
    assert out.hits[0].passage.text == "alpha beta"
    assert out.hits[0].passage.metadata == {"topic": "otters"}
    again = guard.search("i", "q")  # the same (now altered) object: refused, not remembered
    assert refused(again, "IntegrityError")


def test_a_passage_changed_while_the_guard_checks_it_is_never_served_altered() -> None:
    """A plugin thread flipping a passage's text back and forth while the guard reads it: the
    guard reads each field once, so what it serves is what it checked."""
    shared = Passage.create("alpha beta", "mem://1")
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            shared.__dict__["text"] = "evil"
            shared.__dict__["text"] = "alpha beta"

    t = threading.Thread(target=flip, daemon=True)
    t.start()
    try:
        guard = Guard(Scripted(lambda index: built([raw_hit(passage=shared)], index=index)))
        for _ in range(200):
            out = guard.search("i", "q")
            if isinstance(out, Searched):
                assert out.hits[0].passage.text == "alpha beta"
                assert out.hits[0].passage.id == out.hits[0].passage.expected_id()
            else:
                assert refused(out, "IntegrityError")
    finally:
        stop.set()
        t.join(timeout=5)


def test_the_guards_memory_cannot_be_poisoned_by_a_digest_it_knows() -> None:
    guard = Guard(Scripted(built([raw_hit()])))
    assert isinstance(guard.search("i", "q"), Searched)
    forged = Passage.model_construct(**{**P1.__dict__, "text": "forged under a known digest"})
    guard.backend.answer = built([raw_hit(passage=forged)])  # type: ignore[attr-defined]
    assert refused(guard.search("i", "q"), "IntegrityError")


# -- extension ops -----------------------------------------------------------------------


class Extended(Scripted):
    def op_drop(self, index: str, *, deadline: Any) -> Any:
        return self._out(index)

    def op_rerank(self, index: str, *, deadline: Any, query: str, passages: Any) -> Any:
        return self._out(index)

    def op_explain(self, index: str, *, deadline: Any, query: str, passage_id: str) -> Any:
        return self._out(index)

    def op_neighbours(self, index: str, *, deadline: Any, **_: Any) -> Any:
        return self._out(index)

    def op_secret(self, index: str, *, deadline: Any) -> Any:
        return "anything"


def extra(answer: Any, op: str, **kw: Any) -> Any:
    return Guard(Extended(answer)).call_extra(op, "i", **kw)


def test_extension_ops_answer_only_their_declared_outcomes() -> None:
    dropped = IndexStatus(index="i", exists=False, passages=0)
    assert extra(dropped, "drop").code == "STATUS"
    assert refused(extra(built([raw_hit()]), "drop"))
    assert refused(extra({"dropped": True}, "drop"))
    assert refused(
        extra(IndexStatus.model_construct(index="i", backend="", exists="no", passages=-1), "drop")
    )
    with pytest.raises(InvalidRequest, match="not an extension op"):
        extra(dropped, "secret")
    with pytest.raises(InvalidRequest, match="takes these arguments"):
        extra(dropped, "drop", force=True)


def test_a_rerank_may_only_answer_the_passages_it_was_given() -> None:
    ok = extra(built([raw_hit()], searched=1), "rerank", query="q", passages=[P1])
    assert isinstance(ok, Searched) and ok.hits[0].passage == P1
    assert refused(
        extra(built([raw_hit(passage=P2)], searched=1), "rerank", query="q", passages=[P1])
    )
    bad = Passage.model_construct(**{**P1.__dict__, "text": "evil"})
    assert refused(
        extra(built([raw_hit(passage=bad)], searched=1), "rerank", query="q", passages=[P1]),
        "IntegrityError",
    )


def test_explain_and_neighbours_answers_are_checked() -> None:
    match = TokenMatch(query_token=0, passage_token=0, similarity=1.0, share=1.0)
    good = Explained(index="i", query="q", passage=P1, score=1.0, scale=SCALE, matches=[match])
    out = extra(good, "explain", query="q", passage_id=P1.id)
    assert isinstance(out, Explained) and out.passage == P1 and out.passage is not P1
    bad = Passage.model_construct(**{**P1.__dict__, "metadata": Metadata({"x": 1})})
    forged = Explained.model_construct(**{**good.__dict__, "passage": bad})
    assert refused(extra(forged, "explain", query="q", passage_id=P1.id), "IntegrityError")
    other = Explained.model_construct(**{**good.__dict__, "scale": ScoreScale(name="other")})
    assert refused(extra(other, "explain", query="q", passage_id=P1.id))
    near = Neighbours(index="i", passage_id=P1.id, before=[P2])
    out = extra(near, "neighbours", passage_id=P1.id, before=1, after=0)
    assert isinstance(out, Neighbours) and out.before == [P2]
    sneaky = Neighbours.model_construct(
        index="i", backend="", passage_id=P1.id, before=[bad], after=[]
    )
    assert refused(
        extra(sneaky, "neighbours", passage_id=P1.id, before=1, after=0), "IntegrityError"
    )
    with pytest.raises(InvalidRequest):
        extra(near, "neighbours", passage_id=P1.id, before=-1, after=0)
