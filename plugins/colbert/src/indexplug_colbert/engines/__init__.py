"""The engines of the colbert backend, chosen per index with the ``engine`` setting.

Engines are imported lazily, by name, so a missing engine (its module not shipped yet, or its
libraries not installed) is reported as *not ready, because ...* instead of breaking the plugin:

* ``native`` (default): this package's own MaxSim engine over any token-level embedder;
* ``ragatouille``: real ColBERT checkpoints through RAGatouille
  (``indexplug-colbert[ragatouille]``), in ``indexplug_colbert.engines.ragatouille`` as a class
  ``RagatouilleEngine``.

An engine module exposes one class taking ``(settings, embedder_factory)`` and a module-level
``OPTIONS`` (the settings it understands) and ``live_count(folder)`` (the live passages its
data in ``folder`` holds, for the ``indexes`` op); see :mod:`indexplug_colbert.engines.base`
for the contract.  It must import its heavy libraries lazily (in ``readiness()`` or ``open()``),
so that importing the module is cheap and a missing library is a not-ready reason, not an
import error.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexplug.protocols import Embedder

from indexplug_colbert.engines.base import Engine, EngineNotInstalled


@dataclass(frozen=True)
class EngineEntry:
    module: str
    cls: str
    install: str
    """What to install when the import fails (shown in the not-ready reason)."""


ENGINES: dict[str, EngineEntry] = {
    "native": EngineEntry("indexplug_colbert.engines.native", "NativeEngine", "indexplug-colbert"),
    "ragatouille": EngineEntry(
        "indexplug_colbert.engines.ragatouille",
        "RagatouilleEngine",
        "indexplug-colbert[ragatouille]",
    ),
}
DEFAULT_ENGINE = "native"


def load_engine(
    name: str,
    settings: Mapping[str, Any],
    embedder_factory: Callable[[str], Embedder] | None,
) -> Engine:
    """Instantiate engine ``name``; :class:`EngineNotInstalled` says why it cannot be."""
    entry = ENGINES.get(name)
    if entry is None:
        known = ", ".join(sorted(ENGINES))
        raise ValueError(f"unknown colbert engine {name!r} (engines: {known})")
    try:
        module = importlib.import_module(entry.module)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise EngineNotInstalled(
            f"the {name} engine is not installed ({missing} cannot be imported); "
            f"install {entry.install}"
        ) from exc
    cls = getattr(module, entry.cls, None)
    if cls is None:
        raise EngineNotInstalled(f"{entry.module} has no engine class {entry.cls}")
    engine: Engine = cls(dict(settings), embedder_factory)
    return engine


def live_count(name: str, folder: Path) -> int:
    """The live passages of the index in ``folder`` built by engine ``name``, read from the
    engine's own commit record by its module-level ``live_count(engine_folder)`` (cheap: no
    heavy library, no embedder, no segment opened)."""
    entry = ENGINES[name]
    module = importlib.import_module(entry.module)
    count: Callable[[Path], int] = module.live_count
    return count(folder / name)


def engine_options(name: str) -> frozenset[str]:
    """The settings engine ``name`` understands, without importing its heavy libraries (each
    engine module keeps them in a module-level ``OPTIONS``); empty if it is not installed."""
    entry = ENGINES.get(name)
    if entry is None:
        return frozenset()
    try:
        module = importlib.import_module(entry.module)
    except ImportError:
        return frozenset()
    return frozenset(getattr(module, "OPTIONS", ()))
