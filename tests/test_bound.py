"""The bound holds: no shipped measurement beats it, under the condition it ran in.

Deterministic: these tests read shipped data (timings recorded once) and dse's own arithmetic,
never a timing taken now. Also here: the pieces the bound is made of, by value (touched
operands against masks drawn at random, the cache-aware memory time by hand, the [cache] table).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import accelerator_models
import dse
import formats
from benchmarks.bounds.rebound_datasets import BOUND_SPECS
from dse.calibrate.validate import _converted_linears_only
from dse.measure.dataset import load_dataset, shipped_datasets
from dse.roofline import CacheError, memory_time
from workloads import Trace, load_trace

ROOT = Path(__file__).resolve().parent.parent

# --- every shipped kernel row -------------------------------------------------------------


@pytest.mark.parametrize("name", shipped_datasets())
def test_no_shipped_kernel_row_beats_its_bound(name):
    frame = load_dataset(name)
    spec = BOUND_SPECS[name][0]
    timed = frame[frame["error"] == ""]
    assert len(timed) > 0
    # Every row was bounded on the dataset's peak spec, under its own condition.
    assert set(timed["hw"]) == {spec}
    assert set(timed["cache"]) <= {"cold", "warm"}
    beaten = timed[timed["min_s"] < timed["sol_s"]]
    assert beaten.empty, beaten[["family", "implementation", "cache", "m", "k", "n", "format",
                                 "min_s", "sol_s"]].head(10).to_string()


@pytest.mark.parametrize("name", shipped_datasets())
def test_shipped_bounds_are_what_the_code_computes(name):
    """The stored sol_s is not trusted: a sample of rows is repriced from its own columns."""
    from dse.measure.sol import bound_columns, row_features

    spec, dtype, vector_dtype, csr_dtype = BOUND_SPECS[name]
    frame = load_dataset(name)
    rows = frame[(frame["error"] == "") & (frame["family"] != "model")]
    sample = pd.concat([g.head(40) for _, g in rows.groupby(["family", "cache"])])
    # Without what was stored (a GEMM row the code skipped would keep it and compare equal);
    # a vector op's FLOPs and bytes are measured inputs and stay.
    gemm = sample["family"] != "vector"
    bare = sample.drop(columns=["sol_s", "sol_bound", "hw", "sol_fraction"])
    bare.loc[gemm, ["flops", "bytes"]] = np.nan
    priced = bound_columns(bare, accelerator_models.load(spec), dtype, vector_dtype,
                           csr_dtype, features=row_features(bare))
    assert (priced["hw"] == spec).all() and priced["sol_bound"].isin(["compute", "memory"]).all()
    np.testing.assert_allclose(priced["flops"].to_numpy(), sample["flops"].to_numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(priced["bytes"].to_numpy(), sample["bytes"].to_numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(priced["sol_fraction"].to_numpy(),
                               sample["sol_s"].to_numpy() / sample["median_s"].to_numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(priced["sol_s"].to_numpy(), sample["sol_s"].to_numpy(),
                               rtol=1e-12)


#: The H100 rows timed in the number types dse extrapolates (benchmarks/gpu/collect --parts
#: dtype_gemm; measured, not shipped as a dataset): each is priced at its own compute dtype,
#: the weight-only kernels on their narrow weights.
DTYPE_ROWS = [ROOT / f"benchmarks/gpu/results/{run}/parts/dtype_gemm.kernels.parquet"
              for run in ("collect-dtype", "collect-dtype-seed1")]
WEIGHT_ONLY = {"int4_tinygemm": ("int4", 128), "int8_weight_only": ("int8", None),
               "int8_dequant_linear": ("int8", None)}


def test_no_dtype_row_beats_its_bound_and_the_bounds_are_what_the_code_computes():
    from dse.measure.sol import bound_columns

    frame = pd.concat([pd.read_parquet(p) for p in DTYPE_ROWS], ignore_index=True)
    timed = frame[frame["error"] == ""]  # cold rows bounded by DRAM, warm by the caches
    assert set(timed["dtype"]) == {"fp16", "bf16", "fp8", "int8"} and len(timed) > 5000
    assert set(timed["hw"]) == {"h100-sxm"} and timed["sol_s"].notna().all()
    beaten = timed[timed["min_s"] < timed["sol_s"]]
    assert beaten.empty, beaten[["implementation", "dtype", "m", "k", "n", "min_s",
                                 "sol_s"]].head(10).to_string()
    hw = accelerator_models.load("h100-sxm")
    # the stored sol_s is not trusted: a sample per (implementation, dtype) is repriced
    sample = pd.concat([g.head(6) for _, g in timed.groupby(["implementation", "dtype",
                                                                 "cache"])])
    for (impl, dtype), rows in sample.groupby(["implementation", "dtype"]):
        weight_dtype, group = WEIGHT_ONLY.get(impl, (None, None))
        bare = rows.drop(columns=["sol_s", "sol_bound", "hw", "sol_fraction"]).assign(
            flops=np.nan, bytes=np.nan)
        priced = bound_columns(bare, hw, dtype, "fp16", "fp32", weight_dtype=weight_dtype,
                               weight_group_size=group)
        np.testing.assert_allclose(priced["sol_s"], rows["sol_s"], rtol=1e-9)
        np.testing.assert_allclose(priced["bytes"], rows["bytes"], rtol=1e-12)
    # by hand: int4 weights at N = 1 read half a byte a weight and one fp16 scale per 128
    r = timed[(timed["implementation"] == "int4_tinygemm") & (timed["n"] == 1)
              & (timed["cache"] == "cold")].iloc[0]
    want = r.m * r.k / 2 + 2 * r.m * (r.k // 128) + 2 * (r.k + r.m)
    assert r.bytes == want
    assert math.isclose(r.sol_s, want / hw.dram_bandwidth_bytes_per_s, rel_tol=1e-9)


def test_a_warm_row_is_bounded_by_the_caches_and_a_cold_one_by_dram():
    frame = load_dataset("cpu-amd-epyc-2c")
    hw = accelerator_models.load("epyc-zen5-2c")
    vector = frame[(frame["family"] == "vector") & (frame["error"] == "")]
    for cache in ("cold", "warm"):
        row = vector[vector["cache"] == cache].iloc[0]
        memory = float(memory_time(row["bytes"], hw, cache))
        compute = row["flops"] / hw.vector_rate("fp32")
        assert row["sol_s"] == pytest.approx(max(memory, compute), rel=1e-12)


# --- whole models on both devices ---------------------------------------------------------


def _cpu_whole_models() -> pd.DataFrame:
    frame = pd.read_csv(ROOT / "benchmarks/cpu/results/models_measurements.csv",
                        keep_default_na=False)
    return frame[frame["error"] == ""]


def _gpu_whole_models() -> pd.DataFrame:
    frame = pd.read_csv(ROOT / "benchmarks/gpu/results/models_measurements.csv",
                        keep_default_na=False)
    frame = frame[frame["error"] == ""].copy()
    frame["format"] = np.where(frame["variant"].str.startswith("sparse24"), "2:4", "dense")
    return frame


def _whole_model_bound(model, fmt, batch, hw, numerics, cache, device="cpu"):
    """The loosest bound a whole model can have: every intermediate kept on chip and all of it
    overlapped (fused_prefetched), each op's memory time bounded under ``cache``; the variant
    that was measured (only the layers the sparse path converted are sparse)."""
    trace = load_trace(model)
    parsed = formats.parse(fmt)
    if parsed.family != "dense":
        trace = _converted_linears_only(trace, fmt, device)
    layers = dse.evaluate_layers(trace, hw, fmt, batch, fusion="fused", scope="all",
                                 numerics=numerics, cache=cache)
    layers = layers[layers["format"] == parsed.name]
    return max(layers["compute_s"].sum(), layers["memory_s"].sum())


def test_no_cpu_whole_model_beats_its_warm_bound():
    hw = accelerator_models.load("epyc-zen5-2c")
    numerics = dse.Numerics(dtype="tf32", vector_dtype="fp32", csr_dtype="fp32")
    rows = _cpu_whole_models()
    assert len(rows) >= 100
    worst = math.inf
    for (model, fmt, batch), group in rows.groupby(["model", "format", "batch"]):
        bound = _whole_model_bound(model, fmt, int(batch), hw, numerics, "warm")
        ratio = group["min_s"].min() / bound
        assert ratio >= 1.0, (model, fmt, batch, ratio)
        worst = min(worst, ratio)
    assert worst < 1e3  # the bound is a bound, not a number out of all proportion


def test_no_h100_whole_model_beats_its_bound():
    hw = accelerator_models.load("h100-sxm")
    rows = _gpu_whole_models()
    assert len(rows) >= 60
    for (model, fmt, batch), group in rows.groupby(["model", "format", "batch"]):
        bound = _whole_model_bound(model, fmt, int(batch), hw, dse.Numerics(), "cold", "cuda")
        assert group["min_s"].min() >= bound, (model, fmt, batch)


# --- touched operands: the rows of X a sparse kernel reads --------------------------------


def _random_masks(fmt, m, k, count, rng):
    """Masks of ``fmt`` drawn at random: each block (or weight) kept independently with the
    format's density; N:M keeps N random positions of every run of M in each row."""
    if isinstance(fmt, formats.NM):
        runs = rng.random((count, m, k // fmt.m, fmt.m)).argsort(axis=-1) < fmt.n
        return runs.reshape(count, m, k)
    b = fmt.block if isinstance(fmt, formats.Block) else 1
    blocks = rng.random((count, m // b, k // b)) < fmt.density
    return blocks.repeat(b, axis=1).repeat(b, axis=2)


@pytest.mark.parametrize("text, m, k", [("block16@93.75%", 128, 256), ("block4@87.5%", 32, 64),
                                        ("unstructured@95%", 40, 64),
                                        ("unstructured@99%", 200, 100), ("1:8", 6, 64),
                                        ("2:4", 2, 16)])
def test_expected_read_share_matches_random_masks(text, m, k):
    fmt = formats.parse(text)
    rng = np.random.default_rng(7)
    masks = _random_masks(fmt, m, k, 400, rng)
    exact = np.array([formats.read_share(mask) for mask in masks])
    expected = float(fmt.input_read_share(m, k))
    assert 0.0 < expected < 1.0
    # The mean of 400 exact shares within 4 standard errors of the expectation.
    assert abs(exact.mean() - expected) <= 4 * exact.std() / math.sqrt(len(exact)) + 1e-3


def test_read_share_by_hand():
    mask = np.zeros((4, 6), dtype=bool)
    mask[0, 1] = mask[3, 1] = mask[2, 4] = True
    assert formats.read_share(mask) == pytest.approx(2 / 6)
    # Two groups of 2 rows: group 0 reads column 1, group 1 reads columns 1 and 4.
    assert formats.read_share(mask, groups=2) == pytest.approx(3 / 12)
    assert formats.read_share(np.ones((3, 3))) == 1.0
    with pytest.raises(ValueError, match="groups"):
        formats.read_share(mask, groups=3)


def test_expected_read_shares_by_hand():
    # block64 at 93.75%: 16 blocks per block-column (M = 1024), each empty with p = 0.9375.
    assert formats.parse("block64@93.75%").input_read_share(1024, 4096) \
        == pytest.approx(1 - 0.9375**16)
    assert formats.parse("unstructured@90%").input_read_share(8, 10) == pytest.approx(1 - 0.9**8)
    assert formats.parse("1:4").input_read_share(3, 8) == pytest.approx(1 - 0.75**3)
    assert formats.parse("dense").input_read_share(5, 5) == 1.0


def test_unread_rows_leave_the_bound_by_value(round_gpu):
    """A linear layer under block16@93.75% with M = 32: 2 blocks per block-column, so a share
    0.9375^2 of X's rows is never read. 2-byte features, N = 10, K = 64."""
    trace = Trace.from_records("one", [64], [{
        "name": "fc", "kind": "linear", "m": 32, "k": 64, "n": 10, "groups": 1,
        "weight_elems": 32 * 64, "input_elems": 640, "output_elems": 320, "vector_flops": 0.0,
        "prunable": True, "producers": ["input"]}])
    row = dse.evaluate_layers(trace, round_gpu, "block16@93.75%", 1, scope="all")
    row = row[row["format"] == "block16@93.75%"].iloc[0]
    nnz = 0.0625 * 32 * 64
    weights = 2 * nnz + 4 * (nnz / 256 + 32 / 16 + 1)
    features = 2 * (640 * (1 - 0.9375**2) + 320)
    assert row["dram_bytes"] == pytest.approx(weights + features, rel=1e-12)
    # The checkpoint's real masks replace the expectation where the trace records them.
    exact = Trace.from_records("one", [64], [{
        **trace.to_json()["ops"][0], "density": 0.0625, "input_read_share": 0.25}])
    row = dse.evaluate_layers(exact, round_gpu, "block16@93.75%", 1, scope="all")
    row = row[row["format"] == "block16@93.75%"].iloc[0]
    assert row["dram_bytes"] == pytest.approx(weights + 2 * (640 * 0.25 + 320), rel=1e-12)


# --- cache levels -------------------------------------------------------------------------

LEVELS = ["cache.l1_bytes=1000", "cache.l1_bandwidth_bytes_per_s=8e12",
          "cache.l2_bytes=10000", "cache.l2_bandwidth_bytes_per_s=4e12"]


def test_memory_time_by_hand():
    hw = accelerator_models.load("a100", LEVELS)
    dram = hw.dram_bandwidth_bytes_per_s
    # Cold: every byte from DRAM (the slowest link).
    assert memory_time(5e4, hw, "cold") == pytest.approx(5e4 / dram)
    # Warm, fits L1: bounded by L1's bandwidth alone.
    assert memory_time(800, hw, "warm") == pytest.approx(800 / 8e12)
    # Warm, 5 000 bytes: 1 000 may sit in L1, so 4 000 come through L2.
    assert memory_time(5000, hw, "warm") == pytest.approx(max(5000 / 8e12, 4000 / 4e12))
    # Warm, 50 000 bytes: L1 + L2 hold 11 000 at most, 39 000 come from DRAM.
    assert memory_time(5e4, hw, "warm") == pytest.approx(
        max(5e4 / 8e12, 49_000 / 4e12, 39_000 / dram))
    x = np.geomspace(1, 1e9, 50)
    warm, cold = memory_time(x, hw, "warm"), memory_time(x, hw, "cold")
    assert np.all(warm <= cold) and np.all(np.diff(warm) >= 0)


def test_a_warm_bound_needs_cache_levels():
    with pytest.raises(CacheError, match=r"\[cache\]"):
        memory_time(1.0, accelerator_models.load("a100-80gb"), "warm")
    with pytest.raises(CacheError, match="cold or warm"):
        memory_time(1.0, accelerator_models.load("h100-sxm"), "hot")


# Three levels, each faster than the next and than DRAM (1.555e12 B/s), and for each field a
# working set in the range where that field's piece of the bound is the largest.
THREE = [*LEVELS, "cache.l3_bytes=100000", "cache.l3_bandwidth_bytes_per_s=2e12"]
WHERE = {"cache.l1_bytes": 3000, "cache.l1_bandwidth_bytes_per_s": 800,
         "cache.l2_bytes": 30_000, "cache.l2_bandwidth_bytes_per_s": 5000,
         "cache.l3_bytes": 1e6, "cache.l3_bandwidth_bytes_per_s": 50_000}


@pytest.mark.parametrize("path", accelerator_models.CACHE_FIELDS)
def test_every_cache_field_moves_the_warm_bound(path):
    base = accelerator_models.load("a100", THREE)
    value = base.field_value(path)
    slower = accelerator_models.load("a100", [*THREE, f"{path}={value / 2:g}"])
    # Half the size or half the bandwidth: the warm bound may only grow, and here it does.
    assert memory_time(WHERE[path], slower, "warm") > memory_time(WHERE[path], base, "warm")
    # A cold run never sees the caches' sizes; their bandwidths only once a link is slower
    # than DRAM (l3 at 1e12 B/s here), which then bounds every byte on its way in.
    cold = memory_time(1e6, slower, "cold")
    if path == "cache.l3_bandwidth_bytes_per_s":
        assert cold == pytest.approx(1e6 / 1e12)
    else:
        assert cold == memory_time(1e6, base, "cold")


def test_cache_table_is_checked():
    with pytest.raises(accelerator_models.SpecError, match="cache.l1_bandwidth_bytes_per_s"):
        accelerator_models.load("a100", ["cache.l1_bytes=1000"])
    with pytest.raises(accelerator_models.SpecError, match="larger than"):
        accelerator_models.load("a100", [*LEVELS[:2], "cache.l2_bytes=500",
                                         "cache.l2_bandwidth_bytes_per_s=1e12"])
    with pytest.raises(accelerator_models.SpecError, match="positive"):
        accelerator_models.load("a100", ["cache.l1_bytes=-1",
                                         "cache.l1_bandwidth_bytes_per_s=1e12"])


def test_catalog_figures_are_peaks_and_probes_are_ceilings():
    for name in accelerator_models.catalog_names():
        assert accelerator_models.load(name).figures == "peak", name
    host = ROOT / "benchmarks/cpu/results/host.toml"
    assert accelerator_models.load(str(host)).figures == "ceiling"


# --- the expectation, validated with the whole model held out ------------------------------


def test_model_shapes_are_its_weight_matrices_and_vector_ops():
    from dse.calibrate.validate import model_shapes

    trace = Trace.from_records("tiny", [8], [
        {"name": "fc1", "kind": "linear", "m": 16, "k": 8, "n": 4, "groups": 1,
         "weight_elems": 128, "input_elems": 32, "output_elems": 64, "vector_flops": 0.0,
         "prunable": True, "producers": ["input"]},
        {"name": "act", "kind": "activation", "m": 0, "k": 0, "n": 0, "groups": 1,
         "weight_elems": 0, "input_elems": 64, "output_elems": 64, "vector_flops": 512.0,
         "prunable": False, "producers": ["fc1"]}])
    assert model_shapes(trace, [1, 8]) == {"16x8x1", "activation:64", "activation:512"}


def test_a_held_out_model_leaves_none_of_its_shapes_in_training():
    from dse.calibrate.validate import device_rows, held_out_models, model_shapes

    data = device_rows(load_dataset("h100-sxm"), "h100-sxm")
    measured = _gpu_whole_models()
    measured = measured[measured["model"].isin(["deit_small_patch16_224", "resnet50"])]
    measured = measured[measured["batch"].isin([1, 8])]
    held = held_out_models(data, measured, accelerator_models.load("h100-sxm"), max_folds=2)
    assert set(held["model"]) == set(measured["model"])
    for model, group in held.groupby("model"):
        shapes = model_shapes(load_trace(model), [1, 8, 32, 128])
        dropped = int(data.rows["shape"].isin(shapes).sum())
        assert (group["dropped_rows"] == dropped).all()
        # The H100 grid measured DeiT-S, ViT-B and ConvNeXt-T shapes, none of ResNet-50's.
        assert (dropped > 0) == (model != "resnet50"), model
        assert (group["train_rows"] == len(data.rows) - dropped).all()
        assert np.isfinite(group["error"]).all()


def test_h100_cache_levels_are_the_sm_side_limit():
    """Both H100 levels deliver at most 128 B per clock per SM (132 SMs, 1980 MHz): a warm
    working set inside L1 + L2 is bounded by that, the rest by DRAM."""
    hw = accelerator_models.load("h100-sxm")
    sm_side = 132 * 128 * 1.98e9
    held = 132 * 256 * 1024 + 50 * 1024 ** 2
    assert memory_time(1e7, hw, "warm") == pytest.approx(1e7 / sm_side, rel=1e-3)  # 33.45e12
    assert memory_time(1e9, hw, "warm") == pytest.approx((1e9 - held) / 3.35e12)


def test_a_depthwise_row_is_bounded_with_all_its_groups():
    """Issue 26's planted bug: the measured rows' bound ignoring ``groups`` made depthwise
    convolutions 90x too fast. ConvNeXt-T's first 7x7 depthwise convolution at batch 1, fp16,
    counted by hand: 96 groups of a 1 x 49 by 49 x 3136 product."""
    from dse.measure.sol import bound_columns, row_features

    row = pd.DataFrame([{
        "source": "benchmark", "kind": "conv", "family": "dense", "format": "dense",
        "model": "", "op": "dw7", "m": 1, "k": 49, "n": 3136, "groups": 96, "batch": 1,
        "block": 0, "sparsity": 0.0, "index_dtype": "", "cache": "cold", "error": "",
        "median_s": 1e-5, "note": "input 1x96x56x56, kernel 7x7 stride 1 padding 3 groups 96"}])
    hw = accelerator_models.load("h100-sxm")
    priced = bound_columns(row, hw, "fp16", "fp16", "fp32", features=row_features(row))
    flops = 2 * 96 * 1 * 49 * 3136
    nbytes = 2 * (96 * 49 + 96 * 56 * 56 + 96 * 3136)  # weights, input tensor, output
    assert priced["flops"].iloc[0] == pytest.approx(flops)
    assert priced["bytes"].iloc[0] == pytest.approx(nbytes)
    assert priced["sol_s"].iloc[0] == pytest.approx(max(flops / 989.4e12, nbytes / 3.35e12))
