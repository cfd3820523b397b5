"""workloads.backend: attention as a backend runs it (fused; torch's math path under 2:4), on a
hand-built trace whose every figure is known, and on the shipped ViT."""

from __future__ import annotations

import pytest

import workloads
from workloads import Trace
from workloads.backend import (
    attention_regions,
    fuse_attention,
    torch_cpu_sparse_linears,
    torch_math_attention,
    torch_strided_adds,
)

T, C, H = 10, 8, 2  # tokens, channels, heads: head dim 4
HD = C // H


def _op(name, kind, producers, **fields):
    base = {"name": name, "kind": kind, "m": 0, "k": 0, "n": 0, "groups": 1,
            "weight_elems": 0, "input_elems": T * C, "output_elems": T * C,
            "vector_flops": 0.0, "prunable": False, "producers": producers}
    return base | fields


def _attention_trace() -> Trace:
    """timm's eager attention as exported: qkv, scale, copies, Q K^T, softmax, P V, a copy,
    the output projection, and a residual add after it."""
    scores = H * T * T
    return Trace.from_records("toy_attention", [T, C], [
        _op("qkv", "linear", ["input"], m=3 * C, k=C, n=T, weight_elems=3 * C * C,
            output_elems=3 * T * C, prunable=True),
        _op("attn.mul", "elementwise", ["qkv"], vector_flops=float(T * C)),
        _op("attn.clone", "other", ["attn.mul"]),
        _op("attn.clone_1", "other", ["qkv"]),
        _op("attn.bmm", "matmul", ["attn.clone", "attn.clone_1"], m=T, k=HD, n=T, groups=H,
            input_elems=2 * T * C, output_elems=scores),
        _op("attn._softmax", "softmax", ["attn.bmm"], input_elems=scores,
            output_elems=scores, vector_flops=5.0 * scores),
        _op("attn.clone_2", "other", ["qkv"]),
        _op("attn.bmm_1", "matmul", ["attn._softmax", "attn.clone_2"], m=T, k=T, n=HD,
            groups=H, input_elems=scores + T * C),
        _op("attn.clone_3", "other", ["attn.bmm_1"]),
        _op("proj", "linear", ["attn.clone_3"], m=C, k=C, n=T, weight_elems=C * C,
            prunable=True),
        _op("add", "elementwise", ["input", "proj"], input_elems=2 * T * C,
            vector_flops=float(T * C)),
    ])


def test_the_region_is_the_explicit_attention_between_the_linears():
    (region,) = attention_regions(_attention_trace())
    assert (region.scores, region.softmax, region.context) == ("attn.bmm", "attn._softmax",
                                                               "attn.bmm_1")
    assert region.ops == ("attn.mul", "attn.clone", "attn.clone_1", "attn.bmm",
                          "attn._softmax", "attn.clone_2", "attn.bmm_1", "attn.clone_3")


def test_fused_attention_keeps_the_flops_and_drops_the_scores_traffic():
    trace = _attention_trace()
    fused = fuse_attention(trace)
    ops = fused.ops.set_index("name")
    assert list(ops.index) == ["qkv", "attn.fused_attention", "proj", "add"]
    f = ops.loc["attn.fused_attention"]
    # both products: 2 * (T * HD * T + T * T * HD) * H = 2 * T * (2 * HD) * T * H
    assert 2 * f["m"] * f["k"] * f["n"] * f["groups"] == 2 * 2 * T * HD * T * H
    assert f["input_elems"] == 3 * T * C          # q, k and v, read once
    assert f["output_elems"] == T * C             # the context
    assert f["vector_flops"] == T * C + 5.0 * H * T * T
    assert ops.loc["proj", "producers"] == ["attn.fused_attention"]
    assert ops.loc["attn.fused_attention", "producers"] == ["qkv"]
    # the bound drops: the T x T scores are no longer written and read
    from dse.roofline import evaluate
    before = evaluate(trace, "h100-sxm", "dense", [64], scope="all")["latency_s"].iloc[0]
    after = evaluate(fused, "h100-sxm", "dense", [64], scope="all")["latency_s"].iloc[0]
    assert after < before


