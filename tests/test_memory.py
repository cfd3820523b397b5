"""Peak resident memory, fits and the largest batch that fits (dse.roofline.memory)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accelerator_models
from dse.roofline.memory import activation_peak, evaluate_memory
from tests.strategies import accelerators, any_formats, traces
from tests.test_energy import HW, _op
from workloads import MAX_BATCH, Trace

#: input (8) -> a (linear 4 x 8 over 5 tokens: 20 out) -> b (5), c (7) both read a -> d (3)
#: reads b and c. Live elements per sample at each op: a: 8 + 20 = 28; b: 20 + 5 = 25;
#: c: 20 + 5 + 7 = 32 (a is still read by c); d: 5 + 7 + 3 = 15. Peak 32.
BRANCHY = Trace.from_records("branchy", [8], [
    _op("a", "linear", 4, 8, 5, 32, 8, 20, 0, True, ["input"]),
    _op("b", "norm", 0, 0, 0, 4, 20, 5, 0, False, ["a"]),
    _op("c", "activation", 0, 0, 0, 0, 20, 7, 0, False, ["a"]),
    _op("d", "elementwise", 0, 0, 0, 0, 12, 3, 0, False, ["b", "c"]),
], {"source": "test"})


def _row(hw=HW, fmt="dense", batch=1, fusion="unfused", trace=BRANCHY, scope="gemm"):
    table = evaluate_memory(trace, hw, [fmt], [batch], fusion=fusion, scope=scope)
    return table.iloc[-1]


def test_activation_peak_is_a_hand_count_on_a_branching_graph():
    unfused = activation_peak(BRANCHY, "unfused")
    assert (unfused.dram_elems, unfused.onchip_elems) == (32.0, 0.0)
    fused = activation_peak(BRANCHY, "fused")
    assert (fused.dram_elems, fused.onchip_elems) == (8.0, 32.0)  # input in DRAM; a+b+c on chip
    assert activation_peak(BRANCHY, "fused_prefetched") == fused


@pytest.mark.parametrize("fmt, weights", [
    ("dense", 2 * 32 + 2 * 4),
    ("2:4", 2 * 16 + 16 * 2 / 8 + 2 * 4),  # 16 values, 2 bits of index each; the norm's 4
])
@pytest.mark.parametrize("scope", ["gemm", "all"])
def test_peak_memory_is_weights_in_their_storage_plus_the_live_activations(fmt, weights, scope):
    row = _row(fmt=fmt, batch=3, scope=scope)
    assert row["weight_storage_bytes"] == pytest.approx(weights)
    assert row["activation_peak_bytes"] == 2 * 32 * 3
    assert row["peak_memory_bytes"] == pytest.approx(weights + 2 * 32 * 3)
    assert row["onchip_peak_bytes"] == 0


def test_fused_keeps_intermediates_on_chip_and_checks_them_against_the_l2():
    row = _row(fusion="fused", batch=10, hw=dataclasses.replace(HW, l2_bytes=2 * 32 * 10))
    assert row["activation_peak_bytes"] == 2 * 8 * 10
    assert row["onchip_peak_bytes"] == 2 * 32 * 10 and row["fits_on_chip"]
    row = _row(fusion="fused", batch=11, hw=dataclasses.replace(HW, l2_bytes=2 * 32 * 10))
    assert not row["fits_on_chip"]


def test_largest_batch_that_fits_is_the_edge_of_fits():
    capacity = 72 + 64 * 1000 + 10  # weights 72 B, 64 B of activations a sample
    hw = dataclasses.replace(HW, dram_capacity_bytes=capacity)
    row = _row(hw=hw)
    assert row["largest_batch_that_fits"] == 1000
    assert _row(hw=hw, batch=1000)["fits"]
    assert not _row(hw=hw, batch=1001)["fits"]
    assert _row(hw=dataclasses.replace(HW, dram_capacity_bytes=50))["largest_batch_that_fits"] == 0
    assert _row(hw=dataclasses.replace(HW, dram_capacity_bytes=1e30))[
        "largest_batch_that_fits"] == MAX_BATCH


def test_unknown_capacity_gives_na():
    row = _row(hw=dataclasses.replace(HW, dram_capacity_bytes=None))
    assert row["fits"] is None or str(row["fits"]) == "<NA>"
    assert str(row["largest_batch_that_fits"]) == "<NA>"


@pytest.mark.parametrize("name, gib", [("a100-40gb", 40), ("a100-80gb", 80), ("h100-sxm", 80),
                                       ("h200", 141), ("mi300x", 192), ("l4", 24)])
def test_catalog_capacities(name, gib):
    assert accelerator_models.load(name).dram_capacity_bytes == gib * 2**30


def test_convnext_tiny_fits_on_an_a100_at_batch_256_and_not_at_a_huge_batch():
    table = evaluate_memory("convnext_tiny", "a100", ["2:4"], [256, 65536])
    assert list(table["fits"]) == [True, False, True, False]
    largest = int(table["largest_batch_that_fits"].iloc[0])
    assert 256 < largest < 65536


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(max_ops=6), hw=accelerators(), fmt=any_formats,
       batch=st.sampled_from([1, 7, 512]), small=st.floats(1e3, 1e9), factor=st.floats(1, 100),
       fusion=st.sampled_from(["unfused", "fused", "fused_prefetched"]))
def test_more_capacity_never_turns_a_fitting_design_into_a_non_fitting_one(
        trace, hw, fmt, batch, small, factor, fusion):
    rows = [evaluate_memory(trace, dataclasses.replace(hw, dram_capacity_bytes=c), [fmt],
                            [batch], fusion=fusion, scope="all").iloc[-1]
            for c in (small, small * factor)]
    assert rows[1]["fits"] or not rows[0]["fits"]
    assert rows[1]["largest_batch_that_fits"] >= rows[0]["largest_batch_that_fits"]
    assert rows[0]["fits"] == (rows[0]["largest_batch_that_fits"] >= batch)
