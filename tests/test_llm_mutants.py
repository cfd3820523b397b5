"""By hand, the sizes and rules of workloads/llm.py that tests/test_llm_trace.py leaves loose: each
test here was written for mutants ``python -m benchmarks.mutation --module llm`` found alive
(every op's sizes one by one rather than summed, the MoE block at more than one token, the
defaults transformers gives a configuration, the longest prompt a trace holds at its exact edge),
with the expected values worked out in the comments beside them."""

from __future__ import annotations

import json

import pytest

# The tiny configurations of tests/test_llm_trace.py: hidden 8, 4 query heads and 2 KV heads of
# head_dim 3, MLP 5, 2 layers, vocabulary 11; one MoE layer of 4 experts, 2 per token.
from tests.test_llm_trace import TINY, TINY_MOE
from workloads.llm import (
    LLMConfigError,
    _band,
    attention_pairs,
    experts_touched,
    llm_config_from_dict,
    llm_figures,
    llm_trace,
    load_llm_config,
)
from workloads.trace import MAX_PER_SAMPLE

COLUMNS = ("kind", "m", "k", "n", "groups", "weight_elems", "input_elems", "output_elems",
           "vector_flops", "prunable")


def rows(trace, prefix: str = "") -> dict[str, tuple]:
    """name -> the op's columns, for the ops whose name starts with ``prefix``."""
    ops = trace.ops[trace.ops["name"].str.startswith(prefix)]
    return {r["name"]: tuple(r[c].item() if hasattr(r[c], "item") else r[c] for c in COLUMNS)
            for _, r in ops.iterrows()}


def test_every_op_of_a_dense_prefill_by_hand():
    """TINY, prefill of 4 tokens: q width 4 x 3 = 12, KV width 2 x 3 = 6, g = 2 query heads per
    KV head; the causal band over 4 tokens is 1 + 2 + 3 + 4 = 10 pairs, written as keys x
    queries = 2 x 5 (span 4, 2 x 4 - 4 + 1 = 5 is odd, so the span takes the half)."""
    t = llm_trace(llm_config_from_dict(TINY, name="tiny"), "prefill", 4)
    a, p = "model.layers.0.self_attn", "model.layers.0"
    assert rows(t, "model.embed_tokens") == {
        # 4 token ids and their 4 rows of 8
        "model.embed_tokens": ("other", 0, 0, 0, 1, 0, 4 + 32, 32, 0.0, False)}
    assert rows(t, p + ".") == {
        # RMSNorm: 4 FLOPs per element of 4 x 8
        f"{p}.input_layernorm": ("norm", 0, 0, 0, 1, 8, 32, 32, 128.0, False),
        f"{a}.q_proj": ("linear", 12, 8, 4, 1, 96, 32, 48, 0.0, True),
        f"{a}.k_proj": ("linear", 6, 8, 4, 1, 48, 32, 24, 0.0, True),
        f"{a}.v_proj": ("linear", 6, 8, 4, 1, 48, 32, 24, 0.0, True),
        # rotary on q and k: 4 x (12 + 6) elements, 3 FLOPs each
        f"{a}.rotary": ("elementwise", 0, 0, 0, 1, 0, 72, 72, 216.0, False),
        # per KV head K [2 x 3] . Q [3 x 2 x 5]; reads q (48) and this step's keys (4 x 6);
        # writes 4 heads x 10 pairs
        f"{a}.scores": ("matmul", 2, 3, 10, 2, 0, 48 + 24, 40, 0.0, False),
        f"{a}.softmax": ("softmax", 0, 0, 0, 1, 0, 40, 40, 200.0, False),
        # per KV head V^T [3 x 2] . P [2 x 10]; reads the probabilities and the values (4 x 6)
        f"{a}.context": ("matmul", 3, 2, 10, 2, 0, 40 + 24, 48, 0.0, False),
        f"{a}.o_proj": ("linear", 8, 12, 4, 1, 96, 48, 32, 0.0, True),
        f"{p}.attn_residual": ("elementwise", 0, 0, 0, 1, 0, 64, 32, 32.0, False),
        f"{p}.post_attention_layernorm": ("norm", 0, 0, 0, 1, 8, 32, 32, 128.0, False),
        f"{p}.mlp.gate_proj": ("linear", 5, 8, 4, 1, 40, 32, 20, 0.0, True),
        f"{p}.mlp.up_proj": ("linear", 5, 8, 4, 1, 40, 32, 20, 0.0, True),
        # SiLU, 4 FLOPs per element of 4 x 5
        f"{p}.mlp.act_fn": ("activation", 0, 0, 0, 1, 0, 20, 20, 80.0, False),
        f"{p}.mlp.mul": ("elementwise", 0, 0, 0, 1, 0, 40, 20, 20.0, False),
        f"{p}.mlp.down_proj": ("linear", 8, 5, 4, 1, 40, 20, 32, 0.0, True),
        f"{p}.mlp_residual": ("elementwise", 0, 0, 0, 1, 0, 64, 32, 32.0, False),
    }
    # the last token only: the final norm of 8 and the LM head's 11 x 8, kept dense
    assert rows(t, "model.norm") == {"model.norm": ("norm", 0, 0, 0, 1, 8, 8, 8, 32.0, False)}
    assert rows(t, "lm_head") == {"lm_head": ("linear", 11, 8, 1, 1, 88, 8, 11, 0.0, False)}
    assert len(t.ops) == 1 + 2 * 17 + 2  # 17 ops a layer
    assert t.provenance["tokens_per_sample"] == 4
    assert t.provenance["kv_read_elems"] == 0 and t.provenance["kv_read_by_op"] == {}
    # 2 (keys, values) x 2 layers x 2 KV heads x 3
    assert t.provenance["kv_elems_per_token"] == 24
    assert t.provenance["kv_cache_elems"] == 4 * 24


