"""Caller keys on real servers: writers replace the same keys while readers search and get.

Each key's document holds its passages nested, and a replacement is one index request of that
document, so every read sees each key whole, in one version: never both versions, never
neither.  The loops are bounded (a fixed number of rewrites), and nothing is timed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from indexplug import Guard, Passage
from indexplug.outcomes import Got, Indexed, IndexStatus, Searched

BackendMaker = Callable[..., Guard]

KEYS = ["doc-a", "doc-b", "doc-c"]
ROUNDS = 12


def versions(key: str) -> tuple[list[Passage], list[Passage]]:
    """Two versions of ``key``'s passages (3, then 2), sharing one; every passage holds
    ``racewords``."""
    first = [
        Passage.create(f"racewords {key} first part {i}", f"mem://{key}/{i}", key=key)
        for i in range(3)
    ]
    second = [
        first[0],
        *(
            Passage.create(f"racewords {key} second part {i}", f"mem://{key}/2/{i}", key=key)
            for i in range(1)
        ),
    ]
    return first, second


@pytest.mark.parametrize("topology", ["make_single", "make_pair"])
def test_writers_replacing_keys_never_show_readers_two_versions_or_none(
    topology: str, request: pytest.FixtureRequest
) -> None:
    g: Guard = request.getfixturevalue(topology)()
    both = {k: versions(k) for k in KEYS}
    whole = {k: [{p.id for p in v} for v in vs] for k, vs in both.items()}
    every = {p.id: k for k, vs in both.items() for v in vs for p in v}
    first = [p for k in KEYS for p in both[k][0]]
    assert isinstance(g.add("race", first), Indexed)
    problems: list[str] = []
    reads = [0]
    writing = threading.Event()
    writing.set()

    def judge(ids: set[str], how: str) -> None:
        reads[0] += 1
        for key in KEYS:
            seen = {i for i in ids if every.get(i) == key}
            if seen not in whole[key]:
                problems.append(f"a {how} saw {len(seen)} passages of {key}: {sorted(seen)}")

    def writer(start: int) -> None:
        for r in range(ROUNDS):
            batch = [p for k in KEYS for p in both[k][(start + r) % 2]]
            out = g.add("race", batch)
            if not isinstance(out, Indexed):
                problems.append(f"a rewrite answered {out}")
                return

    def searcher() -> None:
        while writing.is_set() and not problems:
            out = g.search("race", "racewords", top_k=50)
            if not isinstance(out, Searched):
                problems.append(f"a search answered {out}")
                return
            judge({h.passage.id for h in out.hits}, "search")

    def getter() -> None:
        while writing.is_set() and not problems:
            out = g.get("race", [], keys=KEYS)
            if not isinstance(out, Got):
                problems.append(f"a get answered {out}")
                return
            judge({p.id for p in out.passages}, "get by key")

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    readers = [threading.Thread(target=searcher), threading.Thread(target=getter)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    writing.clear()
    for t in readers:
        t.join()
    assert not problems, problems[:3]
    assert reads[0] > 0
    # whatever order the writers finished in, each key holds one version whole
    got = g.get("race", [], keys=KEYS)
    assert isinstance(got, Got) and not got.missing_keys
    judge({p.id for p in got.passages}, "final get")
    assert not problems, problems
    status = g.status("race")
    assert isinstance(status, IndexStatus)
    assert status.passages == len(got.passages)
