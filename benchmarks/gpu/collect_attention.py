"""Part ``math_attention``: the attention torch's math SDPA path runs, in fp32.

Once a ViT's qkv linear is 2:4 (``SparseSemiStructuredTensor``), SDPA's fused kernels refuse
the transposed view it returns and torch runs ``_scaled_dot_product_attention_math``
(``workloads.backend.torch_math_attention``). On an H100 with fp16 inputs that path casts q, k
and v to fp32 and runs both products and the softmax in fp32 (the profiles of
``benchmarks/gpu/results/collect`` show ``sm80_xmma_gemm_f32f32`` batched GEMMs and
``softmax_warp_forward<float, float, float>``): ViT-B at batch 128 spends 11 ms in the two
products, where the same products in fp16 would take about 1.6 ms. No other part measures fp32.

Per model (DeiT-S: 6 heads, ViT-B: 12, both 197 tokens of 64 channels per head) and batch
(1, 8, 32, 128), three ops, each cold and warm, in fp32 whatever the run's dtype:

* ``scores``: ``torch.matmul(q, k.transpose(-2, -1))``, a batched GEMM (dse's convention:
  ``m = T, k = d, n = T, groups = batch x heads``), kind ``matmul``;
* ``context``: ``torch.matmul(p, v)`` (``m = T, k = T, n = d``), kind ``matmul``;
* ``softmax``: ``torch.softmax`` over the last axis of the (batch, heads, T, T) scores, kind
  ``softmax`` (``n``: its elements).

Rows carry ``dtype`` ``fp32``; their bound is priced as every row of the run is (the run's
numerics), a bound an fp32 kernel cannot beat. ``dse calibrate`` sees an fp32 op of an fp16
device as a kind of its own (``matmul:fp32``, ``softmax:fp32``), and prices the math path's
products and softmax so.
"""

from __future__ import annotations

from dataclasses import dataclass

from .collect_items import Item
from .collect_rows import Bench, error_row, price_rows, timed_rows, vector_traffic

__all__ = ["AttentionOp", "CHECKS", "check_items", "check_ops", "items", "ops", "run",
           "run_check"]

#: (model, heads); every model here has 197 tokens of 64 channels per head.
MODELS = (("deit_small_patch16_224", 6), ("vit_base_patch16_224", 12))
TOKENS, HEAD_DIM = 197, 64
BATCHES = (1, 8, 32, 128)
SMOKE = (("smoke", 2),)


@dataclass(frozen=True)
class AttentionOp:
    model: str
    heads: int
    batch: int
    op: str  #: scores | context | softmax
    tokens: int = TOKENS
    head_dim: int = HEAD_DIM

    @property
    def key(self) -> str:
        return f"{self.model}-b{self.batch}-{self.op}"

    @property
    def groups(self) -> int:
        return self.batch * self.heads


def ops(smoke: bool = False) -> list[AttentionOp]:
    if smoke:
        return [AttentionOp(m, h, 1, op, tokens=16, head_dim=8) for m, h in SMOKE
                for op in ("scores", "context", "softmax")]
    return [AttentionOp(m, h, b, op) for b in BATCHES for m, h in MODELS
            for op in ("scores", "context", "softmax")]


def items(smoke: bool = False) -> list[Item]:
    return [Item(op.key, op) for op in ops(smoke)]


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    from workloads.export import SOFTMAX_FLOPS

    a: AttentionOp = item.config
    torch = bench.torch
    t, d, g = a.tokens, a.head_dim, a.groups
    shape = (a.batch, a.heads)
    fields = {"source": "benchmark", "why": f"collect math_attention: {a.model} {a.op}, "
              f"batch {a.batch}", "op": a.op, "family": "dense", "format": "dense",
              "sparsity": 0.0, "block": 0, "batch": a.batch, "dtype": "fp32",
              "implementation": "torch_fp32" if bench.device == "cpu" else "cublas_fp32"}
    note = (f"{a.model} math attention in fp32: batch {a.batch}, {a.heads} heads, {t} tokens, "
            f"{d} channels per head")
    try:
        if a.op == "softmax":
            s = torch.randn(*shape, t, t, generator=bench.generator(21), device=bench.device,
                            dtype=torch.float32)
            fn = lambda: torch.softmax(s, dim=-1)  # noqa: E731
            call = "torch.softmax(fp32 scores, -1)"
            n = g * t * t
            fields.update(family="vector", kind="softmax", m=0, k=0, n=n, groups=1,
                          implementation="torch_fp32_vector",
                          flops=float(SOFTMAX_FLOPS["_softmax"] * n))
        else:
            left_k = d if a.op == "scores" else t
            left = torch.randn(*shape, t, left_k, generator=bench.generator(22),
                               device=bench.device, dtype=torch.float32)
            right = torch.randn(*shape, t, d, generator=bench.generator(23),
                                device=bench.device, dtype=torch.float32)
            if a.op == "scores":
                fn = lambda: torch.matmul(left, right.transpose(-2, -1))  # noqa: E731
                call = "torch.matmul(q, k^T) fp32"
                m, k, n = t, d, t
            else:
                fn = lambda: torch.matmul(left, right)  # noqa: E731
                call = "torch.matmul(p, v) fp32"
                m, k, n = t, t, d
            fields.update(kind="matmul", m=m, k=k, n=n, groups=g, nnz=g * m * k)
        fn()
        bench.clock.sync()
    except Exception as exc:  # out of memory on a small device: data, not a crash
        bench.clock.sync()
        return {"kernels": [error_row(bench, fields, exc)]}
    if a.op == "softmax":
        n = fields["n"]
        fields["bytes"] = (vector_traffic(bench, "softmax", n, n, 0) if bench.hw is not None
                           else float("nan"))
    seen = bench.clock.identify({"op": fn})["op"]
    rows = timed_rows(bench, fn, fields, call, seen, note=note)
    price_rows(bench, rows)
    return {"kernels": rows}


