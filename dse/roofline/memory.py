"""Peak resident memory of evaluated designs, whether they fit in DRAM, and the largest batch
that does.

The model, per design (everything at batch B is the per-sample trace times B):

* **Weights**: every op's parameters in the storage of the kernel that runs it: a prunable op's
  values and index as ``evaluate_layers`` prices them (its format, or dense / CSR where it falls
  back), every other op's parameters dense. Resident for the whole run: an MoE layer's experts
  all of them, though a step reads only those its tokens touch.
* **Activations**: the trace's tensors (the model input and each op's output) live from the op
  that produces them (the input from the start) to their last consumer, in the trace's
  topological order; a model output lives to the end. At each op the live set is what has been
  produced and is still to be read, its own output included; the peak is the largest live set.
* **Fusion**: ``unfused`` keeps every tensor in DRAM. ``fused`` and ``fused_prefetched`` keep
  intermediates on chip: only the model input and outputs are resident in DRAM, and the peak of
  the live intermediates is the on-chip workspace the fusion model needs (``onchip_peak_bytes``,
  compared with ``l2_bytes`` in ``fits_on_chip``). ``rules:NAME`` keeps in DRAM the outputs its
  rule table writes. No other workspace: the roofline prices convolutions as implicit GEMMs.

``peak_memory_bytes = weight_storage_bytes + activation_peak_bytes``; ``fits`` compares it with
``dram_capacity_bytes`` (NA where the spec has none); ``largest_batch_that_fits`` is the closed
form ``floor((capacity - weights) / activations per sample)``, capped at ``workloads.MAX_BATCH``
(0 when the weights alone do not fit), with this design's weight storage (the kernel choice of a
hardware fallback may differ at another batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from accelerator_models import Accelerator
from formats import parse as parse_format
from workloads import MAX_BATCH, MODEL_INPUT, Trace, load_trace

from . import fusion_rules
from .energy import accelerator_table, designs_with_layers
from .evaluator import DEFAULT_NUMERICS, FUSIONS
from .layer_sums import LayerRows, design_sums, layer_rows, with_columns
from .numerics import Numerics
from .pricing import (
    KERNEL_CSR,
    KERNEL_DENSE,
    KERNEL_OWN,
    kernel_arrays,
    price,
    rule_edges,
    stack_formats,
    weight_bytes_dense,
    weight_read_share,
)

__all__ = ["MEMORY_COLUMNS", "ActivationPeak", "activation_peak", "evaluate_memory",
           "fixed_weight_bytes", "memory_columns", "memory_frame", "memory_from_stored",
           "unread_weight_bytes"]

#: Columns :func:`memory_frame` adds, in order.
MEMORY_COLUMNS = ("weight_storage_bytes", "activation_peak_bytes", "onchip_peak_bytes",
                  "peak_memory_bytes", "dram_capacity_bytes", "fits", "largest_batch_that_fits",
                  "fits_on_chip")


@dataclass(frozen=True)
class ActivationPeak:
    """Peak live activation elements per sample: resident in DRAM, and kept on chip."""

    dram_elems: float
    onchip_elems: float


def _in_dram(trace: Trace, fusion: str) -> np.ndarray:
    """Per op, whether its output is resident in DRAM under ``fusion``."""
    ops = trace.ops
    if fusion == "unfused":
        return np.ones(len(ops), dtype=bool)
    if fusion in FUSIONS:
        return ops["is_output"].to_numpy(dtype=bool)
    table = fusion_rules.table_for(fusion)
    if table is None:
        raise ValueError(f"unknown fusion model {fusion!r}")
    return np.asarray(rule_edges(trace, table).written, dtype=bool)


@lru_cache(maxsize=256)
def activation_peak(trace: Trace, fusion: str = "unfused") -> ActivationPeak:
    """The largest live sets of activations along ``trace``'s producer graph (see module)."""
    ops = trace.ops
    n = len(ops)
    index = {name: i for i, name in enumerate(ops["name"])}
    last_use = np.where(ops["is_output"].to_numpy(dtype=bool), n - 1, -1)
    input_last = -1
    for j, producers in enumerate(ops["producers"]):
        for p in producers:
            if p == MODEL_INPUT:
                input_last = j
            else:
                last_use[index[p]] = max(last_use[index[p]], j)
    size = ops["output_elems"].to_numpy(dtype=np.float64)
    in_dram = _in_dram(trace, fusion)
    dram, onchip = np.zeros(n + 1), np.zeros(n + 1)
    # An output with no consumer inside the graph lives at least while its op runs.
    end = np.maximum(last_use, np.arange(n))
    for live, keep in ((dram, in_dram), (onchip, ~in_dram)):
        np.add.at(live, np.flatnonzero(keep), size[keep])
        np.add.at(live, end[keep] + 1, -size[keep])
    # The model input sits in DRAM until its last reader.
    input_elems = float(np.prod(trace.input_shape))
    dram[0] += input_elems
    dram[max(input_last, 0) + 1] -= input_elems
    return ActivationPeak(float(np.cumsum(dram)[:n].max()), float(np.cumsum(onchip)[:n].max()))


