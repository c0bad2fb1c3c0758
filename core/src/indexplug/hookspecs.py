"""The hooks a plugin implements, in pluggy's hookspec style.

A plugin is a module (or object) registered under the entry point group ``indexplug`` whose
functions are marked with :data:`hookimpl`.  Core's own hashing embedder registers through these
same hooks, so there is no private path for built-ins.
"""

from __future__ import annotations

import pluggy

from indexplug.protocols import BackendSpec, EmbedderSpec

PROJECT = "indexplug"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def indexplug_backends() -> list[BackendSpec]:
    """Return the backends this plugin provides.

    Called once at discovery.  Keep it cheap and import-safe: do not import the backend's heavy
    library here (import it lazily in the factory or in ``readiness()``), so a missing optional
    dependency shows up as *not ready, because ...* instead of a plugin that fails to load.
    """
    return []


@hookspec
def indexplug_embedders() -> list[EmbedderSpec]:
    """Return the embedder providers this plugin provides.

    Each :class:`~indexplug.protocols.EmbedderSpec` names a provider (the part of the spec
    ``PROVIDER:MODEL`` before the colon) and a factory ``factory(model, options) -> Embedder``.
    """
    return []
