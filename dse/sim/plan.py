"""What the event-level simulator executes: per-op work, tiles, on-chip residency, prefetches.

Planning is pure numpy and fixes every quantity the SimPy model then plays out in time:

* **Work.** Per op, the same numbers the roofline uses (``dse.evaluate_layers``): the time on its
  tensor unit (dense or sparse tensor core), the time on the vector cores (CSR GEMM work plus
  elementwise work, which share them), weight bytes (values + index), and its feature bytes
  split into inputs and outputs. The kernel (the format's own, or the dense/CSR fallback where
  the hardware cannot run it) is the roofline's choice for the same design.
* **Residency** (``fused`` and ``fused_prefetched``). An intermediate (an op output that later
  ops read) read only by the very next op, an activation or elementwise op, is fused into its
  producer's epilogue: it passes tile by tile and never needs room of its own. Any other stays
  on chip when, for every op from its producer to its last consumer, it fits beside the
  intermediates already kept and that op's smallest tiles, and keeping it costs those ops less
  re-read traffic than spilling would; otherwise it spills: its producer writes it to DRAM and
  its consumers read it back. ``unfused`` keeps nothing. ``rules:NAME`` keeps exactly the edges
  whose (producer kind, consumer kind) the rule table fuses: an op whose fused consumers are
  only the very next op streams into it (no room of its own); one read further on stays on chip
  under the same room and traffic test as above, else all its edges spill. Its output is still
  written where some consumer does not fuse with it.
* **Tiles.** An op is cut into tiles that fit one buffer stage (``(buffer - resident bytes) /
  depth``). A GEMM tile is an ``Tm x Tn`` block of the output with its full K slice: its weight
  rows, its input columns and its outputs. Cutting M re-reads the inputs once per row block and
  cutting N re-reads the weights once per column block, so traffic grows as the buffer shrinks;
  among the cuts that fit, the one with the least traffic wins (then the fewest tiles). Grouped
  convolutions cut channels first, which splits inputs without re-reading them. Other ops cut
  the larger of their inputs and outputs (a reduction streams its input). Tiles are at least
  16 x 16 outputs (the MMA granularity) or 256 elements.
* **Kernels.** Every op is a kernel when ``unfused``; when fused, a kernel is a run of ops joined
  by intermediates kept on chip, so a spill ends a kernel; under ``rules:NAME`` an op joins the
  previous op's kernel when it reads the previous op's output over a fused edge. Each kernel
  pays the launch overhead.
* **Prefetch** (``fused_prefetched``): the weights of op ``j`` may load during ops ``j - depth``
  to ``j - 1`` when they fit in the buffer those ops leave free.

With an unlimited buffer every op is one tile, every intermediate stays on chip and the traffic
is exactly the roofline's, which is how the simulator reproduces it.

**Kernel times** (:func:`at_kernel_times`, ``dse simulate --calibrated``): instead of running
at peak, each op may run at a given kernel time (a predicted one, from measured kernels): its
compute is stretched, never shrunk, so that its launch overhead plus its compute takes that time.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from accelerator_models import Accelerator
from formats import Format
from workloads import MODEL_INPUT, Trace

from ..roofline import kernels as K
from ..roofline.evaluator import (
    SCOPES,
    EvaluationError,
    all_rows_read,
    fusion_models,
    pick_fallback,
    prepare,
)
from ..roofline.fusion_rules import table_for
from ..roofline.numerics import Numerics
from ..roofline.pricing import (
    KERNEL_CSR,
    KERNEL_DENSE,
    KERNEL_OWN,
    cache_read_elems,
    kernel_arrays,
    rule_edges,
    scope_ops,
    spilled_share,
)

__all__ = ["MIN_ELEMS", "MIN_TILE", "Plan", "PlanError", "Work", "at_kernel_times", "plan",
           "work"]

#: Op kinds a fused kernel applies to a tile of its producer's output as it leaves (epilogue).
EPILOGUE_KINDS = ("activation", "elementwise")
#: Smallest GEMM tile edge (outputs) and smallest tile of an elementwise op (elements).
MIN_TILE = 16
MIN_ELEMS = 256


class PlanError(ValueError):
    """A simulation that cannot be planned (buffer too small for a tile, bad settings)."""


@dataclass(frozen=True, eq=False)
class Work:
    """Per-op work of one design for every op of the trace (arrays of shape ``(P,)``)."""

    trace: Trace
    accelerator: Accelerator
    format: Format
    batch: int
    fusion: str
    scope: str
    in_scope: np.ndarray  # bool
    kernel: int  # KERNEL_OWN, KERNEL_DENSE or KERNEL_CSR, the roofline's choice
    tensor_s: np.ndarray  # time on the op's tensor unit
    tensor_unit: np.ndarray  # 0 tensor, 1 sparse_tensor
    vector_s: np.ndarray  # time on the vector cores
    weight_bytes: np.ndarray
    input_bytes: np.ndarray  # all inputs read (model input included)
    model_input_bytes: np.ndarray
    output_bytes: np.ndarray
    is_output: np.ndarray  # bool: a model output (nobody in the graph reads it)
    producers: tuple[tuple[int, ...], ...]  # trace indices, the model input left out
    gemm: np.ndarray  # (P, 4) M (all groups), K, N (batch included), groups; zeros if none
    inv_bw: float
    feature_bytes: np.ndarray  # the roofline's feature bytes under ``fusion`` (batch included)

    @property
    def compute_s(self) -> np.ndarray:
        return np.maximum(self.tensor_s, self.vector_s)


def work(trace: Trace, accelerator: Accelerator, fmt: Format, batch: int, fusion: str,
         scope: str, numerics: Numerics) -> Work:
    """The per-op work of one design, priced exactly as the roofline prices it."""
    if fusion not in fusion_models():
        raise EvaluationError(f"unknown fusion {fusion!r}; use one of "
                              f"{', '.join(fusion_models())}")
    if scope not in SCOPES:
        raise EvaluationError(f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
    problem = prepare(trace, accelerator, fmt, batch, numerics)
    f = problem.formats.index(fmt) if fmt in problem.formats else 0
    design = f * len(problem.batches)  # one hardware, one batch: d = f
    native = bool(problem.native_ok[0, f])
    if native:
        kernel = KERNEL_OWN
    else:
        totals = problem.totals(scope, fusion)[design:design + 1]
        kernel = KERNEL_CSR if pick_fallback(totals, fusion)[0] else KERNEL_DENSE
    a = kernel_arrays(problem.pricing, "all")
    if not native and a.fallback_ops[f] == 0:
        kernel = KERNEL_OWN
    rates = problem.hw[0]
    b = float(batch)
    # Same association as the roofline kernel, so the per-op times agree to the last bit.
    s_tensor, s_sparse = b * rates[K.HW_INV_TENSOR], b * rates[K.HW_INV_SPARSE]
    s_csr, s_vector = b * rates[K.HW_INV_CSR], b * rates[K.HW_INV_VECTOR]
    ft, fs, fc = a.tensor_flops[kernel, f], a.sparse_flops[kernel, f], a.csr_flops[kernel, f]
    ops = trace.ops
    vb = float(numerics.value_bytes)
    index = {name: i for i, name in enumerate(ops["name"])}
    producers = tuple(tuple(index[p] for p in ps if p != MODEL_INPUT) for ps in ops["producers"])
    in_scope = np.zeros(len(ops), dtype=bool)
    in_scope[scope_ops(problem.pricing, scope)] = True
    m, k, n, g = (ops[c].to_numpy(dtype=np.float64) for c in ("m", "k", "n", "groups"))
    # The share of each op's input rows the kernel reads (the dense fallback reads them all).
    pricing = problem.pricing
    read = np.where((kernel == KERNEL_DENSE) & pricing.needs_support[f], 1.0,
                    pricing.input_read[f])
    total, inputs = all_rows_read(pricing, trace, fusion)
    return Work(
        trace=trace, accelerator=problem.accelerators[0], format=problem.formats[f],
        batch=int(batch), fusion=fusion, scope=scope, in_scope=in_scope, kernel=kernel,
        tensor_s=ft * s_tensor + fs * s_sparse,
        tensor_unit=(fs > 0).astype(np.int64),
        vector_s=fc * s_csr + a.vector_flops * s_vector,
        # The weights a step of this batch reads (an MoE's touched experts), as the roofline.
        weight_bytes=problem.weight_bytes(a, 0)[kernel, f].copy(),
        # KV-cache reads at the KV dtype, as the roofline prices them.
        input_bytes=(vb * ops["input_elems"].to_numpy(dtype=np.float64)
                     + (numerics.kv_value_bytes - vb) * cache_read_elems(trace)) * read * b,
        model_input_bytes=vb * ops["model_input_elems"].to_numpy(dtype=np.float64) * read * b,
        output_bytes=vb * ops["output_elems"].to_numpy(dtype=np.float64) * b,
        is_output=ops["is_output"].to_numpy(dtype=bool),
        producers=producers,
        gemm=np.stack([m * g, k, n * b, g], axis=1),
        inv_bw=float(rates[K.HW_INV_BW]),
        feature_bytes=(total - inputs * (1.0 - read)) * b,
    )


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything the SimPy model plays out, for the ops in scope, in trace order."""

    work: Work
    ops: np.ndarray  # trace indices of the simulated ops
    tiles: np.ndarray  # (S,) int
    load_bytes: np.ndarray  # (S,) DRAM reads of the op, its prefetched weights included
    store_bytes: np.ndarray  # (S,) DRAM writes
    prefetch_bytes: np.ndarray  # (S,) weight bytes loaded ahead, during an earlier op
    prefetch_from: np.ndarray  # (S,) position (in ops) of the op during which they load
    kernel_start: np.ndarray  # (S,) bool: the op starts a kernel (pays the launch overhead)
    resident_output: np.ndarray  # (S,) bool: its output stays on chip for later ops
    footprint: np.ndarray  # (S,) bytes of one tile
    buffer_bytes: float
    depth: int
    launch_overhead_s: float

    @property
    def tensor_s(self) -> np.ndarray:
        return self.work.tensor_s[self.ops]

    @property
    def vector_s(self) -> np.ndarray:
        return self.work.vector_s[self.ops]

    @property
    def tensor_unit(self) -> np.ndarray:
        return self.work.tensor_unit[self.ops]


