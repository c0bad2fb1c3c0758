"""The conformance kit against a real single node and a real two-node cluster, BM25 only
(no embedder), and with an embedder (the model-free ``hashing:default``): hybrid mode on the
single node, kNN mode on the pair, where the backend claims ``vectors`` too.

Making the backend unavailable stops the node(s); restoring starts them all again on the same
ports and data and waits for green, so the outage check also proves that the *same* backend
instance recovers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from indexplug import Guard
from indexplug.plugins import get_registry
from indexplug.testing import (
    BackendConformance,
    BackendFactory,
    ConcurrentWritersConformance,
    DeletionConformance,
    DropConformance,
    FiltersConformance,
    GetConformance,
    IndexesConformance,
    KeysConformance,
    MultiprocessWritersConformance,
    OperatorFiltersConformance,
    OutageConformance,
    PersistenceConformance,
    ScanConformance,
    SeparateRecordsConformance,
    VectorsConformance,
)
from indexplug_elastic.backend import ElasticBackend
from indexplug_elastic.testing.server import EsCluster


class _ElasticConformance(
    BackendConformance,
    DeletionConformance,
    FiltersConformance,
    OperatorFiltersConformance,
    GetConformance,
    ScanConformance,
    IndexesConformance,
    KeysConformance,
    DropConformance,
    PersistenceConformance,
    ConcurrentWritersConformance,
    MultiprocessWritersConformance,
    OutageConformance,
    SeparateRecordsConformance,
):
    """Shared by both topologies; a subclass says which cluster (``cluster`` fixture) and may
    add options (``extra``: an embedder and a mode)."""

    extra: ClassVar[dict[str, object]] = {}

    @pytest.fixture
    def options(
        self, cluster: EsCluster, es_cleanup: Callable[[EsCluster, str], None]
    ) -> Iterator[dict[str, object]]:
        prefix = f"kit{uuid.uuid4().hex[:8]}-"
        yield {"hosts": cluster.urls, "prefix": prefix, **self.extra}
        es_cleanup(cluster, prefix)

    @pytest.fixture
    def backend(self, options: dict[str, object]) -> Iterator[Guard]:
        guard = Guard(ElasticBackend(options, embedder_factory=get_registry().embedder))
        yield guard
        guard.close()

    @pytest.fixture
    def backend_factory(self, options: dict[str, object], tmp_path: Path) -> BackendFactory:
        return BackendFactory("elastic", str(tmp_path), options)

    @pytest.fixture
    def make_backend_unavailable(self, cluster: EsCluster) -> Callable[[], None]:
        def down() -> None:
            cluster.stop_nodes()  # all at once: a full outage, every shard copy as it was

        return down

    @pytest.fixture
    def restore_backend(self, cluster: EsCluster) -> Callable[[], None]:
        def up() -> None:
            # Every node back before waiting for anything: one node alone may hold no
            # in-sync copy of a shard (red) or not be in the voting configuration.
            cluster.start_nodes(status="green")

        return up


class TestSingleNodeConformance(_ElasticConformance):
    @pytest.fixture
    def cluster(self, es_single: EsCluster) -> EsCluster:
        return es_single


class TestTwoNodeClusterConformance(_ElasticConformance):
    @pytest.fixture
    def cluster(self, es_pair: EsCluster) -> EsCluster:
        return es_pair


class TestSingleNodeHybridConformance(_ElasticConformance, VectorsConformance):
    """Hybrid mode (BM25 and kNN fused): the kit with vectors; a search by vector is the kNN
    leg alone, on the ``rrf`` scale."""

    extra: ClassVar[dict[str, object]] = {"embedder": "hashing:default", "mode": "hybrid"}

    @pytest.fixture
    def cluster(self, es_single: EsCluster) -> EsCluster:
        return es_single


class TestTwoNodeKnnConformance(_ElasticConformance, VectorsConformance):
    """kNN mode on the pair: the kit with vectors, on the ``cosine`` scale."""

    extra: ClassVar[dict[str, object]] = {"embedder": "hashing:default", "mode": "knn"}

    @pytest.fixture
    def cluster(self, es_pair: EsCluster) -> EsCluster:
        return es_pair
