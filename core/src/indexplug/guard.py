"""The guard: the only way the core calls a backend.

Whatever a plugin does, the caller gets exactly one allowed outcome:

* a request that is wrong (a name that is a path, ``top_k`` of 0, an oversize batch) is refused
  with a typed :class:`~indexplug.errors.InvalidRequest` before the plugin is involved;
* a plugin that is not ready is not called: ``IndexUnavailable`` with its reason;
* a plugin that raises becomes ``IndexFailed`` naming the plugin and the error;
* a plugin that returns anything but an allowed outcome of the exact type (a bare list,
  ``None``, a subclass, an empty ``Searched``, fields of the wrong type) becomes
  ``IndexFailed`` with a contract-violation reason;
* every op runs on a worker thread, and the caller is released at its deadline: an answer
  that comes back after the deadline is ``IndexTimeout``, whatever it says;
* every hit of every answer is checked (ranks 1..n, finite scores in order, the declared
  scale, at most ``top_k``, each passage matching its content-addressed id and its digest),
  and the caller gets copies the guard built from the checked values, so nothing the plugin
  keeps or changes afterwards can reach the caller.

The guard keeps one memory: the passages it has checked (:data:`CHECKED_PASSAGES`, by
digest).  A hit whose passage has exactly the fields of one it remembers gets that checked
passage without hashing again.  Only the guard fills it, from its own copies.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from indexplug.construct import construct
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidQuery, InvalidRequest
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    ALLOWED,
    AddOutcome,
    Explained,
    Hit,
    Indexed,
    IndexFailed,
    IndexTimeout,
    IndexUnavailable,
    Neighbours,
    NoMatch,
    Removed,
    RemoveOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    StatusOutcome,
)
from indexplug.passages import Metadata, MetadataValue, Passage, Source, passage_digest, passage_id
from indexplug.pools import LazyPool, discard
from indexplug.protocols import EXTENSION_OPS, IndexBackend, Readiness

MAX_TOP_K = 10_000
MAX_BATCH = 10_000
MAX_QUERY_CHARS = 100_000
MAX_REMOVE_IDS = 100_000
SETTLE_S = 0.02
"""How long past the deadline the caller waits for the guard's own checks of an answer the
plugin gave *before* the deadline (an answer given after it is ``IndexTimeout`` anyway)."""
CHECKED_PASSAGES = 16_384
"""How many checked passages the guard remembers (then it forgets the oldest)."""
READY_TTL_S = 1.0
"""A *ready* answer is trusted this long; a not-ready one is asked again on every call."""

_POOL = LazyPool(64, "indexplug-op")
"""Where every backend call runs (abandoned at its deadline)."""

_SCALARS = (str, int, float, bool)
_SOURCE_TEXT = ("uri", "sha256", "provenance", "licence")
_SOURCE_DATES = ("retrieved_at", "published_at")


class _Refused(Exception):
    """A hit the guard will not serve; ``outcome`` says why."""

    def __init__(self, outcome: IndexFailed) -> None:
        self.outcome = outcome


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
        self._checked: dict[str, Passage] = {}
        """Passages this guard checked and built, by digest (see :meth:`_passage`)."""
        self._checked_lock = threading.Lock()

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
        if not any(ch.isalnum() for ch in query):  # "?!", "--": nothing any backend can search
            raise InvalidQuery("the query has no word to search (no letter or digit)")
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
            if type(out) is Searched:
                return self._checked_search(out, top_k, deadline.seconds, elapsed)
            if type(out) is NoMatch:
                return _stamped(out, deadline_s=deadline.seconds, elapsed_ms=elapsed)
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
        """Run an extension op (``drop``, ``optimize``, ``rebuild``, ``rerank``, ``explain``,
        ``neighbours``: :data:`indexplug.protocols.EXTENSION_OPS`) under the same readiness,
        exception and deadline rules as any op.  Its arguments are checked before the plugin
        is called, and its answer like any other: one of the outcomes
        :data:`~indexplug.outcomes.ALLOWED` for it, every passage in it checked and copied
        (and a rerank's hits only passages the caller gave)."""
        validate_index_name(index)
        if op not in EXTENSION_OPS:
            known = ", ".join(sorted(EXTENSION_OPS))
            raise InvalidRequest(f"'{op}' is not an extension op (those are: {known})", field="op")
        fn = getattr(self.backend, f"op_{op}", None)
        if not callable(fn):
            raise InvalidRequest(f"backend '{self.name}' has no op '{op}'", field="op")
        check = self._extra_check(op, kwargs)
        deadline = Deadline.after(deadline_s)
        return self._call(
            op, index, deadline, lambda: fn(index, deadline=deadline, **kwargs), check
        )

    def _extra_check(self, op: str, kwargs: dict[str, Any]) -> Callable[[Any], Any]:
        """Refuse malformed arguments of extension op ``op``; the check of its answer."""
        expected = {
            "drop": set(),
            "optimize": set(),
            "rebuild": set(),
            "rerank": {"query", "passages"},
            "explain": {"query", "passage_id"},
            "neighbours": {"passage_id", "before", "after"},
        }[op]
        if set(kwargs) != expected:
            names = ", ".join(sorted(expected)) or "none"
            raise InvalidRequest(f"'{op}' takes these arguments: {names}", field="op")
        if "query" in kwargs and not isinstance(kwargs["query"], str):
            raise InvalidQuery("a query must be text")
        if "passage_id" in kwargs and not isinstance(kwargs["passage_id"], str):
            raise InvalidRequest("passage_id must be a string", field="passage_id")
        for side in ("before", "after"):
            n = kwargs.get(side, 0)
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_TOP_K:
                raise InvalidRequest(f"{side} must be an integer from 0 to {MAX_TOP_K}", field=side)
        given: dict[str, Passage] = {}
        if op == "rerank":
            ps = kwargs["passages"]
            if isinstance(ps, (str, bytes)) or not isinstance(ps, Sequence) or len(ps) > MAX_BATCH:
                raise InvalidRequest(
                    f"passages must be a list of at most {MAX_BATCH} Passage", field="passages"
                )
            if not all(isinstance(p, Passage) for p in ps):
                raise InvalidRequest("passages must be Passage objects", field="passages")
            given = {p.id: p for p in ps}

        def check(out: Any) -> Any:
            if type(out) is Searched:
                answer = self._checked_search(out, max(len(given), 1), 0.0, 0.0)
                if isinstance(answer, Searched):
                    foreign = [h.passage.id for h in answer.hits if h.passage.id not in given]
                    if foreign:
                        return self._violation(
                            out.index, f"rerank answered {len(foreign)} passage(s) it was not given"
                        )
                    return _stamped(answer, deadline_s=None, elapsed_ms=None)
                return answer
            if type(out) in (Explained, Neighbours):
                return self._checked_passages(out)
            return out

        return check

    def _checked_passages(self, out: Any) -> Any:
        """An ``Explained`` or ``Neighbours`` answer rebuilt around the guard's checked copies
        of its passages (validated from its fields), or why not."""
        fields = dict(out.__dict__)
        index = fields.get("index")
        if type(index) is not str:
            return self._violation(str(index), "answered for an index that is not text")
        try:
            if type(out) is Explained:
                fields["passage"] = self._passage(index, 1, fields.get("passage"))
                scale = fields.get("scale")
                if scale != self.backend.score_scale:
                    return self._violation(index, "explained a score on another scale")
                score = fields.get("score")
                if not isinstance(score, (int, float)) or type(score) not in (int, float):
                    return self._violation(index, "explained a score that is not a number")
                if not math.isfinite(score):
                    return self._violation(index, "explained a score that is not a finite number")
            else:
                for side in ("before", "after"):
                    items = fields.get(side)
                    if type(items) is not list:
                        return self._violation(index, f"answered neighbours {side} not as a list")
                    fields[side] = [self._passage(index, i, p) for i, p in enumerate(items, 1)]
        except _Refused as refused:
            return refused.outcome
        passages = fields.pop("passage", None)
        before, after = fields.pop("before", None), fields.pop("after", None)
        rebuilt = type(out).model_validate(fields | _present(passages, before, after))
        return rebuilt

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
        """Run ``fn`` (the plugin's op) on a worker thread and answer by ``deadline``.

        Every op of every backend runs there, whatever the backend claims about its own
        deadlines: only a thread the caller does not wait on can be abandoned, and the caller
        gets ``IndexTimeout`` at the deadline (plus :data:`SETTLE_S` at most, for the guard's
        own checks of an answer that came in time) even from a plugin that never returns.
        """
        ready = self._ready()
        if not ready.ready:
            return IndexUnavailable(
                index=index, backend=self.plugin, reason=ready.reason or "not ready"
            )

        def answer() -> Any:
            # the plugin's answer, then its checks, on the worker thread
            try:
                out = fn()
            except TimeoutError:
                return self._late(op, index, deadline, "reported that it ran out of time")
            except Exception as exc:
                if time.monotonic() > deadline.at:
                    return self._late(op, index, deadline, "answered after its deadline")
                return IndexFailed(
                    index=index,
                    backend=self.plugin,
                    reason=f"plugin '{self.plugin}' raised during {op}: {_describe(exc)}",
                    error_type=type(exc).__name__,
                )
            if time.monotonic() > deadline.at:
                return self._late(op, index, deadline, "answered after its deadline")
            try:
                return self._settle(op, index, out, check)
            except Exception as exc:
                # an answer built without validation whose parts are not what they claim
                return self._violation(
                    index, f"its answer to {op} could not be checked: {_describe(exc)}"
                )

        future: Future[Any] = _POOL.get().submit(answer)
        try:
            out = future.result(timeout=deadline.remaining() + SETTLE_S)
        except TimeoutError:
            future.add_done_callback(discard)
            return self._late(op, index, deadline, "did not answer within its deadline")
        if isinstance(out, IndexUnavailable):
            self.forget_readiness()
        return out

    def _late(self, op: str, index: str, deadline: Deadline, what: str) -> IndexTimeout:
        return IndexTimeout(
            index=index,
            backend=self.plugin,
            deadline_s=deadline.seconds,
            reason=f"plugin '{self.plugin}' {what} ({op})",
        )

    def _settle(self, op: str, index: str, out: Any, check: Callable[[Any], Any]) -> Any:
        """``out`` if it is an allowed outcome of ``op`` for ``index`` (``check`` applied),
        else the contract violation it is.

        Only the exact outcome types are allowed (a subclass could answer one thing to the
        check and another to the caller), and every answer but a search's (whose hits are
        checked and copied one by one) is validated again from its fields: the caller gets a
        model the guard built, of the declared types, never the plugin's object.
        """
        allowed = ALLOWED.get(op)
        if allowed is None:
            raise InvalidRequest(f"no outcomes are declared for op '{op}'", field="op")
        if type(out) not in allowed:
            names = ", ".join(t.__name__ for t in allowed)
            return self._violation(
                index, f"{op} returned {type(out).__name__}, which is not one of: {names}"
            )
        if type(out) not in (Searched, Explained, Neighbours):
            try:
                out = type(out).model_validate(dict(out.__dict__))
            except ValidationError as exc:
                return self._violation(
                    index, f"{op} answered a malformed {type(out).__name__}: {_describe(exc)}"
                )
        if out.index != index:
            return self._violation(index, f"answered for index '{out.index}'")
        if not out.backend:
            out = _stamped(out, backend=self.plugin)
        return check(out)

    # -- hits ----------------------------------------------------------------------------
    def _checked_search(
        self, out: Searched, top_k: int, deadline_s: float, elapsed_ms: float
    ) -> Searched | IndexFailed:
        """A new ``Searched`` holding the guard's own copies of ``out``'s hits, each checked,
        or the ``IndexFailed`` that the first bad hit makes of the answer."""
        fields = out.__dict__
        index, hits, searched = fields.get("index"), fields.get("hits"), fields.get("searched")
        scale, backend = fields.get("scale"), fields.get("backend")
        degraded = fields.get("degraded")
        if type(index) is not str:
            return self._violation(str(index), "answered SEARCHED for an index that is not text")
        if (
            type(hits) is not list
            or type(searched) is not int
            or type(scale) is not ScoreScale
            or type(backend) is not str
            or type(degraded) is not list
        ):
            return self._violation(
                index,
                "answered SEARCHED with hits, searched, scale or backend of the wrong type",
            )
        if not hits:
            return self._violation(
                index, "answered SEARCHED with no hits (an empty result must be NO_MATCH)"
            )
        if len(hits) > top_k:
            return self._violation(index, f"returned {len(hits)} hits for top_k={top_k}")
        declared = self.backend.score_scale
        if type(declared) is not ScoreScale:
            return self._violation(index, "declares a score scale that is not a ScoreScale")
        if scale != declared:
            return self._violation(
                index, f"outcome scale '{scale.name}' differs from declared '{declared.name}'"
            )
        if searched < len(hits):
            return self._violation(index, f"searched={searched} is fewer than the {len(hits)} hits")
        try:
            copies = self._checked_hits(index, list(hits), declared)
            notes = [_degradation(d) for d in degraded]
        except _Refused as refused:
            return refused.outcome
        return construct(
            Searched,
            {
                "index": index,
                "backend": backend or self.plugin,
                "code": "SEARCHED",
                "hits": copies,
                "searched": searched,
                "scale": declared,
                "deadline_s": deadline_s,
                "elapsed_ms": elapsed_ms,
                "degraded": notes,
            },
        )

    def _checked_hits(self, index: str, hits: list[Any], scale: ScoreScale) -> list[Hit]:
        higher, name = scale.higher_is_better, scale.name
        prev = math.inf if higher else -math.inf
        out: list[Hit] = []
        for i, hit in enumerate(hits, start=1):
            if type(hit) is not Hit:
                raise _Refused(
                    self._violation(index, f"hit {i} is a {type(hit).__name__}, not a Hit")
                )
            h = hit.__dict__
            rank, score, hit_scale = h.get("rank"), h.get("score"), h.get("score_scale")
            if type(rank) is not int or rank != i:
                raise _Refused(
                    self._violation(index, f"hit {i} has rank {rank!r}; ranks must be 1..n")
                )
            if type(score) is not float and type(score) is not int:
                raise _Refused(
                    self._violation(index, f"hit {i} has a score of type {type(score).__name__}")
                )
            score = float(score)
            if not math.isfinite(score):
                raise _Refused(self._violation(index, f"hit {i} has a non-finite score {score}"))
            if type(hit_scale) is not str or hit_scale != name:
                raise _Refused(
                    self._violation(index, f"hit {i} is on scale {hit_scale!r}, not '{name}'")
                )
            if (higher and score > prev) or (not higher and score < prev):
                raise _Refused(self._violation(index, f"scores are out of order at rank {i}"))
            prev = score
            passage = self._passage(index, i, h.get("passage"))
            out.append(
                construct(
                    Hit,
                    {
                        "rank": i,
                        "score": score,
                        "score_scale": name,
                        "passage": passage,
                        "untrusted": True,
                    },
                )
            )
        return out

    def _passage(self, index: str, i: int, p: Any) -> Passage:
        """The guard's own checked copy of hit ``i``'s passage ``p``.

        ``p``'s fields are read once, each must be of its exact type (no subclass can answer
        one value to the check and another to the caller), and the copy is made of those
        values.  A copy whose id or digest does not match its fields is refused
        (``IntegrityError``): altered text, metadata, licence, provenance or span.  A passage
        with exactly the fields of one checked before is answered with that checked copy,
        without hashing again.
        """
        if type(p) is not Passage:
            raise _Refused(
                self._violation(index, f"hit {i}'s passage is a {type(p).__name__}, not a Passage")
            )
        fields = _passage_fields(p.__dict__)
        if fields is None:
            raise _Refused(self._violation(index, f"hit {i}'s passage has fields of wrong types"))
        pid, text, source, doc_sha, start, end, metadata, digest = fields
        if digest is None:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... has no digest (stored by an older indexplug, "
                    "or its digest was removed); re-index it",
                )
            )
        known = self._checked.get(digest)
        if known is not None and _same(known, fields):
            return known
        src = _source_copy(source)
        if src is None:
            raise _Refused(self._violation(index, f"hit {i}'s source has fields of wrong types"))
        meta = Metadata(metadata)
        if passage_id(text, src.uri, start, end) != pid:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... no longer matches its content-addressed id "
                    "(text, uri or span altered after indexing); not served",
                )
            )
        if passage_digest(pid, src, doc_sha, start, end, meta) != digest:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... no longer matches its digest (source, "
                    "provenance, licence, span or metadata altered after indexing); not served",
                )
            )
        copy = construct(
            Passage,
            {
                "id": pid,
                "text": text,
                "source": src,
                "document_sha256": doc_sha,
                "start": start,
                "end": end,
                "metadata": meta,
                "digest": digest,
            },
        )
        with self._checked_lock:
            checked = self._checked
            while checked and len(checked) >= CHECKED_PASSAGES:
                del checked[next(iter(checked))]
            if CHECKED_PASSAGES > 0:
                checked[digest] = copy
        return copy

    def _integrity(self, index: str, reason: str) -> IndexFailed:
        return IndexFailed(
            index=index, backend=self.plugin, reason=reason, error_type="IntegrityError"
        )


