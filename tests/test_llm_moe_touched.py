"""An MoE step reads the experts its tokens touch (issue 24): with top-k routing over E experts, a
step of T tokens (the batch in decode, batch x prompt tokens in prefill) touches
E x (1 - (1 - k/E)^T) of them in expectation, and reads only their weights; its FLOPs follow the
k experts of each token; the memory fit holds all E. Every command that prices agrees.

By hand on a tiny MoE: one layer, hidden 16, 4 query heads and 2 KV heads of width 4, MLP width
8, 4 experts with 2 per token, 32 tokens of vocabulary, untied embeddings, decode at context 6.
- an expert holds gate, up (8 x 16) and down (16 x 8): 384 weights, 768 bytes in fp16; the
  4 experts 3,072 bytes;
- the rest of a step's weights: q 16x16, k and v 8x16, o 16x16, router 4x16, two norms of 16, the
  final norm 16 and the LM head 32x16: 1,392 weights, 2,784 bytes;
- resident besides: the untied 32 x 16 embedding table, 1,024 bytes; 3,440 parameters in all.
A step of T tokens reads 2,784 + 768 x 4 x (1 - (1/2)^T) bytes: T=1 two experts (4,320), T=2
three (5,088), T=3 3.5 (5,472), T=4 3.75 (5,664), T=64 all four (5,856).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import accelerator_models
import dse
from dse.design_columns import with_energy_and_memory, with_language_model_columns
from dse.roofline.energy import op_traffic
from tests.cli_run import run_cli
from workloads.llm import llm_config_from_dict, llm_figures, llm_trace, load_llm_config

TINY_MOE = {"model_type": "mixtral", "hidden_size": 16, "intermediate_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 32, "max_position_embeddings": 64, "num_local_experts": 4,
            "num_experts_per_tok": 2}
CONTEXT = 6
EXPERT_BYTES = 2 * 3 * 8 * 16  # 768
OTHER_BYTES = 2 * (256 + 128 + 128 + 256 + 64 + 16 + 16 + 16 + 512)  # 2,784
EMBEDDING_BYTES = 2 * 32 * 16  # 1,024
#: Weight bytes a step of T tokens reads, by hand (see the module).
READ = {1: OTHER_BYTES + 2 * EXPERT_BYTES, 2: OTHER_BYTES + 3 * EXPERT_BYTES,
        3: OTHER_BYTES + 3.5 * EXPERT_BYTES, 4: OTHER_BYTES + 3.75 * EXPERT_BYTES,
        64: OTHER_BYTES + 4 * EXPERT_BYTES}
EXPERTS = [f"model.layers.0.mlp.experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")]


def test_hand_figures():
    assert (EXPERT_BYTES, OTHER_BYTES) == (768, 2_784)
    assert READ == {1: 4_320, 2: 5_088, 3: 5_472, 4: 5_664, 64: 5_856}
    c = llm_config_from_dict(TINY_MOE, name="moe")
    assert c.params == 3_440 == (OTHER_BYTES + 4 * EXPERT_BYTES + EMBEDDING_BYTES) // 2
    t = llm_trace(c, "decode", CONTEXT)
    assert 2 * t.params == OTHER_BYTES + 4 * EXPERT_BYTES  # every expert's weights, resident
    assert set(t.provenance["routed_weights_by_op"]) == set(EXPERTS)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("moe") / "config.json"
    path.write_text(json.dumps(TINY_MOE))
    return str(path)


@pytest.fixture(scope="module")
def decode():
    return llm_trace(llm_config_from_dict(TINY_MOE, name="moe"), "decode", CONTEXT)


def test_decode_reads_the_experts_the_batch_touches(decode):
    table = dse.evaluate(decode, "h100-sxm", "dense", [1, 2, 3, 64], scope="all")
    assert table["weight_bytes"].tolist() == [READ[1], READ[2], READ[3], READ[64]]
    # Every op is memory-bound at these sizes: the latency is the bytes over the bandwidth.
    bandwidth = accelerator_models.load("h100-sxm").dram_bandwidth_bytes_per_s
    np.testing.assert_allclose(table["latency_s"], table["dram_bytes"] / bandwidth, rtol=1e-12)
    # The exact figures of workloads.llm agree.
    c = llm_config_from_dict(TINY_MOE, name="moe")
    for b in (1, 2, 3, 64):
        assert llm_figures(c, "decode", CONTEXT, b).weight_bytes_read == READ[b]


def test_prefill_tokens_are_batch_times_prompt():
    c = llm_config_from_dict(TINY_MOE, name="moe")
    prefill = llm_trace(c, "prefill", 2)
    table = dse.evaluate(prefill, "h100-sxm", "dense", [1, 2], scope="all")
    # T = 1 x 2 tokens: 3 experts; T = 2 x 2: 3.75.
    assert table["weight_bytes"].tolist() == [READ[2], READ[4]]


def test_flops_follow_k_experts_per_token(decode):
    """Each token runs 2 experts' GEMMs whatever E: with 8 experts instead of 4, the FLOPs are
    the same and the weights read at one token are still two experts'."""
    wide = llm_trace(llm_config_from_dict(dict(TINY_MOE, num_local_experts=8), name="moe8"),
                     "decode", CONTEXT)
    layers = {}
    for name, trace in (("4", decode), ("8", wide)):
        layers[name] = dse.evaluate_layers(trace, "h100-sxm", "dense", [1, 3], scope="all") \
            .set_index(["op", "batch"])
    for op in EXPERTS:
        for b in (1, 3):
            # 2 x (8 x 16) x 2 token-expert pairs a token.
            assert layers["4"].loc[(op, b), "flops"] == 2 * 128 * 2 * b
            assert layers["8"].loc[(op, b), "flops"] == 2 * 128 * 2 * b
        # One token: 2 experts of 128 weights, in fp16, whatever E.
        assert layers["4"].loc[(op, 1), "weight_bytes"] == 2 * 2 * 128
        assert layers["8"].loc[(op, 1), "weight_bytes"] == 2 * 2 * 128
        # Three tokens: 4 x (1 - (1/2)^3) = 3.5 of 4, 8 x (1 - (3/4)^3) = 4.625 of 8.
        assert layers["4"].loc[(op, 3), "weight_bytes"] == 3.5 * 2 * 128
        assert layers["8"].loc[(op, 3), "weight_bytes"] == pytest.approx(4.625 * 2 * 128,
                                                                         rel=1e-15)


