"""`dse compare --calibrated DEVICE` and `dse sweep --calibrated DEVICE`: the expectation beside
the bound in the printed tables, the written files and the report charts, checked by value
against `dse evaluate --calibrated`'s numbers (``expected_layers`` / ``expected_designs``); bad
input is one line and exit 2. Small designs on ``toy_hybrid`` (every op kind, seconds to run)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import accelerator_models
from dse import evaluate
from dse.calibrate.expected import expected_designs, expected_layers
from dse.calibrate.predictor import load_predictors
from dse.roofline import evaluate_layers
from tests.cli_run import run_cli
from workloads import load_trace

MODEL, DEVICE = "toy_hybrid", "h100-sxm"
FORMATS = ["2:4", "block16@87.5%"]
EXPECTED = ["expected_latency_s", "expected_speedup", "fraction_of_sol"]


@pytest.fixture(scope="module")
def predictors():
    return load_predictors(DEVICE)


def evaluate_calibrated(accelerator, batches, predictors) -> pd.DataFrame:
    """`dse evaluate --calibrated`'s design rows: the numbers both commands must give."""
    trace = load_trace(MODEL)
    layers = evaluate_layers(trace, accelerator, FORMATS, batches, fusion="unfused")
    return expected_designs(evaluate(trace, accelerator, FORMATS, batches),
                            expected_layers(layers, trace, predictors))


def design_args(*hardware: str) -> list[str]:
    return ["--model", MODEL, "--hw", ",".join(hardware),
            *[a for f in FORMATS for a in ("--format", f)]]


def assert_same_expectation(got: pd.DataFrame, want: pd.DataFrame, keys: list[str]) -> None:
    both = got.astype({k: str for k in keys if k != "batch"}).merge(
        want.astype({k: str for k in keys if k != "batch"}), on=keys, suffixes=("", "_want"))
    assert len(both) == len(got) == len(want) > 0
    np.testing.assert_array_equal(both["speedup"], both["speedup_want"])  # the bound
    for column in EXPECTED:
        np.testing.assert_allclose(both[column], both[f"{column}_want"], rtol=1e-12,
                                   err_msg=column)


# --- dse compare --calibrated --------------------------------------------------------------------


