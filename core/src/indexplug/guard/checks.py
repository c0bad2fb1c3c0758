"""The guard's checks of hits and passages: every hit of an answer checked, every passage
matched to its id and digest and copied (with the memory of checked passages)."""

from __future__ import annotations

import math
from typing import Any

from indexplug.construct import construct
from indexplug.guard.base import (
    CHECKED_PASSAGES,
    _degradation,
    _present,
    _Refused,
)
from indexplug.guard.run import Running
from indexplug.outcomes import (
    Explained,
    Hit,
    IndexFailed,
    ScoreScale,
    Searched,
)
from indexplug.passagecheck import _metadata_copy, _passage_fields, _same, _source_copy
from indexplug.passages import (
    Passage,
    passage_digest,
    passage_id,
)
from indexplug.vectorcheck import (
    hit_vector,
)


class Checking(Running):
    """Checks the hits and passages of an answer and builds the caller's copies."""

    def _checked_passages(self, out: Any) -> Any:
        """An ``Explained`` or ``Neighbours`` answer rebuilt around the guard's checked copies
        of its passages (validated from its fields), or why not."""
        fields = dict(out.__dict__)
        index = fields.get("index")
        if type(index) is not str:
            return self._violation(str(index), "answered for an index that is not text")
        try:
            if type(out) is Explained:
                fields["passage"] = self._passage(index, 1, fields.get("passage"))
                scale = fields.get("scale")
                if scale != self.backend.score_scale:
                    return self._violation(index, "explained a score on another scale")
                score = fields.get("score")
                if not isinstance(score, (int, float)) or type(score) not in (int, float):
                    return self._violation(index, "explained a score that is not a number")
                if not math.isfinite(score):
                    return self._violation(index, "explained a score that is not a finite number")
            else:
                for side in ("before", "after"):
                    items = fields.get(side)
                    if type(items) is not list:
                        return self._violation(index, f"answered neighbours {side} not as a list")
                    fields[side] = [self._passage(index, i, p) for i, p in enumerate(items, 1)]
        except _Refused as refused:
            return refused.outcome
        passages = fields.pop("passage", None)
        before, after = fields.pop("before", None), fields.pop("after", None)
        rebuilt = type(out).model_validate(fields | _present(passages, before, after))
        return rebuilt

    # -- hits ----------------------------------------------------------------------------
    def _checked_search(
        self,
        out: Searched,
        top_k: int,
        deadline_s: float,
        elapsed_ms: float,
        vector_dim: int | None = None,
    ) -> Searched | IndexFailed:
        """A new ``Searched`` holding the guard's own copies of ``out``'s hits, each checked,
        or the ``IndexFailed`` that the first bad hit makes of the answer."""
        fields = out.__dict__
        index, hits, searched = fields.get("index"), fields.get("hits"), fields.get("searched")
        scale, backend = fields.get("scale"), fields.get("backend")
        degraded = fields.get("degraded")
        if type(index) is not str:
            return self._violation(str(index), "answered SEARCHED for an index that is not text")
        if (
            type(hits) is not list
            or type(searched) is not int
            or type(scale) is not ScoreScale
            or type(backend) is not str
            or type(degraded) is not list
        ):
            return self._violation(
                index,
                "answered SEARCHED with hits, searched, scale or backend of the wrong type",
            )
        if not hits:
            return self._violation(
                index, "answered SEARCHED with no hits (an empty result must be NO_MATCH)"
            )
        if len(hits) > top_k:
            return self._violation(index, f"returned {len(hits)} hits for top_k={top_k}")
        declared = self.backend.score_scale
        if type(declared) is not ScoreScale:
            return self._violation(index, "declares a score scale that is not a ScoreScale")
        if scale != declared:
            return self._violation(
                index, f"outcome scale '{scale.name}' differs from declared '{declared.name}'"
            )
        if searched < len(hits):
            return self._violation(index, f"searched={searched} is fewer than the {len(hits)} hits")
        try:
            copies = self._checked_hits(index, list(hits), declared, vector_dim)
            notes = [_degradation(d) for d in degraded]
        except _Refused as refused:
            return refused.outcome
        return construct(
            Searched,
            {
                "index": index,
                "backend": backend or self.plugin,
                "code": "SEARCHED",
                "hits": copies,
                "searched": searched,
                "scale": declared,
                "deadline_s": deadline_s,
                "elapsed_ms": elapsed_ms,
                "degraded": notes,
            },
        )

    def _checked_hits(
        self, index: str, hits: list[Any], scale: ScoreScale, vector_dim: int | None = None
    ) -> list[Hit]:
        """The guard's copies of ``hits``, each checked; with ``vector_dim`` (a vector search
        that asked for vectors) each must carry its stored vector of that length, finite, and
        the copy carries the guard's own tuple of it (else no hit carries one)."""
        higher, name = scale.higher_is_better, scale.name
        prev = math.inf if higher else -math.inf
        out: list[Hit] = []
        for i, hit in enumerate(hits, start=1):
            if type(hit) is not Hit:
                raise _Refused(
                    self._violation(index, f"hit {i} is a {type(hit).__name__}, not a Hit")
                )
            h = hit.__dict__
            rank, score, hit_scale = h.get("rank"), h.get("score"), h.get("score_scale")
            if type(rank) is not int or rank != i:
                raise _Refused(
                    self._violation(index, f"hit {i} has rank {rank!r}; ranks must be 1..n")
                )
            if type(score) is not float and type(score) is not int:
                raise _Refused(
                    self._violation(index, f"hit {i} has a score of type {type(score).__name__}")
                )
            score = float(score)
            if not math.isfinite(score):
                raise _Refused(self._violation(index, f"hit {i} has a non-finite score {score}"))
            if type(hit_scale) is not str or hit_scale != name:
                raise _Refused(
                    self._violation(index, f"hit {i} is on scale {hit_scale!r}, not '{name}'")
                )
            if (higher and score > prev) or (not higher and score < prev):
                raise _Refused(self._violation(index, f"scores are out of order at rank {i}"))
            prev = score
            passage = self._passage(index, i, h.get("passage"))
            vector = None
            if vector_dim is not None:
                vector = hit_vector(h.get("vector"), vector_dim)
                if vector is None:
                    raise _Refused(
                        self._violation(
                            index,
                            f"hit {i} does not carry its stored vector of {vector_dim} finite "
                            "numbers, which the search asked for",
                        )
                    )
            out.append(
                construct(
                    Hit,
                    {
                        "rank": i,
                        "score": score,
                        "score_scale": name,
                        "passage": passage,
                        "untrusted": True,
                        "vector": vector,
                    },
                )
            )
        return out

    def _passage(self, index: str, i: int, p: Any) -> Passage:
        """The guard's own checked copy of hit ``i``'s passage ``p``.

        ``p``'s fields are read once, each must be of its exact type (no subclass can answer
        one value to the check and another to the caller), and the copy is made of those
        values.  A copy whose id or digest does not match its fields is refused
        (``IntegrityError``): altered text, metadata, licence, provenance or span.  A passage
        with exactly the fields of one checked before is answered with that checked copy,
        without hashing again.
        """
        if type(p) is not Passage:
            raise _Refused(
                self._violation(index, f"hit {i}'s passage is a {type(p).__name__}, not a Passage")
            )
        fields = _passage_fields(p.__dict__)
        if fields is None:
            raise _Refused(self._violation(index, f"hit {i}'s passage has fields of wrong types"))
        pid, text, source, doc_sha, start, end, metadata, digest, key = fields
        if digest is None:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... has no digest (stored by an older indexplug, "
                    "or its digest was removed); re-index it",
                )
            )
        known = self._checked.get(digest)
        if known is not None and _same(known, fields):
            return known
        src = _source_copy(source)
        if src is None:
            raise _Refused(self._violation(index, f"hit {i}'s source has fields of wrong types"))
        meta = _metadata_copy(metadata)
        if passage_id(text, src.uri, start, end, key) != pid:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... no longer matches its content-addressed id "
                    "(text, uri, span or key altered after indexing); not served",
                )
            )
        if passage_digest(pid, src, doc_sha, start, end, meta, key) != digest:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... no longer matches its digest (source, "
                    "provenance, licence, span or metadata altered after indexing); not served",
                )
            )
        copy = construct(
            Passage,
            {
                "id": pid,
                "text": text,
                "source": src,
                "document_sha256": doc_sha,
                "start": start,
                "end": end,
                "metadata": meta,
                "digest": digest,
                "key": key,
            },
        )
        with self._checked_lock:
            checked = self._checked
            while checked and len(checked) >= CHECKED_PASSAGES:
                del checked[next(iter(checked))]
            if CHECKED_PASSAGES > 0:
                checked[digest] = copy
        return copy

    def _integrity(self, index: str, reason: str) -> IndexFailed:
        return IndexFailed(
            index=index, backend=self.plugin, reason=reason, error_type="IntegrityError"
        )
