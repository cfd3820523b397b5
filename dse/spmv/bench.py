"""The BeBOP sparse matrix-vector benchmark, on the machine at hand, within a time budget.

After Gahvari, Hoemmen, Demmel and Yelick, *Benchmarking Sparse Matrix-Vector Multiply in Five
Minutes* (2007). The space is synthetic matrices of dense ``r x c`` blocks (``dse.spmv.matrices``):
dimensions ``2^9 .. max_dim``, 24 to 34 nonzeros a row, ``r, c`` in {1, 2, 3, 4, 6, 8}, random
and banded. Each matrix runs the CSR kernel and the ``r x c`` register-blocked BCSR kernel
(``dse.spmv.kernels``), both checked against scipy's product before they are timed.

Three steps, each usable alone:

1. ``calibrate`` times the benchmark's own phases (generation, reference product, conversion,
   one kernel call) on a few small matrices and returns the rates (``Calibration``).
2. ``estimate`` prices every (matrix, kernel) from those rates; ``prune_to_budget`` thins the
   space BeBOP's way until the price fits: fewer nonzeros-per-row values first, then the
   largest dimensions. ``plan_spmv_benchmark`` does 1 and 2 and returns the plan, whose
   ``predicted_s`` a caller shows before the run.
3. ``run_spmv_plan`` runs the plan, checking the clock before each matrix: a matrix whose
   predicted time (scaled by how far the estimate has been off so far) would overrun the
   budget is skipped and recorded, so the run ends within its budget even when the estimate
   is wrong. ``run_spmv_benchmark`` is steps 1 to 3 in one call.

Library code: it never prints; long work reports through ``progress(done, total)``.
MFLOP/s counts ``2 * true nonzeros`` per product (explicit zeros of BCSR fill are not work).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..measure.budget import parse_duration as budget_duration
from ..measure.errors import BenchError
from .kernels import bcsr_kernel, compile_seconds, csr_spmv, to_bcsr
from .matrices import BLOCK_SIZES, MIN_DIM, NNZ_PER_ROW, MatrixSpec, min_bandwidth, spmv_space

__all__ = [
    "DEFAULT_BANDWIDTHS",
    "REPEATS",
    "RESULT_COLUMNS",
    "BenchError",
    "Calibration",
    "Pruning",
    "SpmvPlan",
    "SpmvResult",
    "SpmvSummary",
    "cache_sizes_from_sysfs",
    "calibrate",
    "default_max_dim",
    "estimate",
    "format_summary",
    "parse_duration",
    "plan_spmv_benchmark",
    "prune_to_budget",
    "run_spmv_benchmark",
    "run_spmv_plan",
    "size_class",
]

REPEATS = 5  # timed samples per (matrix, kernel); the reported time is their median
MIN_SAMPLE_S = 0.002  # a sample repeats the product until it lasts this long
DEFAULT_BANDWIDTHS = (64,)
PLAN_SHARE = 0.9  # the pruned space is priced to this share of the budget left
CHECK_RTOL = 1e-10
MEMORY_SHARE = 0.25  # of available memory, for the largest matrix and its copies
PEAK_BYTES_PER_NNZ = 80  # CSR + BCSR + generation temporaries, per true nonzero
MAX_DIM_CAP = 2**22
TYPICAL_COMPILE_S = 0.3  # one BCSR kernel, to refuse a hopeless budget before compiling

Clock = Callable[[], float]
Progress = Callable[[int, int], None]


# --- inputs ---------------------------------------------------------------------------------

def parse_duration(text: str | float | int, option: str = "--budget") -> float:
    """Seconds in ``"90s"``, ``"5m"``, ``"1.5m"``, ``"2h"`` or a number (see
    :func:`dse.measure.budget.parse_duration`); refusals are :class:`BenchError`."""
    return budget_duration(text, option, BenchError)


def cache_sizes_from_sysfs(cpu: int = 0) -> dict[str, int]:
    """``{"l2": bytes, "l3": bytes}`` of ``cpu`` from Linux sysfs (``l3`` absent when the
    machine has none); ``{}`` when sysfs is unreadable. Prefer the project's probe."""
    sizes: dict[str, int] = {}
    root = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
    try:
        entries = sorted(root.glob("index*"))
        for entry in entries:
            kind = (entry / "type").read_text().strip()
            if kind not in ("Unified", "Data"):
                continue
            level = int((entry / "level").read_text())
            text = (entry / "size").read_text().strip().upper()
            scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            size = int(text.rstrip("KMG")) * scale
            if level in (2, 3):
                sizes[f"l{level}"] = max(size, sizes.get(f"l{level}", 0))
    except (OSError, ValueError):
        return {}
    return sizes