def test_torch_math_attention_adds_what_the_math_path_runs():
    trace = _attention_trace()
    math = torch_math_attention(trace)
    ops = math.ops.set_index("name")
    # the products and the softmax run in fp32 on a GPU: renamed so (fp32_kind prices them)
    renamed = {"attn.bmm": "attn.sdpa_math.scores_fp32", "attn.bmm_1":
               "attn.sdpa_math.context_fp32", "attn._softmax": "attn.sdpa_math.softmax_fp32"}
    assert set(renamed) <= set(trace.ops["name"]) and not set(renamed) & set(ops.index)
    added = [n for n in ops.index if n not in set(trace.ops["name"]) | set(renamed.values())]
    assert added == ["attn.sdpa_math.to_copy_0", "attn.sdpa_math.to_copy_1",
                     "attn.sdpa_math.to_copy_2", "attn.sdpa_math.to_copy_3",
                     "attn.sdpa_math.mul_k", "attn.sdpa_math.isneginf", "attn.sdpa_math.all",
                     "attn.sdpa_math.where", "attn.sdpa_math.to_copy_p"]
    scores = H * T * T
    for i in range(4):
        assert ops.loc[f"attn.sdpa_math.to_copy_{i}", "input_elems"] == T * C
    assert ops.loc["attn.sdpa_math.isneginf", "input_elems"] == scores
    assert ops.loc["attn.sdpa_math.all", "output_elems"] == H * T   # one flag per row
    assert ops.loc["attn.sdpa_math.where", "output_elems"] == scores
    assert ops.loc["attn.sdpa_math.to_copy_p", "output_elems"] == scores
    # the context product now reads the cast probabilities
    assert ops.loc["attn.sdpa_math.context_fp32", "producers"] == [
        "attn.sdpa_math.to_copy_p", "attn.clone_2"]
    assert ops.loc["attn.sdpa_math.where", "producers"][0] == "attn.sdpa_math.softmax_fp32"
    for name in ("qkv", "attn.bmm", "attn.bmm_1", "proj"):  # the rest untouched
        assert ops.loc[renamed.get(name, name), "m"] == trace.ops.set_index("name").loc[name, "m"]


def test_traces_without_attention_are_returned_as_they_are():
    trace = workloads.load_trace("resnet50")
    assert fuse_attention(trace) is trace
    assert torch_math_attention(trace) is trace


@pytest.mark.parametrize("model, regions", [("vit_base_patch16_224", 12),
                                            ("deit_small_patch16_224", 12),
                                            ("swin_tiny_patch4_window7_224", 12)])
def test_shipped_transformers_have_one_region_per_block(model, regions):
    trace = workloads.load_trace(model)
    assert len(attention_regions(trace)) == regions
    fused = fuse_attention(trace)
    assert int((fused.ops["kind"] == "softmax").sum()) == 0
    math = torch_math_attention(trace)
    assert len(math.ops) == len(trace.ops) + 9 * regions


def test_the_cpu_math_path_has_no_probability_cast():
    math = torch_math_attention(_attention_trace(), cast_probabilities=False)
    ops = math.ops.set_index("name")
    assert "attn.sdpa_math.to_copy_p" not in ops.index
    assert ops.loc["attn.bmm_1", "producers"] == ["attn.sdpa_math.where", "attn.clone_2"]


def _mlp_trace(bias: bool = True) -> Trace:
    """norm -> fc1 -> gelu -> fc2 -> add: an MLP whose two linears run sparse."""
    hidden = 4 * C
    return Trace.from_records("toy_mlp", [T, C], [
        _op("norm", "norm", ["input"], weight_elems=2 * C, vector_flops=5.0 * T * C),
        _op("fc1", "linear", ["norm"], m=hidden, k=C, n=T, weight_elems=hidden * C + hidden,
            output_elems=T * hidden, vector_flops=float(T * hidden) if bias else 0.0,
            prunable=True),
        _op("act", "activation", ["fc1"], input_elems=T * hidden, output_elems=T * hidden,
            vector_flops=8.0 * T * hidden),
        _op("fc2", "linear", ["act"], m=C, k=hidden, n=T, weight_elems=C * hidden + C,
            input_elems=T * hidden, vector_flops=float(T * C) if bias else 0.0,
            prunable=True),
        _op("add", "elementwise", ["input", "fc2"], input_elems=2 * T * C,
            vector_flops=float(T * C)),
    ])


def test_cpu_sparse_linears_add_the_fill_the_bias_add_and_the_input_copy():
    trace = _mlp_trace()
    out = torch_cpu_sparse_linears(trace)
    ops = out.ops.set_index("name")
    assert list(ops.index) == [
        "norm", "fc1.input_copy", "fc1.output_fill", "fc1", "fc1.bias_add", "act",
        "fc2.output_fill", "fc2", "fc2.bias_add", "add"]
    # X^T made contiguous: K x N elements read and written
    assert ops.loc["fc1.input_copy", "input_elems"] == ops.loc["fc1.input_copy",
                                                                "output_elems"] == T * C
    # fc2 reads gelu's output of fc1's transposed result: already column-major, no copy
    assert "fc2.input_copy" not in ops.index
    assert ops.loc["fc1.output_fill", "input_elems"] == 0
    assert ops.loc["fc1.output_fill", "output_elems"] == T * 4 * C
    # the bias add reads the product and the bias (M), writes M x N, one FLOP each
    assert ops.loc["fc1.bias_add", "input_elems"] == T * 4 * C + 4 * C
    assert ops.loc["fc1.bias_add", "vector_flops"] == T * 4 * C
    assert ops.loc["fc2.bias_add", "input_elems"] == T * C + C
    # consumers read the biased output; the products are untouched
    assert ops.loc["act", "producers"] == ["fc1.bias_add"]
    assert ops.loc["add", "producers"] == ["input", "fc2.bias_add"]
    assert ops.loc["fc1", "producers"] == ["fc1.input_copy"]
    for name in ("fc1", "fc2"):
        assert ops.loc[name, "m"] == trace.ops.set_index("name").loc[name, "m"]


