"""Hardware- and batch-independent prices of every (format, op) pair, as flat arrays.

The hot kernel then only multiplies by the batch and divides by the hardware's rates. For each
format and op this table holds the useful FLOPs, the weight bytes (values + index) and the unit
of the format's own kernel, plus the two kernels an op can fall back to when the hardware cannot
run the format: dense on the tensor cores and CSR on the vector cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from formats import Dense, Format, Unit, Unstructured
from workloads import MODEL_INPUT, Trace
from workloads.llm import touched_share

from .fusion_rules import RuleTable
from .numerics import Numerics

__all__ = ["KERNEL_CSR", "KERNEL_DENSE", "KERNEL_OWN", "WEIGHT_GEMM_KINDS", "KernelArrays",
           "Pricing", "RuleEdges", "cache_read_elems", "feature_bytes_rules", "format_features",
           "has_gemm_weights", "kernel_arrays", "kernel_features", "price", "read_all",
           "rule_edges", "scope_ops", "spilled_share", "stack_formats", "weight_bytes_dense",
           "weight_read_share", "weight_sets"]


@dataclass(frozen=True, eq=False)
class Pricing:
    """Per-(format, op) and per-op arrays; shape ``(F, P)`` or ``(P,)``; all per sample."""

    formats: tuple[Format, ...]
    numerics: Numerics
    # (F,): the share of prunable weights that are zero, shape fallbacks included; and whether
    # the trace's per-layer densities replaced the format's own sparsity.
    weight_sparsity: np.ndarray
    layer_density: np.ndarray
    # (F, P): the kernel the format chooses when the hardware runs it.
    flops: np.ndarray  # useful FLOPs per sample
    weight_bytes: np.ndarray  # values + index, not batch-scaled
    unit: np.ndarray  # Unit code (int64)
    needs_support: np.ndarray  # op runs the format's own kernel, which hardware may lack
    shape_fallback: np.ndarray  # prunable op that cannot take the format: stays dense
    csr_weight_bytes: np.ndarray  # if the hardware cannot run it: CSR of the same nonzeros
    # The share of the op's input rows (rows of X) the format's kernel reads: below 1 where
    # whole columns of W are empty, so those rows are never loaded. 1 where the op stays dense.
    # The CSR fallback holds the same nonzeros, so it reads the same rows.
    input_read: np.ndarray
    # (P,): format-independent.
    dense_flops: np.ndarray
    dense_weight_bytes: np.ndarray
    feature_bytes_unfused: np.ndarray  # all inputs and outputs, per sample
    feature_bytes_fused: np.ndarray  # model inputs read and model outputs written, per sample
    input_bytes_unfused: np.ndarray  # the input part of feature_bytes_unfused
    input_bytes_fused: np.ndarray  # the input part of feature_bytes_fused (model inputs)
    vector_flops: np.ndarray
    prunable: np.ndarray


def _as_float(ops, column: str) -> np.ndarray:
    return ops[column].to_numpy(dtype=np.float64)


@lru_cache(maxsize=64)
def price(trace: Trace, formats: tuple[Format, ...], numerics: Numerics) -> Pricing:
    """Price every op of ``trace`` under each format (cached per trace, formats and numerics)."""
    ops = trace.ops
    m, k, n, g = (_as_float(ops, c) for c in ("m", "k", "n", "groups"))
    prunable = ops["prunable"].to_numpy(dtype=bool)
    vb = float(numerics.value_bytes)
    wb = float(numerics.weight_value_bytes)
    iw = float(numerics.index_width_bytes)

    dense_flops = 2.0 * m * k * n * g
    dense_weight_bytes = weight_bytes_dense(trace, numerics)
    # The GEMM weights stored: groups x sets (an MoE's experts) matrices of M x K.
    gw = g * weight_sets(trace)
    # Scales of quantised weights: over the dense K, the same in every format.
    scales = np.where(has_gemm_weights(ops), gw * numerics.scale_bytes(m, k), 0.0)
    # Parameters beyond a prunable op's GEMM weights (its bias) stay dense in every format.
    bias_bytes = np.where(prunable, vb * (_as_float(ops, "weight_elems") - gw * m * k), 0.0)
    shape = (len(formats), len(ops))
    flops = np.empty(shape)
    weight_bytes = np.empty(shape)
    unit = np.empty(shape, dtype=np.int64)
    needs_support = np.zeros(shape, dtype=bool)
    shape_fallback = np.zeros(shape, dtype=bool)
    csr_weight_bytes = np.empty(shape)
    layer_density = ops["density"].to_numpy(dtype=np.float64)
    has_layer_density = ~np.isnan(layer_density)
    layer_read = ops["input_read_share"].to_numpy(dtype=np.float64)
    input_read = np.ones(shape)
    # An unread row of X saves input traffic only where X's rows are the input's own elements
    # (linear layers, 1x1 convolutions: K x N equals the input). In a k x k convolution a row
    # of X is one tap of one channel, and the channel is still read for its other taps.
    rows_are_inputs = g * k * n == _as_float(ops, "input_elems")
    weight_sparsity = np.empty(len(formats))
    for f, fmt in enumerate(formats):
        takes = prunable & np.asarray(fmt.applies_to(m, k), dtype=bool)
        if isinstance(fmt, Dense):
            takes[:] = False
        # A pruned checkpoint's per-layer densities replace block and unstructured sparsity.
        density = np.full(len(ops), fmt.density)
        if fmt.takes_layer_density:
            density = np.where(has_layer_density, layer_density, density)
        own_flops = g * fmt.useful_flops(m, k, n, density)
        own_bytes = (gw * (fmt.value_bytes(m, k, wb, density)
                           + fmt.index_bytes(m, k, iw, density)) + scales + bias_bytes)
        gemm_weights = np.where(prunable, gw * m * k, 0.0)
        kept = np.where(takes, gw * fmt.nnz(m, k, density), gemm_weights)
        weight_sparsity[f] = 1.0 - kept.sum() / max(gemm_weights.sum(), 1.0)
        # Rows of X never read: exactly from the checkpoint's masks where the trace records
        # them (and the format takes the checkpoint's densities), else in expectation.
        read = fmt.input_read_share(m, k, density)
        if fmt.takes_layer_density:
            read = np.where(has_layer_density & ~np.isnan(layer_read), layer_read, read)
        input_read[f] = np.where(takes & rows_are_inputs, read, 1.0)
        flops[f] = np.where(takes, own_flops, dense_flops)
        weight_bytes[f] = np.where(takes, own_bytes, dense_weight_bytes)
        unit[f] = np.where(takes, int(fmt.unit), int(Unit.TENSOR))
        needs_support[f] = takes
        shape_fallback[f] = prunable & ~takes & (not isinstance(fmt, Dense))
        # Hardware fallback: the same nonzeros as CSR on the vector cores.
        as_csr = Unstructured(fmt.sparsity)
        csr_bytes = (gw * (as_csr.value_bytes(m, k, wb, density)
                           + as_csr.index_bytes(m, k, iw, density)) + scales + bias_bytes)
        csr_weight_bytes[f] = np.where(takes, csr_bytes, dense_weight_bytes)

    abytes = float(numerics.value_bytes)
    # A language model's KV-cache reads are inputs stored at the KV dtype.
    cache = (numerics.kv_value_bytes - abytes) * cache_read_elems(trace)
    return Pricing(
        formats=formats,
        numerics=numerics,
        weight_sparsity=weight_sparsity,
        layer_density=np.array([fmt.takes_layer_density and bool(has_layer_density.any())
                                for fmt in formats]),
        flops=flops,
        weight_bytes=weight_bytes,
        unit=unit,
        needs_support=needs_support,
        shape_fallback=shape_fallback,
        csr_weight_bytes=csr_weight_bytes,
        input_read=input_read,
        dense_flops=dense_flops,
        dense_weight_bytes=dense_weight_bytes,
        feature_bytes_unfused=abytes * (_as_float(ops, "input_elems")
                                        + _as_float(ops, "output_elems")) + cache,
        feature_bytes_fused=abytes * (_as_float(ops, "model_input_elems")
                                      + _as_float(ops, "model_output_elems")),
        input_bytes_unfused=abytes * _as_float(ops, "input_elems") + cache,
        input_bytes_fused=abytes * _as_float(ops, "model_input_elems"),
        vector_flops=_as_float(ops, "vector_flops"),
        prunable=prunable,
    )


#: Op kinds whose weights are GEMM weights (``groups * m * k`` of them): the ones weight-only
#: quantisation stores in the weight dtype. A ``matmul``'s W is an activation.
WEIGHT_GEMM_KINDS = ("linear", "conv")


def has_gemm_weights(ops) -> np.ndarray:
    """Per op, whether its first ``groups * m * k`` weight elements are GEMM weights."""
    return ops["kind"].isin(WEIGHT_GEMM_KINDS).to_numpy(dtype=bool) \
        & (_as_float(ops, "weight_elems") > 0)


def weight_bytes_dense(trace: Trace, numerics: Numerics) -> np.ndarray:
    """``(P,)``: each op's weight bytes stored dense: GEMM weights at the weight dtype plus
    their scales, the rest (biases, norm weights) at the compute dtype (see
    :class:`~dse.roofline.Numerics`)."""
    ops = trace.ops
    m, k, g = (_as_float(ops, c) for c in ("m", "k", "groups"))
    elems = _as_float(ops, "weight_elems")
    vb, wb = float(numerics.value_bytes), float(numerics.weight_value_bytes)
    if not numerics.quantised:
        return vb * elems
    gemm = has_gemm_weights(ops)
    gw = g * weight_sets(trace)  # every expert of an MoE layer is quantised
    quantised = np.where(gemm, np.minimum(gw * m * k, elems), 0.0)
    return (vb * (elems - quantised) + wb * quantised
            + np.where(gemm, gw * numerics.scale_bytes(m, k), 0.0))


def cache_read_elems(trace: Trace) -> np.ndarray:
    """``(P,)``: per op, the input elements per sample it reads from a language model's KV
    cache (part of ``input_elems``; ``workloads.llm`` records them in the provenance's
    ``kv_read_by_op``), 0 for every op of other traces."""
    by_op = trace.provenance.get("kv_read_by_op") or {}
    if not by_op:
        return np.zeros(len(trace.ops))
    return trace.ops["name"].map(by_op).fillna(0).to_numpy(dtype=np.float64)


@lru_cache(maxsize=64)
def _routed(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per op: its weights' sets, the sets each token reads and the tokens per sample (``sets``
    0 where the op reads all its weights); None where no op is routed."""
    by_op = trace.provenance.get("routed_weights_by_op") or {}
    if not by_op:
        return None
    names = trace.ops["name"]
    sets, per_token, tokens = (names.map({n: float(r[key]) for n, r in by_op.items()})
                               .fillna(0).to_numpy(dtype=np.float64)
                               for key in ("sets", "sets_per_token", "tokens_per_sample"))
    return sets, per_token, tokens


