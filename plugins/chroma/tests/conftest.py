"""Fixtures: a fresh indexplug home per test, and one real Chroma server per session."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chroma_helpers import FAST
from indexplug import Guard
from indexplug.plugins import get_registry
from indexplug_chroma import ChromaBackend, ChromaSettings
from indexplug_chroma.testing import ChromaServer


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own indexplug home (so the embedding cache is per test too)."""
    home = tmp_path / "home"
    monkeypatch.setenv("INDEXPLUG_HOME", str(home))
    monkeypatch.setenv("ANONYMIZED_TELEMETRY", "False")
    return home


@pytest.fixture(scope="session")
def chroma_server() -> Iterator[ChromaServer]:
    """A real ``chroma run`` on 127.0.0.1 with a temporary data folder."""
    server = ChromaServer()
    server.start()
    yield server
    server.close()


@pytest.fixture
def server_up(chroma_server: ChromaServer) -> ChromaServer:
    """The session server, running (a test that stopped it may have failed half-way)."""
    return chroma_server.start()


@pytest.fixture
def make_guard(tmp_path: Path) -> Iterator[Callable[..., Guard]]:
    """``make_guard(**options)``: a guarded chroma backend on ``tmp_path/chroma``."""
    made: list[Guard] = []

    def make(**options: Any) -> Guard:
        opts = {"embedder": FAST, **options}
        backend = ChromaBackend(
            tmp_path / "chroma",
            ChromaSettings.from_options(opts),
            embedder_factory=get_registry().embedder,
        )
        guard = Guard(backend, plugin="chroma")
        made.append(guard)
        return guard

    yield make
    for g in made:
        g.close()
