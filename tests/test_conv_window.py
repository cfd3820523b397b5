"""A convolution's window in traces and in the kernel predictors' features (issue 23): the
exporter records each convolution's ``kernel_size`` and ``stride``, a trace without them still
loads (0, "not recorded"), and the features of a trace op as the expectation prices it equal
those of the measured row of the same convolution (a shipped dataset's)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import workloads
from dse.calibrate.expected import op_configs
from dse.calibrate.features import FEATURES, channel_alignment, feature_matrix, training_rows
from dse.measure.dataset import DATASETS_DIR
from dse.roofline import evaluate_layers
from workloads import TraceError, load_trace
from workloads.trace import read_trace_file

WINDOW = [FEATURES.index("log_kernel_size"), FEATURES.index("log_stride")]
GEOMETRY = [FEATURES.index(c) for c in ("log_input_per_out", "log_window", "log_batch",
                                        "log_kernel_size", "log_stride")]


# --- traces ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model, op, kernel_size, stride", [
    ("resnet50", "conv1", 7, 2),                       # the 7x7 stem of stride 2
    ("resnet50", "layer1.0.conv1", 1, 1),
    ("resnet50", "layer2.0.conv2", 3, 2),              # the strided 3x3
    ("resnet50", "layer2.0.downsample.0", 1, 2),       # the strided 1x1 shortcut
    ("convnext_tiny", "stem.0", 4, 4),                 # patchify
    ("convnext_tiny", "stages.0.blocks.0.conv_dw", 7, 1),
    ("convnext_tiny", "stages.1.downsample.1", 2, 2),
    ("vit_base_patch16_224", "patch_embed.proj", 16, 16),
    ("efficientnet_b4", "conv_stem", 3, 2),
])
def test_shipped_traces_carry_each_convolutions_window(model, op, kernel_size, stride):
    ops = load_trace(model).ops.set_index("name")
    assert ops.loc[op, "kind"] == "conv"
    assert (ops.loc[op, "kernel_size"], ops.loc[op, "stride"]) == (kernel_size, stride)


@pytest.mark.parametrize("model", ["convnext_base", "convnext_tiny", "deit_small_patch16_224",
                                   "efficientnet_b4", "mixer_s16_224", "resnet50",
                                   "swin_tiny_patch4_window7_224", "vit_base_patch16_224"])
def test_every_exported_convolution_has_a_window_and_nothing_else_does(model):
    ops = load_trace(model).ops
    conv = ops["kind"] == "conv"
    assert conv.any()
    assert (ops.loc[conv, "kernel_size"] >= 1).all() and (ops.loc[conv, "stride"] >= 1).all()
    assert (ops.loc[~conv, ["kernel_size", "stride"]] == 0).all().all()


def test_export_records_the_modules_kernel_size_and_stride():
    """A tiny real timm model: every convolution's recorded window is its module's."""
    timm = pytest.importorskip("timm")
    torch = pytest.importorskip("torch")
    from workloads.export import export_trace

    trace = export_trace("test_resnet")
    with torch.device("meta"):
        model = timm.create_model("test_resnet", pretrained=False)
    modules = {name: m for name, m in model.named_modules()
               if isinstance(m, torch.nn.Conv2d)}
    convs = trace.ops[trace.ops["kind"] == "conv"]
    assert len(convs) == len(modules) > 0
    strided = 0
    for name, kernel_size, stride in zip(convs["name"], convs["kernel_size"], convs["stride"],
                                         strict=True):
        module = modules[name]
        assert kernel_size == max(module.kernel_size) and stride == max(module.stride)
        strided += stride > 1
    assert strided > 0  # the test model downsamples: not every stride is 1
    # the file keeps them on conv ops only, and loads back the same
    records = trace.to_json()["ops"]
    assert all(("kernel_size" in r) == (r["kind"] == "conv") for r in records)
    again = workloads.Trace.from_records(trace.model, trace.input_shape, records)
    assert again.ops[["kernel_size", "stride"]].equals(trace.ops[["kernel_size", "stride"]])


def test_a_trace_without_windows_loads_with_0(tmp_path):
    """A trace written before the fields existed (the shipped resnet50's records without them)
    loads, every other column as before, the windows 0 ("not recorded")."""
    trace = load_trace("resnet50")
    document = trace.to_json()
    for record in document["ops"]:
        record.pop("kernel_size", None)
        record.pop("stride", None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    old = read_trace_file(path)
    assert (old.ops[["kernel_size", "stride"]] == 0).all().all()
    rest = [c for c in trace.ops.columns if c not in ("kernel_size", "stride")]
    pd.testing.assert_frame_equal(old.ops[rest], trace.ops[rest])
    assert "kernel_size" not in old.to_json()["ops"][0]
    # the hand-written toy trace has none either
    toy = load_trace("toy_hybrid").ops
    assert (toy["kind"] == "conv").any() and (toy[["kernel_size", "stride"]] == 0).all().all()


@pytest.mark.parametrize("column, value, message", [
    ("kernel_size", 0, "must be a positive integer"),
    ("kernel_size", -3, "must be a positive integer"),
    ("stride", 1.5, "must be a positive integer"),
    ("stride", True, "must be a positive integer"),
    ("kernel_size", "3", "must be a positive integer"),
])
def test_bad_windows_are_refused(column, value, message):
    records = load_trace("resnet50").to_json()["ops"][:2]
    records[0][column] = value
    with pytest.raises(TraceError, match=message):
        workloads.Trace.from_records("m", [3, 224, 224], records)


def test_a_whole_float_window_is_taken_as_an_integer():
    records = load_trace("resnet50").to_json()["ops"][:1]
    records[0].update(kernel_size=7.0, stride=2.0)
    ops = workloads.Trace.from_records("m", [3, 224, 224], records).ops
    assert (ops.at[0, "kernel_size"], ops.at[0, "stride"]) == (7, 2)
    assert ops["kernel_size"].dtype == "int64"


def test_only_convolutions_carry_a_window():
    records = load_trace("resnet50").to_json()["ops"][:2]
    records[1]["stride"] = 1  # the batch norm after conv1
    with pytest.raises(TraceError, match=r"op #1 \(bn1.native_batch_norm\): only conv ops "
                                         "carry a stride"):
        workloads.Trace.from_records("m", [3, 224, 224], records)


# --- features --------------------------------------------------------------------------------


def test_the_window_features_come_last_and_the_others_keep_their_places():
    assert FEATURES[:18] == (
        "log_m", "log_k", "log_n", "log_groups", "sparsity", "block", "log_flops",
        "log_bytes", "log_intensity", "log_waves", "wave_eff", "pad_eff", "kind", "impl",
        "warm", "log_input_per_out", "log_window", "log_batch")
    assert FEATURES[18:20] == ("log_kernel_size", "log_stride")


def test_window_features_by_hand():
    """log(1 + side) and log(1 + stride) for a convolution whose window is known; 0 for a
    linear (even one given a window), a convolution without one and a vector op."""
    frame = pd.DataFrame({
        "m": [64, 512, 64, 64, 0], "k": [576, 256, 576, 576, 0],
        "n": [3136, 784, 3136, 3136, 4096], "groups": 1, "sparsity": 0.0, "block": 0,
        "flops": 1.0, "bytes": 1.0,
        "kind": ["conv", "conv:image", "linear", "conv", "norm"],
        "kernel_size": [3, 7, 3, 0, 0], "stride": [1, 2, 1, 0, 0]})
    x = feature_matrix(frame, units=132, tile=128)
    np.testing.assert_allclose(np.expm1(x[:, WINDOW]), [[3, 1], [7, 2], [0, 0], [0, 0], [0, 0]])
    # a frame without the columns (predictors applied to an older frame): zeros
    x = feature_matrix(frame.drop(columns=["kernel_size", "stride"]), units=132, tile=128)
    assert (x[:, WINDOW] == 0).all()


def _resnet50_configs(batch: int) -> pd.DataFrame:
    """resnet50's ops as the expectation prices them (the features read here do not depend on
    the hardware the bound is taken on)."""
    trace = load_trace("resnet50")
    layers = evaluate_layers(trace, "h100-sxm", "dense", batches=batch, fusion="unfused",
                             scope="all")
    return op_configs(layers, trace).assign(op=layers["op"].to_numpy()).set_index("op")


def _dataset_rows(name: str, keep) -> pd.DataFrame:
    data = pd.read_parquet(DATASETS_DIR / f"{name}.parquet")
    return training_rows(data[keep(data)].reset_index(drop=True))


@pytest.mark.parametrize("op, m, k, n, input_note, kernel_size, stride", [
    ("layer1.0.conv2", 64, 576, 3136, "input 1x64x56x56, 64 out, kernel 3x3 stride 1", 3, 1),
    ("layer2.0.conv2", 128, 1152, 784, "input 1x128x56x56, 128 out, kernel 3x3 stride 2", 3, 2),
    ("layer2.0.downsample.0", 512, 256, 784, "input 1x256x56x56, 512 out, kernel 1x1 stride 2",
     1, 2),
])
def test_a_trace_op_and_its_benchmarked_row_see_one_window(op, m, k, n, input_note,
                                                           kernel_size, stride):
    """The H100 dataset's benchmarked convolution of resnet50's layer (its window in its note)
    and that layer of the shipped trace as the expectation prices it at batch 1: the same
    geometry features, window included."""
    rows = _dataset_rows("h100-sxm-collect", lambda d: (
        (d["kind"] == "conv") & (d["m"] == m) & (d["k"] == k) & (d["n"] == n)
        & (d["batch"] == 1) & d["note"].str.startswith(input_note)))
    assert len(rows) > 0
    assert (rows["kernel_size"] == kernel_size).all() and (rows["stride"] == stride).all()
    priced = _resnet50_configs(1).loc[[op]]
    assert priced[["kernel_size", "stride"]].to_numpy().tolist() == [[kernel_size, stride]]
    measured = feature_matrix(rows, 132, 128)[:, GEOMETRY]
    expected = feature_matrix(priced, 132, 128)[:, GEOMETRY]
    np.testing.assert_allclose(measured, np.repeat(expected, len(rows), axis=0))
    np.testing.assert_allclose(np.expm1(expected[0, -2:]), [kernel_size, stride])


@pytest.mark.parametrize("op, kernel_size, stride", [
    ("layer2.0.conv2", 3, 2), ("layer2.0.downsample.0", 1, 2), ("layer3.1.conv1", 1, 1)])
def test_a_trace_op_and_its_cpu_trace_row_see_one_window(op, kernel_size, stride):
    """The CPU dataset's row timed from resnet50's trace (its window from the trace op) and
    the trace op as the expectation prices it at the row's batch: the same features."""
    rows = _dataset_rows("cpu-amd-epyc-2c", lambda d: (
        (d["source"] == "trace") & (d["model"] == "resnet50") & (d["op"] == op)
        & (d["family"] == "dense") & (d["batch"] == 1)))
    assert len(rows) > 0 and set(rows["batch"]) == {1}
    assert (rows["kernel_size"] == kernel_size).all() and (rows["stride"] == stride).all()
    priced = _resnet50_configs(1).loc[[op]]
    measured = feature_matrix(rows, 2, 16)[:, GEOMETRY]
    expected = feature_matrix(priced, 2, 16)[:, GEOMETRY]
    np.testing.assert_allclose(measured, np.repeat(expected, len(rows), axis=0))
    np.testing.assert_allclose(np.expm1(expected[0, -2:]), [kernel_size, stride])


def test_channel_alignment_divides_by_no_zero_area():
    """Rows without a window (area 0: a linear, a norm) are never divided by it, so no numpy
    warning reaches a user of ``--calibrated``. By hand: only the convolution counts, K 27
    over a 3x3 window is 3 input channels (odd: alignment 1) and 16 output channels (16)."""
    import warnings

    frame = pd.DataFrame({"kind": ["linear", "conv", "norm"], "k": [64.0, 27.0, 0.0],
                          "m": [32.0, 16.0, 0.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # x / 0 or x mod 0 would warn: fail instead
        cin, cout = channel_alignment(frame, np.array([True, True, False]),
                                      np.array([0.0, 3.0, 0.0]))
    assert cin.tolist() == [0.0, 1.0, 0.0]
    assert cout.tolist() == [0.0, 16.0, 0.0]

