"""Energy and memory in `dse compare`, `dse sweep` and the energy breakdown chart, by value."""

from __future__ import annotations

import numpy as np
import pandas as pd

import reports
from dse.cli.main import main
from dse.explore import parse_vary, sweep
from dse.roofline import evaluate_energy, evaluate_memory
from workloads import load_trace


def test_energy_breakdown_parts_sum_to_the_design_energy():
    frame = evaluate_energy("convnext_tiny", ["a100", "h100"], ["2:4", "block4@87.5%"],
                            [1, 64])
    data = reports.energy_breakdown_data(frame)
    for breakdown in ("by unit", "by traffic class"):
        sums = data[data["breakdown"] == breakdown].groupby(
            ["hardware", "format", "batch"])["energy_per_inference_j"].sum()
        want = frame.set_index(["hardware", "format", "batch"])["energy_per_inference_j"]
        np.testing.assert_allclose(sums.to_numpy(), want.loc[sums.index].to_numpy(), rtol=1e-12)
    row = data[(data["hardware"] == "a100-40gb") & (data["format"] == "2:4")
               & (data["batch"] == 64) & (data["part"] == "features")].iloc[0]
    ref = frame[(frame["hardware"] == "a100-40gb") & (frame["format"] == "2:4")
                & (frame["batch"] == 64)].iloc[0]
    assert row["energy_per_inference_j"] == ref["energy_features_j"] / 64
    # Parts zero everywhere (no static power in the catalog) are left out.
    assert "static" not in set(data["part"])
    chart = reports.energy_breakdown_chart(data).to_dict()
    assert "convnext_tiny, unfused, gemm scope" in chart["title"]["subtitle"][0]


def test_compare_prints_and_writes_energy_and_memory(tmp_path, capsys):
    out = tmp_path / "cmp.csv"
    assert main(["compare", "--hw", "a100,h100", "--model", "convnext_tiny", "--format", "2:4",
                 "--batch", "8", "--out", str(out), "--report", str(tmp_path / "r")]) == 0
    printed = capsys.readouterr().out
    for header in ("energy/inf", "avg power", "power cap", "peak memory", "fits"):
        assert header in printed
    written = pd.read_csv(out)
    ref = evaluate_energy("convnext_tiny", ["a100", "h100"], ["2:4"], [8])
    mem = evaluate_memory("convnext_tiny", ["a100", "h100"], ["2:4"], [8])
    key = ["hardware", "format"]
    merged = written.merge(ref[key + ["energy_per_inference_j"]], on=key, suffixes=("", "_r"))
    merged = merged.merge(mem[key + ["peak_memory_bytes"]], on=key, suffixes=("", "_r"))
    assert len(merged) == 4
    np.testing.assert_allclose(merged["energy_per_inference_j"],
                               merged["energy_per_inference_j_r"], rtol=1e-9)
    np.testing.assert_allclose(merged["peak_memory_bytes"], merged["peak_memory_bytes_r"],
                               rtol=1e-9)
    assert (tmp_path / "r" / "energy.png").exists() and (tmp_path / "r" / "energy.csv").exists()


def test_sweep_over_batch_says_where_the_model_stops_fitting(tmp_path, capsys):
    varies = [parse_vary("batch=1,64,1024,4096")]
    frame = sweep([load_trace("convnext_tiny")], ["a100"], ["dram_capacity_bytes=8e9"],
                  ["2:4"], varies)
    mem = evaluate_memory("convnext_tiny", _a100(8e9), ["2:4"],
                          [1, 64, 1024, 4096])
    key = ["format", "batch"]
    merged = frame[key + ["peak_memory_bytes", "fits"]].astype({"format": str}).merge(
        mem[key + ["peak_memory_bytes", "fits"]], on=key, suffixes=("", "_r"))
    assert len(merged) == 8
    np.testing.assert_allclose(merged["peak_memory_bytes"], merged["peak_memory_bytes_r"],
                               rtol=1e-12)
    assert list(merged["fits"]) == list(merged["fits_r"])
    assert list(frame.loc[frame["format"] == "2:4", "fits"]) == [True, True, True, False]
    assert main(["sweep", "--model", "convnext_tiny", "--hw", "a100", "--set",
                 "dram_capacity_bytes=8e9", "--format", "2:4", "--vary", "batch=1,64,1024,4096",
                 "--out", str(tmp_path / "s.parquet")]) == 0
    printed = capsys.readouterr().out
    assert "largest swept batch that fits in DRAM" in printed
    line = next(x for x in printed.splitlines() if " 2:4 " in x and "GiB" in x)
    assert line.split()[-3] == "1024"


def test_sweep_without_batch_adds_no_memory():
    frame = sweep([load_trace("convnext_tiny")], ["a100"], [], ["2:4"],
                  [parse_vary("hw.dram_bandwidth_bytes_per_s=1e12,2e12")])
    assert "fits" not in frame


def _a100(capacity: float):
    import accelerator_models

    return accelerator_models.load("a100", [f"dram_capacity_bytes={capacity:g}"])