def weight_sets(trace: Trace) -> np.ndarray:
    """``(P,)``: per op, how many copies of its ``groups x M x K`` GEMM weights it stores: an
    MoE layer's expert linear holds one per expert (``E``; one expert's GEMM per token-expert
    pair, so ``n`` counts the pairs), every other op 1. A format compresses, and weight-only
    quantisation stores, each copy; the rest of ``weight_elems`` (a bias) stays dense."""
    routed = _routed(trace)
    if routed is None:
        return np.ones(len(trace.ops))
    return np.where(routed[0] > 0, routed[0], 1.0)


def weight_read_share(trace: Trace, ops, batch) -> np.ndarray | None:
    """The share of each op's stored weights a step of ``batch`` samples reads, for op indices
    ``ops`` (or a slice) and batches ``batch`` (broadcast together); None where the trace reads
    every op's weights whole (every share 1).

    Below 1 only for a routed op (``workloads.llm``: an MoE layer's expert linears, listed in
    the provenance's ``routed_weights_by_op``): its weights are ``E`` equal sets (experts) of
    which each token reads ``k``, chosen uniformly, so a step of ``T = batch x
    tokens_per_sample`` tokens touches ``E x (1 - (1 - k/E)^T)`` sets in expectation and reads
    ``1 - (1 - k/E)^T`` of the op's weights, in whatever storage they have (a format's values,
    index and scales alike). The FLOPs are the trace's: one set's GEMM per token-set pair."""
    routed = _routed(trace)
    if routed is None:
        return None
    sets, per_token, tokens = (a[ops] for a in routed)
    routed_op = sets > 0
    share = touched_share(np.where(routed_op, sets, 1.0), per_token,
                          np.asarray(batch, dtype=np.float64) * tokens)
    return np.where(routed_op, share, 1.0)


