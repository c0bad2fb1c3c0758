"""English analysis on the client, for servers that lack Elasticsearch's ``english`` analyzer.

Why this exists: language analyzers and stemmers live in Elasticsearch's ``analysis-common``
module.  Every normal distribution has it, but the integ-test-zip (the distribution published
to Maven Central, which our tests and CI run) ships only ``standard``, ``simple``, ``stop``,
``whitespace`` and ``keyword`` -- no stemming at all, which costs BM25 several points of nDCG on
English text.  So when the server cannot stem (``analysis="auto"`` finds out, or
``analysis="client"`` asks for it), passages are analysed here, with the same pipeline as
Lucene's ``EnglishAnalyzer`` (what Elasticsearch's ``english`` analyzer is):

    word tokens -> drop English possessive 's -> lower case -> drop English stop words
    -> Porter stemmer

and the resulting terms go to a ``whitespace``-analysed field.  Queries go through the same
pipeline, so BM25 (computed by Elasticsearch as always) sees the same terms it would with the
server-side analyzer.  The tokenizer approximates Unicode word boundaries (UAX #29) with
``\\w+`` joined by apostrophes and full stops, which is what ``StandardTokenizer`` does for
English text; the stemmer is Snowball's original Porter algorithm (PyStemmer, a C extension),
the one Lucene's ``PorterStemFilter`` implements.
"""

from __future__ import annotations

import re
import threading

import Stemmer

ENGLISH_STOP_WORDS = frozenset(
    {
        *("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into"),
        *("is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then"),
        *("there", "these", "they", "this", "to", "was", "will", "with"),
    }
)
"""Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``, which is Elasticsearch's ``_english_``."""

_TOKEN = re.compile(r"\w+(?:['’.]\w+)*")
_POSSESSIVE = ("'s", "’s")
MAX_TOKEN_CHARS = 255
"""Longer tokens are cut, as ``StandardTokenizer`` cuts them (``max_token_length``)."""
CACHE_LIMIT = 500_000
"""Distinct words whose stems are remembered; the cache is dropped and rebuilt past this."""


class EnglishAnalysis:
    """Text to the space-separated terms the ``english`` analyzer would index.

    Stemming dominates the cost, and a corpus has far fewer distinct words than tokens, so stems
    are cached per word (stop words map to ``""``).  Thread-safe: each thread gets its own
    stemmer (PyStemmer's are not shareable) and the cache is only ever replaced, not mutated
    under a reader in a way that could break it (``dict`` operations are atomic in CPython).
    """

    name = "english"

    def __init__(self) -> None:
        self._cache: dict[str, str] = dict.fromkeys(ENGLISH_STOP_WORDS, "")
        self._local = threading.local()

    def _stemmer(self) -> Stemmer.Stemmer:
        s: Stemmer.Stemmer | None = getattr(self._local, "stemmer", None)
        if s is None:
            s = self._local.stemmer = Stemmer.Stemmer("porter", 0)
        return s

    def _stem(self, word: str) -> str:
        token = word
        if token.endswith(_POSSESSIVE):
            token = token[:-2]
        if len(token) > MAX_TOKEN_CHARS:
            token = token[:MAX_TOKEN_CHARS]
        stem = "" if not token or token in ENGLISH_STOP_WORDS else self._stemmer().stemWord(token)
        if len(self._cache) >= CACHE_LIMIT:
            self._cache = dict.fromkeys(ENGLISH_STOP_WORDS, "")
        self._cache[word] = stem
        return stem

    def terms(self, text: str) -> list[str]:
        """The indexed terms of ``text``, in order (stop words removed)."""
        words = _TOKEN.findall(text.lower())
        # Looked up with C-level map/filter: on a bulk add this loop is most of the client's
        # CPU time, and a per-word Python loop costs three times as much.
        stems = list(map(self._cache.get, words))
        if None in stems:
            for i, stem in enumerate(stems):
                if stem is None:
                    stems[i] = self._stem(words[i])
        return list(filter(None, stems))

    def analyze(self, text: str) -> str:
        """``terms`` joined by spaces: the value of the whitespace-analysed field."""
        return " ".join(self.terms(text))
