"""The test server leaves nothing in /tmp: what its JVMs write goes in the node's directory,
which goes when the cluster stops."""

from __future__ import annotations

from indexplug_elastic.testing.server import EsCluster


def test_the_option_probe_runs_in_the_node_folder_not_in_tmp(es_single: EsCluster) -> None:
    """Elasticsearch's launcher probes the server's JVM options with a JVM run in a
    ``final-flags*`` folder of its temporary folder, where that JVM's gc.log stays: those
    folders are the node's, never /tmp's (where each start left one or two)."""
    node = es_single.nodes[0]
    probes = sorted((node.directory / "tmp").glob("final-flags*"))
    assert probes, "the launcher's option probe did not run in the node's tmp folder"
    assert all((p / "gc.log").is_file() for p in probes)  # the probe's own gc.log, kept there
