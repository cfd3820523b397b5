"""`dse simulate --calibrated DEVICE` and ``simulate(..., op_time_s=...)``: ops run at their
predicted kernel times instead of at peak. Checked by value on ``toy_hybrid`` against the
predictors' own numbers (`dse evaluate --calibrated`'s): under the roofline's settings the
simulated latency is the sum of max(predicted, bound) per op; a time below the op's time at
peak changes nothing; bad times and settings are one line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.calibrate.expected import expected_layers
from dse.calibrate.predictor import load_predictors
from dse.output import format_seconds
from dse.roofline import evaluate_layers
from dse.sim import SimConfig, SimulationError, simulate
from tests.cli_run import run_cli
from workloads import load_trace

DESIGN = ["--model", "toy_hybrid", "--hw", "h100-sxm", "--format", "2:4"]




@pytest.fixture(scope="module")
def predictors():
    return load_predictors("h100-sxm")


def predicted(fmt: str, batch: int, scope: str, predictors) -> pd.DataFrame:
    """The expected kernel time of every op of the design (``dse evaluate --calibrated``'s
    per-op rows), the design's own rows only."""
    trace = load_trace("toy_hybrid")
    layers = evaluate_layers(trace, "h100-sxm", fmt, batch, scope=scope)
    layers = layers[layers["format"] == layers["format"].iloc[-1]].reset_index(drop=True)
    return expected_layers(layers, trace, predictors)


@pytest.mark.parametrize("fmt, scope", [("2:4", "gemm"), ("block16@87.5%", "all"),
                                        ("dense", "all")])
def test_at_roofline_settings_each_op_takes_max_of_predicted_and_bound(fmt, scope, predictors):
    priced = predicted(fmt, 4, scope, predictors)
    times = dict(zip(priced["op"], priced["expected_s"], strict=True))
    result = simulate("toy_hybrid", "h100-sxm", fmt, 4, scope=scope,
                      config=SimConfig.roofline(), op_time_s=times)
    want = np.maximum(priced["expected_s"], priced["time_s"]).to_numpy()
    ops = result.ops.set_index("op").loc[priced["op"]]
    np.testing.assert_allclose(ops["latency_s"], want, rtol=1e-9)
    assert result.latency_s == pytest.approx(want.sum(), rel=1e-9)
    # The shipped predictors expect every op of toy_hybrid slower than its bound, so the
    # total is `dse evaluate --calibrated`'s expected latency.
    assert (priced["expected_s"] >= priced["time_s"]).all()
    assert result.latency_s == pytest.approx(priced["expected_s"].sum(), rel=1e-9)
    assert result.kernel_times and np.array_equal(ops["kernel_time_s"], priced["expected_s"])
    s = result.summary()
    assert s["gap_kernel_s"] == pytest.approx(result.latency_s - result.roofline_latency_s,
                                              rel=1e-9)
    assert s["gap_launch_s"] == 0 and abs(s["gap_fill_drain_s"]) < 1e-9 * result.latency_s


def test_pipelined_ops_last_at_least_their_kernel_time(predictors):
    priced = predicted("2:4", 1, "gemm", predictors)
    times = dict(zip(priced["op"], priced["expected_s"], strict=True))
    peak = simulate("toy_hybrid", "h100-sxm", "2:4")
    result = simulate("toy_hybrid", "h100-sxm", "2:4", op_time_s=times)
    ops, base = result.ops.set_index("op"), peak.ops.set_index("op")
    assert (ops["latency_s"] >= ops["kernel_time_s"] * (1 - 1e-12)).all()
    assert (ops["latency_s"] >= base["latency_s"] * (1 - 1e-12)).all()
    # An op whose predicted time exceeds launch + its time at peak takes launch + predicted.
    slow = ops["kernel_time_s"] > base["latency_s"]
    assert slow.sum() >= 8
    np.testing.assert_allclose(ops.loc[slow, "latency_s"],
                               ops.loc[slow, "kernel_time_s"] + ops.loc[slow, "fill_drain_s"],
                               rtol=1e-9)
    # The slower kernel is the op's largest cause where it outweighs the launch overhead.
    kernel = ops["kernel_s"] > ops["launch_s"]
    # most of the toy's ops on the shipped H100 predictors (how many follows the predictors,
    # which each collection retrains: 9 of 11 on 2026-11-26's first, 8 on its second)
    assert kernel.sum() >= 6 and (ops.loc[kernel, "why"] == "kernel").all()
    assert (ops.loc[slow & ~kernel, "why"] == "launch").all()
    assert result.latency_s > priced["expected_s"].sum() > peak.latency_s
    s = result.summary()
    parts = s["gap_launch_s"] + s["gap_buffer_s"] + s["gap_kernel_s"] + s["gap_fill_drain_s"]
    assert parts == pytest.approx(s["gap_s"], rel=1e-12)


