"""The one product behind every MaxSim score, chosen by the processor: integer dot products of
int8 codes, computed exactly whichever kernel runs.

Passage tokens are stored as int8 codes with a float32 scale each (:mod:`.codec`), and the query
is quantised the same way before the exact stage, so a token-by-token similarity is
``dot(code_d, code_q) * scale_d * scale_q``.  The dot products are **integers**.  Three kernels
compute them (``plugins/colbert/bench/kernels.py`` times each, and ``docs/backends/colbert.md``
has the figures):

* ``int8-torch``: ``torch._int_mm``, an int8 x int8 -> int32 product that oneDNN runs on the
  CPU's int8 instructions.  Chosen only where VNNI or AMX exist (:mod:`.cpu`): without them
  oneDNN falls back to AVX2 pair sums that saturate at 16 bits, slower than float32 and
  **not exact**, so it is never chosen there, and asking for it raises
  :class:`KernelUnavailable`.
* ``float32-torch``: the codes widened to float32 in blocks of :data:`BLOCK_ROWS` rows (each
  block stays in cache) and one float32 product per block on torch; where torch is loaded and
  the int8 instructions are missing.
* ``float32-numpy``: the same with numpy; where torch is not loaded.  torch is never imported
  here just for a product: importing it costs seconds, and a model-free (hashing) index would
  pay them on its first search.  A sentence-transformers embedder has loaded it anyway.

Every product of two int8 values is at most ``127 * 127 = 16,129`` in magnitude, so for vectors
of up to :data:`EXACT_F32_DIM` components every partial sum is an integer below ``2**24`` and
float32 holds it exactly, in any order; longer vectors are widened to float64.  So all three
kernels give the same integers, and a search returns the same scores, bit for bit, whichever
runs (``tests/test_kernels.py`` runs each on the same data); only the speed differs.

``INDEXPLUG_COLBERT_KERNEL`` overrides the choice: ``auto`` (default), one of :data:`KERNELS`,
or the older names ``torch`` (``int8-torch``) and ``numpy`` (``float32-numpy``).  A forced
torch kernel imports torch.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import numpy as np
from numpy.typing import NDArray

from indexplug_colbert.cpu import this_int8_instructions

F32 = NDArray[np.float32]
I8 = NDArray[np.int8]

EXACT_F32_DIM = (2**24) // (127 * 127)
"""Longest vectors whose int8 dot products float32 accumulates exactly (1,040 components)."""

KERNELS = ("int8-torch", "float32-torch", "float32-numpy")
"""Every kernel, by the name ``status`` and the benchmarks show."""

ALIASES = {"torch": "int8-torch", "numpy": "float32-numpy"}
"""Older values of ``INDEXPLUG_COLBERT_KERNEL``."""

BLOCK_ROWS = 2048
"""Rows widened to float32 at a time: ``BLOCK_ROWS * dim * 4`` bytes (3 MiB at 384) stay in
cache between the widening and the product."""

_TORCH_BROKEN: list[str] = []
"""Why torch's int8 product was given up on in this process (it failed once), if it was."""


class KernelUnavailable(RuntimeError):
    """``INDEXPLUG_COLBERT_KERNEL`` asks for a kernel this processor cannot run exactly."""


def requested() -> str:
    """``INDEXPLUG_COLBERT_KERNEL``, normalised: ``auto`` or one of :data:`KERNELS`."""
    raw = os.environ.get("INDEXPLUG_COLBERT_KERNEL", "auto").strip().lower() or "auto"
    name = ALIASES.get(raw, raw)
    if name != "auto" and name not in KERNELS:
        allowed = ", ".join(("auto", *KERNELS, *ALIASES))
        raise ValueError(f"INDEXPLUG_COLBERT_KERNEL={raw!r} is not one of: {allowed}")
    return name


def kernel_name() -> str:
    """Which kernel :func:`int8_dots` uses now (one of :data:`KERNELS`), for status and benches.

    Decided on every call from the request, the processor (read once) and whether torch is
    loaded, which can change once an embedder loads it.
    """
    name = requested()
    if name == "int8-torch":
        if not this_int8_instructions():
            raise KernelUnavailable(
                "INDEXPLUG_COLBERT_KERNEL asks for int8-torch, but this processor has no VNNI or"
                " AMX instructions for oneDNN (or ONEDNN_MAX_CPU_ISA rules them out), where"
                " torch._int_mm is slow and not exact; use float32-torch or float32-numpy"
            )
        return "float32-torch" if _TORCH_BROKEN else name
    if name != "auto":
        return name
    return _auto(sys.modules.get("torch"))


def _auto(torch: Any | None) -> str:
    if torch is None:
        return "float32-numpy"
    if this_int8_instructions() and hasattr(torch, "_int_mm") and not _TORCH_BROKEN:
        return "int8-torch"
    return "float32-torch"


def available() -> tuple[str, ...]:
    """The kernels that can run exactly here (torch installed; int8 instructions present)."""
    if importlib.util.find_spec("torch") is None:
        return ("float32-numpy",)
    if this_int8_instructions():
        return KERNELS
    return ("float32-torch", "float32-numpy")


