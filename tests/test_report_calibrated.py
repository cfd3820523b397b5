"""`dse report --calibrated`: the bound beside the expectation and the measured kernels, by
value. Every expected number a chart draws is checked against ``expected_layers`` /
``expected_designs``, every measured point against the shipped dataset's rows, and the page is
rendered in headless Chromium with the network off."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import vl_convert

import reports
from dse.accuracy import DEFAULT_TABLE, attach_accuracy, load_accuracy_table
from dse.calibrate.expected import expected_designs, expected_layers
from dse.calibrate.predictor import load_predictors, save_predictors
from dse.cli.main import main
from dse.measure.dataset import load_dataset
from dse.roofline import evaluate, evaluate_layers
from tests.browser import ensure_chromium, render_report
from workloads import load_trace

REPO = Path(__file__).resolve().parents[1]
MODEL, HW, DEVICE = "convnext_tiny", "h100-sxm", "h100-sxm"
FORMATS = ["2:4", "block16@87.5%", "unstructured@87.5%"]


@pytest.fixture(scope="module")
def trace():
    return load_trace(MODEL)


@pytest.fixture(scope="module")
def predictors():
    # The shipped set less its dense-convolution predictor, so that the fallbacks the charts
    # mark exist: convnext_tiny's convolutions are then priced by the GEMM predictor.
    shipped = load_predictors(DEVICE)
    return replace(shipped, families={k: v for k, v in shipped.families.items() if k != "conv"})


@pytest.fixture(scope="module")
def dataset():
    return load_dataset(DEVICE)


@pytest.fixture(scope="module")
def layers(trace):
    return evaluate_layers(trace, HW, FORMATS, [1, 8], fusion="unfused", scope="gemm")


@pytest.fixture(scope="module")
def expected(layers, trace, predictors):
    return expected_layers(layers, trace, predictors)


@pytest.fixture(scope="module")
def measured(dataset, layers, trace):
    return reports.measured_data(dataset, layers, trace, name=DEVICE)


@pytest.fixture(scope="module")
def roof(layers, expected, measured):
    return reports.roofline_data(layers, HW, expected=expected, measured=measured)


# --- the per-layer roofline: bound, expected, measured -----------------------------------------

def test_roofline_has_the_bound_and_the_expected_point_of_every_op(layers, expected, roof):
    plain = reports.roofline_data(layers, HW)
    keys = ["format", "batch", "op"]
    bound = roof[roof["series"] == "op"]
    # The bound points are the plain roofline's, untouched.
    np.testing.assert_array_equal(bound["flops_per_s"], plain.loc[plain["series"] == "op",
                                                                  "flops_per_s"])
    exp = roof[roof["series"] == "expected"].merge(expected, on=keys, suffixes=("", "_in"))
    worked = expected[(expected["flops"] > 0) & (expected["dram_bytes"] > 0)
                      & (expected["expected_s"] > 0)]
    assert len(exp) == len(worked) == len(bound) > 100
    np.testing.assert_allclose(exp["flops_per_s"], exp["flops"] / exp["expected_s_in"])
    np.testing.assert_allclose(exp["intensity"], exp["flops"] / exp["dram_bytes"])
    np.testing.assert_array_equal(exp["predictor"], exp["predictor_in"])
    # Unfused bound: each expected point joins its own op's bound point, straight below it.
    np.testing.assert_allclose(exp["bound_intensity"], exp["intensity"])
    joined = exp.merge(bound[keys + ["flops_per_s"]], on=keys, suffixes=("", "_bound"))
    np.testing.assert_allclose(joined["bound_flops_per_s"], joined["flops_per_s_bound"])
    assert (exp["flops_per_s"] <= exp["bound_flops_per_s"] * (1 + 1e-9)).all()
    # Fallbacks of the expectation: the convolutions priced by the GEMM predictor (the
    # fixture's predictors have no convolution family).
    fell = exp[exp["calibration_fallback"]]
    assert set(fell["kind"]) == {"conv"} and len(fell)
    assert fell["calibration"].str.contains("priced by the gemm predictor|whole models").all()
    assert (exp.loc[~exp["calibration_fallback"], "calibration"] == "").all()
    labels = dict(zip(roof["series"], roof["series_label"], strict=True))
    assert labels["op"] == "bound: speed of light"
    assert labels["expected"] == "expected: predictors h100-sxm"
    assert labels["measured"] == "measured: h100-sxm, same shape as an op"


def test_measured_points_are_the_fastest_kernel_of_the_ops_shape(measured, dataset, layers):
    assert (measured["match"] == "same shape").all() and len(measured) == 4 * 4 * 2
    assert set(measured["format"]) == {"dense", *FORMATS} and set(measured["batch"]) == {1, 8}
    row = measured[(measured["format"] == "dense") & (measured["batch"] == 1)
                   & (measured["op"] == "stages.0.blocks.0.mlp.fc1")].iloc[0]
    rows = dataset[(dataset["family"] == "dense") & (dataset["m"] == 384)
                   & (dataset["k"] == 96) & (dataset["n"] == 3136) & (dataset["groups"] == 1)]
    best = rows.loc[rows["median_s"].astype(float).idxmin()]
    assert row["measured_s"] == float(best["median_s"])
    assert row["implementation"] == best["implementation"]
    assert row["flops_per_s"] == pytest.approx(float(best["flops"]) / float(best["median_s"]))
    assert row["intensity"] == pytest.approx(float(best["flops"]) / float(best["bytes"]))
    # The same GEMM in the three blocks of stage 0: one point, three ops.
    assert row["ops"] == 3
    # The measured point sits at the op's own intensity (same shape, fp16; the benchmark
    # counts the GEMM's operands, the trace the op's tensors: 0.03% apart here).
    op = layers[(layers["format"] == "dense") & (layers["batch"] == 1)
                & (layers["op"] == "stages.0.blocks.0.mlp.fc1")].iloc[0]
    assert row["intensity"] == pytest.approx(op["flops"] / op["dram_bytes"], rel=1e-3)
    sparse = measured[(measured["format"] == "2:4")]
    assert set(sparse["kernel_format"]) == {"2:4"}


def test_no_matching_shape_draws_every_measured_kernel_labelled_so(dataset):
    trace = load_trace("resnet50")
    layers = evaluate_layers(trace, HW, ["2:4"], [1, 8], fusion="unfused", scope="gemm")
    measured = reports.measured_data(dataset, layers, trace, name=DEVICE)
    assert (measured["match"] == "every shape").all()
    assert measured["model"].isna().all() and set(measured["batch"]) == {1, 8}
    kernels = dataset[(dataset["family"] != "model") & (dataset["median_s"] > 0)]
    configs = kernels[["family", "m", "k", "n", "groups", "block", "sparsity"]]
    assert len(measured) == 2 * len(configs.drop_duplicates())
    data = reports.roofline_data(layers, HW, measured=measured)
    assert set(data.loc[data["series"] == "measured", "series_label"]) == {
        "measured: h100-sxm, every shape (none is an op's)"}
    chart = reports.roofline_chart(data).to_dict()
    assert any("none is the shape of an op" in line for line in chart["title"]["subtitle"])


def test_roofline_chart_says_what_each_point_is(roof):
    chart = reports.roofline_chart(roof)
    spec = chart.to_dict()
    title = spec["title"]
    assert "bound, expected and measured" in title["text"]
    subtitle = " ".join(title["subtitle"])
    assert "convnext_tiny on h100-sxm, batches 1, 8" in subtitle
    gemm = load_predictors(DEVICE).families["gemm"].validated["rmspe"]
    assert "an expectation, not a bound" in subtitle
    assert f"held-out RMSPE gemm {gemm:.0%}" in subtitle
    assert "hollow triangles: priced without the family's own kernel data" in subtitle
    assert "conv priced by the gemm predictor" in subtitle
    assert "crosses: measured" in subtitle and "NVIDIA H100 80GB HBM3" in subtitle
    svg = vl_convert.vegalite_to_svg(chart.to_json())
    for words in ("bound: speed of light", "expected: predictors h100-sxm",
                  "measured: h100-sxm, same shape as an op"):
        assert words in svg


def test_expected_of_another_hardware_is_refused(layers, expected):
    with pytest.raises(ValueError, match="same hardware"):
        reports.roofline_data(layers.assign(hardware="a100"), "a100",
                              expected=expected)


# --- the Sparsity Roofline: a bound curve and an expected curve ---------------------------------

def test_sparsity_roofline_has_a_bound_and_an_expected_curve(trace, expected):
    designs = evaluate(trace, HW, FORMATS, [1], fusion="unfused", scope="gemm")
    designs = attach_accuracy(designs, load_accuracy_table(DEFAULT_TABLE))
    one = expected[expected["batch"] == 1]
    data = reports.sparsity_roofline_data(designs, one)
    truth = expected_designs(designs, one).set_index("format")
    assert list(data["estimate"].unique()) == ["bound", "expected"]
    bound = data[data["estimate"] == "bound"].set_index("format")
    exp = data[data["estimate"] == "expected"].set_index("format")
    assert set(bound.index) == set(exp.index) == {"dense", *FORMATS}
    for fmt in bound.index:
        assert bound.loc[fmt, "speedup"] == truth.loc[fmt, "speedup"]
        assert exp.loc[fmt, "speedup"] == truth.loc[fmt, "expected_speedup"]
        assert exp.loc[fmt, "accuracy"] == bound.loc[fmt, "accuracy"]
        assert exp.loc[fmt, "bound_speedup"] == truth.loc[fmt, "speedup"]
    assert exp.loc["2:4", "speedup"] < 1 < bound.loc["2:4", "speedup"]  # the README's example
    assert (exp["label"] == "").all()
    # The share of expected time priced without the family's own data, by value.
    rows = one[one["format"] == "dense"]
    fell = rows["calibration"].map(reports.is_calibration_fallback)
    share = rows.loc[fell, "expected_s"].sum() / rows["expected_s"].sum()
    assert exp.loc["dense", "expected_fallback_share"] == pytest.approx(share)
    assert 0 < share < 1
    assert exp.loc["unstructured@87.5%", "expected_fallback_share"] == 0.0
    # A frame that already has the expectation gives the same rows.
    again = reports.sparsity_roofline_data(expected_designs(designs, one), one)
    pd.testing.assert_frame_equal(again, data)

    chart = reports.sparsity_roofline_chart(data)
    title = chart.to_dict()["title"]
    subtitle = " ".join(title["subtitle"])
    assert "the bound and the expectation" in title["text"]
    assert "convnext_tiny on h100-sxm, batch 1" in subtitle
    assert "an expectation, not a bound" in subtitle and "kernel predictors h100-sxm" in subtitle
    assert f"dense {share:.0%}" in subtitle
    svg = vl_convert.vegalite_to_svg(chart.to_json())
    assert "bound: speed of light" in svg and "expected: h100-sxm" in svg


def test_plain_sparsity_roofline_is_unchanged(trace):
    designs = attach_accuracy(evaluate(trace, HW, FORMATS, [1], fusion="unfused"),
                              load_accuracy_table(DEFAULT_TABLE))
    data = reports.sparsity_roofline_data(designs)
    assert "estimate" not in data.columns and len(data) == len(FORMATS) + 1


def test_calibration_fallback_notes():
    assert reports.is_calibration_fallback("conv priced by the gemm predictor (no conv data)")
    assert not reports.is_calibration_fallback("fraction carried over from h100-sxm")
    assert not reports.is_calibration_fallback("")
    assert reports.is_calibration_fallback(
        "none for vector on h100-sxm: bound + launch floor used; fraction carried over from "
        "h100-sxm")


# --- the command: files, page, render, bad input ------------------------------------------------

def test_report_calibrated_end_to_end(tmp_path, predictors):
    out = tmp_path / "rep"
    # The fixture's predictors (no dense-convolution family), so that the page has fallbacks.
    saved = tmp_path / "h100-sxm.json"
    save_predictors(predictors, saved)
    run = subprocess.run(
        [sys.executable, "-m", "dse", "report", "--model", MODEL, "--hw", HW,
         *[a for f in FORMATS for a in ("--format", f)], "--batch", "1",
         "--calibrated", str(saved), "--out", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "an expectation, not a bound" in run.stdout

    roof = pd.read_csv(out / "roofline.csv")
    assert {"op", "expected", "measured"} <= set(roof["series"])
    designs = pd.read_csv(out / "table-designs.csv")
    sparsity = pd.read_csv(out / "sparsity-roofline.csv")
    exp = sparsity[sparsity["estimate"] == "expected"].merge(designs, on="format",
                                                             suffixes=("", "_design"))
    np.testing.assert_allclose(exp["speedup"], exp["expected_speedup_design"])
    table = pd.read_csv(out / "table-kernel-predictors-h100-sxm-and-their-held-out-erro.csv")
    gemm = table[table["family"] == "gemm"].iloc[0]
    assert gemm["heldout_rmspe"] == pytest.approx(predictors.families["gemm"].validated["rmspe"])
    assert gemm["op_rows"] > 0
    fallbacks = pd.read_csv(next(out.glob("table-expected-ops-priced-without*.csv")))
    assert fallbacks["calibration"].str.contains("priced by the gemm predictor").any()

    page = (out / "index.html").read_text()
    assert "kernel predictors h100-sxm" in page and "not bounds" in page
    rmspe = predictors.families["gemm"].validated["rmspe"]
    assert "Held-out error of each family" in page and f"gemm {rmspe:.0%}" in page
    assert "priced without their own family&#x27;s kernel data" in page
    assert "conv priced by the gemm predictor" in page
    assert "Measured points: the fastest kernel per configuration of dataset h100-sxm" in page

    result = render_report(out / "index.html", tmp_path / "shot.png",
                           chromium=ensure_chromium())
    assert result.expected_charts == 4 and result.rendered_flag == 4, result.problems()
    assert all(n > 0 for n in result.charts.values()), result.problems()
    assert not result.requests and not result.console_errors and not result.page_errors
    keep = REPO / "test-artifacts"
    keep.mkdir(exist_ok=True)
    (keep / "report-calibrated.png").write_bytes(result.screenshot.read_bytes())


@pytest.mark.parametrize("extra", [
    ["--calibrated", "no-such-device"],
    ["--measured", DEVICE],
    ["--calibrated", DEVICE, "--measured", "no-such-dataset.parquet"],
])
def test_bad_calibration_input_is_one_line(tmp_path, capsys, extra):
    code = main(["report", "--model", "toy_hybrid", "--hw", HW, "--format", "2:4",
                 "--out", str(tmp_path / "rep"), *extra])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dse: error:") and "\n" not in err
    assert not (tmp_path / "rep").exists()


def test_predictors_whose_dataset_is_elsewhere_say_so(tmp_path, capsys, predictors):
    from dataclasses import replace

    from dse.calibrate.predictor import save_predictors

    mine = tmp_path / "mine.json"
    save_predictors(replace(predictors, name="mine", provenance={
        **predictors.provenance, "dataset": str(tmp_path / "gone.parquet")}), mine)
    out = tmp_path / "rep"
    assert main(["report", "--model", "toy_hybrid", "--hw", HW, "--format", "2:4",
                 "--calibrated", str(mine), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "kernel predictors mine" in page
    assert "Measured points: none (dataset" in page and "give one with --measured" in page
    roof = pd.read_csv(out / "roofline.csv")
    assert "expected" in set(roof["series"]) and "measured" not in set(roof["series"])
    assert "an expectation, not a bound" in capsys.readouterr().out
    # toy_hybrid has no accuracy: the Sparsity Roofline says so instead of failing.
    assert "Not drawn: toy_hybrid (no accuracy in the accuracy table" in page
    assert (out / "sparsity-roofline.png").stat().st_size > 0
