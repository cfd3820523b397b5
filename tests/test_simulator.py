"""The event-level simulator: it reproduces the roofline where it must, never beats it, and plays
out small hand-made cases event by event."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import accelerator_models
import dse
from accelerator_models import Accelerator, BlockSparse
from dse.sim.simulate import (
    DEFAULT_LAUNCH_OVERHEAD_S,
    SimConfig,
    Simulation,
    SimulationError,
    busy_between,
    simulate,
)
from formats import Dense
from tests.strategies import accelerators, any_formats, traces
from workloads import Trace

UNLIMITED = SimConfig.roofline()
ROOFLINE_TOL = 1e-6  # the acceptance tolerance; the observed error is ~1e-12


def _per_op_roofline(trace, hw, fmt, batch, fusion, scope):
    # fused_prefetched has no per-op roofline; its ops are priced as fused.
    per_op = "fused" if fusion == "fused_prefetched" else fusion
    layers = dse.evaluate_layers(trace, hw, fmt, batch, fusion=per_op, scope=scope)
    name = layers["format"].iloc[-1]
    return layers[layers["format"] == name].reset_index(drop=True)


@pytest.mark.parametrize("model", ["convnext_tiny", "swin_tiny", "toy_hybrid"])
@pytest.mark.parametrize("fmt", ["dense", "2:4", "1:4", "block16@87.5%", "unstructured@90%"])
@pytest.mark.parametrize("fusion", ["unfused", "fused"])
@pytest.mark.parametrize("batch", [1, 16])
def test_unlimited_simulation_equals_the_roofline_per_op(model, fmt, fusion, batch):
    scope = "all"
    result = simulate(model, "a100", fmt, batch, fusion, scope, UNLIMITED)
    ref = _per_op_roofline(model, "a100", fmt, batch, fusion, scope)
    assert list(result.ops["op"]) == list(ref["op"])
    np.testing.assert_allclose(result.ops["latency_s"], ref["time_s"], rtol=ROOFLINE_TOL,
                               atol=1e-18)
    np.testing.assert_allclose(result.ops["roofline_s"], ref["time_s"], rtol=1e-12, atol=1e-18)
    assert result.latency_s == pytest.approx(result.roofline_latency_s, rel=ROOFLINE_TOL)
    assert (result.ops["tiles"] == 1).all()


@pytest.mark.parametrize("model", ["convnext_tiny", "swin_tiny"])
@pytest.mark.parametrize("fmt", ["dense", "2:4", "block8@75%"])
@pytest.mark.parametrize("scope", ["gemm", "all"])
@pytest.mark.parametrize("fusion", dse.FUSIONS)
def test_unlimited_simulation_equals_the_roofline_in_total(model, fmt, scope, fusion):
    # fused_prefetched included: with unlimited prefetch the DRAM stream runs ahead freely,
    # which is the whole-graph roofline max(sum compute, sum memory).
    result = simulate(model, "h100", fmt, 4, fusion, scope, UNLIMITED)
    table = dse.evaluate(model, "h100", fmt, 4, fusion=fusion, scope=scope)
    expected = table.loc[table["format"] == result.design["format"], "latency_s"].iloc[0]
    assert result.latency_s == pytest.approx(expected, rel=ROOFLINE_TOL)
    assert result.roofline_latency_s == expected


configs = st.builds(
    SimConfig,
    buffer_bytes=st.one_of(st.just(math.inf), st.floats(2e4, 5e7)),
    depth=st.integers(1, 4),
    launch_overhead_s=st.sampled_from([0.0, 1e-7, 5.5e-6]),
    overlap=st.sampled_from(["pipelined", "full"]),
    prefetch_depth=st.integers(0, 3),
)


def _tiny_op_late() -> Trace:
    """A failure hypothesis once found (issue 26): a 0.13 s grouped conv, then a conv of 17
    outputs whose 1.7e-10 s ends at 0.13 s; the clock's rounding there is 8e-8 of the op."""
    def conv(i, m, k, n, groups, inp, out, producer):
        return {"name": f"op{i}", "kind": "conv", "m": m, "k": k, "n": n, "groups": groups,
                "weight_elems": groups * m * k, "input_elems": inp, "output_elems": out,
                "vector_flops": 0.0, "prunable": True, "producers": [producer]}

    matmul = {"name": "op0", "kind": "matmul", "m": 96, "k": 1024, "n": 4096, "groups": 1,
              "weight_elems": 0, "input_elems": 32, "output_elems": 96 * 4096,
              "vector_flops": 0.0, "prunable": False, "producers": ["input"]}
    records = [matmul, conv(1, 96, 1024, 4096, 32, 1024 * 4096, 96 * 4096, "op0"),
               conv(2, 1, 1, 17, 1, 1, 17, "op1"),
               conv(3, 96, 1024, 4096, 1, 1024 * 4096, 96 * 4096, "op2"),
               conv(4, 1, 1, 1, 1, 1, 1, "op3")]
    return Trace.from_records("random", [1, 32], records, {"source": "hypothesis"})


