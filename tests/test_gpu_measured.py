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
    """NVIDIA's TensorRT-LLM throughput table (H100 and H200, FP8, one GPU): every published
    figure stays below dse's bound for the same requests (benchmarks/llm/compare_public.py)."""
    from benchmarks.llm.compare_public import FIGURES, bounds

    figures = pd.read_csv(FIGURES)
    assert len(figures) == 27 and figures["source"].str.len().gt(0).all()
    table = bounds(figures)
    assert (table["output_tokens_per_s"] <= table["bound_tokens_per_s"]).all()
    # the bound is a bound, not a number out of all proportion: the best run reaches 48% of it
    assert 0.3 < table["published_over_bound"].max() < 1.0