@dataclass(frozen=True, eq=False)
class KernelArrays:
    """What the kernels read for one scope: per alternative kernel (``KERNEL_OWN``,
    ``KERNEL_DENSE``, ``KERNEL_CSR``), format and op in scope, the useful FLOPs per sample split
    by unit and the weight bytes; contiguous, so the op loop is branch-free."""

    ops: np.ndarray  # (P,) trace indices of the ops in scope
    tensor_flops: np.ndarray  # (3, F, P) on the tensor cores
    sparse_flops: np.ndarray  # (3, F, P) on the sparse tensor core
    csr_flops: np.ndarray  # (3, F, P) CSR on the vector cores
    weight_bytes: np.ndarray  # (3, F, P)
    feature_bytes_unfused: np.ndarray  # (3, F, P) per sample: only the input rows read
    feature_bytes_fused: np.ndarray  # (3, F, P)
    vector_flops: np.ndarray  # (P,)
    fallback_ops: np.ndarray  # (F,) ops in scope that need the format's own kernel
    shape_fallback_ops: np.ndarray  # (F,) ops in scope whose shape cannot take the format


#: Alternative kernels, in the order of KernelArrays' first axis.
KERNEL_OWN, KERNEL_DENSE, KERNEL_CSR = 0, 1, 2


