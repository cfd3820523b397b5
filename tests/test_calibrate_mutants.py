"""By hand, the numbers and rules of dse.calibrate.features and dse.calibrate.expected that the
rest of tests/test_calibrate.py leaves loose: each test here was written for a mutant
``python -m benchmarks.mutation --module features`` (or ``expected``) found alive, with its
expected values worked out in the comments beside it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import workloads
from dse.calibrate.expected import _resolve, expected_designs, expected_layers, op_configs
from dse.calibrate.features import (
    FEATURES,
    TILE,
    family_key,
    feature_matrix,
    kernel_variant,
    kind_code,
    training_rows,
    usable_rows,
    with_norm_widths,
)
from dse.calibrate.predictor import (
    DevicePredictors,
    FamilyPredictor,
    load_predictors,
    shipped_predictors,
)
from dse.roofline import evaluate_layers


def _column(x: np.ndarray, name: str) -> list[float]:
    return x[:, FEATURES.index(name)].tolist()


def test_feature_matrix_by_hand():
    """Three rows on a device of 5 units and a 128 x 128 tile."""
    frame = pd.DataFrame({
        "m": [200, 1, 0], "k": [64, 16, 0], "n": [300, 100, 4097], "groups": [2, 1, 1],
        "sparsity": [0.5, np.nan, 0.0], "block": [4, 0, 0], "flops": [1000.0, 0.5, 4097.0],
        "bytes": [250.0, 0.0, 16388.0], "kind": ["conv", "matmul", "activation"],
        "impl": [1, 0, 0], "cache": ["warm", "cold", "cold"]})
    x = feature_matrix(frame, units=5, tile=128)
    assert x.shape == (3, len(FEATURES))
    np.testing.assert_allclose(_column(x, "log_m"), [math.log(201), math.log(2), 0.0])
    np.testing.assert_allclose(_column(x, "log_k"), [math.log(65), math.log(17), 0.0])
    np.testing.assert_allclose(_column(x, "log_n"), [math.log(301), math.log(101),
                                                     math.log(4098)])
    # groups, flops and bytes below 1 count as 1 (log 0)
    np.testing.assert_allclose(_column(x, "log_groups"), [math.log(2), 0.0, 0.0])
    assert _column(x, "sparsity") == [0.5, 0.0, 0.0]  # NaN reads as 0
    assert _column(x, "block") == [4.0, 0.0, 0.0]
    np.testing.assert_allclose(_column(x, "log_flops"), [math.log(1000), 0.0, math.log(4097)])
    np.testing.assert_allclose(_column(x, "log_bytes"), [math.log(250), 0.0, math.log(16388)])
    np.testing.assert_allclose(_column(x, "log_intensity"), [math.log(4), 0.0, math.log(0.25)],
                               atol=1e-12)
    # row 0: ceil(200/128) = 2 row tiles x ceil(300/128) = 3 column tiles x 2 groups = 12
    #   tiles, 12/5 = 2.4 waves, the last of 3 waves 0.4 full: 12/15 = 0.8 of the slots used;
    #   padded output 2*128 x 3*128 = 98304 elements for 200*300 = 60000: 0.6103515625
    # row 1 (m 1 is a GEMM row): 1 x 1 tile, 0.2 waves, 1/5 used; 100 of 128*128 = 16384
    # row 2 (a vector op, m 0): ceil(4097/4096) = 2 blocks of 4096, 0.4 waves, 2/5 used, no
    #   padding
    np.testing.assert_allclose(_column(x, "log_waves"),
                               [math.log(2.4), math.log(0.2), math.log(0.4)])
    np.testing.assert_allclose(_column(x, "wave_eff"), [0.8, 0.2, 0.4])
    np.testing.assert_allclose(_column(x, "pad_eff"), [60000 / 98304, 100 / 16384, 1.0])
    assert _column(x, "kind") == [1.0, 2.0, 4.0]
    assert _column(x, "impl") == [1.0, 0.0, 0.0]
    assert _column(x, "warm") == [1.0, 0.0, 0.0]


def test_feature_matrix_with_the_smallest_tiles():
    """A tile of 1 (each output its own tile) and of 2, on one unit: the tile counts by hand."""
    frame = pd.DataFrame({"m": [3, 3], "k": [4, 4], "n": [3, 1], "groups": [1, 1],
                          "sparsity": [0.0, 0.0], "block": [0, 0], "flops": [72.0, 24.0],
                          "bytes": [8.0, 8.0]})
    one = feature_matrix(frame, units=1, tile=1)
    # 3 x 3 and 3 x 1 tiles: 9 and 3 waves, nothing padded
    np.testing.assert_allclose(_column(one, "log_waves"), [math.log(9), math.log(3)])
    assert _column(one, "pad_eff") == [1.0, 1.0]
    assert _column(one, "wave_eff") == [1.0, 1.0]
    assert _column(one, "kind") == [0.0, 0.0]  # no kind column: code 0
    two = feature_matrix(frame, units=1, tile=2)
    # ceil(3/2) = 2 row tiles x 2 or 1 column tiles; 3*3 of 4*4 and 3*1 of 4*2 padded outputs
    np.testing.assert_allclose(_column(two, "log_waves"), [math.log(4), math.log(2)])
    np.testing.assert_allclose(_column(two, "pad_eff"), [9 / 16, 3 / 8])


@pytest.mark.parametrize(("kind", "code"), [
    ("linear", 0), ("conv", 1), ("matmul", 2), ("norm", 3), ("activation", 4),
    ("elementwise", 5), ("softmax", 6), ("reduce", 7), ("pool", 8),
    ("no such kind", 9),
])
def test_kind_codes_are_the_ones_the_shipped_predictors_learned(kind, code):
    """The shipped predictors' trees split on these codes (feature ``kind``): renumbering a
    kind would price it as another without any error."""
    assert kind_code(kind) == code


def test_tiles_are_the_documented_ones_and_the_shipped_predictors_carry_them():
    # 128 x 128 on a GPU (CUTLASS and cuBLAS), 16 x 16 on a CPU (AVX-512 register blocks)
    assert TILE == {"cuda": 128, "cpu": 16}
    for name in shipped_predictors():
        predictors = load_predictors(name)
        assert predictors.tile == TILE[predictors.device], name


@pytest.mark.parametrize(("groups", "key"), [(1, "conv"), (2, "grouped_conv")])
def test_two_groups_are_a_grouped_convolution(groups, key):
    assert family_key("dense", "conv", groups, 0) == key


def test_a_benchmarked_convolution_without_a_note_has_no_variant():
    rows = pd.DataFrame({"source": ["benchmark", "benchmark"], "family": ["dense", "vector"],
                         "kind": ["conv", "activation"], "op": ["c", "gelu"]})
    assert kernel_variant(rows).tolist() == ["", "gelu"]


def _norm(**columns) -> pd.DataFrame:
    base = {"kind": "norm", "k": 0, "note": "", "source": "benchmark", "model": "",
            "op": "layer_norm"}
    return pd.DataFrame([base | columns])


def test_a_norm_whose_width_is_nowhere_keeps_k_0():
    rows = pd.concat([
        _norm(note="layer norm, no width said"),
        _norm(source="trace", model="no-such-model", op="blocks.0.norm1.native_layer_norm"),
        _norm(source="trace", model="convnext_tiny", op="no.such.op")], ignore_index=True)
    assert with_norm_widths(rows)["k"].tolist() == [0, 0, 0]
    # a frame without a model column cannot look trace rows up
    alone = _norm(source="trace", op="stages.1.blocks.0.norm.native_layer_norm").drop(
        columns="model")
    assert with_norm_widths(alone)["k"].tolist() == [0]


def _dataset(rows: list[dict]) -> pd.DataFrame:
    base = {"error": "", "family": "dense", "kind": "linear", "m": 8, "k": 8, "n": 4,
            "groups": 1, "sparsity": 0.0, "block": 0, "format": "dense", "implementation": "a",
            "median_s": 1.0, "min_s": 1.0, "idle": pd.NA, "flops": 1.0, "bytes": 1.0,
            "sol_s": 0.1}
    return pd.DataFrame([base | r for r in rows]).astype({"idle": "boolean"})


def test_a_median_of_exactly_1_5x_the_minimum_is_kept_and_2x_is_not():
    frame = _dataset([{"m": 8, "median_s": 1.5, "min_s": 1.0},
                      {"m": 16, "median_s": 2.0, "min_s": 1.0}])
    assert usable_rows(frame)["m"].tolist() == [8]


def test_usable_rows_give_a_frame_built_by_hand_one_run_one_round_cold_caches():
    rows = usable_rows(_dataset([{"m": 8}]))
    assert rows[["run_id", "round", "cache"]].to_dict("records") == [
        {"run_id": "", "round": 0, "cache": "cold"}]
    given = usable_rows(_dataset([{"m": 8, "run_id": "r", "round": 3, "cache": ""}]))
    assert given[["run_id", "round", "cache"]].to_dict("records") == [
        {"run_id": "r", "round": 3, "cache": "cold"}]


def test_training_rows_shapes_sparsity_and_columns():
    frame = _dataset([
        {"m": 1, "k": 8, "groups": 1, "sparsity": np.nan},
        {"family": "vector", "kind": "activation", "m": 0, "k": 0, "n": 4096},
        {"m": 16, "sol_s": 0.0},  # no bound: nothing to learn a fraction of
    ])
    rows = training_rows(frame).set_index("m")
    assert sorted(rows.index) == [0, 1]
    assert rows.loc[1, "shape"] == "1x8x1" and rows.loc[0, "shape"] == "activation:4096"
    assert rows.loc[1, "sparsity"] == 0.0
    assert list(rows.columns) == [
        "key", "format", "kind", "k", "n", "groups", "sparsity", "block", "cache", "variant",
        "implementation", "time_s", "sol_s", "flops", "bytes", "runs", "rounds",
        "input_elems", "batch", "kernel_size", "stride", "impl", "shape"]


# --- dse.calibrate.expected ------------------------------------------------------------------

def _toy_layers(formats_=("dense", "2:4", "unstructured@50%", "block8@87.5%"), hw="h100-sxm"):
    trace = workloads.load_trace("toy_hybrid")
    return trace, evaluate_layers(trace, hw, list(formats_), batches=2, scope="all")


def test_op_configs_by_hand():
    """toy_hybrid at batch 2: what each op's kernel is in each format, read off its trace op."""
    trace, layers = _toy_layers()
    config = op_configs(layers, trace)
    config.index = pd.MultiIndex.from_arrays([layers["op"], layers["format"]])
    columns = ["family", "key", "m", "k", "n", "groups", "sparsity", "block"]

    def at(op, fmt):
        return config.loc[(op, fmt), columns].tolist()

    # block1.pwconv1, a conv of 256 x 64 over 256 columns per sample
    assert at("block1.pwconv1", "dense") == ["dense", "conv", 256, 64, 512, 1, 0.0, 0]
    assert at("block1.pwconv1", "2:4") == ["nm", "nm", 256, 64, 512, 1, 0.5, 4]
    assert at("block1.pwconv1", "unstructured@50%") == ["unstructured", "csr", 256, 64, 512, 1,
                                                        0.5, 1]
    # attn.qkv, a linear layer 384 x 128 over 64 columns per sample; 128 and 384 take 8x8 blocks
    assert at("attn.qkv", "block8@87.5%") == ["block", "block8", 384, 128, 128, 1, 0.875, 8]
    # stem.conv's K of 27 cannot take 2:4: it falls back to a dense kernel
    assert at("stem.conv", "2:4") == ["dense", "conv", 64, 27, 512, 1, 0.0, 0]
    # the depthwise conv (m 1 per group, 64 groups) is a grouped convolution, still a GEMM
    assert at("block1.dwconv", "dense") == ["dense", "grouped_conv", 1, 9, 512, 64, 0.0, 0]
    # attn.scores is not prunable: dense in every design
    assert at("attn.scores", "2:4") == ["dense", "gemm", 64, 32, 128, 4, 0.0, 0]
    # vector ops: no GEMM (m 0), n the output elements of both samples, a norm's k its width
    assert at("stem.act", "dense") == ["vector", "vector", 0, 0, 32768, 1, 0.0, 0]
    assert at("attn.norm", "dense") == ["vector", "vector", 0, 256, 16384, 1, 0.0, 0]
    # a vector op's FLOPs are its trace op's, both samples: 2 x 131072 for stem.act
    assert config.loc[("stem.act", "dense"), "flops"] == 262144.0
    pw = config.loc[("block1.pwconv1", "dense")]
    layer = layers[(layers["op"] == "block1.pwconv1") & (layers["format"] == "dense")].iloc[0]
    assert (pw["flops"], pw["bytes"], pw["sol_s"], pw["cache"]) == (
        layer["flops"], layer["dram_bytes"], layer["time_s"], "warm")


