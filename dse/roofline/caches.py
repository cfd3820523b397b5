"""The memory level a run's bytes come from: the cache-aware roofline (Ilic et al. 2014).

A **cold** run (caches flushed before it, as dse measures isolated kernels) fetches every byte
from DRAM, so its memory time is at least ``bytes / DRAM bandwidth``: the Sparsity Roofline's
bound, which every headline figure uses. Where a spec lists cache levels, the bytes also pass
each level on their way in, so the slowest of DRAM and those links bounds a cold run (a CPU
core's port beyond its L2 can be narrower than the socket's DRAM).

A **warm** run (back to back, as ops run inside a model) may find its data in the caches. Its
memory time is bounded by what the hierarchy can deliver at best, whatever the caches hold at
its start: with levels ``1..L`` of cumulative capacity ``C_i`` (fastest first) and bandwidths
``B_i``, and DRAM as level ``L + 1``,

    t >= max(bytes / B_1, max_i (bytes - C_i)^+ / B_{i+1})

because every byte passes through level 1, and at most ``C_i`` of them can sit in levels
``1..i``, so the rest comes through level ``i + 1``. Counting capacities cumulatively holds for
inclusive and exclusive (victim) caches alike. A working set that fits a level is bounded by
the faster levels' bandwidths only; one larger than every cache is bounded by DRAM for the
part that does not fit. Bandwidths must be peaks for this to be a bound.
"""

from __future__ import annotations

import numpy as np

from accelerator_models import Accelerator

__all__ = ["CACHE_CONDITIONS", "CacheError", "cold_seconds_per_byte", "memory_pieces",
           "memory_time"]

#: Conditions of a run: ``cold`` (DRAM) or ``warm`` (the cache hierarchy).
CACHE_CONDITIONS = ("cold", "warm")


class CacheError(ValueError):
    """A cache condition the hardware spec cannot bound; the message names the fix."""


def cold_seconds_per_byte(acc: Accelerator) -> float:
    """A cold run's least seconds per byte on ``acc``, as a plain float (the evaluator asks
    for it on every design). Every byte comes from DRAM and passes every level on its way in,
    so the slowest link bounds it (a CPU core's port beyond L2 can be narrower than the
    socket's DRAM)."""
    return max([1.0 / acc.dram_bandwidth_bytes_per_s,
                *[1.0 / c.bandwidth_bytes_per_s for c in acc.cache_levels]])


def memory_pieces(acc: Accelerator, cache: str = "cold") -> tuple[np.ndarray, np.ndarray]:
    """``(capacity, seconds per byte)`` of each affine piece of the memory-time bound: the
    bound is ``max_p (bytes - capacity[p])^+ * seconds_per_byte[p]``."""
    if cache not in CACHE_CONDITIONS:
        raise CacheError(f"unknown cache condition {cache!r}; use cold or warm")
    dram = 1.0 / acc.dram_bandwidth_bytes_per_s
    per_level = [1.0 / c.bandwidth_bytes_per_s for c in acc.cache_levels]
    if cache == "cold":
        return np.zeros(1), np.array([cold_seconds_per_byte(acc)])
    if not acc.cache_levels:
        raise CacheError(f"hardware {acc.name!r} has no [cache] levels, so a warm run has no "
                         "bound; add cache.l1_bytes and cache.l1_bandwidth_bytes_per_s (and "
                         "further levels) with their sources, or evaluate the run cold")
    capacity = np.concatenate([[0.0], np.cumsum([c.capacity_bytes for c in acc.cache_levels])])
    rates = np.array([*per_level, dram])
    return capacity, rates


def memory_time(nbytes, acc: Accelerator, cache: str = "cold") -> np.ndarray:
    """The least time in seconds the memory system of ``acc`` needs to move ``nbytes`` (each
    byte once) in a ``cold`` or ``warm`` run (element-wise over arrays)."""
    capacity, rates = memory_pieces(acc, cache)
    x = np.asarray(nbytes, dtype=np.float64)
    pieces = np.maximum(x[..., None] - capacity, 0.0) * rates
    return pieces.max(axis=-1)
