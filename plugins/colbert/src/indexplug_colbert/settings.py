"""The backend's own settings, and the facts kept with each index (``<index>/index.json``).

``index.json`` is written once by the first write that commits and records what the index can
only ever be served with: the engine that built it, the embedder and its dimension, and the
storage budget.  It is what makes "an index configured for one engine never answers with
another" and "an index built with one embedder is never searched with another" checkable before
any vector is read.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from indexplug.errors import InvalidOption

from indexplug_colbert.engines import DEFAULT_ENGINE, ENGINES

SETTINGS_FILE = "index.json"
FORMAT = 1
BACKEND_OPTIONS = frozenset({"engine", "fallback", "embedder"})
FALLBACKS = ("native",)


@dataclass(frozen=True)
class BackendSettings:
    engine: str = DEFAULT_ENGINE
    """``native`` (default) or ``ragatouille``."""
    fallback: str | None = None
    """``native``: serve with the native engine when ``engine`` is not installed, saying so in
    every answer (``degraded``).  Unset: an unavailable engine means ``INDEX_UNAVAILABLE``."""
    embedder: str | None = None
    """``PROVIDER:MODEL``; unset means the one the index was built with, else the engine's
    default (``hashing:default`` for native)."""

    @classmethod
    def split(cls, options: Mapping[str, Any]) -> tuple[BackendSettings, dict[str, Any]]:
        """The backend's settings, and the rest (for the engines)."""
        engine = str(options.get("engine") or DEFAULT_ENGINE).strip().lower()
        if engine not in ENGINES:
            known = ", ".join(sorted(ENGINES))
            raise InvalidOption("engine", f"unknown colbert engine {engine!r} (engines: {known})")
        fallback = options.get("fallback")
        if fallback in (None, "", "none", False):
            fallback = None
        elif str(fallback).strip().lower() in FALLBACKS:
            fallback = str(fallback).strip().lower()
        else:
            raise InvalidOption(
                "fallback", f"colbert setting fallback must be one of {FALLBACKS} or unset"
            )
        embedder = options.get("embedder")
        if embedder is not None and (not isinstance(embedder, str) or ":" not in embedder):
            raise InvalidOption(
                "embedder", f"colbert setting embedder is 'PROVIDER:MODEL', got {embedder!r}"
            )
        rest = {k: v for k, v in options.items() if k not in BACKEND_OPTIONS}
        return cls(engine=engine, fallback=fallback, embedder=embedder), rest


@dataclass(frozen=True)
class IndexFacts:
    """What ``index.json`` holds."""

    engine: str
    embedder: str
    dim: int
    max_bytes: int | None = None
    configured_engine: str | None = None
    """Set when the index was built by the fallback engine: the engine it was configured for."""
    format: int = FORMAT

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode("utf-8")

    @classmethod
    def read(cls, folder: Path) -> IndexFacts | None:
        """The facts of the index in ``folder``; ``None`` when no write has committed there."""
        try:
            raw = (folder / SETTINGS_FILE).read_bytes()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(raw)
            if data.get("format") != FORMAT:
                raise ValueError(f"unknown format {data.get('format')!r}")
            return cls(
                engine=str(data["engine"]),
                embedder=str(data["embedder"]),
                dim=int(data["dim"]),
                max_bytes=int(data["max_bytes"]) if data.get("max_bytes") else None,
                configured_engine=data.get("configured_engine"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{folder / SETTINGS_FILE} is damaged or not ours: {exc}") from exc

    def write(self, folder: Path) -> None:
        """Atomically (write a temporary file, fsync, rename)."""
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{SETTINGS_FILE}.{secrets.token_hex(4)}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(self.to_bytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, folder / SETTINGS_FILE)
