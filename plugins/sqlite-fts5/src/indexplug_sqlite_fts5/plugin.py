"""Registration: the ``indexplug`` entry point of this distribution points here.

Discovery imports this module for every command, so it imports no backend: the factory imports
:mod:`indexplug_sqlite_fts5.backend` when a backend is opened.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from indexplug.errors import InvalidOption
from indexplug.hookspecs import hookimpl
from indexplug.protocols import BackendContext, BackendSpec

if TYPE_CHECKING:
    from indexplug_sqlite_fts5.backend import SqliteFts5Backend

DESCRIPTION = "Embedded default: SQLite FTS5 with BM25, one file per index, no server."

SETTINGS = {
    "cache_mb": 1 << 20,
    "postings_mb": 1 << 20,
    "busy_timeout_s": 3600,
}
"""Each setting with the largest value it takes: the page cache and the in-memory postings in
MiB (default 64 each; postings 0: off), and how long a write waits for another writer's lock in
seconds (default: the op's deadline)."""


def _number(key: str, value: Any) -> float:
    """A setting's value as a number from 0 to its largest (numbers, or text that reads as one:
    ``--option`` gives JSON numbers, other sources may give text); refused naming the key."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidOption(
            key, f"sqlite-fts5 setting {key} must be a number, got {type(value).__name__}"
        )
    try:
        number = float(value)
    except ValueError:
        raise InvalidOption(
            key, f"sqlite-fts5 setting {key} must be a number, got {value!r}"
        ) from None
    if not math.isfinite(number) or not 0 <= number <= SETTINGS[key]:
        raise InvalidOption(
            key, f"sqlite-fts5 setting {key} must be from 0 to {SETTINGS[key]}, got {value!r}"
        )
    return number


def settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """The backend's keyword arguments from raw settings: an unknown key or a value that is
    not a number in its range is refused with :class:`InvalidOption` naming it (a misspelt
    ``cache_md=512`` must not run silently with the default)."""
    unknown = sorted(str(k) for k in options if k not in SETTINGS)
    if unknown:
        raise InvalidOption(
            unknown[0],
            f"unknown sqlite-fts5 option(s): {', '.join(repr(k) for k in unknown)} "
            f"(known: {', '.join(SETTINGS)})",
        )
    out: dict[str, Any] = {}
    for key, value in options.items():
        number = _number(key, value)
        if key == "cache_mb":
            if number != int(number):
                raise InvalidOption(
                    key, f"sqlite-fts5 setting cache_mb must be whole MiB, got {value!r}"
                )
            out[key] = int(number)
        else:
            out[key] = number
    return out


def _factory(ctx: BackendContext) -> SqliteFts5Backend:
    from indexplug_sqlite_fts5.backend import SqliteFts5Backend

    return SqliteFts5Backend(ctx.home, **settings(ctx.options))


@hookimpl
def indexplug_backends() -> list[BackendSpec]:
    return [BackendSpec(name="sqlite-fts5", factory=_factory, description=DESCRIPTION)]
