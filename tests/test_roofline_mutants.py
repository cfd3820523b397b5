"""By hand, the numbers of dse/roofline that tests/test_reference.py, test_energy.py and
test_memory.py leave loose: each test here was written for mutants that ``python -m
benchmarks.mutation --module roofline`` found alive (the per-design counts and labels, the
small-grid path, batch defaults, the compiled per-op kernel, the numpy-only totals, an MoE
layer's touched experts, weight-only quantisation, the warm cache bound, the memory model's
edges), with the expected values worked out in the comments beside them from the formulas of
the Sparsity Roofline (shared/DESIGN.md), never from the code under test."""

from __future__ import annotations

import dataclasses
import warnings
import weakref

import numpy as np
import pandas as pd
import pytest

import dse
from accelerator_models import Accelerator, BlockSparse, CacheLevel, SparseTensorCore
from dse.roofline import caches, evaluator, kernels, pricing
from dse.roofline.energy import (
    designs_with_layers,
    evaluate_energy,
    evaluate_layer_frames,
    op_figures,
    op_traffic,
)
from dse.roofline.fusion_rules import RuleTable
from dse.roofline.memory import evaluate_memory, unread_weight_bytes
from dse.roofline.numerics import Numerics, NumericsError, with_dtype_columns
from dse.roofline.pricing import RuleEdges, price, rule_edges, stack_formats
from formats import parse
from workloads import MAX_BATCH, Trace

REL = 1e-12


def _op(name, kind, m, k, n, weight, inp, out, vflops, prunable, producers, groups=1):
    return {"name": name, "kind": kind, "m": m, "k": k, "n": n, "groups": groups,
            "weight_elems": weight, "input_elems": inp, "output_elems": out,
            "vector_flops": float(vflops), "prunable": prunable, "producers": producers}


#: fc -> act -> view -> add, per sample: fc a linear W 8 x 16 on 4 tokens (no bias), reading the
#: model input (4 x 16 = 64 elements), 2 * 8 * 16 * 4 = 1024 FLOPs, writing 32; act 256 vector
#: FLOPs; view no work at all; add 32 vector FLOPs, the model output.
CHAIN = Trace.from_records("chain", [4, 16], [
    _op("fc", "linear", 8, 16, 4, 128, 64, 32, 0, True, ["input"]),
    _op("act", "activation", 0, 0, 0, 0, 32, 32, 256, False, ["fc"]),
    _op("view", "other", 0, 0, 0, 0, 32, 32, 0, False, ["act"]),
    _op("add", "elementwise", 0, 0, 0, 0, 32, 32, 32, False, ["view"]),
], {"source": "test"})

#: Round rates: tensor cores 1e12 FLOP/s (2:4 on the sparse tensor core at the same rate per
#: useful FLOP), vector cores 1e11 FLOP/s, DRAM 1e9 B/s; no energy figures.
HW = Accelerator(
    name="hand", description="", dram_bandwidth_bytes_per_s=1e9,
    tensor_flops_per_s={"fp16": 1e12}, vector_flops_per_s={"fp32": 1e11, "fp16": 1e11},
    block_sparse=BlockSparse(True, 1), sparse_tensor=SparseTensorCore(((2, 4),), 1.0))
#: The same without a sparse tensor core: 2:4 falls back.
NO_SPARSE = dataclasses.replace(HW, name="no-sparse", sparse_tensor=None)
#: Half the DRAM bandwidth.
HALF = dataclasses.replace(HW, name="half", dram_bandwidth_bytes_per_s=5e8)

# CHAIN, dense, fp16, on HW, per op at batch b (seconds):
#   fc:   compute 1024 b / 1e12; unfused memory (256 weight bytes + (64 + 32) x 2 b) / 1e9;
#         fused (256 + 64 x 2 b) / 1e9 (reads the model input, its output stays on chip)
#   act:  compute 256 b / 1e11; unfused 64 x 2 b / 1e9; fused 0 (intermediate)
#   view: compute 0;            unfused 64 x 2 b / 1e9; fused 0
#   add:  compute 32 b / 1e11;  unfused 64 x 2 b / 1e9; fused 32 x 2 b / 1e9 (model output)
# Every op is memory-bound unfused; fused, act (0 < compute) and view (0 bytes, 0 work: not
# bound by memory) are not.
CHAIN_DENSE = {
    1: {"unfused": dict(latency_s=4.48e-7 + 3 * 1.28e-7, memory_s=8.32e-7, memory_bound_ops=4,
                        feature_bytes=576.0, dram_bytes=832.0),
        "fused": dict(latency_s=3.84e-7 + 2.56e-9 + 0 + 6.4e-8, memory_s=4.48e-7,
                      memory_bound_ops=2, feature_bytes=192.0, dram_bytes=448.0),
        "fused_prefetched": dict(latency_s=4.48e-7, memory_s=4.48e-7, memory_bound_ops=2,
                                 feature_bytes=192.0, dram_bytes=448.0),
        "compute_s": 1.024e-9 + 2.56e-9 + 3.2e-10, "flops": 1024.0},
    2: {"unfused": dict(latency_s=6.4e-7 + 3 * 2.56e-7, memory_s=1.408e-6, memory_bound_ops=4,
                        feature_bytes=1152.0, dram_bytes=1408.0),
        "fused": dict(latency_s=5.12e-7 + 5.12e-9 + 0 + 1.28e-7, memory_s=6.4e-7,
                      memory_bound_ops=2, feature_bytes=384.0, dram_bytes=640.0),
        "fused_prefetched": dict(latency_s=6.4e-7, memory_s=6.4e-7, memory_bound_ops=2,
                                 feature_bytes=384.0, dram_bytes=640.0),
        "compute_s": 2.048e-9 + 5.12e-9 + 6.4e-10, "flops": 2048.0},
}


def _check_chain_rows(frame: pd.DataFrame) -> None:
    assert len(frame) == 6  # 3 fusions x 2 batches, dense only
    for row in frame.to_dict("records"):
        hand = CHAIN_DENSE[row["batch"]]
        for column, value in hand[row["fusion"]].items():
            assert row[column] == pytest.approx(value, rel=REL), (row["fusion"], column)
        assert row["compute_s"] == pytest.approx(hand["compute_s"], rel=REL)
        assert row["flops"] == pytest.approx(hand["flops"], rel=REL)
        assert row["weight_bytes"] == 256.0
        assert row["ops"] == 4 and row["bound"] == "memory" and row["speedup"] == 1.0
        assert row["hw_fallback"] == "" and row["hw_fallback_ops"] == 0


@pytest.mark.parametrize("path", ["evaluate", "evaluate_designs", "numpy_only"])
def test_totals_counts_and_traffic_of_every_fusion_by_hand(path):
    args = (CHAIN, HW, "dense", [1, 2])
    kwargs = dict(fusion=list(dse.FUSIONS), scope="all")
    if path == "evaluate":
        frame = dse.evaluate(*args, **kwargs)
    elif path == "evaluate_designs":  # at most 64 designs: the small-grid path
        frame = dse.evaluate_designs(*args, **kwargs).frame()
    else:  # every grid priced in numpy, numba never called
        with kernels.numpy_only():
            frame = dse.evaluate(*args, **kwargs)
    _check_chain_rows(frame)


def test_dense_rows_are_the_same_hardware_and_batch():
    """2 hardware x (dense, 2:4) x 2 batches, unfused, scope gemm (fc alone). Dense fc:
    (256 + 192 b) / BW: on HW 4.48e-7 (b 1), 6.4e-7 (b 2); on HALF 8.96e-7, 1.28e-6. 2:4 on HW:
    64 values x 2 B + 64 x 2 bits = 144 B of weights, and the input rows read: a row of X is
    unread when all 8 weights of its column are pruned, 1 - (1/2)^8 = 255/256 of them read, so
    features 192 - 128 / 256 = 191.5 B a sample. HALF has the sparse core too."""
    for frame in (dse.evaluate(CHAIN, [HW, HALF], "2:4", [1, 2]),
                  dse.evaluate_designs(CHAIN, [HW, HALF], "2:4", [1, 2]).frame()):
        dense = {("hand", 1): 4.48e-7, ("hand", 2): 6.4e-7, ("half", 1): 8.96e-7,
                 ("half", 2): 1.28e-6}
        bw = {"hand": 1e9, "half": 5e8}
        assert len(frame) == 8
        for row in frame.to_dict("records"):
            key = (row["hardware"], row["batch"])
            assert row["dense_latency_s"] == pytest.approx(dense[key], rel=REL)
            if row["format"] == "2:4":
                latency = (144 + 191.5 * row["batch"]) / bw[row["hardware"]]
                assert row["latency_s"] == pytest.approx(latency, rel=REL)
                assert row["speedup"] == pytest.approx(dense[key] / latency, rel=REL)
                assert row["weight_sparsity"] == 0.5


def test_two_scopes_give_the_rows_of_both():
    """Dense at batch 1, unfused: scope gemm is fc alone, 4.48e-7 s; scope all adds three ops
    of 1.28e-7 s each, 8.32e-7 s."""
    for frame in (dse.evaluate(CHAIN, HW, "dense", 1, scope=["gemm", "all"]),
                  dse.evaluate_designs(CHAIN, HW, "dense", 1, scope=["gemm", "all"]).frame()):
        assert list(frame["scope"]) == ["gemm", "all"]
        assert frame["latency_s"].tolist() == pytest.approx([4.48e-7, 8.32e-7], rel=REL)
        assert frame["ops"].tolist() == [1, 4]


def test_batch_defaults_to_one():
    """Dense fc at batch 1, unfused: (256 + 192) / 1e9 = 4.48e-7 s; the library's functions
    and the package's (dse.evaluate and dse.evaluate_layers wrap them)."""
    for evaluate in (dse.evaluate, evaluator.evaluate,
                     lambda *a: evaluator.evaluate_designs(*a).frame()):
        frame = evaluate(CHAIN, HW, "dense")
        assert frame["batch"].tolist() == [1]
        assert frame["latency_s"].tolist() == pytest.approx([4.48e-7], rel=REL)
    for layers in (dse.evaluate_layers(CHAIN, HW, "dense"),
                   evaluator.evaluate_layers(CHAIN, HW, "dense")):
        assert layers["batch"].tolist() == [1]
        assert layers["memory_s"].tolist() == pytest.approx([4.48e-7], rel=REL)
    energy = evaluate_energy(CHAIN, HW, "dense")
    assert energy["batch"].tolist() == [1]
    assert energy["latency_s"].tolist() == pytest.approx([4.48e-7], rel=REL)


