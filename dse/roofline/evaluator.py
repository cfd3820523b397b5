"""The speed-of-light evaluator: a typed wrapper over the numba kernels returning DataFrames.

``evaluate`` gives one row per design point (hardware x format x batch x fusion x scope) with
the model latency, the dense latency on the same hardware, batch, fusion and scope, the speedup,
the bound mix, the DRAM traffic and its feature share, and which ops fell back.
``evaluate_layers`` gives one row per op per design point.

Fusion models: ``FUSIONS`` (``unfused``, ``fused``, ``fused_prefetched``) and ``rules:NAME`` for
each shipped rule table (:func:`fusion_models`): only the intermediates on the op-kind pairs the
table fuses stay on chip, priced as ``sum_i max(c_i, r_i)`` with the rules' feature bytes in
place of the fused ones (the same kernels, called once more), so that always
``unfused >= rules:NAME >= fused``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

import accelerator_models
from accelerator_models import Accelerator
from formats import Format
from formats import parse as parse_format
from workloads import MAX_BATCH, Trace, load_trace

from . import fusion_rules
from . import kernels as K
from .caches import CACHE_CONDITIONS, cold_seconds_per_byte, memory_pieces, memory_time
from .numerics import Numerics
from .pricing import (
    KERNEL_CSR,
    KERNEL_DENSE,
    KERNEL_OWN,
    KernelArrays,
    Pricing,
    feature_bytes_rules,
    kernel_arrays,
    kernel_features,
    price,
    read_all,
    stack_formats,
    weight_read_share,
)

__all__ = ["DEFAULT_NUMERICS", "FUSIONS", "SCOPES", "Designs", "EvaluationError", "Problem",
           "all_rows_read", "evaluate", "evaluate_designs", "evaluate_layers", "fusion_latency",
           "fusion_models", "label_column", "LayerArrays", "layer_arrays", "parsed_format",
           "Peaks", "peaks", "pick_fallback", "prepare"]

FUSIONS = ("unfused", "fused", "fused_prefetched")
DEFAULT_NUMERICS = Numerics()  # frozen, so one shared default is safe
SCOPES = ("gemm", "all")


class EvaluationError(ValueError):
    """Arguments of an evaluation that cannot be used (empty lists, bad batch, unknown names)."""


def fusion_models() -> tuple[str, ...]:
    """Every fusion model taken: ``FUSIONS`` and ``rules:NAME`` per shipped rule table."""
    return FUSIONS + tuple(fusion_rules.PREFIX + n for n in fusion_rules.names())


def all_rows_read(pricing: Pricing, trace: Trace, fusion: str) -> tuple[np.ndarray, np.ndarray]:
    """Per op (whole trace), the feature bytes per sample through DRAM under ``fusion`` with
    every input row read, and their input part."""
    table = fusion_rules.table_for(fusion)
    if table is None:
        return read_all(pricing, "unfused" if fusion == "unfused" else "fused")
    return feature_bytes_rules(trace, table, pricing.numerics)


@dataclass(frozen=True)
class Problem:
    trace: Trace
    accelerators: tuple[Accelerator, ...]
    pricing: Pricing
    hw: np.ndarray
    native_ok: np.ndarray
    batches: np.ndarray
    # (B, P): per batch and op, the share of its stored weights a step reads (below 1 only for
    # an MoE layer's experts: :func:`~dse.roofline.pricing.weight_read_share`); None: all 1.
    weight_share: np.ndarray | None = None

    @property
    def formats(self) -> tuple[Format, ...]:
        return self.pricing.formats

    def weight_bytes(self, a: KernelArrays, b: int) -> np.ndarray:
        """``(3, F, P)``: ``a``'s weight bytes that a step of batch ``self.batches[b]`` reads."""
        if self.weight_share is None:
            return a.weight_bytes
        return np.ascontiguousarray(a.weight_bytes * self.weight_share[b, a.ops])

    def arrays(self, scope: str) -> KernelArrays:
        arrays = kernel_arrays(self.pricing, scope)
        if len(arrays.ops) == 0:
            raise EvaluationError(f"model {self.trace.model!r} has no prunable GEMM op, so "
                                  "scope 'gemm' is empty; use scope 'all'")
        return arrays

    def totals(self, scope: str, fusion: str = "fused") -> np.ndarray:
        """``(D, 2, TOTAL_COLUMNS)``: see :func:`dse.roofline.kernels.design_totals`. Under
        ``rules:NAME`` the fused columns (``T_FUSED``, ``T_MEMORY_FUSED``,
        ``T_MEMBOUND_FUSED``) hold that model's figures; any other fusion gives the same."""
        a = self.arrays(scope)
        fused = self._fused_features(a, fusion)
        if self.weight_share is None:
            return K.design_totals(self.hw, self.native_ok, a.fallback_ops, self.batches,
                                   a.tensor_flops, a.sparse_flops, a.csr_flops, a.weight_bytes,
                                   a.feature_bytes_unfused, fused, a.vector_flops)
        # The weights read depend on the batch (an MoE's touched experts): one call per batch,
        # each design d = (h * F + f) * B + b filled from batch b's.
        n_b = len(self.batches)
        out = np.empty((len(self.hw) * len(self.formats) * n_b, 2, K.TOTAL_COLUMNS))
        for b in range(n_b):
            out[b::n_b] = K.design_totals(self.hw, self.native_ok, a.fallback_ops,
                                          self.batches[b:b + 1], a.tensor_flops, a.sparse_flops,
                                          a.csr_flops, self.weight_bytes(a, b),
                                          a.feature_bytes_unfused, fused, a.vector_flops)
        return out

    def _fused_features(self, a: KernelArrays, fusion: str) -> np.ndarray:
        """What the kernels take as fused feature bytes: the rules' under ``rules:NAME``."""
        if fusion_rules.table_for(fusion) is None:
            return a.feature_bytes_fused
        return kernel_features(self.pricing, all_rows_read(self.pricing, self.trace, fusion),
                               a.ops)

    def design_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hardware, format, batch) index of every design, in kernel order (read-only arrays,
        shared between calls of the same grid shape)."""
        return _design_index((len(self.accelerators), len(self.formats), len(self.batches)))


@lru_cache(maxsize=64)
def _design_index(shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # Cached: a caller pricing one design in a loop pays for these three arrays once.
    index = np.unravel_index(np.arange(np.prod(shape)), shape)
    for a in index:
        a.setflags(write=False)
    return index


def fusion_latency(totals: np.ndarray, fusion: str) -> tuple[np.ndarray, np.ndarray]:
    """Latency and memory time of ``totals[..., :]`` under ``fusion`` (for ``rules:NAME``,
    totals from ``Problem.totals(scope, fusion)``)."""
    if fusion == "unfused":
        return totals[..., K.T_UNFUSED], totals[..., K.T_MEMORY_UNFUSED]
    memory = totals[..., K.T_MEMORY_FUSED]
    if fusion == "fused" or fusion.startswith(fusion_rules.PREFIX):
        return totals[..., K.T_FUSED], memory
    # fused_prefetched: one roofline over the whole graph.
    return np.maximum(totals[..., K.T_COMPUTE], memory), memory


def pick_fallback(totals: np.ndarray, fusion: str) -> np.ndarray:
    """Per design, 0 (own kernel or dense fallback) or 1 (CSR fallback): the faster one."""
    latency, _ = fusion_latency(totals, fusion)
    return (latency[:, 1] < latency[:, 0]).astype(np.int64)


def _as_list(value, what: str) -> list:
    single = (str, Format, Accelerator, int, np.integer)
    items = [value] if isinstance(value, single) else list(value)
    if not items:
        raise EvaluationError(f"no {what} given; pass at least one")
    return items


def _choices(value: str | Iterable[str], allowed: Sequence[str], what: str) -> list[str]:
    items = _as_list(value, what)
    for item in items:
        if item not in allowed:
            raise EvaluationError(f"unknown {what} {item!r}; use one of {', '.join(allowed)}")
    return list(dict.fromkeys(items))


@dataclass(frozen=True)
class Peaks:
    """The ceilings an accelerator gives a run's numerics: DRAM bandwidth (bytes/s) and the
    peak FLOP/s of each unit the roofline prices work on (the roofs of a roofline chart)."""

    dram_bytes_per_s: float
    tensor: float  # dense tensor cores at numerics.dtype
    sparse_tensor: float  # N:M on the sparse tensor core: tensor x nonzero_rate
    csr: float  # unstructured CSR kernels on the vector cores at numerics.csr_dtype
    vector: float  # elementwise ops on the vector cores at numerics.vector_dtype


def peaks(acc: Accelerator, numerics: Numerics = DEFAULT_NUMERICS) -> Peaks:
    """The ceilings the roofline divides by, for ``acc`` under ``numerics``."""
    dram, tensor, sparse, csr, vector = _peak_values(acc, numerics)
    return Peaks(np.float64(dram), tensor, sparse, csr, vector)


def _peak_values(acc: Accelerator, numerics: Numerics) -> tuple[float, ...]:
    """:func:`peaks` as plain floats, without numpy: one design priced in a loop pays for
    this on every call (the same IEEE divisions, so the same values)."""
    tensor = acc.tensor_rate(numerics.dtype)
    sparse = tensor * acc.nonzero_rate if acc.sparse_tensor is not None else tensor
    # A cold run's bytes come from DRAM through every cache level's link: the slowest bounds.
    return (1.0 / cold_seconds_per_byte(acc), tensor, sparse,
            acc.vector_rate(numerics.csr_dtype), acc.vector_rate(numerics.vector_dtype))


def _hardware_rates(acc: Accelerator, numerics: Numerics) -> list[float]:
    dram, tensor, sparse, csr, vector = _peak_values(acc, numerics)
    row = [0.0] * K.HW_COLUMNS
    row[K.HW_INV_BW] = 1.0 / dram
    row[K.HW_INV_TENSOR] = 1.0 / tensor
    row[K.HW_INV_SPARSE] = 1.0 / sparse
    row[K.HW_INV_CSR] = 1.0 / csr
    row[K.HW_INV_VECTOR] = 1.0 / vector
    return row


@lru_cache(maxsize=4096)
def _native_row_cached(sparse_tensor, block_sparse, fmts: tuple[Format, ...]) -> tuple[bool, ...]:
    probe = _Capabilities(sparse_tensor, block_sparse)
    return tuple(f.runs_natively_on(probe) for f in fmts)


def _native_row(acc: Accelerator, fmts: tuple[Format, ...]) -> tuple[bool, ...]:
    # A search builds thousands of accelerators that differ only in rates; whether a format runs
    # natively depends on the sparse-pattern and block support alone, so rows are shared.
    return _native_row_cached(acc.sparse_tensor, acc.block_sparse, fmts)


@dataclass(frozen=True)
class _Capabilities:
    sparse_tensor: object
    block_sparse: object

    def supports_nm(self, n: int, m: int) -> bool:
        return Accelerator.supports_nm(self, n, m)  # type: ignore[arg-type]

    def supports_block(self, block: int) -> bool:
        return Accelerator.supports_block(self, block)  # type: ignore[arg-type]


@lru_cache(maxsize=1024)
def parsed_format(spec: str) -> Format:
    """``formats.parse(spec)``, once per name and process (formats are frozen values; a
    refused name is not cached)."""
    return parse_format(spec)


@lru_cache(maxsize=1024)
def _stacked_name(spec: str) -> tuple[Format, ...]:
    # One format by name, as prepare stacks it: the common call of a design priced in a loop.
    return stack_formats([parsed_format(spec)])


def prepare(trace, hardware, formats, batches, numerics) -> Problem:
    """The priced arrays of a grid of designs, checked: what :func:`evaluate`, the simulator's
    planner and the benchmarks run the kernels on."""
    if not isinstance(numerics, Numerics):
        raise EvaluationError("numerics must be a dse.Numerics")
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    accelerators = tuple(h if isinstance(h, Accelerator) else accelerator_models.load(h)
                         for h in _as_list(hardware, "hardware"))
    fmts = (_stacked_name(formats) if isinstance(formats, str) else
            stack_formats([parsed_format(f) if isinstance(f, str) else parse_format(f)
                           for f in _as_list(formats, "format")]))
    batch_list = _as_list(batches, "batch size")
    for b in batch_list:
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 1:
            raise EvaluationError(f"batch size {b!r} is not a positive integer")
        # The trace's per-sample counts are bounded so that, times MAX_BATCH, they stay exact.
        if b > MAX_BATCH:
            raise EvaluationError(f"batch size {b!r} is above the largest supported, "
                                  f"{MAX_BATCH:,}")
    hw = np.array([_hardware_rates(a, numerics) for a in accelerators], dtype=np.float64)
    native_ok = np.array([_native_row(a, fmts) for a in accelerators], dtype=np.bool_)
    batch_array = np.array(batch_list, dtype=np.float64)
    share = weight_read_share(trace, slice(None), batch_array[:, None])
    return Problem(trace, accelerators, price(trace, fmts, numerics), hw, native_ok,
                   batch_array, share)


def evaluate(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str | Sequence[str] = "unfused",
    scope: str | Sequence[str] = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    categorical: bool = False,
) -> pd.DataFrame:
    """Speed-of-light latency of every design point; one row per design.

    ``categorical=True`` gives the label columns (model, hardware, format, family, fusion,
    scope, bound, hw_fallback) as pandas categoricals: the same values, built and stored in a
    fraction of the time and memory, for tables of millions of rows.

    Dense is always evaluated too (it is every speedup's baseline) and appears as its own rows.
    Times are seconds, traffic bytes, FLOPs useful FLOPs. ``feature_bytes_share`` is the share
    of the design's DRAM traffic that is features (activations), which pruning cannot remove.
    """
    fusions = _choices(fusion, fusion_models(), "fusion")
    scopes = _choices(scope, SCOPES, "scope")
    problem = prepare(trace, hardware, formats, batches, numerics)
    frames = [_totals_frame(problem, s, fusions, categorical) for s in scopes]
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def label_column(codes: np.ndarray, names: Sequence[str], categorical: bool = True):
    """``names[codes]`` as strings, or as a categorical built straight from the codes (names
    may repeat)."""
    if categorical:
        unique, inverse = np.unique(np.array(names, dtype=object), return_inverse=True)
        return pd.Categorical.from_codes(inverse[codes], categories=pd.Index(unique, dtype=object))
    return np.array(names, dtype=object)[codes]


def _design_labels(problem: Problem, h: np.ndarray, f: np.ndarray, batch: np.ndarray,
                   categorical: bool) -> dict[str, object]:
    """The columns naming each design (model, hardware, format and its sparsity, batch), for
    designs of hardware ``h``, format ``f`` and batch size ``batch``."""
    p = problem.pricing
    return {
        "model": label_column(np.zeros(len(h), dtype=np.int64), [problem.trace.model], categorical),
        "hardware": label_column(h, [a.name for a in problem.accelerators], categorical),
        "format": label_column(f, [x.name for x in problem.formats], categorical),
        "family": label_column(f, [x.family for x in problem.formats], categorical),
        "sparsity": np.array([x.sparsity for x in problem.formats])[f],
        "weight_sparsity": p.weight_sparsity[f],
        "per_layer_density": p.layer_density[f],
        "batch": batch.astype(np.int64),
    }


def _totals_columns(problem: Problem, scope: str, fusions: list[str],
                    categorical: bool = False) -> list[dict[str, object]]:
    """Per fusion, the columns of :func:`evaluate`'s rows (labels as ``label_column`` gives
    them): what both the DataFrame and the typed :class:`Designs` are made of."""
    totals = {}
    arrays = problem.arrays(scope)
    ops = arrays.ops
    n_fmt, n_b = len(problem.formats), len(problem.batches)
    h, f, b = problem.design_index()
    dense_rows = (h * n_fmt) * n_b + b  # format 0 is dense
    batch = problem.batches[b]
    shape_fallback = arrays.shape_fallback_ops[f]
    falls_back = ~problem.native_ok[h, f]
    # fallback_ops: per format, the ops in scope that need its own kernel.
    hw_fallback_ops = np.where(falls_back, arrays.fallback_ops[f], 0)
    any_fallback = bool(falls_back.any())  # else every design's fallback kind is 0 ("")
    rows = np.arange(len(h))
    labels = _design_labels(problem, h, f, batch, categorical)
    frames = []
    for fusion in fusions:
        # One kernel call serves the three FUSIONS; each rule table takes one more.
        key = fusion if fusion.startswith(fusion_rules.PREFIX) else ""
        if key not in totals:
            totals[key] = problem.totals(scope, fusion)
        alt = pick_fallback(totals[key], fusion)
        chosen = totals[key][rows, alt]
        latency, memory = fusion_latency(chosen, fusion)
        membound = chosen[:, K.T_MEMBOUND_UNFUSED if fusion == "unfused"
                          else K.T_MEMBOUND_FUSED]
        features = chosen[:, K.T_FEATURES_UNFUSED if fusion == "unfused"
                          else K.T_FEATURES_FUSED]
        compute = chosen[:, K.T_COMPUTE]
        weight_bytes = chosen[:, K.T_WEIGHT_BYTES]
        dram = weight_bytes + features
        dense_latency = latency[dense_rows]
        zeros = np.zeros(len(h), dtype=np.int64)
        fallback_kind = (np.where(falls_back & (hw_fallback_ops > 0), np.where(alt == 1, 2, 1), 0)
                         if any_fallback else zeros)
        frames.append({
            **labels,
            "fusion": label_column(zeros, [fusion], categorical) if categorical else fusion,
            "scope": label_column(zeros, [scope], categorical) if categorical else scope,
            "latency_s": latency,
            "dense_latency_s": dense_latency,
            "speedup": dense_latency / latency,
            "compute_s": compute,
            "memory_s": memory,
            "bound": label_column((memory > compute).astype(np.int64), ["compute", "memory"],
                             categorical),
            "flops": chosen[:, K.T_FLOPS],
            "dram_bytes": dram,
            "weight_bytes": weight_bytes,
            "feature_bytes": features,
            "feature_bytes_share": features / dram,
            "ops": len(ops),
            "memory_bound_ops": membound.astype(np.int64),
            "shape_fallback_ops": shape_fallback.astype(np.int64),
            "hw_fallback": label_column(fallback_kind, ["", "dense", "csr"], categorical),
            "hw_fallback_ops": hw_fallback_ops.astype(np.int64),
        })
    return frames


def _totals_frame(problem: Problem, scope: str, fusions: list[str],
                  categorical: bool = False) -> pd.DataFrame:
    frames = [pd.DataFrame(c) for c in _totals_columns(problem, scope, fusions, categorical)]
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class Designs:
    """:func:`evaluate`'s rows as columns of numpy arrays, without a DataFrame: what a
    caller pricing one design, or a few, in a loop wants (a DataFrame costs about 0.5 ms to
    build; this, tens of microseconds). ``designs["latency_s"]`` is a column, ``len(designs)``
    the number of rows, :meth:`row` one row as a dict and :meth:`frame` the DataFrame
    :func:`evaluate` returns, equal to it."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["latency_s"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def row(self, i: int = -1) -> dict[str, object]:
        """Row ``i`` (default the last: with one format asked for, the sparse design, the
        dense baseline being row 0) as plain Python values."""
        return {k: (v[i].item() if hasattr(v[i], "item") else v[i])
                for k, v in self.columns.items()}

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns)


