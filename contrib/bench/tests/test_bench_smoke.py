"""A small version of the benchmark, so the harness cannot rot (no figures come from here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from indexplug_bench import synthetic
from indexplug_bench.report import merge, render
from indexplug_bench.worker import measure


def tiny_beir(ds: Path) -> Path:
    """A BEIR folder of three passages and one query whose only relevant passage is d0."""
    (ds / "qrels").mkdir(parents=True)
    (ds / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps({"_id": f"d{i}", "title": "", "text": t})
            for i, t in enumerate(["cats purr softly", "dogs bark loudly", "birds sing at dawn"])
        )
    )
    (ds / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "why do cats purr"}))
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    return ds


def sqlite_pair_cli(command: str, ds: Path, out: Path, *args: str) -> dict[str, Any]:
    """``python -m indexplug_bench COMMAND`` on the sqlite-fts5 pair of ``ds`` (no
    Elasticsearch), its results file read back."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "indexplug_bench",
            command,
            "--scifact",
            str(ds),
            "--only",
            "indexplug sqlite-fts5",
            "--no-elastic",
            *args,
            "--out",
            str(out),
        ],
        check=True,
    )
    got: dict[str, Any] = json.loads(out.read_text())
    return got


SQLITE_PAIR = ("indexplug sqlite-fts5", "raw sqlite3 FTS5 (same query)")
"""The pair the smoke tests measure: it needs no server."""


def sqlite_pair(ds: Path, workdir: Path, *, warmup: int = 1, **kw: Any) -> dict[str, Any]:
    """:func:`indexplug_bench.paired.measure_pair` on :data:`SQLITE_PAIR` of ``ds`` at top 10
    (``kw``: its ``steps`` or ``replay``)."""
    from indexplug_bench.paired import measure_pair

    return measure_pair(
        *SQLITE_PAIR, str(ds), top_k=10, ctx={}, warmup=warmup, workdir=workdir, **kw
    )


def test_synthetic_corpus_is_deterministic_and_zipfian() -> None:
    a = next(synthetic.passages(200, seed=3, batch=200))
    b = next(synthetic.passages(200, seed=3, batch=200))
    assert a == b and len(a) == 200
    words = " ".join(t for _, t in a).split()
    top = max(set(words), key=words.count)
    assert words.count(top) > 20 * (len(words) / len(set(words)))  # a heavy head
    assert synthetic.queries(5) == synthetic.queries(5)


def test_worker_measures_the_framework_and_raw_libraries(tmp_path: Path) -> None:
    rows = [
        measure(name, "synthetic:400", repeats=1, index_repeats=1, top_k=10, ctx={}, warmup=w)
        for name, w in (("indexplug sqlite-fts5", 0), ("indexplug sqlite-fts5", 1))
    ]
    assert rows[1]["warmup"] == 1 and rows[1]["latency_ms"]["p50"][0] > 0
    r = rows[0]
    assert r["passages"] == 400 and r["index_passages_per_s"][0] > 0
    assert r["latency_ms"]["p50"][0] > 0 and r["size_bytes"] > 0 and r["failures"] == {}
    assert 0.0 <= r["steal_pct"] <= 100.0  # the host's share of the CPU time, stated per row