def _family(key, floor, ceiling, target="fraction"):
    return FamilyPredictor(key, target, floor, ceiling, None, 10, 3, {"rmspe": 0.2})


def _predictors(families, context=None, hw="h100-sxm"):
    return DevicePredictors("toy-dev", hw, "cuda", 132, 128, 5e-6, families, {},
                            context or {})


@pytest.mark.parametrize(("sizes", "key", "near"), [
    ((1, 8), "block4", 8),      # log2 distances 2 and 1
    ((4, 32), "block16", 32),   # 2 and 1
    ((4, 32), "block8", 4),     # 1 and 2
    ((1, 4), "block2", 1),      # 1 and 1: the smaller
])
def test_a_block_size_without_data_takes_the_nearest_in_log(sizes, key, near):
    predictors = _predictors({f"block{s}": _family(f"block{s}", 1e-6, 0.5) for s in sizes})
    model, note = _resolve(key, predictors)
    assert model.key == f"block{near}"
    assert note == f"none for {key} on toy-dev: block{near} used"


def test_conv_without_data_is_priced_by_the_gemm_predictor_and_says_so():
    trace, layers = _toy_layers(("dense",))
    out = expected_layers(layers, trace, _predictors({"gemm": _family("gemm", 1e-6, 0.5)}))
    conv = out["op"].isin(["stem.conv", "block1.pwconv1", "block1.pwconv2", "downsample.conv"])
    assert (out.loc[conv, "predictor"] == "toy-dev:gemm:fraction").all()
    assert (out.loc[conv, "calibration"]
            == "conv priced by the gemm predictor (no conv data on toy-dev)").all()
    np.testing.assert_allclose(out.loc[conv, "expected_s"], 1e-6 + out.loc[conv, "time_s"] / 0.5)
    # fraction_of_sol: the bound over the expectation
    np.testing.assert_allclose(out["fraction_of_sol"], out["time_s"] / out["expected_s"])