def test_label_columns_are_plain_strings_by_default():
    for frame in (dse.evaluate(CHAIN, HW, "2:4"), evaluator.evaluate(CHAIN, HW, "2:4")):
        for column in ("model", "hardware", "format", "family", "bound", "hw_fallback"):
            assert not isinstance(frame[column].dtype, pd.CategoricalDtype), column
        assert frame["hardware"].tolist() == ["hand", "hand"]
    categorical = dse.evaluate(CHAIN, HW, "2:4", categorical=True)
    assert isinstance(categorical["hardware"].dtype, pd.CategoricalDtype)


@pytest.mark.parametrize("batch", [0, -1, True, 1.5, "2"])
def test_a_batch_that_is_not_a_positive_integer_is_refused(batch):
    with pytest.raises(dse.EvaluationError, match="batch size"):
        dse.evaluate(CHAIN, HW, "dense", [batch])


@pytest.mark.parametrize("path", ["evaluate", "evaluate_designs", "evaluator.evaluate"])
def test_hardware_fallback_labels_and_counts(path):
    """On NO_SPARSE, 2:4 needs the sparse tensor core for fc (K 16 is a multiple of 4): the
    dense kernel, (256 + 192) / 1e9 = 4.48e-7 s at batch 1, beats CSR of the same 64 nonzeros
    (128 B of values + 4 B x (64 + 8 + 1) of index = 420 B, features 191.5 B: 6.115e-7 s), so
    the design falls back to dense. 2:32 cannot take fc at all (K 16 is no multiple of 32): a
    shape fallback, and no op needs the hardware, so no hardware fallback either."""
    run = {"evaluate": dse.evaluate, "evaluator.evaluate": evaluator.evaluate,
           "evaluate_designs": lambda *a, **k: dse.evaluate_designs(*a, **k).frame()}[path]
    frame = run(CHAIN, NO_SPARSE, ["2:4", "2:32"], 1)
    rows = {r["format"]: r for r in frame.to_dict("records")}
    assert (rows["dense"]["hw_fallback"], rows["dense"]["hw_fallback_ops"]) == ("", 0)
    assert (rows["2:4"]["hw_fallback"], rows["2:4"]["hw_fallback_ops"]) == ("dense", 1)
    assert rows["2:4"]["latency_s"] == pytest.approx(4.48e-7, rel=REL)
    assert (rows["2:32"]["hw_fallback"], rows["2:32"]["hw_fallback_ops"]) == ("", 0)
    assert rows["2:32"]["shape_fallback_ops"] == 1
    assert rows["2:32"]["weight_sparsity"] == 0.0


def test_csr_fallback_is_labelled_csr():
    """With tensor cores of 1e8 FLOP/s, dense fc computes 1024 / 1e8 = 1.024e-5 s at batch 1,
    while CSR of its 64 nonzeros on the vector cores (1e11 FLOP/s) computes 512 / 1e11 =
    5.12e-9 s and moves (420 + 191.5) B / 1e9 = 6.115e-7 s: the CSR fallback is faster."""
    slow = dataclasses.replace(NO_SPARSE, name="slow", tensor_flops_per_s={"fp16": 1e8})
    for frame in (dse.evaluate(CHAIN, slow, "2:4", 1),
                  dse.evaluate_designs(CHAIN, slow, "2:4", 1).frame()):
        row = frame[frame["format"] == "2:4"].iloc[0]
        assert (row["hw_fallback"], row["hw_fallback_ops"]) == ("csr", 1)
        assert row["latency_s"] == pytest.approx(6.115e-7, rel=REL)
        assert row["dense_latency_s"] == pytest.approx(1.024e-5, rel=REL)
    # Per op, the kernel each design chose: CSR on the slow tensor cores, dense on NO_SPARSE.
    for hw, why, unit, compute, memory in ((slow, "hw:csr", "vector", 5.12e-9, 6.115e-7),
                                           (NO_SPARSE, "hw:dense", "tensor", 1.024e-9, 4.48e-7)):
        layers = evaluator.evaluate_layers(CHAIN, hw, "2:4", 1)
        row = layers[layers["format"] == "2:4"].iloc[0]
        assert (row["fallback"], row["unit"]) == (why, unit)
        assert row["compute_s"] == pytest.approx(compute, rel=REL)
        assert row["memory_s"] == pytest.approx(memory, rel=REL)


def test_layer_traffic_under_fused_and_warm_caches():
    """Per op at batch 2, fused: DRAM bytes fc 256 + 2 x 128 = 512, act 0, view 0, add
    2 x 64 = 128. Warm, unfused, on one cache level of 1000 B at 1e10 B/s in front of DRAM:
    each op's bytes (fc 256 + 192 = 448, the others 128 at batch 1) fit the level, so its
    memory time is bytes / 1e10."""
    layers = dse.evaluate_layers(CHAIN, HW, "dense", 2, fusion="fused", scope="all")
    assert layers["dram_bytes"].tolist() == [512.0, 0.0, 0.0, 128.0]
    assert layers["unit"].tolist() == ["tensor", "vector", "vector", "vector"]
    cached = dataclasses.replace(HW, cache_levels=(CacheLevel("l1", 1000.0, 1e10),))
    warm = dse.evaluate_layers(CHAIN, cached, "dense", 1, scope="all", cache="warm")
    assert warm["memory_s"].tolist() == pytest.approx([4.48e-8, 1.28e-8, 1.28e-8, 1.28e-8],
                                                      rel=REL)
    assert warm["time_s"].tolist() == pytest.approx([4.48e-8, 1.28e-8, 1.28e-8, 1.28e-8],
                                                    rel=REL)


def test_a_fraction_of_a_flop_still_runs_on_the_tensor_cores():
    """A 1 x 1 linear pruned to block1@87.5%: 2 x 0.125 x 1 = 0.25 useful FLOPs a sample, on the
    tensor cores (block sparsity keeps them)."""
    tiny = Trace.from_records("tiny", [1], [_op("w", "linear", 1, 1, 1, 1, 1, 1, 0, True,
                                                ["input"])])
    layers = dse.evaluate_layers(tiny, HW, "block1@0.875", 1)
    row = layers[layers["format"] == "block1@87.5%"].iloc[0]
    assert row["flops"] == 0.25 and row["unit"] == "tensor"


def test_warm_and_cold_memory_time_by_hand():
    """One level of 1000 B at 1e10 B/s, DRAM 1e9 B/s. Warm: max(x / 1e10, (x - 1000)^+ / 1e9):
    500 B 5e-8 s, 1000 B 1e-7 s, 3000 B max(3e-7, 2e-6) = 2e-6 s. Cold: every byte from DRAM
    through the level, the slower link bounds: 1e-9 s/B here; with a level of 1.5e9 B/s still
    DRAM's 1e-9; with a level of 5e8 B/s, the level's 2e-9."""
    acc = dataclasses.replace(HW, cache_levels=(CacheLevel("l1", 1000.0, 1e10),))
    warm = caches.memory_time(np.array([500.0, 1000.0, 3000.0]), acc, "warm")
    assert warm.shape == (3,)
    assert warm.tolist() == pytest.approx([5e-8, 1e-7, 2e-6], rel=REL)
    assert caches.memory_time(3000.0, acc, "cold") == pytest.approx(3e-6, rel=REL)
    capacity, rates = caches.memory_pieces(acc, "warm")
    assert capacity.tolist() == [0.0, 1000.0]
    assert rates.tolist() == pytest.approx([1e-10, 1e-9], rel=REL)
    for level_bw, per_byte in ((1e10, 1e-9), (1.5e9, 1e-9), (5e8, 2e-9)):
        acc = dataclasses.replace(HW, cache_levels=(CacheLevel("l2", 1e6, level_bw),))
        assert caches.cold_seconds_per_byte(acc) == pytest.approx(per_byte, rel=REL)


# --- the kernels, called directly --------------------------------------------------------

# Two hardware rows (reciprocal rates: seconds per byte, per tensor, sparse, CSR and vector
# FLOP), one format, two batches, two ops; each alternative kernel k has its own arrays.
_HW = np.array([[1e-9, 1e-12, 5e-13, 1e-11, 2e-11],
                [2e-9, 2e-12, 1e-12, 2e-11, 4e-11]])
_BATCHES = np.array([1.0, 2.0])


def _arrays():
    """(tensor, sparse, CSR FLOPs, weight bytes, unfused and fused feature bytes), each
    (3 kernels, 1 format, 2 ops), and the ops' vector FLOPs: kernel 0 uses every unit, kernel 1
    only the tensor cores, kernel 2 only CSR."""
    ft = np.array([[[100.0, 10.0]], [[300.0, 30.0]], [[0.0, 0.0]]])
    fs = np.array([[[40.0, 0.0]], [[0.0, 0.0]], [[0.0, 0.0]]])
    fc = np.array([[[10.0, 0.0]], [[0.0, 0.0]], [[50.0, 5.0]]])
    wb = np.array([[[300.0, 0.0]], [[600.0, 0.0]], [[400.0, 0.0]]])
    fu = np.array([[[50.0, 8.0]], [[60.0, 8.0]], [[50.0, 8.0]]])
    ff = np.array([[[20.0, 0.0]], [[30.0, 0.0]], [[20.0, 0.0]]])
    vflops = np.array([5.0, 16.0])
    return ft, fs, fc, wb, fu, ff, vflops


def _per_op_by_hand(h, k, batch):
    """compute = batch x max(ft / P_tensor + fs / P_sparse, fc / P_csr + v / P_vector);
    memory = (weight bytes + features x batch) / BW; FLOPs = (ft + fs + fc) x batch."""
    ft, fs, fc, wb, fu, ff, v = (a[k, 0] if a.ndim == 3 else a for a in _arrays())
    inv = _HW[h]
    compute = np.maximum(batch * (ft * inv[1] + fs * inv[2]), batch * (fc * inv[3] + v * inv[4]))
    return (compute, (wb + fu * batch) * inv[0], (wb + ff * batch) * inv[0],
            (ft + fs + fc) * batch, wb)


