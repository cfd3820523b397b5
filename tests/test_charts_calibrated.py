"""reports: the expectation beside the bound in the charts of `dse compare`, `dse sweep`, the
search report and the simulator's gap chart. Each frame is checked by value on small hand-made
inputs (two rows a design, ``estimate`` bound then expected), each chart's legend and subtitle
say which series is which, and end to end a calibrated search report and a calibrated
simulation report draw the numbers their results hold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import vl_convert

import reports
from dse.calibrate.expected import expected_layers
from dse.calibrate.predictor import load_predictors
from dse.cli.report import write_search_report
from dse.roofline import evaluate_layers
from dse.sim import simulate
from search.study import SearchRequest, run_search
from tests.cli_run import run_cli
from tests.search_spaces import space_text, write_space
from workloads import load_trace

WORDS = ("bound: speed of light", "expected: dev predictors (not a bound)")


def svg_of(chart) -> str:
    svg = vl_convert.vegalite_to_svg(chart.to_json())
    assert svg.lstrip().startswith("<svg")
    return svg


def subtitle(chart) -> str:
    return " ".join(chart.to_dict()["title"]["subtitle"])


# --- hardware comparison (dse compare, dse sweep) ----------------------------------------------

@pytest.fixture
def designs():
    """Three designs on two accelerators with the expectation beside the bound, as
    ``expected_designs`` gives it; 2:4 on h2 runs dense (the hardware lacks it)."""
    return pd.DataFrame({
        "hardware": ["h2", "h1", "h1"], "model": "m", "format": ["2:4", "2:4", "dense"],
        "batch": 1, "fusion": "unfused", "latency_s": [1.0, 2.0, 3.0],
        "speedup": [1.5, 1.5, 1.0], "memory_bound_ops": [3, 1, 0], "ops": [4, 4, 0],
        "feature_bytes_share": [0.5, 0.6, 0.4], "shape_fallback_ops": 0,
        "hw_fallback": ["dense", "", ""], "hw_fallback_ops": [4, 0, 0],
        "expected_latency_s": [4.0, 8.0, 6.0], "expected_speedup": [0.5, 0.75, 1.0],
        "fraction_of_sol": [0.25, 0.25, 0.5],
        "predictor": ["dev:nm:fraction 100%", "dev:nm:fraction 80%, dev:gemm:fraction 20%",
                      "dev:gemm:fraction 100%"],
        "validated_rmspe": [0.28, 0.2, 0.09], "calibration": ["", "", "a note"]})


def test_hardware_comparison_data_has_both_estimates(designs):
    data = reports.hardware_comparison_data(designs)
    assert list(data.columns[:5]) == ["hardware", "model", "format", "batch", "estimate"]
    assert list(zip(data["format"], data["hardware"], data["estimate"], strict=True)) == [
        ("dense", "h1", "bound"), ("dense", "h1", "expected"), ("2:4", "h1", "bound"),
        ("2:4", "h1", "expected"), ("2:4", "h2", "bound"), ("2:4", "h2", "expected")]
    assert list(data["latency_s"]) == [3.0, 6.0, 2.0, 8.0, 1.0, 4.0]
    assert list(data["speedup"]) == [1.0, 1.0, 1.5, 0.75, 1.5, 0.5]
    assert list(data["bound_latency_s"]) == [3.0, 3.0, 2.0, 2.0, 1.0, 1.0]
    assert list(data["expected_latency_s"]) == [6.0, 6.0, 8.0, 8.0, 4.0, 4.0]
    assert list(data["bound_speedup"]) == [1.0, 1.0, 1.5, 1.5, 1.5, 1.5]
    assert list(data["expected_speedup"]) == [1.0, 1.0, 0.75, 0.75, 0.5, 0.5]
    assert list(data["fraction_of_sol"]) == [0.5, 0.5, 0.25, 0.25, 0.25, 0.25]
    assert set(data["expected_by"]) == {"dev"}
    assert list(data["calibration"][:2]) == ["a note"] * 2
    # The bound's design columns stay on both rows (fallbacks, shares).
    assert list(data["hw_fallback_ops"]) == [0, 0, 0, 0, 4, 4]
    assert list(data["memory_bound_share"][2:4]) == [0.25, 0.25]


def test_hardware_comparison_chart_says_which_is_which(designs):
    chart = reports.hardware_comparison_chart(reports.hardware_comparison_data(designs))
    spec = chart.to_dict()
    assert spec["title"]["text"] == "Latency and speedup by hardware, the bound and the expectation"
    text = subtitle(chart)
    assert "m, batch 1, unfused" in text
    assert "faded bars and hollow triangles: the hardware lacks the format" in text
    assert "bars: the bound (speed of light); triangles" in text
    assert "kernel predictors dev" in text and "an expectation, not a bound" in text
    heads = [panel["title"] for panel in spec["vconcat"]]
    assert heads == ["Latency: the bound (bars) and the expectation (triangles)",
                     "Speedup over dense on the same hardware: the bound (bars) and the "
                     "expectation (triangles)"]
    svg = svg_of(chart)
    assert all(word in svg for word in WORDS)
    assert svg.count('aria-roledescription="point"') == 3 + 2  # triangles: latency, speedup


def test_plain_hardware_comparison_is_unchanged(designs):
    plain = designs.drop(columns=["expected_latency_s", "expected_speedup", "fraction_of_sol",
                                  "predictor", "validated_rmspe", "calibration"])
    data = reports.hardware_comparison_data(plain)
    assert "estimate" not in data and len(data) == 3
    spec = reports.hardware_comparison_chart(data).to_dict()
    assert [p["title"] for p in spec["vconcat"]] == ["Speed-of-light latency",
                                                     "Speedup over dense on the same hardware"]
    assert "expected" not in svg_of(reports.hardware_comparison_chart(data))


# --- feature share against batch (dse sweep, dse report) ----------------------------------------

def test_feature_share_data_has_both_estimates_and_their_own_segments():
    frame = pd.DataFrame({"model": "m", "hardware": "h", "format": ["2:4", "dense", "2:4"],
                          "batch": [8, 1, 1], "feature_bytes_share": [0.9, 0.5, 0.6],
                          "speedup": [1.1, 1.0, 1.3], "expected_speedup": [0.6, 1.0, 0.4],
                          "predictors": "dev:nm:fraction; dev:gemm:fraction",
                          "calibration": ""})
    data = reports.feature_share_data(frame)
    assert list(data.columns[:7]) == ["model", "format", "estimate", "batch",
                                      "feature_bytes_share", "speedup", "segment"]
    assert list(data["estimate"]) == ["bound"] * 3 + ["expected"] * 3
    assert list(data["format"]) == ["dense", "2:4", "2:4"] * 2
    assert list(data["batch"]) == [1, 1, 8] * 2
    assert list(data["speedup"]) == [1.0, 1.3, 1.1, 1.0, 0.4, 0.6]
    assert list(data["feature_bytes_share"]) == [0.5, 0.6, 0.9] * 2  # the bound's traffic
    assert list(data["segment"]) == [1, 2, 3, 4, 5, 6]  # 1 -> 8 more than doubles
    assert set(data["expected_by"]) == {"dev"}
    joined = reports.feature_share_data(frame.assign(batch=[2, 1, 1]))
    assert list(joined["segment"]) == [1, 2, 2, 3, 4, 4]  # a line per format and estimate
    chart = reports.feature_share_chart(data)
    spec = chart.to_dict()
    assert spec["vconcat"][1]["title"] == ("Speedup against batch: the bound (solid, circles) "
                                           "and the expectation (dashed, triangles)")
    assert "dashed lines and triangles: expected" in subtitle(chart)
    # The share panel draws the bound's rows only: the traffic is the same on both.
    share_layers = spec["vconcat"][0]["spec"]["layer"]
    assert all({"filter": "(datum.estimate === 'bound')"} in layer["transform"]
               for layer in share_layers)
    assert all(word in svg_of(chart) for word in WORDS)


# --- a search's Pareto front and target ---------------------------------------------------------

@pytest.fixture
def results():
    """Three candidates and a baseline of a calibrated search: the bound and the expectation
    rank them differently."""
    return pd.DataFrame({
        "model": "m", "batch": 1, "hardware": "h",
        "role": ["baseline", "candidate", "candidate", "candidate"],
        "format": ["2:4", "1:8", "block32@50%", "block4@75%"],
        "speedup": [1.3, 2.0, 1.0, 1.5], "expected_speedup": [0.3, 0.5, 0.9, 0.4],
        "accuracy": [99.0, 90.0, 95.0, 92.0],
        "speedup_over_baseline": [1.0, 0.5 / 0.3, 3.0, 0.4 / 0.3],
        "bound_speedup_over_baseline": [1.0, 2.0 / 1.3, 1.0 / 1.3, 1.5 / 1.3],
        "bound_meets_target": [False, True, False, False],
        "accuracy_drop": [0.0, 9.0, 4.0, 7.0],
        "verdict": ["no target", "too inaccurate", "too inaccurate", "too inaccurate"],
        "rank": pd.array([pd.NA] * 4, dtype="Int64"),
        "predictors": "dev:nm:fraction", "calibration": "", "fraction_of_sol": 0.25,
        "validated_rmspe": 0.28})


def test_pareto_data_has_a_front_per_estimate(results):
    data = reports.pareto_data(results)
    assert list(data["estimate"]) == ["bound"] * 4 + ["expected"] * 4
    np.testing.assert_array_equal(data["speedup"], [*results["speedup"],
                                                    *results["expected_speedup"]])
    # By the bound 2:4 (1.3, 99), 1:8 (2.0, 90) and block4 (1.5, 92) are on the front; by the
    # expectation 2:4 (0.3, 99) and block32 (0.9, 95).
    assert list(data["pareto"]) == [True, True, False, True, True, False, True, False]
    # A search's own fronts are kept: `pareto` (the expectation's), `bound_pareto`.
    given = results.assign(pareto=[False, False, True, False],
                           bound_pareto=[False, True, False, False])
    kept = reports.pareto_data(given)
    assert list(kept["pareto"]) == [False, True, False, False, False, False, True, False]
    chart = reports.pareto_chart(data)
    assert chart.to_dict()["title"]["text"] == ("Search: Pareto front of speedup and accuracy, "
                                                "the bound and the expectation")
    assert "dashed front, triangles: expected" in subtitle(chart)
    assert all(word in svg_of(chart) for word in WORDS)


def test_target_data_puts_each_candidates_bound_beside_it(results):
    data = reports.target_data(results)
    assert list(data.columns[:6]) == ["model", "hardware", "batch", "format", "group",
                                      "estimate"]
    assert list(data["estimate"]) == ["bound"] * 3 + ["expected"] * 3
    # Within an estimate: rank (all NA here), then speedup over the baseline, descending.
    assert list(data["format"]) == ["1:8", "block4@75%", "block32@50%",
                                    "block32@50%", "1:8", "block4@75%"]
    np.testing.assert_allclose(data["speedup_over_baseline"],
                               [2.0 / 1.3, 1.5 / 1.3, 1.0 / 1.3, 3.0, 0.5 / 0.3, 0.4 / 0.3])
    exp = data[data["estimate"] == "expected"].set_index("format")
    assert exp.loc["1:8", "bound_speedup_over_baseline"] == 2.0 / 1.3
    assert exp.loc["1:8", "expected_speedup_over_baseline"] == 0.5 / 0.3
    assert bool(exp.loc["1:8", "bound_meets_target"])
    assert set(data["verdict"]) == {"too inaccurate"}  # the search's, on both rows
    chart = reports.target_chart(data, ratio=1.3, max_acc_drop=1.0, target="1.3x_over_2:4")
    assert chart.to_dict()["title"]["text"] == ("Candidates against the target 1.3x_over_2:4, "
                                                "the bound and the expectation")
    assert "Grey circles, joined by a dotted line: the same design by the bound" in \
        subtitle(chart)
    assert all(word in svg_of(chart) for word in WORDS)


def test_calibrated_search_report_draws_what_the_search_ranked_by(tmp_path):
    """ConvNeXt-T on the default space's A100: by the bound 1:8 meets 1.3x 2:4, by the
    expectation only block32@50% does; the report draws both, from the results."""
    path = write_space(tmp_path, space_text(formats='list = ["2:4", "1:8", "block32@50%"]'))
    outcome = run_search(SearchRequest(space=path, target="1.3x_over_2:4",
                                       calibrated="h100-sxm", out=tmp_path / "t", study="t"))
    folder = tmp_path / "rep"
    write_search_report(folder, outcome.results, "calibrated", target=outcome.problem.target)
    results = outcome.results.astype({"format": str}).set_index("format")
    target = pd.read_csv(folder / "target.csv", keep_default_na=False)
    for row in target.itertuples():
        want = results.loc[row.format, "speedup_over_baseline" if row.estimate == "expected"
                           else "bound_speedup_over_baseline"]
        assert row.speedup_over_baseline == pytest.approx(want, rel=1e-12)
        assert row.verdict == results.loc[row.format, "verdict"]
    pareto = pd.read_csv(folder / "pareto.csv", keep_default_na=False)
    for row in pareto.itertuples():
        want = results.loc[row.format, "expected_speedup" if row.estimate == "expected"
                           else "speedup"]
        assert row.speedup == pytest.approx(want, rel=1e-12)
    for name in ("pareto", "target"):
        svg = (folder / f"{name}.svg").read_text()
        assert "expected: h100-sxm predictors (not a bound)" in svg, name
        assert "bound: speed of light" in svg and "convnext_tiny" in svg, name
    page = (folder / "index.html").read_text()
    assert "Pareto front: bound and expected" in page


# --- the simulator's gap chart ------------------------------------------------------------------

@pytest.fixture
def calibrated_ops():
    """Two ops of a calibrated simulation, times in 1/8 s: the kernel cause beside the
    others, each op's components adding up to its gap."""
    frame = pd.DataFrame({
        "op": ["fc1", "fc2"], "op_index": [0, 1], "kind": "linear", "unit": "sparse_tensor",
        "launch_s": [0.125, 0.125], "buffer_s": [0.0, 0.25], "kernel_s": [1.5, 0.5],
        "fill_drain_s": [0.25, 0.125], "roofline_s": 2.0, "kernel_time_s": [3.5, 2.5],
        "why": ["kernel", "kernel"], "model": "m", "hardware": "h", "format": "2:4",
        "batch": 1, "fusion": "unfused", "scope": "gemm", "expected_by": "dev"})
    frame["gap_s"] = frame[["launch_s", "buffer_s", "kernel_s", "fill_drain_s"]].sum(axis=1)
    frame["latency_s"] = frame["roofline_s"] + frame["gap_s"]
    return frame


