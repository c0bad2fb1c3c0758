"""From what the client raises (or a response reports) to one typed outcome.

The distinctions carry meaning for a caller deciding what an answer is worth:

* the cluster cannot be reached, has no master, or has no copy of a shard: ``IndexUnavailable``
  (try later; not a property of the index);
* the request ran past its deadline, on the wire or on the server: ``IndexTimeout``;
* anything else the server refused (a mapping clash, a bad setting, a forbidden index):
  ``IndexFailed``, with the server's own error type and reason.

A missing index is not a failure; each op decides what it means (``IndexEmpty`` for search,
``exists=False`` for status, every id missing for remove).
"""

from __future__ import annotations

from typing import Any

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TransportError
from elasticsearch import ApiError
from indexplug.deadlines import Deadline
from indexplug.outcomes import IndexFailed, IndexTimeout, IndexUnavailable

Failure = IndexFailed | IndexTimeout | IndexUnavailable

UNAVAILABLE_TYPES = frozenset(
    {
        "master_not_discovered_exception",
        "no_shard_available_action_exception",
        "unavailable_shards_exception",
        "node_not_connected_exception",
        "node_disconnected_exception",
        "node_closed_exception",
        "connect_transport_exception",
        "send_request_transport_exception",
        "es_rejected_execution_exception",
        "circuit_breaking_exception",
        "not_master_exception",
        "shard_not_found_exception",
        "no_node_available_exception",
        "cluster_block_exception",
    }
)
"""Error types that say the cluster (not the request) cannot serve right now."""

TIMEOUT_TYPES = frozenset(
    {
        "timeout_exception",
        "elasticsearch_timeout_exception",
        "process_cluster_event_timeout_exception",
        "receive_timeout_transport_exception",
        "search_timeout_exception",
    }
)

UNAVAILABLE_STATUS = frozenset({429, 502, 503})
TIMEOUT_STATUS = frozenset({408, 504})


def transport_reason(exc: BaseException) -> str:
    """The innermost cause of a transport error, in one short line.

    The client wraps the socket error once per layer and once per retry ("Connection error
    caused by: ConnectionError(Connection error caused by: NewConnectionError(...)))"); the
    innermost message ("[Errno 111] Connection refused") is the one a person needs.
    """
    inner: BaseException = exc
    while True:
        nested = getattr(inner, "errors", None) or ()
        deeper = next((e for e in nested if isinstance(e, BaseException)), None)
        if deeper is None or deeper is inner:
            break
        inner = deeper
    text = str(getattr(inner, "message", None) or inner).strip()
    text = text.splitlines()[0] if text else type(inner).__name__
    if ": " in text and text.startswith(("HTTPConnection", "HTTPSConnection")):
        text = text.split(": ", 1)[1]
    return text.removeprefix("Connection error caused by: ")[:300]


def error_types(error: Any) -> list[str]:
    """Every ``type`` in an Elasticsearch error body (the error, its root and its causes)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            t = node.get("type")
            if isinstance(t, str):
                found.append(t)
            for key in ("root_cause", "caused_by", "failed_shards", "reason"):
                value = node.get(key)
                if isinstance(value, list):
                    for item in value:
                        walk(item)
                elif isinstance(value, dict):
                    walk(value)

    walk(error.get("error", error) if isinstance(error, dict) else error)
    return found


def error_reason(error: Any) -> str:
    """The most specific human reason in an error body."""
    if isinstance(error, dict):
        inner = error.get("error", error)
        if isinstance(inner, dict):
            roots = inner.get("root_cause")
            if isinstance(roots, list) and roots and isinstance(roots[0], dict):
                r = roots[0]
                return f"{r.get('type', 'error')}: {r.get('reason', '')}".strip()
            return f"{inner.get('type', 'error')}: {inner.get('reason', '')}".strip()
        return str(inner)
    return str(error)


def is_index_missing(exc_or_body: Any) -> bool:
    body = exc_or_body.body if isinstance(exc_or_body, ApiError) else exc_or_body
    return "index_not_found_exception" in error_types(body)


def classify(
    status: int | None, body: Any, *, index: str, backend: str, deadline: Deadline, doing: str
) -> Failure:
    """The outcome for an error body the server answered with (HTTP ``status``)."""
    types = set(error_types(body))
    reason = f"Elasticsearch refused {doing}: {error_reason(body)}"
    if types & TIMEOUT_TYPES or status in TIMEOUT_STATUS:
        return IndexTimeout(
            index=index, backend=backend, deadline_s=deadline.seconds, reason=reason
        )
    if status in UNAVAILABLE_STATUS or (types & UNAVAILABLE_TYPES and status != 403):
        return IndexUnavailable(index=index, backend=backend, reason=reason)
    return IndexFailed(
        index=index,
        backend=backend,
        reason=reason,
        error_type=next(iter(sorted(types)), None) or f"HTTP{status}",
    )


def failure(
    exc: BaseException, *, index: str, backend: str, deadline: Deadline, doing: str
) -> Failure:
    """The outcome for an exception raised while ``doing`` something."""
    if isinstance(exc, ConnectionTimeout):
        return IndexTimeout(
            index=index,
            backend=backend,
            deadline_s=deadline.seconds,
            reason=f"no answer from Elasticsearch within the deadline while {doing}",
        )
    if isinstance(exc, TransportConnectionError):
        return IndexUnavailable(
            index=index,
            backend=backend,
            reason=f"cannot reach Elasticsearch: {transport_reason(exc)}",
        )
    if isinstance(exc, ApiError):
        return classify(
            exc.meta.status, exc.body, index=index, backend=backend, deadline=deadline, doing=doing
        )
    if isinstance(exc, TransportError):
        return IndexUnavailable(
            index=index, backend=backend, reason=f"transport error while {doing}: {exc}"
        )
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return IndexFailed(
        index=index,
        backend=backend,
        reason=f"{type(exc).__name__} while {doing}" + (f": {text}" if text else ""),
        error_type=type(exc).__name__,
    )


def late(index: str, backend: str, deadline: Deadline, doing: str) -> IndexTimeout | None:
    """``IndexTimeout`` when the deadline has passed before ``doing`` could start."""
    if deadline.expired():
        return IndexTimeout(
            index=index,
            backend=backend,
            deadline_s=deadline.seconds,
            reason=f"the deadline passed before {doing}",
        )
    return None
