"""Vectors a caller gives, checked before any backend sees them.

A backend that claims ``Capabilities.vectors`` stores the caller's own vectors and searches by
one (:class:`indexplug.protocols.VectorStore`).  A vector that is not a flat list of finite
numbers, is all zeros, or does not have the length of the others is refused here, naming the
field (``BAD_REQUEST``), so that nothing NaN or ragged is ever stored or compared.  Vectors are
handed on as new float32 arrays, L2-normalised as every embedder's are (so a dot product is a
cosine and a vector the caller gives equals the one the backend's embedder would store for the
same model).  Whether their dimension and embedder are the index's is checked by the guard,
which asks the backend (:func:`space_problem`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from indexplug.errors import InvalidRequest

if TYPE_CHECKING:
    from indexplug.protocols import Vector

MAX_DIM = 65_536
"""The longest vector accepted (the largest embedding models answer a few thousand numbers)."""


def checked_vector(value: Any, field: str) -> Vector:
    """``value`` as a new L2-normalised float32 array, or :class:`InvalidRequest` naming
    ``field``: a flat, non-empty sequence of finite real numbers, not all zero."""
    import numpy as np  # here: core's start-up does not pay for numpy

    if isinstance(value, (str, bytes, bytearray, Mapping)) or not (
        isinstance(value, (Sequence, np.ndarray))
    ):
        raise InvalidRequest(
            f"{field} must be a list of numbers, not {type(value).__name__}", field=field
        )
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"{field} must be a list of numbers ({exc})", field=field) from None
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise InvalidRequest(
            f"{field} must be a flat, non-empty list of numbers (got shape {arr.shape})",
            field=field,
        )
    if arr.shape[0] > MAX_DIM:
        raise InvalidRequest(f"{field} is longer than {MAX_DIM} numbers", field=field)
    if not np.all(np.isfinite(arr)):
        raise InvalidRequest(f"{field} holds NaN or infinity", field=field)
    norm = float(np.linalg.norm(arr))
    if norm == 0.0 or not math.isfinite(norm):
        raise InvalidRequest(f"{field} is all zeros (it has no direction)", field=field)
    out: Vector = (arr / norm).astype(np.float32)
    return out


def checked_vectors(values: Any, count: int) -> list[Vector]:
    """One checked vector per passage (``count`` of them, all of one length)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        import numpy as np

        if not (isinstance(values, np.ndarray) and values.ndim == 2):
            raise InvalidRequest("vectors must be a list of vectors", field="vectors")
    if len(values) != count:
        raise InvalidRequest(
            f"vectors must hold one vector per passage: {len(values)} for {count} passages",
            field="vectors",
        )
    out = [checked_vector(v, f"vectors[{i}]") for i, v in enumerate(values)]
    dims = {int(v.shape[0]) for v in out}
    if len(dims) > 1:
        raise InvalidRequest(
            f"vectors must all have one length (got lengths {sorted(dims)})", field="vectors"
        )
    return out


def space_problem(
    space: Any, dim: int | None, stated: str | None
) -> tuple[str, str] | tuple[None, str]:
    """What is wrong with vectors of length ``dim`` stated to be of embedder ``stated`` (None:
    the index's own) for a backend whose :meth:`~indexplug.protocols.VectorStore.vector_space`
    answered ``space``: ``(field, reason)``, or ``(None, name)`` with the embedder name the
    backend is to check against the index when nothing is wrong."""
    if (
        not isinstance(space, tuple)
        or len(space) != 2
        or type(space[0]) is not str
        or type(space[1]) is not int
        or space[1] < 1
    ):
        raise TypeError(f"vector_space() answered {space!r}, not (embedder name, dimension)")
    name, size = space
    if stated is not None and stated != name:
        return (
            "embedder",
            f"the vectors are of embedder {stated}, but this index's vectors are of {name} "
            f"(dim {size}); vectors of two models are not comparable",
        )
    if dim is not None and dim != size:
        return (
            "vectors",
            f"the vectors have {dim} numbers, but embedder {name} of this index gives {size}",
        )
    return None, name


def stated_embedder(embedder: Any) -> str | None:
    """The embedder identity a caller states: None (the index's own), a name, or an object
    with a ``name`` (an :class:`~indexplug.protocols.Embedder`)."""
    if embedder is None:
        return None
    name = embedder if isinstance(embedder, str) else getattr(embedder, "name", None)
    if type(name) is not str or ":" not in name or "\x00" in name or len(name) > 1000:
        raise InvalidRequest(
            "embedder must be an embedder's name 'PROVIDER:MODEL' (or an Embedder)",
            field="embedder",
        )
    return name


def hit_vector(raw: Any, dim: int) -> tuple[float, ...] | None:
    """A backend's stored vector for a hit as the guard's own tuple of floats, or None when
    it is not ``dim`` finite numbers."""
    import numpy as np

    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if arr.ndim != 1 or arr.shape[0] != dim or not np.all(np.isfinite(arr)):
        return None
    return tuple(float(x) for x in arr)
