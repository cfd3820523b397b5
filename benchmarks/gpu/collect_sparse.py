"""Part ``sparse_random``: block-sparse (BSR) and unstructured (CSR) GEMMs at weight shapes drawn
at random, beside dense ones on the same shapes.

The shipped H100 block and CSR rows (``dse/measure/datasets/h100-sxm.parquet``) cover 12
weight shapes, all of them ViT, ConvNeXt or square layers: held out by weight shape their
predictors put 55-68% of kernels within 10%, against 89-100% in-sample, which is memorising.
This part draws :data:`SHAPES` weight shapes (M, K log-uniform in 256-8192, multiples of 64;
a fixed seed, so every run has the same items) at two widths N each (log-uniform in 1-8192),
and times, per item:

* dense: the device's dense implementations (cuBLAS ``torch.mm`` and ``F.linear``), for the
  speedup pairs;
* block 16, 32 and 64 at a sparsity drawn per item from 50-93.75%: Triton's BSR kernel
  (``triton_bsr``) and ``torch.sparse.mm`` on the BSR tensor (``torch_bsr_mm``);
* unstructured at a sparsity drawn from 50-96.875%: cuSPARSE SpMM (``cusparse_csr``).

Weights are pruned by the trainer's mask rules under a random mask
(:func:`dse.measure.kernels_cpu.masked_weight`), the condition the bound's expected share of
X's rows read assumes. On the CPU the same formats run through dse's CPU kernels
(``torch_bsr``, ``scipy_bsr``, ``scipy_csr``, ``torch_csr``; fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .collect_items import Item
from .collect_rows import Bench, error_row, price_rows, timed_rows

__all__ = ["SparseShape", "items", "run", "shapes"]

#: Weight shapes drawn, widths per shape, the draw's seed.
SHAPES, WIDTHS, SEED = 16, 2, 2029
BLOCK_SPARSITIES = (0.5, 0.75, 0.875, 0.9375)
CSR_SPARSITIES = (0.5, 0.75, 0.875, 0.9375, 0.96875)


@dataclass(frozen=True)
class SparseShape:
    m: int
    k: int
    n: int
    block_sparsity: float  #: of the three block formats of this item
    csr_sparsity: float

    @property
    def formats(self) -> tuple[str, ...]:
        b, u = 100 * self.block_sparsity, 100 * self.csr_sparsity
        return ("dense", *(f"block{s}@{b:g}%" for s in (16, 32, 64)), f"unstructured@{u:g}%")


def shapes(smoke: bool = False) -> list[SparseShape]:
    if smoke:
        return [SparseShape(128, 256, 16, 0.75, 0.875)]
    rng = np.random.default_rng(SEED)

    def log_uniform(low: float, high: float, multiple: int) -> int:
        value = float(np.exp(rng.uniform(np.log(low), np.log(high))))
        return int(multiple * max(1, round(value / multiple)))

    out: list[SparseShape] = []
    while len(out) < SHAPES * WIDTHS:
        m, k = log_uniform(256, 8192, 64), log_uniform(256, 8192, 64)
        for _ in range(WIDTHS):
            out.append(SparseShape(m, k, log_uniform(1, 8192, 1),
                                   float(rng.choice(BLOCK_SPARSITIES)),
                                   float(rng.choice(CSR_SPARSITIES))))
    return out


def _key(s: SparseShape) -> str:
    return f"{s.m}x{s.k}x{s.n}-b{s.block_sparsity:g}-u{s.csr_sparsity:g}"


def items(smoke: bool = False) -> list[Item]:
    return [Item(_key(s), s) for s in shapes(smoke)]


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    """Rows of one item: every format's implementations cold and warm, or their refusals."""
    import formats
    from dse.measure.kernels_cpu import GemmCase

    if bench.device == "cuda":
        from dse.measure.kernels_cuda import build_gemm
    else:
        from dse.measure.kernels_cpu import build_gemm
    s: SparseShape = item.config
    rows: list[dict] = []
    for name in s.formats:
        fmt = formats.parse(name)
        fields = {"source": "benchmark", "why": f"collect sparse_random: {s.m}x{s.k}, N={s.n}",
                  "op": f"random {s.m}x{s.k}", "kind": "linear", "family": fmt.family,
                  "format": name, "sparsity": float(fmt.sparsity),
                  "block": int(getattr(fmt, "block", 0) or 0), "m": s.m, "k": s.k, "n": s.n,
                  "groups": 1, "batch": 1}
        case = GemmCase(s.m, s.k, s.n, 1, fmt, seed=bench.seed)
        try:
            built = build_gemm(case)
        except Exception as exc:  # a format that cannot apply to the shape: data
            rows.append(error_row(bench, dict(fields, implementation=""), exc))
            continue
        ready = {}
        for impl, kernel in built.items():
            row_fields = dict(fields, implementation=impl)
            if isinstance(kernel, Exception):
                rows.append(error_row(bench, row_fields, kernel))
                continue
            row_fields.update(nnz=kernel.nnz, index_dtype=kernel.index_dtype)
            ready[impl] = (kernel, row_fields)
        bench.clock.sync()
        seen = bench.clock.identify({impl: k.fn for impl, (k, _) in ready.items()})
        for impl, (kernel, row_fields) in ready.items():
            rows += timed_rows(bench, kernel.fn, row_fields, kernel.kernel or impl, seen[impl],
                               rel_err=kernel.rel_err, note=kernel.note)
        if bench.device == "cuda":
            bench.torch.cuda.empty_cache()
    price_rows(bench, rows)
    return {"kernels": rows}
