"""A dense indexplug backend on usearch (HNSW), written as an outside author would.

The names below are imported when first used: discovery imports this package for its
``plugin`` module and must not pay for the backend (or its libraries) until one is opened.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from indexplug_usearch.backend import UsearchBackend

__all__ = ["UsearchBackend"]

_WHERE = {
    "UsearchBackend": "indexplug_usearch.backend",
}
"""Each name exported and the module defining it, imported on first use (PEP 562)."""


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