_PassageFields = tuple[str, str, Any, str | None, int, int, dict[str, MetadataValue], str | None]


def _passage_fields(d: dict[str, Any]) -> _PassageFields | None:
    """A passage's fields from its ``__dict__``, if each is of its exact declared type."""
    pid, text, source = d.get("id"), d.get("text"), d.get("source")
    doc_sha, start, end = d.get("document_sha256"), d.get("start"), d.get("end")
    metadata, digest = d.get("metadata"), d.get("digest")
    if (
        type(pid) is not str
        or type(text) is not str
        or not text
        or type(source) is not Source
        or (doc_sha is not None and type(doc_sha) is not str)
        or type(start) is not int
        or type(end) is not int
        or not 0 <= start <= end
        or (type(metadata) is not Metadata and type(metadata) is not dict)
        or (digest is not None and type(digest) is not str)
    ):
        return None
    for key, value in metadata.items():
        if type(key) is not str or type(value) not in _SCALARS:
            return None
    return (pid, text, source, doc_sha, start, end, metadata, digest)


def _source_copy(source: Source) -> Source | None:
    """A new :class:`Source` with ``source``'s values, if each is of its exact type."""
    d = source.__dict__
    values: dict[str, Any] = {}
    for name in _SOURCE_TEXT:
        v = d.get(name)
        if v is not None and type(v) is not str:
            return None
        values[name] = v
    for name in _SOURCE_DATES:
        v = d.get(name)
        if v is not None and type(v) is not datetime:
            return None
        values[name] = v
    if not values["uri"]:
        return None
    return construct(Source, values)