@pytest.mark.parametrize("kernel", ["_per_op_serial", "_per_op_parallel", "_per_op_numpy"])
def test_per_op_kernels_by_hand(kernel):
    """Designs d = h x 2 + b (one format); each runs its own kernel: 0, 1, 2, 0. E.g. design 0
    (h 0, batch 1, own kernel), op 0: tensor 100 x 1e-12 + 40 x 5e-13 = 1.2e-10 s, vector
    10 x 1e-11 + 5 x 2e-11 = 2e-10 s, so compute 2e-10; memory (300 + 50) x 1e-9 = 3.5e-7,
    fused (300 + 20) x 1e-9; 150 FLOPs."""
    ft, fs, fc, wb, fu, ff, vflops = _arrays()
    chosen = np.array([0, 1, 2, 0], dtype=np.int64)
    out = getattr(kernels, kernel)(_HW, chosen, _BATCHES, ft, fs, fc, wb, fu, ff, vflops)
    for array in out:
        assert array.shape == (4, 2)
    for d, (h, b) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        hand = _per_op_by_hand(h, chosen[d], _BATCHES[b])
        for got, want in zip(out, hand, strict=True):
            np.testing.assert_allclose(got[d], want, rtol=REL)
    compute = out[0]
    assert compute[0, 0] == pytest.approx(2e-10, rel=REL)
    assert out[1][0, 0] == pytest.approx(3.5e-7, rel=REL)
    assert out[3][0, 0] == 150.0


def test_design_totals_kernels_by_hand():
    """The totals of the same arrays, each design with its own kernel (native) and, where the
    hardware cannot run the format and an op needs it, with the dense (slot 0) and CSR (slot 1)
    fallbacks. Hardware 1 cannot run the format."""
    ft, fs, fc, wb, fu, ff, vflops = _arrays()
    native = np.array([[True], [False]])
    fallback_ops = np.array([1], dtype=np.int64)
    args = (_HW, native, fallback_ops, _BATCHES, ft, fs, fc, wb, fu, ff, vflops)
    for totals in (kernels._design_totals_serial(*args), kernels._design_totals_parallel(*args)):
        assert totals.shape == (4, 2, kernels.TOTAL_COLUMNS)
        for d, (h, b) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
            for slot, k in ((0, 0), (1, 0)) if h == 0 else ((0, 1), (1, 2)):
                c, m, fm, flops, w = _per_op_by_hand(h, k, _BATCHES[b])
                row = totals[d, slot]
                assert row[kernels.T_UNFUSED] == pytest.approx(np.maximum(c, m).sum(), rel=REL)
                assert row[kernels.T_FUSED] == pytest.approx(np.maximum(c, fm).sum(), rel=REL)
                assert row[kernels.T_COMPUTE] == pytest.approx(c.sum(), rel=REL)
                assert row[kernels.T_MEMORY_UNFUSED] == pytest.approx(m.sum(), rel=REL)
                assert row[kernels.T_MEMORY_FUSED] == pytest.approx(fm.sum(), rel=REL)
                assert row[kernels.T_WEIGHT_BYTES] == w.sum()
                assert row[kernels.T_FLOPS] == flops.sum()
                assert row[kernels.T_MEMBOUND_UNFUSED] == (m > c).sum()
                assert row[kernels.T_MEMBOUND_FUSED] == (fm > c).sum()


def test_on_first_load_hooks_only_a_process_that_has_not_loaded_the_kernels(monkeypatch):
    monkeypatch.setattr(kernels, "_FIRST_LOAD", [])
    monkeypatch.setattr(kernels, "_COMPILED", {})  # as a new process has it

    def hook():
        return None

    kernels.on_first_load(hook)
    assert kernels._FIRST_LOAD == [hook]
    kernels.on_first_load(None)
    assert kernels._FIRST_LOAD == []
    monkeypatch.setattr(kernels, "_COMPILED", {"loaded": hook})  # kernels already loaded
    kernels.on_first_load(hook)
    assert kernels._FIRST_LOAD == []


# --- an MoE layer: 4 experts, 1 per token --------------------------------------------------

#: experts: a routed linear of 4 sets of W 8 x 16 (512 weights, 1024 B), 1 token a sample,
#: each token reads 1 set: a step of T = batch tokens touches 1 - (3/4)^T of the weights:
#: 1/4 at batch 1, 7/16 at batch 2. norm: 8 weights, not routed.
MOE = Trace.from_records("moe", [16], [
    _op("experts", "linear", 8, 16, 1, 512, 16, 8, 0, True, ["input"]),
    _op("norm", "norm", 0, 0, 0, 8, 8, 8, 32, False, ["experts"]),
], {"routed_weights_by_op": {"experts": {"sets": 4, "sets_per_token": 1,
                                         "tokens_per_sample": 1}}})


def test_moe_weights_read_per_batch_by_hand():
    """Dense, unfused, scope all. Batch 1: experts read 1024 / 4 = 256 B + (16 + 8) x 2 = 48 B
    of features: 3.04e-7 s; norm 16 + 32 B: 4.8e-8 s. Batch 2: 1024 x 7/16 = 448 B + 96 B:
    5.44e-7 s; norm 16 + 64 B: 8e-8 s."""
    frame = dse.evaluate(MOE, HW, "dense", [1, 2], scope="all")
    assert frame["weight_bytes"].tolist() == [272.0, 464.0]
    assert frame["latency_s"].tolist() == pytest.approx([3.52e-7, 6.24e-7], rel=REL)
    layers = dse.evaluate_layers(MOE, HW, "dense", [1, 2], scope="all")
    assert layers["weight_bytes"].tolist() == [256.0, 16.0, 448.0, 16.0]
    assert layers["memory_s"].tolist() == pytest.approx([3.04e-7, 4.8e-8, 5.44e-7, 8e-8],
                                                        rel=REL)
    # The experts a step leaves untouched: 1024 x 3/4 = 768 B at batch 1, 1024 x 9/16 = 576 B
    # at batch 2; all of them stay resident: 1024 + 16 B of weights at either batch.
    assert unread_weight_bytes(frame, MOE).tolist() == [768.0, 576.0]
    resident = evaluate_memory(MOE, HW, "dense", [1, 2], scope="all")
    assert resident["weight_storage_bytes"].tolist() == [1040.0, 1040.0]
    assert unread_weight_bytes(dse.evaluate(CHAIN, HW, "dense", [1, 2]), CHAIN).tolist() \
        == [0.0, 0.0]


def test_moe_value_and_index_bytes_of_a_step():
    """2:4 on the experts at batch 1: stored values 4 x 64 x 2 B = 512 B, index 4 x 64 x 2 bits
    = 64 B; a step reads a quarter: 128 B of values, 16 B of index."""
    layers = dse.evaluate_layers(MOE, HW, "2:4", 1, scope="all")
    traffic = op_traffic(layers, MOE, Numerics())
    row = traffic[(traffic["format"] == "2:4") & (traffic["op"] == "experts")].iloc[0]
    assert row["weight_bytes"] == 144.0
    assert row["value_bytes"] == 128.0
    assert row["index_bytes"] == 16.0


def test_op_traffic_names_an_op_the_trace_lacks():
    layers = dse.evaluate_layers(CHAIN, HW, "dense", 1, scope="all")
    layers.loc[2, "op"] = "ghost"
    with pytest.raises(ValueError, match="'ghost' is not in trace 'chain'"):
        op_traffic(layers, CHAIN, Numerics())


def test_a_spec_without_energy_figures_has_no_energy():
    row = evaluate_energy(CHAIN, HW, "dense", 1).iloc[0]
    for column in ("energy_j", "energy_per_inference_j", "avg_power_w", "edp_js",
                   "energy_tensor_j", "energy_dram_j", "energy_static_j"):
        assert np.isnan(row[column]), column
    assert "dram_pj_per_byte" in row["energy_unpriced"]


# --- the memory model's edges ---------------------------------------------------------------

def test_memory_fits_at_the_exact_edges():
    """CHAIN at batch 2. Unfused, live activations per sample: at fc the model input 64 and
    fc's output 32, 96 elements (later ops: 64), so 96 x 2 B x 2 = 384 B; weights 256 B; peak
    640 B. Fused: in DRAM the input (64) until fc and add's output (32): 64 x 2 x 2 = 256 B, peak
    512 B; on chip two intermediates at once (act reads fc's output while writing its own):
    64 x 2 x 2 = 256 B. Capacity 640 B and an L2 of 256 B are both exactly enough. The largest
    batch: floor((640 - 256) / 192) = 2 unfused, floor(384 / 128) = 3 fused."""
    edge = dataclasses.replace(HW, dram_capacity_bytes=640.0, l2_bytes=256.0)
    frame = evaluate_memory(CHAIN, edge, "dense", 2, fusion=["unfused", "fused"], scope="all")
    rows = {r["fusion"]: r for r in frame.to_dict("records")}
    assert rows["unfused"]["activation_peak_bytes"] == 384.0
    assert rows["unfused"]["peak_memory_bytes"] == 640.0
    assert rows["unfused"]["fits"] is True
    assert rows["unfused"]["largest_batch_that_fits"] == 2
    assert rows["fused"]["activation_peak_bytes"] == 256.0
    assert rows["fused"]["onchip_peak_bytes"] == 256.0
    assert rows["fused"]["fits_on_chip"] is True
    assert rows["fused"]["largest_batch_that_fits"] == 3


def test_a_model_without_prunable_ops_stores_only_its_other_weights():
    """One norm of 8 weights: 16 B; live activations the input 16 and the output 16, 64 B."""
    norm = Trace.from_records("norm", [16], [_op("n", "norm", 0, 0, 0, 8, 16, 16, 64, False,
                                                 ["input"])])
    row = evaluate_memory(norm, HW, "dense", 1, scope="all").iloc[0]
    assert row["weight_storage_bytes"] == 16.0
    assert row["peak_memory_bytes"] == 80.0


# --- number formats -------------------------------------------------------------------------

