"""The registry of checks: declaring one, listing them, gating and running one."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from indexplug.testing.checks.helpers import _describe
from indexplug.testing.checks.subject import CheckFailed, CheckResult, CheckStatus, Subject

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
