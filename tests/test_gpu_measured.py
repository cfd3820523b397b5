"""The committed GPU measurements against dse (deterministic: recorded timings, dse's own
arithmetic): no LLM run beats its bound, and collections ship as a valid dataset."""

from __future__ import annotations

import json

import pandas as pd

from benchmarks.gpu.compare_llm import MEASURED, main, priced
from benchmarks.gpu.ship import ship
from dse.measure.dataset import load_dataset


def test_no_measured_llm_step_beats_its_bound(capsys):
    measured = pd.concat([pd.read_csv(p) for p in MEASURED], ignore_index=True)
    frame = priced(measured, calibrated=None)
    assert len(frame) == 48
    assert (frame["kernel_s"] >= frame["bound_s"]).all()
    # decode at batch 1 is weight-bound: the bound is the weights over DRAM bandwidth, near
    # 16 GB / 3.35 TB/s for LLaMA-3-8B, and 2:4 halves the pruned part of it
    llama = frame[(frame["model"] == "llama-3-8b") & (frame["phase"] == "decode")
                  & (frame["batch"] == 1)]
    dense = llama.loc[llama["variant"] == "dense", "bound_s"].iloc[0]
    sparse = llama.loc[llama["variant"] == "2:4", "bound_s"].iloc[0]
    assert 4.4e-3 < dense < 4.8e-3
    assert 0.5 < sparse / dense < 0.65
    assert main(["--calibrated", "none"]) == 0
    assert "0 beat the bound" in capsys.readouterr().out


def test_collections_ship_as_one_dataset_with_their_provenance(tmp_path):
    rows = load_dataset("h100-sxm-collect")
    folders = []
    for i, run in enumerate(sorted(rows["run_id"].unique())):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        rows[rows["run_id"] == run].head(20).to_parquet(folder / "kernels.parquet")
        (folder / "kernels.json").write_text(json.dumps({"command": f"collect {i}"}))
        folders.append(folder)
    assert len(folders) >= 2  # the collections of 2026-11-25 and 2026-11-26, two seeds each
    path, count = ship("runs", folders, out_dir=tmp_path)
    assert count == 20 * len(folders)
    shipped = load_dataset(path)
    assert shipped["run_id"].nunique() == len(folders)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert [s["provenance"]["command"] for s in meta["sources"]] == [
        f"collect {i}" for i in range(len(folders))]
    assert meta["rows"] == 20 * len(folders)


def test_no_published_llm_throughput_beats_the_bound():
    """NVIDIA's TensorRT-LLM throughput tables (H100 and H200, FP8, one GPU; and release 0.9.0's
    Mistral 7B at fixed batches, A100 FP16 and H100/H200 FP8), torchao's LLaMA-3-8B runs and
    Qwen's Qwen2.5-7B vLLM runs (A100-80GB, batch 1, bf16, int8, int4 and 2:4 + int4): every
    published figure stays below dse's bound for the same requests
    (benchmarks/llm/compare_public.py)."""
    from benchmarks.llm.compare_public import FIGURES, bounds

    figures = pd.read_csv(FIGURES)
    assert len(figures) == 59 and figures["source"].str.len().gt(0).all()
    assert figures.groupby(["precision", "format"]).size().to_dict() == {
        ("bf16", "dense"): 19, ("fp16", "2:4"): 1, ("fp16", "dense"): 4, ("fp8", "dense"): 35}
    table = bounds(figures)
    assert (table["output_tokens_per_s"] <= table["bound_tokens_per_s"]).all()
    # the bound is a bound, not a number out of all proportion: the best run (torchao's bf16
    # LLaMA-3-8B at batch 1) reaches 70% of it
    assert 0.3 < table["published_over_bound"].max() < 1.0
    a100 = table[(table["hardware"] == "a100-80gb") & (table["model"] == "llama-3-8b")]
    dense = a100[a100["weights"].isna()].iloc[0]
    # batch 1, context 1: the weights but the embedding table, 2 x (8,030,261,248 - 128,256 x
    # 4,096) = 15,009,849,344 bytes, over 2.039e12 B/s: 7.36 ms a token, and a little more
    assert dense["bound_batch"] == 1
    assert 7.36e-3 < dense["bound_time_per_step_s"] < 7.5e-3
    # 2:4 with int4 is priced as such: faster than int4 alone, though at a coarser group
    sparse = a100[a100["format"] == "2:4"].iloc[0]
    int4 = a100[a100["weights"] == "int4-g64"].iloc[0]
    assert sparse["bound_tokens_per_s"] > int4["bound_tokens_per_s"] > dense["bound_tokens_per_s"]


def test_public_figures_options():
    from benchmarks.llm.compare_public import _options

    assert _options({"precision": "fp8"}) == ["--dtype", "fp8", "--kv-dtype", "fp8"]
    assert _options({"precision": "fp16", "weights": "int4-g128", "format": "2:4"}) == [
        "--dtype", "fp16", "--kv-dtype", "fp16", "--weight-dtype", "int4",
        "--weight-group-size", "128", "--format", "2:4"]
    assert _options({"precision": "bf16", "weights": "int8", "format": float("nan")}) == [
        "--dtype", "bf16", "--kv-dtype", "bf16", "--weight-dtype", "int8"]
