"""Limits that keep ``serve --http`` answering its token holder through a connection flood.

uvicorn alone closes a connection only after a response (its keep-alive timeout): a client that
connects and sends nothing, or sends headers a byte at a time (slowloris), holds a file
descriptor for ever, and 1,100 of them exhaust a ``ulimit -n 1024`` process so that the token
holder's own connection is refused.  No token is needed for that, so every connection is held
to these limits before it is authenticated:

* the request headers must be complete ``header_timeout_s`` after the connection opened (or
  after the first byte of a later request), the body ``body_timeout_s`` after the headers, and
  a connection idle between requests is closed after ``idle_timeout_s``;
* at most ``max_connections`` are open (default: the soft ``RLIMIT_NOFILE`` less a quarter, at
  least 64, kept for the index files and the server itself); a new connection over the cap
  closes the *oldest one whose request is incomplete* (still sending its headers, or idle), so
  a flood displaces itself while a request being served is never cut;
* headers are at most 16 KiB, and the listen backlog is 128.

:func:`protocol_class` builds uvicorn's h11 protocol with these limits;
:func:`uvicorn_settings` the rest of uvicorn's configuration.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 5.0
MAX_HEADER_BYTES = 16 * 1024
BACKLOG = 128
RESERVED_FDS = 64
"""The fewest descriptors kept free of connections (index files, the server's own)."""


def default_max_connections() -> int:
    """The soft ``RLIMIT_NOFILE`` less a quarter of it, and at least :data:`RESERVED_FDS`
    less (at least 1); 1,024 where the limit cannot be read or is unlimited."""
    soft = 1024
    try:
        import resource

        got, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if got != resource.RLIM_INFINITY and got > 0:
            soft = int(got)
    except (ImportError, OSError, ValueError):
        pass
    return max(1, soft - max(soft // 4, RESERVED_FDS))


@dataclass(frozen=True)
class HttpLimits:
    """The limits of one server (see the module docstring)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    idle_timeout_s: float = IDLE_TIMEOUT_S
    max_connections: int | None = None
    """None: :func:`default_max_connections`."""

    def cap(self) -> int:
        return self.max_connections or default_max_connections()


class _Registry:
    """The open connections of one server, oldest first."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: OrderedDict[int, Any] = OrderedDict()


# the phases of a connection: its request's headers are awaited, its body is, it is served,
# or it is idle between requests
HEADERS, BODY, SERVED, IDLE = "headers", "body", "served", "idle"
INCOMPLETE = (HEADERS, IDLE)


def protocol_class(limits: HttpLimits) -> type:
    """uvicorn's h11 protocol held to ``limits`` (one registry per class: one server)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    registry = _Registry(limits.cap())

    class LimitedH11Protocol(H11Protocol):  # type: ignore[misc]
        """H11Protocol with header, body and idle deadlines and a connection cap."""

        _phase = HEADERS
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            registry.open[id(self)] = self
            self._arm(limits.header_timeout_s)
            while len(registry.open) > registry.cap:
                victim = next((c for c in registry.open.values() if c._phase in INCOMPLETE), self)
                victim._shed()
                if victim is self:
                    break

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            registry.open.pop(id(self), None)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._phase == IDLE:  # the first bytes of the next request
                self._phase = HEADERS
                self._arm(limits.header_timeout_s)
            super().data_received(data)

        def handle_events(self) -> None:
            super().handle_events()
            if self._phase not in (HEADERS, BODY, IDLE):
                return
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                if self._phase != BODY:
                    self._phase = BODY
                    self._arm(limits.body_timeout_s)
            elif state is not h11.IDLE:  # the whole request is in: served, however long
                self._phase = SERVED
                self._disarm()

        def on_response_complete(self) -> None:
            self._phase = IDLE  # uvicorn's keep-alive timer (idle_timeout_s) runs now
            self._disarm()
            super().on_response_complete()

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._timer = self.loop.call_later(seconds, self._shed)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _shed(self) -> None:
            """Close this connection (too slow, or displaced by a newer one at the cap)."""
            self._disarm()
            self._phase = "closed"
            registry.open.pop(id(self), None)
            if not self.transport.is_closing():
                self.transport.close()

    return LimitedH11Protocol


def uvicorn_settings(limits: HttpLimits) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` that apply ``limits``."""
    return {
        "http": protocol_class(limits),
        "timeout_keep_alive": limits.idle_timeout_s,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
        "backlog": BACKLOG,
    }