def _same(known: Passage, fields: _PassageFields) -> bool:
    """Whether ``fields`` (exact types, see :func:`_passage_fields`) are those of ``known``."""
    pid, text, source, doc_sha, start, end, metadata, _ = fields
    k = known.__dict__
    if not (
        k["id"] == pid
        and k["text"] == text
        and k["document_sha256"] == doc_sha
        and k["start"] == start
        and k["end"] == end
    ):
        return False
    ks, s = k["source"].__dict__, source.__dict__
    for name in _SOURCE_TEXT:
        v = s.get(name)
        if (v is not None and type(v) is not str) or ks[name] != v:
            return False
    for name in _SOURCE_DATES:
        v = s.get(name)
        if (v is not None and type(v) is not datetime) or ks[name] != v:
            return False
    km = k["metadata"]
    if len(km) != len(metadata):
        return False
    for key, value in metadata.items():
        # exact types were checked; a bool is not an int here, nor 1 the same as 1.0
        if key not in km:
            return False
        mine = km[key]
        if type(mine) is not type(value) or mine != value:
            return False
    return True


def _degradation(d: Any) -> Any:
    from indexplug.outcomes import Degradation

    if type(d) is not Degradation:
        raise TypeError(f"a degradation note is a {type(d).__name__}")
    return Degradation.model_validate(dict(d.__dict__))


def _present(passage: Any, before: Any, after: Any) -> dict[str, Any]:
    """The checked passages of an answer, by field, for those it has."""
    out: dict[str, Any] = {}
    if passage is not None:
        out["passage"] = passage
    if before is not None:
        out["before"] = before
    if after is not None:
        out["after"] = after
    return out


def _stamped(out: BaseModel, **update: Any) -> Any:
    """A copy of the guard's own ``out`` with ``update`` applied (values of declared types)."""
    return out.model_copy(update=update)