_CONTEXT = {"shift_s": 5e-7, "unmeasured_floor_s": 3e-6, "unmeasured_ceiling": 0.25,
            "grouped_conv_ceiling": 0.05}


def test_inside_a_model_a_kernel_takes_its_shift_off_down_to_its_bound_or_a_quarter():
    """With constants fitted on whole models: a measured family's kernel less the shift, but
    never under the bound nor a quarter of the kernel; families without data floor + bound /
    ceiling, a grouped convolution with its own ceiling."""
    trace, layers = _toy_layers(("dense",))
    gemm = _family("gemm", 1e-6, 0.5)   # kernel 1e-6 + 2 t; less 5e-7: the largest of three
    conv = _family("conv", 0.0, 1.0)    # kernel t; less the shift is below t: the bound t
    out = expected_layers(layers, trace, _predictors({"gemm": gemm, "conv": conv}, _CONTEXT))
    t = out["time_s"].to_numpy()
    by = out["op"].to_numpy()
    linear = np.isin(by, ["attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2", "head",
                          "attn.scores", "attn.context"])
    np.testing.assert_allclose(out["expected_s"][linear], 5e-7 + 2 * t[linear])
    convs = np.isin(by, ["stem.conv", "block1.pwconv1", "block1.pwconv2", "downsample.conv"])
    np.testing.assert_allclose(out["expected_s"][convs], t[convs])
    grouped = by == "block1.dwconv"
    np.testing.assert_allclose(out["expected_s"][grouped], 3e-6 + t[grouped] / 0.05)
    vector = ~(linear | convs | grouped)
    assert vector.sum() == 11
    np.testing.assert_allclose(out["expected_s"][vector], 3e-6 + t[vector] / 0.25)
    assert (out.loc[vector, "predictor"] == "toy-dev:whole-model-fit").all()
    assert (out.loc[vector, "calibration"] == "none for vector on toy-dev: floor + bound / "
            "ceiling fitted on whole models used").all()
    # a shift as long as a second: a quarter of the kernel is left, 0.25 (1e-6 + 2 t) > t
    far = _predictors({"gemm": gemm}, _CONTEXT | {"shift_s": 1.0})
    out = expected_layers(layers, trace, far)
    np.testing.assert_allclose(out["expected_s"][linear], 0.25 * (1e-6 + 2 * t[linear]))


