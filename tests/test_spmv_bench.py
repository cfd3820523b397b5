"""The SpMV benchmark's arithmetic (estimate, pruning, budget), inputs and result schema.

No test asserts a timing value: costs come from synthetic calibrations and cost functions,
clocks are injected, and the one real run checks only the schema and the checks."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dse.spmv.bench import (
    RESULT_COLUMNS,
    BenchError,
    Calibration,
    Pruning,
    SpmvPlan,
    cache_sizes_from_sysfs,
    default_max_dim,
    estimate,
    format_summary,
    parse_duration,
    plan_spmv_benchmark,
    prune_to_budget,
    run_spmv_benchmark,
    run_spmv_plan,
    size_class,
)
from dse.spmv.matrices import MatrixSpec, spmv_space

CACHES = {"l2": 2**20, "l3": 32 * 2**20}


def flat_calibration(per_nnz: float = 1e-8, call: float = 1e-9, overhead: float = 1e-3,
                     compile_s: float = 0.25) -> Calibration:
    """The same rate at every size, so prices are hand-computable."""
    phases = {"build_s": per_nnz, "reference_s": per_nnz, "convert_s": per_nnz,
              "call_s": call, "bcsr_call_s": call, "csr_sample_s": call,
              "bcsr_sample_s": call}
    rates = {kind: {p: (v, v) for p, v in phases.items()} for kind in ("1x1", "blocked")}
    return Calibration((10**4, 10**7), rates, overhead, compile_s, 0.0, 0.5)


class FakeClock:
    """Advances ``step`` seconds every reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 100.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


# --- durations and other inputs --------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [
    ("5m", 300.0), ("90s", 90.0), ("2h", 7200.0), ("1.5m", 90.0), ("120", 120.0),
    (" 2 m ", 120.0), ("3min", 180.0), (45, 45.0), (0.5, 0.5), ("1e1s", 10.0),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "0s", "-1m", "5x", "", "abc", "m", "inf", 0, -3, True])
def test_parse_duration_refuses_with_one_line(text):
    with pytest.raises(BenchError) as caught:
        parse_duration(text)
    message = str(caught.value)
    assert message.startswith("--budget") and "\n" not in message


def test_budget_zero_names_the_fix():
    with pytest.raises(BenchError, match=r"--budget 0: give a positive duration such as 2m"):
        parse_duration("0")


@pytest.mark.parametrize("kwargs, match", [
    ({"budget_s": 0}, "--budget"),
    ({"budget_s": "-2m"}, "--budget"),
    ({"budget_s": "2 fortnights"}, "--budget"),
    ({"budget_s": 60, "max_dim": 100}, "--max-dim"),
    ({"budget_s": 60, "bandwidths": (4,)}, "--bandwidth 4"),
    ({"budget_s": 60, "cache_sizes": {"l2": 0}}, "cache_sizes"),
    ({"budget_s": 60, "cache_sizes": {"l1": 5, "l2": 10}}, "cache_sizes"),
    ({"budget_s": 60, "seed": -1}, "--seed"),
])
def test_plan_refuses_bad_input_before_work(kwargs, match):
    kwargs.setdefault("cache_sizes", CACHES)
    with pytest.raises(BenchError, match=match) as caught:
        plan_spmv_benchmark(**kwargs)
    assert "\n" not in str(caught.value)


def test_bench_error_is_a_value_error():
    assert issubclass(BenchError, ValueError)


def test_size_class_boundaries():
    assert size_class(2**20, CACHES) == "small"
    assert size_class(2**20 + 1, CACHES) == "medium"
    assert size_class(32 * 2**20, CACHES) == "medium"
    assert size_class(32 * 2**20 + 1, CACHES) == "large"
    assert size_class(5 * 2**20, {"l2": 2**20}) == "large"  # no L3: L2 is the last level


