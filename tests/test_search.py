"""Search: spaces, targets, scoring, ranking, and the default search against `dse evaluate`."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.cli import main
from search.errors import SearchError, SpaceError, TargetError
from search.problem import Problem
from search.scoring import pareto_mask, rank, score
from search.space import DEFAULT_SPACE, load_space, parse_space
from search.study import SearchRequest, new_settings, run_search
from search.target import Objective, make_objective, parse_target
from tests.search_spaces import space_text, write_space

# --- spaces -----------------------------------------------------------------------------------

def test_default_space_is_bobs_question():
    space, _ = load_space()
    assert space.models == ("convnext_tiny", "swin_tiny")
    assert space.batches == (1,)
    assert space.hardware == ("a100",)
    assert dict(space.fixed) == {"sparse_tensor.patterns": "candidates",
                                 "sparse_tensor.nonzero_rate": 1.0}
    settings = new_settings(SearchRequest(target="1.3x_over_2:4"))
    problem = Problem(settings)
    nm = [f for f in problem.candidates if ":" in f]
    assert max(int(f.split(":")[1]) for f in nm) == 32
    assert {"2:4", "1:4", "2:8", "2:16", "1:8", "4:32"} <= set(nm)
    # Block and unstructured at the table's levels: 5 block sizes x 5 levels, 5 unstructured.
    assert sum(f.startswith("block") for f in problem.candidates) == 25
    assert sum(f.startswith("unstructured") for f in problem.candidates) == 5
    # The A100 of the space runs every N:M candidate natively at nonzero_rate 1.0.
    acc = problem.builder.build(0, ())
    assert all(acc.supports_nm(*map(int, f.split(":"))) for f in nm)
    assert acc.nonzero_rate == 1.0


def test_grid_and_list_knobs_enumerate_every_point(tmp_path):
    text = space_text('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = [1.0e12, 2.0e12]\n'
                      '"tensor_flops_per_s.fp16" = { min = 1.0e14, max = 1.0e15, steps = 3, '
                      'log = true }\n')
    space = parse_space(text, "t.toml")
    assert space.finite and space.hardware_count() == 6
    grid = space.knobs[1].values
    assert grid[0] == 1e14 and grid[-1] == 1e15
    assert grid[1] == pytest.approx(math.sqrt(1e14 * 1e15))
    points = list(space.hardware_points())
    assert [p.values for p in points] == list(itertools.product(space.knobs[0].values, grid))


def test_continuous_knob_makes_an_infinite_space():
    text = space_text('[hardware.vary]\n"sparse_tensor.nonzero_rate" = { min = 0.5, max = 1.0 }')
    text = text.replace('"sparse_tensor.nonzero_rate" = 1.0\n', "")
    space = parse_space(text, "t.toml")
    assert not space.finite and space.size() == math.inf


@pytest.mark.parametrize("text, needle", [
    ("models = [", "not valid TOML"),
    (space_text().replace('models = ["convnext_tiny"]\n', ""), "missing 'models'"),
    (space_text(head="colour = 1"), "unknown key 'colour'"),
    (space_text(head="batches = [0]").replace("batches = [1]\n", ""), "batches"),
    (space_text(head='fusion = "maybe"'), "fusion"),
    (space_text(formats='list = ["9:4"]'), "N:M needs"),
    (space_text(formats='nm = { m = [4] }'), "formats.nm needs one of n"),
    (space_text(formats='block = { sizes = [128], sparsity = [0.5] }'), "formats.block.sizes"),
    (space_text(formats='unstructured = { sparsity = [1.5] }'), "fractions in (0, 1)"),
    (space_text('[hardware.vary]\n"dram_bandwith" = [1.0e12]'), "unknown hardware field"),
    (space_text('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = []'), "empty list"),
    (space_text('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = [-1.0]'), "dram_bandwidth"),
    (space_text('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = { min = 2.0, max = 1.0 }'),
     "must be below max"),
    (space_text('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = { min = 1.0, max = 2.0, '
                'steps = 1 }'), "steps must be"),
    (space_text('[hardware.vary]\n"sparse_tensor.nonzero_rate" = [0.5]'), "both set and varied"),
    (space_text().replace('base = ["a100"]', 'base = ["tpu9"]'), "hardware.base"),
])
def test_bad_spaces_name_the_key(text, needle):
    with pytest.raises(SpaceError) as err:
        parse_space(text, "bad.toml")
    assert "bad.toml" in str(err.value) and needle in str(err.value)


# --- targets ----------------------------------------------------------------------------------

def test_targets_parse():
    t = parse_target("1.3x_over_2:4", 0.5)
    assert (t.ratio, t.baseline.name, t.max_acc_drop, t.text) == (1.3, "2:4", 0.5, "1.3x_over_2:4")
    assert parse_target("2x_over_block16@87.5%").baseline.name == "block16@87.5%"
    assert parse_target("1.1x_over_dense").baseline.name == "dense"


@pytest.mark.parametrize("text, needle", [
    ("fast", "is not <r>x_over_<format>"),
    ("1.3x_over_9:4", "N:M needs 1 <= N < M"),
    ("1.3x_over_", "is not <r>x_over_<format>"),
    ("0x_over_2:4", "positive"),
    ("1.3x_over_block16", "need a sparsity"),
])
def test_bad_targets(text, needle):
    with pytest.raises(TargetError) as err:
        parse_target(text)
    assert needle in str(err.value) and text in str(err.value)


def test_objectives():
    assert make_objective(None, None) == Objective("speedup")
    assert make_objective(None, "hw.dram_bandwidth_bytes_per_s").field == \
        "dram_bandwidth_bytes_per_s"
    with pytest.raises(TargetError, match="unknown hardware field"):
        make_objective(None, "bandwidth")
    with pytest.raises(TargetError, match="exclude each other"):
        make_objective("accuracy", "dram_bandwidth_bytes_per_s")


# --- scoring ----------------------------------------------------------------------------------

def _rows(speedups: dict[str, list[float]]) -> pd.DataFrame:
    records = []
    for fmt, values in speedups.items():
        for hw, s in enumerate(values):
            records.append({"model": "m", "format": fmt, "hw_point": hw, "batch": 1,
                            "speedup": s})
    return pd.DataFrame(records)


def test_score_by_hand():
    rows = _rows({"dense": [1.0, 1.0], "2:4": [1.5, 2.0], "1:8": [2.0, 2.4],
                  "block16@87.5%": [3.0, 3.0]})
    accuracy = {"dense": (99.0, "measured"), "2:4": (98.5, "measured"),
                "1:8": (98.0, "interpolated"), "block16@87.5%": (96.0, "measured")}
    target = parse_target("1.3x_over_2:4", 1.0)
    out = score(rows, {"1:8", "block16@87.5%"}, accuracy, target)
    get = out.set_index(["format", "hw_point"])
    # hw 0: 1:8 is 2.0/1.5 = 1.333x 2:4 (meets); hw 1: 2.4/2.0 = 1.2x (too slow).
    assert get.loc[("1:8", 0), "speedup_over_baseline"] == pytest.approx(4 / 3)
    assert get.loc[("1:8", 0), "verdict"] == "meets"
    assert get.loc[("1:8", 1), "verdict"] == "too slow"
    assert get.loc[("1:8", 0), "accuracy_drop"] == pytest.approx(0.5)
    # block16: fast enough, but 2.5 points below 2:4.
    assert get.loc[("block16@87.5%", 0), "verdict"] == "too inaccurate"
    assert get.loc[("2:4", 0), "role"] == "baseline"
    assert get.loc[("dense", 0), "role"] == "dense"
    assert not get.loc[("2:4", 0), "meets_target"]  # the baseline is no candidate
    ranked = rank(out, Objective("speedup"))
    assert ranked.set_index(["format", "hw_point"])["rank"].dropna().to_dict() == {("1:8", 0): 1}


def test_exactly_r_times_the_baseline_meets_it():
    rows = _rows({"dense": [1.0], "2:4": [1.7], "1:4": [1.7 * 1.3]})
    accuracy = {"dense": (99.0, "m"), "2:4": (98.0, "m"), "1:4": (97.0, "m")}
    out = score(rows, {"1:4", "2:4"}, accuracy, parse_target("1.3x_over_2:4", 1.0))
    assert out.set_index("format").loc["1:4", "verdict"] == "meets"
    out = score(_rows({"dense": [1.0], "2:4": [1.7]}), {"2:4"}, accuracy,
                parse_target("1x_over_2:4", 0.0))
    assert out.set_index("format").loc["2:4", "verdict"] == "meets"


def _pareto_reference(speedup, accuracy):
    """O(n^2): a point is on the front unless another is >= in both and > in one."""
    n = len(speedup)
    return np.array([not any(speedup[j] >= speedup[i] and accuracy[j] >= accuracy[i]
                             and (speedup[j] > speedup[i] or accuracy[j] > accuracy[i])
                             for j in range(n)) for i in range(n)], dtype=bool)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=0, max_size=40))
def test_pareto_mask_matches_the_quadratic_reference(points):
    speedup = np.array([p[0] for p in points], dtype=float)
    accuracy = np.array([p[1] for p in points], dtype=float)
    assert np.array_equal(pareto_mask(speedup, accuracy), _pareto_reference(speedup, accuracy))


# --- the default search and `dse evaluate` ----------------------------------------------------

@pytest.fixture(scope="module")
def default_search(tmp_path_factory):
    out = tmp_path_factory.mktemp("default") / "run"
    outcome = run_search(SearchRequest(target="1.3x_over_2:4", out=out, study="default"))
    return outcome


def test_default_search_speedups_equal_dse_evaluate(default_search, tmp_path):
    results = default_search.results
    # two models x (41 candidates + the 2:4 baseline + dense)
    assert len(results) == 2 * (41 + 1 + 1)
    for model in ("convnext_tiny", "swin_tiny"):
        formats = sorted(set(default_search.problem.evaluated))
        evaluated = tmp_path / f"{model}.csv"
        argv = ["evaluate", "--model", model, "--hw", "a100",
                "--set", "sparse_tensor.patterns=" + ",".join(
                    f for f in default_search.problem.evaluated if ":" in f),
                "--set", "sparse_tensor.nonzero_rate=1.0", "--out", str(evaluated)]
        for f in formats:
            argv += ["--format", f]
        assert main(argv) == 0
        expected = pd.read_csv(evaluated).set_index("format")["speedup"]
        trace_model = "swin_tiny_patch4_window7_224" if model == "swin_tiny" else model
        got = results[results["model"] == trace_model].set_index("format")["speedup"]
        got.index = got.index.astype(str)
        assert set(got.index) == set(expected.index)
        for fmt in got.index:
            # Same design, same number: to rounding, as a study this small is priced in
            # numpy (dse.roofline.kernels.numpy_only) and dse evaluate by numba's kernels.
            assert got[fmt] == pytest.approx(expected[fmt], rel=1e-12, abs=0), fmt


def test_default_search_answers_bob(default_search):
    ranked = default_search.ranked
    assert len(ranked) > 0
    for row in ranked.itertuples():
        assert row.speedup_over_baseline >= 1.3 - 1e-12
        assert row.accuracy_drop <= 1.0 + 1e-9
        assert row.verdict == "meets"
    # Every candidate that misses says why, consistently with its numbers.
    results = default_search.results
    missed = results[(results["role"] == "candidate") & ~results["meets_target"]]
    for row in missed.itertuples():
        slow = row.speedup_over_baseline < 1.3 * (1 - 1e-12)
        bad = row.accuracy_drop > 1.0 + 1e-9
        assert row.verdict == {(True, False): "too slow", (False, True): "too inaccurate",
                               (True, True): "too slow and too inaccurate"}[(slow, bad)]
    files = {p.name for p in default_search.files}
    assert files == {"results.parquet", "ranked.parquet", "summary.json"}
    back = pd.read_parquet(default_search.out / "results.parquet")
    assert len(back) == len(results)


def test_minimize_finds_the_least_bandwidth_that_meets_the_target(tmp_path):
    text = space_text('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = { min = 0.2e12, '
                      'max = 3.0e12, steps = 15 }\n"tensor_flops_per_s.fp16" = [1.0e14, 3.12e14]',
                      formats='nm = { m = [4, 8, 16], sparsity = "table" }')
    path = write_space(tmp_path, text)
    outcome = run_search(SearchRequest(space=path, target="1.3x_over_2:4",
                                       minimize="dram_bandwidth_bytes_per_s",
                                       out=tmp_path / "out", study="cost"))
    results = outcome.results
    meets = results[results["meets_target"]]
    best = outcome.ranked.iloc[0]
    assert best["hw.dram_bandwidth_bytes_per_s"] == meets["hw.dram_bandwidth_bytes_per_s"].min()
    assert best["speedup"] == meets[meets["hw.dram_bandwidth_bytes_per_s"]
                                    == best["hw.dram_bandwidth_bytes_per_s"]]["speedup"].max()


def test_pareto_objective_keeps_only_undominated_designs(tmp_path):
    outcome = run_search(SearchRequest(objective="pareto", out=tmp_path / "p", study="pareto"))
    results = outcome.results
    for model, group in results[results["role"] == "candidate"].groupby("model",
                                                                         observed=True):
        front = group[group["pareto"]]
        assert len(front) >= 1
        for row in group.itertuples():
            dominated = ((group["speedup"] >= row.speedup) & (group["accuracy"] >= row.accuracy)
                         & ((group["speedup"] > row.speedup)
                            | (group["accuracy"] > row.accuracy))).any()
            assert row.pareto == (not dominated), (model, row.format)


def test_optuna_engine_on_a_continuous_space_keeps_an_exact_budget(tmp_path):
    text = space_text('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = { min = 0.5e12, '
                      'max = 3.0e12, log = true }')
    path = write_space(tmp_path, text)
    outcome = run_search(SearchRequest(space=path, target="1.2x_over_2:4", trials=12, seed=3,
                                       out=tmp_path / "o", study="cont"))
    assert outcome.engine == "optuna"
    assert outcome.counts == {"complete": 12}
    assert outcome.results["trials"].sum() == 12
    bw = outcome.results["hw.dram_bandwidth_bytes_per_s"]
    assert ((bw >= 0.5e12) & (bw <= 3.0e12)).all()


def test_exhaustive_refuses_a_continuous_space(tmp_path):
    text = space_text('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = { min = 0.5e12, '
                      'max = 3.0e12 }')
    path = write_space(tmp_path, text)
    with pytest.raises(SearchError, match="continuous range"):
        run_search(SearchRequest(space=path, engine="exhaustive", out=tmp_path / "x"))
    assert not (tmp_path / "x").exists()  # refused before anything was written


def test_candidate_without_accuracy_is_named(tmp_path):
    path = write_space(tmp_path, space_text(formats='list = ["2:4", "1:16"]'))
    with pytest.raises(SearchError) as err:
        run_search(SearchRequest(space=path, target="1.3x_over_2:4", out=tmp_path / "x"))
    assert "candidate 1:16 has no accuracy for model convnext_tiny" in str(err.value)
    assert not (tmp_path / "x").exists()
    # Without a target or an accuracy objective, no accuracy is needed: it is reported as NaN.
    outcome = run_search(SearchRequest(space=path, out=tmp_path / "y", study="noacc"))
    row = outcome.results.set_index("format").loc["1:16"]
    assert math.isnan(row["accuracy"]) and row["accuracy_status"] == "out_of_range"


def test_default_space_file_is_shipped():
    assert DEFAULT_SPACE.is_file()


def test_both_engines_score_a_design_the_same(tmp_path):
    """Optuna trials and the exhaustive enumeration give identical rows for the same design,
    over two base GPUs and a sparse-pattern knob (lists, and "candidates")."""
    text = space_text('[hardware.vary]\n"sparse_tensor.patterns" = [["2:4"], ["2:4", "1:4"], '
                      '"candidates"]', formats='list = ["2:4", "1:4", "2:8", "1:8"]')
    text = text.replace('base = ["a100"]', 'base = ["a100", "h100"]').replace(
        '"sparse_tensor.patterns" = "candidates"\n', "")
    path = write_space(tmp_path, text)
    full = run_search(SearchRequest(space=path, target="1.2x_over_2:4", study="ex",
                                    out=tmp_path / "ex")).results
    sampled = run_search(SearchRequest(space=path, target="1.2x_over_2:4", study="op",
                                       engine="optuna", trials=25, out=tmp_path / "op")).results
    key = ["model", "hardware", "hw.sparse_tensor.patterns", "format", "batch"]
    columns = ["speedup", "speedup_over_baseline", "accuracy", "verdict", "hw_fallback"]
    both = sampled.astype({k: str for k in key}).merge(
        full.astype({k: str for k in key}), on=key, suffixes=("_op", "_ex"))
    assert len(both) == len(sampled) > 3
    for column in columns:
        assert (both[f"{column}_op"].astype(str) == both[f"{column}_ex"].astype(str)).all(), \
            column
    # 1:4 runs natively only where the knob lets the sparse tensor core run it.
    native = full[(full["format"] == "1:4")].set_index(["hardware", "hw.sparse_tensor.patterns"])
    assert native.loc[("a100-40gb", "2:4"), "hw_fallback"] != ""
    assert native.loc[("a100-40gb", "2:4,1:4"), "hw_fallback"] == ""
