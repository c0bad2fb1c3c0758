"""Migrating an index of the flat layout (as earlier versions wrote it) behind an alias."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest
from indexplug import Guard, Passage
from indexplug.cli.app import app
from indexplug.outcomes import Got, Indexed, IndexList, IndexStatus, Scanned, Searched
from indexplug_elastic import migrate
from indexplug_elastic.backend import ElasticBackend
from indexplug_elastic.testing.flat import write_flat
from indexplug_elastic.testing.server import EsCluster
from typer.testing import CliRunner

BackendMaker = Callable[..., Guard]


def corpus(n: int) -> list[Passage]:
    return [
        Passage.create(f"migrating words item{i}", f"mem://m/{i}", metadata={"i": i})
        for i in range(n)
    ]


def scan_ids(g: Guard, index: str) -> list[str]:
    ids: list[str] = []
    for page in g.scan_all(index, page=7):
        assert isinstance(page, Scanned), page
        ids += [p.id for p in page.passages]
    return ids


def test_a_flat_index_is_migrated_behind_an_alias_and_resumes(
    make_single: BackendMaker, es_single: EsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = make_single()
    raw = g.backend
    assert isinstance(raw, ElasticBackend)
    ps = corpus(23)
    es_index = raw.es_index("old")
    write_flat(es_single, es_index, ps)
    # a migration cut short after its first page leaves the old index as it was
    monkeypatch.setattr(migrate, "PAGE", 10)
    real = migrate._write_page
    pages = [0]

    def cut(*args: object, **kw: object) -> None:
        pages[0] += 1
        if pages[0] == 2:
            raise migrate.MigrationFailed("cut short")
        real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(migrate, "_write_page", cut)
    out = g.call_extra("migrate", "old")
    assert out.code == "INDEX_FAILED" and "cut short" in out.reason
    status, body = es_single.request("GET", f"/{es_index}/_count")
    assert status == 200 and body["count"] == len(ps)
    assert g.search("old", "migrating").error_type == "FlatLayout"  # type: ignore[union-attr]
    # run again: it resumes, and the alias now names the new index
    monkeypatch.setattr(migrate, "_write_page", real)
    out = g.call_extra("migrate", "old")
    assert isinstance(out, IndexStatus) and out.passages == len(ps), out
    _, aliases = es_single.request("GET", f"/_alias/{es_index}")
    assert list(aliases) == [es_index + ".nested"]
    found = g.search("old", "migrating item7", top_k=3)
    assert isinstance(found, Searched) and found.hits[0].passage == ps[7]
    got = g.get("old", [ps[3].id])
    assert isinstance(got, Got) and got.passages == [ps[3]]
    assert scan_ids(g, "old") == sorted(p.id for p in ps)
    listed = g.indexes()
    assert isinstance(listed, IndexList)
    assert [(i.name, i.passages) for i in listed.indexes] == [("old", len(ps))]
    # it is an index like any other now: keys, and migrating again changes nothing
    keyed = [Passage.create("keyed words", "mem://k", key="doc-1")]
    assert isinstance(g.add("old", keyed), Indexed)
    again = g.call_extra("migrate", "old")
    assert isinstance(again, IndexStatus) and again.passages == len(ps) + 1
    dropped = g.call_extra("drop", "old")
    assert isinstance(dropped, IndexStatus) and not dropped.exists
    status, _ = es_single.request("GET", f"/{es_index}.nested")
    assert status == 404


def test_the_cli_migrates_a_flat_index(make_single: BackendMaker, es_single: EsCluster) -> None:
    """``indexplug migrate`` as the flat index's refusal names it; a backend without the op
    is told so."""
    g = make_single()
    raw = g.backend
    assert isinstance(raw, ElasticBackend)
    ps = corpus(5)
    write_flat(es_single, raw.es_index("old"), ps)
    refusal = g.status("old")
    assert refusal.code == "INDEX_FAILED" and "indexplug migrate --index old" in refusal.reason  # type: ignore[union-attr]
    options = [
        "--option",
        f"hosts={json.dumps(es_single.urls)}",
        "--option",
        f"prefix={raw.opts.prefix}",
    ]
    r = CliRunner().invoke(
        app, ["migrate", "--index", "old", "--backend", "elastic", *options, "--json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["passages"] == len(ps)
    found = g.search("old", "migrating item2", top_k=1)
    assert isinstance(found, Searched) and found.hits[0].passage == ps[2]
    assert os.environ["INDEXPLUG_HOME"]  # each test its own home (conftest)
    r = CliRunner().invoke(app, ["migrate", "--index", "old", "--backend", "sqlite-fts5"])
    assert r.exit_code != 0 and "does not offer 'migrate'" in r.output
