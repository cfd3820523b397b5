"""Numba kernels of the speed-of-light evaluator, behind the typed wrappers
``design_totals`` and ``per_op``; users call them through ``dse.evaluate`` (the benchmarks and
the simulator's planner call them directly). ``per_op`` prices small grids in numpy, the same
bits (nothing to compile on a first run); the totals come from the compiled sums, except inside
:func:`numpy_only` (a search of a small space), where every grid is priced in numpy and numba is
never imported.

Inputs are the arrays of :class:`dse.roofline.pricing.KernelArrays` (per alternative kernel, format
and op in scope: useful FLOPs split by unit, weight bytes) plus, per hardware, the reciprocal rates
packed in ``hw[h]`` (see ``HW_*``); a design point is (hardware, format, batch), flattened as ``d =
(h * F + f) * B + b``. Per op the kernel forms, without a branch:

* compute ``c = max(tensor-core time, vector-core time)``, where the tensor-core time is that of
  the dense or sparse tensor cores and the vector-core time adds CSR GEMM work and elementwise
  work (they share the cores);
* memory ``m`` (all features + weights + index) and ``f`` (model inputs/outputs + weights);
  features per alternative kernel, format and op, since a sparse kernel reads only the rows of
  X its nonzeros need.

Where the hardware cannot run the format's own kernel, the ops that would need it run either
all dense on the tensor cores or all as CSR on the vector cores; the totals kernel prices both
and the caller keeps the faster per fusion model. A choice per
design (not per op) keeps every fusion model's latency the minimum of monotone functions, so
more bandwidth or FLOP/s can never make a design slower, and keeps unfused >= fused >=
fused_prefetched.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator

import numpy as np

from .pricing import KERNEL_CSR, KERNEL_DENSE, KERNEL_OWN

__all__ = [
    "HW_COLUMNS", "HW_INV_BW", "HW_INV_CSR", "HW_INV_SPARSE", "HW_INV_TENSOR", "HW_INV_VECTOR",
    "NUMPY_MAX_OP_EVALS", "PARALLEL_MIN_OP_EVALS", "TOTAL_COLUMNS", "T_COMPUTE", "T_FLOPS",
    "T_FUSED", "T_FEATURES_FUSED", "T_FEATURES_UNFUSED", "T_MEMBOUND_FUSED", "T_MEMBOUND_UNFUSED",
    "T_MEMORY_FUSED", "T_MEMORY_UNFUSED", "T_UNFUSED",
    "T_WEIGHT_BYTES", "design_totals", "numpy_only", "on_first_load", "per_op",
]

# Columns of the per-hardware parameter array: reciprocals, so the hot loop multiplies.
HW_INV_BW, HW_INV_TENSOR, HW_INV_SPARSE, HW_INV_CSR, HW_INV_VECTOR = range(5)
HW_COLUMNS = 5

# Columns of the per-design totals (one set per alternative).
(T_UNFUSED, T_FUSED, T_COMPUTE, T_MEMORY_UNFUSED, T_MEMORY_FUSED, T_WEIGHT_BYTES, T_FLOPS,
 T_MEMBOUND_UNFUSED, T_MEMBOUND_FUSED, T_FEATURES_UNFUSED, T_FEATURES_FUSED) = range(11)
TOTAL_COLUMNS = 11


#: Below this many op-evaluations a call runs on one thread: waking the thread pool costs more.
PARALLEL_MIN_OP_EVALS = 200_000


# numba is imported when a compiled kernel first runs, not with this module: a process that
# prices only in numpy (a search of a small space: `numpy_only`) never imports it (~0.2 s)
# nor loads the cached kernels (~0.4 s: numba's typing registries, scipy.linalg among their
# imports; cProfile of a warm default search, 2-vCPU VM). Until then the kernels below are
# plain functions behind `_Deferred` stand-ins; `_load` wraps each in numba's dispatcher,
# callees first, and binds it under its own name, where the compiled callers look it up.
_KERNELS: list[tuple[str, Callable, dict]] = []
_COMPILED: dict[str, Callable] = {}
_LOADING = threading.Lock()
_FIRST_LOAD: list[Callable[[], None]] = []  # at most one: see on_first_load
prange = range  # numba.prange once loaded (the parallel kernels' loops)


def _jit(**options):
    """``numba.njit(**options)``, applied when a kernel is first used."""
    def defer(func: Callable) -> _Deferred:
        _KERNELS.append((func.__name__, func, options))
        return _Deferred(func.__name__)
    return defer


class _Deferred:
    """Stands for a compiled kernel until numba is loaded: calling it (or reading an attribute,
    e.g. ``signatures``) loads every kernel, then forwards to its dispatcher."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _dispatcher(self) -> Callable:
        if not _COMPILED:
            _load()
        return _COMPILED[self.name]

    def __call__(self, *args):
        return self._dispatcher()(*args)

    def __getattr__(self, attr: str):
        return getattr(self._dispatcher(), attr)


