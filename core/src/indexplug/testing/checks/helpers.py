"""What the checks share: calling the backend, judging what comes back, and the test data."""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.filters import (
    Filter,
)
from indexplug.outcomes import (
    ALLOWED,
    IndexList,
    IndexStatus,
    Scanned,
    ScoreScale,
    Searched,
    outcome_from_json,
)
from indexplug.passages import Passage, Source
from indexplug.testing.checks.subject import Subject, fail

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
# shared by several families of checks (deadlines of optional ops, problems in other threads)


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
