"""The scale smoke check: a few thousand passages added and searched in bounds."""

from __future__ import annotations

import random
import time

from indexplug.outcomes import (
    Indexed,
)
from indexplug.testing.checks.helpers import _add, _by_id, _check_hits, _count, _search, kit_passage
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail

_VOCAB = (
    "river",
    "stone",
    "cloud",
    "amber",
    "orbit",
    "meadow",
    "lantern",
    "copper",
    "harbor",
    "thistle",
    "falcon",
    "glacier",
    "ember",
    "prairie",
    "quartz",
    "willow",
    "canyon",
    "beacon",
    "marble",
    "cedar",
    "tundra",
    "lagoon",
    "summit",
    "pepper",
    "walnut",
    "comet",
    "velvet",
    "anchor",
    "basalt",
    "coral",
    "dune",
    "fjord",
    "grove",
    "heron",
    "iris",
    "juniper",
    "kelp",
    "lichen",
    "mango",
    "nectar",
    "oasis",
    "pebble",
    "quill",
    "reed",
    "saffron",
    "tide",
    "umber",
    "vine",
    "wren",
    "yarrow",
    "zephyr",
    "acorn",
    "birch",
    "cobalt",
)


@_check(
    "scale.smoke",
    "A few thousand passages added in batches are counted and found within generous time bounds",
)
def _scale(s: Subject) -> None:
    st = s.settings
    rng = random.Random(20240102)
    index = s.index("scale")
    ps = [
        kit_passage(
            " ".join(rng.choice(_VOCAB) for _ in range(24)) + f" scaletok{i}", i, tag="scale"
        )
        for i in range(st.scale_passages)
    ]
    started = time.perf_counter()
    total = 0
    for i in range(0, len(ps), st.scale_batch):
        out: Indexed = _add(
            s,
            index,
            ps[i : i + st.scale_batch],
            f"add of batch {i // st.scale_batch + 1} of the scale check",
        )
        total += out.added
    took = time.perf_counter() - started
    if took > st.scale_add_s:
        fail(f"adding {len(ps)} passages took {took:.1f}s, over the bound of {st.scale_add_s:g}s")
    if total != len(ps):
        fail(f"adding {len(ps)} distinct passages reported {total} added")
    count = _count(s, index, "status after the scale ingest")
    if count != len(ps):
        fail(f"after adding {len(ps)} passages, status reports {count}")
    added = _by_id(ps)
    for p in rng.sample(ps, 10):
        what = "search for a passage's exact text in the scale index"
        t0 = time.perf_counter()
        out2 = _search(s, index, p.text, what)
        took = time.perf_counter() - t0
        if took > st.scale_search_s:
            fail(f"{what} took {took:.1f}s, over the bound of {st.scale_search_s:g}s")
        ids = _check_hits(s, out2, 10, added, what, count=len(ps))
        if p.id not in ids:
            fail(f"{what} did not return that passage in the top 10")
