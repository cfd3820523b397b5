"""The attention a framework really runs, as a trace: fused, or torch's math path under 2:4.

The shipped timm traces hold attention as the explicit ops of its eager form (scale, the
score product ``bmm``, softmax, the context product ``bmm_1``, and the copies between them).
What runs differs by backend, and that difference decides the sign of a 2:4 speedup
(measured on an H100, torch 2.11, per-op profiles in
``benchmarks/gpu/results/collect/profiles.parquet``):

- **fused** (:func:`fuse_attention`): a dense timm ViT calls
  ``F.scaled_dot_product_attention``, which runs one fused kernel (cuDNN or flash attention):
  the two products and the softmax in one pass, reading q, k and v and writing the context;
  the T x T scores never reach DRAM. ViT-B at batch 128: 1.2 ms of attention.
- **torch's 2:4 math path** (:func:`torch_math_attention`): once the qkv linear is a
  ``SparseSemiStructuredTensor``, its output is a transposed view, SDPA's fused kernels refuse
  its strides and torch runs ``_scaled_dot_product_attention_math`` with ``_safe_softmax``.
  Beside the explicit ops the trace holds, that path runs, per attention: four dtype copies of
  a (T x C) operand and one of the scores (``aten::_to_copy``), a second scale (``aten::mul``:
  q and k are both scaled by the square root), and the masked-row checks over the scores
  (``aten::isneginf``, ``aten::all`` over the last axis, ``aten::where``). With fp16 inputs
  the products and the softmax run in fp32 (``sm80_xmma_gemm_f32f32`` batched GEMMs, no fp16
  tensor cores). ViT-B at batch 128: 21 ms of attention, 7.8 ms of it the fp32 products,
  against 6.6 ms for all the 2:4 products.

Both return a new :class:`~workloads.trace.Trace`; ops outside attention are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

from .trace import Trace

__all__ = ["AttentionRegion", "STRIDED", "attention_regions", "fuse_attention",
           "torch_cpu_sparse_linears", "torch_math_attention",
           "torch_run_unknown", "torch_strided_adds"]


def torch_run_unknown(trace: Trace) -> str | None:
    """Why what torch runs for ``trace`` is not known (one clause naming the model), or None
    when it is: the ops this module rebuilds, and the rule of which layers torch converts, were
    measured and profiled on whole timm models, exported by ``dse workloads export``
    (provenance ``timm``). A language model's step, or a hand-written or foreign trace (the
    shipped ``toy_hybrid``), was never run whole: pricing it "as torch runs it" would apply
    the timm conversion rule to a model nothing says torch converts that way (issue 26, round
    9: toy_hybrid's 2:4 expectation moved to its dense value, exit 0)."""
    if trace.provenance.get("phase"):
        return f"{trace.model} is a language model's step"
    if not trace.provenance.get("timm"):
        return f"{trace.model} is not a timm model exported by dse workloads export"
    return None

# The ops that may sit between attention's linears and its products: scales, copies, a
# relative-position bias add (Swin). A linear, a convolution or a norm ends the walk.
_GLUE = ("other", "elementwise")


@dataclass(frozen=True)
class AttentionRegion:
    """One attention's explicit ops: ``scores`` (Q K^T), ``softmax``, ``context`` (P V) and
    the glue ops around them (``ops``, in trace order, all of the above included)."""

    scores: str
    softmax: str
    context: str
    ops: tuple[str, ...]


def attention_regions(trace: Trace) -> list[AttentionRegion]:
    """Every softmax between two matmuls, with the glue ops that only feed or follow them."""
    ops = trace.ops.set_index("name", drop=False)
    consumers: dict[str, list[str]] = {name: [] for name in ops.index}
    for name, producers in zip(ops["name"], ops["producers"], strict=True):
        for p in producers:
            if p in consumers:
                consumers[p].append(name)
    regions = []
    for softmax in ops.index[ops["kind"] == "softmax"]:
        # Up from the softmax through glue (Swin's bias add) to the score product.
        inside, scores, at = {softmax}, None, softmax
        while scores is None:
            producers = [p for p in ops.at[at, "producers"] if p in ops.index]
            if len(producers) != 1:
                break
            at = producers[0]
            inside.add(at)
            if ops.at[at, "kind"] == "matmul":
                scores = at
            elif ops.at[at, "kind"] not in _GLUE:
                break
        context = [c for c in consumers[softmax] if ops.at[c, "kind"] == "matmul"]
        if scores is None or len(context) != 1 or len(consumers[softmax]) != 1:
            continue
        inside.add(context[0])
        # Glue feeding the products (scale, copies of q, k, v) and following the context
        # (the copy before the output projection), taken while it serves only the region.
        grew = True
        while grew:
            grew = False
            for name in list(inside):
                for p in ops.at[name, "producers"]:
                    if (p in ops.index and p not in inside and ops.at[p, "kind"] in _GLUE
                            and set(consumers[p]) <= inside):
                        inside.add(p)
                        grew = True
        tail = context[0]
        while len(consumers[tail]) == 1 and ops.at[consumers[tail][0], "kind"] == "other" \
                and len(ops.at[consumers[tail][0], "producers"]) == 1:
            tail = consumers[tail][0]
            inside.add(tail)
        ordered = tuple(n for n in ops["name"] if n in inside)
        regions.append(AttentionRegion(scores, softmax, context[0], ordered))
    return regions


def _prefix(region: AttentionRegion) -> str:
    """``blocks.0.attn.`` of ``blocks.0.attn.bmm``: where the region's new ops are named."""
    return region.scores.rsplit(".", 1)[0] + "." if "." in region.scores else ""


def _rebuild(trace: Trace, records: list[dict], note: str) -> Trace:
    provenance = dict(trace.provenance)
    provenance["backend"] = note
    return Trace.from_records(trace.model, trace.input_shape, records, provenance)


def fuse_attention(trace: Trace) -> Trace:
    """``trace`` with each attention region (:func:`attention_regions`) replaced by one fused
    op (``...fused_attention``, kind ``matmul``): both products' FLOPs (``k`` is the score
    product's ``k`` plus the context product's, so ``2 m k n groups`` is their sum), the
    region's vector FLOPs (softmax, scale), reading what entered the region (q, k, v) and
    writing what left it (the context); the scores stay on chip."""
    regions = attention_regions(trace)
    if not regions:
        return trace
    records = trace.to_json()["ops"]
    by_name = {r["name"]: r for r in records}
    replaced: dict[str, str] = {}
    fused_at: dict[str, dict] = {}
    for region in regions:
        inside = set(region.ops)
        s, c = by_name[region.scores], by_name[region.context]
        flops = 2 * (s["m"] * s["k"] * s["n"] + c["m"] * c["k"] * c["n"]) * s["groups"]
        k = max(1, round(flops / (2 * s["m"] * s["n"] * s["groups"])))
        entering = [by_name[n] for n in region.ops
                    if any(p not in inside for p in by_name[n]["producers"])]
        external = list(dict.fromkeys(p for r in entering for p in r["producers"]
                                      if p not in inside))
        name = f"{_prefix(region)}fused_attention"
        fused = {
            "name": name, "kind": "matmul", "m": s["m"], "k": k, "n": s["n"],
            "groups": s["groups"], "weight_elems": 0,
            "input_elems": int(sum(r["input_elems"] for r in entering)),
            "output_elems": int(by_name[region.ops[-1]]["output_elems"]),
            "vector_flops": float(sum(by_name[n]["vector_flops"] for n in region.ops)),
            "prunable": False, "producers": external}
        fused_at[region.ops[0]] = fused
        for n in region.ops:
            replaced[n] = name
    out = []
    for r in records:
        if r["name"] in fused_at:
            out.append(fused_at[r["name"]])
        if r["name"] in replaced:
            continue
        r = dict(r, producers=list(dict.fromkeys(replaced.get(p, p) for p in r["producers"])))
        out.append(r)
    return _rebuild(trace, out, "attention fused (F.scaled_dot_product_attention's fused "
                                "kernels): workloads.backend.fuse_attention")


def torch_math_attention(trace: Trace, cast_probabilities: bool = True) -> Trace:
    """``trace`` with the ops torch's math SDPA path adds to each attention region (module
    docstring): after the softmax's producer, the masked-row checks over the scores; before
    the score product, four copies and a second scale of a (T x C) operand; after the
    softmax, a dtype copy of the probabilities (``cast_probabilities``: fp16 on a GPU; an
    fp32 CPU run has no such cast,
    ``benchmarks/cpu/results/profile_deit_small_b8.csv``). With ``cast_probabilities`` the
    two products and the softmax run in fp32 (the copies cast q, k and v up): they are
    renamed ``PREFIX.sdpa_math.scores_fp32``, ``softmax_fp32`` and ``context_fp32``, which
    the expectation prices as fp32 kernels (``dse.calibrate.features.fp32_kind``)."""
    regions = attention_regions(trace)
    if not regions:
        return trace
    records = trace.to_json()["ops"]
    by_name = {r["name"]: r for r in records}
    before: dict[str, list[dict]] = {}
    after: dict[str, list[dict]] = {}
    rename: dict[str, str] = {}
    fp32: dict[str, str] = {}  # the ops run in fp32, renamed so that pricing can tell
    for region in regions:
        p = _prefix(region) + "sdpa_math."
        if cast_probabilities:
            fp32.update({region.scores: f"{p}scores_fp32", region.softmax: f"{p}softmax_fp32",
                         region.context: f"{p}context_fp32"})
        s, sm = by_name[region.scores], by_name[region.softmax]
        scores = int(sm["output_elems"])
        operand = int(by_name[region.context]["output_elems"])  # T x C: q, k, v, context
        rows = max(1, scores // max(1, s["n"]))
        copies = [_vector(f"{p}to_copy_{i}", "other", operand, operand, 0.0, s["producers"][:1])
                  for i in range(4)]
        scale = _vector(f"{p}mul_k", "elementwise", operand, operand, float(operand),
                        s["producers"][:1])
        before[region.scores] = copies + [scale]
        checks = [
            _vector(f"{p}isneginf", "elementwise", scores, scores, float(scores),
                    [sm["producers"][0]]),
            _vector(f"{p}all", "reduce", scores, rows, float(scores), [f"{p}isneginf"]),
        ]
        where = _vector(f"{p}where", "elementwise", scores + rows, scores, float(scores),
                        [region.softmax, f"{p}all"])
        after[region.softmax] = checks + [where]
        rename[region.softmax] = f"{p}where"
        if cast_probabilities:
            after[region.softmax].append(
                _vector(f"{p}to_copy_p", "other", scores, scores, 0.0, [f"{p}where"]))
            rename[region.softmax] = f"{p}to_copy_p"
    out = []
    for r in records:
        out += before.get(r["name"], [])
        if r["name"] in rename:
            out.append(r)
            out += after[r["name"]]
            continue
        out.append(dict(r, producers=[rename.get(q, q) for q in r["producers"]]))
    out = [dict(r, name=fp32.get(r["name"], r["name"]),
                producers=[fp32.get(q, q) for q in r["producers"]]) for r in out]
    return _rebuild(trace, out, "torch's math attention path under 2:4 "
                                "(_scaled_dot_product_attention_math, _safe_softmax): "
                                "workloads.backend.torch_math_attention")


def torch_cpu_sparse_linears(trace: Trace) -> Trace:
    """``trace`` with the ops a CPU whole model runs around each of its sparse linears (the
    prunable linears of ``trace``), as ``dse measure --whole-models`` runs them: ``W @ X^T``
    in torch BSR or CSR, transposed back (:func:`dse.measure.kernels_cpu.build_model`).
    Profiled on DeiT-S at batch 8, block4@87.5%
    (``python -m benchmarks.cpu.profile_sparse_model``,
    ``benchmarks/cpu/results/profile_deit_small_b8.csv``), each sparse linear adds:

    - ``output_fill``: the sparse product zero-fills its M x N output first (``aten::fill_``;
      the dense ``addmm`` starts from the bias instead);
    - ``bias_add``: the bias, added after the product over its transposed output
      (``aten::add`` of [N, M] and [M]; the dense ``addmm`` folds it in);
    - ``input_copy``: ``X^T`` made contiguous (``aten::copy_`` of K x N), except where X is
      already column-major: the output of another sparse linear through a vector op (an MLP's
      second linear after its activation).

    The product itself stays the linear op."""
    records = trace.to_json()["ops"]
    by_name = {r["name"]: r for r in records}
    sparse = {r["name"] for r in records if r["kind"] == "linear" and r["prunable"]}
    if not sparse:
        return trace
    rename: dict[str, str] = {}
    out = []
    for r in records:
        r = dict(r, producers=[rename.get(q, q) for q in r["producers"]])
        if r["name"] not in sparse:
            out.append(r)
            continue
        name, m_by_n = r["name"], int(r["output_elems"])
        producers = [by_name[q] for q in r["producers"] if q in by_name]
        column_major = len(producers) == 1 and producers[0]["kind"] in (
            "activation", "elementwise") and any(q in sparse for q in producers[0]["producers"])
        if not column_major:
            copy = _vector(f"{name}.input_copy", "other", r["input_elems"], r["input_elems"],
                           0.0, r["producers"])
            out.append(copy)
            r["producers"] = [copy["name"]]
        out.append(_vector(f"{name}.output_fill", "other", 0, m_by_n, 0.0, r["producers"]))
        out.append(r)
        if r["vector_flops"] > 0:  # a bias
            bias = _vector(f"{name}.bias_add", "elementwise", m_by_n + r["m"], m_by_n,
                           float(m_by_n), [name])
            out.append(bias)
            rename[name] = bias["name"]
    return _rebuild(trace, out, "the ops around torch's CPU sparse linears (zero fill, bias "
                                "add, input copy): workloads.backend.torch_cpu_sparse_linears")


#: The name suffix of a binary elementwise op that reads a transposed view
#: (:func:`torch_strided_adds`); ``dse.calibrate.features.strided_kind`` prices it so.
STRIDED = ".strided"


def torch_strided_adds(trace: Trace) -> Trace:
    """``trace`` with each binary elementwise op that reads the output of a sparse linear (a
    prunable linear of ``trace``) renamed ``NAME.strided``: on a GPU, ``F.linear(X, W24)``
    returns a transposed view (``(W24 @ X^T)^T``), and the residual add of that view to a
    contiguous tensor cannot run as one contiguous sweep. Measured on an H100
    (``benchmarks/gpu/collect`` part ``strided_add``): 1.2-1.5x the contiguous add's time
    under 1 Mi elements, 3-6x above (ViT-B at batch 128 under 2:4: 24 such adds, 4.2x their
    dense time in the per-op profile). A unary op (GELU, a scale) keeps the view's layout and
    its speed, so it is left alone. Only the names change: the expectation prices a renamed op
    as the kind of its own it is (``elementwise:strided``)."""
    records = trace.to_json()["ops"]
    sparse = {r["name"] for r in records if r["kind"] == "linear" and r["prunable"]}
    strided = {r["name"] for r in records
               if r["kind"] == "elementwise" and r["input_elems"] >= 2 * r["output_elems"] > 0
               and any(q in sparse for q in r["producers"])}
    if not strided:
        return trace
    rename = {name: name + STRIDED for name in strided}
    out = [dict(r, name=rename.get(r["name"], r["name"]),
                producers=[rename.get(q, q) for q in r["producers"]]) for r in records]
    return _rebuild(trace, out, "binary ops reading a sparse linear's transposed output "
                                "(F.linear with a 2:4 weight): workloads.backend."
                                "torch_strided_adds")


def _vector(name: str, kind: str, inputs: int, outputs: int, flops: float,
            producers: list[str]) -> dict:
    return {"name": name, "kind": kind, "m": 0, "k": 0, "n": 0, "groups": 1, "weight_elems": 0,
            "input_elems": int(inputs), "output_elems": int(outputs),
            "vector_flops": float(flops), "prunable": False, "producers": list(producers)}