def _caches(cache_sizes: dict[str, int] | None) -> dict[str, int]:
    sizes = cache_sizes_from_sysfs() if cache_sizes is None else dict(cache_sizes)
    if not sizes.get("l2"):
        raise BenchError("cache sizes: none given and /sys has no L2 size; pass "
                         "cache_sizes={'l2': bytes, 'l3': bytes} (from dse hw probe)")
    for key, value in sizes.items():
        if key not in ("l2", "l3") or not isinstance(value, int | np.integer) or value <= 0:
            raise BenchError(f"cache_sizes[{key!r}]={value!r}: give 'l2' and 'l3' as "
                             "positive byte counts")
    return {k: int(v) for k, v in sizes.items()}


def _last_level(caches: dict[str, int]) -> int:
    return caches.get("l3", caches["l2"])


def size_class(matrix_bytes: int | float, cache_sizes: dict[str, int]) -> str:
    """``small``: the CSR matrix fits in L2 (<= L2 bytes); ``medium``: fits in the last-level
    cache (<= L3, or L2 when there is no L3); ``large``: bigger than the last-level cache."""
    if matrix_bytes <= cache_sizes["l2"]:
        return "small"
    if matrix_bytes <= _last_level(cache_sizes):
        return "medium"
    return "large"


def _available_bytes() -> int:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return 2**31  # unknown: assume 2 GiB


def default_max_dim(cache_sizes: dict[str, int], available_bytes: int | None = None,
                    max_nnz_per_row: int = max(NNZ_PER_ROW)) -> int:
    """The largest dimension: a power of two whose matrix (at ``max_nnz_per_row``) and its
    copies fit in a quarter of available memory (``PEAK_BYTES_PER_NNZ`` a nonzero), capped at
    the first size 4x past the last-level cache (larger ones add time, not information) and
    at ``MAX_DIM_CAP``; never below ``MIN_DIM``."""
    memory = _available_bytes() if available_bytes is None else available_bytes
    by_memory = MEMORY_SHARE * memory / (PEAK_BYTES_PER_NNZ * max_nnz_per_row)
    row_bytes = 12 * max_nnz_per_row + 4
    n = MIN_DIM
    while n * row_bytes < 4 * _last_level(cache_sizes) and n < MAX_DIM_CAP:
        n *= 2
    while n > MIN_DIM and n > by_memory:
        n //= 2
    return n


# --- calibration and the cost model ---------------------------------------------------------

# phases ``_measure`` times once a matrix, and the per-call medians of its timed samples
_PHASES = ("build_s", "reference_s", "compile_s", "convert_s", "call_s", "bcsr_call_s")
_RATES = ("build_s", "reference_s", "convert_s", "call_s", "bcsr_call_s", "csr_sample_s",
          "bcsr_sample_s")


@dataclass(frozen=True)
class Calibration:
    """Seconds per true nonzero of each benchmark phase, timed at one or two sizes.

    ``sizes_nnz``: the calibration matrices' nonzeros (ascending); ``rates[kind][phase]``: a
    tuple of seconds per nonzero, one per size, for ``kind`` ``"1x1"`` (unblocked matrices)
    and ``"blocked"`` (4x4 matrices, standing for every r x c > 1); phases are ``build_s``
    (generation), ``reference_s`` (scipy product and input vector), ``convert_s`` (to BCSR),
    ``call_s`` and ``bcsr_call_s`` (the first, checked call of each kernel, which also sets
    the calls per sample) and ``csr_sample_s``/``bcsr_sample_s`` (a call inside the timed
    samples). Between sizes the rate is interpolated in log(nnz), outside it is held.
    ``overhead_s``: fixed seconds a matrix (Python bookkeeping);
    ``compile_base_s + compile_per_entry_s * r * c``: compiling one BCSR kernel;
    ``seconds``: the calibration's own wall time."""

    sizes_nnz: tuple[int, ...]
    rates: dict[str, dict[str, tuple[float, ...]]]
    overhead_s: float
    compile_base_s: float
    compile_per_entry_s: float
    seconds: float

    def rate(self, kind: str, phase: str, nnz):
        """Seconds per nonzero at ``nnz`` (a number or an array of them)."""
        logs = np.log(np.asarray(self.sizes_nnz, dtype=np.float64))
        values = np.asarray(self.rates[kind][phase], dtype=np.float64)
        return np.interp(np.log(np.maximum(nnz, 1)), logs, values)

    def compile_s(self, r: int, c: int) -> float:
        return self.compile_base_s + self.compile_per_entry_s * r * c


def _kind(spec: MatrixSpec) -> str:
    return "1x1" if spec.r == spec.c == 1 else "blocked"


def _timed_s(call_s: float, repeats: int, min_sample_s: float) -> tuple[float, int]:
    """Seconds the timed samples take, and calls per sample."""
    calls = max(1, math.ceil(min_sample_s / max(call_s, 1e-9)))
    return repeats * calls * call_s, calls


