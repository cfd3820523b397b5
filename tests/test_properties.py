"""Invariants of the speed-of-light model, property-tested over random traces and hardware."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dse
from formats import Block, Unstructured
from tests.strategies import accelerators, any_formats, nm_formats, sparse_formats, traces
from workloads import PER_SAMPLE, Trace

TOL = 1e-12  # relative slack for floating-point summation order
props = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
batches = st.lists(st.integers(1, 512), min_size=1, max_size=3, unique=True)
scopes = st.sampled_from(dse.SCOPES)


def _latencies(trace, hardware, fmts, batch_sizes, scope):
    if scope == "gemm" and not trace.ops["prunable"].any():
        scope = "all"
    table = dse.evaluate(trace, hardware, fmts, batch_sizes, fusion=dse.FUSIONS, scope=scope)
    return table.set_index(["format", "batch", "fusion"])["latency_s"]


@props
@given(trace=traces(), hw=accelerators(), fmts=st.lists(any_formats, min_size=1, max_size=3),
       batch_sizes=batches, scope=scopes, factor=st.floats(1.0, 100.0))
def test_more_bandwidth_never_slower(trace, hw, fmts, batch_sizes, scope, factor):
    faster = replace(hw, dram_bandwidth_bytes_per_s=hw.dram_bandwidth_bytes_per_s * factor)
    before = _latencies(trace, hw, fmts, batch_sizes, scope)
    after = _latencies(trace, faster, fmts, batch_sizes, scope)
    assert (after <= before * (1 + TOL)).all()


@props
@given(trace=traces(), hw=accelerators(), fmts=st.lists(any_formats, min_size=1, max_size=3),
       batch_sizes=batches, scope=scopes, factor=st.floats(1.0, 100.0))
def test_more_tensor_peak_never_slower(trace, hw, fmts, batch_sizes, scope, factor):
    faster = replace(hw, tensor_flops_per_s={k: v * factor
                                             for k, v in hw.tensor_flops_per_s.items()})
    before = _latencies(trace, hw, fmts, batch_sizes, scope)
    after = _latencies(trace, faster, fmts, batch_sizes, scope)
    assert (after <= before * (1 + TOL)).all()


@props
@given(trace=traces(), hw=st.lists(accelerators(), min_size=1, max_size=2),
       fmts=st.lists(any_formats, min_size=1, max_size=3), batch_sizes=batches, scope=scopes)
def test_fusion_order(trace, hw, fmts, batch_sizes, scope):
    hw = [replace(a, name=f"hw{i}") for i, a in enumerate(hw)]
    if scope == "gemm" and not trace.ops["prunable"].any():
        scope = "all"
    table = dse.evaluate(trace, hw, fmts, batch_sizes, fusion=dse.FUSIONS, scope=scope)
    wide = table.pivot_table(index=["hardware", "format", "batch"], columns="fusion",
                             values="latency_s")
    assert (wide["fused_prefetched"] <= wide["fused"] * (1 + TOL)).all()
    assert (wide["fused"] <= wide["unfused"] * (1 + TOL)).all()


@props
@given(trace=traces(densities=False), hw=accelerators(), batch_sizes=batches, scope=scopes,
       block=st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
def test_zero_sparsity_never_beats_dense(trace, hw, batch_sizes, scope, block):
    # Holds while the vector cores are no faster than the tensor cores (tests/strategies.py),
    # and without checkpoint densities (which replace the format's 0%).
    latency = _latencies(trace, hw, [Block(block, 0.0), Unstructured(0.0)], batch_sizes, scope)
    table = latency.unstack("format")
    for column in table.columns:
        assert (table[column] >= table["dense"] * (1 - TOL)).all(), column


@props
@given(trace=traces(), hw=accelerators(), fmt=nm_formats(), batch_sizes=batches,
       scope=scopes)
def test_nm_speedup_bounded_by_m_over_n(trace, hw, fmt, batch_sizes, scope):
    if scope == "gemm" and not trace.ops["prunable"].any():
        scope = "all"
    table = dse.evaluate(trace, hw, fmt, batch_sizes, fusion=dse.FUSIONS, scope=scope)
    speedup = table.loc[table["format"] == fmt.name, "speedup"]
    assert (speedup <= fmt.m / fmt.n * (1 + TOL)).all()


@props
@given(trace=traces(), hw=accelerators(), fmt=any_formats, batch_sizes=batches)
def test_per_op_sums_at_least_whole_graph_max(trace, hw, fmt, batch_sizes):
    table = dse.evaluate(trace, hw, fmt, batch_sizes, fusion=dse.FUSIONS, scope="all")
    for row in table.itertuples():
        # Every fusion model's latency is at least the whole-graph roofline of its traffic.
        assert row.latency_s >= max(row.compute_s, row.memory_s) * (1 - TOL)
    layers = dse.evaluate_layers(trace, hw, fmt, batch_sizes, fusion="unfused", scope="all")
    per_design = layers.groupby(["format", "batch"])
    sums = per_design["time_s"].sum()
    whole = np.maximum(per_design["compute_s"].sum(), per_design["memory_s"].sum())
    assert (sums >= whole * (1 - TOL)).all()


@props
@given(trace=traces(), hw=accelerators(), fmt=sparse_formats, batch=st.integers(2, 256))
def test_batch_is_a_multiply(trace, hw, fmt, batch):
    """A trace evaluated at batch B equals the trace with per-sample columns times B at 1."""
    records = []
    for record in trace.to_json()["ops"]:
        for column in PER_SAMPLE:
            record[column] = record[column] * batch
        records.append(record)
    # The model input grows with the batch too: fold it into the first input dimension.
    shape = [trace.input_shape[0] * batch, *trace.input_shape[1:]]
    scaled = Trace.from_records("scaled", shape, records)
    a = dse.evaluate(trace, hw, fmt, batch, fusion=dse.FUSIONS, scope="all")
    b = dse.evaluate(scaled, hw, fmt, 1, fusion=dse.FUSIONS, scope="all")
    a, b = a.set_index(["format", "fusion"]), b.set_index(["format", "fusion"])
    np.testing.assert_allclose(a["latency_s"], b["latency_s"], rtol=1e-12)
    np.testing.assert_allclose(a["dram_bytes"], b["dram_bytes"], rtol=1e-12)
