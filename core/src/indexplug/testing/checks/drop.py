"""The check of dropping an index."""

from __future__ import annotations

from indexplug.outcomes import (
    Indexed,
    IndexStatus,
    NoMatch,
    Scanned,
)
from indexplug.testing.checks.helpers import (
    _add,
    _count,
    _drop,
    _filled,
    _indexes,
    _raw,
    _scan,
    _search,
    _status,
    _tiny,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


@_check(
    "drop.removes",
    "drop deletes a whole index (answering exists=False): status, search, scan and indexes "
    "no longer see it, other indexes are untouched, and dropping it again is fine",
    claim="drop",
)
def _drop_removes(s: Subject) -> None:
    index, ps = _filled(s, "drop")
    other = s.index("dropother")
    _add(s, other, ps[:2], "add of 2 passages to another index")
    for what in ("drop of an index holding passages", "drop of an index already dropped"):
        out = _drop(s, index, what)
        if out.exists or out.passages:
            fail(f"{what} answered exists={out.exists}, passages={out.passages}")
    st: IndexStatus = _status(s, index, "status after drop")
    if st.exists or st.passages:
        fail(f"after drop, status says exists={st.exists}, passages={st.passages}")
    # INDEX_EMPTY is the answer (search.empty_index holds every backend to telling the two
    # apart); here only that nothing is left to search matters
    found = _search(s, index, "fox", "search after drop", ("INDEX_EMPTY", "NO_MATCH"))
    if isinstance(found, NoMatch) and found.searched:
        fail(f"search after drop answered NO_MATCH having searched {found.searched} passage(s)")
    if s.claims("scan"):
        out2: Scanned = _scan(s, index, "scan after drop")
        if out2.passages:
            fail(f"scan after drop answered {len(out2.passages)} passage(s)")
    if s.claims("indexes") and index in {i.name for i in _indexes(s, "indexes after drop").indexes}:
        fail(f"indexes after drop still lists {index!r}")
    if _count(s, other, "status of another index after drop") != 2:
        fail("dropping one index changed another")
    _drop(s, s.index("dropnever"), "drop of an index never written")
    # a drop that cannot finish in time says so (whether it happened is then unknown, as for
    # any write that timed out: this index is not looked at again)
    late = s.index("droplate")
    _add(s, late, ps[:1], "add of a passage to an index to drop without time")
    tiny = s.settings.tiny_deadline_s
    _tiny(
        s,
        "drop",
        f"drop with deadline_s={tiny}",
        late,
        lambda: s.guard.drop(late, deadline_s=tiny),
        lambda d: _raw(s).op_drop(late, deadline=d),
    )
    again: Indexed = _add(s, index, ps, "adding the same passages after drop")
    if again.added != len(ps):
        fail(f"after drop, {again.known} of {len(ps)} passages added again were still known")