def estimate(space: Sequence[MatrixSpec], calibration: Calibration, *,
             repeats: int = REPEATS, min_sample_s: float = MIN_SAMPLE_S,
             compiled: Iterable[tuple[int, int]] = ()) -> pd.DataFrame:
    """Predicted seconds per (matrix, kernel), in the order the benchmark runs them.

    Columns: ``matrix`` (index into ``space``), ``kernel`` (``csr``/``bcsr``), ``block``,
    ``build_s`` (generation, scipy reference, fixed overhead; on the csr row),
    ``convert_s`` (to BCSR; bcsr row), ``compile_s`` (a kernel's first use; kernels in
    ``compiled`` cost nothing), ``check_s`` (the checked first call), ``timed_s`` (``repeats``
    samples of ``ceil(min_sample_s / first call)`` calls) and ``seconds`` (their sum)."""
    count = len(space)
    nnz = np.array([s.nnz for s in space], dtype=np.float64)
    blocked = np.array([_kind(s) == "blocked" for s in space], dtype=bool)

    def rate(phase: str) -> np.ndarray:
        return nnz * np.where(blocked, calibration.rate("blocked", phase, nnz),
                              calibration.rate("1x1", phase, nnz))

    def timed(first: np.ndarray, sample: np.ndarray) -> np.ndarray:
        calls = np.maximum(1, np.ceil(min_sample_s / np.maximum(first, 1e-9)))
        return repeats * calls * sample

    done = {tuple(b) for b in compiled}
    compile_s = np.zeros(count)
    for i, spec in enumerate(space):
        if (spec.r, spec.c) not in done:
            compile_s[i] = calibration.compile_s(spec.r, spec.c)
            done.add((spec.r, spec.c))
    csr_call, bcsr_call = rate("call_s"), rate("bcsr_call_s")
    csr = pd.DataFrame({
        "matrix": np.arange(count), "kernel": "csr", "block": "1x1",
        "build_s": rate("build_s") + rate("reference_s") + calibration.overhead_s,
        "convert_s": 0.0, "compile_s": 0.0, "check_s": csr_call,
        "timed_s": timed(csr_call, rate("csr_sample_s"))})
    bcsr = pd.DataFrame({
        "matrix": np.arange(count), "kernel": "bcsr", "block": [s.block for s in space],
        "build_s": 0.0, "convert_s": rate("convert_s"), "compile_s": compile_s,
        "check_s": bcsr_call, "timed_s": timed(bcsr_call, rate("bcsr_sample_s"))})
    frame = pd.concat([csr, bcsr]).sort_values(["matrix", "kernel"], ascending=[True, False],
                                               kind="stable").reset_index(drop=True)
    frame["seconds"] = frame[["build_s", "convert_s", "compile_s", "check_s",
                              "timed_s"]].sum(axis=1)
    return frame


def _cost_function(space: Sequence[MatrixSpec], calibration: Calibration, repeats: int,
                   min_sample_s: float, compiled: Iterable[tuple[int, int]]
                   ) -> Callable[[Sequence[MatrixSpec]], float]:
    """``estimate``'s total for any subset of ``space``, priced once: each matrix's own
    seconds plus one compile per block size not yet compiled."""
    costs = estimate(space, calibration, repeats=repeats, min_sample_s=min_sample_s,
                     compiled=[(s.r, s.c) for s in space])
    own = dict(zip(space, costs.groupby("matrix", sort=True)["seconds"].sum(), strict=True))
    done = {tuple(b) for b in compiled}

    def cost(specs: Sequence[MatrixSpec]) -> float:
        blocks = {(s.r, s.c) for s in specs} - done
        return float(sum(own[s] for s in specs)
                     + sum(calibration.compile_s(r, c) for r, c in blocks))
    return cost


@dataclass(frozen=True)
class Pruning:
    """What ``prune_to_budget`` kept, what it dropped (``(what, why)`` pairs, in the order
    dropped) and the predicted seconds of what it kept."""

    kept: list[MatrixSpec]
    dropped: list[tuple[str, str]]
    predicted_s: float
    budget_s: float


