"""What every op of the chroma backend shares: its settings and store, the embedder (made on
first use, checked against the one an index recorded), the write lock per collection, budgets
measured, and a failure mapped to its outcome."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from indexplug.deadlines import Deadline
from indexplug.embedcache import EmbeddingCache, cache_for, embed_passages
from indexplug.filters import ALL_OPS
from indexplug.outcomes import IndexFailed, IndexTimeout, IndexUnavailable
from indexplug.passages import Passage
from indexplug.protocols import Capabilities, Embedder, Granularity, Readiness, Vector

from indexplug_chroma import sizes
from indexplug_chroma.collection import DIM_KEY, EMBED_CHUNK, EMBEDDER_KEY, PAYLOAD_KEY
from indexplug_chroma.errors import (
    ChromaProblem,
    EmbedderMismatch,
    WriteLockBusy,
    chromadb_missing,
    failure_outcome,
)
from indexplug_chroma.reads import _in_time
from indexplug_chroma.scale import DESCRIPTION, SCALE
from indexplug_chroma.settings import ChromaSettings
from indexplug_chroma.stores import EmbeddedStore, ServerStore, Store

_WRITE_LOCKS: dict[str, threading.Lock] = {}
"""Store key (folder, or server URL and collection) -> the lock serialising its writes."""
_WRITE_LOCKS_LOCK = threading.Lock()


class ChromaBase:
    """The state and helpers the chroma backend's ops share (see
    :class:`~indexplug_chroma.backend.ChromaBackend`)."""

    name = "chroma"
    description = DESCRIPTION
    score_scale = SCALE

    def __init__(
        self,
        home: Path,
        settings: ChromaSettings | None = None,
        embedder_factory: Callable[[str], Embedder] | None = None,
    ) -> None:
        self.home = Path(home)
        self.settings = settings or ChromaSettings()
        server = self.settings.mode == "server"
        self.capabilities = Capabilities(
            filters=True,
            filter_operators=ALL_OPS,
            get=True,
            scan=True,
            indexes=True,
            keys=True,
            deletion=True,
            persistence=True,
            concurrent_writers=True,
            multiprocess_writers=False,
            server=server,
            dense=True,
            # Chroma keeps records apart from vectors in both modes; the kit's delete_rows
            # hook can reach an embedded folder's files only, so only that mode claims it
            separate_records=not server,
            vectors=True,
        )
        self._store: Store = (
            ServerStore(self.settings) if server else EmbeddedStore(self.home, self.settings)
        )
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        self._recorded: dict[str, Embedder] = {}
        """Embedders built from names indexes recorded (see :meth:`_recorded_embedder`)."""
        self._max_batch: int | None = None
        self._aclient: Any = None
        """Server mode: chromadb's ``AsyncHttpClient`` for the coroutine ops, made on first use."""
        self._ahandles: dict[str, tuple[Any, Any, list[str], Embedder, bool]] = {}
        """:attr:`_handles` of the async client."""
        self._handles: dict[str, tuple[Any, Any, list[str], Embedder, bool]] = {}
        """index -> (client, collection, what a query includes, embedder, typed fields) for
        searches (see
        :meth:`_search_handle`)."""

    # -- embedder ----------------------------------------------------------------------------
    def embedder(self) -> Embedder:
        """The configured embedder, created on first use (creating one may be slow or fail)."""
        with self._embedder_lock:
            if self._embedder is None:
                factory = self._embedder_factory
                if factory is None:
                    from indexplug.plugins import get_registry

                    factory = get_registry().embedder
                self._embedder = factory(self.settings.embedder)
            return self._embedder

    def warm(self) -> None:
        """Load the embedder's model now, outside any deadline (the first embedding of a
        process otherwise pays the model load inside its op's deadline)."""
        emb = self.embedder()
        emb.embed_query("warm up", Granularity.TEXT)

    def prepare(self) -> None:
        """Load what a search embeds its query with, before the first search's deadline
        starts (the guard calls it once, see :meth:`indexplug.guard.Guard.prepare`).

        With the embedder's torch-free query encoder this is a fraction of a second; without
        it, torch and the model load (seconds).  On a terminal a line on stderr says so.  It
        replaces a daemon thread that loaded the model in the background: a daemon thread
        still inside torch when the interpreter exits aborts the process (SIGABRT, "terminate
        called without an active exception") after it printed its answer.
        """
        if chromadb_missing():
            return
        emb = self.embedder()
        if not emb.readiness().ready:
            return
        announce = sys.stderr.isatty()
        if announce:
            print(f"loading {emb.name} ...", file=sys.stderr, end="", flush=True)
        try:
            emb.embed_query("warm up", Granularity.TEXT)
        finally:
            if announce:
                print(" done", file=sys.stderr, flush=True)

    def _cache(self, emb: Embedder) -> EmbeddingCache | None:
        if not self.settings.embed_cache:
            return None
        return cache_for(emb, root=self.settings.embed_cache_dir)

    def _embed(self, emb: Embedder, passages: Sequence[Passage], deadline: Deadline) -> list[Any]:
        cache = self._cache(emb)
        out: list[Any] = []
        for i in range(0, len(passages), EMBED_CHUNK):
            _in_time(deadline, "embedding the passages")
            chunk = embed_passages(
                emb, passages[i : i + EMBED_CHUNK], Granularity.TEXT, cache=cache
            )
            out.extend(_checked_vector(v, emb) for v in chunk)
        return out

    # -- readiness ---------------------------------------------------------------------------
    def readiness(self) -> Readiness:
        missing = chromadb_missing()
        if missing:
            return Readiness.no(missing)
        try:
            emb = self.embedder()
        except Exception as exc:
            return Readiness.no(
                f"embedder '{self.settings.embedder}' cannot be created: {type(exc).__name__}: "
                f"{exc}"
            )
        ready = emb.readiness()
        if not ready.ready:
            return Readiness.no(f"embedder '{emb.name}' is not ready: {ready.reason}")
        beat = self._store.heartbeat()
        if beat:
            return Readiness.no(beat)
        return Readiness.yes()

    def close(self) -> None:
        self._handles.clear()
        self._ahandles.clear()
        self._aclient = None
        self._store.close()

    # -- helpers -----------------------------------------------------------------------------
    @contextmanager
    def _write_lock(self, index: str, deadline: Deadline) -> Iterator[None]:
        with _WRITE_LOCKS_LOCK:
            lock = _WRITE_LOCKS.setdefault(self._store.key(index), threading.Lock())
        if not lock.acquire(timeout=deadline.remaining()):
            raise WriteLockBusy(f"another write to '{index}' held it past the deadline")
        try:
            yield
        finally:
            lock.release()

    def _check_embedder(
        self, index: str, collection: Any, emb: Embedder
    ) -> tuple[dict[str, Any], Embedder]:
        """The collection's metadata and the embedder to use for it, after checking it was
        built with ``emb`` (or, for an ``...@auto`` spec, with the concrete path ``auto``
        resolved to where the index was built: :meth:`_recorded_embedder`)."""
        meta = dict(collection.metadata or {})
        name, dim = meta.get(EMBEDDER_KEY), meta.get(DIM_KEY)
        if name is None or dim is None:
            raise EmbedderMismatch(
                f"collection '{collection.name}' records no indexplug embedder (it was not "
                "created by indexplug); refusing to mix embeddings with it"
            )
        if name != emb.name:
            emb = self._recorded_embedder(str(name), emb)
        if name != emb.name or int(dim) != emb.dim:
            raise EmbedderMismatch(
                f"index '{index}' was built with embedder {name} (dim {dim}) but this backend "
                f"is configured with {emb.name} (dim {emb.dim}); searching or writing it would "
                f"mix embeddings. Use --embedder {name} (option embedder={name}) for this "
                "index, or build a new index"
            )
        return meta, emb

    def _recorded_embedder(self, recorded: str, emb: Embedder) -> Embedder:
        """For a configured ``PROVIDER:MODEL@auto``: the embedder of the name the index
        recorded when that is the same model with a concrete path (``auto`` resolves per
        machine, so an index built elsewhere may record ``@bf16`` or no suffix, fp32, where
        ``auto`` here means ``@int8``); built from the recorded name, once.  Else ``emb``."""
        base, sep, path = self.settings.embedder.rpartition("@")
        if not sep or path.strip().lower() != "auto" or _model_of(recorded) != base:
            return emb
        with self._embedder_lock:
            made = self._recorded.get(recorded)
            if made is None:
                factory = self._embedder_factory
                if factory is None:
                    from indexplug.plugins import get_registry

                    factory = get_registry().embedder
                made = self._recorded[recorded] = factory(recorded)
        return made

    def _size(
        self, index: str, collection: Any | None, meta: Mapping[str, Any], dim: int
    ) -> int | None:
        """Measured (embedded) or estimated (server) bytes of the index now."""
        if not self._store.estimate_sizes:
            if self._store.exists(index) is False:
                return 0
            return self._store.disk_bytes(index)
        count = collection.count() if collection is not None else 0
        return sizes.estimated_bytes(count, int(meta.get(PAYLOAD_KEY, 0)), dim)

    def _failure(
        self, index: str, exc: BaseException, deadline: Deadline
    ) -> IndexFailed | IndexTimeout | IndexUnavailable:
        emb = self._embedder
        not_ready = None
        if emb is not None and not isinstance(exc, ChromaProblem):
            try:
                r = emb.readiness()
                not_ready = None if r.ready else f"embedder '{emb.name}': {r.reason}"
            except Exception:
                not_ready = None
        out = failure_outcome(
            index, self.name, exc, deadline, self.settings, embedder_not_ready=not_ready
        )
        if out.code == "INDEX_UNAVAILABLE" and isinstance(self._store, ServerStore):
            self._store.reset()
        return out


def _model_of(name: str) -> str:
    """``PROVIDER:MODEL`` of an embedder name, without its ``@PATH`` suffix (a suffix with a
    ``/`` is part of a folder name, as the sentence-transformers plugin reads it)."""
    head, sep, tail = name.rpartition("@")
    if not sep or not head or "/" in tail or "\\" in tail:
        return name
    return head


def _checked_vector(vector: Any, emb: Embedder) -> Vector:
    arr = np.asarray(vector, dtype=np.float32)
    if arr.shape != (emb.dim,):
        raise ValueError(
            f"embedder {emb.name} returned a vector of shape {arr.shape}, expected ({emb.dim},)"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"embedder {emb.name} returned a vector with NaN or infinity")
    return arr