def evaluate_designs(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str | Sequence[str] = "unfused",
    scope: str | Sequence[str] = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
) -> Designs:
    """:func:`evaluate`'s numbers as a :class:`Designs` (columns, no DataFrame): the fast path
    for one design or a few. ``evaluate_designs(...).frame()`` equals ``evaluate(...)``."""
    # One fusion model or scope by its plain name needs no list built and checked.
    fusions = ([fusion] if isinstance(fusion, str) and fusion in FUSIONS
               else _choices(fusion, fusion_models(), "fusion"))
    scopes = ([scope] if isinstance(scope, str) and scope in SCOPES
              else _choices(scope, SCOPES, "scope"))
    problem = prepare(trace, hardware, formats, batches, numerics)
    if len(problem.accelerators) * len(problem.formats) * len(problem.batches) \
            <= SMALL_GRID_DESIGNS:
        parts = [c for s in scopes for c in _small_grid_columns(problem, s, fusions)]
    else:
        parts = [_as_arrays(c) for s in scopes for c in _totals_columns(problem, s, fusions)]
    if len(parts) == 1:
        return Designs(parts[0])
    return Designs({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})


def _as_arrays(columns: dict[str, object]) -> dict[str, np.ndarray]:
    """Every column an array of the rows' length (a fusion's name and the op count are one
    value for all of its rows)."""
    n = len(columns["latency_s"])
    return {k: v if isinstance(v, np.ndarray) else
            np.full(n, v, dtype=object if isinstance(v, str) else None)
            for k, v in columns.items()}