def _priority(values: Sequence[int]) -> list[int]:
    """``values`` in the order pruning keeps them: the middle one, both ends, then midpoints
    of the gaps, coarse to fine; keeping any prefix keeps an even spread."""
    values = sorted(values)
    order = [values[(len(values) - 1) // 2]]
    order += [v for v in (values[0], values[-1]) if v not in order]
    gaps = [(0, len(values) - 1)]
    while gaps:
        low, high = gaps.pop(0)
        if high - low < 2:
            continue
        mid = (low + high) // 2
        if values[mid] not in order:
            order.append(values[mid])
        gaps += [(low, mid), (mid, high)]
    return order + [v for v in values if v not in order]


def prune_to_budget(space: Sequence[MatrixSpec], budget_s: float,
                    cost: Callable[[Sequence[MatrixSpec]], float]) -> Pruning:
    """Thin ``space`` until ``cost(kept) <= budget_s``, the way BeBOP does.

    First fewer nonzeros-per-row values, one at a time, finest first (``_priority``: what
    stays is always an even spread, down to the middle value), then the largest dimensions,
    one at a time, down to the smallest. ``cost``
    prices a candidate list in seconds (``estimate``'s total, or any function in tests).
    Raises ``BenchError`` naming ``--budget`` when even the smallest space does not fit."""
    if not budget_s > 0:
        raise BenchError(f"--budget {budget_s}: give a positive duration such as 2m")
    if not space:
        raise BenchError("the benchmark space is empty; give at least one dimension, "
                         "nonzeros-per-row value and block size")
    keep_k = _priority({s.nnz_per_row for s in space})
    dims = sorted({s.n for s in space})
    dropped: list[tuple[str, str]] = []

    def subset() -> list[MatrixSpec]:
        wanted = set(keep_k)
        return [s for s in space if s.nnz_per_row in wanted and s.n <= dims[-1]]

    kept = list(space)
    price = cost(kept)
    while price > budget_s and len(keep_k) > 1:
        dropped.append((f"nnz_per_row={keep_k[-1]}", f"predicted {price:.1f} s > budget "
                        f"{budget_s:.1f} s: fewer nonzeros-per-row values first"))
        keep_k = keep_k[:-1]
        kept = subset()
        price = cost(kept)
    while price > budget_s and len(dims) > 1:
        dropped.append((f"n={dims[-1]}", f"predicted {price:.1f} s > budget {budget_s:.1f} "
                        "s: then the largest dimensions"))
        dims = dims[:-1]
        kept = subset()
        price = cost(kept)
    if price > budget_s:
        raise BenchError(f"--budget {budget_s:.0f}s: the smallest benchmark (n={dims[0]}, "
                         f"{len(kept)} matrices) needs about {price:.0f} s; give at least "
                         f"{math.ceil(price / PLAN_SHARE) + 1}s or fewer block sizes")
    return Pruning(kept, dropped, float(price), float(budget_s))


# --- one matrix -----------------------------------------------------------------------------

def _time_kernel(kernel, args, clock: Clock, repeats: int,
                 min_sample_s: float, first_call_s: float) -> tuple[float, float, int]:
    """Median and minimum seconds per call over ``repeats`` samples, and calls per sample."""
    _, calls = _timed_s(first_call_s, 1, min_sample_s)
    samples = []
    for _ in range(repeats):
        start = clock()
        for _ in range(calls):
            kernel(*args)
        samples.append((clock() - start) / calls)
    return float(np.median(samples)), float(min(samples)), calls


def _measure(spec: MatrixSpec, clock: Clock, repeats: int, min_sample_s: float,
             caches: dict[str, int]) -> tuple[list[dict], dict[str, float]]:
    """Both kernels on one matrix: rows for the result frame, and seconds per phase."""
    phases: dict[str, float] = {}
    start = clock()
    matrix = spec.build()
    phases["build_s"] = clock() - start
    start = clock()
    rng = np.random.default_rng(spec.seed)
    x = rng.random(matrix.shape[1]) + 0.5
    expected = matrix @ x
    phases["reference_s"] = clock() - start
    nnz = int(matrix.nnz)
    common = {"family": spec.family, "n": matrix.shape[0], "nnz": nnz,
              "nnz_per_row": spec.nnz_per_row, "r": spec.r, "c": spec.c,
              "bandwidth": spec.bandwidth, "seed": spec.seed,
              "matrix_bytes": spec.bytes, "size_class": size_class(spec.bytes, caches)}
    rows = []
    y = np.empty(matrix.shape[0])

    csr_args = (matrix.indptr, matrix.indices, matrix.data, x, y)
    start = clock()
    csr_spmv(*csr_args)
    phases["call_s"] = clock() - start
    checked = bool(np.allclose(y, expected, rtol=CHECK_RTOL, atol=0.0))
    median, fastest, calls = _time_kernel(csr_spmv, csr_args, clock, repeats, min_sample_s,
                                          phases["call_s"])
    phases["csr_sample_s"] = median
    rows.append({**common, "fill_ratio": 1.0, "kernel": "csr", "block": "1x1",
                 "format_bytes": spec.bytes, "seconds": median, "min_s": fastest,
                 "repeats": repeats, "calls_per_repeat": calls, "checked": checked})

    start = clock()
    kernel = bcsr_kernel(spec.r, spec.c)
    phases["compile_s"] = clock() - start
    start = clock()
    blocked = to_bcsr(matrix, spec.r, spec.c)
    bsr = blocked.bsr
    data = bsr.data.reshape(-1)
    phases["convert_s"] = clock() - start
    del matrix
    bcsr_args = (bsr.indptr, bsr.indices, data, x, y)
    start = clock()
    kernel(*bcsr_args)
    phases["bcsr_call_s"] = clock() - start
    checked = bool(np.allclose(y, expected, rtol=CHECK_RTOL, atol=0.0))
    median, fastest, calls = _time_kernel(kernel, bcsr_args, clock, repeats, min_sample_s,
                                          phases["bcsr_call_s"])
    phases["bcsr_sample_s"] = median
    format_bytes = (data.nbytes + bsr.indices.nbytes + bsr.indptr.nbytes)
    rows.append({**common, "fill_ratio": blocked.fill_ratio, "kernel": "bcsr",
                 "block": spec.block, "format_bytes": int(format_bytes), "seconds": median,
                 "min_s": fastest, "repeats": repeats, "calls_per_repeat": calls,
                 "checked": checked})
    return rows, phases


# --- plan and run ---------------------------------------------------------------------------

def calibrate(max_dim: int, cache_sizes: dict[str, int], *, clock: Clock = time.perf_counter,
              repeats: int = REPEATS, min_sample_s: float = MIN_SAMPLE_S,
              seed: int = 0, blocks: Iterable[int] = ()) -> Calibration:
    """Time the benchmark's own phases (``_measure``) on 1x1 and 4x4 blocked matrices at up
    to three sizes: ``2^12`` rows (or ``max_dim`` when smaller), ``2^15`` and the first
    power of two past twice the last-level cache, all capped at ``max_dim``. Each size runs
    three times (twice past a million nonzeros) and keeps each phase's fastest: another
    program's load inflates single timings, never deflates them. Compiles the 1x1, 2x2 and
    4x4 kernels and fits the compile cost, then compiles every ``r x c`` for r, c in
    ``blocks`` (so the estimate need not predict compile times, the noisiest phase);
    measures the fixed cost a matrix adds. About two seconds with a 32 MiB cache, plus a
    third of a second a kernel compiled."""
    start = clock()
    caches = _caches(cache_sizes)
    small = min(2**12, max_dim)
    large = small
    while large * 352 < 2 * _last_level(caches) and large < max_dim:
        large *= 2
    sizes = sorted({small, min(2**15, large), large})
    before = compile_seconds()
    _warm_csr()
    rates: dict[str, dict[str, list[float]]] = {"1x1": {}, "blocked": {}}
    nnz_sizes = []
    for n in sizes:
        for kind, block in (("1x1", 1), ("blocked", 4)):
            spec = MatrixSpec("blocked", n, 29, block, block, None, seed)
            runs = [_measure(spec, clock, repeats, min_sample_s, caches)[1]
                    for _ in range(3 if spec.nnz < 10**6 else 2)]
            for phase in _RATES:
                value = min(run[phase] for run in runs) / spec.nnz
                rates[kind].setdefault(phase, []).append(value)
        nnz_sizes.append(MatrixSpec("blocked", n, 29, 4, 4).nnz)
    overhead_s = _overhead(clock, caches, seed, repeats, min_sample_s, sizes[0])
    measured = {k: v for k, v in compile_seconds().items() if k not in before}
    base, per_entry = _fit_compile(measured or compile_seconds())
    blocks = sorted(set(blocks))
    for r in blocks:
        for c in blocks:
            bcsr_kernel(r, c)
    return Calibration(tuple(nnz_sizes),
                       {kind: {p: tuple(v) for p, v in phases.items()}
                        for kind, phases in rates.items()},
                       overhead_s, base, per_entry, clock() - start)


def _warm_csr() -> None:
    """Compile (or load from numba's cache) the CSR kernel for the benchmark's types, so the
    first timed call is not a compile."""
    indptr = np.array([0, 1], dtype=np.int32)
    indices = np.zeros(1, dtype=np.int32)
    csr_spmv(indptr, indices, np.ones(1), np.ones(1), np.empty(1))


def _overhead(clock: Clock, caches: dict[str, int], seed: int, repeats: int,
              min_sample_s: float, n: int) -> float:
    """Fixed seconds a matrix costs beyond its timed phases (bookkeeping, checks, frames):
    the median over three small whole-matrix runs."""
    spec = MatrixSpec("blocked", n, 29, 2, 2, None, seed + 1)
    bcsr_kernel(2, 2)
    extra = []
    for _ in range(3):
        start = clock()
        rows, phases = _measure(spec, clock, repeats, min_sample_s, caches)
        whole = clock() - start
        timed = sum(row["repeats"] * row["calls_per_repeat"] * row["seconds"] for row in rows)
        extra.append(whole - timed - sum(phases[p] for p in _PHASES))
    return max(0.0, float(np.median(extra)))


def _fit_compile(seconds: dict[tuple[int, int], float]) -> tuple[float, float]:
    """``base + per_entry * r * c`` through the measured compile times (least squares);
    a flat cost from one point, a typical 0.3 s without any."""
    if not seconds:
        return 0.3, 0.0
    entries = np.array([r * c for r, c in seconds], dtype=np.float64)
    values = np.array(list(seconds.values()), dtype=np.float64)
    if len(set(entries)) < 2:
        return float(values.mean()), 0.0
    slope, base = np.polyfit(entries, values, 1)
    return float(max(base, 0.0)), float(max(slope, 0.0))


@dataclass(frozen=True)
class SpmvPlan:
    """A calibrated, priced and pruned benchmark, ready to run within ``budget_s`` counted
    from ``started_at`` (the clock reading when planning began, calibration included).
    ``predicted_s``: calibration time plus the estimate of the kept space."""

    budget_s: float
    started_at: float
    space: list[MatrixSpec]
    pruning: Pruning
    calibration: Calibration
    costs: pd.DataFrame
    cache_sizes: dict[str, int]
    max_dim: int
    repeats: int
    min_sample_s: float

    @property
    def predicted_s(self) -> float:
        return self.calibration.seconds + self.pruning.predicted_s

    @property
    def matrices(self) -> list[MatrixSpec]:
        return self.pruning.kept


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise BenchError(f"{name} {value!r}: give an integer >= {low}")
    return int(value)


def plan_spmv_benchmark(budget_s: float | str, *, max_dim: int | None = None,
                        cache_sizes: dict[str, int] | None = None, seed: int = 0,
                        nnz_per_row: Iterable[int] = NNZ_PER_ROW,
                        blocks: Iterable[int] = BLOCK_SIZES,
                        bandwidths: Iterable[int] = DEFAULT_BANDWIDTHS,
                        repeats: int = REPEATS, min_sample_s: float = MIN_SAMPLE_S,
                        clock: Clock = time.perf_counter, reserve_s: float = 0.0) -> SpmvPlan:
    """Calibrate, price the BeBOP space and prune it to ``budget_s`` (seconds or a duration
    string) less ``reserve_s`` (what the caller keeps for after the run, such as writing the
    results; a refusal names the whole ``budget_s``); the budget counts from this call.
    ``max_dim`` defaults to ``default_max_dim``; ``cache_sizes`` (``{"l2": bytes, "l3":
    bytes}``) to sysfs."""
    given = parse_duration(budget_s)
    budget = given - reserve_s
    caches = _caches(cache_sizes)
    if max_dim is None:
        max_dim = default_max_dim(caches)
    max_dim = _check_int("--max-dim", max_dim, MIN_DIM)
    seed = _check_int("--seed", seed, 0)
    repeats = _check_int("repeats", repeats, 1)
    ks = sorted({_check_int("nnz_per_row", k, 1) for k in nnz_per_row})
    blocks = sorted({_check_int("block size", b, 1) for b in blocks})
    bandwidths = sorted({_check_int("--bandwidth", b, 0) for b in bandwidths})
    started = clock()
    try:
        space = spmv_space(max_dim, nnz_per_row=ks, blocks=blocks, bandwidths=bandwidths,
                           seed=seed)
    except ValueError as exc:
        raise BenchError(f"--max-dim {max_dim}: {exc}") from None
    for bw in bandwidths:  # the band must hold every block row's blocks; tightest at the
        for spec in space:  # smallest dimension (edge rows are the same at every size)
            if spec.bandwidth == bw and spec.n == space[0].n:
                need = min_bandwidth(spec.n, spec.nnz_per_row, spec.r, spec.c)
                if bw < need:
                    raise BenchError(f"--bandwidth {bw}: too narrow for {spec.nnz_per_row} "
                                     f"nonzeros a row in {spec.block} blocks; give at "
                                     f"least {need}")
    kernels = sum((r, c) not in compile_seconds() for r in blocks for c in blocks)
    if kernels * TYPICAL_COMPILE_S > budget * PLAN_SHARE:
        raise BenchError(f"--budget {given:g}s: compiling {kernels} BCSR kernels alone takes "
                         f"about {kernels * TYPICAL_COMPILE_S:.0f} s; give at least "
                         f"{math.ceil(2 * kernels * TYPICAL_COMPILE_S / PLAN_SHARE + reserve_s)}s"
                         " or fewer "
                         "block sizes")
    calibration = calibrate(max_dim, caches, clock=clock, repeats=repeats,
                            min_sample_s=min_sample_s, seed=seed, blocks=blocks)
    compiled = tuple(compile_seconds())
    cost = _cost_function(space, calibration, repeats, min_sample_s, compiled)
    left = budget * PLAN_SHARE - (clock() - started)
    if left <= 0:
        raise BenchError(f"--budget {given:.0f}s: calibration alone took "
                         f"{clock() - started:.1f} s; give a longer budget")
    pruning = prune_to_budget(space, left, cost)
    costs = estimate(pruning.kept, calibration, repeats=repeats, min_sample_s=min_sample_s,
                     compiled=compiled)
    return SpmvPlan(budget, started, space, pruning, calibration, costs, caches, max_dim,
                    repeats, min_sample_s)


RESULT_COLUMNS = {
    "family": "str", "n": "int64", "nnz": "int64", "nnz_per_row": "int64",
    "r": "int64", "c": "int64", "bandwidth": "Int64", "fill_ratio": "float64",
    "kernel": "str", "block": "str", "seconds": "float64", "min_s": "float64",
    "repeats": "int64", "calls_per_repeat": "int64", "mflops": "float64",
    "matrix_bytes": "int64", "format_bytes": "int64", "size_class": "str",
    "checked": "bool", "seed": "int64", "predicted_s": "float64", "actual_s": "float64",
}
"""The result frame's columns and dtypes (``str``: pandas' string dtype, object before
pandas 3): one row per matrix and kernel. ``seconds`` is the
median time of one product, ``min_s`` the fastest sample's; ``mflops`` = 2 * nnz / seconds /
1e6; ``matrix_bytes`` the CSR storage (what ``size_class`` uses), ``format_bytes`` what the
kernel read (BCSR storage for bcsr); ``predicted_s``/``actual_s`` the estimator's and the
real seconds the row's work took (generation and the reference product on the csr row)."""


@dataclass(frozen=True)
class SpmvSummary:
    """The benchmark's headline figures (MFLOP/s unless named otherwise)."""

    unblocked_max: float
    unblocked_median: float
    blocked_max: float
    blocked_median: float
    speedup_4x4: float  # median over 4x4-blocked matrices of bcsr 4x4 / csr MFLOP/s
    speedup_4x4_range: tuple[float, float]
    best_blocks: pd.DataFrame  # one row per matrix: its fastest kernel and block
    by_size_class: pd.DataFrame  # median MFLOP/s by size class and kernel
    predicted_s: float
    actual_s: float
    matrices: int
    skipped: int
    dropped: list[tuple[str, str]]
    all_checked: bool


@dataclass(frozen=True)
class SpmvResult:
    """``frame``: ``RESULT_COLUMNS``; ``skipped``: matrices the run skipped to keep its budget
    (``label, n, nnz_per_row, r, c, family, reason``); ``plan``: what ran;
    ``actual_s``: wall seconds from the start of planning to the end of the run."""

    frame: pd.DataFrame
    skipped: pd.DataFrame
    plan: SpmvPlan
    actual_s: float
    phases: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)

    def summary(self) -> SpmvSummary:
        return _summarize(self)


def run_spmv_plan(plan: SpmvPlan, *, progress: Progress | None = None,
                  clock: Clock = time.perf_counter) -> SpmvResult:
    """Run ``plan``'s matrices in order, each checked then timed, skipping any whose
    predicted time (scaled by the estimate's error so far, never below 1) would end past
    ``plan.started_at + plan.budget_s``."""
    deadline = plan.started_at + plan.budget_s
    costs = plan.costs.groupby("matrix", sort=True)["seconds"]
    per_matrix = costs.sum().to_numpy()
    per_kernel = plan.costs.set_index(["matrix", "kernel"])["seconds"]
    rows: list[dict] = []
    skipped: list[dict] = []
    phase_rows: list[dict] = []
    spent = predicted_so_far = 0.0
    total = len(plan.matrices)
    for i, spec in enumerate(plan.matrices):
        ratio = max(1.0, spent / predicted_so_far) if predicted_so_far > 0 else 1.0
        if clock() + per_matrix[i] * ratio > deadline:
            skipped.append({"label": spec.label, "family": spec.family, "n": spec.n,
                            "nnz_per_row": spec.nnz_per_row, "r": spec.r, "c": spec.c,
                            "reason": f"predicted {per_matrix[i] * ratio:.2f} s would pass "
                                      "the budget"})
        else:
            start = clock()
            new_rows, phases = _measure(spec, clock, plan.repeats, plan.min_sample_s,
                                        plan.cache_sizes)
            took = clock() - start
            spent += took
            predicted_so_far += per_matrix[i]
            bcsr_s = _bcsr_share(phases, new_rows[1])
            new_rows[0]["actual_s"] = took - bcsr_s
            new_rows[1]["actual_s"] = bcsr_s
            for row in new_rows:
                row["predicted_s"] = float(per_kernel[(i, row["kernel"])])
            rows.extend(new_rows)
            phase_rows.append({"matrix": i, **phases, "total_s": took,
                               "predicted_s": per_matrix[i]})
        if progress is not None:
            progress(i + 1, total)
    frame = _frame(rows)
    skipped_frame = pd.DataFrame(skipped, columns=["label", "family", "n", "nnz_per_row", "r",
                                                   "c", "reason"])
    return SpmvResult(frame, skipped_frame, plan, clock() - plan.started_at,
                      pd.DataFrame(phase_rows))


def _bcsr_share(phases: dict[str, float], row: dict) -> float:
    timed = row["repeats"] * row["calls_per_repeat"] * row["seconds"]
    return phases["compile_s"] + phases["convert_s"] + phases["bcsr_call_s"] + timed


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=[c for c in RESULT_COLUMNS if c != "mflops"])
    frame["mflops"] = 2.0 * frame["nnz"] / frame["seconds"] / 1e6
    frame = frame[list(RESULT_COLUMNS)]
    return frame.astype(RESULT_COLUMNS)


