"""Test-only backends registered programmatically (never installed): one that is not ready, one
that is slow, one that raises.  ``register()`` adds them to the process-wide registry; the MCP
launcher calls it before starting the server so a subprocess has them too."""

from __future__ import annotations

import asyncio
import threading
import time

from indexplug import (
    BackendSpec,
    Capabilities,
    IndexEmpty,
    IndexStatus,
    NoMatch,
    Readiness,
    ScoreScale,
    hookimpl,
)
from indexplug.filters import ALL_OPS, matches
from indexplug.outcomes import Got, Hit, Indexed, IndexInfo, IndexList, Removed, Scanned, Searched
from indexplug.plugins import get_registry

SCALE = ScoreScale(name="test_scale")


class _Base:
    description = "test backend"
    score_scale = SCALE
    capabilities = Capabilities()

    def readiness(self):
        return Readiness.yes()

    def add(self, index, passages, *, max_bytes, deadline):
        raise RuntimeError("this test backend does not store anything")

    def search(self, index, query, *, top_k, deadline, filters=None):
        return IndexEmpty(index=index)

    def remove(self, index, ids, *, deadline):
        raise RuntimeError("nothing to remove")

    def status(self, index, *, deadline):
        return IndexStatus(index=index, exists=False, passages=0)

    def close(self):
        pass


class DownBackend(_Base):
    """Like a server backend whose server is not running."""

    name = "test-down"

    def readiness(self):
        return Readiness.no("connection refused by 127.0.0.1:9 (the test server is down)")


class SlowBackend(_Base):
    """Answers every search after SLEEP_S seconds, whatever its deadline; or, while ``HOLD``
    is an event, only once a test sets it (a leg that has not answered, whatever the load)."""

    name = "test-slow"
    SLEEP_S = 3.0
    HOLD: threading.Event | None = None
    HOLD_BACKSTOP_S = 60.0

    def search(self, index, query, *, top_k, deadline, filters=None):
        hold = self.HOLD
        if hold is not None:
            hold.wait(self.HOLD_BACKSTOP_S)
        else:
            time.sleep(self.SLEEP_S)
        return NoMatch(index=index, searched=1)


class MeetingBackend(_Base):
    """Answers a search only once another search of this backend has reached it too (both
    at once): legs run one after the other never meet, and time out instead."""

    name = "test-meet"
    MEET = threading.Barrier(2)

    def search(self, index, query, *, top_k, deadline, filters=None):
        self.MEET.wait(timeout=max(deadline.remaining(), 0.001))
        return NoMatch(index=index, searched=1)


class BrokenBackend(_Base):
    name = "test-broken"

    def search(self, index, query, *, top_k, deadline, filters=None):
        raise OSError("disk on fire")