#: One linear of W 2 x 256 (512 weights) and one linear without weights (not prunable).
WIDE = Trace.from_records("wide", [256], [
    _op("wide", "linear", 2, 256, 1, 512, 256, 2, 0, True, ["input"]),
    _op("bare", "linear", 2, 256, 1, 0, 256, 2, 0, False, ["input"]),
])


@pytest.mark.parametrize("numerics, wide_bytes", [
    (Numerics(), 512 * 2),
    (Numerics(dtype="tf32"), 512 * 4),
    # int4: 0.5 B a value, one fp16 scale per group of 128 along K: 2 rows x 2 groups x 2 B
    (Numerics(weight_dtype="int4"), 256 + 8),
    (Numerics(weight_dtype="int4", weight_group_size=64), 256 + 2 * 4 * 2),
    # int8 and fp8: one scale per row (per output channel)
    (Numerics(weight_dtype="int8"), 512 + 2 * 2),
    (Numerics(weight_dtype="fp8"), 512 + 2 * 2),
])
def test_weight_storage_per_numerics_by_hand(numerics, wide_bytes):
    # An op without weights stores no scales either.
    assert pricing.weight_bytes_dense(WIDE, numerics).tolist() == [wide_bytes, 0.0]


def test_numerics_labels_and_refusals():
    assert Numerics().weight_label == "fp16"
    assert Numerics(weight_dtype="int4").weight_label == "int4 (group 128)"
    assert Numerics(weight_dtype="int8").weight_label == "int8 (per channel)"
    assert Numerics(weight_dtype="int4", weight_group_size=32).group_size == 32
    assert Numerics(weight_dtype="int8").group_size is None
    with pytest.raises(NumericsError, match="no narrower"):  # 1 byte is not below fp8's 1
        Numerics(dtype="fp8", weight_dtype="int8")
    assert Numerics(dtype="fp8", weight_dtype="int4").weight_value_bytes == 0.5


def test_dtype_columns_of_language_and_other_rows():
    table = pd.DataFrame({"x": [1, 2]})
    out = with_dtype_columns(table, Numerics(), language=True)
    assert out["kv_dtype"].tolist() == ["fp16", "fp16"]
    out = with_dtype_columns(table, Numerics(kv_dtype="fp8"), language=[True, False])
    assert out["kv_dtype"][0] == "fp8" and pd.isna(out["kv_dtype"][1])
    assert out["weight_dtype"].tolist() == ["fp16", "fp16"]
    assert "kv_dtype" not in with_dtype_columns(table, Numerics())


# --- pricing ---------------------------------------------------------------------------------

def test_weight_sparsity_input_rows_and_grouped_flops_by_hand():
    """CHAIN under 2:4: fc keeps 64 of its 128 weights, the other ops have none: weight
    sparsity 0.5. fc's X is its input (K 16 x N 4 = 64 elements), so 255/256 of it is read:
    unfused features 192 - 128 / 256 = 191.5 B, fused (model input 128 B) 127.5 B. A grouped
    conv of 2 groups of W 4 x 8 on N 2 under 2:4: 2 x 2 x 16 nonzeros x 2 = 128 useful FLOPs."""
    fmts = stack_formats([parse("2:4")])
    p = price(CHAIN, fmts, Numerics())
    assert p.weight_sparsity.tolist() == [0.0, 0.5]
    assert p.input_read[1].tolist() == [255 / 256, 1.0, 1.0, 1.0]
    a = pricing.kernel_arrays(p, "all")
    assert a.feature_bytes_unfused[pricing.KERNEL_OWN, 1].tolist() == [191.5, 128, 128, 128]
    assert a.feature_bytes_fused[pricing.KERNEL_OWN, 1].tolist() == [127.5, 0, 0, 64]
    grouped = Trace.from_records("grouped", [32], [
        _op("conv", "conv", 4, 8, 2, 64, 32, 16, 0, True, ["input"], groups=2)])
    g = price(grouped, fmts, Numerics())
    assert g.flops[:, 0].tolist() == [256.0, 128.0]
    assert g.weight_sparsity.tolist() == [0.0, 0.5]


def test_all_rows_read_per_fusion_by_hand():
    p = price(CHAIN, stack_formats([parse("2:4")]), Numerics())
    total, inputs = evaluator.all_rows_read(p, CHAIN, "unfused")
    assert total.tolist() == [192.0, 128.0, 128.0, 128.0]
    assert inputs.tolist() == [128.0, 64.0, 64.0, 64.0]
    total, inputs = evaluator.all_rows_read(p, CHAIN, "fused_prefetched")
    assert total.tolist() == [128.0, 0.0, 0.0, 64.0]
    assert inputs.tolist() == [128.0, 0.0, 0.0, 0.0]


def test_rule_edges_by_hand():
    """A table fusing linear -> activation only: fc's output (32) stays on chip for act; act,
    view and add read theirs from DRAM, and each output but fc's is written. fc reads the model
    input (64). An op with no producer at all reads its input from DRAM (8)."""
    table = RuleTable.of("t", [("linear", "activation")])
    edges = rule_edges(CHAIN, table)
    assert isinstance(edges, RuleEdges)
    assert edges.input_elems.tolist() == [64.0, 0.0, 32.0, 32.0]
    assert edges.written.tolist() == [False, True, True, True]
    assert edges.output_elems.tolist() == [0.0, 32.0, 32.0, 32.0]
    orphan = Trace.from_records("orphan", [4], [
        _op("const", "elementwise", 0, 0, 0, 0, 8, 8, 8, False, [])])
    assert rule_edges(orphan, table).input_elems.tolist() == [8.0]


def test_kv_cache_reads_are_priced_at_the_kv_dtype():
    """A decode step's scores matmul reads 20 elements a sample, 12 of them keys from the KV
    cache: at fp16 2 x (20 + 8) = 56 B of features, 40 B of them input. A cache of fp32 keys
    adds (4 - 2) x 12 = 24 B (80 and 64 B); one of fp8 keys saves 12 B (44 and 28 B)."""
    kv = Trace.from_records("kv", [8], [
        _op("scores", "matmul", 2, 4, 2, 0, 20, 8, 0, False, ["input"])],
        {"kv_read_by_op": {"scores": 12}})
    for numerics, total, inputs in ((Numerics(), 56.0, 40.0),
                                    (Numerics(kv_dtype="fp32"), 80.0, 64.0),
                                    (Numerics(kv_dtype="fp8"), 44.0, 28.0)):
        p = price(kv, stack_formats([]), numerics)
        assert [a.tolist() for a in evaluator.all_rows_read(p, kv, "unfused")] \
            == [[total], [inputs]]


@pytest.mark.parametrize("numpy_only", [False, True])
def test_an_op_at_the_ridge_point_is_not_memory_bound(numpy_only):
    """Rates in powers of two make the tie exact: an elementwise op of 64 FLOPs on 16 input and
    16 output elements (2 x 32 = 64 B, model input and output alike) on vector cores of 2^30
    FLOP/s and DRAM of 2^30 B/s computes and moves for exactly 64 b / 2^30 s at batch b. Its
    own bound says compute (memory is not above it), and the design counts it so."""
    ridge = Accelerator(name="ridge", description="", dram_bandwidth_bytes_per_s=2.0**30,
                        tensor_flops_per_s={"fp16": 2.0**40},
                        vector_flops_per_s={"fp32": 2.0**30, "fp16": 2.0**30},
                        block_sparse=BlockSparse(True, 1))
    scale = Trace.from_records("scale", [16], [
        _op("scale", "elementwise", 0, 0, 0, 0, 16, 16, 64, False, ["input"])])
    with kernels.numpy_only(numpy_only):
        frame = evaluator.evaluate(scale, ridge, "dense", [1, 2], fusion=list(dse.FUSIONS),
                                   scope="all")
        layers = evaluator.evaluate_layers(scale, ridge, "dense", 2, scope="all")
    assert frame["memory_bound_ops"].tolist() == [0] * 6
    assert frame["bound"].tolist() == ["compute"] * 6
    assert dse.evaluate_designs(scale, ridge, "dense", [1, 2], fusion=list(dse.FUSIONS),
                                scope="all")["bound"].tolist() == ["compute"] * 6
    assert frame["latency_s"].tolist() == [64 * b / 2.0**30 for b in (1, 2)] * 3
    assert layers["bound"].tolist() == ["compute"]


def test_cached_prices_cannot_be_changed_in_place():
    """price, kernel_arrays and rule_edges are cached and shared between callers: frozen."""
    p = price(CHAIN, stack_formats([parse("2:4")]), Numerics())
    shared = (p, pricing.kernel_arrays(p, "all"),
              rule_edges(CHAIN, RuleTable.of("t", [("linear", "activation")])))
    for value in shared:
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.ops = None


def test_a_csr_design_keeps_its_other_ops_as_they_were():
    """fc under 2:4 falls back to CSR on tensor cores of 1e8 FLOP/s (dense: 1024 / 1e8 =
    1.024e-5 s); the norm after it (8 weights, 16 B; 128 vector FLOPs) needs no sparse kernel
    and stays as it is. Batch 1, unfused, scope all: fc 512 CSR FLOPs, 5.12e-9 s of compute,
    (420 + 191.5) / 1e9 = 6.115e-7 s of memory; norm 128 / 1e11 = 1.28e-9 s of compute,
    (16 + 2 x 64) / 1e9 = 1.44e-7 s of memory. Useful GEMM FLOPs: fc's 512 only."""
    slow = dataclasses.replace(NO_SPARSE, name="slow", tensor_flops_per_s={"fp16": 1e8})
    normed = Trace.from_records("normed", [4, 16], [
        _op("fc", "linear", 8, 16, 4, 128, 64, 32, 0, True, ["input"]),
        _op("norm", "norm", 0, 0, 0, 8, 32, 32, 128, False, ["fc"])])
    for frame in (evaluator.evaluate(normed, slow, "2:4", 1, scope="all"),
                  evaluator.evaluate_designs(normed, slow, "2:4", 1, scope="all").frame()):
        row = frame[frame["format"] == "2:4"].iloc[0]
        assert row["hw_fallback"] == "csr"
        assert row["flops"] == 512.0
        assert row["weight_bytes"] == 436.0
        assert row["compute_s"] == pytest.approx(6.4e-9, rel=REL)
        assert row["latency_s"] == pytest.approx(6.115e-7 + 1.44e-7, rel=REL)


