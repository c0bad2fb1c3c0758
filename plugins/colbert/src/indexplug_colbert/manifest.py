"""The manifest: the one file whose atomic replacement commits a write of the native engine.

It lists the live segments (with the tombstone mask each currently uses and the codebook its
lists refer to), the codebooks still referenced, and the codebook new segments are coded with.
Anything in the store folder that the manifest does not list is not part of the index (a staged
write not yet committed, a refused one, or the leftovers of a crash) and is swept by the next
commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from indexplug_colbert.engines.base import IncompatibleIndex

FORMAT = 2
MANIFEST = "manifest.json"


class StoreError(IncompatibleIndex):
    """The store on disk is not one this code can read (wrong format, damaged manifest)."""


@dataclass(frozen=True)
class CodebookSettings:
    """When and how segments get a codebook (see :mod:`.candidates`)."""

    min_tokens: int = 16_384
    """Segments with fewer token vectors are scored exactly in full instead (at most one such
    small segment exists: small writes are merged into it until it reaches this size)."""
    per_sqrt: float = 4.0
    """``K`` is about ``per_sqrt * sqrt(tokens it is trained on)``."""
    retrain_growth: float = 4.0
    """A segment this many times larger than the tokens the current codebook was trained on gets
    a new codebook (trained on it), which new segments then use."""
    iterations: int = 8
    sample_per_centroid: int = 32
    seed: int = 0


@dataclass(frozen=True)
class CodebookMeta:
    name: str
    k: int
    trained_on: int
    """Token vectors it was trained on (decides when a larger segment retrains)."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k, "trained_on": self.trained_on}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CodebookMeta:
        return cls(name=str(data["name"]), k=int(data["k"]), trained_on=int(data["trained_on"]))


@dataclass(frozen=True)
class SegmentMeta:
    name: str
    docs: int
    tokens: int
    removed: int = 0
    tombstones: str | None = None
    codebook: str | None = None
    """The codebook its lists refer to; ``None``: a small segment, scored in full."""

    @property
    def live(self) -> int:
        return self.docs - self.removed

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "docs": self.docs,
            "tokens": self.tokens,
            "removed": self.removed,
            "tombstones": self.tombstones,
            "codebook": self.codebook,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SegmentMeta:
        return cls(
            name=str(data["name"]),
            docs=int(data["docs"]),
            tokens=int(data["tokens"]),
            removed=int(data.get("removed", 0)),
            tombstones=data.get("tombstones"),
            codebook=data.get("codebook"),
        )


@dataclass(frozen=True)
class Manifest:
    generation: int
    dim: int
    segments: tuple[SegmentMeta, ...] = ()
    codebooks: tuple[CodebookMeta, ...] = ()
    current: str | None = None
    """The codebook new segments are coded with."""

    @property
    def live(self) -> int:
        return sum(s.live for s in self.segments)

    def codebook(self, name: str | None) -> CodebookMeta | None:
        return next((c for c in self.codebooks if c.name == name), None)

    def to_bytes(self) -> bytes:
        data = {
            "format": FORMAT,
            "generation": self.generation,
            "dim": self.dim,
            "current_codebook": self.current,
            "codebooks": [c.to_json() for c in self.codebooks],
            "segments": [s.to_json() for s in self.segments],
        }
        return json.dumps(data, indent=1).encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                found = data.get("format") if isinstance(data, dict) else None
                raise StoreError(f"unknown store format {found!r} (expected {FORMAT})")
            return cls(
                generation=int(data["generation"]),
                dim=int(data["dim"]),
                segments=tuple(SegmentMeta.from_json(s) for s in data["segments"]),
                codebooks=tuple(CodebookMeta.from_json(c) for c in data.get("codebooks", [])),
                current=data.get("current_codebook"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"the manifest is damaged: {exc}") from exc
