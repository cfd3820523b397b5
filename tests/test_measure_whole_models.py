"""Whole models on the CPU in `dse measure` (issue 16): a tiny timm model timed dense and with
its linears sparse, the rows' columns and variant names, the table `dse calibrate
--whole-models` reads, and that table round-tripping into the whole-model comparison. Tests
never depend on timing values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

import formats  # noqa: E402
import workloads  # noqa: E402
from dse.calibrate.expected import expected_layers  # noqa: E402
from dse.calibrate.predictor import load_predictors, reference_hardware  # noqa: E402
from dse.calibrate.validate import (  # noqa: E402
    sdpa_models,
    whole_model_table,
    whole_model_variants,
)
from dse.cli.calibrate import _read_whole_models  # noqa: E402
from dse.cli.main import main  # noqa: E402
from dse.measure import kernels_cpu  # noqa: E402
from dse.measure.dataset import (  # noqa: E402
    WHOLE_MODEL_COLUMNS,
    load_dataset,
    whole_model_rows,
    whole_model_variant,
)
from dse.measure.host import allocator_settings  # noqa: E402
from dse.measure.measure import MeasureError, measure, whole_model_trace  # noqa: E402
from dse.measure.timing import TimingMethod  # noqa: E402
from dse.roofline import Numerics, evaluate_layers  # noqa: E402

from .test_probe import _result  # noqa: E402

FAST = TimingMethod(warmup=0, min_repeats=1, max_repeats=1, window=1, max_time_s=0.05)
FORMATS = ["block4@87.5%", "unstructured@90%"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def host_toml(tmp_path_factory):
    from dse.measure.probe import probe_spec_toml

    path = tmp_path_factory.mktemp("hw") / "host.toml"
    path.write_text(probe_spec_toml(_result()))
    return str(path)


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory):
    """timm's smallest ViT (test_vit, 0.37 M parameters) exported at 64 x 64 pixels, so the
    whole model is built at the trace's size, not the model's own 160."""
    from workloads.export import export_trace

    trace = export_trace("test_vit", img_size=64)
    path = tmp_path_factory.mktemp("trace") / "test_vit.json"
    path.write_text(json.dumps(trace.to_json()))
    return trace, str(path)


@pytest.fixture(scope="module")
def measured(tiny_trace, host_toml):
    trace, _ = tiny_trace
    return measure(trace, host_toml, FORMATS, [1, 2], whole_models=True, kernels=False,
                   method=FAST, threads=1, rounds=1)


def _converted(trace, text: str) -> int:
    return int(whole_model_trace(trace, formats.parse(text)).ops["prunable"].sum())


def test_whole_model_rows_cover_every_batch_and_format(measured, tiny_trace):
    trace, _ = tiny_trace
    assert tuple(trace.input_shape) == (3, 64, 64)
    frame = measured.frame
    assert len(frame) == 2 * 3  # batches x (dense + two sparse formats); no kernels, no samples
    assert measured.sampled_configs == 0 and measured.trace_configs == 6
    assert set(frame["family"]) == {"model"} and set(frame["implementation"]) == {"torch_eager"}
    assert (frame["error"] == "").all()
    assert set(zip(frame["format"], frame["batch"], strict=True)) == {
        (f, b) for f in ("dense", *FORMATS) for b in (1, 2)}
    assert (frame["threads"] == 1).all() and (frame["dtype"] == "fp32").all()
    assert (frame["cache"] == "warm").all() and (frame["repeats"] == 1).all()
    assert (frame["median_s"] > 0).all() and (frame["min_s"] <= frame["median_s"]).all()
    assert (frame["sol_s"] > 0).all() and (frame["hw"] == "host").all()
    assert frame["note"].str.contains("input 3x64x64").all()
    # Whether timm fuses attention is process-wide state (the exporter's tests turn it off),
    # so the note is checked against a model built in the same state.
    modules = [m for m in timm.create_model("test_vit", img_size=64).modules()
               if hasattr(m, "fused_attn")]
    fused = sum(bool(m.fused_attn) for m in modules)
    assert modules
    assert frame["note"].str.contains(f"in {fused} of {len(modules)} attention modules").all()
    assert measured.provenance["kernels"] is False
    assert measured.provenance["whole_models"] is True


def test_sparse_whole_models_compute_the_masked_model(measured, tiny_trace):
    trace, _ = tiny_trace
    frame = measured.frame.set_index(["format", "batch"])
    params = int(frame.loc[("dense", 1), "nnz"])
    assert params == sum(p.numel() for p in timm.create_model("test_vit", img_size=64)
                         .parameters())
    for text in FORMATS:
        row = frame.loc[(text, 1)]
        assert row["rel_err"] < 1e-4  # the sparse path against the same masked weights, dense
        # the layers the measurement ran sparse are exactly those its expectation prices sparse
        linears = int((trace.ops["kind"] == "linear").sum())
        assert f"linears on the sparse path: {_converted(trace, text)} of {linears}" \
            in row["note"]
        assert row["nnz"] < params  # masks removed weights
        # the speed of light prices only those linears sparse, so it is below dense's
        assert row["sol_s"] < frame.loc[("dense", 1), "sol_s"]
    assert "CSR" in frame.loc[("unstructured@90%", 1), "kernel"]
    assert "BSR 4x4" in frame.loc[("block4@87.5%", 1), "kernel"]


def test_whole_model_rows_use_the_h100_variant_names(measured):
    table = whole_model_rows(measured.frame)
    assert tuple(table.columns) == WHOLE_MODEL_COLUMNS
    assert sorted(set(table["variant"])) == ["block4_87.5_eager", "dense_eager",
                                             "unstructured_90_eager"]
    assert set(table["img_size"]) == {64} and set(table["model"]) == {"test_vit"}
    # the allocator settings the run had, read back from each row's fingerprint
    assert set(table["allocator"]) == {json.dumps(allocator_settings(), sort_keys=True)}
    tuned = measured.frame.assign(fingerprint=json.dumps(
        {"allocator": {"MALLOC_TRIM_THRESHOLD_": "1000000000"}}))
    assert set(whole_model_rows(tuned)["allocator"]) == {
        '{"MALLOC_TRIM_THRESHOLD_": "1000000000"}'}
    # a fingerprint from before the allocator was recorded: unrecorded, not the defaults
    old = measured.frame.assign(fingerprint=json.dumps({"cores": 2}))
    assert set(whole_model_rows(old)["allocator"]) == {""}
    h100 = pd.read_csv(ROOT / "benchmarks/gpu/results/models_measurements.csv")
    assert set(h100["variant"]) == {whole_model_variant(f, i) for f in ("dense", "2:4")
                                    for i in ("torch_eager", "torch_cudagraph")}


def test_build_model_refuses_formats_without_a_cpu_path():
    with pytest.raises(ValueError, match="no CPU sparse path"):
        kernels_cpu.build_model("test_vit", (3, 64, 64), 1, formats.parse("2:4"))
    assert not kernels_cpu.sparse_linear_applies(formats.parse("block4@50%"), 10, 64)
    assert kernels_cpu.sparse_linear_applies(formats.parse("block4@50%"), 12, 64)
    assert not kernels_cpu.sparse_linear_applies(formats.parse("dense"), 12, 64)


def test_nothing_to_measure_is_refused(host_toml):
    with pytest.raises(MeasureError, match="nothing to measure"):
        measure("toy_hybrid", host_toml, [], [1], whole_models=False, kernels=False)


def test_a_model_timm_cannot_build_is_an_error_row(host_toml):
    result = measure("toy_hybrid", host_toml, [], [1], whole_models=True, kernels=False,
                     method=FAST, threads=1)  # 4 rounds: the error is said once
    (row,) = result.frame.itertuples()
    assert row.family == "model" and row.error and np.isnan(row.median_s)
    assert len(whole_model_rows(result.frame)) == 1


def test_the_command_writes_the_table_beside_the_dataset(tiny_trace, host_toml, tmp_path,
                                                          capsys):
    _, path = tiny_trace
    out = tmp_path / "tiny.parquet"
    assert main(["measure", "--model", path, "--hw", host_toml, "--format", "block4@87.5%",
                 "--batch", "1", "--threads", "1", "--whole-models-only", "--rounds", "1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "whole models" in text and "wrote 2 whole-model rows" in text
    side = tmp_path / "tiny.models.csv"
    table = pd.read_csv(side)
    assert list(table.columns) == list(WHOLE_MODEL_COLUMNS)
    assert sorted(table["variant"]) == ["block4_87.5_eager", "dense_eager"]
    # the dataset and the table beside it read back as the same measured models
    again = _read_whole_models([out])
    pd.testing.assert_frame_equal(
        again[["model", "variant", "batch", "median_s"]].reset_index(drop=True),
        table[["model", "variant", "batch", "median_s"]], check_dtype=False)
    assert len(load_dataset(out)) == 2


@pytest.fixture(scope="module")
def cpu_predictors():
    return load_predictors("cpu-amd-epyc-2c")


def test_the_reference_spec_of_cpu_predictors_is_the_shipped_probe(cpu_predictors):
    hw = reference_hardware(cpu_predictors, ["cpu-amd-epyc-2c"])
    assert hw.name == cpu_predictors.reference_hw == "host"
    assert hw.tensor_rate("tf32") == pytest.approx(179658792769.2989)
    assert hw.dram_bandwidth_bytes_per_s == pytest.approx(37466210332.85731)


def _expected_sums(model: str, fmt: str, batch: int, predictors, hw,
                   sdpa: bool) -> tuple[float, float]:
    """Calibrated expectation of one model by hand, (sparse, dense): only the linears the CPU
    sparse path takes priced sparse, with the copies, fills and bias adds around them and,
    where the run called SDPA (``sdpa``), the dense run's attention fused and the sparse run's
    on torch's math path without the fp16 cast (workloads.backend); CPU numerics (fp32 in the
    tf32 slot), every op (unfused)."""
    from workloads.backend import fuse_attention, torch_cpu_sparse_linears, torch_math_attention

    numerics = Numerics(dtype="tf32", vector_dtype="fp32", csr_dtype="fp32")
    full = workloads.load_trace(model)
    sparse_trace = whole_model_trace(full, formats.parse(fmt))
    dense_trace = full
    if sdpa:
        dense_trace = fuse_attention(full)
        sparse_trace = torch_math_attention(sparse_trace, cast_probabilities=False)
    sparse_trace = torch_cpu_sparse_linears(sparse_trace)

    def total(trace, name: str) -> float:
        layers = evaluate_layers(trace, hw, [fmt], batches=batch, fusion="unfused",
                                 scope="all", numerics=numerics)
        layers = expected_layers(layers, trace, predictors)
        return float(layers.loc[layers["format"] == name, "expected_s"].sum())

    return total(sparse_trace, formats.parse(fmt).name), total(dense_trace, "dense")


def test_measured_rows_round_trip_into_the_whole_model_table(measured, cpu_predictors,
                                                             tmp_path):
    """The rows dse measure writes, renamed to shipped models and given latencies equal to the
    calibrated expectation (dense) and 1.25x it (sparse), come back with no dense error, a
    sparse error of 1 / 1.25 - 1 and the measured speedup as given."""
    hw = reference_hardware(cpu_predictors, ["cpu-amd-epyc-2c"])
    rows = whole_model_rows(measured.frame)
    rows = rows[rows["format"].isin(["dense", "block4@87.5%"]) & (rows["batch"] == 1)]
    models = ["convnext_tiny", "deit_small_patch16_224", "mixer_s16_224", "resnet50"]
    made = []
    # the tiny model's runs called SDPA (its note says so): attention is priced as it ran
    sdpa = bool(sdpa_models(rows))
    for model in models:
        sparse, dense = _expected_sums(model, "block4@87.5%", 1, cpu_predictors, hw, sdpa)
        for r in rows.itertuples(index=False):
            made.append({**r._asdict(), "model": model,
                         "median_s": dense if r.format == "dense" else 1.25 * sparse})
    path = tmp_path / "models.csv"
    pd.DataFrame(made).to_csv(path, index=False)
    # a second, slower run of every row (a busy machine) and a failed one: the fastest counts
    slower = pd.DataFrame(made).assign(median_s=lambda f: 3 * f["median_s"])
    failed = pd.DataFrame(made).assign(median_s=np.nan, error="RuntimeError: out of memory")
    again = tmp_path / "again.csv"
    pd.concat([slower, failed]).to_csv(again, index=False)
    back = _read_whole_models([path, again])
    assert len(back) == 3 * len(made)
    assert whole_model_variants(back) == ("dense_eager", "block4_87.5_eager", "block4@87.5%")
    table, context = whole_model_table(back, cpu_predictors, hw)
    assert sorted(table["model"]) == sorted(models)
    np.testing.assert_allclose(table["error"], 0.0, atol=1e-6)
    np.testing.assert_allclose(table["sparse_error"], 1 / 1.25 - 1, atol=1e-6)
    np.testing.assert_allclose(table["measured_speedup"] * 1.25, table["expected_speedup"],
                               rtol=1e-6)
    assert context["shift_s"] == pytest.approx(0.0, abs=1e-12)
