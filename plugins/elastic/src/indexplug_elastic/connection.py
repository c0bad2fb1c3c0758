"""The client, made lazily from the settings, and the readiness check.

Why lazily: ``indexplug backends`` makes every installed backend to ask whether it is ready,
and a configuration may name a cluster that is down.  Making a backend must therefore never
touch the network (nor read credentials, which may be set only where ops actually run); the
first op or :meth:`Connection.ping` builds the client.

Why the deadline shapes every request: an op gets an absolute deadline, and the client's own
``request_timeout`` is a per-request constant.  :meth:`Connection.within` returns a view of the
same client (same connection pool) whose timeout is what is left of the deadline, so no request
can outlive its op.  Retries go to another node on connection errors (fail-over in a cluster),
never on timeouts (which would double the time spent) nor on error statuses (which are answers).
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, TypeVar

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout
from elasticsearch import ApiError, AsyncElasticsearch, Elasticsearch
from elasticsearch.serializer import OrjsonSerializer
from indexplug.deadlines import Deadline
from indexplug.protocols import Readiness

from indexplug_elastic.failures import transport_reason
from indexplug_elastic.options import ElasticOptions

T = TypeVar("T")

MIN_REQUEST_S = 0.01
"""Shortest request timeout handed to the client (it refuses zero)."""
TIMEOUT_STEP_S = 0.05
"""Request timeouts are rounded *down* to this step, so the client views that carry them can be
reused: making one (``Elasticsearch.options``) builds some forty API namespaces, about a
millisecond each time, which was a tenth of a search's client-side cost."""
MAX_VIEWS = 64


class CredentialsError(RuntimeError):
    """An environment variable named by the settings is missing or empty."""


