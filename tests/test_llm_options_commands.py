"""The language-model options (``--phase``, ``--context``, ``--dtype``, ``--weight-dtype``,
``--kv-dtype``) in every command that prices designs (issue 24), and the number types a run
priced written in its ``--out`` file (issue 25), by value on the tiny GQA configuration of
tests/test_llm_dtypes.py.

The tiny model, decode at context 64, batch 1 (figures derived there by hand):
- weights a step reads: 2:4 with int4 weights in groups of 128, 595,360 bytes (589,824 kept
  values at half a byte, 147,456 bytes of 2-bit metadata, one fp16 scale per 128 weights of the
  dense K, the LM head dense int4 with its scales, 2,560 bytes of fp16 norms);
- features at fp16: 116,178 bytes, of which the KV cache read is 32,768 elements (2 layers x
  scores and context x 64 tokens x 128), one byte fewer each in fp8;
- the KV cache: 2 layers x 2 KV heads x 64 x (key, value) = 512 elements a token;
- resident beside them: the untied 1000 x 256 embedding table in fp16, 512,000 bytes.
At batch 1 every op of the step is memory-bound on an H100, so its latency is its bytes over the
DRAM bandwidth.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

import accelerator_models
from tests.cli_run import run_cli
from tests.test_llm_dtypes import CONTEXT, FEATURE_BYTES, KV_READ_ELEMS, TINY, WEIGHT_BYTES

INT4_24 = WEIGHT_BYTES[("2:4", "int4", None)]  # 595,360
#: 2:4, int4 weights, fp8 KV cache: the bytes a decode step moves at batch 1.
STEP_BYTES = INT4_24 + FEATURE_BYTES - KV_READ_ELEMS  # 678,770
EMBEDDING = 1000 * 256 * 2
KV_ELEMS_PER_TOKEN = 512
#: What the --out files name for 2:4 with int4 weights and an fp8 KV cache at the default
#: compute dtypes.
PRICED = {"dtype": "fp16", "vector_dtype": "fp16", "csr_dtype": "fp32", "index_bytes": 4,
          "weight_dtype": "int4 (group 128)", "kv_dtype": "fp8"}
QUANTISED = ["--weight-dtype", "int4", "--kv-dtype", "fp8"]


def test_hand_figures():
    assert STEP_BYTES == 678_770
    assert INT4_24 == 589_824 // 2 + 147_456 + 2 * 1_179_648 // 128 + 256_000 // 2 \
        + 2 * 256_000 // 128 + 2 * 1_280


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


@pytest.fixture(scope="module")
def bandwidth():
    return accelerator_models.load("h100-sxm").dram_bandwidth_bytes_per_s


def design(config, *batches: int) -> list[str]:
    """The tiny model's decode step on an H100 under 2:4, at ``batches``."""
    out = ["--model", config, "--phase", "decode", "--context", str(CONTEXT), "--hw",
           "h100-sxm", "--format", "2:4"]
    for b in batches:
        out += ["--batch", str(b)]
    return out


def priced(frame: pd.DataFrame, **changes) -> None:
    """Every row of ``frame`` names the dtypes of :data:`PRICED` (with ``changes``)."""
    want = {**PRICED, **changes}
    for column, value in want.items():
        assert column in frame, column
        assert set(frame[column]) == {value}, (column, set(frame[column]))


# --- dse simulate takes the dtype options ------------------------------------------------------


