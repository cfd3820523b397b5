"""The calibrated expectation of a language-model step (issue 24): an MoE expert linear is priced
as the GEMMs of the experts a step touches, each over the tokens routed to it; weights or a KV
cache in a dtype no predictor timed are priced and marked as extrapolated, never silently.

By hand on the tiny MoE of ``tests/test_llm_moe_touched.py`` (4 experts, 2 per token, expert
gate and up 8 x 16, down 16 x 8): a decode step of B tokens has 2B token-expert pairs and
touches E_t = 4 x (1 - (1/2)^B) experts: 2 at B=1 (1 token each), 3 at B=2 (4/3 each), 3.5 at
B=3 (6/3.5 each). With a predictor whose price is ``floor + bound / ceiling`` (no learned
residual), an expert op costs ``E_t x floor + bound / ceiling``: E_t launch floors, not one.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import dse
from dse.calibrate.coverage import coverage, coverage_note
from dse.calibrate.expected import expected_layers, op_configs
from dse.calibrate.predictor import DevicePredictors, FamilyPredictor
from dse.roofline import Numerics
from tests.cli_run import run_cli
from tests.test_llm_moe_touched import EXPERTS, TINY_MOE
from tests.test_llm_trace import TINY
from workloads.llm import llm_config_from_dict, llm_trace

FLOOR_S = 2e-6
CEILING = 0.5
CSR_FLOOR_S, CSR_CEILING = 3e-6, 0.25


def _device(csr_target: str = "time") -> DevicePredictors:
    """A hand-made h100-sxm predictor set: gemm (and nm) price ``floor + bound / ceiling``;
    csr has ``csr_target`` and no residual, so as a time target it predicts exp(0) = 1 s."""
    fams = {key: FamilyPredictor(key, "fraction", FLOOR_S, CEILING, None, 1, 1)
            for key in ("gemm", "nm")}
    fams["csr"] = FamilyPredictor("csr", csr_target, CSR_FLOOR_S, CSR_CEILING, None, 1, 1)
    return DevicePredictors("hand", "h100-sxm", "cuda", 132, 128, 1e-6, fams, {})


@pytest.fixture(scope="module")
def moe():
    return llm_trace(llm_config_from_dict(TINY_MOE, name="moe"), "decode", 6)


@pytest.fixture(scope="module")
def dense_llm():
    return llm_trace(llm_config_from_dict(TINY, name="tiny"), "decode", 6)


def _layers(trace, fmt="dense", batches=(1, 2, 3), numerics=None):
    kwargs = {} if numerics is None else {"numerics": numerics}
    return dse.evaluate_layers(trace, "h100-sxm", [fmt], list(batches), fusion="unfused",
                               scope="all", **kwargs)


# --- B: the expert op is the touched experts' GEMMs ---------------------------------------------


def test_an_expert_op_is_one_gemm_per_touched_expert(moe):
    layers = _layers(moe)
    config = op_configs(layers, moe)
    experts = layers["op"].isin(EXPERTS).to_numpy()
    touched = {1: 2.0, 2: 3.0, 3: 3.5}
    for b, e_t in touched.items():
        rows = experts & (layers["batch"].to_numpy() == b)
        assert rows.sum() == 3
        np.testing.assert_allclose(config.loc[rows, "kernels"], e_t)
        np.testing.assert_allclose(config.loc[rows, "n"], 2 * b / e_t)  # pairs per expert
        np.testing.assert_allclose(config.loc[rows, "sol_s"] * e_t, layers.loc[rows, "time_s"])
        np.testing.assert_allclose(config.loc[rows, "flops"] * e_t, layers.loc[rows, "flops"])
        np.testing.assert_allclose(config.loc[rows, "bytes"] * e_t,
                                   layers.loc[rows, "dram_bytes"])
    # every other op is one kernel, its shape as traced
    assert (config.loc[~experts, "kernels"] == 1.0).all()
    assert (config.loc[~experts, "m"] == layers.loc[~experts, "op"].map(
        moe.ops.set_index("name")["m"]).where(config.loc[~experts, "m"] > 0, 0)).all()


def test_the_expert_op_pays_a_launch_floor_per_touched_expert(moe):
    layers = _layers(moe)
    priced = expected_layers(layers, moe, _device())
    experts = layers["op"].isin(EXPERTS).to_numpy()
    e_t = layers["batch"].map({1: 2.0, 2: 3.0, 3: 3.5}).to_numpy()
    time_s = layers["time_s"].to_numpy()
    np.testing.assert_allclose(priced["expected_s"].to_numpy()[experts],
                               (e_t * FLOOR_S + time_s / CEILING)[experts], rtol=1e-12)
    # a dense linear (q_proj) is one GEMM: one floor
    q = (layers["op"] == "model.layers.0.self_attn.q_proj").to_numpy()
    np.testing.assert_allclose(priced["expected_s"].to_numpy()[q],
                               FLOOR_S + time_s[q] / CEILING, rtol=1e-12)
    # the bound is the trace's, untouched
    assert (priced["time_s"] == layers["time_s"]).all()


def test_at_batch_1_two_experts_cost_twice_one(moe):
    """B=1, k=2: the step runs 2 expert GEMMs of N=1 each, priced as 2 x the one GEMM of a
    1-token step over one expert's weights."""
    layers = _layers(moe, batches=(1,))
    priced = expected_layers(layers, moe, _device())
    up = (layers["op"] == EXPERTS[1]).to_numpy()
    one = FLOOR_S + layers["time_s"].to_numpy()[up] / 2 / CEILING
    np.testing.assert_allclose(priced["expected_s"].to_numpy()[up], 2 * one, rtol=1e-12)