def test_sparse_experts_read_their_share_of_the_compressed_bytes(decode):
    """2:4 stores an 8 x 16 expert weight as 64 fp16 values and 64 x 2 bits of metadata, 144
    bytes (576 for 4 experts): one token reads half of that, and energy splits it so."""
    layers = dse.evaluate_layers(decode, "h100-sxm", "2:4", [1, 64], scope="all")
    rows = layers[layers["format"] == "2:4"].set_index(["op", "batch"])
    for op in EXPERTS:
        assert rows.loc[(op, 64), "weight_bytes"] == 4 * 144
        assert rows.loc[(op, 1), "weight_bytes"] == 2 * 144
    traffic = op_traffic(layers[layers["format"] == "2:4"], decode, dse.Numerics()) \
        .set_index(["op", "batch"])
    gate = traffic.loc[(EXPERTS[0], 1)]
    assert (gate["value_bytes"], gate["index_bytes"]) == (2 * 128, 2 * 16)


def test_int4_quantises_every_expert(decode):
    """int4 in groups of 128 stores an 8 x 16 expert weight as 128 half-byte values and one fp16
    scale a row (64 + 16 = 80 bytes), a 16 x 8 one as 64 + 32 = 96: every expert, and one token
    reads two of the four."""
    numerics = dse.Numerics(weight_dtype="int4")
    layers = dse.evaluate_layers(decode, "h100-sxm", "dense", [1, 64], scope="all",
                                 numerics=numerics).set_index(["op", "batch"])
    for op, per_expert in zip(EXPERTS, (80, 80, 96), strict=True):
        assert layers.loc[(op, 64), "weight_bytes"] == 4 * per_expert
        assert layers.loc[(op, 1), "weight_bytes"] == 2 * per_expert


def test_memory_fit_holds_every_expert(decode):
    formats, batches = ["2:4"], [1, 2, 64]
    table = dse.evaluate(decode, "h100-sxm", formats, batches, scope="all")
    table = with_energy_and_memory(table, decode, "h100-sxm", formats, batches, ["unfused"],
                                   "all")
    table = with_language_model_columns(table, decode).set_index(["format", "batch"])
    # Dense: every parameter, the 4 experts and the embedding table, at every batch.
    assert (table.loc["dense", "weight_storage_bytes"] == 2 * 3_440).all()
    assert table.loc[("dense", 1), "weight_bytes"] == READ[1]
    # 2:4: the 4 experts' 3 x 576 bytes stored, whatever the batch reads.
    stored = table.loc["2:4", "weight_storage_bytes"]
    np.testing.assert_allclose(stored, stored.iloc[-1], rtol=1e-15)
    assert table.loc[("2:4", 64), "weight_bytes"] - table.loc[("2:4", 1), "weight_bytes"] \
        == 3 * 2 * 144


