"""Sparse matrix-vector kernels (numba): CSR and register-blocked BCSR for every ``r x c``.

``csr_spmv`` and ``bcsr_kernel(r, c)`` are the raw kernels the benchmark times: they take
arrays, write ``y = A @ x`` into a preallocated ``y`` and check nothing. ``spmv_csr`` and
``spmv_bcsr`` are the typed, validating wrappers for everyone else.

Register blocking (Im, Yelick and Vuduc's Sparsity, then OSKI): an ``r x c`` BCSR kernel keeps
the ``r`` partial sums of a block row and the ``c`` entries of ``x`` a block reads in scalar
locals, fully unrolled, so each block costs one column index instead of ``r * c``. The kernel
for each ``(r, c)`` is generated from source with those locals written out, compiled on first
use and kept for the process.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

__all__ = ["BcsrMatrix", "bcsr_kernel", "compile_seconds", "csr_spmv", "spmv_bcsr", "spmv_csr",
           "to_bcsr"]


@numba.njit(cache=True, nogil=True)
def csr_spmv(indptr, indices, data, x, y):  # pragma: no cover - compiled
    """``y[:] = A @ x`` for CSR arrays; no checks (use ``spmv_csr``)."""
    for i in range(indptr.size - 1):
        acc = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            acc += data[k] * x[indices[k]]
        y[i] = acc


def _bcsr_source(r: int, c: int) -> str:
    """Source of the fully unrolled ``r x c`` kernel; ``data`` is the flat block array."""
    size = r * c
    lines = [f"def bcsr_{r}x{c}(indptr, indices, data, x, y):",
             "    for bi in range(indptr.size - 1):"]
    lines += [f"        y{i} = 0.0" for i in range(r)]
    lines += ["        for k in range(indptr[bi], indptr[bi + 1]):",
              f"            j = indices[k] * {c}",
              f"            d = k * {size}"]
    lines += [f"            x{j} = x[j + {j}]" for j in range(c)]
    for i in range(r):
        terms = " + ".join(f"data[d + {i * c + j}] * x{j}" for j in range(c))
        lines.append(f"            y{i} += {terms}")
    lines.append(f"        i = bi * {r}")
    lines += [f"        y[i + {i}] = y{i}" for i in range(r)]
    return "\n".join(lines) + "\n"


_KERNELS: dict[tuple[int, int], object] = {}
_COMPILE_S: dict[tuple[int, int], float] = {}
_LOCK = threading.Lock()
# The benchmark's matrices: C-contiguous int32 block indices and float64 values.
_SIGNATURE = "void(int32[::1], int32[::1], float64[::1], float64[::1], float64[::1])"


def compile_seconds() -> dict[tuple[int, int], float]:
    """Seconds each ``(r, c)`` kernel took to compile in this process (wall clock), for the
    benchmark's run-time estimator; kernels not yet compiled are absent."""
    with _LOCK:
        return dict(_COMPILE_S)


def bcsr_kernel(r: int, c: int):
    """The jitted ``r x c`` BCSR kernel ``(indptr, indices, data, x, y) -> None``.

    ``indptr`` and ``indices`` are over block rows and block columns (scipy's BSR arrays),
    ``data`` is the block values flattened row-major (``bsr.data.reshape(-1)``); it writes
    ``y[:] = A @ x`` and checks nothing. Compiled on the first request, for int32 indices
    (a fraction of a second each; other index types compile on their first call)."""
    key = (int(r), int(c))
    if key[0] < 1 or key[1] < 1:
        raise ValueError(f"block {r}x{c}: r and c must be positive")
    with _LOCK:
        kernel = _KERNELS.get(key)
        if kernel is None:
            namespace: dict = {}
            exec(compile(_bcsr_source(*key), f"<bcsr_{key[0]}x{key[1]}>", "exec"), namespace)
            kernel = numba.njit(nogil=True)(namespace[f"bcsr_{key[0]}x{key[1]}"])
            start = time.perf_counter()
            if hasattr(kernel, "compile"):  # absent under NUMBA_DISABLE_JIT=1
                kernel.compile(_SIGNATURE)
            _COMPILE_S[key] = time.perf_counter() - start
            _KERNELS[key] = kernel
    return kernel