def test_other_hardware_is_told_which_predictions_carry_over():
    """On another accelerator a fraction carries over and a time does not; each row's note says
    which, after how the row was priced."""
    trace, layers = _toy_layers(("2:4", "block8@87.5%"), hw="a100")
    families = {"gemm": _family("gemm", 1e-6, 0.5, target="time"),
                "nm": _family("nm", 2e-6, 0.25), "block16": _family("block16", 3e-6, 0.1)}
    out = expected_layers(layers, trace, _predictors(families)).set_index(["op", "format"])
    time = "time learned on h100-sxm, not scaled to this hardware"
    fraction = "fraction carried over from h100-sxm"
    assert out.loc[("attn.scores", "2:4"), "calibration"] == time
    assert out.loc[("stem.conv", "2:4"), "calibration"] == (
        "conv priced by the gemm predictor (no conv data on toy-dev); " + time)
    assert out.loc[("mlp.fc1", "2:4"), "calibration"] == fraction
    assert out.loc[("mlp.fc1", "block8@87.5%"), "calibration"] == (
        "none for block8 on toy-dev: block16 used; " + fraction)
    assert out.loc[("mlp.act", "2:4"), "calibration"] == (
        "none for vector on toy-dev: bound + launch floor used; " + fraction)
    # a time-target family without trees predicts exp(0) = 1 s
    assert out.loc[("attn.scores", "2:4"), "expected_s"] == 1.0


