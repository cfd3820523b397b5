"""benchmarks.cpu.faults_per_forward's rule for the heap a CPU sparse whole model regrows per
forward under glibc's defaults: hand-computed bytes on a tiny trace, the trim-threshold gate
at its exact edges, nothing for dense runs or other allocator settings. No timings."""

from __future__ import annotations

import workloads
from benchmarks.cpu.faults_per_forward import (
    build_block_bytes,
    forward_block_bytes,
    glibc_mapped_chunk,
    regrown_bytes,
)
from workloads import Trace
from workloads.backend import torch_cpu_sparse_linears

T, C, HID = 64, 32, 128  # tokens, channels, MLP hidden width


def _op(name, kind, producers, **fields):
    base = {"name": name, "kind": kind, "m": 0, "k": 0, "n": 0, "groups": 1,
            "weight_elems": 0, "input_elems": T * C, "output_elems": T * C,
            "vector_flops": 0.0, "prunable": False, "producers": producers}
    return base | fields


def _mlp(extra: int = 0, prunable: bool = True) -> Trace:
    """norm -> fc1 -> gelu -> fc2 -> add (-> an op of ``extra`` output elements), as the CPU
    sparse path runs it (fill, bias add, X^T copy for fc1; fc2's X is column-major)."""
    ops = [
        _op("norm", "norm", ["input"], weight_elems=2 * C),
        _op("fc1", "linear", ["norm"], m=HID, k=C, n=T, weight_elems=HID * C + HID,
            output_elems=T * HID, vector_flops=float(T * HID), prunable=prunable),
        _op("act", "activation", ["fc1"], input_elems=T * HID, output_elems=T * HID),
        _op("fc2", "linear", ["act"], m=C, k=HID, n=T, weight_elems=C * HID + C,
            input_elems=T * HID, vector_flops=float(T * C), prunable=prunable),
        _op("add", "elementwise", ["input", "fc2"], input_elems=2 * T * C),
    ]
    if extra:
        ops.append(_op("big", "elementwise", ["add"], output_elems=extra))
    return torch_cpu_sparse_linears(Trace.from_records("toy_mlp", [T, C], ops))


def test_mapped_chunks_are_glibcs_and_match_the_logged_thresholds():
    # request2size(4096) = 4112; + 64 + 32 + 8 = 4216 -> 8192 mapped, the chunk 48 bytes in
    assert glibc_mapped_chunk(4096) == 8192 - 48
    # the trim thresholds the Xeon's malloc log recorded (malloc_log.csv), halved: DeiT-S's
    # and ViT-B's build (8 x 1536 x 384, 8 x 3072 x 768 bytes), the batch-8 MLP hidden tensor
    assert glibc_mapped_chunk(8 * 1536 * 384) == 9445280 // 2
    assert glibc_mapped_chunk(8 * 3072 * 768) == 37756832 // 2
    assert glibc_mapped_chunk(4 * 8 * 197 * 1536) == 19373984 // 2


def test_the_regrown_bytes_by_hand():
    trace = _mlp()
    assert build_block_bytes(trace) == 8 * HID * C == 32768
    assert forward_block_bytes(trace, 2) == 4 * 2 * T * HID
    # fc1: zero-filled output and bias add (2 T HID) and the copy of X^T (T C);
    # fc2: 2 T C, no copy (gelu's output of fc1's transposed result is column-major)
    per_sample = 2 * T * HID + T * C + 2 * T * C
    assert regrown_bytes(trace, 2) == 4 * 2 * per_sample == 180224
    assert regrown_bytes(trace, 3) == 4 * 3 * per_sample


def test_the_gate_at_its_exact_edges():
    # batch 1: the forward's largest block (4 T HID = 32768 bytes) maps the same chunk as the
    # build's (8 HID C = 32768): its free does not lower the trim threshold, nothing regrows
    assert glibc_mapped_chunk(forward_block_bytes(_mlp(), 1)) == glibc_mapped_chunk(32768)
    assert regrown_bytes(_mlp(), 1) == 0
    # an op of 9186 fp32 elements (36744 bytes) still maps that chunk (36744 + 8 -> 36752,
    # + 104 = 36856 <= 36864 bytes): shut
    assert glibc_mapped_chunk(4 * 9186) == glibc_mapped_chunk(32768) == 36864 - 48
    assert regrown_bytes(_mlp(extra=9186), 1) == 0
    # one element more (36748 bytes -> 36768 + 104 > 36864) maps a page more: open
    assert glibc_mapped_chunk(4 * 9187) == 40960 - 48
    assert regrown_bytes(_mlp(extra=9187), 1) == 4 * (2 * T * HID + T * C + 2 * T * C)


def test_blocks_over_32_mib_raise_nothing():
    # a 33 MiB output is mapped anew each time and raises no threshold: the forward's largest
    # block is the next one (T HID at batch 1), and the gate stays shut
    big = (33 << 20) // 4
    assert forward_block_bytes(_mlp(extra=big), 1) == 4 * T * HID
    assert regrown_bytes(_mlp(extra=big), 1) == 0


def test_nothing_for_dense_runs_or_other_allocator_settings():
    dense = _mlp(prunable=False)
    assert build_block_bytes(dense) == 0
    assert regrown_bytes(dense, 8) == 0
    assert regrown_bytes(_mlp(), 2, allocator={}) == regrown_bytes(_mlp(), 2) > 0
    no_mmap = {"MALLOC_MMAP_THRESHOLD_": "2147483647", "MALLOC_TRIM_THRESHOLD_": "2147483647"}
    assert regrown_bytes(_mlp(), 2, allocator=no_mmap) == 0
    assert regrown_bytes(_mlp(), 2, allocator='{"LD_PRELOAD": "libjemalloc.so"}') == 0


def test_deit_small_by_hand():
    """The shipped DeiT-S with every linear on the block4 path: per block qkv 2 x 197 x 1152 +
    197 x 384, proj 3 x 197 x 384, fc1 2 x 197 x 1536 + 197 x 384, fc2 2 x 197 x 384; the head
    2 x 1000 + 384. 610 MB at batch 8 (the malloc logs measured 509-603), 0 at batch 1."""
    from dse.calibrate.validate import torch_ran

    sparse = torch_ran(workloads.load_trace("deit_small_patch16_224"), "block4@87.5%", "cpu")
    block = (2 * 197 * 1152 + 197 * 384) + 3 * 197 * 384 + (2 * 197 * 1536 + 197 * 384) \
        + 2 * 197 * 384
    assert regrown_bytes(sparse, 8) == 4 * 8 * (12 * block + 2 * 1000 + 384) == 610101760
    assert regrown_bytes(sparse, 1) == 0
