"""Where collections live: embedded folders (``PersistentClient``) or a server (``HttpClient``).

Both stores give the backend the same small interface (get, create, drop, size, heartbeat,
close), so the backend's ops are written once.  What differs, and why:

* **Embedded**: one folder per index under the backend's home, each its own
  ``PersistentClient`` holding one collection.  A folder per index makes an index a thing a
  person can see, copy, size and delete, and keeps one index's damage away from the others.
  A client costs threads and open files, so at most ``max_open`` stay open; the least recently
  used idle one is closed when another is needed.  Size is measured from the files on disk.
  chromadb shares one ``System`` per folder between the clients of a process, but creates it
  check-then-act without a lock: two ``PersistentClient`` calls for one folder at once (two
  backend instances on one home) can build two systems on one SQLite file, or fail half-way, and
  a close racing a creation can stop the system the new client gets.  Every embedded client is
  therefore created and closed under one process-wide lock (:data:`CLIENTS_LOCK`).
* **Server**: one ``HttpClient``, created on first use (never by the factory, so creating a
  backend never touches the network) and dropped after a connection error, so that the next op
  reconnects: the backend recovers by itself when the server comes back.  A server does not
  report sizes; the backend estimates them (see :mod:`indexplug_chroma.backend`).

Nothing here uses Chroma's default embedding function: collections are always opened with
``embedding_function=None`` and embeddings always come from the indexplug embedder.
"""

from __future__ import annotations

import os
import shutil
import threading
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from indexplug.counts import CountCache
from indexplug.names import validate_index_name

from indexplug_chroma.settings import ChromaSettings

COLLECTION_PREFIX = "indexplug."


def collection_name(index: str) -> str:
    """The Chroma collection of an index.

    Chroma names must end with a letter or digit and index names may end with ``-`` or ``_``;
    a ``.0`` suffix fixes that, and cannot collide with another index because ``.`` never
    occurs in an index name.
    """
    name = COLLECTION_PREFIX + index
    return name if index[-1].isalnum() else name + ".0"


def chroma_settings() -> Any:
    """Client settings: telemetry off, and identical for every client of a path (Chroma
    refuses a second client on one path with different settings)."""
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=False)


def collection_config(settings: ChromaSettings) -> dict[str, Any]:
    hnsw: dict[str, Any] = {"space": "cosine"}
    if settings.ef_search:
        hnsw["ef_search"] = settings.ef_search
    return {"hnsw": hnsw}


class Store(Protocol):
    estimate_sizes: bool
    """True when sizes are estimated (a server) rather than measured (files on disk)."""

    def exists(self, index: str) -> bool | None:
        """False when the index surely does not exist (no need to connect); None: ask."""
        ...

    def use(self, index: str) -> Any:
        """A context manager yielding the client of an index (kept open while in use)."""
        ...

    def get(self, client: Any, index: str) -> Any | None: ...

    def create(self, client: Any, index: str, metadata: Mapping[str, Any]) -> tuple[Any, bool]:
        """The new collection, and whether this call created it (False: another writer did
        first, and its collection is returned)."""
        ...

    def drop(self, index: str) -> bool: ...

    def names(self) -> list[str]:
        """The names of the indexes this store may hold (each still to be opened and checked
        for an indexplug collection)."""
        ...

    def disk_bytes(self, index: str) -> int | None: ...

    def key(self, index: str) -> str:
        """Names the index's collection process-wide (its folder, or server URL and name):
        the key of its write lock and of its cached count."""
        ...

    def count(self, index: str, collection: Any) -> int:
        """The passages in ``collection``, for searches: possibly from :class:`CountCache`."""
        ...

    def forget_count(self, index: str) -> None: ...

    def heartbeat(self) -> str | None: ...

    def where(self, index: str) -> dict[str, Any]: ...

    def close(self) -> None: ...


def index_of(collection: str) -> str | None:
    """The index a collection name belongs to (the inverse of :func:`collection_name`), or
    None for a collection indexplug did not name."""
    if not collection.startswith(COLLECTION_PREFIX):
        return None
    name = collection[len(COLLECTION_PREFIX) :]
    if name.endswith(".0"):
        name = name[:-2]
    try:
        validate_index_name(name)
    except Exception:
        return None
    return name if collection_name(name) == collection else None