def test_design_summaries_by_hand():
    """expected_designs over expected_layers rows written by hand: the latency is the sum, the
    predictors' shares of it largest first, the RMSPE weighted by the time each predictor
    priced (bound rows have none), the notes each once."""
    bound = "none for vector on d: bound + launch floor used"
    conv = "conv priced by the gemm predictor (no conv data on d)"
    rows = [("dense", 3e-6, "d:gemm:fraction", 0.1, ""),
            ("dense", 1e-6, "d:bound", np.nan, bound),
            ("dense", 0.0, "-", np.nan, ""),  # an op without work
            ("2:4", 2e-6, "d:nm:fraction", 0.3, ""),
            ("2:4", 3e-6, "d:gemm:fraction", 0.1, conv),
            ("2:4", 5e-6, "d:bound", np.nan, bound + "; fraction carried over from h100-sxm"),
            ("block8@87.5%", 2e-6, "d:bound", np.nan, bound)]
    layers = pd.DataFrame(rows, columns=["format", "expected_s", "predictor", "validated_rmspe",
                                         "calibration"]).assign(hardware="h100-sxm", batch=1)
    designs = pd.DataFrame({"hardware": "h100-sxm", "format": ["dense", "2:4", "block8@87.5%"],
                            "batch": 1, "latency_s": [2e-6, 4e-6, 1e-6]})
    out = expected_designs(designs, layers).set_index("format")
    np.testing.assert_allclose(out["expected_latency_s"], [4e-6, 10e-6, 2e-6])
    np.testing.assert_allclose(out["expected_speedup"], [1.0, 0.4, 2.0])
    np.testing.assert_allclose(out["fraction_of_sol"], [0.5, 0.4, 0.5])
    assert out["predictor"].tolist() == ["d:gemm:fraction 75%, d:bound 25%",
                                         "d:bound 50%, d:gemm:fraction 30%, d:nm:fraction 20%",
                                         "d:bound 100%"]
    # dense: only gemm has an RMSPE, 0.1; 2:4: (2e-6 * 0.3 + 3e-6 * 0.1) / 5e-6 = 0.18;
    # block8: no predictor with one
    np.testing.assert_allclose(out["validated_rmspe"], [0.1, 0.18, np.nan])
    assert out["calibration"].tolist() == [
        bound, f"{conv}; fraction carried over from h100-sxm; {bound}", bound]


def test_an_op_without_work_is_not_priced():
    """Every op with work gets an expected time; one whose bound is 0 s gets none."""
    trace, layers = _toy_layers(("dense",))
    idle = layers["op"].isin(["mlp.fc1", "mlp.act"])
    layers.loc[idle, "time_s"] = 0.0
    out = expected_layers(layers, trace, _predictors({"gemm": _family("gemm", 1e-6, 0.5)}))
    assert out.loc[idle, "expected_s"].tolist() == [0.0, 0.0]
    assert out.loc[idle, "predictor"].tolist() == ["-", "-"]
    assert out.loc[idle, "fraction_of_sol"].isna().all()
    assert (out.loc[~idle, "expected_s"] > 0).all()


def test_an_op_whose_bytes_just_fit_the_cache_is_warm():
    trace, layers = _toy_layers(("dense",))
    nbytes = layers["dram_bytes"].to_numpy(dtype=float)
    fit = float(nbytes[layers["op"].to_numpy() == "mlp.fc1"][0])  # 294912 bytes
    config = op_configs(layers, trace, "warm", warm_capacity_bytes=fit)
    assert config.loc[layers["op"].to_numpy() == "mlp.fc1", "cache"].tolist() == ["warm"]
    assert (config["cache"] == np.where(nbytes <= 294912, "warm", "cold")).all()
    # a cache of one byte: every op (each moves more) is cold
    assert set(op_configs(layers, trace, "warm", warm_capacity_bytes=1.0)["cache"]) == {"cold"}


def test_a_vector_op_carries_no_sparsity_whatever_the_design():
    """A vector op has no weights to prune: its configuration is the same in a dense and a
    sparse design (sparsity 0, block 0), so the vector predictor prices it the same."""
    import workloads
    from dse.calibrate.expected import op_configs
    from dse.roofline import evaluate_layers

    trace = workloads.load_trace("toy_hybrid")
    layers = evaluate_layers(trace, "h100-sxm", ["2:4", "block16@50%"], batches=2,
                             fusion="unfused", scope="all")
    config = op_configs(layers, trace)
    vector = config["family"] == "vector"
    assert vector.any() and (config["family"] == "nm").any()
    assert (config.loc[vector, "sparsity"] == 0.0).all()
    assert (config.loc[vector, "block"] == 0).all()
    assert (config.loc[config["family"] == "nm", "sparsity"] == 0.5).all()


def test_conv_inputs_by_hand():
    """with_conv_inputs: a benchmarked convolution's input over the batch from its note (N x C
    x H x W), a traced one's from its trace op (per sample) times the row's batch; 0 for other
    rows, for a traced op the trace lacks, and without the run columns for traced rows."""
    from dse.calibrate.features import with_conv_inputs

    frame = pd.DataFrame({
        "kind": ["conv", "conv", "conv:image", "linear", "conv", "conv", "matmul"],
        # one output channel is still a convolution
        "m": [1, 64, 96, 8, 64, 64, 4],
        "variant": ["input 2x3x5x7, kernel 1x1 stride 1 padding 0 groups 1",
                    "input 8x64x56x56, kernel 3x3 stride 1 padding 1 groups 1",
                    "input 1x3x224x224, kernel 4x4 stride 4 padding 0 groups 1",
                    "input 8x64x56x56, kernel 3x3 stride 1 padding 1 groups 1", "", "", ""],
        "source": ["benchmark"] * 4 + ["trace"] * 3,
        "model": ["", "", "", "", "resnet50", "resnet50", "resnet50"],
        "op": ["", "", "", "", "layer1.0.conv2", "no.such.op", "fc"],
        "batch": [2, 8, 1, 8, 4, 4, 4]})
    # layer1.0.conv2 of ResNet-50 reads 64 x 56 x 56 per sample
    expected = [2 * 3 * 5 * 7, 8 * 64 * 56 * 56, 3 * 224 * 224, 0, 4 * 64 * 56 * 56, 0, 0]
    assert with_conv_inputs(frame)["input_elems"].tolist() == expected
    # a frame built by hand, without the model, op and batch columns: the notes still count
    bare = with_conv_inputs(frame.drop(columns=["model", "op", "batch"]))
    assert bare["input_elems"].tolist() == expected[:4] + [0, 0, 0]
    # no convolution at all: every row 0
    assert with_conv_inputs(frame.iloc[3:4])["input_elems"].tolist() == [0.0]


