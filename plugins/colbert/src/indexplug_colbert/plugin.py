"""Registration: the ``indexplug`` entry point of this distribution points here.

Importing this module is cheap and safe: engines are imported when an index needs them, so a
missing engine shows up as "not ready, because ..." rather than as a plugin that fails to load.
"""

from __future__ import annotations

from indexplug.hookspecs import hookimpl
from indexplug.protocols import BackendContext, BackendSpec

from indexplug_colbert.backend import DESCRIPTION, ColbertBackend


def _factory(ctx: BackendContext) -> ColbertBackend:
    return ColbertBackend(ctx.home, ctx.options, ctx.embedder if ctx.embedder_factory else None)


@hookimpl
def indexplug_backends() -> list[BackendSpec]:
    return [BackendSpec(name="colbert", factory=_factory, description=DESCRIPTION)]
