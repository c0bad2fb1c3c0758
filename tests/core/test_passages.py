from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from indexplug import Passage, Source, passage_id, passages_from_text
from indexplug.passages import (
    MetadataValue,
    passage_from_provenance,
    passage_from_span,
    provenance_json,
    split_spans,
)
from pydantic import ValidationError

texts = st.text(min_size=1, max_size=300).filter(lambda t: t.strip() != "")


@given(texts, st.text(min_size=1, max_size=50), st.integers(0, 10_000))
def test_id_is_content_addressed_and_stable(text: str, uri: str, start: int) -> None:
    a = Passage.create(text, uri, start=start)
    b = Passage.create(text, uri, start=start)
    assert a.id == b.id == passage_id(text, uri, start, start + len(text))
    assert Passage.model_validate_json(a.model_dump_json()) == a


@given(texts, st.text(min_size=1, max_size=50))
def test_any_change_changes_the_id(text: str, uri: str) -> None:
    base = Passage.create(text, uri)
    assert Passage.create(text + "x", uri).id != base.id
    assert Passage.create(text, uri + "x").id != base.id
    assert Passage.create(text, uri, start=1).id != base.id


def test_a_lying_id_is_refused() -> None:
    p = Passage.create("hello", "mem://a")
    with pytest.raises(ValidationError, match="does not match"):
        Passage(**{**p.model_dump(), "text": "HELLO"})


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_is_refused(text: str) -> None:
    with pytest.raises(ValidationError):
        Passage.create(text, "mem://a")


def test_metadata_must_be_flat() -> None:
    with pytest.raises(ValidationError):
        Passage.create("x", "mem://a", metadata={"nested": {"a": 1}})  # type: ignore[dict-item]


def test_from_stored_keeps_tampering_visible() -> None:
    p = Passage.create("original", "mem://a")
    stored = Passage.from_stored(
        id=p.id, text="tampered", source={"uri": "mem://a"}, start=0, end=8
    )
    assert stored.expected_id() != stored.id


@given(st.text(min_size=0, max_size=5000), st.integers(50, 800), st.integers(0, 40))
def test_spans_cover_the_text_within_bounds(text: str, max_chars: int, overlap: int) -> None:
    spans = list(split_spans(text, max_chars, overlap))
    for s, e in spans:
        assert 0 <= s < e <= len(text)
        assert e - s <= max_chars
        assert text[s:e] == text[s:e].strip()
    # every non-space character lies in some span
    covered = set()
    for s, e in spans:
        covered.update(range(s, e))
    assert all(i in covered for i, c in enumerate(text) if not c.isspace())


def test_passages_from_text_prefer_sentence_boundaries() -> None:
    text = " ".join(f"Sentence number {i} says something." for i in range(200))
    src = Source(uri="file:///doc.txt")
    ps = passages_from_text(text, src, max_chars=300, overlap=50)
    assert len(ps) > 5
    assert all(p.text.endswith(".") for p in ps[:-1])
    assert all(text[p.start : p.end] == p.text for p in ps)


def test_span_helper_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        passage_from_span("abc", 2, 10, Source(uri="mem://x"))


@given(
    text=st.text(min_size=1, max_size=200),
    uri=st.text(min_size=1, max_size=50),
    start=st.integers(min_value=0, max_value=10**9),
    length=st.integers(min_value=0, max_value=10**6),
)
def test_passage_id_is_the_canonical_json_of_its_fields(
    text: str, uri: str, start: int, length: int
) -> None:
    """The hand-written canonical form is byte for byte ``json.dumps`` with sorted keys."""
    canonical = json.dumps(
        {"end": start + length, "start": start, "text": text, "uri": uri},
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )
    expected = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert passage_id(text, uri, start, start + length) == expected


def test_create_with_coercible_fields_still_checks_them() -> None:
    p = Passage.create("some text", "file:///a", start=True)  # type: ignore[arg-type]
    assert p.start == 1 and p.id == p.expected_id()
    with pytest.raises(ValidationError):
        Passage.create("some text", "file:///a", start=-1)


