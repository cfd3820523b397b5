"""The per-call savings of dse.evaluate_designs (issue 27) keep the numbers: peaks computed
without numpy, the design index and shape-fallback counts cached per grid shape and pricing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import accelerator_models
import dse
from dse.roofline import Numerics, peaks
from dse.roofline.evaluator import prepare


def test_peaks_by_hand():
    # epyc-zen5-2c: DRAM 614.4 GB/s, but its slowest cache link (L3, 320 GB/s) bounds a cold
    # run; no sparse tensor core, so the sparse peak is the dense one.
    cpu = peaks(accelerator_models.load("epyc-zen5-2c"),
                Numerics(dtype="bf16", vector_dtype="fp32"))
    assert (cpu.dram_bytes_per_s, cpu.tensor, cpu.sparse_tensor, cpu.csr, cpu.vector) == (
        320e9, 1.28e12, 1.28e12, 640e9, 640e9)
    # h100-sxm: its cache links (33.45 TB/s) are faster than DRAM (3.35 TB/s).
    gpu = peaks(accelerator_models.load("h100-sxm"))
    assert (gpu.dram_bytes_per_s, gpu.tensor, gpu.sparse_tensor, gpu.csr, gpu.vector) == (
        3.35e12, 989.4e12, 989.4e12, 66.9e12, 133.8e12)
    assert isinstance(gpu.dram_bytes_per_s, np.float64)


def test_hardware_rates_are_reciprocals_of_peaks():
    acc = accelerator_models.load("a100")
    problem = prepare("toy_hybrid", acc, "2:4", 1, Numerics())
    assert problem.hw.tolist() == [[1 / 1.555e12, 1 / 312e12, 1 / 312e12, 1 / 19.5e12,
                                    1 / 78e12]]


@pytest.mark.parametrize("order", [("small", "big", "small"), ("big", "small", "big")])
def test_cached_grids_give_the_frame(order):
    grids = {"small": dict(hardware="a100", formats="2:4", batches=1),
             "big": dict(hardware=["a100", "h100-sxm"], formats=["2:4", "1:8", "block16@0.75"],
                         batches=[1, 8])}
    for name in order:
        fast = dse.evaluate_designs("toy_hybrid", **grids[name], fusion=["unfused", "fused"])
        pd.testing.assert_frame_equal(
            fast.frame(),
            dse.roofline.evaluate("toy_hybrid", **grids[name], fusion=["unfused", "fused"]),
            check_exact=True)
    one = dse.evaluate_designs("toy_hybrid", "a100", "2:4", 1)
    # toy_hybrid on the A100 at batch 1: dense first, then 2:4 (the A100 runs 2:4 natively).
    assert list(one["format"]) == ["dense", "2:4"]
    assert list(one["hw_fallback"]) == ["", ""]
    assert one["speedup"][0] == 1.0


def test_design_index_is_read_only():
    problem = prepare("toy_hybrid", ["a100", "a100"], ["2:4", "1:8"], [1, 2, 4], Numerics())
    h, f, b = problem.design_index()
    assert (h.tolist(), f.tolist(), b.tolist()) == (
        [0] * 9 + [1] * 9, ([0] * 3 + [1] * 3 + [2] * 3) * 2, [0, 1, 2] * 6)
    with pytest.raises(ValueError):
        h[0] = 1
