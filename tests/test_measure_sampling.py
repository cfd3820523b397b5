"""Adaptive sampling: the quick model's held-out error is largest where the data has
structure the model cannot see, and new points go there; the space-filling start respects the
formats' shape rules. Synthetic data with known structure, no kernels timed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.measure.sampling import AdaptiveSampler, Config, features, loo_errors

POOL = pd.DataFrame({"m": [384, 96, 1, 768], "k": [96, 384, 49, 3072], "n": [3136, 3136, 3136, 49],
                     "groups": [1, 1, 96, 1], "model": "test"})


def test_loo_error_is_largest_at_a_step():
    x = np.arange(10, dtype=float)[:, None]
    y = np.where(x[:, 0] < 5, 0.0, 1.0)
    err = loo_errors(x, y, neighbours=2)
    assert set(np.argsort(err)[-2:]) == {4, 5}
    assert err[0] == pytest.approx(0.0) and err[9] == pytest.approx(0.0)


def test_loo_error_of_tiny_sets():
    assert np.isinf(loo_errors(np.zeros((1, 6)), np.zeros(1))).all()


def _measured_with_a_dip() -> pd.DataFrame:
    """Dense rows over M = 2^6 .. 2^14 at fixed K, N: fraction 0.5 everywhere except a sharp
    dip to 0.02 at M = 2^10 (structure a smooth neighbour model cannot predict)."""
    ms = [2**e for e in range(6, 15)]
    rows = [{"family": "dense", "implementation": "torch_dense", "m": m, "k": 512, "n": 256,
             "groups": 1, "sparsity": 0.0, "block": 0, "error": "",
             "sol_fraction": 0.02 if m == 1024 else 0.5} for m in ms]
    return pd.DataFrame(rows)


def test_refine_adds_points_where_held_out_error_is_largest():
    sampler = AdaptiveSampler(["dense"], seed=3, pool=POOL)
    chosen = sampler.refine(_measured_with_a_dip(), count=1)
    assert len(chosen) == 1
    c = chosen[0]
    assert c.family == "dense"
    # drawn around M = 1024 (2^u, |u| <= 1/2), K and N likewise
    assert 1024 / 2**0.5 - 8 <= c.m <= 1024 * 2**0.5 + 8
    assert "largest held-out error" in c.why and "M=1024" in c.why


def test_space_filling_start_is_valid_and_explains_itself():
    sampler = AdaptiveSampler(["dense", "block", "unstructured"], seed=0, pool=POOL)
    configs = sampler.space_filling(None, 9)
    assert len(configs) == 9
    assert {c.family for c in configs} == {"dense", "block", "unstructured"}
    for c in configs:
        assert "space-filling" in c.why
        assert 2.0 * c.m * c.k * c.n * c.groups <= 4e9
        fmt = c.format()
        assert fmt.family == c.family
        if c.family == "block":
            assert c.m % c.block == 0 and c.k % c.block == 0 and c.groups == 1
        if c.family != "dense":
            assert bool(fmt.applies_to(c.m, c.k))


def test_sampling_is_deterministic_for_a_seed():
    a = AdaptiveSampler(["dense", "block"], seed=7, pool=POOL).space_filling(None, 4)
    b = AdaptiveSampler(["dense", "block"], seed=7, pool=POOL).space_filling(None, 4)
    assert [c.key() for c in a] == [c.key() for c in b]


def test_next_configs_starts_space_filling_then_refines():
    sampler = AdaptiveSampler(["dense"], seed=1, pool=POOL, initial=2)
    first = sampler.next_configs(_measured_with_a_dip(), count=4)
    assert len(first) == 2 and all("space-filling" in c.why for c in first)
    second = sampler.next_configs(_measured_with_a_dip(), count=2)
    assert any("held-out" in c.why for c in second)


def test_features_scale():
    f = features(1024, 512, 256, 1, 0.875, 4)
    assert f.shape == (1, 6)
    assert f[0].tolist() == pytest.approx([10, 9, 8, 0, 3, 2])
    assert Config("dense", 8, 8, 8, 1, 0.0, 0).format().name == "dense"


def test_families_take_turns_and_points_are_refined_once():
    dense = _measured_with_a_dip()
    steep = dense.assign(family="unstructured", implementation="scipy_csr", sparsity=0.9,
                         block=1, sol_fraction=[5.0 if i % 2 else 0.01 for i in range(len(dense))])
    measured = pd.concat([dense, steep], ignore_index=True)
    sampler = AdaptiveSampler(["dense", "unstructured"], seed=0, pool=POOL)
    first = sampler.refine(measured, count=2)
    assert sorted(c.family for c in first) == ["dense", "unstructured"]
    second = sampler.refine(measured, count=2)
    assert {c.why for c in first}.isdisjoint(c.why for c in second)