@lru_cache(maxsize=64)
def kernel_arrays(pricing: Pricing, scope: str) -> KernelArrays:
    """The kernels' view of ``pricing`` for ``scope`` (cached per pricing and scope)."""
    ops = scope_ops(pricing, scope)
    p = pricing
    needs = p.needs_support[:, ops]
    flops, unit = p.flops[:, ops], p.unit[:, ops]
    dense_flops = np.broadcast_to(p.dense_flops[ops], flops.shape)
    dense_bytes = np.broadcast_to(p.dense_weight_bytes[ops], flops.shape)
    zeros = np.zeros_like(flops)
    # Own kernel: FLOPs go to the format's unit.
    own = (np.where(unit == Unit.TENSOR, flops, 0.0),
           np.where(unit == Unit.SPARSE_TENSOR, flops, 0.0),
           np.where(unit == Unit.VECTOR, flops, 0.0),
           p.weight_bytes[:, ops])
    # Fallbacks change only the ops that need the format's own kernel.
    dense = (np.where(needs, dense_flops, own[0]), np.where(needs, zeros, own[1]),
             np.where(needs, zeros, own[2]), np.where(needs, dense_bytes, own[3]))
    csr = (np.where(needs, zeros, own[0]), np.where(needs, zeros, own[1]),
           np.where(needs, flops, own[2]), np.where(needs, p.csr_weight_bytes[:, ops], own[3]))
    stacked = [np.ascontiguousarray(np.stack([a, b, c])) for a, b, c in
               zip(own, dense, csr, strict=True)]
    return KernelArrays(
        ops=ops,
        tensor_flops=stacked[0],
        sparse_flops=stacked[1],
        csr_flops=stacked[2],
        weight_bytes=stacked[3],
        feature_bytes_unfused=kernel_features(pricing, read_all(pricing, "unfused"), ops),
        feature_bytes_fused=kernel_features(pricing, read_all(pricing, "fused"), ops),
        vector_flops=np.ascontiguousarray(p.vector_flops[ops]),
        fallback_ops=needs.sum(axis=1).astype(np.int64),
        shape_fallback_ops=p.shape_fallback[:, ops].sum(axis=1),
    )


def read_all(pricing: Pricing, fusion: str) -> tuple[np.ndarray, np.ndarray]:
    """Per op, the feature bytes per sample with every input row read, and their input part,
    under ``unfused`` or the ``fused`` models (model inputs and outputs only)."""
    if fusion == "unfused":
        return pricing.feature_bytes_unfused, pricing.input_bytes_unfused
    return pricing.feature_bytes_fused, pricing.input_bytes_fused


