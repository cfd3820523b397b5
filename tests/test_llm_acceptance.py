"""Issue 24's acceptance gaps, closed: the expectation says which decode GEMMs it extrapolates,
a model that does not fit at batch 1 gets one line, the language-model columns (``max_batch``
included) in sweep, search and simulate, and the design-cost benchmark.

By value on the tiny GQA configuration of tests/test_llm_dtypes.py (decode at context 64):
resident weights in fp16 are 2,873,856 bytes read by a step plus the untied 1000 x 256
embedding table, 512,000 bytes: 3,385,856 in all (2:4: 1,841,664 + 512,000 = 2,353,664); its
KV cache is 2 layers x 2 KV heads x 64 x (key, value) = 512 elements a token.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from dse.api import expected_ops
from dse.calibrate.coverage import coverage, coverage_note, measured_shapes
from dse.calibrate.predictor import load_predictors
from tests.cli_run import run_cli
from tests.test_llm_dtypes import CONTEXT, TINY, WEIGHT_BYTES
from workloads.llm import llm_config_from_dict, llm_trace

EMBEDDING = 1000 * 256 * 2
DENSE_RESIDENT = WEIGHT_BYTES[("dense", None, None)] + EMBEDDING  # 3,385,856
SPARSE_RESIDENT = WEIGHT_BYTES[("2:4", None, None)] + EMBEDDING  # 2,353,664
KV_ELEMS_PER_TOKEN = 512
#: Between the two: dense does not fit at batch 1, 2:4 does.
CAPACITY = 3_000_000


def test_hand_figures():
    assert (DENSE_RESIDENT, SPARSE_RESIDENT) == (3_385_856, 2_353_664)
    assert SPARSE_RESIDENT < CAPACITY < DENSE_RESIDENT


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


@pytest.fixture(scope="module")
def tiny():
    return llm_trace(llm_config_from_dict(TINY, name="tiny"), "decode", CONTEXT)


@pytest.fixture(scope="module")
def h100():
    return load_predictors("h100-sxm")


def step(config, *batches: int) -> list[str]:
    out = ["--model", config, "--phase", "decode", "--context", str(CONTEXT), "--hw",
           "h100-sxm", "--format", "2:4"]
    for b in batches:
        out += ["--batch", str(b)]
    return out


# --- the expectation says what it extrapolates -----------------------------------------------


def _shapes(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["family", "sparsity", "m", "k", "groups", "n_min",
                                       "n_max"])


def test_coverage_by_hand(tiny, h100):
    """The tiny step has 2 layers x (q, k, v, o, gate, up, down, scores, context) + the LM head
    = 19 GEMMs a design. Say only the dense 256 x 256 weight (q_proj and o_proj) was timed, at
    N 1-8, and the 2:4 one at N 2-8: dense at batch 1 has its 4 q/o projections measured and 15
    extrapolated; 2:4 at batch 1 has them below the timed N (extrapolated, all 19); at batch 16
    both are above it."""
    expected = expected_ops(tiny, "h100-sxm", ["2:4"], [1, 16], h100, scope="all")
    shapes = _shapes([("dense", 0.0, 256, 256, 1, 1, 8), ("nm", 0.5, 256, 256, 1, 2, 8)])
    cov = coverage(expected, tiny, h100, shapes=shapes)
    d = cov.designs.set_index(["format", "batch"])
    assert (d["gemms"] == 19).all()
    assert d.loc[("dense", 1), "extrapolated"] == 15
    assert d.loc[("2:4", 1), "extrapolated"] == 19
    assert d.loc[("dense", 16), "extrapolated"] == 19
    # The seconds are the expected ones of those ops.
    rows = expected[(expected["format"] == "dense") & (expected["batch"] == 1)]
    gemm = rows["op"].str.endswith(("_proj", ".scores", ".context", "lm_head"))
    q = rows["op"].str.endswith(("q_proj", "o_proj"))
    assert d.loc[("dense", 1), "expected_s"] == pytest.approx(rows.loc[gemm, "expected_s"].sum(),
                                                              rel=1e-12)
    assert d.loc[("dense", 1), "extrapolated_s"] == pytest.approx(
        rows.loc[gemm & ~q, "expected_s"].sum(), rel=1e-12)
    share = cov.share.to_numpy()
    assert share[list(d.index).index(("2:4", 1))] == 1.0
    note = coverage_note(cov, "h100-sxm", tiny.model)
    assert note.startswith("expectation extrapolated for tiny.decode.64: 15-19 of 19 GEMMs")
    # Everything timed at every N: nothing extrapolated.
    every = _shapes([(f, s, r.m, r.k, r.groups, 1, 10**6) for f, s in (("dense", 0.0),
                                                                         ("nm", 0.5))
                     for r in tiny.ops[tiny.ops["m"] > 0].itertuples()])
    cov = coverage(expected, tiny, h100, shapes=every.drop_duplicates())
    assert (cov.designs["extrapolated"] == 0).all()
    assert "every GEMM's weight shape was timed on h100-sxm" in coverage_note(cov, "h100-sxm",
                                                                              tiny.model)


def test_unknown_training_shapes_count_as_extrapolated(tiny, h100):
    expected = expected_ops(tiny, "h100-sxm", ["2:4"], [1], h100, scope="all")
    cov = coverage(expected, tiny, replace(h100, provenance={"dataset": "my-own.parquet"}))
    assert not cov.known
    assert (cov.designs["extrapolated"] == cov.designs["gemms"]).all()
    assert "are not known" in coverage_note(cov, "h100-sxm", tiny.model)


def test_shipped_h100_data_times_llama_3_8b_decode_linears(h100):
    """The collection timed LLaMA-3-8B's linears dense and 2:4 at N = 1-64 (decode) and up to
    2048 (prefill); its LM head (128256 x 4096) was never timed."""
    shapes = measured_shapes(h100, "fp16").set_index(["family", "sparsity", "m", "k", "groups"])
    for family, sparsity in (("dense", 0.0), ("nm", 0.5)):
        for m, k in ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)):
            row = shapes.loc[(family, sparsity, m, k, 1)]
            assert row["n_min"] == 1 and row["n_max"] >= 2048, (family, m, k)
    assert ("dense", 0.0, 128256, 4096, 1) not in shapes.index


def test_evaluate_says_the_expectation_is_extrapolated(tmp_path, capsys):
    out = tmp_path / "e.csv"
    assert run_cli(["evaluate", "--model", "llama-3-8b", "--phase", "decode", "--context",
                    "2048", "--hw", "h100-sxm", "--format", "2:4", "--batch", "1",
                    "--calibrated", "h100-sxm", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("expectation extrapolated"))
    # 32 layers x (7 linears + scores + context) + the LM head; the attention products (2 x 32)
    # and the LM head were never timed.
    assert "llama-3-8b.decode.2048: 65 of 289 GEMMs" in line
    assert "lm_head: 128256x4096 at N=1" in line
    table = pd.read_csv(out)
    share = table["expected_extrapolated_share"]
    assert ((share > 0) & (share < 1)).all()
    assert "%" in line and f"{share.min():.0%}" in line


# --- a model that does not fit at batch 1: one line --------------------------------------------


@pytest.mark.parametrize("command", ["evaluate", "compare", "simulate"])
def test_not_fitting_at_batch_1_is_one_line(config, command, capsys):
    argv = [command, *step(config, 1), "--set", f"dram_capacity_bytes={CAPACITY}"]
    if command == "simulate":  # one design: the dense one
        argv[argv.index("2:4")] = "dense"
    assert run_cli(argv) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "does not fit" in x]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("tiny")  # the configuration's folder name
    assert "at batch 1 in dense: 0.00339 GB of weights" in line  # 3,385,856 bytes
    assert f"against {CAPACITY / 2**30:.3g} GiB of DRAM" in line
    assert ("(2:4 fits)" in line) == (command != "simulate")
    assert "--weight-dtype" in line


def test_fitting_models_get_no_line(config, capsys):
    assert run_cli(["evaluate", *step(config, 1)]) == 0
    assert "does not fit" not in capsys.readouterr().out


# --- the columns in sweep, search and simulate -------------------------------------------------


@pytest.fixture(scope="module")
def evaluated(config, tmp_path_factory):
    out = tmp_path_factory.mktemp("evaluate") / "e.csv"
    assert run_cli(["evaluate", *step(config, 1, 16), "--set",
                    f"dram_capacity_bytes={10 * CAPACITY}", "--out", str(out)]) == 0
    return pd.read_csv(out).set_index(["format", "batch"]).sort_index()


def test_evaluate_names_max_batch(evaluated):
    assert (evaluated["max_batch"] == evaluated["largest_batch_that_fits"]).all()
    # 30 MB against 3.39 MB (dense) or 2.35 MB (2:4) of weights: room for many requests.
    assert evaluated.loc[("2:4", 1), "max_batch"] > evaluated.loc[("dense", 1), "max_batch"] > 100


def test_sweep_has_the_language_model_columns(config, evaluated, tmp_path):
    out = tmp_path / "s.csv"
    assert run_cli(["sweep", *step(config), "--set", f"dram_capacity_bytes={10 * CAPACITY}",
                    "--vary", "batch=1,16", "--out", str(out)]) == 0
    swept = pd.read_csv(out).set_index(["format", "batch"]).sort_index()
    assert (swept["phase"] == "decode").all() and (swept["context"] == CONTEXT).all()
    np.testing.assert_allclose(swept["tokens_per_s"],
                               swept.index.get_level_values("batch") / swept["latency_s"],
                               rtol=1e-12)
    assert (swept["time_per_token_s"] == swept["latency_s"]).all()
    assert swept["ttft_s"].isna().all()
    assert (swept["kv_bytes_per_token"] == KV_ELEMS_PER_TOKEN * 2).all()
    assert swept.loc[("dense", 16), "kv_cache_bytes"] == 16 * CONTEXT * KV_ELEMS_PER_TOKEN * 2
    assert (swept["params"] == evaluated["params"].iloc[0]).all()
    for column in ("tokens_per_s", "largest_batch_that_fits", "max_batch", "kv_cache_bytes",
                   "peak_memory_bytes"):
        np.testing.assert_allclose(swept[column].astype(float), evaluated[column].astype(float),
                                   rtol=1e-12, err_msg=column)


def test_search_results_have_the_language_model_columns(config, evaluated, tmp_path):
    out = tmp_path / "search"
    assert run_cli(["search", "--model", config, "--phase", "decode", "--context",
                    str(CONTEXT), "--hw", "h100-sxm", "--batch", "1", "--batch", "16",
                    "--out", str(out)]) == 0
    results = pd.read_parquet(out / "results.parquet").set_index(["format", "batch"])
    # The search's space sets the sparse tensor core's candidates: 2:4 prices as evaluate's.
    rows = results.loc[[("dense", 1), ("dense", 16), ("2:4", 1), ("2:4", 16)]].sort_index()
    assert (rows["kv_bytes_per_token"] == KV_ELEMS_PER_TOKEN * 2).all()
    assert rows.loc[("2:4", 16), "kv_cache_bytes"] == 16 * CONTEXT * KV_ELEMS_PER_TOKEN * 2
    assert (rows["max_batch"] == rows["largest_batch_that_fits"]).all()
    # 80 GiB: (capacity - resident weights) / (KV cache + activations a request).
    per_request = (rows["peak_memory_bytes"] - DENSE_RESIDENT) / rows.index.get_level_values(
        "batch")
    dense = rows.loc[[("dense", 1), ("dense", 16)]]
    assert (dense["largest_batch_that_fits"] == np.minimum(
        np.floor((80 * 2**30 - DENSE_RESIDENT) / per_request.loc[dense.index]), 2**24)).all()


def test_simulate_prints_tokens_per_s_and_the_fit(config, evaluated, capsys):
    assert run_cli(["simulate", *step(config, 16), "--set",
                    f"dram_capacity_bytes={10 * CAPACITY}"]) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("language model tiny"))
    latency = next(x for x in printed.splitlines() if x.startswith("latency "))
    assert "decode at context 64:" in line and "tokens/s simulated (batch 16 over" in line
    assert f"({KV_ELEMS_PER_TOKEN * 2:,} bytes a token)" in line
    largest = int(evaluated.loc[("2:4", 16), "largest_batch_that_fits"])
    assert line.endswith(f"fits (largest batch {largest:,})")
    assert latency.split(",")[0].split()[1] in line  # the simulated latency, as printed


# --- the benchmark runs -------------------------------------------------------------------------


def test_design_cost_benchmark_runs(tmp_path, capsys):
    from benchmarks.llm.design_cost import main

    out = tmp_path / "cost.json"
    assert main(["--repeats", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {r["trace"]: r for r in doc["rows"]}
    assert rows["llama-3-8b.decode.2048"]["ops"] == 32 * 17 + 3  # 547
    assert rows["vit_base_patch16_224"]["ops"] == 209
    assert {r["language_model"] for r in doc["rows"]} == {True, False}
    assert set(doc["targets"]) == {"designs", "evaluate", "table"}
    assert "dearest LLM design" in capsys.readouterr().out


def test_report_designs_table_has_the_language_model_columns(config, evaluated):
    from reports.design_report import design_report
    from workloads import load_model

    trace = load_model(config, "decode", CONTEXT)
    report = design_report(trace, "h100-sxm", ["2:4"], [1, 16], scope="all")
    designs = report.designs.set_index(["format", "batch"]).sort_index()
    for column in ("tokens_per_s", "time_per_token_s", "kv_bytes_per_token", "params",
                   "weight_bytes", "kv_cache_bytes"):
        np.testing.assert_allclose(designs[column].astype(float),
                                   evaluated[column].astype(float), rtol=1e-12, err_msg=column)
    assert designs["ttft_s"].isna().all()
    assert (designs["max_batch"] == designs["largest_batch_that_fits"]).all()
    assert dict(report.tables)["Designs"]["tokens_per_s"].notna().all()


@pytest.mark.parametrize("command", ["compare", "report"])
def test_compare_and_report_say_what_the_expectation_extrapolates(config, h100, command,
                                                                  tmp_path, capsys):
    from workloads import load_model

    trace = load_model(config, "decode", CONTEXT)
    argv = [command, *step(config, 1), "--calibrated", "h100-sxm"]
    if command == "report":
        argv += ["--out", str(tmp_path / "report")]
    assert run_cli(argv) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("expectation")]
    # The same line as the library's, from the shipped H100 data: none of the tiny model's
    # weight shapes was timed there.
    expected = expected_ops(trace, "h100-sxm", ["2:4"], [1], h100, scope="all")
    want = coverage_note(coverage(expected, trace, h100, "fp16"), "h100-sxm", trace.model)
    assert "19 of 19 GEMMs (100% of the expected GEMM time)" in want
    assert lines == [want]
    if command == "report":
        assert want.split(":")[0] in (tmp_path / "report" / "index.html").read_text()