def _pow2_upto(limit: int) -> np.ndarray:
    """1, 2, 4, ... below ``limit``, and ``limit`` itself."""
    count = max(int(limit).bit_length(), 1)
    values = np.unique(np.minimum(2 ** np.arange(count + 1), limit))
    return values[values >= 1].astype(np.float64)


def _tile_choices(w: float, x: float, y: float, gemm: np.ndarray, elems: float):
    """Candidate cuts of one op: arrays (tiles, traffic, footprint, weight reads)."""
    m, _, n, groups = gemm
    if m > 0 and n > 0:
        cuts_m = _pow2_upto(math.ceil(m / MIN_TILE))
        cuts_n = _pow2_upto(math.ceil(n / MIN_TILE))
        nm, nn = np.meshgrid(cuts_m, cuts_n, indexing="ij")
        nm, nn = nm.ravel(), nn.ravel()
        # Grouped GEMMs cut whole groups first: a channel block reads only its own inputs.
        split_in = np.minimum(nm, groups) if groups > 1 else np.ones_like(nm)
        reread = np.ceil(nm / split_in)
        traffic = w * nn + x * reread + y
        footprint = w / nm + x / (nn * split_in) + y / (nm * nn)
        return nm * nn, traffic, footprint, nn
    cuts = _pow2_upto(max(math.ceil(elems / MIN_ELEMS), 1))
    return cuts, np.full_like(cuts, w + x + y), w + (x + y) / cuts, np.ones_like(cuts)


