"""The guard: the only way the core calls a backend.

Whatever a plugin does, the caller gets exactly one allowed outcome:

* a request that is wrong (a name that is a path, ``top_k`` of 0, an oversize batch) is refused
  with a typed :class:`~indexplug.errors.InvalidRequest` before the plugin is involved;
* a plugin that is not ready is not called: ``IndexUnavailable`` with its reason;
* a plugin that raises becomes ``IndexFailed`` naming the plugin and the error;
* a plugin that returns anything but an allowed outcome (a bare list, ``None``, an empty
  ``Searched``) becomes ``IndexFailed`` with a contract-violation reason;
* a plugin that overruns its deadline becomes ``IndexTimeout`` (the caller is released at the
  deadline even if the plugin never returns);
* hits are checked: ranks 1..n, finite scores in order, the declared scale, at most ``top_k``,
  and passages whose text still matches their content-addressed id.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, cast

from indexplug.construct import copied
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidQuery, InvalidRequest
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    ALLOWED,
    AddOutcome,
    CheckedHits,
    Hit,
    Indexed,
    IndexFailed,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    Removed,
    RemoveOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    StatusOutcome,
    checked_hits,
)
from indexplug.passages import MetadataValue, Passage
from indexplug.pools import LazyPool, discard
from indexplug.protocols import IndexBackend, Readiness

MAX_TOP_K = 10_000
MAX_BATCH = 10_000
MAX_QUERY_CHARS = 100_000
MAX_REMOVE_IDS = 100_000
GRACE_S = 0.2
"""How long past the deadline the guard waits for the plugin's own (more precise) answer."""
VERIFIED_CACHE = 65_536
"""Passages whose integrity the guard remembers having checked (a 64-bit fingerprint of each,
about 60 bytes with the set's slot, not its text): enough for every passage a top-100 search
touches on a corpus like SciFact's 5,183 abstracts, where 4,096 remembered passages missed 42%
of the time."""
CHECKED_OBJECTS = 16_384
"""Passage objects the guard remembers having checked, by identity (a weak reference each,
about 120 bytes with the dict's slot): twice as many as
:func:`~indexplug.outcomes.hits_from_provenance` keeps to hand out again
(:data:`~indexplug.outcomes.REBUILT_PASSAGES`), for backends that share passages this way."""
HASH_KEY_SECRET = bool(sys.flags.hash_randomization) and (
    os.environ.get("PYTHONHASHSEED", "random") == "random"
)
"""Whether Python's string hash is keyed by a secret drawn when the interpreter started (the
default).  The guard's memory of intact passages (:meth:`Guard._intact`) is only sound then:
with ``PYTHONHASHSEED`` set to a number (reproducible builds, test runners) the key is known,
and altered text whose hash equals a remembered passage's could be crafted offline, so every
hit's content address is recomputed instead."""
READY_TTL_S = 1.0
"""A *ready* answer is trusted this long; a not-ready one is asked again on every call."""