def test_worker_subprocess_on_a_tiny_beir_set_and_report(tmp_path: Path) -> None:
    ds = tiny_beir(tmp_path / "tiny")
    results = {
        "machine": {"cores": 2, "memory_gib": 1, "platform": "x", "python": "3.11", "versions": {}},
        "command": "test",
        "quality": [],
        "scale": [],
        "skipped": {"x": "why"},
    }
    for name in ("indexplug sqlite-fts5", "raw sqlite3 FTS5 (same query)", "bm25s", "rank_bm25"):
        out = tmp_path / f"{len(results['quality'])}.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "indexplug_bench.worker",
                name,
                str(ds),
                "--repeats",
                "1",
                "--out",
                str(out),
            ],
            check=True,
        )
        row = json.loads(out.read_text())
        assert row["quality"]["ndcg_at_10"] == 1.0, name
        row["raw_of"] = "raw sqlite3 FTS5 (same query)" if name.startswith("indexplug") else None
        results["quality"].append(row)
    md = tmp_path / "benchmarks.md"
    render(results, md, tmp_path / "img")
    text = md.read_text()
    assert "| indexplug sqlite-fts5 |" in text and "x" in text and "vs raw" in text
    assert "## Against the targets" in text
    assert (
        "| framework's own work per search, indexplug sqlite-fts5 over raw sqlite3 FTS5 (same "
        "query), top 100 | <= 0.5 ms (median less raw median) |" in text
    )
    assert "| sqlite-fts5 against bm25s, top 100 | within 5x |" in text
    assert (
        "| sqlite-fts5 at 1M passages | median < 50 ms, >= 10,000 passages/s | not measured |"
        in text
    )
    assert (tmp_path / "img" / "quality.png").stat().st_size > 1000


def test_merging_runs_keeps_the_latest_row_and_names_its_command(tmp_path: Path) -> None:
    def row(system: str, p50: float, top_k: int = 100) -> dict[str, object]:
        return {
            "system": system,
            "dataset": "scifact",
            "passages": 3,
            "top_k": top_k,
            "index_passages_per_s": [1.0],
            "latency_ms": {"p50": [p50], "p95": [p50], "p99": [p50], "mean": [p50]},
            "quality": {"ndcg_at_10": 0.5, "recall_at_100": 0.5, "mrr_at_10": 0.5},
            "size_bytes": 1,
            "peak_rss_mb": 1.0,
            "failures": {},
            "load_avg": [0.5, 0.7],
        }

    machine = {"cores": 2, "memory_gib": 1, "platform": "x", "python": "3.11", "versions": {}}
    first = {
        "machine": machine,
        "command": "run --only a",
        "quality": [row("a", 5.0), row("b", 7.0)],
        "scale": [],
        "skipped": {"c": "not installed"},
    }
    second = {
        "machine": machine,
        "command": "run --only a c",
        "quality": [row("a", 3.0), row("a", 1.0, top_k=10), row("c", 2.0)],
        "scale": [],
        "skipped": {},
    }
    merged = merge([first, second])
    got = {(r["system"], r["top_k"]): r for r in merged["quality"]}
    assert got[("a", 100)]["latency_ms"]["p50"] == [3.0] and got[("a", 100)]["run"] == 1
    assert got[("b", 100)]["run"] == 0 and got[("a", 10)]["run"] == 1
    assert merged["skipped"] == {}  # c was measured by the second run
    assert merge([merged]) == merged  # a merged document merges to itself
    md = tmp_path / "b.md"
    render(merged, md, tmp_path / "img")
    text = md.read_text()
    assert "`run --only a`" in text and "`run --only a c`" in text
    assert "| a | 10 |" in text and "0.5→0.7" in text  # the load at the start, then the end
    assert "steal" not in text.split("## Quality")[1]  # none measured: none shown
    warmed = {**second, "quality": [{**row("a", 3.0), "warmup": 1}]}
    render(merge([warmed]), md, tmp_path / "img")
    assert "| 0.5→0.7, 1 warm-up pass |" in md.read_text()
    stolen = {**second, "quality": [{**row("a", 3.0), "steal_pct": 21.6}]}
    render(merge([stolen]), md, tmp_path / "img")
    assert "| 0.5→0.7, steal 22% |" in md.read_text()
    other = {**machine, "versions": {"torch": "2.13.0", "numpy": "1.26"}}
    both = merge(
        [
            {**first, "machine": {**machine, "versions": {"torch": "2.15.0", "numpy": "1.26"}}},
            {**second, "machine": other},
        ]
    )
    render(both, md, tmp_path / "img")
    assert "numpy 1.26, torch 2.15.0 (run 1); 2.13.0 (run 2)" in md.read_text()
    assert "- **Machine:** 2 cores, 1 GiB, x, Python 3.11\n" in md.read_text()  # one machine
    moved = merge([first, {**second, "machine": {**machine, "platform": "y", "memory_gib": 2}}])
    render(moved, md, tmp_path / "img")
    assert (
        "- **Machine:** 2 cores, 1 GiB, x, Python 3.11 (run 1); 2 cores, 2 GiB, y, Python 3.11 "
        "(run 2)\n"
    ) in md.read_text()
    noted = merge([first, {**second, "scale_notes": {"a": "stops at 10k: memory"}}])
    assert noted["scale_notes"] == {"a": "stops at 10k: memory"}
    third = {**second, "command": "run --only b", "quality": [row("b", 6.0)]}
    later = merge([first, second, third])
    assert [r["command"] for r in later["runs"]] == ["run --only a c", "run --only b"]
    assert {(r["system"], r["top_k"]): r["run"] for r in later["quality"]} == {
        ("a", 100): 0,
        ("a", 10): 0,
        ("c", 100): 0,
        ("b", 100): 1,
    }