def test_sparse_weights_with_scales_and_a_bias_by_hand():
    """W 2 x 256 and a bias of 2, int4 under 2:4: 256 nonzeros x 0.5 B = 128 B of values,
    256 x 2 bits = 64 B of index, the scales over the dense K (2 rows x 2 groups of 128 x 2 B
    = 8 B) and the bias at fp16 (4 B): 204 B. Dense: 512 x 0.5 + 8 + 4 = 268 B."""
    biased = Trace.from_records("biased", [256], [
        _op("wide", "linear", 2, 256, 1, 514, 256, 2, 0, True, ["input"])])
    p = price(biased, stack_formats([parse("2:4")]), Numerics(weight_dtype="int4"))
    assert p.weight_bytes[:, 0].tolist() == [268.0, 204.0]


# --- survivors of the full roofline run (2026-11-26) ----------------------------------------

def test_memory_time_of_few_or_no_bytes_by_hand():
    """One level of 1000 B at 1e10 B/s, DRAM 1e9 B/s. An op that moves nothing takes no memory
    time, warm or cold; 5 B warm: max(5 / 1e10, (5 - 1000)^+ / 1e9) = 5e-10 s (below the time
    of one DRAM byte, 1e-9 s); cold: 5 / 1e9 = 5e-9 s. A cold run is one piece: capacity 0
    at DRAM's 1e-9 s/B, one capacity per rate."""
    acc = dataclasses.replace(HW, cache_levels=(CacheLevel("l1", 1000.0, 1e10),))
    warm = caches.memory_time(np.array([0.0, 5.0]), acc, "warm")
    assert warm.tolist() == pytest.approx([0.0, 5e-10], rel=REL)
    assert warm[0] == 0.0
    cold = caches.memory_time(np.array([0.0, 5.0]), acc, "cold")
    assert cold[0] == 0.0 and cold[1] == pytest.approx(5e-9, rel=REL)
    capacity, rates = caches.memory_pieces(acc, "cold")
    assert capacity.tolist() == [0.0]
    assert rates.tolist() == pytest.approx([1e-9], rel=REL)


#: Specs with a single energy figure each (pJ), on HW's rates.
DRAM_PJ = dataclasses.replace(HW, name="dram-pj", dram_pj_per_byte=10.0)
TENSOR_PJ = dataclasses.replace(HW, name="tensor-pj", tensor_pj_per_flop={"fp16": 2.0})
VECTOR_PJ = dataclasses.replace(HW, name="vector-pj",
                                vector_pj_per_flop={"fp32": 1.0, "fp16": 1.0})


def test_one_energy_figure_is_enough_to_price_energy():
    """CHAIN at batch 1, unfused, scope gemm (fc alone). DRAM at 10 pJ/B: dense fc moves 256 B
    of weights and 192 B of features, 448 x 10 pJ = 4.48e-9 J, the features' share 192 / 448;
    under 2:4 (on the sparse tensor core) 128 B of values + 16 B of index + 191.5 B of features
    = 335.5 B: 3.355e-9 J. Tensor cores at 2 pJ/FLOP: dense fc's 1024 FLOPs, 2.048e-9 J, no
    feature energy. What is not priced is named: the sparse design's FLOPs run on the sparse
    tensor core, unpriced, and so is the dense figure it falls back to."""
    frame = evaluate_energy(CHAIN, [DRAM_PJ, TENSOR_PJ], "2:4", 1)
    rows = {(r["hardware"], r["format"]): r for r in frame.to_dict("records")}
    dense = rows[("dram-pj", "dense")]
    assert dense["energy_j"] == pytest.approx(4.48e-9, rel=REL)
    assert dense["energy_dram_j"] == pytest.approx(4.48e-9, rel=REL)
    assert dense["energy_feature_share"] == pytest.approx(192 / 448, rel=REL)
    assert dense["energy_unpriced"] == "tensor_pj_per_flop.fp16; onchip_pj_per_byte; " \
        "static_power_w"
    sparse = rows[("dram-pj", "2:4")]
    assert sparse["energy_j"] == pytest.approx(3.355e-9, rel=REL)
    assert sparse["energy_unpriced"] == "tensor_pj_per_flop.fp16; onchip_pj_per_byte; " \
        "static_power_w; sparse_tensor_pj_per_flop.fp16 (dense tensor figure used)"
    tensor = rows[("tensor-pj", "dense")]
    assert tensor["energy_j"] == pytest.approx(2.048e-9, rel=REL)
    assert tensor["energy_tensor_j"] == pytest.approx(2.048e-9, rel=REL)
    assert tensor["energy_feature_share"] == 0.0
    assert tensor["energy_unpriced"] == "dram_pj_per_byte; onchip_pj_per_byte; static_power_w"


def test_a_design_of_no_priced_energy_has_no_feature_share_and_no_warning():
    """Only the vector cores are priced, and fc (scope gemm) runs on the tensor cores: 0 J,
    whose feature share is undefined (NaN), computed without a division by zero."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = evaluate_energy(CHAIN, VECTOR_PJ, "dense", 1).iloc[0]
    assert row["energy_j"] == 0.0
    assert np.isnan(row["energy_feature_share"])


def test_kv_cache_bytes_cross_the_chip_at_the_kv_dtype():
    """The decode step of test_kv_cache_reads_are_priced_at_the_kv_dtype: 20 + 8 = 28 feature
    elements a sample, 12 of them KV-cache keys. On chip at fp16 with fp32 keys: 2 x 28 +
    (4 - 2) x 12 = 80 B a sample, 160 B at batch 2; with fp8 keys 56 - 12 = 44 B, 88 B."""
    kv = Trace.from_records("kv", [8], [
        _op("scores", "matmul", 2, 4, 2, 0, 20, 8, 0, False, ["input"])],
        {"kv_read_by_op": {"scores": 12}})
    for numerics, per_sample in ((Numerics(kv_dtype="fp32"), 80.0), (Numerics(kv_dtype="fp8"),
                                                                     44.0)):
        layers = evaluator.evaluate_layers(kv, HW, "dense", [1, 2], scope="all",
                                           numerics=numerics)
        traffic = op_traffic(layers, kv, numerics)
        assert traffic["feature_onchip_bytes"].tolist() == [per_sample, 2 * per_sample]


def test_designs_with_layers_defaults_and_index():
    """Batch 1 by default; the layers of two fusion models, concatenated with a fresh index:
    fc unfused (256 + 192) / 1e9 = 4.48e-7 s, fused (256 + 128) / 1e9 = 3.84e-7 s."""
    trace, accs, designs, layers = designs_with_layers(CHAIN, HW, "dense",
                                                       fusion=["unfused", "fused"])
    assert trace is CHAIN and accs == [HW]
    assert designs["batch"].tolist() == [1, 1]
    assert layers["batch"].tolist() == [1, 1]
    assert layers.index.tolist() == [0, 1]
    assert layers["memory_s"].tolist() == pytest.approx([4.48e-7, 3.84e-7], rel=REL)
    frames = evaluate_layer_frames(CHAIN, [HW], ["dense"], [1, 2], ["unfused", "fused"],
                                   ["gemm"])
    assert frames.index.tolist() == [0, 1, 2, 3]


def test_op_figures_are_read_only():
    """op_figures is cached per trace and shared: its arrays cannot be written."""
    for values in op_figures(CHAIN).values():
        with pytest.raises(ValueError, match="read-only"):
            values[0] = values[0]


#: HW with a sparse tensor core that runs nonzeros at half the dense rate.
HALF_SPARSE = dataclasses.replace(HW, name="half-sparse",
                                  sparse_tensor=SparseTensorCore(((2, 4),), 0.5))


def test_sparse_tensor_rate_is_the_dense_rate_times_the_nonzero_rate():
    """At nonzero_rate 0.5, 2:4's 512 useful FLOPs of fc run at 1e12 x 0.5 = 5e11 FLOP/s:
    1.024e-9 s, the dense kernel's 1024 / 1e12; memory (144 + 191.5) / 1e9 still bounds it."""
    p = evaluator.peaks(HALF_SPARSE)
    assert [p.dram_bytes_per_s, p.tensor, p.sparse_tensor, p.csr, p.vector] \
        == pytest.approx([1e9, 1e12, 5e11, 1e11, 1e11], rel=REL)
    assert evaluator.peaks(HW).sparse_tensor == 1e12
    for frame in (dse.evaluate(CHAIN, HALF_SPARSE, "2:4", 1),
                  dse.evaluate_designs(CHAIN, HALF_SPARSE, "2:4", 1).frame()):
        assert frame["compute_s"].tolist() == pytest.approx([1.024e-9, 1.024e-9], rel=REL)
        assert frame["latency_s"].tolist() == pytest.approx([4.48e-7, 3.355e-7], rel=REL)


def test_peaks_are_values():
    """Peaks compare and hash by value (a roofline chart's roofs can key a table) and cannot
    be changed."""
    p = evaluator.peaks(HW)
    assert p == evaluator.peaks(dataclasses.replace(HW, name="copy"))
    assert {p: "hand"}[evaluator.peaks(HW)] == "hand"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.tensor = 0.0


def test_label_column_is_categorical_by_default():
    """names[codes]; names may repeat, and the categories are the distinct names."""
    column = evaluator.label_column(np.array([0, 1, 2, 1]), ["b", "a", "b"])
    assert isinstance(column, pd.Categorical)
    assert list(column) == ["b", "a", "b", "a"]
    assert list(column.categories) == ["a", "b"]
    plain = evaluator.label_column(np.array([0, 1]), ["b", "a"], False)
    assert plain.dtype == object and plain.tolist() == ["b", "a"]


