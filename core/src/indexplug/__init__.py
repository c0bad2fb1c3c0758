"""indexplug: many retrieval index backends behind one honest interface.

The public surface, importable from here:

* passages: :class:`Passage`, :class:`Source`, :func:`passage_id`, :func:`passages_from_text`;
* outcomes: :class:`Searched`, :class:`NoMatch`, :class:`IndexEmpty`, :class:`IndexFailed`,
  :class:`IndexTimeout`, :class:`IndexUnavailable`, :class:`Indexed`, :class:`OverBudget`,
  :class:`Removed`, :class:`IndexStatus`;
* protocols for plugin authors: :class:`IndexBackend`, :class:`Embedder`, :data:`hookimpl`;
* entry points: :func:`open_backend` (a guarded backend), :func:`get_registry`.
"""

from indexplug.deadlines import Deadline
from indexplug.errors import (
    ConfigError,
    IndexplugError,
    InvalidIndexName,
    InvalidQuery,
    InvalidRequest,
    UnknownBackend,
    UnknownEmbedder,
)
from indexplug.guard import Guard
from indexplug.hookspecs import hookimpl
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    BadRequest,
    Degradation,
    Hit,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    NotAllowed,
    OverBudget,
    Removed,
    ScoreScale,
    Searched,
    outcome_from_json,
)
from indexplug.passages import Passage, Source, passage_id, passages_from_text
from indexplug.plugins import Registry, get_embedder, get_registry, open_backend
from indexplug.protocols import (
    BackendContext,
    BackendSpec,
    Capabilities,
    Embedder,
    EmbedderSpec,
    Granularity,
    IndexBackend,
    Readiness,
)

__version__ = "0.1.0"

__all__ = [
    "BackendContext",
    "BackendSpec",
    "BadRequest",
    "Capabilities",
    "ConfigError",
    "Deadline",
    "Degradation",
    "Embedder",
    "EmbedderSpec",
    "Granularity",
    "Guard",
    "Hit",
    "IndexBackend",
    "IndexEmpty",
    "IndexFailed",
    "IndexStatus",
    "IndexTimeout",
    "IndexUnavailable",
    "Indexed",
    "IndexplugError",
    "InvalidIndexName",
    "InvalidQuery",
    "InvalidRequest",
    "NoMatch",
    "NotAllowed",
    "OverBudget",
    "Passage",
    "Readiness",
    "Registry",
    "Removed",
    "ScoreScale",
    "Searched",
    "Source",
    "UnknownBackend",
    "UnknownEmbedder",
    "get_embedder",
    "get_registry",
    "hookimpl",
    "open_backend",
    "outcome_from_json",
    "passage_id",
    "passages_from_text",
    "validate_index_name",
]