def finish(bench: Bench) -> None:
    if bench.device == "cuda":
        bench.torch.cuda.empty_cache()


# --- part math_checks -----------------------------------------------------------------------

#: Part ``math_checks``: the masked-row checks of torch's ``_safe_softmax`` on the math path
#: (``workloads.backend.torch_math_attention``), which read the fp32 scores where the trace's
#: other vector ops read fp16: ``isneginf`` of the scores, ``all`` over their last axis, and
#: ``where`` of the result over the probabilities. ViT-B at batch 128 spends 5.3 ms in them
#: (benchmarks/gpu/results/collect/profiles.parquet). Shapes as part ``math_attention``'s.
CHECKS = ("isneginf", "all", "where")


def check_ops(smoke: bool = False) -> list[AttentionOp]:
    if smoke:
        return [AttentionOp(m, h, 1, op, tokens=16, head_dim=8) for m, h in SMOKE
                for op in CHECKS]
    return [AttentionOp(m, h, b, op) for b in BATCHES for m, h in MODELS for op in CHECKS]


def check_items(smoke: bool = False) -> list[Item]:
    return [Item(op.key, op) for op in check_ops(smoke)]


def run_check(item: Item, bench: Bench) -> dict[str, list[dict]]:
    """One check, as ``_safe_softmax`` runs it on fp32 scores of (batch, heads, T, T); its
    element counts as the trace's op (``torch_math_attention``): isneginf and where write the
    scores' elements, all writes one per row; one FLOP per score element each."""
    a: AttentionOp = item.config
    torch = bench.torch
    t = a.tokens
    scores = a.groups * t * t
    rows = a.groups * t
    inputs, outputs, kind = {"isneginf": (scores, scores, "elementwise"),
                             "all": (scores, rows, "reduce"),
                             "where": (scores + rows, scores, "elementwise")}[a.op]
    fields = {"source": "benchmark", "why": f"collect math_checks: {a.model} {a.op}, "
              f"batch {a.batch}", "op": a.op, "kind": kind, "family": "vector",
              "format": "dense", "sparsity": 0.0, "block": 0, "batch": a.batch,
              "dtype": "fp32", "m": 0, "k": 0, "n": outputs, "groups": 1,
              "flops": float(scores),
              "implementation": "torch_fp32_vector"}
    note = (f"{a.model} math attention's masked-row check in fp32: batch {a.batch}, "
            f"{a.heads} heads, {t} tokens")
    shape = (a.batch, a.heads, t, t)
    try:
        s = torch.randn(*shape, generator=bench.generator(24), device=bench.device,
                        dtype=torch.float32)
        if a.op == "isneginf":
            fn, call = (lambda: torch.isneginf(s)), "torch.isneginf(fp32 scores)"
        elif a.op == "all":
            mask = torch.isneginf(s)
            fn = lambda: torch.all(mask, dim=-1, keepdim=True)  # noqa: E731
            call = "torch.all(isneginf(scores), -1, keepdim=True)"
        else:
            masked = torch.zeros(*shape[:3], 1, dtype=torch.bool, device=bench.device)
            fn = lambda: torch.where(masked, 0.0, s)  # noqa: E731
            call = "torch.where(masked rows, 0.0, fp32 probabilities)"
        fn()
        bench.clock.sync()
    except Exception as exc:  # out of memory on a small device: data, not a crash
        bench.clock.sync()
        return {"kernels": [error_row(bench, fields, exc)]}
    fields["bytes"] = (vector_traffic(bench, kind, inputs, outputs, 0) if bench.hw is not None
                       else float("nan"))
    seen = bench.clock.identify({"op": fn})["op"]
    out = timed_rows(bench, fn, fields, call, seen, note=note)
    price_rows(bench, out)
    return {"kernels": out}
