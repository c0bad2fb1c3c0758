"""What a check gets and gives: the subject, the kit's settings, results and failures."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

from indexplug.guard import Guard
from indexplug.passages import MAX_PASSAGE_CHARS
from indexplug.protocols import Capabilities

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
