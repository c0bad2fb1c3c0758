"""An :class:`~indexplug.protocols.Embedder` made of two functions a caller already has.

Libraries built on indexplug (the LangChain, LlamaIndex and Haystack adapters) hold the
user's own embedding model as an object of their framework; this turns its "embed these
documents" and "embed this query" calls into an indexplug embedder, so that the backend embeds
with the model the user chose rather than its configured one.  Core imports no framework: the
adapter passes plain functions.

Vectors come back as L2-normalised float32 (the protocol's promise, so a dot product is a
cosine); one that is empty, has the wrong length, is not finite or is all zeros is refused with
a ``ValueError`` naming the embedder, never stored.  The name is the identity an index records
(see :attr:`indexplug.protocols.Embedder.name`): a backend refuses to open an index built with
another name or dimension.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from indexplug.protocols import Granularity, Readiness

if TYPE_CHECKING:
    from indexplug.protocols import Vector

DocumentsFn = Callable[[list[str]], Sequence[Sequence[float]]]
QueryFn = Callable[[str], Sequence[float]]

DIMENSION_PROBE = "dimension probe"
"""The text embedded once, as a query, to learn the dimension when the caller does not say it."""


class FunctionEmbedder:
    """A text-granularity embedder calling ``documents(texts)`` and ``query(text)``.

    ``name`` is ``PROVIDER:MODEL`` (a colon is required, as in every embedder spec).  ``dim``
    may be left out: it is then learnt from the first vector the model answers or, when it is
    asked before any, by embedding :data:`DIMENSION_PROBE` as a query.  ``source``: the object
    the functions belong to, kept as :attr:`source`.
    """

    granularities = frozenset({Granularity.TEXT})

    def __init__(
        self,
        name: str,
        documents: DocumentsFn,
        query: QueryFn,
        *,
        dim: int | None = None,
        source: object = None,
    ) -> None:
        if not isinstance(name, str) or ":" not in name or not name.split(":", 1)[0]:
            raise ValueError(f"an embedder's name is 'PROVIDER:MODEL', got {name!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise ValueError(f"an embedder's dim is a positive integer, got {dim!r}")
        self.name = name
        self.source = source
        """The object whose model this is (a framework's embedding model), for a caller that
        checks which model a backend was opened with."""
        self._documents = documents
        self._query = query
        self._dim = dim
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        """The vectors' length: as given, else measured once on :data:`DIMENSION_PROBE`."""
        with self._lock:
            if self._dim is None:
                probe = self._vector(self._query(DIMENSION_PROBE), check_dim=False)
                self._dim = int(probe.shape[0])
            return self._dim

    @dim.setter
    def dim(self, value: int) -> None:
        # settable, as the protocol's plain attribute is
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"an embedder's dim is a positive integer, got {value!r}")
        with self._lock:
            self._dim = value

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def _vector(self, raw: Sequence[float], *, check_dim: bool = True) -> Vector:
        import numpy as np  # here: core's start-up does not pay for numpy

        arr = np.asarray(raw, dtype=np.float32)
        if arr.ndim != 1 or arr.shape[0] == 0:
            raise ValueError(f"embedder {self.name} returned a vector of shape {arr.shape}")
        if check_dim and arr.shape[0] != self.dim:
            raise ValueError(
                f"embedder {self.name} returned a vector of length {arr.shape[0]}, "
                f"expected {self.dim}"
            )
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"embedder {self.name} returned a vector with NaN or infinity")
        norm = float(np.linalg.norm(arr))
        if norm == 0.0:
            raise ValueError(f"embedder {self.name} returned a vector of zeros")
        out: Vector = arr / np.float32(norm)
        return out

    def _text_only(self, granularity: Granularity) -> None:
        if granularity is not Granularity.TEXT:
            raise ValueError(f"embedder {self.name} gives one vector per text, not per token")

    def embed_documents(self, texts: Sequence[str], granularity: Granularity) -> list[Vector]:
        self._text_only(granularity)
        if not texts:
            return []
        raw = list(self._documents(list(texts)))
        if len(raw) != len(texts):
            raise ValueError(
                f"embedder {self.name} returned {len(raw)} vectors for {len(texts)} texts"
            )
        self._learn(raw[0])
        return [self._vector(v) for v in raw]

    def embed_query(self, text: str, granularity: Granularity) -> Vector:
        self._text_only(granularity)
        raw = self._query(text)
        self._learn(raw)
        return self._vector(raw)

    def _learn(self, raw: Sequence[float]) -> None:
        """Take the dimension from the first vector the model answers, if not known yet (so
        a model whose first use is an embedding is never asked the probe)."""
        with self._lock:
            if self._dim is None:
                self._dim = int(self._vector(raw, check_dim=False).shape[0])
