"""Typed errors for requests that are wrong before any backend is asked.

Ops answer with outcomes; these exceptions are for caller mistakes the guard refuses up front
(a name that is a path, a ``top_k`` of -1, an oversize batch).  They all derive from
``ValueError`` as well, so generic callers can catch them, and carry the offending field so
``invoke`` can answer ``BAD_REQUEST`` naming it.
"""

from __future__ import annotations


class IndexplugError(Exception):
    """Base of every error indexplug raises on purpose."""


class InvalidRequest(IndexplugError, ValueError):
    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotSupported(InvalidRequest):
    """An op of an optional capability the backend does not claim (``vectors``: adding with
    vectors, searching by one), refused before the backend is asked: a ``BAD_REQUEST``
    naming the capability (:attr:`capability`), never a result computed some other way."""

    def __init__(self, backend: str, capability: str, op: str) -> None:
        super().__init__(
            f"backend '{backend}' does not support {capability} (it does not claim the "
            f"'{capability}' capability), so it cannot {op}",
            field="op",
        )
        self.backend = backend
        self.capability = capability


class InvalidIndexName(InvalidRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, field="index")


class InvalidQuery(InvalidRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, field="query")


class InvalidOption(InvalidRequest):
    """A backend or embedder setting its factory refuses: an unknown key or a bad value.

    Factories raise it (``raise InvalidOption("port", "chroma option port must be at most
    65535, got 70000")``) so that a caller is told which setting is wrong instead of seeing a
    traceback: the CLI prints ``message`` and exits with the usage code, ``invoke`` and MCP
    answer ``BAD_REQUEST`` with ``field`` ``settings.<option>``.  ``option`` is ``None`` only
    when a factory's refusal did not say which setting it meant.  ``message`` is the whole
    sentence shown to the user, so it should name the option itself.
    """

    def __init__(self, option: str | None, message: str) -> None:
        super().__init__(message, field=f"settings.{option}" if option is not None else "settings")
        self.option = option


class UnknownBackend(IndexplugError, LookupError):
    pass


class UnknownEmbedder(IndexplugError, LookupError):
    pass


class ConfigError(IndexplugError, ValueError):
    """A configuration file or setting is wrong; the message names the file, table and key."""


class OutcomeError(IndexplugError):
    """An outcome that is not a result, raised by :func:`raise_for_outcome` (and by the
    framework adapters) so that a failure can never pass for an empty list of hits."""

    def __init__(self, outcome: object) -> None:
        super().__init__(getattr(outcome, "message", str(outcome)))
        self.outcome = outcome
        self.code = str(getattr(outcome, "code", ""))


class IndexEmptyError(OutcomeError):
    """Nothing is indexed under that name: there was nothing to search."""


class IndexFailedError(OutcomeError):
    pass


class IndexTimeoutError(OutcomeError):
    pass


class IndexUnavailableError(OutcomeError):
    pass


class OverBudgetError(OutcomeError):
    pass


_RAISES: dict[str, type[OutcomeError]] = {
    "INDEX_EMPTY": IndexEmptyError,
    "INDEX_FAILED": IndexFailedError,
    "INDEX_TIMEOUT": IndexTimeoutError,
    "INDEX_UNAVAILABLE": IndexUnavailableError,
    "OVER_BUDGET": OverBudgetError,
    "BAD_REQUEST": OutcomeError,
    "NOT_ALLOWED": OutcomeError,
}


def raise_for_outcome(outcome: object, *, empty_is_error: bool = True) -> None:
    """Raise the typed :class:`OutcomeError` for an outcome that is not a result.

    ``SEARCHED``, ``NO_MATCH`` (the index answered: nothing matched) and successful writes pass.
    ``INDEX_EMPTY`` raises unless ``empty_is_error=False``: for a retriever, an empty index is
    almost always a deployment mistake, not an answer.
    """
    code = str(getattr(outcome, "code", ""))
    if code == "INDEX_EMPTY" and not empty_is_error:
        return
    cls = _RAISES.get(code)
    if cls is not None:
        raise cls(outcome)
