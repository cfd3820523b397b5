"""The timm exporter against torch's own counters, real timm models, and bad input.

Needs the torch/timm extra, which the test command installs."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

import dse
from dse.cli import main
from workloads import COLUMNS, load_trace, trace_names
from workloads.export import ExportError, export_trace

SHIPPED = [n for n in trace_names() if n != "toy_hybrid"]
RECORD_COLUMNS = list(COLUMNS)


def _meta_model(name: str, img_size: int | None = None):
    """``name`` on the meta device with unfused attention (the flop counter sees its matmuls);
    timm's process-wide switch is as it was afterwards (models read it when built)."""
    before = timm.layers.config._USE_FUSED_ATTN
    timm.layers.set_fused_attn(False)
    try:
        kwargs = {"img_size": img_size} if img_size else {}
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **kwargs)
    finally:
        timm.layers.config._USE_FUSED_ATTN = before
    return model.eval()


@pytest.mark.parametrize("state", [0, 1, 2])
def test_meta_model_leaves_timm_fused_attention_as_it_was(state):
    before = timm.layers.config._USE_FUSED_ATTN
    try:
        timm.layers.config._USE_FUSED_ATTN = state
        model = _meta_model("test_vit", 64)
        assert timm.layers.config._USE_FUSED_ATTN == state
        attention = [m for m in model.modules() if hasattr(m, "fused_attn")]
        assert attention and not any(m.fused_attn for m in attention)
    finally:
        timm.layers.config._USE_FUSED_ATTN = before


def _torch_macs(model, input_shape) -> float:
    x = torch.empty(1, *input_shape, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops() / 2


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_trace_matches_torch_flop_counter_and_params(name):
    trace = load_trace(name)
    model = _meta_model(name)
    assert trace.macs_per_sample == pytest.approx(_torch_macs(model, trace.input_shape),
                                                  rel=0.005)
    assert trace.params == sum(p.numel() for p in model.parameters())
    for key in ("torch", "timm", "input_size", "params", "macs_per_sample", "command"):
        assert key in trace.provenance, key
    assert trace.provenance["params"] == trace.params
    assert trace.provenance["macs_per_sample"] == trace.macs_per_sample


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_trace_fusion_bookkeeping(name):
    trace = load_trace(name)
    ops = trace.ops
    assert ops["name"].is_unique  # so every intermediate has exactly one producer
    assert ops["model_input_elems"].gt(0).sum() >= 1
    assert list(ops.loc[ops["is_output"], "kind"]) == ["linear"]  # the classifier
    table = dse.evaluate(trace, "a100", "dense", 1, fusion=["unfused", "fused"], scope="all")
    bytes_ = table.set_index("fusion")["dram_bytes"]
    assert bytes_["fused"] < bytes_["unfused"]


@pytest.mark.parametrize("name", ["resnet50", "deit_small_patch16_224"])
def test_fresh_export_matches_flop_counter(name):
    trace = export_trace(name)
    model = _meta_model(name)
    assert trace.macs_per_sample == pytest.approx(_torch_macs(model, trace.input_shape),
                                                  rel=0.005)
    assert trace.params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name, small, large", [
    ("resnet50", 1, 8),  # no layout copies depend on the batch in a CNN
    ("test_vit", 2, 8),  # attention: batch 1 skips copies, so trace at 2 or more
])
def test_per_sample_trace_does_not_depend_on_the_traced_batch(name, small, large):
    a = export_trace(name, batch=small).ops[RECORD_COLUMNS]
    b = export_trace(name, batch=large).ops[RECORD_COLUMNS]
    assert a.equals(b)


def test_scaled_trace_equals_trace_at_that_batch():
    # Per-sample columns times 8 equal the totals of a model run at batch 8.
    trace = export_trace("test_vit", batch=8)
    scaled = trace.at_batch(8)
    per_sample = export_trace("test_vit", batch=2).at_batch(8)
    assert scaled[RECORD_COLUMNS].equals(per_sample[RECORD_COLUMNS])