def test_mixtral_expert_gemms_cost_more_than_one_gemm_over_all_pairs():
    """Mixtral-8x7B decode on the shipped h100-sxm predictors: at batch 8 the 16 token-expert
    pairs run as 7.2 expert GEMMs of ~2.2 tokens, dearer than one GEMM of 16 columns."""
    from workloads.llm import load_llm_config

    trace = llm_trace(load_llm_config("mixtral-8x7b"), "decode", 2048)
    ops = dse.api.expected_ops(trace, "h100-sxm", ["dense"], [8], "h100-sxm", "all")
    config = op_configs(ops, trace)
    experts = ops["op"].isin(trace.provenance["routed_weights_by_op"]).to_numpy()
    assert experts.sum() == 3 * 32
    np.testing.assert_allclose(config.loc[experts, "kernels"], 8 * (1 - 0.75 ** 8))
    np.testing.assert_allclose(config.loc[experts, "n"], 16 / (8 * (1 - 0.75 ** 8)))
    assert (ops.loc[experts, "expected_s"] > ops.loc[experts, "time_s"]).all()


# --- A: weights and KV cache in a dtype never timed ----------------------------------------------


INT4 = Numerics(weight_dtype="int4")


def test_int4_weights_are_marked_and_priced_by_the_fraction(dense_llm):
    layers = _layers(dense_llm, batches=(1,), numerics=INT4)
    marked = expected_layers(layers, dense_llm, _device(), numerics=INT4)
    plain = expected_layers(layers, dense_llm, _device())
    linear = dense_llm.ops.set_index("name").loc[layers["op"], "kind"].to_numpy() == "linear"
    assert (marked["extrapolated_dtype"].to_numpy()[linear] == "int4 weights").all()
    assert (marked["extrapolated_dtype"].to_numpy()[~linear] == "").all()
    # a fraction target: the fp16 kernels' fraction applied to the int4 bound, as before
    np.testing.assert_allclose(marked["expected_s"], plain["expected_s"], rtol=0)
    time_s = layers["time_s"].to_numpy()
    np.testing.assert_allclose(marked["expected_s"].to_numpy()[linear],
                               FLOOR_S + time_s[linear] / CEILING, rtol=1e-12)
    notes = set(marked.loc[linear, "calibration"])
    assert notes == {"int4 weights never timed on hand: gemm extrapolated, the fraction of the "
                     "speed of light of its fp16 kernels applied to the narrower bytes"}
    assert (plain["extrapolated_dtype"] == "").all()
    assert (plain.loc[linear, "calibration"] == "").all()