def test_conv_geometry_at_one_element_and_one_pixel():
    """The smallest convolutions still have a geometry: one input element and one output
    pixel (a 1x1 over one channel of one pixel), and a 1x1 over 64 channels of a 1x1 map at
    batch 1 (n = 1); a convolution without outputs (n = 0) has none (0, not infinite)."""
    frame = pd.DataFrame({
        "m": [1, 10, 10], "k": [1, 64, 64], "n": [1, 1, 0], "groups": 1, "sparsity": 0.0,
        "block": 0, "flops": 1.0, "bytes": 1.0, "kind": "conv", "input_elems": [1, 64, 64],
        "batch": [1, 1, 1]})
    x = feature_matrix(frame, units=132, tile=128)
    geometry = [FEATURES.index(c) for c in ("log_input_per_out", "log_window", "log_batch")]
    # input per output pixel 1 and 64, window K / that = 1 and 1, batch 1
    np.testing.assert_allclose(np.expm1(x[:, geometry]), [[1, 1, 1], [64, 1, 1], [0, 0, 0]])
    assert np.isfinite(x).all()


def test_a_frame_without_batch_has_batch_0():
    """training_rows on a frame built without the run columns: batch 0, which the geometry
    reads as unknown (log_batch 0) while the note's input still counts."""
    note = "input 8x64x56x56, kernel 3x3 stride 1 padding 1 groups 1"
    frame = pd.DataFrame([{
        "error": "", "family": "dense", "kind": "conv", "groups": 1, "sparsity": 0.0,
        "block": 0, "format": "dense", "implementation": "a", "min_s": 1.0, "median_s": 1.0,
        "idle": True, "flops": 1.0, "bytes": 1.0, "sol_s": 0.1, "m": 64, "k": 576,
        "n": 8 * 56 * 56, "source": "benchmark", "op": "c", "note": note}])
    rows = training_rows(frame)
    assert rows["batch"].tolist() == [0]
    assert rows["input_elems"].tolist() == [8 * 64 * 56 * 56]
    x = feature_matrix(rows, units=132, tile=128)
    assert x[0, FEATURES.index("log_batch")] == 0.0
    np.testing.assert_allclose(np.expm1(x[0, FEATURES.index("log_window")]), 9.0)


def test_conv_kind_edges():
    """Up to IMAGE_CHANNELS = 4 input channels (RGB, RGBA) a convolution reads an image; 5 or
    more, or an unknown count (0), is a convolution; other kinds pass through."""
    from dse.calibrate.features import IMAGE_CHANNELS, conv_kind

    assert IMAGE_CHANNELS == 4
    assert [conv_kind("conv", c) for c in (0, 1, 3, 4, 5, 64)] == [
        "conv", "conv:image", "conv:image", "conv:image", "conv", "conv"]
    assert conv_kind("linear", 3) == "linear"


def test_the_later_kind_codes_are_the_ones_the_shipped_predictors_learned():
    """As test_kind_codes_are_the_ones_the_shipped_predictors_learned, for the kinds added
    since (data movement, the image convolution, fp32 products, the strided add): renumbering
    one, or giving two the same code, prices one as the other without any error."""
    kinds = ("other", "other:roll", "other:pad", "other:gather", "conv:image", "matmul:fp32",
             "softmax:fp32", "elementwise:strided")
    assert [kind_code(k) for k in kinds] == [9, 10, 11, 12, 13, 14, 15, 16]


# The full mutation run of expected.py (2026-11-27, benchmarks/results/mutation_expected.jsonl)


def test_op_configs_carry_each_convolution_s_window_and_its_image_input():
    """ResNet-50 (input 3 x 224 x 224): conv1 reads the 3-channel image (conv:image) through a
    7 x 7 window at stride 2; layer1.0.conv2 is 3 x 3 at stride 1 and reads no image (conv);
    the classifier and the vector ops have no window (0, as documented)."""
    trace = workloads.load_trace("resnet50")
    layers = evaluate_layers(trace, "h100-sxm", ["dense"], batches=1, scope="all")
    config = op_configs(layers, trace)
    config.index = layers["op"].to_numpy()
    columns = ["kind", "kernel_size", "stride"]
    assert config.loc["conv1", columns].tolist() == ["conv:image", 7.0, 2.0]
    assert config.loc["layer1.0.conv2", columns].tolist() == ["conv", 3.0, 1.0]
    assert config.loc["fc", columns].tolist() == ["linear", 0.0, 0.0]
    assert config.loc["act1.relu", ["kernel_size", "stride"]].tolist() == [0.0, 0.0]


