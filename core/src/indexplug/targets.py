"""One index as the CLI, ``invoke`` and fusion address it: a guarded backend and its name.

:class:`Target` sits below the command line and the configuration, so the library (config,
invoke, fusion) builds targets without importing the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from indexplug.guard import Guard


@dataclass
class Target:
    """One index as the CLI and ``invoke`` address it."""

    index: str
    backend_name: str
    guard: Guard
    options: dict[str, Any] = field(default_factory=dict)
    max_bytes: int | None = None
    searcher: Callable[..., Any] | None = None
    """Overrides :meth:`search` (fusion indexes search several legs)."""

    def search(self, query: str, *, top_k: int = 10, deadline_s: float | None = None) -> Any:
        if self.searcher is not None:
            return self.searcher(query, top_k=top_k, deadline_s=deadline_s)
        return self.guard.search(self.index, query, top_k=top_k, deadline_s=deadline_s)

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend_name, **self.options}

    def drop(self) -> bool:
        """Delete the whole index when the backend offers ``drop``; False when it cannot."""
        if not callable(getattr(self.guard.backend, "op_drop", None)):
            return False
        self.guard.drop(self.index)
        return True
