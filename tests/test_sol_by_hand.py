"""The measured rows' speed of light (``dse.measure.sol``) by hand, on the H100 SXM's datasheet
figures (3.35 TB/s of DRAM, 989.4 TFLOP/s of fp16 tensor cores, 66.9 TFLOP/s of fp32 vector
units). These kill the mutants ``python -m benchmarks.mutation --module sol`` found surviving:
the default features, the index width, the fraction of the bound, and what rows with an error
keep."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import accelerator_models
from dse.measure.sol import bound_columns, sol_columns

DRAM = 3.35e12
FP16_TENSOR = 989.4e12
FP32_VECTOR = 66.9e12


def _row(**fields) -> dict:
    row = {"family": "dense", "format": "dense", "m": 64, "k": 128, "n": 32, "groups": 2,
           "index_dtype": "", "cache": "cold", "error": "", "median_s": 1e-5}
    row.update(fields)
    return row


@pytest.fixture(scope="module")
def h100():
    return accelerator_models.load("h100-sxm")


def test_a_gemm_row_without_given_features_reads_k_by_n_and_writes_m_by_n(h100):
    """Default features per group: input K x N, output M x N; the fraction is bound / median."""
    priced = sol_columns(pd.DataFrame([_row()]), h100, "fp16", "fp32", "fp32")
    weights, inputs, outputs = 2 * 64 * 128, 2 * 128 * 32, 2 * 64 * 32
    nbytes = 2 * (weights + inputs + outputs)  # fp16
    flops = 2 * 2 * 64 * 128 * 32
    sol = max(flops / FP16_TENSOR, nbytes / DRAM)
    row = priced.iloc[0]
    assert row["bytes"] == pytest.approx(nbytes, rel=1e-12)
    assert row["flops"] == pytest.approx(flops, rel=1e-12)
    assert row["sol_s"] == pytest.approx(sol, rel=1e-12)
    assert row["sol_bound"] == "memory" and row["hw"] == "h100-sxm"
    assert row["sol_fraction"] == pytest.approx(sol / 1e-5, rel=1e-12)


@pytest.mark.parametrize("dtype, width", [("int16", 2), ("int64", 8)])
def test_a_csr_rows_index_width_follows_its_index_dtype(h100, dtype, width):
    """CSR index bytes are i_b (nnz + M + 1): against the default 4-byte index, a row of
    M = 64, nnz = 0.5 x 64 x 64 differs by (i_b - 4)(2048 + 65) bytes."""
    rows = pd.DataFrame([_row(family="csr", format="unstructured@50%", m=64, k=64, n=16,
                              groups=1, index_dtype=d) for d in ("int32", dtype)])
    priced = sol_columns(rows, h100, "fp16", "fp32", "fp32")
    difference = priced["bytes"].iloc[1] - priced["bytes"].iloc[0]
    assert difference == pytest.approx((width - 4) * (2048 + 64 + 1), rel=1e-12)


def test_a_vector_rows_bound_and_fraction_come_from_its_own_flops_and_bytes(h100):
    rows = pd.DataFrame([_row(family="vector", format="dense", flops=1e9, bytes=1e6,
                              median_s=1e-4)])
    priced = bound_columns(rows, h100, "fp16", "fp32", "fp32")
    sol = max(1e9 / FP32_VECTOR, 1e6 / DRAM)  # 14.9 us of compute against 0.3 us of DRAM
    assert priced["sol_s"].iloc[0] == pytest.approx(sol, rel=1e-12)
    assert priced["sol_bound"].iloc[0] == "compute"
    assert priced["sol_fraction"].iloc[0] == pytest.approx(sol / 1e-4, rel=1e-12)


def test_a_row_with_an_error_keeps_what_it_has(h100):
    """A vector op that failed keeps its stored bound, spec and bound kind; a good one beside
    it is priced."""
    rows = pd.DataFrame([
        _row(family="vector", flops=1e9, bytes=1e6, error="OOM", sol_s=7.0, hw="old",
             sol_bound="memory", median_s=np.nan),
        _row(family="vector", flops=1e9, bytes=1e6, sol_s=7.0, hw="old", sol_bound="memory")])
    priced = bound_columns(rows, h100, "fp16", "fp32", "fp32")
    assert priced.loc[0, ["sol_s", "hw", "sol_bound"]].tolist() == [7.0, "old", "memory"]
    assert priced.loc[1, ["hw", "sol_bound"]].tolist() == ["h100-sxm", "compute"]


def test_a_format_written_another_way_is_priced_as_its_canonical_form():
    """A dataset row may spell its format as a user typed it: unstructured@0.5 is
    unstructured@50%, and both rows get the same bound."""
    import pandas as pd

    from accelerator_models import load
    from dse.measure.sol import sol_columns

    rows = pd.DataFrame({"family": ["unstructured"] * 2, "format": ["unstructured@0.5",
                                                                    "unstructured@50%"],
                         "m": [256, 256], "k": [512, 512], "n": [64, 64], "groups": [1, 1],
                         "index_dtype": ["int32", "int32"], "median_s": [1e-3, 1e-3],
                         "error": ["", ""]})
    out = sol_columns(rows, load("h100-sxm"), value_dtype="fp16", vector_dtype="fp16",
                      csr_dtype="fp16")
    assert out["sol_s"].iloc[0] == out["sol_s"].iloc[1] > 0


def test_a_linear_row_of_one_input_element_is_priced(h100):
    """A GEMM row with groups 1 and K = N = 1, the smallest input a row can read (one
    element): fp16 bytes 2 x (64 x 1 weights + 1 x 1 input + 64 x 1 output), FLOPs 2 x 64."""
    row = _row(k=1, n=1, groups=1)
    priced = sol_columns(pd.DataFrame([row]), h100, "fp16", "fp32", "fp32")
    assert priced["bytes"].iloc[0] == pytest.approx(2 * (64 + 1 + 64), rel=1e-12)
    assert priced["flops"].iloc[0] == 2 * 64


def test_a_vector_row_at_the_ridge_is_compute_bound(h100):
    """14,926 x 67 B at 3.35 TB/s and 14,926 x 1,338 FLOPs at 66.9 TFLOP/s: both 14,926 x 20 ps,
    equal in floating point too. A tie is "compute", as dse's own roofline labels it."""
    from dse.roofline import memory_time

    flops, nbytes = 14926.0 * 1338, 14926.0 * 67
    assert flops / h100.vector_rate("fp32") == memory_time(np.array([nbytes]), h100)[0]  # a tie
    priced = bound_columns(pd.DataFrame([_row(family="vector", flops=flops, bytes=nbytes)]),
                           h100, "fp16", "fp32", "fp32")
    assert priced["sol_s"].iloc[0] == pytest.approx(14926 * 2e-11, rel=1e-12)
    assert priced["sol_bound"].iloc[0] == "compute"


def test_a_row_reading_no_input_is_priced_whatever_its_groups(h100):
    """Features of 0 input elements: priced as the weights and the output alone, with one
    group as with two (a row is priced as a one-op trace's convolution either way, so no
    trace check of a linear's model input refuses the one group)."""
    for groups in (1, 2):
        priced = sol_columns(pd.DataFrame([_row(groups=groups)]), h100, "fp16", "fp32", "fp32",
                             features=np.array([[0, 4096]]))
        weights = groups * 64 * 128
        assert priced["bytes"].iloc[0] == pytest.approx(2 * (weights + 4096), rel=1e-12)

