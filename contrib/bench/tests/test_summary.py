"""The benchmarks page's lead is picked from its own rows, and follows them when they change."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from indexplug_bench.report import merge, page
from indexplug_bench.summary import which_backend

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "docs" / "benchmarks.json"


def row(system: str, *, p50: float, ndcg: float, pps: float, top_k: int = 10, run: int = 0) -> Any:
    return {
        "system": system,
        "kind": "indexplug",
        "top_k": top_k,
        "latency_ms": {"p50": [p50, p50 + 1, p50 - 0.01]},
        "index_passages_per_s": [pps],
        "quality": {"ndcg_at_10": ndcg},
        "failures": {},
        "run": run,
    }


def picks(results: dict[str, Any]) -> dict[str, str]:
    """``{use: backend}`` from the summary's table."""
    out = {}
    for line in which_backend(results):
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[0] not in ("for",):
            out[cells[0]] = cells[1]
    return out


def made_up() -> dict[str, Any]:
    return {
        "quality": [
            row("indexplug sqlite-fts5", p50=0.2, ndcg=0.68, pps=13000),
            row("indexplug elastic BM25", p50=1.7, ndcg=0.68, pps=4000, run=1),
            row("indexplug chroma (MiniLM)", p50=12.0, ndcg=0.64, pps=450, run=2),
            row("indexplug elastic hybrid (MiniLM)", p50=25.0, ndcg=0.71, pps=1300, run=3),
            row("indexplug colbert native (hashing)", p50=0.1, ndcg=0.99, pps=99999, run=4),
        ],
        "scale": [],
    }


def test_each_use_gets_the_row_its_figures_pick() -> None:
    got = picks(made_up())
    assert got == {
        "keyword search on one machine, no server": "sqlite-fts5",
        "keyword search on a server or a cluster": "elastic BM25",
        "search by meaning on one machine": "chroma (MiniLM)",
        "the best ranking on one machine": "sqlite-fts5",
        "the best ranking with a server": "elastic hybrid (MiniLM)",
    }  # the hashing row, a test embedder, is never a pick for all its made-up figures


def test_the_lead_follows_the_figures() -> None:
    results = made_up()
    results["quality"].append(
        row("indexplug colbert native (MiniLM tokens)", p50=5.0, ndcg=0.70, pps=130, run=5)
    )
    got = picks(results)
    assert got["search by meaning on one machine"] == "colbert native (MiniLM tokens)"
    assert got["the best ranking on one machine"] == "colbert native (MiniLM tokens)"
    failed = copy.deepcopy(results)
    failed["quality"][-1]["failures"] = {"INDEX_TIMEOUT": 1}
    assert picks(failed)["search by meaning on one machine"] == "chroma (MiniLM)"


def test_every_figure_of_the_lead_is_in_its_rows_table_row() -> None:
    """On the real results: each pick's p50, nDCG@10 and indexing rate appear in the quality
    table's row of that system, top k and run."""
    results = merge([json.loads(RESULTS.read_text())])
    text = page(results, REPO / "docs" / "benchmarks.md", [])
    table = [ln for ln in text.splitlines() if ln.startswith("| indexplug ")]
    lead = which_backend(results)
    checked = 0
    for line in lead:
        m = re.search(
            r"\| [^|]+ \| (?P<system>[^|]+) \| [^|]*nDCG@10 (?P<ndcg>[\d.]+); p50 (?P<p50>[\d.]+) "
            r"ms at top (?P<k>\d+); indexing (?P<pps>[\d,]+) passages/s[ †]* \(run (?P<run>\d+)\)",
            line,
        )
        if not m:
            continue
        rows = [
            r
            for r in table
            if r.startswith(f"| indexplug {m['system']}")
            and r.split(" | ")[1] == m["k"]
            and r.rstrip(" |").endswith(f"| {m['run']}")
        ]
        assert len(rows) == 1, (line, rows)
        cells = rows[0].split(" | ")
        assert cells[2] == m["ndcg"]
        assert cells[5].startswith(m["pps"])
        assert cells[6].startswith(m["p50"] + " ")
        checked += 1
    assert checked >= 4, lead