def run_spmv_benchmark(budget_s: float | str, max_dim: int | None = None,
                       cache_sizes: dict[str, int] | None = None, seed: int = 0,
                       progress: Progress | None = None, clock: Clock = time.perf_counter,
                       *, nnz_per_row: Iterable[int] = NNZ_PER_ROW,
                       blocks: Iterable[int] = BLOCK_SIZES,
                       bandwidths: Iterable[int] = DEFAULT_BANDWIDTHS) -> SpmvResult:
    """Plan (calibrate, estimate, prune) and run the benchmark within ``budget_s``."""
    plan = plan_spmv_benchmark(budget_s, max_dim=max_dim, cache_sizes=cache_sizes, seed=seed,
                               nnz_per_row=nnz_per_row, blocks=blocks, bandwidths=bandwidths,
                               clock=clock)
    return run_spmv_plan(plan, progress=progress, clock=clock)


# --- summary --------------------------------------------------------------------------------

_MATRIX_KEYS = ["family", "n", "nnz_per_row", "r", "c", "bandwidth", "seed"]


def _summarize(result: SpmvResult) -> SpmvSummary:
    frame = result.frame
    csr = frame[frame["kernel"] == "csr"]["mflops"]
    blocked = frame[(frame["kernel"] == "bcsr") & (frame["r"] * frame["c"] > 1)]["mflops"]

    def stat(series: pd.Series, how: str) -> float:
        return float(getattr(series, how)()) if len(series) else math.nan

    best = (frame.sort_values("mflops", ascending=False, kind="stable")
            .drop_duplicates(_MATRIX_KEYS)
            .sort_values(_MATRIX_KEYS, kind="stable")
            [[*_MATRIX_KEYS, "size_class", "kernel", "block", "mflops"]]
            .reset_index(drop=True))
    pair = frame[(frame["r"] == 4) & (frame["c"] == 4)].pivot_table(
        index=_MATRIX_KEYS, columns="kernel", values="mflops", dropna=False)
    if {"csr", "bcsr"} <= set(pair.columns) and len(pair):
        ratio = (pair["bcsr"] / pair["csr"]).dropna()
        speedup = float(ratio.median()) if len(ratio) else math.nan
        spread = (float(ratio.min()), float(ratio.max())) if len(ratio) else (math.nan,) * 2
    else:
        speedup, spread = math.nan, (math.nan, math.nan)
    by_class = (frame.assign(kind=np.where(frame["kernel"] == "csr", "unblocked",
                                           np.where(frame["r"] * frame["c"] > 1, "blocked",
                                                    "bcsr 1x1")))
                .groupby(["size_class", "kind"])["mflops"].agg(["median", "max", "count"])
                .reset_index())
    matrices = len(frame) // 2
    return SpmvSummary(stat(csr, "max"), stat(csr, "median"), stat(blocked, "max"),
                       stat(blocked, "median"), speedup, spread, best, by_class,
                       result.plan.predicted_s, result.actual_s, matrices,
                       len(result.skipped), list(result.plan.pruning.dropped),
                       bool(frame["checked"].all()) if len(frame) else True)


