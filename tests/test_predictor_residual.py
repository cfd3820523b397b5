"""The learned residual of the kernel predictors: gradient-boosted trees (default) or
histogram boosting under monotone constraints, exported to the same numpy trees."""

from __future__ import annotations

import numpy as np
import pytest

from dse.calibrate.features import FEATURES
from dse.calibrate.predictor import MONOTONE, Trees, fit_family

sklearn = pytest.importorskip("sklearn")


def test_exported_histogram_trees_predict_what_sklearn_predicts():
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(3)
    x = rng.random((400, 5))
    y = np.sin(4 * x[:, 0]) + x[:, 1] ** 2 - (x[:, 2] > 0.5)
    model = HistGradientBoostingRegressor(max_iter=60, max_depth=4, min_samples_leaf=2,
                                          early_stopping=False, random_state=0).fit(x, y)
    trees = Trees.from_histogram_boosting(model)
    probe = rng.random((300, 5))
    # thresholds kept to 9 and leaf values to 6 significant digits
    np.testing.assert_allclose(trees.predict(probe), model.predict(probe), atol=1e-5)


def _rows(n: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features of kernels whose time grows as the tile padding wastes more (pad_eff falls),
    with noise that an unconstrained learner can fit the wrong way."""
    x = rng.random((n, len(FEATURES)))
    pad = FEATURES.index("pad_eff")
    sol = np.full(n, 1e-5)
    time = sol * (1.0 + 2.0 * (1.0 - x[:, pad])) * np.exp(rng.normal(0, 0.15, n))
    return x, time, sol


@pytest.mark.parametrize("target", ["fraction", "time"])
def test_the_monotone_residual_never_slows_a_less_padded_kernel(target):
    rng = np.random.default_rng(5)
    x, time, sol = _rows(300, rng)
    model = fit_family("gemm", x, time, sol, shapes=300, target=target, residual="monotone")
    pad = FEATURES.index("pad_eff")
    probe = np.repeat(rng.random((20, len(FEATURES))), 50, axis=0)
    probe[:, pad] = np.tile(np.linspace(0, 1, 50), 20)
    predicted = model.predict_s(probe, np.full(len(probe), 1e-5)).reshape(20, 50)
    assert (np.diff(predicted, axis=1) <= 1e-12 * predicted[:, 1:]).all()
    assert MONOTONE[target]["pad_eff"] == -1


def test_an_unknown_residual_is_refused():
    rng = np.random.default_rng(0)
    x, time, sol = _rows(20, rng)
    with pytest.raises(ValueError, match="residual must be one of trees, monotone"):
        fit_family("gemm", x, time, sol, shapes=20, residual="forest")
