"""Part ``dtype_gemm``: the GEMMs of language-model and ViT linears in the number types dse
prices but the shipped H100 rows (all fp16) never ran: bf16, fp8 and int8 compute, dense and
2:4, and the weight-only int4 and int8 kernels that dequantise inside the product.

dse prices ``--dtype bf16/fp8`` and ``--weight-dtype int4/int8`` with the fp16 kernels'
fraction of the bound carried over (marked ``extrapolated_dtype``); these rows are what that
extrapolation can be checked against, on the same shapes and in the same run as fp16.

Shapes (:func:`shapes`): the 17 LLM linears of ``gemm24`` (LLaMA-2 7B/13B, Mistral-7B /
LLaMA-3-8B, LLaMA-70B) at decode widths N = 1-64 tokens and prefill widths 512 and 2048, then
DeiT-S and ViT-B linears at N = 197 x batch 1, 8, 128. ``Y[M x N] = W[M x K] X[K x N]``, the
``gemm24`` convention; the ``_linear`` implementations run ``F.linear(X^T, W)`` as a model does.

Implementations (column ``implementation``; ``dtype`` the compute dtype, ``family`` dense or
nm), each timed cold and warm; a library's refusal of a shape is recorded in ``error``:

* fp16, the reference of the same run: ``cublas_linear``, ``cusparselt_linear``;
* bf16: ``cublas``, ``cublas_linear``, ``cusparselt``, ``cusparselt_linear``;
* fp8 (e4m3, per-tensor scales, bf16 out): ``scaled_mm`` (``torch._scaled_mm(X^T, W^T)``,
  cuBLASLt) and ``cusparselt_fp8`` (``torch._cslt_sparse_mm`` of the compressed 2:4 weight);
* int8 (int32 or int8 out): ``int_mm`` (``torch._int_mm(X^T, W^T)``), ``int_mm_weight_first``
  (``torch._int_mm(W, X)``: torch refuses a first operand of 16 rows or fewer, so at decode
  widths only this order runs) and ``cusparselt_int8`` (``torch.mm`` of the semi-structured
  int8 weight);
* weight-only, bf16 activations: ``int4_tinygemm`` (``torch._weight_int4pack_mm``, group 128,
  the kernel gpt-fast and torchao's int4 weight-only path run), ``int8_weight_only``
  (``torch._weight_int8pack_mm``, one scale per output channel) and ``int8_dequant_linear``
  (``F.linear(X^T, W.to(bf16)) * s``, what an unfused stack runs). Their ``note`` names the
  weight dtype and group; their bound charges the narrow weights (``weight_dtype``).

cuSPARSELt multiplies fp8 and int8 with the dense operand column-major (its "TN" layout), so
the 2:4 fp8 and int8 calls take ``X`` as the transposed view of a contiguous ``X^T``. The
first collection passed a row-major ``X``, and every such call was refused in the descriptor
set-up that picks the layout by ``dense_B.is_contiguous()`` ("operation not supported").

The operands' values are random (a seeded generator); the weights are pruned by the trainer's
2:4 rule for the nm rows and quantised by a symmetric per-row (int8, fp8) or per-group (int4)
rule, so ``rel_err`` against the fp32 product says the kernel computed what it should, within
its number type.
"""

from __future__ import annotations

from dse.roofline import Numerics

from .collect_gemm import (
    DECODE_N,
    LLM_LINEARS,
    VIT_LINEARS,
    GemmShape,
    distinct_shapes,
    relative_error,
)
from .collect_items import Item
from .collect_rows import Bench, error_row, price_rows, timed_rows

__all__ = ["INT4_GROUP", "items", "run", "shapes"]

PREFILL_N = (512, 2048)
VIT_BATCHES = (1, 8, 128)
#: int4 quantisation group along K (torchao's and GPTQ's usual 128; dse's default too).
INT4_GROUP = 128
#: tinygemm's inner K tiles (gpt-fast's choice for K a multiple of 1024; 8 x 16 = 128 divides K).
INNER_K_TILES = 8

SMOKE = (GemmShape(64, 256, 1, "smoke", "decode"), GemmShape(128, 256, 32, "smoke", "prefill"))


