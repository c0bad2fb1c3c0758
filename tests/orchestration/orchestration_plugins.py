"""Test-only backends registered programmatically (never installed): one that is not ready, one
that is slow, one that raises.  ``register()`` adds them to the process-wide registry; the MCP
launcher calls it before starting the server so a subprocess has them too."""

from __future__ import annotations

import time

from indexplug import (
    BackendSpec,
    Capabilities,
    IndexEmpty,
    IndexStatus,
    NoMatch,
    Readiness,
    ScoreScale,
    hookimpl,
)
from indexplug.plugins import get_registry

SCALE = ScoreScale(name="test_scale")


class _Base:
    description = "test backend"
    score_scale = SCALE
    capabilities = Capabilities()

    def readiness(self):
        return Readiness.yes()

    def add(self, index, passages, *, max_bytes, deadline):
        raise RuntimeError("this test backend does not store anything")

    def search(self, index, query, *, top_k, deadline, filters=None):
        return IndexEmpty(index=index)

    def remove(self, index, ids, *, deadline):
        raise RuntimeError("nothing to remove")

    def status(self, index, *, deadline):
        return IndexStatus(index=index, exists=False, passages=0)

    def close(self):
        pass


class DownBackend(_Base):
    """Like a server backend whose server is not running."""

    name = "test-down"

    def readiness(self):
        return Readiness.no("connection refused by 127.0.0.1:9 (the test server is down)")


class SlowBackend(_Base):
    """Answers every search after SLEEP_S seconds, whatever its deadline."""

    name = "test-slow"
    SLEEP_S = 3.0

    def search(self, index, query, *, top_k, deadline, filters=None):
        time.sleep(self.SLEEP_S)
        return NoMatch(index=index, searched=1)


class BrokenBackend(_Base):
    name = "test-broken"

    def search(self, index, query, *, top_k, deadline, filters=None):
        raise OSError("disk on fire")


class _Plugin:
    @hookimpl
    def indexplug_backends(self):
        return [
            BackendSpec(name="test-down", factory=lambda ctx: DownBackend()),
            BackendSpec(name="test-slow", factory=lambda ctx: SlowBackend()),
            BackendSpec(name="test-broken", factory=lambda ctx: BrokenBackend()),
        ]


def register() -> None:
    get_registry().register(_Plugin(), name="orchestration-test-plugins")
