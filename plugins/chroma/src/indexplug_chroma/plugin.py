"""Registration: the ``indexplug`` entry point of this distribution points here.

Importing this module imports neither chromadb (a second of imports, and telemetry settings to
get right) nor the backend module (numpy): the factory imports the backend when one is opened,
the backend imports chromadb on first use, and a missing chromadb shows as *not ready*.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from indexplug.hookspecs import hookimpl
from indexplug.protocols import BackendContext, BackendSpec

if TYPE_CHECKING:
    from indexplug_chroma.backend import ChromaBackend

DESCRIPTION = (
    "Chroma (official client): dense cosine search with an indexplug embedder; embedded "
    "folders or a Chroma server."
)


def make_backend(ctx: BackendContext) -> ChromaBackend:
    """The factory: parses settings and connects to nothing (that waits for the first op)."""
    from indexplug_chroma.backend import ChromaBackend
    from indexplug_chroma.settings import ChromaSettings

    return ChromaBackend(
        ctx.home, ChromaSettings.from_options(ctx.options), embedder_factory=ctx.embedder_factory
    )


@hookimpl
def indexplug_backends() -> list[BackendSpec]:
    return [BackendSpec(name="chroma", factory=make_backend, description=DESCRIPTION)]
