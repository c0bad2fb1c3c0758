"""Registration through the ``indexplug`` entry point group, like any outside plugin."""

from __future__ import annotations

import indexplug

from indexplug_usearch.backend import DESCRIPTION, UsearchBackend


def _factory(ctx: indexplug.BackendContext) -> UsearchBackend:
    options = dict(ctx.options)
    spec = str(options.pop("embedder", "hashing:default"))
    return UsearchBackend(ctx.home, embedder=ctx.embedder(spec), **options)


@indexplug.hookimpl
def indexplug_backends() -> list[indexplug.BackendSpec]:
    return [indexplug.BackendSpec(name="usearch", factory=_factory, description=DESCRIPTION)]
