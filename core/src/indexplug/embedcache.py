"""A disk cache of passage embeddings, keyed by embedder name and passage id.

Embedding is the expensive part of building a dense index (thousands of model calls against a
few milliseconds of storage), and the same passages are embedded again and again: re-indexing
a folder, rebuilding an index after a budget refusal, indexing one corpus into two backends,
re-running an evaluation.  A passage id is the content address of its text, uri, span and
caller key, so "same embedder name + same passage id" means "same input to the same model": the
vector can be reused instead of computed.

Layout: one small SQLite file per embedder under ``<indexplug home>/embedcache/`` (WAL mode, so
several processes can share it), each row one passage's vector(s) for one granularity as a
raw little-endian float32 (or float16) blob.  The file records the embedder name and dimension
it was made for, and rows whose size does not fit are ignored rather than trusted.

The cache is an optimisation and never a source of failure: any SQLite error (disk full, a
locked or corrupt file) is reported once as a warning and the vectors are simply computed.
Any backend can use it through :func:`embed_passages`.

Caveat: the key is the embedder *name*.  An embedder whose weights change under the same name
(a local model folder overwritten in place) must get a new cache: delete its file, or pass a
different ``root``.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from indexplug.home import home_dir
from indexplug.passages import Passage
from indexplug.protocols import Embedder, Granularity, Vector

CacheDtype = Literal["float32", "float16"]

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vectors (
    id TEXT NOT NULL,
    granularity TEXT NOT NULL,
    rows INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (id, granularity)
) WITHOUT ROWID;
"""
_CHUNK = 500
"""Ids per ``IN (...)`` lookup: well under SQLite's bound-parameter limit."""


def default_cache_dir() -> Path:
    """``INDEXPLUG_EMBED_CACHE`` when set, else ``<indexplug home>/embedcache``: shared by every
    backend of this home.  The variable lets several homes (a test run's, a benchmark's fresh
    folders, a second deployment on the same machine) share one cache of the same model's
    vectors, since a vector depends only on the embedder and the passage."""
    env = os.environ.get("INDEXPLUG_EMBED_CACHE")
    if env:
        return Path(env).expanduser()
    return home_dir() / "embedcache"