def test_default_max_dim_follows_cache_and_memory():
    plenty = default_max_dim(CACHES, available_bytes=2**40)
    assert plenty & (plenty - 1) == 0
    assert plenty * (12 * 34 + 4) >= 4 * CACHES["l3"]  # past the last-level cache
    assert (plenty // 2) * (12 * 34 + 4) < 4 * CACHES["l3"]
    tight = default_max_dim(CACHES, available_bytes=2**28)
    assert tight < plenty and tight * 80 * 34 <= 2**28 / 4
    assert default_max_dim(CACHES, available_bytes=1) == 512


def test_sysfs_cache_sizes_are_bytes():
    sizes = cache_sizes_from_sysfs()
    assert set(sizes) <= {"l2", "l3"}
    assert all(isinstance(v, int) and v > 0 for v in sizes.values())


# --- the estimator ---------------------------------------------------------------------------

def test_estimate_arithmetic():
    cal = flat_calibration()
    space = [MatrixSpec("blocked", 512, 24, 1, 1), MatrixSpec("blocked", 1024, 24, 2, 2),
             MatrixSpec("blocked", 2048, 24, 2, 2)]
    costs = estimate(space, cal, repeats=5, min_sample_s=0.002)
    assert list(costs["kernel"]) == ["csr", "bcsr"] * 3
    assert list(costs["matrix"]) == [0, 0, 1, 1, 2, 2]
    for i, spec in enumerate(space):
        csr = costs[(costs["matrix"] == i) & (costs["kernel"] == "csr")].iloc[0]
        bcsr = costs[(costs["matrix"] == i) & (costs["kernel"] == "bcsr")].iloc[0]
        call = 1e-9 * spec.nnz
        calls = math.ceil(0.002 / call)
        assert csr["build_s"] == pytest.approx(2e-8 * spec.nnz + 1e-3)
        assert csr["timed_s"] == pytest.approx(5 * calls * call)
        assert bcsr["convert_s"] == pytest.approx(1e-8 * spec.nnz)
        assert bcsr["check_s"] == pytest.approx(call)
        assert bcsr["block"] == spec.block
    # each kernel compiles once, on its first matrix
    assert list(costs[costs["kernel"] == "bcsr"]["compile_s"]) == [0.25, 0.25, 0.0]
    parts = costs[["build_s", "convert_s", "compile_s", "check_s", "timed_s"]].sum(axis=1)
    np.testing.assert_allclose(costs["seconds"], parts)
    warm = estimate(space, cal, compiled=[(1, 1), (2, 2)])
    assert (warm["compile_s"] == 0).all()


def test_estimate_interpolates_in_log_nnz():
    cal = flat_calibration()
    rates = {kind: dict(phases) for kind, phases in cal.rates.items()}
    rates["1x1"]["build_s"] = (1e-8, 3e-8)
    cal = dataclasses.replace(cal, rates=rates)
    assert cal.rate("1x1", "build_s", 10**4) == pytest.approx(1e-8)
    assert cal.rate("1x1", "build_s", 10**7) == pytest.approx(3e-8)
    assert cal.rate("1x1", "build_s", 10**5.5) == pytest.approx(2e-8)
    assert cal.rate("1x1", "build_s", 10) == pytest.approx(1e-8)  # held outside
    assert cal.rate("1x1", "build_s", 10**9) == pytest.approx(3e-8)
    assert cal.compile_s(4, 4) == pytest.approx(0.25)


# --- pruning ---------------------------------------------------------------------------------

def nnz_cost(specs) -> float:
    return sum(s.nnz for s in specs) * 1e-7


SPACE = spmv_space(2**12, blocks=(1, 2, 4))


def test_prune_keeps_everything_that_fits():
    pruning = prune_to_budget(SPACE, 1e9, nnz_cost)
    assert pruning.kept == SPACE and pruning.dropped == []
    assert pruning.predicted_s == pytest.approx(nnz_cost(SPACE))


@given(fraction=st.floats(0.002, 1.0))
def test_prune_fits_budget_in_bebop_order(fraction):
    budget = nnz_cost(SPACE) * fraction
    smallest = [s for s in SPACE if s.n == 512 and s.nnz_per_row == 29]
    if nnz_cost(smallest) > budget:
        with pytest.raises(BenchError, match="--budget"):
            prune_to_budget(SPACE, budget, nnz_cost)
        return
    pruning = prune_to_budget(SPACE, budget, nnz_cost)
    assert pruning.predicted_s == pytest.approx(nnz_cost(pruning.kept))
    assert pruning.predicted_s <= budget
    kinds = [what.split("=")[0] for what, _ in pruning.dropped]
    # nonzeros-per-row values go first, dimensions only once a single value is left
    assert kinds == sorted(kinds, key=lambda k: k != "nnz_per_row")
    ks = sorted({s.nnz_per_row for s in pruning.kept})
    dims = sorted({s.n for s in pruning.kept})
    if "n" in kinds:
        assert ks == [29]
    else:
        assert dims == [512, 1024, 2048, 4096]
    assert dims == [512 * 2**i for i in range(len(dims))]  # only the largest are dropped
    # the kept space is everything with those values: whole cross product, in run order
    assert pruning.kept == [s for s in SPACE if s.nnz_per_row in ks and s.n in dims]
    # maximal: putting back the last thing dropped would not fit
    if pruning.dropped:
        what = pruning.dropped[-1][0]
        key, value = what.split("=")
        more = [s for s in SPACE if (s.nnz_per_row in ks or (key == "nnz_per_row"
                and s.nnz_per_row == int(value))) and (s.n in dims or (key == "n"
                and s.n == int(value)))]
        assert nnz_cost(more) > budget


def test_prune_keeps_an_even_spread_of_nnz():
    per_k = nnz_cost([s for s in SPACE if s.nnz_per_row == 29])
    pruning = prune_to_budget(SPACE, per_k * 3.2, nnz_cost)
    assert sorted({s.nnz_per_row for s in pruning.kept}) == [24, 29, 34]
    assert [w for w, _ in pruning.dropped][:2] == ["nnz_per_row=33", "nnz_per_row=28"]


def test_prune_refuses_an_impossible_budget():
    with pytest.raises(BenchError, match=r"--budget .* give at least") as caught:
        prune_to_budget(SPACE, 1e-9, nnz_cost)
    assert "\n" not in str(caught.value)
    with pytest.raises(BenchError, match="--budget"):
        prune_to_budget(SPACE, 0, nnz_cost)


# --- running within the budget ---------------------------------------------------------------

def _plan(specs, budget_s, clock, cal=None) -> SpmvPlan:
    cal = cal or flat_calibration(per_nnz=1e-12, call=1e-12, overhead=0.0, compile_s=0.0)
    costs = estimate(specs, cal)
    pruning = Pruning(list(specs), [], float(costs["seconds"].sum()), budget_s)
    return SpmvPlan(budget_s, clock(), list(specs), pruning, cal, costs, CACHES, 2**10, 2,
                    1e-4)


def test_run_skips_what_would_pass_the_budget():
    """The estimate is 10^4 times too low; the clock-checked run still ends in budget."""
    clock = FakeClock(0.01)
    specs = spmv_space(2**10, nnz_per_row=(24,), blocks=(1, 2))
    calls = []
    result = run_spmv_plan(_plan(specs, 1.0, clock), clock=clock,
                           progress=lambda done, total: calls.append((done, total)))
    assert result.actual_s <= 1.0 * 1.1
    assert len(result.skipped) > 0
    assert len(result.frame) // 2 + len(result.skipped) == len(specs)
    assert calls == [(i + 1, len(specs)) for i in range(len(specs))]
    assert set(result.skipped.columns) >= {"label", "n", "r", "c", "reason"}


def test_run_without_pressure_runs_everything():
    clock = FakeClock(1e-6)
    specs = spmv_space(2**10, nnz_per_row=(24,), blocks=(1, 2))
    result = run_spmv_plan(_plan(specs, 1e6, clock), clock=clock)
    assert len(result.skipped) == 0 and len(result.frame) == 2 * len(specs)
    assert result.frame["checked"].all()


def test_tiny_real_run_schema_and_checks(tmp_path):
    done = []
    result = run_spmv_benchmark(20, max_dim=2**11, cache_sizes={"l2": 2**17, "l3": 2**19},
                                progress=lambda d, t: done.append(d), nnz_per_row=(24, 30),
                                blocks=(1, 4), bandwidths=(64,))
    frame = result.frame
    assert list(frame.columns) == list(RESULT_COLUMNS)
    assert frame.dtypes.equals(frame.astype(RESULT_COLUMNS).dtypes)
    assert str(frame["bandwidth"].dtype) == "Int64" and frame["checked"].dtype == bool
    assert len(frame) > 0 and frame["checked"].all()
    assert set(frame["kernel"]) == {"csr", "bcsr"}
    assert set(frame["size_class"]) <= {"small", "medium", "large"}
    assert (frame["fill_ratio"] == 1.0).all()  # blocked matrices in their own block size
    np.testing.assert_allclose(frame["mflops"], 2 * frame["nnz"] / frame["seconds"] / 1e6)
    assert (frame.groupby(["family", "n", "nnz_per_row", "r", "c"]).size() == 2).all()
    assert (frame.loc[frame["kernel"] == "csr", "block"] == "1x1").all()
    bcsr = frame[frame["kernel"] == "bcsr"]
    assert (bcsr["block"] == bcsr["r"].astype(str) + "x" + bcsr["c"].astype(str)).all()
    assert frame["bandwidth"].isna().sum() == (frame["family"] == "blocked").sum()
    assert done == list(range(1, len(result.plan.matrices) + 1))

    summary = result.summary()
    assert summary.all_checked
    assert summary.matrices == len(frame) // 2
    assert summary.blocked_max >= summary.blocked_median > 0
    assert summary.unblocked_max >= summary.unblocked_median > 0
    assert summary.speedup_4x4 > 0
    assert len(summary.best_blocks) == summary.matrices
    assert summary.predicted_s > 0 and summary.actual_s > 0
    text = format_summary(summary, "test machine")
    assert "MFLOP/s" in text and "predicted" in text and "4x4" in text

    path = tmp_path / "spmv.parquet"
    frame.to_parquet(path)
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(back, frame)


# --- report charts ---------------------------------------------------------------------------

def _synthetic_frame() -> pd.DataFrame:
    """Two 1x1 and two 2x2 matrices at two sizes; BCSR 2x2 twice as fast as CSR."""
    rows = []
    for n, k in ((512, 24), (2048, 24)):
        for r in (1, 2):
            nnz = n * k
            spec = MatrixSpec("blocked", n, k, r, r)
            for kernel, mflops in (("csr", 1000.0), ("bcsr", 1000.0 * r)):
                rows.append({"family": "blocked", "n": n, "nnz": nnz, "nnz_per_row": k,
                             "r": r, "c": r, "bandwidth": None, "fill_ratio": 1.0,
                             "kernel": kernel, "block": "1x1" if kernel == "csr" else
                             f"{r}x{r}", "seconds": 2 * nnz / mflops / 1e6, "min_s": 0.0,
                             "repeats": 5, "calls_per_repeat": 1, "mflops": mflops,
                             "matrix_bytes": spec.bytes, "format_bytes": spec.bytes,
                             "size_class": size_class(spec.bytes, CACHES), "checked": True,
                             "seed": 0, "predicted_s": 0.0, "actual_s": 0.0})
    return pd.DataFrame(rows).astype(RESULT_COLUMNS)


def test_chart_data_builders():
    from reports.spmv_charts import (
        spmv_profile_chart,
        spmv_profile_data,
        spmv_size_chart,
        spmv_size_data,
    )
    frame = _synthetic_frame()
    profile = spmv_profile_data(frame, machine="box")
    assert list(profile["block"]) == ["1x1", "2x2"]
    assert list(profile["mflops"]) == [1000.0, 2000.0]
    assert list(profile["speedup"]) == [1.0, 2.0]
    assert list(profile["speedup_over_csr"]) == [1.0, 2.0]
    assert list(profile["matrices"]) == [2, 2]
    assert "box" in profile["title"].iloc[0] and "measured" in profile["title"].iloc[0]
    spmv_profile_chart(profile).to_dict()
    sizes = spmv_size_data(frame, CACHES, machine="box")
    assert (sizes["series"] == "run").sum() == len(frame)
    assert list(sizes.loc[sizes["series"] == "cache", "label"]) == ["L2 1 MiB", "L3 32 MiB"]
    medians = sizes[sizes["series"] == "median"]
    assert set(medians["kernel"]) == {"CSR", "BCSR 1x1", "BCSR r x c > 1"}
    spmv_size_chart(sizes).to_dict()
    with pytest.raises(ValueError, match="size_class"):
        spmv_profile_data(frame, size_class="large")
