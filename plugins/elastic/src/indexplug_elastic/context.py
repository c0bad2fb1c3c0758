"""What every op needs: settings, the connection, analysis, the embedder, and index facts.

The ops (:mod:`~indexplug_elastic.writes`, :mod:`~indexplug_elastic.reads` and the backend
class) share one :class:`Context` per backend instance.  It owns the cache of each index's
``_meta`` facts and the decisions made once per index: how its text is analysed and which
embedder made its vectors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from elasticsearch import ApiError, Elasticsearch
from indexplug.counts import CountCache
from indexplug.deadlines import Deadline
from indexplug.names import validate_index_name
from indexplug.outcomes import BadRequest, IndexFailed
from indexplug.protocols import Embedder

from indexplug_elastic.analysis import EnglishAnalysis
from indexplug_elastic.connection import Connection
from indexplug_elastic.failures import is_index_missing
from indexplug_elastic.mapping import (
    MIGRATED_SUFFIX,
    FlatLayout,
    ForeignIndex,
    IndexMeta,
    mappings,
    settings,
)
from indexplug_elastic.options import ElasticOptions

NAME = "elastic"
SHARD_ROWS: dict[str, Any] = {"format": "json", "h": "prirep,state,unassigned.reason"}
COUNTS = CountCache()
"""Passage counts of the process's Elasticsearch indexes (by cluster and index), kept for
``count_ttl_s`` and forgotten by every write made through this backend in this process."""


class Context:
    """Shared state of one backend instance (thread-safe: ops run on many threads)."""

    def __init__(
        self,
        opts: ElasticOptions,
        conn: Connection,
        embedder_factory: Callable[[str], Embedder] | None,
    ) -> None:
        self.name = NAME
        self.opts = opts
        self.mode = opts.search_mode
        self.conn = conn
        self.analysis = EnglishAnalysis()
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self._metas: dict[str, IndexMeta] = {}
        self._server_has: dict[str, bool] = {}
        self._lock = threading.Lock()

    def es_index(self, index: str) -> str:
        """The Elasticsearch index behind ``index`` (validated again: never a path or pattern)."""
        return self.opts.prefix + validate_index_name(index)

    def embedder(self) -> Embedder:
        """The configured embedder, made on first use (loading a model is slow)."""
        with self._lock:
            if self._embedder is None:
                if not self.opts.embedder:
                    raise LookupError("no embedder is configured (option embedder)")
                if self._embedder_factory is None:
                    raise LookupError("no embedder factory was given to this backend")
                self._embedder = self._embedder_factory(self.opts.embedder)
            return self._embedder

    @staticmethod
    def ms(deadline: Deadline) -> int:
        """What is left of ``deadline`` in whole milliseconds (at least 1)."""
        return max(1, int(deadline.remaining() * 1000))

    def server_timeout(self, deadline: Deadline) -> str:
        """A server-side ``timeout``/``master_timeout`` for what is left of ``deadline``.

        A fifth shorter than the client's own timeout, so that a server that cannot do the job
        in time (no master, a shard not yet active) says why before the client gives up on it:
        the caller then learns "unavailable: no master" rather than a bare "timed out".
        """
        return f"{max(1, int(deadline.remaining() * 800))}ms"

    def failed(self, index: str, reason: str, error_type: str) -> IndexFailed:
        return IndexFailed(index=index, backend=self.name, reason=reason, error_type=error_type)

    def forget(self, es_index: str) -> None:
        """Drop the cached facts of ``es_index`` (it was deleted, or may have been)."""
        self._metas.pop(es_index, None)
        self.forget_count(es_index)

    def count_key(self, es_index: str) -> str:
        return " ".join(self.opts.hosts) + "|" + es_index

    def forget_count(self, es_index: str) -> None:
        """After a write to ``es_index`` (or one that may have reached it)."""
        COUNTS.forget(self.count_key(es_index))

    def cached_meta(self, es_index: str) -> IndexMeta | None:
        """The cached facts of ``es_index`` if any (what :meth:`meta` answers a search with,
        without a client view to get it)."""
        return self._metas.get(es_index)

    def remember(self, es_index: str, meta: IndexMeta) -> None:
        self._metas[es_index] = meta

    # -- the facts of an index ---------------------------------------------------------------
    def meta(
        self,
        client: Elasticsearch,
        es_index: str,
        deadline: Deadline,
        *,
        fresh: bool,
        flat_ok: bool = False,
    ) -> IndexMeta | None:
        """The facts of ``es_index`` (None if it does not exist); ForeignIndex if not ours,
        FlatLayout if it has the flat layout of earlier versions (unless ``flat_ok``).

        Writes read them fresh (an index dropped and made again elsewhere must not be written
        with stale facts); searches use the cached copy, dropped whenever the index is missing.
        """
        if not fresh:
            cached = self._metas.get(es_index)
            if cached is not None and not cached.flat:  # a flat one may be migrated meanwhile
                return cached
        try:
            resp = client.indices.get_mapping(
                index=es_index, master_timeout=self.server_timeout(deadline)
            )
        except ApiError as exc:
            if is_index_missing(exc):
                self._metas.pop(es_index, None)
                return None
            raise
        meta = self.read_meta(es_index, resp.body)
        return meta if flat_ok else self.current(es_index, meta)

    def current(self, es_index: str, meta: IndexMeta) -> IndexMeta:
        """``meta``, or :class:`FlatLayout` if the index has the flat layout."""
        if meta.flat:
            raise FlatLayout(es_index[len(self.opts.prefix) :], es_index)
        return meta

    def read_meta(self, es_index: str, body: Any) -> IndexMeta:
        """The facts in a ``GET /<index>/_mapping`` answer (kept); ForeignIndex if not ours."""
        entry = body.get(es_index)
        if entry is None:
            # the alias of a migrated index names ``<index>.nested``; any other alias points
            # somewhere not made by us
            entry = body.get(es_index + MIGRATED_SUFFIX)
            if entry is None or len(body) != 1:
                raise ForeignIndex(f"'{es_index}' is an alias, not an indexplug index")
        meta = IndexMeta.from_mapping(es_index, entry)
        self._metas[es_index] = meta
        return meta

    def drop_meta(self, es_index: str) -> None:
        """Forget the cached facts of an index found missing."""
        self._metas.pop(es_index, None)

    def server_analyzes(self, client: Elasticsearch, analyzer: str) -> bool:
        """Whether the server knows ``analyzer`` (asked once per backend instance)."""
        if analyzer not in self._server_has:
            try:
                client.indices.analyze(analyzer=analyzer, text="probe")
                self._server_has[analyzer] = True
            except ApiError as exc:
                if exc.meta.status != 400:
                    raise
                self._server_has[analyzer] = False
        return self._server_has[analyzer]

    def new_meta(self, client: Elasticsearch, max_bytes: int | None) -> IndexMeta:
        o = self.opts
        if o.analysis == "client":
            analysis = "client"
        elif o.analysis == "server" or self.server_analyzes(client, o.analyzer):
            analysis = "server"
        elif o.analyzer == "english":
            analysis = "client"
        else:
            raise ValueError(
                f"the server has no analyzer '{o.analyzer}' and only 'english' can run on the "
                "client"
            )
        emb = self.embedder() if o.embedder else None
        return IndexMeta(
            analysis=analysis,  # type: ignore[arg-type]
            analyzer=o.analyzer,
            embedder=emb.name if emb is not None else None,
            dim=emb.dim if emb is not None else None,
            max_bytes=max_bytes,
        )

    def create(
        self, client: Elasticsearch, es_index: str, max_bytes: int | None, deadline: Deadline
    ) -> tuple[IndexMeta, bool]:
        """Create the index; (its facts, whether this call created it).  Another writer may
        create it at the same moment: then its facts are read back and used."""
        meta = self.new_meta(client, max_bytes)
        wait = self.server_timeout(deadline)
        try:
            client.indices.create(
                index=es_index,
                mappings=mappings(meta),
                settings=settings(shards=self.opts.shards, replicas=self.opts.replicas),
                timeout=wait,
                master_timeout=wait,
            )
        except ApiError as exc:
            if "resource_already_exists_exception" not in str(exc.body):
                raise
            theirs = self.meta(client, es_index, deadline, fresh=True)
            if theirs is None:
                raise
            return theirs, False
        self._metas[es_index] = meta
        return meta, True

    def embedder_problem(self, meta: IndexMeta, *, writing: bool) -> str | None:
        """Why this backend's embedder setting cannot work with the index, if it cannot."""
        if meta.embedder is None:
            if writing and self.opts.embedder:
                return (
                    f"the index was made without an embedder, but this backend is configured "
                    f"with embedder {self.opts.embedder}; its passages would have no vectors"
                )
            if self.mode != "bm25":
                return (
                    f"mode '{self.mode}' needs vectors, but the index was made without an "
                    "embedder; search it with mode bm25"
                )
            return None
        if not self.opts.embedder:
            if writing:
                return (
                    f"the index was made with embedder {meta.embedder} (dim {meta.dim}); "
                    f"configure embedder={meta.embedder} to add passages to it"
                )
            return None
        if not writing and self.mode == "bm25":
            return None
        emb = self.embedder()
        if emb.name != meta.embedder or emb.dim != meta.dim:
            return (
                f"the index was made with embedder {meta.embedder} (dim {meta.dim}), but this "
                f"backend uses {emb.name} (dim {emb.dim}); vectors of different models cannot "
                "be compared"
            )
        return None

    def vector_problem(
        self, index: str, meta: IndexMeta, embedder: str, dim: int | None
    ) -> BadRequest | None:
        """``BadRequest`` (field ``embedder``) when the caller's vectors, of ``embedder`` and
        ``dim`` numbers (None: no vectors, an empty write), are not of the embedder the index
        records (or the index holds no vectors at all): vectors of two models are never mixed
        in one index or compared."""
        if meta.embedder is None:
            reason = (
                f"index '{index}' was made without an embedder and holds no vectors; vectors "
                f"of {embedder} cannot be added to it or searched in it"
            )
        elif meta.embedder != embedder or dim not in (None, meta.dim):
            reason = (
                f"index '{index}' holds vectors of embedder {meta.embedder} (dim {meta.dim}), "
                f"not of {embedder}" + (f" (dim {dim})" if dim is not None else "")
            )
        else:
            return None
        return BadRequest(index=index, backend=self.name, field="embedder", reason=reason)

    @staticmethod
    def being_created(client: Elasticsearch, es_index: str) -> bool:
        """Whether an index's missing shards are missing only because it is brand new.

        A reader can see an index a writer is creating before its primary shard has started.
        That index holds nothing yet: the honest answer is "empty", not "unavailable".  Shards
        missing for any other reason (a node left, recovery after a restart) stay unavailable.
        """
        return Context.primaries(client, es_index) == "new"

    @staticmethod
    def primaries(client: Elasticsearch, es_index: str) -> str:
        """The state of an index's primary shards now: ``new`` (some not started, all of those
        because the index was just created), ``started`` (every one started: a search that
        found none available met a shard in the last step of starting, and may be asked
        again) or ``missing`` (anything else, or the shards could not be listed)."""
        try:
            rows: Any = client.cat.shards(index=es_index, **SHARD_ROWS)
        except Exception:
            return "missing"
        return Context.primaries_of(rows)

    @staticmethod
    def primaries_of(rows: Any) -> str:
        """:meth:`primaries` from the rows of ``_cat/shards`` (``SHARD_ROWS``)."""
        primaries = [r for r in rows if r.get("prirep") == "p"]
        waiting = [r for r in primaries if r.get("state") != "STARTED"]
        if primaries and not waiting:
            return "started"
        if waiting and all(r.get("unassigned.reason") == "INDEX_CREATED" for r in waiting):
            return "new"
        return "missing"

    def measure(self, client: Elasticsearch, es_index: str) -> tuple[int, int]:
        """(primary store bytes, passages), after a refresh so both include recent writes.
        Replicas are left out: the budget is about the data, not how many copies keep it."""
        client.indices.refresh(index=es_index)
        stats = client.indices.stats(index=es_index, metric="store")
        prim = Context.stats_of(stats, es_index)["primaries"]
        return int(prim["store"]["size_in_bytes"]), self.count(client, es_index)

    @staticmethod
    def stats_of(stats: Any, es_index: str) -> Any:
        """The entry of ``es_index`` in an ``_stats`` answer (that of the index behind it when
        it is the alias of a migrated index)."""
        indices = stats["indices"]
        return indices.get(es_index) or indices[es_index + MIGRATED_SUFFIX]

    @staticmethod
    def count(client: Elasticsearch, es_index: str) -> int:
        """The passages ``es_index`` holds (the sum of its documents' ``n``)."""
        resp = client.search(
            index=es_index, size=0, track_total_hits=False, aggs={"n": {"sum": {"field": "n"}}}
        )
        return int(resp["aggregations"]["n"]["value"] or 0)

    def drop_new(self, es_index: str, deadline: Deadline) -> None:
        """Delete an index this very call created, when the call is refused: the index is then
        exactly as before (absent), budget included."""
        allowance = Deadline.after(max(deadline.remaining(), 5.0))
        try:
            self.conn.within(allowance).indices.delete(index=es_index)
        except Exception:
            pass
        self.forget(es_index)