def test_a_grid_past_the_small_grid_path_gives_evaluates_rows():
    """2 formats x 33 batches = 66 designs, more than SMALL_GRID_DESIGNS: evaluate_designs
    takes the general path, whose frame is evaluate's (plain string labels)."""
    assert 2 * 33 > evaluator.SMALL_GRID_DESIGNS
    batches = list(range(1, 34))
    frame = dse.evaluate_designs(CHAIN, HW, "2:4", batches).frame()
    pd.testing.assert_frame_equal(frame, evaluator.evaluate(CHAIN, HW, "2:4", batches))
    for column in ("model", "hardware", "format", "family", "fusion", "scope", "bound",
                   "hw_fallback"):
        assert not isinstance(frame[column].dtype, pd.CategoricalDtype), column
    dense = frame[frame["format"] == "dense"]
    assert dense["latency_s"].tolist() == pytest.approx(
        [(256 + 192 * b) / 1e9 for b in batches], rel=REL)


def test_the_largest_supported_batch_is_priced_and_one_more_is_refused():
    """Dense fc at batch 2^24 (workloads.MAX_BATCH): (256 + 192 x 2^24) / 1e9 s."""
    frame = dse.evaluate(CHAIN, HW, "dense", MAX_BATCH)
    assert frame["latency_s"].tolist() == pytest.approx([(256 + 192 * 2**24) / 1e9], rel=REL)
    with pytest.raises(dse.EvaluationError, match="above the largest supported"):
        dse.evaluate(CHAIN, HW, "dense", MAX_BATCH + 1)


@pytest.mark.parametrize("what", ["fusion", "scope"])
def test_evaluate_designs_refuses_an_unknown_fusion_or_scope(what):
    with pytest.raises(dse.EvaluationError, match=f"unknown {what} 'bogus'"):
        dse.evaluate_designs(CHAIN, HW, "dense", 1, **{what: "bogus"})


def test_grid_labels_of_a_pricing_that_is_gone_are_not_read(monkeypatch):
    """A cached entry of the small-grid labels whose pricing is gone (its id perhaps reused by
    a new one, here of the same trace, hardware and grid shape but another format) is never
    read: the labels are built again."""
    monkeypatch.setattr(evaluator, "_GRID_LABELS", {})
    dse.evaluate_designs(CHAIN, HW, "2:4", 1)
    ((key, _),) = evaluator._GRID_LABELS.items()
    other = dse.evaluate_designs(CHAIN, HW, "2:8", 1).frame()
    assert other["format"].tolist() == ["dense", "2:8"]
    stale = next(v for k, v in evaluator._GRID_LABELS.items() if k != key)[1]

    class Gone:
        pass

    evaluator._GRID_LABELS[key] = (weakref.ref(Gone()), stale)
    again = dse.evaluate_designs(CHAIN, HW, "2:4", 1).frame()
    assert again["format"].tolist() == ["dense", "2:4"]
    assert again["latency_s"].tolist() == pytest.approx([4.48e-7, 3.355e-7], rel=REL)


def test_at_a_tie_the_hardware_falls_back_to_dense():
    """Without a sparse tensor core, 2:4's fc runs dense (1024 FLOPs on tensor cores of 2^30
    FLOP/s) or CSR (512 FLOPs on vector cores of 2^29 FLOP/s): 2^-20 s either way, with
    DRAM of 2^40 B/s far below (at most 611.5 B, under 2^-30 s). CSR is taken only where it
    is faster, so at the tie the design runs dense, on the tensor cores."""
    tie = Accelerator(name="tie", description="", dram_bandwidth_bytes_per_s=2.0**40,
                      tensor_flops_per_s={"fp16": 2.0**30},
                      vector_flops_per_s={"fp32": 2.0**29, "fp16": 2.0**29},
                      block_sparse=BlockSparse(True, 1))
    for frame in (dse.evaluate(CHAIN, tie, "2:4", [1, 2]),
                  dse.evaluate_designs(CHAIN, tie, "2:4", [1, 2]).frame()):
        assert frame["latency_s"].tolist() == [2.0**-20, 2.0**-19] * 2
        assert frame["hw_fallback"].tolist() == ["", "", "dense", "dense"]
    layers = evaluator.evaluate_layers(CHAIN, tie, "2:4", 1)
    row = layers[layers["format"] == "2:4"].iloc[0]
    assert (row["fallback"], row["unit"], row["compute_s"]) == ("hw:dense", "tensor", 2.0**-20)


def test_a_designs_row_is_the_last_by_default():
    """With one format asked for, row() is the sparse design (the dense baseline is row 0):
    2:4 fc at batch 1, (144 + 191.5) / 1e9 s."""
    designs = dse.evaluate_designs(CHAIN, HW, "2:4", 1)
    row = designs.row()
    assert row["format"] == "2:4"
    assert row["latency_s"] == pytest.approx(3.355e-7, rel=REL)
    assert designs.row(0)["format"] == "dense"


def test_the_design_index_is_read_only():
    """Problem.design_index's arrays are cached per grid shape and shared: read-only."""
    problem = evaluator.prepare(CHAIN, HW, "2:4", [1, 2], Numerics())
    h, f, b = problem.design_index()
    assert (h.tolist(), f.tolist(), b.tolist()) == ([0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 1])
    for values in (h, f, b):
        with pytest.raises(ValueError, match="read-only"):
            values[0] = values[0]


def test_numpy_only_never_calls_the_compiled_kernels(monkeypatch):
    """Inside numpy_only() (on by default), a grid of 10,000 designs x 2 ops (20,000 op
    evaluations, not below NUMPY_MAX_OP_EVALS) is priced in numpy: the compiled kernels are
    never called, and the per-op costs are those by hand."""
    def compiled(*args):
        raise AssertionError("a compiled kernel was called")

    for name in ("_per_op_serial", "_per_op_parallel", "_design_totals_serial",
                 "_design_totals_parallel"):
        monkeypatch.setattr(kernels, name, compiled)
    ft, fs, fc, wb, fu, ff, vflops = _arrays()
    batches = np.ones(10_000)
    assert 2 * len(batches) >= kernels.NUMPY_MAX_OP_EVALS
    with kernels.numpy_only():
        out = kernels.per_op(_HW[:1], np.zeros(10_000, dtype=np.int64), batches, ft, fs, fc, wb,
                             fu, ff, vflops)
        totals = kernels.design_totals(_HW[:1], np.array([[True]]), np.array([1]), batches, ft,
                                       fs, fc, wb, fu, ff, vflops)
    c, m, _, _, _ = _per_op_by_hand(0, 0, 1.0)
    np.testing.assert_allclose(out[0][-1], c, rtol=REL)
    np.testing.assert_allclose(out[1][-1], m, rtol=REL)
    assert totals[-1, 0, kernels.T_MEMORY_UNFUSED] == pytest.approx(m.sum(), rel=REL)


def test_outside_numpy_only_the_totals_run_compiled(monkeypatch):
    """By default (no numpy_only block) design_totals runs the compiled kernel: the serial one
    for a grid of 4 designs x 2 ops, far below PARALLEL_MIN_OP_EVALS."""
    sentinel = np.zeros((4, 2, kernels.TOTAL_COLUMNS))
    monkeypatch.setattr(kernels, "_design_totals_serial", lambda *args: sentinel)
    ft, fs, fc, wb, fu, ff, vflops = _arrays()
    totals = kernels.design_totals(_HW, np.array([[True], [False]]), np.array([1]), _BATCHES,
                                   ft, fs, fc, wb, fu, ff, vflops)
    assert totals is sentinel


# Survivors of the full run's later lines (layer_sums' fast group sums, numerics' checks,
# frozen records): values by hand.

def test_the_fast_group_sums_serve_in_the_installed_pandas():
    """The self-check passes in the pandas this project pins (3.x), so group_sums takes its
    own path, not groupby's; a broken _group_sums (or a check that always fails) would
    fall back silently, slower."""
    from dse.roofline import layer_sums

    layer_sums._CHECKED.clear()
    assert layer_sums._summing_checked() is True


def test_group_sums_by_hand():
    """_group_sums itself, on small cases summed by hand: contiguous groups (reduceat),
    interleaved ones with a NaN skipped (the compensated loop), an empty group 0, none."""
    from dse.roofline.layer_sums import _group_sums

    values = np.array([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0], [8.0, 80.0]])
    out = _group_sums(values, np.array([0, 0, 1, 2], dtype=np.intp), 4)
    np.testing.assert_array_equal(out, [[3.0, 30.0], [4.0, 40.0], [8.0, 80.0], [0.0, 0.0]])
    out = _group_sums(values, np.array([2, 1, 2, 1], dtype=np.intp), 3)
    np.testing.assert_array_equal(out, [[0.0, 0.0], [10.0, 100.0], [5.0, 50.0]])
    nan = values.copy()
    nan[1, 0] = np.nan
    out = _group_sums(nan, np.array([0, 0, 1, 1], dtype=np.intp), 2)
    np.testing.assert_array_equal(out, [[1.0, 30.0], [12.0, 120.0]])
    np.testing.assert_array_equal(_group_sums(values[:0], np.zeros(0, dtype=np.intp), 2),
                                  np.zeros((2, 2)))


