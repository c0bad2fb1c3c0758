"""How indexplug finds the backend: a hookimpl in the module the entry point names."""

from __future__ import annotations

import indexplug

from indexplug_template_backend.backend import BACKEND_NAME, TemplateBackend


@indexplug.hookimpl
def indexplug_backends() -> list[indexplug.BackendSpec]:
    return [
        indexplug.BackendSpec(
            name=BACKEND_NAME,
            factory=lambda ctx: TemplateBackend(ctx.home),
            description=TemplateBackend.description,
        )
    ]
