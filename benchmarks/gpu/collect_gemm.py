"""Part ``gemm24``: 2:4 sparse GEMMs (cuSPARSELt through ``to_sparse_semi_structured``) beside
dense cuBLAS on the same shapes, ``Y[M x N] = W[M x K] . X[K x N]``.

Shapes (:func:`shapes`: 384 distinct (M, K, N) over 61 weight shapes): the linears of
LLaMA-2 7B/13B, Mistral-7B / LLaMA-3-8B and LLaMA-70B (separate and fused q/k/v and gate/up
projections) at decode widths N = 1-64 tokens and prefill widths 128-2048; DeiT-S and ViT-B
linears at N = 197 x batch 1-128; ConvNeXt-T's MLP linears; 30 weight shapes drawn
log-uniformly between 256 and 16384 (multiples of 64, a fixed seed) so that held-out weight
shapes exist; square GEMMs. Decode shapes come first: they are what the shipped H100 data lacks
most.

Per shape, four implementations, each timed cold and warm:

* ``cublas``: ``torch.mm(W, X)``; ``cublas_linear``: ``F.linear(X^T, W)`` (what a model's
  ``nn.Linear`` runs; cuBLAS often picks another kernel);
* ``cusparselt``: ``torch.mm(W24, X)``; ``cusparselt_linear``: ``F.linear(X^T, W24)``, the
  path whose transposes and copies around ``_cslt_sparse_mm`` a model pays; W24 =
  ``to_sparse_semi_structured`` of W pruned by the trainer's 2:4 rule
  (:func:`formats.masks.global_masks`: the 2 largest |w| of every 4 along K).

On the CPU (``torch_dense``, ``torch_linear`` in fp32) the 2:4 conversion is attempted and its
refusal recorded (torch runs semi-structured sparsity on CUDA only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .collect_items import Item
from .collect_rows import Bench, error_row, price_rows, timed_rows

__all__ = ["GemmShape", "distinct_shapes", "items", "more_items", "more_shapes", "relative_error",
           "run", "shapes", "weights"]


@dataclass(frozen=True)
class GemmShape:
    m: int
    k: int
    n: int
    group: str  #: where the shape comes from
    layer: str  #: the layer it is
    batch: int = 1


#: (name, M = out_features, K = in_features) of LLM linears.
LLM_LINEARS = (
    ("llama2-7b q/k/v/o_proj", 4096, 4096),
    ("llama2-7b gate/up_proj", 11008, 4096),
    ("llama2-7b down_proj", 4096, 11008),
    ("llama2-7b fused qkv", 12288, 4096),
    ("llama2-7b fused gate+up", 22016, 4096),
    ("mistral-7b/llama3-8b k/v_proj", 1024, 4096),
    ("mistral-7b/llama3-8b gate/up_proj", 14336, 4096),
    ("mistral-7b/llama3-8b down_proj", 4096, 14336),
    ("mistral-7b/llama3-8b fused qkv", 6144, 4096),
    ("mistral-7b/llama3-8b fused gate+up", 28672, 4096),
    ("llama2-13b q/k/v/o_proj", 5120, 5120),
    ("llama2-13b gate/up_proj", 13824, 5120),
    ("llama2-13b down_proj", 5120, 13824),
    ("llama-70b q/o_proj", 8192, 8192),
    ("llama-70b k/v_proj", 1024, 8192),
    ("llama-70b gate/up_proj", 28672, 8192),
    ("llama-70b down_proj", 8192, 28672),
)
DECODE_N = (1, 2, 4, 8, 16, 24, 32, 48, 64)
PREFILL_N = (128, 512, 2048)
VIT_LINEARS = (
    ("deit_small qkv", 1152, 384), ("deit_small proj", 384, 384),
    ("deit_small fc1", 1536, 384), ("deit_small fc2", 384, 1536),
    ("vit_base qkv", 2304, 768), ("vit_base proj", 768, 768),
    ("vit_base fc1", 3072, 768), ("vit_base fc2", 768, 3072),
)
VIT_BATCHES = (1, 8, 32, 128)
#: ConvNeXt-T stages: (channels, tokens per image).
CONVNEXT_STAGES = ((96, 3136), (192, 784), (384, 196), (768, 49))
CONVNEXT_BATCHES = (1, 8)
SQUARE = ((1024, 2048, 8192), (1, 16, 128, 1024, 8192))
RANDOM_PAIRS, RANDOM_N, RANDOM_SEED = 30, (1, 16, 256, 2048), 2024

SMOKE = (GemmShape(64, 128, 1, "smoke", "decode"), GemmShape(128, 64, 8, "smoke", "decode"),
         GemmShape(96, 192, 20, "smoke", "vit"))


def _random_pairs() -> list[tuple[int, int]]:
    """Weight shapes drawn log-uniformly in [256, 16384], multiples of 64 (fixed seed: the item
    list must be the same on every run for resuming)."""
    rng = np.random.default_rng(RANDOM_SEED)
    pairs: list[tuple[int, int]] = []
    while len(pairs) < RANDOM_PAIRS:
        m, k = (int(64 * max(4, round(math.exp(v) / 64)))
                for v in rng.uniform(math.log(256), math.log(16384), 2))
        if (m, k) not in pairs:
            pairs.append((m, k))
    return pairs


def shapes(smoke: bool = False) -> list[GemmShape]:
    """The shapes in the order they run, each (M, K, N) once."""
    if smoke:
        return list(SMOKE)
    out = [GemmShape(m, k, n, "llm-decode", name)
           for name, m, k in LLM_LINEARS for n in DECODE_N]
    out += [GemmShape(m, k, 197 * b, "vit", name, b)
            for name, m, k in VIT_LINEARS for b in VIT_BATCHES]
    for c, tokens in CONVNEXT_STAGES:
        for name, m, k in ((f"convnext_tiny c{c} fc1", 4 * c, c),
                           (f"convnext_tiny c{c} fc2", c, 4 * c)):
            out += [GemmShape(m, k, tokens * b, "convnext", name, b) for b in CONVNEXT_BATCHES]
    out += [GemmShape(m, k, n, "random", f"random {m}x{k}")
            for m, k in _random_pairs() for n in RANDOM_N]
    out += [GemmShape(m, k, n, "llm-prefill", name)
            for name, m, k in LLM_LINEARS for n in PREFILL_N]
    out += [GemmShape(s, s, n, "square", f"square {s}") for s in SQUARE[0] for n in SQUARE[1]]
    return distinct_shapes(out)


def distinct_shapes(shapes: list[GemmShape], seen: set | None = None) -> list[GemmShape]:
    """``shapes`` with each (M, K, N) once, first kept, none of ``seen``."""
    seen, unique = set(seen or ()), []
    for s in shapes:
        if (s.m, s.k, s.n) not in seen:
            seen.add((s.m, s.k, s.n))
            unique.append(s)
    return unique


def items(smoke: bool = False) -> list[Item]:
    return [Item(f"{s.m}x{s.k}x{s.n}", s) for s in shapes(smoke)]


#: Part ``gemm_more``: Swin-T's linears (stages of C = 96-768 channels over 3136-49 tokens per
#: image) and ConvNeXt-T's MLP linears at the batches ``gemm24`` left out, at batch 1-128.
SWIN_STAGES = CONVNEXT_STAGES
MORE_BATCHES = (1, 8, 32, 128)
SMOKE_MORE = (GemmShape(72, 24, 64, "smoke", "swin qkv"),)


def more_shapes(smoke: bool = False) -> list[GemmShape]:
    """Part ``gemm_more``'s shapes, each (M, K, N) once, none that ``gemm24`` measures."""
    if smoke:
        return list(SMOKE_MORE)
    out = []
    for b in MORE_BATCHES:
        for c, tokens in SWIN_STAGES:
            out += [GemmShape(m, k, tokens * b, "swin", f"swin_tiny c{c} {name}", b)
                    for name, m, k in (("qkv", 3 * c, c), ("proj", c, c),
                                       ("fc1", 4 * c, c), ("fc2", c, 4 * c))]
    return distinct_shapes(out, {(s.m, s.k, s.n) for s in shapes()})


