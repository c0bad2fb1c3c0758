"""Properties of the reference backend, the kit's yardstick: whatever text and metadata go in
come back exactly, through memory and through its JSON file."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from indexplug import Guard, Passage, Searched
from indexplug.testing import ReferenceBackend

_text = st.text(
    alphabet=st.characters(exclude_categories=("Cs",)),  # any code point but lone surrogates
    min_size=1,
    max_size=200,
).filter(lambda t: t.strip() != "")
_meta = st.dictionaries(
    st.text(max_size=10),
    st.one_of(
        st.text(max_size=20),
        st.integers(),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    max_size=5,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.tuples(_text, _meta), min_size=1, max_size=5))
def test_passages_come_back_exactly(texts: list[tuple[str, dict[str, object]]]) -> None:
    passages = [
        Passage.create(f"marker{i} {t}", f"prop://{i}", metadata=m)  # type: ignore[arg-type]
        for i, (t, m) in enumerate(texts)
    ]
    with tempfile.TemporaryDirectory() as home:
        for attempt in range(2):  # the second time, from the JSON file of a new instance
            guard = Guard(ReferenceBackend(home))
            if attempt == 0:
                assert guard.add("props", passages).code == "INDEXED"
            for p in passages:
                out = guard.search("props", p.text.split()[0], top_k=1)
                assert isinstance(out, Searched)
                assert out.hits[0].passage.model_dump() == p.model_dump()
            guard.close()