_SLOW_TENSORS = Accelerator(
    name="random-issue26", description="", dram_bandwidth_bytes_per_s=5.05e12,
    tensor_flops_per_s={"fp16": 1e12, "bf16": 1e12},
    vector_flops_per_s={"fp32": 1e11, "fp16": 1e11},
    block_sparse=BlockSparse(False, 1), sparse_tensor=None)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(max_ops=6), hw=accelerators(), fmt=any_formats,
       batch=st.integers(1, 64), fusion=st.sampled_from(dse.FUSIONS),
       scope=st.sampled_from(dse.SCOPES), config=configs)
@example(trace=_tiny_op_late(), hw=_SLOW_TENSORS, fmt=Dense(), batch=5, fusion="unfused",
         scope="gemm", config=SimConfig(buffer_bytes=math.inf, depth=1, launch_overhead_s=0.0,
                                        overlap="full", prefetch_depth=0))
def test_never_below_the_roofline(trace, hw, fmt, batch, fusion, scope, config):
    if scope == "gemm" and not trace.ops["prunable"].any():
        scope = "all"
    try:
        result = simulate(trace, hw, fmt, batch, fusion, scope, config)
    except SimulationError as exc:
        assume("smaller than the smallest tiles" not in str(exc))
        raise
    slack = 1 + 1e-9
    assert result.latency_s * slack >= result.roofline_latency_s
    ops = result.ops
    assert (ops["dram_bytes"] * slack >= ops["roofline_dram_bytes"]).all()
    assert np.all(np.diff(ops["end_s"]) >= 0)
    assert ops["latency_s"].sum() == pytest.approx(result.latency_s, rel=1e-9, abs=1e-18)
    if fusion != "fused_prefetched":  # nothing crosses op boundaries: each op is bounded
        # An op's latency is a difference of two readings of SimPy's one float64 clock
        # (end_s minus the previous op's end), and every advance of that clock during the op
        # rounds by up to half an ulp of the time it reaches: an op of 1.7e-10 s ending at
        # 0.13 s is measured 1.4e-17 s (8e-8 of itself) short. That is the rounding of the
        # same durations added to a large clock, not a cheaper op, so the slack scales with
        # the clock: at most 3 advances (load, compute, store) per tile plus the launch and the
        # wait for a prefetch, each within eps x end_s.
        clock = (3 * ops["tiles"] + 2) * np.finfo(np.float64).eps * ops["end_s"]
        assert (ops["latency_s"] * slack + clock + 1e-18 >= ops["roofline_s"]).all()
    # The gap's causes account for it exactly.
    causes = ops["launch_s"] + ops["buffer_s"] + ops["fill_drain_s"]
    np.testing.assert_allclose(causes, ops["gap_s"], rtol=1e-9, atol=1e-15)
    # Resources never do two things at once.
    for _, part in result.timeline.groupby("resource"):
        part = part.sort_values("start_s")
        assert (part["start_s"].to_numpy()[1:] >= part["end_s"].to_numpy()[:-1]
                - 1e-15 * max(result.latency_s, 1e-30)).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(max_ops=6), hw=accelerators(), batch=st.integers(1, 32),
       fusion=st.sampled_from(dse.FUSIONS), buffer=st.floats(1e5, 1e7),
       factor=st.floats(1.5, 50.0))
