"""The pytest classes of the conformance kit: one base class, one mixin per capability.

A backend author subclasses :class:`BackendConformance` in a test module, adds the mixin of
every capability the backend claims, and provides a ``backend`` fixture.  Each check in
:data:`~indexplug.testing.checks.CHECKS` becomes a test method (``test_search_no_match`` for
``search.no_match``): the checks every backend must pass live on the base class, each
capability's checks on its mixin, a plain class listed after the base (as Haystack's
document-store tests compose ``FilterDocumentsTest`` and friends)::

    import pytest
    from indexplug import Guard
    from indexplug.testing import (
        BackendConformance, BackendFactory, FiltersConformance, PersistenceConformance,
    )

    class TestMyBackendConformance(BackendConformance, FiltersConformance,
                                   PersistenceConformance):
        @pytest.fixture
        def backend(self, tmp_path):
            guard = Guard(MyBackend(tmp_path))
            yield guard
            guard.close()

        @pytest.fixture
        def backend_factory(self, tmp_path):          # reopening (and other processes)
            return BackendFactory("my-backend", str(tmp_path))

Why mixins and not skips: a check that cannot apply is not collected at all, so a run has no
skipped tests that prove nothing, and the class says what it tests.  The two are kept honest by
``test_claims_are_tested``: a backend that claims a capability whose mixin the class leaves out
fails it (its checks would never run), and so does a class with the mixin of a capability the
backend does not claim.  Every check that runs must pass: one that lacks a hook it needs (a
``tamper`` hook, a way to reopen) fails with what to provide.  The report card
(``--indexplug-card``) lists every check: those of unclaimed capabilities as ``NOT_CLAIMED``,
and those that apply but did not run (a claimed capability's mixin left out, a test
deselected with ``-k``) as ``SKIPPED``, which makes the card incomplete and not ok.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from indexplug.guard import Guard
from indexplug.testing.checks import (
    CHECKS,
    Check,
    CheckStatus,
    KitSettings,
    Subject,
    claimed,
    claims_of,
    run_check,
)

__all__ = [
    "MIXINS",
    "BackendConformance",
    "ConcurrentWritersConformance",
    "DeletionConformance",
    "DropConformance",
    "FiltersConformance",
    "GetConformance",
    "IndexesConformance",
    "KeysConformance",
    "MultiprocessWritersConformance",
    "OperatorFiltersConformance",
    "OutageConformance",
    "PersistenceConformance",
    "ScanConformance",
    "SeparateRecordsConformance",
    "VectorsConformance",
    "method_name",
]


def method_name(check_id: str) -> str:
    """The test method a check becomes: ``search.no_match`` -> ``test_search_no_match``."""
    return "test_" + check_id.replace(".", "_")


class BackendConformance:
    """Subclass it (with a ``Test`` name), with the mixin of each capability the backend
    claims, and provide the ``backend`` fixture.

    Fixtures an author may override, all optional but ``backend``:

    * ``backend``: yield a fresh, ready backend, guarded (``indexplug.Guard(backend)``; a bare
      backend is wrapped).  Fresh means storage no other test sees (use ``tmp_path``).
    * ``backend_factory``: a picklable zero-argument callable opening *another* instance on the
      same storage (e.g. :class:`~indexplug.testing.BackendFactory`).  Enables the
      multi-process check, and reopening when ``reopen_backend`` is not given.
    * ``reopen_backend``: a callable ``(old: Guard) -> Guard`` that closes ``old`` and opens a
      new instance on the same storage (the persistence check).
    * ``make_backend_unavailable`` / ``restore_backend``: zero-argument callables that take the
      backend's server away and bring it back (default: the backend's own ``make_unavailable``
      and ``restore`` methods, if it has them).
    * ``tamper_passage``: ``(index, passage_id, new_text) -> None`` altering a stored passage
      behind the backend's back (default: the backend's ``tamper`` method).

    ``conformance_settings`` (a :class:`~indexplug.testing.KitSettings`) sizes the checks; a
    subclass may set its own, e.g. for a slow server.
    """

    conformance_settings: ClassVar[KitSettings] = KitSettings()

    @pytest.fixture
    def backend(self) -> Any:
        pytest.fail(
            f"{type(self).__name__} must define a `backend` fixture yielding a fresh, ready "
            "indexplug.Guard(...) of the backend under test",
            pytrace=False,
        )

    @pytest.fixture
    def backend_factory(self) -> Callable[[], Guard] | None:
        return None

    @pytest.fixture
    def reopen_backend(self) -> Callable[[Guard], Guard] | None:
        return None

    @pytest.fixture
    def make_backend_unavailable(self) -> Callable[[], None] | None:
        return None

    @pytest.fixture
    def restore_backend(self) -> Callable[[], None] | None:
        return None

    @pytest.fixture
    def tamper_passage(self) -> Callable[[str, str, str], None] | None:
        return None

    @pytest.fixture
    def conformance_subject(
        self,
        request: pytest.FixtureRequest,
        backend: Any,
        backend_factory: Callable[[], Guard] | None,
        reopen_backend: Callable[[Guard], Guard] | None,
        make_backend_unavailable: Callable[[], None] | None,
        restore_backend: Callable[[], None] | None,
        tamper_passage: Callable[[str, str, str], None] | None,
    ) -> Iterator[Subject]:
        """The backend and its hooks, as every check receives them."""
        guard = backend if isinstance(backend, Guard) else Guard(backend)
        subject = Subject(
            guard=guard,
            settings=self.conformance_settings,
            reopen=reopen_backend,
            factory=backend_factory,
            make_unavailable=make_backend_unavailable,
            restore=restore_backend,
            tamper=tamper_passage,
        )
        request.node.user_properties.append(("indexplug_backend", guard.name))
        claims = claims_of(guard.backend)
        if claims is not None:
            request.node.user_properties.append(("indexplug_capabilities", claims))
        try:
            yield subject
        finally:
            subject.close()
            if guard is not backend:
                guard.close()

    def test_claims_are_tested(self, backend: Any) -> None:
        """The class includes the mixin of every capability the backend claims, and of no
        other (but the outage mixin, which may test an unclaimed backend)."""
        raw = backend.backend if isinstance(backend, Guard) else backend
        name = getattr(raw, "name", type(raw).__name__)
        claims = claims_of(raw)
        if claims is None:
            pytest.fail(f"{name} declares no Capabilities", pytrace=False)
        problems = []
        for capability, mixin in MIXINS.items():
            is_claimed = claimed(claims.get(capability))
            included = isinstance(self, mixin)
            if is_claimed and not included:
                problems.append(
                    f"{name} claims {_claim_words(capability)}, but {type(self).__name__} does "
                    "not include "
                    f"{mixin.__name__}, so its checks never run"
                )
            elif included and not is_claimed and capability not in _OPTIONAL:
                problems.append(
                    f"{type(self).__name__} includes {mixin.__name__}, but {name} does not "
                    f"claim {_claim_words(capability)}: claim it or drop the mixin"
                )
        if problems:
            pytest.fail("; ".join(problems), pytrace=False)


def _claim_words(capability: str) -> str:
    """A claim as a message names it: drop is claimed by offering ``op_drop``."""
    return "drop (it offers op_drop)" if capability == "drop" else capability


def _make_test(check: Check, home: type) -> Callable[..., None]:
    def test(self: BackendConformance, conformance_subject: Subject) -> None:
        result = run_check(check, conformance_subject)
        if result.status is not CheckStatus.PASSED:
            # NOT_CLAIMED here means a mixin the backend does not claim; SKIPPED, a hook the
            # check needs was not given.  Either way the check proved nothing: a failure.
            pytest.fail(f"[{check.id}] {result.reason}", pytrace=False)

    test.__name__ = method_name(check.id)
    test.__qualname__ = f"{home.__name__}.{test.__name__}"
    test.__doc__ = f"{check.id}: {check.title}"
    marked: Callable[..., None] = pytest.mark.indexplug_check(check.id)(test)
    return marked


class DeletionConformance:
    """Mixin: checks of ``Capabilities.deletion``: removal is reported, and a removed passage never
    comes back."""


class FiltersConformance:
    """Mixin: checks of ``Capabilities.filters``: metadata equality filters, typed."""


class PersistenceConformance:
    """Mixin: checks of ``Capabilities.persistence``: everything survives closing and reopening.
    Needs ``reopen_backend`` or ``backend_factory``."""


class ConcurrentWritersConformance:
    """Mixin: checks of ``Capabilities.concurrent_writers``: threads adding at once lose nothing."""


class MultiprocessWritersConformance:
    """Mixin: checks of ``Capabilities.multiprocess_writers``: processes adding at once lose
    nothing.  Needs ``backend_factory`` (picklable: each process opens its own instance)."""


class OutageConformance:
    """Mixin: the outage check: while the server is away every op answers ``INDEX_UNAVAILABLE``, and
    the backend recovers when it returns.  Required when the backend claims
    ``Capabilities.server``; allowed without the claim for a backend that can be made
    unavailable some other way.  Needs ``make_backend_unavailable`` and ``restore_backend``
    (or the backend's own ``make_unavailable`` / ``restore``)."""


class SeparateRecordsConformance:
    """Mixin: checks of ``Capabilities.separate_records``: records deleted behind the search
    structure make searches ``INDEX_FAILED``.  Needs the backend's ``delete_rows(index, ids)``
    hook."""


class OperatorFiltersConformance:
    """Mixin: checks of ``Capabilities.filter_operators``: for generated metadata and filters
    over the claimed operators, search and scan select exactly what
    :func:`indexplug.filters.matches` does (a property test; needs hypothesis)."""


class GetConformance:
    """Mixin: checks of ``Capabilities.get``: passages read back by id, the missing listed."""


class ScanConformance:
    """Mixin: checks of ``Capabilities.scan``: every passage once, in id order, by cursor."""


class IndexesConformance:
    """Mixin: checks of ``Capabilities.indexes``: the indexes written, with their counts."""


class DropConformance:
    """Mixin: checks of ``drop`` (the backend offers ``op_drop``, the
    :class:`~indexplug.protocols.Droppable` op): a dropped index is gone, others untouched."""


class KeysConformance:
    """Mixin: checks of ``Capabilities.keys``: an atomic upsert per caller key, and get and
    remove by key (which need ``Capabilities.get`` too)."""


class VectorsConformance:
    """Mixin: checks of ``Capabilities.vectors``: passages added with the caller's vectors,
    found by them, returned with them on request, and bad vectors refused."""


MIXINS: dict[str, type] = {
    "deletion": DeletionConformance,
    "filters": FiltersConformance,
    "filter_operators": OperatorFiltersConformance,
    "get": GetConformance,
    "scan": ScanConformance,
    "indexes": IndexesConformance,
    "drop": DropConformance,
    "keys": KeysConformance,
    "vectors": VectorsConformance,
    "persistence": PersistenceConformance,
    "concurrent_writers": ConcurrentWritersConformance,
    "multiprocess_writers": MultiprocessWritersConformance,
    "server": OutageConformance,
    "separate_records": SeparateRecordsConformance,
}
"""The mixin that holds the checks of each capability."""

_OPTIONAL = {"server"}
"""Capabilities whose mixin a class may include without the claim (see each mixin)."""


def _home(check: Check) -> type:
    """The class a check's test method lives on."""
    if check.outage_or_claim:
        return OutageConformance
    if check.claim is None:
        return BackendConformance
    return MIXINS[check.claim]


for _c in CHECKS:
    setattr(_home(_c), method_name(_c.id), _make_test(_c, _home(_c)))
del _c