def test_img_size_changes_the_trace():
    small = export_trace("convnext_tiny", img_size=64)
    assert small.input_shape == (3, 64, 64)
    assert small.macs_per_sample == pytest.approx(
        _torch_macs(_meta_model("convnext_tiny"), (3, 64, 64)), rel=0.005)
    vit = export_trace("test_vit", img_size=64)
    assert vit.macs_per_sample == pytest.approx(
        _torch_macs(_meta_model("test_vit", 64), (3, 64, 64)), rel=0.005)


def _pruned_checkpoint(tmp_path, name="test_convnext"):
    """A real (not meta) timm model whose prunable weights are zeroed to known densities."""
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False)
    expected = {}
    with torch.no_grad():
        for index, (key, p) in enumerate(model.named_parameters()):
            if key.endswith("weight") and p.ndim >= 2:
                density = [0.5, 0.25, 0.125, 1.0][index % 4]
                keep = torch.rand_like(p) < density
                p.mul_(keep)
                expected[key] = torch.count_nonzero(p).item() / p.numel()
    path = tmp_path / "pruned.pt"
    torch.save(model.state_dict(), path)
    return path, expected


def test_sparsity_from_checkpoint_records_per_layer_density(tmp_path):
    path, expected = _pruned_checkpoint(tmp_path)
    trace = export_trace("test_convnext", sparsity_from=str(path))
    prunable = trace.ops[trace.ops["prunable"]]
    assert prunable["density"].notna().all()
    assert trace.ops.loc[~trace.ops["prunable"], "density"].isna().all()
    # Prunable ops are named after their module; the weight is MODULE.weight.
    for row in prunable.itertuples():
        assert row.density == pytest.approx(expected[f"{row.name}.weight"])
    table = dse.evaluate(trace, "a100", ["unstructured@50%", "2:4"], 1,
                         fusion="unfused").set_index("format")
    assert table.loc["unstructured@50%", "per_layer_density"]
    assert not table.loc["2:4", "per_layer_density"]
    # The round trip through the file keeps the densities.
    out = tmp_path / "t.json"
    assert main(["workloads", "export", "test_convnext", "--sparsity-from", str(path),
                 "--out", str(out)]) == 0
    again = load_trace(str(out))
    assert again.ops["density"].equals(trace.ops["density"])
    assert json.loads(out.read_text())["provenance"]["sparsity_from"] == str(path)


def _exits_2_with_one_line(argv, capsys, needle, tmp_path):
    before = set(tmp_path.iterdir())
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert needle in lines[0]
    assert set(tmp_path.iterdir()) == before


def test_unknown_model_suggests_close_names(tmp_path, capsys):
    _exits_2_with_one_line(["workloads", "export", "convnext_tinny", "--out",
                            str(tmp_path / "x.json")], capsys, "did you mean convnext_tiny",
                           tmp_path)


def test_a_pretrained_tag_names_the_model():
    """timm's names with a pretrained tag export the architecture's trace."""
    tagged = export_trace("convnext_tiny.fb_in1k", img_size=64)
    plain = export_trace("convnext_tiny", img_size=64)
    pd.testing.assert_frame_equal(tagged.ops[RECORD_COLUMNS], plain.ops[RECORD_COLUMNS])
    assert tagged.model == "convnext_tiny.fb_in1k"


def test_an_unknown_pretrained_tag_is_one_line(tmp_path, capsys):
    _exits_2_with_one_line(["workloads", "export", "convnext_tiny.no_such_tag", "--out",
                            str(tmp_path / "x.json")], capsys, "convnext_tiny.no_such_tag",
                           tmp_path)


def test_image_size_the_model_cannot_take(tmp_path, capsys):
    # 8 pixels are fewer than one 16-pixel patch.
    _exits_2_with_one_line(["workloads", "export", "deit_small_patch16_224", "--img-size",
                            "8", "--out", str(tmp_path / "x.json")], capsys, "image size",
                           tmp_path)


