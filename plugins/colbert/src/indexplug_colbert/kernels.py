"""The one product behind every MaxSim score: integer dot products of int8 codes.

Passage tokens are stored as int8 codes with a float32 scale each (:mod:`.codec`), and the query
is quantised the same way before the exact stage, so a token-by-token similarity is
``dot(code_d, code_q) * scale_d * scale_q``.  The dot products are **integers**, and this
module computes them exactly, whichever way it computes them:

* with **torch** (``torch._int_mm``: an int8 x int8 -> int32 product that oneDNN runs on the
  CPU's int8 instructions, VNNI where present), when torch is already loaded in the process;
  measured about six to ten times faster than widening the codes to float32 for one BLAS
  product (``plugins/colbert/bench/kernels.py``);
* with **numpy** otherwise: both sides widened to float32 and one BLAS product.  Every product
  of two int8 values is at most ``127 * 127 = 16,129`` in magnitude, so for vectors of up to
  :data:`EXACT_F32_DIM` components every partial sum is an integer below ``2**24`` and float32
  holds it exactly, in any summation order; longer vectors are widened to float64.

Both give the same integers, converted to float32 the same way, so a search returns the same
scores, bit for bit, with or without torch (``tests/test_kernels.py`` checks it); only the
speed differs.  torch is never imported here just for this: importing it costs seconds, and a
model-free (hashing) index would pay them on its first search.  A sentence-transformers embedder
has loaded it anyway.  ``INDEXPLUG_COLBERT_KERNEL=numpy`` or ``=torch`` forces a choice (``torch``
imports it), for measurements and tests.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]
I8 = NDArray[np.int8]

EXACT_F32_DIM = (2**24) // (127 * 127)
"""Longest vectors whose int8 dot products float32 accumulates exactly (1,040 components)."""

_TORCH_BROKEN: list[str] = []
"""Why torch's int8 product was given up on in this process (it failed once), if it was."""


def _torch() -> Any | None:
    choice = os.environ.get("INDEXPLUG_COLBERT_KERNEL", "auto").strip().lower()
    if choice == "numpy" or _TORCH_BROKEN:
        return None
    if choice == "torch":
        import torch

        return torch
    return sys.modules.get("torch")


def kernel_name() -> str:
    """Which kernel :func:`int8_dots` uses now (``torch`` or ``numpy``), for status and benches."""
    torch = _torch()
    return "torch" if torch is not None and hasattr(torch, "_int_mm") else "numpy"


def int8_dots(a: I8, b: I8) -> F32:
    """``a @ b.T`` of int8 matrices ``(n, dim)`` and ``(m, dim)``, exactly, as float32."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"dimensions differ: {a.shape[1]} and {b.shape[1]}")
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), dtype=np.float32)
    torch = _torch()
    if torch is not None and hasattr(torch, "_int_mm"):
        try:
            ta = torch.from_numpy(_writable(a))
            tb = torch.from_numpy(_writable(b))
            out: F32 = torch._int_mm(ta, tb.T).numpy().astype(np.float32)
            return out
        except (RuntimeError, NotImplementedError, TypeError) as exc:  # an old or odd build
            _TORCH_BROKEN.append(f"{type(exc).__name__}: {exc}")
    wide = np.dtype(np.float32 if a.shape[1] <= EXACT_F32_DIM else np.float64)
    prod: F32 = np.matmul(a.astype(wide), b.astype(wide).T).astype(np.float32, copy=False)
    return prod


def float_dots(a: F32, b: F32) -> F32:
    """``a @ b.T`` of float32 matrices (or ``a @ b`` for a vector ``b``): the candidate
    stage's products (query tokens against centroids, pooled passage vectors against the pooled
    query).

    Through torch when it is loaded, for the same reason as :func:`int8_dots` and one more: a
    search whose query torch has just embedded then runs every product on torch's thread pool.
    numpy's BLAS keeps a pool of its own, and on a small machine the two pools' idle threads
    spin against each other's work: on this project's two cores a MiniLM search through
    ``indexplug eval`` took 37 ms (median) with both pools at their defaults and 18 ms with
    BLAS held to one thread.  Float products are approximate either way (the last bit may
    differ between the two libraries); they only choose candidates, which are then scored
    exactly by :func:`int8_dots`.
    """
    torch = _torch()
    if torch is not None:
        ta = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        tb = torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32))
        out: F32 = (ta @ (tb.T if tb.ndim == 2 else tb)).numpy()
        return out
    result: F32 = a @ (b.T if b.ndim == 2 else b)
    return result


def _writable(x: NDArray[Any]) -> NDArray[Any]:
    """A C-contiguous, writable int8 array (torch refuses read-only memory maps' views)."""
    x = np.ascontiguousarray(x, dtype=np.int8)
    return x if x.flags.writeable else x.copy()
