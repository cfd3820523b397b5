"""An op inside a model is priced warm (its input just written by the op before it) only when
its working set fits the measured device's last-level cache; a larger one is priced cold, as
most of its bytes come from DRAM whatever ran before it (dse.calibrate.expected)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import accelerator_models
import workloads
from dse.calibrate.expected import expected_layers, op_configs
from dse.calibrate.features import FEATURES
from dse.calibrate.predictor import (
    CalibrationError,
    DevicePredictors,
    FamilyPredictor,
    Trees,
    load_predictors,
    save_predictors,
    warm_capacity,
)
from dse.roofline import evaluate_layers

WARM = FEATURES.index("warm")


@pytest.mark.parametrize("name, capacity", [
    ("h100-sxm", 50 * 2**20),      # L2; an SM's L1 keeps nothing from one kernel to the next
    ("epyc-zen5-2c", 32 * 2**20),  # L3 of one CCD
])
def test_the_warm_capacity_is_the_last_level_cache(name, capacity):
    assert warm_capacity(name) == capacity
    assert warm_capacity(accelerator_models.load(name)) == capacity


def test_a_spec_without_cache_levels_gives_its_l2_or_nothing():
    spec = accelerator_models.load("h100-sxm")
    assert warm_capacity(replace(spec, cache_levels=())) == 50 * 2**20  # its l2_bytes
    assert warm_capacity(replace(spec, cache_levels=(), l2_bytes=None)) == 0.0


def _layers(batch: int):
    trace = workloads.load_trace("toy_hybrid")
    return trace, evaluate_layers(trace, "h100-sxm", ["dense"], batches=batch,
                                  fusion="unfused", scope="all")


def test_ops_larger_than_the_cache_are_priced_cold():
    trace, layers = _layers(8)
    nbytes = layers["dram_bytes"].to_numpy(dtype=float)
    cut = float(np.median(nbytes))  # some ops above, some at or below
    config = op_configs(layers, trace, "warm", warm_capacity_bytes=cut)
    assert (config["cache"] == np.where(nbytes <= cut, "warm", "cold")).all()
    assert {"warm", "cold"} <= set(config["cache"])
    # unknown capacity (0): every op warm, as before; cold asked: every op cold
    assert set(op_configs(layers, trace, "warm")["cache"]) == {"warm"}
    assert set(op_configs(layers, trace, "cold", warm_capacity_bytes=cut)["cache"]) == {"cold"}


def _predictors(capacity: float) -> DevicePredictors:
    """One gemm predictor whose residual is log(2) on cold rows and 0 on warm ones: a cold
    kernel (warm = 0 <= 0.5: the left leaf) takes twice the physical time."""
    tree = {"feature": [WARM, -2, -2], "threshold": [0.5, -2.0, -2.0], "left": [1, -1, -1],
            "right": [2, -1, -1], "value": [0.0, float(np.log(2.0)), 0.0]}
    gemm = FamilyPredictor("gemm", "fraction", 0.0, 1.0, Trees(0.0, 1.0, (tree,)), 10, 3, {})
    return DevicePredictors("toy", "h100-sxm", "cuda", 132, 128, 1e-9, {"gemm": gemm}, {},
                            warm_capacity_bytes=capacity)


def test_the_expectation_doubles_exactly_for_the_ops_priced_cold():
    trace, layers = _layers(8)
    gemm = layers["op"].map(trace.ops.set_index("name")["kind"]).isin(["linear", "conv"])
    gemm &= layers["time_s"].to_numpy() > 0
    nbytes = layers["dram_bytes"].to_numpy(dtype=float)
    cut = float(np.median(nbytes[gemm]))
    everything_warm = expected_layers(layers, trace, _predictors(0.0))["expected_s"].to_numpy()
    split = expected_layers(layers, trace, _predictors(cut))["expected_s"].to_numpy()
    big = gemm.to_numpy() & (nbytes > cut)
    assert big.any() and (gemm.to_numpy() & ~big).any()
    np.testing.assert_allclose(split[big], 2.0 * everything_warm[big], rtol=1e-12)
    np.testing.assert_allclose(split[~big], everything_warm[~big], rtol=1e-12)


def test_the_capacity_travels_with_the_file_and_is_checked(tmp_path):
    path = tmp_path / "p.json"
    save_predictors(_predictors(50 * 2**20), path)
    assert load_predictors(path).warm_capacity_bytes == 50 * 2**20
    data = json.loads(path.read_text())
    data["warm_capacity_bytes"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match="warm_capacity_bytes is -1"):
        load_predictors(path)
    del data["warm_capacity_bytes"]  # files written before it: every op priced warm
    path.write_text(json.dumps(data))
    assert load_predictors(path).warm_capacity_bytes == 0.0
