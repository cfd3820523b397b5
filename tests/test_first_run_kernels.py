"""What a first run compiles (issue 27): the default `dse search` prices its small space in
numpy and never imports numba; a search past that size, on an empty numba cache, compiles the
totals kernel once (one signature of `_accumulate`, the serial totals kernel) and nothing else;
per-op costs of small grids come from numpy, bit for bit the compiled loop's, and totals in
numpy (`kernels.numpy_only`) equal the compiled kernel's to 1e-12."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dse
from dse.roofline import kernels as K

ROOT = Path(__file__).resolve().parents[1]

_SEARCH = """
import json, sys
sys.path.insert(0, {root!r})
import search.problem
search.problem.NUMPY_STUDY_OP_EVALS = {numpy_op_evals}
from dse.cli.main import main
code = main(["search", "--target", "1.3x_over_2:4"])
print("LOADED", json.dumps(sorted(m for m in ("numba", "llvmlite", "scipy") if m in sys.modules)))
import dse.roofline.kernels as K
names = ("_accumulate", "_design_totals_serial", "_design_totals_parallel", "_per_op_serial",
         "_per_op_parallel")
if "numba" in sys.modules:  # reading them would load the kernels
    print("SIGNATURES", json.dumps({{n: len(getattr(K, n).signatures) for n in names}}))
