"""The reads of the chroma backend as steps: exact scans, scan pages and hits from records.

Chroma's answers (a query, a ``get``) become passages and hits here, dead records dropped and a
record that is not an indexplug passage named; :class:`~indexplug_chroma.backend.ChromaBackend`
runs these steps with the blocking or the async client (:mod:`indexplug_chroma.steps`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from indexplug.deadlines import Deadline
from indexplug.filters import Filter, matches
from indexplug.outcomes import Got, Hit
from indexplug.passages import Passage, passage_from_provenance
from indexplug.protocols import Vector

from indexplug_chroma import fields, records, steps
from indexplug_chroma.collection import ID_CHUNK, SEARCH_ATTEMPTS, _typed
from indexplug_chroma.errors import DeadlinePassed, RecordLost
from indexplug_chroma.scale import SCALE
from indexplug_chroma.stores import collection_name


def _in_time(deadline: Deadline, step: str) -> None:
    if deadline.expired():
        raise DeadlinePassed(f"the deadline of {deadline.seconds:g}s passed before {step}")


UNWRITTEN_VECTOR_INDEX = "Nothing found on disk"
"""What Chroma (1.x) says when a query reaches a collection whose vector index has not been
written to disk yet, typically while another client's first writes to it are being flushed
("Error creating hnsw segment reader: Nothing found on disk", chroma-core/chroma#4212).  The
records are stored; only the graph is missing, so the search scans them exactly instead of
failing."""


def _vector_index_unwritten(exc: BaseException) -> bool:
    return UNWRITTEN_VECTOR_INDEX in str(exc)


ID_NOT_FOUND = "Error finding id"
"""What Chroma (1.5) raises from a query whose vector index answered an id that a delete
running at the same time removed from its records: worth asking again, like a vector
answered without its record (:data:`SEARCH_ATTEMPTS`)."""


Check = Callable[[str, str | None, Mapping[str, Any] | None], bool]
"""Whether a record (id, document, metadata) passes a filter Chroma could only narrow down."""


def _provenance_check(f: Filter) -> Check:
    """``f`` checked on the exact metadata in a record's provenance: the JSON that keeps
    every value's type and digits (a float as it was added, not as Chroma compares it).  For
    every filter Chroma can only narrow down, and collections made before the typed fields."""
    return lambda pid, doc, meta: matches(f, records.from_record(pid, doc, meta).metadata)


def _vectors_without_records(coll: Any, dim: int) -> steps.Steps[bool]:
    """For a collection that counts no records: ``False`` if its vector index holds nothing
    either (truly empty), ``True`` if records were written meanwhile; raises
    :class:`RecordLost` if it holds vectors whose records are gone (deleted behind it), which
    would otherwise pass for an empty index."""
    try:
        res = yield steps.Call(
            coll,
            "query",
            {
                "query_embeddings": [np.ones(dim, dtype=np.float32)],
                "n_results": 1,
                "include": ["distances"],
            },
        )
    except Exception as exc:
        if _vector_index_unwritten(exc):
            return False
        raise
    ids = list((res.get("ids") or [[]])[0])
    if not ids:
        return False
    found = yield steps.Call(coll, "get", {"ids": ids, "include": []})
    if found["ids"]:
        return True
    raise RecordLost(
        f"the index counts no passages, but its vector index still holds passage "
        f"{str(ids[0])[:12]}... (records deleted behind it); the index cannot be trusted: "
        "rebuild it"
    )


def _exact_query(
    coll: Any,
    vector: Vector,
    top_k: int,
    where: Any,
    check: Check | None = None,
    *,
    typed: bool = True,
) -> steps.Steps[dict[str, Any]]:
    """What ``coll.query`` answers, by an exact cosine scan of every stored embedding (those
    matching ``where``, alive, and passing ``check`` when given): for the passages Chroma's
    graph search cannot reach, and for filters Chroma can only narrow down.  ``check``
    reads every candidate's document (its provenance: the exact metadata)."""
    for whole in (False, True):
        include = ["embeddings", "metadatas"]
        if whole or check is not None:
            include.append("documents")
        rows = yield steps.Call(coll, "get", {"where": where, "include": include})
        docs = rows.get("documents") or [None] * len(rows["ids"])
        keep = [
            i
            for i, (pid, doc, meta) in enumerate(
                zip(rows["ids"], docs, rows["metadatas"], strict=True)
            )
            if not records.is_dead(doc, meta) and (check is None or check(pid, doc, meta))
        ]
        ids = [rows["ids"][i] for i in keep]
        if not ids:
            return {"ids": [[]], "documents": [[]], "metadatas": [[]], "distances": [[]]}
        emb = np.asarray([rows["embeddings"][i] for i in keep], dtype=np.float32)
        norms = np.linalg.norm(emb, axis=1) * float(np.linalg.norm(vector))
        with np.errstate(divide="ignore", invalid="ignore"):
            distances = 1.0 - (emb @ vector) / norms  # Chroma's cosine distance
        distances = np.where(np.isfinite(distances), distances, np.inf)
        order = np.argsort(distances, kind="stable")[:top_k]
        if whole:  # one read: documents and embeddings of one state of the collection
            by_id = {ids[i]: (docs[keep[i]], rows["metadatas"][keep[i]]) for i in range(len(ids))}
            break
        top = [ids[i] for i in order]
        got = yield steps.Call(coll, "get", {"ids": top, "include": ["documents", "metadatas"]})
        by_id = {
            pid: (doc, meta)
            for pid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
            if not records.is_dead(doc, meta)
        }
        if len(by_id) == len(top):
            break
        # Some were removed or replaced between the two reads (a key's new version written
        # meanwhile would be missing): read once more, documents and all, in one read.
    kept = [i for i in order if ids[i] in by_id]
    return {
        "ids": [[ids[i] for i in kept]],
        "documents": [[by_id[ids[i]][0] for i in kept]],
        "metadatas": [[by_id[ids[i]][1] for i in kept]],
        "distances": [[float(distances[i]) for i in kept]],
    }


def _live(res: dict[str, Any]) -> dict[str, Any]:
    """A query's answer without its dead records (see :func:`records.dead_record`)."""
    ids = (res.get("ids") or [[]])[0]
    docs = (res.get("documents") or [[None] * len(ids)])[0]
    metas = (res.get("metadatas") or [[None] * len(ids)])[0]
    dead = [i for i, (d, m) in enumerate(zip(docs, metas, strict=True)) if records.is_dead(d, m)]
    if not dead:
        return res
    out = dict(res)
    for field in ("ids", "documents", "metadatas", "distances"):
        column = (res.get(field) or [None])[0]
        if column is not None:
            out[field] = [[v for i, v in enumerate(column) if i not in dead]]
    return out


def _got(
    index: str,
    backend: str,
    ids: Sequence[str],
    keys: Sequence[str],
    found: Mapping[str, Passage],
) -> Got:
    seen_keys = {p.key for p in found.values()}
    return Got(
        index=index,
        backend=backend,
        passages=list(found.values()),
        missing_ids=[i for i in ids if i not in found],
        missing_keys=[k for k in keys if k not in seen_keys],
    )


def _scan_page(
    coll: Any,
    filters: Filter | None,
    after: str | None,
    limit: int,
    deadline: Deadline,
) -> steps.Steps[tuple[list[Passage], bool]]:
    """The passages of one scan page, and whether more may follow (see
    :meth:`ChromaBackend.scan`)."""
    typed = _typed(dict(coll.metadata or {}))
    where: dict[str, Any] | None = None
    check: Check | None = None
    if filters is not None:
        if typed:
            translated = fields.translate(filters)
            if translated.clause is fields.FALSE:
                return [], False
            where = translated.clause or None
            check = None if translated.exact else _provenance_check(filters)
        else:
            check = _provenance_check(filters)
    include: list[str] = []
    if check is not None:  # the provenance in the document, or in a key (plain documents)
        include = ["documents", "metadatas"]
    page: list[Passage] = []
    ids: list[str] = []
    pos = 0
    for attempt in range(1, SEARCH_ATTEMPTS + 1):
        listed = yield steps.Call(coll, "get", {"where": where, "include": include})
        n = len(listed["ids"])
        docs = listed.get("documents") or [None] * n
        metas = listed.get("metadatas") or [None] * n
        ids = sorted(
            pid
            for pid, doc, meta in zip(listed["ids"], docs, metas, strict=True)
            if (after is None or pid > after)
            and (check is None or (not records.is_dead(doc, meta) and check(pid, doc, meta)))
        )
        page = []
        pos = 0
        changed = False
        while pos < len(ids) and len(page) < limit:  # dead records dropped: read on
            _in_time(deadline, "reading a page")
            chunk = ids[pos : pos + min(limit - len(page), ID_CHUNK)]
            pos += len(chunk)
            read = yield steps.Call(
                coll, "get", {"ids": chunk, "include": ["documents", "metadatas"]}
            )
            got = _stored_passages(read)
            page.extend(got[pid] for pid in chunk if pid in got)
            changed = changed or len(got) < len(chunk)
        if not changed or attempt == SEARCH_ATTEMPTS:
            break
        # listed passages removed or replaced before they were read (a key's new version,
        # written meanwhile, would be missing from the page): list again
    return page, pos < len(ids)


async def _aget(client: Any, index: str) -> Any | None:
    """The index's collection through the async client, or None."""
    from chromadb.errors import NotFoundError

    try:
        return await client.get_collection(collection_name(index), embedding_function=None)
    except NotFoundError:
        return None
    except ValueError as exc:  # older clients say "does not exist" with a ValueError
        if "does not exist" in str(exc):
            return None
        raise


def _stored_passages(got: Mapping[str, Any]) -> dict[str, Passage]:
    """The passages of a ``get`` answer (ids, documents, metadatas), dead records left out."""
    out: dict[str, Passage] = {}
    for pid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
        if not records.is_dead(doc, meta):
            out[pid] = records.from_record(pid, doc, meta)
    return out


def _record_payload(pid: str, document: str | None, metadata: Mapping[str, Any] | None) -> int:
    try:
        return records.payload_bytes(records.from_record(pid, document, metadata))
    except Exception:
        return len((document or "").encode("utf-8"))


def _hits(res: Mapping[str, Any]) -> list[Hit]:
    """Chroma's answer as hits: cosine similarity = 1 - cosine distance, best first.

    A hit whose distance is not finite (a degenerate stored vector) has no similarity to rank
    by and is dropped.  Records holding their provenance as one string (today's layout, in
    the document, or the one before, in a metadata key) become hits in one pass, each
    ``Hit.from_stored`` around :func:`~indexplug.passages.passage_from_provenance` (neither id
    nor digest checked here: the guard checks every hit); a record in the
    oldest layout, one that is not a passage at all or a vector whose record is gone takes
    :func:`_hits_one_by_one`, which also says which record is broken.
    """
    ids = (res.get("ids") or [[]])[0]
    docs = (res.get("documents") or [[None] * len(ids)])[0]
    metas = (res.get("metadatas") or [[None] * len(ids)])[0]
    dists = (res.get("distances") or [[math.nan] * len(ids)])[0]
    rows: list[tuple[str, float, str, str]] = []
    sep, in_document = records.SEPARATOR, records.provenance_in_document
    for pid, doc, meta, dist in zip(ids, docs, metas, dists, strict=True):
        if not isinstance(doc, str):
            return _hits_one_by_one(ids, docs, metas, dists)  # named there
        score = 1.0 - float(dist)
        if not math.isfinite(score):
            continue
        if in_document(meta):  # today's layout: the provenance after the text
            text, found, prov = doc.rpartition(sep)
            if not found:
                return _hits_one_by_one(ids, docs, metas, dists)
        else:  # the layout before, a key of its own (the first layout: one by one)
            text, prov = doc, meta.get(records.PROV)
            if not isinstance(prov, str):
                return _hits_one_by_one(ids, docs, metas, dists)
        rows.append((pid, score, text, prov))
    try:
        return [
            Hit.from_stored(
                rank=rank,
                score=score,
                score_scale=SCALE.name,
                passage=passage_from_provenance(pid, text, prov),
            )
            for rank, (pid, score, text, prov) in enumerate(rows, start=1)
        ]
    except Exception:
        return _hits_one_by_one(ids, docs, metas, dists)


def _hits_one_by_one(
    ids: Sequence[str],
    docs: Sequence[str | None],
    metas: Sequence[Mapping[str, Any] | None],
    dists: Sequence[float],
) -> list[Hit]:
    """:func:`_hits` a record at a time: a record that is not an indexplug passage raises
    ``ValueError`` naming it, and a vector whose record is gone
    :class:`~indexplug_chroma.errors.RecordLost`."""
    hits: list[Hit] = []
    for pid, doc, meta, dist in zip(ids, docs, metas, dists, strict=True):
        try:
            passage = records.from_record(pid, doc, meta)
        except RecordLost:
            raise
        except Exception as exc:
            raise ValueError(
                f"stored record {pid[:12]}... is not an indexplug passage ({type(exc).__name__}: "
                f"{exc})"
            ) from exc
        score = 1.0 - float(dist)
        if not math.isfinite(score):
            continue
        # from_stored: the guard checks every hit (ranks, scores, scale, id, digest) anyway.
        hits.append(
            Hit.from_stored(
                rank=len(hits) + 1, score=score, score_scale=SCALE.name, passage=passage
            )
        )
    return hits