def test_a_time_target_family_is_not_given_its_fp16_time(dense_llm):
    """CSR learns times, which do not follow the bytes: with int4 weights it is priced by its
    fitted floor + bound / ceiling, marked; in fp16 it keeps its learned time (1 s here)."""
    fmt = "unstructured@0.5"
    layers = _layers(dense_llm, fmt=fmt, batches=(1,), numerics=INT4)
    marked = expected_layers(layers, dense_llm, _device(), numerics=INT4)
    csr = (marked["predictor"] == "hand:csr:time").to_numpy()
    assert csr.sum() > 0
    np.testing.assert_allclose(marked["expected_s"].to_numpy()[csr],
                               CSR_FLOOR_S + layers["time_s"].to_numpy()[csr] / CSR_CEILING,
                               rtol=1e-12)
    assert set(marked.loc[csr, "calibration"]) == {
        "int4 weights never timed on hand: csr extrapolated, its floor + bound / ceiling used, "
        "as the times it learned do not follow the bytes"}
    fp16 = _layers(dense_llm, fmt=fmt, batches=(1,))
    learned = expected_layers(fp16, dense_llm, _device())
    np.testing.assert_allclose(learned["expected_s"].to_numpy()[csr], 1.0)


def test_a_kv_cache_dtype_marks_the_attention_products(dense_llm):
    fp8 = Numerics(kv_dtype="fp8")
    layers = _layers(dense_llm, batches=(1,), numerics=fp8)
    marked = expected_layers(layers, dense_llm, _device(), numerics=fp8)
    reads_kv = layers["op"].str.endswith(("self_attn.scores", "self_attn.context")).to_numpy()
    assert reads_kv.sum() == 4  # two layers, scores and context
    assert (marked["extrapolated_dtype"].to_numpy()[reads_kv] == "fp8 KV cache").all()
    assert (marked["extrapolated_dtype"].to_numpy()[~reads_kv] == "").all()
    # the same dtype as the compute dtype is not extrapolated
    same = Numerics(kv_dtype="fp16")
    assert (expected_layers(layers, dense_llm, _device(), numerics=same)["extrapolated_dtype"]
            == "").all()


def test_a_kv_cache_read_of_one_element_is_marked():
    """One KV head of width 1 at a one-token context: each attention product reads exactly one
    cached element a sample, in fp8, and is marked like any other."""
    one = dict(TINY, num_attention_heads=1, num_key_value_heads=1, head_dim=1)
    trace = llm_trace(llm_config_from_dict(one, name="one"), "decode", 1)
    reads = trace.provenance["kv_read_by_op"]
    assert set(reads.values()) == {1} and len(reads) == 4
    fp8 = Numerics(kv_dtype="fp8")
    layers = _layers(trace, batches=(1,), numerics=fp8)
    marked = expected_layers(layers, trace, _device(), numerics=fp8)
    reads_kv = layers["op"].isin(list(reads)).to_numpy()
    assert reads_kv.sum() == 4
    assert (marked["extrapolated_dtype"].to_numpy()[reads_kv] == "fp8 KV cache").all()
    assert (marked["extrapolated_dtype"].to_numpy()[~reads_kv] == "").all()


def test_the_note_names_the_compute_dtype_where_the_timed_one_is_unknown(dense_llm):
    """Hand-made predictors name no shipped dataset, so the dtype their kernels ran in is
    unknown: the note names the run's compute dtype (bf16 here), not fp16."""
    bf16 = Numerics(dtype="bf16", weight_dtype="int4")
    layers = _layers(dense_llm, batches=(1,), numerics=bf16)
    marked = expected_layers(layers, dense_llm, _device(), numerics=bf16)
    linear = dense_llm.ops.set_index("name").loc[layers["op"], "kind"].to_numpy() == "linear"
    assert set(marked.loc[linear, "calibration"]) == {
        "int4 weights never timed on hand: gemm extrapolated, the fraction of the speed of "
        "light of its bf16 kernels applied to the narrower bytes"}