#: Grids of at most this many designs (hardware x formats x batches) take
#: :func:`_small_grid_columns` in :func:`evaluate_designs`; larger ones the general path.
SMALL_GRID_DESIGNS = 64
_BOUND_LABELS = np.array(["compute", "memory"], dtype=object)
_FALLBACK_LABELS = np.array(["", "dense", "csr"], dtype=object)


@dataclass(frozen=True, eq=False)
class _GridLabels:
    """What :func:`_totals_columns` computes of one fusion's rows that does not depend on the
    hardware's rates: its label, batch and count columns, stacked by dtype (``groups[i]`` is
    ``(len(names[i]), D)``), and the indices it reads the totals with."""

    groups: tuple[np.ndarray, ...]
    names: tuple[tuple[str, ...], ...]
    rows: np.ndarray  # arange(D)
    dense_rows: np.ndarray  # each design's dense row
    any_fallback: bool  # some design's hardware cannot run its format
    fallback_mask: np.ndarray  # falls back and some op in scope needs the format's kernel


#: Column order of :func:`evaluate`'s rows (that of :func:`_totals_columns`).
_COLUMNS = ("model", "hardware", "format", "family", "sparsity", "weight_sparsity",
            "per_layer_density", "batch", "fusion", "scope", "latency_s", "dense_latency_s",
            "speedup", "compute_s", "memory_s", "bound", "flops", "dram_bytes", "weight_bytes",
            "feature_bytes", "feature_bytes_share", "ops", "memory_bound_ops",
            "shape_fallback_ops", "hw_fallback", "hw_fallback_ops")
