"""Hypothesis strategies: random valid traces, accelerators and formats."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from accelerator_models import Accelerator, BlockSparse, SparseTensorCore
from formats import NM, Block, Dense, Unstructured
from workloads import Trace

DIMS = [1, 2, 3, 4, 8, 9, 12, 16, 27, 32, 48, 64, 96, 128, 256, 384, 1024]
PATTERNS = [(2, 4), (1, 4), (2, 8), (1, 2), (2, 16), (4, 8), (1, 8)]


@st.composite
def traces(draw, max_ops: int = 8, densities: bool = True) -> Trace:
    """Random valid traces; with ``densities``, some prunable ops carry a checkpoint density."""
    input_shape = [draw(st.sampled_from([1, 3, 16])), draw(st.sampled_from([8, 32, 64]))]
    input_elems = math.prod(input_shape)
    records = []
    for index in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["conv", "linear", "matmul", "norm", "activation",
                                     "elementwise", "softmax"]))
        earlier = [r["name"] for r in records]
        producers = draw(st.lists(st.sampled_from(["input", *earlier]), min_size=1,
                                  max_size=2, unique=True))
        inp = draw(st.integers(0, 1 << 16)) + (input_elems if "input" in producers else 0)
        out = draw(st.integers(1, 1 << 16))
        record = {"name": f"op{index}", "kind": kind, "m": 0, "k": 0, "n": 0, "groups": 1,
                  "weight_elems": 0, "input_elems": inp, "output_elems": out,
                  "vector_flops": float(draw(st.integers(0, 1 << 18))), "prunable": False,
                  "producers": producers}
        if kind in ("conv", "linear", "matmul"):
            m, k = draw(st.sampled_from(DIMS)), draw(st.sampled_from(DIMS))
            g = draw(st.sampled_from([1, 1, 1, 2, 4, 32]))
            record.update(m=m, k=k, n=draw(st.integers(1, 4096)), groups=g)
            if kind != "matmul":
                bias = draw(st.sampled_from([0, m * g]))
                record.update(weight_elems=g * m * k + bias, prunable=draw(st.booleans()))
                if densities and record["prunable"] and draw(st.booleans()):
                    record["density"] = draw(st.floats(0.0, 1.0))
        else:
            record["weight_elems"] = draw(st.sampled_from([0, 0, 256]))
        records.append(record)
    return Trace.from_records("random", input_shape, records, {"source": "hypothesis"})


@st.composite
def accelerators(draw) -> Accelerator:
    patterns = tuple(draw(st.lists(st.sampled_from(PATTERNS), max_size=4, unique=True)))
    rate = draw(st.floats(0.05, 1.0))
    tensor = draw(st.floats(1e12, 2e15))
    # Vector cores are never faster than the tensor cores (true of every real GPU, and what
    # makes a 0%-sparse CSR kernel no faster than dense).
    vector = st.floats(1e11, 2e14).map(lambda v: min(v, tensor))
    return Accelerator(
        name=f"random-{draw(st.integers(0, 1 << 30))}",
        description="",
        dram_bandwidth_bytes_per_s=draw(st.floats(1e10, 1e13)),
        tensor_flops_per_s={"fp16": tensor, "bf16": tensor},
        vector_flops_per_s={"fp32": draw(vector), "fp16": draw(vector)},
        block_sparse=BlockSparse(draw(st.booleans()), draw(st.sampled_from([1, 4, 8, 16, 32]))),
        sparse_tensor=SparseTensorCore(patterns, rate) if patterns else None,
    )


sparsities = st.one_of(st.sampled_from([0.0, 0.5, 0.75, 0.875, 0.9375, 0.96875]),
                       st.floats(0.0, 0.99))


@st.composite
def nm_formats(draw) -> NM:
    m = draw(st.sampled_from([2, 3, 4, 8, 16, 32]))
    return NM(draw(st.integers(1, m - 1)), m)


sparse_formats = st.one_of(
    nm_formats(),
    st.builds(Block, st.sampled_from([1, 2, 4, 8, 16, 32, 64]), sparsities),
    st.builds(Unstructured, sparsities),
)
any_formats = st.one_of(st.just(Dense()), sparse_formats)