def test_biases_by_op():
    """Biases add one weight and one FLOP per output element of their projection."""
    c = llm_config_from_dict(dict(TINY, attention_bias=True, mlp_bias=True), name="b")
    # per layer: q 8 x 12, k and v 8 x 6, o 12 x 8, their biases 12 + 6 + 6 + 8; MLP 3 x 8 x 5
    # and its biases 5 + 5 + 8; two norms of 8; then the final norm and the untied 2 x 11 x 8
    layer = (96 + 48 + 48 + 96) + (12 + 6 + 6 + 8) + 120 + (5 + 5 + 8) + 16
    assert c.params == 2 * layer + 8 + 176 == 1132
    t = llm_trace(c, "prefill", 4)
    a, p = "model.layers.1.self_attn", "model.layers.1"
    got = rows(t, p + ".")
    assert got[f"{a}.q_proj"][5:] == (96 + 12, 32, 48, 48.0, True)
    assert got[f"{a}.k_proj"][5:] == (48 + 6, 32, 24, 24.0, True)
    assert got[f"{a}.o_proj"][5:] == (96 + 8, 48, 32, 32.0, True)
    assert got[f"{p}.mlp.up_proj"][5:] == (40 + 5, 32, 20, 20.0, True)
    assert got[f"{p}.mlp.down_proj"][5:] == (40 + 8, 20, 32, 32.0, True)
    assert t.params == c.params - 88  # the untied table is resident, not read