# Keyed by the pricing's id, holding a weak reference to it: an entry keeps no trace's prices
# alive, and one whose pricing is gone (its id perhaps reused) is never read.
_GRID_LABELS: dict[tuple, tuple[weakref.ref, tuple[_GridLabels, ...]]] = {}
_GRID_LABELS_MAX = 256


def _grid_labels(problem: Problem, scope: str, fusions: list[str]) -> tuple[_GridLabels, ...]:
    """Per fusion, its :class:`_GridLabels`, cached per pricing (whose identity fixes the
    trace, formats and numerics), scope, fusions, hardware names, hardware support of each
    format, batches and grid shape: a caller pricing a few designs in a loop builds them
    once."""
    shape = (len(problem.accelerators), len(problem.formats), len(problem.batches))
    key = (id(problem.pricing), scope, tuple(fusions), problem.trace.model,
           tuple(a.name for a in problem.accelerators), problem.native_ok.tobytes(),
           problem.batches.tobytes(), shape)
    hit = _GRID_LABELS.get(key)
    if hit is not None and hit[0]() is problem.pricing:
        return hit[1]
    arrays = problem.arrays(scope)
    h, f, b = problem.design_index()
    n_fmt, n_b = shape[1], shape[2]
    falls_back = ~problem.native_ok[h, f]
    hw_fallback_ops = np.where(falls_back, arrays.fallback_ops[f], 0)
    # The same expressions as _totals_columns, so the same values and dtypes.
    base = {
        **_design_labels(problem, h, f, problem.batches[b], False),
        "ops": np.full(len(h), len(arrays.ops)),
        "shape_fallback_ops": arrays.shape_fallback_ops[f].astype(np.int64),
        "hw_fallback_ops": hw_fallback_ops.astype(np.int64),
    }
    any_fallback = bool(falls_back.any())
    if not any_fallback:  # every design's fallback kind is 0
        base["hw_fallback"] = label_column(np.zeros(len(h), dtype=np.int64), ["", "dense", "csr"],
                                           False)
    result = []
    for fusion in fusions:
        static = {**base, "fusion": np.full(len(h), fusion, dtype=object),
                  "scope": np.full(len(h), scope, dtype=object)}
        by_dtype: dict[np.dtype, list[str]] = {}
        for name, column in static.items():
            by_dtype.setdefault(column.dtype, []).append(name)
        names = tuple(tuple(n) for n in by_dtype.values())
        groups = tuple(np.stack([static[n] for n in group]) for group in names)
        for g in groups:
            g.setflags(write=False)  # copied for each call's result
        result.append(_GridLabels(
            groups=groups, names=names, rows=np.arange(len(h)),
            dense_rows=(h * n_fmt) * n_b + b, any_fallback=any_fallback,
            fallback_mask=falls_back & (hw_fallback_ops > 0)))
    if len(_GRID_LABELS) >= _GRID_LABELS_MAX:
        _GRID_LABELS.clear()  # one step (safe beside other threads); refilled as used
    _GRID_LABELS[key] = (weakref.ref(problem.pricing), tuple(result))
    return tuple(result)


