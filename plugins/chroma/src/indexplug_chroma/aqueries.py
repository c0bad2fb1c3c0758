"""The chroma backend's reads as coroutines: in server mode, the steps of
:mod:`indexplug_chroma.queries` awaited through chromadb's ``AsyncHttpClient``."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from indexplug.deadlines import Deadline
from indexplug.filters import Filter, parse_filter
from indexplug.outcomes import (
    GetOutcome,
    IndexesOutcome,
    IndexFailed,
    IndexTimeout,
    IndexUnavailable,
    ScanOutcome,
    SearchOutcome,
    StatusOutcome,
)
from indexplug.passages import MetadataValue
from indexplug.protocols import Embedder, Granularity

from indexplug_chroma import steps
from indexplug_chroma.collection import SEARCH_ATTEMPTS, _provenance_in_document, _typed
from indexplug_chroma.errors import RecordLost
from indexplug_chroma.queries import ChromaQueries
from indexplug_chroma.reads import ID_NOT_FOUND, _aget, _in_time
from indexplug_chroma.stores import COUNTS, ServerStore, chroma_settings


class ChromaAsyncQueries(ChromaQueries):
    """``asearch``, ``aget``, ``ascan``, ``astatus`` and ``aindexes``."""

    # -- async: chromadb's AsyncHttpClient in server mode ------------------------------------
    # The guard awaits these coroutines on the caller's event loop instead of running the
    # blocking methods on its worker threads.  In server mode they run the same steps as the
    # blocking ops (search, get, scan, status, indexes) with chromadb's async HTTP client, so
    # a slow search holds no thread and the guard's deadline cancels its request; the query
    # embedding, CPU work, runs on a thread.  Embedded mode has no async client: the blocking
    # op runs on a thread.  Writes, remove and drop are not native (the guard offloads them).

    async def asearch(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | Filter | None = None,
    ) -> SearchOutcome:
        """:meth:`search` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(
                self.search, index, query, top_k=top_k, deadline=deadline, filters=filters
            )
        from chromadb.errors import NotFoundError

        for attempt in range(1, SEARCH_ATTEMPTS + 1):
            try:
                client = await self._async_client()
                return await steps.arun(
                    self._search_steps(index, query, top_k, deadline, parse_filter(filters)),
                    functools.partial(self._ado, client=client),
                )
            except Exception as exc:
                self._ahandles.pop(index, None)
                again = isinstance(exc, (NotFoundError, RecordLost)) or ID_NOT_FOUND in str(exc)
                if not again or attempt == SEARCH_ATTEMPTS:
                    return self._afailure(index, exc, deadline)
        raise AssertionError("unreachable")

    async def aget(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str], deadline: Deadline
    ) -> GetOutcome:
        """:meth:`get` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(self.get, index, ids, keys=keys, deadline=deadline)
        try:
            _in_time(deadline, "starting the read")
            client = await self._async_client()
            return await steps.arun(
                self._get_steps(index, ids, keys, deadline), lambda step: self._ado(step, client)
            )
        except Exception as exc:
            return self._afailure(index, exc, deadline)

    async def ascan(
        self,
        index: str,
        *,
        filters: Filter | None,
        after: str | None,
        limit: int,
        deadline: Deadline,
    ) -> ScanOutcome:
        """:meth:`scan` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(
                self.scan, index, filters=filters, after=after, limit=limit, deadline=deadline
            )
        try:
            _in_time(deadline, "starting the scan")
            client = await self._async_client()
            return await steps.arun(
                self._scan_steps(index, parse_filter(filters), after, limit, deadline),
                lambda step: self._ado(step, client),
            )
        except Exception as exc:
            return self._afailure(index, exc, deadline)

    async def astatus(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        """:meth:`status` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(self.status, index, deadline=deadline)
        try:
            _in_time(deadline, "reading the status")
            emb = self.embedder()
            client = await self._async_client()
            return await steps.arun(
                self._status_steps(index, emb, deadline),
                functools.partial(self._ado, client=client),
            )
        except Exception as exc:
            return self._afailure(index, exc, deadline)

    async def aindexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """:meth:`indexes` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(self.indexes, deadline=deadline)
        try:
            _in_time(deadline, "listing the indexes")
            client = await self._async_client()
            return await steps.arun(
                self._server_indexes_steps(client, deadline),
                functools.partial(self._ado, client=client),
            )
        except Exception as exc:
            return self._afailure("", exc, deadline)  # type: ignore[return-value]

    async def _async_client(self) -> Any:
        """The server's ``AsyncHttpClient``, made on first use (it serves every event loop:
        chromadb keeps an HTTP session per loop) and dropped after a connection error."""
        client = self._aclient
        if client is None:
            import chromadb

            client = await chromadb.AsyncHttpClient(
                host=self.settings.host,
                port=self.settings.port,
                ssl=self.settings.ssl,
                settings=chroma_settings(),
            )
            self._aclient = client
        return client

    def _afailure(
        self, index: str, exc: BaseException, deadline: Deadline
    ) -> IndexFailed | IndexTimeout | IndexUnavailable:
        out = self._failure(index, exc, deadline)
        if out.code == "INDEX_UNAVAILABLE":
            self._aclient = None
            self._ahandles.clear()
        return out

    async def _ado(self, step: steps.Step, client: Any) -> Any:
        """One step with the async client (see :mod:`indexplug_chroma.steps`)."""
        if isinstance(step, steps.Call):
            return await getattr(step.target, step.method)(**step.kwargs)
        if isinstance(step, steps.Embed):
            return await asyncio.to_thread(step.embedder.embed_query, step.text, Granularity.TEXT)
        if isinstance(step, steps.Count):
            key = self._store.key(step.index)
            if step.fresh:
                COUNTS.forget(key)
            count, generation = COUNTS.fresh(key, self.settings.count_ttl_s)
            if count is None:
                count = int(await step.collection.count())
                COUNTS.keep(key, generation, count)
            return count
        if isinstance(step, steps.Handle):
            return await self._ahandle(client, step.index, step.embedder)
        return await _aget(client, step.index)

    async def _ahandle(
        self, client: Any, index: str, emb: Embedder
    ) -> tuple[Any, list[str], Embedder, bool] | None:
        """:meth:`_search_handle` for the async client (cached apart)."""
        cached = self._ahandles.get(index)
        if cached is not None and cached[0] is client:
            return cached[1:]
        coll = await _aget(client, index)
        if coll is None:
            self._ahandles.pop(index, None)
            return None
        meta, emb = self._check_embedder(index, coll, emb)
        include = ["documents", "distances"]
        if not _provenance_in_document(meta):
            include.insert(1, "metadatas")
        self._ahandles[index] = (client, coll, include, emb, _typed(meta))
        return coll, include, emb, _typed(meta)
