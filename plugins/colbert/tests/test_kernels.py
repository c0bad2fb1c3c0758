"""The int8 product behind every score: exact, and the same with torch as with numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from indexplug_colbert import kernels
from indexplug_colbert.codec import quantize
from indexplug_colbert.maxsim import maxsim_blocks

torch = pytest.importorskip("torch")  # the colbert env installs it (sentence-transformers)


def codes(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    return rng.integers(-127, 128, size=(n, dim), dtype=np.int8)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 70),
    m=st.integers(0, 40),
    dim=st.sampled_from([1, 7, 32, 128, 384, 1040, 1041, 2048]),
    seed=st.integers(0, 2**32 - 1),
)
def test_int8_dots_is_exact_on_both_kernels(n: int, m: int, dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = codes(rng, n, dim), codes(rng, m, dim)
    want = (a.astype(np.int64) @ b.astype(np.int64).T).astype(np.float32)
    for name in ("numpy", "torch"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("INDEXPLUG_COLBERT_KERNEL", name)
            got = kernels.int8_dots(a, b)
        assert got.dtype == np.float32 and got.shape == (n, m)
        assert np.array_equal(got, want), name


def test_extreme_codes_stay_exact() -> None:
    dim = kernels.EXACT_F32_DIM
    a = np.full((3, dim), -127, dtype=np.int8)
    b = np.full((2, dim), -127, dtype=np.int8)
    assert kernels.int8_dots(a, b).tolist() == [[127 * 127 * dim] * 2] * 3


def test_scores_are_bit_identical_with_and_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    unit = rng.standard_normal((500, 384)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    blocks = [quantize(unit[i : i + 25]) for i in range(0, 500, 25)]
    q = unit[:13] + 0.1
    monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", "numpy")
    with_numpy = maxsim_blocks(q, blocks)
    assert kernels.kernel_name() == "numpy"
    monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", "torch")
    with_torch = maxsim_blocks(q, blocks)
    assert kernels.kernel_name() == "torch"
    assert with_numpy.tobytes() == with_torch.tobytes()


def test_read_only_memory_maps_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "codes.npy"
    np.save(path, codes(np.random.default_rng(3), 10, 16))
    mapped = np.load(path, mmap_mode="r")
    q = codes(np.random.default_rng(4), 2, 16)
    monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", "torch")
    assert np.array_equal(
        kernels.int8_dots(mapped[2:5], q), (mapped[2:5].astype(np.float32) @ q.T.astype(np.float32))
    )


def test_mismatched_dimensions_are_refused() -> None:
    with pytest.raises(ValueError, match="dimensions differ"):
        kernels.int8_dots(np.zeros((1, 4), np.int8), np.zeros((1, 5), np.int8))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    m=st.integers(0, 300),
    dim=st.sampled_from([1, 16, 384]),
    seed=st.integers(0, 2**32 - 1),
)
def test_float_dots_agree_on_both_kernels(n: int, m: int, dim: int, seed: int) -> None:
    """The candidate stage's float products: a matrix against rows, or rows against a vector;
    the same values through torch and numpy, to float32's rounding."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, dim)).astype(np.float32)
    b = rng.standard_normal((m, dim)).astype(np.float32)
    v = rng.standard_normal(dim).astype(np.float32)
    want_mat = a.astype(np.float64) @ b.astype(np.float64).T
    want_vec = b.astype(np.float64) @ v.astype(np.float64)
    for name in ("numpy", "torch"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("INDEXPLUG_COLBERT_KERNEL", name)
            mat = kernels.float_dots(a, b)
            vec = kernels.float_dots(b, v)
        assert mat.dtype == np.float32 and mat.shape == (n, m), name
        assert vec.dtype == np.float32 and vec.shape == (m,), name
        assert np.allclose(mat, want_mat, rtol=1e-4, atol=1e-3 * np.sqrt(dim)), name
        assert np.allclose(vec, want_vec, rtol=1e-4, atol=1e-3 * np.sqrt(dim)), name