def test_sim_gap_data_has_the_kernel_cause_and_the_predicted_time(calibrated_ops):
    data = reports.sim_gap_data(calibrated_ops)
    assert list(data["component"]) == ["launch", "buffer-bound", "kernel", "fill/drain"] * 2
    assert list(data["time_s"]) == [0.125, 0.0, 1.5, 0.25, 0.125, 0.25, 0.5, 0.125]
    sums = data.groupby("op", sort=False)["time_s"].sum()
    assert sums.to_dict() == {"fc1": 1.875, "fc2": 1.0}  # no "other": the causes add up
    assert list(data["kernel_time_s"]) == [3.5] * 4 + [2.5] * 4
    assert list(data["kernel_gap_us"]) == [1.5e6] * 4 + [0.5e6] * 4
    assert set(data["expected_by"]) == {"dev"}
    chart = reports.sim_gap_chart(data)
    spec = chart.to_dict()
    assert spec["title"]["text"].startswith("Gap of the expected latency over the roofline, "
                                            "top 2 ops: m on h, 2:4, batch 1")
    text = subtitle(chart)
    assert "an expectation, not a bound" in text and "dev predictors" in text
    assert "black dots: the predicted kernel time" in text
    bars = spec["layer"][0]["encoding"]["color"]["scale"]
    assert bars["domain"] == ["launch", "buffer-bound", "kernel", "fill/drain"]
    assert bars["range"][2] == "#9467bd"
    svg = svg_of(chart)
    assert "predicted kernel time" in svg and "expected, not a bound" in svg