def memory_frame(designs: pd.DataFrame, layers: pd.DataFrame, trace: Trace | str,
                 hardware: Accelerator | Sequence[Accelerator],
                 numerics: Numerics = DEFAULT_NUMERICS) -> pd.DataFrame:
    """``designs`` (from ``evaluate``) with :data:`MEMORY_COLUMNS` added (see the module);
    ``layers``, ``hardware`` and ``numerics`` as for :func:`dse.roofline.energy.energy_frame`.
    Bytes for the whole batch."""
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    accs = accelerator_table(hardware)
    rows = layer_rows(designs, layers, trace)
    return with_columns(designs, memory_columns(designs, layers, trace, accs, numerics, rows))


def memory_columns(designs: pd.DataFrame, layers: pd.DataFrame, trace: Trace,
                   accs: dict[str, Accelerator], numerics: Numerics,
                   rows: LayerRows) -> dict[str, object]:
    """:data:`MEMORY_COLUMNS` of :func:`memory_frame`, by name, per row of ``designs``;
    ``accs``: ``accelerator_table(hardware)``; ``rows``: ``layer_rows(designs, layers,
    trace)``."""
    is_prunable = trace.ops["prunable"].to_numpy(dtype=bool)
    fixed = fixed_weight_bytes(trace, numerics)
    in_trace = rows.op >= 0
    prunable = np.zeros(len(layers), dtype=bool)
    prunable[in_trace] = is_prunable[rows.op[in_trace]]
    # A layer row holds the weights its step reads; an MoE's experts are all resident.
    weight_bytes = layers["weight_bytes"].to_numpy(dtype=np.float64)
    share = weight_read_share(trace, rows.op[prunable],
                              layers["batch"].to_numpy(dtype=np.float64)[prunable])
    if share is not None:
        weight_bytes = weight_bytes.copy()
        weight_bytes[prunable] = weight_bytes[prunable] / share
    stored = design_sums(weight_bytes[:, None], rows, keep=prunable)[:, 0]
    if is_prunable.any() and np.isnan(stored).any():
        raise ValueError("layers lack some design; evaluate the layers of every design "
                         "(dse.roofline.energy.evaluate_layer_frames)")
    return memory_from_stored(fixed, stored, designs["batch"].to_numpy(dtype=np.float64),
                              designs["fusion"].astype(str).to_numpy(dtype=object),
                              designs["hardware"].astype(str).to_numpy(dtype=object), trace,
                              accs, numerics)


@lru_cache(maxsize=256)
def fixed_weight_bytes(trace: Trace, numerics: Numerics) -> float:
    """The bytes of the weights no format prunes (biases, norms, embeddings), stored dense:
    the part of every design's ``weight_storage_bytes`` that :func:`memory_columns` does not
    sum from its layer rows. Once per trace (read-only, keyed by identity as the pricing's
    caches are) and numerics (frozen)."""
    is_prunable = trace.ops["prunable"].to_numpy(dtype=bool)
    return float(weight_bytes_dense(trace, numerics)[~is_prunable].sum())


