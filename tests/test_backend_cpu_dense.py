"""workloads.backend.torch_cpu_dense_linears on a synthetic trace of known structure: each
dense linear whose bias the op holds (addmm) gets one bias copy of its output before it; a
linear whose bias is an add of its own, and every other op, is left as it was."""

from __future__ import annotations

from workloads.backend import torch_cpu_dense_linears
from workloads.trace import Trace


def _op(name, kind, producers, m=0, k=0, n=0, inputs=0, outputs=0, flops=0.0):
    return {"name": name, "kind": kind, "m": m, "k": k, "n": n, "groups": 1, "weight_elems":
            m * k, "input_elems": inputs, "output_elems": outputs, "vector_flops": flops,
            "prunable": kind == "linear", "producers": producers}


def _trace():
    records = [
        _op("norm", "norm", ["input"], inputs=64 * 16, outputs=64 * 16, flops=5 * 64 * 16),
        # biased: addmm, 32 x 16 output, one add per output element in vector_flops
        _op("fc1", "linear", ["norm"], m=32, k=64, n=16, inputs=64 * 16, outputs=32 * 16,
            flops=32 * 16),
        _op("act", "activation", ["fc1"], inputs=32 * 16, outputs=32 * 16, flops=32 * 16),
        # its bias is the add that follows (torch's mm + add_ over a transposed input)
        _op("fc2", "linear", ["act"], m=8, k=32, n=16, inputs=32 * 16, outputs=8 * 16),
        _op("fc2.add", "elementwise", ["fc2"], inputs=8 * 16, outputs=8 * 16, flops=8 * 16),
    ]
    return Trace.from_records("toy", [16, 64], records, {"source": "test"})


def test_each_biased_linear_gets_one_fill_of_its_output_before_it():
    out = torch_cpu_dense_linears(_trace()).ops.set_index("name")
    assert list(out.index) == ["norm", "fc1.bias_fill", "fc1", "act", "fc2", "fc2.add"]
    fill = out.loc["fc1.bias_fill"]
    assert fill["kind"] == "other" and fill["m"] == 0
    assert fill["output_elems"] == 32 * 16 and fill["input_elems"] == 32  # writes M x N
    assert fill["vector_flops"] == 0 and list(fill["producers"]) == ["norm"]
    # the linear itself, and its consumers, are untouched: the fill is no producer of theirs
    assert list(out.loc["fc1", "producers"]) == ["norm"]
    assert list(out.loc["act", "producers"]) == ["fc1"]
    assert out.loc["fc1", "vector_flops"] == 32 * 16


def test_a_trace_without_biased_linears_is_returned_as_is():
    records = [_op("fc", "linear", ["input"], m=8, k=4, n=2, inputs=8, outputs=16)]
    trace = Trace.from_records("toy", [2, 4], records, {"source": "test"})
    assert torch_cpu_dense_linears(trace) is trace