def format_features(pricing: Pricing, features: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """``(F, P)``: per format and op, the feature bytes per sample that go through DRAM when the
    format's kernel reads only the input rows it needs. ``features``: per op, the bytes with
    every input row read and their input part (:func:`read_all`, or a rule table's)."""
    total, inputs = features
    return total[None, :] - inputs[None, :] * (1.0 - pricing.input_read)


def kernel_features(pricing: Pricing, features: tuple[np.ndarray, np.ndarray],
                    ops: np.ndarray) -> np.ndarray:
    """``(3, F, P)`` for the kernels: the format's own kernel and its CSR fallback read the
    rows the nonzeros need; the dense fallback reads all of them."""
    own = format_features(pricing, features)[:, ops]
    dense = np.broadcast_to(features[0][ops], own.shape)
    needs = pricing.needs_support[:, ops]
    return np.ascontiguousarray(np.stack([own, np.where(needs, dense, own), own]))


def scope_ops(pricing: Pricing, scope: str) -> np.ndarray:
    """Indices of the ops a scope sums over: ``gemm`` (prunable weight GEMMs) or ``all``."""
    if scope == "all":
        return np.arange(len(pricing.prunable), dtype=np.int64)
    return np.flatnonzero(pricing.prunable).astype(np.int64)


def stack_formats(formats: Sequence[Format]) -> tuple[Format, ...]:
    """Dense first (every speedup needs it), then the requested formats without repeats."""
    ordered: list[Format] = [Dense()]
    for fmt in formats:
        if fmt not in ordered:
            ordered.append(fmt)
    return tuple(ordered)


@dataclass(frozen=True, eq=False)
class RuleEdges:
    """Which intermediates a rule table keeps on chip, per producer-consumer edge.

    ``producers[j]`` are op j's producers (trace indices, the model input left out, as the
    trace lists them) and ``on_chip[j][k]`` whether the edge from ``producers[j][k]`` fuses:
    the table has (its kind, j's kind). An op's output is ``written`` to DRAM unless every
    consumer fuses with it (a model output always is). ``input_elems`` and ``output_elems``
    (per sample) are what then goes through DRAM: the model input, plus the share of the
    features read from producers that arrive over unfused edges (weighted by the producers'
    output sizes, as the simulator charges spills), and the output where written."""

    producers: tuple[tuple[int, ...], ...]
    on_chip: tuple[tuple[bool, ...], ...]
    written: np.ndarray  # (P,) bool
    input_elems: np.ndarray  # (P,) per sample, from DRAM
    output_elems: np.ndarray  # (P,) per sample, to DRAM


@lru_cache(maxsize=64)
def rule_edges(trace: Trace, table: RuleTable) -> RuleEdges:
    """The edges of ``trace`` that ``table`` fuses, and the feature traffic that leaves."""
    ops = trace.ops
    index = {name: i for i, name in enumerate(ops["name"])}
    kinds = ops["kind"].to_numpy(dtype=object)
    out = _as_float(ops, "output_elems")
    producers = tuple(tuple(index[p] for p in ps if p != MODEL_INPUT) for ps in ops["producers"])
    on_chip = tuple(tuple(table.fuses(kinds[i], kinds[j]) for i in ps)
                    for j, ps in enumerate(producers))
    all_fuse = np.ones(len(ops), dtype=bool)
    consumed = np.zeros(len(ops), dtype=bool)
    model_in = _as_float(ops, "model_input_elems")
    from_producers = _as_float(ops, "input_elems") - model_in
    input_elems = model_in.copy()
    for j, (ps, chip) in enumerate(zip(producers, on_chip, strict=True)):
        input_elems[j] += from_producers[j] * spilled_share([out[i] for i in ps], chip)
        for i, kept in zip(ps, chip, strict=True):
            consumed[i] = True
            all_fuse[i] &= kept
    written = ops["is_output"].to_numpy(dtype=bool) | ~(consumed & all_fuse)
    return RuleEdges(producers, on_chip, written, input_elems, np.where(written, out, 0.0))


def spilled_share(sizes: Sequence[float], kept: Sequence[bool]) -> float:
    """The share of an op's features from producers that comes through DRAM, its producers
    having outputs of ``sizes`` and edges kept on chip where ``kept``: by size; by count where
    the producers wrote nothing; all of it where there is no producer (unexplained input is
    read from DRAM, so that an empty table prices exactly as ``unfused``)."""
    produced = sum(sizes)
    if produced > 0:
        return sum(x for x, k in zip(sizes, kept, strict=True) if not k) / produced
    return sum(not k for k in kept) / len(kept) if len(kept) else 1.0


def feature_bytes_rules(trace: Trace, table: RuleTable,
                        numerics: Numerics) -> tuple[np.ndarray, np.ndarray]:
    """Per op, the feature bytes per sample under ``rules:`` ``table`` (see :class:`RuleEdges`),
    every input row read, and their input part: between ``feature_bytes_fused`` and
    ``feature_bytes_unfused`` by construction."""
    edges = rule_edges(trace, table)
    width = float(numerics.value_bytes)
    return width * (edges.input_elems + edges.output_elems), width * edges.input_elems
