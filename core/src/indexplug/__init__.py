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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    "ALLOWED": "indexplug.outcomes",
    "AddOutcome": "indexplug.outcomes",
    "BackendContext": "indexplug.protocols",
    "BackendSpec": "indexplug.protocols",
    "BadRequest": "indexplug.outcomes",
    "Capabilities": "indexplug.protocols",
    "ConfigError": "indexplug.errors",
    "Deadline": "indexplug.deadlines",
    "Degradation": "indexplug.outcomes",
    "Embedder": "indexplug.protocols",
    "EmbedderSpec": "indexplug.protocols",
    "Granularity": "indexplug.protocols",
    "Guard": "indexplug.guard",
    "Hit": "indexplug.outcomes",
    "IndexBackend": "indexplug.protocols",
    "IndexEmpty": "indexplug.outcomes",
    "IndexEmptyError": "indexplug.errors",
    "IndexFailed": "indexplug.outcomes",
    "IndexFailedError": "indexplug.errors",
    "IndexStatus": "indexplug.outcomes",
    "IndexTimeout": "indexplug.outcomes",
    "IndexTimeoutError": "indexplug.errors",
    "IndexUnavailable": "indexplug.outcomes",
    "IndexUnavailableError": "indexplug.errors",
    "Indexed": "indexplug.outcomes",
    "IndexplugError": "indexplug.errors",
    "InvalidIndexName": "indexplug.errors",
    "InvalidOption": "indexplug.errors",
    "InvalidQuery": "indexplug.errors",
    "InvalidRequest": "indexplug.errors",
    "NoMatch": "indexplug.outcomes",
    "NotAllowed": "indexplug.outcomes",
    "OutcomeError": "indexplug.errors",
    "OverBudget": "indexplug.outcomes",
    "OverBudgetError": "indexplug.errors",
    "Passage": "indexplug.passages",
    "Readiness": "indexplug.protocols",
    "Registry": "indexplug.plugins",
    "RemoveOutcome": "indexplug.outcomes",
    "Removed": "indexplug.outcomes",
    "ScoreScale": "indexplug.outcomes",
    "SearchOutcome": "indexplug.outcomes",
    "Searched": "indexplug.outcomes",
    "Source": "indexplug.passages",
    "StatusOutcome": "indexplug.outcomes",
    "UnknownBackend": "indexplug.errors",
    "UnknownEmbedder": "indexplug.errors",
    "effective_max_bytes": "indexplug.budget",
    "get_embedder": "indexplug.plugins",
    "get_registry": "indexplug.plugins",
    "hookimpl": "indexplug.hookspecs",
    "invoke": "indexplug.invocation",
    "open_backend": "indexplug.plugins",
    "outcome_from_json": "indexplug.outcomes",
    "over_budget": "indexplug.budget",
    "passage_id": "indexplug.passages",
    "passages_from_text": "indexplug.passages",
    "raise_for_outcome": "indexplug.errors",
    "validate_index_name": "indexplug.names",
}
"""Where each public name lives.  They are imported on first use (PEP 562), so a command that
needs only some of them (``indexplug --help``, ``invoke status``) does not pay for the rest:
numpy and the outcome models' schemas among them."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'indexplug' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