def _load() -> None:
    with _LOADING:
        if _COMPILED:
            return
        for hook in _FIRST_LOAD:
            hook()
        _FIRST_LOAD.clear()
        import numba

        module = globals()
        module["prange"] = numba.prange
        for name, func, options in _KERNELS:  # definition order: callees before callers
            _COMPILED[name] = module[name] = numba.njit(**options)(func)


def on_first_load(hook: Callable[[], None] | None) -> None:
    """Call ``hook`` once, just before numba is imported to load or compile the kernels (the
    command line says there that a first run compiles them), in place of the hook given
    before (None: no hook); never if they are loaded already."""
    _FIRST_LOAD.clear()
    if hook is not None and not _COMPILED:
        _FIRST_LOAD.append(hook)


_NUMPY_ONLY = contextvars.ContextVar("dse_roofline_numpy_only", default=False)


@contextlib.contextmanager
def numpy_only(enabled: bool = True) -> Iterator[None]:
    """While the block runs (in this thread), price every grid in numpy, whatever its size:
    numba is neither imported nor loaded. Per-op costs are the compiled loop's bit for bit; the
    totals sum each design's ops in numpy's order, where the compiled kernel reassociates its
    sums (and may contract a product and a sum into one rounding), so they agree to a few units
    in the last place (relative 1e-15 and below over a model's ops; every count exact but on a
    tie within that rounding). For work small in total, where loading numba's kernels costs
    more than pricing it in numpy: a search of a small space (``search.problem``)."""
    token = _NUMPY_ONLY.set(enabled)
    try:
        yield
    finally:
        _NUMPY_ONLY.reset(token)


# Reassociation lets LLVM vectorize the sums over ops (about 3x here); it changes only the
# order of additions, so totals differ from a left-to-right sum by rounding (~1e-16 relative).
# It takes one kernel's rows, not the kernel's index: an index given as a constant
# (KERNEL_OWN, ...) is typed as a literal, and each literal compiled a copy of this function
# (three on a first run, ~0.35 s each).
@_jit(cache=True, fastmath={"reassoc", "contract", "nsz"})
def _accumulate(out, batch, rates, ft, fs, fc, wb, fu, ff, vflops):
    s_tensor = batch * rates[HW_INV_TENSOR]
    s_sparse = batch * rates[HW_INV_SPARSE]
    s_csr = batch * rates[HW_INV_CSR]
    s_vector = batch * rates[HW_INV_VECTOR]
    inv_bw = rates[HW_INV_BW]
    unfused = 0.0
    fused = 0.0
    compute = 0.0
    mem_unfused = 0.0
    mem_fused = 0.0
    weights = 0.0
    useful_flops = 0.0
    membound_unfused = 0
    membound_fused = 0
    features_unfused = 0.0
    features_fused = 0.0
    for j in range(ft.shape[0]):
        t_tensor = ft[j] * s_tensor + fs[j] * s_sparse
        t_vector = fc[j] * s_csr + vflops[j] * s_vector
        c = max(t_tensor, t_vector)
        m = (wb[j] + fu[j] * batch) * inv_bw
        fm = (wb[j] + ff[j] * batch) * inv_bw
        unfused += max(c, m)
        fused += max(c, fm)
        compute += c
        mem_unfused += m
        mem_fused += fm
        weights += wb[j]
        useful_flops += ft[j] + fs[j] + fc[j]
        membound_unfused += m > c
        membound_fused += fm > c
        features_unfused += fu[j]
        features_fused += ff[j]
    out[T_UNFUSED] = unfused
    out[T_FUSED] = fused
    out[T_COMPUTE] = compute
    out[T_MEMORY_UNFUSED] = mem_unfused
    out[T_MEMORY_FUSED] = mem_fused
    out[T_WEIGHT_BYTES] = weights
    out[T_FLOPS] = useful_flops * batch
    out[T_MEMBOUND_UNFUSED] = membound_unfused
    out[T_MEMBOUND_FUSED] = membound_fused
    out[T_FEATURES_UNFUSED] = features_unfused * batch
    out[T_FEATURES_FUSED] = features_fused * batch


