"""A norm's width (the elements each output is normalised over) is what the kernel predictors
see as its K, on both sides: training rows (from a benchmark's note or the trace op of a
measured trace row) and the ops they price (dse.calibrate.expected.op_configs)."""

from __future__ import annotations

import pandas as pd
import pytest

import workloads
from dse.calibrate.features import with_norm_widths
from workloads import norm_width


@pytest.mark.parametrize("name, weight, width", [
    ("blocks.0.norm1.native_layer_norm", 2 * 384, 384),   # gamma and beta
    ("stem.1.native_group_norm", 2 * 64, 64),
    ("model.layers.0.input_layernorm", 4096, 4096),       # an RMS norm: gamma only
    ("layer1.0.bn1.native_batch_norm", 4 * 64, 0),         # normalises nothing at inference
    ("blocks.0.norm1.native_layer_norm", 0, 0),           # no affine weights: unknown
])
def test_norm_width_by_kind_of_norm(name, weight, width):
    assert norm_width(name, weight) == width


def _rows(**columns) -> pd.DataFrame:
    base = {"kind": ["norm"], "k": [0], "note": [""], "source": ["benchmark"], "model": [""],
            "op": ["layer_norm"]}
    return pd.DataFrame(base | {c: [v] for c, v in columns.items()})


def test_a_benchmarked_norm_takes_its_width_from_its_note():
    rows = with_norm_widths(_rows(note="layer norm over C=768; prof_kernel_s=4.9e-06"))
    assert rows["k"].tolist() == [768]


def test_a_trace_row_takes_its_width_from_its_trace_op():
    rows = with_norm_widths(_rows(source="trace", model="convnext_tiny",
                                  op="stages.1.blocks.0.norm.native_layer_norm"))
    assert rows["k"].tolist() == [192]


def test_rows_that_recorded_a_width_or_are_not_norms_keep_theirs():
    rows = pd.concat([_rows(k=96, note="layer norm over C=768"),
                      _rows(kind="activation", note="layer norm over C=768")])
    assert with_norm_widths(rows)["k"].tolist() == [96, 0]


def test_the_priced_norm_ops_carry_their_width_as_k():
    from dse.calibrate.expected import op_configs
    from dse.roofline import evaluate_layers

    trace = workloads.load_trace("convnext_tiny")
    layers = evaluate_layers(trace, "h100-sxm", ["dense"], batches=2, fusion="unfused",
                             scope="all")
    config = op_configs(layers, trace).set_index(layers["op"].to_numpy())
    assert config.loc["stem.1.native_layer_norm", "k"] == 96
    assert config.loc["stages.3.blocks.0.norm.native_layer_norm", "k"] == 768
    assert config.loc["stages.0.blocks.0.mlp.act.gelu", "k"] == 0
    assert config.loc["stem.0", "k"] == trace.ops.set_index("name").loc["stem.0", "k"]