def test_a_larger_buffer_never_moves_more_bytes(trace, hw, batch, fusion, buffer, factor):
    try:
        small = simulate(trace, hw, Dense(), batch, fusion, "all",
                         SimConfig(buffer_bytes=buffer, launch_overhead_s=0.0))
    except SimulationError:
        assume(False)
    large = simulate(trace, hw, Dense(), batch, fusion, "all",
                     SimConfig(buffer_bytes=buffer * factor, launch_overhead_s=0.0))
    if fusion == "unfused":  # residency is greedy; without it traffic is per-op monotone
        assert (large.ops["dram_bytes"] <= small.ops["dram_bytes"] * (1 + 1e-12)).all()
        # Only without residency do tiles fall too: when fused, a larger buffer can keep an
        # intermediate on chip, and its bytes come out of the later ops' tile stage
        # (dse/sim/plan.py: (buffer - resident bytes) / depth), so they cut finer while the
        # traffic falls. CI found one (buffer 955,352 B x 1.5, fused): tiles 1 + 4 + 1 became
        # 1 + 1 + 5; a search of the same kind (100 kB x 1.5) kept an output on chip, its
        # consumer went from 2 tiles to 4, and DRAM bytes fell from 135,682 to 67,722.
        assert large.ops["tiles"].sum() <= small.ops["tiles"].sum()


# --- one layer, two tiles: the exact event sequence --------------------------------------------

BW = 1e9  # bytes/s: 1 KB is 1.024 us
PEAK = 2 * 32 * 64 * 32 / 8e-6  # the layer's 131072 FLOPs take 8 us


def _one_layer() -> Trace:
    record = {"name": "fc", "kind": "linear", "m": 32, "k": 64, "n": 32, "groups": 1,
              "weight_elems": 32 * 64, "input_elems": 64 * 32, "output_elems": 32 * 32,
              "vector_flops": 0.0, "prunable": True, "producers": ["input"]}
    return Trace.from_records("one_layer", [64 * 32], [record], {"source": "test"})


def _hw():
    return accelerator_models.load("a100", [f"dram_bandwidth_bytes_per_s={BW}",
                                            f"tensor_flops_per_s.fp16={PEAK}"])


def _events(result) -> list[tuple]:
    tl = result.timeline.sort_values(["start_s", "resource"], kind="stable")
    return [(r.resource, r.phase, r.tile, round(r.start_s * 1e9, 6), round(r.end_s * 1e9, 6))
            for r in tl.itertuples()]


def _two_tiles(**changes) -> Simulation:
    # W = X = 4096 bytes, Y = 2048. A 16384-byte buffer at depth 2 gives 8192-byte stages:
    # the whole layer (10240) does not fit; halving N (weights read twice) gives two 7168-byte
    # tiles of 6144 bytes in (2 W + X over 2) and 1024 out. Halving M instead moves as much;
    # the tie goes to the first cut considered (N).
    config = SimConfig(buffer_bytes=16384, depth=2, launch_overhead_s=0.0).__dict__ | changes
    return simulate(_one_layer(), _hw(), "dense", 1, "unfused", "gemm", SimConfig(**config))


def test_two_tiles_are_planned_as_computed_by_hand():
    ops = _two_tiles().ops
    assert ops["tiles"].tolist() == [2]
    assert ops["dram_bytes"].tolist() == [2 * 4096 + 4096 + 2048]
    assert ops["roofline_dram_bytes"].tolist() == [4096 + 4096 + 2048]
    assert ops["tile_bytes"].tolist() == [4096 + 2048 + 1024]


