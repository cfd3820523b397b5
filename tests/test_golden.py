"""Golden numbers worked out by hand from DESIGN.md's equations (arithmetic in the comments).

Hardware "round" (tests/data/round_gpu.toml): 1e12 B/s DRAM, 100e12 FLOP/s fp16 tensor cores,
10e12 fp32 and 20e12 fp16 vector FLOP/s, 2:4 sparse tensor core at nonzero_rate 1.0.
Values and features fp16 (2 bytes), CSR/BSR indices 4 bytes.

Layer fc: linear, M = K = 1024, N = 16 per sample, weights 1 048 576, input 16 384 and output
16 384 elements per sample, so features cost 2 * (16384 + 16384) = 65 536 bytes per sample.
"""

from __future__ import annotations

import pytest

import dse

REL = 1e-9

# (trace, op, format, hardware, batch, fallback, compute_s, memory_s (unfused))
LAYERS = [
    # dense: FLOPs 2*1024*1024*16 = 33 554 432 -> / 1e14; bytes 2*1048576 + 65536 = 2 162 688.
    ("chain", "fc", "dense", "round", 1, "", 33_554_432 / 100e12, 2_162_688 / 1e12),
    # 2:4: nnz 524 288; FLOPs 2*524288*16 = 16 777 216 at 1.0 x 1e14;
    # bytes 2*524288 + 524288*2 bits/8 (131 072) + 65 536 = 1 245 184.
    ("chain", "fc", "2:4", "round", 1, "", 16_777_216 / 100e12, 1_245_184 / 1e12),
    # 2:4 at batch 64: FLOPs 2*524288*1024 = 1 073 741 824; bytes 1 179 648 + 65536*64
    # (4 194 304) = 5 373 952 -> compute-bound.
    ("chain", "fc", "2:4", "round", 64, "", 1_073_741_824 / 100e12, 5_373_952 / 1e12),
    # block16@87.5%: nnz 131 072; FLOPs 2*131072*16 = 4 194 304 on tensor cores;
    # index 4*(131072/256 + 1024/16 + 1) = 4*577 = 2308; bytes 262 144 + 2308 + 65 536 = 329 988,
    # less the rows of X under empty block-columns: each of the 64 blocks of a block-column is
    # empty with probability 0.875, so 0.875^64 of the 32 768 input bytes are never read.
    ("chain", "fc", "block16@87.5%", "round", 1, "", 4_194_304 / 100e12,
     (329_988 - 32_768 * 0.875**64) / 1e12),
    # unstructured@90%: nnz 104 857.6; FLOPs 2*104857.6*16 = 3 355 443.2 on fp32 vector (1e13);
    # index 4*(104857.6 + 1024 + 1) = 423 530.4; values 209 715.2; + 65 536 -> 698 781.6.
    ("chain", "fc", "unstructured@90%", "round", 1, "", 3_355_443.2 / 10e12, 698_781.6 / 1e12),
    # 1:4 is not on round's sparse tensor core: dense takes max(3.36e-7, 2.16e-6) = 2.16e-6 s;
    # CSR of the 262 144 nonzeros: FLOPs 8 388 608 / 1e13 = 8.39e-7 s, bytes 524 288 +
    # 4*(262144 + 1025) (1 052 676) + 65 536 = 1 642 500 -> 1.64e-6 s: CSR is faster.
    ("chain", "fc", "1:4", "round", 1, "hw:csr", 8_388_608 / 10e12, 1_642_500 / 1e12),
    # 2:4 on a real A100 (312e12, 1.555e12 B/s) at batch 64: compute 1 073 741 824 / 312e12 =
    # 3.44e-6 s, memory 5 373 952 / 1.555e12 = 3.46e-6 s: memory-bound by 0.4%.
    ("chain", "fc", "2:4", "a100", 64, "", 1_073_741_824 / 312e12, 5_373_952 / 1.555e12),
    # GELU: 8 * 16384 = 131 072 vector FLOPs at fp16 (2e13); bytes 2*(16384 + 16384) = 65 536.
    ("chain", "act", "2:4", "round", 1, "", 131_072 / 20e12, 65_536 / 1e12),
    # Stem conv: K = 27 takes no 2:4 (27 % 4 != 0): dense, FLOPs 2*64*27*256 = 884 736;
    # bytes 2*1728 + 2*(3072 + 16384) = 3456 + 38 912 = 42 368.
    ("convs", "stem", "2:4", "round", 1, "shape", 884_736 / 100e12, 42_368 / 1e12),
    # Depthwise conv under block4: M = 1 per group takes no 4x4 blocks: dense, 64 groups,
    # FLOPs 2*1*9*256*64 = 294 912; bytes 2*576 + 2*(16384 + 16384) = 1152 + 65 536 = 66 688.
    ("convs", "dw", "block4@50%", "round", 1, "shape", 294_912 / 100e12, 66_688 / 1e12),
    # Depthwise conv as CSR at 50%: nnz 4.5 per group; FLOPs 2*4.5*256*64 = 147 456 on fp32
    # vector; index 64 * 4*(4.5 + 1 + 1) = 1664; values 64 * 2*4.5 = 576; + 65 536 -> 67 776.
    # Half the taps are empty, but every input channel is still read for its other taps (a row
    # of X is a tap, not an input element), so no input traffic is saved.
    ("convs", "dw", "unstructured@50%", "round", 1, "", 147_456 / 10e12, 67_776 / 1e12),
]


