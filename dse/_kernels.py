"""Numba kernels of the speed-of-light evaluator. Private: call them through ``dse.evaluate``.

Inputs are the flat arrays of :mod:`dse.pricing` plus, per hardware, the rates packed in
``hw[h]`` (see ``HW_*``); a design point is (hardware, format, batch), flattened as
``d = (h * F + f) * B + b``. Per op ``i`` the kernel forms

* compute ``c_i = max(tensor time, vector time)``; on the vector unit the GEMM and the
  elementwise work share the cores, so they add;
* memory ``m_i`` (all features + weights + index) and ``f_i`` (model inputs/outputs + weights).

Where the hardware cannot run the format's own kernel, the ops that would need it run either
all dense on the tensor cores (alternative 0) or all as CSR on the vector cores (alternative 1);
the totals kernel prices both and the caller keeps the faster per fusion model. A choice per
design (not per op) keeps every fusion model's latency the minimum of monotone functions, so
more bandwidth or FLOP/s can never make a design slower, and keeps unfused >= fused >=
fused_prefetched.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# Columns of the per-hardware parameter array: reciprocals, so the hot loop multiplies.
HW_INV_BW, HW_INV_TENSOR, HW_INV_SPARSE, HW_INV_CSR, HW_INV_VECTOR = range(5)
HW_COLUMNS = 5

# Columns of the per-design totals (one set per alternative).
(T_UNFUSED, T_FUSED, T_COMPUTE, T_MEMORY_UNFUSED, T_MEMORY_FUSED, T_WEIGHT_BYTES, T_FLOPS,
 T_MEMBOUND_UNFUSED, T_MEMBOUND_FUSED) = range(9)
TOTAL_COLUMNS = 9

UNIT_TENSOR, UNIT_SPARSE_TENSOR, UNIT_VECTOR = 0, 1, 2
#: Kernel an op runs: the format's own, dense instead, or CSR instead.
KERNEL_OWN, KERNEL_DENSE, KERNEL_CSR = 0, 1, 2


@njit(cache=True)
def _compute_time(flops, unit, vector_flops, s_tensor, s_sparse, s_csr, s_vector):
    t_vector = vector_flops * s_vector
    if unit == UNIT_VECTOR:
        return flops * s_csr + t_vector
    t_gemm = flops * (s_sparse if unit == UNIT_SPARSE_TENSOR else s_tensor)
    return t_gemm if t_gemm > t_vector else t_vector


@njit(cache=True)
def _kernel_of(i, f, kernel, flops, wbytes, unit, needs, csr_wbytes, dense_flops,
               dense_wbytes):
    """(useful FLOPs per sample, weight bytes, unit) of op i under format f and ``kernel``."""
    if kernel == KERNEL_OWN or not needs[f, i]:
        return flops[f, i], wbytes[f, i], unit[f, i]
    if kernel == KERNEL_DENSE:
        return dense_flops[i], dense_wbytes[i], UNIT_TENSOR
    return flops[f, i], csr_wbytes[f, i], UNIT_VECTOR


@njit(cache=True)
def _accumulate(out, h, f, batch, kernel, hw, flops, wbytes, unit, needs, csr_wbytes,
                dense_flops, dense_wbytes, feat_unfused, feat_fused, vflops, ops):
    s_tensor = batch * hw[h, HW_INV_TENSOR]
    s_sparse = batch * hw[h, HW_INV_SPARSE]
    s_csr = batch * hw[h, HW_INV_CSR]
    s_vector = batch * hw[h, HW_INV_VECTOR]
    inv_bw = hw[h, HW_INV_BW]
    unfused = 0.0
    fused = 0.0
    compute = 0.0
    mem_unfused = 0.0
    mem_fused = 0.0
    weight_bytes = 0.0
    useful_flops = 0.0
    membound_unfused = 0.0
    membound_fused = 0.0
    for j in range(ops.shape[0]):
        i = ops[j]
        fl, wb, u = _kernel_of(i, f, kernel, flops, wbytes, unit, needs, csr_wbytes,
                               dense_flops, dense_wbytes)
        c = _compute_time(fl, u, vflops[i], s_tensor, s_sparse, s_csr, s_vector)
        m = (wb + feat_unfused[i] * batch) * inv_bw
        fm = (wb + feat_fused[i] * batch) * inv_bw
        unfused += c if c > m else m
        fused += c if c > fm else fm
        compute += c
        mem_unfused += m
        mem_fused += fm
        weight_bytes += wb
        useful_flops += fl
        if m > c:
            membound_unfused += 1.0
        if fm > c:
            membound_fused += 1.0
    out[T_UNFUSED] = unfused
    out[T_FUSED] = fused
    out[T_COMPUTE] = compute
    out[T_MEMORY_UNFUSED] = mem_unfused
    out[T_MEMORY_FUSED] = mem_fused
    out[T_WEIGHT_BYTES] = weight_bytes
    out[T_FLOPS] = useful_flops * batch
    out[T_MEMBOUND_UNFUSED] = membound_unfused
    out[T_MEMBOUND_FUSED] = membound_fused


@njit(cache=True, parallel=True)
def design_totals(hw, native_ok, fallback_ops, batches, flops, wbytes, unit, needs, csr_wbytes,
                  dense_flops, dense_wbytes, feat_unfused, feat_fused, vflops, ops):
    """Per-design totals over the ops listed in ``ops``: ``(D, 2, TOTAL_COLUMNS)``.

    ``[:, 0]`` is the format's own kernel, or dense where the hardware cannot run it;
    ``[:, 1]`` is the same with CSR instead of dense (a copy of ``[:, 0]`` where nothing falls
    back). ``fallback_ops[f]`` counts the ops in ``ops`` that need format f's own kernel.
    """
    n_hw = hw.shape[0]
    n_fmt = flops.shape[0]
    n_batch = batches.shape[0]
    n_designs = n_hw * n_fmt * n_batch
    out = np.empty((n_designs, 2, TOTAL_COLUMNS))
    for d in prange(n_designs):
        h = d // (n_fmt * n_batch)
        f = (d // n_batch) % n_fmt
        batch = batches[d % n_batch]
        if native_ok[h, f] or fallback_ops[f] == 0:
            _accumulate(out[d, 0], h, f, batch, KERNEL_OWN, hw, flops, wbytes, unit, needs,
                        csr_wbytes, dense_flops, dense_wbytes, feat_unfused, feat_fused,
                        vflops, ops)
            out[d, 1, :] = out[d, 0, :]
        else:
            _accumulate(out[d, 0], h, f, batch, KERNEL_DENSE, hw, flops, wbytes, unit, needs,
                        csr_wbytes, dense_flops, dense_wbytes, feat_unfused, feat_fused,
                        vflops, ops)
            _accumulate(out[d, 1], h, f, batch, KERNEL_CSR, hw, flops, wbytes, unit, needs,
                        csr_wbytes, dense_flops, dense_wbytes, feat_unfused, feat_fused,
                        vflops, ops)
    return out


@njit(cache=True, parallel=True)
def per_op(hw, kernels, batches, flops, wbytes, unit, needs, csr_wbytes, dense_flops,
           dense_wbytes, feat_unfused, feat_fused, vflops, ops):
    """Per-design, per-op costs, arrays of shape ``(D, len(ops))``, with ``kernels[d]`` the
    kernel (``KERNEL_*``) design d runs where its format needs hardware support.

    Returns compute time, unfused memory time, fused memory time, useful FLOPs, weight bytes
    and unit code.
    """
    n_hw = hw.shape[0]
    n_fmt = flops.shape[0]
    n_batch = batches.shape[0]
    n_designs = n_hw * n_fmt * n_batch
    n_ops = ops.shape[0]
    compute = np.zeros((n_designs, n_ops))
    memory = np.zeros((n_designs, n_ops))
    memory_fused = np.zeros((n_designs, n_ops))
    op_flops = np.zeros((n_designs, n_ops))
    op_wbytes = np.zeros((n_designs, n_ops))
    op_unit = np.zeros((n_designs, n_ops), dtype=np.int64)
    for d in prange(n_designs):
        h = d // (n_fmt * n_batch)
        f = (d // n_batch) % n_fmt
        batch = batches[d % n_batch]
        s_tensor = batch * hw[h, HW_INV_TENSOR]
        s_sparse = batch * hw[h, HW_INV_SPARSE]
        s_csr = batch * hw[h, HW_INV_CSR]
        s_vector = batch * hw[h, HW_INV_VECTOR]
        inv_bw = hw[h, HW_INV_BW]
        for j in range(n_ops):
            i = ops[j]
            fl, wb, u = _kernel_of(i, f, kernels[d], flops, wbytes, unit, needs, csr_wbytes,
                                   dense_flops, dense_wbytes)
            compute[d, j] = _compute_time(fl, u, vflops[i], s_tensor, s_sparse, s_csr, s_vector)
            memory[d, j] = (wb + feat_unfused[i] * batch) * inv_bw
            memory_fused[d, j] = (wb + feat_fused[i] * batch) * inv_bw
            op_flops[d, j] = fl * batch
            op_wbytes[d, j] = wb
            op_unit[d, j] = u
    return compute, memory, memory_fused, op_flops, op_wbytes, op_unit
