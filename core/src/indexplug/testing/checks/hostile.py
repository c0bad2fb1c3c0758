"""Checks of hostile input: index names, queries, top_k and odd passages."""

from __future__ import annotations

import re
import uuid
from functools import partial
from typing import Any

from indexplug.errors import InvalidIndexName, InvalidRequest
from indexplug.guard import MAX_QUERY_CHARS, MAX_TOP_K
from indexplug.names import MAX_NAME_LENGTH
from indexplug.outcomes import (
    Indexed,
    Searched,
)
from indexplug.passages import Passage
from indexplug.testing.checks.helpers import (
    _QUERIES,
    _add,
    _by_id,
    _check_hits,
    _compare,
    _describe,
    _expect,
    _filled,
    _refused,
    _search,
    _short,
    _snapshot,
    corpus,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail

_BAD_NAMES = [
    "../escape",
    "..",
    ".",
    "a/b",
    "/etc/passwd",
    "a\\b",
    "C:\\index",
    "name\x00nul",
    "a" * (MAX_NAME_LENGTH + 1),
    "",
    "Upper",
    "with space",
    "index.sqlite",
    "-leading-dash",
    "\u0430bc",  # a Cyrillic 'a'
    "emoji🦜",
]


@_check(
    "hostile.index_names",
    "Index names that are paths, contain '..', '/', NUL or are too "
    "long are refused with InvalidIndexName by every op",
)
def _names(s: Subject) -> None:
    p = corpus()[:1]
    d = s.settings.op_deadline_s
    for name in _BAD_NAMES:
        shown = repr(_short(name))
        _refused(
            f"add to index {shown}", partial(s.guard.add, name, p, deadline_s=d), InvalidIndexName
        )
        _refused(
            f"search of index {shown}",
            partial(s.guard.search, name, "fox", deadline_s=d),
            InvalidIndexName,
        )
        _refused(
            f"remove from index {shown}",
            partial(s.guard.remove, name, [p[0].id], deadline_s=d),
            InvalidIndexName,
        )
        _refused(
            f"status of index {shown}",
            partial(s.guard.status, name, deadline_s=d),
            InvalidIndexName,
        )
        if s.claims("get"):
            _refused(
                f"get from index {shown}",
                partial(s.guard.get, name, [p[0].id], deadline_s=d),
                InvalidIndexName,
            )
        if s.claims("scan"):
            _refused(
                f"scan of index {shown}",
                partial(s.guard.scan, name, deadline_s=d),
                InvalidIndexName,
            )
        if s.claims("drop"):
            _refused(
                f"drop of index {shown}",
                partial(s.guard.drop, name, deadline_s=d),
                InvalidIndexName,
            )
    for good in ("z" * (MAX_NAME_LENGTH - 11) + uuid.uuid4().hex[:11], f"0-_{uuid.uuid4().hex}"):
        _add(s, good, p, f"add to the valid index name {good!r}")
        _search(s, good, "fox", f"search of the valid index name {good!r}")


def _hostile_queries() -> list[str]:
    words = " ".join(f"w{i}" for i in range(9_999)) + " fox"
    return [
        '"',
        '""',
        "'",
        "NEAR(",
        "NEAR(fox violin, 2)",
        "*",
        "fox*",
        "^fox",
        ":",
        "text:fox",
        "AND OR NOT",
        "fox AND",
        "NOT",
        "(",
        ")",
        "()",
        "(fox OR",
        '"unterminated fox',
        "it's the fox's den",
        "'; DROP TABLE passages; --",
        "fox\\",
        "%",
        "_",
        "{}[]",
        "🦜🔥",
        "🦊 fox",
        "مرحبا بالعالم",
        "שלום עולם",
        "\u202efox\u202c",
        "fo\u0301x",
        "\u200b",
        "\ufeff",
        "𝔣𝔬𝔵",
        "a" * 5_000,
        words,
        "",
        "   ",
        "\t\n",
        "fox\x00",
        "x" * (MAX_QUERY_CHARS + 1),
    ]


@_check(
    "hostile.queries",
    "Queries of search syntax, quotes, emoji, right-to-left text, 10,000 "
    "words or nothing get a typed answer and corrupt nothing",
)
def _queries(s: Subject) -> None:
    index, ps = _filled(s, "queries")
    added = _by_id(ps)
    before = _snapshot(s, index, _QUERIES, "before hostile queries")
    for q in _hostile_queries():
        what = f"search for {_short(q)!r}" + (f" ({len(q.split())} words)" if len(q) > 40 else "")
        try:
            out = s.guard.search(index, q, top_k=10, deadline_s=s.settings.op_deadline_s)
        except InvalidRequest:
            continue
        except Exception as exc:
            fail(f"{what} raised {_describe(exc)} instead of a typed answer")
        out = _expect(out, "search", ("SEARCHED", "NO_MATCH"), what, index)
        if isinstance(out, Searched):
            _check_hits(s, out, 10, added, what, count=len(ps))
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after hostile queries"),
        "hostile queries changed the index",
    )


