"""Imports point down: CLI -> orchestration -> guard and discovery -> protocols and models.

A constant a higher layer needs from a lower one without importing it at start is written in
both places; the tests here hold the copies equal.
"""

from __future__ import annotations

from indexplug import config, fusion


def test_config_states_fusions_default_rrf_k() -> None:
    """The configuration's default k is fusion's, and a fusion index that names none gets it."""
    assert config.DEFAULT_RRF_K == fusion.DEFAULT_RRF_K
    ic = config.IndexConfig(kind="fusion", members=["a", "b"])
    assert ic.rrf_k == fusion.DEFAULT_RRF_K