def test_every_op_of_an_moe_prefill_by_hand():
    """TINY_MOE, prefill of 3 tokens: 3 x 2 = 6 token-expert pairs; each expert's GEMM is one
    expert's (5 x 8, 8 x 5) over the pairs, and its weights hold all 4 experts."""
    c = llm_config_from_dict(TINY_MOE, name="moe")
    t = llm_trace(c, "prefill", 3)
    p, x = "model.layers.0.mlp", "model.layers.0.mlp.experts"
    assert rows(t, p + ".") == {
        # the router: 4 x 8, dense
        f"{p}.gate": ("linear", 4, 8, 3, 1, 32, 24, 12, 0.0, False),
        # softmax over 3 x 4 router logits (5 FLOPs each), keeps 3 x 2 weights
        f"{p}.routing": ("softmax", 0, 0, 0, 1, 0, 12, 6, 60.0, False),
        f"{x}.gate_proj": ("linear", 5, 8, 6, 1, 4 * 40, 6 * 8, 6 * 5, 0.0, True),
        f"{x}.up_proj": ("linear", 5, 8, 6, 1, 4 * 40, 6 * 8, 6 * 5, 0.0, True),
        f"{x}.act_fn": ("activation", 0, 0, 0, 1, 0, 30, 30, 4 * 30.0, False),
        # gate x up over 6 pairs x 5
        f"{x}.mul": ("elementwise", 0, 0, 0, 1, 0, 2 * 30, 30, 30.0, False),
        f"{x}.down_proj": ("linear", 8, 5, 6, 1, 4 * 40, 30, 6 * 8, 0.0, True),
        # the 6 pairs' outputs of 8 and their 6 routing weights -> 3 tokens x 8; a multiply and
        # an add per pair's element
        f"{x}.combine": ("elementwise", 0, 0, 0, 1, 0, 48 + 6, 24, 96.0, False),
    }
    assert t.provenance["experts"] == {"num_experts": 4, "experts_per_token": 2}
    routed = {"sets": 4, "sets_per_token": 2, "tokens_per_sample": 3}
    assert t.provenance["routed_weights_by_op"] == {
        f"{x}.gate_proj": routed, f"{x}.up_proj": routed, f"{x}.down_proj": routed}
    # The step's FLOPs, 2 per MAC: q and o 8 x 8, k and v 4 x 8 and the router 4 x 8 over 3
    # tokens, the experts 3 x 5 x 8 over 6 pairs, attention 4 heads x 6 causal pairs x head_dim
    # 2 twice, the LM head 11 x 8 once; plus the trace's vector FLOPs; for 2 requests.
    gemm = 2 * (3 * (64 + 32 + 32 + 64 + 32) + 3 * 40 * 6 + 2 * 4 * 6 * 2 + 88)
    vector = float(t.ops["vector_flops"].sum())
    assert llm_figures(c, "prefill", 3, batch=2).flops == 2 * (gemm + vector)


def test_decode_reads_the_cache_by_op():
    """Decode at context 6 of TINY: each layer's scores and context read 6 tokens x 6 of keys
    and of values; a window of 4 reads 4."""
    t = llm_trace(llm_config_from_dict(TINY, name="tiny"), "decode", 6)
    per = {f"model.layers.{n}.self_attn.{o}": 36 for n in (0, 1) for o in ("scores", "context")}
    assert t.provenance["kv_read_by_op"] == per
    assert t.provenance["kv_read_elems"] == 4 * 36
    c = llm_config_from_dict(dict(TINY, model_type="mistral", sliding_window=4), name="w")
    t = llm_trace(c, "decode", 6)
    assert set(t.provenance["kv_read_by_op"].values()) == {24}
    assert t.provenance["kv_cache_elems"] == c.kv_cache_elems(6) == 2 * 4 * 2 * 2 * 3


def test_kv_sizes_with_windows_on_some_layers():
    # Qwen2, a window of 3 from layer 1 on: layer 0 keeps 6 tokens, layer 1 keeps 3, of
    # 2 (keys, values) x 2 KV heads x 3.
    c = llm_config_from_dict(dict(TINY, model_type="qwen2", use_sliding_window=True,
                                  sliding_window=3, max_window_layers=1), name="q")
    assert c.windows == (None, 3)
    assert c.kv_cache_elems(6) == 12 * 6 + 12 * 3
    assert c.kv_cache_elems(2) == 12 * 2 + 12 * 2
    assert c.kv_elems_per_token == 2 * 2 * 2 * 3 == 24
    assert c.kv_bytes_per_token(1.5) == 36.0
    assert c.kv_bytes_per_token() == 48  # 2 bytes (fp16) unless told


def test_window_defaults_of_transformers():
    # Qwen2 with use_sliding_window and no sliding_window: transformers' default 4096.
    qwen = dict(TINY, model_type="qwen2", use_sliding_window=True, max_window_layers=1)
    assert llm_config_from_dict(qwen).windows == (None, 4096)
    # max_window_layers defaults to 28: a 29-layer model has its window on the last layer only.
    deep = dict(TINY, model_type="qwen2", use_sliding_window=True, sliding_window=3,
                num_hidden_layers=29)
    assert llm_config_from_dict(deep).windows == (None,) * 28 + (3,)
    # Without use_sliding_window, Qwen2 has no window whatever the layers and window say.
    off = dict(TINY, model_type="qwen2", sliding_window=3, max_window_layers=0)
    assert llm_config_from_dict(off).windows == (None, None)
    off["layer_types"] = ["sliding_attention", "sliding_attention"]
    assert llm_config_from_dict(off).windows == (None, None)
    # Mistral's default window 4096 acts on a long context: decode at 5000 keeps 4096 tokens.
    mistral = llm_config_from_dict(dict(TINY, model_type="mistral",
                                        max_position_embeddings=8192))
    assert mistral.windows == (4096, 4096)
    assert mistral.kv_cache_elems(5000) == 2 * 12 * 4096
    # Mixtral has no default window; an explicit null is no window.
    assert llm_config_from_dict(TINY_MOE).windows == (None,)
    assert llm_config_from_dict(dict(TINY, model_type="mistral",
                                     sliding_window=None)).windows == (None, None)


