"""A stand-in for the RAGatouille engine in tests that must see it installed: the native engine
under another name (so an index it builds is recorded as built by ``ragatouille``)."""

from __future__ import annotations

from indexplug_colbert.engines.native import OPTIONS, NativeEngine

__all__ = ["OPTIONS", "FakeRagatouilleEngine"]


class FakeRagatouilleEngine(NativeEngine):
    name = "ragatouille"