# Inlined into both totals kernels (numba IR, before typing): compiled as a function of its
# own it cost a first run ~0.3 s more. It does no floating-point arithmetic of its own, so
# the caller's flags (no fastmath) change nothing; the sums stay in `_accumulate`.
@_jit(inline="always")
def _one_design(out, d, hw, native_ok, fallback_ops, batches, tensor_flops, sparse_flops,
                csr_flops, weight_bytes, feat_unfused, feat_fused, vflops):
    n_fmt = tensor_flops.shape[1]
    n_batch = batches.shape[0]
    h = d // (n_fmt * n_batch)
    f = (d // n_batch) % n_fmt
    batch = batches[d % n_batch]
    own = native_ok[h, f] or fallback_ops[f] == 0
    # Two call sites, not three: each inlined call compiles its slices (~0.07 s a first run).
    k = KERNEL_OWN if own else KERNEL_DENSE
    _accumulate(out[d, 0], batch, hw[h], tensor_flops[k, f], sparse_flops[k, f],
                csr_flops[k, f], weight_bytes[k, f], feat_unfused[k, f], feat_fused[k, f],
                vflops)
    if own:
        # An element loop, not `out[d, 1, :] = out[d, 0, :]`: numba's slice assignment
        # compiles its shape-mismatch message (string formatting), ~1.9 s on a first run.
        for c in range(TOTAL_COLUMNS):
            out[d, 1, c] = out[d, 0, c]
    else:
        k = KERNEL_CSR
        _accumulate(out[d, 1], batch, hw[h], tensor_flops[k, f], sparse_flops[k, f],
                    csr_flops[k, f], weight_bytes[k, f], feat_unfused[k, f], feat_fused[k, f],
                    vflops)


# Two kernels, not one function compiled twice: numba's cache keys on the function, not on
# the `parallel` flag, so a shared function would load whichever variant was cached first.
@_jit(cache=True)
def _design_totals_serial(hw, native_ok, fallback_ops, batches, tensor_flops, sparse_flops,
                          csr_flops, weight_bytes, feat_unfused, feat_fused, vflops):
    n_designs = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0]
    out = np.empty((n_designs, 2, TOTAL_COLUMNS))
    for d in range(n_designs):
        _one_design(out, d, hw, native_ok, fallback_ops, batches, tensor_flops, sparse_flops,
                    csr_flops, weight_bytes, feat_unfused, feat_fused, vflops)
    return out


@_jit(cache=True, parallel=True)
def _design_totals_parallel(hw, native_ok, fallback_ops, batches, tensor_flops, sparse_flops,
                            csr_flops, weight_bytes, feat_unfused, feat_fused, vflops):
    n_designs = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0]
    out = np.empty((n_designs, 2, TOTAL_COLUMNS))
    for d in prange(n_designs):
        _one_design(out, d, hw, native_ok, fallback_ops, batches, tensor_flops, sparse_flops,
                    csr_flops, weight_bytes, feat_unfused, feat_fused, vflops)
    return out