def test_longest_prompt_at_the_exact_limit():
    """Mistral-like, 2 query heads over 1 KV head of width 1, window 41: a prefill of T tokens
    holds 2 x attention_pairs(T, 41) + T x 1 elements in its context op, 2 x 41 x (2T - 40) / 2
    + T = 83 T - 1640, which is exactly MAX_PER_SAMPLE (2**29) at T = 6,468,344."""
    t_max = 6_468_344
    assert 83 * t_max - 1640 == MAX_PER_SAMPLE == 2 * attention_pairs(t_max, 41) + t_max
    c = llm_config_from_dict({
        "model_type": "mistral", "hidden_size": 8, "intermediate_size": 5,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 1, "sliding_window": 41, "vocab_size": 11,
        "max_position_embeddings": 10**7}, name="edge")
    assert llm_trace(c, "prefill", t_max).ops["input_elems"].max() == MAX_PER_SAMPLE
    for context in (t_max + 1, t_max + 1000):
        with pytest.raises(LLMConfigError, match=f"give at most {t_max} prompt tokens$"):
            llm_trace(c, "prefill", context)


def test_attention_pairs_stay_exact_integers():
    """The causal band's area is a whole number at any size; in floats, 10**9 + 1 tokens'
    500,000,001,500,000,001 pairs would round to a multiple of 64."""
    assert attention_pairs(10**9 + 1) == 500_000_001_500_000_001
    assert attention_pairs(10**9 + 1, 10**9) == 500_000_001_500_000_001 - 1
    for tokens, window in ((10**9 + 1, None), (10**9, None), (7, 3), (8, 4), (1, 1)):
        keys, queries = _band(tokens, window)
        assert type(keys) is int and type(queries) is int
        assert keys * queries == attention_pairs(tokens, window)
    # span 3 and 2 x 7 - 3 + 1 = 12, even: (3, 12 / 2); span 4 and 2 x 8 - 4 + 1 = 13, odd:
    # (4 / 2, 13)
    assert _band(7, 3) == (3, 6) and attention_pairs(7, 3) == 1 + 2 + 5 * 3
    assert _band(8, 4) == (2, 13) and attention_pairs(8, 4) == 1 + 2 + 3 + 5 * 4
    assert experts_touched(0, 0, 5) == 0.0


def test_layer_count_limit_is_1024():
    """MAX_LAYERS: 1,024 decoder layers are read, 1,025 refused in one line."""
    assert len(llm_config_from_dict(dict(TINY, num_hidden_layers=1024)).windows) == 1024
    with pytest.raises(LLMConfigError, match="'num_hidden_layers' is 1,025, above the 1,024"):
        llm_config_from_dict(dict(TINY, num_hidden_layers=1025))


@pytest.mark.parametrize("model_type", ["mistral", "mixtral"])
def test_architectures_without_biases_or_a_kv_default(model_type):
    """Mistral and Mixtral have no bias anywhere (transformers' modeling code builds none, so
    the configuration's bias flags are not read) and need num_key_value_heads."""
    base = TINY_MOE if model_type == "mixtral" else dict(TINY, model_type="mistral")
    plain = llm_config_from_dict(base)
    flags = llm_config_from_dict(dict(base, attention_bias=True, mlp_bias=True))
    assert (flags.qkv_bias, flags.o_bias, flags.mlp_bias) == (False, False, False)
    # TINY 1032 and TINY_MOE 904 parameters (tests/test_llm_trace.py), no bias added
    assert plain.params == flags.params == (904 if model_type == "mixtral" else 1032)
    assert plain.is_moe == (model_type == "mixtral")
    no_kv = {k: v for k, v in base.items() if k != "num_key_value_heads"}
    with pytest.raises(LLMConfigError, match="missing field 'num_key_value_heads'"):
        llm_config_from_dict(dict(no_kv, model_type=model_type))