def test_double_buffering_event_sequence():
    # Load 1 follows load 0 on DRAM while tile 0 computes; store 0 waits for DRAM behind load 1.
    assert _events(_two_tiles()) == [
        ("dram", "load", 0, 0.0, 6144.0),
        ("dram", "load", 1, 6144.0, 12288.0),
        ("tensor", "compute", 0, 6144.0, 10144.0),
        ("dram", "store", 0, 12288.0, 13312.0),
        ("tensor", "compute", 1, 12288.0, 16288.0),
        ("dram", "store", 1, 16288.0, 17312.0),
    ]


def test_single_buffering_event_sequence():
    assert _events(_two_tiles(depth=1, buffer_bytes=8192)) == [
        ("dram", "load", 0, 0.0, 6144.0),
        ("tensor", "compute", 0, 6144.0, 10144.0),
        ("dram", "store", 0, 10144.0, 11168.0),
        ("dram", "load", 1, 11168.0, 17312.0),
        ("tensor", "compute", 1, 17312.0, 21312.0),
        ("dram", "store", 1, 21312.0, 22336.0),
    ]


def test_full_overlap_event_sequence_and_gap():
    result = _two_tiles(overlap="full")
    assert _events(result) == [
        ("dram", "load", 0, 0.0, 7168.0),
        ("tensor", "compute", 0, 0.0, 4000.0),
        ("tensor", "compute", 1, 4000.0, 8000.0),
        ("dram", "load", 1, 7168.0, 14336.0),
    ]
    op = result.ops.iloc[0]
    assert op["roofline_s"] == pytest.approx(10.24e-6, rel=1e-12)
    assert op["buffer_s"] == pytest.approx(4.096e-6, rel=1e-9)  # the weights read twice
    assert op["fill_drain_s"] == pytest.approx(0.0, abs=1e-18)
    assert op["why"] == "buffer-bound"


def test_launch_overhead_delays_everything_and_is_named():
    result = _two_tiles(launch_overhead_s=1e-6)
    shifted = [(r, p, t, s + 1000.0, e + 1000.0) for r, p, t, s, e in _events(_two_tiles())]
    assert _events(result) == shifted
    op = result.ops.iloc[0]
    assert op["launch_s"] == 1e-6
    assert op["latency_s"] == pytest.approx(18.312e-6, rel=1e-12)
    assert op["gap_s"] == pytest.approx(18.312e-6 - 10.24e-6, rel=1e-9)


def test_event_count_is_reported():
    result = _two_tiles()
    assert result.events > 2 * 6  # each interval is at least a request and a timeout
    assert result.summary()["events"] == result.events


# --- fusion, spills and prefetch ---------------------------------------------------------------

def _chain() -> Trace:
    """fc1 (64 -> 64 features x 64 tokens) -> fc2: one intermediate of 8192 bytes."""
    def linear(name, producers):
        return {"name": name, "kind": "linear", "m": 64, "k": 64, "n": 64, "groups": 1,
                "weight_elems": 64 * 64, "input_elems": 64 * 64, "output_elems": 64 * 64,
                "vector_flops": 0.0, "prunable": True, "producers": producers}
    return Trace.from_records("chain", [64 * 64],
                              [linear("fc1", ["input"]), linear("fc2", ["fc1"])],
                              {"source": "test"})


def test_fused_intermediate_stays_on_chip_when_it_fits():
    result = simulate(_chain(), _hw(), "dense", 1, "fused", "all",
                      SimConfig(buffer_bytes=1e6, launch_overhead_s=1e-6))
    ops = result.ops
    assert ops["resident_output"].tolist() == [True, False]
    # fc1 reads the model input and its weights; fc2 its weights and writes the model output.
    assert ops["dram_bytes"].tolist() == [8192 + 8192, 8192 + 8192]
    assert ops["kernel_start"].tolist() == [True, False]  # one fused kernel, one launch
    assert result.summary()["kernels"] == 1


