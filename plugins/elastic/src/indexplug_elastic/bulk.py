"""Bulk writes: creates in batches with a progress bar, per-passage results, and rollback.

Why ``create`` (not ``index``): the passage id is the document id, so the server itself says
which passages it already holds (409 ``version_conflict_engine_exception``), atomically per
document.  Two writers adding the same passage at once therefore count it once as added and
once as known -- never twice, never lost -- without a lock or a read-before-write.

Why per-item results matter: ``_bulk`` answers 200 even when some items failed.  Every item is
read, a failure is kept with the passage id and the server's reason, and the caller decides
(the backend rolls the batch back and reports each failed passage).

Why the pipeline: serialising a chunk (and analysing its text, when the client analyses) costs
client CPU while indexing the previous chunk costs server CPU.  Sending chunk *n* from a helper
thread while chunk *n+1* is built keeps both busy; measured on SciFact this is what brings bulk
indexing over 3,000 passages per second on two cores.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import Elasticsearch

from indexplug_elastic.documents import dumps


@dataclass
class BulkResult:
    """What the server did with each item of a bulk request."""

    done: list[str] = field(default_factory=list)
    """Ids created (or deleted, for a delete bulk)."""
    conflict: list[str] = field(default_factory=list)
    """Ids already there (create) or not there (delete)."""
    failed: dict[str, tuple[int, Any]] = field(default_factory=dict)
    """Id -> (HTTP status, error body) for every item that failed otherwise."""

    def merge(self, other: BulkResult) -> None:
        self.done += other.done
        self.conflict += other.conflict
        self.failed.update(other.failed)


def parse_items(response: Any, action: str) -> BulkResult:
    """Sort the items of one ``_bulk`` response into done, conflict and failed."""
    out = BulkResult()
    for item in response["items"]:
        res = item[action]
        status = int(res.get("status", 500))
        doc_id = str(res.get("_id"))
        if action == "create" and status in (200, 201):
            out.done.append(doc_id)
        elif action == "create" and status == 409:
            out.conflict.append(doc_id)
        elif action == "delete" and status == 200 and res.get("result") == "deleted":
            out.done.append(doc_id)
        elif action == "delete" and status == 404:
            out.conflict.append(doc_id)
        else:
            out.failed[doc_id] = (status, res.get("error"))
    return out


def chunks(
    docs: Iterable[tuple[str, bytes]], es_index: str, *, max_docs: int, max_bytes: int
) -> Iterator[tuple[list[str], bytes]]:
    """NDJSON ``create`` bodies of at most ``max_docs`` documents or about ``max_bytes``."""
    ids: list[str] = []
    parts: list[bytes] = []
    size = 0
    for doc_id, body in docs:
        head = dumps({"create": {"_index": es_index, "_id": doc_id}})
        ids.append(doc_id)
        parts += [head, b"\n", body, b"\n"]
        size += len(head) + len(body) + 2
        if len(ids) >= max_docs or size >= max_bytes:
            yield ids, b"".join(parts)
            ids, parts, size = [], [], 0
    if ids:
        yield ids, b"".join(parts)


def _progress(total: int, enabled: bool | None, desc: str) -> Any:
    show = enabled if enabled is not None else sys.stderr.isatty()
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="passage", leave=False, file=sys.stderr)


def create_all(
    client_for: Callable[[], Elasticsearch],
    es_index: str,
    docs: Iterable[tuple[str, bytes]],
    *,
    total: int,
    max_docs: int,
    max_bytes: int,
    timeout: Callable[[], str],
    progress: bool | None,
) -> BulkResult:
    """Send ``docs`` (id, serialised source) as ``create`` bulks, two in flight at most.

    ``client_for`` gives a client bounded by what is left of the op's deadline.  An exception
    (connection lost, timeout) propagates once the request in flight has finished; its
    ``partial`` attribute holds the results of the requests that did answer, so the caller
    knows which passages certainly reached the server.
    """
    result = BulkResult()
    bar = _progress(total, progress, f"indexing into {es_index}") if total > max_docs else None

    def send(ids: list[str], body: bytes) -> BulkResult:
        client = client_for()
        # Pre-serialised NDJSON: the client sends bytes as they are (its stubs say dicts only).
        resp = client.bulk(operations=body, timeout=timeout(), refresh=False)  # type: ignore[arg-type]
        got = parse_items(resp, "create")
        # Items with no answer at all would be lost silently; count them as failed.
        seen = set(got.done) | set(got.conflict) | set(got.failed)
        for i in ids:
            if i not in seen:
                got.failed[i] = (500, {"type": "missing_item", "reason": "no answer for item"})
        return got

    pending: Future[BulkResult] | None = None
    sent: list[str] = []
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="indexplug-es-bulk") as pool:
            for ids, body in chunks(docs, es_index, max_docs=max_docs, max_bytes=max_bytes):
                if pending is not None:
                    result.merge(pending.result())
                    if bar is not None:
                        bar.update(len(sent))
                sent = ids
                pending = pool.submit(send, ids, body)
            if pending is not None:
                result.merge(pending.result())
                if bar is not None:
                    bar.update(len(sent))
    except BaseException as exc:
        exc.partial = result  # type: ignore[attr-defined]
        raise
    finally:
        if bar is not None:
            bar.close()
    return result


def delete_ids(
    client: Elasticsearch, es_index: str, ids: Sequence[str], *, timeout: str, refresh: bool
) -> BulkResult:
    """Delete ``ids`` in one bulk (``refresh`` makes the deletion visible before returning)."""
    if not ids:
        return BulkResult()
    lines: list[bytes] = []
    for doc_id in ids:
        lines += [dumps({"delete": {"_index": es_index, "_id": doc_id}}), b"\n"]
    body = b"".join(lines)
    resp = client.bulk(operations=body, timeout=timeout, refresh=refresh)  # type: ignore[arg-type]
    return parse_items(resp, "delete")
