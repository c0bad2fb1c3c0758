"""The ``add`` op's passages: a request's passages as :class:`~indexplug.passages.Passage`, and
an add that skips the ids already stored where the index does not allow upsert."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from indexplug.errors import InvalidRequest
from indexplug.outcomes import Indexed
from indexplug.passages import Passage
from indexplug.targets import Target


def _to_passage(p: Any, i: int) -> Passage:
    if (p.uri is None) == (p.source is None):
        raise InvalidRequest("give exactly one of 'uri' or 'source'", field=f"passages.{i}.uri")
    try:
        out = Passage.create(
            p.text,
            p.uri or p.source.uri,
            start=p.start,
            end=p.end,
            source=p.source,
            document_sha256=p.document_sha256,
            metadata=p.metadata,
            key=p.key,
        )
    except (ValidationError, ValueError) as exc:
        text = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise InvalidRequest(text, field=f"passages.{i}") from None
    if p.id is not None and p.id != out.id:
        raise InvalidRequest(
            "id is not the passage's content address (text, uri and span)",
            field=f"passages.{i}.id",
        )
    if p.digest is not None and p.digest != out.digest:
        raise InvalidRequest(
            "digest does not match the passage's fields (source, span, metadata)",
            field=f"passages.{i}.digest",
        )
    return out


def _ids_of(passages: list[Passage]) -> list[str]:
    return list(dict.fromkeys(p.id for p in passages))


def _all_known(t: Target, passages: list[Passage]) -> Indexed:
    ids = _ids_of(passages)
    return Indexed(index=t.index, backend=t.guard.name, added=0, known=len(ids), known_ids=ids)


def _with_known(out: Any, passages: list[Passage], stored: set[str]) -> Any:
    """``out`` of an add of the passages not in ``stored``, counting those left out as known."""
    if not stored or not isinstance(out, Indexed):
        return out
    skipped = [i for i in _ids_of(passages) if i in stored]
    return out.model_copy(
        update={"known": out.known + len(skipped), "known_ids": [*out.known_ids, *skipped]}
    )


def _add_fresh(t: Target, kw: dict[str, Any], stored: set[str], add: Callable[..., Any]) -> Any:
    """Add the passages of ``kw`` that are not in ``stored`` (all of them when none is)."""
    fresh = [p for p in kw["passages"] if p.id not in stored]
    if not fresh:
        return _all_known(t, kw["passages"])
    return _with_known(add(t.index, **{**kw, "passages": fresh}), kw["passages"], stored)
