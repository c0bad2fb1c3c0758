"""A complete backend in one page: one JSON file per index, word-overlap scoring.

Every op returns an outcome model (never a list, never ``None``); the guard checks the rest.
Writes go to a temporary file that replaces the index atomically, so a crash mid-write leaves the
index as it was, and a refused write (over budget) never touches it.

It implements the whole data interface too: ``get`` (by id and by caller key), ``scan`` (id
order, a cursor, filters), ``indexes``, ``op_drop``, caller keys with an upsert (the new file
holds the key's new passages and none of its old ones, so a reader sees one or the other), and
every filter operator, served by :func:`indexplug.filters.matches`.  A backend with a query
language translates the parsed filter instead (``indexplug.filters.walk``), and claims only the
operators it translates exactly.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import indexplug
from indexplug import (
    Capabilities,
    Deadline,
    Hit,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    NoMatch,
    Passage,
    Readiness,
    Removed,
    ScoreScale,
    Searched,
)
from indexplug.errors import InvalidRequest
from indexplug.filters import ALL_OPS, matches, parse_filter
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    GetOutcome,
    Got,
    IndexesOutcome,
    IndexInfo,
    IndexList,
    Scanned,
    ScanOutcome,
)

from indexplug_template_backend.plugin import BACKEND_NAME, DESCRIPTION

_WORD = re.compile(r"[^\W_]+")


class TemplateBackend:
    name = BACKEND_NAME
    description = DESCRIPTION
    score_scale = ScoreScale(name="word_overlap", meaning="query words found in the passage")
    capabilities = Capabilities(
        persistence=True,
        concurrent_writers=True,
        filters=True,
        filter_operators=ALL_OPS,
        get=True,
        scan=True,
        indexes=True,
        keys=True,
    )

    def __init__(self, home: Path, *, min_overlap: int = 1) -> None:
        self.home = Path(home)
        self.min_overlap = min_overlap
        """Query words a passage must share to match (the ``min_overlap`` setting)."""
        self._lock = threading.Lock()

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def close(self) -> None:
        pass

    # -- storage: replace these two with yours ------------------------------------------
    def _path(self, index: str) -> Path:
        return self.home / f"{index}.json"

    def _load(self, index: str) -> dict[str, Any] | None:
        path = self._path(index)
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text("utf-8"))
        return data

    def _save(self, index: str, data: dict[str, Any]) -> int:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self._path(index).with_suffix(".tmp")
        tmp.write_text(json.dumps(data), "utf-8")
        os.replace(tmp, self._path(index))
        return self._path(index).stat().st_size

    # -- ops -------------------------------------------------------------------------------
    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> indexplug.AddOutcome:
        with self._lock:
            data = self._load(index) or {"max_bytes": None, "passages": {}}
            budget = indexplug.effective_max_bytes(data["max_bytes"], max_bytes)
            store = data["passages"]
            new = [p for p in passages if p.id not in store]
            # caller keys: the batch replaces every earlier passage of its keys it does not hold
            # (a key is part of the id, so a stored id already has its key); one file write
            # does both, so a reader sees the key's old passages or its new ones
            keys = {p.key for p in passages if p.key is not None}
            batch = {p.id for p in passages}
            stale = [i for i, raw in store.items() if raw.get("key") in keys and i not in batch]
            if data["max_bytes"] is None and max_bytes is not None:
                data["max_bytes"] = max_bytes
            updated = {i: raw for i, raw in store.items() if i not in set(stale)}
            updated.update({p.id: p.model_dump(mode="json") for p in new})
            encoded = len(json.dumps({**data, "passages": updated}).encode("utf-8"))
            refused = indexplug.over_budget(
                index, self.name, needed=encoded, max_bytes=budget, check="projected"
            )
            if refused:
                return refused
            if deadline.expired():
                return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
            size = self._save(index, {**data, "passages": updated})
            done = Indexed.of_batch(
                index=index,
                backend=self.name,
                ids=[p.id for p in passages],
                added_ids=[p.id for p in new],
                bytes_used=size,
                max_bytes=budget,
            )
            return done.model_copy(update={"replaced": len(stale)})

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, Any] | None = None,
    ) -> indexplug.SearchOutcome:
        data = self._load(index)
        if not data or not data["passages"]:
            return IndexEmpty(index=index, backend=self.name)
        flt = parse_filter(filters)  # the guard gives the parsed filter (we claim operators)
        words = set(_WORD.findall(query.lower()))
        scored = []
        for raw in data["passages"].values():
            if deadline.expired():
                return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
            # Rebuild passages from storage without validation (``from_stored``), with the
            # digest the record holds (``model_dump`` wrote it).  The guard checks the id and
            # digest of every hit; this scan reads every record, and checks each, because an
            # altered one would otherwise just stop matching and "nothing matched" would hide
            # it.  (A backend with a search structure apart from its records reads only its
            # hits, and leaves checking them to the guard.)
            passage = Passage.from_stored(**raw)
            if passage.digest is None or not passage.intact():
                what = (
                    "has no digest"
                    if passage.digest is None
                    else "no longer matches its id or digest"
                )
                return IndexFailed(
                    index=index,
                    backend=self.name,
                    reason=f"stored passage {passage.id[:12]}... {what} (altered behind the "
                    "backend); re-index it",
                    error_type="IntegrityError",
                )
            if flt is not None and not matches(flt, passage.metadata):
                continue
            overlap = len(words & set(_WORD.findall(passage.text.lower())))
            if overlap >= self.min_overlap:
                scored.append((overlap, passage.id, passage))
        scored.sort(key=lambda s: (-s[0], s[1]))
        if not scored:
            return NoMatch(index=index, backend=self.name, searched=len(data["passages"]))
        hits = [
            Hit.from_stored(
                rank=rank, score=float(score), score_scale=self.score_scale.name, passage=p
            )
            for rank, (score, _, p) in enumerate(scored[:top_k], start=1)
        ]
        return Searched.from_stored(
            index=index,
            backend=self.name,
            hits=hits,
            searched=len(data["passages"]),
            scale=self.score_scale,
        )

    def remove(
        self, index: str, ids: Sequence[str], *, deadline: Deadline
    ) -> indexplug.RemoveOutcome:
        with self._lock:
            if deadline.expired():  # honour the deadline before changing anything
                return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
            data = self._load(index)
            store = data["passages"] if data else {}
            gone = [i for i in ids if i in store]
            if data and gone:
                for i in gone:
                    del store[i]
                self._save(index, data)
            return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=gone)

    def status(self, index: str, *, deadline: Deadline) -> indexplug.StatusOutcome:
        if deadline.expired():
            return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
        data = self._load(index)
        if data is None:
            return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
        return IndexStatus(
            index=index,
            backend=self.name,
            exists=True,
            passages=len(data["passages"]),
            bytes_used=self._path(index).stat().st_size,
            max_bytes=data["max_bytes"],
        )

    # -- the data interface ------------------------------------------------------------------
    def get(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str], deadline: Deadline
    ) -> GetOutcome:
        """Passages by id (in the order asked) and by caller key; the rest listed missing."""
        if deadline.expired():
            return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
        data = self._load(index)
        store = data["passages"] if data else {}
        found = {i: store[i] for i in ids if i in store}
        wanted = set(keys)
        seen = set()
        for i, raw in store.items():
            if raw.get("key") in wanted:
                found.setdefault(i, raw)
                seen.add(raw["key"])
        return Got(
            index=index,
            backend=self.name,
            passages=[Passage.from_stored(**raw) for raw in found.values()],
            missing_ids=[i for i in ids if i not in store],
            missing_keys=[k for k in keys if k not in seen],
        )

    def scan(
        self, index: str, *, filters: Any, after: str | None, limit: int, deadline: Deadline
    ) -> ScanOutcome:
        """Up to ``limit`` passages with ids above ``after`` that pass ``filters``, by id."""
        if deadline.expired():
            return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
        data = self._load(index)
        store = data["passages"] if data else {}
        flt = parse_filter(filters)
        page: list[Passage] = []
        for i in sorted(store):
            if after is not None and i <= after:
                continue
            passage = Passage.from_stored(**store[i])
            if flt is not None and not matches(flt, passage.metadata):
                continue
            if len(page) == limit:  # one more passes: the page is not the last
                return Scanned(
                    index=index, backend=self.name, passages=page, next_after=page[-1].id
                )
            page.append(passage)
        return Scanned(index=index, backend=self.name, passages=page, next_after=None)

    def indexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """Every index file in the home, with its passage count."""
        if deadline.expired():
            return IndexTimeout(index="", backend=self.name, deadline_s=deadline.seconds)
        infos = []
        for path in sorted(self.home.glob("*.json")) if self.home.is_dir() else []:
            try:
                validate_index_name(path.stem)
            except InvalidRequest:
                continue  # not one of ours
            data = self._load(path.stem)
            if data is not None:
                infos.append(IndexInfo(name=path.stem, passages=len(data["passages"])))
        return IndexList(index="", backend=self.name, indexes=infos)

    def op_drop(self, index: str, *, deadline: Deadline) -> indexplug.StatusOutcome:
        """Delete the index's file (a missing index is already dropped)."""
        with self._lock:
            if deadline.expired():
                return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
            self._path(index).unlink(missing_ok=True)
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)

    # -- conformance-kit hooks -----------------------------------------------------------------
    def tamper(self, index: str, passage_id: str, text: str) -> None:
        """Conformance-kit hook: alter a stored passage behind the backend's back."""
        data = self._load(index)
        assert data is not None
        data["passages"][passage_id]["text"] = text
        self._save(index, data)

    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, Any]) -> None:
        """Conformance-kit hook: alter fields of a stored passage (``text``, ``metadata``,
        ``licence``, ``provenance``, ``start``, ``end``; ``digest``: ``None`` removes it),
        keeping its id and digest unless named.

        (No ``delete_rows`` hook: one JSON file holds both the passages and what search
        scores, so a record cannot be deleted behind a separate search structure.)"""
        data = self._load(index)
        assert data is not None
        raw = data["passages"][passage_id]
        raw.update(
            {
                k: v
                for k, v in changes.items()
                if k in ("text", "metadata", "start", "end", "digest")
            }
        )
        raw["source"].update({k: v for k, v in changes.items() if k in ("licence", "provenance")})
        self._save(index, data)