def test_fused_intermediate_spills_when_it_does_not_fit():
    # Smallest tiles: 16 rows of weights (2048) + 16 columns of input (2048) + 16 x 16 outputs
    # (512) = 4608 bytes, 9216 at depth 2; the 8192-byte intermediate on top does not fit.
    result = simulate(_chain(), _hw(), "dense", 1, "fused", "all",
                      SimConfig(buffer_bytes=12000, launch_overhead_s=1e-6))
    ops = result.ops
    assert ops["resident_output"].tolist() == [False, False]
    assert ops["kernel_start"].tolist() == [True, True]
    assert (ops["dram_bytes"] > ops["roofline_dram_bytes"]).all()
    assert (ops["buffer_s"] > 0).all()


def test_unfused_keeps_nothing_on_chip():
    result = simulate(_chain(), _hw(), "dense", 1, "unfused", "all",
                      SimConfig(buffer_bytes=1e6))
    assert not result.ops["resident_output"].any()
    assert result.ops["kernel_start"].all()


@pytest.mark.parametrize("depth, prefetched", [(0, 0.0), (1, 8192.0)])
def test_next_op_weights_prefetch(depth, prefetched):
    result = simulate(_chain(), _hw(), "dense", 1, "fused_prefetched", "all",
                      SimConfig(buffer_bytes=1e6, launch_overhead_s=0.0, prefetch_depth=depth))
    ops = result.ops
    assert ops["prefetch_bytes"].tolist() == [0.0, prefetched]
    rows = result.timeline[result.timeline["phase"] == "prefetch"]
    assert rows["bytes"].sum() == prefetched
    if prefetched:
        assert (rows["op"] == "fc2").all()
        assert rows["end_s"].max() <= ops["start_s"].iloc[1] + 1e-15  # before fc2 runs
    no_prefetch = simulate(_chain(), _hw(), "dense", 1, "fused", "all",
                           SimConfig(buffer_bytes=1e6, launch_overhead_s=0.0))
    assert result.latency_s <= no_prefetch.latency_s * (1 + 1e-12)


# --- settings and errors -----------------------------------------------------------------------

def test_default_buffer_is_shared_memory_times_sms():
    result = simulate("toy_hybrid", "a100", "2:4", 1, "unfused", "gemm")
    assert result.buffer_bytes == 108 * 164 * 1024
    l2 = simulate("toy_hybrid", "a100", "2:4", 1, "unfused", "gemm", SimConfig(buffer="l2"))
    assert l2.buffer_bytes == 40 * 2**20
    assert result.launch_overhead_s == DEFAULT_LAUNCH_OVERHEAD_S


def test_spec_launch_overhead_is_used():
    hw = accelerator_models.load("a100", ["kernel_launch_overhead_s=2e-6"])
    assert simulate("toy_hybrid", hw, "2:4").launch_overhead_s == 2e-6


@pytest.mark.parametrize("config, words", [
    (SimConfig(buffer_bytes=1000), "smaller than the smallest tiles"),
    (SimConfig(launch_overhead_s=-1e-6), "launch_overhead_s -1e-06"),
    (SimConfig(depth=0), "depth 0"),
    (SimConfig(prefetch_depth=-1), "prefetch_depth -1"),
    (SimConfig(buffer_bytes=-5.0), "positive size"),
    (SimConfig(buffer="dram"), "buffer 'dram'"),
    (SimConfig(overlap="perfect"), "overlap 'perfect'"),
])
def test_bad_settings_are_one_clear_line(config, words):
    with pytest.raises(SimulationError) as info:
        simulate("convnext_tiny", "a100", "2:4", 1, "unfused", "gemm", config)
    message = str(info.value)
    assert words in message and "\n" not in message


def test_missing_on_chip_size_says_what_to_set():
    with pytest.raises(SimulationError, match="buffer-bytes"):
        simulate("toy_hybrid", "b200", "2:4")


def test_utilization_matches_busy_time():
    result = _two_tiles()
    util = result.utilization
    width = util["end_s"] - util["start_s"]
    for resource, part in util.groupby("resource"):
        busy = (part["utilization"] * width.loc[part.index]).sum()
        rows = result.timeline[result.timeline["resource"] == resource]
        assert busy == pytest.approx((rows["end_s"] - rows["start_s"]).sum(), abs=1e-18)


