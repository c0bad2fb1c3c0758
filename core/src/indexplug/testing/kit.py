"""The pytest base class of the conformance kit.

A backend author subclasses :class:`BackendConformance` in a test module and provides a
``backend`` fixture; every check in :data:`~indexplug.testing.checks.CHECKS` becomes a test
method of the subclass (``test_search_no_match`` for ``search.no_match``)::

    import pytest
    from indexplug import Guard
    from indexplug.testing import BackendConformance, BackendFactory

    class TestMyBackendConformance(BackendConformance):
        @pytest.fixture
        def backend(self, tmp_path):
            guard = Guard(MyBackend(tmp_path))
            yield guard
            guard.close()

        @pytest.fixture
        def backend_factory(self, tmp_path):          # optional: reopen and processes
            return BackendFactory("my-backend", str(tmp_path))

A check of a capability the backend does not declare is *skipped* with the reason
``not claimed: <capability>`` (never passed); one that needs a hook nobody gave is skipped
with ``untested: ...``; a broken rule fails with the reason the report card would show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from indexplug.guard import Guard
from indexplug.testing.checks import CHECKS, Check, CheckStatus, KitSettings, Subject, run_check

__all__ = ["BackendConformance", "method_name"]


def method_name(check_id: str) -> str:
    """The test method a check becomes: ``search.no_match`` -> ``test_search_no_match``."""
    return "test_" + check_id.replace(".", "_")


class BackendConformance:
    """Subclass it (with a ``Test`` name) and provide the ``backend`` fixture.

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
        caps = subject.capabilities
        if caps is not None:
            request.node.user_properties.append(("indexplug_capabilities", caps.model_dump()))
        try:
            yield subject
        finally:
            subject.close()
            if guard is not backend:
                guard.close()


def _make_test(check: Check) -> Callable[..., None]:
    def test(self: BackendConformance, conformance_subject: Subject) -> None:
        result = run_check(check, conformance_subject)
        if result.status is CheckStatus.FAILED:
            pytest.fail(f"[{check.id}] {result.reason}", pytrace=False)
        if result.status in (CheckStatus.NOT_CLAIMED, CheckStatus.SKIPPED):
            pytest.skip(result.reason or "")

    test.__name__ = method_name(check.id)
    test.__qualname__ = f"BackendConformance.{test.__name__}"
    test.__doc__ = f"{check.id}: {check.title}"
    marked: Callable[..., None] = pytest.mark.indexplug_check(check.id)(test)
    return marked


for _c in CHECKS:
    setattr(BackendConformance, method_name(_c.id), _make_test(_c))
del _c