def test_mixtral_decode_is_priced_at_every_batch(tmp_path):
    """The refusal of steps under 25 tokens is gone: at batch 1 a Mixtral decode step reads the
    2 experts of its token in each layer, as llm_figures says, and holds all 8."""
    out = tmp_path / "m.csv"
    assert run_cli(["evaluate", "--model", "mixtral-8x7b", "--phase", "decode", "--context",
                    "2048", "--batch", "1", "--batch", "8", "--hw", "h100-sxm",
                    "--out", str(out)]) == 0
    table = pd.read_csv(out).set_index("batch")
    c = load_llm_config("mixtral-8x7b")
    for b in (1, 8):
        figures = llm_figures(c, "decode", 2048, b)
        assert table.loc[b, "weight_bytes"] == pytest.approx(figures.weight_bytes_read,
                                                             rel=1e-12)
        assert table.loc[b, "weight_storage_bytes"] == figures.weight_bytes
    # 32 layers x 6 untouched experts x 3 x 4096 x 14336 weights in fp16, at batch 1.
    assert table.loc[1, "weight_storage_bytes"] - table.loc[1, "weight_bytes"] \
        == 2 * (32 * 6 * 3 * 4096 * 14336 + 32_000 * 4096)  # and the untied embedding table
    # Prefill: a step of 1 x 16 prompt tokens touches 8 x (1 - (3/4)^16) = 7.92 experts.
    assert run_cli(["evaluate", "--model", "mixtral-8x7b", "--phase", "prefill", "--context",
                    "16", "--batch", "1", "--hw", "h100-sxm", "--out", str(out)]) == 0
    prefill = pd.read_csv(out).iloc[0]
    figures = llm_figures(c, "prefill", 16, 1)
    assert figures.experts_touched == pytest.approx(8 * (1 - 0.75**16), rel=1e-15)
    assert prefill["weight_bytes"] == pytest.approx(figures.weight_bytes_read, rel=1e-12)


# --- every command agrees -----------------------------------------------------------------------


def step(config, *batches: int) -> list[str]:
    out = ["--model", config, "--phase", "decode", "--context", str(CONTEXT), "--hw",
           "h100-sxm", "--format", "2:4", "--scope", "all"]
    for b in batches:
        out += ["--batch", str(b)]
    return out


@pytest.fixture(scope="module")
def evaluated(config, tmp_path_factory):
    out = tmp_path_factory.mktemp("evaluate") / "e.csv"
    assert run_cli(["evaluate", *step(config, 1, 2), "--out", str(out)]) == 0
    return pd.read_csv(out).set_index(["format", "batch"]).sort_index()


def test_evaluate_by_hand(evaluated):
    assert evaluated.loc[("dense", 1), "weight_bytes"] == READ[1]
    assert evaluated.loc[("dense", 2), "weight_bytes"] == READ[2]
    assert (evaluated.loc["dense", "weight_storage_bytes"] == 2 * 3_440).all()


def test_simulate_agrees_with_evaluate(config, evaluated, tmp_path):
    for b in (1, 2):
        out = tmp_path / f"s{b}.csv"
        assert run_cli(["simulate", *step(config, b), "--buffer-bytes", "inf",
                        "--launch-overhead-s", "0", "--overlap", "full",
                        "--out", str(out)]) == 0
        ops = pd.read_csv(out)
        row = evaluated.loc[("2:4", b)]
        assert ops["latency_s"].sum() == pytest.approx(row["latency_s"], rel=1e-9)
        assert ops["dram_bytes"].sum() == pytest.approx(row["dram_bytes"], rel=1e-12)


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_compare_and_sweep_agree_with_evaluate(command, config, evaluated, tmp_path):
    out = tmp_path / "r.csv"
    args = [*step(config), "--vary", "batch=1,2"] if command == "sweep" else step(config, 1, 2)
    assert run_cli([command, *args, "--out", str(out)]) == 0
    table = pd.read_csv(out).set_index(["format", "batch"]).sort_index()
    for column in ("latency_s", "weight_bytes", "peak_memory_bytes", "tokens_per_s"):
        np.testing.assert_allclose(table[column].astype(float),
                                   evaluated.loc[table.index, column].astype(float),
                                   rtol=1e-12, err_msg=column)


def test_search_agrees_with_evaluate(config, evaluated, tmp_path):
    out = tmp_path / "search"
    assert run_cli(["search", "--model", config, "--phase", "decode", "--context", str(CONTEXT),
                    "--hw", "h100-sxm", "--batch", "1", "--batch", "2", "--out", str(out)]) == 0
    results = pd.read_parquet(out / "results.parquet").set_index(["format", "batch"])
    rows = results.loc[list(evaluated.index)]
    for column in ("latency_s", "weight_bytes", "peak_memory_bytes", "tokens_per_s"):
        np.testing.assert_allclose(rows[column].astype(float), evaluated[column].astype(float),
                                   rtol=1e-12, err_msg=column)


def test_report_agrees_with_evaluate(config, evaluated, tmp_path):
    out = tmp_path / "report"
    assert run_cli(["report", *step(config, 1, 2), "--out", str(out)]) == 0
    written = pd.read_csv(out / "decode.csv").set_index(["format", "batch"])
    np.testing.assert_allclose(written["tokens_per_s"],
                               evaluated.loc[written.index, "tokens_per_s"], rtol=1e-12)
