"""How indexplug finds the backend: a hookimpl in the module the entry point names.

Discovery imports this module in every ``indexplug`` process, even ``indexplug status`` on
another backend, so it stays light: it names the backend and imports the backend module (and
whatever library the backend needs) only in the factory, when a backend is opened.

The factory is also where settings (``--option KEY=VALUE``, or an index's ``settings`` table in
``indexplug.toml``) are checked: refuse an unknown key or a bad value with
:class:`indexplug.InvalidOption` naming it, and the user gets one sentence (the CLI's usage exit
code, ``BAD_REQUEST`` over ``invoke`` and MCP) instead of a traceback or a silent default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import indexplug

if TYPE_CHECKING:
    from indexplug_template_backend.backend import TemplateBackend

BACKEND_NAME = "template-backend"
DESCRIPTION = "Template: one JSON file per index, word-overlap scoring."

SETTINGS = ("min_overlap",)


def settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """The backend's keyword arguments from its raw settings, each checked."""
    unknown = sorted(str(k) for k in options if k not in SETTINGS)
    if unknown:
        raise indexplug.InvalidOption(
            unknown[0],
            f"unknown {BACKEND_NAME} setting(s): {', '.join(unknown)} "
            f"(known: {', '.join(SETTINGS)})",
        )
    out: dict[str, Any] = {}
    if "min_overlap" in options:
        value = options["min_overlap"]
        # --option parses values as JSON (min_overlap=2 is an int); other sources give text
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                pass  # refused just below, naming the setting
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
            raise indexplug.InvalidOption(
                "min_overlap",
                f"{BACKEND_NAME} setting min_overlap must be a whole number from 1 to 1000, "
                f"got {value!r}",
            )
        out["min_overlap"] = value
    return out


def _factory(ctx: indexplug.BackendContext) -> TemplateBackend:
    from indexplug_template_backend.backend import TemplateBackend

    return TemplateBackend(ctx.home, **settings(ctx.options))


@indexplug.hookimpl
def indexplug_backends() -> list[indexplug.BackendSpec]:
    return [
        indexplug.BackendSpec(
            name=BACKEND_NAME,
            factory=_factory,
            description=DESCRIPTION,
        )
    ]