_POOL = LazyPool(64, "indexplug-op")
"""Where calls of backends without cooperative deadlines run (abandoned at the deadline)."""


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Guard:
    """Wraps one backend instance and enforces the contract on every call.

    Use it exactly like the backend: ``guard.search("docs", "query", top_k=5)``.  Deadlines are
    given in seconds (``deadline_s``); the guard turns them into an absolute
    :class:`~indexplug.deadlines.Deadline` the plugin can plan with.
    """

    def __init__(self, backend: IndexBackend, *, plugin: str | None = None) -> None:
        self.backend = backend
        self.plugin = plugin or getattr(backend, "name", type(backend).__name__)
        self._ready_until = 0.0
        self._ready_lock = threading.Lock()
        self._verified: set[int] = set()
        """Fingerprints of passages already found intact (see :meth:`_intact`)."""
        self._checked: dict[int, weakref.ref[Passage]] = {}
        """The passage objects already found intact, by identity (see :meth:`_intact`)."""
        self._remember = HASH_KEY_SECRET
        """Whether that memory is used (see :data:`HASH_KEY_SECRET`)."""
        caps = getattr(backend, "capabilities", None)
        claim = getattr(caps, "cooperative_deadlines", False)
        self._inline: bool | frozenset[str] = (
            claim if claim is True or isinstance(claim, frozenset) else False
        )
        """Ops run on the caller's thread: all (``True``) or those named (the plugin claims
        they stop by their deadlines)."""

    # -- what the backend declares -------------------------------------------------------
    @property
    def name(self) -> str:
        return str(getattr(self.backend, "name", self.plugin))

    @property
    def score_scale(self) -> Any:
        return self.backend.score_scale

    @property
    def capabilities(self) -> Any:
        return self.backend.capabilities

    def readiness(self) -> Readiness:
        """The plugin's own readiness, with a raising or lying plugin reported as not ready."""
        try:
            r = self.backend.readiness()
        except Exception as exc:
            return Readiness.no(f"readiness check raised {_describe(exc)}")
        if not isinstance(r, Readiness):
            return Readiness.no(f"readiness() returned {type(r).__name__}, not Readiness")
        if not r.ready and not r.reason:
            return Readiness.no("not ready (the backend gave no reason)")
        return r

    def close(self) -> None:
        closer = getattr(self.backend, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception:
                pass

    # -- ops -----------------------------------------------------------------------------
    def add(
        self,
        index: str,
        passages: Sequence[Passage],
        *,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
    ) -> AddOutcome:
        validate_index_name(index)
        if isinstance(passages, (str, bytes)) or not isinstance(passages, Sequence):
            raise InvalidRequest("passages must be a list of Passage", field="passages")
        if len(passages) > MAX_BATCH:
            raise InvalidRequest(
                f"a batch of {len(passages)} passages is over the limit of {MAX_BATCH}; "
                "split it into smaller batches",
                field="passages",
            )
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes <= 0):
            raise InvalidRequest("max_bytes must be a positive integer", field="max_bytes")
        unique: dict[str, Passage] = {}
        for p in passages:
            if not isinstance(p, Passage):
                raise InvalidRequest(
                    f"passages must be Passage objects, got {type(p).__name__}", field="passages"
                )
            unique.setdefault(p.id, p)
        batch = list(unique.values())
        dupes = len(passages) - len(batch)
        deadline = Deadline.after(deadline_s)

        def check(out: Any) -> Any:
            if isinstance(out, Indexed):
                if out.added + out.known != len(batch):
                    return self._violation(
                        index,
                        f"reported {out.added} added + {out.known} known for "
                        f"{len(batch)} distinct passages",
                    )
                if dupes:
                    return out.model_copy(update={"known": out.known + dupes})
            return out

        return cast(
            AddOutcome,
            self._call(
                "add",
                index,
                deadline,
                lambda: self.backend.add(index, batch, max_bytes=max_bytes, deadline=deadline),
                check,
            ),
        )

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int = 10,
        deadline_s: float | None = None,
        filters: Mapping[str, MetadataValue] | None = None,
    ) -> SearchOutcome:
        validate_index_name(index)
        if not isinstance(query, str):
            raise InvalidQuery(f"a query must be text, not {type(query).__name__}")
        if not query.strip():
            raise InvalidQuery("the query is empty")
        if "\x00" in query:
            raise InvalidQuery("the query contains a NUL character")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidQuery(f"the query is longer than {MAX_QUERY_CHARS} characters")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise InvalidRequest(
                f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}", field="top_k"
            )
        if filters:
            if not getattr(self.backend.capabilities, "filters", False):
                raise InvalidRequest(
                    f"backend '{self.name}' does not support metadata filters", field="filters"
                )
            for k, v in filters.items():
                if not isinstance(k, str) or not isinstance(v, (str, int, float, bool)):
                    raise InvalidRequest(
                        "filters map metadata keys to str/int/float/bool values", field="filters"
                    )
        deadline = Deadline.after(deadline_s)
        started = time.perf_counter()

        def check(out: Any) -> Any:
            elapsed = round((time.perf_counter() - started) * 1000, 3)
            if isinstance(out, Searched):
                problem = self._check_hits(out, top_k)
                if problem is not None:
                    return problem
                stamp: dict[str, Any] = {"deadline_s": deadline.seconds, "elapsed_ms": elapsed}
                if type(out.hits) is not CheckedHits:
                    # every answer passed on has read-only hits, whoever built them
                    higher = out.scale.higher_is_better
                    stamp["hits"] = checked_hits(
                        out.hits, scale=out.scale.name, descending=higher, ascending=not higher
                    )
                return copied(out, stamp)
            if isinstance(out, NoMatch):
                return copied(out, {"deadline_s": deadline.seconds, "elapsed_ms": elapsed})
            return out

        return cast(
            SearchOutcome,
            self._call(
                "search",
                index,
                deadline,
                lambda: self.backend.search(
                    index,
                    query,
                    top_k=top_k,
                    deadline=deadline,
                    filters=dict(filters or {}) or None,
                ),
                check,
            ),
        )

    def remove(
        self, index: str, ids: Sequence[str], *, deadline_s: float | None = None
    ) -> RemoveOutcome:
        validate_index_name(index)
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise InvalidRequest("ids must be a list of passage ids", field="ids")
        if len(ids) > MAX_REMOVE_IDS:
            raise InvalidRequest(f"at most {MAX_REMOVE_IDS} ids per call", field="ids")
        if not all(isinstance(i, str) for i in ids):
            raise InvalidRequest("ids must be strings", field="ids")
        distinct = list(dict.fromkeys(ids))
        deadline = Deadline.after(deadline_s)

        def check(out: Any) -> Any:
            if isinstance(out, Removed) and out.removed + len(out.missing_ids) != len(distinct):
                return self._violation(
                    index,
                    f"reported {out.removed} removed + {len(out.missing_ids)} missing "
                    f"for {len(distinct)} ids",
                )
            return out

        return cast(
            RemoveOutcome,
            self._call(
                "remove",
                index,
                deadline,
                lambda: self.backend.remove(index, distinct, deadline=deadline),
                check,
            ),
        )

    def status(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        validate_index_name(index)
        deadline = Deadline.after(deadline_s)
        return cast(
            StatusOutcome,
            self._call(
                "status",
                index,
                deadline,
                lambda: self.backend.status(index, deadline=deadline),
                lambda out: out,
            ),
        )

    def call_extra(
        self, op: str, index: str, deadline_s: float | None = None, **kwargs: Any
    ) -> Any:
        """Run a backend-specific op (``rerank``, ``explain``, ``rebuild``...) under the same
        readiness, exception and deadline rules.  Its result is whatever the op documents."""
        validate_index_name(index)
        fn = getattr(self.backend, f"op_{op}", None)
        if not callable(fn):
            raise InvalidRequest(f"backend '{self.name}' has no op '{op}'", field="op")
        deadline = Deadline.after(deadline_s)
        return self._call(
            op, index, deadline, lambda: fn(index, deadline=deadline, **kwargs), lambda o: o
        )

    # -- machinery -----------------------------------------------------------------------
    def _ready(self) -> Readiness:
        now = time.monotonic()
        if now < self._ready_until:
            return Readiness.yes()
        r = self.readiness()
        if r.ready:
            with self._ready_lock:
                self._ready_until = time.monotonic() + READY_TTL_S
        return r

    def forget_readiness(self) -> None:
        """Ask the plugin again on the next call (after an op reported it unavailable)."""
        self._ready_until = 0.0

    def _violation(self, index: str, reason: str) -> IndexFailed:
        return IndexFailed(
            index=index,
            backend=self.plugin,
            reason=f"contract violation by plugin '{self.plugin}': {reason}",
            error_type="ContractViolation",
        )

    def _call(
        self,
        op: str,
        index: str,
        deadline: Deadline,
        fn: Callable[[], Any],
        check: Callable[[Any], Any],
    ) -> Any:
        ready = self._ready()
        if not ready.ready:
            return IndexUnavailable(
                index=index, backend=self.plugin, reason=ready.reason or "not ready"
            )
        inline = self._inline is True or (
            isinstance(self._inline, frozenset) and op in self._inline
        )

        def answer() -> Any:
            # The plugin's answer, then its checks, on the same thread: a pooled call's hits
            # are checked on the core that built them (the checks read every hit's text; on
            # the caller's thread they were read again from the other core's cache, and a
            # top-100 search's check took twice as long).
            try:
                out = fn()
            except TimeoutError:
                raise
            except Exception as exc:
                return IndexFailed(
                    index=index,
                    backend=self.plugin,
                    reason=f"plugin '{self.plugin}' raised during {op}: {_describe(exc)}",
                    error_type=type(exc).__name__,
                )
            try:
                return self._settle(op, index, out, check)
            except Exception as exc:
                # an answer built without validation (Hit.from_stored, Searched.from_stored)
                # whose parts are not what they claim: its check tripped over them
                return self._violation(
                    index, f"its answer to {op} could not be checked: {_describe(exc)}"
                )

        try:
            if inline:
                out = answer()
                if time.monotonic() > deadline.at + GRACE_S:
                    raise TimeoutError  # it claimed to stop by itself and did not
            else:
                future: Future[Any] = _POOL.get().submit(answer)
                try:
                    out = future.result(timeout=deadline.remaining() + GRACE_S)
                except TimeoutError:
                    future.add_done_callback(discard)
                    raise
        except TimeoutError:
            return IndexTimeout(
                index=index,
                backend=self.plugin,
                deadline_s=deadline.seconds,
                reason=f"plugin '{self.plugin}' did not answer {op} within its deadline",
            )
        if isinstance(out, IndexUnavailable):
            self.forget_readiness()
        return out

    def _settle(self, op: str, index: str, out: Any, check: Callable[[Any], Any]) -> Any:
        """``out`` if it is an allowed outcome of ``op`` for ``index`` (``check`` applied),
        else the contract violation it is."""
        allowed = ALLOWED.get(op)
        if allowed is not None and not isinstance(out, allowed):
            names = ", ".join(t.__name__ for t in allowed)
            return self._violation(
                index, f"{op} returned {type(out).__name__}, which is not one of: {names}"
            )
        if allowed is not None:
            if out.index != index:
                return self._violation(index, f"answered for index '{out.index}'")
            if not out.backend:
                out = copied(out, {"backend": self.plugin})
        return check(out)

    def _intact(self, p: Passage) -> bool:
        """Whether ``p`` still matches its content-addressed id.

        Hashing every hit's text (SHA-256 of its canonical form) is most of what the guard
        costs on a search, and the same passages come back query after query; so a passage
        found intact is remembered twice over.

        * **The object itself**, by identity (a weak reference, so it is never kept alive
          here): a backend may hand the same passage object to every search that finds it
          (the hits :func:`~indexplug.outcomes.hits_from_provenance` builds do, but come
          checked, as :class:`~indexplug.outcomes.CheckedHits`, unless one of them did not
          match its id; then the others are checked here).  The fields the id covers (text,
          source uri, span) cannot change on a frozen passage with a frozen source, so an
          object found intact stays intact; its check is one dictionary look-up.
        * **A fingerprint** of its id and of the fields the id covers, for backends that build
          a new object per hit: the text's length and Python's own hash of it (SipHash with a
          key drawn per process, about five times cheaper than the canonical SHA-256 and
          cached on the string), the uri and the span, folded into one 64-bit hash.  A passage
          whose fingerprint is remembered is intact without hashing again.  Passing off
          altered text would take its fingerprint colliding with one of the remembered ones
          (at most :data:`VERIFIED_CACHE`, so about one chance in 2**48 per try) under hashes
          keyed by a key that never leaves the process; only while that key is secret
          (:data:`HASH_KEY_SECRET`), otherwise every other passage is hashed.  One integer per
          passage in a set (rather than a tuple per id in a dict) is what a search touches per
          hit, which matters more than instructions once the hits' objects are out of the
          CPU's caches.

        Both memories are bounded (:data:`CHECKED_OBJECTS` objects and :data:`VERIFIED_CACHE`
        fingerprints, then each starts over).
        """
        checked = self._checked
        seen = checked.get(id(p))
        if seen is not None and seen() is p:
            return True
        if self._remember:
            text = p.text
            fingerprint = hash((p.id, hash(text), len(text), p.source.uri, p.start, p.end))
            if fingerprint not in self._verified:
                if p.id != p.expected_id():
                    return False
                if len(self._verified) >= VERIFIED_CACHE:
                    self._verified.clear()
                self._verified.add(fingerprint)
        elif p.id != p.expected_id():
            return False
        if len(checked) >= CHECKED_OBJECTS:
            checked.clear()
        checked[id(p)] = weakref.ref(p)
        return True

    def _check_hits(self, out: Searched, top_k: int) -> IndexFailed | None:
        index = out.index
        hits = out.hits
        if (
            not isinstance(hits, list)
            or isinstance(out.searched, bool)
            or not isinstance(out.searched, int)
            or not isinstance(out.scale, ScoreScale)
            or not isinstance(out.backend, str)
        ):
            # possible only for an answer built without validation (Searched.from_stored)
            return self._violation(
                index,
                "answered SEARCHED with hits, searched, scale or backend of the wrong type",
            )
        if not hits:
            return self._violation(
                index, "answered SEARCHED with no hits (an empty result must be NO_MATCH)"
            )
        if len(out.hits) > top_k:
            return self._violation(index, f"returned {len(out.hits)} hits for top_k={top_k}")
        declared = self.backend.score_scale.name
        if out.scale.name != declared:
            return self._violation(
                index, f"outcome scale '{out.scale.name}' differs from declared '{declared}'"
            )
        if out.searched < len(out.hits):
            return self._violation(
                index, f"searched={out.searched} is fewer than the {len(out.hits)} hits"
            )
        higher = out.scale.higher_is_better
        if (
            type(hits) is CheckedHits
            and hits.scale == declared
            and (hits.descending if higher else hits.ascending)
        ):
            # built and checked by the core as it built them (hits_from_provenance): ranks
            # 1..n, every hit on ``declared``, scores finite and in order, passages intact
            return None
        prev = math.inf if higher else -math.inf
        checked, isfinite = self._checked, math.isfinite
        for i, hit in enumerate(hits, start=1):
            if not isinstance(hit, Hit):
                return self._violation(index, f"hit {i} is a {type(hit).__name__}, not a Hit")
            if hit.rank != i:
                return self._violation(index, f"hit {i} has rank {hit.rank}; ranks must be 1..n")
            if not isfinite(hit.score):
                return self._violation(index, f"hit {i} has a non-finite score {hit.score}")
            if hit.score_scale != declared:
                return self._violation(
                    index, f"hit {i} is on scale '{hit.score_scale}', not '{declared}'"
                )
            if (higher and hit.score > prev) or (not higher and hit.score < prev):
                return self._violation(index, f"scores are out of order at rank {i}")
            prev = hit.score
            p = hit.passage
            seen = checked.get(id(p))  # _intact's first look, without a call per hit
            if (seen is None or seen() is not p) and not self._intact(p):
                return IndexFailed(
                    index=index,
                    backend=self.plugin,
                    reason=(
                        f"stored passage {hit.passage.id[:12]}... no longer matches its "
                        "content-addressed id (altered after indexing); not served"
                    ),
                    error_type="IntegrityError",
                )
        return None
