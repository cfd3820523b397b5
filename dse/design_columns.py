"""Columns beside a design's bound that ``dse evaluate``, ``dse compare`` and ``dse report``
print and write: energy, power and memory (:func:`with_energy_and_memory`), and the figures of
a language-model step (:func:`language_model_columns`): tokens/s, time to first token, the KV
cache and what fits in DRAM.

:func:`dse.evaluate` returns them all; these add them to the bound alone:

>>> import dse
>>> from dse.design_columns import with_energy_and_memory
>>> table = dse.roofline.evaluate("toy_hybrid", "a100", ["2:4"])
>>> more = with_energy_and_memory(table, "toy_hybrid", "a100", ["2:4"], [1], ["unfused"], "gemm")
>>> "energy_per_inference_j" in more, "peak_memory_bytes" in more
(True, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

import accelerator_models
from accelerator_models import Accelerator
from formats import Dense, Format
from workloads import MAX_BATCH, Trace, load_trace

from .roofline import DEFAULT_NUMERICS, Numerics, evaluate_layer_frames
from .roofline.caches import memory_pieces
from .roofline.energy import (
    TRAFFIC_SUMS,
    accelerator_table,
    energy_columns,
    energy_from_sums,
    op_figures,
    traffic_arrays,
)
from .roofline.evaluator import evaluate_designs, layer_arrays, parsed_format, prepare
from .roofline.layer_sums import group_sums, layer_rows, with_columns
from .roofline.memory import fixed_weight_bytes, memory_columns, memory_from_stored

# The number types a result was priced in: defined beside Numerics, so that the engines below
# this facade (dse.explore's sweep) add them too; re-exported here with the other columns.
from .roofline.numerics import DTYPE_COLUMNS, with_dtype_columns
from .roofline.pricing import KERNEL_CSR, weight_read_share

__all__ = ["DTYPE_COLUMNS", "accelerators", "design_table", "language_model_columns",
           "with_dtype_columns", "with_energy_and_memory", "with_language_model_columns"]


def accelerators(hardware: Accelerator | str | Sequence[Accelerator | str]) -> list[Accelerator]:
    """Every accelerator ``hardware`` names, loaded (catalog names and spec files)."""
    items = [hardware] if isinstance(hardware, Accelerator | str) else list(hardware)
    return [h if isinstance(h, Accelerator) else accelerator_models.load(h) for h in items]


def with_energy_and_memory(table: pd.DataFrame, trace: Trace | str,
                           hardware: Accelerator | str | Sequence[Accelerator | str],
                           formats: Sequence[Format | str], batches: Sequence[int],
                           fusions: Sequence[str], scope: str | Sequence[str],
                           numerics: Numerics = DEFAULT_NUMERICS) -> pd.DataFrame:
    """``table`` (the design rows :func:`dse.roofline.evaluate` gives for ``trace``,
    ``hardware``, ``formats``, ``batches``, ``fusions`` and ``scope``, one or several) with the
    energy and power columns (``energy_per_inference_j``, ``avg_power_w``, ``power_capped``,
    ...; joules and watts) and the memory columns (``peak_memory_bytes``, ``fits``,
    ``largest_batch_that_fits``). :func:`dse.evaluate` returns them already."""
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    accs = accelerators(hardware)
    scopes = [scope] if isinstance(scope, str) else list(scope)
    layers = evaluate_layer_frames(trace, accs, list(formats), list(batches), list(fusions),
                                   scopes, numerics)
    # energy_frame, then memory_frame: one join of the layers to the designs serves both.
    by_name = accelerator_table(accs)
    rows = layer_rows(table, layers, trace)
    energy = energy_columns(table, layers, trace, by_name, numerics, rows)
    return with_columns(table, energy | memory_columns(table, layers, trace, by_name, numerics,
                                                       rows))


def with_language_model_columns(table: pd.DataFrame, trace: Trace,
                                numerics: Numerics = DEFAULT_NUMERICS) -> pd.DataFrame:
    """:func:`language_model_columns` in ``numerics``' dtypes, with ``weight_dtype`` and
    ``kv_dtype`` naming them; ``table`` as :func:`with_energy_and_memory` returns it."""
    columns = _language_model_values(table, trace, numerics.value_bytes,
                                     numerics.kv_value_bytes)
    return with_columns(table, columns | {"weight_dtype": numerics.weight_label,
                                          "kv_dtype": numerics.kv_dtype or numerics.dtype})


def language_model_columns(table: pd.DataFrame, trace: Trace, value_bytes: float,
                           kv_dtype_bytes: float | None = None) -> pd.DataFrame:
    """The designs of a language-model step (``workloads.llm``) with ``phase``, ``context``,
    ``tokens_per_s`` and ``time_per_token_s`` (decode: each step gives every request one token),
    ``ttft_s`` (prefill: the prompt and the first token), ``kv_bytes_per_token``,
    ``kv_cache_bytes`` (the batch's, at the context) and ``params`` (every parameter);
    ``weight_bytes`` is already there: the weights a step reads, in the design's format. The KV
    cache is stored in ``kv_dtype_bytes`` (default: ``value_bytes``, the compute dtype's).
    Where ``table`` is calibrated (``expected_latency_s``), the expectation's
    ``expected_tokens_per_s``, ``expected_time_per_token_s`` and ``expected_ttft_s`` too.

    The memory columns (``peak_memory_bytes``, ``fits``, ``largest_batch_that_fits``, also
    as ``max_batch``) are redone
    with what the trace cannot hold: the KV cache is resident beside the weights and
    activations, and so is an untied embedding table, which a step does not read (the lookup
    reads rows) and the trace's weights therefore leave out."""
    return with_columns(table, _language_model_values(table, trace, value_bytes, kv_dtype_bytes))


def _language_model_values(table: pd.DataFrame | dict[str, object], trace: Trace,
                           value_bytes: float,
                           kv_dtype_bytes: float | None) -> dict[str, object]:
    """:func:`language_model_columns`' columns, by name, in the order it sets them; ``table``
    a DataFrame or its columns by name (arrays)."""
    p = trace.provenance
    kvb = value_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    decode = p["phase"] == "decode"
    latency = table["latency_s"]
    batch = np.asarray(table["batch"], dtype=np.float64)
    nothing = np.full(len(batch), float("nan"))
    weights = (np.asarray(table["weight_storage_bytes"], dtype=np.float64)
               + (p["resident_weight_elems"] - _params(trace)) * value_bytes)
    kv_per_request = p["kv_cache_elems"] * kvb
    per_request = np.asarray(table["activation_peak_bytes"], dtype=np.float64) / batch \
        + kv_per_request
    peak = weights + per_request * batch
    capacity = np.asarray(table["dram_capacity_bytes"], dtype=np.float64)
    known = ~np.isnan(capacity)
    with np.errstate(invalid="ignore"):
        largest = np.clip(np.floor((capacity - weights) / per_request), 0, MAX_BATCH)
    columns = {
        "phase": p["phase"], "context": p["context"],
        "tokens_per_s": table["batch"] / latency if decode else nothing,
        "time_per_token_s": latency if decode else nothing,
        "ttft_s": nothing if decode else latency,
        "kv_bytes_per_token": p["kv_elems_per_token"] * kvb,
        "kv_cache_bytes": batch * kv_per_request,
        "params": p["params"],
        "weight_storage_bytes": weights,
        "peak_memory_bytes": peak}
    if "expected_latency_s" in table:  # calibrated: the expectation's side of each rate
        expected = table["expected_latency_s"]
        columns.update({
            "expected_tokens_per_s": table["batch"] / expected if decode else nothing,
            "expected_time_per_token_s": expected if decode else nothing,
            "expected_ttft_s": nothing if decode else expected})
    largest = pd.arrays.IntegerArray(np.where(known, largest, 0).astype(np.int64), ~known)
    columns.update({
        "fits": pd.arrays.BooleanArray(np.where(known, peak <= capacity, False), ~known),
        "largest_batch_that_fits": largest,
        "max_batch": largest.copy()})  # issue 24's name for it
    return columns


def design_table(trace: Trace, accs: Sequence[Accelerator], formats: Sequence[Format | str],
                 batches: Sequence[int], fusions: Sequence[str], scopes: Sequence[str],
                 numerics: Numerics = DEFAULT_NUMERICS,
                 language: bool = False) -> pd.DataFrame | None:
    """:func:`dse.evaluate`'s table (uncalibrated, label columns as strings), built at once
    from arrays: the bound (:func:`dse.roofline.evaluate_designs`), the energy and memory
    columns, for a language model (``language``) its columns, and the number types; the same
    values, dtypes and column order, bit for bit, as :func:`dse.roofline.evaluate` followed by
    :func:`with_energy_and_memory`, :func:`with_language_model_columns` and
    :func:`with_dtype_columns`.

    The layer rows are the arrays of ``evaluate_layers``
    (:func:`dse.roofline.evaluator.layer_arrays`), never a DataFrame: each design's rows are
    its own block of them, so its sums are taken by position (pandas' own sums,
    :func:`~dse.roofline.layer_sums.group_sums`), where the frames are joined by their
    printed keys. That holds where the keys name one
    design each; None where they may not (two accelerators of one name, two formats of one
    name, a batch size twice, two ops of one name) or where a sum is NaN, and the caller
    takes the frames' path, which gives (or refuses) the same."""
    bound = evaluate_designs(trace, list(accs), list(formats), list(batches),
                             fusion=list(fusions), scope=list(scopes), numerics=numerics)
    problem = prepare(trace, list(accs), list(formats), list(batches), numerics)
    hw_names = [a.name for a in problem.accelerators]
    fmt_names = [x.name for x in problem.formats]
    if (len(set(hw_names)) < len(hw_names) or len(set(fmt_names)) < len(fmt_names)
            or len(set(problem.batches.tolist())) < len(problem.batches)
            or not _unique_op_names(trace)):
        return None
    by_name = accelerator_table(problem.accelerators)
    for acc in problem.accelerators:  # as evaluate_layers checks them (cold: always there)
        memory_pieces(acc, "cold")
    is_prunable = op_figures(trace)["prunable"]
    formats_run = [(i, parsed_format(name)) for i, name in enumerate(fmt_names)]
    parts, labels, weights, kept = [], [], [], []
    offset, n_designs = 0, len(problem.design_index()[0])
    for scope in dict.fromkeys(scopes):  # the rows of evaluate_designs: scope, fusion, design
        for fusion in dict.fromkeys(fusions):
            rows = layer_arrays(problem, fusion, scope)
            p = problem.pricing
            own = ~(p.shape_fallback[rows.f, rows.op]
                    | (p.needs_support[rows.f, rows.op] & rows.falls_back
                       & (rows.kernel != KERNEL_CSR)))
            sparse_formats = [(fmt, (rows.f == i) & own) for i, fmt in formats_run
                              if not isinstance(fmt, Dense)]
            batch = rows.batch.astype(np.float64)
            traffic = traffic_arrays(trace, numerics, rows.op, batch, sparse_formats,
                                     ~rows.sparse_unit & rows.tensor_work, rows.sparse_unit,
                                     ~rows.sparse_unit & ~rows.tensor_work, rows.flops,
                                     rows.weight_bytes, rows.dram_bytes)
            # The memory columns' sum: the weights stored, over the prunable rows alone; an
            # MoE's experts all resident.
            prunable = is_prunable[rows.op]
            stored = rows.weight_bytes
            share = weight_read_share(trace, rows.op[prunable], batch[prunable])
            if share is not None:
                stored = stored.copy()
                stored[prunable] = stored[prunable] / share
            parts.append(np.column_stack([traffic[c] for c in TRAFFIC_SUMS]))
            labels.append(rows.design + offset)
            weights.append(stored[prunable])
            kept.append(prunable)
            offset += n_designs
    n = len(bound)
    if offset != n:
        return None
    label = np.concatenate(labels) if len(labels) > 1 else labels[0]
    sums = group_sums(np.concatenate(parts) if len(parts) > 1 else parts[0], label, n)
    if np.isnan(sums).any():
        return None  # the frames' path refuses it, naming the design
    prunable = np.concatenate(kept) if len(kept) > 1 else kept[0]
    stored = group_sums(np.concatenate(weights)[:, None], label[prunable], n)[:, 0]
    stored[np.bincount(label[prunable], minlength=n) == 0] = np.nan  # no prunable op
    if is_prunable.any() and np.isnan(stored).any():
        return None
    columns = dict(bound.columns)
    hardware = columns["hardware"]
    batch = columns["batch"].astype(np.float64)
    columns.update(energy_from_sums({c: sums[:, i] for i, c in enumerate(TRAFFIC_SUMS)},
                                    hardware, columns["latency_s"], batch, by_name, numerics))
    columns.update(memory_from_stored(fixed_weight_bytes(trace, numerics), stored, batch,
                                      columns["fusion"], hardware, trace, by_name, numerics))
    if language:
        columns.update(_language_model_values(columns, trace, numerics.value_bytes,
                                              numerics.kv_value_bytes))
    dtypes = {"dtype": numerics.dtype, "vector_dtype": numerics.vector_dtype,
              "csr_dtype": numerics.csr_dtype, "index_bytes": numerics.index_width_bytes,
              "weight_dtype": numerics.weight_label}
    if language:
        dtypes["kv_dtype"] = numerics.kv_dtype or numerics.dtype
    for name, value in dtypes.items():  # last, in this order
        columns.pop(name, None)
        columns[name] = value
    return _frame(columns, n)


@lru_cache(maxsize=64)
def _params(trace: Trace):
    """``trace.params`` (a sum over its ops, each time it is read), once per trace (read-only,
    keyed by identity as the pricing's caches are)."""
    return trace.params


@lru_cache(maxsize=64)
def _unique_op_names(trace: Trace) -> bool:
    """Whether every op of ``trace`` (read-only) has a name of its own."""
    return bool(pd.Index(trace.ops["name"]).is_unique)


def _frame(columns: dict[str, object], n: int) -> pd.DataFrame:
    """``pd.DataFrame(columns)`` (``n`` rows), built without inferring each column's dtype
    again where that is known to give the same frame (:func:`_direct_frames`): strings become
    pandas' string arrays (each distinct column built once per process and copied: the copy
    shares pandas' immutable storage), scalars arrays of their dtype, and the block manager is
    made from the arrays as they are. Anything else (another object, more than
    ``SMALL_TABLE_ROWS`` rows, a pandas not checked) goes through ``pd.DataFrame``."""
    if n > SMALL_TABLE_ROWS or not _direct_frames():
        return pd.DataFrame(columns)
    return _direct_frame(columns, n)


def _direct_frame(columns: dict[str, object], n: int) -> pd.DataFrame:
    """:func:`_frame`'s direct path (``pd.DataFrame`` where a column is not of a known kind)."""
    storage = pd.StringDtype(na_value=np.nan).storage  # that of the strings pandas infers now
    arrays = []
    for value in columns.values():
        if isinstance(value, np.ndarray):
            if value.dtype == object:
                values = tuple(value.tolist())
                if not all(type(v) is str for v in values):
                    return pd.DataFrame(columns)
                value = _strings(values, storage).copy()
            elif value.dtype.kind not in "fib":
                return pd.DataFrame(columns)
        elif isinstance(value, str):
            value = _strings((value,) * n, storage).copy()
        elif type(value) in (int, float):
            value = np.full(n, value)
        elif not isinstance(value, pd.arrays.BooleanArray | pd.arrays.IntegerArray):
            return pd.DataFrame(columns)
        arrays.append(value)
    return pd.DataFrame._from_arrays(arrays, _names(tuple(columns), storage),
                                     pd.RangeIndex(n), verify_integrity=False)


#: Tables of at most this many rows take :func:`_frame`'s direct path.
SMALL_TABLE_ROWS = 64


@lru_cache(maxsize=1024)
def _strings(values: tuple[str, ...], storage: str) -> pd.api.extensions.ExtensionArray:
    """``values`` as the string array pandas infers for them (``str``, in ``storage``), built
    once: callers take a copy."""
    return pd.array(np.array(values, dtype=object),
                    dtype=pd.StringDtype(storage, na_value=np.nan))


@lru_cache(maxsize=256)
def _names(names: tuple[str, ...], storage: str) -> pd.Index:
    """The column index ``pd.DataFrame`` makes of ``names`` with strings in ``storage``
    (immutable, so shared)."""
    return pd.Index(list(names))


_DIRECT: list[bool] = []  # [whether _frame's direct path gives pd.DataFrame's frame]


def _direct_frames() -> bool:
    """Whether pandas infers strings as its ``str`` dtype (the default since pandas 3) and
    :func:`_frame`'s direct path gives what ``pd.DataFrame`` gives on a probe with every kind
    of column a design table has (checked once per process; the option, every call)."""
    try:
        from pandas._config import using_string_dtype
    except ImportError:
        return False
    if not using_string_dtype():
        return False
    if not _DIRECT:
        probe = {"s": np.array(["a", "", "b"], dtype=object), "c": "fp16", "i": 7, "x": 0.5,
                 "f": np.array([1.0, np.nan, -0.0]), "n": np.array([1, 2, 3]),
                 "b": np.array([True, False, True]),
                 "k": pd.arrays.BooleanArray(np.array([True, False, False]),
                                             np.array([False, False, True])),
                 "m": pd.arrays.IntegerArray(np.array([3, 0, 1]), np.array([False, True, False]))}
        try:
            mine, theirs = _direct_frame(probe, 3), pd.DataFrame(probe)
            pd.testing.assert_frame_equal(mine, theirs, check_exact=True)
            same = (type(mine.index) is type(theirs.index)
                    and mine.columns.dtype == theirs.columns.dtype
                    and all(type(mine[c].array) is type(theirs[c].array)
                            and mine[c].dtype == theirs[c].dtype for c in probe)
                    and mine._mgr.nblocks == theirs._mgr.nblocks)
        except Exception:  # another pandas: pd.DataFrame serves
            same = False
        _DIRECT.append(same)
    return _DIRECT[0]