def design_totals(hw, native_ok, fallback_ops, batches, tensor_flops, sparse_flops, csr_flops,
                  weight_bytes, feat_unfused, feat_fused, vflops):
    """Per-design totals over the ops in scope: ``(D, 2, TOTAL_COLUMNS)``.

    ``[:, 0]`` is the format's own kernel, or dense where the hardware cannot run it;
    ``[:, 1]`` is the same with CSR instead of dense (a copy of ``[:, 0]`` where nothing falls
    back). ``fallback_ops[f]`` counts the ops in scope that need format f's own kernel.
    Inside :func:`numpy_only`, in numpy (:func:`_design_totals_numpy`).
    """
    if _NUMPY_ONLY.get():
        return _design_totals_numpy(hw, native_ok, fallback_ops, batches, tensor_flops,
                                    sparse_flops, csr_flops, weight_bytes, feat_unfused,
                                    feat_fused, vflops)
    work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]
    kernel = _design_totals_parallel if work >= PARALLEL_MIN_OP_EVALS else _design_totals_serial
    return kernel(hw, native_ok, fallback_ops, batches, tensor_flops, sparse_flops, csr_flops,
                  weight_bytes, feat_unfused, feat_fused, vflops)


def _design_totals_numpy(hw, native_ok, fallback_ops, batches, tensor_flops, sparse_flops,
                         csr_flops, weight_bytes, feat_unfused, feat_fused, vflops):
    """:func:`_design_totals_serial` in numpy: each op's times are the same IEEE operations
    (``max(a, b)`` as numba's ``b if b > a else a``), and each design's sums over its ops are
    numpy's (pairwise) where the kernel's are reassociated by LLVM: equal to rounding."""
    n_fmt, n_batch = tensor_flops.shape[1], batches.shape[0]
    d = np.arange(hw.shape[0] * n_fmt * n_batch)
    h, f = d // (n_fmt * n_batch), (d // n_batch) % n_fmt
    batch, rates = batches[d % n_batch], hw[h]
    own = native_ok[h, f] | (fallback_ops[f] == 0)
    arrays = (tensor_flops, sparse_flops, csr_flops, weight_bytes, feat_unfused, feat_fused,
              vflops)
    out = np.empty((len(d), 2, TOTAL_COLUMNS))
    out[:, 0] = _sums_numpy(np.where(own, KERNEL_OWN, KERNEL_DENSE), f, batch, rates, *arrays)
    out[:, 1] = out[:, 0]  # where nothing falls back, a copy (as the kernel's element loop)
    back = np.flatnonzero(~own)
    if len(back):
        out[back, 1] = _sums_numpy(np.full(len(back), KERNEL_CSR), f[back], batch[back],
                                   rates[back], *arrays)
    return out


def _op_costs_numpy(k, f, batch, rates, tensor_flops, sparse_flops, csr_flops, weight_bytes,
                    feat_unfused, feat_fused, vflops):
    """Per design (kernel ``k``, format ``f``, ``batch``, the hardware's ``rates``) and op,
    what :func:`_one_design_per_op` computes, as the same IEEE operations in the same order
    (``max(a, b)`` as numba's ``b if b > a else a``): compute, unfused and fused memory time,
    FLOPs per sample, weight bytes and the unfused and fused feature bytes per sample, each
    ``(len(k), ops)``."""
    b = batch[:, None]
    s_tensor = b * rates[:, HW_INV_TENSOR, None]
    s_sparse = b * rates[:, HW_INV_SPARSE, None]
    s_csr = b * rates[:, HW_INV_CSR, None]
    s_vector = b * rates[:, HW_INV_VECTOR, None]
    inv_bw = rates[:, HW_INV_BW, None]
    ft, fs, fc = tensor_flops[k, f], sparse_flops[k, f], csr_flops[k, f]
    wb, fu, ff = weight_bytes[k, f], feat_unfused[k, f], feat_fused[k, f]
    with np.errstate(all="ignore"):  # IEEE results, silent, as the compiled loop gives them
        tensor = ft * s_tensor + fs * s_sparse
        vector = fc * s_csr + vflops * s_vector
        compute = np.where(vector > tensor, vector, tensor)
        memory = (wb + fu * b) * inv_bw
        memory_fused = (wb + ff * b) * inv_bw
        flops = ft + fs + fc
    return compute, memory, memory_fused, flops, wb, fu, ff


