"""Kernel predictors by value on small synthetic data with known structure (never on timings):
the physical fit recovers its constants, the tree export predicts as scikit-learn does, the
fraction carries over to other hardware, files round-trip, training rows follow the stated
policy, folds leave whole shapes out, and the expectation prices every op explicitly."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import workloads
from dse.calibrate.expected import expected_designs, expected_layers
from dse.calibrate.features import FEATURES, family_key, feature_matrix, training_rows
from dse.calibrate.predictor import (
    CalibrationError,
    DevicePredictors,
    FamilyPredictor,
    Trees,
    fit_family,
    fit_physical,
    load_predictors,
    save_predictors,
    shipped_predictors,
)
from dse.calibrate.validate import _folds, error_summary, fit_context, noise_floor
from dse.cli.main import main
from dse.roofline import evaluate, evaluate_layers


def _gemm_frame(rng, rows=120):
    m = rng.choice([64, 128, 256, 512, 1024], rows)
    k = rng.choice([64, 256, 1024], rows)
    n = rng.choice([1, 16, 128, 1024, 4096], rows)
    flops = 2.0 * m * k * n
    moved = 2.0 * (m * k + k * n + m * n)
    return pd.DataFrame({"m": m, "k": k, "n": n, "groups": 1, "sparsity": 0.0, "block": 0,
                         "flops": flops, "bytes": moved, "kind": "linear"})


def test_physical_fit_recovers_floor_and_ceiling():
    sol = np.geomspace(1e-7, 1e-2, 40)
    floor, ceiling = fit_physical(3e-6 + sol / 0.4, sol)
    assert floor == pytest.approx(3e-6, rel=1e-3)
    assert ceiling == pytest.approx(0.4, rel=1e-3)


def test_tree_export_predicts_as_sklearn():
    sklearn = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    y = np.where(x[:, 0] > 0, 1.0, -1.0) + 0.5 * x[:, 1]
    model = sklearn.GradientBoostingRegressor(n_estimators=30, max_depth=3).fit(x, y)
    np.testing.assert_allclose(Trees.from_sklearn(model).predict(x), model.predict(x),
                               rtol=1e-5, atol=1e-6)


def test_fraction_target_learns_a_residual_and_carries_over():
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(1)
    frame = _gemm_frame(rng)
    x = feature_matrix(frame, units=8, tile=128)
    sol = frame["flops"].to_numpy() / 1e12
    # known structure: 2 us floor, 50% of the bound, and 2x slower when N < 128
    slow = np.where(frame["n"].to_numpy() < 128, 2.0, 1.0)
    time_s = (2e-6 + sol / 0.5) * slow
    model = fit_family("gemm", x, time_s, sol, shapes=10, target="fraction")
    np.testing.assert_allclose(model.predict_s(x, sol), time_s, rtol=0.05)
    # on hardware twice as slow the bound doubles; the fraction of it carries over
    faster = model.predict_s(x, 2 * sol) / model.predict_s(x, sol)
    assert np.all(faster > 1.0)
    big = sol > 1e-4
    np.testing.assert_allclose(faster[big], 2.0, rtol=0.1)
    timed = fit_family("gemm", x, time_s, sol, shapes=10, target="time")
    np.testing.assert_allclose(timed.predict_s(x, 2 * sol), timed.predict_s(x, sol))


def test_files_round_trip(tmp_path):
    trees = Trees(0.1, 0.5, ({"feature": [0, -2, -2], "threshold": [1.0, -2.0, -2.0],
                              "left": [1, -1, -1], "right": [2, -1, -1],
                              "value": [0.0, -1.0, 1.0]},))
    fam = FamilyPredictor("gemm", "fraction", 1e-6, 0.5, trees, 10, 3, {"rmspe": 0.1})
    preds = DevicePredictors("dev", "h100-sxm", "cuda", 132, 128, 1e-6, {"gemm": fam},
                             {"dataset": "synthetic"})
    path = tmp_path / "p.json"
    save_predictors(preds, path)
    back = load_predictors(path)
    assert back == preds
    x = np.zeros((2, len(FEATURES)))
    x[1, 0] = 5.0
    # leaf -1 for log_m <= 1, leaf +1 above: 0.1 + 0.5 * (-1) and 0.1 + 0.5 * 1
    np.testing.assert_allclose(back.families["gemm"].residual.predict(x), [-0.4, 0.6])


def test_bad_predictor_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(CalibrationError, match="not a predictor file"):
        load_predictors(bad)
    with pytest.raises(CalibrationError, match="no such predictor"):
        load_predictors("no-such-device")


def _dataset(rows):
    base = {"error": "", "family": "dense", "kind": "linear", "groups": 1, "sparsity": 0.0,
            "block": 0, "format": "dense", "implementation": "a", "min_s": 1.0,
            "idle": pd.NA, "flops": 1.0, "bytes": 1.0, "sol_s": 0.1, "k": 8, "n": 4}
    return pd.DataFrame([{**base, **r} for r in rows]).astype({"idle": "boolean"})


def test_training_rows_policy():
    frame = _dataset([
        {"m": 8, "median_s": 2.0, "implementation": "a"},
        {"m": 8, "median_s": 1.2, "implementation": "b"},       # fastest implementation
        {"m": 8, "median_s": 1.0, "implementation": "c", "idle": False},   # busy machine
        {"m": 8, "median_s": 3.0, "min_s": 1.0, "implementation": "d"},    # a stall
        {"m": 16, "median_s": 1.0}, {"m": 16, "median_s": 1.4},  # repeats: median
        {"m": 32, "median_s": 1.0, "error": "failed"},
    ])
    rows = training_rows(frame).set_index("m")
    assert sorted(rows.index) == [8, 16]
    assert rows.loc[8, "implementation"] == "b"
    assert rows.loc[8, "time_s"] == 1.2
    assert rows.loc[16, "time_s"] == pytest.approx(1.2)
    assert rows.loc[8, "shape"] == "8x8x1"


def test_training_rows_take_the_fastest_round_then_the_median_run():
    frame = _dataset([
        # run x: rounds 0..3, round 2 ran while the host was slow
        *({"m": 8, "run_id": "x", "round": r, "median_s": t, "min_s": t}
          for r, t in enumerate([1.1, 1.0, 1.6, 1.05])),
        # run y: its fastest round is 1.4
        *({"m": 8, "run_id": "y", "round": r, "median_s": t, "min_s": t}
          for r, t in enumerate([1.4, 1.5])),
        # run z: its fastest round is 2.0
        {"m": 8, "run_id": "z", "round": 0, "median_s": 2.0, "min_s": 2.0},
    ])
    rows = training_rows(frame)
    assert len(rows) == 1
    assert rows.loc[0, "time_s"] == pytest.approx(1.4)  # median of 1.0, 1.4, 2.0
    assert rows.loc[0, "runs"] == 3
    assert rows.loc[0, "rounds"] == 7


def test_noise_floor_of_rounds_by_value():
    def kernel(m, times):
        return [{"m": m, "run_id": "x", "round": r, "median_s": t, "min_s": t}
                for r, t in enumerate(times)]

    frame = _dataset([
        *kernel(8, [1.0, 1.5, 1.02, 1.0]),    # halves: min(1.0, 1.02)=1.0 vs min(1.5, 1.0)=1.0
        *kernel(16, [1.0, 1.3, 1.4, 1.2]),    # halves: 1.0 vs 1.2 -> 20%
        *kernel(32, [1.0, 1.05]),             # two rounds: no halves, one round pair
    ])
    noise = noise_floor(frame)
    assert noise["basis"] == "halves"
    assert noise["pairs"] == 2
    assert noise["share_over_10"] == 0.5
    assert noise["median_diff"] == pytest.approx(0.1)
    single = noise["rounds"]  # round 0 against round 1: 50%, 30%, 5%
    assert single["pairs"] == 3
    assert single["share_over_10"] == pytest.approx(2 / 3)
    assert single["median_diff"] == pytest.approx(0.3)


def test_folds_leave_whole_shapes_out():
    shapes = pd.Series(["a", "a", "b", "c", "c", "c", "d"] * 3)
    folds = _folds(shapes, seed=0, max_folds=3)
    for shape in shapes.unique():
        assert len(set(folds[shapes == shape])) == 1
    assert len(set(folds)) == 3


def test_error_summary_by_value():
    e = error_summary([1.04, 0.92, 1.2, 2.0], [1.0, 1.0, 1.0, 1.0])
    assert e["within_5"] == 0.25
    assert e["within_10"] == 0.5
    assert e["within_25"] == 0.75
    assert e["rmspe"] == pytest.approx(np.sqrt((0.04**2 + 0.08**2 + 0.2**2 + 1.0) / 4))


def test_noise_floor_by_value():
    frame = _dataset([{"m": 8, "median_s": 1.0}, {"m": 8, "median_s": 1.05},
                      {"m": 16, "median_s": 1.0}, {"m": 16, "median_s": 1.3},
                      {"m": 32, "median_s": 1.0}])
    noise = noise_floor(frame)
    assert noise["pairs"] == 2
    assert noise["share_over_10"] == 0.5


def test_whole_model_constants_by_value():
    rng = np.random.default_rng(2)
    points = pd.DataFrame({"meas_s": rng.uniform(1e-4, 1e-3, 12),
                           "n_meas": rng.integers(10, 100, 12),
                           "n_unm": rng.integers(10, 100, 12),
                           "unm_sol_s": rng.uniform(1e-5, 1e-3, 12),
                           "grouped_sol_s": rng.uniform(0, 1e-4, 12)})
    points["measured_s"] = (points["meas_s"] - 1e-6 * points["n_meas"]
                            + 2e-6 * points["n_unm"] + points["unm_sol_s"] / 0.5
                            + points["grouped_sol_s"] / 0.1)
    points.attrs["min_floor_s"] = 5e-6
    ctx = fit_context(points)
    assert ctx["shift_s"] == pytest.approx(1e-6, rel=1e-3)
    assert ctx["unmeasured_floor_s"] == pytest.approx(2e-6, rel=1e-3)
    assert ctx["unmeasured_ceiling"] == pytest.approx(0.5, rel=1e-3)
    assert ctx["grouped_conv_ceiling"] == pytest.approx(0.1, rel=1e-3)


@pytest.mark.parametrize(("family", "kind", "groups", "block", "key"), [
    ("dense", "linear", 1, 0, "gemm"), ("dense", "matmul", 12, 0, "gemm"),
    ("dense", "conv", 1, 0, "conv"), ("dense", "conv", 96, 0, "grouped_conv"),
    ("nm", "linear", 1, 4, "nm"), ("block", "linear", 1, 16, "block16"),
    ("unstructured", "conv", 1, 1, "csr"), ("vector", "norm", 1, 0, "vector"),
])
def test_family_keys(family, kind, groups, block, key):
    assert family_key(family, kind, groups, block) == key


def _constant_predictors(hw="h100-sxm"):
    """Physical-only predictors: expected = floor + sol / ceiling, exactly."""
    def fam(key, floor, ceiling):
        return FamilyPredictor(key, "fraction", floor, ceiling, None, 10, 3, {"rmspe": 0.2})
    families = {"gemm": fam("gemm", 1e-6, 0.5), "nm": fam("nm", 2e-6, 0.25),
                "block16": fam("block16", 3e-6, 0.1)}
    return DevicePredictors("toy-dev", hw, "cuda", 132, 128, 5e-6, families, {})


def test_expected_layers_price_every_op_explicitly():
    trace = workloads.load_trace("toy_hybrid")
    layers = evaluate_layers(trace, "h100-sxm", ["2:4", "block8@87.5%"], batches=2,
                             scope="all")
    out = expected_layers(layers, trace, _constant_predictors())
    work = out["time_s"] > 0
    assert (out.loc[~work, "expected_s"] == 0).all()
    gemm = out["predictor"] == "toy-dev:gemm:fraction"
    np.testing.assert_allclose(out.loc[gemm, "expected_s"],
                               1e-6 + out.loc[gemm, "time_s"] / 0.5)
    nm = out["predictor"] == "toy-dev:nm:fraction"
    assert nm.any() and (out.loc[nm, "format"] == "2:4").all()
    block = out["predictor"] == "toy-dev:block16:fraction"
    assert block.any()
    assert out.loc[block, "calibration"].str.contains("none for block8 on toy-dev: block16 "
                                                      "used").all()
    bound = out["predictor"] == "toy-dev:bound"
    np.testing.assert_allclose(out.loc[bound, "expected_s"], out.loc[bound, "time_s"] + 5e-6)
    assert out.loc[bound, "calibration"].str.startswith("none for ").all()
    assert (gemm | nm | block | bound | ~work).all()


def test_expected_designs_sum_ops_and_carry_over():
    trace = workloads.load_trace("toy_hybrid")
    hw = ["h100-sxm", "a100"]
    layers = evaluate_layers(trace, hw, ["2:4"], batches=1, scope="gemm")
    exp = expected_layers(layers, trace, _constant_predictors())
    designs = expected_designs(evaluate(trace, hw, ["2:4"], batches=1), exp)
    for row in designs.itertuples():
        mine = exp[(exp["hardware"] == row.hardware) & (exp["format"] == row.format)]
        assert row.expected_latency_s == pytest.approx(mine["expected_s"].sum())
        assert row.fraction_of_sol == pytest.approx(row.latency_s / row.expected_latency_s)
    dense = designs.set_index(["hardware", "format"])["expected_latency_s"]
    for row in designs.itertuples():
        assert row.expected_speedup == pytest.approx(dense[(row.hardware, "dense")]
                                                     / row.expected_latency_s)
    a100 = designs[designs["hardware"] == "a100"]
    assert a100["calibration"].str.contains("fraction carried over from h100-sxm").all()


def test_shipped_predictors_load_without_sklearn():
    code = ("import sys; sys.modules['sklearn'] = None\n"
            "import workloads\n"
            "from dse.calibrate.predictor import load_predictors, shipped_predictors\n"
            "from dse.calibrate.expected import expected_layers\n"
            "from dse.roofline import evaluate_layers\n"
            "t = workloads.load_trace('toy_hybrid')\n"
            "for name in shipped_predictors():\n"
            "    p = load_predictors(name)\n"
            "    e = expected_layers(evaluate_layers(t, 'h100-sxm', ['2:4'], 1, scope='all'),"
            " t, p)\n"
            "    assert (e['expected_s'] >= 0).all() and e['expected_s'].sum() > 0, name\n"
            "print(len(shipped_predictors()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert int(out.stdout) == len(shipped_predictors()) >= 2


@pytest.mark.parametrize("argv", [
    ["calibrate"],
    ["calibrate", "--validate", "--data", "no-such-dataset"],
    ["calibrate", "--validate", "--whole-models", "h100-sxm"],
    ["evaluate", "--model", "toy_hybrid", "--hw", "h100", "--calibrated", "no-such-device"],
])
def test_user_errors_exit_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dse: error:") and "\n" not in err


def test_evaluate_calibrated_adds_the_expectation(tmp_path, capsys):
    out = tmp_path / "e.json"
    assert main(["evaluate", "--model", "toy_hybrid", "--hw", "h100-sxm", "--format", "2:4",
                 "--calibrated", "h100-sxm", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "an expectation, not a bound" in text
    table = pd.read_json(out)
    for column in ("expected_latency_s", "expected_speedup", "fraction_of_sol", "predictor",
                   "validated_rmspe", "calibration"):
        assert column in table
    assert (table["expected_latency_s"] >= table["latency_s"]).all()
    assert main(["evaluate", "--model", "toy_hybrid", "--hw", "h100-sxm", "--format", "2:4",
                 "--calibrated", "h100-sxm", "--per-layer"]) == 0
    assert "expected" in capsys.readouterr().out


def test_fastest_implementation_is_predicted():
    impl = FEATURES.index("impl")
    # residual +1 (slower) for implementation 0, -1 (faster) for implementation 1
    trees = Trees(0.0, 1.0, ({"feature": [impl, -2, -2], "threshold": [0.5, -2.0, -2.0],
                              "left": [1, -1, -1], "right": [2, -1, -1],
                              "value": [0.0, 1.0, -1.0]},))
    fam = FamilyPredictor("csr", "fraction", 0.0, 1.0, trees, 10, 3,
                          implementations=("scipy_csr", "torch_csr"))
    time_s, names = fam.predict_best_s(np.zeros((3, len(FEATURES))), np.ones(3))
    np.testing.assert_allclose(time_s, np.exp(-1.0))
    assert list(names) == ["torch_csr"] * 3


def test_method_choice_prefers_fraction_unless_time_is_clearly_better():
    from dse.calibrate.validate import METHODS, choose_methods

    frame = pd.DataFrame({"key": ["gemm"] * 4 + ["nm"] * 4, "time_s": 1.0})
    for m in METHODS:
        frame[f"pred_{m}"] = 1.5
    frame.loc[frame["key"] == "gemm", "pred_time/impl"] = 1.46   # not 10% better
    frame.loc[frame["key"] == "nm", "pred_time/best"] = 1.2      # clearly better
    assert choose_methods(frame, criterion="rmspe") == {"gemm": "fraction/impl",
                                                        "nm": "time/best"}


def test_calibrate_command_trains_validates_and_ships(tmp_path, capsys):
    pytest.importorskip("sklearn")
    from dse.measure.dataset import load_dataset

    frame = load_dataset("h100-sxm")
    small = frame[frame["family"].isin(["dense", "nm"]) & frame["op"].str.startswith("deit")]
    data = tmp_path / "small.parquet"
    small.to_parquet(data)
    model = tmp_path / "small.json"
    assert main(["calibrate", "--data", str(data), "--out", str(model), "--validate"]) == 0
    text = capsys.readouterr().out
    assert "whole weight shapes" in text and "noise floor" in text
    loaded = load_predictors(model)
    assert set(loaded.families) == {"gemm", "nm"}
    assert loaded.reference_hw == "h100-sxm"
    for fam in loaded.families.values():
        assert fam.validated["held_out_shapes"] == 4
        assert fam.validated["method"].split("/")[0] in ("fraction", "time")


def test_warm_rows_are_their_own_configurations_and_a_feature():
    frame = _dataset([
        {"m": 8, "median_s": 2.0, "min_s": 2.0, "cache": "cold"},
        {"m": 8, "median_s": 0.5, "min_s": 0.5, "cache": "warm"},
    ])
    rows = training_rows(frame).set_index("cache")
    assert rows.loc["cold", "time_s"] == 2.0 and rows.loc["warm", "time_s"] == 0.5
    x = feature_matrix(rows.reset_index(), units=2, tile=16)
    warm = FEATURES.index("warm")
    assert list(x[:, warm]) == [0.0, 1.0]


def test_old_predictors_ignore_the_warm_feature():
    # Predictors trained before `warm` existed read the implementation from column 13 (the
    # last of the 14 features they knew); the warm column, appended after it, must neither
    # move that column nor be where the implementation code is written.
    old_impl_column = 13
    trees = Trees(0.0, 1.0, ({"feature": [old_impl_column, -2, -2],
                              "threshold": [0.5, -2.0, -2.0], "left": [1, -1, -1],
                              "right": [2, -1, -1], "value": [0.0, 1.0, -1.0]},))
    fam = FamilyPredictor("csr", "fraction", 0.0, 1.0, trees, 10, 3,
                          implementations=("scipy_csr", "torch_csr"))
    for warm in (0.0, 1.0):
        x = np.zeros((2, len(FEATURES)))
        x[:, FEATURES.index("warm")] = warm
        time_s, names = fam.predict_best_s(x, np.ones(2))
        np.testing.assert_allclose(time_s, np.exp(-1.0))
        assert list(names) == ["torch_csr"] * 2


def _random_tree(rng, features: int, depth: int) -> dict:
    tree = {"feature": [], "threshold": [], "left": [], "right": [], "value": []}

    def grow(level: int) -> int:
        index = len(tree["feature"])
        for column in tree.values():
            column.append(None)
        if level == depth or rng.random() < 0.2:
            tree["feature"][index], tree["threshold"][index] = -2, -2.0
            tree["left"][index] = tree["right"][index] = -1
        else:
            tree["feature"][index] = int(rng.integers(features))
            tree["threshold"][index] = float(rng.normal())
            tree["left"][index] = grow(level + 1)
            tree["right"][index] = grow(level + 1)
        tree["value"][index] = float(rng.normal())
        return index

    grow(0)
    return tree


def _slow_predict(trees: Trees, x: np.ndarray) -> np.ndarray:
    """The reference: each row down each tree, one node at a time."""
    out = []
    for row in x:
        total = trees.init
        for t in trees.trees:
            node = 0
            while t["left"][node] >= 0:
                node = (t["left"][node] if row[t["feature"][node]] <= t["threshold"][node]
                        else t["right"][node])
            total += trees.rate * t["value"][node]
        out.append(total)
    return np.array(out)


@pytest.mark.parametrize("cells", [1 << 21, 7])  # one pass, and many small passes
def test_trees_walk_all_trees_at_once_as_the_slow_reference(monkeypatch, cells):
    from dse.calibrate import predictor

    monkeypatch.setattr(predictor, "_WALK_CELLS", cells)
    rng = np.random.default_rng(3)
    trees = Trees(0.3, 0.1, tuple(_random_tree(rng, 5, 6) for _ in range(40)))
    x = rng.normal(size=(57, 5))
    np.testing.assert_allclose(trees.predict(x), _slow_predict(trees, x), rtol=1e-12)
    assert len(Trees(0.3, 0.1, ()).predict(x)) == 57


def test_distinct_rows_by_value_even_when_hashes_collide(monkeypatch):
    from dse.calibrate import predictor

    x = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [np.nan, 0.0], [np.nan, 0.0]])
    unique, inverse = predictor._distinct_rows(x)
    assert len(unique) == 3
    np.testing.assert_array_equal(unique[inverse], x)
    # rows (2, 1) and (1, 2) hash alike under equal weights: the check falls back to sorting
    monkeypatch.setattr(np.random, "default_rng",
                        lambda seed: type("R", (), {"uniform": lambda self, a, b, n:
                                                    np.ones(n)})())
    y = np.array([[2.0, 1.0], [1.0, 2.0], [2.0, 1.0]])
    unique, inverse = predictor._distinct_rows(y)
    assert len(unique) == 2
    np.testing.assert_array_equal(unique[inverse], y)


def test_noise_floor_across_runs_compares_each_runs_fastest_round():
    def kernel(m, run, times):
        return [{"m": m, "run_id": run, "round": r, "median_s": t, "min_s": t}
                for r, t in enumerate(times)]

    frame = _dataset([
        *kernel(8, "x", [1.5, 1.0]), *kernel(8, "y", [1.05, 2.0]),   # 1.0 vs 1.05: 5%
        *kernel(16, "x", [1.0, 1.3]), *kernel(16, "y", [1.4, 1.5]),  # 1.0 vs 1.4: 40%
    ])
    noise = noise_floor(frame)
    assert noise["basis"] == "runs"
    assert noise["pairs"] == 2 and noise["share_over_10"] == 0.5
    assert noise["median_diff"] == pytest.approx(0.225)
    assert noise["rounds"]["pairs"] == 4  # round 0 vs 1 in each run of each kernel


def test_gpu_rows_are_kept_whatever_the_host_load():
    """A busy host slows a CPU kernel, not a GPU kernel timed by device events: only CPU rows
    with idle False are dropped."""
    frame = _dataset([
        {"m": 8, "median_s": 1.0, "idle": False, "device": "cpu"},
        {"m": 16, "median_s": 1.0, "idle": False, "device": "cuda"},
        {"m": 32, "median_s": 1.0, "idle": True, "device": "cpu"},
    ])
    assert sorted(training_rows(frame)["m"]) == [16, 32]


def test_benchmarked_kernels_with_one_gemm_view_are_not_repeats():
    """Two benchmarked vector ops over the same elements (GELU, ReLU) and two convolutions
    with the same GEMM view but different inputs (stride 1 and stride 2 of a 4x larger input)
    are four kernels, not two kernels measured twice; two layers of a trace with one shape are
    one kernel."""
    vector = {"family": "vector", "kind": "activation", "m": 0, "k": 0, "n": 4096,
              "source": "benchmark"}
    conv = {"kind": "conv", "m": 1, "k": 9, "n": 1568, "groups": 576, "source": "benchmark"}
    frame = _dataset([
        {**vector, "op": "gelu", "median_s": 1.0}, {**vector, "op": "relu", "median_s": 3.0},
        {**conv, "note": "input 1x576x28x28, kernel 3x3 stride 1 padding 1 groups 576",
         "median_s": 1.0},
        {**conv, "note": "input 1x576x56x56, kernel 3x3 stride 2 padding 1 groups 576",
         "median_s": 2.0},
        {"m": 8, "op": "blocks.0.fc1", "source": "trace", "median_s": 1.0},
        {"m": 8, "op": "blocks.1.fc1", "source": "trace", "median_s": 1.2},
    ]).assign(note=lambda f: f["note"].fillna(""), min_s=lambda f: f["median_s"])
    rows = training_rows(frame)
    assert sorted(rows.loc[rows["kind"] == "activation", "time_s"]) == [1.0, 3.0]
    assert sorted(rows.loc[rows["kind"] == "conv", "time_s"]) == [1.0, 2.0]
    assert rows.loc[rows["kind"] == "linear", "time_s"].tolist() == [pytest.approx(1.1)]
    noise = noise_floor(frame)
    assert noise["pairs"] == 1  # only the two trace layers


def test_a_benchmarked_convolution_reads_its_input_not_the_im2col_matrix():
    from dse.measure.sol import row_features

    frame = pd.DataFrame([{
        "source": "benchmark", "kind": "conv", "family": "dense", "model": "", "op": "dw",
        "m": 1, "k": 49, "n": 128 * 56 * 56, "groups": 96, "batch": 128,
        "note": "input 128x96x56x56, kernel 7x7 stride 1 padding 3 groups 96, no bias"}])
    features = row_features(frame)
    assert features[0].tolist() == [128 * 96 * 56 * 56, 96 * 1 * 128 * 56 * 56]


def test_sdpa_models_read_the_measured_attention_path():
    from dse.calibrate.validate import sdpa_models

    csv = pd.DataFrame({"model": ["vit", "swin", "resnet"],
                        "fused_attn_modules": ["12/12", "0/12", "0/0"]})
    assert sdpa_models(csv) == {"vit"}
    rows = pd.DataFrame({"model": ["deit", "convnext"], "note": [
        "input 3x224x224; attention fused (F.scaled_dot_product_attention) in 12 of 12 "
        "attention modules", "input 3x224x224"]})
    assert sdpa_models(rows) == {"deit"}


# --- kinds the predictors tell apart ----------------------------------------------------------


@pytest.mark.parametrize(("kind", "name", "want"), [
    ("other", "layers.0.blocks.1.roll_2", "other:roll"), ("other", "roll", "other:roll"),
    ("other", "layers.1.downsample.constant_pad_nd", "other:pad"),
    ("other", "index", "other:gather"), ("other", "blocks.3.attn.index_select", "other:gather"),
    ("other", "layers.0.blocks.0.clone", "other"), ("other", "cat_3", "other"),
    ("norm", "layers.0.norm.roll", "norm")])
def test_data_movement_is_told_apart_by_its_name(kind, name, want):
    from dse.calibrate.features import copy_kind, kind_code

    assert copy_kind(kind, name) == want
    codes = {kind_code(k) for k in ("other", "other:roll", "other:pad", "other:gather")}
    # data movement has a predictor of its own (features.OWN_VECTOR_KINDS), a norm shares vector
    key = "vector" if want == "norm" else "vector_" + want.replace(":", "_")
    assert len(codes) == 4 and family_key("vector", want, 1, 0) == key


def test_benchmarked_rows_carry_the_kinds_the_trace_ops_get():
    """A benchmarked convolution of 3 input channels is ``conv:image`` (its note says so), a
    trace's patch embedding is too (it reads the 3-channel model input), and both are priced by
    the dense convolution predictor; two benchmarked convolutions of one GEMM view but
    different strides stay two kernels (their geometry, "N out" or not, is in the note)."""
    from dse.calibrate.expected import op_configs
    from dse.calibrate.features import kernel_variant, with_feature_kinds

    rows = pd.DataFrame({
        "source": "benchmark", "family": "dense", "kind": "conv", "op": ["patch", "down", "c"],
        "note": ["input 8x3x224x224, 384 out, kernel 16x16 stride 16 padding 0 groups 1",
                 "input 8x192x28x28, 384 out, kernel 2x2 stride 2 padding 0 groups 1",
                 "input 8x192x28x28, kernel 2x2 stride 1 padding 0 groups 1"]})
    assert list(with_feature_kinds(rows)["kind"]) == ["conv:image", "conv", "conv"]
    assert kernel_variant(rows).nunique() == 3
    assert family_key("dense", "conv:image", 1, 0) == "conv"
    trace = workloads.load_trace("vit_base_patch16_224")
    layers = evaluate_layers(trace, "h100-sxm", "dense", batches=1, fusion="unfused",
                             scope="all")
    config = op_configs(layers, trace).assign(op=layers["op"].to_numpy())
    kinds = config.set_index("op")["kind"]
    assert kinds["patch_embed.proj"] == "conv:image"
    assert (kinds.drop("patch_embed.proj") != "conv:image").all()


def test_the_math_attention_products_and_softmax_are_priced_as_fp32():
    """Under 2:4 on a GPU torch's math attention path runs both products and the softmax in
    fp32: the torch backend names them so, the predictors see them as kinds of their own, and
    fp32 rows measured on a GPU get the same kinds; on the CPU (fp32 throughout) nothing
    changes."""
    from dse.calibrate.expected import op_configs
    from dse.calibrate.features import feature_kind, kind_code, with_feature_kinds
    from workloads.backend import torch_math_attention

    vit = workloads.load_trace("vit_base_patch16_224")
    gpu = torch_math_attention(vit)
    names = set(gpu.ops["name"])
    assert {f"blocks.0.attn.sdpa_math.{o}_fp32" for o in ("scores", "softmax", "context")} \
        <= names
    cpu = torch_math_attention(vit, cast_probabilities=False)
    assert not any(n.endswith("_fp32") for n in cpu.ops["name"])
    layers = evaluate_layers(gpu, "h100-sxm", "2:4", batches=8, fusion="unfused", scope="all")
    layers = layers[layers["format"] == "2:4"].reset_index(drop=True)
    kinds = op_configs(layers, gpu).assign(op=layers["op"].to_numpy()).set_index("op")["kind"]
    assert (kinds[kinds.index.str.endswith("scores_fp32")] == "matmul:fp32").all()
    assert (kinds[kinds.index.str.endswith("softmax_fp32")] == "softmax:fp32").all()
    assert int((kinds == "matmul:fp32").sum()) == 24  # 12 blocks, two products each
    assert feature_kind("matmul", "blocks.0.attn.bmm") == "matmul"
    assert kind_code("matmul:fp32") != kind_code("matmul")
    assert family_key("dense", "matmul:fp32", 96, 0) == "gemm_fp32"  # a predictor of its own
    rows = pd.DataFrame({"kind": ["matmul", "matmul", "softmax", "softmax"],
                         "dtype": ["fp32", "fp16", "fp32", "fp32"],
                         "device": ["cuda", "cuda", "cuda", "cpu"], "op": "x", "note": ""})
    assert list(with_feature_kinds(rows)["kind"]) == [
        "matmul:fp32", "matmul", "softmax:fp32", "softmax"]


def test_adds_of_a_transposed_view_are_a_kind_of_their_own():
    """A benchmarked add of a transposed view (part strided_add's ``add_strided``) and a trace
    op the torch backend renamed (``blocks.0.add.strided``) are both ``elementwise:strided``,
    and the vector predictor sees them apart from contiguous adds of the same elements."""
    from dse.calibrate.features import kernel_variant, kind_code, strided_kind, with_feature_kinds

    rows = pd.DataFrame({"kind": ["elementwise", "elementwise", "activation"],
                         "op": ["add_strided", "add", "add_strided"], "source": "benchmark",
                         "family": "vector", "note": "", "dtype": "fp16", "device": "cuda"})
    assert list(with_feature_kinds(rows)["kind"]) == [
        "elementwise:strided", "elementwise", "activation"]
    assert kernel_variant(rows).tolist() == ["add_strided", "add", "add_strided"]
    assert strided_kind("elementwise", "blocks.3.add_1.strided") == "elementwise:strided"
    assert strided_kind("elementwise", "blocks.3.add_1") == "elementwise"
    assert kind_code("elementwise:strided") not in (kind_code("elementwise"), kind_code("other"))
    assert family_key("vector", "elementwise:strided", 1, 0) == "vector_elementwise_strided"


def test_calibrate_says_when_no_last_level_cache_is_known():
    """Without a last-level cache every op of a model is priced warm: dse calibrate says so in
    one line, naming the spec and why, rather than shipping that silently."""
    from dse.calibrate.predictor import DevicePredictors
    from dse.cli.calibrate import with_warm_capacity

    def device(reference):
        return DevicePredictors("dev", reference, "cuda", 132, 128, 1e-6, {}, {})

    known, note = with_warm_capacity(device("h100-sxm"), [])
    assert note is None and known.warm_capacity_bytes == 50 * 2**20
    none, note = with_warm_capacity(device("b200"), [])  # the catalog's B200: no cache figures
    assert none.warm_capacity_bytes == 0.0
    assert note.startswith("note: dev: no last-level cache is known for the reference 'b200'")
    assert "no cache levels and no l2_bytes" in note and "\n" not in note
    lost, note = with_warm_capacity(device("not-a-spec"), [])
    assert lost.warm_capacity_bytes == 0.0 and "cannot be loaded" in note and "\n" not in note


# --- a convolution's geometry -----------------------------------------------------------------


def test_conv_geometry_features_by_hand():
    """Input elements per output pixel (C_in x stride^2), K x groups over that (kernel area /
    stride^2) and the batch, for convolutions whose input is known; zeros elsewhere."""
    frame = pd.DataFrame({
        "m": [64, 2048, 1, 64, 64], "k": [576, 1024, 49, 576, 576],
        "n": [8 * 56 * 56, 8 * 7 * 7, 128 * 56 * 56, 8 * 56 * 56, 8 * 56 * 56],
        "groups": [1, 1, 96, 1, 1], "sparsity": 0.0, "block": 0, "flops": 1.0, "bytes": 1.0,
        "kind": ["conv", "conv", "conv", "linear", "conv"],
        "input_elems": [8 * 64 * 56 * 56, 8 * 1024 * 14 * 14, 128 * 96 * 56 * 56,
                        8 * 64 * 56 * 56, 0],
        "batch": [8, 8, 128, 8, 8]})
    x = feature_matrix(frame, units=132, tile=128)
    column = lambda name: np.expm1(x[:, FEATURES.index(name)])  # noqa: E731
    # a 3x3 of stride 1 over 64 channels; a 1x1 of stride 2 over 1024 (4 inputs per output
    # pixel per channel, one read: 1/4); a 7x7 depthwise over 96 channels; a linear; a
    # convolution of unknown input
    np.testing.assert_allclose(column("log_input_per_out"), [64, 4096, 96, 0, 0])
    np.testing.assert_allclose(column("log_window"), [9, 0.25, 49, 0, 0])
    np.testing.assert_allclose(column("log_batch"), [8, 8, 128, 0, 0])


def test_benchmarked_and_traced_convolutions_see_one_geometry():
    """A benchmarked convolution (its input in its note), the same layer timed from a model's
    trace (its input from the trace op, per sample, times the batch), and the trace op as the
    expectation prices it at that batch get the same input and the same features."""
    from dse.calibrate.expected import op_configs

    conv = {"kind": "conv", "m": 64, "k": 576, "n": 8 * 56 * 56, "batch": 8}
    frame = _dataset([
        {**conv, "source": "benchmark", "model": "", "op": "c", "median_s": 1.0,
         "note": "input 8x64x56x56, kernel 3x3 stride 1 padding 1 groups 1"},
        {**conv, "source": "trace", "model": "resnet50", "op": "layer1.0.conv2",
         "median_s": 1.0, "note": "", "implementation": "b"},
    ])
    rows = training_rows(frame)
    assert rows["input_elems"].tolist() == [8 * 64 * 56 * 56] * 2
    trace = workloads.load_trace("resnet50")
    layers = evaluate_layers(trace, "h100-sxm", "dense", batches=8, fusion="unfused",
                             scope="all")
    config = op_configs(layers, trace).assign(op=layers["op"].to_numpy())
    priced = config[config["op"] == "layer1.0.conv2"]
    assert priced["input_elems"].tolist() == [8 * 64 * 56 * 56]
    geometry = [FEATURES.index(c) for c in ("log_input_per_out", "log_window", "log_batch")]
    np.testing.assert_allclose(feature_matrix(priced, 132, 128)[:, geometry],
                               feature_matrix(rows.iloc[:1], 132, 128)[:, geometry])
    convs = config["kind"].isin(["conv", "conv:image"])  # conv1 reads the 3-channel image
    assert (config.loc[~convs, "input_elems"] == 0).all()
    assert (config.loc[convs, "input_elems"] > 0).all()