def test_warming_the_shared_cache_is_timed_once_and_reported(tmp_path: Path) -> None:
    from indexplug_bench.warm import warm

    ds = tmp_path / "tiny"
    (ds / "qrels").mkdir(parents=True)
    (ds / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps({"_id": f"d{i}", "title": "", "text": f"word{i} text"}) for i in range(7)
        )
    )
    (ds / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "word1"}))
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    first = warm(ds, "hashing:default", tmp_path / "cache")
    again = warm(ds, "hashing:default", tmp_path / "cache")
    assert first["computed"] == 7 and first["passages_per_s"] > 0
    assert again["computed"] == 0 and again["passages_per_s"] is None
    tokens = warm(ds, "hashing:default", tmp_path / "cache", tokens=True)
    assert tokens["computed"] == 7 and tokens["embedder"].endswith("(token vectors)")
    machine = {"cores": 2, "memory_gib": 1, "platform": "x", "python": "3.11", "versions": {}}
    row = {
        "system": "dense",
        "dataset": "tiny",
        "passages": 7,
        "top_k": 10,
        "index_passages_per_s": [70.0],
        "latency_ms": {"p50": [1.0], "p95": [1.0], "p99": [1.0], "mean": [1.0]},
        "quality": {"ndcg_at_10": 1.0, "recall_at_100": 1.0, "mrr_at_10": 1.0},
        "size_bytes": 1,
        "peak_rss_mb": 1.0,
        "failures": {},
        "vectors_from_cache": True,
    }
    base = {"machine": machine, "quality": [row], "scale": [], "skipped": {}}
    merged = merge(
        [
            {**base, "command": "one", "embedding": [first]},
            {**base, "command": "two", "embedding": [again]},  # measured nothing: kept out
        ]
    )
    assert [e["computed"] for e in merged["embedding"]] == [7]
    md = tmp_path / "b.md"
    render(merged, md, tmp_path / "img")
    text = md.read_text()
    assert "| 70 † |" in text and "| hashing:default | 7 of 7 |" in text


def test_each_runner_indexes_into_an_index_of_its_own_and_drops_it(tmp_path: Path) -> None:
    """A server's index outlives a repeat's fresh home: a second runner must not add into the
    first one's index, and a closed runner leaves nothing behind."""
    from indexplug_bench.systems import IndexplugRunner

    a = IndexplugRunner(tmp_path / "a", "sqlite-fts5", {})
    b = IndexplugRunner(tmp_path / "a", "sqlite-fts5", {})
    assert a.index_name != b.index_name
    a.index([("d1", "cats purr softly")])
    assert a.guard.status(a.index_name).passages == 1  # type: ignore[union-attr]
    assert b.guard.status(b.index_name).exists is False  # type: ignore[union-attr]
    a.close()
    assert b.guard.status(a.index_name).exists is False  # type: ignore[union-attr]
    b.close()


