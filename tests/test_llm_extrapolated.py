"""Issue 24: ``dse sweep --calibrated`` and ``dse search --calibrated`` say, as ``dse
evaluate``, ``compare`` and ``report`` do, when a language model's expectation is
extrapolated: which of its GEMMs the kernel predictors never timed at their shape and N, and
their share of the expected GEMM time. The search's summary.json carries it as a field. A
vision model (timm) gets no such line.

LLaMA-3-8B's decode step has 32 layers x (7 linears + the attention's scores and context
products) + the LM head = 289 GEMMs a design. The shipped H100 collection timed its linears,
dense and 2:4, at N = 1-64 (tests/test_llm_acceptance.py); it never timed the attention
products (2 x 32) nor the 128256 x 4096 LM head: 65 of 289 are extrapolated.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from dse.api import expectation_coverage
from dse.calibrate.coverage import coverage_note
from dse.explore import parse_vary
from dse.explore.sweep import sweep_coverage
from tests.cli_run import run_cli
from workloads import load_model

LLAMA = ["--model", "llama-3-8b", "--phase", "decode", "--context", "2048", "--hw", "h100-sxm"]
STEP = "llama-3-8b.decode.2048"
GEMMS, NEVER_TIMED = 32 * 9 + 1, 2 * 32 + 1


def _lines(printed: str) -> list[str]:
    return [x for x in printed.splitlines() if x.startswith("expectation extrapolated")]


def test_hand_counts():
    assert (GEMMS, NEVER_TIMED) == (289, 65)


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3-8b", "decode", 2048)


def test_sweep_says_the_expectation_is_extrapolated(tmp_path, capsys, llama):
    assert run_cli(["sweep", *LLAMA, "--format", "2:4", "--vary", "batch=1,8",
                    "--calibrated", "h100-sxm", "--out", str(tmp_path / "s.parquet"),
                    "--report", str(tmp_path / "page")]) == 0
    printed = capsys.readouterr().out
    lines = _lines(printed)
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith(f"expectation extrapolated for {STEP}: {NEVER_TIMED} of {GEMMS} "
                           "GEMMs (")
    assert "lm_head: 128256x4096 at N=1-8" in line
    # The share it names is the library's, per design (dense and 2:4 at batches 1 and 8).
    cov = expectation_coverage(llama, "h100-sxm", ["2:4"], [1, 8], "h100-sxm", scope="all")
    low, high = float(cov.share.min()), float(cov.share.max())
    assert 0 < low < high < 1
    assert f"({low:.0%}-{high:.0%} of the expected GEMM time)" in line
    # The same line dse evaluate prints for the same designs, and in the sweep's report too.
    assert run_cli(["evaluate", *LLAMA, "--format", "2:4", "--batch", "1", "--batch", "8",
                    "--calibrated", "h100-sxm"]) == 0
    assert _lines(capsys.readouterr().out) == [line]
    page = (tmp_path / "page" / "index.html").read_text()
    assert "expectation extrapolated for llama-3-8b.decode.2048" in page


def test_the_share_is_of_the_expected_gemm_time(llama):
    """The share the line names: the expected seconds of the GEMMs never timed (the LM head's
    and the attention products') over all GEMMs' expected seconds, a part of the design's
    expected latency, per design; dse.evaluate's expected_extrapolated_share column."""
    import dse

    table = dse.evaluate(llama, "h100-sxm", ["2:4"], [1], scope="all", calibrated="h100-sxm")
    cov = expectation_coverage(llama, "h100-sxm", ["2:4"], [1], "h100-sxm", scope="all")
    d = cov.designs.set_index("format")
    share = dict(zip(cov.designs["format"], cov.share, strict=True))
    assert list(table["format"].astype(str)) == ["dense", "2:4"]
    for fmt in ("dense", "2:4"):
        total = float(table.loc[table["format"].astype(str) == fmt, "expected_latency_s"]
                      .iloc[0])
        assert 0 < d.loc[fmt, "extrapolated_s"] < d.loc[fmt, "expected_s"] <= total * (1 + 1e-12)
        assert share[fmt] == pytest.approx(d.loc[fmt, "extrapolated_s"] / d.loc[fmt,
                                                                                "expected_s"])
        assert d.loc[fmt, "extrapolated"] == NEVER_TIMED and d.loc[fmt, "gemms"] == GEMMS
    # The shares differ per design, hence the range the line names: 2:4's timed linears are
    # expected slower than dense ones at batch 1 (0.64x in all), so its share is the smaller.
    assert share["2:4"] < share["dense"]


def test_a_swept_format_parameter_is_covered(llama):
    """With format.sparsity varied the coverage spans every swept format, not only the one
    given: unstructured at 50% and 75% (never timed on an LLM shape), and dense."""
    from dse.calibrate.predictor import load_predictors

    h100 = load_predictors("h100-sxm")
    covs = sweep_coverage([llama, load_model("toy_hybrid")], ["h100-sxm"], [],
                          ["unstructured@50%"], [parse_vary("format.sparsity=0.5,0.75")],
                          [1], scope="all", predictors=h100)
    assert list(covs) == [STEP]  # the vision trace has no entry
    formats = sorted(set(covs[STEP].designs["format"].astype(str)))
    assert len(formats) == 3 and "dense" in formats
    assert sweep_coverage([llama], ["h100-sxm"], [], ["2:4"], [parse_vary("batch=1")],
                          predictors=None) == {}


def test_search_says_the_expectation_is_extrapolated(tmp_path, capsys, llama):
    out = tmp_path / "search"
    assert run_cli(["search", *LLAMA, "--target", "1.3x_over_2:4", "--calibrated",
                    "h100-sxm", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = _lines(printed)
    assert len(lines) == 1
    # Over the space's formats: some (1:4, 2:8, ...) were never timed at all, so every GEMM
    # of theirs is extrapolated; dense and 2:4 have the 65.
    assert lines[0].startswith(f"expectation extrapolated for {STEP}: {NEVER_TIMED}-{GEMMS} "
                               f"of {GEMMS} GEMMs (")
    summary = json.loads((out / "summary.json").read_text())
    field = summary["expectation_extrapolated"][STEP]
    assert field["note"] == lines[0]
    assert (field["gemms"], field["extrapolated_gemms_min"],
            field["extrapolated_gemms_max"]) == (GEMMS, NEVER_TIMED, GEMMS)
    assert field["shapes_known"] is True and field["share_max"] == 1.0
    low = float(re.search(r"\((\d+)%-100% of the expected GEMM time\)", lines[0]).group(1))
    assert field["share_min"] == pytest.approx(low / 100, abs=0.005)
    # The dense and 2:4 designs' share is the one dse sweep names for them.
    cov = expectation_coverage(llama, "h100-sxm", ["2:4"], [1], "h100-sxm", scope="all")
    assert field["share_min"] <= float(cov.share.min()) + 1e-6
    # Every number type in summary.json, as the sweep's and evaluate's files carry them.
    assert (summary["dtype"], summary["weight_dtype"], summary["kv_dtype"]) == \
        ("fp16", "fp16", "fp16")


def test_search_from_python_carries_the_line(tmp_path):
    from search import SearchRequest, run_search

    outcome = run_search(SearchRequest(
        target="1.3x_over_2:4", calibrated="h100-sxm", out=tmp_path,
        overrides={"models": ["llama-3-8b"], "phase": "decode", "context": 2048,
                   "hardware": ["h100-sxm"], "batches": [1]}))
    assert list(outcome.extrapolated) == [STEP]
    assert outcome.extrapolated[STEP] == outcome.extrapolated_shares[STEP]["note"]
    cov = expectation_coverage(outcome.problem.traces[0], list(outcome.problem.builder.bases),
                               list(outcome.problem.evaluated), [1], "h100-sxm", scope="all")
    assert outcome.extrapolated[STEP] == coverage_note(cov, "h100-sxm", STEP)


def test_no_line_for_a_vision_model(tmp_path, capsys):
    assert run_cli(["sweep", "--model", "convnext_tiny", "--hw", "h100-sxm", "--format", "2:4",
                    "--vary", "batch=1,8", "--calibrated", "h100-sxm",
                    "--out", str(tmp_path / "s.parquet")]) == 0
    printed = capsys.readouterr().out
    assert "expected: kernels as measured on h100-sxm" in printed  # calibrated all the same
    assert "extrapolated" not in printed
    assert "kv_dtype" not in pd.read_parquet(tmp_path / "s.parquet")
    out = tmp_path / "search"
    assert run_cli(["search", "--model", "convnext_tiny", "--hw", "h100-sxm", "--batch", "1",
                    "--target", "1.3x_over_2:4", "--calibrated", "h100-sxm",
                    "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ranked by the expected speedup" in printed and "extrapolated" not in printed
    summary = json.loads((out / "summary.json").read_text())
    assert "expectation_extrapolated" not in summary and "kv_dtype" not in summary
    assert summary["calibrated"] == "h100-sxm"
