"""Sweeps, hardware comparisons and the feature-overhead study: values against direct
evaluations, and bad input on the command line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import accelerator_models
from dse import evaluate
from dse.explore.studies import crossover_batches, feature_overhead
from dse.explore.sweep import SweepError, parse_vary, sweep
from workloads import load_trace


def test_vary_lists_and_ranges():
    assert parse_vary("batch=1,2,4").values == (1, 2, 4)
    lin = parse_vary("hw.dram_bandwidth_bytes_per_s=1e12..8e12:8").values
    assert lin == tuple(float(v) for v in np.linspace(1e12, 8e12, 8))
    log = parse_vary("hw.tensor_flops_per_s.fp16=1e14..1e16:3:log").values
    assert log == pytest.approx((1e14, 1e15, 1e16))
    assert parse_vary("format.block=4,8").values == (4, 8)
    assert parse_vary("format.sparsity=0.5..0.75:2").values == (0.5, 0.75)


@pytest.mark.parametrize("spec, needle", [
    ("hw.dram_bandwith=1e12,2e12", "unknown hardware field 'dram_bandwith'"),
    ("hw.dram_bandwidth_bytes_per_s=8e12..1e12:4", "empty range"),
    ("batch=1..4:0", "empty range"),
    ("batch=", "no values"),
    ("batch=0,1", "whole numbers >= 1"),
    ("batch=1.5", "whole numbers >= 1"),
    ("hw.sparse_tensor.patterns=1,2", "not numeric"),
    ("hw.dram_bandwidth_bytes_per_s=-1e12", "dram_bandwidth_bytes_per_s"),
    ("format.n=1,2", "unknown format parameter"),
    ("format.sparsity=1.5", "fractions in [0, 1)"),
    ("colour=1", "unknown dimension"),
    ("batch", "write NAME=VALUES"),
])
def test_bad_vary(spec, needle):
    with pytest.raises(SweepError) as err:
        parse_vary(spec)
    assert needle in str(err.value)


def test_sweep_rows_equal_direct_evaluations():
    trace = load_trace("convnext_tiny")
    varies = [parse_vary("batch=1,32"), parse_vary("hw.dram_bandwidth_bytes_per_s=1e12,3e12"),
              parse_vary("format.sparsity=0.75,0.875")]
    frame = sweep([trace], ["a100"], [], ["2:4", "block16@50%"], varies)
    assert len(frame) == 2 * 2 * 2 * 3  # batches x bandwidths x sparsities x (dense + 2)
    for row in frame.to_dict("records"):
        bandwidth = row["vary.hw.dram_bandwidth_bytes_per_s"]
        acc = accelerator_models.load("a100", [f"dram_bandwidth_bytes_per_s={bandwidth!r}"])
        if row["format"] == "dense":
            assert row["speedup"] == 1.0
            continue
        direct = evaluate(trace, acc, row["format"], row["batch"], fusion="unfused")
        direct = direct.set_index("format")
        assert direct.loc[row["format"], "speedup"] == row["speedup"]
    # format.sparsity moved the block format, not 2:4.
    assert set(frame["format"]) == {"dense", "2:4", "block16@75%", "block16@87.5%"}


def test_crossover_by_hand():
    evaluated = pd.DataFrame({
        "model": ["m"] * 6, "format": ["2:4"] * 3 + ["1:4"] * 3, "batch": [1, 8, 64] * 2,
        "speedup": [1.5, 1.2, 1.05, 1.9, 1.6, 1.3]})
    out = crossover_batches(evaluated, 1.1).set_index("format")
    assert out.loc["2:4", "first_batch_below"] == 64
    assert pd.isna(out.loc["1:4", "first_batch_below"])
    assert out.loc["1:4", "speedup_at_smallest_batch"] == 1.9


def test_feature_overhead_study_values():
    trace = load_trace("convnext_tiny")
    study = feature_overhead([trace], "a100", formats=["2:4"], batches=[1, 8, 32])
    dense = study.shares.set_index("format").loc["dense"]
    direct = evaluate(trace, "a100", "2:4", [1, 32], fusion="unfused")
    direct = direct.set_index(["format", "batch"])
    assert dense["feature_share_batch_1"] == direct.loc[("dense", 1), "feature_bytes_share"]
    assert dense["feature_share_batch_32"] == direct.loc[("dense", 32), "feature_bytes_share"]
    # Features grow with batch; weights do not: the share rises.
    assert dense["feature_share_batch_32"] > dense["feature_share_batch_1"]
    row = study.tornado.set_index("field").loc["dram_bandwidth_bytes_per_s"]
    high = float(row.high_value)
    doubled = accelerator_models.load("a100", [f"dram_bandwidth_bytes_per_s={high!r}"])
    again = evaluate(trace, doubled, "2:4", 1, fusion="unfused")
    again = again.set_index("format").loc["2:4", "speedup"]
    assert row.high_speedup == again
    assert set(study.tornado["field"]) >= {"dram_bandwidth_bytes_per_s",
                                           "tensor_flops_per_s.fp16",
                                           "sparse_tensor.nonzero_rate"}


def _dse(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("argv, needle", [
    (["sweep", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4", "--vary",
      "hw.dram_bandwith=1e12,2e12", "--out", "s.parquet"], "unknown hardware field"),
    (["sweep", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4", "--vary",
      "batch=8..1:4", "--out", "s.parquet"], "empty range"),
    (["sweep", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4", "--vary",
      "batch=1,2", "--out", "missing/s.parquet"], "does not exist"),
    (["sweep", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4", "--vary",
      "batch=1,2", "--out", "s.parquet", "--report", "missing/r"], "missing or not writable"),
    (["compare", "--hw", "a100,tpu9", "--model", "convnext_tiny", "--format", "2:4"], "tpu9"),
])
def test_bad_input_is_one_line(tmp_path, argv, needle):
    result = _dse(*argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "s.parquet").exists()


def test_compare_prints_each_accelerator(tmp_path):
    result = _dse("compare", "--hw", "a100,h100", "--model", "convnext_tiny", "--format", "2:4",
                  "--batch", "1", "--out", "c.csv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "a100-40gb" in result.stdout and "h100-sxm" in result.stdout
    table = pd.read_csv(tmp_path / "c.csv")
    assert set(table["hardware"]) == {"a100-40gb", "h100-sxm"}