def test_a_framework_system_and_its_raw_library_alternate_repeat_by_repeat(
    tmp_path: Path,
) -> None:
    from indexplug_bench.__main__ import groups
    from indexplug_bench.systems import by_name

    ip, raw = by_name("indexplug sqlite-fts5"), by_name("raw sqlite3 FTS5 (same query)")
    bm25s, chroma = by_name("bm25s"), by_name("indexplug chroma (MiniLM)")
    raw_chroma = by_name("raw chromadb (MiniLM)")
    chosen = [ip, raw, bm25s, chroma, raw_chroma]
    assert groups(chosen, interleave=True, embed_cache=False) == [
        [ip, raw, bm25s],  # its raw library, and bm25s, which a target compares it with
        [chroma],  # a model would embed the corpus again every repeat: not alternated
        [raw_chroma],
    ]
    assert groups(chosen, interleave=True, embed_cache=True)[1] == [chroma, raw_chroma]
    assert groups(chosen, interleave=False, embed_cache=False) == [[s] for s in chosen]
    assert groups([bm25s, raw], interleave=True, embed_cache=False) == [[bm25s], [raw]]

    ds = tiny_beir(tmp_path / "tiny")
    out = tmp_path / "pair.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "indexplug_bench",
            "run",
            "--scifact",
            str(ds),
            "--only",
            "indexplug sqlite-fts5",
            "FTS5 (same query)",
            "--sizes",
            "--no-elastic",
            "--repeats",
            "3",
            "--top-k",
            "10",
            "--out",
            str(out),
            "--markdown",
            str(tmp_path / "b.md"),
        ],
        check=True,
    )
    rows = {r["system"]: r for r in json.loads(out.read_text())["quality"]}
    assert set(rows) == {ip.name, raw.name}
    for row in rows.values():
        # three single-repeat processes merged: one figure per repeat, the pair named
        assert row["repeats"] == 3 and len(row["latency_ms"]["p50"]) == 3
        assert len(row["index_passages_per_s"]) == 3
        assert row["interleaved"] == [ip.name, raw.name]
        assert row["quality"]["ndcg_at_10"] == 1.0
    assert rows[ip.name]["raw_of"] == raw.name
    assert "| indexplug sqlite-fts5 | 10 |" in (tmp_path / "b.md").read_text()


def test_a_one_batch_runner_adds_the_whole_corpus_at_finish(tmp_path: Path) -> None:
    from indexplug_bench.systems import IndexplugRunner

    r = IndexplugRunner(tmp_path / "a", "sqlite-fts5", {}, one_batch=True)
    r.index([("d1", "cats purr softly")])
    r.index([("d2", "dogs bark loudly")])
    assert r.guard.status(r.index_name).exists is False  # type: ignore[union-attr]
    r.finish()
    assert r.guard.status(r.index_name).passages == 2  # type: ignore[union-attr]
    assert r.search("cats", 10) == ["d1"]
    r.close()


def test_a_fusion_runner_feeds_every_leg_and_fuses_their_rankings(tmp_path: Path) -> None:
    from indexplug_bench.systems import FusionRunner

    r = FusionRunner(tmp_path / "f", [("sqlite-fts5", {}), ("sqlite-fts5", {})])
    r.index([("d1", "cats purr softly"), ("d2", "dogs bark loudly")])
    r.finish()
    for leg in r.legs:
        assert leg.guard.status(leg.index_name).passages == 2  # type: ignore[union-attr]
    assert r.search("cats purr", 10) == ["d1"]
    assert r.search("zebra", 10) == [] and r.failures == {}
    sizes = [leg.size_bytes() for leg in r.legs]
    assert r.size_bytes() == sum(s for s in sizes if s is not None) > 0
    r.close()


def test_bounded_memory_is_judged_from_the_two_largest_corpora() -> None:
    from indexplug_bench.report import _memory_verdict

    def rows(*pairs: tuple[int, float]) -> list[dict[str, Any]]:
        return [{"passages": n, "peak_rss_mb": mb} for n, mb in pairs]

    flat = _memory_verdict(rows((10_000, 142), (100_000, 252), (1_000_000, 256)))
    assert flat[3] == "met" and "1.02x for 10x the passages" in flat[2]
    growing = _memory_verdict(rows((100_000, 252), (1_000_000, 900)))
    assert growing[3] == "not met"
    close = _memory_verdict(rows((100_000, 252), (200_000, 260)))
    assert close[3].startswith("not judged")


