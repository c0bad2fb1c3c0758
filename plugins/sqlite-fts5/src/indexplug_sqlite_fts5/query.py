"""Plain text in, a safe FTS5 expression out.

Users type words, not FTS5 syntax.  The query is cut into the same word tokens the index uses
(``unicode61``: runs of letters and digits), each becomes a double-quoted FTS5 string (which
FTS5 treats as a phrase of literal tokens, so ``NEAR``, ``AND``, ``*``, ``^``, ``:`` or
parentheses inside it mean nothing), and the terms are OR-ed so BM25 ranks partial matches.
The expression is then bound as a parameter, so nothing typed reaches SQL either.

Very common English words are dropped from the query (not from the index) when other words
remain: they match nearly every passage, cost most of the query's time, and add little to BM25.

A query without a single word token (``"?!"``, ``"--"``) has nothing to search, so it is not a
"no match": the guard refuses it before any backend is asked (``InvalidQuery``, ``BAD_REQUEST``
with field ``query``), testing for a character that ``str.isalnum`` accepts, which is exactly
what ``_TOKEN`` matches.  Every query this backend is given therefore has at least one term.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
MAX_TERMS = 256
"""A 10,000-word query keeps its first 256 distinct terms; BM25 needs no more to rank."""

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)


def query_terms(query: str) -> list[str]:
    """The distinct lower-case word tokens of ``query``, minus stop words when others remain
    (never empty for a query the guard let through, see above)."""
    seen: dict[str, None] = {}
    for m in _TOKEN.finditer(query.lower()):
        seen.setdefault(m.group(0), None)
    terms = list(seen)
    content = [t for t in terms if t not in STOPWORDS]
    return (content or terms)[:MAX_TERMS]


def fts5_phrase(term: str) -> str:
    """``term`` as an FTS5 string: a phrase of its literal tokens, whatever it contains."""
    return '"' + term.replace('"', '""') + '"'


def fts5_expression(terms: list[str]) -> str:
    """An FTS5 MATCH expression OR-ing each term as a quoted string."""
    return " OR ".join(fts5_phrase(t) for t in terms)