def _busy_reference(starts, ends, edges):
    """Slow reference: clip every interval to every bin."""
    out = np.zeros(len(edges) - 1)
    for s, e in zip(starts, ends, strict=True):
        for i in range(len(edges) - 1):
            out[i] += max(0.0, min(e, edges[i + 1]) - max(s, edges[i]))
    return out


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 3)), max_size=30),
       st.integers(1, 20))
def test_busy_between_equals_the_reference(pieces, bins):
    # Non-overlapping intervals, as a capacity-one resource produces.
    starts, ends, t = [], [], 0.0
    for gap, length in pieces:
        t += gap
        starts.append(t)
        t += length
        ends.append(t)
    edges = np.linspace(0.0, max(t, 1.0), bins + 1)
    got = busy_between(np.array(starts), np.array(ends), edges)
    np.testing.assert_allclose(got, _busy_reference(starts, ends, edges), atol=1e-9)


def test_frames_carry_the_design():
    result = simulate("toy_hybrid", "a100", "2:4", 2, "fused", "gemm")
    for frame in (result.ops, result.timeline, result.utilization):
        assert frame["model"].unique().tolist() == ["toy_hybrid"]
        assert frame["batch"].unique().tolist() == [2]
        assert frame["fusion"].unique().tolist() == ["fused"]
    summary = result.summary()
    assert {k: summary[k] for k in result.design} == result.design
    assert summary["latency_s"] == result.ops["end_s"].iloc[-1]
    assert result.ops["latency_s"].sum() == pytest.approx(summary["latency_s"], rel=1e-12)


@pytest.mark.parametrize("field, value, buffer", [
    ("sm_count", 54, "smem"),
    ("shared_memory_per_sm_bytes", 32768, "smem"),
    ("l2_bytes", 2**21, "l2"),
    ("kernel_launch_overhead_s", 1e-5, "smem"),
])
def test_every_simulator_field_moves_the_simulation(field, value, buffer):
    # The roofline ignores these fields (tests/test_accelerator_models.py); the simulator is
    # what they move.
    config = SimConfig(buffer=buffer)
    base = simulate("convnext_tiny", "a100", "2:4", 32, "fused", "all", config)
    changed = simulate("convnext_tiny", accelerator_models.load("a100", [f"{field}={value}"]),
                       "2:4", 32, "fused", "all", config)
    assert changed.latency_s != base.latency_s
    assert changed.roofline_latency_s == base.roofline_latency_s


@pytest.mark.parametrize("fusion", dse.FUSIONS)
def test_summary_causes_add_up_to_the_gap(fusion):
    result = simulate("swin_tiny", "a100", "2:4", 8, fusion, "all",
                      SimConfig(buffer_bytes=4e6, depth=2))
    s = result.summary()
    assert s["gap_s"] == pytest.approx(result.latency_s - result.roofline_latency_s)
    assert s["gap_launch_s"] + s["gap_buffer_s"] + s["gap_fill_drain_s"] == pytest.approx(
        s["gap_s"], rel=1e-9)
    assert s["gap_launch_s"] == pytest.approx(s["kernels"] * result.launch_overhead_s)


@pytest.mark.parametrize("overlap", ["pipelined", "full"])
def test_progress_hears_of_every_op(overlap):
    heard = []
    result = simulate("toy_hybrid", "a100", "2:4", 4, "unfused", "all",
                      SimConfig(overlap=overlap), progress=lambda done, total: heard.append(
                          (done, total)))
    n = len(result.ops)
    assert heard == [(k, n) for k in range(1, n + 1)]


