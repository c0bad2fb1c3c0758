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

The checks live in one module per family: ``outcomes``, ``writes``, ``filters``, ``reads``,
``drop``, ``keys``, ``vectors``, ``budget``, ``integrity``, ``deadlines``, ``asynchronous``,
``availability``, ``persistence``, ``hostile``, ``concurrency``, ``scale`` and ``stats``.
``subject`` holds what a check gets and what it gives back, ``registry`` the list and its
gating, and ``helpers`` what the families share (calling the backend, judging its answers, the
test passages).  A family registers its checks when it is imported, so the order of the imports
below is the order of :data:`CHECKS` and of every card.
"""

from __future__ import annotations

from indexplug.testing.checks.helpers import ALLOWED_CODES, NO_MATCH_QUERY, corpus, kit_passage
from indexplug.testing.checks.registry import CHECKS, Check, CheckFn, check_ids, run_check
from indexplug.testing.checks.subject import (
    CheckFailed,
    CheckResult,
    CheckStatus,
    DeleteRows,
    KitSettings,
    Reopen,
    Subject,
    Tamper,
    TamperRecord,
    claimed,
    claims_of,
    fail,
)

# Registration order is import order: each family module registers its checks when imported,
# and the card lists them in the order below.  Keep it (tests/kit/test_kit_split.py checks it).
# isort: off
from indexplug.testing.checks import outcomes  # noqa: F401
from indexplug.testing.checks import writes  # noqa: F401
from indexplug.testing.checks import filters  # noqa: F401
from indexplug.testing.checks import reads  # noqa: F401
from indexplug.testing.checks import drop  # noqa: F401
from indexplug.testing.checks import keys  # noqa: F401
from indexplug.testing.checks import vectors  # noqa: F401
from indexplug.testing.checks import budget  # noqa: F401
from indexplug.testing.checks import integrity  # noqa: F401
from indexplug.testing.checks import deadlines  # noqa: F401
from indexplug.testing.checks import asynchronous  # noqa: F401
from indexplug.testing.checks import availability  # noqa: F401
from indexplug.testing.checks import persistence  # noqa: F401
from indexplug.testing.checks import hostile  # noqa: F401
from indexplug.testing.checks import concurrency  # noqa: F401
from indexplug.testing.checks import scale  # noqa: F401
from indexplug.testing.checks import stats  # noqa: F401
# isort: on

__all__ = [
    "ALLOWED_CODES",
    "CHECKS",
    "NO_MATCH_QUERY",
    "Check",
    "CheckFailed",
    "CheckFn",
    "CheckResult",
    "CheckStatus",
    "DeleteRows",
    "KitSettings",
    "Reopen",
    "Subject",
    "Tamper",
    "TamperRecord",
    "check_ids",
    "claimed",
    "claims_of",
    "corpus",
    "fail",
    "kit_passage",
    "run_check",
]
