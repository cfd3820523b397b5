"""Language-model traces from configurations: hand-computed parameters, FLOPs, bytes and KV cache
of tiny configurations (grouped-query attention with an explicit head_dim, biases, a sliding
window and an MoE), the shipped configurations against their published sizes, and error lines."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import dse
from tests.cli_run import run_cli
from workloads import TraceError, is_language_model, load_model
from workloads.llm import (
    LLMConfigError,
    attention_pairs,
    check_priceable,
    experts_touched,
    llm_config_from_dict,
    llm_figures,
    llm_names,
    llm_trace,
    load_llm_config,
)

# hidden 8, 4 query heads and 2 KV heads of head_dim 3 (not hidden / heads = 2), MLP 5, 2 layers.
TINY = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 5, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 3, "vocab_size": 11,
        "max_position_embeddings": 64}
# One MoE layer: 4 experts, 2 per token; head_dim from hidden / heads = 2.
TINY_MOE = {"model_type": "mixtral", "hidden_size": 8, "intermediate_size": 5,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 11, "max_position_embeddings": 64, "num_local_experts": 4,
            "num_experts_per_tok": 2}


def gemm_flops(trace) -> int:
    o = trace.ops
    return int((2 * o["m"] * o["k"] * o["n"] * o["groups"]).sum())


def op(trace, name):
    rows = trace.ops[trace.ops["name"] == name]
    assert len(rows) == 1, name
    return rows.iloc[0]


def test_tiny_gqa_params():
    c = llm_config_from_dict(TINY, name="tiny")
    assert (c.head_dim, c.num_kv_heads) == (3, 2)
    # Per layer: q 12x8, k and v 6x8, o 8x12, gate/up/down 3 x 8x5, two norms of 8.
    layer = 96 + 48 + 48 + 96 + 120 + 16
    assert c.params == 2 * layer + 8 + 2 * 11 * 8 == 1032
    for phase in ("prefill", "decode"):
        t = llm_trace(c, phase, 4)
        assert t.provenance["params"] == t.provenance["resident_weight_elems"] == 1032
        # A step reads its tokens' embedding rows (features), not the untied 11x8 table.
        assert t.params == 1032 - 88
        tokens = 4 if phase == "prefill" else 1
        embed = op(t, "model.embed_tokens")
        assert (embed["weight_elems"], embed["input_elems"]) == (0, tokens + tokens * 8)


def test_tiny_gqa_prefill_flops():
    c = llm_config_from_dict(TINY, name="tiny")
    t = llm_trace(c, "prefill", 4)
    # Per layer, 4 tokens: q 2*12*8*4, k and v 2*6*8*4, o 2*8*12*4, MLP 3 x 2*5*8*4; attention:
    # 4 heads x 10 causal pairs x head_dim 3 x 2 FLOPs, for the scores and again the context.
    projections = 768 + 384 + 384 + 768 + 3 * 320
    attention = 2 * 4 * 10 * 3 * 2
    lm_head = 2 * 11 * 8  # the last token only
    assert gemm_flops(t) == 2 * (projections + attention) + lm_head == 7664
    scores = op(t, "model.layers.0.self_attn.scores")
    assert scores["groups"] == 2 and scores["k"] == 3  # per KV head, over head_dim
    assert scores["m"] * scores["n"] == 2 * 10  # g = 2 query heads x 10 pairs
    # Vector FLOPs per layer: 2 RMSNorms 4*4*8, rotary 3*4*(12+6), softmax 5*4*10, two residual
    # adds 4*8, SiLU 4*4*5, gate*up 4*5; then the final norm of the last token, 4*8.
    layer = 2 * 128 + 216 + 200 + 2 * 32 + 80 + 20
    assert t.ops["vector_flops"].sum() == 2 * layer + 32 == 1704
    fig = llm_figures(c, "prefill", 4, batch=3)
    assert fig.flops == 3 * (7664 + 1704)
    assert fig.tokens == 12
    assert fig.kv_read_bytes == 0


def test_tiny_gqa_decode_kv_cache():
    c = llm_config_from_dict(TINY, name="tiny")
    # 2 (keys, values) x 2 layers x 2 KV heads x head_dim 3 x 2 bytes.
    assert c.kv_bytes_per_token(2) == 48
    assert c.kv_bytes_per_token(1) == 24
    t = llm_trace(c, "decode", 6)
    assert t.input_shape == (1,)
    # Per layer: q 2*12*8, k and v 2*6*8, o 2*8*12, MLP 3 x 2*5*8, attention 4 heads x 6 keys x
    # head_dim 3 x 2, twice.
    assert gemm_flops(t) == 2 * (192 + 96 + 96 + 192 + 240 + 2 * 144) + 176 == 2384
    scores = op(t, "model.layers.1.self_attn.scores")
    assert (scores["m"], scores["k"], scores["n"], scores["groups"]) == (6, 3, 2, 2)
    # Scores read q (12) and 6 cached keys of 2 KV heads x 3; context reads the probabilities
    # (4 heads x 6) and 6 cached values.
    assert scores["input_elems"] == 12 + 36
    assert op(t, "model.layers.1.self_attn.context")["input_elems"] == 24 + 36
    assert t.provenance["kv_cache_elems"] == t.provenance["kv_read_elems"] == 6 * 24
    fig = llm_figures(c, "decode", 6, batch=5)
    assert fig.kv_cache_bytes == fig.kv_read_bytes == 5 * 6 * 48
    assert llm_figures(c, "decode", 6, batch=5, kv_dtype_bytes=1).kv_cache_bytes == 5 * 6 * 24


def test_decode_kv_read_priced_by_the_evaluator():
    """Unfused, the evaluator reads B x L x kv_bytes_per_token / layers of cache per layer."""
    c = llm_config_from_dict(TINY, name="tiny")
    t = llm_trace(c, "decode", 6)
    layers = dse.evaluate_layers(t, "h100-sxm", "dense", batches=3, scope="all")
    attn = layers[layers["op"].str.startswith("model.layers.0.self_attn.")
                  & layers["op"].str.endswith(("scores", "context"))]
    # fp16 features: scores q 12 + keys 36 + out 24; context probabilities 24 + values 36 + out 12.
    expected = 2 * 3 * ((12 + 36 + 24) + (24 + 36 + 12))
    assert attn["dram_bytes"].sum() == expected
    cache_part = 2 * 3 * (36 + 36)
    assert cache_part == 3 * 6 * c.kv_bytes_per_token(2) / c.num_layers


def test_biases_follow_the_architecture():
    qwen = dict(TINY, model_type="qwen2")  # q, k, v carry biases, o does not
    c = llm_config_from_dict(qwen, name="q")
    assert c.params == 1032 + 2 * (12 + 6 + 6)
    t = llm_trace(c, "prefill", 4)
    assert op(t, "model.layers.0.self_attn.k_proj")["vector_flops"] == 4 * 6  # the bias adds
    assert op(t, "model.layers.0.self_attn.o_proj")["vector_flops"] == 0
    llama = dict(TINY, attention_bias=True, mlp_bias=True)
    assert llm_config_from_dict(llama).params == 1032 + 2 * (12 + 6 + 6 + 8 + 5 + 5 + 8)


def test_tied_embeddings_counted_once():
    c = llm_config_from_dict(dict(TINY, tie_word_embeddings=True))
    assert c.params == 1032 - 88
    t = llm_trace(c, "decode", 3)
    assert op(t, "model.embed_tokens")["weight_elems"] == 0
    assert op(t, "lm_head")["weight_elems"] == 88
    # The LM head reads the whole table: every parameter is read.
    assert t.params == c.params
    assert llm_figures(c, "decode", 3).weight_bytes_read == 2 * c.params


def test_sliding_window():
    c = llm_config_from_dict(dict(TINY, model_type="mistral", sliding_window=3))
    assert c.windows == (3, 3)
    # Prefill of 5 tokens, each seeing at most 3: 1 + 2 + 3 + 3 + 3 = 12 pairs per head.
    t = llm_trace(c, "prefill", 5)
    scores = op(t, "model.layers.0.self_attn.scores")
    assert scores["m"] * scores["n"] == 2 * 12
    # Decode at context 6 reads the last 3 tokens' keys and values.
    t = llm_trace(c, "decode", 6)
    assert op(t, "model.layers.0.self_attn.scores")["m"] == 3
    assert c.kv_cache_elems(6) == 2 * 3 * 2 * 2 * 3
    # transformers' default where mistral's config.json has no sliding_window is 4096.
    assert llm_config_from_dict(dict(TINY, model_type="mistral")).windows == (4096, 4096)
    # Qwen2 uses it only with use_sliding_window, from layer max_window_layers on.
    qwen = dict(TINY, model_type="qwen2", sliding_window=3)
    assert llm_config_from_dict(qwen).windows == (None, None)
    qwen.update(use_sliding_window=True, max_window_layers=1)
    assert llm_config_from_dict(qwen).windows == (None, 3)
    qwen["layer_types"] = ["sliding_attention", "full_attention"]
    assert llm_config_from_dict(qwen).windows == (3, None)


@pytest.mark.parametrize("tokens", [1, 2, 5, 6, 17, 64])
@pytest.mark.parametrize("window", [None, 1, 3, 4, 16, 100])
def test_attention_pairs_against_a_loop(tokens, window):
    expected = sum(min(i, window or i) for i in range(1, tokens + 1))
    assert attention_pairs(tokens, window) == expected
    c = llm_config_from_dict(dict(TINY, model_type="mistral", sliding_window=window))
    scores = op(llm_trace(c, "prefill", tokens), "model.layers.0.self_attn.scores")
    assert scores["m"] * scores["n"] == 2 * expected


def test_tiny_moe():
    c = llm_config_from_dict(TINY_MOE, name="moe")
    # q 8x8, k and v 4x8, o 8x8, router 4x8, 4 experts x 3 x 8x5, two norms; final norm and
    # untied embeddings 2 x 11x8.
    assert c.params == (64 + 32 + 32 + 64 + 32 + 4 * 120 + 16) + 8 + 176 == 904
    t = llm_trace(c, "decode", 6)
    assert t.params == 904 - 88  # less the untied embedding table
    gate = op(t, "model.layers.0.mlp.experts.gate_proj")
    # One expert's GEMM for each of the 2 token-expert pairs; the weights of all 4 experts.
    assert (gate["m"], gate["k"], gate["n"], gate["weight_elems"]) == (5, 8, 2, 4 * 40)
    # q 2*8*8, k and v 2*4*8, o 2*8*8, router 2*4*8, experts 2 pairs x 3 x 2*5*8, attention
    # 4 heads x 6 keys x head_dim 2 x 2, twice; LM head 2*11*8.
    assert gemm_flops(t) == 128 + 64 + 64 + 128 + 64 + 480 + 2 * 96 + 176 == 1296
    assert experts_touched(4, 2, 1) == 2
    assert experts_touched(4, 2, 3) == pytest.approx(3.5)  # 4 x (1 - (1/2)^3)
    fig = llm_figures(c, "decode", 6, batch=3)
    assert fig.experts_touched == pytest.approx(3.5)
    # Not read: the untied embedding table, and half an expert of 3 x 8x5 on average.
    assert fig.weight_bytes_read == 2 * (904 - 88 - 60)
    assert fig.weight_bytes == 2 * 904
    prefill = llm_figures(c, "prefill", 64, batch=2)
    assert prefill.experts_touched == pytest.approx(4.0)


SHIPPED = {  # name: (layers, kv_heads, head_dim, window)
    "llama-2-7b": (32, 32, 128, None),
    "llama-2-13b": (40, 40, 128, None),
    "llama-2-70b": (80, 8, 128, None),
    "llama-3-8b": (32, 8, 128, None),
    "llama-3-70b": (80, 8, 128, None),
    "mistral-7b": (32, 8, 128, 4096),
    "qwen2.5-7b": (28, 4, 128, None),
    "mixtral-8x7b": (32, 8, 128, None),
}


def test_shipped_names():
    assert llm_names() == sorted(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_configs_match_their_published_sizes(name):
    c = load_llm_config(name)
    path = f"workloads/llm_configs/{name}.json"
    with open(path, encoding="utf-8") as f:
        source = json.load(f)["_source"]
    assert source["url"].startswith("https://huggingface.co/")
    assert c.source == source["url"]
    # The published checkpoint's size (safetensors index total_size / 2 bytes of bfloat16), or
    # for LLaMA-2 transformers' count of the same configuration (test_llm_transformers.py).
    assert c.params == source["params"]
    layers, kv_heads, head_dim, window = SHIPPED[name]
    assert (c.num_layers, c.num_kv_heads, c.head_dim) == (layers, kv_heads, head_dim)
    assert set(c.windows) == {window}
    assert c.kv_bytes_per_token(2) == 2 * layers * kv_heads * head_dim * 2


def test_config_from_a_folder(tmp_path):
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(TINY))
    c = load_llm_config(tmp_path / "my-model")
    assert c.name == "my-model" and c.params == 1032
    assert load_llm_config(tmp_path / "my-model" / "config.json").params == 1032


@pytest.mark.parametrize("field", ["hidden_size", "intermediate_size", "num_hidden_layers",
                                   "num_attention_heads", "vocab_size",
                                   "max_position_embeddings", "model_type"])
def test_missing_field_is_one_line_naming_it(tmp_path, field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in TINY.items() if k != field}))
    with pytest.raises(LLMConfigError) as err:
        load_llm_config(path)
    message = str(err.value)
    assert f"missing field {field!r}" in message and str(path) in message
    assert "\n" not in message


def test_missing_fields_where_transformers_has_no_safe_default():
    # Llama defaults num_key_value_heads to the query heads (transformers' documented default);
    # the others need it, and an MoE needs its expert counts.
    no_kv = {k: v for k, v in TINY.items() if k != "num_key_value_heads"}
    assert llm_config_from_dict(no_kv).num_kv_heads == 4
    with pytest.raises(LLMConfigError, match="missing field 'num_key_value_heads'"):
        llm_config_from_dict(dict(no_kv, model_type="qwen2"))
    for field in ("num_local_experts", "num_experts_per_tok"):
        with pytest.raises(LLMConfigError, match=f"missing field {field!r}"):
            llm_config_from_dict({k: v for k, v in TINY_MOE.items() if k != field})


@pytest.mark.parametrize("change, message", [
    ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
    ({"hidden_size": 9, "head_dim": None}, "give 'head_dim'"),
    ({"hidden_size": "8"}, "'hidden_size' must be a positive integer"),
    ({"model_type": "gpt2"}, "model_type 'gpt2' is not one this tracer knows"),
    ({"hidden_act": "swiglu9"}, "hidden_act 'swiglu9' is not known"),
])
def test_bad_fields(change, message):
    with pytest.raises(LLMConfigError, match=message):
        llm_config_from_dict(dict(TINY, **change))


def test_context_longer_than_the_model_takes():
    c = load_llm_config("llama-3-8b")
    llm_trace(c, "decode", 8192)
    with pytest.raises(LLMConfigError) as err:
        llm_trace(c, "decode", 8193)
    assert str(err.value) == ("context 8193 tokens is longer than llama-3-8b's "
                              "max_position_embeddings, 8192; give at most 8192")
    with pytest.raises(LLMConfigError, match="phase 'train' is not known"):
        llm_trace(c, "train", 16)
    with pytest.raises(LLMConfigError, match="context 0 must be a positive"):
        llm_trace(c, "prefill", 0)


def test_unknown_name_and_missing_file(tmp_path):
    with pytest.raises(LLMConfigError, match="unknown language model 'llama-9'"):
        load_llm_config("llama-9")
    with pytest.raises(LLMConfigError, match="no such file"):
        load_llm_config(tmp_path / "nothing" / "config.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(LLMConfigError, match="malformed JSON"):
        load_llm_config(bad)


def test_load_model_routes_language_models(tmp_path):
    assert is_language_model("llama-3-8b") and not is_language_model("resnet50")
    t = load_model("llama-3-8b", "decode", 128)
    assert t.provenance["phase"] == "decode" and t.model == "llama-3-8b.decode.128"
    assert load_model("llama-3-8b", "decode", 128) is t  # shipped ones are cached
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert is_language_model(tmp_path) and is_language_model(tmp_path / "config.json")
    assert load_model(tmp_path, "prefill", 4).provenance["params"] == 1032
    with pytest.raises(LLMConfigError, match="is a language model: give --phase"):
        load_model("llama-3-8b")
    with pytest.raises(TraceError, match="--phase and --context are for language models"):
        load_model("resnet50", "decode", 16)
    # A config.json lacking a field is read as one, so the error names the field.
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(LLMConfigError, match="missing field 'model_type'"):
        load_model(tmp_path / "config.json", "decode", 4)
    with pytest.raises(TraceError, match="language models .*llama-3-8b"):
        load_model("llama-3-9b")


def test_check_priceable():
    decode = llm_trace(load_llm_config("llama-3-8b"), "decode", 64)
    check_priceable(decode, [1, 8], ["unfused"])
    with pytest.raises(LLMConfigError, match="fusion fused .* KV-cache read"):
        check_priceable(decode, [1], ["unfused", "fused"])
    check_priceable(llm_trace(load_llm_config("llama-3-8b"), "prefill", 64), [1], ["fused"])
    mixtral = load_llm_config("mixtral-8x7b")
    # An MoE step of any size is priced: with the experts its tokens touch (test_llm_moe_touched).
    check_priceable(llm_trace(mixtral, "decode", 64), [1], ["unfused"])
    check_priceable(llm_trace(mixtral, "prefill", 24), [1], ["unfused"])
    with pytest.raises(LLMConfigError, match="fusion fused .* KV-cache read"):
        check_priceable(llm_trace(mixtral, "decode", 64), [1], ["fused"])
    check_priceable(load_model("resnet50"), [1], ["fused"])


def test_prefill_longer_than_a_trace_holds():
    c = load_llm_config("llama-3-8b")
    llm_trace(c, "prefill", 5760)
    with pytest.raises(LLMConfigError) as err:
        llm_trace(c, "prefill", 5761)
    assert "give at most 5760 prompt tokens" in str(err.value)


# --- the command line --------------------------------------------------------------------------


def test_evaluate_language_model_columns(tmp_path, capsys):
    out = tmp_path / "r.csv"
    args = ["evaluate", "--model", "llama-3-8b", "--phase", "decode", "--context", "2048",
            "--batch", "1", "--batch", "8", "--hw", "h100-sxm", "--format", "2:4",
            "--out", str(out)]
    assert run_cli(args) == 0
    assert "language model llama-3-8b, decode at context 2048" in capsys.readouterr().out
    table = pd.read_csv(out)
    assert set(table["scope"]) == {"all"}  # language models: every op, the KV cache included
    assert (table["tokens_per_s"] == table["batch"] / table["latency_s"]).all()
    assert (table["time_per_token_s"] == table["latency_s"]).all()
    assert table["ttft_s"].isna().all()
    assert (table["kv_bytes_per_token"] == 131072).all()  # 2 x 32 x 8 x 128 x 2 bytes
    assert (table["kv_cache_bytes"] == table["batch"] * 2048 * 131072).all()
    assert (table["params"] == 8030261248).all()
    dense = table[table["format"] == "dense"]
    # Resident: every parameter (the untied embedding table too) and the KV cache.
    assert (dense["weight_storage_bytes"] == 2 * 8030261248).all()
    assert (dense["peak_memory_bytes"] > dense["weight_storage_bytes"]
            + dense["kv_cache_bytes"]).all()
    # The largest batch that fits fits, and one more does not.
    largest = int(dense["largest_batch_that_fits"].iloc[0])
    assert 200 < largest < 80 * 2**30 / (2048 * 131072)
    assert run_cli(args[:7] + ["--batch", str(largest), "--batch", str(largest + 1),
                               "--hw", "h100-sxm", "--out", str(out)]) == 0
    fits = pd.read_csv(out).set_index("batch")["fits"]
    assert bool(fits[largest]) and not bool(fits[largest + 1])


def test_evaluate_prefill_gives_ttft(tmp_path):
    out = tmp_path / "r.csv"
    assert run_cli(["evaluate", "--model", "qwen2.5-7b", "--phase", "prefill", "--context",
                    "128", "--hw", "h100-sxm", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert (table["ttft_s"] == table["latency_s"]).all()
    assert table["tokens_per_s"].isna().all()
    assert (table["kv_cache_bytes"] == 128 * 57344).all()  # 2 x 28 x 4 x 128 x 2 bytes


@pytest.mark.parametrize("args, message", [
    (["--model", "llama-3-8b"], "llama-3-8b is a language model: give --phase"),
    (["--model", "llama-3-8b", "--phase", "decode", "--context", "9000"],
     "longer than llama-3-8b's max_position_embeddings, 8192"),
    (["--model", "resnet50", "--phase", "decode", "--context", "9"],
     "--phase and --context are for language models"),
    (["--model", "llama-3-8b", "--phase", "decode", "--context", "9", "--fusion", "fused"],
     "use --fusion unfused for decode"),
])
def test_evaluate_refusals_are_one_line(args, message, capsys, tmp_path):
    out = tmp_path / "r.csv"
    assert run_cli(["evaluate", *args, "--hw", "h100-sxm", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_evaluate_config_missing_a_field(tmp_path, capsys):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {k: v for k, v in TINY.items() if k != "vocab_size"}))
    assert run_cli(["evaluate", "--model", str(folder), "--phase", "decode", "--context", "4",
                    "--hw", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert "missing field 'vocab_size'" in err and err.count("\n") == 1