class StoreBackend(_Base):
    """A complete in-memory backend with the data interface (get, scan, indexes, drop, keys,
    every filter operator), for the transfer and surface tests.  Stores are process-wide, by
    the ``store`` option, so two targets with one ``store`` see the same indexes; ``scale``
    names its score scale (words shared with the query, higher is better); ``delay_s`` makes
    each search sleep (``asearch``, its native coroutine form, sleeps without a thread)."""

    name = "test-store"
    STORES: dict[str, dict[str, dict[str, object]]] = {}
    LOCK = threading.Lock()
    FAIL_AFTER: int | None = None
    """Like the ``fail_after`` option, for every instance (a test interrupting a copy)."""

    def __init__(self, store="default", scale="test_store", delay_s=0.0, fail_after=None):
        self.indexes_ = self.STORES.setdefault(store, {})
        self.score_scale = ScoreScale(name=scale)
        self.delay_s = float(delay_s)
        self.fail_after = fail_after
        """Fail every add once this many passages are stored in an index (to interrupt)."""
        self.capabilities = Capabilities(
            filters=True,
            filter_operators=ALL_OPS,
            get=True,
            scan=True,
            indexes=True,
            keys=True,
        )

    def add(self, index, passages, *, max_bytes, deadline):
        with self.LOCK:
            ix = self.indexes_.setdefault(index, {})
            limit = self.fail_after if self.fail_after is not None else self.FAIL_AFTER
            if limit is not None and len(ix) >= limit:
                raise OSError("simulated failure (fail_after)")
            keys = {p.key for p in passages if p.key is not None}
            ids = {p.id for p in passages}
            gone = [i for i, p in ix.items() if p.key in keys and i not in ids]
            for i in gone:
                del ix[i]
            new = [p.id for p in passages if p.id not in ix]
            for p in passages:
                ix[p.id] = p
        out = Indexed.of_batch(
            index=index, backend=self.name, ids=[p.id for p in passages], added_ids=new
        )
        return out.model_copy(update={"replaced": len(gone)})

    def search(self, index, query, *, top_k, deadline, filters=None):
        if self.delay_s:
            time.sleep(self.delay_s)
        return self._search(index, query, top_k, filters)

    def _search(self, index, query, top_k, filters):
        ix = self.indexes_.get(index, {})
        if not ix:
            return IndexEmpty(index=index)
        words = set(query.lower().split())
        scored = []
        for p in sorted(ix.values(), key=lambda p: p.id):
            if filters is not None and not matches(filters, p.metadata):
                continue
            score = len(words & set(p.text.lower().split()))
            if score:
                scored.append((score, p))
        scored.sort(key=lambda sp: -sp[0])
        if not scored:
            return NoMatch(index=index, searched=len(ix))
        hits = [
            Hit(rank=n, score=float(s), score_scale=self.score_scale.name, passage=p)
            for n, (s, p) in enumerate(scored[:top_k], 1)
        ]
        return Searched(
            index=index, backend=self.name, hits=hits, searched=len(ix), scale=self.score_scale
        )

    async def asearch(self, index, query, *, top_k, deadline, filters=None):
        """The native coroutine form (as an HTTP client's would be): a delay holds no thread."""
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return self._search(index, query, top_k, filters)

    def remove(self, index, ids, *, deadline):
        with self.LOCK:
            ix = self.indexes_.get(index, {})
            there = [i for i in ids if i in ix]
            for i in there:
                del ix[i]
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=there)

    def status(self, index, *, deadline):
        ix = self.indexes_.get(index)
        return IndexStatus(
            index=index, backend=self.name, exists=ix is not None, passages=len(ix or {})
        )

    def get(self, index, ids, *, keys, deadline):
        ix = self.indexes_.get(index, {})
        found = [ix[i] for i in ids if i in ix]
        found += [p for p in ix.values() if p.key in set(keys) and p.id not in set(ids)]
        seen_keys = {p.key for p in found}
        return Got(
            index=index,
            backend=self.name,
            passages=found,
            missing_ids=[i for i in ids if i not in ix],
            missing_keys=[k for k in keys if k not in seen_keys],
        )

    def scan(self, index, *, filters, after, limit, deadline):
        ix = self.indexes_.get(index, {})
        rows = [
            p
            for i, p in sorted(ix.items())
            if (after is None or i > after) and (filters is None or matches(filters, p.metadata))
        ]
        page = rows[:limit]
        more = len(rows) > limit
        return Scanned(
            index=index,
            backend=self.name,
            passages=page,
            next_after=page[-1].id if more and page else None,
        )

    def indexes(self, *, deadline):
        return IndexList(
            index="",
            backend=self.name,
            indexes=[IndexInfo(name=n, passages=len(ix)) for n, ix in self.indexes_.items()],
        )

    def op_drop(self, index, *, deadline):
        with self.LOCK:
            self.indexes_.pop(index, None)
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)


class GateBackend(_Base):
    """Each search writes ``reached`` in its ``gate`` folder, then answers only once a test
    writes ``open`` there (60 s backstop): a request held in flight, across processes."""

    name = "test-gate"
    BACKSTOP_S = 60.0

    def __init__(self, gate):
        import pathlib

        self.gate = pathlib.Path(gate)

    def search(self, index, query, *, top_k, deadline, filters=None):
        (self.gate / "reached").write_text("1")
        end = time.monotonic() + self.BACKSTOP_S
        while not (self.gate / "open").exists() and time.monotonic() < end:
            time.sleep(0.01)
        return NoMatch(index=index, searched=1)


class DenseBackend(StoreBackend):
    """:class:`StoreBackend` that claims to be dense: cosine of hashing-embedder vectors."""

    name = "test-dense"

    def __init__(self, store="dense", dim=64, lazy=False):
        from indexplug.embedders.hashing import HashingEmbedder

        super().__init__(store=store, scale="cosine")
        made = HashingEmbedder(int(dim))
        self.embedder_name = made.name
        # lazy: a method that makes the embedder on first use, as chroma's does
        self.embedder = (lambda: made) if lazy else made
        self.capabilities = self.capabilities.model_copy(update={"dense": True})

    def status(self, index, *, deadline):
        out = super().status(index, deadline=deadline)
        return out.model_copy(update={"embedder": self.embedder_name})


def _store(ctx):
    o = dict(ctx.options)
    return StoreBackend(
        store=str(o.get("store", "default")),
        scale=str(o.get("scale", "test_store")),
        delay_s=float(o.get("delay_s", 0.0)),
        fail_after=o.get("fail_after"),
    )


class _Plugin:
    @hookimpl
    def indexplug_backends(self):
        return [
            BackendSpec(name="test-store", factory=_store),
            BackendSpec(name="test-down", factory=lambda ctx: DownBackend()),
            BackendSpec(name="test-slow", factory=lambda ctx: SlowBackend()),
            BackendSpec(name="test-meet", factory=lambda ctx: MeetingBackend()),
            BackendSpec(name="test-broken", factory=lambda ctx: BrokenBackend()),
            BackendSpec(
                name="test-gate", factory=lambda ctx: GateBackend(ctx.options.get("gate", "."))
            ),
            BackendSpec(
                name="test-dense",
                factory=lambda ctx: DenseBackend(
                    str(ctx.options.get("store", "dense")),
                    int(ctx.options.get("dim", 64)),
                    bool(ctx.options.get("lazy", False)),
                ),
            ),
        ]


def register() -> None:
    get_registry().register(_Plugin(), name="orchestration-test-plugins")