def test_a_worker_stopped_at_its_timeout_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker is killed (SIGKILL) at its timeout; its folder is the parent's to remove."""
    import tempfile

    from indexplug_bench.__main__ import _worker

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    big = "synthetic:1000000"  # far more than a fraction of a second's work
    assert _worker(["indexplug sqlite-fts5", big, "--repeats", "1"], timeout=3) == (
        "stopped after 3 s"
    )
    ds = tiny_beir(tmp_path / "tiny")
    done = _worker(["indexplug sqlite-fts5", str(ds), "--repeats", "1"], timeout=600)
    assert isinstance(done, dict) and done["quality"]["ndcg_at_10"] == 1.0
    assert list(scratch.iterdir()) == []


def test_a_pair_in_one_process_is_measured_in_turns_and_judges_the_overhead(
    tmp_path: Path,
) -> None:
    from indexplug_bench.report import targets

    ds = tiny_beir(tmp_path / "tiny")
    one = sqlite_pair(ds, tmp_path / "work")
    assert one["answered"] == {"system": 1, "raw": 1} and one["same_top_hit"] == 1
    assert one["failures"] == {"system": {}, "raw": {}}
    lat = one["latency_ms"]
    # the ratio is of the unrounded medians; each p50 shown is rounded to 0.001 ms, which on a
    # three-passage corpus (medians of a few hundredths of a ms) moves their ratio by over 1%
    s, r, half = lat["system"]["p50"], lat["raw"]["p50"], 0.0005
    assert (s - half) / (r + half) <= one["ratio_p50"] <= (s + half) / max(r - half, 1e-9)

    out = tmp_path / "paired.json"
    got = sqlite_pair_cli("paired", ds, out, "--repeats", "2", "--top-k", "10", "--replay")
    (pair,) = got["paired"]
    assert pair["repeats"] == 2 and len(pair["ratio_p50"]) == 2
    assert "replayed_p50_ms" not in pair  # SQLite's calls are not named for a replay
    assert pair["raw"] == "raw sqlite3 FTS5 (same query)" and pair["same_top_hit"] == 1

    # the verdict comes from the pair; the separate-process ratio is shown beside it
    machine = {"cores": 2, "memory_gib": 1, "platform": "x", "python": "3.11", "versions": {}}

    def row(system: str, p50: float, raw_of: str | None = None) -> dict[str, Any]:
        return {
            "system": system,
            "dataset": "scifact",
            "top_k": 10,
            "raw_of": raw_of,
            "latency_ms": {"p50": [p50], "p95": [p50], "p99": [p50], "mean": [p50]},
            "index_passages_per_s": [1.0],
            "quality": None,
            "size_bytes": 1,
            "peak_rss_mb": 1.0,
            "failures": {},
        }

    quality = [row("indexplug sqlite-fts5", 3.0, pair["raw"]), row(pair["raw"], 2.0)]
    # a pair with another baseline (an earlier choice of raw library) does not judge it
    stale = {**pair, "raw": "bm25s", "ratio_p50": [3.0]}
    current = {**pair, "ratio_p50": [1.05, 1.02, 1.2]}
    judged = {a: (c, d) for a, _, c, d in targets({"quality": quality, "paired": [current, stale]})}
    measured, verdict = judged[f"overhead of indexplug sqlite-fts5 over {pair['raw']}, top 10"]
    assert verdict == "met" and measured.startswith("1.05x in turns in one process")
    assert "1.50x between processes (3.00 / 2.00 ms, run 1)" in measured
    apart = {a: d for a, _, _, d in targets({"quality": quality})}
    assert apart[f"overhead of indexplug sqlite-fts5 over {pair['raw']}, top 10"] == "not met"
    # sqlite-fts5 must stay faster than raw FTS5 running the same query
    faster = judged["sqlite-fts5 against raw FTS5 with the same query, top 10"]
    assert faster[1] == "not met" and faster[0].startswith("1.05x in turns")

    merged = merge(
        [
            {"machine": machine, "command": "run", "quality": quality, "scale": [], "skipped": {}},
            got,
        ]
    )
    assert [r["run"] for r in merged["paired"]] == [1]
    md = tmp_path / "b.md"
    render(merged, md, tmp_path / "img")
    text = md.read_text()
    assert "## The framework's own work per search, in turns in one process" in text
    assert (
        "- run 2: `python -m indexplug_bench paired" in text
    )  # the section names the command behind its rows
    assert f"| indexplug sqlite-fts5 | {pair['raw']} | 10 |" in text
    assert "| 1 of 1 |" in text