def test_llama_and_qwen2_biases_follow_their_flags():
    llama = llm_config_from_dict(dict(TINY, attention_bias=True))
    assert (llama.qkv_bias, llama.o_bias, llama.mlp_bias) == (True, True, False)
    qwen = llm_config_from_dict(dict(TINY, model_type="qwen2", attention_bias=False,
                                     mlp_bias=True))
    assert (qwen.qkv_bias, qwen.o_bias, qwen.mlp_bias) == (True, False, False)
    assert not llm_config_from_dict(dict(TINY, model_type="qwen2")).is_moe


def test_the_architecture_table_and_configs_are_frozen():
    """ARCHITECTURES is shared by every read and an LLMConfig is a value: neither can be
    changed in place."""
    import dataclasses

    from workloads.llm import ARCHITECTURES

    with pytest.raises(dataclasses.FrozenInstanceError):
        ARCHITECTURES["llama"].moe = True
    with pytest.raises(dataclasses.FrozenInstanceError):
        llm_config_from_dict(TINY).num_layers = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        llm_figures(llm_config_from_dict(TINY), "decode", 2).tokens = 3


def test_figures_default_to_one_request_and_refuse_a_bad_batch():
    c = llm_config_from_dict(TINY, name="tiny")
    one = llm_figures(c, "decode", 6)
    # one request at 6 tokens: 6 x 24 cached elements of 2 bytes; 1 token through the layers
    assert (one.tokens, one.kv_cache_bytes, one.kv_read_bytes) == (1, 6 * 48, 6 * 48)
    assert llm_figures(c, "prefill", 6).tokens == 6
    for batch in (0, -1, True, 1.5, "2"):
        with pytest.raises(LLMConfigError, match="must be a positive integer"):
            llm_figures(c, "decode", 6, batch=batch)


@pytest.mark.parametrize("window", [0, -4, True, 2.5, "4096"])
def test_a_bad_sliding_window_is_refused(window):
    with pytest.raises(LLMConfigError, match="'sliding_window' must be a positive integer"):
        llm_config_from_dict(dict(TINY, model_type="mistral", sliding_window=window))


@pytest.mark.parametrize("types", [["sliding_attention"], ["full_attention"] * 3,
                                   "sliding_attention"])
def test_layer_types_must_list_one_type_per_layer(types):
    qwen = dict(TINY, model_type="qwen2", use_sliding_window=True, sliding_window=3,
                layer_types=types)
    with pytest.raises(LLMConfigError, match=r"one attention type per layer \(2\)"):
        llm_config_from_dict(qwen)


def test_one_expert_is_still_an_moe():
    c = llm_config_from_dict(dict(TINY_MOE, num_local_experts=1, num_experts_per_tok=1))
    assert c.is_moe
    # q 8x8, k and v 4x8, o 8x8, router 1x8, 1 expert x 3 x 8x5, two norms; final norm and
    # untied embeddings 2 x 11x8
    assert c.params == (64 + 32 + 32 + 64 + 8 + 120 + 16) + 8 + 176
    t = llm_trace(c, "decode", 4)
    assert "model.layers.0.mlp.experts.combine" in set(t.ops["name"])


def test_a_prompt_limit_of_one_token():
    """One head of width 2**28: the rotary op of one token holds 2 x 2**28 = 2**29 elements
    (queries and keys), of two 2**30, above MAX_PER_SAMPLE (2**29): the longest prompt is 1
    token."""
    c = llm_config_from_dict(dict(TINY, num_attention_heads=1, num_key_value_heads=1,
                                  head_dim=2**28), name="wide")
    with pytest.raises(LLMConfigError, match="give at most 1 prompt tokens$"):
        llm_trace(c, "prefill", 2)


def test_a_prompt_limit_below_a_failed_probe():
    """One head of width w = 2**27 - 1: the rotary op (queries and keys, 2w a token) of two
    tokens holds 4w = 2**29 - 4 elements, of three 6w, above 2**29 (issue 26: the check once
    counted only the context op's 3 + 2w and said 2 for w = 2**28 - 2, whose rotary op of two
    tokens, 2**30 - 8, the trace then refused). Asked for 4 tokens, the search probes 3 (too
    many) and must still try 2."""
    c = llm_config_from_dict(dict(TINY, num_attention_heads=1, num_key_value_heads=1,
                                  head_dim=2**27 - 1), name="wide")
    assert llm_trace(c, "prefill", 2).ops["input_elems"].max() == 2**29 - 4
    for context in (3, 4):
        with pytest.raises(LLMConfigError, match="give at most 2 prompt tokens$"):
            llm_trace(c, "prefill", context)


