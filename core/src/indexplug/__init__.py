"""indexplug: many retrieval index backends behind one honest interface.

The public surface, importable from here:

* passages: :class:`Passage`, :class:`Source`, :func:`passage_id`, :func:`passages_from_text`;
* outcomes: :class:`Searched`, :class:`NoMatch`, :class:`IndexEmpty`, :class:`IndexFailed`,
  :class:`IndexTimeout`, :class:`IndexUnavailable`, :class:`Indexed`, :class:`OverBudget`,
  :class:`Removed`, :class:`IndexStatus`;
* protocols for plugin authors: :class:`IndexBackend`, :class:`Embedder`, :data:`hookimpl`;
* entry points: :func:`open_backend` (a guarded backend), :func:`get_registry`;
* ops by name, JSON in and out: :func:`invoke` (see ``docs/invoke.md``).
"""

from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.errors import (
    ConfigError,
    IndexEmptyError,
    IndexFailedError,
    IndexplugError,
    IndexTimeoutError,
    IndexUnavailableError,
    InvalidIndexName,
    InvalidOption,
    InvalidQuery,
    InvalidRequest,
    OutcomeError,
    OverBudgetError,
    UnknownBackend,
    UnknownEmbedder,
    raise_for_outcome,
)
from indexplug.guard import Guard
from indexplug.hookspecs import hookimpl
from indexplug.invocation import invoke
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    ALLOWED,
    AddOutcome,
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
    RemoveOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    StatusOutcome,
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
    "ALLOWED",
    "AddOutcome",
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
    "IndexEmptyError",
    "IndexFailed",
    "IndexFailedError",
    "IndexStatus",
    "IndexTimeout",
    "IndexTimeoutError",
    "IndexUnavailable",
    "IndexUnavailableError",
    "Indexed",
    "IndexplugError",
    "InvalidIndexName",
    "InvalidOption",
    "InvalidQuery",
    "InvalidRequest",
    "NoMatch",
    "NotAllowed",
    "OutcomeError",
    "OverBudget",
    "OverBudgetError",
    "Passage",
    "Readiness",
    "Registry",
    "RemoveOutcome",
    "Removed",
    "ScoreScale",
    "SearchOutcome",
    "Searched",
    "Source",
    "StatusOutcome",
    "UnknownBackend",
    "UnknownEmbedder",
    "effective_max_bytes",
    "get_embedder",
    "get_registry",
    "hookimpl",
    "invoke",
    "open_backend",
    "outcome_from_json",
    "over_budget",
    "passage_id",
    "passages_from_text",
    "raise_for_outcome",
    "validate_index_name",
]
