"""Issue 14, parts 1 and 2: every output that shows a design says when and how much it fell
back, a report charts every requested batch, and compare's chart has absolute latency."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

import dse
import reports


def run_dse(*argv: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def stock():
    """1:4 on stock A100 and H100: the hardware lacks 1:4, so those ops run dense."""
    return dse.evaluate("convnext_tiny", ["a100", "h100"], ["2:4", "1:4"], [1, 32])


def test_fallback_text_by_value():
    assert reports.fallback_text(0, "", 0) == ""
    assert reports.fallback_text(0, "dense", 53) == "53 ops dense (hardware)"
    assert reports.fallback_text(3, "csr", 2) == "3 ops dense (shape), 2 ops CSR (hardware)"


def test_chart_frames_carry_the_fallback_fields(stock):
    one = stock[stock["batch"] == 1]
    rows = one[one["format"] == "1:4"]
    data = reports.hardware_comparison_data(one)
    got = data[data["format"] == "1:4"].set_index("hardware")
    want = rows.set_index("hardware")
    for field in reports.FALLBACK_FIELDS:
        assert (got[field] == want[field]).all()
    assert (got["hw_fallback"] == "dense").all() and (got["hw_fallback_ops"] > 0).all()
    assert (data.loc[data["format"] == "dense", "fallback"] == "").all()
    shares = reports.feature_share_data(stock[stock["hardware"] == "a100-40gb"])
    assert set(reports.FALLBACK_FIELDS) <= set(shares.columns)
    roof = reports.sparsity_roofline_data(one[one["hardware"] == "a100-40gb"].assign(
        accuracy=99.0))
    r14 = roof.set_index("format").loc["1:4"]
    assert r14["hw_fallback"] == "dense" and r14["label"] == "1:4 (runs dense)"
    assert "ops dense (hardware)" in r14["fallback"]


def test_layer_frames_carry_the_fallback(stock):
    layers = dse.evaluate_layers("convnext_tiny", "a100", ["1:4"], 1)
    mix = reports.bound_mix_data(layers)
    row = mix[mix["format"] == "1:4"].iloc[0]
    assert row["hw_fallback"] == "dense"
    assert row["hw_fallback_ops"] == (layers["fallback"] == "hw:dense").sum() > 0
    assert row["shape_fallback_ops"] == (layers["fallback"] == "shape").sum()
    assert row["format_label"] == "1:4 *"
    per_op = reports.roofline_data(layers, "a100")
    ops = per_op[per_op["series"] == "op"]
    assert set(ops["fallback"]) <= {"", "shape", "hw:dense"} and "hw:dense" in set(ops["fallback"])
    # Only the roofs of the units used are drawn: no vector roof for an all-GEMM design.
    used = per_op[per_op["series"] == "roof"].groupby("roof")["used"].first()
    assert used["tensor fp16"] and not used["vector fp16"]


def test_simulation_carries_its_fallbacks(stock):
    result = dse.simulate("convnext_tiny", "a100", "1:4", batch=1)
    s = result.summary()
    row = stock[(stock["hardware"] == "a100-40gb") & (stock["format"] == "1:4")
                & (stock["batch"] == 1)].iloc[0]
    for field in reports.FALLBACK_FIELDS:
        assert s[field] == row[field]
    assert (result.ops["fallback"] == "hw:dense").sum() == row["hw_fallback_ops"]
    assert (result.ops["fallback"] == "shape").sum() == row["shape_fallback_ops"]
    gap = reports.sim_gap_data(result.ops)
    assert "fallback" in gap.columns


def test_compare_and_simulate_print_fallbacks_and_chart_latency(tmp_path):
    run = run_dse("compare", "--hw", "a100,h100", "--model", "convnext_tiny", "--format",
                  "1:4", "--report", "cmp", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "fallbacks" in run.stdout and "hw->dense" in run.stdout
    spec = (tmp_path / "cmp" / "index.html").read_text()
    assert "latency (ms)" in spec and "speedup over dense (x)" in spec
    assert "dse compare --hw a100,h100" in spec and "dse 0" in spec and "a100-40gb" in spec
    assert (tmp_path / "cmp" / "hardware-specs.csv").exists()
    data = pd.read_csv(tmp_path / "cmp" / "hardware-comparison.csv")
    assert {"latency_s", "hw_fallback", "hw_fallback_ops", "fallback"} <= set(data.columns)
    run = run_dse("simulate", "--model", "convnext_tiny", "--hw", "a100", "--format", "1:4",
                  "--out", "ops.csv", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "fallbacks: 18 shape->dense, 41 hw->dense" in run.stdout
    assert "fallback" in pd.read_csv(tmp_path / "ops.csv").columns


def test_report_charts_every_batch(tmp_path):
    run = run_dse("report", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4",
                  "--format", "1:4", "--batch", "1", "--batch", "32", "--out", "rep",
                  cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    folder = tmp_path / "rep"
    for name in ("sparsity-roofline", "roofline", "bound-mix", "feature-share"):
        data = pd.read_csv(folder / f"{name}.csv")
        assert set(data["batch"].dropna()) == {1, 32}, name
    roof = pd.read_csv(folder / "sparsity-roofline.csv", keep_default_na=False)
    assert set(roof.loc[roof["format"] == "1:4", "hw_fallback"]) == {"dense"}
    # Two batches 32x apart are not joined by a line (different segments).
    shares = pd.read_csv(folder / "feature-share.csv")
    assert shares.groupby("segment").size().max() == 1
    assert "batches 1, 32" in (folder / "index.html").read_text()