def _get(client: Any, index: str) -> Any | None:
    from chromadb.errors import NotFoundError

    try:
        return client.get_collection(collection_name(index), embedding_function=None)
    except NotFoundError:
        return None
    except ValueError as exc:  # older clients say "does not exist" with a ValueError
        if "does not exist" in str(exc):
            return None
        raise


def _create(
    client: Any, index: str, metadata: Mapping[str, Any], config: dict[str, Any]
) -> tuple[Any, bool]:
    """Create the collection; if another writer created it first, use theirs (the backend then
    checks its recorded embedder like any other existing collection)."""
    from chromadb.errors import UniqueConstraintError

    try:
        made = client.create_collection(
            collection_name(index),
            embedding_function=None,
            metadata=dict(metadata),
            configuration=config,
        )
    except UniqueConstraintError:
        found = _get(client, index)
        if found is None:
            raise
        return found, False
    return made, True


COUNTS = CountCache()
"""Chroma passage counts, shared by every chroma backend instance of the process: kept for
``count_ttl_s`` and forgotten by every write made through indexplug in this process."""

CLIENTS_LOCK = threading.Lock()
"""Held around every ``PersistentClient`` creation and close (see the module docstring)."""


class EmbeddedStore:
    """``PersistentClient`` folders under ``home`` (see the module docstring)."""

    estimate_sizes = False

    def __init__(self, home: Path, settings: ChromaSettings) -> None:
        self.home = Path(home)
        self.settings = settings
        self._lock = threading.Lock()
        self._open: OrderedDict[str, list[Any]] = OrderedDict()
        """index -> [client, users]: most recently used last."""

    def folder(self, index: str) -> Path:
        return self.home / index

    def exists(self, index: str) -> bool | None:
        """Reads never create a folder: an index without one is known not to exist."""
        return None if (self.folder(index) / "chroma.sqlite3").is_file() else False

    @contextmanager
    def use(self, index: str) -> Iterator[Any]:
        with self._lock:
            entry = self._open.get(index)
            if entry is None:
                import chromadb

                self.folder(index).mkdir(parents=True, exist_ok=True)
                with CLIENTS_LOCK:
                    client = chromadb.PersistentClient(
                        path=str(self.folder(index)), settings=chroma_settings()
                    )
                entry = [client, 0]
                self._open[index] = entry
            entry[1] += 1
            self._open.move_to_end(index)
            self._evict()
        try:
            yield entry[0]
        finally:
            with self._lock:
                entry[1] -= 1

    def _evict(self) -> None:
        """Close idle clients beyond ``max_open`` (caller holds the lock)."""
        for index in list(self._open):
            if len(self._open) <= self.settings.max_open:
                return
            client, users = self._open[index]
            if users == 0:
                del self._open[index]
                _close_embedded(client)

    def get(self, client: Any, index: str) -> Any | None:
        return _get(client, index)

    def create(self, client: Any, index: str, metadata: Mapping[str, Any]) -> tuple[Any, bool]:
        return _create(client, index, metadata, collection_config(self.settings))

    def drop(self, index: str) -> bool:
        """Delete the collection, close the folder's client and remove the folder.

        The folder is removed only when no client in this process still uses it (another
        backend instance on the same home keeps Chroma's shared system alive); the collection
        is deleted either way, so the index is gone for every reader.
        """
        if not self.folder(index).exists():
            return False
        from chromadb.api.shared_system_client import SharedSystemClient

        with self.use(index) as client:
            existed = _get(client, index) is not None
            if existed:
                client.delete_collection(collection_name(index))
        with self._lock:
            entry = self._open.get(index)
            if entry is not None and entry[1] == 0:
                del self._open[index]
                _close_embedded(entry[0])
        path = str(self.folder(index))
        with CLIENTS_LOCK:  # no client of this folder can be created while it is removed
            if path not in SharedSystemClient._identifier_to_system:
                shutil.rmtree(path, ignore_errors=True)
        return existed

    def names(self) -> list[str]:
        """The folders under ``home`` holding a Chroma database, by valid index name."""
        out: list[str] = []
        try:
            entries = sorted(self.home.iterdir())
        except FileNotFoundError:
            return out
        for entry in entries:
            try:
                validate_index_name(entry.name)
            except Exception:
                continue
            if (entry / "chroma.sqlite3").is_file():
                out.append(entry.name)
        return out

    def disk_bytes(self, index: str) -> int | None:
        """Bytes of every file in the index's folder (what the index costs on disk)."""
        total = 0
        try:
            for root, _dirs, files in os.walk(self.folder(index)):
                for name in files:
                    try:
                        total += os.stat(os.path.join(root, name)).st_size
                    except FileNotFoundError:
                        continue  # a segment file replaced while we walked
        except OSError:
            return None
        return total

    def key(self, index: str) -> str:
        return str(self.folder(index).absolute())

    def count(self, index: str, collection: Any) -> int:
        return COUNTS.get(self.key(index), collection.count, self.settings.count_ttl_s)

    def forget_count(self, index: str) -> None:
        COUNTS.forget(self.key(index))

    def heartbeat(self) -> str | None:
        return None

    def where(self, index: str) -> dict[str, Any]:
        return {"mode": "embedded", "path": str(self.folder(index))}

    def close(self) -> None:
        with self._lock:
            for client, _users in self._open.values():
                _close_embedded(client)
            self._open.clear()