def test_coverage_counts_quantised_gemms_as_extrapolated(dense_llm):
    layers = _layers(dense_llm, batches=(1,), numerics=INT4)
    priced = expected_layers(layers, dense_llm, _device(), numerics=INT4)
    every_shape = pd.DataFrame({"family": ["dense"], "sparsity": [0.0], "m": [0], "k": [0],
                                "groups": [1], "n_min": [1], "n_max": [1]})
    cov = coverage(priced, dense_llm, _device(), "fp16", shapes=every_shape)
    linear = dense_llm.ops["kind"] == "linear"
    # 7 linears a layer (q k v o gate up down) x 2 + the LM head; the 4 attention products
    # are not quantised but their shapes were not timed either (no shape was)
    assert int(linear.sum()) == 15
    assert cov.designs["extrapolated"].tolist() == [19] == cov.designs["gemms"].tolist()
    assert cov.dtypes == ("int4 weights",)
    line = coverage_note(cov, "hand", "tiny.decode.6")
    assert line.startswith("expectation extrapolated for tiny.decode.6: 19 of 19 GEMMs (100% "
                           "of the expected GEMM time) have a shape, N or dtype never timed on "
                           "hand: they compute or read int4 weights (its kernels were timed in "
                           "fp16;")
    assert "shapes or N never timed: " in line


# --- the command line -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


@pytest.mark.parametrize("option, said", [
    (["--weight-dtype", "int4"], "read int4 weights"),
    (["--kv-dtype", "fp8"], "read fp8 KV cache"),
])
def test_evaluate_prices_and_marks_a_quantised_expectation(tiny_path, option, said, tmp_path,
                                                           capsys):
    out = tmp_path / "r.json"
    assert run_cli(["evaluate", "--model", tiny_path, "--phase", "decode", "--context", "6",
                    "--hw", "h100-sxm", *option, "--calibrated", "h100-sxm",
                    "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "expectation extrapolated for" in printed and said in printed
    assert f"note: {said[5:]} never timed on h100-sxm" in printed
    row = json.loads(out.read_text())[0]
    assert row["expected_extrapolated_share"] == 1.0 and row["expected_latency_s"] > 0


def test_a_compute_dtype_the_kernels_never_ran_in_is_marked():
    """The shipped predictors' GEMMs ran in fp16 (H100) and fp32, priced in the tf32 slot
    (CPU). An fp8 design's GEMMs are then extrapolated and every one says so; an fp16 design's
    are not; int4 weights under fp8 compute carry both marks."""
    import dse
    from dse.calibrate.expected import timed_dtype
    from dse.calibrate.predictor import load_predictors

    assert timed_dtype(load_predictors("h100-sxm")) == "fp16"
    assert timed_dtype(load_predictors("cpu-amd-epyc-2c")) == "tf32"
    fp8 = dse.expected_ops("resnet50", "h100-sxm", "dense", 1, "h100-sxm",
                           numerics=dse.Numerics(dtype="fp8"))
    gemm = fp8["kind"].isin(["conv", "linear"]).to_numpy()
    assert gemm.sum() == 54  # ResNet-50's 53 convolutions and its classifier
    assert set(fp8.loc[gemm, "extrapolated_dtype"]) == {"fp8 compute"}
    assert "fp8 compute never timed on h100-sxm: conv extrapolated" in " ".join(
        fp8["calibration"])
    fp16 = dse.expected_ops("resnet50", "h100-sxm", "dense", 1, "h100-sxm")
    assert set(fp16["extrapolated_dtype"]) == {""}
    from workloads import load_model

    llama = load_model("llama-3-8b", "decode", 2048)
    both = dse.expected_ops(llama, "h100-sxm", "dense", 1, "h100-sxm",
                            numerics=dse.Numerics(dtype="fp8", weight_dtype="int4"))
    assert "fp8 compute, int4 weights" in set(both["extrapolated_dtype"])