def test_kernel_times_below_peak_change_nothing():
    trace = load_trace("toy_hybrid")
    peak = simulate(trace, "h100-sxm", "2:4", 8, scope="all")
    fast = simulate(trace, "h100-sxm", "2:4", 8, scope="all",
                    op_time_s={name: 1e-15 for name in trace.ops["name"]})
    assert fast.latency_s == peak.latency_s
    assert np.array_equal(fast.ops["end_s"], peak.ops["end_s"])
    assert (fast.ops["kernel_s"] == 0).all()
    assert "kernel_s" not in peak.ops and "gap_kernel_s" not in peak.summary()
    assert not peak.kernel_times


@pytest.mark.parametrize("times, needle", [
    ({"no.such.op": 1e-6}, "kernel times: 'no.such.op' is not an op of toy_hybrid"),
    ({"head": -1e-6}, "kernel times must be finite numbers of seconds >= 0"),
    ({"head": float("inf")}, "kernel times must be finite numbers of seconds >= 0"),
    ({"head": "fast"}, "kernel time of op 'head': 'fast' is not a number"),
])
def test_bad_kernel_times_are_one_line(times, needle):
    with pytest.raises(SimulationError) as err:
        simulate("toy_hybrid", "h100-sxm", "2:4", op_time_s=times)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_cli_prints_the_predictors_and_the_expectation(tmp_path, capsys, predictors):
    out_file = tmp_path / "ops.csv"
    assert run_cli(["simulate", *DESIGN, "--calibrated", "h100-sxm", "--out",
                    str(out_file)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    priced = predicted("2:4", 1, "gemm", predictors)
    api = simulate("toy_hybrid", "h100-sxm", "2:4", op_time_s=dict(zip(
        priced["op"], priced["expected_s"], strict=True)))
    lines = out.splitlines()
    assert lines[0].startswith("calibrated: each op runs at the kernel time the h100-sxm "
                               "predictors expect")
    assert "an expectation, not a bound" in lines[0]
    assert (f"Sum of the predicted kernel times: {format_seconds(priced['expected_s'].sum())}"
            in lines[0])
    # Which predictor priced each op family: 2:4 on toy_hybrid runs 8 GEMMs as N:M; its stem
    # and depthwise convolutions stay dense (their shape cannot take 2:4).
    nm = priced[priced["predictor"] == "h100-sxm:nm:fraction"]
    rmspe = predictors.families["nm"].validated["rmspe"]
    assert (f"  nm: {len(nm)} ops (conv, linear) priced by h100-sxm:nm:fraction, held-out "
            f"RMSPE {rmspe:.0%}; {format_seconds(nm['expected_s'].sum())} predicted") in lines
    grouped = predictors.families["grouped_conv"]  # measured by benchmarks/gpu/collect
    assert any(line.startswith("  grouped_conv: 1 ops (conv) priced by "
                               f"h100-sxm:grouped_conv:{grouped.target}, held-out RMSPE "
                               f"{grouped.validated['rmspe']:.0%}") for line in lines)
    # The stem, a dense convolution, is priced by the dense-convolution predictor (its rows
    # came with the second collection); no fallback is noted.
    conv = predictors.families["conv"]
    assert any(line.startswith(f"  conv: 1 ops (conv) priced by h100-sxm:conv:{conv.target}, "
                               f"held-out RMSPE {conv.validated['rmspe']:.0%}")
               for line in lines)
    assert not any("priced by the gemm predictor" in line for line in lines)
    s = api.summary()
    assert any(line.startswith(f"expected latency {format_seconds(s['latency_s'])}, roofline "
                               f"{format_seconds(s['roofline_latency_s'])}")
               and f"kernels below peak {format_seconds(s['gap_kernel_s'])}" in line
               for line in lines)
    written = pd.read_csv(out_file)
    np.testing.assert_allclose(written["kernel_time_s"],
                               priced.set_index("op").loc[written["op"], "expected_s"])


@pytest.mark.parametrize("extra, needle", [
    (["--calibrated", "h100-sxm", "--fusion", "fused"],
     "--calibrated with --fusion fused: kernel predictors price kernels one op at a time"),
    (["--calibrated", "nope"], "nope: no such predictor file or shipped predictor"),
])
def test_cli_refuses_what_it_cannot_price(tmp_path, capsys, extra, needle):
    out_file = tmp_path / "ops.csv"
    assert run_cli(["simulate", *DESIGN, *extra, "--out", str(out_file)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out_file.exists()


def test_help_says_what_calibrated_does(capsys):
    assert run_cli(["simulate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--calibrated DEVICE" in text and "an expectation, not a bound" in text
