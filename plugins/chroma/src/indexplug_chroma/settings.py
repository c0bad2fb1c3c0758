"""The chroma backend's settings, parsed once from ``--option KEY=VALUE`` or the config file.

Options arrive typed when they parse as JSON on the command line (``port=8000``) and as strings
from elsewhere, so every field accepts both.  An unknown key is an error: a misspelt
``mdoe=server`` silently running embedded would be the worst kind of surprise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from indexplug.errors import InvalidOption

DEFAULT_EMBEDDER = "sentence-transformers:all-MiniLM-L6-v2"

Mode = Literal["embedded", "server"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidOption(key, f"chroma option {key} must be true or false, got {value!r}")


def _positive(key: str, value: Any, kind: type[int] | type[float]) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidOption(key, f"chroma option {key} must be a number, got {value!r}") from None
    if not 0 < number < float("inf"):  # NaN too
        raise InvalidOption(key, f"chroma option {key} must be positive, got {value!r}")
    return number


@dataclass(frozen=True)
class ChromaSettings:
    """Every setting of the chroma backend (see ``docs/backends/chroma.md``)."""

    embedder: str = DEFAULT_EMBEDDER
    """Embedder spec ``PROVIDER:MODEL``; recorded with each index at its first write."""
    mode: Mode = "embedded"
    """``embedded``: a ``PersistentClient`` folder per index; ``server``: an ``HttpClient``."""
    host: str = "localhost"
    port: int = 8000
    ssl: bool = False
    timeout_s: float = 30.0
    """Server mode: the longest one HTTP request may take (a hung server frees the thread)."""
    connect_timeout_s: float = 2.0
    """Server mode: connecting, and the heartbeat that readiness makes."""
    embed_cache: bool = True
    """Reuse embeddings already computed for a passage id (``indexplug.embedcache``)."""
    embed_cache_dir: Path | None = None
    """Where the embedding cache lives (default: ``<indexplug home>/embedcache``)."""
    max_open: int = 32
    """Embedded mode: index folders kept open at once (each holds threads and files)."""
    ef_search: int | None = 256
    """HNSW search breadth for new collections (None: Chroma's default, 100).  256 because at
    100 a top-100 SciFact search with all-MiniLM-L6-v2 scored nDCG@10 0.637 to 0.642 against
    0.6451 for an exact search, and at 256 it scored 0.6451 (see ``docs/backends/chroma.md``)."""
    count_ttl_s: float = 1.0
    """How long a search may reuse the passage count it reports as ``searched`` (writes
    through indexplug in this process refresh it at once); 0 counts on every search."""
    plain_documents: bool = False
    """Collections created from now on keep each record's document as the passage text alone,
    with the provenance in an ``ip.prov`` metadata key, for collections other Chroma clients
    read too; by default the provenance follows the text in the document, which spares Chroma
    the metadata of every hit (about 1 ms of a top-100 query, ``bench/metadata_keys.py``).  A
    collection keeps the layout it was created with, and every layout is read."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ChromaSettings:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(str(k) for k in options if k not in known)
        if unknown:
            raise InvalidOption(
                unknown[0],
                f"unknown chroma option(s): {', '.join(unknown)} "
                f"(known: {', '.join(sorted(known))})",
            )
        o = dict(options)
        mode = str(o.get("mode", "embedded")).strip().lower()
        if mode not in ("embedded", "server"):
            raise InvalidOption(
                "mode", f"chroma option mode must be 'embedded' or 'server', got {mode!r}"
            )
        embedder = str(o.get("embedder") or DEFAULT_EMBEDDER)
        if ":" not in embedder:
            raise InvalidOption(
                "embedder", f"chroma option embedder is a spec PROVIDER:MODEL, got {embedder!r}"
            )
        cache = o.get("embed_cache", True)
        cache_dir = o.get("embed_cache_dir")
        port = _positive("port", o.get("port", 8000), int)
        if port > 65535:
            raise InvalidOption("port", f"chroma option port must be at most 65535, got {port}")
        ef = o.get("ef_search", 256)
        try:
            count_ttl = float(o.get("count_ttl_s", 1.0))
        except (TypeError, ValueError):
            raise InvalidOption(
                "count_ttl_s",
                f"chroma option count_ttl_s must be a number, got {o.get('count_ttl_s')!r}",
            ) from None
        if not 0 <= count_ttl < float("inf"):
            raise InvalidOption(
                "count_ttl_s",
                f"chroma option count_ttl_s must be a finite 0 or more, got {count_ttl}",
            )
        return cls(
            embedder=embedder,
            mode=mode,  # type: ignore[arg-type]
            host=str(o.get("host") or "localhost"),
            port=port,
            ssl=_bool("ssl", o.get("ssl", False)),
            timeout_s=_positive("timeout_s", o.get("timeout_s", 30.0), float),
            connect_timeout_s=_positive(
                "connect_timeout_s", o.get("connect_timeout_s", 2.0), float
            ),
            embed_cache=_bool("embed_cache", cache),
            embed_cache_dir=Path(str(cache_dir)).expanduser() if cache_dir else None,
            max_open=_positive("max_open", o.get("max_open", 32), int),
            ef_search=_positive("ef_search", ef, int) if ef is not None else None,
            count_ttl_s=count_ttl,
            plain_documents=_bool("plain_documents", o.get("plain_documents", False)),
        )

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl else 'http'}://{self.host}:{self.port}"
