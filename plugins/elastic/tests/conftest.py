"""Real Elasticsearch for the elastic backend's tests: one single node and one 2-node cluster.

Both are started once per test session (``indexplug_elastic.testing.server`` fetches the
integ-test-zip from Maven Central into ``~/.cache/indexplug`` on first use, runs the nodes as an
unprivileged user when we are root, on 127.0.0.1 with 512 MB of heap, and waits for green).
Starting a node takes most of a minute on a busy machine, so when a session needs both
topologies the cluster is started in the background while the single node's tests run.

Tests stop and kill nodes of these shared servers, so ``es_single`` and ``es_pair`` hand each
test a cluster at full strength (every node running, green for the pair), healing what an
earlier test left behind.

Tests never share an index: every backend a test makes gets its own index prefix, and its
indices are deleted when the test ends, so the long-lived servers stay small.
"""

from __future__ import annotations

import os
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from indexplug import Guard
from indexplug.plugins import get_registry
from indexplug_elastic.backend import ElasticBackend
from indexplug_elastic.testing.server import EsCluster, EsError, HealthStatus

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HEAP = "512m"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own indexplug home (the embedding cache lives there)."""
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path / "indexplug-home"))
    monkeypatch.delenv("INDEXPLUG_CONFIG", raising=False)


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


PATIENT_S = 60.0
"""Deadline of ops a test makes as set-up, not as the thing it checks: the shared CI machine
can be slow (a cold JVM creating an index under load takes seconds), and a set-up op that
times out would fail a test for the wrong reason."""


class PatientGuard(Guard):
    """A guard whose ops default to :data:`PATIENT_S` instead of 10 s (an explicit
    ``deadline_s`` still wins: deadline behaviour is tested with explicit ones)."""

    def add(self, *args: Any, deadline_s: float | None = PATIENT_S, **kw: Any) -> Any:
        return super().add(*args, deadline_s=deadline_s, **kw)

    def search(self, *args: Any, deadline_s: float | None = PATIENT_S, **kw: Any) -> Any:
        return super().search(*args, deadline_s=deadline_s, **kw)

    def remove(self, *args: Any, deadline_s: float | None = PATIENT_S, **kw: Any) -> Any:
        return super().remove(*args, deadline_s=deadline_s, **kw)

    def status(self, *args: Any, deadline_s: float | None = PATIENT_S, **kw: Any) -> Any:
        return super().status(*args, deadline_s=deadline_s, **kw)

    def call_extra(
        self, op: str, index: str, deadline_s: float | None = PATIENT_S, **kw: Any
    ) -> Any:
        return super().call_extra(op, index, deadline_s=deadline_s, **kw)


@pytest.fixture
def patient_guard() -> type[Guard]:
    """:class:`PatientGuard`, for test modules (which cannot import this conftest)."""
    return PatientGuard


BackendMaker = Callable[..., Guard]


def _maker(cluster_fixture: str) -> Any:
    @pytest.fixture
    def make(request: pytest.FixtureRequest) -> Iterator[BackendMaker]:
        cluster: EsCluster = request.getfixturevalue(cluster_fixture)
        made: list[tuple[Guard, str]] = []

        def make_backend(**options: Any) -> Guard:
            prefix = options.pop("prefix", None) or f"t{uuid.uuid4().hex[:10]}-"
            opts = {"hosts": cluster.urls, "prefix": prefix, **options}
            guard = PatientGuard(ElasticBackend(opts, embedder_factory=get_registry().embedder))
            made.append((guard, prefix))
            return guard

        yield make_backend
        for guard, prefix in made:
            guard.close()
            delete_prefixed(cluster, prefix)

    return make


make_single = _maker("es_single")
make_pair = _maker("es_pair")