def smallest_tile(w: float, x: float, y: float, gemm: np.ndarray, elems: float) -> float:
    """Bytes of the op's smallest tile."""
    return float(_tile_choices(w, x, y, gemm, elems)[2].min())


def _best_cut(w, x, y, gemm, elems, stage: float) -> tuple[int, float, float, int] | None:
    """(tiles, traffic, footprint, weight reads) of the least-traffic cut that fits ``stage``
    (then the fewest tiles), or None."""
    tiles, traffic, footprint, reads = _tile_choices(w, x, y, gemm, elems)
    fits = np.flatnonzero(footprint <= stage * (1 + 1e-12))
    if not len(fits):
        return None
    i = fits[np.lexsort((tiles[fits], traffic[fits]))[0]]
    return int(tiles[i]), float(traffic[i]), float(footprint[i]), int(reads[i])


def plan(work: Work, buffer_bytes: float, depth: int, launch_overhead_s: float,
         prefetch_depth: int) -> Plan:
    """Tiles, residency, kernels and prefetches of ``work`` on a ``buffer_bytes`` buffer."""
    if depth < 1:
        raise PlanError(f"buffering depth {depth} must be at least 1 (2 = double buffering)")
    if not buffer_bytes > 0:
        raise PlanError(f"buffer of {buffer_bytes!r} bytes: give a positive size")
    if not (launch_overhead_s >= 0 and math.isfinite(launch_overhead_s)):
        raise PlanError(f"launch overhead {launch_overhead_s!r} s: give a finite number >= 0 "
                        "(0 = no overhead)")
    if prefetch_depth < 0:
        raise PlanError(f"prefetch depth {prefetch_depth} must be >= 0 (0 = no prefetch)")
    p = len(work.trace.ops)
    fused = work.fusion != "unfused"
    table = table_for(work.fusion)
    # rules:NAME: per edge, whether the table fuses it (kept only where its producer is resident).
    edges = rule_edges(work.trace, table) if table is not None else None
    # Features an op reads from earlier ops, as opposed to the model input.
    from_producers = work.input_bytes - work.model_input_bytes
    consumers_last = np.full(p, -1, dtype=np.int64)
    for j, ps in enumerate(work.producers):
        for i in ps:
            consumers_last[i] = max(consumers_last[i], j)
    # Ops without a GEMM cut the larger of their input and output: a reduction (a mean over
    # pixels) streams its input through a small output.
    ops = work.trace.ops
    elems = np.maximum(ops["output_elems"].to_numpy(dtype=np.float64),
                       ops["input_elems"].to_numpy(dtype=np.float64)) * work.batch

    def traffic_parts(j: int, resident: np.ndarray) -> tuple[float, float, float]:
        """(weights, inputs, outputs) op j moves through DRAM, given what is kept on chip."""
        x = work.input_bytes[j]
        if edges is not None:
            kept = [k and bool(resident[i]) for i, k in
                    zip(work.producers[j], edges.on_chip[j], strict=True)]
            share = spilled_share([work.output_bytes[i] for i in work.producers[j]], kept)
            x = work.model_input_bytes[j] + from_producers[j] * share
            written = edges.written[j] or not resident[j]
            return work.weight_bytes[j], float(x), 0.0 if not written else work.output_bytes[j]
        if fused:
            # The share of the features it reads from earlier ops that spilled; an op whose
            # trace counts more input than its producers wrote is charged as the roofline is.
            produced = sum(work.output_bytes[i] for i in work.producers[j])
            spilled = sum(work.output_bytes[i] for i in work.producers[j] if not resident[i])
            share = spilled / produced if produced > 0 else 0.0
            x = work.model_input_bytes[j] + from_producers[j] * share
        keep = fused and resident[j] and not work.is_output[j]
        y = 0.0 if keep else work.output_bytes[j]
        return work.weight_bytes[j], float(x), float(y)

    # Smallest tiles assume everything spills (the largest tiles an op can need).
    nothing_kept = np.zeros(p, dtype=bool)
    spilled = [traffic_parts(j, nothing_kept) for j in range(p)]
    min_stage = np.array([smallest_tile(*spilled[j], work.gemm[j], elems[j]) for j in range(p)])
    need = min_stage * depth
    worst = int(np.argmax(np.where(work.in_scope, need, 0.0)))
    if need[worst] > buffer_bytes * (1 + 1e-12):
        name = work.trace.ops["name"].iloc[worst]
        raise PlanError(f"buffer of {buffer_bytes:.6g} bytes is smaller than the smallest tiles "
                        f"of op {name!r} ({depth} x {min_stage[worst]:.6g} bytes at depth "
                        f"{depth}); give --buffer-bytes of at least {need[worst]:.6g} or a "
                        "smaller --depth")

    # Residency: greedy in production order; usage[j] = bytes kept on chip during op j.
    resident = np.zeros(p, dtype=bool)
    usage = np.zeros(p)
    consumers = np.zeros(p, dtype=np.int64)
    for ps in work.producers:
        for i in ps:
            consumers[i] += 1

    def extra_traffic(j: int, held: float) -> float:
        """What holding ``held`` more bytes during op j costs it in re-reads (its tiles shrink);
        priced with the op's largest inputs, as if nothing it reads were kept."""
        parts = spilled[j]
        before = _best_cut(*parts, work.gemm[j], elems[j], (buffer_bytes - usage[j]) / depth)
        after = _best_cut(*parts, work.gemm[j], elems[j],
                          (buffer_bytes - usage[j] - held) / depth)
        return after[1] - before[1]

    def keep(i: int, last: int, saved: float) -> None:
        """Keep op i's output on chip through op ``last`` if it fits beside every op's tiles
        and saves traffic: ``saved`` bytes of spills against the re-reads that holding it costs
        the ops it lives through (their tiles shrink)."""
        span = slice(i, last + 1)
        size = work.output_bytes[i]
        if not np.all(usage[span] + size + need[span] <= buffer_bytes * (1 + 1e-12)):
            return
        if math.isfinite(buffer_bytes) and sum(
                extra_traffic(j, size) for j in range(i, last + 1)) >= saved:
            return
        resident[i] = True
        usage[span] += size

    kinds = work.trace.ops["kind"].to_numpy(dtype=object)
    if edges is not None:
        fused_to: list[set[int]] = [set() for _ in range(p)]
        for j, (ps, chip) in enumerate(zip(edges.producers, edges.on_chip, strict=True)):
            for i, kept in zip(ps, chip, strict=True):
                if kept:
                    fused_to[i].add(j)
        for i in range(p):
            if not fused_to[i]:
                continue
            last = max(fused_to[i])
            if last == i + 1:
                # Fused into the next op only: it streams through, tile by tile.
                resident[i] = True
                continue
            keep(i, last, work.output_bytes[i] * (len(fused_to[i])
                                                  + (0 if edges.written[i] else 1)))
    elif fused:
        for i in range(p):
            last = consumers_last[i]
            if last < 0 or work.is_output[i]:
                resident[i] = not work.is_output[i]  # dead outputs are never written
                continue
            if consumers[i] == 1 and last == i + 1 and kinds[last] in EPILOGUE_KINDS:
                # Epilogue fusion: the next op applies itself to each tile as it leaves
                # op i, so the intermediate never exists whole and needs no room of its own.
                resident[i] = True
                continue
            # A spill costs a store and a load per consumer.
            keep(i, last, work.output_bytes[i] * (1 + consumers[i]))

    sim = np.flatnonzero(work.in_scope)
    s = len(sim)
    tiles = np.ones(s, dtype=np.int64)
    load = np.zeros(s)
    store = np.zeros(s)
    footprint = np.zeros(s)
    weight_reads = np.ones(s, dtype=np.int64)
    for pos, j in enumerate(sim):
        w, x, y = traffic_parts(j, resident)
        stage = (buffer_bytes - usage[j]) / depth
        cut = _best_cut(w, x, y, work.gemm[j], elems[j], stage)
        if cut is None:  # cannot happen after the checks above; kept as a guard
            raise PlanError(f"op {work.trace.ops['name'].iloc[j]!r} has no tile that fits "
                            f"{stage:.6g} bytes")
        tiles[pos], traffic, footprint[pos], weight_reads[pos] = cut
        store[pos] = y
        load[pos] = traffic - y

    kernel_start = np.ones(s, dtype=bool)
    if edges is not None:
        for pos in range(1, s):
            j, prev = sim[pos], sim[pos - 1]
            kernel_start[pos] = not any(i == prev and kept and resident[i] for i, kept in
                                        zip(edges.producers[j], edges.on_chip[j], strict=True))
    elif fused:
        for pos in range(1, s):
            j, prev = sim[pos], sim[pos - 1]
            spills_in = any(not resident[i] for i in work.producers[j])
            kernel_start[pos] = spills_in or not resident[prev] or bool(work.is_output[prev])

    prefetch = np.zeros(s)
    prefetch_from = np.arange(s)
    if work.fusion == "fused_prefetched" and prefetch_depth > 0:
        free = buffer_bytes - usage[sim] - depth * footprint
        held = np.zeros(s)
        for pos in range(1, s):
            w = work.weight_bytes[sim[pos]]
            # Only weights read once can be loaded ahead: re-read weights stream per tile.
            if w <= 0 or weight_reads[pos] != 1:
                continue
            for start in range(max(pos - prefetch_depth, 0), pos):
                window = slice(start, pos)
                if np.all(free[window] - held[window] >= w):
                    prefetch[pos], prefetch_from[pos] = w, start
                    held[window] += w
                    break
    return Plan(work=work, ops=sim, tiles=tiles, load_bytes=load, store_bytes=store,
                prefetch_bytes=prefetch, prefetch_from=prefetch_from,
                kernel_start=kernel_start, resident_output=resident[sim], footprint=footprint,
                buffer_bytes=float(buffer_bytes), depth=int(depth),
                launch_overhead_s=float(launch_overhead_s))


