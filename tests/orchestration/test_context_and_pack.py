"""Context expansion through a backend's own ``neighbours`` op, and packing under a budget."""

from __future__ import annotations

from typing import Any

import pytest
from indexplug import Guard, Passage
from indexplug.neighbours import expand
from indexplug.ops import Context, HitOut
from indexplug.outcomes import Neighbours
from indexplug.packing import estimate_tokens, merge_spans, pack
from orchestration_plugins import _Base

DOC = [Passage.create(f"part {i} of the doc", "mem://doc", start=i * 20) for i in range(6)]


class WithNeighbours(_Base):
    name = "with-neighbours"

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer

    def op_neighbours(self, index, *, deadline, passage_id, before, after):
        if self.answer is not None:
            return self.answer
        at = [p.id for p in DOC].index(passage_id)
        return Neighbours(
            index=index,
            passage_id=passage_id,
            before=DOC[max(0, at - before) : at],
            after=DOC[at + 1 : at + 1 + after],
        )


def test_the_backends_neighbours_op_is_used() -> None:
    ctx = expand(Guard(WithNeighbours()), "i", DOC[2], 2)
    assert ctx.note is None
    assert [p.id for p in ctx.before] == [DOC[0].id, DOC[1].id]
    assert [p.id for p in ctx.after] == [DOC[3].id, DOC[4].id]


@pytest.mark.parametrize(
    "answer, why",
    [
        (
            Neighbours(
                index="i",
                passage_id=DOC[2].id,
                before=[Passage.create("elsewhere", "mem://other")],
            ),
            "another source",
        ),
        ([1, 2], "answered INDEX_FAILED"),
        (
            {"before": [], "after": []},  # the old mapping answer is not an outcome
            "answered INDEX_FAILED",
        ),
        (
            Neighbours.model_construct(
                index="i",
                backend="",
                passage_id=DOC[2].id,
                before=[DOC[1].model_copy(update={"metadata": {"forged": True}})],
                after=[],
            ),
            "no longer matches its digest",
        ),
    ],
)
def test_a_bad_neighbours_answer_is_not_served(answer: Any, why: str) -> None:
    ctx = expand(Guard(WithNeighbours(answer)), "i", DOC[2], 1)
    assert ctx.before == [] and ctx.after == []
    assert why in ctx.note and "not a local file" in ctx.note


def hit(rank: int, p: Passage, context: Context | None = None) -> HitOut:
    return HitOut(rank=rank, score=1.0 / rank, scale="s", passage=p, context=context)


def test_pack_respects_the_budget_and_cuts_the_last_block() -> None:
    long = [Passage.create(f"word{i} " * 200, f"mem://{i}") for i in range(5)]
    hits = [hit(i + 1, p) for i, p in enumerate(long)]
    for budget in (40, 300, 700, 5000):
        d = pack(hits, budget)
        assert d.tokens <= budget and estimate_tokens(d.text) == d.tokens
        assert d.included + d.omitted == 5
    d = pack(hits, 700)
    assert d.truncated and d.citations[-1].truncated and "[...]" in d.text
    assert pack(hits, 5000).truncated is False and pack(hits, 5000).included == 5


def test_pack_merges_context_and_never_repeats_a_passage() -> None:
    ctx = Context(before=[DOC[1]], after=[DOC[3]])
    d = pack([hit(1, DOC[2], ctx), hit(2, DOC[3]), hit(3, DOC[5])], 1000)
    assert d.included == 2 and d.omitted == 0  # DOC[3] is inside the first block already
    first = d.citations[0]
    assert (first.start, first.end, first.passages) == (DOC[1].start, DOC[3].end, 3)
    text, start, end = merge_spans([DOC[3], DOC[1], DOC[2]])
    assert text.startswith("part 1") and text.endswith("part 3 of the doc")
    assert (start, end) == (20, DOC[3].end)