def format_summary(summary: SpmvSummary, machine: str = "this machine") -> str:
    """The summary as the lines ``dse bench spmv`` prints."""
    def mf(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:,.0f}"

    error = (summary.actual_s - summary.predicted_s) / summary.actual_s * 100 \
        if summary.actual_s > 0 else math.nan
    lines = [
        f"SpMV benchmark (BeBOP) on {machine}: {summary.matrices} matrices run, "
        f"{summary.skipped} skipped at the budget, {len(summary.dropped)} values pruned "
        "beforehand",
        f"  unblocked (CSR)        max {mf(summary.unblocked_max):>8} MFLOP/s   "
        f"median {mf(summary.unblocked_median):>8} MFLOP/s",
        f"  blocked (BCSR r*c > 1) max {mf(summary.blocked_max):>8} MFLOP/s   "
        f"median {mf(summary.blocked_median):>8} MFLOP/s",
    ]
    if not math.isnan(summary.speedup_4x4):
        low, high = summary.speedup_4x4_range
        lines.append(f"  4x4-blocked matrices: BCSR 4x4 is {summary.speedup_4x4:.2f}x CSR "
                     f"(median; {low:.2f}x to {high:.2f}x)")
    for _, row in summary.by_size_class.iterrows():
        lines.append(f"  {row['size_class']:<6} {row['kind']:<9} median {mf(row['median']):>8}"
                     f" MFLOP/s over {int(row['count'])} runs")
    lines.append(f"  predicted {summary.predicted_s:.1f} s, took {summary.actual_s:.1f} s "
                 f"({error:+.0f}% against the prediction)")
    if not summary.all_checked:
        lines.append("  WARNING: some kernel results differ from scipy's (checked=False rows)")
    return "\n".join(lines)
