"""The small-grid path of ``dse.evaluate_designs`` (issue 27: one design from Python) gives the
general path's columns bit for bit: the same names in the same order, dtypes and bytes, over
traces, hardware (with and without fallbacks), formats, batches, fusion models and scopes.
No timing here: the speed is ``python -m benchmarks.evaluator_throughput``'s."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import accelerator_models
import dse
from dse.roofline import Numerics
from dse.roofline.evaluator import (
    SMALL_GRID_DESIGNS,
    _as_arrays,
    _small_grid_columns,
    _totals_columns,
    fusion_models,
    prepare,
)
from tests.conftest import ROUND_GPU, chain_trace

# (hardware, formats): v100 has no sparse tensor core and the A100 runs only 2:4, so those
# grids fall back (dense or CSR); h100 + l4 + mi300x is three accelerators in one grid.
GRIDS = [
    ("a100-40gb", "2:4"),
    ("a100-40gb", ["1:8", "block16@0.75", "unstructured@0.9"]),
    ("v100", "2:4"),
    (["h100-sxm", "l4", "mi300x"], ["2:4", "4:8", "block4@87.5%"]),
    ("h100-sxm", "dense"),
]


def assert_same_columns(fast: dict, general: dict) -> None:
    assert list(fast) == list(general)
    for name in general:
        got, want = fast[name], general[name]
        assert isinstance(got, np.ndarray), name
        assert (got.dtype, got.shape) == (want.dtype, want.shape), name
        if want.dtype == object:
            assert got.tolist() == want.tolist(), name
        else:  # bit for bit, NaNs and signed zeros included
            assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), \
                name


@pytest.mark.parametrize("trace", ["toy_hybrid", "convnext_tiny", "resnet50"])
@pytest.mark.parametrize("hardware, formats", GRIDS)
@pytest.mark.parametrize("batches", [1, [1, 8, 64]])
@pytest.mark.parametrize("scope", ["gemm", "all"])
def test_small_grid_columns_equal_the_general_path(trace, hardware, formats, batches, scope):
    problem = prepare(trace, hardware, formats, batches, Numerics())
    fusions = list(fusion_models())  # every fusion model, rules tables included
    # Twice: the first call fills the labels' cache, the second reads it.
    for _ in range(2):
        fast = _small_grid_columns(problem, scope, fusions)
        general = [_as_arrays(c) for c in _totals_columns(problem, scope, fusions)]
        assert len(fast) == len(general) == len(fusions)
        for f, g in zip(fast, general, strict=True):
            assert_same_columns(f, g)


@pytest.mark.parametrize("numerics", [Numerics(), Numerics(dtype="bf16", weight_dtype="int4"),
                                      Numerics(dtype="fp8", kv_dtype="fp8")])
def test_numerics_change_the_cached_labels_with_the_pricing(numerics):
    problem = prepare("deit_small_patch16_224", "h100-sxm", ["2:4", "block8@0.9"], [1, 4],
                      numerics)
    for f, g in zip(_small_grid_columns(problem, "gemm", ["unfused", "fused"]),
                    [_as_arrays(c) for c in _totals_columns(problem, "gemm",
                                                            ["unfused", "fused"])],
                    strict=True):
        assert_same_columns(f, g)


@pytest.mark.parametrize("kwargs", [
    dict(hardware="a100-40gb", formats="2:4", batches=1),
    dict(hardware="v100", formats=["2:4", "1:8"], batches=[1, 32], fusion="fused_prefetched"),
    dict(hardware=["a100-40gb", "h100-sxm"], formats=["2:4", "block16@0.75"], batches=[1, 8],
         fusion=["unfused", "fused", "rules:inductor-cpu"], scope=["gemm", "all"]),
    # 2 x 6 x 6 = 72 designs, above SMALL_GRID_DESIGNS: the general path, the same answer.
    dict(hardware=["a100-40gb", "v100"], formats=["2:4", "1:8", "4:8", "block16@0.75", "dense"],
         batches=[1, 2, 4, 8, 16, 32], fusion="fused"),
])
def test_evaluate_designs_frame_equals_evaluate(kwargs):
    fast = dse.evaluate_designs("toy_hybrid", **kwargs)
    pd.testing.assert_frame_equal(fast.frame(), dse.roofline.evaluate("toy_hybrid", **kwargs),
                                  check_exact=True)


def test_the_grid_size_that_switches_paths_gives_the_same_rows():
    # 1 x 8 x 8 = 64 designs take the small-grid path; 1 x 8 x 9 = 72, the general one.
    formats = ["2:4", "1:8", "4:8", "block16@0.75", "block4@0.5", "unstructured@0.9", "1:4"]
    small = dse.evaluate_designs("toy_hybrid", "v100", formats, [1, 2, 4, 8, 16, 32, 64, 128])
    large = dse.evaluate_designs("toy_hybrid", "v100", formats,
                                 [1, 2, 4, 8, 16, 32, 64, 128, 256])
    assert len(small) == SMALL_GRID_DESIGNS and len(large) == 72
    rows = large["batch"] != 256
    for name in large.columns:
        assert small[name].tolist() == large[name][rows].tolist(), name


def test_one_design_by_hand(round_gpu):
    """chain (fc -> GELU -> fc2, 16 tokens of width 1024) on round-gpu (1 TB/s, 100 TFLOP/s fp16
    tensor, 20 TFLOP/s fp16 vector), batch 1, unfused, every op: all three ops are memory bound.
    Dense: per fc 2 MiB of fp16 weights + 64 KiB of features; GELU 64 KiB. 2:4: half the values
    plus 2 bits of metadata per kept value, 1 MiB + 128 KiB per fc."""
    designs = dse.evaluate_designs(chain_trace(), round_gpu, "2:4", 1, scope="all")
    dense, sparse = designs.row(0), designs.row(1)
    features = 3 * 65536
    assert dense["latency_s"] == pytest.approx((2 * (2097152 + 65536) + 65536) / 1e12, rel=1e-15)
    assert dense["compute_s"] == pytest.approx(2 * 33554432 / 100e12 + 131072 / 20e12,
                                               rel=1e-15)
    assert (dense["weight_bytes"], dense["feature_bytes"]) == (2 * 2097152, features)
    sparse_bytes = 2 * (1048576 + 131072) + features
    assert sparse["latency_s"] == pytest.approx(sparse_bytes / 1e12, rel=1e-15)
    assert sparse["speedup"] == pytest.approx((2 * 2097152 + features) / sparse_bytes, rel=1e-15)
    assert (sparse["format"], sparse["bound"], sparse["memory_bound_ops"], sparse["ops"]) == (
        "2:4", "memory", 3, 3)
    assert (sparse["hw_fallback"], sparse["hw_fallback_ops"]) == ("", 0)


def test_a_fallback_by_hand(round_gpu):
    """round-gpu runs only 2:4, so 1:8's two linears fall back; as CSR (1/8 of the values at
    fp16, an int32 index of nnz + M + 1) each moves 0.86 MB against dense's 2.16 MB, so CSR."""
    design = dse.evaluate_designs(chain_trace(), round_gpu, "1:8", 1, scope="all").row()
    csr_bytes = 131072 * 2 + 4 * (131072 + 1024 + 1) + 65536
    assert design["latency_s"] == pytest.approx((2 * csr_bytes + 65536) / 1e12, rel=1e-15)
    assert (design["hw_fallback"], design["hw_fallback_ops"]) == ("csr", 2)