def memory_from_stored(fixed: float, stored: np.ndarray, batch: np.ndarray, fusions: np.ndarray,
                       names: np.ndarray, trace: Trace, accs: dict[str, Accelerator],
                       numerics: Numerics) -> dict[str, object]:
    """:func:`memory_columns` from each design's sum of its prunable layer rows' stored weight
    bytes (``stored``; NaN where it has none), ``fixed`` (:func:`fixed_weight_bytes`), and its
    batch (float64), fusion model and hardware's name."""
    vb = float(numerics.value_bytes)
    weights = fixed + np.where(np.isnan(stored), 0.0, stored)  # no prunable op: none
    per_sample = np.array([activation_peak(trace, f).dram_elems for f in fusions]) * vb
    onchip = np.array([activation_peak(trace, f).onchip_elems for f in fusions]) * vb * batch
    activations = per_sample * batch
    peak = weights + activations
    for name in dict.fromkeys(names.tolist()):
        if name not in accs:
            raise ValueError(f"designs name hardware {name!r}, which is not among the "
                             "accelerators given; pass every accelerator evaluated")
    capacity = np.array([np.nan if accs[h].dram_capacity_bytes is None
                         else accs[h].dram_capacity_bytes for h in names])
    l2 = np.array([np.nan if accs[h].l2_bytes is None else accs[h].l2_bytes for h in names])
    known = ~np.isnan(capacity)
    room = np.where(known, capacity - weights, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        largest = np.where(per_sample > 0, np.floor(room / per_sample), MAX_BATCH)
    largest = np.where(room < 0, 0, np.clip(largest, 0, MAX_BATCH))
    on_chip_unknown = np.isnan(l2) & (onchip > 0)
    return {
        "weight_storage_bytes": weights,
        "activation_peak_bytes": activations,
        "onchip_peak_bytes": onchip,
        "peak_memory_bytes": peak,
        "dram_capacity_bytes": capacity,
        "fits": pd.arrays.BooleanArray(np.where(known, peak <= capacity, False), ~known),
        "largest_batch_that_fits": pd.arrays.IntegerArray(largest.astype(np.int64), ~known),
        "fits_on_chip": pd.arrays.BooleanArray(onchip <= np.nan_to_num(l2, nan=np.inf),
                                               on_chip_unknown),
    }


def unread_weight_bytes(designs: pd.DataFrame, trace: Trace,
                        numerics: Numerics = DEFAULT_NUMERICS) -> np.ndarray:
    """Per row of ``designs`` (``evaluate``'s rows of ``trace``: ``format``, ``batch``,
    ``hw_fallback``), the bytes of resident weights its step does not read: an MoE layer's
    experts that its tokens leave untouched (in expectation), stored as the kernel that runs
    them stores them; 0 for every other trace. A row's ``weight_bytes`` plus these are its
    weights' storage (closed forms over many rows use it: ``dse.explore.sweep``)."""
    batch = designs["batch"].to_numpy(dtype=np.float64)
    out = np.zeros(len(designs))
    if weight_read_share(trace, slice(None), batch[:1]) is None or not len(designs):
        return out
    names = designs["format"].astype(str).to_numpy(dtype=object)
    fmts = stack_formats([parse_format(n) for n in pd.unique(names)])
    arrays = kernel_arrays(price(trace, fmts, numerics), "all")
    f = pd.Index([x.name for x in fmts]).get_indexer(names)
    kernel = (designs["hw_fallback"].astype(str).map({"": KERNEL_OWN, "dense": KERNEL_DENSE,
                                                       "csr": KERNEL_CSR})
              .to_numpy(dtype=np.int64))
    for b in pd.unique(batch):
        unread = arrays.weight_bytes @ (1.0 - weight_read_share(trace, arrays.ops, b))  # (3, F)
        rows = batch == b
        out[rows] = unread[kernel[rows], f[rows]]
    return out


def evaluate_memory(trace: Trace | str, hardware, formats, batches=1,
                    fusion: str | Sequence[str] = "unfused", scope: str | Sequence[str] = "gemm",
                    numerics: Numerics = DEFAULT_NUMERICS) -> pd.DataFrame:
    """``dse.evaluate``'s designs with :data:`MEMORY_COLUMNS`; arguments as ``dse.evaluate``."""
    trace, accs, designs, layers = designs_with_layers(trace, hardware, formats, batches,
                                                       fusion, scope, numerics)
    return memory_frame(designs, layers, trace, accs, numerics)