@_check("hostile.top_k", "top_k of 0, negative, huge or not an integer gets a typed answer")
def _top_k(s: Subject) -> None:
    index, ps = _filled(s, "topk")
    added = _by_id(ps)
    bad: list[Any] = [0, -1, -(10**9), MAX_TOP_K + 1, 10**9, 10**30, True, 2.5, "5", None]
    for k in bad:
        what = f"search with top_k={k!r}"
        try:
            out = s.guard.search(index, "fox", top_k=k, deadline_s=s.settings.op_deadline_s)
        except InvalidRequest:
            continue
        except Exception as exc:
            fail(f"{what} raised {_describe(exc)} instead of a typed answer")
        out = _expect(out, "search", ("SEARCHED", "NO_MATCH"), what, index)
        if isinstance(out, Searched):
            limit = k if isinstance(k, int) and not isinstance(k, bool) else 0
            _check_hits(s, out, limit, added, what, count=len(ps))
    out = _search(s, index, "fox glaciers", f"search with top_k={MAX_TOP_K}", top_k=MAX_TOP_K)
    _check_hits(s, out, MAX_TOP_K, added, f"search with top_k={MAX_TOP_K}", count=len(ps))


def _odd_passages(huge_chars: int) -> list[Passage]:
    """Passages built to trip storage: every one carries a marker word to find it by."""
    head = "hugemarker "
    body = "lorem ipsum dolor sit amet " * (huge_chars // 27 + 1)
    texts: list[tuple[str, dict[str, str | int | float | bool]],] = [
        ((head + body)[:huge_chars], {}),
        ("oddmarkera cafe\u0301 nai\u0308ve re\u0301sume\u0301 (combining marks)", {}),
        ("oddmarkerb café naïve résumé (precomposed)", {}),
        ("oddmarkerc zero\u200bwidth\u200cnon\u200djoiner\u2060word \ufeffbom", {}),
        ("oddmarkerd astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦜🔥 𠜎𠜱 👩\u200d👩\u200d👧", {"emoji🦜": "🔥"}),
        ("oddmarkere right-to-left \u200fمرحبا بالعالم\u200f and שלום עולם", {"dir": "rtl"}),
        ('oddmarkerf syntax "NEAR(x, y)" AND * ^ : (a OR b) NOT c \'; DROP TABLE x; --', {}),
        ("oddmarkerg\ttabs\nnewlines\r\ncarriage\x0bvertical\x1funit-separator", {}),
        (
            "oddmarkerh metadata of every kind",
            {
                "ключ": "значение",
                'quote"key': "it's",
                "int": -(2**53),
                "float": 1.5e300,
                "tiny": 5e-324,
                "false": False,
                "empty": "",
                "unicode": "naïve 🦜",
            },
        ),
        ("oddmarkeri many metadata keys", {f"k{i}": i for i in range(50)}),
    ]
    out = [kit_passage(t, 300 + i, tag="odd", metadata=m) for i, (t, m) in enumerate(texts)]
    long_uri = "kit://odd/" + "ü/" * 1_000 + "file name?x=1&y=é#frag"
    out.append(kit_passage("oddmarkerj a passage from a very long uri", 399, uri=long_uri))
    return out


@_check(
    "hostile.passages",
    "Passages with huge text or odd Unicode are stored and returned exactly as added",
)
def _odd(s: Subject) -> None:
    index = s.index("odd")
    ps = _odd_passages(s.settings.huge_passage_chars)
    added = _by_id(ps)
    out: Indexed = _add(s, index, ps, "add of passages with huge text and odd Unicode")
    if out.added != len(ps):
        fail(f"add of {len(ps)} odd passages reported added={out.added}")
    for p in ps:
        marker = p.text.split()[0]
        what = f"search for the passage marked {marker!r}"
        # The marker finds it in a lexical index; the words of its opening text find it in a
        # dense one (which may embed only the start of a huge passage).  Lower-case words
        # only (no AND, NEAR...): this check is about storage; hostile.queries is about syntax.
        words = " ".join(re.findall(r"\w+", p.text[:300])).lower()
        found = _search(s, index, f"{marker} {words}", what, top_k=5)
        ids = _check_hits(s, found, 5, added, what, count=len(ps))
        if p.id not in ids:
            fail(f"{what} did not return it")
    again: Indexed = _add(s, index, ps, "adding the odd passages again")
    if again.known != len(ps):
        fail(
            f"adding the odd passages again reported known={again.known} of {len(ps)}: their "
            "ids did not survive storage"
        )