def more_items(smoke: bool = False) -> list[Item]:
    return [Item(f"{s.m}x{s.k}x{s.n}", s) for s in more_shapes(smoke)]


#: Implementation names per device: (dense mm, dense linear, 2:4 mm, 2:4 linear).
NAMES = {"cuda": ("cublas", "cublas_linear", "cusparselt", "cusparselt_linear"),
         "cpu": ("torch_dense", "torch_linear", "cusparselt", "cusparselt_linear")}


def weights(bench: Bench, m: int, k: int) -> dict:
    """W, its 2:4-pruned copy and the semi-structured tensor (or the exception the conversion
    raised), kept while consecutive items share (M, K)."""
    cache = bench.scratch.setdefault("gemm24", {})
    if cache.get("mk") == (m, k):
        return cache
    cache.clear()
    if bench.device == "cuda":
        bench.torch.cuda.empty_cache()
    import formats
    from formats.masks import PrunableWeight, global_masks

    torch = bench.torch
    w = torch.randn(m, k, generator=bench.generator(31 * m + k), device=bench.device,
                    dtype=bench.torch_dtype)
    mask = global_masks({"w": PrunableWeight(w)}, formats.parse("2:4"))["w"]
    w24 = w * mask
    try:
        from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

        SparseSemiStructuredTensor._FORCE_CUTLASS = False  # cuSPARSELt, torch's default
        sparse: object = to_sparse_semi_structured(w24)
    except Exception as exc:  # CPU tensors, GPUs below sm_80, shapes it refuses: data
        sparse = exc
    cache.update({"mk": (m, k), "w": w, "w24": w24, "sparse": sparse})
    return cache