def test_trusted_construction_builds_what_model_construct_builds() -> None:
    """``indexplug.construct``: the shortcut behind ``Passage.from_stored`` and
    ``Hit.from_stored`` gives the very model ``model_construct`` gives, and steps aside for a
    model or values it does not fit."""
    from indexplug.construct import construct
    from indexplug.outcomes import Hit
    from pydantic import BaseModel, Field

    p = Passage.create("Otters hold hands.", "file:///o.md", start=2, metadata={"n": 1})
    stored = Passage.from_stored(
        id=p.id,
        text=p.text,
        source=p.source,
        start=p.start,
        end=p.end,
        metadata={"n": 1},
        digest=p.digest,
    )
    assert stored == p and stored.model_fields_set == p.model_fields_set
    assert stored.model_dump_json() == p.model_dump_json()
    with pytest.raises(Exception):
        stored.text = "changed"  # type: ignore[misc]  # still frozen
    slow = Hit.model_construct(
        rank=1, score=2.0, score_scale="s", passage=p, untrusted=True, vector=None
    )
    fast = Hit.from_stored(rank=1, score=2.0, score_scale="s", passage=p)
    assert fast == slow and fast.model_fields_set == slow.model_fields_set
    assert Hit.model_validate_json(fast.model_dump_json()) == fast
    altered = Passage.from_stored(id=p.id, text="tampered", source=p.source, start=2, end=20)
    assert altered.id != altered.expected_id()  # built anyway: the guard refuses to serve it

    class Aliased(BaseModel):
        x: int = Field(alias="y")

    assert construct(Aliased, {"y": 1}).x == 1  # an alias: model_construct's own handling

    class Defaults(BaseModel):
        a: int
        b: int = 5

    partial = construct(Defaults, {"a": 1})  # a field missing: model_construct fills it
    assert (partial.a, partial.b) == (1, 5) and partial.model_fields_set == {"a"}


_scalars = st.one_of(
    st.text(max_size=30),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)


@given(
    texts,
    st.text(min_size=1, max_size=50),
    st.integers(0, 10_000),
    st.dictionaries(st.text(min_size=1, max_size=10), _scalars, max_size=4),
    st.none() | st.just("ab" * 32),
)
def test_provenance_json_round_trips_every_field_exactly(
    text: str, uri: str, start: int, metadata: dict[str, MetadataValue], doc_sha: str | None
) -> None:
    """The one layout elastic and chroma store: a passage comes back equal, every metadata
    value with its type (1, 1.0 and True stay apart), and its metadata read-only (a cached
    parse is shared)."""
    p = Passage.create(text, uri, start=start, metadata=metadata, document_sha256=doc_sha)
    raw = provenance_json(p)
    assert set(json.loads(raw)) <= {
        "source",
        "start",
        "end",
        "document_sha256",
        "metadata",
        "digest",
    }
    back = passage_from_provenance(p.id, p.text, raw)
    assert back == p and back.id == back.expected_id()
    assert [type(v) for v in back.metadata.values()] == [type(v) for v in p.metadata.values()]
    with pytest.raises(TypeError, match="read-only"):
        back.metadata["x-changed"] = 1
    assert passage_from_provenance(p.id, p.text, raw) == p


def test_a_passage_rebuilt_from_altered_provenance_shows_it() -> None:
    """Rebuilding skips the id check on purpose: the guard must see the mismatch."""
    p = Passage.create("the text", "file:///a.txt", metadata={"n": 1})
    altered = provenance_json(p).replace('"end":8', '"end":9')
    back = passage_from_provenance(p.id, p.text, altered)
    assert back.end == 9 and back.id != back.expected_id() and not back.intact()
    relabelled = provenance_json(p).replace('"n":1', '"n":2')
    back = passage_from_provenance(p.id, p.text, relabelled)
    assert back.id == back.expected_id() and back.digest != back.expected_digest()


@given(
    st.lists(
        st.tuples(
            texts,
            st.text(min_size=1, max_size=30),
            st.dictionaries(st.text(min_size=1, max_size=8), _scalars, max_size=3),
            st.floats(allow_nan=False, allow_infinity=False),
        ),
        max_size=6,
    )
)
def test_hits_built_in_one_pass_equal_those_built_one_by_one(
    stored: list[tuple[str, str, dict[str, MetadataValue], float]],
) -> None:
    """``hits_from_provenance`` (elastic's and chroma's search path) gives exactly the hits
    of ``Hit.from_stored`` around ``passage_from_provenance``: ranks 1..n in row order, equal
    passages with read-only metadata."""
    from indexplug.outcomes import Hit, hits_from_provenance

    passages = [Passage.create(t, u, metadata=m) for t, u, m, _ in stored]
    rows = [(p.id, s, p.text, provenance_json(p)) for p, (*_, s) in zip(passages, stored)]
    fast = hits_from_provenance(rows, "cosine")
    slow = [
        Hit.from_stored(
            rank=n, score=s, score_scale="cosine", passage=passage_from_provenance(pid, t, prov)
        )
        for n, (pid, s, t, prov) in enumerate(rows, start=1)
    ]
    assert fast == slow
    assert [h.rank for h in fast] == list(range(1, len(rows) + 1))
    assert all(h.passage == p and h.untrusted for h, p in zip(fast, passages))
    assert all(h.model_dump() == s.model_dump() for h, s in zip(fast, slow))
    if fast:
        with pytest.raises(TypeError):
            fast[0].passage.metadata["x-changed"] = 1
        assert type(fast) is list and fast[0].passage is not fast[0].passage.model_copy()


