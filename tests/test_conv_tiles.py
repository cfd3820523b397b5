"""A convolution's channel alignment in the kernel predictors' features (issue 23): the largest
power of two dividing its input and output channels per group, by hand on synthetic rows, and
the same for a trace op as for the benchmarked row of the same convolution."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.calibrate.expected import op_configs
from dse.calibrate.features import ALIGN_MAX, FEATURES, feature_matrix, training_rows
from dse.measure.dataset import DATASETS_DIR
from dse.roofline import evaluate_layers
from workloads import load_trace

ALIGN = [FEATURES.index("cin_align"), FEATURES.index("cout_align")]


def test_the_alignment_features_come_last_and_the_others_keep_their_places():
    assert FEATURES[:20] == (
        "log_m", "log_k", "log_n", "log_groups", "sparsity", "block", "log_flops",
        "log_bytes", "log_intensity", "log_waves", "wave_eff", "pad_eff", "kind", "impl",
        "warm", "log_input_per_out", "log_window", "log_batch", "log_kernel_size",
        "log_stride")
    assert FEATURES[20:22] == ("cin_align", "cout_align")  # then the sparse row balance
    assert ALIGN_MAX == 256


def _frame(**columns) -> pd.DataFrame:
    rows = len(columns["m"])
    return pd.DataFrame({"n": [3136] * rows, "groups": 1, "sparsity": 0.0, "block": 0,
                         "flops": 1.0, "bytes": 1.0, "stride": 1, **columns})


@pytest.mark.parametrize("m, k, groups, kind, kernel_size, expected", [
    (64, 576, 1, "conv", 3, (64, 64)),           # 3x3, 64 -> 64 channels: K = 64 x 9
    (48, 216, 1, "conv", 3, (8, 16)),            # 24 input channels (8 | 24), 48 output
    (96, 147, 1, "conv:image", 7, (1, 32)),      # an RGB stem: 3 channels, odd
    (1, 49, 96, "conv", 7, (1, 1)),              # depthwise 7x7: one channel per group
    (4, 36, 64, "conv", 3, (4, 4)),              # grouped: 4 channels per group each way
    (512, 4608, 1, "conv", 3, (256, 256)),       # 512 channels: capped at ALIGN_MAX
    (80, 1008, 1, "conv", 3, (16, 16)),          # 112 = 16 x 7 input, 80 = 16 x 5 output
    (32, 224, 1, "conv", 7, (32, 32)),           # a 1x7 window (side 7): K = 32 x 7, 49 does
                                                 # not divide it, K's own alignment (32)
    (64, 576, 1, "conv", 0, (64, 64)),           # window not recorded: K's (576 = 64 x 9)
    (64, 576, 1, "linear", 3, (0, 0)),           # not a convolution, even given a window
])
def test_alignment_by_hand(m, k, groups, kind, kernel_size, expected):
    frame = _frame(m=[m], k=[k], groups=[groups], kind=[kind], kernel_size=[kernel_size])
    x = feature_matrix(frame, units=132, tile=128)
    assert x[0, ALIGN].tolist() == list(expected)


def test_vector_ops_and_frames_without_a_kind_get_0():
    frame = _frame(m=[0], k=[0], kind=["norm"], kernel_size=[0])
    assert (feature_matrix(frame, 132, 128)[:, ALIGN] == 0).all()
    assert (feature_matrix(frame.drop(columns=["kind"]), 132, 128)[:, ALIGN] == 0).all()


def test_a_frame_without_windows_aligns_on_k():
    """Predictors applied to a frame without the window columns (an older one): K's alignment,
    which for an odd window's area is the input channels' own."""
    frame = _frame(m=[128], k=[1152], kind=["conv"], kernel_size=[3])
    with_window = feature_matrix(frame, 132, 128)[:, ALIGN]
    without = feature_matrix(frame.drop(columns=["kernel_size", "stride"]), 132, 128)[:, ALIGN]
    assert with_window.tolist() == without.tolist() == [[128, 128]]


def _priced(model: str, batch: int) -> pd.DataFrame:
    trace = load_trace(model)
    layers = evaluate_layers(trace, "h100-sxm", "dense", batches=batch, fusion="unfused",
                             scope="all")
    return op_configs(layers, trace).assign(op=layers["op"].to_numpy()).set_index("op")


@pytest.mark.parametrize("model, op, m, k, n, groups, note, expected", [
    ("resnet50", "layer1.0.conv2", 64, 576, 3136, 1,
     "input 1x64x56x56, 64 out, kernel 3x3 stride 1", (64, 64)),
    ("resnet50", "layer2.0.downsample.0", 512, 256, 784, 1,
     "input 1x256x56x56, 512 out, kernel 1x1 stride 2", (256, 256)),
    ("convnext_tiny", "stages.0.blocks.0.conv_dw", 1, 49, 3136, 96,
     "input 1x96x56x56, kernel 7x7 stride 1", (1, 1)),
])
def test_a_trace_op_and_its_benchmarked_row_see_one_alignment(model, op, m, k, n, groups, note,
                                                              expected):
    """The H100 dataset's benchmarked convolution of a shipped model's layer and that layer of
    the trace as the expectation prices it at batch 1: the same alignment features."""
    data = pd.read_parquet(DATASETS_DIR / "h100-sxm-collect.parquet")
    keep = ((data["kind"] == "conv") & (data["m"] == m) & (data["k"] == k) & (data["n"] == n)
            & (data["groups"] == groups) & (data["batch"] == 1)
            & data["note"].str.startswith(note))
    rows = training_rows(data[keep].reset_index(drop=True))
    assert len(rows) > 0
    priced = _priced(model, 1).loc[[op]]
    measured = feature_matrix(rows, 132, 128)[:, ALIGN]
    traced = feature_matrix(priced, 132, 128)[:, ALIGN]
    np.testing.assert_array_equal(measured, np.repeat(traced, len(rows), axis=0))
    assert traced[0].tolist() == list(expected)