def test_simulate_prices_int4_weights_and_an_fp8_kv_cache(config, bandwidth, tmp_path, capsys):
    """With the roofline's assumptions (unlimited buffer, no launch cost, full overlap) the
    simulator moves the hand-computed bytes and takes their time at the DRAM bandwidth, and
    --out names the dtypes it priced."""
    out = tmp_path / "ops.csv"
    assert run_cli(["simulate", *design(config, 1), *QUANTISED, "--buffer-bytes", "inf",
                    "--launch-overhead-s", "0", "--overlap", "full", "--out", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("fp16 (vector ops fp16, weights int4, KV cache fp8)")
    ops = pd.read_csv(out)
    assert ops["dram_bytes"].sum() == STEP_BYTES
    assert ops["latency_s"].sum() == pytest.approx(STEP_BYTES / bandwidth, rel=1e-9)
    priced(ops)
    # Without the options: fp16 weights and KV cache, 2:4's 1,841,664 weight bytes.
    assert run_cli(["simulate", *design(config, 1), "--buffer-bytes", "inf",
                    "--launch-overhead-s", "0", "--overlap", "full", "--out", str(out)]) == 0
    ops = pd.read_csv(out)
    assert ops["dram_bytes"].sum() == WEIGHT_BYTES[("2:4", None, None)] + FEATURE_BYTES
    priced(ops, weight_dtype="fp16", kv_dtype="fp16")


def test_simulate_and_evaluate_agree(config, tmp_path):
    """The same design, bf16 compute with int4 weights in groups of 64 and an fp8 KV cache:
    the simulator at the roofline's assumptions gives evaluate's latency."""
    options = [*design(config, 4), "--dtype", "bf16", "--weight-dtype", "int4",
               "--weight-group-size", "64", "--kv-dtype", "fp8"]
    assert run_cli(["evaluate", *options, "--out", str(tmp_path / "e.json")]) == 0
    assert run_cli(["simulate", *options, "--buffer-bytes", "inf", "--launch-overhead-s", "0",
                    "--overlap", "full", "--out", str(tmp_path / "s.json")]) == 0
    evaluated = pd.read_json(tmp_path / "e.json").set_index("format").loc["2:4"]
    ops = pd.read_json(tmp_path / "s.json")
    assert ops["latency_s"].sum() == pytest.approx(evaluated["latency_s"], rel=1e-9)
    assert ops["dram_bytes"].sum() == pytest.approx(evaluated["dram_bytes"], rel=1e-12)
    # int4 in groups of 64: 2:4's kept values and metadata, one bf16 scale per 64 weights.
    assert evaluated["weight_bytes"] == 589_824 // 2 + 147_456 + 2 * 1_179_648 // 64 \
        + 256_000 // 2 + 2 * 256_000 // 64 + 2 * 1_280
    priced(ops, dtype="bf16", weight_dtype="int4 (group 64)")
    assert evaluated["dtype"] == "bf16" and evaluated["weight_dtype"] == "int4 (group 64)"


@pytest.mark.parametrize("args, message", [
    (["--weight-group-size", "64"], "--weight-group-size 64: a group size is for quantised"),
    (["--kv-dtype", "fp4"], "argument --kv-dtype: invalid choice: 'fp4'"),
    (["--dtype", "int8", "--weight-dtype", "fp8"], "no narrower than the compute dtype int8"),
])
def test_simulate_refuses_in_one_line(config, args, message, tmp_path, capsys):
    out = tmp_path / "ops.csv"
    assert run_cli(["simulate", *design(config, 1), *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("command", ["evaluate", "simulate", "compare", "sweep", "report"])
def test_kv_dtype_of_a_trace_is_refused_everywhere(command, tmp_path, capsys):
    out = tmp_path / ("r" if command == "report" else "r.csv")
    extra = ["--vary", "batch=1,2"] if command == "sweep" else []
    assert run_cli([command, "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                    "--kv-dtype", "fp8", *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--kv-dtype fp8: toy_hybrid has no KV cache" in err and err.count("\n") == 1
    assert not out.exists()


# --- the --out files name the dtypes ------------------------------------------------------------


def test_evaluate_out_names_the_dtypes(config, tmp_path):
    out = tmp_path / "r.parquet"
    assert run_cli(["evaluate", *design(config, 1), *QUANTISED, "--out", str(out)]) == 0
    table = pd.read_parquet(out)
    priced(table)
    assert (table.set_index("format").loc["2:4", "weight_bytes"]) == INT4_24
    # Per layer too; a trace without a KV cache has no kv_dtype column.
    assert run_cli(["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--dtype", "bf16",
                    "--vector-dtype", "fp32", "--format", "block4@0.875", "--index-bytes", "2",
                    "--per-layer", "--out", str(out)]) == 0
    table = pd.read_parquet(out)
    assert "kv_dtype" not in table
    priced(table.assign(kv_dtype="-"), dtype="bf16", vector_dtype="fp32", index_bytes=2,
           weight_dtype="bf16", kv_dtype="-")


def test_compare_prices_the_kv_cache_in_the_memory_fit(config, bandwidth, tmp_path):
    """compare's --out carries the language-model columns, its memory fit holds the KV cache
    at --kv-dtype beside the weights (as evaluate's), and it names its dtypes."""
    out = tmp_path / "c.csv"
    assert run_cli(["compare", *design(config, 1, 8), *QUANTISED, "--out", str(out)]) == 0
    table = pd.read_csv(out)
    priced(table)
    rows = table[table["format"] == "2:4"].set_index("batch")
    assert rows.loc[1, "time_per_token_s"] == pytest.approx(STEP_BYTES / bandwidth, rel=1e-12)
    assert rows.loc[1, "tokens_per_s"] == pytest.approx(bandwidth / STEP_BYTES, rel=1e-12)
    assert (rows["kv_bytes_per_token"] == KV_ELEMS_PER_TOKEN).all()
    assert rows.loc[8, "kv_cache_bytes"] == 8 * CONTEXT * KV_ELEMS_PER_TOKEN
    assert (rows["weight_storage_bytes"] == INT4_24 + EMBEDDING).all()
    # The same memory fit as dse evaluate's.
    assert run_cli(["evaluate", *design(config, 1, 8), *QUANTISED,
                    "--out", str(tmp_path / "e.csv")]) == 0
    evaluated = pd.read_csv(tmp_path / "e.csv").set_index(["format", "batch"]).sort_index()
    compared = table.set_index(["format", "batch"]).sort_index()
    for column in ("peak_memory_bytes", "largest_batch_that_fits", "tokens_per_s"):
        pd.testing.assert_series_equal(compared[column], evaluated[column], check_exact=True)


def test_sweep_memory_fit_holds_the_kv_cache(config, tmp_path):
    """Sweeping the batch, peak memory is evaluate's: the KV cache at --kv-dtype grows with the
    batch (64 tokens x 512 elements a request, one byte in fp8, two in fp16)."""
    peaks = {}
    for kv in ("fp8", "fp16"):
        out = tmp_path / f"{kv}.csv"
        assert run_cli(["sweep", *design(config), "--weight-dtype", "int4", "--kv-dtype", kv,
                        "--vary", "batch=1,16", "--out", str(out)]) == 0
        peaks[kv] = pd.read_csv(out).set_index(["format", "batch"])["peak_memory_bytes"]
    growth = {kv: p.xs(16, level="batch") - p.xs(1, level="batch") for kv, p in peaks.items()}
    assert ((growth["fp16"] - growth["fp8"]) == 15 * CONTEXT * KV_ELEMS_PER_TOKEN).all()
    assert run_cli(["evaluate", *design(config, 1, 16), *QUANTISED,
                    "--out", str(tmp_path / "e.csv")]) == 0
    evaluated = pd.read_csv(tmp_path / "e.csv").set_index(["format", "batch"])
    assert (peaks["fp8"].sort_index() == evaluated["peak_memory_bytes"].sort_index()).all()


# --- dse search -------------------------------------------------------------------------------


def test_search_takes_the_quantisation_and_refuses_dtype(config, tmp_path, capsys):
    out = tmp_path / "s"
    assert run_cli(["search", "--model", config, "--phase", "decode", "--context",
                    str(CONTEXT), "--batch", "1", *QUANTISED, "--dtype", "fp16",
                    "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "h100-sxm at fp16 (vector ops fp16, weights int4, KV cache fp8)" in printed
    results = pd.read_parquet(out / "results.parquet")
    assert set(results["weight_dtype"]) == {"int4 (group 128)"}
    assert set(results["kv_dtype"]) == {"fp8"}
    assert results.set_index("format").loc["2:4", "weight_bytes"] == INT4_24
    # A compute dtype the search does not price: one line, nothing written.
    again = tmp_path / "t"
    assert run_cli(["search", "--model", config, "--phase", "decode", "--context",
                    str(CONTEXT), "--dtype", "bf16", "--out", str(again)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse: error: --dtype bf16: dse search prices every design at fp16")
    assert err.count("\n") == 1 and not again.exists()
