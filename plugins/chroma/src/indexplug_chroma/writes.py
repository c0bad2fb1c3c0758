"""The chroma backend's writes: ``add`` (known ids, keys replaced, budgets, a refusal undone),
``remove`` and ``op_drop``; see :mod:`indexplug_chroma.backend` for what each guarantees."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.outcomes import (
    AddOutcome,
    Indexed,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    Removed,
    RemoveOutcome,
)
from indexplug.passages import Passage
from indexplug.protocols import Embedder, Vector

from indexplug_chroma import fields, records, sizes
from indexplug_chroma.base import ChromaBase
from indexplug_chroma.collection import (
    BUDGET_KEY,
    DIM_KEY,
    EMBEDDER_KEY,
    FIELDS_KEY,
    ID_CHUNK,
    IN_DOCUMENT,
    PAYLOAD_KEY,
    RECORDS_KEY,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    TYPED_FIELDS,
    _known,
    _provenance_in_document,
    _typed,
)
from indexplug_chroma.errors import ChromaProblem
from indexplug_chroma.reads import _in_time, _record_payload
from indexplug_chroma.stores import EmbeddedStore, collection_name


class ChromaWrites(ChromaBase):
    """``add``, ``remove`` and ``op_drop``."""

    # -- ops ---------------------------------------------------------------------------------
    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        try:
            _in_time(deadline, "starting the write")
            for p in passages:
                fields.fields_of(p.metadata)  # a value Chroma cannot store: refused up front
            emb = self.embedder()
            ids = [p.id for p in passages]
            known: set[str] = set()
            if passages and self._store.exists(index) is not False:
                with self._store.use(index) as client:
                    coll = self._store.get(client, index)
                    if coll is not None:
                        meta, emb = self._check_embedder(index, coll, emb)
                        stored = self._existing(coll, ids, typed=_typed(meta))
                        known = {p.id for p in passages if _known(p, stored, _typed(meta))}
            todo = [p for p in passages if p.id not in known]
            vectors = dict(zip([p.id for p in todo], self._embed(emb, todo, deadline), strict=True))
            with self._write_lock(index, deadline):
                try:
                    return self._add_locked(index, passages, vectors, max_bytes, emb, deadline)
                finally:
                    self._store.forget_count(index)
        except Exception as exc:
            return self._failure(index, exc, deadline)

    def _add_locked(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: dict[str, Vector],
        requested: int | None,
        emb: Embedder,
        deadline: Deadline,
    ) -> AddOutcome:
        """The write, under the index's lock: what is new, the budget, then :meth:`_write`.

        A passage is *known* when its id is stored (in a collection with typed fields: alive,
        with the same digest, so a passage re-added with other metadata is written again; the
        key is part of the id).  Passages with caller keys replace every other passage of their keys
        (:meth:`_write`); ``Indexed.replaced`` counts those removed.
        """
        dim = emb.dim
        ids = [p.id for p in passages]
        coll: Any = None
        meta: dict[str, Any] = {}
        stored: dict[str, dict[str, Any]] = {}
        if self._store.exists(index) is not False:
            with self._store.use(index) as client:
                coll = self._store.get(client, index)
                if coll is not None:
                    meta, emb = self._check_embedder(index, coll, emb)
                    stored = self._existing(coll, ids, typed=_typed(meta))
        typed = coll is None or _typed(meta)
        keys = list(dict.fromkeys(p.key for p in passages if p.key is not None))
        if keys and not typed:
            raise ChromaProblem(
                f"index '{index}' was created before caller keys (its records have no typed "
                "fields); copy it to a new index to add passages with keys"
            )
        new = [p for p in passages if not _known(p, stored, typed)]
        if coll is None and not new:  # nothing to write, and no index to record a budget in
            return Indexed(index=index, backend=self.name, added=0, known=0)
        stored_budget = meta.get(BUDGET_KEY)
        budget = effective_max_bytes(
            int(stored_budget) if stored_budget is not None else None, requested
        )
        estimate = self._store.estimate_sizes
        if new and budget is not None:
            before = self._size(index, coll, meta, dim)
            if before is not None:
                if coll is None and not estimate and self._store.exists(index) is False:
                    before += sizes.EMPTY_FOLDER_BYTES
                added = (
                    sizes.payload_total(new) + len(new) * dim * sizes.FLOAT_BYTES
                    if estimate
                    else sizes.projected_bytes(new, dim)
                )
                before += added
            refused = over_budget(
                index,
                self.name,
                needed=before,
                max_bytes=budget,
                check="projected",
                estimate=estimate,
            )
            if refused:
                return refused
        _in_time(deadline, "writing")
        missing = [p for p in new if p.id not in vectors]
        if missing:  # removed by another writer since we looked: embed them now
            vectors.update(
                zip([p.id for p in missing], self._embed(emb, missing, deadline), strict=True)
            )
        created = False
        refused = None
        replaced: dict[str, tuple[Any, str | None, dict[str, Any] | None]] = {}
        with self._store.use(index) as client:
            if coll is None:
                first = {
                    EMBEDDER_KEY: emb.name,
                    DIM_KEY: dim,
                    SCHEMA_KEY: SCHEMA_VERSION,
                    RECORDS_KEY: "metadata" if self.settings.plain_documents else IN_DOCUMENT,
                    FIELDS_KEY: TYPED_FIELDS,
                    PAYLOAD_KEY: 0,
                }
                if requested is not None:
                    first[BUDGET_KEY] = requested
                coll, created = self._store.create(client, index, first)
                meta, emb = self._check_embedder(index, coll, emb)
                stored_budget = meta.get(BUDGET_KEY)
                if not created:  # another writer made it first: what does it hold already?
                    stored = self._existing(coll, ids, typed=_typed(meta))
            plain = not _provenance_in_document(meta)
            old = self._records_of_keys(coll, keys) if keys else {}
            batch_ids = set(ids)
            retire = {pid: rec for pid, rec in old.items() if pid not in batch_ids}
            before_images = self._full_records(coll, [p.id for p in new if p.id in stored])
            updated = dict(meta)
            try:
                self._write(
                    client, coll, new, vectors, stored, retire, plain=plain, typed=_typed(meta)
                )
                replaced = {
                    pid: rec for pid, rec in retire.items() if not records.is_dead(rec[1], rec[2])
                }
                gone = sum(_record_payload(pid, doc, md) for pid, (_, doc, md) in replaced.items())
                gone += sum(
                    _record_payload(pid, doc, md) for pid, (_, doc, md) in before_images.items()
                )
                updated[PAYLOAD_KEY] = max(
                    0, int(meta.get(PAYLOAD_KEY, 0)) + sizes.payload_total(new) - gone
                )
                if stored_budget is None and requested is not None:
                    updated[BUDGET_KEY] = requested
                if updated != meta:
                    coll.modify(metadata=updated)
                size_after = self._size(index, coll, updated, dim)
                if budget is not None and new:
                    refused = over_budget(
                        index,
                        self.name,
                        needed=size_after,
                        max_bytes=budget,
                        check="measured",
                        estimate=estimate,
                    )
            except BaseException:
                self._undo(client, coll, index, new, {**before_images, **retire}, meta, created)
                if created:
                    self._store_forget(index)
                raise
            if refused:
                self._undo(client, coll, index, new, {**before_images, **retire}, meta, created)
        if refused:
            if created:
                self._store_forget(index)
            return refused
        out = Indexed.of_batch(
            index=index,
            backend=self.name,
            ids=ids,
            added_ids=[p.id for p in new],
            bytes_used=size_after,
            max_bytes=budget,
            estimate=estimate,
        )
        return out.model_copy(update={"replaced": len(replaced)}) if replaced else out

    def _existing(
        self, collection: Any, ids: Sequence[str], *, typed: bool
    ) -> dict[str, dict[str, Any]]:
        """The stored ids among ``ids``, each with its record's metadata (typed collections:
        whether it is dead, its digest, and which keys an overwrite must clear)."""
        found: dict[str, dict[str, Any]] = {}
        include = ["metadatas"] if typed else []
        for i in range(0, len(ids), ID_CHUNK):
            got = collection.get(ids=list(ids[i : i + ID_CHUNK]), include=include)
            metas = got.get("metadatas") or [None] * len(got["ids"])
            for pid, md in zip(got["ids"], metas, strict=True):
                found[pid] = dict(md or {})
        return found

    def _records_of_keys(
        self, coll: Any, keys: Sequence[str]
    ) -> dict[str, tuple[Any, str | None, dict[str, Any] | None]]:
        """Every stored record (alive or dead) of these caller keys: id -> (embedding,
        document, metadata), what a replacement rewrites and an undo restores."""
        out: dict[str, tuple[Any, str | None, dict[str, Any] | None]] = {}
        for i in range(0, len(keys), ID_CHUNK):
            chunk = list(keys[i : i + ID_CHUNK])
            got = coll.get(
                where={fields.KEY_FIELD: {"$in": chunk}},
                include=["embeddings", "documents", "metadatas"],
            )
            for pid, vec, doc, md in zip(
                got["ids"], got["embeddings"], got["documents"], got["metadatas"], strict=True
            ):
                out[pid] = (vec, doc, md)
        return out

    def _full_records(
        self, coll: Any, ids: Sequence[str]
    ) -> dict[str, tuple[Any, str | None, dict[str, Any] | None]]:
        """Stored records as (embedding, document, metadata): what an undo puts back."""
        out: dict[str, tuple[Any, str | None, dict[str, Any] | None]] = {}
        for i in range(0, len(ids), ID_CHUNK):
            got = coll.get(
                ids=list(ids[i : i + ID_CHUNK]), include=["embeddings", "documents", "metadatas"]
            )
            for pid, vec, doc, md in zip(
                got["ids"], got["embeddings"], got["documents"], got["metadatas"], strict=True
            ):
                out[pid] = (vec, doc, md)
        return out

    def _batch_size(self, client: Any) -> int:
        if self._max_batch is None:
            try:
                self._max_batch = max(1, int(client.get_max_batch_size()))
            except Exception:
                self._max_batch = 1000
        return self._max_batch

    def _write(
        self,
        client: Any,
        coll: Any,
        new: Sequence[Passage],
        vectors: Mapping[str, Vector],
        stored: Mapping[str, Mapping[str, Any]],
        retire: Mapping[str, tuple[Any, str | None, dict[str, Any] | None]],
        *,
        plain: bool,
        typed: bool,
    ) -> None:
        """Write ``new`` in batches of the size Chroma accepts (the caller undoes a failure),
        each record in the collection's layout (``plain``: the provenance in a metadata key).

        Passages without a key whose id is not stored are added.  Those overwriting a stored
        record (another version of the passage) are upserted, the keys the old record had and
        the new one has not set to None (an upsert merges metadata).  The passages of each
        caller key, with its records to retire (``retire``: the key's records not in the
        batch) rewritten as dead, go to Chroma in *one* upsert, so that a reader sees the
        key's old passages or its new ones, never both or neither (a search drops dead
        records; see the module docstring); the retired records are then deleted.  A key
        whose passages and retired records are more than one upsert can take is refused
        before anything is written.
        """
        step = self._batch_size(client)
        Row = tuple[str, Any, str | None, dict[str, Any] | None]

        def row(p: Passage) -> Row:
            document, metadata = records.to_record(p, plain_document=plain, typed=typed)
            old = stored.get(p.id)
            if old:
                metadata = {**{k: None for k in old}, **(metadata or {})}
            return (p.id, vectors[p.id], document, metadata)

        groups: dict[str, list[Row]] = {}
        fresh: list[Row] = []
        overwrite: list[Row] = []
        for p in new:
            if p.key is not None:
                groups.setdefault(p.key, []).append(row(p))
            elif p.id in stored:
                overwrite.append(row(p))
            else:
                fresh.append(row(p))
        for pid, (vec, doc, md) in retire.items():
            key = (md or {}).get(fields.KEY_FIELD)
            dead_doc, dead_md = records.dead_record(doc, md)
            groups.setdefault(str(key), []).append((pid, vec, dead_doc, dead_md))
        for key, rows in groups.items():
            if len(rows) > step:
                raise ChromaProblem(
                    f"caller key {key[:60]!r} has {len(rows)} passages to write or retire, more "
                    f"than one Chroma write takes ({step}); it cannot be replaced at once"
                )

        def send(method: Callable[..., Any], rows: Sequence[Row]) -> None:
            metadatas = [r[3] for r in rows]
            method(
                ids=[r[0] for r in rows],
                embeddings=np.stack([np.asarray(r[1], dtype=np.float32) for r in rows]),
                documents=[r[2] for r in rows],
                metadatas=metadatas if any(m is not None for m in metadatas) else None,
            )

        for i in range(0, len(fresh), step):
            send(coll.add, fresh[i : i + step])
        for i in range(0, len(overwrite), step):
            send(coll.upsert, overwrite[i : i + step])
        pending: list[Row] = []
        for rows in groups.values():  # whole keys per upsert, as many as fit
            if len(pending) + len(rows) > step:
                send(coll.upsert, pending)
                pending = []
            pending.extend(rows)
        if pending:
            send(coll.upsert, pending)
        dead = list(retire)
        for i in range(0, len(dead), step):
            coll.delete(ids=dead[i : i + step])

    def _undo(
        self,
        client: Any,
        coll: Any,
        index: str,
        new: Sequence[Passage],
        before: Mapping[str, tuple[Any, str | None, dict[str, Any] | None]],
        meta: Mapping[str, Any],
        created: bool,
    ) -> None:
        """Take a write back, best effort: delete what it wrote, put back the records it
        overwrote or retired (``before``) and restore the metadata; a collection this write
        created is deleted entirely, so a refused or failed first write leaves no index
        behind.  Errors here are swallowed: the caller reports the original refusal or
        error."""
        try:
            if created:
                self._handles.pop(index, None)
                client.delete_collection(collection_name(index))
                return
            if coll is None:
                return
            step = self._batch_size(client)
            ids = list(dict.fromkeys([p.id for p in new] + list(before)))
            for i in range(0, len(ids), step):
                coll.delete(ids=ids[i : i + step])
            back = list(before.items())
            for i in range(0, len(back), step):
                chunk = back[i : i + step]
                metadatas = [md for _, (_, _, md) in chunk]
                coll.add(
                    ids=[pid for pid, _ in chunk],
                    embeddings=np.stack(
                        [np.asarray(v, dtype=np.float32) for _, (v, _, _) in chunk]
                    ),
                    documents=[doc for _, (_, doc, _) in chunk],
                    metadatas=metadatas if any(m is not None for m in metadatas) else None,
                )
            coll.modify(metadata=dict(meta))
        except Exception:
            pass

    def _store_forget(self, index: str) -> None:
        """After a first write was taken back: remove the embedded folder it made."""
        if isinstance(self._store, EmbeddedStore):
            try:
                self._store.drop(index)
            except Exception:
                pass

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        try:
            _in_time(deadline, "starting the removal")
            missing_all = Removed(index=index, backend=self.name, removed=0, missing_ids=list(ids))
            if self._store.exists(index) is False:
                return missing_all
            emb = self.embedder()
            with self._write_lock(index, deadline), self._store.use(index) as client:
                coll = self._store.get(client, index)
                if coll is None:
                    return missing_all
                meta, _ = self._check_embedder(index, coll, emb)
                present: dict[str, int] = {}
                found: list[str] = []
                for i in range(0, len(ids), ID_CHUNK):
                    got = coll.get(
                        ids=list(ids[i : i + ID_CHUNK]), include=["documents", "metadatas"]
                    )
                    for pid, doc, md in zip(
                        got["ids"], got["documents"], got["metadatas"], strict=True
                    ):
                        found.append(pid)
                        if not records.is_dead(doc, md):  # a dead record is gone already
                            present[pid] = _record_payload(pid, doc, md)
                _in_time(deadline, "deleting")
                gone = found
                step = self._batch_size(client)
                try:
                    for i in range(0, len(gone), step):
                        coll.delete(ids=gone[i : i + step])
                finally:
                    self._store.forget_count(index)
                if gone:
                    updated = dict(meta)
                    updated[PAYLOAD_KEY] = max(
                        0, int(meta.get(PAYLOAD_KEY, 0)) - sum(present.values())
                    )
                    coll.modify(metadata=updated)
        except Exception as exc:
            return self._failure(index, exc, deadline)
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=list(present))

    def op_drop(
        self, index: str, *, deadline: Deadline
    ) -> IndexStatus | IndexFailed | IndexTimeout | IndexUnavailable:
        """Delete the index entirely (its collection; embedded: its folder too); dropping an
        index that does not exist answers the same.  Past its deadline it does nothing."""
        try:
            _in_time(deadline, "starting the drop")
            with self._write_lock(index, deadline):
                self._handles.pop(index, None)
                self._ahandles.pop(index, None)
                try:
                    self._store.drop(index)
                finally:
                    self._store.forget_count(index)
        except Exception as exc:
            return self._failure(index, exc, deadline)
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