def _sums_numpy(k, f, batch, rates, *arrays):
    """:func:`_accumulate` of every design (kernel ``k``, format ``f``, ``batch``, the
    hardware's ``rates``) at once: ``(len(k), TOTAL_COLUMNS)``."""
    c, m, fm, flops, wb, fu, ff = _op_costs_numpy(k, f, batch, rates, *arrays)
    out = np.empty((len(k), TOTAL_COLUMNS))
    with np.errstate(all="ignore"):  # IEEE results, silent, as the compiled loop gives them
        mem_bound, fused_mem_bound = m > c, fm > c
        out[:, T_UNFUSED] = np.where(mem_bound, m, c).sum(axis=1)
        out[:, T_FUSED] = np.where(fused_mem_bound, fm, c).sum(axis=1)
        out[:, T_COMPUTE] = c.sum(axis=1)
        out[:, T_MEMORY_UNFUSED] = m.sum(axis=1)
        out[:, T_MEMORY_FUSED] = fm.sum(axis=1)
        out[:, T_WEIGHT_BYTES] = wb.sum(axis=1)
        out[:, T_FLOPS] = flops.sum(axis=1) * batch
        out[:, T_MEMBOUND_UNFUSED] = mem_bound.sum(axis=1)
        out[:, T_MEMBOUND_FUSED] = fused_mem_bound.sum(axis=1)
        out[:, T_FEATURES_UNFUSED] = fu.sum(axis=1) * batch
        out[:, T_FEATURES_FUSED] = ff.sum(axis=1) * batch
    return out


