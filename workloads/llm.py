"""Language-model traces built from a model's configuration (a Hugging Face ``config.json``),
offline and without weights.

A configuration is read into an :class:`LLMConfig` (:func:`load_llm_config`: a shipped name from
``workloads/llm_configs`` or a path). :func:`llm_trace` turns it into a per-sample
:class:`~workloads.Trace` of one step of one of two phases:

* ``prefill``: each request's ``context`` prompt tokens go through the model at once (causal
  attention over the prompt) and the LM head gives the first generated token;
* ``decode``: each request adds one token at context length ``context`` (the tokens it attends
  to, itself included), reading the keys and values of the other ones from the KV cache.

Ops per decoder layer follow the model's module paths: RMSNorm, Q/K/V projections, rotary
embeddings, attention scores, softmax, attention context, O projection, residual add, RMSNorm,
the gated MLP (gate, up, activation, product, down) or the MoE block (router, routing softmax,
experts' gate/up/activation/product/down, weighted combine), residual add; then the final norm and
the LM head of the last token (the only logits generation needs). Everything that depends on the
batch is per sample, as in every trace. Routers and the LM head are not prunable: pruning
recipes (SparseGPT, Wanda) keep them dense.

Attention is two ``matmul`` ops (scores, context) grouped by KV head: a KV head's ``g = heads /
kv_heads`` query heads share its keys and values (grouped-query attention), so ``n`` counts
``g`` queries per token. Their FLOPs are the useful ones: the key-query pairs the causal mask
(and a sliding window) keeps, written as an ``m x n`` rectangle of the same area (see
:func:`attention_pairs`); an unfused implementation writes as many scores. In decode their inputs
hold the KV cache: ``context`` tokens of keys (scores) and of values (context) per layer, so at
batch ``B`` a layer reads ``B x L x kv_bytes_per_token / layers`` of it, as features.

``weight_elems`` are the parameters an op holds. The embedding lookup reads its tokens' rows,
which are its input, not the table: an untied table's ``vocab x hidden`` parameters are resident
but not in ``weight_elems`` (the provenance's ``params`` and ``resident_weight_elems`` count every
parameter). An MoE layer's experts hold ``E`` sets of weights of which each token uses ``k``: the
experts' GEMM dims are one expert's and ``n`` counts token-expert pairs (FLOPs exact);
``weight_elems`` holds all ``E`` experts, ``E`` copies of the ``m x k`` GEMM weight that a
format compresses and a weight dtype quantises each (resident, as the memory fit counts them).
The provenance's ``routed_weights_by_op`` says so per expert linear, and that a step of ``T``
tokens (batch x ``tokens_per_sample``) reads only ``E x (1 - (1 - k/E)^T)`` of the experts in
expectation: the evaluator prices that share of the op's stored weights (values, index and
scales alike; ``dse.roofline.pricing.weight_sets`` and ``weight_read_share``).

What the trace schema cannot say yet, and :func:`check_priceable` refuses until the evaluator
can (:func:`llm_figures` gives the exact figures):

* the KV cache is read from DRAM whatever the fusion model (provenance ``kv_read_elems``, and
  per op ``kv_read_by_op``, which the evaluator prices at the KV-cache dtype): the
  unfused model prices it, the fused ones drop it with the other features, so decode is priced
  unfused only; and it is resident (``kv_cache_elems``), which the memory model does not know.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .export import ACTIVATION_FLOPS, SOFTMAX_FLOPS
from .trace import MAX_COUNT, MAX_PER_SAMPLE, MODEL_INPUT, SCHEMA, Trace, TraceError

__all__ = [
    "LLM_CONFIGS_DIR",
    "MAX_LAYERS",
    "PHASES",
    "LLMConfig",
    "LLMConfigError",
    "LLMFigures",
    "attention_pairs",
    "check_priceable",
    "experts_touched",
    "llm_config_from_dict",
    "llm_figures",
    "llm_names",
    "llm_trace",
    "load_llm_config",
    "touched_share",
]

LLM_CONFIGS_DIR = Path(__file__).parent / "llm_configs"
PHASES = ("prefill", "decode")

#: Vector FLOPs per element: RMSNorm squares, sums, scales and multiplies by its weight (the
#: per-token rsqrt is left out); rotary embeddings ``x * cos + rotate_half(x) * sin``.
RMS_NORM_FLOPS = 4
ROTARY_FLOPS = 3

#: Activation names of config.json (``hidden_act``) -> the export's activation names.
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu",
                "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu", "relu": "relu"}


class LLMConfigError(TraceError):
    """A model configuration, phase or context length that cannot be traced; one line naming
    the file, the field and the fix."""


@dataclass(frozen=True)
class _Architecture:
    """What a ``model_type`` implies beyond its config.json: biases, MoE and sliding windows,
    as transformers' modeling code for that type builds the model."""

    qkv_bias: bool | str  # a constant, or the config field that says (default False)
    o_bias: bool | str
    mlp_bias: bool | str
    moe: bool
    window: str  # "none": never; "all": sliding_window on every layer; "qwen2": see below
    window_default: int | None  # transformers' default sliding_window where config.json has none
    kv_heads_default: bool  # num_key_value_heads defaults to num_attention_heads