def test_the_steps_of_a_pair_are_timed_in_place_and_the_timers_removed_after(
    tmp_path: Path,
) -> None:
    from indexplug import Guard
    from indexplug_bench.steps import for_pair
    from indexplug_sqlite_fts5.backend import SqliteFts5Backend

    originals = (Guard._run, Guard._checked_hits, SqliteFts5Backend.search)
    ds = tiny_beir(tmp_path / "tiny")
    system, raw = SQLITE_PAIR
    one = sqlite_pair(ds, tmp_path / "work", steps=for_pair(system, raw))
    assert (Guard._run, Guard._checked_hits, SqliteFts5Backend.search) == originals
    assert one["answered"] == {"system": 1, "raw": 1} and one["same_top_hit"] == 1
    steps = one["steps_ms"]["system"]
    assert set(steps) == {
        "guard: checks of the hits",
        "backend: whole search",
        "guard: before the op (checks, hand-off)",
        "guard: after the op (checks, hand-back)",
    }
    assert all(ms > 0 for ms in steps.values())
    # the guard's checks happen after the backend's search, inside the guard's call
    assert steps["guard: checks of the hits"] <= steps["guard: after the op (checks, hand-back)"]
    assert steps["backend: whole search"] < one["latency_ms"]["system"]["p50"]
    assert one["steps_ms"]["raw"] == {}  # no step of the raw sqlite3 side is named

    out = tmp_path / "steps.json"
    (row,) = sqlite_pair_cli("steps", ds, out, "--top-k", "10")["steps"]
    assert row["system"] == system and row["steps_ms"]["system"]["backend: whole search"] > 0


def test_a_replay_answers_the_library_calls_from_its_record_and_counts_mismatches() -> None:
    from indexplug.counts import CountCache
    from indexplug_bench import worker
    from indexplug_bench.replay import Replay

    originals = (worker.pct, CountCache.fresh)
    data = [1.0, 2.0, 3.0]
    counts = CountCache()
    counts.keep("k", 0, 5)
    replay = Replay(("indexplug_bench.worker:pct",), evict_mb=1)

    def search(i: int) -> list[str]:
        return [str(worker.pct(data, 0.5))]

    with replay.installed():
        assert counts.fresh("k", 60.0)[0] == 5
        recorded = replay.recorded(0, lambda: search(0) + [str(counts.fresh("k", 60.0)[0])])
        assert recorded == ["2.0", "None"]  # while recording, no kept count is fresh
        assert counts.fresh("k", 60.0)[0] == 5
        in_place = [recorded[:1]]
        data[:] = [7.0, 8.0, 9.0]  # the library would now answer otherwise
        got = replay.measure(search, in_place, wait_ms=0.1)
        assert got["replay_mismatches"] == {}  # answered from the record, not the library
        assert set(got["replayed_p50_ms"]) == {"warm", "after a wait"}
        assert all(ms > 0 for ms in got["replayed_p50_ms"].values())
        # an answer unlike the one given in place is counted and left out of the medians
        wrong = replay.measure(search, [["3.0"]], wait_ms=0.1)
        assert wrong == {"replayed_p50_ms": {}, "replay_mismatches": {"warm": 1, "after a wait": 1}}
        # neither recording nor replaying: the library itself answers
        assert worker.pct(data, 0.5) == 8.0
    assert (worker.pct, CountCache.fresh) == originals


