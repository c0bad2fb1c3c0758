"""The native engine's settings (``--option KEY=VALUE``, or ``settings`` of an index in the
configuration file), validated once when the backend is created."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexplug.errors import InvalidOption

from indexplug_colbert.manifest import CodebookSettings

OPTIONS = frozenset(
    {
        "candidates",
        "reach_pool",
        "pooled_weight",
        "nprobe",
        "codebook_min_tokens",
        "centroids_per_sqrt",
        "kmeans_iterations",
        "merge_factor",
        "seed",
        "exhaustive",
        "embed_cache",
        "embed_cache_dir",
    }
)


RENAMED = {
    "max_segments": "max_segments is gone: segments now merge by size tier, set merge_factor "
    "(segments of one tier merged into one, default 8) instead",
}
"""Settings that existed once, with what to set instead (an old configuration file gets told,
not just refused)."""


def _int(options: Mapping[str, Any], key: str, default: int, low: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidOption(key, f"colbert setting {key} must be an integer, got {value!r}")
    try:
        n = int(value)
    except ValueError:
        raise InvalidOption(
            key, f"colbert setting {key} must be an integer, got {value!r}"
        ) from None
    if n < low:
        raise InvalidOption(key, f"colbert setting {key} must be at least {low}, got {n}")
    return n


def _bool(options: Mapping[str, Any], key: str, default: bool) -> bool:
    value = options.get(key, default)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


@dataclass(frozen=True)
class NativeSettings:
    candidates: int = 128
    """Passages scored by exact MaxSim per search (at least ``top_k``)."""
    reach_pool: int = 384
    """Passages re-scored by centroid interaction before the exact stage."""
    pooled_weight: float = 1.0
    """Weight of the pooled similarity next to centroid interaction (0: interaction alone)."""
    nprobe: int = 2
    """Centroids probed per query token."""
    merge_factor: int = 8
    """Segments of one size tier (sizes within this factor of each other) that an add merges
    into one segment of the next tier (tiered merging, see ``NativeEngine._add``)."""
    exhaustive: bool = False
    """Score every passage exactly (no candidate generation): the reference, and for tests."""
    embed_cache: bool | None = None
    """Reuse token vectors already computed for a passage id (:mod:`indexplug.embedcache`,
    kept as float16, which is what the index quantises anyway, see :mod:`..codec`).  ``None``
    (``auto``): on, except for the model-free ``hashing`` embedder, which computes token vectors
    faster than the cache would store them (and they take ``2 * dim`` bytes each)."""
    embed_cache_dir: Path | None = None
    """Where that cache lives (default: ``<indexplug home>/embedcache``)."""
    codebook: CodebookSettings = field(default_factory=CodebookSettings)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> NativeSettings:
        unknown = sorted(str(k) for k in options if k not in OPTIONS)
        if unknown:
            hints = "".join(f"; {RENAMED[k]}" for k in unknown if k in RENAMED)
            raise InvalidOption(
                unknown[0], f"unknown native engine setting(s): {', '.join(unknown)}{hints}"
            )
        try:
            per_sqrt = float(options.get("centroids_per_sqrt", CodebookSettings.per_sqrt))
        except (TypeError, ValueError):
            per_sqrt = -1.0  # refused just below, naming the setting
        if not 0.1 <= per_sqrt <= 64:
            raise InvalidOption(
                "centroids_per_sqrt",
                "colbert setting centroids_per_sqrt must be between 0.1 and 64",
            )
        cache_dir = options.get("embed_cache_dir")
        try:
            weight = float(options.get("pooled_weight", cls.pooled_weight))
        except (TypeError, ValueError):
            raise InvalidOption(
                "pooled_weight", "colbert setting pooled_weight must be a number"
            ) from None
        if not 0 <= weight <= 100:
            raise InvalidOption(
                "pooled_weight", "colbert setting pooled_weight must be between 0 and 100"
            )
        return cls(
            candidates=_int(options, "candidates", cls.candidates, 1),
            reach_pool=_int(options, "reach_pool", cls.reach_pool, 1),
            pooled_weight=weight,
            nprobe=_int(options, "nprobe", cls.nprobe, 1),
            merge_factor=_int(options, "merge_factor", cls.merge_factor, 2),
            exhaustive=_bool(options, "exhaustive", cls.exhaustive),
            embed_cache=(
                None
                if str(options.get("embed_cache", "auto")).strip().lower() == "auto"
                else _bool(options, "embed_cache", True)
            ),
            embed_cache_dir=Path(str(cache_dir)).expanduser() if cache_dir else None,
            codebook=CodebookSettings(
                min_tokens=_int(options, "codebook_min_tokens", CodebookSettings.min_tokens, 64),
                per_sqrt=per_sqrt,
                iterations=_int(options, "kmeans_iterations", CodebookSettings.iterations, 1),
                seed=_int(options, "seed", CodebookSettings.seed, 0),
            ),
        )
