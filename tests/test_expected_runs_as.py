"""How the expectation prices what a model runs (dse.calibrate.expected), on synthetic
predictors of known structure: a dense convolution is priced as the implementation that runs
it (F.conv2d), not as the GEMM of its im2col matrix."""

from __future__ import annotations

import dataclasses

import numpy as np

import workloads
from dse.calibrate.expected import CONV_RUNS_AS, expected_layers
from dse.calibrate.features import FEATURES, IMPL
from dse.calibrate.predictor import DevicePredictors, FamilyPredictor, Trees
from dse.roofline import evaluate_layers

# One tree on the impl feature: code 0 (torch_conv) at +log 2, code 1 (torch_dense) at 0.
_BY_IMPL = Trees(0.0, 1.0, ({"feature": [IMPL, -2, -2], "threshold": [0.5, -2.0, -2.0],
                             "left": [1, -1, -1], "right": [2, -1, -1],
                             "value": [0.0, float(np.log(2.0)), 0.0]},))


def _fam(key, floor=1e-6, ceiling=0.5, residual=None, impls=()):
    return FamilyPredictor(key, "fraction", floor, ceiling, residual, 10, 3, {"rmspe": 0.2},
                           impls)


def _predictors(hw="h100-sxm"):
    conv = ("torch_conv", "torch_dense")
    families = {"gemm": _fam("gemm", impls=("torch_dense",)),
                "conv": _fam("conv", residual=_BY_IMPL, impls=conv),
                "grouped_conv": _fam("grouped_conv", residual=_BY_IMPL, impls=conv),
                "vector": _fam("vector", impls=("torch_vector",))}
    return DevicePredictors("toy-cpu", hw, "cpu", 2, 128, 1e-6, families, {})


def test_dense_convolutions_are_priced_as_f_conv2d():
    trace = workloads.load_trace("toy_hybrid")
    layers = evaluate_layers(trace, "h100-sxm", ["dense"], batches=1, scope="all")
    out = expected_layers(layers, trace, _predictors())
    conv = out["predictor"].str.contains(":conv:|:grouped_conv:", regex=True)
    assert conv.sum() == 5  # stem, dwconv, two pointwise, downsample
    assert (out.loc[conv, "kernel"] == "torch_conv").all()
    # torch_conv is the slower one here (2x its physical model): priced so, not at the fastest
    np.testing.assert_allclose(out.loc[conv, "expected_s"],
                               2.0 * (1e-6 + out.loc[conv, "time_s"] / 0.5))
    # a linear keeps the fastest of its family's implementations
    linear = out["predictor"] == "toy-cpu:gemm:fraction"
    assert linear.any() and (out.loc[linear, "kernel"] == "torch_dense").all()
    assert set(CONV_RUNS_AS) == {"conv", "grouped_conv"}


def test_a_family_without_torch_conv_keeps_its_fastest_implementation():
    trace = workloads.load_trace("toy_hybrid")
    layers = evaluate_layers(trace, "h100-sxm", ["dense"], batches=1, scope="all")
    preds = _predictors()
    only_gemm = dataclasses.replace(preds.families["conv"], implementations=("a", "b"))
    preds = dataclasses.replace(preds, families={**preds.families, "conv": only_gemm})
    out = expected_layers(layers, trace, preds)
    conv = out["predictor"] == "toy-cpu:conv:fraction"
    assert conv.any() and (out.loc[conv, "kernel"] == "b").all()  # code 1: no residual
    np.testing.assert_allclose(out.loc[conv, "expected_s"],
                               1e-6 + out.loc[conv, "time_s"] / 0.5)


def test_feature_layout_has_the_impl_column():
    assert FEATURES[IMPL] == "impl"
