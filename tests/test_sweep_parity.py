"""``dse.sweep`` on a par with ``dse sweep --out`` (issue 25): the library returns the table
the command writes, the number-type columns (``dtype``, ``vector_dtype``, ``csr_dtype``,
``index_bytes``, ``weight_dtype`` and a language model's ``kv_dtype``) included, with the same
values; the command adds nothing to it."""

from __future__ import annotations

import pandas as pd

import dse
from dse.design_columns import DTYPE_COLUMNS
from dse.explore import parse_vary
from dse.roofline import Numerics
from tests.cli_run import run_cli
from workloads import load_model


def _cli(tmp_path, argv: list[str]) -> pd.DataFrame:
    out = tmp_path / "sweep.parquet"
    assert run_cli(["sweep", *argv, "--out", str(out)]) == 0
    return pd.read_parquet(out)


def _same(python: pd.DataFrame, cli: pd.DataFrame) -> None:
    """Same columns in the same order, same values (the file's round trip keeps dtypes)."""
    assert list(python.columns) == list(cli.columns)
    pd.testing.assert_frame_equal(python.reset_index(drop=True), cli, check_dtype=False,
                                  check_categorical=False, rtol=1e-12, atol=0.0)


def test_trace_sweep_equals_the_command_line(tmp_path, capsys):
    cli = _cli(tmp_path, ["--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                          "--format", "block8@75%", "--vary", "batch=1,8",
                          "--vary", "hw.dram_bandwidth_bytes_per_s=1e12,2e12"])
    capsys.readouterr()
    got = dse.sweep([load_model("toy_hybrid")], ["a100"], [], ["2:4", "block8@75%"],
                    [parse_vary("batch=1,8"),
                     parse_vary("hw.dram_bandwidth_bytes_per_s=1e12,2e12")])
    _same(got, cli)
    # 2 bandwidths x (dense, 2:4, block8@75%) x 2 batches; the number types last, by value:
    # the default fp16 compute and vectors, fp32 CSR values, 4-byte indices, fp16 weights;
    # no KV cache in a vision trace, so no kv_dtype column.
    assert len(got) == 12
    assert list(got.columns[-5:]) == list(DTYPE_COLUMNS[:5])
    assert "kv_dtype" not in got
    assert set(got["dtype"]) == set(got["vector_dtype"]) == set(got["weight_dtype"]) == {"fp16"}
    assert set(got["csr_dtype"]) == {"fp32"} and set(got["index_bytes"]) == {4}


def test_language_model_sweep_equals_the_command_line(tmp_path, capsys):
    """A quantised language-model step: int4 weights (group 128) and an fp8 KV cache, named
    in the kv_dtype column a trace's sweep does not have."""
    cli = _cli(tmp_path, ["--model", "llama-3-8b", "--phase", "decode", "--context", "2048",
                          "--hw", "h100-sxm", "--format", "2:4", "--weight-dtype", "int4",
                          "--kv-dtype", "fp8", "--vary", "batch=1,4"])
    capsys.readouterr()
    numerics = Numerics(weight_dtype="int4", kv_dtype="fp8")
    got = dse.sweep([load_model("llama-3-8b", "decode", 2048)], ["h100-sxm"], [], ["2:4"],
                    [parse_vary("batch=1,4")], scope="all", numerics=numerics)
    _same(got, cli)
    assert len(got) == 4  # (dense, 2:4) x 2 batches
    assert list(got.columns[-6:]) == list(DTYPE_COLUMNS)
    assert set(got["weight_dtype"]) == {"int4 (group 128)"}
    assert set(got["kv_dtype"]) == {"fp8"} and set(got["dtype"]) == {"fp16"}
    # The KV cache the column names is the one priced: (K, V) x 32 layers x 8 KV heads x 128
    # = 65,536 elements a token, one byte each in fp8.
    assert set(got["kv_bytes_per_token"]) == {65_536.0}
    # The library's rows, as the mixed case gives them (one flag per row): only a language
    # model's rows name a KV dtype.
    from dse.design_columns import with_dtype_columns

    mixed = with_dtype_columns(got.drop(columns=list(DTYPE_COLUMNS)), numerics,
                               [True, False, True, False])
    assert mixed["kv_dtype"].notna().tolist() == [True, False, True, False]
    assert set(mixed["kv_dtype"].dropna()) == {"fp8"}


def test_simulated_sweep_equals_the_command_line(tmp_path, capsys):
    """With the simulator the dtype columns come after the roofline's and before the
    simulator's own, in the library's table and the file alike."""
    from dse.explore import Simulator
    from dse.sim import SimConfig
    from dse.sim.fanout import SIMULATED_COLUMNS

    cli = _cli(tmp_path, ["--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                          "--vary", "batch=1,8", "--evaluator", "simulate", "--workers", "1"])
    capsys.readouterr()
    got = dse.sweep([load_model("toy_hybrid")], ["a100"], [], ["2:4"], [parse_vary("batch=1,8")],
                    evaluator=Simulator(SimConfig(), workers=1))
    _same(got, cli)
    columns = list(got.columns)
    simulated = [c for c in SIMULATED_COLUMNS if c in columns]
    assert simulated and columns[-len(simulated):] == simulated
    assert columns[-len(simulated) - 5:-len(simulated)] == list(DTYPE_COLUMNS[:5])


def test_the_command_adds_no_column_of_its_own():
    """The sweep command writes the library's table as it is: its module no longer imports the
    number-type helper it used to apply after the library's call."""
    import inspect

    from dse.cli import report

    source = inspect.getsource(report._cmd_sweep)
    assert "with_dtype_columns" not in source and "= sweep(" in source
