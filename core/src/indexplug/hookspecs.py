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

    Called once at discovery, which every ``indexplug`` process runs, whatever backend it uses.
    So the module the entry point names (and its package's ``__init__``) imports no backend
    module and no backend library: each spec gives a name, a description and a factory, and
    the factory imports the backend module when a backend is opened; the backend imports its
    library there or in ``readiness()``.  A process that uses one backend then pays for no
    other, and a missing optional dependency shows up as *not ready, because ...* instead of a
    plugin that fails to load.
    """
    return []


@hookspec
def indexplug_embedders() -> list[EmbedderSpec]:
    """Return the embedder providers this plugin provides.

    Each :class:`~indexplug.protocols.EmbedderSpec` names a provider (the part of the spec
    ``PROVIDER:MODEL`` before the colon) and a factory ``factory(model, options) -> Embedder``.
    Called once at discovery, like :func:`indexplug_backends`, and kept as light: the factory
    imports the embedder's module and libraries when an embedder is made.
    """
    return []
