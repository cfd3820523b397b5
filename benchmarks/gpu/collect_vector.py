"""Parts ``vector``, ``narrow_norm`` and ``copy``: the non-GEMM ops of a model (layer norm,
GELU / SiLU / ReLU, softmax, add, a per-channel multiply, a mean over positions), built by the
same builder ``dse measure`` uses for a trace's vector ops
(:func:`dse.measure.kernels_cpu.build_vector`: torch ops in fp16 on a GPU, fp32 on the CPU),
over sizes from one decode token to a batch-128 ViT activation.

Each row's ``n`` is the op's output elements (dse's convention for vector ops) and ``flops``
its vector FLOPs as the trace exporter counts them (``workloads.export``: layer norm 5 per
output element, GELU 8, SiLU 4, ReLU 1, softmax 5, add and multiply 1, a mean 1 per input
element), its ``bytes`` what dse charges a one-op trace of the same element counts (every
input, weight and output element once); the bound is computed from those two under the row's
cache condition (:func:`benchmarks.gpu.collect_rows.price_rows`).

Part ``narrow_norm`` (:data:`NARROW_NORMS`): layer norms over the 96-1024 channels of
ConvNeXt-T / -B and Swin-T stages, at their positions per image times batch 1, 8, 32 and 128.
In whole-model profiles ConvNeXt-T's norms over 96-192 channels ran 3x slower than the
``vector`` part's widths (384 and up) predicted: a norm's width, not only its size, sets its
time.

Part ``copy`` (:func:`copies`): the data movement a trace records as kind ``other`` (Swin's
window partitions and shifts, a transposed view made contiguous, padding, gathers), which no
other part measured, so the expectation priced it by extrapolation (4x too slow for Swin-T's
copies at batch 1): a permute made contiguous (``clone``), ``torch.roll`` over two axes, a
constant pad of two axes and a row gather (``index``), 4 Ki-64 Mi elements, fp16 on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .collect_items import Item
from .collect_rows import Bench, error_row, price_rows, timed_rows, vector_traffic

__all__ = ["VectorOp", "copies", "copy_items", "items", "narrow_items", "narrow_norms", "ops",
           "random_items", "random_ops", "StridedAdd", "run_strided", "strided_adds",
           "strided_items",
           "run"]


@dataclass(frozen=True)
class VectorOp:
    kind: str  #: dse op kind: norm, activation, softmax, elementwise, reduce
    name: str  #: what the builder keys on (gelu, silu, relu for activations)
    input_elems: int
    output_elems: int
    weight_elems: int
    flops: float  #: vector FLOPs of one call

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.name}-{self.input_elems}-{self.output_elems}-{self.weight_elems}"


def _flops_per_element() -> dict[str, float]:
    from workloads.export import ACTIVATION_FLOPS, ELEMENTWISE_FLOPS, NORM_FLOPS, SOFTMAX_FLOPS

    return {"norm": NORM_FLOPS["native_layer_norm"], "softmax": SOFTMAX_FLOPS["_softmax"],
            "add": ELEMENTWISE_FLOPS["add"], "mul": ELEMENTWISE_FLOPS["mul"], "reduce": 1,
            **{a: ACTIVATION_FLOPS[a] for a in ("gelu", "silu", "relu")}}


#: Layer-norm widths and rows (tokens): LLM decode rows to ViT-B batch 64.
NORM_WIDTHS = (384, 768, 1024, 4096, 5120, 8192)
NORM_ROWS = (1, 64, 197, 1576, 12608)
#: Narrow layer norms: (width, positions per image) of ConvNeXt-T / Swin-T (96-768) and
#: ConvNeXt-B (128-1024) stages at 224 px, at :data:`NARROW_BATCHES`.
NARROW_NORMS = ((96, 3136), (192, 784), (384, 196), (768, 49),
                (128, 3136), (256, 784), (512, 196), (1024, 49))
NARROW_BATCHES = (1, 8, 32, 128)
#: Element counts of the elementwise ops: 4 Ki to 64 Mi.
SIZES = (2**12, 2**15, 2**18, 2**20, 2**22, 2**24, 2**26)
#: Means over positions (global average pooling): (outputs, elements per output).
MEANS = ((1 * 2048, 49), (8 * 768, 49), (128 * 768, 49), (128 * 2048, 49), (128 * 96, 3136))


def ops(smoke: bool = False) -> list[VectorOp]:
    per = _flops_per_element()
    widths, rows, sizes, means = ((64,), (4, 16), (4096,), ((64, 16),)) if smoke else (
        NORM_WIDTHS, NORM_ROWS, SIZES, MEANS)
    out = [VectorOp("norm", "layer_norm", r * c, r * c, 2 * c, per["norm"] * r * c)
           for c in widths for r in rows]
    for act in ("gelu", "silu", "relu"):
        out += [VectorOp("activation", act, n, n, 0, per[act] * n) for n in sizes]
    out += [VectorOp("softmax", "softmax", n, n, 0, per["softmax"] * n) for n in sizes]
    out += [VectorOp("elementwise", "add", 2 * n, n, 0, per["add"] * n) for n in sizes]
    # A per-channel scale (ConvNeXt's layer scale, width 768) needs n a multiple of 768.
    out += [VectorOp("elementwise", "mul", n, n, 768, per["mul"] * n)
            for n in (768 * (s // 1024) for s in sizes)]
    out += [VectorOp("reduce", "mean", o * p, o, 0, per["reduce"] * o * p) for o, p in means]
    return out


def narrow_norms(smoke: bool = False) -> list[VectorOp]:
    per = _flops_per_element()["norm"]
    shapes = ((24, 16), (48, 4)) if smoke else tuple(
        (c, b * p) for b in NARROW_BATCHES for c, p in NARROW_NORMS)
    return [VectorOp("norm", "layer_norm", r * c, r * c, 2 * c, per * r * c) for c, r in shapes]


def items(smoke: bool = False) -> list[Item]:
    return [Item(op.key, op) for op in ops(smoke)]


#: The copies of part ``copy``: each views its input as (rows, 16, 16, 16).
COPY_NAMES = ("clone", "roll", "constant_pad_nd", "index")


def copies(smoke: bool = False) -> list[VectorOp]:
    """Part ``copy``'s ops: no FLOPs; a pad writes (18 x 18) / (16 x 16) of what it reads."""
    out = []
    for n in ((2**14,) if smoke else SIZES):
        for name in COPY_NAMES:
            written = n * 18 * 18 // 256 if name == "constant_pad_nd" else n
            out.append(VectorOp("other", name, n, written, 0, 0.0))
    return out


