"""How token vectors are stored: int8 per component, one float32 scale per token.

Why int8 rather than float16: both halve or better the size of float32 (int8: ``dim + 4`` bytes
a token, float16: ``2 * dim``), but int8 codes can be multiplied as they are stored: the query
is quantised the same way and the exact MaxSim stage takes one integer product of the codes
(:mod:`.kernels`: the CPU's int8 instructions through torch, or an exact float32 BLAS product of
the widened codes; widening int8 is a plain SIMD conversion, while numpy widens float16 element
by element, measured ~19x slower).  The scales are applied after the product, on the small
``(tokens, query tokens)`` matrix, not on the vectors.

Symmetric per-token quantisation of a unit vector ``x``: ``scale = max|x| / 127``,
``code = round(x / scale)``.  Cosines move by a few thousandths at most, far below the gaps
that decide a ranking; and every score (search, exhaustive reference, rerank, explain) is
computed from the *dequantised* vectors, so they all agree exactly with one another.

Vectors are rounded to float16 before quantising, so a vector embedded now and the same vector
read back from the float16 embedding cache quantise to identical codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

Codes = NDArray[np.int8]
Scales = NDArray[np.float32]


@dataclass(frozen=True)
class Block:
    """One passage's stored token vectors: ``codes * scales[:, None]``."""

    codes: Codes
    scales: Scales

    def __len__(self) -> int:
        return len(self.codes)

    def dequantize(self) -> NDArray[np.float32]:
        return dequantize(self.codes, self.scales)


def quantize(vectors: NDArray[np.floating]) -> Block:
    """``(tokens, dim)`` floats to int8 codes and per-token scales (see the module docstring)."""
    x = np.asarray(vectors, dtype=np.float16).astype(np.float32)
    peak = np.abs(x).max(axis=1) if len(x) else np.zeros(0, dtype=np.float32)
    scales = (peak / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    codes = np.clip(np.rint(x / safe[:, None]), -127, 127).astype(np.int8)
    return Block(codes=codes, scales=scales)


def dequantize(codes: NDArray[Any], scales: NDArray[Any]) -> NDArray[np.float32]:
    return np.asarray(codes, dtype=np.float32) * np.asarray(scales, dtype=np.float32)[:, None]


class DequantizedRows:
    """Row access to a segment's vectors as float32, for k-means (which samples and scans rows
    of a memory map without ever materialising the whole matrix)."""

    def __init__(self, codes: NDArray[np.int8], scales: NDArray[np.float32]) -> None:
        self.codes = codes
        self.scales = scales

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows: Any) -> NDArray[np.float32]:
        return dequantize(self.codes[rows], self.scales[rows])
