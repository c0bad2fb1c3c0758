"""Settings, credentials and failure mapping: everything that needs no running server."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
from indexplug import Guard, IndexTimeout, IndexUnavailable, Passage
from indexplug.plugins import get_registry
from indexplug_elastic.backend import ElasticBackend
from indexplug_elastic.connection import Connection, credentials
from indexplug_elastic.options import parse_options


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_defaults() -> None:
    o = parse_options({})
    assert o.hosts == ("http://localhost:9200",)
    assert o.prefix == "indexplug-" and o.verify_certs is True
    assert o.search_mode == "bm25"
    assert parse_options({"embedder": "hashing:default"}).search_mode == "hybrid"
    assert parse_options({"hosts": "http://a:9200, http://b:9200"}).hosts == (
        "http://a:9200",
        "http://b:9200",
    )


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"api_key": "c2VjcmV0"}, "environment variable"),
        ({"password": "hunter2", "username": "elastic"}, "environment variable"),
        ({"hosts": ["localhost:9200"]}, "http:// or https://"),
        ({"prefix": "Bad/Prefix"}, "prefix"),
        ({"prefix": "_hidden"}, "prefix"),
        ({"mode": "knn"}, "needs an embedder"),
        ({"mode": "fuzzy"}, "mode"),
        ({"username_env": "ES_USER"}, "go together"),
        ({"analysis": "client", "analyzer": "french"}, "only analyzer='english'"),
        ({"colour": "blue"}, "unknown option"),
    ],
)
def test_bad_options_are_refused_naming_the_key(options: dict, words: str) -> None:
    with pytest.raises(ValueError, match="invalid elastic option") as err:
        parse_options(options)
    assert words in str(err.value)


def test_credentials_come_from_the_named_variables_only() -> None:
    env = {"MY_KEY": "id:secret", "U": "elastic", "P": "pw"}
    assert credentials(parse_options({"api_key_env": "MY_KEY"}), env) == {"api_key": "id:secret"}
    assert credentials(parse_options({"username_env": "U", "password_env": "P"}), env) == {
        "basic_auth": ("elastic", "pw")
    }
    assert credentials(parse_options({}), env) == {}
    missing = Connection(parse_options({"api_key_env": "NOT_SET_ANYWHERE"}), env)
    ready = missing.ping()
    assert not ready.ready and "NOT_SET_ANYWHERE" in (ready.reason or "")


def test_making_the_backend_never_connects() -> None:
    # A port nothing listens on: construction and discovery must still be instant and quiet.
    port = closed_port()
    backend = ElasticBackend({"hosts": [f"http://127.0.0.1:{port}"]})
    assert backend._cx.conn._client is None
    ready = backend.readiness()
    assert not ready.ready and "cannot connect" in (ready.reason or "")
    registry = get_registry()
    assert "elastic" in registry.backend_names()
    guard = registry.backend("elastic", {"hosts": [f"http://127.0.0.1:{port}"]})
    assert guard.backend._cx.conn._client is None


def test_an_unreachable_server_is_unavailable_within_the_deadline() -> None:
    guard = Guard(ElasticBackend({"hosts": [f"http://127.0.0.1:{closed_port()}"]}))
    p = Passage.create("A passage about otters.", "mem://otters")
    # Within the deadline, with no clock: the guard answers IndexTimeout to any answer given
    # after it, so an UNAVAILABLE answer is the proof (the deadline is generous so a loaded
    # machine meets it; a refused connection answers at once).
    for call in (
        lambda: guard.search("docs", "otters", deadline_s=10),
        lambda: guard.add("docs", [p], deadline_s=10),
        lambda: guard.status("docs", deadline_s=10),
        lambda: guard.remove("docs", [p.id], deadline_s=10),
    ):
        out = call()
        assert isinstance(out, IndexUnavailable), out
        assert "cannot connect" in out.reason


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never answers: a hung node."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop.set()
    t.join()
    for c in conns:
        c.close()
    srv.close()


HUNG_REQUEST_S = 120.0
"""The client's request timeout against the hung server: what a wait that ignored the
deadline (or ``ready_timeout``) would last.  The bounds below sit an order of magnitude from
both it and the expected wait (0.5 s), so a loaded machine cannot make them fail."""
HUNG_BOUND_S = 10.0


def test_a_hung_server_times_out_at_the_deadline(silent_server: int) -> None:
    backend = ElasticBackend(
        {
            "hosts": [f"http://127.0.0.1:{silent_server}"],
            "request_timeout": HUNG_REQUEST_S,
            "ready_timeout": 0.5,
        }
    )
    # The readiness check itself is bounded (ready_timeout); ops use their own deadline.
    # The server never answers, so only those bounds end the waits.
    started = time.monotonic()
    assert not backend.readiness().ready
    assert time.monotonic() - started < HUNG_BOUND_S  # 0.5 s expected, 120 s if ignored
    from indexplug.deadlines import Deadline

    started = time.monotonic()
    out = backend.search("docs", "otters", top_k=3, deadline=Deadline.after(0.5))
    assert isinstance(out, IndexTimeout), out
    assert time.monotonic() - started < HUNG_BOUND_S  # 0.5 s expected, 120 s if ignored


def _async_reads(backend: ElasticBackend, deadline_s: float) -> list[tuple[object, float]]:
    """The answers of every native async read of ``backend``, each with its own deadline,
    and how long each took."""
    from indexplug.deadlines import Deadline

    def d() -> Deadline:
        return Deadline.after(deadline_s)

    async def timed(read: Callable[[], Awaitable[object]]) -> tuple[object, float]:
        started = time.monotonic()
        out = await read()
        return out, time.monotonic() - started

    async def run() -> list[tuple[object, float]]:
        try:
            return [
                await timed(lambda: backend.asearch("docs", "otters", top_k=3, deadline=d())),
                await timed(lambda: backend.aget("docs", ["x"], deadline=d())),
                await timed(
                    lambda: backend.ascan("docs", filters=None, after=None, limit=5, deadline=d())
                ),
                await timed(lambda: backend.aindexes(deadline=d())),
            ]
        finally:
            await backend.aclose()

    return asyncio.run(run())


def test_async_reads_answer_unavailable_for_an_unreachable_server() -> None:
    backend = ElasticBackend({"hosts": [f"http://127.0.0.1:{closed_port()}"]})
    # Each within its deadline, which is the contract: a refused connection answers in
    # milliseconds, three orders of magnitude inside a deadline long enough for any load.
    for out, took in _async_reads(backend, 10.0):
        assert isinstance(out, IndexUnavailable), out
        assert "cannot reach Elasticsearch" in out.reason
        assert took < 10.0, took


def test_async_reads_time_out_at_the_deadline_on_a_hung_server(silent_server: int) -> None:
    backend = ElasticBackend(
        {"hosts": [f"http://127.0.0.1:{silent_server}"], "request_timeout": HUNG_REQUEST_S}
    )
    for out, took in _async_reads(backend, 0.5):
        assert isinstance(out, IndexTimeout), out
        assert took < HUNG_BOUND_S, took  # 0.5 s expected, 120 s if the deadline were ignored
