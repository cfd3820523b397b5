"""The Python API on a par with the command line (issue 25): ``dse.evaluate``,
``dse.evaluate_layers``, ``dse.simulate``, ``dse.compare``, ``reports.design_report`` and
``search.run_search`` give, for the same design, the numbers that ``dse evaluate``,
``dse simulate``, ``dse compare``, ``dse report`` and ``dse search`` print and write, to
1e-12 (``dse evaluate --out``: column for column, none missing on either side); and their
results are typed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import dse
from dse.design_columns import DTYPE_COLUMNS
from dse.output import format_seconds
from tests.cli_run import run_cli
from tests.search_spaces import space_text, write_space
from workloads import load_model

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


# --- evaluate: the --out file, column for column ---------------------------------------------


def _labels(series: pd.Series) -> list:
    return [None if pd.isna(v) else str(v) for v in series.astype(object)]


def _is_number(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _same_frame(python: pd.DataFrame, cli: pd.DataFrame) -> None:
    """The library's frame is the ``--out`` file: the same columns in the same order, numbers
    equal to 1e-12 relative (NaN where NaN), every other cell equal as text (None where
    missing)."""
    missing = sorted(set(cli.columns) - set(python.columns))
    extra = sorted(set(python.columns) - set(cli.columns))
    assert not missing and not extra, f"only in the file: {missing}; only in Python: {extra}"
    assert list(python.columns) == list(cli.columns)
    assert len(python) == len(cli) > 0
    for column in cli.columns:
        mine, theirs = python[column], cli[column]
        if _is_number(mine) or _is_number(theirs):
            np.testing.assert_allclose(mine.to_numpy(dtype=np.float64, na_value=np.nan),
                                       theirs.to_numpy(dtype=np.float64, na_value=np.nan),
                                       rtol=RTOL, atol=0.0, equal_nan=True, err_msg=column)
        else:
            assert _labels(mine) == _labels(theirs), column


def test_the_comparison_fails_on_any_difference():
    frame = pd.DataFrame({"format": ["dense", "2:4"], "latency_s": [2.0e-3, 1.25e-3],
                          "fits": pd.array([True, pd.NA], dtype="boolean")})
    _same_frame(frame, frame.copy())
    for changed in (frame.drop(columns="fits"),  # a column missing from Python
                    frame.assign(kv_dtype="fp16"),  # one missing from the file
                    frame[["latency_s", "format", "fits"]],  # in another order
                    frame.assign(latency_s=[2.0e-3, 1.25e-3 * (1 + 1e-9)]),
                    frame.assign(format=["dense", "1:4"]),
                    frame.assign(fits=pd.array([True, False], dtype="boolean"))):
        for python, cli in ((changed, frame), (frame, changed)):
            with pytest.raises(AssertionError):
                _same_frame(python, cli)


LLAMA_DECODE = ["--model", "llama-3-8b", "--phase", "decode", "--context", "2048"]
LLAMA = ("llama-3-8b", "decode", 2048)

#: (dse evaluate's options, dse.evaluate's arguments): the trace as a shipped name, or
#: (model, phase, context) for a language model; the command's scope for one is "all".
EVALUATE_CASES = [
    pytest.param(["--model", "resnet50", "--hw", "a100", "--format", "dense", "--batch", "1",
                  "--batch", "8"],
                 {"trace": "resnet50", "hardware": "a100", "formats": ["dense"],
                  "batches": [1, 8]}, id="timm-dense"),
    pytest.param(["--model", "resnet50", "--hw", "a100,h100-sxm", "--format", "2:4",
                  "--batch", "1", "--batch", "8", "--fusion", "unfused", "--fusion", "fused"],
                 {"trace": "resnet50", "hardware": ["a100", "h100-sxm"], "formats": ["2:4"],
                  "batches": [1, 8], "fusion": ["unfused", "fused"]}, id="timm-2:4"),
    pytest.param(["--model", "deit_small_patch16_224", "--hw", "a100", "--format", "2:4",
                  "--format", "block4@75%", "--batch", "1", "--batch", "32", "--calibrated",
                  "h100-sxm"],
                 {"trace": "deit_small_patch16_224", "hardware": "a100",
                  "formats": ["2:4", "block4@75%"], "batches": [1, 32],
                  "calibrated": "h100-sxm"}, id="timm-calibrated"),
    pytest.param([*LLAMA_DECODE, "--hw", "h100-sxm", "--format", "2:4", "--batch", "1",
                  "--batch", "16", "--weight-dtype", "int4"],
                 {"trace": LLAMA, "hardware": "h100-sxm", "formats": ["2:4"],
                  "batches": [1, 16], "scope": "all", "numerics": dse.Numerics(
                      weight_dtype="int4")}, id="llm-decode-int4"),
    pytest.param([*LLAMA_DECODE, "--hw", "h100-sxm", "--format", "2:4", "--batch", "1",
                  "--batch", "8", "--calibrated", "h100-sxm"],
                 {"trace": LLAMA, "hardware": "h100-sxm", "formats": ["2:4"], "batches": [1, 8],
                  "scope": "all", "calibrated": "h100-sxm"}, id="llm-decode-calibrated"),
    # Quantised weights priced by predictors timed in fp16: said to be extrapolated.
    pytest.param([*LLAMA_DECODE, "--hw", "h100-sxm", "--format", "2:4", "--batch", "4",
                  "--weight-dtype", "int4", "--calibrated", "h100-sxm"],
                 {"trace": LLAMA, "hardware": "h100-sxm", "formats": ["2:4"], "batches": 4,
                  "scope": "all", "numerics": dse.Numerics(weight_dtype="int4"),
                  "calibrated": "h100-sxm"}, id="llm-decode-int4-calibrated"),
    pytest.param(["--model", "llama-3-8b", "--phase", "prefill", "--context", "512", "--hw",
                  "a100", "--format", "2:4", "--kv-dtype", "fp8"],
                 {"trace": ("llama-3-8b", "prefill", 512), "hardware": "a100",
                  "formats": ["2:4"], "scope": "all", "numerics": dse.Numerics(kv_dtype="fp8")},
                 id="llm-prefill-kv-fp8"),
]


def _library(call, kwargs: dict) -> pd.DataFrame:
    kwargs = dict(kwargs)
    trace = kwargs.pop("trace")
    return call(load_model(*trace) if isinstance(trace, tuple) else trace, **kwargs)


def _command(tmp_path, capsys, options: list[str]) -> pd.DataFrame:
    out = tmp_path / "evaluate.parquet"
    assert run_cli(["evaluate", *options, "--out", str(out)]) == 0
    capsys.readouterr()
    return pd.read_parquet(out)


@pytest.mark.parametrize(("options", "kwargs"), EVALUATE_CASES)
def test_evaluate_equals_the_out_file(tmp_path, capsys, options, kwargs):
    cli = _command(tmp_path, capsys, options)
    got = _library(dse.evaluate, kwargs)
    _same_frame(got, cli)
    # What the file holds beyond the bound is there, by name, before the number types.
    assert {"energy_per_inference_j", "avg_power_w", "peak_memory_bytes", "fits",
            "largest_batch_that_fits"} <= set(got.columns)
    language = isinstance(kwargs["trace"], tuple)
    dtypes = [c for c in DTYPE_COLUMNS if language or c != "kv_dtype"]
    assert list(got.columns[-len(dtypes):]) == dtypes
    if kwargs.get("calibrated"):
        assert {"expected_latency_s", "expected_speedup", "fraction_of_sol",
                "validated_rmspe"} <= set(got.columns)
    if language:
        assert {"tokens_per_s", "ttft_s", "kv_bytes_per_token", "kv_cache_bytes", "params",
                "weight_bytes", "max_batch"} <= set(got.columns)
        assert ("expected_extrapolated_share" in got) == bool(kwargs.get("calibrated"))


LAYER_CASES = [
    pytest.param(["--model", "toy_hybrid", "--hw", "a100", "--format", "2:4", "--batch", "8",
                  "--fusion", "unfused", "--fusion", "fused", "--calibrated", "h100-sxm"],
                 {"trace": "toy_hybrid", "hardware": "a100", "formats": "2:4", "batches": 8,
                  "fusion": ["unfused", "fused"], "calibrated": "h100-sxm"},
                 id="toy-calibrated"),
    pytest.param([*LLAMA_DECODE, "--hw", "h100-sxm", "--format", "2:4", "--weight-dtype",
                  "int4"],
                 {"trace": LLAMA, "hardware": "h100-sxm", "formats": ["2:4"], "scope": "all",
                  "numerics": dse.Numerics(weight_dtype="int4")}, id="llm-decode-int4"),
]


@pytest.mark.parametrize(("options", "kwargs"), LAYER_CASES)
def test_evaluate_layers_equals_the_out_file(tmp_path, capsys, options, kwargs):
    cli = _command(tmp_path, capsys, [*options, "--per-layer"])
    got = _library(dse.evaluate_layers, kwargs)
    _same_frame(got, cli)
    language = isinstance(kwargs["trace"], tuple)
    assert got["weight_dtype"].unique().tolist() == (["int4 (group 128)"] if language
                                                     else ["fp16"])
    assert ("kv_dtype" in got) == language
    # The bound's columns are dse.roofline.evaluate_layers' own; the rest follow them.
    plain = {k: v for k, v in kwargs.items() if k not in ("calibrated", "fusion")}
    bound = pd.concat([_library(dse.roofline.evaluate_layers, {**plain, "fusion": fusion})
                       for fusion in kwargs.get("fusion", ["unfused"])], ignore_index=True)
    pd.testing.assert_frame_equal(got[list(bound.columns)], bound)
    if kwargs.get("calibrated"):
        # Each fusion model's row of an op carries the op's one (unfused) expectation.
        per_op = got.groupby(["format", "op"])["expected_s"].nunique()
        assert (per_op == 1).all()
        np.testing.assert_allclose(got["fraction_of_sol"], got["time_s"] / got["expected_s"],
                                   rtol=RTOL)


# --- evaluate: the new columns by value -------------------------------------------------------

#: llama-3-8b: 32 layers x (K and V) x 8 KV heads x head_dim 128 elements per token.
LLAMA_KV_ELEMS_PER_TOKEN = 32 * 2 * 8 * 128
LLAMA_PARAMS = 8_030_261_248  # Meta's model card: 8.03 B


def test_a_language_model_step_has_its_figures_by_value():
    table = dse.evaluate(load_model(*LLAMA), "h100-sxm", ["2:4"], [1, 16], scope="all",
                         numerics=dse.Numerics(weight_dtype="int4")).set_index(["format",
                                                                                "batch"])
    assert sorted(table.index) == [("2:4", 1), ("2:4", 16), ("dense", 1), ("dense", 16)]
    batch = table.index.get_level_values("batch").to_numpy(dtype=np.float64)
    assert (table["kv_bytes_per_token"] == LLAMA_KV_ELEMS_PER_TOKEN * 2).all()  # fp16 cache
    np.testing.assert_array_equal(table["kv_cache_bytes"],
                                  batch * 2048 * LLAMA_KV_ELEMS_PER_TOKEN * 2)
    assert (table["params"] == LLAMA_PARAMS).all()
    np.testing.assert_allclose(table["tokens_per_s"], batch / table["latency_s"], rtol=RTOL)
    np.testing.assert_allclose(table["time_per_token_s"], table["latency_s"], rtol=RTOL)
    assert table["ttft_s"].isna().all() and (table["phase"] == "decode").all()
    assert (table["max_batch"] == table["largest_batch_that_fits"]).all()
    np.testing.assert_allclose(table["energy_per_inference_j"], table["energy_j"] / batch,
                               rtol=RTOL)
    assert table[list(DTYPE_COLUMNS)].drop_duplicates().values.tolist() == [
        ["fp16", "fp16", "fp32", 4, "int4 (group 128)", "fp16"]]
    # Prefill with an fp8 cache: one byte an element, and the time to the first token.
    prefill = dse.evaluate(load_model("llama-3-8b", "prefill", 512), "a100", ["2:4"],
                           scope="all", numerics=dse.Numerics(kv_dtype="fp8"))
    assert (prefill["kv_bytes_per_token"] == LLAMA_KV_ELEMS_PER_TOKEN).all()
    np.testing.assert_allclose(prefill["ttft_s"], prefill["latency_s"], rtol=RTOL)
    assert prefill["tokens_per_s"].isna().all() and (prefill["kv_dtype"] == "fp8").all()


def test_a_timm_model_has_no_kv_dtype_and_prices_in_the_default_dtypes():
    table = dse.evaluate("resnet50", "a100", ["2:4"], [1, 8])
    assert "kv_dtype" not in table and "tokens_per_s" not in table
    assert table[list(DTYPE_COLUMNS[:-1])].drop_duplicates().values.tolist() == [
        ["fp16", "fp16", "fp32", 4, "fp16"]]
    np.testing.assert_allclose(table["energy_per_inference_j"],
                               table["energy_j"] / table["batch"], rtol=RTOL)
    # The bound is dse.roofline.evaluate's, unchanged.
    bound = dse.roofline.evaluate("resnet50", "a100", ["2:4"], [1, 8])
    pd.testing.assert_frame_equal(table[list(bound.columns)], bound)


def test_evaluation_gives_what_the_command_prints_beside_the_table():
    from dse.api import Evaluation, evaluation

    result = evaluation(load_model(*LLAMA), "h100-sxm", ["2:4"], [1, 8], scope="all",
                        calibrated="h100-sxm")
    assert isinstance(result, Evaluation) and result.predictors.name == "h100-sxm"
    table = result.table
    sums = result.expected.groupby(["format", "batch"])["expected_s"].sum()
    for row in table.itertuples():
        assert row.expected_latency_s == pytest.approx(sums[(row.format, row.batch)], rel=RTOL)
    designs = result.coverage.designs
    share = dict(zip(zip(designs["format"], designs["batch"], strict=True),
                     result.coverage.share, strict=True))
    for row in table.itertuples():
        assert row.expected_extrapolated_share == pytest.approx(share[(row.format, row.batch)],
                                                                rel=RTOL)
        assert 0 < row.expected_extrapolated_share < 1
    timm = evaluation("toy_hybrid", "a100", ["2:4"])
    assert timm.expected is None and timm.coverage is None and timm.predictors is None


def test_evaluate_refuses_what_it_cannot_price():
    from dse.api import evaluation

    with pytest.raises(dse.EvaluationError, match="one scope"):
        dse.evaluate("toy_hybrid", "a100", ["2:4"], scope=["gemm", "all"],
                     calibrated="h100-sxm")
    with pytest.raises(dse.EvaluationError, match="one scope"):
        evaluation("toy_hybrid", "a100", ["2:4"], scope=["gemm", "all"], per_layer=True)
    with pytest.raises(dse.EvaluationError, match="backend torch per layer"):
        evaluation("toy_hybrid", "a100", ["2:4"], calibrated="h100-sxm", backend="torch",
                   per_layer=True)


# --- search: results.parquet names its number types --------------------------------------------


def test_search_results_carry_the_dtype_columns(tmp_path, capsys):
    import json

    options = [*LLAMA_DECODE, "--hw", "h100-sxm", "--batch", "1", "--weight-dtype", "int4",
               "--kv-dtype", "fp8"]
    assert run_cli(["search", *options, "--out", str(tmp_path / "llm")]) == 0
    assert run_cli(["sweep", *options, "--format", "2:4", "--vary", "batch=1", "--out",
                    str(tmp_path / "sweep.parquet")]) == 0
    space = write_space(tmp_path, space_text())
    assert run_cli(["search", "--space", str(space), "--out", str(tmp_path / "timm")]) == 0
    capsys.readouterr()
    want = {"dtype": "fp16", "vector_dtype": "fp16", "csr_dtype": "fp32", "index_bytes": 4,
            "weight_dtype": "int4 (group 128)", "kv_dtype": "fp8"}
    swept = pd.read_parquet(tmp_path / "sweep.parquet")
    for name in ("results.parquet", "ranked.parquet"):
        results = pd.read_parquet(tmp_path / "llm" / name)
        assert list(results.columns[-len(DTYPE_COLUMNS):]) == list(DTYPE_COLUMNS)
        assert len(results) > 0
        for column, value in want.items():
            assert results[column].tolist() == [value] * len(results), column
            assert swept[column].unique().tolist() == [value], column  # the sweep's names
    summary = json.loads((tmp_path / "llm" / "summary.json").read_text())
    assert {c: summary[c] for c in DTYPE_COLUMNS} == want
    timm = pd.read_parquet(tmp_path / "timm" / "results.parquet")
    assert "kv_dtype" not in timm
    assert timm[list(DTYPE_COLUMNS[:-1])].drop_duplicates().values.tolist() == [
        ["fp16", "fp16", "fp32", 4, "fp16"]]
