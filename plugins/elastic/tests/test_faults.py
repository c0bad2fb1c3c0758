"""Faults survived, against a real two-node cluster on loopback.

* One node down with one replica: searches are served with the same results, adds continue,
  and the cluster is green again once the node is back.
* The master lost (the node holding the voting configuration crashes): the cluster is not ready
  and writes answer ``INDEX_UNAVAILABLE``.  Then both nodes down: every op answers
  ``INDEX_UNAVAILABLE`` within its deadline; once they are back the *same* backend instance
  works again, with the same results.
* A full outage where the only copy of a shard lives on the node outside the voting
  configuration: neither node can come back alone, both started together bring it back green.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from indexplug import Guard, Indexed, IndexUnavailable, Passage, Searched
from indexplug_elastic.testing.server import EsCluster

BackendMaker = Callable[..., Guard]
QUERIES = ["otters", "river stones", "kelp forests", "otter 7", "harbour seals 12"]
DEADLINE_S = 5.0


def corpus(n: int, tag: str = "f") -> list[Passage]:
    animals = ["otters", "harbour seals", "beavers", "kelp forests", "river stones"]
    return [
        Passage.create(
            f"Note {i} about {animals[i % len(animals)]}: otter {i} and seals {i}.",
            f"mem://{tag}/{i}",
        )
        for i in range(n)
    ]


def results(g: Guard, index: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for q in QUERIES:
        r = g.search(index, q, top_k=10, deadline_s=DEADLINE_S)
        assert isinstance(r, Searched), r
        out[q] = [h.passage.id for h in r.hits]
    return out


def primary_node(cluster: EsCluster, es_index: str) -> int:
    status, rows = cluster.request("GET", f"/_cat/shards/{es_index}?format=json&h=prirep,node")
    assert status == 200
    name = next(r["node"] for r in rows if r["prirep"] == "p")
    return next(i for i, n in enumerate(cluster.nodes) if n.name == name)


def test_one_node_down_replica_serves_and_cluster_heals(
    make_pair: BackendMaker, es_pair: EsCluster
) -> None:
    g = make_pair(replicas=1)
    assert isinstance(g.add("replicated", corpus(40)), Indexed)
    es_pair.wait_for("green", timeout=120)
    before = results(g, "replicated")
    victim = primary_node(es_pair, g.backend.es_index("replicated"))
    es_pair.stop_node(victim)  # the replica must be promoted
    try:
        es_pair.wait_for("yellow", timeout=60)
        assert results(g, "replicated") == before
        more = [
            Passage.create(f"Written with one node down: narwhal tusk {i}.", f"mem://down/{i}")
            for i in range(5)
        ]
        added = g.add("replicated", more)
        assert isinstance(added, Indexed) and added.added == 5
        found = g.search("replicated", more[0].text, top_k=1)
        assert isinstance(found, Searched) and found.hits[0].passage.id == more[0].id
    finally:
        es_pair.start_node(victim)
    health = es_pair.wait_for("green", timeout=180)
    assert health["status"] == "green" and health["number_of_nodes"] == 2
    assert g.status("replicated").passages == 45


def voting_node(cluster: EsCluster) -> int:
    """The node in the cluster's voting configuration.  With two master-eligible nodes
    Elasticsearch keeps only one there: losing that one leaves the other without a master."""
    path = "/_cluster/state/metadata?filter_path=metadata.cluster_coordination"
    status, body = cluster.request("GET", path)
    assert status == 200
    voters = body["metadata"]["cluster_coordination"]["last_committed_config"]
    status, nodes = cluster.request("GET", "/_nodes/_all/none")
    names = {nid: info["name"] for nid, info in nodes["nodes"].items()}
    voter_names = {names.get(v) for v in voters}
    assert len(voter_names) == 1, voter_names
    return next(i for i, n in enumerate(cluster.nodes) if n.name in voter_names)


def test_no_master_then_both_nodes_down_then_the_same_backend_recovers(
    make_pair: BackendMaker, es_pair: EsCluster
) -> None:
    g = make_pair(replicas=1)
    ps = corpus(20)
    assert isinstance(g.add("outage", ps), Indexed)
    es_pair.wait_for("green", timeout=120)
    before = results(g, "outage")
    voter = voting_node(es_pair)
    other = 1 - voter
    late = Passage.create("Written while the cluster is down.", "mem://late")
    from indexplug.deadlines import Deadline

    # 1. The voting node crashes: the survivor answers, but has no master.
    es_pair.stop_node(voter, kill=True)
    try:
        until = time.monotonic() + 60
        while "no elected master" not in (g.readiness().reason or ""):
            assert time.monotonic() < until, g.readiness()
            time.sleep(0.5)
        out = g.add("outage", [late], deadline_s=DEADLINE_S)
        assert isinstance(out, IndexUnavailable) and "master" in out.reason, out
        raw = g.backend.add("outage", [late], max_bytes=None, deadline=Deadline.after(DEADLINE_S))
        assert isinstance(raw, IndexUnavailable), raw  # the write itself is refused: no master

        # 2. The survivor stops too: nothing answers at all.
        es_pair.stop_node(other)
        ready = g.readiness()
        assert not ready.ready and "cannot connect" in (ready.reason or "")
        for call in (
            lambda: g.search("outage", "otters", deadline_s=DEADLINE_S),
            lambda: g.add("outage", [late], deadline_s=DEADLINE_S),
            lambda: g.status("outage", deadline_s=DEADLINE_S),
            lambda: g.remove("outage", [ps[0].id], deadline_s=DEADLINE_S),
            lambda: g.call_extra("drop", "outage", deadline_s=DEADLINE_S),
        ):
            # within the deadline, with no clock: the guard answers IndexTimeout to
            # anything later, whatever it says
            out = call()
            assert isinstance(out, IndexUnavailable), out
        # The backend's own answers (below the guard's readiness check) say the same.
        out = g.backend.search("outage", "otters", top_k=3, deadline=Deadline.after(DEADLINE_S))
        assert isinstance(out, IndexUnavailable) and "cannot reach" in out.reason
    finally:
        # Both at once: the other cannot elect a master on its own, and waiting for
        # either alone would wait on the one that is not back yet.
        es_pair.start_nodes([voter, other], status="green")
    until = time.monotonic() + 30
    while not g.readiness().ready:
        assert time.monotonic() < until, g.readiness().reason
        time.sleep(0.2)
    assert results(g, "outage") == before
    again = g.add("outage", [*ps, late])
    assert isinstance(again, Indexed) and again.known == 20 and again.added == 1


def test_full_outage_brings_back_a_shard_only_the_non_voting_node_held(es_pair: EsCluster) -> None:
    """The outage hooks' worst case, made deterministic: the only copy of a shard lives on
    the node outside the voting configuration.  Neither node can come back alone (one has
    no master, the other no copy of the shard), so a restore has to start both before it
    waits for anything."""
    index = "outage-pinned-test"
    holder = 1 - voting_node(es_pair)
    settings = {
        "number_of_shards": 1,
        "number_of_replicas": 0,
        "index.routing.allocation.require._name": es_pair.nodes[holder].name,
    }
    status, body = es_pair.request("PUT", f"/{index}", {"settings": settings})
    assert status == 200, body
    try:
        status, body = es_pair.request("PUT", f"/{index}/_doc/1?refresh=true", {"x": "kept"})
        assert status in (200, 201), body
        es_pair.stop_nodes()
        assert not any(node.running for node in es_pair.nodes)
        health = es_pair.start_nodes(status="green")
        assert health["status"] == "green" and health["number_of_nodes"] == 2
        assert health["active_primary_shards"] >= 1
        status, body = es_pair.request("GET", f"/{index}/_count")
        assert status == 200 and body["count"] == 1, body
    finally:
        if all(node.running for node in es_pair.nodes):
            es_pair.request("DELETE", f"/{index}")