class ServerStore:
    """One ``HttpClient`` to a Chroma server (see the module docstring)."""

    estimate_sizes = True

    def __init__(self, settings: ChromaSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: Any = None

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import chromadb

                client = chromadb.HttpClient(
                    host=self.settings.host,
                    port=self.settings.port,
                    ssl=self.settings.ssl,
                    settings=chroma_settings(),
                )
                _bound_requests(client, self.settings)
                self._client = client
            return self._client

    def reset(self) -> None:
        """Forget the client after a connection error: the next op connects afresh."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            _close(client)

    def exists(self, index: str) -> bool | None:
        return None

    @contextmanager
    def use(self, index: str) -> Iterator[Any]:
        yield self.client()

    def get(self, client: Any, index: str) -> Any | None:
        return _get(client, index)

    def create(self, client: Any, index: str, metadata: Mapping[str, Any]) -> tuple[Any, bool]:
        return _create(client, index, metadata, collection_config(self.settings))

    def drop(self, index: str) -> bool:
        client = self.client()
        if _get(client, index) is None:
            return False
        client.delete_collection(collection_name(index))
        return True

    def names(self) -> list[str]:
        """The server's collections named by indexplug (``indexplug.*``), by index name."""
        client = self.client()
        out: list[str] = []
        offset, page = 0, 100
        while True:
            batch = client.list_collections(limit=page, offset=offset)
            for coll in batch:
                name = index_of(str(coll.name))
                if name is not None:
                    out.append(name)
            if len(batch) < page:
                return sorted(set(out))
            offset += page

    def disk_bytes(self, index: str) -> int | None:
        return None

    def key(self, index: str) -> str:
        return f"{self.settings.url}/{collection_name(index)}"

    def count(self, index: str, collection: Any) -> int:
        return COUNTS.get(self.key(index), collection.count, self.settings.count_ttl_s)

    def forget_count(self, index: str) -> None:
        COUNTS.forget(self.key(index))

    def heartbeat(self) -> str | None:
        """None when the server answers its heartbeat, else why not (bounded by
        ``connect_timeout_s``; plain HTTP so that it needs no client and no session)."""
        url = f"{self.settings.url}/api/v2/heartbeat"
        try:
            with urllib.request.urlopen(url, timeout=self.settings.connect_timeout_s) as resp:
                if resp.status == 200:
                    return None
                return f"Chroma server at {self.settings.url} answered HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            return f"Chroma server at {self.settings.url} answered HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            why = getattr(exc, "reason", None) or exc
            return f"Chroma server at {self.settings.url} did not answer: {why}"

    def where(self, index: str) -> dict[str, Any]:
        return {"mode": "server", "url": self.settings.url, "collection": collection_name(index)}

    def close(self) -> None:
        self.reset()


def _bound_requests(client: Any, settings: ChromaSettings) -> None:
    """Give the client's HTTP session timeouts.

    chromadb builds its ``httpx.Client`` with ``timeout=None``: a server that accepts the
    connection and then hangs would hold an op's thread forever.  The guard already releases
    the caller at the deadline; this frees the thread too.  (Private attributes: if a future
    chromadb renames them, requests are simply unbounded again, as chromadb ships them.)
    """
    try:
        import httpx

        session = client._server._session
        session.timeout = httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s)
    except Exception:
        pass


def _close_embedded(client: Any) -> None:
    with CLIENTS_LOCK:
        _close(client)


def _close(client: Any) -> None:
    closer = getattr(client, "close", None)
    if callable(closer):
        try:
            closer()
        except Exception:
            pass