def test_a_config_file_is_named_by_its_stem(tmp_path):
    path = tmp_path / "folder" / "my-model.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY), encoding="utf-8")
    assert load_llm_config(str(path)).name == "my-model"
    (tmp_path / "folder" / "config.json").write_text(json.dumps(TINY), encoding="utf-8")
    assert load_llm_config(str(tmp_path / "folder")).name == "folder"


def test_the_residual_stream_by_hand():
    """Who feeds whom: each layer reads the stream the previous one wrote, and the MLP's
    residual add reads the MLP's last op (down_proj, or an MoE's weighted combine)."""
    def producers(trace):
        return {r["name"]: list(r["producers"]) for _, r in trace.ops.iterrows()}

    dense = producers(llm_trace(llm_config_from_dict(TINY), "prefill", 3))
    assert dense["model.layers.0.input_layernorm"] == ["model.embed_tokens"]
    assert dense["model.layers.1.input_layernorm"] == ["model.layers.0.mlp_residual"]
    assert dense["model.layers.1.mlp_residual"] == ["model.layers.1.attn_residual",
                                                    "model.layers.1.mlp.down_proj"]
    assert dense["model.layers.0.attn_residual"] == ["model.embed_tokens",
                                                     "model.layers.0.self_attn.o_proj"]
    assert dense["model.norm"] == ["model.layers.1.mlp_residual"]
    moe = producers(llm_trace(llm_config_from_dict(TINY_MOE), "prefill", 3))
    x = "model.layers.0.mlp.experts"
    assert moe["model.layers.0.mlp_residual"] == ["model.layers.0.attn_residual",
                                                  f"{x}.combine"]
    assert moe[f"{x}.combine"] == [f"{x}.down_proj", "model.layers.0.mlp.routing"]


def test_width_limit_is_2_to_the_22():
    """MAX_WIDTH: a vocabulary (or hidden or MLP width) of 2**22 = 4,194,304 is read, one more
    refused in one line."""
    assert llm_config_from_dict(dict(TINY, vocab_size=2**22)).vocab_size == 4_194_304
    with pytest.raises(LLMConfigError,
                       match="'vocab_size' is 4,194,305, above the 4,194,304 a trace"):
        llm_config_from_dict(dict(TINY, vocab_size=2**22 + 1))


def test_a_prompt_limit_one_below_the_first_probe():
    """The head of test_a_prompt_limit_below_a_failed_probe (2 tokens fit, 3 do not): asked for
    5 or 6 tokens, the search's first probe is (1 + 4 + 1) // 2 = 3 or (1 + 5 + 1) // 2 = 3, too
    many, so it goes on in [1, 2] and must still try 2."""
    c = llm_config_from_dict(dict(TINY, num_attention_heads=1, num_key_value_heads=1,
                                  head_dim=2**27 - 1), name="wide")
    for context in (5, 6):
        with pytest.raises(LLMConfigError, match=f"^prefill of {context} tokens: wide's op .* "
                                                 "give at most 2 prompt tokens$"):
            llm_trace(c, "prefill", context)


def test_decode_embeds_one_token_whatever_the_context():
    """Hidden 2**20, decode at a context of 1,024: the embedding looks up this step's one token
    (1 id + 2**20 elements read, 2**20 written), not the context's 1,024 (1,024 x (1 + 2**20),
    above MAX_PER_SAMPLE = 2**29): the step is traced, nothing refused."""
    c = llm_config_from_dict(dict(TINY, hidden_size=2**20, max_position_embeddings=2048))
    row = rows(llm_trace(c, "decode", 1024), "model.embed_tokens")["model.embed_tokens"]
    assert row[6:8] == (1 + 2**20, 2**20)


