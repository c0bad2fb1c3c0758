"""The conformance checks: one list, shared by the pytest base class and the report card.

Every rule of the backend contract is one :class:`Check` in :data:`CHECKS`.  The pytest base
class (:mod:`indexplug.testing.kit`) turns each into a test method and the report card
(:mod:`indexplug.testing.card`) runs each directly, so the two can never disagree about what is
checked or how.

A check gets a :class:`Subject` (a guarded backend plus the optional hooks an author supplies)
and either returns (passed) or raises :class:`CheckFailed` with a reason written for the backend
author: what was done, what came back, and what the contract expected.

Checks go through :class:`indexplug.Guard` on purpose.  The guard already turns many violations
into ``INDEX_FAILED`` (a raise, a bare list, an empty ``SEARCHED``); the kit then fails with that
reason, e.g. "search on an index with no match returned INDEX_FAILED (contract violation ...)
instead of NO_MATCH".  The kit also checks what the guard cannot see from one call: state across
calls (idempotence, removal, budgets, persistence), honesty under deadlines and outages, and
fidelity of what comes back against what was added.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import math
import os
import pickle
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidIndexName, InvalidRequest
from indexplug.filters import (
    ALL_OPS,
    EQUALITY_OPS,
    FIELD_OPS,
    LOGICAL_OPS,
    Filter,
    matches,
    parse_filter,
    to_json,
)
from indexplug.guard import MAX_QUERY_CHARS, MAX_TOP_K, Guard
from indexplug.names import MAX_NAME_LENGTH
from indexplug.outcomes import (
    ALLOWED,
    Got,
    Indexed,
    IndexEmpty,
    IndexList,
    IndexStatus,
    NoMatch,
    OverBudget,
    Removed,
    Scanned,
    ScoreScale,
    Searched,
    outcome_from_json,
)
from indexplug.passages import MAX_PASSAGE_CHARS, Passage, Source, passage_id
from indexplug.protocols import Capabilities, Readiness
from indexplug.transfer import export

__all__ = [
    "CHECKS",
    "Check",
    "CheckFailed",
    "CheckResult",
    "CheckStatus",
    "KitSettings",
    "Subject",
    "check_ids",
    "claimed",
    "claims_of",
    "corpus",
    "kit_passage",
    "run_check",
]


# ---------------------------------------------------------------------------------------------
# results


class CheckStatus(StrEnum):
    """What became of one check.  ``NOT_CLAIMED`` is never a pass: the backend did not say it
    can do this, so nothing was verified (and a user must not rely on it)."""

    PASSED = "PASSED"
    FAILED = "FAILED"
    NOT_CLAIMED = "NOT_CLAIMED"
    SKIPPED = "SKIPPED"
    """Claimed or applicable, but it did not run: a hook it needs was not provided (in pytest
    that fails instead), or it was left out of the run (a card's ``"not run: ..."`` rows).
    The reason says which; either way the card is not complete."""


class CheckResult(BaseModel):
    """One line of a report card (also the JSON form, see :mod:`indexplug.testing.card`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    status: CheckStatus
    reason: str | None = None
    duration_s: float = 0.0


class CheckFailed(Exception):
    """The backend broke the rule a check verifies; the message is the reason on the card."""


def fail(reason: str) -> NoReturn:
    raise CheckFailed(reason)


# ---------------------------------------------------------------------------------------------
# what a check gets


@dataclass(frozen=True)
class KitSettings:
    """Sizes and time bounds of the checks.  The defaults are generous on purpose: the kit
    judges correctness, and a slow CI machine must not turn into a failed card."""

    op_deadline_s: float = 60.0
    """Deadline of every ordinary op the kit makes (not the deadline checks)."""
    tiny_deadline_s: float = 1e-6
    """A deadline no backend can meet: the answer must be ``INDEX_TIMEOUT``."""
    recovery_timeout_s: float = 30.0
    """How long a backend may take to become ready again after ``restore``."""
    threads: int = 8
    batches_per_thread: int = 12
    batch_size: int = 5
    processes: int = 3
    process_timeout_s: float = 120.0
    scale_passages: int = 3000
    scale_batch: int = 500
    scale_add_s: float = 120.0
    """Bound on adding all of ``scale_passages``."""
    scale_search_s: float = 10.0
    """Bound on each search of the scale check."""
    huge_passage_chars: int = MAX_PASSAGE_CHARS
    """Length of the largest passage added (the largest a :class:`Passage` may be)."""
    scan_page: int = 5
    """Page size of the scan checks (small, so that the kit's corpus takes several pages)."""
    upsert_rounds: int = 20
    """Versions of one keyed document written while readers watch (``keys.upsert``)."""
    property_examples: int = 8
    """Generated corpora of the filter property check (each a fresh index)."""
    property_filters: int = 20
    """Generated filters tried on each corpus."""
    property_passages: int = 16
    """Passages (with generated metadata) in each corpus."""


Tamper = Callable[[str, str, str], None]
TamperRecord = Callable[[str, str, Mapping[str, object]], None]
DeleteRows = Callable[[str, Sequence[str]], None]
Reopen = Callable[[Guard], Guard]


@dataclass
class Subject:
    """A backend under test: the guarded instance, plus the hooks that some checks need.

    Hooks left as ``None`` fall back to the backend's own methods where one exists
    (``tamper(index, passage_id, new_text)``, ``make_unavailable()``, ``restore()``), so a
    backend that carries its hooks needs nothing more than a ``backend`` fixture.
    """

    guard: Guard
    settings: KitSettings = field(default_factory=KitSettings)
    reopen: Reopen | None = None
    """Close the given instance and open a new one on the same storage (persistence)."""
    factory: Callable[[], Guard] | None = None
    """A picklable zero-argument callable opening another instance on the same storage; used
    by the multi-process check (each process opens its own) and as a default ``reopen``."""
    make_unavailable: Callable[[], None] | None = None
    restore: Callable[[], None] | None = None
    tamper: Tamper | None = None
    tamper_record: TamperRecord | None = None
    """Alter fields of a stored record behind the backend's back, keeping its id and digest
    (``changes`` may name ``text``, ``metadata``, ``licence``, ``provenance``, ``start``,
    ``end``); defaults to the backend's own ``tamper_record`` method."""
    delete_rows: DeleteRows | None = None
    """Delete stored records behind the backend's search structure (rows behind a full-text
    index, records behind vectors); defaults to the backend's own ``delete_rows`` method."""
    _opened: list[Guard] = field(default_factory=list, repr=False)

    # -- what the backend claims -------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities | None:
        caps = getattr(self.guard.backend, "capabilities", None)
        return caps if isinstance(caps, Capabilities) else None

    def claims(self, capability: str) -> bool:
        """A capability counts as claimed only if declared ``True`` (not merely truthy), or,
        for one claimed as a set (``filter_operators``), a non-empty set; ``drop`` is claimed
        by offering ``op_drop`` (see :func:`claims_of`)."""
        claims = claims_of(self.guard.backend)
        return claims is not None and claimed(claims.get(capability))

    # -- hooks -------------------------------------------------------------------------------
    def tamper_hook(self) -> Tamper | None:
        if self.tamper is not None:
            return self.tamper
        fn = getattr(self.guard.backend, "tamper", None)
        return fn if callable(fn) else None

    def tamper_record_hook(self) -> TamperRecord | None:
        if self.tamper_record is not None:
            return self.tamper_record
        fn = getattr(self.guard.backend, "tamper_record", None)
        return fn if callable(fn) else None

    def delete_rows_hook(self) -> DeleteRows | None:
        if self.delete_rows is not None:
            return self.delete_rows
        fn = getattr(self.guard.backend, "delete_rows", None)
        return fn if callable(fn) else None

    def outage_hooks(self) -> tuple[Callable[[], None], Callable[[], None]] | None:
        down = self.make_unavailable or getattr(self.guard.backend, "make_unavailable", None)
        up = self.restore or getattr(self.guard.backend, "restore", None)
        if callable(down) and callable(up):
            return down, up
        return None

    def reopen_hook(self) -> Reopen | None:
        if self.reopen is not None:
            return self.reopen
        factory = self.factory
        if factory is None:
            return None

        def reopen(old: Guard) -> Guard:
            old.close()
            return factory()

        return reopen

    def do_reopen(self) -> None:
        hook = self.reopen_hook()
        assert hook is not None
        new = hook(self.guard)
        if not isinstance(new, Guard):
            new = Guard(new)
        self._opened.append(new)
        self.guard = new

    def close(self) -> None:
        """Close the instances the kit opened itself (the author's fixture closes its own)."""
        for g in self._opened:
            g.close()
        self._opened.clear()

    # -- helpers -----------------------------------------------------------------------------
    def index(self, tag: str) -> str:
        """A fresh index name.  Random, so a server shared between runs never mixes them."""
        return f"kit-{tag}-{uuid.uuid4().hex[:10]}"


def claimed(value: object) -> bool:
    """Whether a claim's value claims it: ``True`` (not merely truthy), or a non-empty set of
    names (``filter_operators``, a per-op ``cooperative_deadlines``)."""
    if value is True:
        return True
    return isinstance(value, (set, frozenset, list, tuple)) and len(value) > 0


def claims_of(backend: object) -> dict[str, Any] | None:
    """What a backend claims, as checks are switched on by and cards record it: its
    :class:`Capabilities`, plus ``drop``, claimed by offering ``op_drop`` (the
    :class:`~indexplug.protocols.Droppable` extension op, which has no capability flag).
    ``None`` when it declares no ``Capabilities``."""
    caps = getattr(backend, "capabilities", None)
    if not isinstance(caps, Capabilities):
        return None
    out = caps.model_dump()
    out["drop"] = callable(getattr(backend, "op_drop", None))
    return out


# ---------------------------------------------------------------------------------------------
# the registry of checks


CheckFn = Callable[[Subject], None]


@dataclass(frozen=True)
class Check:
    """One rule of the contract.

    ``claim`` names the capability that switches the check on; without it the check is
    ``NOT_CLAIMED``.  ``needs`` names hooks (``tamper``, ``reopen``, ``factory``, ``outage``)
    without which a claimed check cannot run (``SKIPPED``, "untested: ...").  ``outage_or_claim``
    is the one special case: the outage check runs whenever outage hooks exist, and is
    ``NOT_CLAIMED`` only when the backend neither has them nor claims ``server``.
    """

    id: str
    title: str
    fn: CheckFn
    claim: str | None = None
    needs: tuple[str, ...] = ()
    outage_or_claim: bool = False


CHECKS: list[Check] = []
"""Every check, in the order the card lists them."""


def _check(
    id: str,
    title: str,
    *,
    claim: str | None = None,
    needs: tuple[str, ...] = (),
    outage_or_claim: bool = False,
) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        if any(c.id == id for c in CHECKS):
            raise RuntimeError(f"duplicate check id {id!r}")
        CHECKS.append(Check(id, title, fn, claim, needs, outage_or_claim))
        return fn

    return register


def check_ids() -> list[str]:
    return [c.id for c in CHECKS]


_HOOK_WORDS = {
    "tamper": "tamper(index, passage_id, new_text) hook (a backend method or the "
    "tamper_passage fixture)",
    "reopen": "way to reopen it on the same storage (reopen_backend or backend_factory)",
    "factory": "picklable backend_factory (each writer process opens its own instance)",
    "outage": "make_unavailable()/restore() hooks",
    "tamper_record": "tamper_record(index, passage_id, changes) hook",
    "delete_rows": "delete_rows(index, ids) hook",
}


def _has_hook(s: Subject, hook: str) -> bool:
    if hook == "tamper":
        return s.tamper_hook() is not None
    if hook == "reopen":
        return s.reopen_hook() is not None
    if hook == "factory":
        return s.factory is not None
    if hook == "outage":
        return s.outage_hooks() is not None
    if hook == "tamper_record":
        return s.tamper_record_hook() is not None
    if hook == "delete_rows":
        return s.delete_rows_hook() is not None
    raise ValueError(hook)


def _gate(check: Check, s: Subject) -> tuple[CheckStatus, str] | None:
    """Whether to run a check: ``None`` to run it, else the status and reason to report."""
    if check.outage_or_claim:
        if s.outage_hooks() is not None:
            return None
        if s.claims("server"):
            why = f"untested: claims server, but no {_HOOK_WORDS['outage']} were given"
            return CheckStatus.SKIPPED, why
        return CheckStatus.NOT_CLAIMED, "not claimed: server (and no outage hooks were given)"
    if check.claim is not None and not s.claims(check.claim):
        return CheckStatus.NOT_CLAIMED, f"not claimed: {check.claim}"
    missing = [h for h in check.needs if not _has_hook(s, h)]
    if missing:
        words = " and ".join(_HOOK_WORDS[h] for h in missing)
        if check.claim is not None:
            return CheckStatus.SKIPPED, f"untested: claims {check.claim}, but no {words} was given"
        return CheckStatus.SKIPPED, f"untested: needs a {words}, which was not given"
    return None


def run_check(check: Check, subject: Subject) -> CheckResult:
    """Run one check and say what became of it.  Never raises for a backend's misbehaviour:
    anything unexpected (an exception escaping a guarded call, a hook that raises) is a
    failure with its reason, since the contract promises typed answers only."""
    started = time.perf_counter()

    def result(status: CheckStatus, reason: str | None) -> CheckResult:
        return CheckResult(
            id=check.id,
            title=check.title,
            status=status,
            reason=reason,
            duration_s=round(time.perf_counter() - started, 3),
        )

    gate = _gate(check, subject)
    if gate is not None:
        return result(*gate)
    ready = subject.guard.readiness()
    if not ready.ready:
        why = f"the backend is not ready at the start of the check: {ready.reason}"
        return result(CheckStatus.FAILED, why)
    try:
        check.fn(subject)
    except CheckFailed as exc:
        return result(CheckStatus.FAILED, str(exc))
    except Exception as exc:  # anything escaping is itself the failure
        return result(CheckStatus.FAILED, f"unexpected {_describe(exc)} escaped during the check")
    return result(CheckStatus.PASSED, None)


# ---------------------------------------------------------------------------------------------
# calling the backend and judging what comes back


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _show(out: Any) -> str:
    """An outcome as a card shows it: its code, and the reason of a failure."""
    code = getattr(out, "code", None)
    if not isinstance(code, str):
        return f"a {type(out).__name__}"
    reason = getattr(out, "reason", None)
    return f"{code} ({reason})" if reason else code


def _roundtrip(out: Any, what: str) -> None:
    """The outcome must survive JSON: an orchestrator may only ever see it serialised."""
    try:
        text = out.model_dump_json()
        back = outcome_from_json(text)
    except Exception as exc:
        fail(
            f"the {_show(out)} answer to {what} does not serialise to JSON and back: "
            f"{_describe(exc)}"
        )
    if type(back) is not type(out) or back.model_dump(mode="json") != out.model_dump(mode="json"):
        fail(f"the {_show(out)} answer to {what} changes when serialised to JSON and back")


def _expect(out: Any, op: str, codes: Sequence[str], what: str, index: str | None = None) -> Any:
    allowed = ALLOWED[op]
    if not isinstance(out, allowed):
        names = ", ".join(t.__name__ for t in allowed)
        fail(
            f"{what} returned {type(out).__name__}, which is not an outcome {op} may answer "
            f"({names})"
        )
    _roundtrip(out, what)
    code: str = getattr(out, "code", "")
    if code not in codes:
        fail(f"{what} returned {_show(out)} instead of {' or '.join(codes)}")
    if index is not None and out.index != index:
        fail(f"{what} answered for index {out.index!r}, not {index!r}")
    return out


def _op(op: str, what: str, codes: Sequence[str], index: str, call: Callable[[], Any]) -> Any:
    try:
        out = call()
    except InvalidRequest as exc:
        fail(f"{what} was refused as an invalid request: {_describe(exc)}")
    except Exception as exc:  # nothing but typed answers may escape
        fail(f"{what} raised {_describe(exc)} instead of answering with an outcome")
    return _expect(out, op, codes, what, index)


def _add(
    s: Subject,
    index: str,
    passages: Sequence[Passage],
    what: str,
    codes: Sequence[str] = ("INDEXED",),
    *,
    max_bytes: int | None = None,
    deadline_s: float | None = None,
) -> Any:
    d = s.settings.op_deadline_s if deadline_s is None else deadline_s
    return _op(
        "add",
        what,
        codes,
        index,
        lambda: s.guard.add(index, passages, max_bytes=max_bytes, deadline_s=d),
    )


def _search(
    s: Subject,
    index: str,
    query: str,
    what: str,
    codes: Sequence[str] = ("SEARCHED",),
    *,
    top_k: int = 10,
    filters: Mapping[str, Any] | Filter | None = None,
    deadline_s: float | None = None,
) -> Any:
    d = s.settings.op_deadline_s if deadline_s is None else deadline_s
    return _op(
        "search",
        what,
        codes,
        index,
        lambda: s.guard.search(index, query, top_k=top_k, deadline_s=d, filters=filters),
    )


def _remove(
    s: Subject,
    index: str,
    ids: Sequence[str],
    what: str,
    codes: Sequence[str] = ("REMOVED",),
    *,
    deadline_s: float | None = None,
) -> Any:
    d = s.settings.op_deadline_s if deadline_s is None else deadline_s
    return _op("remove", what, codes, index, lambda: s.guard.remove(index, ids, deadline_s=d))


def _status(
    s: Subject,
    index: str,
    what: str,
    codes: Sequence[str] = ("STATUS",),
    *,
    deadline_s: float | None = None,
) -> Any:
    d = s.settings.op_deadline_s if deadline_s is None else deadline_s
    return _op("status", what, codes, index, lambda: s.guard.status(index, deadline_s=d))


def _get(
    s: Subject,
    index: str,
    ids: Sequence[str],
    what: str,
    *,
    keys: Sequence[str] = (),
    codes: Sequence[str] = ("GOT",),
) -> Any:
    d = s.settings.op_deadline_s
    return _op("get", what, codes, index, lambda: s.guard.get(index, ids, keys=keys, deadline_s=d))


def _scan(
    s: Subject,
    index: str,
    what: str,
    *,
    filters: Mapping[str, Any] | Filter | None = None,
    after: str | None = None,
    limit: int = 100,
    codes: Sequence[str] = ("SCANNED",),
) -> Any:
    d = s.settings.op_deadline_s
    return _op(
        "scan",
        what,
        codes,
        index,
        lambda: s.guard.scan(index, filters=filters, after=after, limit=limit, deadline_s=d),
    )


def _scan_all(
    s: Subject,
    index: str,
    what: str,
    expected: int,
    *,
    filters: Mapping[str, Any] | Filter | None = None,
    limit: int,
) -> list[Passage]:
    """Every page of a scan, following the cursor: each page at most ``limit`` passages, and
    the walk bounded (``expected`` passages take ``expected // limit + 1`` pages; two more
    are allowed for a last empty page) so a cursor that never ends fails instead of looping."""
    out: list[Passage] = []
    after: str | None = None
    bound = expected // limit + 3
    for page in range(1, bound + 1):
        got: Scanned = _scan(
            s, index, f"{what} (page {page})", filters=filters, after=after, limit=limit
        )
        if len(got.passages) > limit:
            fail(f"{what}: page {page} holds {len(got.passages)} passages for limit={limit}")
        out.extend(got.passages)
        if got.next_after is None:
            return out
        if not got.passages:
            fail(f"{what}: page {page} is empty but gives a cursor (next_after) to go on")
        after = got.next_after
    fail(
        f"{what}: the scan did not end after {bound} pages of {limit} for {expected} "
        "passage(s) (next_after kept coming)"
    )


def _indexes(s: Subject, what: str) -> IndexList:
    d = s.settings.op_deadline_s
    out: IndexList = _op("indexes", what, ("INDEXES",), "", lambda: s.guard.indexes(deadline_s=d))
    return out


def _drop(s: Subject, index: str, what: str) -> IndexStatus:
    d = s.settings.op_deadline_s
    out: IndexStatus = _op(
        "drop", what, ("STATUS",), index, lambda: s.guard.drop(index, deadline_s=d)
    )
    return out


def _count(s: Subject, index: str, what: str) -> int:
    out: IndexStatus = _status(s, index, what)
    return out.passages


def _same_passage(p: Passage, added: Mapping[str, Passage], where: str) -> None:
    """A returned passage must be exactly one that was added: text, source, span, metadata."""
    orig = added.get(p.id)
    if orig is None:
        fail(
            f"{where} returned a passage that was never added (id {p.id[:12]}…, text "
            f"{_short(p.text)!r}): stored text was altered or invented and still served"
        )
    a, b = orig.model_dump(mode="json"), p.model_dump(mode="json")
    if a != b:
        diff = ", ".join(k for k in a if a[k] != b.get(k))
        fail(f"{where} returned passage {p.id[:12]}… not exactly as added ({diff} differ)")


def _check_hits(
    s: Subject,
    out: Searched,
    top_k: int,
    added: Mapping[str, Passage],
    what: str,
    *,
    count: int | None = None,
) -> list[str]:
    """Every rule a ``SEARCHED`` answer must keep; returns the hit ids in rank order."""
    declared: ScoreScale = s.guard.score_scale
    hits = out.hits
    if not hits:
        fail(f"{what} returned SEARCHED with no hits (an empty result must be NO_MATCH)")
    if len(hits) > top_k:
        fail(f"{what} returned {len(hits)} hits for top_k={top_k}")
    if count is not None and out.searched != count:
        fail(f"{what} reported searched={out.searched}, but the index holds {count} passage(s)")
    if out.scale != declared:
        fail(
            f"{what} answered on scale {out.scale.model_dump()}, not the declared "
            f"{declared.model_dump()}"
        )
    prev: float | None = None
    ids: list[str] = []
    for i, hit in enumerate(hits, start=1):
        if hit.rank != i:
            fail(f"{what}: hit {i} has rank {hit.rank}; ranks must be 1..n")
        if not isinstance(hit.score, (int, float)) or not math.isfinite(hit.score):
            fail(f"{what}: hit {i} has a non-finite score {hit.score!r}")
        if hit.score_scale != declared.name:
            fail(f"{what}: hit {i} is on scale {hit.score_scale!r}, not {declared.name!r}")
        if prev is not None and (
            (declared.higher_is_better and hit.score > prev)
            or (not declared.higher_is_better and hit.score < prev)
        ):
            fail(f"{what}: scores are out of order at rank {i} ({prev} then {hit.score})")
        prev = hit.score
        p = hit.passage
        if p.id != p.expected_id():
            fail(
                f"{what}: hit {i} carries id {p.id[:12]}…, which is not the content address "
                "of its text, uri, span and key"
            )
        if p.id in ids:
            fail(f"{what}: passage {p.id[:12]}… is returned twice")
        ids.append(p.id)
        _same_passage(p, added, f"{what}: hit {i}")
    return ids


def _refused(what: str, call: Callable[[], Any], error: type[Exception] = InvalidRequest) -> None:
    """The call must raise ``error`` (a typed refusal), nothing else and no outcome."""
    try:
        out = call()
    except error:
        return
    except Exception as exc:
        fail(f"{what} raised {_describe(exc)} instead of {error.__name__}")
    fail(f"{what} was accepted (answered {_show(out)}) instead of raising {error.__name__}")


def _snapshot(s: Subject, index: str, queries: Sequence[str], what: str) -> dict[str, Any]:
    """What a caller can observe of an index: its count and what each query finds."""
    snap: dict[str, Any] = {"passages": _count(s, index, f"status {what}")}
    for q in queries:
        out = _search(
            s,
            index,
            q,
            f"search for {q!r} {what}",
            ("SEARCHED", "NO_MATCH", "INDEX_EMPTY"),
            top_k=50,
        )
        ids = sorted(h.passage.id for h in out.hits) if isinstance(out, Searched) else []
        snap[q] = (out.code, ids)
    return snap


def _compare(before: dict[str, Any], after: dict[str, Any], what: str) -> None:
    if before["passages"] != after["passages"]:
        fail(
            f"{what}: the index held {before['passages']} passage(s) before and "
            f"{after['passages']} after"
        )
    for key, was in before.items():
        if key != "passages" and after[key] != was:
            now = after[key]
            fail(
                f"{what}: search for {key!r} answered {was[0]} with {len(was[1])} hit(s) "
                f"before and {now[0]} with {len(now[1])} hit(s) after"
            )


# ---------------------------------------------------------------------------------------------
# test data


_WHEN = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def kit_passage(
    text: str,
    n: int,
    *,
    tag: str = "corpus",
    metadata: Mapping[str, Any] | None = None,
    uri: str | None = None,
    key: str | None = None,
) -> Passage:
    """A passage with full provenance (every optional field set), so a backend that drops or
    mangles any of them is caught when the passage comes back."""
    uri = uri or f"kit://{tag}/{n}"
    source = Source(
        uri=uri,
        sha256=_sha(uri + text),
        retrieved_at=_WHEN,
        provenance="indexplug conformance kit",
        licence="CC0-1.0",
        published_at=_WHEN,
    )
    return Passage.create(
        text,
        uri,
        start=7 * n,
        source=source,
        document_sha256=_sha(uri),
        metadata=metadata,
        key=key,
    )


_CORPUS: list[tuple[str, dict[str, str | int | float | bool]]] = [
    (
        "Foxes are small omnivorous mammals; the red fox lives across the northern hemisphere.",
        {"topic": "animals", "lang": "en", "year": 2001, "reviewed": True, "weight": 0.5},
    ),
    (
        "Photosynthesis converts sunlight, water and carbon dioxide into glucose and oxygen.",
        {"topic": "biology", "lang": "en", "year": 2002, "reviewed": False, "weight": 1.5},
    ),
    (
        "The Danube flows through ten countries before reaching the Black Sea.",
        {"topic": "geography", "lang": "en", "year": 2003, "reviewed": True, "weight": 2.5},
    ),
    (
        "A sourdough starter is a culture of wild yeast and lactic acid bacteria.",
        {"topic": "cooking", "lang": "en", "year": 2001, "reviewed": False, "weight": 0.25},
    ),
    (
        "Volcanoes form where magma rises through cracks in the crust of the planet.",
        {"topic": "geology", "lang": "en", "year": 2004, "reviewed": True, "weight": 3.0},
    ),
    (
        "The violin has four strings tuned in perfect fifths.",
        {"topic": "music", "lang": "en", "year": 2005, "reviewed": True, "weight": 1.0},
    ),
    (
        "Binary search halves the interval on every comparison.",
        {"topic": "computing", "lang": "en", "year": 2006, "reviewed": False, "weight": 4.5},
    ),
    (
        "Glaciers carve wide valleys as they advance and retreat.",
        {"topic": "geology", "lang": "en", "year": 2001, "reviewed": False, "weight": 0.75},
    ),
    (
        "Le renard roux est un petit mammifère omnivore des forêts.",
        {"topic": "animals", "lang": "fr", "year": 2007, "reviewed": True, "weight": 5.5},
    ),
    (
        "Honeybees tell the direction of flowers with a waggle dance.",
        {"topic": "animals", "lang": "en", "year": 2008, "reviewed": False, "weight": 6.0},
    ),
    (
        "Lighthouses guided ships along dangerous coasts before satellite navigation.",
        {"topic": "history", "lang": "en", "year": 2009, "reviewed": True, "weight": 7.25},
    ),
    (
        "Chess openings such as the Sicilian Defence aim to unbalance the position.",
        {"topic": "games", "lang": "en", "year": 2010, "reviewed": False, "weight": 8.0},
    ),
]

NO_MATCH_QUERY = "xylophonequartzite zebrawombatqux"
"""Words no passage the kit adds contains."""

_QUERIES = ["fox", "glaciers valleys", "violin strings", "binary search"]
"""What a snapshot searches for: words the corpus holds, so that comparing snapshots judges the
state of the index and not, again, how the backend words an empty result."""


def corpus() -> list[Passage]:
    """The kit's small corpus: twelve passages, each with words no other has."""
    return [kit_passage(text, i, metadata=meta) for i, (text, meta) in enumerate(_CORPUS)]


def _by_id(passages: Sequence[Passage]) -> dict[str, Passage]:
    return {p.id: p for p in passages}


def _filled(s: Subject, tag: str, extra: Sequence[Passage] = ()) -> tuple[str, list[Passage]]:
    """A fresh index holding the corpus (and ``extra``)."""
    index = s.index(tag)
    passages = corpus() + list(extra)
    _add(s, index, passages, f"adding {len(passages)} passages to a new index")
    return index, passages


# ---------------------------------------------------------------------------------------------
# the checks


@_check("backend.declares", "The backend declares a name, a score scale and its capabilities")
def _declares(s: Subject) -> None:
    b = s.guard.backend
    name = getattr(b, "name", None)
    if not isinstance(name, str) or not name.strip():
        fail(f"backend.name must be a non-empty string, got {name!r}")
    if not isinstance(getattr(b, "description", None), str):
        fail("backend.description must be a string")
    if not isinstance(getattr(b, "score_scale", None), ScoreScale):
        fail(f"backend.score_scale must be a ScoreScale, got {type(b.score_scale).__name__}")
    caps = getattr(b, "capabilities", None)
    if not isinstance(caps, Capabilities):
        fail(f"backend.capabilities must be a Capabilities, got {type(caps).__name__}")
    try:
        r = b.readiness()
    except Exception as exc:
        fail(f"readiness() raised {_describe(exc)}")
    if not isinstance(r, Readiness):
        fail(f"readiness() returned {type(r).__name__}, not Readiness")


@_check("outcomes.typed", "Every op answers an outcome allowed for it, which survives JSON")
def _typed(s: Subject) -> None:
    index = s.index("typed")
    ps = corpus()
    out = _add(s, index, ps, "add to a new index")
    if not out.backend:
        fail("add answered with an empty backend name")
    _search(s, index, "fox", "search for a word the index holds")
    _status(s, index, "status of an index holding passages")
    if s.claims("deletion"):
        _remove(s, index, [ps[0].id], "remove of a stored passage")


@_check("status.reports", "status says whether an index exists and how many passages it holds")
def _status_reports(s: Subject) -> None:
    missing = s.index("status")
    out: IndexStatus = _status(s, missing, "status of an index never written")
    if out.exists or out.passages != 0:
        fail(
            f"status of an index never written said exists={out.exists}, "
            f"passages={out.passages} (expected exists=False, passages=0)"
        )
    index, ps = _filled(s, "status")
    out = _status(s, index, "status after adding the corpus")
    if not out.exists or out.passages != len(ps):
        fail(
            f"status after adding {len(ps)} passages said exists={out.exists}, "
            f"passages={out.passages}"
        )
    if out.bytes_used is not None and out.bytes_used < 0:
        fail(f"status reported a negative size ({out.bytes_used} bytes)")


@_check("search.empty_index", "Searching an index that holds nothing answers INDEX_EMPTY")
def _empty(s: Subject) -> None:
    _search(s, s.index("empty"), "fox", "search on an index never written", ("INDEX_EMPTY",))
    if s.claims("deletion"):
        index = s.index("emptied")
        ps = corpus()[:2]
        _add(s, index, ps, "add of two passages")
        _remove(s, index, [p.id for p in ps], "remove of both passages")
        _search(
            s, index, "fox", "search on an index whose passages were all removed", ("INDEX_EMPTY",)
        )


@_check(
    "search.no_match",
    "An index with passages but no matching word answers NO_MATCH with searched equal to its "
    "passage count (a dense backend, which ranks every passage: SEARCHED or NO_MATCH)",
)
def _no_match(s: Subject) -> None:
    index, ps = _filled(s, "nomatch")
    what = "search on an index with no match"
    if not s.claims("dense"):
        out: NoMatch | Searched = _search(s, index, NO_MATCH_QUERY, what, ("NO_MATCH",))
    else:
        # Nearest neighbours exist for any query vector, so hits are allowed; they must still
        # be real hits, and the answer must still say it searched the whole index.
        out = _search(s, index, NO_MATCH_QUERY, what, ("SEARCHED", "NO_MATCH"))
        if isinstance(out, Searched):
            _check_hits(s, out, 10, _by_id(ps), what, count=len(ps))
    if out.searched != len(ps):
        fail(
            f"search on an index with no match reported searched={out.searched}, but the "
            f"index holds {len(ps)} passage(s)"
        )


@_check(
    "search.hits",
    "Hits: ranks 1..n, at most top_k, finite ordered scores on the declared "
    "scale, each passage exactly as added with a content-addressed id",
)
def _hits(s: Subject) -> None:
    index, ps = _filled(s, "hits")
    added = _by_id(ps)
    fox = ps[0]
    out = _search(s, index, "fox", "search for 'fox'")
    ids = _check_hits(s, out, 10, added, "search for 'fox'", count=len(ps))
    if fox.id not in ids:
        fail("search for 'fox' did not return the one passage about foxes")
    many = "fox glaciers violin chess honeybees danube"
    for k in (1, 3, 50):
        out = _search(s, index, many, f"search for {many!r} with top_k={k}", top_k=k)
        _check_hits(s, out, k, added, f"search with top_k={k}", count=len(ps))
        if k == 1 and len(out.hits) != 1:
            fail(f"search with top_k=1 returned {len(out.hits)} hits")
    out = _search(s, index, fox.text, "search for a passage's exact text")
    ids = _check_hits(s, out, 10, added, "search for a passage's exact text", count=len(ps))
    if fox.id not in ids:
        fail("search for a passage's exact text did not return that passage")


@_check("add.indexed", "Adding passages reports each one added, by id")
def _indexed(s: Subject) -> None:
    index = s.index("indexed")
    ps = corpus()
    out: Indexed = _add(s, index, ps, "add of new passages")
    want = {p.id for p in ps}
    if out.added != len(ps) or out.known != 0:
        fail(f"add of {len(ps)} new passages reported added={out.added}, known={out.known}")
    if set(out.added_ids) != want or len(out.added_ids) != len(ps):
        fail("add of new passages did not list exactly their ids in added_ids")
    if out.known_ids:
        fail("add of new passages listed known_ids")
    dup = kit_passage("A passage sent twice in the same batch.", 99, tag="dup")
    out = _add(s, index, [dup, dup], "add of a batch holding one passage twice")
    if out.added != 1 or out.known != 1:
        fail(
            f"add of one passage sent twice reported added={out.added}, known={out.known} "
            "(expected 1 added, 1 known)"
        )
    count = _count(s, index, "status after adding")
    if count != len(ps) + 1:
        fail(f"after adding {len(ps) + 1} distinct passages, status reports {count}")


@_check("add.idempotent", "Adding the same passages again reports them known and changes nothing")
def _idempotent(s: Subject) -> None:
    index, ps = _filled(s, "idem")
    before = _snapshot(s, index, _QUERIES, "before adding again")
    out: Indexed = _add(s, index, ps, "adding the same passages again")
    if out.added != 0 or out.known != len(ps):
        fail(
            f"adding the same {len(ps)} passages again reported added={out.added}, "
            f"known={out.known} (expected 0 added, {len(ps)} known)"
        )
    if set(out.known_ids) != {p.id for p in ps} or len(out.known_ids) != len(ps):
        fail("adding the same passages again did not list exactly their ids in known_ids")
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after adding again"),
        "adding the same passages again changed the index",
    )
    new = kit_passage("Kingfishers dive for small fish in clear streams.", 50)
    out = _add(s, index, [ps[0], new], "add of one known and one new passage")
    if out.added != 1 or out.known != 1 or out.added_ids != [new.id] or out.known_ids != [ps[0].id]:
        fail(
            f"add of one known and one new passage reported added={out.added} "
            f"{out.added_ids}, known={out.known} {out.known_ids}"
        )


@_check(
    "remove.reports",
    "Removing ids removes them and reports the ids that were not there",
    claim="deletion",
)
def _removes(s: Subject) -> None:
    index, ps = _filled(s, "remove")
    ghost = passage_id("never added", "kit://ghost", 0, 11)
    ids = [ps[0].id, ps[1].id, ghost, ps[0].id]
    out: Removed = _remove(s, index, ids, "remove of two stored ids and one unknown id")
    if out.removed != 2 or set(out.removed_ids) != {ps[0].id, ps[1].id}:
        fail(
            f"remove of two stored ids reported removed={out.removed} "
            f"(ids {[i[:8] for i in out.removed_ids]})"
        )
    if out.missing_ids != [ghost]:
        fail(
            f"remove did not report the unknown id as missing (missing_ids="
            f"{[i[:8] for i in out.missing_ids]})"
        )
    count = _count(s, index, "status after removing")
    if count != len(ps) - 2:
        fail(f"after removing 2 of {len(ps)} passages, status reports {count}")
    out = _remove(s, index, [ps[0].id], "remove of an id already removed")
    if out.removed != 0 or out.missing_ids != [ps[0].id]:
        fail(
            f"remove of an id already removed reported removed={out.removed}, "
            f"missing={len(out.missing_ids)}"
        )
    out = _remove(s, s.index("never"), [ghost], "remove from an index never written")
    if out.removed != 0 or out.missing_ids != [ghost]:
        fail("remove from an index never written did not report the id as missing")


@_check("remove.never_returned", "A removed passage is never returned again", claim="deletion")
def _gone(s: Subject) -> None:
    victim = kit_passage("The quokkaremoval fox is a passage that will be removed.", 60)
    index, ps = _filled(s, "gone", [victim])
    _remove(s, index, [victim.id], "remove of a stored passage")
    added = _by_id(ps)
    for q in ("quokkaremoval", "fox", victim.text):
        out = _search(
            s,
            index,
            q,
            f"search for {_short(q)!r} after removing its passage",
            ("SEARCHED", "NO_MATCH"),
            top_k=50,
        )
        if isinstance(out, Searched):
            ids = _check_hits(s, out, 50, added, f"search for {_short(q)!r} after removal")
            if victim.id in ids:
                fail(f"search for {_short(q)!r} returned a passage that was removed")
    count = _count(s, index, "status after removing")
    if count != len(ps) - 1:
        fail(f"after removing 1 of {len(ps)} passages, status reports {count}")
    out = _add(s, index, [victim], "adding a removed passage again")
    if out.added != 1:
        fail("adding a removed passage again reported it as already known: it was not removed")


@_check(
    "filters.equality", "Metadata equality filters return only passages that match", claim="filters"
)
def _filters(s: Subject) -> None:
    index, ps = _filled(s, "filters")
    added = _by_id(ps)
    query = "fox renard mammals omnivorous honeybees glaciers volcanoes sourdough chess"
    cases: list[dict[str, str | int | float | bool]] = [
        {"topic": "animals"},
        {"lang": "fr"},
        {"year": 2001},
        {"reviewed": True},
        {"weight": 0.5},
        {"topic": "animals", "lang": "en"},
    ]
    for flt in cases:
        what = f"search with filters={flt}"
        out = _search(s, index, query, what, ("SEARCHED",), top_k=50, filters=flt)
        ids = _check_hits(s, out, 50, added, what)
        for pid in ids:
            meta = added[pid].metadata
            if any(meta.get(k) != v or type(meta.get(k)) is not type(v) for k, v in flt.items()):
                fail(f"{what} returned a passage whose metadata is {meta}")
        if flt == {"lang": "fr"} and ids != [ps[8].id]:
            fail(f"{what} did not return the one French passage")
    _search(
        s,
        index,
        query,
        "search with a filter no passage matches",
        ("NO_MATCH",),
        filters={"topic": "astronomy"},
    )


@_check(
    "filters.refused",
    "A filter the backend does not claim to serve is refused (InvalidRequest, BAD_REQUEST) by "
    "search and scan, never ignored; the operators it claims are ones indexplug.filters defines",
)
def _filters_refused(s: Subject) -> None:
    caps = s.capabilities
    assert caps is not None  # backend.declares fails a backend without Capabilities
    claimed_ops = frozenset(caps.filter_operators)
    unknown = sorted(claimed_ops - ALL_OPS)
    if unknown:
        fail(
            f"the backend claims filter operator(s) {', '.join(unknown)}, which "
            f"indexplug.filters does not define (operators: {', '.join(sorted(ALL_OPS))})"
        )
    served = claimed_ops or (EQUALITY_OPS if caps.filters is True else frozenset())
    index, _ = _filled(s, "refused")
    for op in sorted(ALL_OPS - served):
        flt = _FILTER_USING[op]
        shown = json.dumps(flt)
        why = (
            f"the backend does not claim {op}"
            if claimed_ops or caps.filters is True
            else "the backend claims no filters"
        )
        _refused(
            f"search with filters={shown} ({why})",
            partial(
                s.guard.search,
                index,
                "fox",
                top_k=10,
                deadline_s=s.settings.op_deadline_s,
                filters=flt,
            ),
        )
        if s.claims("scan"):
            _refused(
                f"scan with filters={shown} ({why})",
                partial(
                    s.guard.scan,
                    index,
                    filters=flt,
                    limit=10,
                    deadline_s=s.settings.op_deadline_s,
                ),
            )


_FILTER_USING: dict[str, dict[str, Any]] = {
    "$eq": {"topic": {"$eq": "animals"}},
    "$ne": {"topic": {"$ne": "animals"}},
    "$in": {"topic": {"$in": ["animals", "music"]}},
    "$nin": {"topic": {"$nin": ["animals", "music"]}},
    "$gt": {"year": {"$gt": 2004}},
    "$gte": {"year": {"$gte": 2004}},
    "$lt": {"year": {"$lt": 2004}},
    "$lte": {"year": {"$lte": 2004}},
    "$exists": {"topic": {"$exists": True}},
    "$and": {"$and": [{"topic": "animals"}, {"lang": "en"}]},
    "$or": {"$or": [{"topic": "animals"}, {"lang": "fr"}]},
    "$not": {"$not": {"topic": "animals"}},
}
"""A filter over the kit's corpus using each operator (and otherwise only ``$eq``)."""


def _meta_of(p: Passage) -> str:
    return json.dumps(dict(p.metadata), ensure_ascii=False, default=list)


def _judge_selection(
    what: str, got: Sequence[str], want: Sequence[str], by_id: Mapping[str, Passage]
) -> None:
    """``got`` (ids a backend answered) must be exactly ``want`` (ids
    :func:`indexplug.filters.matches` selects): name one passage of each disagreement."""
    extra = [i for i in got if i not in set(want)]
    lost = [i for i in want if i not in set(got)]
    if not extra and not lost:
        return
    parts = []
    if extra:
        parts.append(
            f"{len(extra)} passage(s) that indexplug.filters.matches rejects were returned "
            f"(e.g. one with metadata {_meta_of(by_id[extra[0]])})"
        )
    if lost:
        parts.append(
            f"{len(lost)} passage(s) that indexplug.filters.matches selects were not returned "
            "(e.g. one with metadata "
            f"{_meta_of(by_id[lost[0]])})"
        )
    fail(f"{what}: {'; '.join(parts)}")


_PROP_FIELDS = ("a", "b", "c")
_PROP_ABSENT = "d"
"""A field no generated passage has: filters on it test what null/missing means."""
_PROP_STRINGS = ("x", "y", "Z", "é", "", "1", "x y")
_PROP_NUMBERS = (0, 1, 2, -3, 1.0, 0.5, 2.5, 1e3)
_PROP_BOOLS = (True, False)


def _property_strategies(ops: frozenset[str]) -> tuple[Any, Any]:
    """Hypothesis strategies of a passage's metadata and of a filter using only ``ops``."""
    from hypothesis import strategies as st

    scalar = st.sampled_from((*_PROP_STRINGS, *_PROP_NUMBERS, *_PROP_BOOLS))
    # a list holds values of one kind (strings, numbers or booleans); fields take every kind
    lists = st.one_of(
        st.lists(st.sampled_from(_PROP_STRINGS), max_size=3),
        st.lists(st.sampled_from(_PROP_NUMBERS), max_size=3),
        st.lists(st.sampled_from(_PROP_BOOLS), max_size=2),
    )
    value = st.one_of(scalar, st.none(), lists)
    metadata = st.dictionaries(st.sampled_from(_PROP_FIELDS), value, max_size=len(_PROP_FIELDS))
    field_name = st.sampled_from((*_PROP_FIELDS, _PROP_ABSENT))
    nullable = st.one_of(scalar, st.none())
    ranged = st.sampled_from((*_PROP_STRINGS, *_PROP_NUMBERS))
    arguments: dict[str, Any] = {
        "$eq": nullable,
        "$ne": nullable,
        "$in": st.lists(nullable, min_size=1, max_size=3),
        "$nin": st.lists(nullable, min_size=1, max_size=3),
        "$gt": ranged,
        "$gte": ranged,
        "$lt": ranged,
        "$lte": ranged,
        "$exists": st.booleans(),
    }
    leaves = [
        st.builds(lambda f, v, op=op: {f: {op: v}}, field_name, arguments[op])
        for op in sorted(ops & FIELD_OPS)
    ]
    leaf = st.one_of(*leaves)
    logical = sorted(ops & LOGICAL_OPS)
    if not logical:
        return metadata, leaf

    def combine(children: Any) -> Any:
        made = []
        if "$and" in logical:
            made.append(st.lists(children, min_size=1, max_size=3).map(lambda x: {"$and": x}))
        if "$or" in logical:
            made.append(st.lists(children, min_size=1, max_size=3).map(lambda x: {"$or": x}))
        if "$not" in logical:
            made.append(children.map(lambda x: {"$not": x}))
        return st.one_of(*made)

    return metadata, st.recursive(leaf, combine, max_leaves=6)


@_check(
    "filters.operators",
    "For generated metadata (strings, numbers, booleans, null, lists) and generated filters "
    "over the claimed operators, search and scan return exactly the passages "
    "indexplug.filters.matches selects (and remove by filter removes exactly them)",
    claim="filter_operators",
)
def _filters_property(s: Subject) -> None:
    try:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import strategies as st
    except ImportError:
        fail("this check needs hypothesis: install indexplug[testing]")
    caps = s.capabilities
    assert caps is not None
    ops = frozenset(caps.filter_operators) & ALL_OPS
    if not ops & FIELD_OPS:
        fail(
            f"the backend claims filter operators {sorted(caps.filter_operators)} but no field "
            f"operator ({', '.join(sorted(FIELD_OPS))}): no filter can use only those"
        )
    metadata, filters = _property_strategies(ops)
    st_ = s.settings
    n = st_.property_passages
    failures: list[str] = []

    @settings(
        max_examples=st_.property_examples,
        database=None,
        derandomize=True,
        deadline=None,
        phases=(Phase.generate,),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )
    @given(metas=st.lists(metadata, min_size=n, max_size=n), data=st.data())
    def example(metas: list[dict[str, Any]], data: Any) -> None:
        try:
            _filters_example(s, metas, [data.draw(filters) for _ in range(st_.property_filters)])
        except CheckFailed as exc:
            failures.append(str(exc))
            raise

    try:
        example()
    except Exception as exc:
        if failures:
            fail(failures[0])
        fail(f"the generated examples could not run: {_describe(exc)}")


def _filters_example(s: Subject, metas: list[dict[str, Any]], filters: list[Any]) -> None:
    index = s.index("ops")
    ps = [  # passages of their own (uris of this index): each example is a corpus apart
        kit_passage(f"propword generated passage {i}", i, tag=index, metadata=m)
        for i, m in enumerate(metas)
    ]
    by_id = _by_id(ps)
    _add(s, index, ps, f"add of {len(ps)} passages with generated metadata")
    for raw in filters:
        flt = parse_filter(raw)
        assert flt is not None
        shown = json.dumps(to_json(flt), ensure_ascii=False)
        want = [p.id for p in ps if matches(flt, p.metadata)]
        what = f"search for a word every passage holds with filters={shown}"
        codes = ("SEARCHED", "NO_MATCH") if want else ("NO_MATCH",)
        out = _search(s, index, "propword", what, codes, top_k=len(ps), filters=flt)
        got = _check_hits(s, out, len(ps), by_id, what) if isinstance(out, Searched) else []
        _judge_selection(what, got, want, by_id)
        if s.claims("scan"):
            what = f"scan with filters={shown}"
            page = _scan_all(s, index, what, len(want), filters=flt, limit=len(ps))
            _judge_selection(what, [p.id for p in page], want, by_id)
    if filters and s.claims("scan") and s.claims("deletion"):
        # remove by filter (the guard scans, then removes the ids): the last filter's passages
        flt = parse_filter(filters[-1])
        assert flt is not None
        shown = json.dumps(to_json(flt), ensure_ascii=False)
        want = [p.id for p in ps if matches(flt, p.metadata)]
        what = f"remove with filters={shown}"
        d = s.settings.op_deadline_s
        rm: Removed = _op(
            "remove",
            what,
            ("REMOVED",),
            index,
            lambda: s.guard.remove(index, filters=flt, deadline_s=d),
        )
        _judge_selection(what, rm.removed_ids, want, by_id)
        left = _count(s, index, f"status after {what}")
        if left != len(ps) - len(want):
            fail(f"after {what} removed {len(want)} of {len(ps)} passages, status reports {left}")


@_check(
    "get.by_id",
    "get answers stored passages by id exactly as added, in the order asked, and lists the "
    "ids that are not there (every one, for an index never written)",
    claim="get",
)
def _get_by_id(s: Subject) -> None:
    index, ps = _filled(s, "get")
    added = _by_id(ps)
    ghost = passage_id("never added", "kit://ghost", 0, 11)
    stored = [ps[5].id, ps[0].id, ps[9].id]
    what = "get of three stored ids and one never added"
    out: Got = _get(s, index, [stored[0], ghost, stored[1], stored[2]], what)
    ids = [p.id for p in out.passages]
    if set(ids) != set(stored):
        fail(
            f"{what} answered {len(set(ids) & set(stored))} of the 3 stored passages"
            + (
                f" and {len(set(ids) - set(stored))} not asked for"
                if set(ids) - set(stored)
                else ""
            )
        )
    if ids != stored:
        fail(f"{what} answered the passages in another order than asked")
    for p in out.passages:
        _same_passage(p, added, what)
    if out.missing_ids != [ghost]:
        fail(f"{what} reported missing_ids={[i[:8] for i in out.missing_ids]} (expected the one)")
    what = "get of every stored id"
    out = _get(s, index, [p.id for p in ps], what)
    if [p.id for p in out.passages] != [p.id for p in ps] or out.missing_ids:
        fail(f"{what} answered {len(out.passages)} of {len(ps)} passages")
    tiny = s.settings.tiny_deadline_s
    _tiny(
        s,
        "get",
        f"get with deadline_s={tiny}",
        index,
        lambda: s.guard.get(index, [ps[0].id], deadline_s=tiny),
        lambda d: _raw(s).get(index, [ps[0].id], keys=[], deadline=d),
    )
    what = "get from an index never written"
    out = _get(s, s.index("getnever"), [ps[0].id, ghost], what)
    if out.passages or out.missing_ids != [ps[0].id, ghost]:
        fail(
            f"{what} answered {len(out.passages)} passage(s) and missing_ids="
            f"{[i[:8] for i in out.missing_ids]} (expected none, and both ids missing)"
        )
    if s.claims("deletion"):
        _remove(s, index, [ps[1].id], "remove of a stored passage")
        what = "get of a removed passage's id"
        out = _get(s, index, [ps[1].id, ps[2].id], what)
        if [p.id for p in out.passages] != [ps[2].id] or out.missing_ids != [ps[1].id]:
            fail(f"{what} still answered it (or lost another)")


@_check(
    "scan.pages",
    "scan pages through every passage once, in ascending id order, following its cursor; "
    "a filtered scan returns exactly the passages that pass; an index never written is one "
    "empty page",
    claim="scan",
)
def _scan_pages(s: Subject) -> None:
    index, ps = _filled(s, "scan")
    added = _by_id(ps)
    want = sorted(added)
    limit = s.settings.scan_page
    what = f"scan of {len(ps)} passages in pages of {limit}"
    seen = _scan_all(s, index, what, len(ps), limit=limit)
    ids = [p.id for p in seen]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        fail(f"{what} returned {len(twice)} passage(s) twice (e.g. {twice[0][:12]}…)")
    if set(ids) != set(want):
        lost = len(set(want) - set(ids))
        fail(
            f"{what} returned {len(set(ids) & set(want))} of the {len(want)} passages "
            f"({lost} never came)"
        )
    if ids != want:
        fail(f"{what} returned the passages out of ascending id order")
    for p in seen:
        _same_passage(p, added, what)
    mid = want[len(want) // 2]
    what = "scan after a cursor in the middle of the index"
    out: Scanned = _scan(s, index, what, after=mid, limit=len(ps))
    if [p.id for p in out.passages] != [i for i in want if i > mid] or out.next_after is not None:
        fail(
            f"{what} answered {len(out.passages)} passage(s) (next_after={out.next_after!r}); "
            f"expected the {len([i for i in want if i > mid])} with a greater id and no cursor"
        )
    if s.claims("filters") or s.claims("filter_operators"):
        flt = {"topic": "animals"}
        chosen = [
            p.id for p in sorted(ps, key=lambda p: p.id) if matches(parse_filter(flt), p.metadata)
        ]
        what = f"scan with filters={flt} in pages of 2"
        got = _scan_all(s, index, what, len(chosen), filters=flt, limit=2)
        _judge_selection(what, [p.id for p in got], chosen, added)
        if [p.id for p in got] != chosen:
            fail(f"{what} returned the passages out of ascending id order")
    tiny = s.settings.tiny_deadline_s
    _tiny(
        s,
        "scan",
        f"scan with deadline_s={tiny}",
        index,
        lambda: s.guard.scan(index, limit=limit, deadline_s=tiny),
        lambda d: _raw(s).scan(index, filters=None, after=None, limit=limit, deadline=d),
    )
    what = "scan of an index never written"
    out = _scan(s, s.index("scannever"), what, limit=limit)
    if out.passages or out.next_after is not None:
        fail(f"{what} answered {len(out.passages)} passage(s), next_after={out.next_after!r}")
    if s.claims("deletion"):
        _remove(s, index, [want[0]], "remove of a stored passage")
        what = "scan after removing a passage"
        rest = _scan_all(s, index, what, len(ps), limit=limit)
        if [p.id for p in rest] != want[1:]:
            fail(f"{what} answered {len(rest)} passages, expected the other {len(want) - 1}")


@_check(
    "indexes.lists",
    "indexes lists the indexes written, by name, with their passage counts, and not one never "
    "written",
    claim="indexes",
)
def _indexes_lists(s: Subject) -> None:
    first, ps = _filled(s, "lista")
    second = s.index("listb")
    _add(s, second, ps[:3], "add of 3 passages to a second index")
    never = s.index("listnever")
    _search(s, never, "fox", "search of an index never written", ("INDEX_EMPTY", "NO_MATCH"))
    what = "indexes after writing two indexes"
    listed = {i.name: i.passages for i in _indexes(s, what).indexes}
    for name, n in ((first, len(ps)), (second, 3)):
        if name not in listed:
            fail(f"{what} did not list {name!r} ({n} passages; {len(listed)} index(es) listed)")
        if listed[name] != n:
            fail(f"{what} listed {name!r} with {listed[name]} passages; it holds {n}")
    if never in listed:
        fail(f"{what} listed {never!r}, an index that was only searched, never written")
    tiny = s.settings.tiny_deadline_s
    _tiny(
        s,
        "indexes",
        f"indexes with deadline_s={tiny}",
        "",
        lambda: s.guard.indexes(deadline_s=tiny),
        lambda d: _raw(s).indexes(deadline=d),
    )
    if s.claims("deletion"):
        _remove(s, second, [ps[0].id], "remove of a passage from the second index")
        what = "indexes after removing a passage"
        listed = {i.name: i.passages for i in _indexes(s, what).indexes}
        if listed.get(second) != 2:
            fail(f"{what} listed {second!r} with {listed.get(second)} passages; it holds 2")


@_check(
    "drop.removes",
    "drop deletes a whole index (answering exists=False): status, search, scan and indexes "
    "no longer see it, other indexes are untouched, and dropping it again is fine",
    claim="drop",
)
def _drop_removes(s: Subject) -> None:
    index, ps = _filled(s, "drop")
    other = s.index("dropother")
    _add(s, other, ps[:2], "add of 2 passages to another index")
    for what in ("drop of an index holding passages", "drop of an index already dropped"):
        out = _drop(s, index, what)
        if out.exists or out.passages:
            fail(f"{what} answered exists={out.exists}, passages={out.passages}")
    st: IndexStatus = _status(s, index, "status after drop")
    if st.exists or st.passages:
        fail(f"after drop, status says exists={st.exists}, passages={st.passages}")
    # INDEX_EMPTY is the answer (search.empty_index holds every backend to telling the two
    # apart); here only that nothing is left to search matters
    found = _search(s, index, "fox", "search after drop", ("INDEX_EMPTY", "NO_MATCH"))
    if isinstance(found, NoMatch) and found.searched:
        fail(f"search after drop answered NO_MATCH having searched {found.searched} passage(s)")
    if s.claims("scan"):
        out2: Scanned = _scan(s, index, "scan after drop")
        if out2.passages:
            fail(f"scan after drop answered {len(out2.passages)} passage(s)")
    if s.claims("indexes") and index in {i.name for i in _indexes(s, "indexes after drop").indexes}:
        fail(f"indexes after drop still lists {index!r}")
    if _count(s, other, "status of another index after drop") != 2:
        fail("dropping one index changed another")
    _drop(s, s.index("dropnever"), "drop of an index never written")
    # a drop that cannot finish in time says so (whether it happened is then unknown, as for
    # any write that timed out: this index is not looked at again)
    late = s.index("droplate")
    _add(s, late, ps[:1], "add of a passage to an index to drop without time")
    tiny = s.settings.tiny_deadline_s
    _tiny(
        s,
        "drop",
        f"drop with deadline_s={tiny}",
        late,
        lambda: s.guard.drop(late, deadline_s=tiny),
        lambda d: _raw(s).op_drop(late, deadline=d),
    )
    again: Indexed = _add(s, index, ps, "adding the same passages after drop")
    if again.added != len(ps):
        fail(f"after drop, {again.known} of {len(ps)} passages added again were still known")


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


@_check("budget.refused", "A write over max_bytes is refused with both numbers and changes nothing")
def _budget_refused(s: Subject) -> None:
    index, _ = _filled(s, "budget")
    before = _snapshot(s, index, _QUERIES, "before a refused write")
    more = [
        kit_passage(f"Budget passage number {i} about kestrels and fox.", 100 + i) for i in range(5)
    ]
    out: OverBudget = _add(s, index, more, "add with max_bytes=1", ("OVER_BUDGET",), max_bytes=1)
    if out.max_bytes != 1:
        fail(f"add with max_bytes=1 was refused, but reported max_bytes={out.max_bytes}")
    if not out.needed_bytes > out.max_bytes:
        fail(
            f"add with max_bytes=1 was refused without the size it needed "
            f"(needed_bytes={out.needed_bytes}, check={out.check})"
        )
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after a refused write"),
        "a write refused as over budget changed the index",
    )
    out2: Indexed = _add(s, index, more, "add without a budget after a refused write")
    if out2.added != len(more):
        fail(
            f"after a refused write, adding the same passages reported added={out2.added} "
            f"of {len(more)}: part of the refused write was kept"
        )


_BUDGETS = (64 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024)


@_check("budget.cannot_raise", "The first write's budget holds: a later call cannot raise it")
def _budget_held(s: Subject) -> None:
    first = corpus()[:3]
    index, budget = "", 0
    for mb in _BUDGETS:
        index = s.index("held")
        out = _add(
            s,
            index,
            first,
            f"first add of 3 small passages with max_bytes={mb}",
            ("INDEXED", "OVER_BUDGET"),
            max_bytes=mb,
        )
        if isinstance(out, Indexed):
            budget = mb
            break
    if not budget:
        fail(f"3 small passages did not fit a new index even with max_bytes={_BUDGETS[-1]}")
    st: IndexStatus = _status(s, index, "status of an index with a budget")
    if st.max_bytes is not None and st.max_bytes != budget:
        fail(f"the first write set max_bytes={budget}, but status reports {st.max_bytes}")
    queries = ["fox", "photosynthesis", "danube"]  # what its three passages are about
    before = _snapshot(s, index, queries, "before writes over the budget")
    words = "kestrel harrier osprey merlin hobby buzzard kite goshawk "
    chunk = max(1, min(MAX_PASSAGE_CHARS // 2, budget // 16))
    n = 2 * budget // chunk + 1
    big = [
        kit_passage((f"bulk{i} " + words * (chunk // len(words) + 1))[:chunk], 200 + i)
        for i in range(n)
    ]
    for asked in (budget * 1000, None):
        what = (
            f"add of {n * chunk} bytes of text with max_bytes={asked} to an index whose "
            f"first write set max_bytes={budget}"
        )
        out = _add(s, index, big, what, ("OVER_BUDGET",), max_bytes=asked)
        if out.max_bytes > budget:
            fail(f"{what} was refused, but against a raised budget of {out.max_bytes}")
    _compare(
        before,
        _snapshot(s, index, queries, "after refused writes"),
        "writes refused as over budget changed the index",
    )


@_check(
    "integrity.tamper",
    "A stored passage altered behind the backend's back is not served (INDEX_FAILED)",
    needs=("tamper",),
)
def _tamper(s: Subject) -> None:
    canary = kit_passage("The lighthouse keeper's canary sings tamperword at dawn.", 70)
    index, ps = _filled(s, "tamper", [canary])
    added = _by_id(ps)
    hook = s.tamper_hook()
    assert hook is not None
    # served once intact first: a backend (or the core) that keeps what it served must still
    # notice when the stored passage changes under it
    before = _search(
        s, index, "tamperword canary", "search before the passage is altered", top_k=50
    )
    if not any(h.passage.id == canary.id for h in before.hits):
        fail("search before the passage is altered did not find it")
    altered = "The lighthouse keeper's canary sings tamperword at dusk, altered."
    try:
        hook(index, canary.id, altered)
    except Exception as exc:
        fail(f"the tamper hook raised {_describe(exc)}")
    what = "search for a passage altered after it was added"
    out = _search(
        s, index, "tamperword canary", what, ("INDEX_FAILED", "SEARCHED", "NO_MATCH"), top_k=50
    )
    if isinstance(out, Searched):
        for hit in out.hits:
            if hit.passage.text == altered or hit.passage.id not in added:
                fail(
                    f"{what} served the altered text ({_short(hit.passage.text)!r}) instead "
                    "of answering INDEX_FAILED"
                )
            _same_passage(hit.passage, added, what)
        if any(hit.passage.id == canary.id for hit in out.hits):
            fail(
                f"{what} served the passage as it was before it was altered (a copy kept from "
                "an earlier search?): the altered store went unnoticed instead of INDEX_FAILED"
            )
        fail(
            f"{what} answered SEARCHED without the altered passage (silently dropped) instead "
            "of INDEX_FAILED"
        )
    if isinstance(out, NoMatch):
        fail(
            f"{what} answered NO_MATCH (the altered passage silently dropped) instead of "
            "INDEX_FAILED"
        )


_RECORD_CHANGES: tuple[tuple[str, dict[str, object]], ...] = (
    ("metadata", {"metadata": {"trusted": True}}),
    ("licence", {"licence": "LicenseRef-forged-all-rights-reserved"}),
    ("provenance", {"provenance": "forged: signed by the editor-in-chief"}),
    ("span", {"start": 1, "end": 2}),
    ("text", {"text": "The archivist's ledger records recordword, forged."}),
)
"""What ``integrity.record`` alters, one stored passage each: every field a caller may
trust, the digest and id kept as they were."""


@_check(
    "integrity.record",
    "A stored passage whose metadata, licence, provenance, span or text was altered behind "
    "the backend's back is not served (INDEX_FAILED)",
    needs=("tamper_record",),
)
def _tamper_record(s: Subject) -> None:
    hook = s.tamper_record_hook()
    assert hook is not None
    for n, (name, change) in enumerate(_RECORD_CHANGES):
        word = f"recordword{chr(ord('a') + n)}"
        canary = kit_passage(f"The archivist's ledger records {word} in ink.", 90 + n)
        index, ps = _filled(s, f"record{n}", [canary])
        added = _by_id(ps)
        before = _search(s, index, word, f"search for {word} before its {name} is altered")
        if not any(h.passage.id == canary.id for h in before.hits):
            fail(f"search for {word} before its {name} is altered did not find it")
        try:
            hook(index, canary.id, change)
        except Exception as exc:
            fail(f"the tamper_record hook raised {_describe(exc)} altering {name}")
        what = f"search for a passage whose {name} was altered after it was added"
        out = _search(s, index, word, what, ("INDEX_FAILED", "SEARCHED", "NO_MATCH"), top_k=50)
        if isinstance(out, Searched):
            for hit in out.hits:
                _same_passage(hit.passage, added, what)
            fail(f"{what} answered SEARCHED instead of INDEX_FAILED")
        if isinstance(out, NoMatch):
            fail(f"{what} answered NO_MATCH (the passage silently dropped), not INDEX_FAILED")


@_check(
    "integrity.digest",
    "A stored passage edited and stripped of its digest is refused on every read path "
    "(search, get, scan, export): INDEX_FAILED, never served with a digest computed afresh",
    needs=("tamper_record",),
)
def _digest_removed(s: Subject) -> None:
    hook = s.tamper_record_hook()
    assert hook is not None
    canary = kit_passage("The notary's register seals digestword under wax.", 97)
    index, ps = _filled(s, "digest", [canary])
    found = _search(s, index, "digestword", "search before the digest is removed", top_k=50)
    if not any(h.passage.id == canary.id for h in found.hits):
        fail("search before the digest is removed did not find the passage")
    change = {"licence": "MIT", "metadata": {"lang": "fr"}, "digest": None}
    try:
        hook(index, canary.id, change)
    except Exception as exc:
        fail(f"the tamper_record hook raised {_describe(exc)} removing the digest")
    d = s.settings.op_deadline_s
    what = "{} of a passage whose licence and metadata were edited and digest removed"
    codes = ("INDEX_FAILED", "SEARCHED", "NO_MATCH")
    call: Callable[[], Any] = partial(s.guard.search, index, "digestword", top_k=50, deadline_s=d)
    outs = [(what.format("search"), _op("search", what.format("search"), codes, index, call))]
    if s.claims("get"):
        call = partial(s.guard.get, index, [canary.id], deadline_s=d)
        w = what.format("get")
        outs.append((w, _op("get", w, ("INDEX_FAILED", "GOT"), index, call)))
    if s.claims("scan"):
        call = partial(s.guard.scan, index, limit=len(ps) + 10, deadline_s=d)
        w = what.format("scan")
        outs.append((w, _op("scan", w, ("INDEX_FAILED", "SCANNED"), index, call)))
        w = what.format("export")
        try:
            outs.append((w, export(s.guard, index, io.StringIO(), deadline_s=d)))
        except Exception as exc:
            fail(f"{w} raised {_describe(exc)} instead of answering with an outcome")
    for w, out in outs:
        if out.code != "INDEX_FAILED":
            fail(
                f"{w} answered {out.code} instead of INDEX_FAILED (the edit served as "
                "genuine: was a digest computed afresh for it?)"
            )
        if "no digest" not in out.reason:
            fail(
                f"{w} answered INDEX_FAILED for another reason ({out.reason!r}), not the "
                "missing digest: does the tamper_record hook remove a digest (digest: None)?"
            )


@_check(
    "integrity.rows",
    "Stored records deleted behind the search structure make searches INDEX_FAILED, never "
    "NO_MATCH or INDEX_EMPTY",
    claim="separate_records",
    needs=("delete_rows",),
)
def _deleted_rows(s: Subject) -> None:
    hook = s.delete_rows_hook()
    assert hook is not None
    canary = kit_passage("The cartographer's atlas shows rowword islands.", 95)
    index, ps = _filled(s, "rows", [canary])
    _search(s, index, "rowword", "search before the record is deleted")
    try:
        hook(index, [canary.id])
    except Exception as exc:
        fail(f"the delete_rows hook raised {_describe(exc)}")
    what = "search for a passage whose record was deleted behind the index"
    codes = ("INDEX_FAILED", "SEARCHED", "NO_MATCH", "INDEX_EMPTY")
    out = _search(s, index, "rowword", what, codes, top_k=50)
    if out.code != "INDEX_FAILED":
        fail(f"{what} answered {out.code} instead of INDEX_FAILED")
    index, ps = _filled(s, "allrows")
    try:
        hook(index, [p.id for p in ps])
    except Exception as exc:
        fail(f"the delete_rows hook raised {_describe(exc)} deleting every record")
    what = "search after every record was deleted behind the index"
    out = _search(s, index, "fox", what, codes, top_k=50)
    if out.code != "INDEX_FAILED":
        fail(f"{what} answered {out.code} instead of INDEX_FAILED")


def _tiny(
    s: Subject,
    op: str,
    what: str,
    index: str,
    call: Callable[[], Any],
    direct: Callable[[Deadline], Any],
) -> None:
    """``call`` (through the guard) with a deadline that cannot be met answers INDEX_TIMEOUT,
    and so does the backend itself, called with a deadline already past (``direct``): the
    guard releases the caller at the deadline whatever the plugin does, but a plugin that
    never looks at its deadline keeps a worker thread busy with work nobody will read."""
    tiny = s.settings.tiny_deadline_s
    expired = Deadline(seconds=tiny, at=time.monotonic() - 1.0)
    try:
        own = direct(expired)
    except TimeoutError:
        own = None
    except Exception as exc:
        fail(f"{what}, called directly with its deadline past, raised {_describe(exc)}")
    if own is not None and getattr(own, "code", None) != "INDEX_TIMEOUT":
        fail(
            f"{what}, called directly with its deadline already past, answered "
            f"{_show(own)}: the backend does not stop at its deadline (the guard times the "
            "caller out, but the work goes on)"
        )
    out = _op(op, what, ALLOWED_CODES[op], index, call)
    if out.code == "INDEX_TIMEOUT":
        if not math.isclose(out.deadline_s, tiny, rel_tol=1e-6, abs_tol=1e-12):
            fail(f"{what} timed out but reported deadline_s={out.deadline_s}, not {tiny}")
        return
    if out.code in ("NO_MATCH", "INDEX_EMPTY"):
        fail(
            f"{what} returned {out.code}: a deadline that could not be met was reported as "
            "no evidence instead of INDEX_TIMEOUT"
        )
    fail(f"{what} returned {_show(out)} instead of INDEX_TIMEOUT: the deadline was ignored")


ALLOWED_CODES: dict[str, tuple[str, ...]] = {
    op: tuple(str(t.model_fields["code"].default) for t in types) for op, types in ALLOWED.items()
}


def _raw(s: Subject) -> Any:
    """The backend itself, for calls of optional ops past the guard (deadline checks)."""
    return s.guard.backend


def _search_directly(s: Subject, index: str, query: str, deadline: Deadline) -> Any:
    return s.guard.backend.search(index, query, top_k=10, deadline=deadline, filters=None)


@_check(
    "deadline.search",
    "A search whose deadline cannot be met answers INDEX_TIMEOUT, never "
    "NO_MATCH, and the backend works afterwards",
)
def _deadline_search(s: Subject) -> None:
    index, ps = _filled(s, "dlsearch")
    tiny = s.settings.tiny_deadline_s
    for q in (NO_MATCH_QUERY, "fox", "fox glaciers violin chess"):
        _tiny(
            s,
            "search",
            f"search for {q!r} with deadline_s={tiny}",
            index,
            partial(s.guard.search, index, q, top_k=10, deadline_s=tiny),
            partial(_search_directly, s, index, q),
        )
    out = _search(s, index, "fox", "search with a normal deadline after timeouts")
    _check_hits(s, out, 10, _by_id(ps), "search after timeouts", count=len(ps))


@_check(
    "deadline.write",
    "add, remove and status whose deadline cannot be met answer "
    "INDEX_TIMEOUT, and the backend works afterwards",
)
def _deadline_write(s: Subject) -> None:
    index, ps = _filled(s, "dlwrite")
    tiny = s.settings.tiny_deadline_s
    late = [kit_passage("A passage written with no time to write it: ptarmigan.", 80)]
    _tiny(
        s,
        "add",
        f"add with deadline_s={tiny}",
        index,
        lambda: s.guard.add(index, late, deadline_s=tiny),
        lambda d: s.guard.backend.add(index, late, max_bytes=None, deadline=d),
    )
    if s.claims("deletion"):
        ghost = passage_id("never added", "kit://ghost", 0, 11)
        _tiny(
            s,
            "remove",
            f"remove with deadline_s={tiny}",
            index,
            lambda: s.guard.remove(index, [ghost], deadline_s=tiny),
            lambda d: s.guard.backend.remove(index, [ghost], deadline=d),
        )
    _tiny(
        s,
        "status",
        f"status with deadline_s={tiny}",
        index,
        lambda: s.guard.status(index, deadline_s=tiny),
        lambda d: s.guard.backend.status(index, deadline=d),
    )
    # Whether the timed-out add was applied is unknown to its caller; adding again settles it.
    out: Indexed = _add(s, index, ps + late, "adding again after timeouts")
    if out.added + out.known != len(ps) + 1 or out.known < len(ps):
        fail(
            f"adding again after timeouts reported added={out.added}, known={out.known}: "
            "passages were lost"
        )
    count = _count(s, index, "status after timeouts")
    if count != len(ps) + 1:
        fail(f"after timeouts the index holds {count} passages, expected {len(ps) + 1}")


def _shape(out: Any) -> Any:
    """What must agree between an op's blocking and coroutine forms: the code, and what was
    answered (ids as sets where a backend may order ties either way)."""
    code = getattr(out, "code", type(out).__name__)
    if isinstance(out, Searched):
        return code, sorted(h.passage.id for h in out.hits), out.searched
    if isinstance(out, NoMatch):
        return code, out.searched
    if isinstance(out, IndexStatus):
        return code, out.exists, out.passages
    if isinstance(out, Got):
        return code, [p.id for p in out.passages], out.missing_ids, out.missing_keys
    if isinstance(out, Scanned):
        return code, [p.id for p in out.passages], out.next_after
    if isinstance(out, IndexList):
        return code  # other indexes may come and go on a shared server: compared apart
    return code, getattr(out, "reason", None)


def _listed(out: Any, index: str) -> bool | None:
    """Whether an ``IndexList`` names ``index`` (``None`` for any other answer)."""
    if not isinstance(out, IndexList):
        return None
    return index in {i.name for i in out.indexes}


def _said(out: Any) -> str:
    shape = _shape(out)
    if isinstance(shape, tuple) and len(shape) > 1 and isinstance(shape[1], list):
        return f"{_show(out)} with {len(shape[1])} passage(s)"
    return _show(out)


def _in_loop(main: Callable[[], Any]) -> Any:
    """Run the coroutine ``main()`` on one event loop of its own, in a thread of its own (so
    that a caller's running loop is never in the way)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(main())).result()


@_check(
    "async.same",
    "Every op's coroutine form (asearch, astatus, aadd, aremove, aget, ascan, aindexes, adrop) "
    "answers what its blocking form answers, several at once on one event loop, the backend's "
    "own coroutine methods (a<op>) included",
)
def _async_same(s: Subject) -> None:
    index, ps = _filled(s, "async")
    g, d = s.guard, s.settings.op_deadline_s
    never = s.index("asyncnever")
    reads: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            "search for 'fox glaciers violin'",
            partial(g.search, index, "fox glaciers violin", top_k=50, deadline_s=d),
            partial(g.asearch, index, "fox glaciers violin", top_k=50, deadline_s=d),
        ),
        (
            f"search for {NO_MATCH_QUERY!r}",
            partial(g.search, index, NO_MATCH_QUERY, top_k=50, deadline_s=d),
            partial(g.asearch, index, NO_MATCH_QUERY, top_k=50, deadline_s=d),
        ),
        (
            "search of an index never written",
            partial(g.search, never, "fox", deadline_s=d),
            partial(g.asearch, never, "fox", deadline_s=d),
        ),
        ("status", partial(g.status, index, deadline_s=d), partial(g.astatus, index, deadline_s=d)),
    ]
    if s.claims("filters") or s.claims("filter_operators"):
        flt = {"topic": "animals"}
        reads.append(
            (
                f"search with filters={flt}",
                partial(
                    g.search, index, "fox honeybees renard", top_k=50, deadline_s=d, filters=flt
                ),
                partial(
                    g.asearch, index, "fox honeybees renard", top_k=50, deadline_s=d, filters=flt
                ),
            )
        )
    if s.claims("get"):
        ids = [ps[3].id, passage_id("never added", "kit://ghost", 0, 11), ps[1].id]
        reads.append(
            (
                "get",
                partial(g.get, index, ids, deadline_s=d),
                partial(g.aget, index, ids, deadline_s=d),
            )
        )
    if s.claims("scan"):
        reads.append(
            (
                "scan",
                partial(g.scan, index, limit=5, deadline_s=d),
                partial(g.ascan, index, limit=5, deadline_s=d),
            )
        )
    if s.claims("indexes"):
        reads.append(
            ("indexes", partial(g.indexes, deadline_s=d), partial(g.aindexes, deadline_s=d))
        )
    extra = kit_passage("Puffins nest in burrows on asyncword cliffs.", 77, tag="async")

    async def agree(what: str, sync: Callable[[], Any], coro: Callable[[], Any]) -> list[str]:
        want = await asyncio.to_thread(sync)
        got = await coro()
        if _shape(got) != _shape(want):
            return [
                f"the coroutine form of {what} answered {_said(got)}; the blocking form "
                f"{_said(want)}"
            ]
        return []

    async def main() -> list[str]:
        problems: list[str] = []
        blocking = [await asyncio.to_thread(sync) for _, sync, _ in reads]
        awaited = await asyncio.gather(*(coro() for _, _, coro in reads), return_exceptions=True)
        for (what, _, _), want, got in zip(reads, blocking, awaited, strict=True):
            if isinstance(got, BaseException):
                problems.append(f"the coroutine form of {what} raised {_describe(got)}")
            elif _shape(got) != _shape(want):
                problems.append(
                    f"the coroutine form of {what} answered {_said(got)}; the blocking form "
                    f"{_said(want)}"
                )
            elif _listed(got, index) != _listed(want, index):
                problems.append(f"aindexes and indexes disagree on listing {index!r}")
        if problems:
            return problems
        status = partial(g.status, index, deadline_s=d)
        astatus = partial(g.astatus, index, deadline_s=d)
        before = await asyncio.to_thread(status)
        out = await g.aadd(index, [extra], deadline_s=d)
        if not isinstance(out, Indexed) or out.added_ids != [extra.id]:
            return [f"aadd of a new passage answered {_show(out)}, not INDEXED with it added"]
        after = await asyncio.to_thread(status)
        if (
            isinstance(before, IndexStatus)
            and isinstance(after, IndexStatus)
            and after.passages != before.passages + 1
        ):
            return [
                f"aadd answered INDEXED with 1 added, but status went from "
                f"{before.passages} to {after.passages} passages"
            ]
        problems += await agree("status after aadd", status, astatus)
        if s.claims("deletion"):
            rm = await g.aremove(index, [extra.id], deadline_s=d)
            if not isinstance(rm, Removed) or rm.removed_ids != [extra.id]:
                return [f"aremove of a stored passage answered {_show(rm)}, not REMOVED with it"]
            problems += await agree("status after aremove", status, astatus)
        if s.claims("drop"):
            gone = await g.adrop(index, deadline_s=d)
            if not isinstance(gone, IndexStatus) or gone.exists:
                return [f"adrop answered {_show(gone)}, not STATUS with exists=False"]
            problems += await agree("status after adrop", status, astatus)
        return problems

    try:
        problems = _in_loop(main)
    except CheckFailed:
        raise
    except Exception as exc:
        fail(f"running the coroutine forms raised {_describe(exc)}")
    if problems:
        fail(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


@_check(
    "availability.outage",
    "When unavailable, readiness says why and every op answers "
    "INDEX_UNAVAILABLE; when back, the same instance recovers",
    outage_or_claim=True,
)
def _outage(s: Subject) -> None:
    hooks = s.outage_hooks()
    assert hooks is not None
    down, up = hooks
    index, ps = _filled(s, "outage")
    before = _snapshot(s, index, _QUERIES, "before the outage")
    try:
        down()
    except Exception as exc:
        fail(f"make_unavailable() raised {_describe(exc)}")
    try:
        try:
            raw = s.guard.backend.readiness()
        except Exception as exc:
            fail(f"readiness() raised {_describe(exc)} while unavailable instead of saying why")
        if not isinstance(raw, Readiness):
            fail(f"readiness() returned {type(raw).__name__} while unavailable")
        if raw.ready:
            fail("readiness() reported ready while the backend was unavailable")
        if not (raw.reason or "").strip():
            fail("readiness() reported not ready without a reason")
        other = kit_passage("Written during an outage: puffins nest on cliffs.", 90)
        calls: list[tuple[str, str, Callable[[], Any]]] = [
            (
                "search",
                "search while unavailable",
                lambda: s.guard.search(index, "fox", deadline_s=s.settings.op_deadline_s),
            ),
            (
                "add",
                "add while unavailable",
                lambda: s.guard.add(index, [other], deadline_s=s.settings.op_deadline_s),
            ),
            (
                "status",
                "status while unavailable",
                lambda: s.guard.status(index, deadline_s=s.settings.op_deadline_s),
            ),
        ]
        if s.claims("deletion"):
            calls.append(
                (
                    "remove",
                    "remove while unavailable",
                    lambda: s.guard.remove(index, [ps[0].id], deadline_s=s.settings.op_deadline_s),
                )
            )
        for op, what, call in calls:
            out = _op(op, what, ("INDEX_UNAVAILABLE",), index, call)
            if not out.reason.strip():
                fail(f"{what} answered INDEX_UNAVAILABLE without a reason")
    finally:
        try:
            up()
        except Exception as exc:
            fail(f"restore() raised {_describe(exc)}")
    until = time.monotonic() + s.settings.recovery_timeout_s
    while not s.guard.readiness().ready:
        if time.monotonic() > until:
            fail(
                f"the backend was not ready {s.settings.recovery_timeout_s:g}s after restore(): "
                f"{s.guard.readiness().reason}"
            )
        time.sleep(0.05)
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after the outage"),
        "the index is not as it was before the outage",
    )
    again: Indexed = _add(s, index, ps, "add after the outage")
    if again.known != len(ps):
        fail(f"after the outage, {len(ps) - again.known} stored passage(s) were not known")


@_check(
    "persistence.reopen",
    "Everything survives closing the backend and opening it again",
    claim="persistence",
    needs=("reopen",),
)
def _persist(s: Subject) -> None:
    index = s.index("persist")
    ps = corpus()
    budget = 64 * 1024 * 1024
    _add(s, index, ps, f"add with max_bytes={budget}", max_bytes=budget)
    deleted: Passage | None = None
    if s.claims("deletion"):
        deleted = ps[3]  # not what any snapshot query looks for
        _remove(s, index, [deleted.id], "remove before reopening")
    kept = [p for p in ps if p is not deleted]
    before = _snapshot(s, index, _QUERIES, "before reopening")
    st_before: IndexStatus = _status(s, index, "status before reopening")
    try:
        s.do_reopen()
    except Exception as exc:
        fail(f"reopening the backend raised {_describe(exc)}")
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after reopening"),
        "closing and reopening changed the index",
    )
    st: IndexStatus = _status(s, index, "status after reopening")
    if st_before.max_bytes is not None and st.max_bytes != st_before.max_bytes:
        fail(f"the budget was {st_before.max_bytes} before reopening and {st.max_bytes} after")
    out = _search(s, index, "fox glaciers violin", "search after reopening", top_k=50)
    _check_hits(s, out, 50, _by_id(kept), "search after reopening", count=len(kept))
    again: Indexed = _add(s, index, kept, "adding the same passages after reopening")
    if again.added != 0:
        fail(f"after reopening, {again.added} stored passage(s) were not recognised as known")


_BAD_NAMES = [
    "../escape",
    "..",
    ".",
    "a/b",
    "/etc/passwd",
    "a\\b",
    "C:\\index",
    "name\x00nul",
    "a" * (MAX_NAME_LENGTH + 1),
    "",
    "Upper",
    "with space",
    "index.sqlite",
    "-leading-dash",
    "\u0430bc",  # a Cyrillic 'a'
    "emoji🦜",
]


@_check(
    "hostile.index_names",
    "Index names that are paths, contain '..', '/', NUL or are too "
    "long are refused with InvalidIndexName by every op",
)
def _names(s: Subject) -> None:
    p = corpus()[:1]
    d = s.settings.op_deadline_s
    for name in _BAD_NAMES:
        shown = repr(_short(name))
        _refused(
            f"add to index {shown}", partial(s.guard.add, name, p, deadline_s=d), InvalidIndexName
        )
        _refused(
            f"search of index {shown}",
            partial(s.guard.search, name, "fox", deadline_s=d),
            InvalidIndexName,
        )
        _refused(
            f"remove from index {shown}",
            partial(s.guard.remove, name, [p[0].id], deadline_s=d),
            InvalidIndexName,
        )
        _refused(
            f"status of index {shown}",
            partial(s.guard.status, name, deadline_s=d),
            InvalidIndexName,
        )
        if s.claims("get"):
            _refused(
                f"get from index {shown}",
                partial(s.guard.get, name, [p[0].id], deadline_s=d),
                InvalidIndexName,
            )
        if s.claims("scan"):
            _refused(
                f"scan of index {shown}",
                partial(s.guard.scan, name, deadline_s=d),
                InvalidIndexName,
            )
        if s.claims("drop"):
            _refused(
                f"drop of index {shown}",
                partial(s.guard.drop, name, deadline_s=d),
                InvalidIndexName,
            )
    for good in ("z" * (MAX_NAME_LENGTH - 11) + uuid.uuid4().hex[:11], f"0-_{uuid.uuid4().hex}"):
        _add(s, good, p, f"add to the valid index name {good!r}")
        _search(s, good, "fox", f"search of the valid index name {good!r}")


def _hostile_queries() -> list[str]:
    words = " ".join(f"w{i}" for i in range(9_999)) + " fox"
    return [
        '"',
        '""',
        "'",
        "NEAR(",
        "NEAR(fox violin, 2)",
        "*",
        "fox*",
        "^fox",
        ":",
        "text:fox",
        "AND OR NOT",
        "fox AND",
        "NOT",
        "(",
        ")",
        "()",
        "(fox OR",
        '"unterminated fox',
        "it's the fox's den",
        "'; DROP TABLE passages; --",
        "fox\\",
        "%",
        "_",
        "{}[]",
        "🦜🔥",
        "🦊 fox",
        "مرحبا بالعالم",
        "שלום עולם",
        "\u202efox\u202c",
        "fo\u0301x",
        "\u200b",
        "\ufeff",
        "𝔣𝔬𝔵",
        "a" * 5_000,
        words,
        "",
        "   ",
        "\t\n",
        "fox\x00",
        "x" * (MAX_QUERY_CHARS + 1),
    ]


@_check(
    "hostile.queries",
    "Queries of search syntax, quotes, emoji, right-to-left text, 10,000 "
    "words or nothing get a typed answer and corrupt nothing",
)
def _queries(s: Subject) -> None:
    index, ps = _filled(s, "queries")
    added = _by_id(ps)
    before = _snapshot(s, index, _QUERIES, "before hostile queries")
    for q in _hostile_queries():
        what = f"search for {_short(q)!r}" + (f" ({len(q.split())} words)" if len(q) > 40 else "")
        try:
            out = s.guard.search(index, q, top_k=10, deadline_s=s.settings.op_deadline_s)
        except InvalidRequest:
            continue
        except Exception as exc:
            fail(f"{what} raised {_describe(exc)} instead of a typed answer")
        out = _expect(out, "search", ("SEARCHED", "NO_MATCH"), what, index)
        if isinstance(out, Searched):
            _check_hits(s, out, 10, added, what, count=len(ps))
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after hostile queries"),
        "hostile queries changed the index",
    )


@_check("hostile.top_k", "top_k of 0, negative, huge or not an integer gets a typed answer")
def _top_k(s: Subject) -> None:
    index, ps = _filled(s, "topk")
    added = _by_id(ps)
    bad: list[Any] = [0, -1, -(10**9), MAX_TOP_K + 1, 10**9, 10**30, True, 2.5, "5", None]
    for k in bad:
        what = f"search with top_k={k!r}"
        try:
            out = s.guard.search(index, "fox", top_k=k, deadline_s=s.settings.op_deadline_s)
        except InvalidRequest:
            continue
        except Exception as exc:
            fail(f"{what} raised {_describe(exc)} instead of a typed answer")
        out = _expect(out, "search", ("SEARCHED", "NO_MATCH"), what, index)
        if isinstance(out, Searched):
            limit = k if isinstance(k, int) and not isinstance(k, bool) else 0
            _check_hits(s, out, limit, added, what, count=len(ps))
    out = _search(s, index, "fox glaciers", f"search with top_k={MAX_TOP_K}", top_k=MAX_TOP_K)
    _check_hits(s, out, MAX_TOP_K, added, f"search with top_k={MAX_TOP_K}", count=len(ps))


def _odd_passages(huge_chars: int) -> list[Passage]:
    """Passages built to trip storage: every one carries a marker word to find it by."""
    head = "hugemarker "
    body = "lorem ipsum dolor sit amet " * (huge_chars // 27 + 1)
    texts: list[tuple[str, dict[str, str | int | float | bool]],] = [
        ((head + body)[:huge_chars], {}),
        ("oddmarkera cafe\u0301 nai\u0308ve re\u0301sume\u0301 (combining marks)", {}),
        ("oddmarkerb café naïve résumé (precomposed)", {}),
        ("oddmarkerc zero\u200bwidth\u200cnon\u200djoiner\u2060word \ufeffbom", {}),
        ("oddmarkerd astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦜🔥 𠜎𠜱 👩\u200d👩\u200d👧", {"emoji🦜": "🔥"}),
        ("oddmarkere right-to-left \u200fمرحبا بالعالم\u200f and שלום עולם", {"dir": "rtl"}),
        ('oddmarkerf syntax "NEAR(x, y)" AND * ^ : (a OR b) NOT c \'; DROP TABLE x; --', {}),
        ("oddmarkerg\ttabs\nnewlines\r\ncarriage\x0bvertical\x1funit-separator", {}),
        (
            "oddmarkerh metadata of every kind",
            {
                "ключ": "значение",
                'quote"key': "it's",
                "int": -(2**53),
                "float": 1.5e300,
                "tiny": 5e-324,
                "false": False,
                "empty": "",
                "unicode": "naïve 🦜",
            },
        ),
        ("oddmarkeri many metadata keys", {f"k{i}": i for i in range(50)}),
    ]
    out = [kit_passage(t, 300 + i, tag="odd", metadata=m) for i, (t, m) in enumerate(texts)]
    long_uri = "kit://odd/" + "ü/" * 1_000 + "file name?x=1&y=é#frag"
    out.append(kit_passage("oddmarkerj a passage from a very long uri", 399, uri=long_uri))
    return out


@_check(
    "hostile.passages",
    "Passages with huge text or odd Unicode are stored and returned exactly as added",
)
def _odd(s: Subject) -> None:
    index = s.index("odd")
    ps = _odd_passages(s.settings.huge_passage_chars)
    added = _by_id(ps)
    out: Indexed = _add(s, index, ps, "add of passages with huge text and odd Unicode")
    if out.added != len(ps):
        fail(f"add of {len(ps)} odd passages reported added={out.added}")
    for p in ps:
        marker = p.text.split()[0]
        what = f"search for the passage marked {marker!r}"
        # The marker finds it in a lexical index; the words of its opening text find it in a
        # dense one (which may embed only the start of a huge passage).  Lower-case words
        # only (no AND, NEAR...): this check is about storage; hostile.queries is about syntax.
        words = " ".join(re.findall(r"\w+", p.text[:300])).lower()
        found = _search(s, index, f"{marker} {words}", what, top_k=5)
        ids = _check_hits(s, found, 5, added, what, count=len(ps))
        if p.id not in ids:
            fail(f"{what} did not return it")
    again: Indexed = _add(s, index, ps, "adding the odd passages again")
    if again.known != len(ps):
        fail(
            f"adding the odd passages again reported known={again.known} of {len(ps)}: their "
            "ids did not survive storage"
        )


def _concurrent_batches(writers: int, st: KitSettings, tag: str) -> list[list[list[Passage]]]:
    """Each writer's batches: passages of its own plus two shared by several writers, so that
    the same passage is added concurrently and must still be stored (and counted) once."""
    shared = [
        kit_passage(
            f"concur shared passage {i} that several writers add", 500 + i, tag=f"{tag}-shared"
        )
        for i in range(writers + st.batches_per_thread)
    ]
    return [
        [
            [
                *(
                    kit_passage(f"concur writer {w} passage {j} ctok{w}x{j}", j, tag=f"{tag}-{w}")
                    for j in range(b * st.batch_size, (b + 1) * st.batch_size)
                ),
                shared[w + b],
                shared[(w + b + 1) % len(shared)],
            ]
            for b in range(st.batches_per_thread)
        ]
        for w in range(writers)
    ]


def _distinct(batches: list[list[list[Passage]]]) -> list[Passage]:
    return list(_by_id([p for writer in batches for batch in writer for p in batch]).values())


def _verify_concurrent(
    s: Subject, index: str, expected: list[Passage], added_total: int, what: str
) -> None:
    want = _by_id(expected)
    count = _count(s, index, f"status after {what}")
    if count != len(want):
        fail(
            f"after {what}, status reports {count} passages for {len(want)} distinct ones "
            f"({'lost' if count < len(want) else 'duplicated'})"
        )
    out = _search(s, index, "concur", f"search after {what}", top_k=min(MAX_TOP_K, len(want)))
    ids = _check_hits(s, out, len(want), want, f"search after {what}", count=len(want))
    if set(ids) != set(want):
        fail(
            f"after {what}, search returns {len(set(ids))} of {len(want)} passages: "
            f"{len(set(want) - set(ids))} lost"
        )
    if added_total != len(want):
        fail(
            f"{what} reported {added_total} passages added for {len(want)} distinct ones: "
            "some were counted as added twice"
            if added_total > len(want)
            else f"{what} reported only {added_total} of {len(want)} passages as added"
        )


@_check(
    "concurrency.threads",
    "Several threads adding and searching at once lose no passage and duplicate none",
    claim="concurrent_writers",
)
def _threads(s: Subject) -> None:
    st = s.settings
    index = s.index("threads")
    batches = _concurrent_batches(st.threads, st, "t")
    barrier = threading.Barrier(st.threads)
    problems = _Problems()
    added: list[int] = []

    def writer(w: int) -> None:
        barrier.wait()
        for b, chunk in enumerate(batches[w]):
            try:
                out = s.guard.add(index, chunk, deadline_s=st.op_deadline_s)
            except Exception as exc:
                problems.add(f"thread {w} add raised {_describe(exc)}")
                return
            if not isinstance(out, Indexed):
                problems.add(f"concurrent add (thread {w}, batch {b}) returned {_show(out)}")
                return
            added.append(out.added)  # list.append is atomic

    with _Readers(s, index, problems), ThreadPoolExecutor(max_workers=st.threads) as pool:
        for f in [pool.submit(writer, w) for w in range(st.threads)]:
            f.result()
    problems.raise_first()
    expected = _distinct(batches)
    _verify_concurrent(s, index, expected, sum(added), f"{st.threads} threads added at once")


class _Problems:
    """What went wrong in other threads, reported as the check's failure afterwards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[str] = []

    def add(self, msg: str) -> None:
        with self._lock:
            self.items.append(msg)

    def raise_first(self) -> None:
        if self.items:
            more = len(self.items) - 1
            fail(self.items[0] + (f" (and {more} more problem(s))" if more else ""))


class _Readers:
    """Threads that keep searching an index while writers work on it: every answer must be
    typed, and no answer may hold a passage twice."""

    def __init__(self, s: Subject, index: str, problems: _Problems, n: int = 2) -> None:
        self.s, self.index, self.problems = s, index, problems
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._read, daemon=True) for _ in range(n)]

    def __enter__(self) -> _Readers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for t in self.threads:
            t.join()

    def _read(self) -> None:
        s = self.s
        while not self.done.is_set():
            try:
                out = s.guard.search(
                    self.index, "concur", top_k=100, deadline_s=s.settings.op_deadline_s
                )
            except Exception as exc:
                self.problems.add(f"concurrent search raised {_describe(exc)}")
                return
            if not isinstance(out, (Searched, NoMatch, IndexEmpty)):
                self.problems.add(f"concurrent search returned {_show(out)}")
                return
            if isinstance(out, Searched):
                ids = [h.passage.id for h in out.hits]
                if len(set(ids)) != len(ids):
                    self.problems.add("a concurrent search returned the same passage twice")
                    return
            time.sleep(0.002)


def _run_writers(jobs: list[Any], timeout_s: float) -> list[list[Any]]:
    """Start one writer process per job, let them all go at once, collect their results."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for job in jobs:
            proc = subprocess.Popen(
                [sys.executable, "-m", "indexplug.testing._writer"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
            procs.append(proc)
            assert proc.stdin is not None
            proc.stdin.write(pickle.dumps(job))
            proc.stdin.flush()
        until = time.monotonic() + timeout_s
        for w, proc in enumerate(procs):
            assert proc.stdout is not None
            line = proc.stdout.readline().decode("utf-8", "replace").strip()
            if line != "ready":
                why = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
                detail = line or (why.strip().splitlines() or ["no output"])[-1]
                if line.startswith("{"):
                    detail = json.loads(line).get("error", line)
                fail(f"writer process {w} could not open the backend: {detail}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        results = []
        for w, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=max(0.1, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                fail(f"the writer processes did not finish within {timeout_s:g}s")
            text = out.decode("utf-8", "replace").strip()
            if proc.returncode != 0 or not text:
                last = (err.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
                fail(f"writer process {w} exited with status {proc.returncode}: {last}")
            results.append(json.loads(text.splitlines()[-1]))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@_check(
    "concurrency.processes",
    "Several processes adding at once lose no passage and duplicate none",
    claim="multiprocess_writers",
    needs=("factory",),
)
def _processes(s: Subject) -> None:
    st = s.settings
    factory = s.factory
    assert factory is not None
    try:
        pickle.dumps(factory)
    except Exception as exc:
        fail(f"backend_factory cannot be sent to another process: {_describe(exc)}")
    index = s.index("procs")
    # Create the index first from this process, then race the children on it.
    first = kit_passage("concur seed passage written before the processes start", 999)
    _add(s, index, [first], "add before starting the writer processes")
    batches = _concurrent_batches(st.processes, st, "p")
    jobs = [
        (factory, index, [[p.model_dump_json() for p in chunk] for chunk in mine], st.op_deadline_s)
        for mine in batches
    ]
    problems = _Problems()
    with _Readers(s, index, problems):
        results = _run_writers(jobs, st.process_timeout_s)
    problems.raise_first()
    total = 1
    for w, res in enumerate(results):
        for b, (code, n, shown) in enumerate(res):
            if code != "INDEXED":
                fail(f"concurrent add (process {w}, batch {b}) returned {shown}")
            total += n
    expected = [first, *_distinct(batches)]
    _verify_concurrent(s, index, expected, total, f"{st.processes} processes added at once")


_VOCAB = (
    "river",
    "stone",
    "cloud",
    "amber",
    "orbit",
    "meadow",
    "lantern",
    "copper",
    "harbor",
    "thistle",
    "falcon",
    "glacier",
    "ember",
    "prairie",
    "quartz",
    "willow",
    "canyon",
    "beacon",
    "marble",
    "cedar",
    "tundra",
    "lagoon",
    "summit",
    "pepper",
    "walnut",
    "comet",
    "velvet",
    "anchor",
    "basalt",
    "coral",
    "dune",
    "fjord",
    "grove",
    "heron",
    "iris",
    "juniper",
    "kelp",
    "lichen",
    "mango",
    "nectar",
    "oasis",
    "pebble",
    "quill",
    "reed",
    "saffron",
    "tide",
    "umber",
    "vine",
    "wren",
    "yarrow",
    "zephyr",
    "acorn",
    "birch",
    "cobalt",
)


@_check(
    "scale.smoke",
    "A few thousand passages added in batches are counted and found within generous time bounds",
)
def _scale(s: Subject) -> None:
    st = s.settings
    rng = random.Random(20240102)
    index = s.index("scale")
    ps = [
        kit_passage(
            " ".join(rng.choice(_VOCAB) for _ in range(24)) + f" scaletok{i}", i, tag="scale"
        )
        for i in range(st.scale_passages)
    ]
    started = time.perf_counter()
    total = 0
    for i in range(0, len(ps), st.scale_batch):
        out: Indexed = _add(
            s,
            index,
            ps[i : i + st.scale_batch],
            f"add of batch {i // st.scale_batch + 1} of the scale check",
        )
        total += out.added
    took = time.perf_counter() - started
    if took > st.scale_add_s:
        fail(f"adding {len(ps)} passages took {took:.1f}s, over the bound of {st.scale_add_s:g}s")
    if total != len(ps):
        fail(f"adding {len(ps)} distinct passages reported {total} added")
    count = _count(s, index, "status after the scale ingest")
    if count != len(ps):
        fail(f"after adding {len(ps)} passages, status reports {count}")
    added = _by_id(ps)
    for p in rng.sample(ps, 10):
        what = "search for a passage's exact text in the scale index"
        t0 = time.perf_counter()
        out2 = _search(s, index, p.text, what)
        took = time.perf_counter() - t0
        if took > st.scale_search_s:
            fail(f"{what} took {took:.1f}s, over the bound of {st.scale_search_s:g}s")
        ids = _check_hits(s, out2, 10, added, what, count=len(ps))
        if p.id not in ids:
            fail(f"{what} did not return that passage in the top 10")
