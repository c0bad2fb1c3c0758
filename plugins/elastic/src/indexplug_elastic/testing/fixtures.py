"""Real Elasticsearch nodes for pytest sessions: import these fixtures into a ``conftest.py``.

One single node and one 2-node cluster, each started once per test session (the distribution
is fetched into ``~/.cache/indexplug`` on first use, see :mod:`indexplug_elastic.testing.server`).
Starting a node takes most of a minute on a busy machine, so when a session needs both
topologies the cluster is started in the background while the single node's tests run.

Tests stop and kill nodes of these shared servers, so ``es_single`` and ``es_pair`` hand each
test a cluster at full strength (every node running, green for the pair), healing what an
earlier test left behind.  ``es_options`` opens the backend on the single node under an
index prefix of the test's own.
"""

from __future__ import annotations

import threading
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import pytest

from indexplug_elastic.testing.server import EsCluster, EsError, HealthStatus

HEAP = "512m"


_clusters: dict[int, Future[EsCluster]] = {}
_lock = threading.Lock()


def _start(nodes: int) -> Future[EsCluster]:
    """Start a cluster of ``nodes`` in a background thread (once per session)."""
    with _lock:
        if nodes not in _clusters:
            fut: Future[EsCluster] = Future()
            _clusters[nodes] = fut

            def run() -> None:
                cluster = EsCluster(nodes, heap=HEAP)
                try:
                    cluster.start()
                except BaseException as exc:
                    cluster.stop()
                    fut.set_exception(exc)
                else:
                    fut.set_result(cluster)

            threading.Thread(target=run, name=f"es-start-{nodes}", daemon=True).start()
        return _clusters[nodes]


def _uses(session: pytest.Session, fixture: str) -> bool:
    return any(fixture in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the tail of every running node's log: what the server
    was doing (a slow fsync, a long GC, a shard that would not allocate) is the evidence a
    timeout on a CI machine otherwise lacks."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    for fut in list(_clusters.values()):
        if not fut.done() or fut.exception() is not None:
            continue
        for node in fut.result().nodes:
            report.sections.append((f"Elasticsearch node {node.name}", node.log_tail(30)))


@pytest.fixture(scope="session")
def _es_single_session(request: pytest.FixtureRequest) -> Iterator[EsCluster]:
    future = _start(1)
    if _uses(request.session, "es_pair"):
        _start(2)  # warm up in the background; es_pair waits for it
    cluster = future.result()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def _es_pair_session() -> Iterator[EsCluster]:
    cluster = _start(2).result()
    yield cluster
    cluster.stop()


def healthy(cluster: EsCluster, status: HealthStatus) -> EsCluster:
    """``cluster`` at full strength: every node running and joined, ``status`` reached.

    The servers live for the whole session but tests stop and kill nodes; a test that fails
    half-way (or a hook that could not restore) must not hand a broken cluster to the next.
    When nothing is wrong this is one health request.  If the nodes cannot be healed, the
    cluster is started afresh (new data directories, new ports) as a last resort.
    """
    try:
        cluster.heal(status)
    except EsError as exc:
        warnings.warn(
            f"{cluster.cluster_name} could not be healed, restarting it: {exc}", stacklevel=2
        )
        cluster.stop()
        cluster.start()
    return cluster


@pytest.fixture
def es_single(_es_single_session: EsCluster) -> EsCluster:
    """A single-node cluster (``discovery.type=single-node``), healthy (all primaries up:
    yellow is the steady state of a single node with replicas)."""
    return healthy(_es_single_session, "yellow")


@pytest.fixture
def es_pair(_es_pair_session: EsCluster) -> EsCluster:
    """Two nodes on loopback: two ports, one cluster name; both up and green."""
    return healthy(_es_pair_session, "green")


def delete_prefixed(cluster: EsCluster, prefix: str) -> None:
    """Delete every index named ``prefix*`` (by name: wildcard deletes are refused in 8.x).

    A node a failed test left down is started first: an index deleted while a node holding
    a copy of it is away would come back on that node as a dangling index.
    """
    if not all(node.running for node in cluster.nodes):
        try:
            cluster.heal("yellow")
        except EsError:
            return  # the next test's es_single / es_pair restarts the cluster
    try:
        status, body = cluster.request("GET", f"/_cat/indices/{prefix}*?format=json&h=index")
    except Exception:
        return
    if status != 200 or not isinstance(body, list):
        return
    for row in body:
        cluster.request("DELETE", f"/{row['index']}")


@pytest.fixture
def es_cleanup() -> Callable[[EsCluster, str], None]:
    """:func:`delete_prefixed`, for test modules (which cannot import this conftest)."""
    return delete_prefixed


def options_for(
    request: pytest.FixtureRequest, name: str, options: Mapping[str, Any]
) -> dict[str, Any]:
    """``options`` for backend ``name``, with those that reach its server in this session: for
    ``elastic``, :func:`es_options` (the session's node, started on first use, under this
    test's own index prefix) beneath them; any other backend's unchanged.  For tests that run
    the same code on several backends by name."""
    if name == "elastic":
        return {**request.getfixturevalue("es_options"), **options}
    return dict(options)


@pytest.fixture
def es_options(es_single: EsCluster) -> Iterator[dict[str, Any]]:
    """Options that open the ``elastic`` backend on the session's single node, under an index
    prefix of this test's own; the indices under it are deleted when the test ends.

    For tests outside this plugin (the framework adapters') that open the backend by name:
    ``open_backend("elastic", {**es_options, ...})``.  A fixture that needs it only for some
    parameters asks for it with ``request.getfixturevalue("es_options")``, so that a session
    without an elastic test starts no node.
    """
    prefix = f"t{uuid.uuid4().hex[:10]}-"
    yield {"hosts": es_single.urls, "prefix": prefix}
    delete_prefixed(es_single, prefix)