def _hardware(name, round_gpu):
    return round_gpu if name == "round" else name


@pytest.mark.parametrize("trace_name, op, fmt, hw, batch, fallback, compute, memory", LAYERS)
def test_layer_golden(request, round_gpu, trace_name, op, fmt, hw, batch, fallback, compute,
                      memory):
    trace = request.getfixturevalue({"chain": "chain", "convs": "convs"}[trace_name])
    table = dse.evaluate_layers(trace, _hardware(hw, round_gpu), fmt, batch, scope="all")
    row = table[(table["format"] == fmt) & (table["op"] == op)].iloc[0]
    assert row["fallback"] == fallback
    assert row["compute_s"] == pytest.approx(compute, rel=REL)
    assert row["memory_s"] == pytest.approx(memory, rel=REL)
    assert row["time_s"] == pytest.approx(max(compute, memory), rel=REL)


# Whole-model totals of chain (fc -> act -> fc2), dense, round hardware, batch 1.
#   fc:  c = 3.3554432e-7, m = 2.162688e-6, f = (2 097 152 + 2*16384 model input) / 1e12
#        = 2.12992e-6.
#   act: c = 6.5536e-9,    m = 6.5536e-8,   f = 0 (intermediate in and out).
#   fc2: c = 3.3554432e-7, m = 2.162688e-6, f = 2.12992e-6 (writes the model output).
TOTALS = [
    # scope all
    ("all", "unfused", 2 * 2.162688e-6 + 6.5536e-8),  # 4.390912e-6
    ("all", "fused", 2 * 2.12992e-6 + 6.5536e-9),  # 4.2663936e-6
    # max(sum c = 6.7764224e-7, sum f = 4.25984e-6)
    ("all", "fused_prefetched", 4.25984e-6),
    # scope gemm: only fc and fc2
    ("gemm", "unfused", 2 * 2.162688e-6),
    ("gemm", "fused", 2 * 2.12992e-6),
    ("gemm", "fused_prefetched", 2 * 2.12992e-6),
]


@pytest.mark.parametrize("scope, fusion, latency", TOTALS)
def test_totals_golden(chain, round_gpu, scope, fusion, latency):
    table = dse.evaluate(chain, round_gpu, "dense", 1, fusion=fusion, scope=scope)
    assert table["latency_s"].iloc[0] == pytest.approx(latency, rel=REL)


