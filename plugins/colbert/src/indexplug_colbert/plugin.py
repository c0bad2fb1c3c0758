"""Registration: the ``indexplug`` entry point of this distribution points here.

Importing this module is cheap and safe: it imports neither the backend module (numpy) nor an
engine; the factory imports the backend when one is opened, engines are imported when an index
needs them, so a missing engine shows up as "not ready, because ..." rather than as a plugin that
fails to load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from indexplug.hookspecs import hookimpl
from indexplug.protocols import BackendContext, BackendSpec

if TYPE_CHECKING:
    from indexplug_colbert.backend import ColbertBackend

DESCRIPTION = (
    "Late interaction (ColBERT MaxSim): int8 token vectors in memory-mapped segments, "
    "centroid candidate generation, exact MaxSim re-ranking; engines: native, ragatouille."
)


def _factory(ctx: BackendContext) -> ColbertBackend:
    from indexplug_colbert.backend import ColbertBackend

    return ColbertBackend(ctx.home, ctx.options, ctx.embedder if ctx.embedder_factory else None)


@hookimpl
def indexplug_backends() -> list[BackendSpec]:
    return [BackendSpec(name="colbert", factory=_factory, description=DESCRIPTION)]
