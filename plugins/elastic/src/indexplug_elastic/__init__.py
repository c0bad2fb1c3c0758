"""indexplug's Elasticsearch backend (``elastic``).

``from indexplug_elastic import ElasticBackend`` imports the Elasticsearch client; discovery
goes through :mod:`indexplug_elastic.plugin`, which does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from indexplug_elastic.backend import ElasticBackend

__all__ = ["ElasticBackend"]


def __getattr__(name: str) -> Any:
    if name == "ElasticBackend":
        from indexplug_elastic.backend import ElasticBackend

        return ElasticBackend
    raise AttributeError(f"module 'indexplug_elastic' has no attribute {name!r}")
