"""Fusion across indexes: reciprocal rank fusion, legs kept, degraded answers never silent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from indexplug import Hit, Passage, invoke
from indexplug.cli.app import app
from indexplug.config import load_config
from indexplug.fusion import fuse_rankings
from indexplug.invocation import Invoker
from orchestration_support import check_schema
from typer.testing import CliRunner

runner = CliRunner()

FUSION = """
[defaults]
backend = "sqlite-fts5"

[indexes.lex]
backend = "sqlite-fts5"
[indexes.mem]
backend = "fake-memory"
[indexes.lex2]
backend = "sqlite-fts5"
[indexes.empty]
backend = "sqlite-fts5"
[indexes.down]
backend = "test-down"
[indexes.down2]
backend = "test-down"
[indexes.slow]
backend = "test-slow"
[indexes.slow2]
backend = "test-slow"
[indexes.broken]
backend = "test-broken"
[indexes.meet]
backend = "test-meet"
[indexes.meet2]
backend = "test-meet"

[indexes.both]
kind = "fusion"
members = ["lex", "mem"]

[indexes.half]
kind = "fusion"
members = ["lex", "down"]
"""

PASSAGES = [
    {"text": "Otters hold hands while they sleep.", "uri": "mem://otters"},
    {"text": "Sea otters use rocks as tools.", "uri": "mem://tools"},
    {"text": "Cats purr when they are content.", "uri": "mem://cats"},
    {"text": "Descale the kettle with vinegar.", "uri": "mem://kettle"},
]


def P(n: int) -> Passage:
    return Passage.create(f"passage {n}", f"mem://{n}")


def hits(*ns: int) -> list[Hit]:
    return [Hit(rank=i, score=10.0 - i, score_scale="s", passage=P(n)) for i, n in enumerate(ns, 1)]


def test_reciprocal_rank_fusion_by_content_address() -> None:
    fused = fuse_rankings([hits(1, 2, 3), hits(3, 1, 4)], top_k=10, rrf_k=60)
    ids = [p.id for _, p in fused]
    assert ids == [P(1).id, P(3).id, P(2).id, P(4).id]
    assert fused[0][0] == pytest.approx(1 / 61 + 1 / 62)
    assert fused[1][0] == pytest.approx(1 / 63 + 1 / 61)
    assert fused[2][0] == pytest.approx(1 / 62)
    assert len(fuse_rankings([hits(1, 2, 3), hits(3, 1, 4)], top_k=2)) == 2
    summed = fuse_rankings([hits(1, 2), hits(2)], top_k=5, method="sum")
    assert [p.id for _, p in summed] == [P(2).id, P(1).id]
    assert summed[0][0] == pytest.approx(8.0 + 9.0)


@pytest.fixture
def inv(write_config: Any, test_backends: None) -> Any:
    with Invoker.from_source(write_config(FUSION, "fusion.toml")) as invoker:
        yield invoker


def call(inv: Invoker, op: str, args: dict[str, Any]) -> dict[str, Any]:
    return check_schema(inv.invoke(op, args))


def test_a_fusion_index_adds_to_every_member_and_fuses_searches(inv: Invoker) -> None:
    a = call(inv, "add", {"index": "both", "passages": PASSAGES})
    assert (
        a["code"] == "INDEXED" and a["data"]["added"] == 4 and a["evidence"]["backend"] == "fusion"
    )
    for member in ("lex", "mem"):
        assert call(inv, "status", {"index": member})["data"]["passages"] == 4
    st = call(inv, "status", {"index": "both"})
    assert st["data"]["passages"] == 4 and set(st["data"]["details"]["members"]) == {"lex", "mem"}
    a = call(inv, "search", {"index": "both", "query": "otters sleep", "top_k": 3})
    assert a["code"] == "SEARCHED" and a["ok"]
    ev = a["evidence"]
    assert ev["scale"]["name"] == "rrf" and ev["legs"] == ["lex", "mem"] and ev["degraded"] == []
    top = a["data"]["hits"][0]
    assert top["passage"]["source"]["uri"] == "mem://otters" and top["scale"] == "rrf"
    assert top["score"] == pytest.approx(2 / 61)  # first in both legs
    assert ev["searched"] == 8  # both legs, 4 passages each
    # adding again is safe: everything is known in every member
    a = call(inv, "add", {"index": "both", "passages": PASSAGES})
    assert a["data"] == {"added": 0, "known": 4, "added_ids": [], "known_ids": []}


def test_an_ad_hoc_list_of_indexes_is_fused(inv: Invoker) -> None:
    call(inv, "add", {"index": "lex", "passages": PASSAGES[:2]})
    call(inv, "add", {"index": "mem", "passages": PASSAGES[1:]})
    a = call(inv, "search", {"indexes": ["lex", "mem"], "query": "otters rocks cats"})
    assert a["code"] == "SEARCHED" and a["evidence"]["legs"] == ["lex", "mem"]
    assert a["evidence"]["index"] == "fused-lex-mem"
    uris = [h["passage"]["source"]["uri"] for h in a["data"]["hits"]]
    assert uris[0] == "mem://tools" and {"mem://otters", "mem://cats"} <= set(uris)
    # one name is just that index; a fusion name contributes its members
    a = call(inv, "search", {"indexes": ["lex", "lex"], "query": "otters"})
    assert a["evidence"]["legs"] == [] and a["evidence"]["scale"]["name"] == "fts5_bm25"
    a = call(inv, "search", {"indexes": ["both"], "query": "otters"})
    assert a["evidence"]["legs"] == ["lex", "mem"]


def test_an_unavailable_leg_degrades_the_answer_naming_it(inv: Invoker) -> None:
    call(inv, "add", {"index": "lex", "passages": PASSAGES})
    a = call(inv, "search", {"index": "half", "query": "otters"})
    assert a["code"] == "SEARCHED" and a["ok"] and a["data"]["hits"]
    (d,) = a["evidence"]["degraded"]
    assert d["part"] == "down" and d["code"] == "INDEX_UNAVAILABLE"
    assert "connection refused" in d["reason"]
    assert "degraded" in a["message"]
    a = call(inv, "search", {"index": "half", "query": "zeppelin"})
    assert a["code"] == "NO_MATCH" and a["evidence"]["degraded"][0]["part"] == "down"


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The slow legs hold on until the test ends: a leg that has not answered, whatever the
    machine's load (no clock needed to know the answer came without it)."""
    from orchestration_plugins import SlowBackend

    hold = threading.Event()
    monkeypatch.setattr(SlowBackend, "HOLD", hold)
    try:
        yield
    finally:
        hold.set()


