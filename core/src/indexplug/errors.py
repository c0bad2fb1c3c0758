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


class InvalidIndexName(InvalidRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, field="index")


class InvalidQuery(InvalidRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, field="query")


class UnknownBackend(IndexplugError, LookupError):
    pass


class UnknownEmbedder(IndexplugError, LookupError):
    pass


class ConfigError(IndexplugError, ValueError):
    """A configuration file or setting is wrong; the message names the file, table and key."""