def test_metadata_is_a_dict_that_cannot_change() -> None:
    """A passage's metadata reads as the dict it was given (json, equality, pydantic's dump
    and JSON schema) and refuses every change, so a checked passage stays as its digest says
    it is; an immutable passage is hashable, and copies and pickles keep it read-only."""
    import copy
    import pickle

    from indexplug.passages import EMPTY_METADATA, Metadata

    p = Passage.create("the text", "file:///a.txt", metadata={"n": 1, "f": 1.0, "b": True})
    m = p.metadata
    assert isinstance(m, Metadata) and isinstance(m, dict)
    assert m == {"n": 1, "f": 1.0, "b": True} and [type(v) for v in m.values()] == [
        int,
        float,
        bool,
    ]
    assert json.loads(json.dumps(m)) == m
    assert (
        type(p.model_dump()["metadata"]) is dict
        and Passage.model_validate_json(p.model_dump_json()) == p
    )
    assert Passage.model_json_schema()["properties"]["metadata"]["type"] == "object"
    for change in (
        lambda: m.__setitem__("n", 2),
        lambda: m.__delitem__("n"),
        lambda: m.update(n=2),
        lambda: m.setdefault("new", 1),
        lambda: m.pop("n"),
        lambda: m.popitem(),
        lambda: m.clear(),
        lambda: m.__ior__({"n": 2}),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert m == {"n": 1, "f": 1.0, "b": True}
    mutable = dict(m)
    mutable["n"] = 2
    assert type(mutable) is dict and m["n"] == 1 and type(m | {"x": 1}) is dict
    assert hash(p) == hash(Passage.create("the text", "file:///a.txt", metadata=dict(m)))
    assert len({p, Passage.create("the text", "file:///a.txt", metadata=dict(m))}) == 1
    for back in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p), copy.copy(p)):
        assert back == p and type(back.metadata) is Metadata
    assert type(Metadata.fromkeys(["a"], 1)) is Metadata
    assert Passage.create("no metadata", "file:///b.txt").metadata is EMPTY_METADATA
    with pytest.raises(ValidationError):
        Passage.create("the text", "file:///a.txt", metadata={"nested": {"no": 1}})  # type: ignore[dict-item]


@given(
    texts,
    st.dictionaries(st.text(min_size=1, max_size=10), _scalars, max_size=4),
    st.none() | st.just("CC0") | st.just("CC-BY-4.0"),
    st.none() | st.text(min_size=1, max_size=20),
)
def test_the_digest_covers_every_field_but_the_text_twice(
    text: str, metadata: dict[str, MetadataValue], licence: str | None, provenance: str | None
) -> None:
    """A passage's digest changes with its id (so its text, uri and span), its whole source,
    its document checksum and its metadata, and is filled in however the passage is made."""
    from indexplug.passages import Source

    source = Source(uri="file:///d.md", licence=licence, provenance=provenance)
    p = Passage.create(text, "file:///d.md", source=source, metadata=metadata)
    assert p.digest == p.expected_digest() and p.intact()
    assert Passage.model_validate(p.model_dump(exclude={"digest"})).digest == p.digest
    assert Passage.model_validate_json(p.model_dump_json()) == p
    changed = [
        p.model_copy(update={"metadata": {**metadata, "trusted": True}}),
        p.model_copy(update={"source": Source(uri="file:///d.md", licence="forged")}),
        p.model_copy(update={"source": Source(uri="file:///d.md", provenance="forged")}),
        p.model_copy(update={"document_sha256": "f" * 64}),
    ]
    for c in changed:
        assert c.digest == p.digest and c.digest != c.expected_digest() and not c.intact()
    with pytest.raises(ValidationError, match="digest"):
        Passage.model_validate({**p.model_dump(), "metadata": {"other": 1}})


def test_validating_a_model_never_invents_a_stored_passages_digest() -> None:
    """A passage read back without a digest keeps none when an outcome holding it is
    validated (a backend building ``Scanned(...)``): filling one in there would launder an
    edited record whose digest was removed into one that passes the guard's check."""
    from indexplug.outcomes import Got, Scanned
    from indexplug.passages import stored_passage

    p = Passage.create("a stored passage", "mem://doc")
    bare = stored_passage(p.id, p.text, p.source, p.start, p.end, None, {"lang": "fr"}, None)
    for out in (
        Scanned(index="x", backend="b", passages=[bare], next_after=None),
        Got(index="x", backend="b", passages=[bare]),
    ):
        assert out.passages[0].digest is None
    assert bare.digest is None
    assert Passage.create("a new passage", "mem://doc").digest is not None