def test_a_leg_past_the_deadline_is_named_and_the_rest_returned(inv: Invoker, held: None) -> None:
    call(inv, "add", {"index": "lex", "passages": PASSAGES})
    # a deadline the sqlite leg meets on any machine; the slow leg never answers within it,
    # so the answer came without waiting for it
    a = call(inv, "search", {"indexes": ["lex", "slow"], "query": "otters", "deadline_s": 5})
    assert a["code"] == "SEARCHED" and a["data"]["hits"], a
    (d,) = a["evidence"]["degraded"]
    assert d["part"] == "slow" and d["code"] == "INDEX_TIMEOUT"


def test_a_slow_machine_still_gets_the_legs_that_answered(
    inv: Invoker, held: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fusion stops waiting for a late leg early enough to fuse the others and answer
    within its own deadline on a loaded machine (here: fusing takes 0.1 s), instead of
    losing every leg's answer to one INDEX_TIMEOUT."""
    import indexplug.fusion as fusion_module

    real = fusion_module.fuse_rankings

    def slow_fuse(*a: Any, **kw: Any) -> Any:
        time.sleep(0.1)  # a loaded machine's scheduling delays
        return real(*a, **kw)

    monkeypatch.setattr(fusion_module, "fuse_rankings", slow_fuse)
    call(inv, "add", {"index": "lex", "passages": PASSAGES})
    a = call(inv, "search", {"indexes": ["lex", "slow"], "query": "otters", "deadline_s": 5})
    assert a["code"] == "SEARCHED" and a["data"]["hits"], a
    assert a["evidence"]["degraded"][0]["part"] == "slow"


def test_legs_run_concurrently(inv: Invoker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each meeting leg answers only once the other has reached it too: legs run one after
    the other never meet, and would time out (a deadline no concurrent pair misses)."""
    from orchestration_plugins import MeetingBackend

    monkeypatch.setattr(MeetingBackend, "MEET", threading.Barrier(2))
    a = call(inv, "search", {"indexes": ["meet", "meet2"], "query": "q", "deadline_s": 30})
    assert a["code"] == "NO_MATCH", a
    assert "degraded" not in a["evidence"] or not a["evidence"]["degraded"]


def test_legs_all_past_the_deadline_time_out_naming_each(inv: Invoker, held: None) -> None:
    a = call(inv, "search", {"indexes": ["slow", "slow2"], "query": "q", "deadline_s": 1.0})
    assert a["code"] == "INDEX_TIMEOUT" and not a["ok"]
    reason = a["problem"]["reason"]
    assert "every leg timed out" in reason and "'slow'" in reason and "'slow2'" in reason


def test_when_every_leg_fails_the_failure_names_each_leg(inv: Invoker) -> None:
    a = call(inv, "search", {"indexes": ["down", "down2"], "query": "q"})
    assert a["code"] == "INDEX_UNAVAILABLE"
    assert "leg 'down'" in a["problem"]["reason"] and "leg 'down2'" in a["problem"]["reason"]
    a = call(inv, "search", {"indexes": ["down", "broken"], "query": "q"})
    assert a["code"] == "INDEX_FAILED"
    reason = a["problem"]["reason"]
    assert "leg 'down' INDEX_UNAVAILABLE" in reason and "leg 'broken' INDEX_FAILED" in reason
    assert "disk on fire" in reason


def test_empty_legs_beside_a_failed_one_are_not_an_empty_answer(inv: Invoker) -> None:
    a = call(inv, "search", {"indexes": ["empty", "down"], "query": "q"})
    assert a["code"] == "INDEX_FAILED" and not a["ok"]
    assert "leg 'empty' is empty" in a["problem"]["reason"]
    assert "leg 'down' INDEX_UNAVAILABLE" in a["problem"]["reason"]
    a = call(inv, "search", {"indexes": ["empty", "lex2"], "query": "q"})
    assert a["code"] == "INDEX_EMPTY" and a["ok"]


def test_adding_scores_needs_one_scale(inv: Invoker) -> None:
    call(inv, "add", {"index": "lex", "passages": PASSAGES})
    call(inv, "add", {"index": "lex2", "passages": PASSAGES[:2]})
    a = call(inv, "search", {"indexes": ["lex", "mem"], "query": "otters", "fusion": "sum"})
    assert a["code"] == "BAD_REQUEST" and a["problem"]["field"] == "fusion"
    assert "same scale" in a["message"] and "fts5_bm25" in a["message"]
    a = call(inv, "search", {"indexes": ["lex", "lex2"], "query": "otters", "fusion": "sum"})
    assert a["code"] == "SEARCHED" and a["evidence"]["scale"]["name"] == "sum:fts5_bm25"


def test_batch_and_pack_and_remove_work_on_fusions(inv: Invoker, write_config: Any) -> None:
    call(inv, "add", {"index": "both", "passages": PASSAGES})
    a = call(inv, "batch_search", {"index": "half", "queries": ["otters", "kettle"]})
    assert a["code"] == "BATCH" and a["ok"] and a["evidence"]["legs"] == ["lex", "down"]
    assert all(r["evidence"]["degraded"][0]["part"] == "down" for r in a["data"]["results"])
    a = call(inv, "pack", {"index": "both", "query": "otters", "max_tokens": 100})
    assert a["code"] == "SEARCHED" and a["data"]["citations"][0]["scale"] == "rrf"
    a = call(inv, "remove", {"index": "both", "ids": ["0" * 64]})
    assert a["code"] == "NOT_ALLOWED"


def test_remove_through_a_fusion_needs_every_member_allowed(write_config: Any) -> None:
    cfg = write_config(
        FUSION.replace(
            '[indexes.mem]\nbackend = "fake-memory"',
            '[indexes.mem]\nbackend = "fake-memory"\nallow_remove = true',
        )
        .replace(
            '[indexes.lex]\nbackend = "sqlite-fts5"',
            '[indexes.lex]\nbackend = "sqlite-fts5"\nallow_remove = true',
        )
        .replace('members = ["lex", "mem"]', 'members = ["lex", "mem"]\nallow_remove = true'),
        "allow.toml",
    )
    from indexplug.plugins import reset_registry
    from orchestration_plugins import register

    reset_registry()
    register()
    try:
        with Invoker.from_source(cfg) as inv:
            added = call(inv, "add", {"index": "both", "passages": PASSAGES[:1]})
            pid = next(
                h["passage"]["id"]
                for h in call(inv, "search", {"index": "lex", "query": "otters"})["data"]["hits"]
            )
            assert added["code"] == "INDEXED"
            a = call(inv, "remove", {"index": "both", "ids": [pid]})
            assert a["code"] == "REMOVED" and a["data"]["removed"] == 1
            assert call(inv, "status", {"index": "mem"})["data"]["passages"] == 0
            assert call(inv, "status", {"index": "lex"})["data"]["passages"] == 0
    finally:
        reset_registry()


def test_the_cli_and_config_target_fuse_a_configured_index(write_config: Any, docs: Path) -> None:
    cfg = write_config(
        """
        [indexes.a]
        backend = "sqlite-fts5"
        [indexes.b]
        backend = "sqlite-fts5"
        [indexes.ab]
        kind = "fusion"
        members = ["a", "b"]
        """
    )
    r = runner.invoke(app, ["index", str(docs), "--index", "ab"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["search", "otters", "--index", "ab", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["scale"]["name"] == "rrf" and out["backend"] == "fusion"
    for member in ("a", "b"):
        st = json.loads(runner.invoke(app, ["status", "--index", member, "--json"]).output)
        assert st["passages"] > 0
    t = load_config(cfg).target("ab")
    assert t.backend_name == "fusion" and t.options["members"] == ["a", "b"]
    assert t.search("otters", top_k=2).code == "SEARCHED"
    t.guard.close()


def test_eval_runs_on_a_configured_fusion_index(write_config: Any, tmp_path: Path) -> None:
    ds = tmp_path / "tiny"
    (ds / "qrels").mkdir(parents=True)
    corpus = {"d1": "cats purr softly", "d2": "dogs bark loudly", "d3": "birds sing at dawn"}
    (ds / "corpus.jsonl").write_text(
        "\n".join(json.dumps({"_id": k, "title": "", "text": v}) for k, v in corpus.items())
    )
    (ds / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "why do cats purr"})
        + "\n"
        + json.dumps({"_id": "q2", "text": "dogs that bark"})
    )
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    cfg = write_config(
        """
        [indexes.sf-lex]
        backend = "sqlite-fts5"
        [indexes.sf-mem]
        backend = "fake-memory"
        [indexes.sf-both]
        kind = "fusion"
        members = ["sf-lex", "sf-mem"]
        """,
        "eval.toml",
    )
    r = runner.invoke(app, ["eval", str(ds), "--config", str(cfg), "--index", "sf-both", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["backend"] == "fusion" and rep["options"]["members"] == ["sf-lex", "sf-mem"]
    assert rep["ndcg_at_10"] == 1.0 and rep["outcomes"] == {"SEARCHED": 2}
    # the sqlite member was dropped afterwards (eval keeps nothing unless --keep)
    st = runner.invoke(app, ["status", "--index", "sf-lex", "--config", str(cfg), "--json"])
    assert json.loads(st.output)["exists"] is False


def test_python_invoke_fuses_without_a_config_file(docs: Path) -> None:
    invoke("index_folder", {"index": "one", "path": str(docs / "otters.md")})
    invoke("index_folder", {"index": "two", "path": str(docs / "cats.md")})
    a = check_schema(invoke("search", {"indexes": ["one", "two"], "query": "otters cats"}))
    assert a["code"] == "SEARCHED" and a["evidence"]["legs"] == ["one", "two"]
    uris = {h["passage"]["source"]["uri"].rsplit("/", 1)[-1] for h in a["data"]["hits"]}
    assert uris == {"otters.md", "cats.md"}


def test_a_real_server_backend_that_is_down_degrades_the_fusion(write_config: Any) -> None:
    pytest.importorskip("indexplug_elastic", reason="the elastic plugin is not installed here")
    cfg = write_config(
        """
        [indexes.lex]
        backend = "sqlite-fts5"
        [indexes.es]
        backend = "elastic"
        settings = { hosts = ["http://127.0.0.1:9"], ready_timeout = 0.5 }
        [indexes.hybrid]
        kind = "fusion"
        members = ["lex", "es"]
        """,
        "es.toml",
    )
    with Invoker.from_source(cfg) as inv:
        call(inv, "add", {"index": "lex", "passages": PASSAGES})
        a = call(inv, "search", {"index": "hybrid", "query": "otters"})
    assert a["code"] == "SEARCHED" and a["data"]["hits"], a
    (d,) = a["evidence"]["degraded"]
    assert d["part"] == "es" and d["code"] == "INDEX_UNAVAILABLE" and "127.0.0.1:9" in d["reason"]


def test_operator_filters_reach_every_leg_that_serves_them(inv: Invoker) -> None:
    counted = [{**p, "metadata": {"n": i}} for i, p in enumerate(PASSAGES)]
    for leg in ("lex", "lex2"):
        assert call(inv, "add", {"index": leg, "passages": counted})["code"] == "INDEXED"
    a = call(
        inv,
        "search",
        {"indexes": ["lex", "lex2"], "query": "otters cats kettle", "filters": {"n": {"$gte": 2}}},
    )
    assert a["code"] == "SEARCHED", a
    uris = {h["passage"]["source"]["uri"] for h in a["data"]["hits"]}
    assert uris == {"mem://cats", "mem://kettle"}
    # a leg that cannot serve an operator makes the fusion refuse it, never ignore it
    mem = call(inv, "add", {"index": "mem", "passages": counted})
    assert mem["code"] == "INDEXED"
    refused = call(
        inv,
        "search",
        {"indexes": ["lex", "mem"], "query": "otters", "filters": {"n": {"$gte": 2}}},
    )
    assert refused["code"] == "BAD_REQUEST" and refused["problem"]["field"] == "filters", refused


def test_fuse_open_fuses_indexes_a_caller_holds_and_leaves_them_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import indexplug
    from indexplug.errors import InvalidRequest
    from indexplug.fusion import fuse_open

    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    a, b = indexplug.open_backend("sqlite-fts5"), indexplug.open_backend("sqlite-fts5")
    a.add("a", [Passage.create("otters hold hands", "mem://1")])
    b.add(
        "b",
        [
            Passage.create("otters eat fish", "mem://2"),
            Passage.create("otters hold hands", "mem://1"),
        ],
    )
    with pytest.raises(InvalidRequest) as refused:
        fuse_open([(a, "a")])
    assert refused.value.field == "stores"
    fused = fuse_open([(a, "a"), (b, "b")], rrf_k=60)
    assert fused.index == "fused-a-b" and fused.options["members"] == ["a", "b"]
    out = fused.guard.search(fused.index, "otters", top_k=5)
    # the passage both hold (one content address) is first, with both legs' reciprocal ranks
    texts = [h.passage.text for h in out.hits]  # type: ignore[union-attr]
    assert texts == ["otters hold hands", "otters eat fish"]
    in_b = [h.passage.text for h in b.search("b", "otters").hits]  # type: ignore[union-attr]
    both = 1 / 61 + 1 / (61 + in_b.index("otters hold hands"))
    assert out.hits[0].score == pytest.approx(both)  # type: ignore[union-attr]
    fused.guard.close()
    assert a.search("a", "otters").ok and b.search("b", "otters").ok  # the members stay open
    a.close()
    b.close()
