"""Who is calling ``serve --http``, and how much they may: the bearer token's name, scope and
limits (see :mod:`indexplug.tokens`).

:class:`TokenVerifier` is the MCP SDK's token verifier over the named tokens (reread when their
file changes) and the single server token of earlier versions (a write-scoped token named
``http``).  :class:`TokenGate` is an ASGI middleware in front of the SDK's app: it finds the
token of each request, puts it in the request's scope (where the tool handlers read its name
and scope), and holds each named token to its limits.  A request over a limit is answered at
once, never queued: HTTP 429 with ``Retry-After`` and, as the body, a JSON-RPC error whose
``data`` is a typed answer (code ``RATE_LIMITED``), which an MCP client surfaces as the error
of the call it made.  Only POST requests (each carries MCP messages: a tool call, a listing,
the session's handshake) count against the limits; the GET that keeps a session's event stream
open, and the DELETE that ends a session, do not.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from indexplug.tokens import Limiter, NamedToken, TokenBook

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken

SCOPE_KEY = "indexplug.token"
"""Where :class:`TokenGate` leaves the request's :class:`NamedToken` in its ASGI scope."""
LEGACY_NAME = "http"
RATE_LIMITED = "RATE_LIMITED"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TokenVerifier:
    """The named tokens, and the single server token (``static``) if there is one."""

    def __init__(self, book: TokenBook | None, static: str | None) -> None:
        self.book = book
        self._static = static.encode("utf-8") if static is not None else None
        self._legacy = NamedToken(name=LEGACY_NAME, scope="write", sha256="", created=0.0)

    def identify(self, presented: str) -> NamedToken | None:
        """The token ``presented`` is, or None (every comparison in constant time)."""
        found = self.book.lookup(presented) if self.book is not None else None
        if self._static is not None and hmac.compare_digest(
            presented.encode("utf-8", "replace"), self._static
        ):
            found = found or self._legacy
        return found

    async def verify_token(self, token: str) -> AccessToken | None:
        from mcp.server.auth.provider import AccessToken

        found = self.identify(token)
        if found is None:
            return None
        return AccessToken(token=token, client_id=found.name, scopes=[found.scope])


def bearer_of(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            text = value.decode("latin-1")
            kind, _, token = text.partition(" ")
            return token.strip() if kind.lower() == "bearer" and token.strip() else None
    return None


def token_of(request: Any) -> NamedToken | None:
    """The token :class:`TokenGate` found for ``request`` (a Starlette request), if any."""
    scope = getattr(request, "scope", None)
    found = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, NamedToken) else None


def limited_answer(token: NamedToken, limit: str, retry_after: int) -> dict[str, Any]:
    """The typed answer of a call refused by a token's limit."""
    what = (
        f"{token.rpm} requests a minute"
        if limit == "rpm"
        else f"{token.concurrent} request(s) at once"
    )
    message = f"Refused: token '{token.name}' is limited to {what}; retry after {retry_after} s."
    return {
        "op": "",
        "code": RATE_LIMITED,
        "ok": False,
        "message": message,
        "problem": {"reason": message, "field": None},
        "limit": limit,
        "retry_after_s": retry_after,
        "token": token.name,
    }


class TokenGate:
    """ASGI middleware: identify the request's token and hold it to its limits."""

    def __init__(self, app: ASGIApp, verifier: TokenVerifier, limiter: Limiter | None = None):
        self.app = app
        self.verifier = verifier
        self.limiter = limiter or Limiter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        presented = bearer_of(scope)
        token = self.verifier.identify(presented) if presented else None
        if token is None:  # the SDK's bearer middleware answers 401
            await self.app(scope, receive, send)
            return
        scope[SCOPE_KEY] = token
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        refused = self.limiter.acquire(token)
        if refused is not None:
            await self._refuse(send, token, *refused)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.limiter.release(token)

    @staticmethod
    async def _refuse(send: Send, token: NamedToken, limit: str, retry_after: int) -> None:
        answer = limited_answer(token, limit, retry_after)
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32000, "message": answer["message"], "data": answer},
            }
        ).encode("utf-8")
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"retry-after", str(retry_after).encode("ascii")),
                    (b"content-length", str(len(body)).encode("ascii")),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