def test_an_moe_expert_linear_runs_the_experts_its_tokens_touch():
    """8 experts, 2 per token, 4 tokens a sample at batch 2: T = 8 tokens touch
    8 x (1 - (1 - 2/8)^8) = 8 x (1 - 0.1001129150390625) = 7.1990966796875 experts; an op no
    token routes runs one kernel."""
    from types import SimpleNamespace

    from dse.calibrate.expected import _expert_kernels

    trace = SimpleNamespace(provenance={"routed_weights_by_op": {
        "moe.w1": {"sets": 8, "sets_per_token": 2, "tokens_per_sample": 4}}})
    kernels = _expert_kernels(trace, np.array(["moe.w1", "attn.qkv"], dtype=object),
                              np.array([2, 2]))
    assert kernels.tolist() == [pytest.approx(7.1990966796875, rel=1e-12), 1.0]


def test_a_compute_dtype_never_timed_marks_every_gemm_and_no_vector_op():
    """fp8 compute against predictors timed in fp16: every op with a GEMM (m > 0, the depthwise
    conv's m of 1 included) is marked, no vector op (m 0) is."""
    from dse.calibrate.expected import _untimed_dtypes
    from dse.roofline import Numerics

    trace = workloads.load_trace("toy_hybrid")
    layers = evaluate_layers(trace, "h100-sxm", ["dense"], batches=1, scope="all")
    marks = dict(zip(layers["op"], _untimed_dtypes(layers, trace, Numerics(dtype="fp8"), "fp16"),
                     strict=True))
    assert marks["block1.dwconv"] == "fp8 compute"  # m 1 per group
    assert marks["block1.pwconv1"] == "fp8 compute"
    assert marks["stem.act"] == ""
    assert marks["attn.norm"] == ""


def test_a_convolution_reading_an_input_that_is_no_image_is_a_plain_conv():
    """An input of shape (1, 32) is not C x H x W: a convolution reading it is no image
    convolution (conv, not conv:image), whatever its one leading dimension."""
    from workloads.trace import Trace

    conv = {"name": "conv", "kind": "conv", "m": 8, "k": 32, "n": 1, "groups": 1,
            "weight_elems": 8 * 32, "input_elems": 32, "output_elems": 8, "vector_flops": 0.0,
            "prunable": True, "producers": ["input"]}
    trace = Trace.from_records("toy", [1, 32], [conv], {"source": "test"})
    layers = evaluate_layers(trace, "h100-sxm", ["dense"], batches=1, scope="all")
    assert op_configs(layers, trace)["kind"].tolist() == ["conv"]


def test_row_balance_by_hand_at_its_edges():
    """row_balance's three features, each step in Python floats from its docstring, on rows at
    its edges: one block a block-row (k = b) over two block-rows, one output row (m = 1), a
    single output column (n = 1), a one-column tile and one unit (each CTA a wave), a density
    so small that the mean's floor of 1e-9 blocks holds, and a block row with no GEMM rows."""
    from dse.calibrate.features import row_balance

    d_tiny = 1.0 - (1.0 - 1e-12)  # the density a sparsity of 1 - 1e-12 leaves, as floats do
    frame = pd.DataFrame({
        "key": ["block16", "csr", "csr", "block16"],
        "m": [32, 1, 4, 0], "k": [16, 4, 1, 16], "n": [3, 1, 1, 8],
        "sparsity": [0.5, 0.75, 1.0 - 1e-12, 0.5], "block": [16, 1, 1, 16]})
    imbalance, depth, waves = row_balance(frame, units=1, tile=1)

    def by_hand(per_row, density, block_rows, ctas):
        mean = max(per_row * density, 1e-9)
        spread = math.sqrt(per_row * density * (1.0 - density))
        ratio = 1.0 + spread / mean * math.sqrt(2.0 * math.log(max(block_rows, 2.0)))
        return math.log(ratio), math.log1p(mean * ratio), math.log(ctas)

    expected = [by_hand(1.0, 0.5, 2.0, 2 * 3),   # 32 / 16 block-rows, 3 one-column tiles each
                by_hand(4.0, 0.25, 1.0, 1),      # one row, one column
                by_hand(1.0, d_tiny, 4.0, 4),    # mean 1e-12 blocks, floored at 1e-9
                (0.0, 0.0, 0.0)]                 # m = 0: no GEMM, no rows to balance
    got = np.column_stack([imbalance, depth, waves])
    np.testing.assert_allclose(got, np.array(expected), rtol=1e-12, atol=0)
    # the first row's numbers, written out: ratio 1 + sqrt(2 ln 2), six CTAs
    assert math.exp(imbalance[0]) == pytest.approx(1.0 + math.sqrt(2.0 * math.log(2.0)))
    assert math.exp(waves[0]) == pytest.approx(6.0)
    assert math.exp(imbalance[2]) == pytest.approx(1.0 + 1e-6 / 1e-9 * math.sqrt(2 * math.log(4)),
                                                   rel=1e-4)