def test_cpu_sparse_linears_without_a_bias_add_none_and_dense_traces_stay():
    ops = torch_cpu_sparse_linears(_mlp_trace(bias=False)).ops
    assert not ops["name"].str.endswith(".bias_add").any()
    dense = Trace.from_records("toy_dense", [T, C], [
        dict(r, prunable=False) for r in _mlp_trace().to_json()["ops"]])
    assert torch_cpu_sparse_linears(dense) is dense


def test_what_torch_runs_follows_the_attention_timm_calls():
    """ViT and DeiT call F.scaled_dot_product_attention by timm's default, Swin's window
    attention does not (its export records "0/12"): dense Swin runs its explicit attention,
    and under 2:4 no math-path ops are added to it."""
    from dse.calibrate.validate import torch_ran, traced_sdpa

    swin = workloads.load_trace("swin_tiny_patch4_window7_224")
    vit = workloads.load_trace("vit_base_patch16_224")
    assert swin.provenance["sdpa_attention"] == "0/12" and not traced_sdpa(swin)
    assert vit.provenance["sdpa_attention"] == "12/12" and traced_sdpa(vit)
    assert torch_ran(swin, "dense", "cuda") is swin
    assert int((torch_ran(vit, "dense", "cuda").ops["kind"] == "softmax").sum()) == 0
    sparse = torch_ran(swin, "2:4", "cuda")
    assert not sparse.ops["name"].str.contains("sdpa_math").any()
    assert len(sparse.ops) == len(swin.ops)
    # a trace exported before the record: timm's default for attention modules, fused
    old = Trace.from_records(vit.model, vit.input_shape, vit.to_json()["ops"],
                             {k: v for k, v in vit.provenance.items() if k != "sdpa_attention"})
    assert traced_sdpa(old)


def test_strided_adds_are_the_binary_ops_reading_a_sparse_linear():
    """fc2's output is a transposed view under 2:4: the residual add reading it is renamed
    (and its consumers follow); GELU after fc1 is unary and keeps the view's speed."""
    from dse.calibrate.features import feature_kind

    trace = Trace.from_records("toy_mlp_head", [T, C], _mlp_trace().to_json()["ops"] + [
        _op("head", "linear", ["add"], m=C, k=C, n=T, weight_elems=C * C)])
    out = torch_strided_adds(trace)
    ops = out.ops.set_index("name")
    assert list(ops.index) == ["norm", "fc1", "act", "fc2", "add.strided", "head"]
    assert ops.loc["head", "producers"] == ["add.strided"]
    assert ops.loc["add.strided", "producers"] == ["input", "fc2"]
    # nothing else changes: the figures are the trace's
    for column in ("input_elems", "output_elems", "vector_flops"):
        assert ops.loc["add.strided", column] == trace.ops.set_index("name").loc["add", column]
    assert feature_kind("elementwise", "add.strided") == "elementwise:strided"
    assert feature_kind("elementwise", "add") == "elementwise"
    assert feature_kind("activation", "act.strided") == "activation"
    dense = Trace.from_records("toy_dense", [T, C], [
        dict(r, prunable=False) for r in _mlp_trace().to_json()["ops"]])
    assert torch_strided_adds(dense) is dense


def test_the_shipped_vit_under_2_4_on_a_gpu_has_its_residual_adds_strided():
    from dse.calibrate.validate import torch_ran

    vit = workloads.load_trace("vit_base_patch16_224")
    names = torch_ran(vit, "2:4", "cuda").ops["name"]
    strided = names[names.str.endswith(".strided")]
    # both residual adds of each of the 12 blocks (after attn.proj and mlp.fc2)
    assert len(strided) == 24 and strided.str.match(r"^blocks\.\d+\.add(_1)?\.strided$").all()
    # the CPU run's sparse linears are transposed back (their bias adds), not strided
    cpu = torch_ran(vit, "block4@87.5%", "cpu").ops["name"]
    assert not cpu.str.endswith(".strided").any()
