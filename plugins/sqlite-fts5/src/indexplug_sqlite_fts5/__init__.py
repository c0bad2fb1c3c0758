"""indexplug's embedded default backend: SQLite FTS5 with BM25.

The names below are imported when first used: discovery imports this package for its
``plugin`` module and must not pay for the backend (or its libraries) until one is opened.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from indexplug_sqlite_fts5.backend import SqliteFts5Backend

__all__ = ["SqliteFts5Backend"]

_WHERE = {
    "SqliteFts5Backend": "indexplug_sqlite_fts5.backend",
}
"""Each name exported and the module defining it, imported on first use (PEP 562)."""


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