def copy_items(smoke: bool = False) -> list[Item]:
    return [Item(op.key, op) for op in copies(smoke)]


def _copy_kernel(bench: Bench, op: VectorOp):
    """(fn, library call) of one part-``copy`` op on a (rows, 16, 16, 16) tensor."""
    import torch.nn.functional as F

    torch = bench.torch
    x = torch.randn(op.input_elems // 4096, 16, 16, 16, generator=bench.generator(11),
                    device=bench.device, dtype=bench.torch_dtype)
    if op.name == "clone":
        return (lambda: x.permute(0, 2, 1, 3).contiguous()), "permute(0, 2, 1, 3).contiguous()"
    if op.name == "roll":
        return (lambda: torch.roll(x, (3, 3), (1, 2))), "torch.roll(shifts=(3, 3), dims=(1, 2))"
    if op.name == "constant_pad_nd":
        return (lambda: F.pad(x, (0, 0, 0, 2, 0, 2))), "F.pad(0, 0, 0, 2, 0, 2)"
    rows = x.view(-1, 16)
    index = torch.randperm(rows.shape[0], generator=bench.generator(12), device=bench.device)
    return (lambda: rows[index]), "rows[index] (a gather of 16-element rows)"


#: Part ``vector_random``: vector ops and copies at sizes drawn at random (fixed seed), so that
#: a model's own can be held out and others stay to learn from (the fixed sizes above are
#: powers of two, which no model's tensors are): layer norms over 32-8192 channels (multiples
#: of 32) and 1-200,000 rows, activations, softmax, adds, per-channel scales and copies over
#: 4 Ki-64 Mi elements (log-uniform), means over 7-3136 positions.
RANDOM_SEED, RANDOM_NORMS, RANDOM_PER_KIND, RANDOM_MAX_ELEMS = 2028, 40, 8, 2**26


