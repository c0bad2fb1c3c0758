"""Registration: the ``indexplug`` entry point of this distribution points here.

Importing this module does not import chromadb (a second of imports, and telemetry settings to
get right): the backend imports it on first use, and a missing chromadb shows as *not ready*.
"""

from __future__ import annotations

from indexplug.hookspecs import hookimpl
from indexplug.protocols import BackendContext, BackendSpec

from indexplug_chroma.backend import ChromaBackend
from indexplug_chroma.scale import DESCRIPTION
from indexplug_chroma.settings import ChromaSettings


def make_backend(ctx: BackendContext) -> ChromaBackend:
    """The factory: parses settings and connects to nothing (that waits for the first op)."""
    return ChromaBackend(
        ctx.home, ChromaSettings.from_options(ctx.options), embedder_factory=ctx.embedder_factory
    )


@hookimpl
def indexplug_backends() -> list[BackendSpec]:
    return [BackendSpec(name="chroma", factory=make_backend, description=DESCRIPTION)]