def credentials(opts: ElasticOptions, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Client keyword arguments for authentication, read from the named variables."""
    env = os.environ if environ is None else environ

    def read(var: str, option: str) -> str:
        value = env.get(var, "")
        if not value:
            raise CredentialsError(f"environment variable {var} (named by {option}) is not set")
        return value

    if opts.api_key_env:
        return {"api_key": read(opts.api_key_env, "api_key_env")}
    if opts.username_env and opts.password_env:
        return {
            "basic_auth": (
                read(opts.username_env, "username_env"),
                read(opts.password_env, "password_env"),
            )
        }
    return {}


class Connection:
    """One client per backend instance, shared by its threads (the client is thread-safe)."""

    def __init__(self, opts: ElasticOptions, environ: Mapping[str, str] | None = None) -> None:
        self.opts = opts
        self._environ = environ
        self._client: Elasticsearch | None = None
        self._views: dict[tuple[int, bool], Elasticsearch] = {}
        # One async client per event loop: an aiohttp session belongs to the loop it was made
        # on, and a caller may run several loops (one per thread, or asyncio.run after another).
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncElasticsearch]
        self._aclients = weakref.WeakKeyDictionary()
        self._aviews: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[int, AsyncElasticsearch]
        ] = weakref.WeakKeyDictionary()
        # Each async client's closer (see _closed_with_loop), kept alive beside it.
        self._closers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, AsyncGenerator[None, None]
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def _client_kwargs(self) -> dict[str, Any]:
        o = self.opts
        kwargs: dict[str, Any] = credentials(o, self._environ)
        if o.ca_certs:
            kwargs["ca_certs"] = o.ca_certs
        if any(h.startswith("https://") for h in o.hosts):
            kwargs["verify_certs"] = o.verify_certs
            if not o.verify_certs:
                kwargs["ssl_show_warn"] = False
        return dict(
            hosts=list(o.hosts),
            request_timeout=o.request_timeout,
            max_retries=max(2, len(o.hosts)),
            retry_on_timeout=False,
            # A 503 ("no master", "no shard copy") is an answer to report, not to retry on
            # another node: a retry that then meets a stopped node would turn the real reason
            # into "connection refused".  Connection errors still fail over.
            retry_on_status=(),
            # orjson parses search responses (100 passages of text) several times faster
            # than the standard library; it is a dependency of this plugin.
            serializer=OrjsonSerializer(),
            **kwargs,
        )

    def client(self) -> Elasticsearch:
        with self._lock:
            if self._client is None:
                self._client = Elasticsearch(**self._client_kwargs())
            return self._client

    def aclient(self) -> AsyncElasticsearch:
        """The async client of the running event loop (made on first use there, and closed on
        that loop when it shuts down, unless :meth:`aclose` closed it first)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._aclients.get(loop)
            if client is None:
                client = self._aclients[loop] = AsyncElasticsearch(**self._client_kwargs())
                self._closers[loop] = _closed_with_loop(client)
            return client

    def awithin(self, deadline: Deadline) -> AsyncElasticsearch:
        """:meth:`aclient` with a request timeout no longer than what is left of
        ``deadline`` (views kept per loop and step, as :meth:`within` keeps its own)."""
        left = min(self.opts.request_timeout, deadline.remaining())
        steps = int(left / TIMEOUT_STEP_S)
        client = self.aclient()
        if steps <= 0:
            return client.options(request_timeout=max(MIN_REQUEST_S, left))
        loop = asyncio.get_running_loop()
        with self._lock:
            views = self._aviews.setdefault(loop, {})
            view = views.get(steps)
            if view is None:
                if len(views) >= MAX_VIEWS:
                    views.clear()
                view = views[steps] = client.options(request_timeout=steps * TIMEOUT_STEP_S)
            return view

    async def aclose(self) -> None:
        """Close the async client of the running loop (if one was made)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._aclients.pop(loop, None)
            self._aviews.pop(loop, None)
            closer = self._closers.pop(loop, None)
        if closer is not None:
            await closer.aclose()  # closes the client (see _closed_with_loop)

    def within(self, deadline: Deadline, *, single_try: bool = False) -> Elasticsearch:
        """The client with a request timeout no longer than what is left of ``deadline``
        (``single_try``: without the client's own failover, see :meth:`bounded`)."""
        left = min(self.opts.request_timeout, deadline.remaining())
        steps = int(left / TIMEOUT_STEP_S)
        client = self.client()
        extra: dict[str, Any] = {"max_retries": 0} if single_try else {}
        if steps <= 0:
            return client.options(request_timeout=max(MIN_REQUEST_S, left), **extra)
        key = (steps, single_try)
        with self._lock:
            view = self._views.get(key)
            if view is None:
                if len(self._views) >= MAX_VIEWS:
                    self._views.clear()
                view = self._views[key] = client.options(
                    request_timeout=steps * TIMEOUT_STEP_S, **extra
                )
            return view

    def bounded(self, deadline: Deadline, request: Callable[[Elasticsearch], T]) -> T:
        """Run ``request(client)`` so that it is over by ``deadline``, failing over included.

        The client's own failover gives every retry a full request timeout, so a node that
        drops the connection half-way through a request could stretch a call to a multiple of
        its deadline.  Here each try is a single attempt whose timeout is what is left of the
        deadline; a refused or dropped connection (the node is then marked dead by the client)
        moves on to the next node while time remains.  A timeout is not retried: the deadline
        is spent.  This is what lets a BM25 search claim ``cooperative_deadlines``.
        """
        tries = max(2, len(self.opts.hosts)) + 1
        for attempt in range(tries):
            try:
                return request(self.within(deadline, single_try=True))
            except TransportConnectionError:
                if attempt == tries - 1 or deadline.remaining() <= MIN_REQUEST_S:
                    raise
        raise AssertionError("unreachable")

    def ping(self) -> Readiness:
        """Ready when a node answers cluster health and a master is elected.

        ``GET /`` (the client's ``ping``) is not used: distributions without the ``rest-root``
        module (the integ-test-zip) do not serve it.  Health needs a master, which is what
        writes need too; a cluster without one is not ready, with that reason.
        """
        hosts = ", ".join(self.opts.hosts)
        timeout = self.opts.ready_timeout
        try:
            client = self.client().options(request_timeout=timeout)
            # The server gives up on finding a master before the client gives up on the server,
            # so "no elected master" is reported as such, not as a silent node.
            health = client.cluster.health(master_timeout=f"{max(1, int(timeout * 600))}ms")
        except CredentialsError as exc:
            return Readiness.no(str(exc))
        except ConnectionTimeout:
            return Readiness.no(f"no answer from {hosts} within {timeout:g}s")
        except TransportConnectionError as exc:
            return Readiness.no(f"cannot connect to {hosts}: {transport_reason(exc)}")
        except ApiError as exc:
            status = exc.meta.status
            if status in (401, 403):
                return Readiness.no(f"{hosts} refused the credentials (HTTP {status})")
            if status == 503 or "master_not_discovered" in str(exc):
                return Readiness.no(f"the cluster at {hosts} has no elected master")
            return Readiness.no(f"cluster health at {hosts} failed: HTTP {status} {exc.message}")
        except Exception as exc:  # anything else: not ready, and why
            return Readiness.no(
                f"cannot reach {hosts}: {type(exc).__name__}: {transport_reason(exc)}"
            )
        if health.get("timed_out"):
            return Readiness.no(f"the cluster at {hosts} did not answer health in time")
        return Readiness.yes()

    def close(self) -> None:
        with self._lock:
            self._views.clear()
            closers = list(self._closers.items())
            self._aclients.clear()
            self._aviews.clear()
            self._closers.clear()
            for loop, closer in closers:
                # Closed where that can be done without blocking: on a loop that is not
                # running; a running loop's client is closed on that loop.  A closed loop's
                # client was closed when that loop shut down (asyncio.run, asyncio.Runner).
                try:
                    if loop.is_closed():
                        continue
                    if loop.is_running():
                        asyncio.run_coroutine_threadsafe(closer.aclose(), loop)
                    else:
                        loop.run_until_complete(closer.aclose())
                except Exception:
                    pass
            if self._client is not None:
                try:
                    self._client.close()
                finally:
                    self._client = None


def _closed_with_loop(client: AsyncElasticsearch) -> AsyncGenerator[None, None]:
    """An async generator, started on the running loop, whose end closes ``client``.

    A caller that only awaits ops (a framework's async API under ``asyncio.run``) never calls
    :meth:`Connection.aclose`, and a client left open when its loop is gone leaves its HTTP
    session and sockets to the garbage collector (``Unclosed client session``).  An event loop
    finalizes the async generators started on it when it shuts down
    (``loop.shutdown_asyncgens``, which ``asyncio.run`` and ``asyncio.Runner`` call before
    closing it), so this one closes the client there, on its own loop.  The caller keeps it:
    the loop holds its async generators weakly.
    """

    async def closer() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            await client.close()

    gen = closer()
    step = gen.__anext__()  # the running loop's first-iteration hook registers it here
    try:
        step.send(None)  # runs to the ``yield`` without awaiting anything
    except StopIteration:
        pass
    return gen
