"""A pair with the system's hits taken out: the framework's cost per search that no result type
can remove.

``paired`` says how much slower an indexplug system is than its raw library, ``steps`` where
the difference goes.  Neither says how much of it is the price of handing out a ``Hit`` per
result (built, checked, read by the caller) and how much the framework would cost whatever it
handed out.  ``paired --floor`` answers that: in each process the system's hit builder
(:data:`BUILDERS`) is replaced by one that answers with the hits' document ids as the library
gave them, in a :class:`~indexplug.outcomes.CheckedHits` so the guard passes them on without
its per-hit checks, and the harness reads those ids (each mapped to its BEIR doc id by one
dictionary look-up, where the raw side reads ``_id``).  Everything else runs as it does for
users: the guard's checks of the request and its stamps on the answer, the backend's request
(with the provenance every hit carries and, now and then, the passage count) and its checks of
the answer.  What is left between the two sides is that floor.

A diagnostic, never a result: the "hits" are not hits, so a floor row is kept apart from the
pairs (``floor`` in the results file) and ``report`` never puts it on the page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from indexplug_bench.steps import Wrap, patched, resolve

DOC_IDS = "indexplug_bench.systems:doc_ids"
"""The harness's reading of an answer (the BEIR doc ids of its hits), replaced too."""


def _ids_of_es_hits(original: Callable[..., Any]) -> Callable[..., Any]:
    from indexplug.outcomes import checked_hits

    def ids_only(es_hits: Iterable[Mapping[str, Any]], scale: str, **_: Any) -> Any:
        # no scores travel with the ids, so none can be out of order either way
        ids = [h["_id"] for h in es_hits]
        return checked_hits(ids, scale=scale, descending=True, ascending=True)

    return ids_only


BUILDERS: dict[str, tuple[str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    "indexplug elastic BM25": ("indexplug_elastic.reads:hits_from_response", _ids_of_es_hits),
}
"""Per system: its backend's hit builder (where the backend looks it up) and what replaces it."""


@dataclass(frozen=True)
class Floor:
    """The replacements for one system, and the BEIR doc id of every passage id it holds."""

    system: str
    beir_of: Mapping[str, str]

    @classmethod
    def of(cls, system: str, corpus: Iterable[tuple[str, str]]) -> Floor:
        """For ``system`` over ``corpus`` (``(doc_id, text)``); ``KeyError`` if its builder is
        not named in :data:`BUILDERS`."""
        from indexplug_bench.warm import bench_passages

        if system not in BUILDERS:
            raise KeyError(f"no hit builder of {system!r} is named for a floor")
        passages = bench_passages(list(corpus))
        return cls(system, {p.id: p.source.uri.rsplit("/", 1)[-1] for p in passages})

    def _doc_ids(self, original: Callable[..., Any]) -> Callable[..., Any]:
        beir_of = self.beir_of

        def ids(out: Any, failures: dict[str, int]) -> list[str]:
            if out.code == "SEARCHED":
                return [beir_of[i] for i in out.hits]
            return list(original(out, failures))

        return ids

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The builder and the harness's reading replaced while the block runs."""
        target, replacement = BUILDERS[self.system]
        wraps: list[Wrap] = [(*resolve(target), replacement), (*resolve(DOC_IDS), self._doc_ids)]
        with patched(wraps):
            yield