# Inlined, as `_one_design` (~0.15 s less to compile for the serial kernel, ~0.3 s for the
# parallel one); the same flags as its callers (no fastmath), so the same arithmetic.
@_jit(inline="always")
def _one_design_per_op(d, hw, kernels, batches, tensor_flops, sparse_flops, csr_flops,
                       weight_bytes, feat_unfused, feat_fused, vflops, compute, memory,
                       memory_fused, op_flops, op_wbytes):
    n_fmt = tensor_flops.shape[1]
    n_batch = batches.shape[0]
    h = d // (n_fmt * n_batch)
    f = (d // n_batch) % n_fmt
    batch = batches[d % n_batch]
    k = kernels[d]
    s_tensor = batch * hw[h, HW_INV_TENSOR]
    s_sparse = batch * hw[h, HW_INV_SPARSE]
    s_csr = batch * hw[h, HW_INV_CSR]
    s_vector = batch * hw[h, HW_INV_VECTOR]
    inv_bw = hw[h, HW_INV_BW]
    for j in range(tensor_flops.shape[2]):
        ft, fs, fc = tensor_flops[k, f, j], sparse_flops[k, f, j], csr_flops[k, f, j]
        wb = weight_bytes[k, f, j]
        compute[d, j] = max(ft * s_tensor + fs * s_sparse, fc * s_csr + vflops[j] * s_vector)
        memory[d, j] = (wb + feat_unfused[k, f, j] * batch) * inv_bw
        memory_fused[d, j] = (wb + feat_fused[k, f, j] * batch) * inv_bw
        op_flops[d, j] = (ft + fs + fc) * batch
        op_wbytes[d, j] = wb


@_jit(cache=True)
def _per_op_serial(hw, kernels, batches, tensor_flops, sparse_flops, csr_flops, weight_bytes,
                   feat_unfused, feat_fused, vflops):
    shape = (hw.shape[0] * tensor_flops.shape[1] * batches.shape[0], tensor_flops.shape[2])
    compute, memory, memory_fused = np.empty(shape), np.empty(shape), np.empty(shape)
    op_flops, op_wbytes = np.empty(shape), np.empty(shape)
    for d in range(shape[0]):
        _one_design_per_op(d, hw, kernels, batches, tensor_flops, sparse_flops, csr_flops,
                           weight_bytes, feat_unfused, feat_fused, vflops, compute, memory,
                           memory_fused, op_flops, op_wbytes)
    return compute, memory, memory_fused, op_flops, op_wbytes


@_jit(cache=True, parallel=True)
def _per_op_parallel(hw, kernels, batches, tensor_flops, sparse_flops, csr_flops, weight_bytes,
                     feat_unfused, feat_fused, vflops):
    shape = (hw.shape[0] * tensor_flops.shape[1] * batches.shape[0], tensor_flops.shape[2])
    compute, memory, memory_fused = np.empty(shape), np.empty(shape), np.empty(shape)
    op_flops, op_wbytes = np.empty(shape), np.empty(shape)
    for d in prange(shape[0]):
        _one_design_per_op(d, hw, kernels, batches, tensor_flops, sparse_flops, csr_flops,
                           weight_bytes, feat_unfused, feat_fused, vflops, compute, memory,
                           memory_fused, op_flops, op_wbytes)
    return compute, memory, memory_fused, op_flops, op_wbytes


def _per_op_numpy(hw, kernels, batches, tensor_flops, sparse_flops, csr_flops, weight_bytes,
                  feat_unfused, feat_fused, vflops):
    """:func:`_per_op_serial` in numpy, bit for bit: every output element is the same IEEE
    operations in the same order (no sums over ops, and the kernels compile without fastmath,
    so nothing is contracted into an FMA); ``max(a, b)`` is numba's (Python's)
    ``b if b > a else a``. Needs no compilation: a small grid's first call is not a compile."""
    n_fmt, n_batch = tensor_flops.shape[1], batches.shape[0]
    d = np.arange(hw.shape[0] * n_fmt * n_batch)
    h, f = d // (n_fmt * n_batch), (d // n_batch) % n_fmt
    batch = batches[d % n_batch]
    compute, memory, memory_fused, flops, wb, _, _ = _op_costs_numpy(
        kernels, f, batch, hw[h], tensor_flops, sparse_flops, csr_flops, weight_bytes,
        feat_unfused, feat_fused, vflops)
    with np.errstate(all="ignore"):
        op_flops = flops * batch[:, None]
    return compute, memory, memory_fused, op_flops, wb


#: Below this many op-evaluations :func:`per_op` runs in numpy: as fast as the compiled loop
#: at these sizes, and nothing to compile (a command's first run on a fresh cache).
NUMPY_MAX_OP_EVALS = 20_000


def per_op(hw, kernels, batches, tensor_flops, sparse_flops, csr_flops, weight_bytes,
           feat_unfused, feat_fused, vflops):
    """Per-design, per-op costs, arrays ``(D, P)``, design d running ``kernels[d]``
    (``KERNEL_*``): compute time, unfused and fused memory time, useful FLOPs, weight bytes.
    Small grids (below ``NUMPY_MAX_OP_EVALS``), and every grid inside :func:`numpy_only`, in
    numpy, the same bits as the kernels."""
    work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]
    if work < NUMPY_MAX_OP_EVALS or _NUMPY_ONLY.get():
        return _per_op_numpy(hw, kernels, batches, tensor_flops, sparse_flops, csr_flops,
                             weight_bytes, feat_unfused, feat_fused, vflops)
    kernel = _per_op_parallel if work >= PARALLEL_MIN_OP_EVALS else _per_op_serial
    return kernel(hw, kernels, batches, tensor_flops, sparse_flops, csr_flops, weight_bytes,
                  feat_unfused, feat_fused, vflops)
