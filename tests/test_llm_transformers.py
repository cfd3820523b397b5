"""The language-model traces against transformers itself (an optional extra): each shipped
configuration (and a tiny sliding-window one) built on the meta device from the same config.json.

* parameters: the model's parameter count;
* FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over a forward pass. It counts matrix
  products only (``mm``, ``addmm``, ``bmm``, SDPA): the trace's vector FLOPs (norms, rotary
  embeddings, softmax, SiLU, residual adds, the MoE combine) and the embedding gather and top-k,
  which it ignores, are left out of the comparison. Eager attention computes the whole S x S
  score matrix and masks it afterwards; the trace counts the S(S+1)/2 pairs a causal kernel
  computes, so in prefill its attention FLOPs are FlopCounterMode's times (S+1)/(2S). A decode
  step has no mask to skip: there the counts are equal;
* KV cache: the bytes of the keys and values transformers' DynamicCache holds after the
  forward pass.
"""

from __future__ import annotations

import json

import pytest

from workloads.llm import LLM_CONFIGS_DIR, llm_config_from_dict, llm_figures, llm_names, llm_trace

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

BATCH, PROMPT = 2, 16


def _build(document: dict):
    fields = {k: v for k, v in document.items() if not k.startswith("_")}
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    extra = {"experts_implementation": "batched_mm"} if document["model_type"] == "mixtral" else {}
    # Eager attention: the score and context products are plain bmm calls FlopCounterMode sees.
    # batched_mm experts: each token-expert pair's products, with no data-dependent shapes
    # (the meta device has no data to route by).
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", dtype=torch.bfloat16, **extra)
    return model.eval(), config


def _forward(model, config, tokens: int, cache=None):
    ids = torch.zeros(BATCH, tokens, dtype=torch.long, device="meta")
    cache = cache if cache is not None else transformers.DynamicCache(config=config)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    return counter.get_total_flops(), out.past_key_values


def _cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values))


def _gemm_flops(trace, batch: int) -> tuple[int, int]:
    """(attention, other) dense GEMM FLOPs of ``trace`` at ``batch``."""
    o = trace.ops
    flops = 2 * o["m"] * o["k"] * o["n"] * o["groups"] * batch
    attention = o["name"].str.endswith((".scores", ".context"))
    return int(flops[attention].sum()), int(flops[~attention].sum())


def _check(document: dict, name: str, prompt: int) -> None:
    config = llm_config_from_dict(document, name=name)
    model, hf_config = _build(document)
    assert sum(p.numel() for p in model.parameters()) == config.params
    trace = llm_trace(config, "prefill", prompt)
    assert trace.provenance["params"] == config.params
    # Read by a step: all but an untied embedding table (the lookup reads its tokens' rows).
    table = 0 if config.tie_word_embeddings else config.vocab_size * config.hidden_size
    assert trace.params == config.params - table

    counted, cache = _forward(model, hf_config, prompt)
    attention, other = _gemm_flops(llm_trace(config, "prefill", prompt), BATCH)
    assert attention * 2 * prompt % (prompt + 1) == 0
    assert counted == other + attention * 2 * prompt // (prompt + 1)
    figures = llm_figures(config, "prefill", prompt, BATCH, value_bytes=2)
    assert _cache_bytes(cache) == figures.kv_cache_bytes
    assert _cache_bytes(cache) == BATCH * prompt * config.kv_bytes_per_token(2)

    # One decode step at context prompt + 1 reads the prompt's cache plus its own entry.
    counted, cache = _forward(model, hf_config, 1, cache)
    attention, other = _gemm_flops(llm_trace(config, "decode", prompt + 1), BATCH)
    assert counted == other + attention


@pytest.mark.parametrize("name", llm_names())
def test_shipped_model_against_transformers(name):
    with open(LLM_CONFIGS_DIR / f"{name}.json", encoding="utf-8") as f:
        document = json.load(f)
    _check(document, name, PROMPT)


TINY_WINDOWED = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
                 "vocab_size": 100, "max_position_embeddings": 128, "sliding_window": 5}


@pytest.mark.parametrize("family", [
    {"model_type": "mistral"},  # every layer
    {"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 1},  # layer 1
    {"model_type": "qwen2", "use_sliding_window": True,
     "layer_types": ["sliding_attention", "full_attention"]},  # layer 0
])
def test_sliding_window_against_transformers(family):
    """A window shorter than the prompt: transformers keeps window - 1 tokens between steps and
    a decode step attends to them and itself, the window the trace reads."""
    document = dict(TINY_WINDOWED, **family)
    config = llm_config_from_dict(document, name="tiny-window")
    model, hf_config = _build(document)
    assert sum(p.numel() for p in model.parameters()) == config.params
    _, cache = _forward(model, hf_config, 9)
    per_layer = config.kv_bytes_per_token(2) // config.num_layers
    kept = sum(9 if w is None else w - 1 for w in config.windows)
    assert _cache_bytes(cache) == BATCH * kept * per_layer
    counted, _ = _forward(model, hf_config, 1, cache)
    attention, other = _gemm_flops(llm_trace(config, "decode", 10), BATCH)
    assert counted == other + attention
    read = sum(10 if w is None else w for w in config.windows)
    assert llm_figures(config, "decode", 10, BATCH).kv_read_bytes == BATCH * read * per_layer