def test_corrupt_checkpoint(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    _exits_2_with_one_line(["workloads", "export", "test_convnext", "--sparsity-from", str(bad),
                            "--out", str(tmp_path / "x.json")], capsys, "bad.pt", tmp_path)


def test_checkpoint_of_another_shape(tmp_path, capsys):
    path, _ = _pruned_checkpoint(tmp_path, "test_convnext")
    state = torch.load(path, weights_only=True)
    key = next(k for k, v in state.items() if v.ndim >= 2)
    state[key] = torch.zeros(3, 3)
    torch.save(state, path)
    _exits_2_with_one_line(["workloads", "export", "test_convnext", "--sparsity-from", str(path),
                            "--out", str(tmp_path / "x.json")], capsys, key, tmp_path)


def test_checkpoint_of_another_model(tmp_path, capsys):
    path, _ = _pruned_checkpoint(tmp_path, "test_vit")
    _exits_2_with_one_line(["workloads", "export", "test_convnext", "--sparsity-from", str(path),
                            "--out", str(tmp_path / "x.json")], capsys, "test_convnext",
                           tmp_path)


def test_export_error_is_a_trace_error():
    with pytest.raises(ExportError):
        export_trace("no_such_model_anywhere")


@pytest.mark.parametrize(("size", "kernel", "stride", "padding", "dilation"), [
    (56, 1, 2, 0, 1), (56, 3, 2, 1, 1), (224, 16, 16, 0, 1), (225, 16, 16, 0, 1),
    (224, 7, 2, 3, 1), (14, 1, 3, 0, 1), (15, 2, 5, 1, 1), (28, 3, 4, 2, 2), (9, 3, 1, 2, 3)])
def test_conv_input_read_is_what_torch_touches(size, kernel, stride, padding, dilation):
    """The positions a convolution reads are those its input's gradient is non-zero at (all
    weights positive), per axis; the exporter charges exactly that share of the input."""
    from workloads.conv import read_positions

    x = torch.ones(1, 2, size, size, requires_grad=True)
    conv = torch.nn.Conv2d(2, 3, kernel, stride, padding, dilation, bias=False)
    torch.nn.init.constant_(conv.weight, 1.0)
    out = conv(x)
    out.sum().backward()
    touched = (x.grad[0, 0] != 0)
    rows = int(touched.any(dim=1).sum())
    assert read_positions(size, out.shape[2], kernel, stride, padding, dilation) == rows
    assert rows * rows == int(touched.sum())


def test_a_strided_shortcut_is_charged_the_quarter_it_reads():
    trace = load_trace("resnet50")
    ops = trace.ops.set_index("name")
    for name, stage_input in (("layer2.0.downsample.0", 256 * 56 * 56),
                              ("layer3.0.downsample.0", 512 * 28 * 28),
                              ("layer4.0.downsample.0", 1024 * 14 * 14)):
        assert ops.loc[name, "input_elems"] == stage_input // 4
    assert ops.loc["layer1.0.downsample.0", "input_elems"] == 64 * 56 * 56  # stride 1: all


def test_the_export_records_which_attention_calls_sdpa():
    """The trace holds attention's explicit ops whatever timm would run; its provenance says
    how many of the model's attention modules call F.scaled_dot_product_attention by timm's
    default (what pricing "what torch runs" needs), and a model without attention says
    nothing."""
    vit = export_trace("test_vit")
    model = timm.create_model("test_vit", pretrained=False)
    flags = [bool(m.fused_attn) for m in model.modules() if hasattr(m, "fused_attn")]
    assert flags and vit.provenance["sdpa_attention"] == f"{sum(flags)}/{len(flags)}"
    assert int((vit.ops["kind"] == "softmax").sum()) == len(flags)  # explicit ops all the same
    assert "sdpa_attention" not in export_trace("test_resnet").provenance