def describe() -> dict[str, Any]:
    """The kernels a search would use now and why, for ``status``.

    ``maxsim_with_torch`` is the exact stage's kernel once an embedder has loaded torch (a
    ``status`` process may not have: the hashing embedder never does, a model's does when it
    embeds the first query).
    """
    try:
        maxsim = kernel_name()
        with_torch = maxsim if requested() != "auto" else _auto(_TorchPresent)
    except KernelUnavailable as exc:
        maxsim = with_torch = f"unavailable: {exc}"
    return {
        "maxsim": maxsim,
        "maxsim_with_torch": with_torch,
        "candidates": "float32-numpy" if _float_torch() is None else "float32-torch",
        "int8_instructions": list(this_int8_instructions()),
        "requested": requested(),
    }


class _TorchPresent:
    """Stands for a loaded torch in :func:`describe` (``_int_mm`` exists since torch 2.2)."""

    _int_mm = None


def int8_dots(a: I8, b: I8) -> F32:
    """``a @ b.T`` of int8 matrices ``(n, dim)`` and ``(m, dim)``, exactly, as float32."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"dimensions differ: {a.shape[1]} and {b.shape[1]}")
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), dtype=np.float32)
    name = kernel_name()
    if name == "int8-torch":
        torch = _import_torch()
        try:
            ta = torch.from_numpy(_writable(a))
            tb = torch.from_numpy(_writable(b))
            out: F32 = torch._int_mm(ta, tb.T).numpy().astype(np.float32)
            return out
        except (RuntimeError, NotImplementedError, TypeError, AttributeError) as exc:
            _TORCH_BROKEN.append(f"{type(exc).__name__}: {exc}")  # an old or odd build
            name = "float32-torch"
    if a.shape[1] > EXACT_F32_DIM:
        wide: F32 = np.matmul(a.astype(np.float64), b.astype(np.float64).T).astype(np.float32)
        return wide
    if name == "float32-torch":
        return _blocked_torch(_import_torch(), a, b)
    return _blocked_numpy(a, b)


def _blocked_numpy(a: I8, b: I8) -> F32:
    out = np.empty((len(a), len(b)), dtype=np.float32)
    bt = np.ascontiguousarray(b.astype(np.float32).T)
    buf = np.empty((min(BLOCK_ROWS, len(a)), a.shape[1]), dtype=np.float32)
    for s in range(0, len(a), BLOCK_ROWS):
        rows = a[s : s + BLOCK_ROWS]
        part = buf[: len(rows)]
        part[...] = rows
        np.matmul(part, bt, out=out[s : s + len(rows)])
    return out


def _blocked_torch(torch: Any, a: I8, b: I8) -> F32:
    ta = torch.from_numpy(_writable(a))
    bt = torch.from_numpy(_writable(b)).to(torch.float32).T.contiguous()
    out = torch.empty((len(a), len(b)), dtype=torch.float32)
    buf = torch.empty((min(BLOCK_ROWS, len(a)), a.shape[1]), dtype=torch.float32)
    for s in range(0, len(a), BLOCK_ROWS):
        rows = ta[s : s + BLOCK_ROWS]
        part = buf[: len(rows)]
        part.copy_(rows)
        torch.matmul(part, bt, out=out[s : s + len(rows)])
    result: F32 = out.numpy()
    return result


def _float_torch() -> Any | None:
    """torch for the candidate stage's float products: when loaded, or a torch kernel forced."""
    name = requested()
    if name == "float32-numpy":
        return None
    if name != "auto":
        return _import_torch()
    return sys.modules.get("torch")


def float_dots(a: F32, b: F32) -> F32:
    """``a @ b.T`` of float32 matrices (or ``a @ b`` for a vector ``b``): the candidate
    stage's products (query tokens against centroids, pooled passage vectors against the pooled
    query), float32 on every processor.

    Through torch when it is loaded, for a reason beyond speed: a search whose query torch has
    just embedded then runs every product on torch's thread pool.  numpy's BLAS keeps a pool of
    its own, and on a small machine the two pools' idle threads spin against each other's work
    (``docs/backends/colbert.md`` has the measurement).  Float products are approximate either
    way (the last bit may differ between the two libraries); they only choose candidates, which
    are then scored exactly by :func:`int8_dots`.
    """
    torch = _float_torch()
    if torch is not None:
        ta = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        tb = torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32))
        out: F32 = (ta @ (tb.T if tb.ndim == 2 else tb)).numpy()
        return out
    result: F32 = a @ (b.T if b.ndim == 2 else b)
    return result


def _import_torch() -> Any:
    import torch

    return torch


def _writable(x: NDArray[Any]) -> NDArray[Any]:
    """A C-contiguous, writable int8 array (torch refuses read-only memory maps' views)."""
    x = np.ascontiguousarray(x, dtype=np.int8)
    return x if x.flags.writeable else x.copy()