def _linear_then_activation() -> Trace:
    fc = {"name": "fc", "kind": "linear", "m": 64, "k": 64, "n": 64, "groups": 1,
          "weight_elems": 64 * 64, "input_elems": 64 * 64, "output_elems": 64 * 64,
          "vector_flops": 0.0, "prunable": True, "producers": ["input"]}
    act = {"name": "act", "kind": "activation", "m": 0, "k": 0, "n": 0, "groups": 1,
           "weight_elems": 0, "input_elems": 64 * 64, "output_elems": 64 * 64,
           "vector_flops": 8.0 * 64 * 64, "prunable": False, "producers": ["fc"]}
    return Trace.from_records("fc_act", [64 * 64], [fc, act], {"source": "test"})


@pytest.mark.parametrize("fusion, resident, kernels", [("unfused", False, 2),
                                                       ("fused", True, 1)])
def test_an_activation_fuses_into_its_producers_epilogue(fusion, resident, kernels):
    # 12000 bytes hold the smallest tiles but not the 8192-byte intermediate beside them
    # (test_fused_intermediate_spills_when_it_does_not_fit): the epilogue needs no room.
    result = simulate(_linear_then_activation(), _hw(), "dense", 1, fusion, "all",
                      SimConfig(buffer_bytes=12000, launch_overhead_s=1e-6))
    assert result.ops["resident_output"].tolist()[0] is resident
    assert result.summary()["kernels"] == kernels
    if fusion == "fused":  # nothing crosses DRAM between the two
        assert result.ops["dram_bytes"].iloc[1] == 8192  # the model output only


def test_reductions_cut_their_input():
    # EfficientNet's squeeze-excite means read a whole feature map into a few channels; cut by
    # their output alone their smallest tile exceeded the A100's default buffer at batch 64.
    result = simulate("efficientnet_b4", "a100", "2:4", 64, "fused", "all")
    assert result.latency_s >= result.roofline_latency_s


# --- rules:NAME (fusion-rule tables) -------------------------------------------------------------

RULES = "rules:inductor-cpu"


@pytest.mark.parametrize("model", ["convnext_tiny", "swin_tiny", "toy_hybrid"])
@pytest.mark.parametrize("fmt", ["dense", "2:4", "unstructured@90%"])
@pytest.mark.parametrize("batch", [1, 16])
def test_unlimited_simulation_equals_the_roofline_under_rules(model, fmt, batch):
    result = simulate(model, "a100", fmt, batch, RULES, "all", UNLIMITED)
    ref = _per_op_roofline(model, "a100", fmt, batch, RULES, "all")
    assert list(result.ops["op"]) == list(ref["op"])
    np.testing.assert_allclose(result.ops["latency_s"], ref["time_s"], rtol=ROOFLINE_TOL,
                               atol=1e-18)
    np.testing.assert_allclose(result.ops["dram_bytes"], result.ops["roofline_dram_bytes"],
                               rtol=1e-12)
    assert result.latency_s == pytest.approx(result.roofline_latency_s, rel=ROOFLINE_TOL)
    rows = dse.evaluate(model, "a100", fmt, batch, fusion=RULES, scope="all")
    assert result.roofline_latency_s == rows["latency_s"].iloc[-1]


@pytest.mark.parametrize("buffer", [1e6, 4e6, 4e7])
@pytest.mark.parametrize("overlap", ["pipelined", "full"])
def test_rules_never_beat_the_roofline_and_sit_between_unfused_and_fused(buffer, overlap):
    config = SimConfig(buffer_bytes=buffer, overlap=overlap, launch_overhead_s=0.0)
    latency = {f: simulate("swin_tiny", "a100", "2:4", 8, f, "all", config)
               for f in ("unfused", RULES, "fused")}
    rules = latency[RULES]
    assert rules.latency_s >= rules.roofline_latency_s * (1 - 1e-9)
    assert (rules.ops["dram_bytes"] >= rules.ops["roofline_dram_bytes"] * (1 - 1e-9)).all()
    # Fewer intermediates on chip than fused, more than unfused: DRAM traffic in between.
    traffic = {f: r.ops["dram_bytes"].sum() for f, r in latency.items()}
    assert traffic["unfused"] >= traffic[RULES] >= traffic["fused"] * (1 - 1e-9)
