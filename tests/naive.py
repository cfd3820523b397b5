"""Slow, obviously correct references for the evaluator kernels.

``naive_costs`` works from the trace, the hardware spec and the format's parameters with the
equations of DESIGN.md written out again, op by op, in plain Python: it shares no code with
``dse.roofline.pricing`` or ``dse.roofline.kernels``. ``numpy_design_totals`` is a vectorized numpy
version of the totals kernel over the same priced arrays, used as the benchmark's reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from formats import NM, Block, Dense, Unstructured

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp8": 1, "int8": 1}


@dataclass
class OpCost:
    name: str
    prunable: bool
    compute: float
    memory: float  # unfused: all features + weights + index
    memory_fused: float  # model inputs/outputs + weights + index
    flops: float
    weight_bytes: float
    unit: str  # "tensor", "sparse_tensor", "vector"
    fallback: str  # "", "shape", "hw:dense", "hw:csr"


def _index_bytes(fmt, m, k, nnz, index_width):
    if isinstance(fmt, NM):
        return nnz * math.ceil(math.log2(fmt.m)) / 8
    if isinstance(fmt, Block):
        b = fmt.block
        return index_width * (nnz / (b * b) + m / b + 1)
    if isinstance(fmt, Unstructured):
        return index_width * (nnz + m + 1)
    return 0.0


def _applies(fmt, m, k):
    if isinstance(fmt, NM):
        return k % fmt.m == 0
    if isinstance(fmt, Block):
        return m % fmt.block == 0 and k % fmt.block == 0
    return True


def _native(fmt, hw):
    if isinstance(fmt, NM):
        return hw.sparse_tensor is not None and (fmt.n, fmt.m) in hw.sparse_tensor.patterns
    if isinstance(fmt, Block):
        return hw.block_sparse.supported and fmt.block >= hw.block_sparse.min_block_size
    return True


def _read_share(fmt, m, density, op):
    """The share of X's rows a sparse kernel reads: the op's recorded share from real masks
    (block and unstructured, whose densities come from the same checkpoint), else the chance
    that a column of W keeps at least one of its slots: M rows (N:M keeps N/M of them, CSR the
    density) or M/b blocks."""
    if isinstance(fmt, Block | Unstructured) and not math.isnan(op.density) \
            and not math.isnan(op.input_read_share):
        return op.input_read_share
    if isinstance(fmt, NM):
        q, slots = fmt.n / fmt.m, m
    elif isinstance(fmt, Block):
        q, slots = density, m / fmt.block
    else:
        q, slots = density, m
    return 1.0 - (1.0 - q) ** slots


def naive_costs(trace, hw, fmt, batch, fallback="dense", dtype="fp16", vector_dtype="fp16",
                csr_dtype="fp32", index_width=4) -> list[OpCost]:
    """Per-op costs; where the hardware cannot run ``fmt``, the ops that need it run as
    ``fallback`` ("dense" on the tensor cores or "csr" on the vector cores)."""
    vb = DTYPE_BYTES[dtype]
    tensor = hw.tensor_flops_per_s[dtype]
    vector = hw.vector_flops_per_s[vector_dtype]
    csr_rate = hw.vector_flops_per_s[csr_dtype]
    sparse_rate = tensor * (hw.sparse_tensor.nonzero_rate if hw.sparse_tensor else 1.0)
    bw = hw.dram_bandwidth_bytes_per_s
    input_elems = math.prod(trace.input_shape)
    consumed = {p for op in trace.ops.itertuples() for p in op.producers}
    costs = []
    for op in trace.ops.itertuples():
        m, k, n, g = op.m, op.k, op.n * batch, op.groups
        model_in = input_elems * batch if "input" in op.producers else 0
        model_out = op.output_elems * batch if op.name not in consumed else 0
        t_vec = op.vector_flops * batch / vector

        def cost(flops, wbytes, unit, fallback, op=op, model_in=model_in, model_out=model_out,
                 t_vec=t_vec, read=1.0):
            # A sparse kernel reads only the share ``read`` of its input rows.
            feats = vb * (op.input_elems * read + op.output_elems) * batch
            feats_fused = vb * (model_in * read + model_out)
            if unit == "vector":
                compute = flops / csr_rate + t_vec
            else:
                rate = sparse_rate if unit == "sparse_tensor" else tensor
                compute = max(flops / rate, t_vec)
            return OpCost(op.name, op.prunable, compute, (wbytes + feats) / bw,
                          (wbytes + feats_fused) / bw, flops, wbytes, unit, fallback)

        dense = cost(2.0 * m * k * n * g, vb * op.weight_elems, "tensor", "")
        if not op.prunable or isinstance(fmt, Dense):
            costs.append(dense)
            continue
        if not _applies(fmt, m, k):
            dense.fallback = "shape"
            costs.append(dense)
            continue
        density = fmt.density
        if isinstance(fmt, Block | Unstructured) and not math.isnan(op.density):
            density = op.density  # a pruned checkpoint's per-layer density
        nnz = density * m * k
        flops = 2.0 * nnz * n * g
        bias = vb * (op.weight_elems - g * m * k)  # stays dense
        # Rows of X are the input's elements only when K x N is the input (linear, 1x1 conv).
        read = _read_share(fmt, m, density, op) if g * k * op.n == op.input_elems else 1.0
        if _native(fmt, hw):
            unit = {"nm": "sparse_tensor", "block": "tensor", "unstructured": "vector"}[fmt.family]
            wbytes = g * (vb * nnz + _index_bytes(fmt, m, k, nnz, index_width)) + bias
            costs.append(cost(flops, wbytes, unit, "", read=read))
            continue
        if fallback == "csr":
            csr_bytes = g * (vb * nnz + index_width * (nnz + m + 1)) + bias
            costs.append(cost(flops, csr_bytes, "vector", "hw:csr", read=read))
        else:
            costs.append(cost(2.0 * m * k * n * g, vb * op.weight_elems, "tensor", "hw:dense"))
    return costs


def naive_evaluate(trace, hw, fmt, batch, scope, fusion, **numerics):
    """(totals, fallback) of one design: the faster of the dense and CSR fallbacks under
    ``fusion`` where the hardware cannot run ``fmt``, dense on a tie."""
    dense_way = naive_totals(naive_costs(trace, hw, fmt, batch, "dense", **numerics), scope)
    csr_way = naive_totals(naive_costs(trace, hw, fmt, batch, "csr", **numerics), scope)
    if csr_way[fusion] < dense_way[fusion]:
        return csr_way, "csr"
    return dense_way, "dense"


def naive_totals(costs: list[OpCost], scope: str) -> dict[str, float]:
    chosen = [c for c in costs if scope == "all" or c.prunable]
    compute = sum(c.compute for c in chosen)
    memory_fused = sum(c.memory_fused for c in chosen)
    return {
        "unfused": sum(max(c.compute, c.memory) for c in chosen),
        "fused": sum(max(c.compute, c.memory_fused) for c in chosen),
        "fused_prefetched": max(compute, memory_fused),
        "compute": compute,
        "memory_unfused": sum(c.memory for c in chosen),
        "memory_fused": memory_fused,
        "weight_bytes": sum(c.weight_bytes for c in chosen),
        "flops": sum(c.flops for c in chosen),
    }


def numpy_design_totals(hw, native_ok, batches, flops, wbytes, unit, needs, csr_wbytes,
                        dense_flops, dense_wbytes, feat_unfused, feat_fused, input_unfused,
                        input_fused, input_read, vflops, ops):
    """Vectorized totals over (hardware, format, batch, op): latency unfused, fused, prefetched.

    The pricing arrays (``feat_*`` every input row read, ``input_*`` their input part,
    ``input_read`` the share of input rows the format's kernel reads); returns the latencies
    ``(D, 3)`` (unfused, fused, fused_prefetched).
    """
    flops, wbytes, unit = flops[:, ops], wbytes[:, ops], unit[:, ops]
    needs, csr_wbytes = needs[:, ops], csr_wbytes[:, ops]
    dense_flops, dense_wbytes = dense_flops[ops], dense_wbytes[ops]
    unread = 1.0 - input_read[:, ops]
    own_unfused = feat_unfused[ops] - input_unfused[ops] * unread  # (F, P)
    own_fused = feat_fused[ops] - input_fused[ops] * unread
    feat_unfused, feat_fused, vflops = feat_unfused[ops], feat_fused[ops], vflops[ops]
    # Axes: (H, F, B, P).
    inv_bw, inv_tc, inv_sp, inv_csr, inv_vec = (hw[:, c][:, None, None, None] for c in range(5))
    batch = batches[None, None, :, None]
    t_vec = vflops * batch * inv_vec

    def times(fl, wb, u, fu, ff):
        t_gemm = fl * batch * np.where(u == 1, inv_sp, np.where(u == 2, inv_csr, inv_tc))
        c = np.where(u == 2, t_gemm + t_vec, np.maximum(t_gemm, t_vec))
        return c, (wb + fu * batch) * inv_bw, (wb + ff * batch) * inv_bw

    own_features = own_unfused[None, :, None, :], own_fused[None, :, None, :]
    own = times(flops[None, :, None, :], wbytes[None, :, None, :], unit[None, :, None, :],
                *own_features)
    fallback = needs[None, :, None, :] & ~native_ok[:, :, None, None]
    dense = times(dense_flops, dense_wbytes, 0, feat_unfused, feat_fused)
    csr = times(flops[None, :, None, :], csr_wbytes[None, :, None, :], 2, *own_features)
    results = []
    for alternative in (dense, csr):
        c, m, f = (np.where(fallback, alt, mine) for alt, mine in zip(alternative, own,
                                                                          strict=True))
        results.append(np.stack([np.maximum(c, m).sum(axis=-1),
                                 np.maximum(c, f).sum(axis=-1),
                                 np.maximum(c.sum(axis=-1), f.sum(axis=-1))], axis=-1))
    # Per design and fusion model, the faster of the two fallbacks (dense on a tie).
    best = np.where(results[1] < results[0], results[1], results[0])
    return best.reshape(-1, 3)