def test_the_longest_prompt_by_the_dense_flops_of_all_layers():
    """1,024 llama layers of hidden h = 8,192, MLP I = 8,234, one head of width 1, vocabulary
    V = 1,342,692. Dense FLOPs of a prefill of T tokens: per layer 2T x (q, k, v, o: 4h; gate,
    up, down: 3hI) and the attention's scores and context, 2 x 2 x T(T + 1) / 2 pairs; the LM
    head, on the last token only, 2Vh. At T = 21,728 that is exactly 2**53 = MAX_COUNT (every
    op alone far below: the MLP's product reads 2 x T x I = 357,816,704 < 2**29), so 21,728
    tokens fit and 21,729 do not, as no single op but all of them together."""
    h, i, v, t = 8192, 8234, 1_342_692, 21_728
    assert 1024 * (2 * t * (4 * h + 3 * h * i) + 2 * t * (t + 1)) + 2 * v * h == 2**53
    c = llm_config_from_dict({
        "model_type": "llama", "hidden_size": h, "intermediate_size": i,
        "num_hidden_layers": 1024, "num_attention_heads": 1, "num_key_value_heads": 1,
        "head_dim": 1, "vocab_size": v, "max_position_embeddings": 10**5}, name="deep")
    with pytest.raises(LLMConfigError, match=(
            "^prefill of 21729 tokens: deep's ops together would hold 9.01e\\+15 dense FLOPs "
            "per request, above the 9,007,199,254,740,992 a trace holds; give at most 21728 "
            "prompt tokens$")):
        llm_trace(c, "prefill", t + 1)


def test_weights_of_exactly_2_to_the_53_still_fit():
    """One Mixtral layer of hidden h = 2**22, E = 171 experts of MLP I = 4,186,127 (1 per
    token), one head of width 1, vocabulary V = 319: weights h x (q, k, v, o, two norms: 6;
    router E; experts 3EI; final norm 1; LM head V) = 2**22 x (7 + 171 x 12,558,382 + 319) =
    2**22 x 2**31 = 2**53 = MAX_COUNT, which a trace holds. A prompt of 65 tokens is refused
    by its residual add alone (2 x 65 x 2**22 input elements, above 2**29), and the search
    still runs: 64 tokens fit."""
    h, i, e, v = 2**22, 4_186_127, 171, 319
    assert h * (7 + e * (1 + 3 * i) + v) == 2**53
    c = llm_config_from_dict({
        "model_type": "mixtral", "hidden_size": h, "intermediate_size": i,
        "num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1,
        "head_dim": 1, "vocab_size": v, "max_position_embeddings": 10**5,
        "num_local_experts": e, "num_experts_per_tok": 1}, name="heavy")
    assert int(llm_trace(c, "prefill", 1).ops["weight_elems"].sum()) == 2**53
    with pytest.raises(LLMConfigError, match=(
            "^prefill of 65 tokens: heavy's op model.layers.0.attn_residual would hold 5.45e\\+08 "
            "input elements per request, above the 536,870,912 a trace holds; give at most 64 "
            "prompt tokens$")):
        llm_trace(c, "prefill", 65)


def test_the_longest_prompt_by_the_attention_flops_of_all_layers():
    """1,024 llama layers of hidden h = 8, MLP I = 1, vocabulary V = 1, and 2 KV heads (2 query
    heads, groups = 2) of width d = 8,192: the attention dominates. Dense FLOPs of a prefill of
    T tokens: per layer 2T x (q, k, v: h x 2d each; o: 2d x h; gate, up, down: 3hI) and the
    scores and the context, 2 ops x 2 x 2 heads x d x T(T + 1) / 2 pairs; the LM head 2Vh. At
    T = 16,367 they fit (9,006,641,176,592,400), at 16,368 not (541,433,528,336 above 2**53);
    every op alone fits (q_proj writes T x 2d < 2**28)."""
    h, i, v, d = 8, 1, 1, 8192

    def flops(t):
        return 1024 * (2 * t * (8 * h * d + 3 * h * i) + 8 * d * t * (t + 1) // 2) + 2 * v * h

    assert flops(16_367) == 9_006_641_176_592_400 and flops(16_368) - 2**53 == 541_433_528_336
    c = llm_config_from_dict({
        "model_type": "llama", "hidden_size": h, "intermediate_size": i,
        "num_hidden_layers": 1024, "num_attention_heads": 2, "num_key_value_heads": 2,
        "head_dim": d, "vocab_size": v, "max_position_embeddings": 10**5}, name="attentive")
    with pytest.raises(LLMConfigError, match=(
            "^prefill of 16368 tokens: attentive's ops together would hold 9.01e\\+15 dense "
            "FLOPs per request, above the 9,007,199,254,740,992 a trace holds; give at most "
            "16367 prompt tokens$")):
        llm_trace(c, "prefill", 16_368)
