"""Registration: the ``indexplug`` entry point of this distribution points here.

Kept import-light on purpose (discovery imports every plugin): the backend module, and with it
the Elasticsearch client, is imported only when a backend is actually made.
"""

from __future__ import annotations

from typing import Any

from indexplug.hookspecs import hookimpl
from indexplug.protocols import BackendContext, BackendSpec

DESCRIPTION = (
    "Elasticsearch 8 (a node or a cluster): BM25 with English analysis, approximate kNN and "
    "RRF hybrid search."
)


def _factory(ctx: BackendContext) -> Any:
    from indexplug_elastic.backend import ElasticBackend

    # Never connects: the client is made on the first op or readiness check.
    return ElasticBackend(ctx.options, embedder_factory=ctx.embedder_factory)


@hookimpl
def indexplug_backends() -> list[BackendSpec]:
    return [BackendSpec(name="elastic", factory=_factory, description=DESCRIPTION)]