def random_ops(smoke: bool = False) -> list[VectorOp]:
    """Part ``vector_random``'s ops (:data:`RANDOM_SEED`)."""
    per = _flops_per_element()
    if smoke:
        return [VectorOp("norm", "layer_norm", 7 * 96, 7 * 96, 2 * 96, per["norm"] * 7 * 96)]
    rng = np.random.default_rng(RANDOM_SEED)

    def log_uniform(low: float, high: float) -> int:
        return int(np.exp(rng.uniform(np.log(low), np.log(high))))

    out: list[VectorOp] = []
    while len(out) < RANDOM_NORMS:
        c, r = 32 * max(1, log_uniform(32, 8192) // 32), log_uniform(1, 200_000)
        if r * c <= RANDOM_MAX_ELEMS:
            out.append(VectorOp("norm", "layer_norm", r * c, r * c, 2 * c, per["norm"] * r * c))
    sizes = lambda multiple: [multiple * max(1, log_uniform(2**12, 2**26) // multiple)  # noqa: E731
                              for _ in range(RANDOM_PER_KIND)]
    for act in ("gelu", "silu", "relu"):
        out += [VectorOp("activation", act, n, n, 0, per[act] * n) for n in sizes(64)]
    out += [VectorOp("softmax", "softmax", n, n, 0, per["softmax"] * n) for n in sizes(64)]
    out += [VectorOp("elementwise", "add", 2 * n, n, 0, per["add"] * n) for n in sizes(64)]
    for n in sizes(1):
        c = 32 * max(1, log_uniform(64, 2048) // 32)
        n = c * max(1, n // c)
        out.append(VectorOp("elementwise", "mul", n, n, c, per["mul"] * n))
    for _ in range(RANDOM_PER_KIND):
        o, p = log_uniform(96, 262_144), int(rng.choice((7 * 7, 14 * 14, 28 * 28, 56 * 56)))
        if o * p <= RANDOM_MAX_ELEMS:
            out.append(VectorOp("reduce", "mean", o * p, o, 0, per["reduce"] * o * p))
    for name in COPY_NAMES:
        for n in sizes(4096):
            written = n * 18 * 18 // 256 if name == "constant_pad_nd" else n
            out.append(VectorOp("other", name, n, written, 0, 0.0))
    unique: dict[str, VectorOp] = {}
    for op in out:
        unique.setdefault(op.key, op)
    return list(unique.values())


def random_items(smoke: bool = False) -> list[Item]:
    return [Item(op.key, op) for op in random_ops(smoke)]


def narrow_items(smoke: bool = False) -> list[Item]:
    return [Item(op.key, op) for op in narrow_norms(smoke)]


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    from dse.measure.kernels_cpu import VectorCase, build_vector
    from workloads import norm_width

    op: VectorOp = item.config
    part = "copy" if op.kind == "other" else "vector"
    fields = {"source": "benchmark", "why": f"collect {part}: {op.name}", "op": op.name,
              "kind": op.kind, "family": "vector", "format": "dense", "sparsity": 0.0,
              "n": op.output_elems, "groups": 1, "batch": 1,
              "k": norm_width(op.name, op.weight_elems) if op.kind == "norm" else 0,
              "implementation": "torch_cuda_vector" if bench.device == "cuda"
              else "torch_vector"}
    case = VectorCase(op.kind, op.name, op.input_elems, op.output_elems, op.weight_elems)
    try:
        if op.kind == "other":
            fn, call = _copy_kernel(bench, op)
            note = f"{op.name}: {op.input_elems} elements in, {op.output_elems} out"
        else:
            kernel = build_vector(case, device=bench.device, dtype=bench.dtype)
            if kernel is None:
                raise ValueError(f"no {op.kind} kernel for these element counts")
            fn, call, note = kernel.fn, kernel.kernel, kernel.note
        fn()
        bench.clock.sync()
    except Exception as exc:  # out of memory on a small device: data, not a crash
        return {"kernels": [error_row(bench, fields, exc)]}
    traffic = (vector_traffic(bench, op.kind, op.input_elems, op.output_elems, op.weight_elems)
               if bench.hw is not None else float("nan"))
    seen = bench.clock.identify({"op": fn})["op"]
    rows = timed_rows(bench, fn, dict(fields, flops=op.flops, bytes=traffic), call, seen,
                      note=note)
    price_rows(bench, rows)
    return {"kernels": rows}


# --- part strided_add ---------------------------------------------------------------------------

#: Part ``strided_add``: the residual add after a 2:4 linear. ``F.linear(X, W24)`` returns a
#: transposed view (``(W24 @ X^T)^T``), and the add of that view to the contiguous residual
#: runs 4.2x slower than the same add of two contiguous tensors (ViT-B at batch 128 under 2:4,
#: benchmarks/gpu/results/collect/profiles.parquet: 24 adds of [128, 197, 768]). Each item is
#: (rows, width): the add of a contiguous [rows, width] tensor and the transpose of a
#: contiguous [width, rows] one (``add_strided``), beside the add of two contiguous tensors
#: of the same shape (``add``). Rows and widths: DeiT-S, ViT-B and Swin-T's tokens at batch
#: 1-128, then :data:`STRIDED_RANDOM` drawn at random (fixed seed).
STRIDED_MODELS = tuple((197 * b, c) for c in (384, 768) for b in (1, 8, 32, 128)) + tuple(
    (tokens * b, c) for tokens, c in ((3136, 96), (784, 192), (196, 384), (49, 768))
    for b in (1, 8, 32, 128))
STRIDED_RANDOM, STRIDED_SEED = 24, 2030


@dataclass(frozen=True)
class StridedAdd:
    rows: int
    width: int
    name: str  #: add_strided (one operand a transposed view) or add (both contiguous)

    @property
    def key(self) -> str:
        return f"{self.name}-{self.rows}x{self.width}"


def strided_adds(smoke: bool = False) -> list[StridedAdd]:
    if smoke:
        shapes = [(48, 32)]
    else:
        rng = np.random.default_rng(STRIDED_SEED)
        drawn = []
        while len(drawn) < STRIDED_RANDOM:
            width = 32 * max(1, int(np.exp(rng.uniform(np.log(64), np.log(8192)))) // 32)
            rows = int(np.exp(rng.uniform(np.log(16), np.log(200_000))))
            if rows * width <= RANDOM_MAX_ELEMS and (rows, width) not in drawn:
                drawn.append((rows, width))
        shapes = list(STRIDED_MODELS) + drawn
    return [StridedAdd(r, c, name) for r, c in shapes for name in ("add_strided", "add")]


def strided_items(smoke: bool = False) -> list[Item]:
    return [Item(s.key, s) for s in strided_adds(smoke)]


def run_strided(item: Item, bench: Bench) -> dict[str, list[dict]]:
    s: StridedAdd = item.config
    torch = bench.torch
    n = s.rows * s.width
    per = _flops_per_element()["add"]
    fields = {"source": "benchmark", "why": f"collect strided_add: {s.name} {s.rows}x{s.width}",
              "op": s.name, "kind": "elementwise", "family": "vector", "format": "dense",
              "sparsity": 0.0, "n": n, "groups": 1, "batch": 1, "k": 0,
              "implementation": "torch_cuda_vector" if bench.device == "cuda"
              else "torch_vector"}
    try:
        a = torch.randn(s.rows, s.width, generator=bench.generator(13), device=bench.device,
                        dtype=bench.torch_dtype)
        if s.name == "add_strided":
            b = torch.randn(s.width, s.rows, generator=bench.generator(14),
                            device=bench.device, dtype=bench.torch_dtype).t()
            call = "torch.add(x, y.t()) (y.t() a transposed view, as F.linear(X, W24) returns)"
        else:
            b = torch.randn(s.rows, s.width, generator=bench.generator(14),
                            device=bench.device, dtype=bench.torch_dtype)
            call = "torch.add(x, y) (both contiguous)"
        fn = lambda: torch.add(a, b)  # noqa: E731
        fn()
        bench.clock.sync()
    except Exception as exc:  # out of memory on a small device: data, not a crash
        return {"kernels": [error_row(bench, fields, exc)]}
    traffic = (vector_traffic(bench, "elementwise", 2 * n, n, 0) if bench.hw is not None
               else float("nan"))
    seen = bench.clock.identify({"op": fn})["op"]
    note = f"{s.rows} rows x {s.width}: two inputs, one output"
    rows = timed_rows(bench, fn, dict(fields, flops=per * n, bytes=traffic), call, seen,
                      note=note)
    price_rows(bench, rows)
    return {"kernels": rows}
