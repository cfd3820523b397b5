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

import numpy as np
import pandas as pd

import accelerator_models
from accelerator_models import Accelerator
from formats import Format
from workloads import MAX_BATCH, Trace, load_trace

from .roofline import DEFAULT_NUMERICS, Numerics, evaluate_layer_frames
from .roofline.energy import accelerator_table, energy_columns
from .roofline.layer_sums import layer_rows, with_columns
from .roofline.memory import memory_columns

# The number types a result was priced in: defined beside Numerics, so that the engines below
# this facade (dse.explore's sweep) add them too; re-exported here with the other columns.
from .roofline.numerics import DTYPE_COLUMNS, with_dtype_columns

__all__ = ["DTYPE_COLUMNS", "accelerators", "language_model_columns", "with_dtype_columns",
           "with_energy_and_memory", "with_language_model_columns"]


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


def _language_model_values(table: pd.DataFrame, trace: Trace, value_bytes: float,
                           kv_dtype_bytes: float | None) -> dict[str, object]:
    """:func:`language_model_columns`' columns, by name, in the order it sets them."""
    p = trace.provenance
    kvb = value_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    decode = p["phase"] == "decode"
    latency = table["latency_s"]
    nothing = pd.Series(float("nan"), index=table.index)
    batch = table["batch"].to_numpy(dtype=np.float64)
    weights = (table["weight_storage_bytes"].to_numpy(dtype=np.float64)
               + (p["resident_weight_elems"] - trace.params) * value_bytes)
    kv_per_request = p["kv_cache_elems"] * kvb
    per_request = table["activation_peak_bytes"].to_numpy(dtype=np.float64) / batch \
        + kv_per_request
    peak = weights + per_request * batch
    capacity = table["dram_capacity_bytes"].to_numpy(dtype=np.float64)
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