def test_feature_share_golden(chain, round_gpu):
    table = dse.evaluate(chain, round_gpu, "dense", 1, fusion=dse.FUSIONS, scope="all")
    table = table.set_index("fusion")
    # unfused: features 3 ops x 65 536 = 196 608 bytes; weights 2 x 2 097 152 = 4 194 304.
    assert table.loc["unfused", "feature_bytes_share"] == pytest.approx(
        196_608 / (196_608 + 4_194_304), rel=REL)
    # fused: only the model input and output cross DRAM: 2 x 32 768 = 65 536 bytes.
    assert table.loc["fused", "feature_bytes_share"] == pytest.approx(
        65_536 / (65_536 + 4_194_304), rel=REL)


def test_speedup_golden(chain, round_gpu):
    # Batch 64, gemm scope, unfused: both fc layers compute-bound under dense and 2:4.
    # dense: 2 x 2 147 483 648 / 1e14; 2:4: 2 x 1 073 741 824 / 1e14 -> speedup exactly 2.
    table = dse.evaluate(chain, round_gpu, "2:4", 64, fusion="unfused").set_index("format")
    assert table.loc["dense", "latency_s"] == pytest.approx(2 * 2_147_483_648 / 1e14, rel=REL)
    assert table.loc["2:4", "speedup"] == pytest.approx(2.0, rel=REL)


def test_bias_stays_dense_golden(round_gpu):
    # fc with a bias of 1024: weight_elems 1 049 600. Under 2:4 the weights cost 1 048 576 +
    # 131 072 index bytes as before, the bias 2 * 1024 = 2048 bytes dense, features 65 536:
    # 1 247 232 bytes. Dense: 2 * 1 049 600 + 65 536 = 2 164 736 bytes.
    from tests.conftest import op
    from workloads import Trace

    trace = Trace.from_records("fc_bias", [16, 1024], [
        op("fc", "linear", 1024, 1024, 16, 1, 1024 * 1024 + 1024, 16384, 16384, 0, True,
           ["input"])])
    table = dse.evaluate_layers(trace, round_gpu, "2:4", 1, scope="all").set_index("format")
    assert table.loc["2:4", "memory_s"] == pytest.approx(1_247_232 / 1e12, rel=REL)
    assert table.loc["dense", "memory_s"] == pytest.approx(2_164_736 / 1e12, rel=REL)


def test_per_layer_density_golden(round_gpu):
    # fc pruned in a checkpoint to density 0.25: unstructured formats take the layer's density,
    # whatever sparsity they name. CSR: nnz 262 144; FLOPs 2*262144*16 = 8 388 608 on the fp32
    # vector cores (1e13); bytes 524 288 + 4*(262144 + 1025) + 65 536 = 1 642 500.
    # 2:4 keeps its own density 0.5 (1 245 184 bytes, as above).
    from tests.conftest import op
    from workloads import Trace

    record = op("fc", "linear", 1024, 1024, 16, 1, 1024 * 1024, 16384, 16384, 0, True,
                ["input"])
    trace = Trace.from_records("pruned", [16, 1024], [record | {"density": 0.25}])
    layers = dse.evaluate_layers(trace, round_gpu, ["unstructured@90%", "2:4"], 1,
                                 scope="all")
    layers = layers.set_index("format")
    assert layers.loc["unstructured@90%", "compute_s"] == pytest.approx(8_388_608 / 1e13, rel=REL)
    assert layers.loc["unstructured@90%", "memory_s"] == pytest.approx(1_642_500 / 1e12, rel=REL)
    assert layers.loc["2:4", "memory_s"] == pytest.approx(1_245_184 / 1e12, rel=REL)
    totals = dse.evaluate(trace, round_gpu, ["unstructured@90%", "2:4"], 1,
                          fusion="unfused").set_index("format")
    assert totals.loc["unstructured@90%", "per_layer_density"]
    assert not totals.loc["2:4", "per_layer_density"]
    assert totals.loc["unstructured@90%", "weight_sparsity"] == pytest.approx(0.75, rel=REL)
    assert totals.loc["2:4", "weight_sparsity"] == pytest.approx(0.5, rel=REL)
