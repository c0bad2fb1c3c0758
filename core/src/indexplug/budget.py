"""Storage budgets, the same rules for every backend.

The first write to an index sets ``max_bytes`` and the backend keeps it with the index.  A later
call may pass a smaller figure to cap *itself*, never a larger one to raise the stored budget.
A write is checked twice: projected before anything is written, and measured before it commits;
either check refusing leaves the index exactly as it was.  A size that cannot be read refuses
the write (fails closed): a budget that cannot be checked is not a budget.
"""

from __future__ import annotations

from indexplug.outcomes import OverBudget


def effective_max_bytes(stored: int | None, requested: int | None) -> int | None:
    """The budget a write is held to: the stored one, capped lower by this call if it asks."""
    if requested is not None and requested <= 0:
        raise ValueError(f"max_bytes must be positive, got {requested}")
    if stored is None:
        return requested
    if requested is None:
        return stored
    return min(stored, requested)


def over_budget(
    index: str,
    backend: str,
    *,
    needed: int | None,
    max_bytes: int | None,
    check: str,
    estimate: bool = False,
) -> OverBudget | None:
    """``OverBudget`` if ``needed`` exceeds ``max_bytes`` (or cannot be read), else ``None``."""
    if max_bytes is None:
        return None
    if needed is None:
        return OverBudget(
            index=index,
            backend=backend,
            max_bytes=max_bytes,
            needed_bytes=-1,
            check="unreadable",
            estimate=estimate,
        )
    if needed > max_bytes:
        return OverBudget(
            index=index,
            backend=backend,
            max_bytes=max_bytes,
            needed_bytes=needed,
            check=check,  # type: ignore[arg-type]
            estimate=estimate,
        )
    return None
