"""Per-block SpMV timings: the measured data behind the blockwise SpMV estimator.

The estimator (``dse.calibrate.spmv_cnn``) splits a CSR matrix into blocks of ``BLOCK_NNZ``
consecutive nonzeros, reads the log2 of the column-index deltas in each block, and predicts
each block's time; a matrix's time is the sum over its blocks. To learn that per block, the
time of each block has to be measured *in context* (inside a whole SpMV, with the caches the
matrix and ``x`` leave), not in isolation, where every block fits in L1 and looks the same.

``timed_csr_spmv`` is the CSR kernel walked nonzero by nonzero with the processor's cycle
counter (LLVM's ``readcyclecounter``: the constant-rate TSC on x86) read at every block
boundary, about 25 cycles per 250 nonzeros. Its per-block times sum to its whole time; that
whole is compared with the plain ``csr_spmv`` the BeBOP benchmark times, so the cost of the
instrumentation is measured, not assumed (``instrumented_s`` beside ``spmv_s``).

The matrices: the BeBOP benchmark's synthetic matrices (random and banded, dense ``r x c``
blocks) and pruned weight matrices of the shipped traces' layers (``m x k``, convolutions as
their im2col matrix) under per-layer magnitude masks, one global magnitude mask per model,
N:M and block masks. The weights are synthetic: Gaussian values with log-normal row and column
scales, so that magnitude masks leave rows and columns of unequal density as trained weights
do. Every matrix is rebuilt exactly from its row of the dataset (family, shape, seed), so the
dataset stores timings only, never matrices.

Library code: it never prints; long work reports through ``progress(done, total)``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..measure.errors import BenchError
from .kernels import csr_spmv
from .matrices import MatrixSpec, min_bandwidth

__all__ = [
    "BLOCK_NNZ",
    "DATASETS_DIR",
    "BLOCK_COLUMNS",
    "BlockDataset",
    "PrunedSpec",
    "REFERENCE",
    "block_context",
    "block_features",
    "drift_factor",
    "build",
    "load_block_dataset",
    "shipped_block_datasets",
    "measure_matrix",
    "pruned_specs",
    "run_block_benchmark",
    "spec_from_row",
    "synthetic_specs",
    "timed_csr_spmv",
]

#: Nonzeros per block, the seed's choice.
BLOCK_NNZ = 250
#: Feature channels per nonzero: log2(1 + |column delta|) and "a new row starts here".
CHANNELS = 2
#: Shortest plain-kernel sample (seconds): small products are repeated back to back.
MIN_SAMPLE_S = 50e-6
#: Per-block columns (a sample of each matrix's blocks).
BLOCK_COLUMNS = ("matrix", "block", "block_s")

Progress = Callable[[int, int], None]


@intrinsic
def _cycles(typingctx):
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.uint64(), codegen


@numba.njit(cache=True, nogil=True)
def timed_csr_spmv(indptr, indices, data, x, y, block, stamps):  # pragma: no cover - compiled
    """``y[:] = A @ x`` walked nonzero by nonzero; ``stamps[b]`` is the cycle counter when
    block ``b`` (nonzeros ``b * block`` onwards) starts, ``stamps[-1]`` when the last ends."""
    rows = indptr.size - 1
    nnz = indices.size
    row = 0
    while row < rows and indptr[row + 1] == 0:
        y[row] = 0.0
        row += 1
    acc = 0.0
    blocks = (nnz + block - 1) // block
    stamps[0] = _cycles()
    for b in range(blocks):
        k = b * block
        hi = min(k + block, nnz)
        while k < hi:
            # The rest of the current row within this block: a plain inner loop, as in
            # csr_spmv, so the instrumentation costs a branch per row, not per nonzero.
            end = min(indptr[row + 1], hi)
            for kk in range(k, end):
                acc += data[kk] * x[indices[kk]]
            k = end
            if end == indptr[row + 1]:
                y[row] = acc
                acc = 0.0
                row += 1
                while row < rows and indptr[row + 1] == indptr[row]:
                    y[row] = 0.0
                    row += 1
        stamps[b + 1] = _cycles()
    while row < rows:
        y[row] = 0.0
        row += 1


def block_features(matrix: sp.csr_matrix, block: int = BLOCK_NNZ) -> np.ndarray:
    """``(blocks, CHANNELS, block)`` float32: per nonzero, log2(1 + |column delta|) (the
    delta to the previous nonzero in storage order; the first nonzero's is its column) and a
    1 where a row starts. The last block is padded with zeros."""
    csr = _canonical(matrix)
    nnz = csr.nnz
    blocks = max(1, -(-nnz // block))
    out = np.zeros((blocks, CHANNELS, block), dtype=np.float32)
    if nnz == 0:
        return out
    cols = csr.indices.astype(np.int64)
    delta = np.empty(nnz, dtype=np.int64)
    delta[0] = cols[0]
    delta[1:] = np.abs(np.diff(cols))
    starts = np.zeros(nnz, dtype=np.float32)
    first = csr.indptr[:-1][np.diff(csr.indptr) > 0]
    starts[first] = 1.0
    flat = out.reshape(blocks, CHANNELS, block)
    padded = np.zeros(blocks * block, dtype=np.float32)
    padded[:nnz] = np.log2(1.0 + delta)
    flat[:, 0, :] = padded.reshape(blocks, block)
    padded[:] = 0.0
    padded[:nnz] = starts
    flat[:, 1, :] = padded.reshape(blocks, block)
    return out


def block_context(rows: int, cols: int, nnz: int, block: int = BLOCK_NNZ) -> np.ndarray:
    """``(blocks, 3)`` float32 scalars each block is read with: log2 of the bytes of ``x``
    and of the whole CSR matrix (whether they stay in cache between products), and the share
    of the block that holds nonzeros (1 but for the last)."""
    blocks = max(1, -(-nnz // block))
    valid = np.ones(blocks, dtype=np.float32)
    if nnz % block:
        valid[-1] = (nnz % block) / block
    matrix_bytes = nnz * 12 + (rows + 1) * 4
    out = np.empty((blocks, 3), dtype=np.float32)
    out[:, 0] = math.log2(max(cols, 1) * 8)
    out[:, 1] = math.log2(max(matrix_bytes, 1))
    out[:, 2] = valid if nnz else 0.0
    return out


def _canonical(matrix) -> sp.csr_matrix:
    csr = sp.csr_matrix(matrix)
    csr.sort_indices()
    csr.indices = np.ascontiguousarray(csr.indices, dtype=np.int32)
    csr.indptr = np.ascontiguousarray(csr.indptr, dtype=np.int32)
    csr.data = np.ascontiguousarray(csr.data, dtype=np.float64)
    return csr


# --- the matrices -------------------------------------------------------------------------


@dataclass(frozen=True)
class PrunedSpec:
    """A pruned weight matrix of one layer: ``rows x cols`` (out features x in features, a
    convolution's im2col view), ``mask`` one of ``magnitude`` (per layer), ``global`` (one
    threshold over the model's layers, ``sparsity`` being the model-wide share), ``n:m`` (e.g.
    ``2:4`` along the input dimension) or ``blockB`` (``B x B`` blocks by their norm)."""

    model: str
    op: str
    rows: int
    cols: int
    mask: str
    sparsity: float
    seed: int
    threshold: float = float("nan")  # the global mask's |w| threshold, fixed per model

    @property
    def label(self) -> str:
        return f"{self.model}/{self.op} {self.rows}x{self.cols} {self.mask}@{self.sparsity:.0%}"

    def weights(self) -> np.ndarray:
        """Gaussian weights with log-normal row and column scales (σ = 0.5), scaled by the
        layer's fan-in as initializers do: magnitude masks then keep more of some rows and
        columns than of others."""
        rng = np.random.default_rng(self.seed)
        w = rng.standard_normal((self.rows, self.cols), dtype=np.float32)
        w *= np.exp(0.5 * rng.standard_normal((self.rows, 1), dtype=np.float32))
        w *= np.exp(0.5 * rng.standard_normal((1, self.cols), dtype=np.float32))
        return w / np.float32(math.sqrt(self.cols))

    def build(self) -> sp.csr_matrix:
        w = self.weights()
        a = np.abs(w)
        if self.mask == "magnitude":
            keep = a >= np.quantile(a, self.sparsity)
        elif self.mask == "global":
            keep = a >= self.threshold
        elif ":" in self.mask:
            n, m = (int(v) for v in self.mask.split(":"))
            cols = self.cols - self.cols % m
            groups = a[:, :cols].reshape(self.rows, -1, m)
            order = np.argsort(-groups, axis=2, kind="stable")
            keep_groups = np.zeros_like(groups, dtype=bool)
            np.put_along_axis(keep_groups, order[:, :, :n], True, axis=2)
            keep = np.zeros_like(a, dtype=bool)
            keep[:, :cols] = keep_groups.reshape(self.rows, cols)
        elif self.mask.startswith("block"):
            b = int(self.mask[5:])
            rows, cols = self.rows - self.rows % b, self.cols - self.cols % b
            norms = np.sqrt((a[:rows, :cols] ** 2).reshape(rows // b, b, cols // b, b)
                            .sum(axis=(1, 3)))
            kept = norms >= np.quantile(norms, self.sparsity)
            keep = np.zeros_like(a, dtype=bool)
            keep[:rows, :cols] = np.repeat(np.repeat(kept, b, axis=0), b, axis=1)
        else:
            raise ValueError(f"mask={self.mask!r}: use magnitude, global, N:M or blockB")
        return sp.csr_matrix(np.where(keep, w, 0.0).astype(np.float64))


def synthetic_specs(max_dim: int, seed: int = 0) -> list[MatrixSpec]:
    """BeBOP's matrices for the estimator: dimensions 2^9 .. ``max_dim``, 4 to 34 nonzeros a
    row, blocks 1x1 to 8x8, random and banded (bandwidths from tight to wide)."""
    specs = []
    n = 512
    while n <= max_dim:
        for k in (4, 8, 16, 24, 34):
            for r, c in ((1, 1), (1, 2), (1, 4), (2, 2), (3, 3), (4, 1), (4, 4), (8, 8)):
                index = len(specs)
                specs.append(MatrixSpec("blocked", n, k, r, c, None, seed * 1_000_003 + index))
                bandwidth = max(4 * k, n // 64)
                if bandwidth < n:
                    specs.append(MatrixSpec("banded", n, k, r, c, _band(n, k, r, c, bandwidth),
                                            seed * 1_000_003 + index + 500_000))
        n *= 2
    return specs


def _band(n: int, k: int, r: int, c: int, wanted: int) -> int:
    return max(wanted, min_bandwidth(n, k, r, c))


#: The masks of the trace layers, with the sparsities of each.
PRUNED_MASKS = (("magnitude", (0.5, 0.75, 0.9, 0.95)), ("global", (0.75, 0.9)),
                ("2:4", (0.5,)), ("1:4", (0.75,)), ("2:8", (0.75,)),
                ("block4", (0.75, 0.9)), ("block8", (0.9,)))


def pruned_specs(traces: Sequence, seed: int = 0, max_elems: int = 2**22) -> list[PrunedSpec]:
    """The distinct prunable ``m x k`` weight matrices (groups 1, at most ``max_elems``
    entries) of ``traces`` under every mask of ``PRUNED_MASKS``. A global mask's threshold is
    the model-wide quantile of |w| over those layers."""
    specs: list[PrunedSpec] = []
    for trace in traces:
        ops = trace.ops
        ops = ops[ops["prunable"].astype(bool) & (ops["groups"] == 1) & (ops["m"] > 0)
                  & (ops["k"] > 0) & (ops["m"] * ops["k"] <= max_elems)]
        shapes = ops.drop_duplicates(["m", "k"])
        layers = [(str(o.name), int(o.m), int(o.k)) for o in shapes.itertuples()]
        for mask, sparsities in PRUNED_MASKS:
            for sparsity in sparsities:
                thresholds = {}
                if mask == "global":
                    thresholds = _global_thresholds(trace.model, layers, sparsity, seed)
                for op, m, k in layers:
                    if not _maskable(mask, m, k):
                        continue
                    layer_seed = _seed(seed, trace.model, op)
                    specs.append(PrunedSpec(trace.model, op, m, k, mask, sparsity, layer_seed,
                                            thresholds.get(op, float("nan"))))
    return specs


def _maskable(mask: str, rows: int, cols: int) -> bool:
    """Whether the layer holds at least one whole group of the mask (an N:M group of inputs,
    a block), and nonzeros under a magnitude mask."""
    if ":" in mask:
        return cols >= int(mask.split(":")[1])
    if mask.startswith("block"):
        b = int(mask[5:])
        return rows >= b and cols >= b
    return rows * cols >= 4


def _seed(seed: int, model: str, op: str) -> int:
    # A stable per-layer seed (Python's hash() changes between processes).
    return seed * 1_000_003 + int.from_bytes(f"{model}/{op}".encode()[-7:], "little") % 2**31


def _global_thresholds(model: str, layers, sparsity: float, seed: int) -> dict[str, float]:
    magnitudes = [np.abs(PrunedSpec(model, op, m, k, "magnitude", 0.0,
                                    _seed(seed, model, op)).weights()).ravel()
                  for op, m, k in layers]
    threshold = float(np.quantile(np.concatenate(magnitudes), sparsity))
    return {op: threshold for op, _, _ in layers}


def spec_row(spec: MatrixSpec | PrunedSpec) -> dict:
    """The dataset's description of a matrix, enough to rebuild it (``spec_from_row``)."""
    if isinstance(spec, MatrixSpec):
        return {"source": "bebop", "family": spec.family, "r": spec.r, "c": spec.c,
                "bandwidth": -1 if spec.bandwidth is None else spec.bandwidth,
                "nnz_per_row": spec.nnz_per_row, "model": "", "op": "", "mask": "",
                "sparsity": float("nan"), "seed": spec.seed, "n": spec.n,
                "threshold": float("nan")}
    row = asdict(spec)
    return {"source": "pruned", "family": "weights", "r": 1, "c": 1, "bandwidth": -1,
            "nnz_per_row": -1, "model": row["model"], "op": row["op"], "mask": row["mask"],
            "sparsity": row["sparsity"], "seed": row["seed"], "n": -1,
            "threshold": row["threshold"]}


def spec_from_row(row) -> MatrixSpec | PrunedSpec:
    """Inverse of ``spec_row`` on a dataset row (a mapping or a pandas row)."""
    if row["source"] == "bebop":
        bandwidth = int(row["bandwidth"])
        return MatrixSpec(str(row["family"]), int(row["n"]), int(row["nnz_per_row"]),
                          int(row["r"]), int(row["c"]), None if bandwidth < 0 else bandwidth,
                          int(row["seed"]))
    return PrunedSpec(str(row["model"]), str(row["op"]), int(row["rows"]), int(row["cols"]),
                      str(row["mask"]), float(row["sparsity"]), int(row["seed"]),
                      float(row["threshold"]))


def build(row) -> sp.csr_matrix:
    """The CSR matrix a dataset row describes, canonical (sorted int32 indices, float64)."""
    return _canonical(spec_from_row(row).build())


# --- measuring ----------------------------------------------------------------------------


@numba.njit(cache=True)
def _spin(n):  # pragma: no cover - compiled
    acc = 0.0
    for i in range(n):
        acc += i * 0.5
    return acc


def _tsc_hz(seconds: float = 0.05) -> float:
    """Cycle-counter ticks per second, against ``time.perf_counter`` over a busy loop."""
    _spin(10)
    start_c, start_t = _read_cycles(), time.perf_counter()
    _spin(int(2e8 * seconds))
    return (_read_cycles() - start_c) / (time.perf_counter() - start_t)


@numba.njit(cache=True)
def _read_cycles():  # pragma: no cover - compiled
    return _cycles()


def measure_matrix(csr: sp.csr_matrix, repeats: int = 9, sample: int = 256,
                   tsc_hz: float | None = None, seed: int = 0) -> dict:
    """Time ``csr @ x`` ``repeats`` times with the plain CSR kernel and with the per-block
    instrumented one (interleaved, after a warm-up of each). Returns the median plain time
    and its spread ((max - min) / median), the median instrumented total, and the median
    time of up to ``sample`` blocks spread evenly over the matrix (all when fewer)."""
    csr = _canonical(csr)
    if csr.nnz == 0:
        raise BenchError("a matrix without nonzeros has no SpMV time to measure")
    hz = tsc_hz or _tsc_hz()
    x = np.random.default_rng(seed).standard_normal(csr.shape[1])
    y = np.empty(csr.shape[0])
    blocks = -(-csr.nnz // BLOCK_NNZ)
    stamps = np.zeros(blocks + 1, dtype=np.uint64)
    args = (csr.indptr, csr.indices, csr.data, x, y)
    csr_spmv(*args)
    timed_csr_spmv(*args, BLOCK_NNZ, stamps)
    expected = csr @ x
    if not np.allclose(y, expected, rtol=1e-9, atol=1e-9):
        raise BenchError("the instrumented CSR kernel disagrees with scipy's product")
    # A plain product of a small matrix takes a few microseconds, near the clock's own
    # cost: each plain sample times enough back-to-back products to last MIN_SAMPLE_S.
    start = time.perf_counter()
    csr_spmv(*args)
    calls = max(1, math.ceil(MIN_SAMPLE_S / max(time.perf_counter() - start, 1e-9)))
    plain, totals = [], []
    per_block = np.empty((repeats, blocks))
    for i in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            csr_spmv(*args)
        plain.append((time.perf_counter() - start) / calls)
        timed_csr_spmv(*args, BLOCK_NNZ, stamps)
        cycles = np.diff(stamps.astype(np.int64))
        per_block[i] = cycles / hz
        totals.append((int(stamps[-1]) - int(stamps[0])) / hz)
    chosen = np.unique(np.linspace(0, blocks - 1, min(sample, blocks)).round().astype(int))
    median = float(np.median(plain))
    return {"blocks": blocks, "spmv_s": median,
            "spmv_spread": (max(plain) - min(plain)) / median,
            "instrumented_s": float(np.median(totals)), "tsc_hz": hz, "repeats": repeats,
            "block": chosen, "block_s": np.median(per_block[:, chosen], axis=0)}


#: The reference product timed before and after every matrix: how fast the machine is at
#: that moment. On a shared VM the same matrix measured minutes apart differs by 15-35%
#: (frequency, neighbours' memory traffic) where back-to-back runs differ by 2%.
REFERENCE = MatrixSpec("blocked", 8192, 16, 1, 1, None, 12345)


def _reference_s(args, repeats: int = 5) -> float:
    """Median time of the reference product (after one warm-up call)."""
    csr_spmv(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        csr_spmv(*args)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def drift_factor(matrices: pd.DataFrame) -> np.ndarray:
    """Per matrix, what brings its times to the machine's typical speed: the median
    reference time over the dataset divided by the reference time around that matrix (1
    where the dataset has no reference times)."""
    if "reference_s" not in matrices:
        return np.ones(len(matrices))
    reference = matrices["reference_s"].to_numpy(dtype=float)
    return float(np.median(reference)) / reference


@dataclass
class BlockDataset:
    """Per-matrix rows and per-block rows (a sample of each matrix's blocks)."""

    matrices: pd.DataFrame
    blocks: pd.DataFrame
    skipped: int = 0

    def frame(self) -> pd.DataFrame:
        """One table, a row per measured block with its matrix's columns (what is written)."""
        return self.blocks.merge(self.matrices, on="matrix", how="left")


#: Where the shipped block datasets live (one per measured machine): beside the other shipped
#: measurement datasets, in ``dse/measure/datasets/spmv/``.
DATASETS_DIR = Path(__file__).resolve().parent.parent / "measure" / "datasets" / "spmv"
#: Columns a block dataset file must have (the matrices' description, the timings).
_REQUIRED = ("matrix", "block", "block_s", "source", "family", "rows", "cols", "nnz", "r",
             "c", "bandwidth", "nnz_per_row", "n", "model", "op", "mask", "sparsity", "seed",
             "threshold", "blocks", "spmv_s", "instrumented_s")


def shipped_block_datasets() -> list[str]:
    """Names of the shipped SpMV block datasets (``load_block_dataset(name)``)."""
    return sorted(p.stem for p in DATASETS_DIR.glob("*.parquet"))


def load_block_dataset(path_or_name: str | Path) -> BlockDataset:
    """A block dataset written by ``dse bench spmv-blocks``, by file or shipped name."""
    path = Path(path_or_name)
    if not path.is_file():
        path = DATASETS_DIR / f"{path_or_name}.parquet"
    if not path.is_file():
        raise BenchError(f"SpMV block dataset {path_or_name}: no such file or shipped dataset; "
                         f"shipped: {', '.join(shipped_block_datasets()) or 'none'}; measure "
                         "one with dse bench spmv-blocks")
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise BenchError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in _REQUIRED if c not in frame]
    if missing:
        raise BenchError(f"{path}: missing columns {', '.join(missing)}; it is not a block "
                         "dataset written by dse bench spmv-blocks")
    if not (frame["block_s"] > 0).all() or not (frame["spmv_s"] > 0).all():
        raise BenchError(f"{path}: block_s and spmv_s must be positive seconds")
    block_columns = list(BLOCK_COLUMNS)
    matrices = frame.drop(columns=[c for c in block_columns if c != "matrix"]) \
        .drop_duplicates("matrix").reset_index(drop=True)
    return BlockDataset(matrices, frame[block_columns].reset_index(drop=True))


def run_block_benchmark(specs: Sequence[MatrixSpec | PrunedSpec], budget_s: float, *,
                        repeats: int = 9, sample: int = 256, seed: int = 0,
                        progress: Progress | None = None,
                        clock: Callable[[], float] = time.monotonic) -> BlockDataset:
    """Measure ``specs`` in a seeded random order until ``budget_s`` is spent (a shuffled
    order, so a budget that stops early still leaves a mix of every source and size).
    Matrices left when the budget ran out are counted in ``skipped``."""
    if budget_s <= 0:
        raise BenchError(f"budget {budget_s:g} s: give a positive time budget")
    order = np.random.default_rng(seed).permutation(len(specs))
    hz = _tsc_hz()
    reference = _canonical(REFERENCE.build())
    x = np.random.default_rng(seed).standard_normal(reference.shape[1])
    reference_args = (reference.indptr, reference.indices, reference.data, x,
                      np.empty(reference.shape[0]))
    deadline = clock() + budget_s
    matrices, blocks = [], []
    done = 0
    for position, index in enumerate(order):
        if clock() >= deadline:
            break
        spec = specs[index]
        csr = _canonical(spec.build())
        if csr.nnz == 0:
            continue
        before = _reference_s(reference_args)
        timing = measure_matrix(csr, repeats, sample, hz, seed)
        after = _reference_s(reference_args)
        matrix = len(matrices)
        matrices.append({"matrix": matrix, **spec_row(spec), "rows": csr.shape[0],
                         "cols": csr.shape[1], "nnz": csr.nnz,
                         **{k: timing[k] for k in ("blocks", "spmv_s", "spmv_spread",
                                                   "instrumented_s", "tsc_hz", "repeats")},
                         "reference_s": math.sqrt(before * after)})
        blocks.append(pd.DataFrame({"matrix": matrix, "block": timing["block"],
                                    "block_s": timing["block_s"]}))
        done = position + 1
        if progress is not None:
            progress(done, len(specs))
    if not matrices:
        raise BenchError(f"budget {budget_s:g} s: not one matrix could be measured in it; "
                         "give a longer --budget")
    return BlockDataset(pd.DataFrame(matrices),
                        pd.concat(blocks, ignore_index=True).astype(
                            {"matrix": "int32", "block": "int32", "block_s": "float64"}),
                        skipped=len(specs) - done)
