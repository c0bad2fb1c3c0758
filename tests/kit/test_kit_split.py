"""The kit's registry and the cards it gives stay what they were when the kit was one module.

``data/kit_snapshot.json`` was written from ``indexplug.testing.checks`` while it was a single
file: every check's id, title, gating (claim, hooks, the outage special case) in registry order,
and the card (check id -> status and reason) of each backend that
runs without a server or torch.  Splitting the kit into one module per check family must change
none of it.  Backends not installed here (the contrib ones outside tox's ``contrib`` env) are
compared where they are installed; the core ones must always be.

Regenerate (only for an intended change of the kit): ``python tests/kit/test_kit_split.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from indexplug.plugins import get_registry
from indexplug.testing import CHECKS, KitSettings, checks, run_card
from indexplug.testing.reference import _factory as reference_factory

SNAPSHOT = Path(__file__).parent / "data" / "kit_snapshot.json"

SETTINGS = KitSettings(
    scale_passages=400,
    scale_batch=100,
    threads=4,
    batches_per_thread=6,
    huge_passage_chars=100_000,
    recovery_timeout_s=5.0,
    property_examples=4,
    property_filters=20,
)
"""The kit's own fast settings (tests/kit/conftest.py), repeated so the script runs alone."""

BACKENDS: dict[str, tuple[str | Callable[..., Any], dict[str, Any]]] = {
    "reference": (reference_factory, {}),
    "sqlite-fts5": ("sqlite-fts5", {}),
    "fake-memory": ("fake-memory", {}),
    "template-backend": ("template-backend", {}),
    "usearch": ("usearch", {"embedder": "hashing:default"}),
}
"""The backends whose cards are snapshotted: name -> (what run_card opens, its options)."""

ALWAYS = ("reference", "sqlite-fts5", "fake-memory")
"""Installed in every env that runs tests/kit (tox ``core``): never left out."""


def registry() -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "title": c.title,
            "claim": c.claim,
            "needs": list(c.needs),
            "outage_or_claim": c.outage_or_claim,
        }
        for c in CHECKS
    ]


def card(name: str) -> dict[str, Any]:
    ref, options = BACKENDS[name]
    got = run_card(ref, options, settings=SETTINGS)
    return {c.id: {"status": c.status.value, "reason": c.reason} for c in got.checks}


def installed(name: str) -> bool:
    if name == "reference":
        return True
    return name in get_registry().backend_names()


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    return data


def test_registry_is_unchanged() -> None:
    assert registry() == load()["registry"]


def test_core_backends_are_installed() -> None:
    assert [n for n in ALWAYS if not installed(n)] == []


@pytest.mark.parametrize("name", [n for n in BACKENDS if installed(n)])
def test_card_is_unchanged(name: str) -> None:
    assert card(name) == load()["cards"][name]


def test_the_guide_names_each_checks_module() -> None:
    """docs/writing-a-backend.md lists every check, in order, with the module that holds it."""
    guide = Path(__file__).parents[2] / "docs" / "writing-a-backend.md"
    rows = [
        [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        for line in guide.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `") and line.split("`")[1] in {c.id for c in CHECKS}
    ]
    assert [(r[0], r[-1]) for r in rows] == [
        (c.id, c.fn.__module__.removeprefix("indexplug.testing.checks.")) for c in CHECKS
    ]
    for module in {r[-1] for r in rows}:
        assert (Path(checks.__file__).parent / f"{module}.py").is_file()


def main() -> None:
    missing = [n for n in BACKENDS if not installed(n)]
    if missing:
        raise SystemExit(f"install every snapshotted backend first; missing: {missing}")
    data = {"registry": registry(), "cards": {n: card(n) for n in BACKENDS}}
    SNAPSHOT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)


if __name__ == "__main__":
    main()