def at_kernel_times(p: Plan, seconds: np.ndarray) -> Plan:
    """``p`` with each simulated op running at its kernel time ``seconds[j]`` (per trace op;
    NaN: at peak, as planned) instead of at the speed of light.

    The choice: the compute of the op's tiles (tensor-unit and vector work alike, so that the
    two stay side by side) is stretched by one factor so that the op's launch overhead (what
    the plan charges it: 0 inside a fused kernel) plus its compute equals ``seconds[j]``; a
    kernel time below that leaves the op as planned (stretched, never shrunk: the simulator
    never beats the roofline). An op without compute work gets the time on the vector cores.
    Traffic, tiles and residency stay as planned and DRAM runs at its full bandwidth when it
    runs, so a slow kernel holds its compute units while its loads and stores still overlap
    them as the overlap model says. Under full overlap, an unlimited buffer and no launch
    overhead, each op then takes ``max(seconds[j], its roofline time)``: the sum is the
    unfused expectation wherever kernels are no faster than their bound."""
    w = p.work
    seconds = np.asarray(seconds, dtype=np.float64)
    if seconds.shape != (len(w.trace.ops),):
        raise PlanError(f"kernel times: {seconds.shape[0] if seconds.ndim else 0} values for "
                        f"{len(w.trace.ops)} ops; give one per op of the trace")
    given = ~np.isnan(seconds[p.ops])
    if np.any(seconds[p.ops][given] < 0) or not np.all(np.isfinite(seconds[p.ops][given])):
        raise PlanError("kernel times must be finite numbers of seconds >= 0")
    launch = np.where(p.kernel_start, p.launch_overhead_s, 0.0)
    target = np.where(given, np.maximum(seconds[p.ops] - launch, 0.0), 0.0)
    tensor, vector = w.tensor_s.copy(), w.vector_s.copy()
    compute = np.maximum(tensor[p.ops], vector[p.ops])
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(compute > 0, np.maximum(target / compute, 1.0), 1.0)
    tensor[p.ops] *= factor
    vector[p.ops] *= factor
    idle = p.ops[(compute <= 0) & (target > 0)]
    vector[idle] = target[(compute <= 0) & (target > 0)]
    return dataclasses.replace(p, work=dataclasses.replace(w, tensor_s=tensor, vector_s=vector))