def _small_grid_columns(problem: Problem, scope: str,
                        fusions: list[str]) -> list[dict[str, np.ndarray]]:
    """:func:`_totals_columns` with every column an array (as :func:`_as_arrays` makes them),
    the same values and dtypes, for a grid of a few designs: the columns that do not depend
    on the rates come from :func:`_grid_labels` (one copy per dtype), and only the totals'
    columns are computed, by the same numpy expressions."""
    labels = _grid_labels(problem, scope, fusions)
    totals = {}
    frames = []
    for fusion, grid in zip(fusions, labels, strict=True):
        key = fusion if fusion.startswith(fusion_rules.PREFIX) else ""
        if key not in totals:
            totals[key] = problem.totals(scope, fusion)
        if grid.any_fallback:
            alt = pick_fallback(totals[key], fusion)
            chosen = totals[key][grid.rows, alt]
        else:  # the kernel copied each design's first price to its second: alt is 0
            chosen = totals[key][:, 0]
        latency, memory = fusion_latency(chosen, fusion)
        unfused = fusion == "unfused"
        membound = chosen[:, K.T_MEMBOUND_UNFUSED if unfused else K.T_MEMBOUND_FUSED]
        features = chosen[:, K.T_FEATURES_UNFUSED if unfused else K.T_FEATURES_FUSED]
        compute = chosen[:, K.T_COMPUTE]
        weight_bytes = chosen[:, K.T_WEIGHT_BYTES]
        dram = weight_bytes + features
        dense_latency = latency[grid.dense_rows]
        columns = {}
        for group, names in zip(grid.groups, grid.names, strict=True):
            fresh = group.copy()  # the caller's own arrays, writable
            columns.update({name: fresh[i] for i, name in enumerate(names)})
        columns.update({
            "latency_s": latency,
            "dense_latency_s": dense_latency,
            "speedup": dense_latency / latency,
            "compute_s": compute,
            "memory_s": memory,
            "bound": _BOUND_LABELS[(memory > compute).astype(np.int64)],
            "flops": chosen[:, K.T_FLOPS],
            "dram_bytes": dram,
            "weight_bytes": weight_bytes,
            "feature_bytes": features,
            "feature_bytes_share": features / dram,
            "memory_bound_ops": membound.astype(np.int64),
        })
        if grid.any_fallback:
            columns["hw_fallback"] = _FALLBACK_LABELS[
                np.where(grid.fallback_mask, np.where(alt == 1, 2, 1), 0)]
        frames.append({name: columns[name] for name in _COLUMNS})
    return frames