def test_compare_calibrated_equals_evaluate_calibrated(tmp_path, capsys, predictors):
    out = tmp_path / "cmp.csv"
    assert run_cli(["compare", *design_args("h100-sxm", "a100"), "--calibrated", DEVICE,
                    "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out, keep_default_na=False)
    for column in (*EXPECTED, "predictor", "validated_rmspe", "calibration"):
        assert column in table, column
    want = pd.concat([evaluate_calibrated(accelerator_models.load(h), [1], predictors)
                      for h in ("h100-sxm", "a100")], ignore_index=True)
    assert_same_expectation(table, want, ["hardware", "format", "batch"])
    # The A100 is not the device: its fraction of the speed of light carries over, and says so.
    a100 = table[table["hardware"] == "a100-40gb"]
    assert a100["calibration"].str.contains("fraction carried over from h100-sxm").all()
    assert not table.loc[table["hardware"] == "h100-sxm", "calibration"].str.contains(
        "carried over").any()
    # The printed table: the expectation beside the bound, named and said not to be a bound.
    lines = printed.splitlines()
    assert lines[0] == ("hardware: h100-sxm, a100-40gb at fp16 (vector ops fp16); batch 1; "
                        "fusion unfused, scope gemm")  # what it assumed
    head = lines[1].split()
    assert head[head.index("speedup") + 1:head.index("speedup") + 5] == [
        "expected", "exp.", "speedup", "frac"]
    row = next(line for line in lines if "h100-sxm" in line and " 2:4 " in line).split()
    design = table[(table["hardware"] == "h100-sxm") & (table["format"] == "2:4")].iloc[0]
    at = row.index("h100-sxm")
    assert row[at + 1:at + 8] == [
        f"{design['latency_s'] * 1e3:.4f}", "ms", f"{design['speedup']:.3f}",
        f"{design['expected_latency_s'] * 1e3:.4f}", "ms", f"{design['expected_speedup']:.3f}",
        f"{design['fraction_of_sol']:.2f}"]
    assert ("expected: kernels as measured on h100-sxm (reference h100-sxm), one op at a time "
            "(unfused) whatever --fusion; an expectation, not a bound") in lines
    rmspe = f"held-out RMSPE {_nm_rmspe()}"
    assert any(line.startswith("  h100-sxm:nm:fraction: ") and rmspe in line
               for line in lines)


def test_compare_without_calibrated_is_as_before(tmp_path, capsys):
    out = tmp_path / "cmp.csv"
    assert run_cli(["compare", *design_args("h100-sxm"), "--out", str(out)]) == 0
    assert "expected" not in capsys.readouterr().out
    assert not set(EXPECTED) & set(pd.read_csv(out).columns)


def test_compare_calibrated_report_draws_both(tmp_path, capsys):
    folder = tmp_path / "rep"
    assert run_cli(["compare", *design_args("h100-sxm", "a100"), "--batch", "1", "--batch",
                    "4", "--calibrated", DEVICE, "--report", str(folder)]) == 0
    capsys.readouterr()
    designs = pd.read_csv(folder / "table-designs.csv", keep_default_na=False)
    data = pd.read_csv(folder / "hardware-comparison.csv", keep_default_na=False)
    assert list(data["estimate"].unique()) == ["bound", "expected"]
    assert len(data) == 2 * len(designs)
    keys = ["hardware", "format", "batch"]
    both = data.merge(designs, on=keys, suffixes=("", "_design"))
    bound, exp = both[both["estimate"] == "bound"], both[both["estimate"] == "expected"]
    np.testing.assert_array_equal(bound["latency_s"], bound["latency_s_design"])
    np.testing.assert_array_equal(bound["speedup"], bound["speedup_design"])
    np.testing.assert_allclose(exp["latency_s"], exp["expected_latency_s_design"], rtol=1e-12)
    np.testing.assert_allclose(exp["speedup"], exp["expected_speedup_design"], rtol=1e-12)
    assert set(data["expected_by"]) == {DEVICE}
    svg = (folder / "hardware-comparison.svg").read_text()
    assert "bound: speed of light" in svg
    assert "expected: h100-sxm predictors (not a bound)" in svg
    assert "an expectation, not a bound" in svg
    page = (folder / "index.html").read_text()
    assert "kernel predictors h100-sxm" in page and "not bounds" in page
    assert "Energy comes from the bound" in page
    assert "Measured points" not in page  # compare draws no measured kernels
    assert (folder / "table-kernel-predictors-h100-sxm-and-their-held-out-erro.csv").exists()


# --- dse sweep --calibrated ----------------------------------------------------------------------


def test_sweep_calibrated_equals_evaluate_calibrated(tmp_path, capsys, predictors):
    """At the device's own bandwidth a swept point is the device; at another it is a variant
    whose fraction of the speed of light carries over (and says so)."""
    out = tmp_path / "sweep.csv"
    assert run_cli(["sweep", *design_args("h100-sxm"), "--vary", "batch=1,2",
                    "--vary", "hw.dram_bandwidth_bytes_per_s=1e12,3.35e12",
                    "--calibrated", DEVICE, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    frame = pd.read_csv(out, keep_default_na=False)
    for column in (*EXPECTED, "predictors", "validated_rmspe", "calibration"):
        assert column in frame, column
    for bandwidth in (1e12, 3.35e12):
        point = accelerator_models.derive("h100-sxm",
                                          {"dram_bandwidth_bytes_per_s": bandwidth})
        want = evaluate_calibrated(point, [1, 2], predictors)
        got = frame[frame["vary.hw.dram_bandwidth_bytes_per_s"] == bandwidth]
        assert_same_expectation(got, want, ["format", "batch"])
        carried = got["calibration"].str.contains("fraction carried over from h100-sxm")
        assert carried.all() if bandwidth == 1e12 else not carried.any()
    # The summary gives the expectation's range beside the bound's, per format.
    lines = printed.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("model"))
    assert "exp. speedup min" in lines[head] and "where (exp. max)" in lines[head]
    two = frame[frame["format"] == "2:4"]
    row = next(line for line in lines[head + 1:] if " 2:4 " in line)
    assert f"{two['expected_speedup'].min():.3f}x" in row
    assert f"{two['expected_speedup'].max():.3f}x" in row
    assert f"{two['speedup'].max():.3f}x" in row
    assert ("expected: kernels as measured on h100-sxm (reference h100-sxm), one op at a time "
            "(unfused) whatever --fusion; an expectation, not a bound") in lines
    nm = f"h100-sxm:nm:fraction (held-out RMSPE {_nm_rmspe()})"
    assert any(line.startswith("  predictors: ") and nm
               in line for line in lines)


def test_sweep_calibrated_report_draws_both(tmp_path, capsys):
    folder = tmp_path / "rep"
    out = tmp_path / "sweep.parquet"
    assert run_cli(["sweep", *design_args("h100-sxm"), "--vary", "batch=1,2,4",
                    "--calibrated", DEVICE, "--out", str(out), "--report", str(folder)]) == 0
    capsys.readouterr()
    frame = pd.read_parquet(out)
    shares = pd.read_csv(folder / "feature-share.csv", keep_default_na=False)
    assert list(shares["estimate"].unique()) == ["bound", "expected"]
    merged = shares.merge(frame.astype({"format": str}), on=["format", "batch"],
                          suffixes=("", "_sweep"))
    assert len(merged) == 2 * len(frame)
    bound = merged[merged["estimate"] == "bound"]
    exp = merged[merged["estimate"] == "expected"]
    np.testing.assert_array_equal(bound["speedup"], bound["speedup_sweep"])
    np.testing.assert_allclose(exp["speedup"], exp["expected_speedup_sweep"], rtol=1e-12)
    # The traffic is the bound's: the same on both rows of a design.
    np.testing.assert_array_equal(exp["feature_bytes_share"], exp["feature_bytes_share_sweep"])
    designs = pd.read_csv(folder / "designs.csv", keep_default_na=False)
    assert (designs.groupby("estimate").size() == len(frame)).all()
    for name in ("feature-share", "designs"):
        svg = (folder / f"{name}.svg").read_text()
        assert "expected: h100-sxm predictors (not a bound)" in svg, name
        assert "an expectation, not a bound" in svg, name
    page = (folder / "index.html").read_text()
    assert "kernel predictors h100-sxm" in page and "h100-sxm:nm:fraction" in page


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, needle", [
    (["compare", *design_args("h100-sxm"), "--calibrated", "nope"],
     "nope: no such predictor file or shipped predictor"),
    (["sweep", *design_args("h100-sxm"), "--vary", "batch=1,2", "--calibrated", "nope"],
     "nope: no such predictor file or shipped predictor"),
    (["sweep", *design_args("h100-sxm"), "--vary", "batch=1,2", "--calibrated", DEVICE,
      "--evaluator", "simulate"],
     "--calibrated h100-sxm prices kernels one op at a time beside the bound, --evaluator "
     "simulate replaces the bound by simulated latencies: give one of them"),
])
def test_bad_calibrated_input_is_one_line(tmp_path, capsys, argv, needle):
    out = tmp_path / "x.csv"
    assert run_cli([*argv, "--out", str(out), "--report", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_help_says_what_calibrated_does(capsys, command):
    assert run_cli([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--calibrated DEVICE" in text and "An expectation, not a bound" in text
    assert "shipped: h100-sxm, cpu-amd-epyc-2c" in text


def _nm_rmspe() -> str:
    """The shipped 2:4 predictor's held-out RMSPE, as the commands print it."""
    return f"{load_predictors('h100-sxm').families['nm'].validated['rmspe']:.0%}"
