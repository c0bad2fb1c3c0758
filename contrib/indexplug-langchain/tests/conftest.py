"""Every test gets its own indexplug home; coroutine tests run under pytest-asyncio.

The standard suites of ``langchain-tests`` write their async tests as plain ``async def``
(LangChain's own repositories run pytest-asyncio in ``auto`` mode); the repository's pytest
configuration is shared by every env, so the ``asyncio`` mark is added here, to the coroutine
tests of this folder only (this conftest's hooks apply to this folder).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(
    collector: pytest.Module | pytest.Class, name: str, obj: object
) -> list[pytest.Function] | None:
    """A coroutine test of langchain-tests' standard suites as a test item marked ``asyncio``
    (pytest-asyncio then runs it); every other item is collected as usual (this folder's own
    coroutine tests carry the mark themselves)."""
    if (
        inspect.iscoroutinefunction(obj)
        and str(getattr(obj, "__module__", "")).startswith("langchain_tests.")
        and collector.istestfunction(obj, name)
    ):
        item = pytest.Function.from_parent(collector, name=name)
        item.add_marker(pytest.mark.asyncio)
        return [item]
    return None


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "indexplug-home"
    home.mkdir()
    monkeypatch.setenv("INDEXPLUG_HOME", str(home))
    monkeypatch.setenv("ANONYMIZED_TELEMETRY", "False")
    return home