def test_plain_sim_gap_has_no_kernel_cause(calibrated_ops):
    plain = calibrated_ops.drop(columns=["kernel_s", "kernel_time_s", "expected_by"])
    plain["gap_s"] = plain[["launch_s", "buffer_s", "fill_drain_s"]].sum(axis=1)
    data = reports.sim_gap_data(plain)
    assert "kernel" not in set(data["component"]) and "kernel_gap_us" not in data
    spec = reports.sim_gap_chart(data).to_dict()
    assert spec["title"].startswith("Gap over the roofline, top 2 ops")  # no fallback fields
    assert spec["encoding"]["color"]["scale"]["domain"] == ["launch", "buffer-bound",
                                                            "fill/drain"]


def test_calibrated_simulation_report_shows_the_kernel_cause(tmp_path, capsys):
    """`dse simulate --calibrated --report`: the gap chart's kernel cause and predicted kernel
    times are the simulation's own (`--out`), and the page says the latency is expected."""
    ops_file, folder = tmp_path / "ops.csv", tmp_path / "rep"
    assert run_cli(["simulate", "--model", "toy_hybrid", "--hw", "h100-sxm", "--format", "2:4",
                    "--calibrated", "h100-sxm", "--out", str(ops_file),
                    "--report", str(folder)]) == 0
    capsys.readouterr()
    ops = pd.read_csv(ops_file).set_index("op")
    gap = pd.read_csv(folder / "gap.csv", keep_default_na=False)
    kernel = gap[gap["component"] == "kernel"].set_index("op")
    assert len(kernel) == gap["op"].nunique() > 0
    np.testing.assert_allclose(kernel["time_s"], ops.loc[kernel.index, "kernel_s"], rtol=1e-12)
    np.testing.assert_allclose(kernel["kernel_time_s"], ops.loc[kernel.index, "kernel_time_s"],
                               rtol=1e-12)
    assert (kernel["time_s"] > 0).any()
    # The priced kernel times are dse evaluate --calibrated's.
    trace = load_trace("toy_hybrid")
    layers = evaluate_layers(trace, "h100-sxm", "2:4", 1, fusion="unfused")
    priced = expected_layers(layers[layers["format"] == "2:4"].reset_index(drop=True), trace,
                             load_predictors("h100-sxm")).set_index("op")
    np.testing.assert_allclose(kernel["kernel_time_s"], priced.loc[kernel.index, "expected_s"],
                               rtol=1e-12)
    assert set(gap["expected_by"]) == {"h100-sxm"}
    page = (folder / "index.html").read_text()
    assert "Expected latency (each op at the kernel time the h100-sxm predictors expect" in page
    svg = (folder / "gap.svg").read_text()
    assert "Gap of the expected latency over the roofline" in svg
    assert "toy_hybrid on h100-sxm, 2:4, batch 1" in svg


def test_simulated_kernel_cause_matches_the_api(calibrated_ops):
    """The same numbers through the API: sim_gap_data of a calibrated simulation adds up to
    each op's gap with the kernel cause, never leaving an "other" remainder."""
    trace = load_trace("toy_hybrid")
    layers = evaluate_layers(trace, "h100-sxm", "2:4", 1, fusion="unfused")
    layers = layers[layers["format"] == "2:4"].reset_index(drop=True)
    priced = expected_layers(layers, trace, load_predictors("h100-sxm"))
    result = simulate(trace, "h100-sxm", "2:4", op_time_s=dict(zip(
        priced["op"], priced["expected_s"], strict=True)))
    data = reports.sim_gap_data(result.ops, top=50)
    assert "other" not in set(data["component"])
    sums = data.groupby("op")["time_s"].sum()
    gaps = result.ops.set_index("op").loc[sums.index, "gap_s"]
    np.testing.assert_allclose(sums, gaps, rtol=1e-9, atol=1e-15)