def test_a_replay_records_in_the_warm_up_of_a_pair_and_never_in_its_timed_pass(
    tmp_path: Path,
) -> None:
    from indexplug.counts import CountCache
    from indexplug_bench.replay import Replay
    from indexplug_sqlite_fts5 import postings, pruning

    originals = (postings.top_k, pruning.top_k, CountCache.fresh)
    ds = tiny_beir(tmp_path / "tiny")
    # the plugin's ranking stands in for a library call here: one of the two runs per search
    replay = Replay(
        ("indexplug_sqlite_fts5.postings:top_k", "indexplug_sqlite_fts5.pruning:top_k"),
        evict_mb=1,
    )
    with pytest.raises(ValueError, match="warm-up"):
        sqlite_pair(ds, tmp_path / "w0", warmup=1, replay=replay)
    # the first pass warms the plugin (a thread's first search is ranked by FTS5, later ones
    # from postings in memory): the second records the calls a warm process makes
    row = sqlite_pair(ds, tmp_path / "w", warmup=2, replay=replay)
    assert (postings.top_k, pruning.top_k, CountCache.fresh) == originals
    assert row["answered"] == {"system": 1, "raw": 1} and row["same_top_hit"] == 1
    assert row["replay_mismatches"] == {}
    assert set(row["replayed_p50_ms"]) == {"warm", "after a wait"}
    (record,) = replay._record.values()  # one query, one ranking call recorded for it
    assert len(record) == 1 and record[0][0] in replay.calls

    out = tmp_path / "replay.json"
    got = sqlite_pair_cli("replay", ds, out)
    assert got["replayed"] == []  # SQLite is called all through the plugin: no call to replay
    assert (
        "not named for a replay"
        in got["skipped"]["indexplug sqlite-fts5 with raw sqlite3 FTS5 (same query)"]
    )


def test_replayed_medians_of_every_repeat_are_combined_and_shown(tmp_path: Path) -> None:
    from indexplug_bench.paired import combine_pairs

    def repeat(warm: float, wait: float, raw: float, mismatched: int) -> dict[str, Any]:
        return {
            "system": "indexplug elastic BM25",
            "raw": "raw elasticsearch (same query, orjson)",
            "dataset": "scifact",
            "passages": 3,
            "queries": 1,
            "top_k": 100,
            "warmup": 1,
            "latency_ms": {"system": {"p50": raw + 1.0}, "raw": {"p50": raw}},
            "ratio_p50": (raw + 1.0) / raw,
            "query_ratio_p50": (raw + 1.0) / raw,
            "same_top_hit": 1,
            "answered": {"system": 1, "raw": 1},
            "failures": {"system": {}, "raw": {}},
            "load_avg": [0.5, 0.6],
            "replayed_p50_ms": {"warm": warm, "after a wait": wait},
            "replay_mismatches": {"after a wait": mismatched} if mismatched else {},
        }

    rows = [repeat(0.6, 1.0, 4.0, 0), repeat(0.5, 1.2, 5.0, 2), repeat(0.7, 0.9, 4.5, 1)]
    pair = combine_pairs(rows)
    assert pair["replayed_p50_ms"] == {"warm": [0.6, 0.5, 0.7], "after a wait": [1.0, 1.2, 0.9]}
    assert pair["replay_mismatches"] == {"after a wait": 3}
    # a pair whose repeats did not all replay has no replayed figures at all
    assert "replayed_p50_ms" not in combine_pairs([rows[0], {**rows[1], "replayed_p50_ms": {}}])

    machine = {"cores": 2, "memory_gib": 1, "platform": "x", "python": "3.11", "versions": {}}
    run = {"machine": machine, "command": "paired --replay", "quality": [], "scale": []}
    md = tmp_path / "b.md"
    render(merge([{**run, "skipped": {}, "paired": [pair]}]), md, tmp_path / "img")
    text = md.read_text()
    assert "### The framework's own work, replayed" in text
    # medians with their spread, and the warm median as a share of the raw median (0.6 / 4.5)
    assert "| indexplug elastic BM25 | 100 | 0.600 (0.500..0.700) | 1.000 (0.900..1.200) |" in text
    assert "| 4.50 | 13.3% | 3 |" in text


