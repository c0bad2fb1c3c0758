"""The int8 product behind every score: exact, and the same whichever kernel the processor (or
``INDEXPLUG_COLBERT_KERNEL``) picks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import corpus
from hypothesis import given, settings
from hypothesis import strategies as st
from indexplug import Guard, Indexed, IndexStatus
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
def test_int8_dots_is_exact_on_every_kernel(n: int, m: int, dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = codes(rng, n, dim), codes(rng, m, dim)
    want = (a.astype(np.int64) @ b.astype(np.int64).T).astype(np.float32)
    for name in kernels.available():
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


def test_every_kernel_scores_the_same_as_the_exhaustive_maxsim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each kernel on the same data (more rows than one float32 block, so blocks join up): the
    scores equal, bit for bit, across kernels, and within 1e-5 of MaxSim computed by definition
    in float64 from the dequantised vectors."""
    rng = np.random.default_rng(7)
    unit = rng.standard_normal((5000, 384)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    blocks = [quantize(unit[i : i + 25 + i % 7]) for i in range(0, 5000, 31)]
    q = unit[:13] + 0.1
    dq = quantize(q).dequantize().astype(np.float64)
    want = np.array([(dq @ b.dequantize().astype(np.float64).T).max(axis=1).sum() for b in blocks])
    monkeypatch.setattr(kernels, "BLOCK_ROWS", 1000)
    assert sum(len(b) for b in blocks) > 3 * kernels.BLOCK_ROWS
    names = kernels.available()
    assert {"float32-numpy", "float32-torch"} <= set(names)  # torch is installed here
    scores = {}
    for name in names:
        monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", name)
        assert kernels.kernel_name() == name
        scores[name] = maxsim_blocks(q, blocks)
        assert np.abs(scores[name] - want).max() < 1e-5, name
    assert len({s.tobytes() for s in scores.values()}) == 1


def test_older_kernel_names_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", "numpy")
    assert kernels.kernel_name() == "float32-numpy"
    monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", "torch")
    monkeypatch.setattr(kernels, "this_int8_instructions", lambda: ("avx512_vnni",))
    assert kernels.kernel_name() == "int8-torch"


def test_auto_picks_int8_only_with_vnni_or_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INDEXPLUG_COLBERT_KERNEL", raising=False)
    for found in [("amx_int8", "avx512_vnni"), ("avx_vnni",)]:
        monkeypatch.setattr(kernels, "this_int8_instructions", lambda f=found: f)
        assert kernels.kernel_name() == "int8-torch"
        assert kernels.describe()["int8_instructions"] == list(found)
    monkeypatch.setattr(kernels, "this_int8_instructions", lambda: ())
    assert kernels.kernel_name() == "float32-torch"  # torch is loaded (imported above)
    assert kernels.available() == ("float32-torch", "float32-numpy")
    assert kernels.describe() == {
        "maxsim": "float32-torch",
        "maxsim_with_torch": "float32-torch",
        "candidates": "float32-torch",
        "int8_instructions": [],
        "requested": "auto",
    }
    monkeypatch.delitem(sys.modules, "torch")  # as in a process that never loaded it
    assert kernels.kernel_name() == "float32-numpy"
    assert kernels.describe()["candidates"] == "float32-numpy"
    assert kernels.describe()["maxsim_with_torch"] == "float32-torch"
    monkeypatch.setattr(kernels, "this_int8_instructions", lambda: ("amx_int8",))
    assert kernels.describe()["maxsim"] == "float32-numpy"
    assert kernels.describe()["maxsim_with_torch"] == "int8-torch"


def test_int8_is_refused_without_vnni_or_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "this_int8_instructions", lambda: ())
    monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", "int8-torch")
    with pytest.raises(kernels.KernelUnavailable, match="no VNNI or AMX"):
        kernels.int8_dots(np.ones((2, 4), np.int8), np.ones((1, 4), np.int8))
    assert kernels.describe()["maxsim"].startswith("unavailable: ")
    monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", "float16")
    with pytest.raises(ValueError, match="'float16' is not one of: auto, int8-torch"):
        kernels.kernel_name()


def test_read_only_memory_maps_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "codes.npy"
    np.save(path, codes(np.random.default_rng(3), 10, 16))
    mapped = np.load(path, mmap_mode="r")
    q = codes(np.random.default_rng(4), 2, 16)
    want = mapped[2:5].astype(np.float32) @ q.T.astype(np.float32)
    for name in kernels.available():
        monkeypatch.setenv("INDEXPLUG_COLBERT_KERNEL", name)
        assert np.array_equal(kernels.int8_dots(mapped[2:5], q), want), name


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
    for name in kernels.available():
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("INDEXPLUG_COLBERT_KERNEL", name)
            mat = kernels.float_dots(a, b)
            vec = kernels.float_dots(b, v)
        assert mat.dtype == np.float32 and mat.shape == (n, m), name
        assert vec.dtype == np.float32 and vec.shape == (m,), name
        assert np.allclose(mat, want_mat, rtol=1e-4, atol=1e-3 * np.sqrt(dim)), name
        assert np.allclose(vec, want_vec, rtol=1e-4, atol=1e-3 * np.sqrt(dim)), name


def test_status_shows_the_kernels(guard: Guard) -> None:

    assert isinstance(guard.add("docs", corpus(5)), Indexed)
    st = guard.status("docs")
    assert isinstance(st, IndexStatus)
    shown = st.details["kernels"]
    assert shown == kernels.describe()
    assert shown["maxsim"] in kernels.KERNELS and shown["candidates"] in kernels.KERNELS