def cache_file_name(embedder_name: str, dtype: CacheDtype = "float32") -> str:
    """A file name that is safe on every platform and unique per embedder name and dtype.

    The readable part helps a person find a cache to delete; the hash keeps two names that
    slug alike (``a/b`` and ``a_b``) apart.  float16 caches live in their own file, so a blob
    is never read with the wrong width.
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", embedder_name).strip("._")[:80] or "embedder"
    digest = hashlib.sha256(embedder_name.encode("utf-8")).hexdigest()[:12]
    suffix = "-f16" if dtype == "float16" else ""
    return f"{slug}-{digest}{suffix}.sqlite"


class EmbeddingCache:
    """The cached vectors of one embedder (see the module docstring).

    Thread-safe: one connection guarded by a lock (lookups and inserts are short).
    """

    def __init__(
        self,
        embedder_name: str,
        dim: int,
        *,
        root: Path | None = None,
        dtype: CacheDtype = "float32",
    ) -> None:
        if dim <= 0:
            raise ValueError(f"an embedding dimension must be positive, got {dim}")
        if dtype not in ("float32", "float16"):
            raise ValueError(f"dtype must be 'float32' or 'float16', got {dtype!r}")
        self.embedder_name = embedder_name
        self.dim = dim
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.path = (root or default_cache_dir()) / cache_file_name(embedder_name, dtype)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._broken = False

    # -- connection -----------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection | None:
        if self._broken:
            return None
        if self._conn is not None:
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            with conn:
                for key, value in (
                    ("schema", str(SCHEMA_VERSION)),
                    ("embedder", self.embedder_name),
                    ("dim", str(self.dim)),
                ):
                    conn.execute(
                        "INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", (key, value)
                    )
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("embedder") != self.embedder_name or meta.get("dim") != str(self.dim):
                conn.close()
                self._disable(
                    f"{self.path} was made for embedder {meta.get('embedder')!r} "
                    f"(dim {meta.get('dim')}), not {self.embedder_name!r} (dim {self.dim})"
                )
                return None
        except sqlite3.Error as exc:
            self._disable(f"cannot open {self.path}: {exc}")
            return None
        self._conn = conn
        return conn

    def _disable(self, why: str) -> None:
        """Stop using the cache for the rest of this object's life, saying why once."""
        self._broken = True
        warnings.warn(
            f"indexplug embedding cache disabled: {why}; embeddings are computed instead",
            RuntimeWarning,
            stacklevel=3,
        )

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- reads and writes -------------------------------------------------------------------
    def get_many(self, ids: Sequence[str], granularity: Granularity) -> dict[str, Vector]:
        """The cached vectors among ``ids`` (missing ones are simply absent)."""
        found: dict[str, Vector] = {}
        with self._lock:
            conn = self._connect()
            if conn is None:
                return found
            try:
                for i in range(0, len(ids), _CHUNK):
                    chunk = list(ids[i : i + _CHUNK])
                    marks = ",".join("?" * len(chunk))
                    rows = conn.execute(
                        f"SELECT id, rows, data FROM vectors WHERE granularity = ? "
                        f"AND id IN ({marks})",
                        [granularity.value, *chunk],
                    ).fetchall()
                    for pid, nrows, blob in rows:
                        vec = self._decode(blob, nrows, granularity)
                        if vec is not None:
                            found[pid] = vec
            except sqlite3.Error as exc:
                self._disable(f"reading {self.path} failed: {exc}")
        return found

    def put_many(self, vectors: Mapping[str, Vector], granularity: Granularity) -> None:
        """Store vectors (an id already present keeps its first vector)."""
        if not vectors:
            return
        rows = []
        for pid, vec in vectors.items():
            arr = np.asarray(vec)
            if arr.shape[-1:] != (self.dim,):
                continue  # never store what a later read could not trust
            nrows = 1 if arr.ndim == 1 else int(arr.shape[0])
            rows.append((pid, granularity.value, nrows, arr.astype(self.dtype).tobytes()))
        with self._lock:
            conn = self._connect()
            if conn is None:
                return
            try:
                with conn:
                    conn.executemany(
                        "INSERT OR IGNORE INTO vectors(id, granularity, rows, data) "
                        "VALUES (?, ?, ?, ?)",
                        rows,
                    )
            except sqlite3.Error as exc:
                self._disable(f"writing {self.path} failed: {exc}")

    def count(self) -> int:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return 0
            return int(conn.execute("SELECT count(*) FROM vectors").fetchone()[0])

    def _decode(self, blob: bytes, nrows: int, granularity: Granularity) -> Vector | None:
        if len(blob) != nrows * self.dim * self.dtype.itemsize:
            return None
        arr = np.frombuffer(blob, dtype=self.dtype).astype(np.float32)
        if granularity is Granularity.TOKEN:
            return arr.reshape(nrows, self.dim)
        return arr if nrows == 1 else None


def embed_passages(
    embedder: Embedder,
    passages: Sequence[Passage],
    granularity: Granularity,
    *,
    cache: EmbeddingCache | None = None,
    embed: Callable[[Sequence[str]], list[Vector]] | None = None,
) -> list[Vector]:
    """The vectors of ``passages`` in order, computing only those ``cache`` does not hold.

    ``embed`` overrides how missing texts are embedded (default:
    ``embedder.embed_documents(texts, granularity)``), e.g. to add batching or a deadline.
    Newly computed vectors are written back to the cache.
    """
    compute = embed or (lambda texts: embedder.embed_documents(texts, granularity))
    if cache is None:
        return list(compute([p.text for p in passages]))
    ids = [p.id for p in passages]
    have = cache.get_many(list(dict.fromkeys(ids)), granularity)
    missing = [p for p in dict((p.id, p) for p in passages).values() if p.id not in have]
    if missing:
        fresh = compute([p.text for p in missing])
        if len(fresh) != len(missing):
            raise RuntimeError(
                f"embedder {embedder.name!r} returned {len(fresh)} vectors for {len(missing)} texts"
            )
        new = {p.id: np.asarray(v, dtype=np.float32) for p, v in zip(missing, fresh, strict=True)}
        cache.put_many(new, granularity)
        have.update(new)
    return [have[i] for i in ids]


_caches: dict[tuple[str, int, str, str], EmbeddingCache] = {}
_caches_lock = threading.Lock()


def cache_for(
    embedder: Embedder, *, root: Path | None = None, dtype: CacheDtype = "float32"
) -> EmbeddingCache:
    """The process-wide cache object for ``embedder`` (one per name, dim, place and dtype), so
    every backend instance in a process shares one connection per cache file."""
    folder = root or default_cache_dir()
    key = (embedder.name, int(embedder.dim), str(folder), dtype)
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            cache = EmbeddingCache(embedder.name, int(embedder.dim), root=folder, dtype=dtype)
            _caches[key] = cache
        return cache
