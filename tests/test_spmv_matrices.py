"""The SpMV benchmark's matrix generators keep their documented promises."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.spmv.matrices import (
    BLOCK_SIZES,
    NNZ_PER_ROW,
    MatrixSpec,
    aligned_dim,
    banded,
    blocks_per_row,
    min_bandwidth,
    random_blocked,
    spmv_space,
)

blocks = st.sampled_from(BLOCK_SIZES)
dims = st.integers(min_value=48, max_value=700)
nnz_values = st.integers(min_value=1, max_value=40)


def _row_counts(matrix) -> np.ndarray:
    return np.diff(matrix.indptr)


def _assert_canonical(matrix) -> None:
    assert matrix.dtype == np.float64
    assert matrix.indices.dtype == np.int32 and matrix.indptr.dtype == np.int32
    for i in range(matrix.shape[0]):
        row = matrix.indices[matrix.indptr[i]:matrix.indptr[i + 1]]
        assert (np.diff(row) > 0).all(), f"row {i} not sorted and duplicate-free"
    assert ((matrix.data >= 0.5) & (matrix.data < 1.5)).all()


def _assert_blocks(matrix, r: int, c: int) -> None:
    """Exact block structure: BSR with (r, c) stores no explicit zero."""
    bsr = matrix.tobsr(blocksize=(r, c))
    assert bsr.data.size == matrix.nnz
    assert (bsr.data != 0).all()


@settings(max_examples=40, deadline=None)
@given(n=dims, k=nnz_values, r=blocks, c=blocks, seed=st.integers(0, 2**31))
def test_random_blocked_promises(n, k, r, c, seed):
    rows = aligned_dim(n, r, c)
    b = blocks_per_row(k, c)
    if b > rows // c:
        with pytest.raises(ValueError, match="nnz_per_row"):
            random_blocked(n, k, r, c, seed)
        return
    matrix = random_blocked(n, k, r, c, seed)
    assert matrix.shape == (rows, rows)
    assert rows % math.lcm(r, c) == 0 and n - rows < math.lcm(r, c)
    assert (_row_counts(matrix) == b * c).all()
    assert abs(b * c - k) <= c / 2 or b == 1
    _assert_canonical(matrix)
    _assert_blocks(matrix, r, c)


@settings(max_examples=40, deadline=None)
@given(n=dims, k=nnz_values, r=blocks, c=blocks, extra=st.integers(0, 200),
       seed=st.integers(0, 2**31))
def test_banded_promises(n, k, r, c, extra, seed):
    rows = aligned_dim(n, r, c)
    b = blocks_per_row(k, c)
    if b > rows // c:
        return
    need = min_bandwidth(n, k, r, c)
    matrix = banded(n, k, need + extra, r, c, seed)
    coo = matrix.tocoo()
    assert (np.abs(coo.row - coo.col) <= need + extra).all()
    assert (_row_counts(matrix) == b * c).all()
    _assert_canonical(matrix)
    _assert_blocks(matrix, r, c)
    if need > 0:
        with pytest.raises(ValueError, match="bandwidth"):
            banded(n, k, need - 1, r, c, seed)


@pytest.mark.parametrize("family", ["blocked", "banded"])
def test_deterministic_by_seed(family):
    bandwidth = 64 if family == "banded" else None
    one = MatrixSpec(family, 600, 28, 2, 3, bandwidth, seed=7).build()
    two = MatrixSpec(family, 600, 28, 2, 3, bandwidth, seed=7).build()
    other = MatrixSpec(family, 600, 28, 2, 3, bandwidth, seed=8).build()
    assert (one != two).nnz == 0
    assert (one != other).nnz > 0


@pytest.mark.parametrize("r", BLOCK_SIZES)
@pytest.mark.parametrize("c", BLOCK_SIZES)
def test_spec_predicts_nnz_and_bytes(r, c):
    spec = MatrixSpec("blocked", 1000, 31, r, c)
    matrix = spec.build()
    assert matrix.shape == (spec.n_rows, spec.n_rows)
    assert spec.nnz == matrix.nnz
    assert spec.bytes == matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes


def test_default_bandwidth_fits_every_block():
    for r in BLOCK_SIZES:
        for c in BLOCK_SIZES:
            assert min_bandwidth(512, max(NNZ_PER_ROW), r, c) <= 64


def test_space_is_the_bebop_space():
    space = spmv_space(2**12, bandwidths=(64,))
    assert {s.n for s in space} == {2**9, 2**10, 2**11, 2**12}
    assert {s.nnz_per_row for s in space} == set(range(24, 35))
    assert {(s.r, s.c) for s in space} == {(r, c) for r in BLOCK_SIZES for c in BLOCK_SIZES}
    assert len(space) == 4 * 11 * 36 * 2
    assert [s.n for s in space] == sorted(s.n for s in space)
    assert len({s.seed for s in space}) == len(space)


@pytest.mark.parametrize("call, match", [
    (lambda: random_blocked(0, 24), "n=0"),
    (lambda: random_blocked(5, 24, 3, 4), "n=5"),
    (lambda: random_blocked(64, 100), "nnz_per_row=100"),
    (lambda: random_blocked(64, 24, 0, 1), "r=0"),
    (lambda: banded(512, 24, -1), "bandwidth=-1"),
    (lambda: banded(512, 24, 3), "bandwidth=3"),
    (lambda: MatrixSpec("dense", 64, 24), "family"),
    (lambda: MatrixSpec("banded", 64, 24), "bandwidth"),
    (lambda: spmv_space(256), "max_dim"),
])
def test_refuses_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
