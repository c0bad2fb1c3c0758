"""Fixtures of the conformance kit's own tests."""

from __future__ import annotations

import pytest
from indexplug.testing import KitSettings

pytest_plugins = ["pytester"]

FAST = KitSettings(
    scale_passages=400,
    scale_batch=100,
    threads=4,
    batches_per_thread=6,
    huge_passage_chars=100_000,
    recovery_timeout_s=5.0,
    property_examples=4,
    property_filters=20,
)
"""Small enough to run the whole kit many times; large enough that every rule is exercised."""


@pytest.fixture
def fast() -> KitSettings:
    return FAST
