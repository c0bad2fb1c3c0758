from __future__ import annotations

import json
from pathlib import Path

from indexplug.cli.app import app
from indexplug.outcomes import EXIT_CODES
from typer.testing import CliRunner

runner = CliRunner()


def run(*args: str, input: str | None = None):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args), input=input)


def test_index_search_status_remove_flow(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("Indexplug keeps retrieval honest with typed outcomes.\n")
    r = run("index", str(docs), "--index", "guide")
    assert r.exit_code == 0, r.output
    r = run("search", "typed outcomes", "--index", "guide", "--json")
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["code"] == "SEARCHED" and data["hits"][0]["passage"]["text"].startswith("Indexplug")
    pid = data["hits"][0]["passage"]["id"]
    r = run("search", "nothing-here-at-all", "--index", "guide")
    assert r.exit_code == EXIT_CODES["NO_MATCH"] and "NO_MATCH" in r.output
    r = run("search", "x", "--index", "empty-one")
    assert r.exit_code == EXIT_CODES["INDEX_EMPTY"]
    r = run("remove", pid, "--index", "guide", input="n\n")
    assert r.exit_code != 0
    # guide.md's passage and the ingest marker (docs/security.md, "What is confined")
    assert json.loads(run("status", "--index", "guide", "--json").output)["passages"] == 2
    r = run("remove", pid, "--index", "guide", "--yes", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["removed"] == 1


def test_add_jsonl_and_errors_are_one_sentence(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"text": "otters hold hands", "uri": "mem://o"}) + "\n")
    r = run("add", str(f), "--index", "o", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["added"] == 1
    f.write_text("{not json\n")
    r = run("add", str(f), "--index", "o")
    assert r.exit_code == 64 and "line 1" in r.output and "Traceback" not in r.output
    r = run("search", "x", "--index", "../../etc")
    assert r.exit_code == 64 and "never a path" in r.output
    r = run("search", "x", "--index", "o", "--backend", "nope")
    assert r.exit_code == 64 and "no backend named 'nope'" in r.output
    r = run("search", "x", "--index", "o", "-k", "0")
    assert r.exit_code == 64 and "top_k" in r.output


def test_backends_json_is_stable() -> None:
    r = run("backends", "--json")
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert {"backends", "embedders", "problems"} <= data.keys()
    row = next(b for b in data["backends"] if b["name"] == "sqlite-fts5")
    assert row["ready"] is True and row["score_scale"]["name"] == "fts5_bm25"


def test_eval_on_a_tiny_beir_dataset(tmp_path: Path) -> None:
    ds = tmp_path / "tiny"
    (ds / "qrels").mkdir(parents=True)
    docs = {"d1": "cats purr softly", "d2": "dogs bark loudly", "d3": "birds sing at dawn"}
    (ds / "corpus.jsonl").write_text(
        "\n".join(json.dumps({"_id": k, "title": "", "text": v}) for k, v in docs.items())
    )
    (ds / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "why do cats purr"})
        + "\n"
        + json.dumps({"_id": "q2", "text": "dogs that bark"})
    )
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    r = run("eval", str(ds), "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["ndcg_at_10"] == 1.0 and rep["queries"] == 2 and rep["outcomes"] == {"SEARCHED": 2}
    # one passage per add gives the same answer; a batch of 0 is refused before anything runs
    r = run("eval", str(ds), "--batch", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["ndcg_at_10"] == 1.0
    assert run("eval", str(ds), "--batch", "0").exit_code != 0
