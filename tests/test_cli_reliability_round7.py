"""Reliability, seventh round (issue 26): the defects a hand fuzz of 150 inputs found (hardware
figures at the edges of a float, fields a command never reads, names no file system takes,
calibration datasets and whole-model tables), each with its regression test.

1. A hardware figure far outside any machine was taken: a DRAM bandwidth of 5e-324 B/s ended in
   a ZeroDivisionError traceback, a tensor rate of 1e-300 FLOP/s printed a 300-digit latency,
   and dram_pj_per_byte=1e308 overflowed the energy to NaN, exit 0. Every positive field now
   lies in 1e-6 to 1e30 (accelerator_models.loader.POSITIVE_RANGE).
2. ``dse study feature-overhead --set l2_bytes=1`` (or dram_capacity_bytes) moved nothing but
   the label: the study never prices the memory fit.
3. ``dse sweep`` and ``dse simulate`` took a --set or --vary of a field they never read: the
   energy and power figures (neither prices energy), l2_bytes in a roofline sweep, a sweep's
   dram_capacity_bytes without a varied batch, the buffer level the simulator does not use
   (l2_bytes under --buffer smem, the SM sizes under --buffer l2, both under --buffer-bytes)
   and kernel_launch_overhead_s beside --launch-overhead-s.
4. A path with a name longer than the file system takes (255 bytes) ended in an OSError
   traceback: outputs (evaluate, report, study, search, calibrate --out) and inputs (a model,
   a dataset, a predictor file).
5. A measured dataset with a fraction in a count column (m = 1.5) was truncated to 1 without a
   word, and one with an unknown dtype ('fp99') was calibrated on.
6. ``dse calibrate --whole-models DEVICE=FILE`` for a DEVICE the run does not train was skipped
   without a word, exit 0; and a CPU table without a sparse format failed only after the whole
   training, naming an option calibrate does not have (--backend).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import pytest

import accelerator_models
from accelerator_models import SpecError
from accelerator_models.loader import POSITIVE_RANGE
from dse.measure.dataset import DATASETS_DIR, DatasetError, validate
from tests.cli_run import run_cli
from tests.test_cli_reliability_round6 import _refused  # one line, exit 2, no traceback

ROOT = Path(__file__).parents[1]
ROUND_GPU = ROOT / "tests" / "data" / "round_gpu.toml"
TOY = ["--model", "toy_hybrid", "--hw", "a100", "--format", "2:4"]




def _no_training(*_args, **_kwargs):
    raise AssertionError("the training began before the inputs were checked")


# --- 1. hardware figures in a physical range --------------------------------------------------

OUT_OF_RANGE = {
    # Was: ZeroDivisionError traceback.
    "bandwidth 5e-324": ("dram_bandwidth_bytes_per_s=5e-324", "4.94066e-324"),
    # Was: accepted; every op compute-bound on a bandwidth no machine has.
    "bandwidth 1e308": ("dram_bandwidth_bytes_per_s=1e308", "1e+308"),
    # Was: a latency of 4.7e302 ns printed digit by digit, exit 0.
    "tensor rate 1e-300": ("tensor_flops_per_s.fp16=1e-300", "1e-300"),
    "nonzero rate 1e-300": ("sparse_tensor.nonzero_rate=1e-300", "1e-300"),
    # Was: RuntimeWarning overflow, energy NaN, exit 0.
    "dram pJ 1e308": ("dram_pj_per_byte=1e308", "1e+308"),
    "capacity 1e308": ("dram_capacity_bytes=1e308", "1e+308"),
}


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
def test_a_figure_outside_the_range_is_refused(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    override, shown = OUT_OF_RANGE[name]
    field = override.partition("=")[0]
    line = _refused(["evaluate", *TOY, "--set", override, "--out", "e.csv"], capsys)
    assert line == (f"dse: error: --set {field}: {shown} is outside the range dse takes, "
                    "1e-06 to 1e+30; give a figure in the field's unit (see `dse hw show a100`)")
    assert os.listdir(tmp_path) == []


def test_a_spec_file_with_a_subnormal_bandwidth_is_refused(tmp_path, capsys):
    spec = tmp_path / "tiny.toml"
    spec.write_text(ROUND_GPU.read_text().replace("dram_bandwidth_bytes_per_s = 1e12",
                                                  "dram_bandwidth_bytes_per_s = 5e-324"))
    line = _refused(["evaluate", "--model", "toy_hybrid", "--hw", str(spec)], capsys)
    assert "tiny.toml: dram_bandwidth_bytes_per_s: 4.94066e-324 is outside the range" in line


def test_a_swept_figure_outside_the_range_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["sweep", *TOY, "--vary", "hw.dram_bandwidth_bytes_per_s=5e-324,1e12",
                     "--out", "s.csv"], capsys)
    assert "--vary hw.dram_bandwidth_bytes_per_s: 4.94066e-324 is outside the range" in line
    assert os.listdir(tmp_path) == []


def test_the_ends_of_the_range_are_taken():
    low, high = POSITIVE_RANGE
    assert (low, high) == (1e-6, 1e30)
    acc = accelerator_models.load("a100", [f"dram_bandwidth_bytes_per_s={high}",
                                           f"dram_pj_per_byte={low}"])
    assert acc.dram_bandwidth_bytes_per_s == 1e30 and acc.dram_pj_per_byte == 1e-6
    for value in (math.nextafter(low, 0.0), math.nextafter(high, math.inf)):
        with pytest.raises(SpecError, match="outside the range dse takes"):
            accelerator_models.load("a100", [f"dram_bandwidth_bytes_per_s={value!r}"])


def test_the_largest_figures_still_price_finite_numbers(tmp_path, capsys):
    """At the range's ends the slowest machine, the dearest energy and the largest batch
    stay finite: ConvNeXt-T at batch 16,777,216 on 1e-6 FLOP/s and B/s, 1e30 pJ a byte."""
    out = tmp_path / "e.csv"
    slow = [f"{f}=1e-6" for f in ("dram_bandwidth_bytes_per_s", "tensor_flops_per_s.fp16",
                                  "vector_flops_per_s.fp16", "vector_flops_per_s.fp32")]
    assert run_cli(["evaluate", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4",
                    "--batch", "16777216", *(x for s in slow for x in ("--set", s)),
                    "--set", "dram_pj_per_byte=1e30", "--out", str(out)]) == 0
    _, err = capsys.readouterr()
    assert "Warning" not in err, err
    frame = pd.read_csv(out)
    for column in ("latency_s", "speedup", "energy_j", "edp_js"):
        assert frame[column].map(math.isfinite).all(), column


# --- 2. study feature-overhead and the memory fit -------------------------------------------

@pytest.mark.parametrize("field", ["l2_bytes", "dram_capacity_bytes"])
def test_the_study_refuses_a_memory_field_it_never_reads(field, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["study", "feature-overhead", "--model", "toy_hybrid", "--batch", "1",
                     "--set", f"{field}=1", "--out", "st"], capsys)
    assert line == (f"dse: error: --set {field}=1: dse study feature-overhead does not read "
                    f"{field}: the study prices latency, traffic and energy, never the memory "
                    "fit; dse evaluate --out prints the fit (fits, fits_on_chip), or leave it out")
    assert os.listdir(tmp_path) == []


def test_the_study_still_takes_a_field_it_reads(tmp_path, capsys):
    """A DRAM bandwidth moves the study: toy_hybrid's 2:4 at batch 1 on the A100 is 1.221x
    (820 ns dense, 672 ns); at 1e15 B/s every op is compute-bound and the speedup moves."""
    out = tmp_path / "st"
    assert run_cli(["study", "feature-overhead", "--model", "toy_hybrid", "--batch", "1",
                    "--format", "2:4", "--out", str(out)]) == 0
    base = pd.read_csv(out / "feature-share.csv").set_index("format")["speedup"]
    assert base["2:4"] == pytest.approx(820.0 / 672.0, rel=2e-3)
    fast = tmp_path / "fast"
    assert run_cli(["study", "feature-overhead", "--model", "toy_hybrid", "--batch", "1",
                    "--format", "2:4", "--set", "dram_bandwidth_bytes_per_s=1e15",
                    "--out", str(fast)]) == 0
    capsys.readouterr()
    moved = pd.read_csv(fast / "feature-share.csv").set_index("format")["speedup"]
    assert abs(moved["2:4"] - base["2:4"]) > 0.1


# --- 3. sweep and simulate: fields they never read ------------------------------------------

SWEEP = ["sweep", *TOY, "--out", "s.csv"]
SIMULATE = ["simulate", *TOY]
UNREAD = {
    "sweep --vary hw.l2_bytes": ([*SWEEP, "--vary", "hw.l2_bytes=1,2"],
                                 "--vary hw.l2_bytes=1,2: dse sweep does not read l2_bytes: "
                                 "only the event-level simulator reads it here"),
    "sweep --vary hw.dram_pj_per_byte": ([*SWEEP, "--vary", "hw.dram_pj_per_byte=1,2"],
                                         "dse sweep does not read dram_pj_per_byte: it prices "
                                         "latency, never energy or power"),
    "sweep --set board_power_w": ([*SWEEP, "--vary", "batch=1,2", "--set", "board_power_w=1"],
                                  "dse sweep does not read board_power_w"),
    "sweep --set static_power_w": ([*SWEEP, "--vary", "batch=1,2", "--set", "static_power_w=1"],
                                   "dse sweep does not read static_power_w"),
    "sweep capacity, batch fixed": ([*SWEEP, "--vary", "hw.dram_bandwidth_bytes_per_s=1e12,2e12",
                                     "--set", "dram_capacity_bytes=1e9"],
                                    "a sweep prices the memory fit only when it varies the batch"),
    "sweep simulate, l2 under smem": ([*SWEEP, "--evaluator", "simulate",
                                       "--vary", "hw.l2_bytes=1e6,4e7"],
                                      "the simulator's buffer is the smem, sized by "
                                      "shared_memory_per_sm_bytes x sm_count; add --buffer l2"),
    "sweep simulate, smem under --buffer-bytes": (
        [*SWEEP, "--evaluator", "simulate", "--buffer-bytes", "1e7",
         "--vary", "hw.shared_memory_per_sm_bytes=1e5,2e5"],
        "--buffer-bytes 1e+07 sizes the simulator's buffer instead of the spec"),
    "sweep simulate, launch twice": ([*SWEEP, "--evaluator", "simulate", "--vary", "batch=1,2",
                                      "--launch-overhead-s", "1e-6",
                                      "--set", "kernel_launch_overhead_s=2e-6"],
                                     "--launch-overhead-s sets the launch cost instead"),
    "simulate l2 under smem": ([*SIMULATE, "--set", "l2_bytes=1000"],
                               "dse simulate does not read l2_bytes: the simulator's buffer is "
                               "the smem"),
    "simulate smem under l2": ([*SIMULATE, "--buffer", "l2",
                                "--set", "shared_memory_per_sm_bytes=1e5"],
                               "the simulator's buffer is the l2, sized by l2_bytes; add "
                               "--buffer smem"),
    "simulate sm_count under --buffer-bytes": ([*SIMULATE, "--buffer-bytes", "1e7",
                                                "--set", "sm_count=4"],
                                               "dse simulate does not read sm_count"),
    "simulate launch twice": ([*SIMULATE, "--launch-overhead-s", "1e-6",
                               "--set", "kernel_launch_overhead_s=2e-6"],
                              "dse simulate does not read kernel_launch_overhead_s"),
    "simulate dram_pj_per_byte": ([*SIMULATE, "--set", "dram_pj_per_byte=1"],
                                  "dse simulate does not read dram_pj_per_byte: it prices "
                                  "latency, never energy or power"),
}


@pytest.mark.parametrize("name", sorted(UNREAD))
def test_a_field_the_command_never_reads_is_refused(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv, needle = UNREAD[name]
    line = _refused(argv, capsys)
    assert needle in line, line
    assert os.listdir(tmp_path) == []


def test_the_simulator_reads_the_buffer_level_it_uses(capsys):
    """--buffer l2 with --set l2_bytes=1e6: a buffer of 1e6 / 2**20 = 0.954 MiB."""
    assert run_cli([*SIMULATE, "--buffer", "l2", "--set", "l2_bytes=1e6"]) == 0
    assert "buffer 0.954 MiB (l2 of the spec)" in capsys.readouterr().out
    # smem: 1e5 bytes x 108 SMs = 10.3 MiB
    assert run_cli([*SIMULATE, "--set", "shared_memory_per_sm_bytes=1e5"]) == 0
    assert "buffer 10.3 MiB (smem of the spec)" in capsys.readouterr().out


def test_a_sweep_over_batches_reads_the_capacity(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert run_cli(["sweep", *TOY, "--vary", "batch=1,2", "--set", "dram_capacity_bytes=1",
                    "--out", str(out)]) == 0
    capsys.readouterr()
    assert not pd.read_csv(out)["fits"].any()  # 1 byte holds no weights


# --- 4. names no file system takes ------------------------------------------------------------

LONG = "x" * 300
LONG_NAMES = {
    "evaluate --out": (["evaluate", "--model", "toy_hybrid", "--hw", "a100",
                        "--out", f"{LONG}.csv"], "--out xxxx"),
    "report --out": (["report", *TOY, "--out", LONG], "--out xxxx"),
    "study --out": (["study", "feature-overhead", "--model", "toy_hybrid", "--batch", "1",
                     "--out", LONG], "--out xxxx"),
    "search --out": (["search", "--model", "convnext_tiny", "--out", LONG], "--out xxxx"),
    "calibrate --out": (["calibrate", "--data", "cpu-amd-epyc-2c", "--out", f"{LONG}.json"],
                        "--out xxxx"),
    "simulate --timeline": ([*SIMULATE, "--timeline", f"{LONG}.csv"], "--timeline xxxx"),
    "folder of --out": (["evaluate", "--model", "toy_hybrid", "--hw", "a100",
                         "--out", f"{LONG}/e.csv"], "--out xxxx"),
}


@pytest.mark.parametrize("name", sorted(LONG_NAMES))
def test_an_output_name_too_long_is_refused(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv, needle = LONG_NAMES[name]
    line = _refused(argv, capsys)
    assert line.startswith(f"dse: error: {needle}"), line
    assert "is longer than the file system takes (255); give a shorter one" in line
    assert len(line) < 250  # the name shortened, not printed whole
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv", [
    ["evaluate", "--model", f"{LONG}.json", "--hw", "a100"],
    ["evaluate", *TOY, "--calibrated", f"{LONG}.json"],
    ["calibrate", "--data", f"{LONG}.parquet", "--out", "m.json"],
], ids=["model", "predictor", "dataset"])
def test_an_input_name_too_long_is_refused(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(argv, capsys)
    assert line.startswith("dse: error: xxxx"), line
    assert line.endswith("the name is longer than the file system takes; give a shorter path")
    assert os.listdir(tmp_path) == []


# --- 5. measured datasets: counts and dtypes --------------------------------------------------

@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return pd.read_parquet(DATASETS_DIR / "cpu-amd-epyc-2c.parquet").head(40)


def test_a_fraction_in_a_count_is_refused(rows):
    assert validate(rows)["m"].iloc[0] == rows["m"].iloc[0]  # the rows as shipped are taken
    assert rows["m"].iloc[0] == 1
    bad = rows.assign(m=rows["m"].astype(float) + 0.5)
    with pytest.raises(DatasetError, match=r"^d.parquet: column 'm' is not int64: row 0 holds "
                                           r"1.5; fix the file"):
        validate(bad, "d.parquet")
    # A whole number stored as a float is still a count.
    whole = validate(rows.assign(m=rows["m"].astype(float)))
    assert whole["m"].dtype == "int64" and (whole["m"] == rows["m"]).all()


def test_an_unknown_dtype_is_refused(rows):
    bad = rows.assign(dtype="fp99")
    with pytest.raises(DatasetError, match="row 0 has dtype 'fp99'; use one of fp16, bf16, "
                                           "tf32, fp8, int8, fp32"):
        validate(bad, "d.parquet")


@pytest.mark.parametrize("change, needle", [
    ({"dtype": "fp99"}, "row 0 has dtype 'fp99'"),
    ({"m": 1.5}, "column 'm' is not int64: row 0 holds 1.5"),
])
def test_calibrate_refuses_such_a_dataset_before_training(change, needle, rows, tmp_path,
                                                          monkeypatch, capsys):
    from dse.calibrate import validate as validating

    monkeypatch.chdir(tmp_path)
    rows.assign(**change).to_parquet(tmp_path / "d.parquet")
    monkeypatch.setattr(validating, "validated_predictions", _no_training)
    line = _refused(["calibrate", "--data", "d.parquet", "--out", "m.json"], capsys)
    assert line.startswith("dse: error: d.parquet: ") and needle in line, line
    assert os.listdir(tmp_path) == ["d.parquet"]


# --- 6. calibrate --whole-models ----------------------------------------------------------------

def test_whole_models_of_a_set_not_trained_are_refused(tmp_path, monkeypatch, capsys):
    from dse.calibrate import validate as validating

    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.csv").write_text("model,variant,batch,median_s\n"
                                    "resnet50,dense_eager,1,0.01\n")
    monkeypatch.setattr(validating, "validated_predictions", _no_training)
    line = _refused(["calibrate", "--data", "cpu-amd-epyc-2c", "--validate",
                     "--whole-models", "nosuch=w.csv"], capsys)
    assert line == ("dse: error: --whole-models nosuch=...: this run trains no predictor set "
                    "named 'nosuch' (it trains cpu-amd-epyc-2c); give DEVICE as one of those, "
                    "or --data its dataset")
    assert os.listdir(tmp_path) == ["w.csv"]


def test_a_cpu_whole_model_table_without_a_cpu_format_is_refused(tmp_path, monkeypatch, capsys):
    from dse.calibrate import validate as validating

    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.csv").write_text("model,variant,batch,median_s\n"
                                    "resnet50,dense_eager,1,0.01\n")
    monkeypatch.setattr(validating, "validated_predictions", _no_training)
    line = _refused(["calibrate", "--data", "cpu-amd-epyc-2c", "--validate",
                     "--whole-models", "cpu-amd-epyc-2c=w.csv"], capsys)
    assert line.startswith("dse: error: --whole-models cpu-amd-epyc-2c=...: its sparse format "
                           "is 2:4 (2:4 where no row names one), and torch runs whole cpu "
                           "models only in block or unstructured formats"), line
    assert "--backend" not in line


@pytest.mark.parametrize("second", ["d.parquet", "./d.parquet"])
def test_a_dataset_given_twice_is_refused(second, rows, tmp_path, monkeypatch, capsys):
    """Was: the rows concatenated twice, each trained on as another measurement, exit 0."""
    from dse.calibrate import validate as validating

    monkeypatch.chdir(tmp_path)
    rows.to_parquet(tmp_path / "d.parquet")
    monkeypatch.setattr(validating, "validated_predictions", _no_training)
    line = _refused(["calibrate", "--data", "d.parquet", "--data", second, "--out", "m.json"],
                    capsys)
    assert line == (f"dse: error: --data {second}: the dataset d.parquet is given twice; give "
                    "each dataset once")
    assert os.listdir(tmp_path) == ["d.parquet"]


@pytest.mark.parametrize("field", ["hidden_size", "intermediate_size", "vocab_size"])
def test_a_width_past_any_model_is_refused_naming_the_field(field, tmp_path, monkeypatch,
                                                           capsys):
    """hidden_size 2**40 once reached the trace's per-sample limit, which named an op."""
    import json

    from workloads.llm import MAX_WIDTH

    config = json.loads((ROOT / "workloads/llm_configs/llama-3-8b.json").read_text())
    config[field] = MAX_WIDTH + 1
    (tmp_path / "c.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    line = _refused(["evaluate", "--model", "c.json", "--phase", "decode", "--context", "128",
                     "--hw", "a100"], capsys)
    assert line == (f"dse: error: c.json: field {field!r} is {MAX_WIDTH + 1:,}, above the "
                    f"{MAX_WIDTH:,} a trace is built for (public models stay far below); give "
                    "the model's own value")
