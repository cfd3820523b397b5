"""A calibrated language-model step carries the expectation's rates beside the bound's."""

from __future__ import annotations

import numpy as np
import pytest

import dse
import workloads
from dse.design_columns import with_energy_and_memory, with_language_model_columns
from dse.roofline import DEFAULT_NUMERICS


def _columns(trace, table):
    return with_energy_and_memory(table, trace, "h100-sxm", ["2:4"], [1, 8], ["unfused"], "all")


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_expected_rates_follow_the_expected_latency(phase):
    trace = workloads.llm_trace(workloads.load_llm_config("llama-3-8b"), phase, 256)
    table = _columns(trace, dse.evaluate(trace, "h100-sxm", ["2:4"], batches=[1, 8],
                                         scope="all", calibrated="h100-sxm"))
    out = with_language_model_columns(table, trace, DEFAULT_NUMERICS)
    expected = out["expected_latency_s"].to_numpy()
    if phase == "decode":
        np.testing.assert_allclose(out["expected_tokens_per_s"], out["batch"] / expected)
        np.testing.assert_allclose(out["expected_time_per_token_s"], expected)
        assert out["expected_ttft_s"].isna().all()
    else:
        np.testing.assert_allclose(out["expected_ttft_s"], expected)
        assert out["expected_tokens_per_s"].isna().all()
    # an expectation, never faster than the bound
    assert (out["expected_latency_s"] >= out["latency_s"]).all()


def test_an_uncalibrated_step_has_no_expected_rates():
    trace = workloads.llm_trace(workloads.load_llm_config("llama-3-8b"), "decode", 256)
    table = _columns(trace, dse.evaluate(trace, "h100-sxm", ["2:4"], batches=[1, 8],
                                         scope="all"))
    out = with_language_model_columns(table, trace, DEFAULT_NUMERICS)
    assert "expected_tokens_per_s" not in out