def test_new_rates_under_the_same_names_are_priced_anew():
    """The labels are cached by hardware name; the rates never are: a slower DRAM under the
    same name moves the memory-bound latency, as the general path says."""
    fast = accelerator_models.load("a100-40gb")
    slow = dataclasses.replace(fast, dram_bandwidth_bytes_per_s=0.5e12)
    assert slow.name == fast.name
    a = dse.evaluate_designs("toy_hybrid", fast, "2:4", 1)
    b = dse.evaluate_designs("toy_hybrid", slow, "2:4", 1)
    assert (b["memory_s"] > a["memory_s"]).all()
    pd.testing.assert_frame_equal(b.frame(), dse.roofline.evaluate("toy_hybrid", slow, "2:4", 1),
                                  check_exact=True)


def test_what_the_labels_are_cached_by_changes_them():
    """Same name, grid shape and trace, but other batch values, or no sparse tensor core (so
    2:4 falls back): each call's labels are its own, as the general path gives them."""
    a100 = accelerator_models.load("a100-40gb")
    no_sparse = dataclasses.replace(a100, sparse_tensor=None)
    calls = [(a100, [1, 2]), (a100, [4, 8]), (no_sparse, [4, 8]), (a100, [4, 8])]
    for hardware, batches in calls:
        designs = dse.evaluate_designs("toy_hybrid", hardware, "2:4", batches)
        assert designs["batch"].tolist() == batches * 2
        fallback = ["", "", "dense", "dense"] if hardware is no_sparse else [""] * 4
        # toy_hybrid's 2:4 GEMMs are small enough that dense beats CSR on the A100.
        assert designs["hw_fallback"].tolist() == fallback
        pd.testing.assert_frame_equal(designs.frame(),
                                      dse.roofline.evaluate("toy_hybrid", hardware, "2:4", batches),
                                      check_exact=True)


def test_results_are_the_callers_own_arrays():
    """Writing into a result leaves the next call's alone (the cached labels are copied)."""
    first = dse.evaluate_designs("toy_hybrid", "a100-40gb", "2:4", [1, 2])
    before = {k: v.copy() for k, v in first.columns.items()}
    for name, column in first.columns.items():
        assert column.flags.writeable, name
        column[:] = "x" if column.dtype == object else 0
    second = dse.evaluate_designs("toy_hybrid", "a100-40gb", "2:4", [1, 2])
    for name, column in second.columns.items():
        assert column.tolist() == before[name].tolist(), name
        assert not np.shares_memory(column, first[name]), name


def test_bad_inputs_are_still_refused():
    with pytest.raises(dse.EvaluationError, match="unknown fusion 'fuse'"):
        dse.evaluate_designs("toy_hybrid", "a100-40gb", "2:4", 1, fusion="fuse")
    with pytest.raises(dse.EvaluationError, match="unknown scope 'gemms'"):
        dse.evaluate_designs("toy_hybrid", "a100-40gb", "2:4", 1, scope="gemms")
    with pytest.raises(dse.EvaluationError, match="batch size 0"):
        dse.evaluate_designs("toy_hybrid", "a100-40gb", "2:4", 0)



def test_a_spec_file_is_read_again_when_it_changes(tmp_path):
    """Specs by name are parsed once per file version (accelerator_models.loader): a file
    rewritten with another bandwidth loads the new figure, and each load's dict is its own."""
    from accelerator_models.loader import parse_spec_file

    spec = tmp_path / "mine.toml"
    text = ROUND_GPU.read_text(encoding="utf-8")
    spec.write_text(text, encoding="utf-8")
    assert accelerator_models.load(str(spec)).dram_bandwidth_bytes_per_s == 1e12
    first = parse_spec_file(spec)
    first["sparse_tensor.patterns"].append("1:8")
    assert parse_spec_file(spec)["sparse_tensor.patterns"] == ["2:4"]
    spec.write_text(text.replace("= 1e12", "= 2.5e12"), encoding="utf-8")
    assert accelerator_models.load(str(spec)).dram_bandwidth_bytes_per_s == 2.5e12
