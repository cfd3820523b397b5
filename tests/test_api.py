"""The Python API on a par with the command line: ``dse.evaluate(..., calibrated=DEVICE)``
gives the bound and the expectation that ``dse evaluate --calibrated DEVICE`` writes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dse
from dse.calibrate.predictor import load_predictors
from tests.cli_run import run_cli

COLUMNS = ("latency_s", "speedup", "expected_latency_s", "expected_speedup", "fraction_of_sol",
           "validated_rmspe")


@pytest.mark.parametrize("device, hardware, numerics, flags", [
    ("h100-sxm", ["h100-sxm", "a100"], dse.Numerics(), []),
    ("cpu-amd-epyc-2c", ["epyc-zen5-2c"],
     dse.Numerics(dtype="tf32", vector_dtype="fp32", csr_dtype="fp32"),
     ["--dtype", "tf32", "--vector-dtype", "fp32", "--csr-dtype", "fp32"]),
])
def test_calibrated_evaluate_equals_the_command_line(tmp_path, capsys, device, hardware,
                                                     numerics, flags):
    out = tmp_path / "cli.parquet"
    assert run_cli(["evaluate", "--model", "convnext_tiny", "--hw", ",".join(hardware),
                    "--format", "2:4", "--format", "block16@87.5%", "--batch", "1",
                    "--batch", "8", *flags, "--calibrated", device, "--out", str(out)]) == 0
    capsys.readouterr()
    cli = pd.read_parquet(out)
    got = dse.evaluate("convnext_tiny", hardware, ["2:4", "block16@87.5%"], [1, 8],
                       numerics=numerics, calibrated=device)
    key = ["hardware", "format", "batch"]
    both = got.astype({"hardware": str, "format": str}).merge(
        cli.astype({"hardware": str, "format": str}), on=key, suffixes=("", "_cli"))
    assert len(both) == len(got) == len(cli) == len(hardware) * 3 * 2
    for column in COLUMNS:
        np.testing.assert_allclose(both[column], both[f"{column}_cli"], rtol=1e-12,
                                   equal_nan=True, err_msg=column)
    assert (both["predictor"] == both["predictor_cli"]).all()
    assert (got["expected_latency_s"] > got["latency_s"]).all()  # an expectation, not a bound
    # Loaded predictors give the same numbers as their name.
    again = dse.evaluate("convnext_tiny", hardware, ["2:4", "block16@87.5%"], [1, 8],
                         numerics=numerics, calibrated=load_predictors(device))
    pd.testing.assert_frame_equal(again, got)


def test_without_predictors_evaluate_is_the_bound_with_its_file_columns():
    """No expectation without predictors: the bound's columns as dse.roofline.evaluate gives
    them, then what dse evaluate --out adds (energy, memory, the number types)."""
    plain = dse.evaluate("toy_hybrid", "a100", ["2:4"], [1])
    bound = dse.roofline.evaluate("toy_hybrid", "a100", ["2:4"], [1])
    assert "expected_latency_s" not in plain
    assert list(plain.columns[:len(bound.columns)]) == list(bound.columns)
    pd.testing.assert_frame_equal(plain[list(bound.columns)], bound)
    assert {"energy_per_inference_j", "peak_memory_bytes", "dtype"} <= set(plain.columns)


def test_calibrated_evaluate_takes_one_scope():
    with pytest.raises(dse.EvaluationError, match="one scope"):
        dse.evaluate("toy_hybrid", "a100", ["2:4"], [1], scope=["gemm", "all"],
                     calibrated="h100-sxm")


# --- what a Python caller passes the way a Python caller would ------------------------------


def test_derive_takes_a_loaded_accelerator():
    import dataclasses

    import accelerator_models
    from accelerator_models.catalog import derive

    base = accelerator_models.load("h100-sxm")
    same = derive(base, name=base.name)
    assert all(getattr(same, f.name) == getattr(base, f.name)
               for f in dataclasses.fields(base) if f.compare)
    faster = derive(base, {"dram_bandwidth_bytes_per_s": 4e12})
    assert faster.dram_bandwidth_bytes_per_s == 4e12
    assert faster.tensor_flops_per_s == base.tensor_flops_per_s
    assert faster.name == "h100-sxm[dram_bandwidth_bytes_per_s=4000000000000.0]"


def test_the_shipped_accuracy_table_loads_without_a_path():
    from dse.accuracy import DEFAULT_TABLE, load_accuracy_table

    table = load_accuracy_table()
    assert table.where == str(DEFAULT_TABLE)
    assert len(table.frame) == len(load_accuracy_table(DEFAULT_TABLE).frame) > 0


def test_a_search_request_takes_paths_as_text(tmp_path):
    from search.study import SearchRequest

    request = SearchRequest(space=str(tmp_path / "space.toml"), out=str(tmp_path / "out"))
    assert request.space == tmp_path / "space.toml" and request.out == tmp_path / "out"


@pytest.mark.parametrize("grid", [
    dict(hardware="h100-sxm", formats=["2:4"], batches=1),
    dict(hardware=["h100-sxm", "a100"], formats=["2:4", "block4@75%", "unstructured@90%"],
         batches=[1, 8], fusion=["unfused", "fused", "fused_prefetched"], scope=["gemm", "all"]),
])
def test_the_fast_path_gives_evaluates_numbers_without_a_dataframe(grid):
    """dse.evaluate_designs: columns, no DataFrame; its frame() is the bound's table
    (dse.roofline.evaluate; dse.evaluate adds energy, memory and the number types to it)."""
    designs = dse.evaluate_designs("convnext_tiny", **grid)
    table = dse.roofline.evaluate("convnext_tiny", **grid)
    assert isinstance(designs["latency_s"], np.ndarray) and len(designs) == len(table)
    pd.testing.assert_frame_equal(designs.frame(), table, check_exact=True)
    last = designs.row()
    assert last == {k: (v.item() if hasattr(v, "item") else v)
                    for k, v in table.iloc[-1].to_dict().items()}


def test_import_dse_loads_neither_pandas_nor_numba():
    """``import dse`` is light (issue 27): the engines load when a name needs them."""
    import subprocess
    import sys

    code = ("import sys, dse; heavy = [m for m in ('pandas', 'numba') if m in sys.modules]; "
            "print(heavy); from dse import Numerics, evaluate; "
            "print(len(evaluate('toy_hybrid', 'a100', '2:4')), dse.roofline.SCOPES)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, check=True).stdout.splitlines()
    assert out[0] == "[]"
    assert out[1] == "2 ('gemm', 'all')"
