"""Registration: the ``indexplug`` entry point of this distribution points here."""

from __future__ import annotations

from indexplug.hookspecs import hookimpl
from indexplug.protocols import BackendContext, BackendSpec

from indexplug_sqlite_fts5.backend import DESCRIPTION, SqliteFts5Backend


def _factory(ctx: BackendContext) -> SqliteFts5Backend:
    return SqliteFts5Backend(ctx.home, **dict(ctx.options))


@hookimpl
def indexplug_backends() -> list[BackendSpec]:
    return [BackendSpec(name="sqlite-fts5", factory=_factory, description=DESCRIPTION)]