def test_a_guard_that_forgets_hashes_every_hit_and_the_page_shows_what_memory_buys(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from indexplug import Passage, Registry
    from indexplug_bench.paired import forget_checked
    from indexplug_bench.report import targets

    def searched_twice(forget: bool) -> int:
        guard = Registry().backend("sqlite-fts5", {}, home=tmp_path / f"forget-{forget}")
        try:
            guard.add("i", [Passage.create("cats purr softly", "beir://t/d0")], deadline_s=60)
            if forget:
                forget_checked(SimpleNamespace(guard=guard))
            for _ in range(2):
                assert guard.search("i", "cats", top_k=1, deadline_s=60).code == "SEARCHED"
            return len(guard._checked)
        finally:
            guard.close()

    assert searched_twice(forget=False) == 1 and searched_twice(forget=True) == 0
    with pytest.raises(ValueError):
        forget_checked(SimpleNamespace())

    ds = tiny_beir(tmp_path / "tiny")
    one = sqlite_pair(ds, tmp_path / "work", guard_memory=False)
    assert one["guard_memory"] is False and one["answered"] == {"system": 1, "raw": 1}
    got = sqlite_pair_cli(
        "paired", ds, tmp_path / "off.json", "--repeats", "1", "--no-guard-memory"
    )
    (off,) = got["paired"]
    assert off["guard_memory"] is False and off["top_k"] == 100

    def pair(system_ms: list[float], raw_ms: list[float], memory: bool) -> dict[str, Any]:
        return {
            **{k: v for k, v in off.items() if k != "guard_memory"},
            "p50_ms": {"system": system_ms, "raw": raw_ms},
            "ratio_p50": [s / r for s, r in zip(system_ms, raw_ms, strict=True)],
            "query_ratio_p50": [1.0, 1.0],
            "repeats": 2,
            **({} if memory else {"guard_memory": False}),
        }

    raw = "raw sqlite3 FTS5 (same query)"
    with_memory = {**pair([4.3, 4.5], [4.0, 4.0], True), "system": "x", "raw": "y"}
    without = {**pair([5.9, 6.1], [4.0, 4.0], False), "system": "x", "raw": "y"}
    fts5 = pair([1.0, 1.2], [2.0, 2.0], True)
    judged = {a: (c, d) for a, _, c, d in targets({"paired": [with_memory, without, fts5]})}
    # at top 100 the figure is absolute: 0.4 ms of own work, judged from the memory-on pair
    measured, verdict = judged["framework's own work per search, x over y, top 100"]
    assert verdict == "met" and measured.startswith("0.400 ms in turns in one process")
    assert (
        judged[f"framework's own work per search, indexplug sqlite-fts5 over {raw}, top 100"][1]
        == "met"
    )
    assert judged["sqlite-fts5 against raw FTS5 with the same query, top 100"][1] == "met"

    machine = {"cores": 2, "memory_gib": 1, "platform": "x", "python": "3.11", "versions": {}}
    runs = [
        {"machine": machine, "command": c, "quality": [], "scale": [], "skipped": {}, "paired": [r]}
        for c, r in (("paired", with_memory), ("paired --no-guard-memory", without))
    ]
    runs[1]["pair_notes"] = {"x": "an older set"}
    merged = merge(runs)
    assert len(merged["paired"]) == 2  # memory on and off are rows of their own
    assert merged["pair_notes"] == {"x": "an older set"}
    md = tmp_path / "b.md"
    render(merged, md, tmp_path / "img")
    text = md.read_text()
    assert "### What the guard's memory of checked passages buys" in text
    # own work 0.400 with memory, 2.000 without: 1,600 us a search, 16 a hit at top 100
    assert "| x | y | 100 | 0.400 (0.300..0.500) | 2.000 (1.900..2.100) |" in text
    assert "| 1600 | 16.0 |" in text
    assert "- **x**: an older set" in text
