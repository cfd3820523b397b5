"""The numba kernels against the plain-Python reference (tests/naive.py) and the numpy one.

``test_reference_without_jit`` runs this file again in a subprocess with NUMBA_DISABLE_JIT=1, so
the kernel bodies also run (and are covered) as plain Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dse
from dse.roofline import kernels as _kernels
from tests import naive
from tests.strategies import accelerators, any_formats, traces

NO_JIT = os.environ.get("NUMBA_DISABLE_JIT") == "1"
EXAMPLES = 10 if NO_JIT else 80
REL = 1e-9

design_settings = settings(max_examples=EXAMPLES, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow])


@design_settings
@given(trace=traces(), hardware=st.lists(accelerators(), min_size=1, max_size=2),
       fmts=st.lists(any_formats, min_size=1, max_size=3),
       batches=st.lists(st.integers(1, 256), min_size=1, max_size=2, unique=True),
       scope=st.sampled_from(dse.SCOPES))
def test_totals_match_plain_python(trace, hardware, fmts, batches, scope):
    hardware = [replace(a, name=f"hw{i}") for i, a in enumerate(hardware)]
    if scope == "gemm" and not trace.ops["prunable"].any():
        with pytest.raises(dse.EvaluationError, match="no prunable"):
            dse.evaluate(trace, hardware, fmts, batches, fusion=dse.FUSIONS, scope=scope)
        return
    table = dse.evaluate(trace, hardware, fmts, batches, fusion=dse.FUSIONS, scope=scope)
    by_name = {a.name: a for a in hardware}
    by_format = {f.name: f for f in fmts} | {"dense": dse.roofline.evaluator.parse_format("dense")}
    for row in table.itertuples():
        expected, fallback = naive.naive_evaluate(trace, by_name[row.hardware],
                                                  by_format[row.format], row.batch, scope,
                                                  row.fusion)
        assert row.latency_s == pytest.approx(expected[row.fusion], rel=REL)
        assert row.compute_s == pytest.approx(expected["compute"], rel=REL)
        memory = expected["memory_unfused" if row.fusion == "unfused" else "memory_fused"]
        assert row.memory_s == pytest.approx(memory, rel=REL)
        assert row.weight_bytes == pytest.approx(expected["weight_bytes"], rel=REL)
        assert row.flops == pytest.approx(expected["flops"], rel=REL)
        if row.hw_fallback:
            assert row.hw_fallback == fallback


@design_settings
@given(trace=traces(), hardware=accelerators(), fmt=any_formats, batch=st.integers(1, 64),
       fusion=st.sampled_from(dse.FUSIONS))
def test_layers_match_plain_python(trace, hardware, fmt, batch, fusion):
    table = dse.evaluate_layers(trace, hardware, fmt, batch, fusion=fusion, scope="all")
    table = table[table["format"] == fmt.name]
    _, fallback = naive.naive_evaluate(trace, hardware, fmt, batch, "all", fusion)
    costs = naive.naive_costs(trace, hardware, fmt, batch, fallback)
    assert list(table["op"]) == [c.name for c in costs]
    for row, cost in zip(table.itertuples(), costs, strict=True):
        memory = cost.memory if fusion == "unfused" else cost.memory_fused
        assert row.compute_s == pytest.approx(cost.compute, rel=REL)
        assert row.memory_s == pytest.approx(memory, rel=REL)
        assert row.fallback == cost.fallback
        if cost.flops > 0:  # ops without a GEMM report the vector unit
            assert row.unit == cost.unit


@design_settings
@given(trace=traces(), hardware=st.lists(accelerators(), min_size=1, max_size=3),
       fmts=st.lists(any_formats, min_size=1, max_size=4),
       batches=st.lists(st.integers(1, 512), min_size=1, max_size=3, unique=True))
def test_numpy_reference_matches_kernel(trace, hardware, fmts, batches):
    problem = dse.roofline.evaluator.prepare(trace, hardware, fmts, batches, dse.Numerics())
    p = problem.pricing
    expected = naive.numpy_design_totals(
        problem.hw, problem.native_ok, problem.batches, p.flops, p.weight_bytes, p.unit,
        p.needs_support, p.csr_weight_bytes, p.dense_flops, p.dense_weight_bytes,
        p.feature_bytes_unfused, p.feature_bytes_fused, p.input_bytes_unfused,
        p.input_bytes_fused, p.input_read, p.vector_flops, np.arange(len(trace), dtype=np.int64))
    totals = problem.totals("all")
    for column, fusion in enumerate(dse.FUSIONS):
        latency, _ = dse.roofline.evaluator.fusion_latency(totals, fusion)
        np.testing.assert_allclose(latency.min(axis=1), expected[:, column], rtol=REL)


def test_kernel_column_layout():
    # The evaluator reads the kernel's columns by name; they must be distinct and in range.
    columns = [_kernels.T_UNFUSED, _kernels.T_FUSED, _kernels.T_COMPUTE,
               _kernels.T_MEMORY_UNFUSED, _kernels.T_MEMORY_FUSED, _kernels.T_WEIGHT_BYTES,
               _kernels.T_FLOPS, _kernels.T_MEMBOUND_UNFUSED, _kernels.T_MEMBOUND_FUSED,
               _kernels.T_FEATURES_UNFUSED, _kernels.T_FEATURES_FUSED]
    assert sorted(columns) == list(range(_kernels.TOTAL_COLUMNS))


def test_reference_without_jit():
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-k", "not test_reference_without_jit", str(Path(__file__)), "tests/test_golden.py"],
        cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


@settings(max_examples=10, deadline=None)
@given(trace=traces(), hardware=st.lists(accelerators(), min_size=1, max_size=3),
       fmts=st.lists(any_formats, min_size=1, max_size=4),
       batches=st.lists(st.integers(1, 512), min_size=1, max_size=3, unique=True))
def test_parallel_and_serial_kernels_agree(trace, hardware, fmts, batches):
    # Small calls run the serial kernel; both compiled variants must give identical numbers.
    problem = dse.roofline.evaluator.prepare(trace, hardware, fmts, batches, dse.Numerics())
    a = problem.arrays("all")
    args = (problem.hw, problem.native_ok, a.fallback_ops, problem.batches, a.tensor_flops,
            a.sparse_flops, a.csr_flops, a.weight_bytes, a.feature_bytes_unfused,
            a.feature_bytes_fused, a.vector_flops)
    np.testing.assert_array_equal(_kernels._design_totals_parallel(*args),
                                  _kernels._design_totals_serial(*args))
    kernels = np.zeros(problem.hw.shape[0] * len(problem.formats) * len(batches), np.int64)
    per_op_args = (problem.hw, kernels, *args[3:])
    for x, y in zip(_kernels._per_op_parallel(*per_op_args), _kernels._per_op_serial(*per_op_args),
                    strict=True):
        np.testing.assert_array_equal(x, y)
