"""`benchmarks.gpu.compare_dtype` on rows of known values: the fastest implementation per
variant, the median over runs, the bound at each variant's own number types (narrow weights
for the weight-only kernels), ratios and speedups by hand, and a missing file refused in one
line. No timing is measured here."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import accelerator_models
from benchmarks.gpu import compare_dtype

M, K, N = 4096, 4096, 1


def _row(implementation: str, dtype: str, fmt: str, median_s: float, run: str = "a",
         error: str = "", cache: str = "cold") -> dict:
    return {"why": f"collect dtype_gemm llm: q_proj, N={N}", "implementation": implementation,
            "dtype": dtype, "format": fmt, "m": M, "k": K, "n": N, "median_s": median_s,
            "run_id": run, "error": error, "cache": cache}


ROWS = pd.DataFrame([
    _row("cublas_linear", "fp16", "dense", 40e-6),
    _row("cublas_linear", "fp16", "dense", 44e-6, run="b"),  # median over runs: 42 us
    _row("cublas", "bf16", "dense", 50e-6),
    _row("cublas_linear", "bf16", "dense", 41e-6),  # the faster of the two counts
    _row("int4_tinygemm", "bf16", "dense", 20e-6),
    _row("int4_tinygemm", "bf16", "dense", 1e-9, cache="warm"),  # warm: not compared
    _row("scaled_mm", "fp8", "dense", float("nan"), error="RuntimeError: refused"),
    _row("cublas_linear", "fp16", "dense", 1e-9) | {"why": "collect gemm24 llm"},  # another part
])


def test_measured_takes_the_fastest_implementation_and_the_median_over_runs():
    got = compare_dtype.measured(compare_dtype.load_rows_frame(ROWS)).set_index("variant")
    assert got.loc["fp16", "measured_s"] == pytest.approx(42e-6)
    assert got.loc["fp16", "runs"] == 2
    assert got.loc["bf16 compute", "measured_s"] == 41e-6
    assert got.loc["bf16 compute", "implementation"] == "cublas_linear"
    assert got.loc["int4 weights", "measured_s"] == 20e-6
    assert "fp8 compute" not in got.index  # refused: never timed, never compared


def test_bound_charges_each_variant_its_own_bytes_and_ratios_follow():
    hw = accelerator_models.load(compare_dtype.HARDWARE)
    table = compare_dtype.compare(compare_dtype.load_rows_frame(ROWS)).set_index("variant")
    bw = hw.dram_bandwidth_bytes_per_s
    # decode (N = 1) is memory-bound: fp16 reads W, X and writes Y at 2 bytes; int4 weights
    # are half a byte with one fp16 scale per 128 weights along K
    fp16_bytes = 2 * (M * K + K * N + M * N)
    int4_bytes = M * K / 2 + 2 * M * (K // 128) + 2 * (K * N + M * N)
    assert table.loc["fp16", "sol_s"] == pytest.approx(fp16_bytes / bw, rel=1e-9)
    assert table.loc["int4 weights", "sol_s"] == pytest.approx(int4_bytes / bw, rel=1e-9)
    for variant in ("fp16", "bf16 compute", "int4 weights"):
        r = table.loc[variant]
        assert r["ratio"] == pytest.approx(r["measured_s"] / r["expected_s"])
        assert r["measured_speedup"] == pytest.approx(42e-6 / r["measured_s"])
        assert r["expected_speedup"] == pytest.approx(table.loc["fp16", "expected_s"]
                                                      / r["expected_s"])
        assert r["width"] == "decode"
    # the carried-over expectation: int4 weights keep fp16's fraction of a smaller bound
    assert table.loc["int4 weights", "expected_s"] < table.loc["fp16", "expected_s"]


def test_summary_counts_the_share_within_ten_and_twenty_five_percent():
    table = pd.DataFrame({"variant": ["fp16"] * 4, "width": ["decode"] * 4,
                          "ratio": [1.05, 0.8, 1.2, 2.0], "measured_speedup": [1.0] * 4,
                          "expected_speedup": [1.0] * 4})
    (row,) = compare_dtype.summary(table).to_dict(orient="records")
    assert row["shapes"] == 4 and row["within_10"] == 0.25 and row["within_25"] == 0.75
    assert math.isclose(row["median_ratio"], 1.125)


def test_a_missing_file_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "out.csv"
    code = compare_dtype.main(["--data", str(tmp_path / "none.parquet"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "none.parquet: no such file" in err
    assert not out.exists()