@dataclass(frozen=True)
class BcsrMatrix:
    """A matrix stored as ``r x c`` BCSR, padded with zero rows and columns to whole blocks.

    ``bsr`` is the padded scipy matrix; ``shape`` the original one; ``nnz`` the true nonzeros
    of the original. ``fill_ratio`` = stored entries / true nonzeros (1.0 when every block is
    dense)."""

    bsr: sp.bsr_matrix
    shape: tuple[int, int]
    nnz: int

    @property
    def blocksize(self) -> tuple[int, int]:
        return tuple(self.bsr.blocksize)

    @property
    def stored(self) -> int:
        return int(self.bsr.data.size)

    @property
    def fill_ratio(self) -> float:
        return self.stored / self.nnz if self.nnz else 1.0


def to_bcsr(matrix, r: int, c: int) -> BcsrMatrix:
    """Convert any scipy sparse matrix to ``r x c`` BCSR (float64, int32 indices), padding
    the shape up to whole blocks; explicit zeros are dropped first so the fill ratio counts
    true nonzeros."""
    if not sp.issparse(matrix):
        raise TypeError(f"to_bcsr: expected a scipy sparse matrix, got {type(matrix).__name__}")
    if r < 1 or c < 1:
        raise ValueError(f"block {r}x{c}: r and c must be positive")
    csr = sp.csr_matrix(matrix, dtype=np.float64, copy=False)
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()
    if (csr.data == 0).any():
        csr = csr.copy()
        csr.eliminate_zeros()
    rows, cols = csr.shape
    padded = (math.ceil(rows / r) * r, math.ceil(cols / c) * c)
    if padded != (rows, cols):
        csr = sp.csr_matrix((csr.data, csr.indices, np.concatenate(
            [csr.indptr, np.full(padded[0] - rows, csr.indptr[-1], csr.indptr.dtype)])),
            shape=padded)
    bsr = csr.tobsr(blocksize=(r, c))
    return BcsrMatrix(bsr, (rows, cols), int(csr.nnz))


def _vector(x, columns: int, who: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1 or x.shape[0] != columns:
        raise ValueError(f"{who}: x has shape {x.shape}; the matrix needs ({columns},)")
    return np.ascontiguousarray(x, dtype=np.float64)


def spmv_csr(matrix, x) -> np.ndarray:
    """``A @ x`` with the CSR kernel; ``matrix`` is any scipy sparse matrix (converted to CSR
    float64 when it is not), ``x`` a 1-D vector of matching length. Returns a new float64
    vector."""
    if not sp.issparse(matrix):
        raise TypeError(f"spmv_csr: expected a scipy sparse matrix, got {type(matrix).__name__}")
    csr = sp.csr_matrix(matrix, dtype=np.float64, copy=False)
    x = _vector(x, csr.shape[1], "spmv_csr")
    y = np.empty(csr.shape[0], dtype=np.float64)
    csr_spmv(csr.indptr, csr.indices, csr.data, x, y)
    return y


def spmv_bcsr(matrix, x) -> np.ndarray:
    """``A @ x`` with the register-blocked kernel for the matrix's block size.

    ``matrix``: a ``BcsrMatrix`` (from ``to_bcsr``) or a scipy ``bsr_matrix`` (its own
    blocksize). Returns a new float64 vector of the original row count."""
    if isinstance(matrix, BcsrMatrix):
        bsr, (rows, cols) = matrix.bsr, matrix.shape
    elif sp.issparse(matrix) and matrix.format == "bsr":
        bsr, (rows, cols) = matrix, matrix.shape
    else:
        raise TypeError("spmv_bcsr: expected a BcsrMatrix (see to_bcsr) or a scipy "
                        f"bsr_matrix, got {type(matrix).__name__}")
    r, c = bsr.blocksize
    x = _vector(x, cols, "spmv_bcsr")
    padded_rows, padded_cols = bsr.shape
    if padded_cols != cols:
        x = np.concatenate([x, np.zeros(padded_cols - cols)])
    data = np.ascontiguousarray(bsr.data, dtype=np.float64).reshape(-1)
    y = np.empty(padded_rows, dtype=np.float64)
    bcsr_kernel(r, c)(bsr.indptr, bsr.indices, data, x, y)
    return y[:rows]
