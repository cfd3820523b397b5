"""The learning-curve benchmark (benchmarks/bounds/learning_curve.py) on synthetic rows of
known structure, never on timings: a family whose times follow its physical model exactly is
predicted within 10% at every training share; one whose times are noise around it is not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.bounds.learning_curve import learning_curve, render
from dse.calibrate.validate import DeviceRows


def _rows(key: str, noise: float, rng) -> pd.DataFrame:
    shapes = [(m, k) for m in (64, 128, 256, 512, 1024, 2048) for k in (64, 256, 1024, 4096)]
    rows = []
    for m, k in shapes:
        for n in (1, 16, 128, 1024):
            flops, moved = 2.0 * m * k * n, 2.0 * (m * k + k * n + m * n)
            sol = max(flops / 1e15, moved / 3e12)
            time = (5e-6 + sol / 0.5) * float(np.exp(rng.normal(0.0, noise)))
            rows.append({"key": key, "format": "dense", "kind": "linear", "m": m, "k": k,
                         "n": n, "groups": 1, "sparsity": 0.0, "block": 0, "cache": "cold",
                         "variant": "", "implementation": "cublas", "impl": 0,
                         "time_s": time, "sol_s": sol, "flops": flops, "bytes": moved,
                         "shape": f"{key}:{m}x{k}x1"})
    return pd.DataFrame(rows)


def test_exact_physics_is_within_10_percent_and_noise_is_not():
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    rows = pd.concat([_rows("gemm", 0.0, rng), _rows("vector", 0.5, rng)], ignore_index=True)
    data = DeviceRows("synthetic", rows, "cuda", 132, "h100-sxm", {})
    table = learning_curve(data, folds=(2, 4), seeds=(0,))
    share = table.set_index(["key", "method", "folds"])["within_10"]
    # 24 shapes, 4 N each: 96 configurations per family, halves and quarters held out.
    assert set(table["configurations"]) == {96}
    assert sorted(table["train_share"].unique()) == [0.5, 0.75]
    for folds in (2, 4):
        assert share["gemm", "fraction/best", folds] == pytest.approx(1.0)
        # log-normal noise of sigma 0.5: |error| <= 10% for about 16% of rows at best
        assert share["vector", "fraction/best", folds] < 0.4
    text = render(table, "cmd")
    assert text.startswith("$ cmd\n") and "50% of shapes" in text and "75% of shapes" in text
