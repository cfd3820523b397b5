"""Part ``vector``: the non-GEMM ops of a model (layer norm, GELU / SiLU / ReLU, softmax, add,
a per-channel multiply, a mean over positions), built by the same builder ``dse measure`` uses
for a trace's vector ops (:func:`dse.measure.kernels_cpu.build_vector`: torch ops in fp16 on a
GPU, fp32 on the CPU), over sizes from one decode token to a batch-128 ViT activation.

Each row's ``n`` is the op's output elements (dse's convention for vector ops) and ``flops``
its vector FLOPs as the trace exporter counts them (``workloads.export``: layer norm 5 per
output element, GELU 8, SiLU 4, ReLU 1, softmax 5, add and multiply 1, a mean 1 per input
element), its ``bytes`` what dse charges a one-op trace of the same element counts (every
input, weight and output element once); the bound is computed from those two under the row's
cache condition (:func:`benchmarks.gpu.collect_rows.price_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .collect_items import Item
from .collect_rows import Bench, error_row, price_rows, timed_rows, vector_traffic

__all__ = ["VectorOp", "items", "ops", "run"]


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


def items(smoke: bool = False) -> list[Item]:
    return [Item(op.key, op) for op in ops(smoke)]


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    from dse.measure.kernels_cpu import VectorCase, build_vector
    from workloads import norm_width

    op: VectorOp = item.config
    fields = {"source": "benchmark", "why": f"collect vector: {op.name}", "op": op.name,
              "kind": op.kind, "family": "vector", "format": "dense", "sparsity": 0.0,
              "n": op.output_elems, "groups": 1, "batch": 1,
              "k": norm_width(op.name, op.weight_elems) if op.kind == "norm" else 0,
              "implementation": "torch_cuda_vector" if bench.device == "cuda"
              else "torch_vector"}
    case = VectorCase(op.kind, op.name, op.input_elems, op.output_elems, op.weight_elems)
    try:
        kernel = build_vector(case, device=bench.device, dtype=bench.dtype)
        if kernel is None:
            raise ValueError(f"no {op.kind} kernel for these element counts")
        kernel.fn()
        bench.clock.sync()
    except Exception as exc:  # out of memory on a small device: data, not a crash
        return {"kernels": [error_row(bench, fields, exc)]}
    traffic = (vector_traffic(bench, op.kind, op.input_elems, op.output_elems, op.weight_elems)
               if bench.hw is not None else float("nan"))
    seen = bench.clock.identify({"op": kernel.fn})["op"]
    rows = timed_rows(bench, kernel.fn, dict(fields, flops=op.flops, bytes=traffic),
                      kernel.kernel, seen, note=kernel.note)
    price_rows(bench, rows)
    return {"kernels": rows}