def shapes(smoke: bool = False) -> list[GemmShape]:
    """The shapes in the order they run, each (M, K, N) once; consecutive shapes share a
    weight, so it is made and quantised once."""
    if smoke:
        return list(SMOKE)
    out = [GemmShape(m, k, n, "llm", name)
           for name, m, k in LLM_LINEARS for n in (*DECODE_N, *PREFILL_N)]
    out += [GemmShape(m, k, 197 * b, "vit", name, b)
            for name, m, k in VIT_LINEARS for b in VIT_BATCHES]
    return distinct_shapes(out)


def items(smoke: bool = False) -> list[Item]:
    return [Item(f"{s.m}x{s.k}x{s.n}", s) for s in shapes(smoke)]


def _semi_structured(w24):
    """``to_sparse_semi_structured(w24)`` on cuSPARSELt, or the exception it raised."""
    try:
        from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

        SparseSemiStructuredTensor._FORCE_CUTLASS = False
        return to_sparse_semi_structured(w24)
    except Exception as exc:  # CPU tensors, dtypes or shapes it refuses: data
        return exc


def _attempt(fn):
    """``fn()``, or the exception it raised (a refused conversion is recorded, not fatal)."""
    try:
        return fn()
    except Exception as exc:
        return exc


def weights(bench: Bench, m: int, k: int) -> dict:
    """W in every form the implementations take, kept while consecutive items share (M, K):
    fp32 masters (dense and 2:4-pruned), fp16 / bf16 / fp8 / int8 copies with their scales,
    the semi-structured tensors and the packed int4 weight (or what each conversion raised)."""
    cache = bench.scratch.setdefault("dtype_gemm", {})
    if cache.get("mk") == (m, k):
        return cache
    cache.clear()
    torch = bench.torch
    if bench.device == "cuda":
        torch.cuda.empty_cache()
    import formats
    from formats.masks import PrunableWeight, global_masks

    dev = bench.device
    w = torch.randn(m, k, generator=bench.generator(31 * m + k), device=dev)
    w24 = w * global_masks({"w": PrunableWeight(w)}, formats.parse("2:4"))["w"]
    out = {"mk": (m, k), "w": w, "w24": w24,
           "fp16": w.half(), "bf16": w.bfloat16(),
           "fp16_24": _semi_structured(w24.half()), "bf16_24": _semi_structured(w24.bfloat16())}
    # int8: symmetric, one scale per output row.
    s8 = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-8) / 127.0
    q8 = torch.round(w / s8).clamp(-127, 127).to(torch.int8)
    q8_24 = torch.round(w24 / s8).clamp(-127, 127).to(torch.int8)
    out.update({"int8": q8, "int8_scale": s8, "int8_24": _semi_structured(q8_24),
                "int8_wo_scale": s8.squeeze(1).bfloat16()})
    # fp8 e4m3: one scale for the tensor (torch._scaled_mm's tensor-wise scaling).
    sf = (w.abs().amax().clamp_min(1e-8) / 448.0).float()
    out["fp8_scale"] = sf
    out["fp8"] = _attempt(lambda: (w / sf).to(torch.float8_e4m3fn))
    out["fp8_24"] = _attempt(lambda: torch._cslt_compress((w24 / sf).to(torch.float8_e4m3fn)))
    # int4: asymmetric per group of INT4_GROUP along K, tinygemm's layout (values 0-15,
    # scale and zero point per group, in bf16, as [K / group, M, 2]).
    out["int4"] = _attempt(lambda: _int4_pack(torch, w))
    cache.update(out)
    return cache


