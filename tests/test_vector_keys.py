"""Vector kinds with a predictor of their own (issue 23): data movement, softmax and the add of
a transposed view get their own key, the same for a benchmarked row and for the trace op it
stands for; the other vector kinds share ``vector``; a predictor file trained before the split
(one ``vector`` predictor, the CPU's) still prices every kind with it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.calibrate.expected import expected_layers, op_configs
from dse.calibrate.features import OWN_VECTOR_KINDS, family_key, training_rows, vector_key
from dse.calibrate.predictor import DevicePredictors, FamilyPredictor, load_predictors
from dse.measure.dataset import DATASETS_DIR
from dse.roofline import evaluate_layers
from workloads import load_trace


@pytest.mark.parametrize("kind, key", [
    ("other", "vector_other"), ("other:roll", "vector_other_roll"),
    ("other:pad", "vector_other_pad"), ("other:gather", "vector_other_gather"),
    ("softmax", "vector_softmax"), ("softmax:fp32", "vector_softmax_fp32"),
    ("elementwise:strided", "vector_elementwise_strided"),
    ("norm", "vector"), ("activation", "vector"), ("elementwise", "vector"),
    ("reduce", "vector"), ("pool", "vector"), ("embedding", "vector"),
])
def test_a_vector_kinds_key(kind, key):
    assert vector_key(kind) == key
    assert family_key("vector", kind, 1, 0) == key
    assert ":" not in key  # names such as h100-sxm:KEY:fraction split on ':'


def test_gemm_keys_are_unchanged():
    assert family_key("dense", "linear", 1, 0) == "gemm"
    assert family_key("dense", "conv", 96, 0) == "grouped_conv"
    assert family_key("block", "linear", 1, 16) == "block16"
    assert len(OWN_VECTOR_KINDS) == 7


def _family(key: str, floor_s: float, ceiling: float) -> FamilyPredictor:
    return FamilyPredictor(key, "fraction", floor_s, ceiling, None, 10, 5)


def _predictors(*families: FamilyPredictor) -> DevicePredictors:
    return DevicePredictors("dev", "h100-sxm", "cuda", 132, 128, 1e-6,
                            {f.key: f for f in families}, {})


def _swin(predictors: DevicePredictors) -> pd.DataFrame:
    trace = load_trace("swin_tiny_patch4_window7_224")
    layers = evaluate_layers(trace, "h100-sxm", "dense", batches=1, fusion="unfused",
                             scope="all")
    return expected_layers(layers, trace, predictors).set_index("op")


ROLL, NORM = "layers.0.blocks.1.roll", "layers.0.blocks.0.norm1.native_layer_norm"


def test_a_split_kind_is_priced_by_its_own_predictor():
    """floor + bound / ceiling by hand: a roll under vector_other_roll's 1 us + bound / 1, a
    layer norm under vector's 3 us + bound / 0.5."""
    out = _swin(_predictors(_family("vector_other_roll", 1e-6, 1.0),
                            _family("vector", 3e-6, 0.5)))
    assert out.loc[ROLL, "predictor"] == "dev:vector_other_roll:fraction"
    assert out.loc[NORM, "predictor"] == "dev:vector:fraction"
    np.testing.assert_allclose(out.loc[ROLL, "expected_s"], 1e-6 + out.loc[ROLL, "time_s"])
    np.testing.assert_allclose(out.loc[NORM, "expected_s"],
                               3e-6 + out.loc[NORM, "time_s"] / 0.5)
    assert (out.loc[[ROLL, NORM], "calibration"] == "").all()


def test_predictors_trained_before_the_split_price_every_kind_with_vector():
    """A file with one ``vector`` predictor (as the shipped CPU one) prices each split kind
    with it, without a note, as before the split: 2 us + bound / 0.25."""
    out = _swin(_predictors(_family("vector", 2e-6, 0.25), _family("gemm", 1e-6, 0.5)))
    vector = out["predictor"].str.startswith("dev:vector")
    kinds = {"roll", "constant_pad_nd", "clone", "_softmax", "native_layer_norm", "add"}
    assert kinds <= {name.rsplit(".", 1)[-1] for name in out.index[vector]}
    assert (out.loc[vector, "predictor"] == "dev:vector:fraction").all()
    assert (out.loc[vector, "calibration"] == "").all()
    np.testing.assert_allclose(out.loc[vector, "expected_s"],
                               2e-6 + out.loc[vector, "time_s"] / 0.25)
    # The shipped CPU file timed softmax among the kinds with a key of their own, and no copy,
    # roll, pad, gather or strided add: those fall back to its vector predictor as above.
    cpu = load_predictors("cpu-amd-epyc-2c")
    assert {k for k in cpu.families if k.startswith("vector")} == {"vector", "vector_softmax"}


def test_the_shipped_h100_predictors_have_each_split_kind():
    h100 = load_predictors("h100-sxm")
    keys = {k for k in h100.families if k.startswith("vector")}
    assert keys == {"vector"} | {vector_key(kind) for kind in OWN_VECTOR_KINDS}


@pytest.mark.parametrize("op, kind, key", [
    ("layers.0.blocks.1.roll", "other:roll", "vector_other_roll"),
    ("layers.0.blocks.0.constant_pad_nd", "other:pad", "vector_other_pad"),
    ("layers.0.blocks.0.attn.softmax._softmax", "softmax", "vector_softmax"),
    ("layers.0.blocks.0.norm1.native_layer_norm", "norm", "vector"),
])
def test_a_trace_op_and_its_benchmarked_rows_share_a_key(op, kind, key):
    """swin's ops as the expectation prices them, and the H100 datasets' benchmarked rows of
    the same kind: one key, so the predictor trained on those rows prices the op."""
    trace = load_trace("swin_tiny_patch4_window7_224")
    layers = evaluate_layers(trace, "h100-sxm", "dense", batches=1, fusion="unfused",
                             scope="all")
    priced = op_configs(layers, trace).assign(op=layers["op"].to_numpy()).set_index("op")
    assert (priced.loc[op, "kind"], priced.loc[op, "key"]) == (kind, key)
    data = pd.concat([pd.read_parquet(DATASETS_DIR / f"{name}.parquet")
                      for name in ("h100-sxm", "h100-sxm-collect")])
    rows = training_rows(data[data["family"] == "vector"].reset_index(drop=True))
    assert kind in set(rows.loc[rows["key"] == key, "kind"])
    if key != "vector":
        assert set(rows.loc[rows["key"] == key, "kind"]) == {kind}
