"""Rendering answers: the answer of a refused or failed request, a batch's items, the code of an
``index_folder`` run, and the exit status of any answer (see :mod:`indexplug.invocation`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from indexplug.errors import InvalidRequest
from indexplug.ingest import IngestReport
from indexplug.ops import (
    OPS,
    Answer,
    BatchItem,
    Problem,
)
from indexplug.outcomes import (
    EXIT_CODES,
    BadRequest,
    IndexFailed,
    IndexTimeout,
    IndexUnavailable,
    NotAllowed,
)
from indexplug.targets import Target
from indexplug.transfer import EXIT_CODES as TRANSFER_EXIT_CODES


def exit_code(answer: Mapping[str, Any]) -> int:
    """The exit status of an answer (what ``indexplug invoke`` exits with).

    An outcome code maps through :data:`~indexplug.outcomes.EXIT_CODES` (the transfer codes
    through :data:`indexplug.transfer.EXIT_CODES`: ``EXPORTED``, ``IMPORTED`` and ``COPIED`` 0,
    ``COPY_MISMATCH`` 3); ``LISTED`` is 0; a
    ``BATCH`` exits by its overall code (``evidence.overall``, see
    :data:`~indexplug.ops.BATCH_ORDER`); anything else is ``INDEX_FAILED``'s.
    """
    code = answer.get("code")
    if code == "LISTED":
        return 0 if answer.get("ok") else EXIT_CODES["INDEX_FAILED"]
    if code == "BATCH":
        code = (answer.get("evidence") or {}).get("overall")
    if str(code) in TRANSFER_EXIT_CODES:
        return TRANSFER_EXIT_CODES[str(code)]
    return EXIT_CODES.get(str(code), EXIT_CODES["INDEX_FAILED"])


def _answer_type(op: str) -> type[Answer[Any, Any]]:
    spec = OPS.get(op)
    return spec.result if spec is not None else Answer  # type: ignore[return-value]


def refusal(op: str, outcome: BadRequest | NotAllowed) -> dict[str, Any]:
    """The answer for a refused request (its shape fits every op's result schema)."""
    problem = Problem(reason=outcome.reason, field=getattr(outcome, "field", None))
    return Answer[Any, Any](
        op=op, code=outcome.code, ok=False, message=outcome.message, problem=problem
    ).model_dump(mode="json")


def bad_request(op: str, reason: str, field: str | None = None, index: str = "") -> dict[str, Any]:
    return refusal(op, BadRequest(index=index, field=field, reason=reason))


def _problem_of(outcome: Any) -> Problem | None:
    if isinstance(outcome, IndexFailed):
        return Problem(reason=outcome.reason, error_type=outcome.error_type)
    if isinstance(outcome, IndexTimeout):
        return Problem(reason=outcome.reason, deadline_s=outcome.deadline_s)
    if isinstance(outcome, IndexUnavailable):
        return Problem(reason=outcome.reason)
    return None


def _failure(op: str, outcome: Any, evidence: BaseModel | None = None) -> Answer[Any, Any]:
    return _answer_type(op)(
        op=op,
        code=outcome.code,
        ok=False,
        message=outcome.message,
        evidence=evidence,
        problem=_problem_of(outcome),
    )


def _batch_item(q: str, got: Answer[Any, Any]) -> BatchItem:
    return BatchItem.model_validate({**got.model_dump(), "query": q})


def _refused_item(t: Target, q: str, exc: InvalidRequest) -> BatchItem:
    bad = BadRequest(index=t.index, field=exc.field, reason=str(exc))
    return BatchItem(
        op="search",
        query=q,
        code=bad.code,
        ok=False,
        message=bad.message,
        problem=Problem(reason=bad.reason, field=bad.field),
    )


def folder_code(report: IngestReport) -> str:
    """The code of an ``index_folder`` run: ``INDEXED``, else what its first failed write
    said (``OVER_BUDGET``, ``INDEX_UNAVAILABLE``, ``INDEX_TIMEOUT``; otherwise
    ``INDEX_FAILED``).  The CLI's ``index`` exits by it too."""
    if report.ok:
        return "INDEXED"
    first = report.failures[0]
    for code, marker in (
        ("OVER_BUDGET", "over its budget"),
        ("INDEX_UNAVAILABLE", "is unavailable"),
        ("INDEX_TIMEOUT", "timed out"),
    ):
        if marker in first:
            return code
    return "INDEX_FAILED"