def _int4_pack(torch, w):
    """(packed weight, scales and zeros, dequantised fp32 W) of W [M, K] in tinygemm's int4
    layout, group :data:`INT4_GROUP`."""
    m, k = w.shape
    g = w.reshape(m, k // INT4_GROUP, INT4_GROUP)
    lo, hi = g.amin(dim=2, keepdim=True), g.amax(dim=2, keepdim=True)
    scale = ((hi - lo) / 15.0).clamp_min(1e-8)
    q = torch.round((g - lo) / scale).clamp(0, 15)
    # tinygemm dequantises (q - 8) * scale + zero: the zero point is the group's middle value.
    zero = lo + 8 * scale
    deq = ((q - 8) * scale + zero).reshape(m, k)
    q = q.reshape(m, k).to(torch.uint8)
    # two values a byte, the even one in the high nibble (torch's uint8 layout for the packing)
    packed = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).contiguous(),
                                               INNER_K_TILES)
    sz = torch.stack([scale.reshape(m, -1).t(), zero.reshape(m, -1).t()], dim=2)
    return packed, sz.to(torch.bfloat16).contiguous(), deq


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    """Rows of one shape: every implementation cold and warm, or its refusal."""
    import torch.nn.functional as F

    s: GemmShape = item.config
    torch = bench.torch
    w = weights(bench, s.m, s.k)
    x32 = torch.randn(s.k, s.n, generator=bench.generator(7 * s.n + 1), device=bench.device)
    xt32 = x32.t().contiguous()
    ref, ref24 = w["w"] @ x32, w["w24"] @ x32
    xb = x32.bfloat16()
    xt16, xtb = xt32.half(), xt32.bfloat16()
    # Activations quantised as the weights are: int8 per tensor, fp8 per tensor.
    sx8 = (x32.abs().amax().clamp_min(1e-8) / 127.0)
    xt8 = torch.round(xt32 / sx8).clamp(-127, 127).to(torch.int8)
    sxf = (x32.abs().amax().clamp_min(1e-8) / 448.0).float()
    xtf = _attempt(lambda: (xt32 / sxf).to(torch.float8_e4m3fn))

    base = {"source": "benchmark", "why": f"collect dtype_gemm {s.group}: {s.layer}, N={s.n}",
            "op": s.layer, "kind": "linear", "m": s.m, "k": s.k, "n": s.n, "groups": 1,
            "batch": s.batch}
    dense = dict(base, family="dense", format="dense", sparsity=0.0, block=0, nnz=s.m * s.k)
    nm = dict(base, family="nm", format="2:4", sparsity=0.5, block=4, nnz=s.m * s.k // 2,
              index_dtype="2-bit metadata")
    int4_note = f"weights int4 (group {INT4_GROUP}), bf16 activations"
    int8_note = "weights int8 (one scale per output channel), bf16 activations"

    # (fields, implementation, call, transposed output, reference, library call, note,
    #  weight-only dtype, operands it needs): a case whose operand could not be made (a
    #  conversion torch refused) is an error row with that refusal.
    cases = [
        (dict(dense, dtype="fp16"), "cublas_linear", lambda: F.linear(xt16, w["fp16"]), True,
         ref, "F.linear fp16 (cuBLAS)", "", None, ()),
        (dict(nm, dtype="fp16"), "cusparselt_linear",
         lambda: F.linear(xt16, w["fp16_24"]), True, ref24,
         "F.linear(to_sparse_semi_structured) fp16", "", None, ("fp16_24",)),
        (dict(dense, dtype="bf16"), "cublas", lambda: torch.mm(w["bf16"], xb), False, ref,
         "torch.mm bf16 (cuBLAS)", "", None, ()),
        (dict(dense, dtype="bf16"), "cublas_linear", lambda: F.linear(xtb, w["bf16"]), True,
         ref, "F.linear bf16 (cuBLAS)", "", None, ()),
        (dict(nm, dtype="bf16"), "cusparselt", lambda: torch.mm(w["bf16_24"], xb), False,
         ref24, "torch.mm(to_sparse_semi_structured) bf16", "", None, ("bf16_24",)),
        (dict(nm, dtype="bf16"), "cusparselt_linear", lambda: F.linear(xtb, w["bf16_24"]),
         True, ref24, "F.linear(to_sparse_semi_structured) bf16", "", None, ("bf16_24",)),
        (dict(dense, dtype="fp8"), "scaled_mm",
         lambda: torch._scaled_mm(xtf, w["fp8"].t(), scale_a=sxf, scale_b=w["fp8_scale"],
                                  out_dtype=torch.bfloat16), True, ref,
         "torch._scaled_mm e4m3, per-tensor scales, bf16 out (cuBLASLt)", "", None,
         ("fp8", "xtf")),
        (dict(nm, dtype="fp8"), "cusparselt_fp8",
         lambda: torch._cslt_sparse_mm(w["fp8_24"], xtf.t(), alpha=sxf * w["fp8_scale"],
                                       out_dtype=torch.bfloat16), False, ref24,
         "torch._cslt_sparse_mm e4m3 2:4, X column-major, bf16 out (cuSPARSELt)", "", None,
         ("fp8_24", "xtf")),
        (dict(dense, dtype="int8"), "int_mm",
         lambda: torch._int_mm(xt8, w["int8"].t()), True, ref / (sx8 * w["int8_scale"]),
         "torch._int_mm int8 -> int32 (cuBLASLt)", "unscaled int32 output", None, ()),
        (dict(dense, dtype="int8"), "int_mm_weight_first",
         lambda: torch._int_mm(w["int8"], xt8.t()), False, ref / (sx8 * w["int8_scale"]),
         "torch._int_mm(W, X) int8 -> int32 (cuBLASLt)", "unscaled int32 output", None, ()),
        (dict(nm, dtype="int8"), "cusparselt_int8",
         lambda: torch.mm(w["int8_24"], xt8.t()), False, ref24 / (sx8 * w["int8_scale"]),
         "torch.mm(to_sparse_semi_structured) int8, X column-major -> int8 (cuSPARSELt)",
         "int8 output saturates: rel_err is not a correctness check", None, ("int8_24",)),
        (dict(dense, dtype="bf16"), "int4_tinygemm",
         lambda: torch._weight_int4pack_mm(xtb, w["int4"][0], INT4_GROUP, w["int4"][1]), True,
         None if isinstance(w["int4"], Exception) else w["int4"][2] @ x32,
         f"torch._weight_int4pack_mm group {INT4_GROUP} (tinygemm)", int4_note, "int4",
         ("int4",)),
        (dict(dense, dtype="bf16"), "int8_weight_only",
         lambda: torch._weight_int8pack_mm(xtb, w["int8"], w["int8_wo_scale"]), True,
         (w["int8"].float() * w["int8_scale"]) @ x32, "torch._weight_int8pack_mm",
         int8_note, "int8", ()),
        (dict(dense, dtype="bf16"), "int8_dequant_linear",
         lambda: F.linear(xtb, w["int8"].to(torch.bfloat16)) * w["int8_wo_scale"], True,
         (w["int8"].float() * w["int8_scale"]) @ x32,
         "F.linear(X, W_int8.to(bf16)) * scale (eager)", int8_note, "int8", ()),
    ]
    operands = dict(w, xtf=xtf)
    rows: list[dict] = []
    ready = []
    for fields, name, fn, transposed, reference, call, note, weight_dtype, needs in cases:
        if bench.device == "cpu":  # the same calls, run by torch's CPU kernels
            name = name.replace("cublas", "torch")
        fields = dict(fields, implementation=name)
        failed = next((operands[o] for o in needs if isinstance(operands[o], Exception)), None)
        if failed is not None:
            rows.append(error_row(bench, fields, failed))
            continue
        try:
            out = fn()
            err = (relative_error(out.t() if transposed else out, reference)
                   if reference is not None else float("nan"))
            bench.clock.sync()
        except Exception as exc:  # a library refusing a shape or dtype is data, not a crash
            bench.clock.sync()
            rows.append(error_row(bench, fields, exc))
            continue
        ready.append((f"{name}:{fields['dtype']}", fields, fn, call, err, note, weight_dtype))
    seen = bench.clock.identify({key: fn for key, _, fn, *_ in ready})
    for key, fields, fn, call, err, note, weight_dtype in ready:
        timed = timed_rows(bench, fn, fields, call, seen[key], rel_err=err, note=note)
        _price(bench, timed, fields["dtype"], weight_dtype)
        rows += timed
    return {"kernels": rows}


def _price(bench: Bench, rows: list[dict], dtype: str, weight_dtype: str | None) -> None:
    """Each row's bound at its own compute dtype (and narrow weights for the weight-only
    kernels), or a note saying why it has none."""
    hw = bench.hw
    if hw is None:
        return
    if dtype not in hw.tensor_flops_per_s:
        for r in rows:
            r["note"] = "; ".join(p for p in (r["note"], f"no bound: {hw.name} has no "
                                              f"tensor_flops_per_s.{dtype}") if p)
        return
    vector = bench.numerics.vector_dtype if bench.numerics else "fp16"
    numerics = Numerics(dtype=dtype, vector_dtype=vector, csr_dtype="fp32",
                        weight_dtype=weight_dtype,
                        weight_group_size=INT4_GROUP if weight_dtype == "int4" else None)
    price_rows(bench, rows, numerics=numerics)


def finish(bench: Bench) -> None:
    bench.scratch.pop("dtype_gemm", None)
    if bench.device == "cuda":
        bench.torch.cuda.empty_cache()
