"""Checks of keyed documents: upsert while readers watch, get and remove by key."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from indexplug.outcomes import (
    Got,
    Indexed,
    Removed,
    Searched,
)
from indexplug.passages import Passage
from indexplug.testing.checks.helpers import (
    _add,
    _by_id,
    _check_hits,
    _count,
    _filled,
    _get,
    _op,
    _Problems,
    _same_passage,
    _search,
    _show,
    corpus,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


def _versions(tag: str) -> tuple[list[Passage], list[Passage], list[Passage]]:
    """Two versions of keyed document ``doc-a`` (sharing one passage) and document ``doc-b``;
    every passage holds ``upsertword``, each version its own word too."""
    v1 = [
        kit_passage(f"upsertword first version part {i} alphaword", i, tag=f"{tag}-1", key="doc-a")
        for i in range(3)
    ]
    v2 = [
        v1[0],
        *(
            kit_passage(
                f"upsertword second version part {i} betaword", i, tag=f"{tag}-2", key="doc-a"
            )
            for i in range(2)
        ),
    ]
    b = [
        kit_passage(f"upsertword another document part {i}", i, tag=f"{tag}-b", key="doc-b")
        for i in range(2)
    ]
    return v1, v2, b


class _KeyWatch:
    """Threads that keep reading keyed document ``doc-a`` while it is rewritten: by ``get``
    (when claimed) and by search, each must see one version whole, never both or neither."""

    def __init__(self, s: Subject, index: str, versions: Sequence[set[str]]) -> None:
        self.s, self.index, self.versions = s, index, versions
        self.problems = _Problems()
        self.done = threading.Event()
        self.reads = 0
        targets = [self._search]
        if s.claims("get"):
            targets.append(self._get)
        self.threads = [threading.Thread(target=t, daemon=True) for t in targets]

    def __enter__(self) -> _KeyWatch:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for t in self.threads:
            t.join()

    def _judge(self, seen: set[str], how: str) -> bool:
        self.reads += 1
        if seen in self.versions:
            return True
        both = all(v <= seen for v in self.versions)
        state = "both versions" if both else "neither version whole"
        self.problems.add(
            f"a {how} while doc-a was being replaced saw {state} ({len(seen)} of its passages): "
            "the upsert is not atomic"
        )
        return False

    def _search(self) -> None:
        s, every = self.s, set[str]().union(*self.versions)
        while not self.done.is_set():
            out = s.guard.search(
                self.index, "upsertword", top_k=50, deadline_s=s.settings.op_deadline_s
            )
            if not isinstance(out, Searched):
                self.problems.add(f"a search while doc-a was being replaced returned {_show(out)}")
                return
            if not self._judge({h.passage.id for h in out.hits} & every, "search"):
                return

    def _get(self) -> None:
        s = self.s
        while not self.done.is_set():
            out = s.guard.get(self.index, keys=["doc-a"], deadline_s=s.settings.op_deadline_s)
            if not isinstance(out, Got):
                self.problems.add(
                    f"a get by key while doc-a was being replaced returned {_show(out)}"
                )
                return
            if not self._judge({p.id for p in out.passages}, "get by key"):
                return


@_check(
    "keys.upsert",
    "Adding passages under a caller key replaces that key's earlier passages (Indexed.replaced "
    "counts them) atomically: a concurrent reader never sees both versions or neither",
    claim="keys",
)
def _keys_upsert(s: Subject) -> None:
    v1, v2, b = _versions("upsert")
    index, ps = _filled(s, "upsert", v1 + b)
    out: Indexed = _add(s, index, v2, "add of a new version of keyed document doc-a")
    if (out.added, out.known, out.replaced) != (2, 1, 2):
        fail(
            f"add of a new version of doc-a (2 new passages, 1 kept, 2 of the old version to "
            f"replace) reported added={out.added}, known={out.known}, replaced={out.replaced}"
        )
    count = _count(s, index, "status after replacing doc-a")
    if count != len(ps):  # each version has 3 passages
        fail(f"after replacing doc-a, status reports {count} passages; expected {len(ps)}")
    now = _by_id([*corpus(), *v2, *b])
    what = "search after replacing doc-a"
    hits = _search(s, index, "upsertword", what, top_k=50)
    keyed = {p.id for p in [*v1, *v2, *b]}  # a dense backend ranks the corpus too
    ids = set(_check_hits(s, hits, 50, now, what)) & keyed
    if ids != {p.id for p in [*v2, *b]}:
        stale = len(ids - {p.id for p in [*v2, *b]})
        fail(
            f"{what} found {len(ids)} keyed passages ({stale} of the old version); expected "
            "the 3 of the new version and doc-b's 2"
        )
    if s.claims("get"):
        what = "get by key after replacing doc-a"
        got: Got = _get(s, index, [], what, keys=["doc-a"])
        if {p.id for p in got.passages} != {p.id for p in v2}:
            fail(f"{what} answered {len(got.passages)} passage(s); expected the new version's 3")
    out = _add(s, index, v2, "adding the same version of doc-a again")
    if (out.added, out.known, out.replaced) != (0, 3, 0):
        fail(
            f"adding the same version of doc-a again reported added={out.added}, "
            f"known={out.known}, replaced={out.replaced} (expected 0, 3, 0)"
        )
    versions = [{p.id for p in v1}, {p.id for p in v2}]
    rounds = s.settings.upsert_rounds
    with _KeyWatch(s, index, versions) as watch:
        for r in range(rounds):
            version = v1 if r % 2 == 0 else v2
            what = f"rewrite {r + 1} of {rounds} of doc-a while readers watch"
            out = _add(s, index, version, what)
            if out.replaced != 2:
                fail(f"{what} reported replaced={out.replaced}, expected 2")
            if watch.problems.items:
                break
            time.sleep(0.002)
    watch.problems.raise_first()
    if watch.reads == 0:
        fail("no read finished while doc-a was being rewritten; raise upsert_rounds")
    count = _count(s, index, "status after the rewrites")
    if count != len(ps):
        fail(f"after rewriting doc-a {rounds} times, status reports {count} passages")


@_check(
    "keys.get_remove",
    "get and remove by caller key reach every passage of the key, keep the key on each "
    "passage, and report the keys no passage has",
    claim="keys",
)
def _keys_get_remove(s: Subject) -> None:
    if not s.claims("get"):
        fail(
            "the backend claims keys but not get: get(keys=...) and remove(keys=...) need "
            "Capabilities.get (the guard resolves keys through get)"
        )
    doc = [
        kit_passage(f"keyword document c part {i}", i, tag="keyc", key="doc-c") for i in range(3)
    ]
    other = [
        kit_passage(f"keyword document d part {i}", i, tag="keyd", key="doc-d") for i in range(2)
    ]
    index, ps = _filled(s, "keys", doc + other)
    added = _by_id(ps)
    what = "get by keys doc-c and one no passage has"
    got: Got = _get(s, index, [], what, keys=["doc-c", "no-such-key"])
    if {p.id for p in got.passages} != {p.id for p in doc}:
        fail(f"{what} answered {len(got.passages)} passage(s); doc-c has 3")
    for p in got.passages:
        _same_passage(p, added, what)
    if got.missing_keys != ["no-such-key"] or got.missing_ids:
        fail(f"{what} reported missing_keys={got.missing_keys} (expected ['no-such-key'])")
    what = "get by the id of a passage of doc-c and by key doc-d"
    got = _get(s, index, [doc[0].id], what, keys=["doc-d"])
    if {p.id for p in got.passages} != {doc[0].id, *(p.id for p in other)}:
        fail(f"{what} answered {len(got.passages)} passage(s); expected 3")
    for p in got.passages:  # read back by id too, a passage keeps its key
        _same_passage(p, added, what)
    if not s.claims("deletion"):
        return
    what = "remove by keys doc-c and one no passage has"
    d = s.settings.op_deadline_s
    rm: Removed = _op(
        "remove",
        what,
        ("REMOVED",),
        index,
        lambda: s.guard.remove(index, keys=["doc-c", "no-such-key"], deadline_s=d),
    )
    if rm.removed != 3 or set(rm.removed_ids) != {p.id for p in doc}:
        fail(f"{what} reported removed={rm.removed}; doc-c has 3 passages")
    if rm.missing_keys != ["no-such-key"]:
        fail(f"{what} reported missing_keys={rm.missing_keys} (expected ['no-such-key'])")
    got = _get(s, index, [], "get by key after removing it", keys=["doc-c", "doc-d"])
    if got.missing_keys != ["doc-c"] or {p.id for p in got.passages} != {p.id for p in other}:
        fail(
            f"get by key after removing doc-c answered {len(got.passages)} passage(s), "
            f"missing_keys={got.missing_keys}"
        )
    if _count(s, index, "status after removing by key") != len(ps) - 3:
        fail("after removing doc-c's 3 passages by key, status does not count 3 fewer")
