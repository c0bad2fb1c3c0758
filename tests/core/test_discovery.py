"""Discovery through real entry points of an installed package (tests/fixtures/...)."""

from __future__ import annotations

import pytest
from indexplug import Registry, UnknownBackend, UnknownEmbedder
from indexplug.embedders.hashing import HashingEmbedder
from indexplug.protocols import Granularity


def test_entry_points_are_discovered_and_problems_reported() -> None:
    reg = Registry()
    names = reg.backend_names()
    assert "fake-memory" in names and "sqlite-fts5" in names
    problems = " | ".join(f"{p.plugin}: {p.problem}" for p in reg.problems)
    assert "fake-broken" in problems and "broken on purpose" in problems
    assert "'fake-memory' is already provided" in problems
    rows = {r.name: r for r in reg.describe_backends()}
    assert rows["sqlite-fts5"].ready and rows["sqlite-fts5"].score_scale is not None


def test_the_environment_restricts_which_plugins_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INDEXPLUG_PLUGINS", "sqlite-fts5,hashing")
    reg = Registry()
    assert reg.backend_names() == ["sqlite-fts5"]
    assert reg.problems == []
    with pytest.raises(UnknownBackend, match="installed: sqlite-fts5"):
        reg.backend("fake-memory")


def test_tracing_writes_each_hook_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INDEXPLUG_TRACE", "1")
    monkeypatch.setenv("INDEXPLUG_PLUGINS", "sqlite-fts5")
    Registry().backend_names()
    assert "indexplug_backends from 'sqlite-fts5'" in capsys.readouterr().err


def test_programmatic_registration_and_builtin_hashing_use_the_same_hooks() -> None:
    reg = Registry(load_entrypoints=False)
    assert reg.backend_names() == [] and reg.embedder_providers() == []
    import indexplug.embedders.hashing as hashing

    reg.register(hashing, name="hashing")
    emb = reg.embedder("hashing:64")
    assert isinstance(emb, HashingEmbedder) and emb.dim == 64
    assert reg.embedder("hashing:64") is emb
    with pytest.raises(UnknownEmbedder):
        reg.embedder("nope:x")
    with pytest.raises(UnknownEmbedder):
        reg.embedder("no-colon")


def test_a_raising_hook_is_reported_not_fatal() -> None:
    from indexplug import hookimpl

    class Bad:
        @hookimpl
        def indexplug_backends(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("hook exploded")

    reg = Registry(load_entrypoints=False)
    reg.register(Bad(), name="bad")
    assert reg.backend_names() == []
    assert any("hook exploded" in p.problem for p in reg.problems)


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    e = HashingEmbedder(128)
    a = e.embed_query("Protein folding in cells", Granularity.TEXT)
    b = HashingEmbedder(128).embed_query("Protein folding in cells", Granularity.TEXT)
    assert a.shape == (128,) and abs(float((a * a).sum()) - 1) < 1e-5
    assert (a == b).all()
    toks = e.embed_documents(["one two three"], Granularity.TOKEN)[0]
    assert toks.shape == (3, 128)
    close = float(e.embed_query("folding proteins", Granularity.TEXT) @ a)
    far = float(e.embed_query("stock market prices", Granularity.TEXT) @ a)
    assert close > far