def evaluate_layers(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str = "unfused",
    scope: str = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    cache: str = "cold",
) -> pd.DataFrame:
    """Per-op costs of every design point: one row per (design, op).

    ``cache``: ``cold`` (every byte from DRAM: the Sparsity Roofline's bound, as isolated
    kernels are measured) or ``warm`` (the op runs back to back, as inside a model: its bytes
    may come from the caches, bounded by :func:`dse.roofline.memory_time`; needs the spec's
    ``[cache]`` levels). Each op's memory time is bounded on its own, which holds whatever the
    caches held when it started, so a sum of per-op times bounds a sequence of ops.

    ``memory_s`` is the op's memory time under ``fusion`` (all its features for ``unfused``,
    only model inputs and outputs for the fused models, the features on unfused edges for
    ``rules:NAME``); ``time_s = max(compute_s, memory_s)``
    is the op's own roofline. ``fallback`` says why an op does not run the format's own kernel:
    ``shape`` (the layer cannot take it), ``hw:dense`` or ``hw:csr`` (the hardware cannot run
    it, and that was the faster kernel it can run).
    """
    (fusion,) = _choices(fusion, fusion_models(), "fusion")
    (scope,) = _choices(scope, SCOPES, "scope")
    (cache,) = _choices(cache, CACHE_CONDITIONS, "cache condition")
    problem = prepare(trace, hardware, formats, batches, numerics)
    for acc in problem.accelerators:  # a warm bound needs cache levels: refused before work
        memory_pieces(acc, cache)
    rows = layer_arrays(problem, fusion, scope, cache)
    h, f, op = rows.h, rows.f, rows.op
    p = problem.pricing
    names = problem.trace.ops["name"].to_numpy(dtype=object)
    kinds = problem.trace.ops["kind"].to_numpy(dtype=object)
    hw_label = np.where(rows.kernel == KERNEL_CSR, "hw:csr", "hw:dense")
    why = np.where(p.shape_fallback[f, op], "shape",
                   np.where(p.needs_support[f, op] & rows.falls_back, hw_label, ""))
    # The unit that does the op's GEMM; ops without one (norms, softmax) use the vector cores.
    unit_names = np.where(rows.sparse_unit, "sparse_tensor",
                          np.where(rows.tensor_work, "tensor", "vector"))
    compute, memory = rows.compute_s, rows.memory_s
    return pd.DataFrame({
        "model": problem.trace.model,
        "hardware": np.array([a.name for a in problem.accelerators], dtype=object)[h],
        "format": np.array([x.name for x in problem.formats], dtype=object)[f],
        "batch": rows.batch,
        "fusion": fusion,
        "scope": scope,
        "op": names[op],
        "kind": kinds[op],
        "unit": unit_names,
        "fallback": why,
        "compute_s": compute,
        "memory_s": memory,
        "time_s": np.maximum(compute, memory),
        "bound": np.where(memory > compute, "memory", "compute"),
        "flops": rows.flops,
        "weight_bytes": rows.weight_bytes,
        "dram_bytes": rows.dram_bytes,
        "cache": cache,
    })


