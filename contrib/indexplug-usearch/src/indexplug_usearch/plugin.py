"""Registration through the ``indexplug`` entry point group, like any outside plugin.

Discovery imports this module for every command, so it imports neither the backend module nor
usearch and numpy: the factory imports them when a backend is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import indexplug

if TYPE_CHECKING:
    from indexplug_usearch.backend import UsearchBackend

DESCRIPTION = "Third-party dense backend: usearch HNSW graph over SQLite-stored passages."


def _factory(ctx: indexplug.BackendContext) -> UsearchBackend:
    from indexplug_usearch.backend import UsearchBackend

    options = dict(ctx.options)
    spec = str(options.pop("embedder", "hashing:default"))
    return UsearchBackend(ctx.home, embedder=ctx.embedder(spec), **options)


@indexplug.hookimpl
def indexplug_backends() -> list[indexplug.BackendSpec]:
    return [indexplug.BackendSpec(name="usearch", factory=_factory, description=DESCRIPTION)]
