"""The Python API on a par with the command line (issue 25): ``dse.simulate``, ``dse.compare``,
``reports.design_report`` and ``search.run_search`` give, for the same design, the numbers
that ``dse simulate``, ``dse compare``, ``dse report`` and ``dse search`` print and write, to
1e-12; and their results are typed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import dse
from dse.design_columns import with_dtype_columns
from dse.output import format_seconds
from tests.cli_run import run_cli
from tests.search_spaces import space_text, write_space

RTOL = 1e-12


def _same_numbers(python: pd.DataFrame, cli: pd.DataFrame, columns) -> None:
    assert len(python) == len(cli) > 0
    for column in columns:
        np.testing.assert_allclose(python[column].to_numpy(dtype=np.float64),
                                   cli[column].to_numpy(dtype=np.float64), rtol=RTOL,
                                   atol=0.0, equal_nan=True, err_msg=column)


# --- simulate ---------------------------------------------------------------------------------


@pytest.mark.parametrize("calibrated", [None, "h100-sxm"])
def test_simulate_equals_the_command_line(tmp_path, capsys, calibrated):
    out = tmp_path / "ops.parquet"
    flags = ["--calibrated", calibrated] if calibrated else []
    assert run_cli(["simulate", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                    "--batch", "8", *flags, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    cli = pd.read_parquet(out)
    got = dse.simulate("toy_hybrid", "a100", "2:4", batch=8, calibrated=calibrated)
    assert isinstance(got, dse.Simulation)
    assert list(got.ops["op"]) == list(cli["op"])
    columns = ["start_s", "end_s", "latency_s", "roofline_s", "gap_s", "launch_s",
               "buffer_s", "fill_drain_s"]
    _same_numbers(got.ops, cli, columns + (["kernel_time_s", "kernel_s"] if calibrated else []))
    assert f"latency {format_seconds(got.latency_s)}, roofline " \
           f"{format_seconds(got.roofline_latency_s)}" in printed
    if calibrated is None:
        assert not isinstance(got, dse.CalibratedSimulation) and not got.kernel_times
        return
    assert isinstance(got, dse.CalibratedSimulation) and got.kernel_times
    assert got.predictors.name == "h100-sxm"
    # The ops ran at the predicted kernel times, and their sum is dse.evaluate's expectation.
    priced = dict(zip(got.expected["op"], got.expected["expected_s"], strict=True))
    np.testing.assert_allclose(got.ops["kernel_time_s"], got.ops["op"].map(priced), rtol=RTOL)
    bound = dse.evaluate("toy_hybrid", "a100", "2:4", 8, calibrated="h100-sxm")
    row = bound[bound["format"] == "2:4"].iloc[0]
    assert got.expected_kernel_s == pytest.approx(row["expected_latency_s"], rel=RTOL)
    assert f"Sum of the predicted kernel times: {format_seconds(got.expected_kernel_s)}" \
        in printed
    assert got.latency_s >= got.expected_kernel_s  # overlap never beats the kernels alone


def test_calibrated_simulate_refuses_what_it_cannot_price():
    with pytest.raises(dse.SimulationError, match="fusion fused"):
        dse.simulate("toy_hybrid", "a100", "2:4", fusion="fused", calibrated="h100-sxm")
    with pytest.raises(dse.SimulationError, match="give one"):
        dse.simulate("toy_hybrid", "a100", "2:4", op_time_s={}, calibrated="h100-sxm")


# --- compare ----------------------------------------------------------------------------------


@pytest.mark.parametrize("calibrated", [None, "h100-sxm"])
def test_compare_equals_the_command_line(tmp_path, capsys, calibrated):
    out = tmp_path / "compare.parquet"
    fusions = ["unfused", "fused"]
    flags = ["--calibrated", calibrated, "--report", str(tmp_path / "page")] if calibrated \
        else []
    assert run_cli(["compare", "--model", "toy_hybrid", "--hw", "a100,h100-sxm", "--format",
                    "2:4", "--format", "block4@75%", "--batch", "1", "--batch", "8",
                    *[f for fusion in fusions for f in ("--fusion", fusion)], *flags,
                    "--out", str(out)]) == 0
    capsys.readouterr()
    cli = pd.read_parquet(out)
    got = dse.compare("toy_hybrid", ["a100", "h100-sxm"], ["2:4", "block4@75%"], [1, 8],
                      fusion=fusions, calibrated=calibrated)
    frame = got.frame()
    assert list(frame.columns) == list(cli.columns)
    for key in ("model", "hardware", "format", "fusion", "batch"):
        assert frame[key].astype(str).tolist() == cli[key].astype(str).tolist()
    numeric = [c for c in cli.columns if pd.api.types.is_numeric_dtype(cli[c])
               and not pd.api.types.is_bool_dtype(cli[c])]
    assert {"latency_s", "speedup", "energy_per_inference_j", "peak_memory_bytes"} <= \
        set(numeric)
    _same_numbers(frame, cli, numeric)
    # Typed: a frozen result; the design rows are dse.evaluate's, energy and memory beside.
    assert isinstance(got, dse.Comparison) and len(got.hardware) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.designs = frame
    # accelerators x (dense + 2 formats) x batches x fusion models
    assert len(frame) == 2 * 3 * 2 * len(fusions)
    bound = dse.evaluate("toy_hybrid", ["a100", "h100-sxm"], ["2:4", "block4@75%"], [1, 8],
                         fusion=fusions, calibrated=calibrated)
    key = ["hardware", "format", "batch", "fusion"]
    both = frame.merge(bound, on=key, suffixes=("", "_evaluate"))
    np.testing.assert_allclose(both["latency_s"], both["latency_s_evaluate"], rtol=RTOL)
    if calibrated is None:
        assert got.expected is None and "expected_latency_s" not in frame
    else:
        assert got.predictors.name == calibrated and len(got.expected) > 0
        np.testing.assert_allclose(both["expected_latency_s"],
                                   both["expected_latency_s_evaluate"], rtol=RTOL)
    assert "static_power_w" in got.unpriced_energy  # the a100 spec gives no static power
    if calibrated is not None:  # the report `dse compare --report` writes, from Python
        from reports.design_report import comparison_report

        page = comparison_report(got)
        # One accelerator chart per fusion model (a chart compares under one; the command
        # failed with a traceback on two before the report moved into the library).
        assert [s.name for s in page.sections] == [
            "hardware-comparison-unfused", "hardware-comparison-fused",
            "energy-toy_hybrid-unfused", "energy-toy_hybrid-fused"]
        assert page.predictors.name == calibrated and page.intro
        for section in page.sections:
            drawn = pd.read_csv(tmp_path / "page" / f"{section.name}.csv")
            numeric = [c for c in drawn.columns if c in section.data
                       and pd.api.types.is_float_dtype(drawn[c])
                       and pd.api.types.is_float_dtype(section.data[c])]
            assert numeric, section.name
            _same_numbers(section.data.reset_index(drop=True), drawn, numeric)


# --- report -----------------------------------------------------------------------------------


def test_report_equals_the_command_line(tmp_path, capsys):
    from reports.design_report import DesignReport, design_report

    folder = tmp_path / "cli-report"
    assert run_cli(["report", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                    "--format", "block4@75%", "--batch", "1", "--batch", "8", "--calibrated",
                    "h100-sxm", "--out", str(folder)]) == 0
    printed = capsys.readouterr().out
    got = design_report("toy_hybrid", "a100", ["2:4", "block4@75%"], [1, 8],
                        calibrated="h100-sxm")
    assert isinstance(got, DesignReport)
    assert f"({len(got.sections)} charts)" in printed
    assert [s.name for s in got.sections] == ["sparsity-roofline", "roofline", "bound-mix",
                                              "feature-share"]
    cli = pd.read_csv(folder / "table-designs.csv")
    _same_numbers(got.frame(), cli, ["latency_s", "dense_latency_s", "speedup",
                                     "expected_latency_s", "expected_speedup",
                                     "fraction_of_sol"])
    for section in got.sections:  # every chart's data, value by value
        drawn = pd.read_csv(folder / f"{section.name}.csv")
        numeric = [c for c in drawn.columns if c in section.data
                   and pd.api.types.is_float_dtype(drawn[c])
                   and pd.api.types.is_float_dtype(section.data[c])]
        assert len(drawn) == len(section.data), section.name
        if len(drawn):
            assert numeric, section.name
            _same_numbers(section.data.reset_index(drop=True), drawn, numeric)
    # The written page is the command's page.
    index = got.write(tmp_path / "py-report")
    assert index.name == "index.html" and (index.parent / "table-designs.csv").exists()


# --- search -----------------------------------------------------------------------------------


def test_search_from_python_equals_the_command_line(tmp_path, capsys):
    from search import SearchRequest, run_search

    space = write_space(tmp_path, space_text(formats='list = ["2:4", "1:8", "block4@75%"]'))
    assert run_cli(["search", "--space", str(space), "--target", "1.3x_over_2:4",
                    "--out", str(tmp_path / "cli"), "--report", str(tmp_path / "page")]) == 0
    capsys.readouterr()
    cli = pd.read_parquet(tmp_path / "cli" / "results.parquet")
    outcome = run_search(SearchRequest(space=space, target="1.3x_over_2:4",
                                       out=tmp_path / "py"))
    got = outcome.results
    key = ["model", "hardware", "format", "batch"]
    both = got.astype({k: str for k in key}).merge(cli.astype({k: str for k in key}), on=key,
                                                   suffixes=("", "_cli"))
    assert len(both) == len(got) == len(cli) > 0
    for column in ("latency_s", "speedup", "speedup_over_baseline", "accuracy"):
        np.testing.assert_allclose(both[column], both[f"{column}_cli"], rtol=RTOL,
                                   equal_nan=True, err_msg=column)
    assert (both["meets_target"] == both["meets_target_cli"]).all()
    assert outcome.engine == "exhaustive" and outcome.problem.target.text == "1.3x_over_2:4"
    # Its report: the sections `dse search --report` draws, with the same numbers.
    from reports.design_report import search_report

    page = search_report(outcome.results, target=outcome.problem.target)
    assert [s.name for s in page.sections] == ["pareto", "target"]
    for section in page.sections:
        drawn = pd.read_csv(tmp_path / "page" / f"{section.name}.csv")
        numeric = [c for c in drawn.columns if c in section.data
                   and pd.api.types.is_float_dtype(drawn[c])
                   and pd.api.types.is_float_dtype(section.data[c])]
        assert numeric, section.name
        mine = section.data.sort_values(["format", *numeric]).reset_index(drop=True)
        theirs = drawn.sort_values(["format", *numeric]).reset_index(drop=True)
        _same_numbers(mine, theirs, numeric)


# --- the names ``import dse`` gives -----------------------------------------------------------


def test_every_public_name_resolves_to_the_library_call():
    from dse import api, comparison

    assert set(dse.__all__) >= {"compare", "Comparison", "CalibratedSimulation", "expected_ops"}
    assert all(getattr(dse, name) is not None for name in dse.__all__)
    assert dse.simulate is api.simulate and dse.compare is comparison.compare
    assert issubclass(dse.CalibratedSimulation, dse.Simulation)


def test_expected_ops_are_what_the_expectation_sums():
    ops = dse.expected_ops("toy_hybrid", "a100", ["2:4"], [1, 8], "h100-sxm")
    table = dse.evaluate("toy_hybrid", "a100", ["2:4"], [1, 8], calibrated="h100-sxm")
    sums = ops.groupby(["format", "batch"])["expected_s"].sum()
    for row in table.itertuples():
        assert row.expected_latency_s == pytest.approx(sums[(row.format, row.batch)],
                                                       rel=RTOL)


# --- evaluate, per op -------------------------------------------------------------------------


def test_calibrated_layers_equal_the_command_line(tmp_path, capsys):
    out = tmp_path / "layers.parquet"
    assert run_cli(["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                    "--batch", "8", "--fusion", "unfused", "--fusion", "fused", "--per-layer",
                    "--calibrated", "h100-sxm", "--out", str(out)]) == 0
    capsys.readouterr()
    cli = pd.read_parquet(out)
    got = dse.evaluate_layers("toy_hybrid", "a100", "2:4", 8, fusion=["unfused", "fused"],
                              calibrated="h100-sxm")
    # The file also names the number types it priced (dse.design_columns.with_dtype_columns).
    assert list(with_dtype_columns(got).columns) == list(cli.columns)
    assert got["op"].tolist() == cli["op"].tolist()
    _same_numbers(got, cli, ["time_s", "expected_s", "fraction_of_sol", "validated_rmspe"])
    # Each fusion model's row of an op carries the op's one (unfused) expectation.
    per_op = got.groupby(["format", "op"])["expected_s"].nunique()
    assert (per_op == 1).all()
    plain = dse.evaluate_layers("toy_hybrid", "a100", "2:4", 8)
    assert "expected_s" not in plain
    pd.testing.assert_frame_equal(plain, dse.roofline.evaluate_layers("toy_hybrid", "a100",
                                                                      "2:4", 8))
