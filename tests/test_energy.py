"""Energy, power and the power cap (dse.roofline.energy): by value on hand-made traces."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accelerator_models
import dse
from accelerator_models import Accelerator, BlockSparse, SparseTensorCore
from accelerator_models.loader import ENERGY_FIELDS
from dse.roofline.energy import ENERGY_COLUMNS, energy_frame, evaluate_energy, evaluate_layer_frames
from tests.strategies import accelerators, any_formats, traces
from workloads import Trace

PARTS = ("energy_tensor_j", "energy_sparse_tensor_j", "energy_vector_j", "energy_weights_j",
         "energy_index_j", "energy_features_j", "energy_static_j")


def _op(name, kind, m, k, n, weight, inp, out, vflops, prunable, producers):
    return {"name": name, "kind": kind, "m": m, "k": k, "n": n, "groups": 1,
            "weight_elems": weight, "input_elems": inp, "output_elems": out,
            "vector_flops": float(vflops), "prunable": prunable, "producers": producers}


#: A linear layer (W 8 x 16, no bias, 4 tokens a sample) and an activation: per sample
#: FLOPs 2*8*16*4 = 1024, input 64, output 32, activation 32 in / 32 out, 256 vector FLOPs.
TOY = Trace.from_records("toy", [4, 16], [
    _op("fc", "linear", 8, 16, 4, 128, 64, 32, 0, True, ["input"]),
    _op("act", "activation", 0, 0, 0, 0, 32, 32, 256, False, ["fc"]),
], {"source": "test"})

#: Round numbers: 1e12 FLOP/s everywhere, 1e9 B/s DRAM; energies in pJ.
HW = Accelerator(
    name="toy-gpu", description="", dram_bandwidth_bytes_per_s=1e9,
    tensor_flops_per_s={"fp16": 1e12}, vector_flops_per_s={"fp32": 1e12, "fp16": 1e12},
    block_sparse=BlockSparse(True, 1), sparse_tensor=SparseTensorCore(((2, 4),), 1.0),
    dram_pj_per_byte=10.0, onchip_pj_per_byte=1.0, tensor_pj_per_flop={"fp16": 0.5},
    sparse_tensor_pj_per_flop={"fp16": 0.75}, vector_pj_per_flop={"fp32": 4.0, "fp16": 2.0},
    static_power_w=1.0, board_power_w=1000.0, dram_capacity_bytes=1e9)


def _energy(hw=HW, fmt="dense", batch=2, fusion="unfused", scope="all", trace=TOY):
    table = evaluate_energy(trace, hw, [fmt], [batch], fusion=fusion, scope=scope)
    return table[table["format"] == dse.roofline.energy.parse_format(fmt).name].iloc[0]


def test_dense_energy_equals_a_hand_count():
    row = _energy()
    b = 2
    tensor = 1024 * b * 0.5  # pJ
    vector = 256 * b * 2.0
    weights = 2 * 128 * (10 + 1)
    features = 2 * (64 + 32 + 32 + 32) * b * (10 + 1)  # unfused: all features via DRAM
    latency = row["latency_s"]
    assert row["energy_tensor_j"] == pytest.approx(tensor * 1e-12)
    assert row["energy_vector_j"] == pytest.approx(vector * 1e-12)
    assert row["energy_weights_j"] == pytest.approx(weights * 1e-12)
    assert row["energy_features_j"] == pytest.approx(features * 1e-12)
    assert row["energy_index_j"] == 0.0 and row["energy_sparse_tensor_j"] == 0.0
    assert row["energy_static_j"] == pytest.approx(1.0 * latency)
    total = (tensor + vector + weights + features) * 1e-12 + latency
    assert row["energy_j"] == pytest.approx(total)
    assert row["energy_per_inference_j"] == pytest.approx(total / b)
    assert row["avg_power_w"] == pytest.approx(total / latency)
    assert row["edp_js"] == pytest.approx(total * latency)
    assert not row["power_capped"] and row["capped_latency_s"] == latency
    assert row["energy_unpriced"] == ""


def test_2_4_prices_index_bytes_and_the_sparse_tensor_core():
    row = _energy(fmt="2:4")
    b = 2
    nnz = 8 * 16 / 2
    assert row["energy_sparse_tensor_j"] == pytest.approx(nnz * 2 * 4 * b * 0.75e-12)
    assert row["energy_tensor_j"] == 0.0
    assert row["energy_index_j"] == pytest.approx(nnz * 2 / 8 * 11e-12)  # 2 bits a nonzero
    assert row["energy_weights_j"] == pytest.approx(nnz * 2 * 11e-12)


@pytest.mark.parametrize("fmt", ["dense", "2:4", "block4@75%", "unstructured@0.9"])
@pytest.mark.parametrize("fusion", ["unfused", "fused", "fused_prefetched"])
def test_energy_is_the_sum_of_its_parts(fmt, fusion):
    row = _energy(fmt=fmt, fusion=fusion)
    assert sum(row[p] for p in PARTS) == pytest.approx(row["energy_j"], rel=1e-12)
    traffic = row["energy_weights_j"] + row["energy_index_j"] + row["energy_features_j"]
    assert row["energy_dram_j"] + row["energy_onchip_j"] == pytest.approx(traffic, rel=1e-12)


def test_fusion_moves_feature_energy_from_dram_to_chip_only():
    unfused, fused = _energy(fusion="unfused"), _energy(fusion="fused")
    # fused: only the model input (64) and output (32) per sample cross DRAM.
    assert fused["energy_features_j"] == pytest.approx(
        2 * ((64 + 32) * 10 + (64 + 32 + 32 + 32)) * 2 * 1e-12)
    assert fused["energy_onchip_j"] == pytest.approx(unfused["energy_onchip_j"])
    assert fused["energy_tensor_j"] == unfused["energy_tensor_j"]


def test_doubling_dram_energy_moves_only_the_dram_part():
    base = _energy()
    doubled = _energy(hw=dataclasses.replace(HW, dram_pj_per_byte=20.0))
    assert doubled["energy_dram_j"] == pytest.approx(2 * base["energy_dram_j"])
    for column in ("energy_onchip_j", "energy_tensor_j", "energy_vector_j", "energy_static_j",
                   "latency_s", "capped_latency_s"):
        assert doubled[column] == base[column], column
    assert doubled["energy_j"] - base["energy_j"] == pytest.approx(base["energy_dram_j"])


def test_a_capped_design_runs_at_the_board_limit_and_latency_times_power_is_energy():
    hw = dataclasses.replace(HW, board_power_w=0.505, static_power_w=0.5)
    row = _energy(hw=hw, batch=64)
    assert row["power_capped"]
    assert row["capped_latency_s"] > row["latency_s"]
    assert row["avg_power_w"] == pytest.approx(0.505)
    assert row["capped_latency_s"] * row["avg_power_w"] == pytest.approx(row["energy_j"])
    dynamic = row["energy_j"] - row["energy_static_j"]
    assert row["capped_latency_s"] == pytest.approx(dynamic / (0.505 - 0.5))
    assert row["energy_static_j"] == pytest.approx(0.5 * row["capped_latency_s"])


def test_missing_figures_are_named_and_price_zero():
    hw = dataclasses.replace(HW, onchip_pj_per_byte=None, static_power_w=None,
                             sparse_tensor_pj_per_flop={}, board_power_w=None)
    dense, sparse = _energy(hw=hw), _energy(hw=hw, fmt="2:4")
    assert dense["energy_unpriced"] == "onchip_pj_per_byte; static_power_w"
    assert "sparse_tensor_pj_per_flop.fp16 (dense tensor figure used)" in sparse["energy_unpriced"]
    assert dense["energy_onchip_j"] == 0.0 and dense["energy_static_j"] == 0.0
    assert not dense["power_capped"]
    assert sparse["energy_sparse_tensor_j"] == pytest.approx(64 * 2 * 4 * 2 * 0.5e-12)


def test_energy_frame_adds_its_columns_to_evaluate_rows_unchanged():
    designs = dse.roofline.evaluate(TOY, HW, ["2:4"], [1, 8], fusion=["unfused", "fused"],
                                    scope="gemm", categorical=True)
    layers = evaluate_layer_frames(TOY, [HW], ["2:4"], [1, 8], ["unfused", "fused"], ["gemm"])
    out = energy_frame(designs, layers, TOY, HW)
    assert list(out.columns) == [*designs.columns, *ENERGY_COLUMNS]
    assert out[list(designs.columns)].equals(designs)


def test_catalog_accelerators_price_convnext_tiny_at_batch_1_and_256():
    table = evaluate_energy("convnext_tiny", "a100", ["2:4"], [1, 256])
    assert (table["energy_j"] > 0).all() and table["avg_power_w"].between(1, 400).all()
    assert not table["power_capped"].iloc[0]


# --- the spec fields -----------------------------------------------------------------------

PERTURB = {  # field -> (base overrides, perturbation, format, numerics)
    "dram_pj_per_byte": ([], "dram_pj_per_byte=100", "dense", dse.Numerics()),
    "onchip_pj_per_byte": ([], "onchip_pj_per_byte=5", "dense", dse.Numerics()),
    "static_power_w": ([], "static_power_w=50", "dense", dse.Numerics()),
    "board_power_w": ([], "board_power_w=1", "dense", dse.Numerics()),
    "dram_capacity_bytes": ([], "dram_capacity_bytes=1e3", "dense", dse.Numerics()),
}
for _path in ENERGY_FIELDS:
    _table, _, _dtype = _path.partition(".")
    if _dtype:
        _numerics = dse.Numerics(vector_dtype=_dtype, csr_dtype=_dtype) if _table.startswith(
            "vector") else dse.Numerics(dtype=_dtype)
        _fmt = "2:4" if _table.startswith("sparse") else "dense"
        _rates = ([f"tensor_flops_per_s.{_dtype}=1e14"] if not _table.startswith("vector")
                  else [f"vector_flops_per_s.{_dtype}=1e13"])
        PERTURB[_path] = (_rates, f"{_path}=123", _fmt, _numerics)


def test_every_energy_field_has_a_perturbation():
    assert set(PERTURB) == set(ENERGY_FIELDS)


@pytest.mark.parametrize("path", ENERGY_FIELDS)
def test_energy_fields_move_energy_or_memory_and_never_latency(path):
    from dse.roofline.memory import evaluate_memory

    base_overrides, perturbation, fmt, numerics = PERTURB[path]
    base = accelerator_models.load("h100", base_overrides)
    changed = accelerator_models.load("h100", [*base_overrides, perturbation])
    assert base.field_value(path) != changed.field_value(path)

    def run(acc):
        energy = evaluate_energy(TOY, acc, [fmt], [4096], scope="all", numerics=numerics)
        memory = evaluate_memory(TOY, acc, [fmt], [4096], scope="all", numerics=numerics)
        return energy.drop(columns="hardware"), memory.drop(columns="hardware")

    (e0, m0), (e1, m1) = run(base), run(changed)
    latency = ["latency_s", "dense_latency_s", "compute_s", "memory_s"]
    assert e0[latency].equals(e1[latency])
    moved = [c for c in (*ENERGY_COLUMNS, "fits", "largest_batch_that_fits")
             if not (e0 if c in e0 else m0)[c].equals((e1 if c in e1 else m1)[c])]
    assert moved, path


@pytest.mark.parametrize("name", accelerator_models.catalog_names())
def test_every_catalog_energy_and_capacity_figure_is_sourced_or_unverified(name):
    acc = accelerator_models.load(name)
    assert acc.board_power_w and acc.dram_capacity_bytes
    for path in ENERGY_FIELDS:
        if path.partition(".")[0].endswith("pj_per_flop") and acc.field_value(path) is not None:
            assert path in acc.unverified, path  # derived from the board power, never measured
    assert any("board_power_w" in s for s in acc.sources)


def test_bad_energy_values_are_spec_errors():
    with pytest.raises(accelerator_models.SpecError, match="dram_pj_per_byte"):
        accelerator_models.load("a100", ["dram_pj_per_byte=-1"])
    with pytest.raises(accelerator_models.SpecError, match="static_power_w"):
        accelerator_models.load("a100", ["static_power_w=500"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(max_ops=5), hw=accelerators(), fmt=any_formats,
       batch=st.sampled_from([1, 3, 64]), dram=st.floats(0.1, 100), onchip=st.floats(0.1, 10),
       static=st.floats(0.1, 50), board=st.floats(51, 1000),
       fusion=st.sampled_from(["unfused", "fused", "fused_prefetched"]))
def test_energy_is_additive_and_capped_power_is_the_board_limit(trace, hw, fmt, batch, dram,
                                                                onchip, static, board, fusion):
    hw = dataclasses.replace(hw, dram_pj_per_byte=dram, onchip_pj_per_byte=onchip,
                             tensor_pj_per_flop={"fp16": 0.7}, vector_pj_per_flop={
                                 "fp32": 5.0, "fp16": 3.0}, static_power_w=static,
                             board_power_w=board)
    row = evaluate_energy(trace, hw, [fmt], [batch], fusion=fusion, scope="all").iloc[-1]
    assert sum(row[p] for p in PARTS) == pytest.approx(row["energy_j"], rel=1e-9)
    assert row["capped_latency_s"] >= row["latency_s"]
    assert row["avg_power_w"] <= board * (1 + 1e-9)
    if row["power_capped"]:
        assert row["avg_power_w"] == pytest.approx(board)
    assert math.isclose(row["capped_latency_s"] * row["avg_power_w"], row["energy_j"],
                        rel_tol=1e-9)


def test_evaluate_prints_energy_power_cap_and_memory(capsys, tmp_path):
    from dse.cli import main

    out_file = tmp_path / "designs.json"
    argv = ["evaluate", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4",
            "--batch", "1", "--batch", "256", "--out", str(out_file)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for needle in ("energy/inference (mJ)", "avg power (W)", "power cap", "peak memory (GiB)",
                   "fits", "largest batch that fits"):
        assert needle in out, needle
    import json

    rows = json.loads(out_file.read_text())
    assert len(rows) == 4
    for row in rows:  # the file carries what the table shows
        assert row["energy_per_inference_j"] > 0 and row["avg_power_w"] > 0
        assert row["fits"] is True and row["peak_memory_bytes"] > row["weight_storage_bytes"]


def test_feature_overhead_study_has_the_energy_view():
    import numpy as np

    from dse.explore import feature_overhead
    from workloads import load_trace

    study = feature_overhead([load_trace("convnext_tiny")], "a100", (), ["2:4"], [1, 32])
    row = study.shares.set_index("format").loc["2:4"]
    assert 0 < row["feature_energy_share_batch_1"] < 1
    direct = study.evaluated
    assert np.allclose(direct["feature_energy_share"],
                       direct["energy_features_j"] / direct["energy_j"])


def test_csr_work_is_priced_at_the_csr_dtype_and_elementwise_at_the_vector_dtype():
    """Issue 26's planted bug: CSR FLOPs priced at the vector dtype. Here the two dtypes cost
    4 and 2 pJ per FLOP, so the bug would move energy_vector_j by a hand-countable amount."""
    numerics = dse.Numerics(dtype="fp16", vector_dtype="fp16", csr_dtype="fp32")
    table = evaluate_energy(TOY, HW, ["unstructured@75%"], [2], fusion="unfused", scope="all",
                            numerics=numerics)
    row = table[table["format"] != "dense"].iloc[0]
    b = 2
    nnz = 8 * 16 * 0.25                     # 32 nonzeros of W
    csr = 2 * nnz * 4 * b * 4.0             # 2 FLOPs a nonzero per token, 4 tokens, fp32: 4 pJ
    activation = 256 * b * 2.0              # elementwise at fp16: 2 pJ
    assert row["energy_vector_j"] == pytest.approx((csr + activation) * 1e-12)
    assert row["energy_tensor_j"] == 0.0 and row["energy_sparse_tensor_j"] == 0.0


def test_a_design_exactly_at_the_board_limit_is_not_capped():
    """At a board power where E_d / board is the latency exactly, the cap stretches nothing
    (capped latency = max(latency, E_d / (board - P_s)), with no static power here): not
    power-capped, as ``dse evaluate`` prints it."""
    free = dataclasses.replace(HW, static_power_w=None, board_power_w=None)
    row = _energy(hw=free)
    dynamic, latency = row["energy_j"], row["latency_s"]  # no static power: all dynamic
    board = dynamic / latency
    for _ in range(64):  # the float nearby whose E_d / board is the latency exactly
        if dynamic / board == latency:
            break
        board = math.nextafter(board, math.inf if dynamic / board > latency else -math.inf)
    assert dynamic / board == latency
    tie = _energy(hw=dataclasses.replace(free, board_power_w=board))
    assert not tie["power_capped"]
    assert tie["capped_latency_s"] == latency

