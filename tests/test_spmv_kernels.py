"""SpMV kernels equal scipy's product and a slow reference, on every family and block size."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.spmv.kernels import (
    BcsrMatrix,
    bcsr_kernel,
    csr_spmv,
    spmv_bcsr,
    spmv_csr,
    to_bcsr,
)
from dse.spmv.matrices import BLOCK_SIZES, banded, random_blocked

BLOCKS = [(r, c) for r in BLOCK_SIZES for c in BLOCK_SIZES]


def slow_csr(matrix, x) -> np.ndarray:
    """Row by row, entry by entry: obviously right."""
    y = np.zeros(matrix.shape[0])
    for i in range(matrix.shape[0]):
        for k in range(matrix.indptr[i], matrix.indptr[i + 1]):
            y[i] += matrix.data[k] * x[matrix.indices[k]]
    return y


def slow_bcsr(bsr, x) -> np.ndarray:
    """Block by block over scipy's BSR arrays; ``x`` as long as the padded columns."""
    r, c = bsr.blocksize
    y = np.zeros(bsr.shape[0])
    for bi in range(bsr.shape[0] // r):
        for k in range(bsr.indptr[bi], bsr.indptr[bi + 1]):
            j = bsr.indices[k] * c
            y[bi * r:(bi + 1) * r] += bsr.data[k] @ x[j:j + c]
    return y


def _close(a, b) -> None:
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(b).max()))


def _matrices():
    yield "blocked 4x4", random_blocked(96, 28, 4, 4, seed=1)
    yield "blocked 3x8", random_blocked(100, 30, 3, 8, seed=2)
    yield "banded 2x6", banded(120, 26, 40, 2, 6, seed=3)
    # ragged: shape not a multiple of any block, empty rows, signed values, explicit zero
    rng = np.random.default_rng(4)
    ragged = sp.random(53, 47, density=0.15, random_state=rng, format="csr")
    ragged.data -= 0.5
    ragged = ragged.tolil()
    ragged[5, :] = 0
    ragged[17, :] = 0
    ragged = ragged.tocsr()
    ragged.data[0] = 0.0
    yield "ragged", ragged
    yield "empty", sp.csr_matrix((9, 13))


MATRICES = list(_matrices())


@pytest.mark.parametrize("name, matrix", MATRICES, ids=[m[0] for m in MATRICES])
def test_csr_matches_scipy_and_reference(name, matrix):
    x = np.random.default_rng(0).standard_normal(matrix.shape[1])
    y = spmv_csr(matrix, x)
    _close(y, matrix @ x)
    _close(y, slow_csr(sp.csr_matrix(matrix), x))


@pytest.mark.parametrize("r, c", BLOCKS, ids=[f"{r}x{c}" for r, c in BLOCKS])
@pytest.mark.parametrize("name, matrix", MATRICES, ids=[m[0] for m in MATRICES])
def test_bcsr_matches_scipy_and_reference(name, matrix, r, c):
    x = np.random.default_rng(1).standard_normal(matrix.shape[1])
    blocked = to_bcsr(matrix, r, c)
    assert blocked.shape == matrix.shape and blocked.blocksize == (r, c)
    y = spmv_bcsr(blocked, x)
    assert y.shape == (matrix.shape[0],)
    _close(y, matrix @ x)
    padded_x = np.concatenate([x, np.zeros(blocked.bsr.shape[1] - x.size)])
    _close(y, slow_bcsr(blocked.bsr, padded_x)[:matrix.shape[0]])


@pytest.mark.parametrize("r, c", BLOCKS, ids=[f"{r}x{c}" for r, c in BLOCKS])
def test_fill_ratio(r, c):
    exact = random_blocked(144, 28, r, c, seed=5)
    assert to_bcsr(exact, r, c).fill_ratio == 1.0
    point = random_blocked(144, 28, 1, 1, seed=5)
    blocked = to_bcsr(point, r, c)
    assert blocked.fill_ratio == blocked.stored / point.nnz
    assert blocked.fill_ratio >= 1.0
    assert to_bcsr(point, 1, 1).fill_ratio == 1.0


def test_fill_ratio_ignores_explicit_zeros():
    matrix = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 2.0]]))
    matrix.data = np.array([1.0, 0.0])  # store an explicit zero in place of 2.0
    assert to_bcsr(matrix, 1, 1).nnz == 1


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), density=st.floats(0, 1),
       r=st.sampled_from(BLOCK_SIZES), c=st.sampled_from(BLOCK_SIZES),
       seed=st.integers(0, 2**31))
def test_any_matrix_any_block(rows, cols, density, r, c, seed):
    rng = np.random.default_rng(seed)
    matrix = sp.random(rows, cols, density=density, random_state=rng, format="csr")
    x = rng.standard_normal(cols)
    _close(spmv_csr(matrix, x), matrix @ x)
    _close(spmv_bcsr(to_bcsr(matrix, r, c), x), matrix @ x)


def test_scipy_bsr_accepted_directly():
    matrix = random_blocked(64, 24, 2, 4, seed=6)
    x = np.arange(64, dtype=np.float64)
    _close(spmv_bcsr(matrix.tobsr(blocksize=(2, 4)), x), matrix @ x)


def test_raw_kernels_write_into_y():
    matrix = random_blocked(48, 24, 3, 2, seed=7)
    x = np.ones(48)
    y = np.full(48, np.nan)
    csr_spmv(matrix.indptr, matrix.indices, matrix.data, x, y)
    _close(y, matrix @ x)
    bsr = matrix.tobsr(blocksize=(3, 2))
    y[:] = np.nan
    bcsr_kernel(3, 2)(bsr.indptr, bsr.indices, bsr.data.reshape(-1), x, y)
    _close(y, matrix @ x)
    assert bcsr_kernel(3, 2) is bcsr_kernel(3, 2)


@pytest.mark.parametrize("call, error, match", [
    (lambda: spmv_csr(np.eye(3), np.ones(3)), TypeError, "scipy sparse"),
    (lambda: spmv_csr(sp.eye(3, format="csr"), np.ones(4)), ValueError, r"\(3,\)"),
    (lambda: spmv_bcsr(sp.eye(3, format="csr"), np.ones(3)), TypeError, "BcsrMatrix"),
    (lambda: spmv_bcsr(to_bcsr(sp.eye(4), 2, 2), np.ones((4, 1))), ValueError, "shape"),
    (lambda: to_bcsr(sp.eye(4), 0, 2), ValueError, "0x2"),
    (lambda: bcsr_kernel(2, 0), ValueError, "2x0"),
])
def test_wrappers_refuse_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_bcsr_matrix_is_typed():
    blocked = to_bcsr(sp.eye(5, format="csr"), 2, 2)
    assert isinstance(blocked, BcsrMatrix)
    assert blocked.bsr.shape == (6, 6) and blocked.shape == (5, 5) and blocked.nnz == 5