#: The most decoder layers a configuration may have: the largest public models have about 130;
#: a trace holds ~17 ops a layer, so a mistyped count (1e9) would build ops until memory ran
#: out rather than fail.
MAX_LAYERS = 1024
#: The widest a width field (hidden, intermediate, vocabulary size) may be: 2**22, far above
#: any public model's (hidden 16,384-25,600, vocabularies ~256 Ki); a mistyped 2**40 once
#: reached the trace's per-sample limit, which named an op, not the field. (A head too wide
#: for one token is told by the trace, with the op it overflows.)
MAX_WIDTH = 2**22

#: The width fields :data:`MAX_WIDTH` bounds.
_WIDTHS = ("hidden_size", "intermediate_size", "vocab_size")

#: The decoder-only families whose structure this module knows (transformers 5 modeling code).
ARCHITECTURES = {
    "llama": _Architecture("attention_bias", "attention_bias", "mlp_bias", False, "none", None,
                           True),
    "mistral": _Architecture(False, False, False, False, "all", 4096, False),
    "mixtral": _Architecture(False, False, False, True, "all", None, False),
    "qwen2": _Architecture(True, False, False, False, "qwen2", 4096, False),
}


@dataclass(frozen=True)
class LLMConfig:
    """The structure of a decoder-only language model, as its configuration gives it.

    ``head_dim`` is read, not derived, where the configuration has it (it is not always
    ``hidden_size / num_heads``). ``num_experts`` is 0 for a dense MLP. ``windows`` holds, per
    layer, the sliding window in tokens or None for full attention.
    """

    name: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    hidden_act: str
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    num_experts: int
    experts_per_token: int
    windows: tuple[int | None, ...]
    source: str

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def kv_elems_per_token(self) -> int:
        """Keys and values of one token over all layers: ``2 x layers x kv_heads x head_dim``."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype_bytes: float = 2) -> float:
        """KV-cache bytes of one token: ``2 x layers x kv_heads x head_dim x kv_dtype_bytes``."""
        return self.kv_elems_per_token * kv_dtype_bytes

    def kv_cache_elems(self, context: int) -> int:
        """KV-cache elements of one request at ``context`` tokens (a layer with a sliding
        window keeps at most the window)."""
        per_layer = 2 * self.num_kv_heads * self.head_dim
        return sum(per_layer * (context if w is None else min(context, w)) for w in self.windows)

    @property
    def params(self) -> int:
        """Parameter elements of the model (tied embeddings counted once)."""
        h, i = self.hidden_size, self.intermediate_size
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attention = h * (q + 2 * kv) + q * h + (q + 2 * kv) * self.qkv_bias + h * self.o_bias
        if self.is_moe:
            mlp = self.num_experts * h + self.num_experts * 3 * h * i
        else:
            mlp = 3 * h * i + (2 * i + h) * self.mlp_bias
        layer = attention + mlp + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + h + embeddings


# --- reading configurations ------------------------------------------------------------------


def llm_names() -> list[str]:
    """Names of the shipped model configurations, sorted."""
    return sorted(p.stem for p in LLM_CONFIGS_DIR.glob("*.json"))


def load_llm_config(name_or_path: str | Path) -> LLMConfig:
    """A shipped configuration by name (:func:`llm_names`), or a ``config.json`` by path (a
    file, or a folder holding ``config.json``)."""
    text = str(name_or_path).strip()
    if text in llm_names():
        path = LLM_CONFIGS_DIR / f"{text}.json"
        name = text
    elif text.endswith(".json") or "/" in text or "\\" in text or Path(text).is_dir():
        path = Path(text)
        if path.is_dir():
            path = path / "config.json"
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    else:
        raise LLMConfigError(f"unknown language model {text!r}; shipped: "
                             f"{', '.join(llm_names())}; or give a path to a config.json")
    where = str(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LLMConfigError(f"{where}: no such file; give a shipped language model "
                             f"({', '.join(llm_names())}) or a path to a config.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LLMConfigError(f"{where}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise LLMConfigError(f"{where}: malformed JSON ({exc.msg}; line {exc.lineno}, column "
                             f"{exc.colno})") from None
    if not isinstance(document, dict):
        raise LLMConfigError(f"{where}: a config.json holds one JSON object")
    return llm_config_from_dict(document, name=name, where=where)


_MEANING = {
    "model_type": "the architecture, e.g. llama",
    "hidden_size": "the width of the residual stream",
    "intermediate_size": "the width of the MLP",
    "num_hidden_layers": "the number of decoder layers",
    "num_attention_heads": "the number of query heads",
    "num_key_value_heads": "the number of key/value heads (grouped-query attention)",
    "head_dim": "the width of one attention head",
    "vocab_size": "the number of tokens",
    "max_position_embeddings": "the longest context",
    "num_local_experts": "the number of MoE experts",
    "num_experts_per_tok": "the experts each token is routed to",
}


def llm_config_from_dict(document: Mapping[str, Any], name: str = "model",
                         where: str | None = None) -> LLMConfig:
    """Read a Hugging Face-style configuration (the content of a ``config.json``).

    Structural sizes are needed; fields transformers gives a default for (``head_dim``,
    ``tie_word_embeddings``, biases, ``hidden_act``, sliding windows) take that default.
    Keys starting with ``_`` (a shipped file's ``_source``) and unknown keys are ignored.
    """
    where = where or name

    def missing(key: str) -> LLMConfigError:
        return LLMConfigError(f"{where}: missing field {key!r} ({_MEANING[key]}); a Hugging Face "
                              "config.json of a decoder-only model has it")

    def positive(key: str, default: int | None = None) -> int:
        value = document.get(key)
        value = default if value is None else value  # null in a config.json: the default
        if value is None:
            raise missing(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LLMConfigError(f"{where}: field {key!r} must be a positive integer, "
                                 f"got {value!r}")
        if key in _WIDTHS and value > MAX_WIDTH:
            raise LLMConfigError(f"{where}: field {key!r} is {value:,}, above the {MAX_WIDTH:,} "
                                 "a trace is built for (public models stay far below); give "
                                 "the model's own value")
        return value

    def flag(key: str, default: bool) -> bool:
        value = document.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise LLMConfigError(f"{where}: field {key!r} must be true or false, got {value!r}")
        return value

    model_type = document.get("model_type")
    if model_type is None:
        raise missing("model_type")
    if model_type not in ARCHITECTURES:
        raise LLMConfigError(f"{where}: model_type {model_type!r} is not one this tracer knows; "
                             f"known: {', '.join(ARCHITECTURES)}")
    arch = ARCHITECTURES[model_type]
    hidden = positive("hidden_size")
    heads = positive("num_attention_heads")
    layers = positive("num_hidden_layers")
    if layers > MAX_LAYERS:
        raise LLMConfigError(f"{where}: field 'num_hidden_layers' is {layers:,}, above the "
                             f"{MAX_LAYERS:,} layers a trace is built for (the largest public "
                             "models have about 130); give the model's own layer count")
    kv_heads = positive("num_key_value_heads", heads if arch.kv_heads_default else None)
    if heads % kv_heads:
        raise LLMConfigError(f"{where}: num_attention_heads ({heads}) is not a multiple of "
                             f"num_key_value_heads ({kv_heads})")
    if document.get("head_dim") is None and hidden % heads:
        raise LLMConfigError(f"{where}: hidden_size ({hidden}) is not a multiple of "
                             f"num_attention_heads ({heads}); give 'head_dim'")
    head_dim = positive("head_dim", hidden // heads)
    act = document.get("hidden_act", "silu")
    if act not in _ACTIVATIONS:
        raise LLMConfigError(f"{where}: hidden_act {act!r} is not known; known: "
                             f"{', '.join(_ACTIVATIONS)}")

    def bias(rule: bool | str) -> bool:
        return rule if isinstance(rule, bool) else flag(rule, False)

    experts = positive("num_local_experts") if arch.moe else 0
    per_token = positive("num_experts_per_tok") if arch.moe else 0
    if per_token > experts:
        raise LLMConfigError(f"{where}: num_experts_per_tok ({per_token}) is above "
                             f"num_local_experts ({experts})")
    source = document.get("_source")
    if isinstance(source, Mapping):
        source = source.get("url")
    return LLMConfig(
        name=name,
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=positive("intermediate_size"),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=positive("vocab_size"),
        max_position_embeddings=positive("max_position_embeddings"),
        tie_word_embeddings=flag("tie_word_embeddings", False),
        hidden_act=_ACTIVATIONS[act],
        qkv_bias=bias(arch.qkv_bias),
        o_bias=bias(arch.o_bias),
        mlp_bias=bias(arch.mlp_bias),
        num_experts=experts,
        experts_per_token=per_token,
        windows=_windows(document, arch, layers, where),
        source=str(source) if source else where,
    )


def _windows(document: Mapping[str, Any], arch: _Architecture, layers: int,
             where: str) -> tuple[int | None, ...]:
    """Per layer, the sliding window or None, as transformers' configuration classes set it."""
    if arch.window == "none":
        return (None,) * layers
    window = document.get("sliding_window", arch.window_default)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                               or window < 1):
        raise LLMConfigError(f"{where}: field 'sliding_window' must be a positive integer or "
                             f"null, got {window!r}")
    if arch.window == "all":
        return (window,) * layers
    # Qwen2: a window only where use_sliding_window, on the layers layer_types marks sliding or
    # else from layer max_window_layers on.
    if not document.get("use_sliding_window", False) or window is None:
        return (None,) * layers
    types = document.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise LLMConfigError(f"{where}: field 'layer_types' must list one attention type "
                                 f"per layer ({layers})")
        return tuple(window if t == "sliding_attention" else None for t in types)
    first = document.get("max_window_layers", 28)
    return tuple(window if i >= first else None for i in range(layers))