def test_a_patchify_convolutions_input_channels_are_k_over_its_window():
    """A 4 x 4 stem over 3 channels: K = 48, so its input channels per group are 48 / 16 = 3
    (aligned to 1, not to K's 16); 96 output channels align to 32."""
    from dse.calibrate.features import channel_alignment

    frame = pd.DataFrame({"kind": ["conv"], "m": [96], "k": [48]})
    cin, cout = channel_alignment(frame, np.array([True]), np.array([4.0]))
    assert (cin.tolist(), cout.tolist()) == ([1.0], [32.0])


def test_a_convolution_of_unknown_input_channels_is_no_image_convolution():
    from dse.calibrate.features import feature_kind

    assert feature_kind("conv", "stem.conv") == "conv"  # channels not given: not an image
    assert feature_kind("conv", "stem.conv", 3) == "conv:image"
    assert feature_kind("conv", "stem.conv", 5) == "conv"


def test_the_power_of_two_dividing_a_value_that_is_not_whole_is_one():
    from dse.calibrate.features import ALIGN_MAX, _power_of_two_divisor

    got = _power_of_two_divisor(np.array([2.5, 96.0, 7.0, 1024.0, 0.0, 12.000000001]))
    # 12.000000001 is whole to np.isclose; 0 is below every step
    assert got.tolist() == [1.0, 32.0, 1.0, float(ALIGN_MAX), 1.0, 4.0]


def test_conv_windows_and_read_planes_by_hand():
    """with_conv_inputs' window and input by hand: a 7 x 1 kernel's window is its larger side
    (7); a strided 1 x 1 over a non-square 8 x 6 input reads 4 of its rows and 3 of its
    columns (3 x 4 x 3 = 36 elements); other ops have no window (0, not 1); and a traced
    row's input is unknown (0) without the batch it ran at, while its window comes from the
    trace op (ResNet-50's layer1.0.conv2: 3 x 3, stride 1) unless its own note gives one."""
    from dse.calibrate.features import with_conv_inputs

    frame = pd.DataFrame({
        "kind": ["conv", "conv", "linear"], "m": [16, 16, 8],
        "variant": ["input 1x4x9x9, kernel 7x1 stride 1 padding 3 groups 1",
                    "input 1x3x8x6, kernel 1x1 stride 2 padding 0 groups 1", ""],
        "note": ["kernel 7x1 stride 1 padding 3", "kernel 1x1 stride 2 padding 0", ""]})
    out = with_conv_inputs(frame)
    assert out["kernel_size"].tolist() == [7.0, 1.0, 0.0]
    assert out["stride"].tolist() == [1.0, 2.0, 0.0]
    assert out["input_elems"].tolist()[1:] == [3 * 4 * 3, 0.0]

    traced = pd.DataFrame({"kind": ["conv", "conv"], "m": [64, 64],
                           "variant": ["", "input 2x64x56x56, kernel 5x5 stride 1 groups 1"],
                           "source": ["trace", "trace"], "model": ["resnet50", "resnet50"],
                           "op": ["layer1.0.conv2", "layer1.0.conv2"]})
    out = with_conv_inputs(traced)
    assert out["input_elems"].tolist() == [0.0, 2 * 64 * 56 * 56]  # no batch column
    assert out["kernel_size"].tolist() == [3.0, 5.0]
    assert out["stride"].tolist() == [1.0, 1.0]


def test_a_convolution_whose_note_names_no_input_is_a_plain_conv():
    from dse.calibrate.features import with_feature_kinds

    rows = pd.DataFrame({"kind": ["conv", "conv"], "op": ["conv", "conv"],
                         "note": ["kernel 3x3 stride 1", "input 1x3x32x32, kernel 3x3 stride 1"]})
    assert with_feature_kinds(rows)["kind"].tolist() == ["conv", "conv:image"]


def test_input_channels_when_k_is_one_past_a_multiple_of_the_window():
    """K = 10 under a 3 x 3 window is no 9 x C_in: the channels are K itself, aligned to 2."""
    from dse.calibrate.features import channel_alignment

    frame = pd.DataFrame({"kind": ["conv", "conv"], "m": [8, 8], "k": [10, 18]})
    cin, _ = channel_alignment(frame, np.array([True, True]), np.array([3.0, 3.0]))
    assert cin.tolist() == [2.0, 2.0]  # 10 itself; 18 / 9 = 2
