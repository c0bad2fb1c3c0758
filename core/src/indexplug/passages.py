"""Passages: the unit every backend stores and returns.

A passage is a span of a source document together with where it came from.  Its id is
content-addressed (the SHA-256 of a canonical serialisation of the text, the source uri and the
span), which gives three properties the rest of indexplug relies on:

* adding the same passage twice is recognised as *known* instead of duplicated;
* a passage whose text was edited behind a backend's back no longer matches its id;
* ids are stable across machines and backends, so fusion and evaluation can compare them.

Its *digest* covers everything else a caller may trust: the id (so the text, uri and span),
the whole source (provenance, licence, dates, checksum), the document checksum, the span and
the metadata.  Backends store it with the passage; the guard recomputes both on every hit it
serves and refuses a passage that matches either no longer (``IndexFailed``), so neither
altered text nor altered metadata, licence or provenance is ever served as evidence.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, NoReturn

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ModelWrapValidatorHandler,
    ValidationInfo,
    model_validator,
)
from pydantic_core import core_schema

from indexplug.construct import construct

MetadataScalar = str | int | float | bool
MetadataValue = str | int | float | bool | None | list[MetadataScalar]
"""Metadata is flat on purpose: scalars, null and lists of scalars are what every backend can
store and filter on (:mod:`indexplug.filters`); nothing nests deeper."""
MAX_KEY_CHARS = 512
"""Longest caller key (a document id of the caller's choosing)."""


class MetadataList(list[MetadataScalar]):
    """A list value in a passage's metadata: a ``list`` that cannot be changed (see
    :class:`Metadata`, which makes every list it holds one of these)."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a passage's metadata is read-only: copy a list with list(value)")

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = _refuse
    clear = sort = reverse = _refuse
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __reduce__(self) -> tuple[type[MetadataList], tuple[list[MetadataScalar]]]:
        return (MetadataList, (list(self),))

    def __copy__(self) -> MetadataList:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> MetadataList:
        return self


class Metadata(dict[str, MetadataValue]):
    """A passage's metadata: a ``dict`` that cannot be changed.

    A :class:`Passage` is a frozen, content-addressed value covered by its digest, and the
    guard hands out one checked passage object to every search that finds it
    (:class:`indexplug.guard.Guard`).  A mutable dict inside would let one caller's edit show
    up in another caller's results, or make a checked passage differ from its digest, so every
    way of changing it raises :class:`TypeError`.  Everything that reads a dict still
    works (``isinstance(m, dict)``, ``json`` and ``orjson``, equality with a plain dict,
    pydantic's serialisation); ``dict(p.metadata)`` is a mutable copy, and
    ``Passage.create(..., metadata=...)`` makes a passage with other metadata.  Being
    immutable, it is hashable, and so is a passage.
    """

    __slots__ = ()

    @classmethod
    def of(cls, values: Mapping[str, MetadataValue] | None) -> Metadata:
        """``values`` as read-only metadata (itself when it already is)."""
        if type(values) is cls:
            return values
        if not values:
            return EMPTY_METADATA
        return cls(
            {
                k: MetadataList(v) if isinstance(v, list) and type(v) is not MetadataList else v
                for k, v in values.items()
            }
        )

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            "a passage's metadata is read-only: copy it with dict(passage.metadata), or make "
            "a passage with other metadata with Passage.create(..., metadata=...)"
        )

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse  # type: ignore[assignment]

    @classmethod
    def fromkeys(cls, keys: Iterable[str], value: Any = None) -> Metadata:  # type: ignore[override]
        return cls(dict.fromkeys(keys, value))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[type[Metadata], tuple[dict[str, MetadataValue]]]:
        # pickle and deepcopy would otherwise refill an empty instance item by item
        return (Metadata, (dict(self),))

    def __copy__(self) -> Metadata:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Metadata:
        return self

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # validated (and described in JSON schema) as the plain dict it is, then made read-only
        return core_schema.no_info_after_validator_function(
            cls.of, handler(dict[str, MetadataValue])
        )


EMPTY_METADATA = Metadata()
"""The metadata of every passage without any (one object: it cannot change)."""

MAX_PASSAGE_CHARS = 1_000_000
"""A passage larger than this is almost certainly a whole file passed by mistake."""


class Source(BaseModel):
    """Where a passage came from.  ``sha256`` is of the source bytes, so re-ingest can skip
    unchanged files and a reader can verify what was indexed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str = Field(min_length=1, max_length=4096)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    retrieved_at: datetime | None = None
    provenance: str | None = None
    licence: str | None = None
    published_at: datetime | None = None


@lru_cache(maxsize=16_384)
def source_from_json(text: str) -> Source:
    """A stored source (its JSON), parsed and validated once per distinct text.

    Backends that store a passage's source as JSON read it back for every hit of every search,
    and the same sources come back again and again; a :class:`Source` is frozen, so one object
    can serve every hit that has it.
    """
    return Source.model_validate_json(text)


_json_string = json.encoder.encode_basestring  # type: ignore[attr-defined]
"""The string encoder of ``json.dumps(..., ensure_ascii=False)`` (its C version when present)."""


def passage_id(text: str, uri: str, start: int, end: int, key: str | None = None) -> str:
    """The content address of a passage.

    The canonical form is compact JSON with sorted keys (``end``, ``key`` when there is one,
    ``start``, ``text``, ``uri``), so the id does not depend on how the caller happened to
    order or format anything.  It is written out directly, byte for byte what
    ``json.dumps(..., ensure_ascii=False, separators=(",", ":"), sort_keys=True)`` gives (a
    test holds the two together), because the generic encoder was a third of the cost of
    indexing a passage.

    A caller key is part of the address: the same paragraph in two of the caller's documents
    is two passages, each replaced and removed with its own document; a passage without a
    key has the id it always had.
    """
    keyed = "" if key is None else f'"key":{_json_string(key)},'
    canonical = (
        f'{{"end":{int(end)},{keyed}"start":{int(start)},'
        f'"text":{_json_string(text)},"uri":{_json_string(uri)}}}'
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _source_record(source: Source) -> dict[str, str]:
    """A source's fields as the digest covers them (dates in ISO form, unset ones left out)."""
    out: dict[str, str] = {}
    for name in ("uri", "sha256", "retrieved_at", "provenance", "licence", "published_at"):
        value = source.__dict__[name]
        if value is not None:
            out[name] = value if isinstance(value, str) else value.isoformat()
    return out


def passage_digest(
    id: str,
    source: Source,
    document_sha256: str | None,
    start: int,
    end: int,
    metadata: Mapping[str, Any],
    key: str | None = None,
) -> str:
    """The digest of a passage: SHA-256 of compact JSON with sorted keys of its id, its whole
    source, its document checksum, its span, its metadata and its caller key (when it has one:
    a passage without a key has the digest it had before keys existed).

    The id already covers the text (and the uri and span), so the text is not hashed twice.
    JSON keeps a value's type (``1``, ``1.0``, ``true`` and ``"1"`` differ), so a metadata
    value stored as one type and read back as another does not pass either.
    """
    record = {
        "id": id,
        "source": _source_record(source),
        "document_sha256": document_sha256,
        "start": int(start),
        "end": int(end),
        "metadata": metadata,
    }
    if key is not None:
        record["key"] = key
    canonical = json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


_ID_COMPUTED: dict[str, bool] = {"id_computed": True}
"""Validation context of :meth:`Passage.create`: it has just computed the id from the same
fields, so the after-validator need not hash the text a second time."""


class Passage(BaseModel):
    """A span ``[start, end)`` of a source document, with its text and provenance.

    Build one with :meth:`Passage.create` (which computes the id) or :func:`passages_from_text`.
    Constructing with an explicit ``id`` that does not match the content is a validation error:
    a passage can never carry an id that lies about it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[0-9a-f]{64}$")
    text: str = Field(min_length=1, max_length=MAX_PASSAGE_CHARS)
    source: Source
    document_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    metadata: Metadata = EMPTY_METADATA
    """Read-only (:class:`Metadata`): a passage is a value."""
    digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """:func:`passage_digest` of the passage, filled in when it is made; ``None`` only for a
    record read back from storage without one, which the guard refuses to serve."""
    key: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_CHARS)
    """The caller's key: a document id of the caller's choosing, shared by the passages of one
    document.  Adding passages under a key replaces that key's earlier passages at once
    (backends that claim ``Capabilities.keys``); the id stays content-addressed, the key part
    of the content (see :func:`passage_id`)."""

    @model_validator(mode="before")
    @classmethod
    def _fill_id(cls, data: object) -> object:
        if isinstance(data, dict) and not data.get("id"):
            source = data.get("source")
            uri = source.uri if isinstance(source, Source) else (source or {}).get("uri", "")
            text = data.get("text", "")
            start = data.get("start", 0)
            end = data.get("end", len(text) if isinstance(text, str) else 0)
            key = data.get("key")
            if (
                isinstance(text, str)
                and isinstance(uri, str)
                and (key is None or isinstance(key, str))
            ):
                pid = passage_id(text, uri, int(start), int(end), key)
                data = {**data, "id": pid, "end": end}
        return data

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> Passage:
        if not self.text.strip():
            raise ValueError("passage text is empty or only whitespace")
        if self.end < self.start:
            raise ValueError(f"span end {self.end} is before start {self.start}")
        for name, value in self.metadata.items():
            for item in value if isinstance(value, list) else (value,):
                if isinstance(item, float) and not math.isfinite(item):
                    raise ValueError(
                        f"metadata value of {name!r} is not a finite number (JSON has none)"
                    )
        if self.key is not None and "\x00" in self.key:
            raise ValueError("the passage key contains a NUL character")
        if info.context is not _ID_COMPUTED and self.id != self.expected_id():
            raise ValueError("passage id does not match its content (text, uri, span, key)")
        if self.digest is None:
            object.__setattr__(self, "digest", self.expected_digest())
        elif info.context is not _ID_COMPUTED and self.digest != self.expected_digest():
            raise ValueError("passage digest does not match its fields (source, span, metadata)")
        return self

    # defined after ``_check`` so that it runs around it (pydantic nests later validators
    # outside earlier ones)
    @model_validator(mode="wrap")
    @classmethod
    def _no_digest_kept(cls, data: object, handler: ModelWrapValidatorHandler[Passage]) -> Passage:
        """A passage already built without a digest (read back from storage without one) is
        kept as it is when a model holding it is validated: the digest is filled in only for a
        passage being made, never invented for a stored one, which would launder a record
        edited and stripped of its digest into one that passes the guard's check.  The guard
        refuses to serve it (``INDEX_FAILED``)."""
        if type(data) is Passage and data.digest is None:
            return data
        return handler(data)

    def expected_id(self) -> str:
        """Recompute the content address; differs from ``id`` only if the passage was altered."""
        return passage_id(self.text, self.source.uri, self.start, self.end, self.key)

    def expected_digest(self) -> str:
        """Recompute the digest; differs from ``digest`` only if the passage was altered."""
        return passage_digest(
            self.id,
            self.source,
            self.document_sha256,
            self.start,
            self.end,
            self.metadata,
            self.key,
        )

    def intact(self) -> bool:
        """Whether the passage still matches both its id and its digest."""
        return self.id == self.expected_id() and self.digest == self.expected_digest()

    @classmethod
    def from_stored(
        cls,
        *,
        id: str,
        text: str,
        source: Mapping[str, object] | Source,
        start: int,
        end: int,
        document_sha256: str | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
        digest: str | None = None,
        key: str | None = None,
    ) -> Passage:
        """Rebuild a passage read back from storage *without* the id and digest checks.

        Backends use this (with the digest they stored) so that a row altered behind their
        back still comes out as a passage; the guard then compares it with its id and digest
        and refuses to serve it (``IndexFailed``) with a clear reason, instead of a validation
        error deep in a plugin.
        """
        src = source if isinstance(source, Source) else Source.model_validate(source)
        return construct(
            cls,
            {
                "id": id,
                "text": text,
                "source": src,
                "document_sha256": document_sha256,
                "start": start,
                "end": end,
                "metadata": Metadata.of(metadata),
                "digest": digest,
                "key": key,
            },
        )

    @classmethod
    def create(
        cls,
        text: str,
        uri: str,
        *,
        start: int = 0,
        end: int | None = None,
        source: Source | None = None,
        document_sha256: str | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
        key: str | None = None,
    ) -> Passage:
        """Make a passage, computing its id.  ``end`` defaults to ``start + len(text)``;
        ``key`` is the caller's document id, if any (see :attr:`Passage.key`)."""
        src = source or Source(uri=uri)
        stop = start + len(text) if end is None else end
        fields: dict[str, object] = {
            "text": text,
            "source": src,
            "document_sha256": document_sha256,
            "start": start,
            "end": stop,
            "metadata": Metadata.of(metadata),
            "key": key,
        }
        if not (
            type(text) is str
            and type(start) is int
            and type(stop) is int
            and (key is None or (type(key) is str and "\x00" not in key))
        ):
            # let pydantic coerce or reject them; the id is then computed and checked from
            # the validated values (the slow way)
            return cls.model_validate(fields)
        pid = passage_id(text, src.uri, start, stop, key)
        fields["id"] = pid
        fields["digest"] = passage_digest(
            pid,
            src,
            document_sha256,
            start,
            stop,
            fields["metadata"],  # type: ignore[arg-type]
            key,
        )
        return cls.model_validate(fields, context=_ID_COMPUTED)


def stored_passage(
    id: str,
    text: str,
    source: Source,
    start: int,
    end: int,
    document_sha256: str | None,
    metadata: Mapping[str, MetadataValue] | None,
    digest: str | None,
    key: str | None = None,
) -> Passage:
    """:meth:`Passage.from_stored`, positional, with ``source`` already a :class:`Source`."""
    return construct(
        Passage,
        {
            "id": id,
            "text": text,
            "source": source,
            "document_sha256": document_sha256,
            "start": start,
            "end": end,
            "metadata": Metadata.of(metadata),
            "digest": digest,
            "key": key,
        },
    )


def provenance_json(p: Passage) -> str:
    """Everything of a passage but its id and text, as one JSON object (keys as the passage's
    fields: ``source``, ``start``, ``end``, ``document_sha256`` when set, ``metadata``,
    ``digest``, and ``key`` when it has one).

    For backends whose records hold an id, a text and opaque strings (an Elasticsearch
    ``_source`` field, a Chroma metadata value): one string keeps every value's exact type and
    digits (a bool stays a bool, ``1.0`` stays a float), and one layout for all of them means
    one parser, :func:`passage_from_provenance`.
    """
    prov: dict[str, object] = {
        "source": p.source.model_dump(mode="json", exclude_none=True),
        "start": p.start,
        "end": p.end,
    }
    if p.document_sha256:
        prov["document_sha256"] = p.document_sha256
    prov["metadata"] = p.metadata
    prov["digest"] = p.digest
    if p.key is not None:
        prov["key"] = p.key
    return json.dumps(prov, ensure_ascii=False, separators=(",", ":"))


def passage_from_provenance(id: str, text: str, provenance: str) -> Passage:
    """The passage stored as ``id``, ``text`` and :func:`provenance_json`, rebuilt *without*
    the id and digest checks (:meth:`Passage.from_stored`: the guard compares both with the
    content, so a record altered behind the backend's back is reported, not served)."""
    prov = json.loads(provenance)
    return stored_passage(
        id,
        text,
        Source.model_validate(prov["source"]),
        int(prov["start"]),
        int(prov["end"]),
        prov.get("document_sha256"),
        prov.get("metadata"),
        prov.get("digest"),
        prov.get("key"),
    )


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def passage_from_span(
    document: str,
    start: int,
    end: int,
    source: Source,
    *,
    document_sha256: str | None = None,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> Passage:
    """The passage for ``document[start:end]``; the span is in characters of ``document``."""
    if not 0 <= start <= end <= len(document):
        raise ValueError(f"span [{start}, {end}) is outside a document of {len(document)} chars")
    return Passage.create(
        document[start:end],
        source.uri,
        start=start,
        end=end,
        source=source,
        document_sha256=document_sha256,
        metadata=metadata,
    )


_BREAKS = ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ")


def split_spans(text: str, max_chars: int = 1200, overlap: int = 150) -> Iterator[tuple[int, int]]:
    """Cut ``text`` into spans of at most ``max_chars`` that overlap by about ``overlap``.

    Cuts prefer, in order, a blank line, a line end, a sentence end, a clause and a space, looked
    for in the last third of the window, so passages read as whole units where the text allows.
    Leading and trailing whitespace of each span is trimmed (spans stay exact offsets).
    """
    if max_chars <= 0 or overlap < 0 or overlap >= max_chars:
        raise ValueError("need max_chars > 0 and 0 <= overlap < max_chars")
    n = len(text)
    pos = 0
    while pos < n:
        end = min(n, pos + max_chars)
        if end < n:
            floor = pos + (2 * max_chars) // 3
            for brk in _BREAKS:
                cut = text.rfind(brk, floor, end)
                if cut != -1:
                    end = cut + len(brk)
                    break
        s, e = pos, end
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            yield s, e
        if end >= n:
            break
        nxt = max(end - overlap, pos + 1)
        # start the overlap on a word boundary so no passage opens mid-word
        space = text.find(" ", nxt, end)
        pos = space + 1 if space != -1 else nxt


def passages_from_text(
    text: str,
    source: Source,
    *,
    max_chars: int = 1200,
    overlap: int = 150,
    document_sha256: str | None = None,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> list[Passage]:
    """Cut a whole document into passages (see :func:`split_spans`)."""
    return [
        passage_from_span(text, s, e, source, document_sha256=document_sha256, metadata=metadata)
        for s, e in split_spans(text, max_chars, overlap)
    ]


def now_utc() -> datetime:
    return datetime.now(UTC)