# --- attention and MoE arithmetic ----------------------------------------------------------------


def attention_pairs(tokens: int, window: int | None = None) -> int:
    """Key-query pairs of causal self-attention over ``tokens`` tokens, each query seeing at most
    ``window`` keys (itself included): ``sum_i min(i, window)``."""
    span = tokens if window is None else min(tokens, window)
    return span * (2 * tokens - span + 1) // 2


def _band(tokens: int, window: int | None) -> tuple[int, int]:
    """(keys, queries) with ``keys x queries = attention_pairs(tokens, window)``: the causal
    band as a rectangle of equal area. ``span + (2 * tokens - span + 1)`` is odd, so one of
    the two factors is even and takes the half."""
    span = tokens if window is None else min(tokens, window)
    other = 2 * tokens - span + 1
    return (span, other // 2) if other % 2 == 0 else (span // 2, other)


def touched_share(num_experts, experts_per_token, tokens):
    """The share of ``num_experts`` experts (E > 0) that a batch of ``tokens`` tokens routes
    to, in expectation, when each token picks ``experts_per_token`` (k) of them uniformly:
    ``1 - (1 - k/E)^T``. Numbers or numpy arrays alike (``dse.roofline.pricing`` prices the
    weights an MoE layer's step reads by it)."""
    return 1.0 - (1.0 - experts_per_token / num_experts) ** tokens


def experts_touched(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """Experts a batch of ``tokens`` tokens routes to, in expectation, when each token picks
    ``experts_per_token`` of ``num_experts`` uniformly: ``E x (1 - (1 - k/E)^T)``."""
    if num_experts == 0:
        return 0.0
    return num_experts * touched_share(num_experts, experts_per_token, tokens)


# --- the trace -----------------------------------------------------------------------------------


def _check_phase(config: LLMConfig, phase: str, context: int) -> None:
    if phase not in PHASES:
        raise LLMConfigError(f"phase {phase!r} is not known; use {' or '.join(PHASES)}")
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise LLMConfigError(f"context {context!r} must be a positive number of tokens")
    if context > config.max_position_embeddings:
        raise LLMConfigError(f"context {context} tokens is longer than {config.name}'s "
                             f"max_position_embeddings, {config.max_position_embeddings}; "
                             f"give at most {config.max_position_embeddings}")
    too_large = _first_too_large(config, phase, context)
    if too_large is None or _first_too_large(config, phase, 1) is not None:
        return  # fits; or too large at one token, which no shorter context cures: the trace says
    lo, hi = 1, context - 1  # the longest context whose every count a trace holds
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if _first_too_large(config, phase, mid) is None else (lo, mid - 1)
    where, what, value, limit = too_large
    step = f"prefill of {context} tokens" if phase == "prefill" else \
        f"decode at a context of {context} tokens"
    tokens = "prompt tokens" if phase == "prefill" else "tokens of context"
    raise LLMConfigError(f"{step}: {config.name}'s {where} would hold {value:.3g} {what} per "
                         f"request, above the {limit:,} a trace holds; give at most {lo} "
                         f"{tokens}")


#: What each limit of a trace (workloads.trace) bounds, in words.
_COUNTS = {"n": "GEMM columns (n)", "input_elems": "input elements",
           "output_elems": "output elements", "weight_elems": "weight elements",
           "vector_flops": "vector FLOPs", "flops": "dense FLOPs"}


def _first_too_large(config: LLMConfig, phase: str, context: int
                     ) -> tuple[str, str, int | float, int] | None:
    """The first count a trace of this step would hold above the trace's limits (``(where, what,
    value, limit)``), None when every one fits: each op's per-sample ``n``, input and output
    elements (MAX_PER_SAMPLE), its weights and FLOPs, and the model's totals (MAX_COUNT). Every
    count grows with ``context``. One layer per distinct window is built: the layers sharing a
    window hold the same counts, and weigh the totals by their number."""
    t = context if phase == "prefill" else 1
    layers: dict[int | None, int] = {}
    for window in config.windows:
        layers[window] = layers.get(window, 0) + 1
    groups = [(1, [_embedding(config, t)])]
    groups += [(count, _layer(config, phase, context, f"model.layers.{config.windows.index(w)}",
                              w, "model.embed_tokens")[0]) for w, count in layers.items()]
    groups.append((1, _head(config, "model.embed_tokens")))
    totals = {"weight_elems": 0, "vector_flops": 0, "flops": 0}
    for count, records in groups:
        for r in records:
            flops = 2 * r["groups"] * r["m"] * r["k"] * r["n"]
            for column, value, limit in (
                    ("n", r["n"], MAX_PER_SAMPLE),
                    ("input_elems", r["input_elems"], MAX_PER_SAMPLE),
                    ("output_elems", r["output_elems"], MAX_PER_SAMPLE),
                    ("weight_elems", max(r["weight_elems"], r["groups"] * r["m"] * r["k"]),
                     MAX_COUNT),
                    ("vector_flops", r["vector_flops"], MAX_COUNT), ("flops", flops, MAX_COUNT)):
                if value > limit:
                    return f"op {r['name']}", _COUNTS[column], value, limit
            totals["weight_elems"] += count * r["weight_elems"]
            totals["vector_flops"] += count * r["vector_flops"]
            totals["flops"] += count * flops
    for column, value in totals.items():
        if value > MAX_COUNT:
            return "ops together", _COUNTS[column], value, MAX_COUNT
    return None


def _op(name: str, kind: str, producers: list[str], *, m: int = 0, k: int = 0, n: int = 0,
        groups: int = 1, weight: int = 0, inputs: int, outputs: int, flops: float = 0.0,
        prunable: bool = False) -> dict[str, Any]:
    return {"name": name, "kind": kind, "m": m, "k": k, "n": n, "groups": groups,
            "weight_elems": weight, "input_elems": inputs, "output_elems": outputs,
            "vector_flops": float(flops), "prunable": prunable, "producers": producers}


def _linear(name: str, producer: str, rows: int, cols: int, tokens: int, bias: bool,
            prunable: bool = True, weight_sets: int = 1) -> dict[str, Any]:
    """``tokens`` x ``cols`` -> ``tokens`` x ``rows``; a bias add is one FLOP per output."""
    out = tokens * rows
    return _op(name, "linear", [producer], m=rows, k=cols, n=tokens,
               weight=weight_sets * (rows * cols + rows * bias), inputs=tokens * cols,
               outputs=out, flops=out if bias else 0, prunable=prunable)


def llm_trace(config: LLMConfig, phase: str, context: int) -> Trace:
    """The per-sample trace of one ``phase`` step at ``context`` tokens (see the module)."""
    _check_phase(config, phase, context)
    c = config
    t = context if phase == "prefill" else 1  # tokens per request through the layers
    records = [_embedding(c, t)]
    stream = "model.embed_tokens"
    kv_read_total = 0
    kv_read_by_op: dict[str, int] = {}  # per op, the inputs per sample read from the KV cache
    for layer, window in enumerate(c.windows):
        p = f"model.layers.{layer}"
        layer_records, kv_read = _layer(c, phase, context, p, window, stream)
        records += layer_records
        if phase == "decode":
            a = f"{p}.self_attn"
            kv_read_total += 2 * kv_read
            kv_read_by_op[f"{a}.scores"] = kv_read_by_op[f"{a}.context"] = kv_read
        stream = f"{p}.mlp_residual"
    records += _head(c, stream)
    provenance = {
        "source": f"{c.source}; traced from the configuration by workloads/llm.py (no weights)",
        "command": f"dse evaluate --model {c.name} --phase {phase} --context {context}",
        "config": c.name,
        "phase": phase,
        "context": context,
        "tokens_per_sample": t,
        "params": c.params,
        "resident_weight_elems": c.params,
        "macs_per_sample": None,
        "kv_elems_per_token": c.kv_elems_per_token,
        "kv_cache_elems": c.kv_cache_elems(context),
        "kv_read_elems": kv_read_total,
        "kv_read_by_op": kv_read_by_op,
        "schema": SCHEMA,
    }
    if c.is_moe:
        provenance["experts"] = {"num_experts": c.num_experts,
                                 "experts_per_token": c.experts_per_token}
        # Each expert linear holds E equal sets of weights; each token reads k of them.
        routed = {"sets": c.num_experts, "sets_per_token": c.experts_per_token,
                  "tokens_per_sample": t}
        provenance["routed_weights_by_op"] = {
            r["name"]: dict(routed) for r in records
            if r["kind"] == "linear" and ".mlp.experts." in r["name"]}
    trace = Trace.from_records(f"{c.name}.{phase}.{context}", [t], records, provenance,
                               where=c.name)
    trace.provenance["macs_per_sample"] = trace.macs_per_sample
    return trace


def _embedding(c: LLMConfig, t: int) -> dict[str, Any]:
    # The lookup reads its tokens' ids and rows, not the table: the rows are its input, and the
    # table's parameters are resident (provenance "params") but not read.
    return _op("model.embed_tokens", "other", [MODEL_INPUT], inputs=t + t * c.hidden_size,
               outputs=t * c.hidden_size)


def _layer(c: LLMConfig, phase: str, context: int, p: str, window: int | None,
           stream: str) -> tuple[list[dict[str, Any]], int]:
    """The ops of decoder layer ``p`` (its attention under ``window``) reading ``stream``, and
    the keys' (and the values') elements its attention reads per request."""
    h, hd, g = c.hidden_size, c.head_dim, c.num_heads // c.num_kv_heads
    q_width, kv_width = c.num_heads * hd, c.num_kv_heads * hd
    t = context if phase == "prefill" else 1
    a = f"{p}.self_attn"
    if phase == "prefill":
        keys, queries = _band(context, window)
        pairs = keys * queries
        kv_read = context * kv_width  # this step's keys (and values), on chip or not
    else:
        keys = context if window is None else min(context, window)
        queries, pairs = 1, keys
        kv_read = keys * kv_width  # the cache, the new token's entry included
    records = [
        _op(f"{p}.input_layernorm", "norm", [stream], weight=h, inputs=t * h,
            outputs=t * h, flops=RMS_NORM_FLOPS * t * h),
        _linear(f"{a}.q_proj", f"{p}.input_layernorm", q_width, h, t, c.qkv_bias),
        _linear(f"{a}.k_proj", f"{p}.input_layernorm", kv_width, h, t, c.qkv_bias),
        _linear(f"{a}.v_proj", f"{p}.input_layernorm", kv_width, h, t, c.qkv_bias),
        _op(f"{a}.rotary", "elementwise", [f"{a}.q_proj", f"{a}.k_proj"],
            inputs=t * (q_width + kv_width), outputs=t * (q_width + kv_width),
            flops=ROTARY_FLOPS * t * (q_width + kv_width)),
        # Scores S = K . Q per KV head: K [keys x hd], Q [hd x g * queries].
        _op(f"{a}.scores", "matmul", [f"{a}.rotary"], m=keys, k=hd, n=g * queries,
            groups=c.num_kv_heads, inputs=t * q_width + kv_read,
            outputs=c.num_heads * pairs),
        # The 1/sqrt(head_dim) scale and the mask are folded into the softmax.
        _op(f"{a}.softmax", "softmax", [f"{a}.scores"], inputs=c.num_heads * pairs,
            outputs=c.num_heads * pairs,
            flops=SOFTMAX_FLOPS["_softmax"] * c.num_heads * pairs),
        # Context O = V^T . P per KV head: V^T [hd x keys], P [keys x g * queries].
        _op(f"{a}.context", "matmul", [f"{a}.softmax", f"{a}.v_proj"], m=hd, k=keys,
            n=g * queries, groups=c.num_kv_heads,
            inputs=c.num_heads * pairs + kv_read, outputs=t * q_width),
        _linear(f"{a}.o_proj", f"{a}.context", h, q_width, t, c.o_bias),
        _op(f"{p}.attn_residual", "elementwise", [stream, f"{a}.o_proj"],
            inputs=2 * t * h, outputs=t * h, flops=t * h),
        _op(f"{p}.post_attention_layernorm", "norm", [f"{p}.attn_residual"], weight=h,
            inputs=t * h, outputs=t * h, flops=RMS_NORM_FLOPS * t * h),
    ]
    records += _mlp(c, f"{p}.mlp", f"{p}.post_attention_layernorm", t)
    mlp_out = records[-1]["name"]
    records.append(_op(f"{p}.mlp_residual", "elementwise", [f"{p}.attn_residual", mlp_out],
                       inputs=2 * t * h, outputs=t * h, flops=t * h))
    return records, kv_read


def _head(c: LLMConfig, stream: str) -> list[dict[str, Any]]:
    # Only the last token's logits are needed: the next token's (prefill: the first one).
    h = c.hidden_size
    return [
        _op("model.norm", "norm", [stream], weight=h, inputs=h, outputs=h,
            flops=RMS_NORM_FLOPS * h),
        # Pruning recipes (SparseGPT, Wanda) keep the LM head dense.
        _linear("lm_head", "model.norm", c.vocab_size, h, 1, False, prunable=False),
    ]


def _mlp(c: LLMConfig, p: str, producer: str, t: int) -> list[dict[str, Any]]:
    """The gated MLP, or the MoE block: router, routing, experts and their weighted sum."""
    h, i = c.hidden_size, c.intermediate_size
    act = ACTIVATION_FLOPS[c.hidden_act]
    if not c.is_moe:
        return [
            _linear(f"{p}.gate_proj", producer, i, h, t, c.mlp_bias),
            _linear(f"{p}.up_proj", producer, i, h, t, c.mlp_bias),
            _op(f"{p}.act_fn", "activation", [f"{p}.gate_proj"], inputs=t * i, outputs=t * i,
                flops=act * t * i),
            _op(f"{p}.mul", "elementwise", [f"{p}.act_fn", f"{p}.up_proj"], inputs=2 * t * i,
                outputs=t * i, flops=t * i),
            _linear(f"{p}.down_proj", f"{p}.mul", h, i, t, c.mlp_bias),
        ]
    e, k = c.num_experts, c.experts_per_token
    pairs = k * t  # token-expert pairs: the experts' GEMMs are one expert's dims, n = pairs
    x = f"{p}.experts"
    return [
        # Routers stay dense in pruning recipes: they are tiny and decide the routing.
        _linear(f"{p}.gate", producer, e, h, t, False, prunable=False),
        # Softmax over the experts, top-k and renormalisation, priced as one softmax.
        _op(f"{p}.routing", "softmax", [f"{p}.gate"], inputs=t * e, outputs=t * k,
            flops=SOFTMAX_FLOPS["_softmax"] * t * e),
        _linear(f"{x}.gate_proj", producer, i, h, pairs, False, weight_sets=e),
        _linear(f"{x}.up_proj", producer, i, h, pairs, False, weight_sets=e),
        _op(f"{x}.act_fn", "activation", [f"{x}.gate_proj"], inputs=pairs * i,
            outputs=pairs * i, flops=act * pairs * i),
        _op(f"{x}.mul", "elementwise", [f"{x}.act_fn", f"{x}.up_proj"], inputs=2 * pairs * i,
            outputs=pairs * i, flops=pairs * i),
        _linear(f"{x}.down_proj", f"{x}.mul", h, i, pairs, False, weight_sets=e),
        # Each token's k outputs times their routing weights, summed: 2 FLOPs per element.
        _op(f"{x}.combine", "elementwise", [f"{x}.down_proj", f"{p}.routing"],
            inputs=pairs * h + pairs, outputs=t * h, flops=2 * pairs * h),
    ]


def check_priceable(trace: Trace, batches: Sequence[int], fusions: Sequence[str]) -> None:
    """Refuse, in one line, the language-model designs the evaluator would price wrongly (see
    the module): decode under a fusion model that drops the KV-cache read. Other traces pass
    (an MoE step is priced with the experts its tokens touch, in expectation)."""
    p = trace.provenance
    if p.get("phase") not in PHASES:
        return
    fused = [f for f in fusions if f != "unfused"]
    if p["phase"] == "decode" and fused:
        raise LLMConfigError(f"{p['config']} decode: fusion {fused[0]} keeps features on chip "
                             "and would drop the KV-cache read, which is always from DRAM; "
                             "use --fusion unfused for decode")


# --- exact figures of a step ---------------------------------------------------------------------


@dataclass(frozen=True)
class LLMFigures:
    """One step of ``batch`` requests: what pricing needs beside the trace (see the module).

    Bytes take ``value_bytes`` per weight and ``kv_dtype_bytes`` per cached key or value.
    ``weight_bytes`` are resident (every parameter); ``weight_bytes_read`` the ones a step
    reads: not an untied embedding table (the lookup's rows are features) and, in an MoE layer,
    only the experts its tokens touch (in expectation); every other weight once.
    ``kv_cache_bytes`` is resident at ``context`` for the whole batch; ``kv_read_bytes`` is what
    a decode step reads of it (0 in prefill).
    ``flops`` is the step's dense FLOPs (GEMMs at 2 per MAC, plus elementwise work).
    """

    params: int
    weight_bytes: float
    weight_bytes_read: float
    kv_bytes_per_token: float
    kv_cache_bytes: float
    kv_read_bytes: float
    tokens: int
    flops: float
    experts_touched: float


def llm_figures(config: LLMConfig, phase: str, context: int, batch: int = 1,
                value_bytes: float = 2, kv_dtype_bytes: float | None = None) -> LLMFigures:
    """The exact figures of one ``phase`` step at ``context`` for ``batch`` requests."""
    _check_phase(config, phase, context)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise LLMConfigError(f"batch {batch!r} must be a positive integer")
    kvb = value_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    c = config
    trace = llm_trace(c, phase, context)
    ops = trace.ops
    tokens = batch * (context if phase == "prefill" else 1)
    h, i = c.hidden_size, c.intermediate_size
    weights = c.params
    # The lookup's rows are features (its input); an untied table is resident, not read.
    read = weights - (0 if c.tie_word_embeddings else c.vocab_size * h)
    touched = experts_touched(c.num_experts, c.experts_per_token, tokens)
    read -= c.num_layers * (c.num_experts - touched) * 3 * h * i
    flops = batch * float((2 * ops["m"] * ops["k"] * ops["n"] * ops["groups"]).sum()
                          + ops["vector_flops"].sum())
    cache = batch * c.kv_cache_elems(context) * kvb
    return LLMFigures(
        params=weights,
        weight_bytes=weights * value_bytes,
        weight_bytes_read=read * value_bytes,
        kv_bytes_per_token=c.kv_bytes_per_token(kvb),
        kv_cache_bytes=cache,
        kv_read_bytes=cache if phase == "decode" else 0.0,
        tokens=tokens,
        flops=flops,
        experts_touched=touched,
    )
