"""Client-side English analysis: the same terms Lucene's EnglishAnalyzer would index."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st
from indexplug_elastic.analysis import ENGLISH_STOP_WORDS, EnglishAnalysis
from indexplug_elastic.documents import Stored
from indexplug_elastic.search import ranked, rrf, untorn


def test_stems_possessives_and_stop_words() -> None:
    a = EnglishAnalysis()
    assert a.terms("The foxes' dens and the fox's den") == ["fox", "den", "fox", "den"]
    assert a.terms("Running studies of generalizations") == ["run", "studi", "gener"]
    assert a.terms("IL-6 levels rose in 3.5% of patients") == [
        "il",
        "6",
        "level",
        "rose",
        "3.5",
        "patient",
    ]
    assert a.analyze("To be or not to be") == ""


def test_stop_words_are_lucenes_english_set() -> None:
    assert len(ENGLISH_STOP_WORDS) == 33
    assert {"the", "and", "with", "their", "such"} <= ENGLISH_STOP_WORDS
    assert "he" not in ENGLISH_STOP_WORDS  # Lucene's list is short on purpose


def test_query_syntax_is_just_words() -> None:
    a = EnglishAnalysis()
    assert a.terms('text:fox AND "NEAR(x, y)" * ^') == ["text", "fox", "near", "x", "y"]


def test_threads_share_one_analysis() -> None:
    a = EnglishAnalysis()
    words = [f"running{i} studies{i}" for i in range(2000)]
    want = [EnglishAnalysis().analyze(w) for w in words]
    got: list[list[str]] = [[] for _ in range(4)]

    def work(n: int) -> None:
        got[n] = [a.analyze(w) for w in words]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(g == want for g in got)


@given(st.text(max_size=300))
def test_any_text_analyses_to_whitespace_free_terms(text: str) -> None:
    for term in EnglishAnalysis().terms(text):
        assert term and not any(c.isspace() for c in term)


def test_rrf_adds_reciprocal_ranks_never_scores() -> None:
    bm25 = [Stored("a", 12.0, {}), Stored("b", 11.0, {}), Stored("c", 1.0, {})]
    knn = [Stored("c", 0.99, {}), Stored("a", 0.5, {})]
    fused = rrf([bm25, knn], k=60, top_k=3)
    assert [r.pid for r in fused] == ["a", "c", "b"]
    assert fused[0].score == 1 / 61 + 1 / 62
    assert fused[1].score == 1 / 63 + 1 / 61
    assert fused[2].score == 1 / 62
    assert [r.pid for r in rrf([bm25, knn], k=60, top_k=1)] == ["a"]


def _leg(*docs: tuple[str, int, list[str]]) -> dict[str, object]:
    """A nested leg's answer: documents (``_id``, ``_seq_no``) and their passages' ids."""
    return {
        "hits": {
            "hits": [
                {
                    "_id": doc,
                    "_seq_no": seq,
                    "inner_hits": {
                        "passages": {
                            "hits": {
                                "hits": [
                                    {"_score": 1.0 - n / 10, "fields": {"passages.pid": [pid]}}
                                    for n, pid in enumerate(pids)
                                ]
                            }
                        }
                    },
                }
                for doc, seq, pids in docs
            ]
        }
    }


def test_fused_legs_answer_one_version_of_each_document() -> None:
    """The two legs of a hybrid search are two searches: a key replaced between them shows
    the BM25 leg its old document (seq 4) and the kNN leg its new one (seq 7).  Only the
    newest version's passages are fused; a document one leg alone saw is kept as it is."""
    bm25 = _leg(("k1", 4, ["old-1", "old-2"]), ("loose", 2, ["p"]))
    knn = _leg(("k1", 7, ["new-1"]), ("other", 1, ["q"]))
    legs = [ranked(bm25, 10), ranked(knn, 10)]
    kept = untorn([bm25, knn], legs)
    assert [[s.pid for s in leg] for leg in kept] == [["p"], ["new-1", "q"]]
    same = _leg(("k1", 7, ["new-1"]))
    assert untorn([knn, same], [ranked(knn, 10), ranked(same, 10)]) == [
        ranked(knn, 10),
        ranked(same, 10),
    ]
