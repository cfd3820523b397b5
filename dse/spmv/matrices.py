"""Synthetic sparse matrices for the BeBOP SpMV benchmark, generated on the fly (no files).

Every family is square, float64 CSR (``scipy.sparse.csr_array``-compatible ``csr_matrix``
with sorted, duplicate-free int32 indices) and built from dense ``r x c`` blocks whose block
rows and block columns are aligned to multiples of ``r`` and ``c``, as in Gahvari, Hoemmen,
Demmel and Yelick, *Benchmarking Sparse Matrix-Vector Multiply in Five Minutes* (2007):

- ``random_blocked``: each block row holds ``b = max(1, round(nnz_per_row / c))`` blocks at
  distinct, random block columns, so every row has exactly ``b * c`` nonzeros (within
  ``c / 2`` of ``nnz_per_row``) and ``tobsr(blocksize=(r, c))`` stores no explicit zero.
- ``banded``: the same, with every nonzero ``(i, j)`` inside the band ``|i - j| <=
  bandwidth``, so ``x`` is read with locality.

Values are uniform in [0.5, 1.5): positive, so products have no cancellation and any two
summation orders agree to a few ulps. Generators take a seed and are deterministic for it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = [
    "BLOCK_SIZES",
    "FAMILIES",
    "MIN_DIM",
    "NNZ_PER_ROW",
    "MatrixSpec",
    "aligned_dim",
    "banded",
    "blocks_per_row",
    "min_bandwidth",
    "random_blocked",
    "spmv_space",
]

BLOCK_SIZES = (1, 2, 3, 4, 6, 8)
NNZ_PER_ROW = tuple(range(24, 35))
MIN_DIM = 2**9
FAMILIES = ("blocked", "banded")
_INDEX_BYTES = 4
_VALUE_BYTES = 8


def aligned_dim(n: int, r: int, c: int) -> int:
    """``n`` rounded down to a multiple of lcm(r, c), so block rows and columns tile it."""
    step = math.lcm(r, c)
    return (n // step) * step


def blocks_per_row(nnz_per_row: int, c: int) -> int:
    """Blocks in each block row: ``nnz_per_row / c`` rounded half up, at least 1."""
    return max(1, int(math.floor(nnz_per_row / c + 0.5)))


def _check(n: int, nnz_per_row: int, r: int, c: int) -> int:
    for name, value in (("n", n), ("nnz_per_row", nnz_per_row), ("r", r), ("c", c)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name}={value!r}: give a positive integer")
    rows = aligned_dim(int(n), r, c)
    if rows == 0:
        raise ValueError(f"n={n}: smaller than one {r}x{c} block tile "
                         f"(lcm {math.lcm(r, c)}); give n >= {math.lcm(r, c)}")
    return rows


def _block_columns(lo: np.ndarray, width: np.ndarray, b: int,
                   rng: np.random.Generator) -> np.ndarray:
    """``b`` distinct, sorted block columns per block row, in ``[lo, lo + width)``.

    Draws ``b`` values in ``[0, width - b]`` with replacement, sorts them and adds ``0..b-1``:
    a strictly increasing sequence in ``[0, width)``, fully vectorized (no rejection loop)."""
    span = width - b + 1
    high = int(span[0]) if span.size and (span == span[0]).all() else span[:, None]
    kind = np.int32 if int(lo.max(initial=0)) + int(width.max(initial=0)) < 2**31 else np.int64
    draws = rng.integers(0, high, size=(lo.size, b), dtype=kind)
    draws.sort(axis=1)
    draws += np.arange(b, dtype=kind)[None, :]
    draws += lo.astype(kind)[:, None]
    return draws


def _assemble(rows: int, r: int, c: int, cols: np.ndarray,
              rng: np.random.Generator) -> sp.csr_matrix:
    """CSR from sorted block columns ``cols`` (block rows x b), canonical and int32."""
    nbr, b = cols.shape
    per_row = b * c
    index_type = np.int32 if rows * per_row < 2**31 else np.int64
    # (block row, row in block, block, column in block): row-major order is CSR order.
    col = np.empty((nbr, r, b, c), dtype=index_type)
    np.add((cols.astype(index_type) * index_type(c))[:, None, :, None],
           np.arange(c, dtype=index_type), out=col)
    col = col.reshape(-1)
    indptr = np.arange(rows + 1, dtype=index_type) * index_type(per_row)
    data = rng.random(size=col.size)
    data += 0.5
    matrix = sp.csr_matrix((data, col, indptr),
                           shape=(rows, rows))
    matrix.has_sorted_indices = True
    return matrix


def random_blocked(n: int, nnz_per_row: int, r: int = 1, c: int = 1,
                   seed: int = 0) -> sp.csr_matrix:
    """A square matrix of dense ``r x c`` blocks at random, distinct block columns.

    Promise: the shape is ``aligned_dim(n, r, c)`` square (``n`` rounded down to a multiple of
    lcm(r, c); refused when that is 0); every row holds exactly ``blocks_per_row(nnz_per_row,
    c) * c`` nonzeros (fewer only when the row is shorter: refused); blocks start at rows and
    columns that are multiples of ``r`` and ``c``, so ``tobsr(blocksize=(r, c))`` has a fill
    ratio of exactly 1; the same arguments give the same matrix.
    """
    rows = _check(n, nnz_per_row, r, c)
    b = blocks_per_row(nnz_per_row, c)
    nbc = rows // c
    if b > nbc:
        raise ValueError(f"nnz_per_row={nnz_per_row}: needs {b} blocks of width {c} per row "
                         f"but n={rows} has only {nbc}; give a larger n or fewer nonzeros")
    rng = np.random.default_rng(seed)
    nbr = rows // r
    lo = np.zeros(nbr, dtype=np.int64)
    width = np.full(nbr, nbc, dtype=np.int64)
    return _assemble(rows, r, c, _block_columns(lo, width, b, rng), rng)


def _band_limits(rows: int, r: int, c: int, bandwidth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per block row, the first block column and the count of block columns whose every
    entry lies within ``|i - j| <= bandwidth``."""
    first_row = np.arange(rows // r, dtype=np.int64) * r
    # Block column J is inside when J*c + c-1 - first_row <= bw and first_row + r-1 - J*c <= bw.
    lo = np.maximum(0, -((bandwidth - first_row - r + 1) // c))  # ceil((row+r-1-bw)/c)
    hi = np.minimum(rows // c - 1, (first_row + bandwidth - c + 1) // c)
    return lo, np.maximum(hi - lo + 1, 0)


def banded(n: int, nnz_per_row: int, bandwidth: int, r: int = 1, c: int = 1,
           seed: int = 0) -> sp.csr_matrix:
    """Like ``random_blocked``, with the blocks inside a band around the diagonal.

    Promise: everything ``random_blocked`` promises, and every nonzero ``(i, j)`` satisfies
    ``|i - j| <= bandwidth``; refused when some block row (the first and last are the
    tightest) cannot hold its blocks inside the band. A bandwidth of ``n`` or more is the
    unbanded family.
    """
    rows = _check(n, nnz_per_row, r, c)
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, int | np.integer) \
            or bandwidth < 0:
        raise ValueError(f"bandwidth={bandwidth!r}: give a non-negative integer")
    b = blocks_per_row(nnz_per_row, c)
    lo, width = _band_limits(rows, r, c, int(bandwidth))
    if width.min() < b:
        need = min_bandwidth(rows, nnz_per_row, r, c)
        raise ValueError(f"bandwidth={bandwidth}: too narrow for {b} blocks of {r}x{c} per "
                         f"block row at n={rows}; give bandwidth >= {need}")
    rng = np.random.default_rng(seed)
    return _assemble(rows, r, c, _block_columns(lo, width, b, rng), rng)


def min_bandwidth(n: int, nnz_per_row: int, r: int = 1, c: int = 1) -> int:
    """The smallest bandwidth ``banded`` accepts for these arguments (bisection)."""
    rows = _check(n, nnz_per_row, r, c)
    b = blocks_per_row(nnz_per_row, c)
    low, high = 0, 2 * rows
    while low < high:
        mid = (low + high) // 2
        if _band_limits(rows, r, c, mid)[1].min() >= b:
            high = mid
        else:
            low = mid + 1
    return low


@dataclass(frozen=True)
class MatrixSpec:
    """One benchmark matrix, not yet built: its family and parameters.

    ``bandwidth`` is None for ``blocked``. ``nnz``, ``bytes`` and ``n_rows`` are exact,
    computed without building, so the run-time estimator can price the matrix."""

    family: str
    n: int
    nnz_per_row: int
    r: int = 1
    c: int = 1
    bandwidth: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family={self.family!r}: use one of {', '.join(FAMILIES)}")
        if (self.family == "banded") != (self.bandwidth is not None):
            raise ValueError(f"family={self.family!r} with bandwidth={self.bandwidth!r}: "
                             "banded matrices take a bandwidth, blocked ones none")

    @property
    def n_rows(self) -> int:
        """Rows (= columns) of the built matrix: ``n`` rounded down to lcm(r, c)."""
        return aligned_dim(self.n, self.r, self.c)

    @property
    def nnz(self) -> int:
        """True nonzeros of the built matrix."""
        return self.n_rows * self.c * blocks_per_row(self.nnz_per_row, self.c)

    @property
    def bytes(self) -> int:
        """CSR storage: float64 values, int32 column indices and row pointers."""
        return self.nnz * (_VALUE_BYTES + _INDEX_BYTES) + (self.n_rows + 1) * _INDEX_BYTES

    @property
    def block(self) -> str:
        return f"{self.r}x{self.c}"

    @property
    def label(self) -> str:
        band = f" bw={self.bandwidth}" if self.bandwidth is not None else ""
        return f"{self.family} n={self.n_rows} k={self.nnz_per_row} {self.block}{band}"

    def build(self) -> sp.csr_matrix:
        if self.family == "banded":
            return banded(self.n, self.nnz_per_row, self.bandwidth, self.r, self.c,
                          self.seed)
        return random_blocked(self.n, self.nnz_per_row, self.r, self.c, self.seed)


def spmv_space(max_dim: int, *, min_dim: int = MIN_DIM,
               nnz_per_row: Iterable[int] = NNZ_PER_ROW,
               blocks: Iterable[int] = BLOCK_SIZES,
               bandwidths: Iterable[int] = (), seed: int = 0) -> list[MatrixSpec]:
    """The BeBOP space: dimensions ``min_dim, 2*min_dim, ...`` up to ``max_dim`` (powers of
    two when ``min_dim`` is), every ``nnz_per_row``, every ``r x c`` with r, c in ``blocks``;
    the ``blocked`` family, plus a ``banded`` variant per bandwidth in ``bandwidths``.

    Ordered smallest dimension first (then nonzeros per row, r, c, family), the order the
    benchmark runs in. Each matrix gets its own seed, derived from ``seed`` and its index.
    """
    if min_dim < 1 or max_dim < min_dim:
        raise ValueError(f"max_dim={max_dim}, min_dim={min_dim}: give 1 <= min_dim <= max_dim")
    dims = []
    n = int(min_dim)
    while n <= max_dim:
        dims.append(n)
        n *= 2
    blocks = tuple(blocks)
    variants: list[tuple[str, int | None]] = [("blocked", None)]
    variants += [("banded", int(bw)) for bw in bandwidths]
    specs = []
    for n in dims:
        for k in nnz_per_row:
            for r in blocks:
                for c in blocks:
                    for family, bw in variants:
                        specs.append(MatrixSpec(family, n, int(k), r, c, bw,
                                                seed * 1_000_003 + len(specs)))
    return specs

