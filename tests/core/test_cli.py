from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
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
    # guide.md's passage only: the ingest bookkeeping is no passage (docs/security.md)
    assert json.loads(run("status", "--index", "guide", "--json").output)["passages"] == 1
    r = run("remove", pid, "--index", "guide", "--yes", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["removed"] == 1


def test_index_drops_a_lost_manifests_index_only_with_allow_drop(
    tmp_path: Path, _isolated_home: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Aardvarks eat ants at night.\n")
    assert run("index", str(docs), "--index", "guide").exit_code == 0
    (_isolated_home / "manifests" / "sqlite-fts5" / "guide.json").write_text("[1]")
    (docs / "a.md").write_text("Armadillos dig burrows.\n")
    r = run("index", str(docs), "--index", "guide")
    assert r.exit_code == EXIT_CODES["NOT_ALLOWED"] and "--allow-drop" in r.output
    assert run("search", "aardvarks", "--index", "guide").exit_code == 0  # nothing changed
    r = run("index", str(docs), "--index", "guide", "--allow-drop", "--json")
    assert r.exit_code == 0 and "dropped" in json.loads(r.output)["rebuilt"]
    assert run("search", "aardvarks", "--index", "guide").exit_code == EXIT_CODES["NO_MATCH"]


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


def _fill(tmp_path: Path, index: str, n: int = 6) -> Path:
    f = tmp_path / "in.jsonl"
    rows = [
        {
            "text": f"otter {i} holds hands by the river",
            "uri": f"mem://o/{i}",
            "metadata": {"n": i},
            **({"key": "doc-k"} if i < 2 else {}),
        }
        for i in range(n)
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run("add", str(f), "--index", index, "--json")
    assert r.exit_code == 0, r.output
    return f


def test_get_scan_indexes_and_drop(tmp_path: Path) -> None:
    _fill(tmp_path, "o")
    r = run("scan", "--index", "o", "--limit", "4", "--json")
    assert r.exit_code == 0, r.output
    page = json.loads(r.output)
    assert page["code"] == "SCANNED" and len(page["passages"]) == 4 and page["next_after"]
    r = run("scan", "--index", "o", "--after", page["next_after"], "--json")
    assert len(json.loads(r.output)["passages"]) == 2
    r = run("scan", "--index", "o", "--filter", '{"n": {"$gte": 4}}', "--json")
    assert sorted(p["metadata"]["n"] for p in json.loads(r.output)["passages"]) == [4, 5]
    r = run("scan", "--index", "o", "--filter", '{"n": {"$nope": 1}}')
    assert r.exit_code == 64 and "Traceback" not in r.output
    pid = page["passages"][0]["id"]
    r = run("get", pid, "f" * 64, "--index", "o", "--key", "doc-k", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["code"] == "GOT" and got["missing_ids"] == ["f" * 64]
    assert {p["key"] for p in got["passages"]} >= {"doc-k"}
    r = run("get", pid, "--index", "o")
    assert r.exit_code == 0 and "otter" in r.output
    assert run("get", "--index", "o").exit_code == 64
    r = run("indexes", "--json")
    assert r.exit_code == 0, r.output
    assert {"name": "o", "passages": 6} in json.loads(r.output)["indexes"]
    r = run("drop", "--index", "o", input="n\n")
    assert r.exit_code == 64
    r = run("drop", "--index", "o", "--yes", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["exists"] is False


def test_remove_by_key_and_filter(tmp_path: Path) -> None:
    _fill(tmp_path, "o")
    r = run("remove", "--index", "o", "--key", "doc-k", "--yes", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["removed"] == 2
    r = run("remove", "--index", "o", "--filter", '{"n": {"$in": [4, 5]}}', "--yes", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["removed"] == 2
    assert run("remove", "--index", "o", "--yes").exit_code == 64
    assert json.loads(run("status", "--index", "o", "--json").output)["passages"] == 2


def test_export_import_and_copy(tmp_path: Path) -> None:
    _fill(tmp_path, "src", 30)
    out = tmp_path / "dump.jsonl"
    r = run("export", str(out), "--index", "src", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["passages"] == 30 and len(out.read_text().splitlines()) == 30
    r = run("export", "-", "--index", "src")
    assert r.exit_code == 0 and len(r.output.splitlines()) == 30
    r = run("import", str(out), "--index", "restored", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["added"] == 30
    r = run("import", "-", "--index", "again", "--json", input=out.read_text())
    assert r.exit_code == 0 and json.loads(r.output)["added"] == 30
    lines = out.read_text().splitlines()
    row = json.loads(lines[4])
    row["text"] += "!"
    out.write_text("\n".join([*lines[:4], json.dumps(row)]) + "\n")
    r = run("import", str(out), "--index", "bad")
    assert r.exit_code == 64 and "line 5" in r.output and "Traceback" not in r.output
    assert run("import", str(tmp_path), "--index", "bad").exit_code == 64
    r = run("copy", "sqlite-fts5:src", "sqlite-fts5:copied", "--json")
    assert r.exit_code == 0, r.output
    done = json.loads(r.output)
    assert done["code"] == "COPIED" and done["added"] == 30
    v = done["verification"]
    assert v["missing_ids"] == 0 and v["scales_agree"] and v["queries"]
    assert all(q["agree"] for q in v["queries"])
    r = run("copy", "src", "sqlite-fts5:copied")
    assert r.exit_code == 0 and "COPIED" in r.output and "30 id(s), 0 missing" in r.output
    assert run("copy", "nope:", "sqlite-fts5:x").exit_code == 64


@pytest.mark.parametrize(
    ("argv", "terminal", "quiet"),
    [
        (["search", "otters", "--index", "docs"], True, False),  # a person at a terminal
        (["search", "otters", "--index", "docs", "--json"], True, True),
        (["invoke", "search", "--args", "{}"], True, True),
        (["serve"], True, True),
        (["search", "otters", "--index", "docs"], False, True),  # stderr to a file or a pipe
    ],
)
def test_library_progress_bars_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], terminal: bool, quiet: bool
) -> None:
    """transformers' "Loading weights" bars (and any tqdm bar) print only for a person."""
    from indexplug.cli.app import QUIET_PROGRESS, quiet_progress

    for key in QUIET_PROGRESS:
        monkeypatch.delenv(key, raising=False)
    assert quiet_progress(argv, terminal=terminal) is quiet
    assert {k: os.environ.get(k) for k in QUIET_PROGRESS} == {
        k: (v if quiet else None) for k, v in QUIET_PROGRESS.items()
    }


def test_a_progress_setting_the_caller_made_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from indexplug.cli.app import quiet_progress

    monkeypatch.setenv("TQDM_DISABLE", "0")
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    quiet_progress(["invoke", "status"], terminal=False)
    assert os.environ["TQDM_DISABLE"] == "0"
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