def relative_error(out, ref) -> float:
    den = float(ref.norm())
    return float((out.float() - ref).norm()) / den if den > 0 else 0.0


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    """Rows of one shape: every implementation cold and warm, or its refusal."""
    import torch.nn.functional as F

    s: GemmShape = item.config
    torch = bench.torch
    ops = weights(bench, s.m, s.k)
    w, w24, sparse = ops["w"], ops["w24"], ops["sparse"]
    x = torch.randn(s.k, s.n, generator=bench.generator(7 * s.n + 1), device=bench.device,
                    dtype=bench.torch_dtype)
    xt = x.t().contiguous()
    ref = w.float() @ x.float()
    ref24 = w24.float() @ x.float()
    dense_mm, dense_linear, sparse_mm, sparse_linear = NAMES[bench.device]
    base = {"source": "benchmark", "why": f"collect gemm24 {s.group}: {s.layer}, N={s.n}",
            "op": s.layer, "kind": "linear", "m": s.m, "k": s.k, "n": s.n, "groups": 1,
            "batch": s.batch}
    dense = dict(base, family="dense", format="dense", sparsity=0.0, block=0, nnz=s.m * s.k)
    nm = dict(base, family="nm", format="2:4", sparsity=0.5, block=4, nnz=s.m * s.k // 2,
              index_dtype="2-bit metadata")
    lib = "cuBLAS" if bench.device == "cuda" else "MKL/oneDNN"
    cases = [
        (dense, dense_mm, lambda: torch.mm(w, x), False, ref, f"torch.mm ({lib})"),
        (dense, dense_linear, lambda: F.linear(xt, w), True, ref, f"F.linear ({lib})"),
    ]
    rows: list[dict] = []
    if isinstance(sparse, Exception):
        rows += [error_row(bench, dict(nm, implementation=name), sparse)
                 for name in (sparse_mm, sparse_linear)]
    else:
        backend = getattr(sparse, "BACKEND", type(sparse).__name__)
        alg = getattr(sparse, "alg_id_cusparselt", "")
        what = f"{backend} alg_id={alg}" if alg != "" else backend
        cases += [
            (nm, sparse_mm, lambda: torch.mm(sparse, x), False, ref24,
             f"torch.mm(to_sparse_semi_structured) {what}"),
            (nm, sparse_linear, lambda: F.linear(xt, sparse), True, ref24,
             f"F.linear(to_sparse_semi_structured) {what}"),
        ]
    ready = []
    for fields, name, fn, transposed, reference, call in cases:
        fields = dict(fields, implementation=name)
        try:
            out = fn()
            err = relative_error(out.t() if transposed else out, reference)
            bench.clock.sync()
        except Exception as exc:  # a library refusing a shape is data, not a crash
            bench.clock.sync()
            rows.append(error_row(bench, fields, exc))
            continue
        ready.append((fields, fn, call, err))
    seen = bench.clock.identify({f["implementation"]: fn for f, fn, _, _ in ready})
    for fields, fn, call, err in ready:
        rows += timed_rows(bench, fn, fields, call, seen[fields["implementation"]], rel_err=err)
    price_rows(bench, rows)
    return {"kernels": rows}


def finish(bench: Bench) -> None:
    bench.scratch.pop("gemm24", None)
    if bench.device == "cuda":
        bench.torch.cuda.empty_cache()
