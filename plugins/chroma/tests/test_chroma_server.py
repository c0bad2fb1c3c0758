"""Server mode against a real ``chroma run``: estimates, outages and recovery."""

from __future__ import annotations

from pathlib import Path

from chroma_helpers import corpus, server_options
from indexplug import (
    Guard,
    Indexed,
    IndexStatus,
    IndexUnavailable,
    OverBudget,
    Removed,
    Searched,
)
from indexplug.plugins import get_registry
from indexplug_chroma.testing import ChromaServer


def open_server_backend(server: ChromaServer, home: Path, **extra: object) -> Guard:
    return get_registry().backend("chroma", server_options(server, **extra), home=home)


def test_round_trip_with_estimated_sizes(server_up: ChromaServer, tmp_path: Path) -> None:
    g = open_server_backend(server_up, tmp_path)
    ps = corpus(12)
    added = g.add("srv-round", ps, max_bytes=10_000_000)
    assert isinstance(added, Indexed) and added.added == 12
    assert added.estimate and added.bytes_used and added.bytes_used > 12 * 256 * 4
    st = g.status("srv-round")
    assert isinstance(st, IndexStatus) and st.estimate and st.passages == 12
    assert st.details["mode"] == "server" and st.max_bytes == 10_000_000
    out = g.search("srv-round", "a note about violins and item7", top_k=3)
    assert isinstance(out, Searched) and out.hits[0].passage == ps[7]
    refused = g.add("srv-round", corpus(3, tag="more"), max_bytes=st.bytes_used)
    assert isinstance(refused, OverBudget) and refused.estimate and refused.check == "projected"
    removed = g.remove("srv-round", [ps[0].id])
    assert isinstance(removed, Removed) and removed.removed == 1
    after = g.status("srv-round")
    assert isinstance(after, IndexStatus) and after.bytes_used < st.bytes_used  # type: ignore[operator]
    g.call_extra("drop", "srv-round")
    assert not g.status("srv-round").exists  # type: ignore[union-attr]
    g.close()


def test_outage_then_recovery_on_the_same_instance(server_up: ChromaServer, tmp_path: Path) -> None:
    g = open_server_backend(server_up, tmp_path)
    ps = corpus(6)
    g.add("srv-outage", ps)
    server_up.stop()
    try:
        r = g.backend.readiness()
        assert not r.ready and server_up.url.split("//")[1] in (r.reason or "")
        for out in (
            g.search("srv-outage", "otters"),
            g.add("srv-outage", corpus(2, tag="down")),
            g.remove("srv-outage", [ps[0].id]),
            g.status("srv-outage"),
        ):
            assert isinstance(out, IndexUnavailable), out
            assert out.reason
    finally:
        server_up.start()
    g.forget_readiness()
    out = g.search("srv-outage", "a note about otters and item5", top_k=2)
    assert isinstance(out, Searched) and out.hits[0].passage == ps[5]
    assert g.add("srv-outage", ps).known == 6  # type: ignore[union-attr]
    g.close()


def test_an_op_that_meets_a_dead_server_says_so(server_up: ChromaServer, tmp_path: Path) -> None:
    """The readiness cache may still say 'ready' when the server dies: the op itself must then
    answer INDEX_UNAVAILABLE (not INDEX_FAILED), and the next op reconnects."""
    g = open_server_backend(server_up, tmp_path)
    g.add("srv-dead", corpus(3))
    server_up.stop()
    try:
        from indexplug.deadlines import Deadline

        out = g.backend.search("srv-dead", "otters", top_k=3, deadline=Deadline.after(10))
        assert isinstance(out, IndexUnavailable) and "cannot be reached" in out.reason
    finally:
        server_up.start()
    assert isinstance(g.search("srv-dead", "otters"), Searched)
    g.close()