sys.exit(code)
"""


def _search(tmp_path, numpy_op_evals):
    """The default search in a new process on an empty numba cache, its study priced in numpy
    up to ``numpy_op_evals`` op-evaluations; (run, cache folder, modules it loaded)."""
    cache = tmp_path / "numba"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    script = _SEARCH.format(root=str(ROOT), numpy_op_evals=numpy_op_evals)
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("LOADED "))
    return run, cache, json.loads(line.split(" ", 1)[1])


def test_default_search_never_loads_numba(tmp_path):
    """86 designs of two models of 53 and 59 GEMMs: ~10,000 op-evaluations, priced in numpy.
    numba, llvmlite and scipy (which numba's array maths imports) are never imported, nothing
    is compiled or cached, and no first-run note is printed: nothing pauses."""
    from search.problem import NUMPY_STUDY_OP_EVALS

    run, cache, loaded = _search(tmp_path, NUMPY_STUDY_OP_EVALS)
    assert loaded == []
    assert not list(cache.rglob("*.nbi"))
    assert "compiling" not in run.stderr and "first run took" not in run.stderr


def test_first_compiled_search_compiles_only_the_serial_totals_kernel(tmp_path):
    """A fresh cache, the same search priced by numba (no study in numpy): one signature of
    the sums (not one per kernel index, as the literal indices gave: three), the serial
    totals kernel, no per-op kernel (numpy at this size), no parallel kernel (86 designs);
    the cache folder holds those two functions only."""
    run, cache, loaded = _search(tmp_path, 0)
    assert "numba" in loaded
    line = next(x for x in run.stdout.splitlines() if x.startswith("SIGNATURES "))
    assert json.loads(line.split(" ", 1)[1]) == {
        "_accumulate": 1, "_design_totals_serial": 1, "_design_totals_parallel": 0,
        "_per_op_serial": 0, "_per_op_parallel": 0}
    indexes = sorted(p.name.split("-")[0] for p in cache.rglob("*.nbi"))
    assert indexes == ["kernels._accumulate", "kernels._design_totals_serial"]
    assert "this first run took" in run.stderr


def test_first_run_note_finds_numbas_cache_folder_without_importing_numba():
    from dse.cli import first_run

    assert first_run._cache_folder() == K._design_totals_serial._cache._cache_path
    code = "import sys\nimport dse.cli.first_run\nprint('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"


def _totals_inputs():
    """One hardware, one format, batch 2, two ops; dyadic numbers, so every sum is exact in
    any order. Kernel 0 (own) is hand-computed below; kernels 1 (dense) and 2 (CSR) differ
    from it so a fallback shows which one each slot priced."""
    hw = np.array([[0.5, 0.25, 0.125, 1.0, 2.0]])  # inv bw, tensor, sparse, csr, vector
    batches = np.array([2.0])

    def per_kernel(own, dense, csr):
        return np.array([own, dense, csr], dtype=np.float64)[:, None, :]

    ft = per_kernel([4, 0], [4, 8], [0, 0])
    fs = per_kernel([0, 8], [0, 0], [0, 0])
    fc = per_kernel([0, 0], [0, 0], [4, 8])
    wb = per_kernel([6, 4], [12, 8], [12, 8])
    fu = per_kernel([1, 2], [1, 2], [1, 2])
    ff = per_kernel([0, 1], [0, 1], [0, 1])
    vflops = np.array([0.0, 1.0])
    return hw, batches, (ft, fs, fc, wb, fu, ff, vflops)


# By hand. Batch 2 times the inverse rates: s_tensor 0.5, s_sparse 0.25, s_csr 2, s_vector 4;
# c = max(ft*0.5 + fs*0.25, fc*2 + v*4), m = (wb + fu*2) * 0.5, fm = (wb + ff*2) * 0.5.
# Own: op 0 c = 2, m = 4, fm = 3; op 1 c = max(2, 4) = 4, m = 4, fm = 3.
OWN = {K.T_UNFUSED: 4.0 + 4.0, K.T_FUSED: 3.0 + 4.0, K.T_COMPUTE: 6.0,
       K.T_MEMORY_UNFUSED: 8.0, K.T_MEMORY_FUSED: 6.0, K.T_WEIGHT_BYTES: 10.0,
       K.T_FLOPS: (4.0 + 8.0) * 2, K.T_MEMBOUND_UNFUSED: 1.0, K.T_MEMBOUND_FUSED: 1.0,
       K.T_FEATURES_UNFUSED: (1.0 + 2.0) * 2, K.T_FEATURES_FUSED: 1.0 * 2}
# Dense: op 0 c = 2, m = 7, fm = 6; op 1 c = max(4, 4) = 4, m = 6, fm = 5.
DENSE = {K.T_UNFUSED: 7.0 + 6.0, K.T_FUSED: 6.0 + 5.0, K.T_COMPUTE: 6.0,
         K.T_MEMORY_UNFUSED: 13.0, K.T_MEMORY_FUSED: 11.0, K.T_WEIGHT_BYTES: 20.0,
         K.T_FLOPS: 24.0, K.T_MEMBOUND_UNFUSED: 2.0, K.T_MEMBOUND_FUSED: 2.0,
         K.T_FEATURES_UNFUSED: 6.0, K.T_FEATURES_FUSED: 2.0}
# CSR: op 0 c = 4*2 = 8, m = 7, fm = 6; op 1 c = 8*2 + 1*4 = 20, m = 6, fm = 5.
CSR = {K.T_UNFUSED: 8.0 + 20.0, K.T_FUSED: 8.0 + 20.0, K.T_COMPUTE: 28.0,
       K.T_MEMORY_UNFUSED: 13.0, K.T_MEMORY_FUSED: 11.0, K.T_WEIGHT_BYTES: 20.0,
       K.T_FLOPS: 24.0, K.T_MEMBOUND_UNFUSED: 0.0, K.T_MEMBOUND_FUSED: 0.0,
       K.T_FEATURES_UNFUSED: 6.0, K.T_FEATURES_FUSED: 2.0}


def _row(values):
    return [values[c] for c in range(K.TOTAL_COLUMNS)]


@pytest.mark.parametrize("kernel", ["_design_totals_serial", "_design_totals_parallel",
                                    "_design_totals_numpy"])
def test_totals_by_hand_own_and_fallback(kernel):
    hw, batches, arrays = _totals_inputs()
    run = getattr(K, kernel)
    native = run(hw, np.array([[True]]), np.array([1], np.int64), batches, *arrays)
    assert native.tolist() == [[_row(OWN), _row(OWN)]]  # slot 1 a copy where nothing falls back
    no_op_needs_it = run(hw, np.array([[False]]), np.array([0], np.int64), batches, *arrays)
    assert no_op_needs_it.tolist() == [[_row(OWN), _row(OWN)]]
    falls_back = run(hw, np.array([[False]]), np.array([1], np.int64), batches, *arrays)
    assert falls_back.tolist() == [[_row(DENSE), _row(CSR)]]


def _per_op_inputs(rng, n_hw, n_fmt, n_batch, n_ops, special):
    hw = rng.uniform(1e-15, 1e-9, (n_hw, K.HW_COLUMNS))
    batches = rng.integers(1, 513, n_batch).astype(np.float64)
    arrays = [rng.uniform(0, 1e10, (3, n_fmt, n_ops)) * (rng.random((3, n_fmt, n_ops)) < 0.7)
              for _ in range(6)]
    vflops = rng.uniform(0, 1e8, n_ops) * (rng.random(n_ops) < 0.5)
    if special:  # infinities, NaN and signed zeros: max() must pick as numba's does
        hw[:, K.HW_INV_SPARSE] = np.inf
        arrays[0][0, 0, 0] = np.nan
        arrays[2][:, :, -1] = -0.0
        vflops[0] = -0.0
    kernels = rng.integers(0, 3, n_hw * n_fmt * n_batch).astype(np.int64)
    return (hw, kernels, batches, *arrays, vflops)


@pytest.mark.parametrize("seed", range(24))
def test_numpy_totals_equal_the_compiled_kernel(seed):
    """Random grids, hardware that cannot run some formats (both fallbacks priced), and every
    third seed infinite rates, NaN and signed zeros: the totals in numpy (`numpy_only`) are the
    serial kernel's to 1e-12 relative, NaN where it has NaN, counts and copies exact."""
    rng = np.random.default_rng(seed)
    n_hw, n_fmt, n_batch = (int(rng.integers(1, 5)) for _ in range(3))
    n_ops = int(rng.integers(1, 300))
    hw, _, batches, *arrays, vflops = _per_op_inputs(rng, n_hw, n_fmt, n_batch, n_ops,
                                                     special=seed % 3 == 0)
    native_ok = rng.random((n_hw, n_fmt)) < 0.5
    fallback_ops = rng.integers(0, 3, n_fmt).astype(np.int64)
    native_ok[0, 0], fallback_ops[0] = False, 1  # at least one design prices both fallbacks
    args = (hw, native_ok, fallback_ops, batches, *arrays, vflops)
    compiled = K._design_totals_serial(*args)
    with K.numpy_only():
        in_numpy = K.design_totals(*args)
    assert in_numpy.shape == compiled.shape and in_numpy.dtype == compiled.dtype
    np.testing.assert_array_equal(np.isnan(in_numpy), np.isnan(compiled))
    np.testing.assert_allclose(in_numpy, compiled, rtol=1e-12, atol=0)
    counts = [K.T_MEMBOUND_UNFUSED, K.T_MEMBOUND_FUSED]
    np.testing.assert_array_equal(in_numpy[..., counts], compiled[..., counts])
    copied = (native_ok | (fallback_ops == 0)[None, :]).repeat(n_batch, axis=1).ravel()
    np.testing.assert_array_equal(in_numpy[copied, 1], in_numpy[copied, 0])


def test_numpy_only_takes_neither_kernel(monkeypatch):
    """Inside `numpy_only` neither compiled kernel is called, whatever the grid's size (the
    per-op costs past NUMPY_MAX_OP_EVALS too); outside it, as before."""
    calls = []
    for name in ("_design_totals_serial", "_design_totals_parallel", "_per_op_serial",
                 "_per_op_parallel"):
        monkeypatch.setattr(K, name, lambda *a, name=name: calls.append(name))
    rng = np.random.default_rng(0)
    hw, kernels, batches, *arrays, vflops = _per_op_inputs(rng, 1, 1, 1,
                                                           K.NUMPY_MAX_OP_EVALS, special=False)
    totals_args = (hw, np.array([[True]]), np.array([0], np.int64), batches, *arrays, vflops)
    with K.numpy_only():
        assert K.design_totals(*totals_args).shape == (1, 2, K.TOTAL_COLUMNS)
        assert len(K.per_op(hw, kernels, batches, *arrays, vflops)) == 5
    assert calls == []
    K.design_totals(*totals_args)
    K.per_op(hw, kernels, batches, *arrays, vflops)
    assert calls == ["_design_totals_serial", "_per_op_serial"]


@pytest.mark.parametrize("seed", range(12))
def test_per_op_numpy_is_the_compiled_loop_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 4)),
             int(rng.integers(1, 300)))
    args = _per_op_inputs(rng, *shape, special=seed % 3 == 0)
    compiled = K._per_op_serial(*args)
    numpy_path = K._per_op_numpy(*args)
    assert len(numpy_path) == len(compiled) == 5
    for got, want in zip(numpy_path, compiled, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()


def test_per_op_takes_numpy_below_the_threshold_only(monkeypatch):
    calls = []
    monkeypatch.setattr(K, "_per_op_numpy", lambda *a: calls.append("numpy"))
    monkeypatch.setattr(K, "_per_op_serial", lambda *a: calls.append("serial"))
    rng = np.random.default_rng(0)
    small = _per_op_inputs(rng, 1, 1, 1, K.NUMPY_MAX_OP_EVALS - 1, special=False)
    at = _per_op_inputs(rng, 1, 1, 1, K.NUMPY_MAX_OP_EVALS, special=False)
    K.per_op(*small)
    K.per_op(*at)
    assert calls == ["numpy", "serial"]


@pytest.mark.parametrize("fusion", ["unfused", "fused", "rules:inductor-cpu"])
def test_layer_frames_are_the_same_from_numpy_and_numba(monkeypatch, fusion):
    """`evaluate_layers` of a grid with hardware fallbacks (v100 has no sparse tensor cores)
    from the numpy path and from the compiled kernel: the same frame, every float bit for
    bit."""
    grid = ("toy_hybrid", ["a100", "v100"], ["dense", "2:4", "unstructured@90%",
                                              "block16@75%"], [1, 8])
    monkeypatch.setattr(K, "NUMPY_MAX_OP_EVALS", 10**9)
    from_numpy = dse.evaluate_layers(*grid, fusion=fusion, scope="all")
    monkeypatch.setattr(K, "NUMPY_MAX_OP_EVALS", 0)
    from_numba = dse.evaluate_layers(*grid, fusion=fusion, scope="all")
    assert (from_numpy["fallback"] != "").any()
    pd.testing.assert_frame_equal(from_numpy, from_numba, check_exact=True)
    for column in from_numpy.select_dtypes("float").columns:
        assert from_numpy[column].to_numpy().tobytes() == from_numba[column].to_numpy().tobytes()