def test_layer_rows_and_activation_peaks_are_frozen():
    """LayerRows and ActivationPeak are frozen records (shared between calls): assigning a
    field raises."""
    from dse.roofline.layer_sums import LayerRows
    from dse.roofline.memory import ActivationPeak

    rows = LayerRows(np.zeros(1), np.zeros(1), 1, np.zeros(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rows.count = 2
    peak = ActivationPeak(np.zeros(1), np.zeros(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        peak.dram_elems = np.ones(1)


@pytest.mark.parametrize(("dtype", "width"), [("fp16", 2), ("bf16", 2), ("tf32", 4),
                                               ("fp8", 1), ("int8", 1)])
def test_value_bytes_of_each_tensor_dtype(dtype, width):
    """Bytes per value, by the formats' definitions (tf32 stored as fp32)."""
    assert Numerics(dtype=dtype).value_bytes == width


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_every_index_width_is_taken(width):
    assert Numerics(index_width_bytes=width).index_width_bytes == width


@pytest.mark.parametrize("width", [0, 3, 16, True, 2.0])
def test_other_index_widths_are_refused(width):
    with pytest.raises(NumericsError, match="index width"):
        Numerics(index_width_bytes=width)


def test_weight_group_sizes_from_one_up():
    assert Numerics(weight_dtype="int4", weight_group_size=1).weight_group_size == 1
    for group in (0, -128, True, 1.5):
        with pytest.raises(NumericsError, match="weight group size"):
            Numerics(weight_dtype="int4", weight_group_size=group)


def test_the_compute_dtype_as_weight_dtype_is_not_quantised():
    """weight_dtype equal to dtype means unquantised (the docstring), any other
    non-quantising dtype is refused."""
    assert not Numerics(dtype="fp16", weight_dtype="fp16").quantised
    with pytest.raises(NumericsError, match="weight dtype"):
        Numerics(dtype="fp16", weight_dtype="bf16")


def test_group_sums_takes_its_own_path_once_checked(monkeypatch):
    """Once the self-check has passed, group_sums never goes through groupby."""
    from dse.roofline import layer_sums

    assert layer_sums._summing_checked() is True

    def groupby(*args):
        raise AssertionError("group_sums went through groupby")

    monkeypatch.setattr(layer_sums, "_pandas_group_sums", groupby)
    out = layer_sums.group_sums(np.array([[1.0], [2.0], [4.0]]), np.array([0, -1, 0]), 1)
    np.testing.assert_array_equal(out, [[5.0]])


def test_group_sums_of_the_float_equal_to_nat():
    """-2**63 is a float like any other here (pandas treats it as NaT only for datetimes):
    -2**63 + 1 rounds to -2**63 in float64; interleaved groups take the compensated loop."""
    from dse.roofline.layer_sums import _group_sums

    values = np.array([[-2.0**63], [5.0], [1.0]])
    out = _group_sums(values, np.array([0, 1, 0], dtype=np.intp), 2)
    np.testing.assert_array_equal(out, [[-2.0**63], [5.0]])


def test_memory_batch_defaults_to_one():
    """evaluate_memory without batches: batch 1, CHAIN's unfused peak per sample by hand (the
    model input 64 and fc's output 32 live at fc: 96 x 2 B = 192 B)."""
    row = evaluate_memory(CHAIN, HW, "dense", scope="all").iloc[0]
    assert row["batch"] == 1
    assert row["activation_peak_bytes"] == 192.0


# --- the totals in numpy on a grid of formats, some falling back (task 60) ---------------------

#: 2 hardware (_HW) x 3 formats x 2 batches (_BATCHES), 4 ops. Format 0 runs natively on both
#: hardware, format 1 only on hardware 0 (hardware 1 falls back: dense in slot 0, CSR in slot 1),
#: format 2 on neither, but none of its ops needs its kernel (fallback_ops 0): it runs its own.
_NATIVE = np.array([[True, True, False], [True, False, False]])
_FALLBACK_OPS = np.array([2, 1, 0], dtype=np.int64)


def _grid_arrays():
    """Each (3 kernels, 3 formats, 4 ops) array of distinct values (so a wrong kernel or format
    shows), the ops' vector FLOPs; op 2 of the own kernel runs on the sparse tensor core, whose
    time decides its compute (tensor 100/P + 4000/P_sparse against vector 1/P_vector)."""
    k, f, j = np.meshgrid(np.arange(3.0), np.arange(3.0), np.arange(4.0), indexing="ij")
    ft = 100.0 + 37.0 * k + 11.0 * f + 3.0 * j
    fs = np.where(k == 0, 500.0 + 60.0 * f + 7.0 * j, 0.0)
    fs[0, :, 2] = 4000.0 + 100.0 * np.arange(3)
    fc = np.where(k == 2, 2000.0 + 13.0 * f + 50.0 * j, 5.0 * j)
    wb = 300.0 + 29.0 * k + 17.0 * f + 5.0 * j
    fu = 40.0 + 3.0 * k + 2.0 * f + j
    ff = 10.0 + k + f + 2.0 * j
    vflops = np.array([1.0, 16.0, 1.0, 64.0])
    return ft, fs, fc, wb, fu, ff, vflops


def _totals_by_hand(h, k, f, batch):
    """One design's 11 totals, op by op in Python floats from the roofline's formulas."""
    ft, fs, fc, wb, fu, ff, v = _grid_arrays()
    inv = [float(x) for x in _HW[h]]
    t = dict(unfused=0.0, fused=0.0, compute=0.0, mem=0.0, mem_fused=0.0, weights=0.0,
             flops=0.0, bound=0, bound_fused=0, feat=0.0, feat_fused=0.0)
    for j in range(4):
        tensor = batch * (ft[k, f, j] * inv[1] + fs[k, f, j] * inv[2])
        vector = batch * (fc[k, f, j] * inv[3] + v[j] * inv[4])
        c = max(tensor, vector)
        m = (wb[k, f, j] + fu[k, f, j] * batch) * inv[0]
        fm = (wb[k, f, j] + ff[k, f, j] * batch) * inv[0]
        t["unfused"] += max(c, m)
        t["fused"] += max(c, fm)
        t["compute"] += c
        t["mem"] += m
        t["mem_fused"] += fm
        t["weights"] += wb[k, f, j]
        t["flops"] += (ft[k, f, j] + fs[k, f, j] + fc[k, f, j]) * batch
        t["bound"] += m > c
        t["bound_fused"] += fm > c
        t["feat"] += fu[k, f, j] * batch
        t["feat_fused"] += ff[k, f, j] * batch
    return [t["unfused"], t["fused"], t["compute"], t["mem"], t["mem_fused"], t["weights"],
            t["flops"], t["bound"], t["bound_fused"], t["feat"], t["feat_fused"]]


@pytest.mark.parametrize("kernel", ["_design_totals_numpy", "_design_totals_serial",
                                    "_design_totals_parallel"])
def test_design_totals_of_a_grid_of_formats_by_hand(kernel):
    """Design d = (h x 3 + f) x 2 + b. Slot 0 runs the format's own kernel (0) where the
    hardware runs it or no op needs it, else dense (1); slot 1 the same, with CSR (2) in place
    of dense. Only hardware 1 x format 1 falls back (designs 8 and 9)."""
    args = (_HW, _NATIVE, _FALLBACK_OPS, _BATCHES, *_grid_arrays())
    totals = getattr(kernels, kernel)(*args)
    assert totals.shape == (12, 2, kernels.TOTAL_COLUMNS)
    for d in range(12):
        h, f, b = d // 6, (d // 2) % 3, d % 2
        falls_back = (h, f) == (1, 1)
        for slot, k in enumerate((1, 2) if falls_back else (0, 0)):
            np.testing.assert_allclose(totals[d, slot], _totals_by_hand(h, k, f, _BATCHES[b]),
                                       rtol=REL, err_msg=f"design {d} slot {slot}")
    # The sparse tensor core decides op 2's compute: design 0 (h 0, f 0, batch 1) runs
    # 106 x 1e-12 + 4000 x 5e-13 = 2.106e-9 s there, against 1 x 2e-11 on the vector cores.
    c, *_ = kernels._per_op_numpy(_HW, np.zeros(12, dtype=np.int64), _BATCHES,
                                  *_grid_arrays())
    assert c[0, 2] == pytest.approx(2.106e-9, rel=REL)


@pytest.mark.parametrize("kernel", ["_per_op_serial", "_per_op_parallel", "_per_op_numpy"])
def test_per_op_costs_of_a_grid_of_formats_by_hand(kernel):
    """Per op of each design (kernel 0, 1, 2, 0, ... by design), the compute time
    batch x max(ft / P_tensor + fs / P_sparse, fc / P_csr + v / P_vector) by hand, with the
    sparse tensor core deciding op 2 of kernel 0."""
    chosen = np.arange(12, dtype=np.int64) % 3
    ft, fs, fc, wb, fu, ff, v = _grid_arrays()
    compute, memory, memory_fused, flops, wbytes = getattr(kernels, kernel)(
        _HW, chosen, _BATCHES, ft, fs, fc, wb, fu, ff, v)
    for d in range(12):
        h, f, batch, k = d // 6, (d // 2) % 3, float(_BATCHES[d % 2]), int(chosen[d])
        inv = [float(x) for x in _HW[h]]
        for j in range(4):
            want = max(batch * (ft[k, f, j] * inv[1] + fs[k, f, j] * inv[2]),
                       batch * (fc[k, f, j] * inv[3] + v[j] * inv[4]))
            assert compute[d, j] == pytest.approx(want, rel=REL), (d, j)
            assert memory[d, j] == pytest.approx((wb[k, f, j] + fu[k, f, j] * batch) * inv[0],
                                                 rel=REL)
            assert memory_fused[d, j] == pytest.approx(
                (wb[k, f, j] + ff[k, f, j] * batch) * inv[0], rel=REL)
            assert flops[d, j] == (ft[k, f, j] + fs[k, f, j] + fc[k, f, j]) * batch
            assert wbytes[d, j] == wb[k, f, j]


# --- the memory model's live sets and edges (task 60) ------------------------------------------

def test_an_early_model_output_stays_live_to_the_end():
    """a (an output no op reads, 100 elements) is written first and lives to the last op;
    b reads the model input (4) and writes 1; c reads b and writes 50. Unfused live sets:
    at a: input 4 + a 100 = 104; at b: 4 + 100 + 1 = 105 (the input's last reader);
    at c: a 100 + b 1 + c 50 = 151, the peak."""
    trace = Trace.from_records("early-output", [4], [
        _op("a", "elementwise", 0, 0, 0, 0, 4, 100, 100, False, ["input"]),
        _op("b", "elementwise", 0, 0, 0, 0, 4, 1, 4, False, ["input"]),
        _op("c", "elementwise", 0, 0, 0, 0, 1, 50, 50, False, ["b"]),
    ], {"source": "test"})
    assert trace.ops["is_output"].tolist() == [True, False, True]
    from dse.roofline.memory import activation_peak

    assert activation_peak(trace, "unfused").dram_elems == 151.0


def _memory_of_one_design(trace, fusion, capacity=None, l2=None):
    from dse.roofline.memory import memory_from_stored

    hw = dataclasses.replace(HW, dram_capacity_bytes=capacity, l2_bytes=l2)
    return memory_from_stored(0.0, np.array([np.nan]), np.array([1.0]),
                              np.array([fusion], dtype=object), np.array(["hand"], dtype=object),
                              trace, {"hand": hw}, Numerics(dtype="fp8"))


def test_a_batch_of_one_byte_a_sample_fits_as_many_times_as_the_room():
    """fp8, the model input of 1 element and one op writing nothing: 1 B a sample; no weights,
    so 5 B of DRAM fit batches up to 5."""
    trace = Trace.from_records("one-byte", [1], [
        _op("x", "other", 0, 0, 0, 0, 1, 0, 0, False, ["input"])], {"source": "test"})
    out = _memory_of_one_design(trace, "unfused", capacity=5.0)
    assert out["activation_peak_bytes"].tolist() == [1.0]
    assert out["largest_batch_that_fits"].tolist() == [5]


def test_one_byte_kept_on_chip_of_unknown_l2_is_not_known_to_fit():
    """fp8, fused: a's 1 element stays on chip for b (the model output): 1 B on chip, and with
    no L2 size whether it fits is unknown (NA); with an L2 of 1 B it fits."""
    trace = Trace.from_records("one-on-chip", [1], [
        _op("a", "elementwise", 0, 0, 0, 0, 1, 1, 1, False, ["input"]),
        _op("b", "elementwise", 0, 0, 0, 0, 1, 1, 1, False, ["a"])], {"source": "test"})
    out = _memory_of_one_design(trace, "fused")
    assert out["onchip_peak_bytes"].tolist() == [1.0]
    assert out["fits_on_chip"].isna().tolist() == [True]
    assert out["fits_on_chip"].tolist() == [pd.NA]
    assert _memory_of_one_design(trace, "fused", l2=1.0)["fits_on_chip"].tolist() == [True]


# --- an MoE layer of 4 tokens a sample, with an unrouted linear after it (task 60) -------------

#: experts: a routed linear of 4 sets of W 8 x 16 (512 weights, 1024 B at fp16), 4 tokens a
#: sample, 1 set a token (n = 4 token-set pairs); a step of batch b reads 1 - (3/4)^(4b) of them.
#: norm: 8 weights; head: a linear W 4 x 8 (32 weights), neither routed.
MOE4 = Trace.from_records("moe4", [4, 16], [
    _op("experts", "linear", 8, 16, 4, 512, 64, 32, 0, True, ["input"]),
    _op("norm", "norm", 0, 0, 0, 8, 32, 32, 128, False, ["experts"]),
    _op("head", "linear", 4, 8, 4, 32, 32, 16, 0, True, ["norm"]),
], {"routed_weights_by_op": {"experts": {"sets": 4, "sets_per_token": 1,
                                         "tokens_per_sample": 4}}})


def test_weights_read_by_a_step_of_several_tokens_a_sample():
    """Batch 1: T = 4 tokens touch 1 - (3/4)^4 = 175/256 of the experts; batch 2: T = 8,
    1 - (3/4)^8 = 58975/65536. norm and head read theirs whole. The experts left unread:
    1024 x 81/256 = 324 B and 1024 x 6561/65536 = 102.515625 B."""
    from dse.roofline.pricing import weight_read_share

    assert weight_read_share(MOE4, slice(None), 1.0).tolist() == pytest.approx(
        [175 / 256, 1.0, 1.0], rel=REL)
    assert weight_read_share(MOE4, slice(None), 2.0).tolist() == pytest.approx(
        [58975 / 65536, 1.0, 1.0], rel=REL)
    frame = dse.evaluate(MOE4, HW, "dense", [1, 2], scope="all")
    assert unread_weight_bytes(frame, MOE4).tolist() == pytest.approx([324.0, 102.515625],
                                                                      rel=REL)


def test_weight_sets_of_routed_and_unrouted_ops():
    """The experts store their 4 sets; norm and head, not routed, one each. What is stored
    is the sets, however many a token reads: even none."""
    assert pricing.weight_sets(MOE4).tolist() == [4.0, 1.0, 1.0]
    assert pricing.weight_sets(MOE).tolist() == [4.0, 1.0]
    idle = Trace.from_records("moe-idle", [16], [
        _op("experts", "linear", 8, 16, 1, 512, 16, 8, 0, True, ["input"]),
        _op("norm", "norm", 0, 0, 0, 8, 8, 8, 32, False, ["experts"]),
    ], {"routed_weights_by_op": {"experts": {"sets": 4, "sets_per_token": 0,
                                             "tokens_per_sample": 1}}})
    assert pricing.weight_sets(idle).tolist() == [4.0, 1.0]


def test_quantised_dense_weight_bytes_of_every_expert():
    """int8 weights, one fp16 scale per row: the experts' 4 x 128 weights at 1 B = 512 B and
    4 x 8 scales x 2 B = 64 B: 576 B; norm's 8 weights stay fp16: 16 B."""
    assert pricing.weight_bytes_dense(MOE, Numerics(weight_dtype="int8")).tolist() \
        == [576.0, 16.0]


def test_a_one_weight_linear_has_gemm_weights():
    """A linear W 1 x 1 (1 weight): GEMM weights, quantised with a scale (int8: 1 B + one fp16
    scale 2 B); unpruned it is not sparse at all (1 - 1/1 = 0)."""
    one = Trace.from_records("one-weight", [1], [
        _op("w", "linear", 1, 1, 1, 1, 1, 1, 0, True, ["input"])], {"source": "test"})
    assert pricing.has_gemm_weights(one.ops).tolist() == [True]
    assert pricing.weight_bytes_dense(one, Numerics(weight_dtype="int8")).tolist() == [3.0]
    assert price(one, stack_formats([parse("dense")]), Numerics()).weight_sparsity.tolist() \
        == [0.0]


def test_csr_fallback_weight_bytes_with_index_scales_and_bias_by_hand():
    """fc: W 8 x 16 and a bias of 8 (136 weights), int8 weights with one fp16 scale a row,
    4-byte indices. 2:4 as CSR at 50%: 64 values x 1 B + (64 column indices + 8 + 1 row
    pointers) x 4 B = 356 B, scales 8 x 2 = 16 B, the bias 8 x 2 B (fp16) = 16 B: 388 B. Dense
    (stack_formats puts it first) keeps its dense bytes: 128 x 1 B + 16 + 16 = 160 B."""
    fc = Trace.from_records("fc-bias", [4, 16], [
        _op("fc", "linear", 8, 16, 4, 136, 64, 32, 0, True, ["input"])], {"source": "test"})
    p = price(fc, stack_formats([parse("2:4")]), Numerics(weight_dtype="int8"))
    assert p.csr_weight_bytes.tolist() == [[160.0], [388.0]]


def test_kv_cache_elements_of_the_ops_that_read_it_and_none_elsewhere():
    """Only act reads from the KV cache (12 elements); the other ops read none."""
    kv = Trace.from_records("kv-one", [4, 16], [
        _op("fc", "linear", 8, 16, 4, 128, 64, 32, 0, True, ["input"]),
        _op("act", "activation", 0, 0, 0, 0, 32, 32, 256, False, ["fc"]),
    ], {"kv_read_by_op": {"act": 12}})
    assert pricing.cache_read_elems(kv).tolist() == [0.0, 12.0]


def test_spilled_share_by_size_and_by_count():
    """By size where the producers wrote anything (1 + 0 elements, the 1 spilled: all of it);
    by count where they wrote nothing (2 of 3 edges spilled)."""
    assert pricing.spilled_share([1.0, 0.0], [False, True]) == 1.0
    assert pricing.spilled_share([0.5, 0.5], [False, True]) == 0.5
    assert pricing.spilled_share([0.0, 0.0, 0.0], [False, False, True]) == pytest.approx(2 / 3)
    assert pricing.spilled_share([0.0, 0.0], [False, True]) == 0.5
    assert pricing.spilled_share([], []) == 1.0


def test_feature_bytes_under_a_rule_table_by_hand():
    """CHAIN under linear -> activation (test_rule_edges_by_hand's edges: inputs 64, 0, 32, 32;
    outputs 0, 32, 32, 32 elements) at fp16: all 128, 64, 128, 128 B; inputs 128, 0, 64, 64 B."""
    total, inputs = pricing.feature_bytes_rules(
        CHAIN, RuleTable.of("t", [("linear", "activation")]), Numerics())
    assert total.tolist() == [128.0, 64.0, 128.0, 128.0]
    assert inputs.tolist() == [128.0, 0.0, 64.0, 64.0]


def test_layer_rows_keep_designs_apart_past_2_to_the_64():
    """Five keys of 8192 = 2**13 values each: numbered key by key, a row's number reaches
    2**65, past int64, so the numbers are renumbered on the way. Without that, (4096, 0, 0, 0,
    0) would number 4096 x 2**52 = 2**64, which wraps to 0: (0, 0, 0, 0, 0)'s number."""
    from dse.roofline.layer_sums import DESIGN_KEYS, layer_rows

    n = 8192
    first = np.concatenate([np.arange(n), [0]])
    other = np.concatenate([np.arange(n), [n // 2]])
    other[n // 2] = 0  # row 4096: (4096, 0, 0, 0, 0); the last row brings back 4096
    layers = pd.DataFrame({key: first if key == DESIGN_KEYS[0] else other
                           for key in DESIGN_KEYS} | {"op": "fc"})
    designs = pd.DataFrame({key: [0, n // 2] if key == DESIGN_KEYS[0] else [0, 0]
                            for key in DESIGN_KEYS})
    rows = layer_rows(designs, layers, CHAIN)
    assert rows.of_designs[0] != rows.of_designs[1]
    assert rows.of_layers[0] == rows.of_designs[0]
    assert rows.of_layers[n // 2] == rows.of_designs[1]
    assert len(set(rows.of_layers.tolist())) == n + 1


def test_the_first_runs_kernels_are_cached_where_the_note_looks():
    """The two kernels a first compiled run compiles (the serial design totals and
    ``_accumulate``, which it calls) keep their code on disk in the folder the first-run note
    looks in (dse.cli.first_run): without that cache the note would print on every run.
    In-process (numba's dispatchers are made, nothing compiled); the runs themselves are in
    tests/test_first_run.py and tests/test_first_run_kernels.py."""
    from dse.cli import first_run
    from dse.roofline import kernels

    for name in ("_accumulate", "_design_totals_serial"):
        cache = getattr(kernels, name)._cache  # numba's NullCache (cache=False) has no path
        assert getattr(cache, "_cache_path", None) == first_run._cache_folder(), name