@dataclass(frozen=True, eq=False)
class LayerArrays:
    """:func:`evaluate_layers`' rows as arrays, before its DataFrame: one row per (design,
    op), designs in kernel order (:meth:`Problem.design_index`), each design's ops together
    in the trace's order. ``h``, ``f``: the row's hardware and format (indices into
    ``problem.accelerators`` and ``problem.formats``); ``design``: its design's number;
    ``op``: its op's position in ``trace.ops``; ``kernel``: the kernel the design runs
    (``KERNEL_*``); ``falls_back``: whether its hardware cannot run its format; ``sparse_unit``
    and ``tensor_work``: the op's GEMM FLOPs on the sparse tensor core, and on the tensor
    cores (the unit is ``sparse_tensor`` where the first holds, else ``tensor`` where the
    second does, else ``vector``); then the columns of :func:`evaluate_layers` of the same
    names (``batch`` as int64)."""

    h: np.ndarray
    f: np.ndarray
    design: np.ndarray
    op: np.ndarray
    kernel: np.ndarray
    falls_back: np.ndarray
    sparse_unit: np.ndarray
    tensor_work: np.ndarray
    batch: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    flops: np.ndarray
    weight_bytes: np.ndarray
    dram_bytes: np.ndarray


def layer_arrays(problem: Problem, fusion: str, scope: str, cache: str = "cold") -> LayerArrays:
    """:func:`evaluate_layers`' numbers for ``problem`` (:func:`prepare`) under one fusion
    model and scope, as arrays (:class:`LayerArrays`): what its DataFrame is made of, and what
    the energy and memory columns of ``dse.evaluate`` sum per design without it. ``fusion``,
    ``scope`` and ``cache`` already checked."""
    a = problem.arrays(scope)
    ops = a.ops
    h, f, b = problem.design_index()
    alt = pick_fallback(problem.totals(scope, fusion), fusion)
    falls_back = ~problem.native_ok[h, f]
    kernels = np.where(falls_back, np.where(alt == 1, KERNEL_CSR, KERNEL_DENSE),
                       KERNEL_OWN).astype(np.int64)
    fused_features = problem._fused_features(a, fusion)
    if problem.weight_share is None:
        compute, mem, mem_fused, fl, wb = K.per_op(
            problem.hw, kernels, problem.batches, a.tensor_flops, a.sparse_flops, a.csr_flops,
            a.weight_bytes, a.feature_bytes_unfused, fused_features, a.vector_flops)
    else:  # the weights read depend on the batch: one call per batch, as Problem.totals
        n_b = len(problem.batches)
        compute, mem, mem_fused, fl, wb = (np.empty((len(kernels), len(a.ops)))
                                           for _ in range(5))
        for i in range(n_b):
            part = K.per_op(problem.hw, kernels[i::n_b], problem.batches[i:i + 1],
                            a.tensor_flops, a.sparse_flops, a.csr_flops,
                            problem.weight_bytes(a, i), a.feature_bytes_unfused, fused_features,
                            a.vector_flops)
            for whole, piece in zip((compute, mem, mem_fused, fl, wb), part, strict=True):
                whole[i::n_b] = piece
    memory = (mem if fusion == "unfused" else mem_fused).ravel()
    features = a.feature_bytes_unfused if fusion == "unfused" else fused_features
    compute = compute.ravel()
    n_designs, n_ops = len(h), len(ops)
    d = np.repeat(np.arange(n_designs), n_ops)
    h, f, b = h[d], f[d], b[d]
    op = np.tile(ops, n_designs)
    k, j = kernels[d], np.tile(np.arange(n_ops), n_designs)
    sparse_unit = a.sparse_flops[k, f, j] > 0
    tensor_work = a.tensor_flops[k, f, j] > 0
    wb = wb.ravel()
    dram_bytes = wb + features[k, f, j] * problem.batches[b]
    if cache == "warm":  # the kernels priced the DRAM bound; each hardware's caches instead
        for i, acc in enumerate(problem.accelerators):
            rows = h == i
            memory[rows] = memory_time(dram_bytes[rows], acc, "warm")
    return LayerArrays(h=h, f=f, design=d, op=op, kernel=k, falls_back=falls_back[d],
                       sparse_unit=sparse_unit, tensor_work=tensor_work,
                       batch=problem.batches[b].astype(np.int64), compute_s=compute,
                       memory_s=memory, flops=fl.ravel(), weight_bytes=wb,
                       dram_bytes=dram_bytes)
