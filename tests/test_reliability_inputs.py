"""Every input checked before work starts (issue 26, defect classes 1-4).

1. Every file dse loads is validated on load against its schema and physical ranges:
   predictors, kernel datasets, the SpMV estimator, accuracy tables, traces and hardware specs.
   Each case below is a corrupted copy of a shipped file in the test's folder.
2. Every numeric option has a range and every string a form; an option is honoured or
   refused, never ignored.
3. What used to end in a traceback ends in one line.
4. Every output path is checked for writability, and every input path for existence, before
   any work begins.

Each refusal: a non-zero exit, exactly one line on stderr naming the input and the fix, no
traceback, and no file left behind.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pandas as pd
import pytest

import accelerator_models
from dse.calibrate.predictor import MODELS_DIR, CalibrationError, load_predictors
from dse.measure.budget import MAX_BUDGET_S, Budget, rounds_within
from dse.measure.dataset import DATASETS_DIR, load_dataset, shipped_datasets
from tests.cli_run import run_cli
from workloads import TRACES_DIR, load_trace, trace_names

EVALUATE = ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4"]
SIMULATE = ["simulate", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4"]
MEASURE = ["measure", "--model", "toy_hybrid", "--hw", "a100"]
ACCURACY = ["accuracy", "--model", "test_convnext"]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _refused(argv: list[str], folder: Path, capsys) -> str:
    """Run ``dse argv`` in ``folder`` (the current folder); assert a refusal as the issue
    defines it and return its one line."""
    before = _files(folder)
    code = run_cli(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert _files(folder) == before, "a file was left behind"
    return lines[0]


# --- 1. loaded files: corrupted copies --------------------------------------------------------


def _predictor(change) -> None:
    """The shipped CPU predictors with ``change`` applied, as p.json."""
    document = json.loads((MODELS_DIR / "cpu-amd-epyc-2c.json").read_text())
    change(document)
    Path("p.json").write_text(json.dumps(document))  # NaN is written as NaN, as json does


def _set(path: str, value):
    def change(document):
        *keys, last = path.split(".")
        table = document
        for key in keys:
            table = table[key]
        table[last] = value
    return change


def _drop(path: str):
    def change(document):
        *keys, last = path.split(".")
        table = document
        for key in keys:
            table = table[key]
        del table[last]
    return change


def _tree_child(document):
    tree = document["families"]["gemm"]["residual"]["trees"][0]
    inner = next(i for i, left in enumerate(tree["left"]) if left != -1)
    tree["left"][inner] = len(tree["left"]) + 5  # beyond the tree: a walk would index past it


PREDICTORS = [
    # (case, change, needles: the key and the fix)
    ("negative launch_floor_s", _set("launch_floor_s", -1e-5),
     ["p.json", "launch_floor_s", "dse calibrate"]),
    ("NaN in a family", _set("families.conv.floor_s", math.nan),
     ["families.conv.floor_s", "NaN"]),
    ("infinite ceiling", _set("families.gemm.ceiling", math.inf), ["families.gemm.ceiling"]),
    ("ceiling above the speed of light", _set("families.gemm.ceiling", 1.5),
     ["families.gemm.ceiling", "to 1"]),
    ("negative floor", _set("families.csr.floor_s", -2e-6), ["families.csr.floor_s"]),
    ("missing key", _drop("families.gemm.ceiling"), ["families.gemm.ceiling", "missing"]),
    ("missing launch floor", _drop("launch_floor_s"), ["launch_floor_s", "missing"]),
    ("unknown key", _set("launch_floors", 1e-6), ["launch_floors", "not a key"]),
    ("unknown device", _set("device", "tpu"), ["device", "cpu or cuda"]),
    ("zero units", _set("units", 0), ["units", "whole number"]),
    ("context ceiling 0", _set("context.unmeasured_ceiling", 0.0),
     ["context.unmeasured_ceiling"]),
    ("tree child out of the tree", _tree_child, ["families.gemm.residual.trees[0]",
                                                 "points outside"]),
    ("not JSON", lambda d: d.clear(), ["format"]),
]


@pytest.mark.parametrize("case, change, needles", PREDICTORS, ids=[c[0] for c in PREDICTORS])
def test_a_corrupted_predictor_file_is_refused_on_load(case, change, needles, tmp_path,
                                                       monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _predictor(change)
    line = _refused([*EVALUATE, "--calibrated", "p.json"], tmp_path, capsys)
    assert all(n in line for n in needles), line


def test_the_shipped_predictors_pass_their_own_checks():
    for name in ("h100-sxm", "cpu-amd-epyc-2c"):
        predictors = load_predictors(name)
        assert predictors.launch_floor_s > 0
        assert all(0 < f.ceiling <= 1 for f in predictors.families.values())


def _timed_row(frame: pd.DataFrame) -> int:
    return int((frame["error"] == "").to_numpy().nonzero()[0][0])


def _dataset(name: str, change) -> None:
    frame = pd.read_parquet(DATASETS_DIR / "cpu-amd-epyc-2c.parquet")
    frame = change(frame.copy())
    if name.endswith(".csv"):
        frame.to_csv(name, index=False)
    else:
        frame.to_parquet(name)


def _cell(column: str, value, timed: bool = True, cast=None):
    def change(frame):
        if cast:
            frame[column] = frame[column].astype(cast)
        frame.loc[_timed_row(frame) if timed else 5, column] = value
        return frame
    return change


DATASETS = [
    ("infinite shape", "d.csv", _cell("m", math.inf, cast=float), ["d.csv", "'m'", "inf"]),
    ("negative shape", "d.parquet", _cell("m", -64), ["d.parquet", "m = -64", "count"]),
    ("negative n", "d.parquet", _cell("n", -1, timed=False), ["n = -1"]),
    ("shape past 2**53", "d.parquet", _cell("k", 2**62), ["k = 4611686018427387904",
                                                          "2**53"]),
    ("infinite time", "d.parquet",
     lambda f: _cell("median_s", math.inf)(_cell("p90_s", math.inf)(f)), ["median_s"]),
    ("NaN time of a kernel that ran", "d.parquet", _cell("median_s", math.nan), ["median_s"]),
    ("negative speed of light", "d.parquet", _cell("sol_s", -1e-6), ["sol_s", ">= 0"]),
    ("infinite FLOPs", "d.parquet", _cell("flops", math.inf), ["flops"]),
    ("sparsity 1.5", "d.parquet", _cell("sparsity", 1.5), ["sparsity"]),
]


@pytest.mark.parametrize("case, name, change, needles", DATASETS, ids=[c[0] for c in DATASETS])
def test_a_corrupted_dataset_is_refused_by_calibrate(case, name, change, needles, tmp_path,
                                                     monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _dataset(name, change)
    line = _refused(["calibrate", "--validate", "--data", name, "--out", "m.json"], tmp_path,
                    capsys)
    assert all(n in line for n in needles), line


def test_the_shipped_datasets_pass_the_range_checks():
    for name in shipped_datasets():
        assert len(load_dataset(name)) > 0


def test_a_corrupted_dataset_is_refused_where_a_report_draws_it(tmp_path, monkeypatch,
                                                                capsys):
    monkeypatch.chdir(tmp_path)
    _dataset("d.parquet", _cell("m", -64))
    line = _refused(["report", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                     "--calibrated", "cpu-amd-epyc-2c", "--measured", "d.parquet", "--out",
                     "rep"], tmp_path, capsys)
    assert "d.parquet" in line and "m = -64" in line


@pytest.mark.parametrize("column, value, wanted", [
    ("median_s", "-0.004", "positive finite time"),
    ("median_s", "inf", "positive finite time"),
    ("batch", "0.5", "whole batch size"),
])
def test_a_corrupted_whole_model_table_is_refused_before_training(column, value, wanted,
                                                                  tmp_path, monkeypatch, capsys):
    """`calibrate --whole-models` read its tables after training the predictors; now they are
    read and checked first, every value in its range."""
    monkeypatch.chdir(tmp_path)
    table = pd.read_csv(Path(__file__).parents[1] / "benchmarks/gpu/results/"
                        "models_measurements.csv")
    table[column] = table[column].astype(object)
    table.loc[3, column] = value
    table.to_csv("w.csv", index=False)
    start = time.perf_counter()
    line = _refused(["calibrate", "--validate", "--data", "h100-sxm", "--whole-models",
                     "h100-sxm=w.csv"], tmp_path, capsys)
    assert time.perf_counter() - start < 60
    assert "--whole-models w.csv: row 3" in line and column in line and wanted in line, line


def _estimator(tmp_path: Path, change) -> Path:
    from dse.calibrate.spmv_cnn import ESTIMATORS_DIR

    document = json.loads((ESTIMATORS_DIR / "cpu-amd-epyc-2c.json").read_text())
    change(document)
    path = tmp_path / "e.json"
    path.write_text(json.dumps(document))
    return path


def _weight(key: str, value):
    def change(document):
        document["weights"][key][0] = value
    return change


ESTIMATORS = [
    ("NaN weight", _weight("fc2_b", math.nan), ["weights.fc2_b", "NaN"]),
    ("wrong shape", _weight("fc1_b", [1.0, 2.0]), ["weights.fc1_b"]),
    ("missing weight", lambda d: d["weights"].pop("conv2_w"), ["weights.conv2_w", "missing"]),
    ("zero spread", lambda d: d["context_std"].__setitem__(1, 0.0), ["context_std", "<= 0"]),
    ("unknown weight", lambda d: d["weights"].__setitem__("fc3_w", [[1.0]]),
     ["weights.fc3_w"]),
    ("not an object", lambda d: None, ["not a dse-spmv-cnn/1 estimator"]),
]


@pytest.mark.parametrize("case, change, needles", ESTIMATORS, ids=[c[0] for c in ESTIMATORS])
def test_a_corrupted_spmv_estimator_is_refused_on_load(case, change, needles, tmp_path):
    from dse.calibrate.spmv_cnn import load_spmv_cnn

    path = _estimator(tmp_path, change)
    if case == "not an object":
        path.write_text("[1, 2]")
    with pytest.raises(CalibrationError) as refused:
        load_spmv_cnn(path)
    message = str(refused.value)
    assert "\n" not in message and str(path) in message, message
    assert all(n in message for n in needles), message
    if case != "not an object":
        assert "dse calibrate --estimator spmv-cnn" in message  # the fix


def _table(change) -> None:
    text = (Path(__file__).parents[1] / "dse/accuracy/tables/accuracy_default.csv").read_text()
    lines = text.splitlines()
    lines[3] = change(lines[3])  # row 4 as a spreadsheet numbers it: unstructured@75%
    Path("a.csv").write_text("\n".join(lines) + "\n")


TABLES = [
    ("NaN accuracy", lambda row: row.replace(",top1,98.8857938718663,", ",top1,nan,"),
     ["a.csv", "row 4", "'value'"]),
    ("accuracy above 100", lambda row: row.replace(",top1,98.8857938718663,", ",top1,120,"),
     ["row 4", "'value'", "[0, 100]"]),
    ("negative sparsity", lambda row: row.replace(",0.75,top1,", ",-0.75,top1,"),
     ["row 4", "'sparsity'"]),
]


@pytest.mark.parametrize("case, change, needles", TABLES, ids=[c[0] for c in TABLES])
def test_a_corrupted_accuracy_table_is_refused_before_any_work(case, change, needles,
                                                               tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _table(change)
    line = _refused(["accuracy-table", "a.csv"], tmp_path, capsys)
    assert all(n in line for n in needles), line
    # dse report loads it before evaluating anything
    line = _refused(["report", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                     "--accuracy-table", "a.csv", "--out", "rep"], tmp_path, capsys)
    assert all(n in line for n in needles), line


def _trace(change=None, text: str | None = None) -> None:
    document = json.loads((TRACES_DIR / "toy_hybrid.json").read_text())
    if change is not None:
        change(document)
    Path("t.json").write_text(text if text is not None else json.dumps(document))


TRACES = [
    ("model null", lambda d: d.update(model=None), ["t.json", "'model'", "non-empty"]),
    ("model empty", lambda d: d.update(model=""), ["'model'"]),
    ("unknown top-level key", lambda d: d.update(extra=1), ["'extra'", "a trace has"]),
    ("NaN in provenance", lambda d: d["provenance"].update(macs=math.nan),
     ["provenance.macs", "NaN"]),
    ("negative n", lambda d: d["ops"][0].update(n=-3), ["op #0", "'n'", ">= 0"]),
    ("infinite vector FLOPs", lambda d: d["ops"][0].update(vector_flops=math.inf),
     ["'vector_flops'", "finite"]),
    ("NaN dimension", lambda d: d["ops"][0].update(m=math.nan), ["'m'", "integer"]),
]


@pytest.mark.parametrize("case, change, needles", TRACES, ids=[c[0] for c in TRACES])
def test_a_corrupted_trace_is_refused_on_load(case, change, needles, tmp_path, monkeypatch,
                                              capsys):
    monkeypatch.chdir(tmp_path)
    _trace(change)
    line = _refused(["workloads", "show", "t.json"], tmp_path, capsys)
    assert all(n in line for n in needles), line


def test_a_trace_with_a_key_twice_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    text = (TRACES_DIR / "toy_hybrid.json").read_text().replace(
        '"model":', '"model": "other", "model":', 1)
    _trace(text=text)
    line = _refused([*EVALUATE[:2], "t.json", *EVALUATE[3:]], tmp_path, capsys)
    assert "t.json" in line and "'model' appears twice" in line


def test_the_shipped_traces_pass_the_stricter_checks():
    assert all(len(load_trace(name)) > 0 for name in trace_names())


SPEC = (Path(__file__).parent / "data" / "round_gpu.toml").read_text()
SPECS = [
    ("empty name", SPEC.replace('name = "round-gpu"', 'name = ""'), ["s.toml", "name",
                                                                      "non-empty"]),
    ("launch overhead 1e308", SPEC.replace("dram_bandwidth_bytes_per_s = 1e12",
                                           "dram_bandwidth_bytes_per_s = 1e12\n"
                                           "kernel_launch_overhead_s = 1e308"),
     ["kernel_launch_overhead_s", "from 0 to 1"]),
    ("NaN bandwidth", SPEC.replace("dram_bandwidth_bytes_per_s = 1e12",
                                   "dram_bandwidth_bytes_per_s = nan"),
     ["dram_bandwidth_bytes_per_s", "positive finite"]),
    ("negative rate", SPEC.replace("fp16 = 100e12", "fp16 = -100e12"),
     ["tensor_flops_per_s.fp16"]),
]


@pytest.mark.parametrize("case, text, needles", SPECS, ids=[c[0] for c in SPECS])
def test_a_corrupted_spec_is_refused_on_load(case, text, needles, tmp_path, monkeypatch,
                                             capsys):
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(text)
    line = _refused(["hw", "show", "s.toml"], tmp_path, capsys)
    assert all(n in line for n in needles), line
    line = _refused(["simulate", "--model", "toy_hybrid", "--hw", "s.toml"], tmp_path, capsys)
    assert all(n in line for n in needles), line


# --- 2 and 3. options: a range for every number, a form for every string ----------------------

OPTIONS = [
    # (case, argv, needles: the option with its value, and the fix)
    ("launch overhead 1e308", [*SIMULATE, "--launch-overhead-s", "1e308"],
     ["--launch-overhead-s 1e+308", "<= 1"]),
    ("launch overhead 1e308 in a sweep",
     ["sweep", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4", "--vary",
      "batch=1,2", "--evaluator", "simulate", "--launch-overhead-s", "1e308", "--out",
      "s.parquet"], ["--launch-overhead-s 1e+308"]),
    ("prefetch depth past 2**30", [*SIMULATE, "--fusion", "fused_prefetched",
                                   "--prefetch-depth", "100000000000000000000"],
     ["--prefetch-depth 100000000000000000000", "1,073,741,824"]),
    ("depth 10**8", [*SIMULATE, "--depth", "100000000"], ["--depth 100000000", "<= 64"]),
    ("buffer bytes NaN", [*SIMULATE, "--buffer-bytes", "nan"], ["--buffer-bytes nan"]),
    ("--calibrated '' (evaluate)", [*EVALUATE, "--calibrated", ""],
     ["--calibrated ''", "shipped predictor set"]),
    ("--calibrated '' (simulate)", [*SIMULATE, "--calibrated", ""], ["--calibrated ''"]),
    ("--calibrated '' (search)", ["search", "--calibrated", ""], ["--calibrated ''"]),
    ("hw probe --name ''", ["hw", "probe", "--name", "", "--out", "h.toml"],
     ["--name ''", "letters, digits"]),
    ("hw probe --name with a newline", ["hw", "probe", "--name", "a\nb"], ["--name"]),
    ("hw probe --wait-idle nan", ["hw", "probe", "--wait-idle", "nan"],
     ["--wait-idle nan", "from 0 to 86400 s"]),
    ("hw probe --wait-idle -1", ["hw", "probe", "--wait-idle", "-1"], ["--wait-idle -1.0"]),
    ("hw probe --repeats 2", ["hw", "probe", "--repeats", "2"], ["--repeats 2", "at least 3"]),
    ("measure --budget 1e6", [*MEASURE, "--budget", "1e6"],
     ["--budget 1e6", "277.8 h", "24.0 h"]),
    ("measure --budget 0", [*MEASURE, "--budget", "0"], ["--budget 0", "positive duration"]),
    ("measure --budget nan", [*MEASURE, "--budget", "nan"], ["--budget nan"]),
    ("measure --wait-idle nan", [*MEASURE, "--wait-idle", "nan"], ["--wait-idle nan"]),
    ("measure --seed -1", [*MEASURE, "--seed", "-1"], ["--seed -1", "from 0 to"]),
    ("measure --rounds 1e9", [*MEASURE, "--rounds", "1e9"], ["--rounds 1e9", "at most 100"]),
    ("calibrate --seed -1", ["calibrate", "--validate", "--seed", "-1"], ["--seed -1"]),
    ("calibrate --name ''", ["calibrate", "--out", "m.json", "--name", ""], ["--name ''"]),
    ("calibrate --epochs 0", ["calibrate", "--estimator", "spmv-cnn", "--validate",
                              "--epochs", "0"], ["--epochs 0", "at least 1"]),
    ("bench spmv --seed -1", ["bench", "spmv", "--seed", "-1"], ["--seed -1"]),
    ("bench spmv --blocks 0", ["bench", "spmv", "--blocks", "0,2"], ["--blocks '0,2'"]),
    ("bench spmv-blocks --seed -1", ["bench", "spmv-blocks", "--seed", "-1"], ["--seed -1"]),
    ("fusion-rules --budget 1e6", ["fusion-rules", "--out", "r.json", "--budget", "1e6"],
     ["--budget 1e6", "277.8 h"]),
    ("fusion-rules --threshold 0", ["fusion-rules", "--out", "r.json", "--threshold", "0"],
     ["--threshold 0.0"]),
    ("search --seed -1", ["search", "--seed", "-1"], ["--seed -1"]),
    ("search --max-acc-drop nan", ["search", "--max-acc-drop", "nan"], ["--max-acc-drop nan"]),
    ("search --study ''", ["search", "--study", ""], ["--study ''"]),
    ("search --storage ''", ["search", "--storage", ""], ["--storage is empty"]),
    ("search --report ''", ["search", "--report", ""], ["--report ''", "path"]),
    ("evaluate --out ''", [*EVALUATE, "--out", ""], ["--out ''"]),
    ("evaluate --index-bytes 3e9", [*EVALUATE, "--index-bytes", "3000000000"],
     ["--index-bytes 3000000000", "1, 2, 4 or 8"]),
    ("evaluate --model ''", ["evaluate", "--model", "", "--hw", "a100"], ["--model ''"]),
    ("sweep --workers 0", ["sweep", "--model", "toy_hybrid", "--hw", "a100", "--vary",
                           "batch=1,2", "--evaluator", "simulate", "--workers", "0", "--out",
                           "s.parquet"], ["--workers 0"]),
    ("study --threshold inf", ["study", "feature-overhead", "--threshold", "inf", "--out", "r"],
     ["--threshold inf"]),
    ("accuracy --lr inf", [*ACCURACY, "--lr", "inf"], ["--lr inf"]),
    ("accuracy --dense-epochs 1e9", [*ACCURACY, "--dense-epochs", "1e9"],
     ["--dense-epochs 1e9", "at most 10,000"]),
    ("workloads export --img-size 0", ["workloads", "export", "convnext_tiny", "--img-size",
                                       "0"], ["--img-size 0"]),
]


@pytest.mark.parametrize("case, argv, needles", OPTIONS, ids=[c[0] for c in OPTIONS])
def test_an_option_out_of_its_range_or_form_is_refused(case, argv, needles, tmp_path,
                                                       monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(argv, tmp_path, capsys)
    assert all(n in line for n in needles), line


def test_an_absurd_repeat_count_is_refused_with_the_estimate(tmp_path, monkeypatch, capsys):
    """`bench spmv-blocks --repeats 1e9` allocated a repeats x blocks array and died of a
    MemoryError; now the memory and time are estimated before anything is allocated."""
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    line = _refused(["bench", "spmv-blocks", "--repeats", "1e9", "--out", "b.parquet"],
                    tmp_path, capsys)
    assert time.perf_counter() - start < 60
    # The largest BeBOP matrix at the default --max-dim 2**17: 131,072 rows of 34 nonzeros,
    # 17,826 blocks of 250; 1e9 repeats x 17,826 blocks x 8 bytes = 132,812 GiB (plus the
    # matrix, 80 bytes a nonzero); each repeat at least 50 us: 5e4 s per matrix.
    assert "--repeats 1,000,000,000" in line and "4,456,448 nonzeros" in line
    assert "17,826 blocks" in line and "132,814.4 GiB" in line
    assert "at least 5e+04 s" in line and "give --repeats of at most" in line


def test_a_max_dim_beyond_memory_is_refused_before_planning(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    line = _refused(["bench", "spmv", "--max-dim", str(2**30), "--budget", "30s", "--out",
                     "sp"], tmp_path, capsys)
    assert time.perf_counter() - start < 60
    assert f"--max-dim {2**30:,}" in line and "give at most" in line
    line = _refused(["bench", "spmv-blocks", "--max-dim", str(2**30), "--out", "b.parquet"],
                    tmp_path, capsys)
    assert "--max-dim" in line and "GiB" in line


def test_whole_models_of_a_trace_without_a_timm_model_are_refused(tmp_path, monkeypatch,
                                                                   capsys):
    """`--whole-models-only` on a hand-written trace timed nothing and exited 0 with an error
    row; now it is refused before any work."""
    pytest.importorskip("torch")
    pytest.importorskip("timm")
    monkeypatch.chdir(tmp_path)
    for option in ("--whole-models-only", "--whole-models"):
        line = _refused([*MEASURE, option, "--out", "m.parquet"], tmp_path, capsys)
        assert option in line and "toy_hybrid is no timm model" in line, line


def test_the_longest_budget_is_a_day():
    assert MAX_BUDGET_S == 24 * 3600


# --- the budget of dse measure is honoured ------------------------------------------------------


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("total, first_round, rounds, later", [
    (100.0, 25.0, 4, 3),   # the first round took its share: every later round fits
    (100.0, 27.0, 4, 3),   # a little past its share: 73 / 27 = 2.7 rounds, to the nearest, 3
    (100.0, 40.0, 4, 2),   # 60 / 40 = 1.5: two more (the run ends 20 s past, half a round)
    (100.0, 70.0, 4, 0),   # 30 / 70 = 0.43: no time for another
    (100.0, 150.0, 4, 0),  # the trace's own shapes alone took more than the budget
    (100.0, 10.0, 1, 0),   # one round asked
])
def test_later_rounds_run_only_while_the_budget_has_room(total, first_round, rounds, later):
    clock = _Clock()
    budget = Budget(total, clock)
    clock.now = first_round
    assert rounds_within(budget, first_round, rounds) == later


def test_measure_runs_fewer_rounds_when_the_budget_has_no_room(tmp_path):
    """The trace's own shapes are always timed; the later rounds only while the budget has room
    for them. A clock that advances 3 s a read: the budget starts at 0, the first round at 3
    and ends at 6; sampling looks at t = 9, past its share (10 / 4 = 2.5 s), and stops; the
    round took 12 - 3 = 9 s and at t = 15 the 10 s budget has none left: 1 of the 4 rounds
    asked runs, where every round ran before (a run four times as long as the first)."""
    pytest.importorskip("torch")
    from dse.measure.measure import measure
    from dse.measure.probe import probe_spec_toml
    from tests.test_measure_run import FAST, TickClock
    from tests.test_probe import _result

    spec = tmp_path / "host.toml"
    spec.write_text(probe_spec_toml(_result()))
    result = measure("toy_hybrid", str(spec), ["block4@87.5%"], [1], budget_s=10,
                     clock=TickClock(3.0), method=FAST, threads=1, rounds=4, vector_ops=False)
    assert result.provenance["rounds_asked"] == 4 and result.provenance["rounds"] == 1
    assert result.sampled_configs == 0
    assert set(result.frame["round"]) == {0}
    assert "(1 of the 4 asked: the budget had no room for the others)" in result.summary_text()


# --- 4. paths checked before any work ---------------------------------------------------------

UNWRITABLE = "/proc"  # unwritable even for root, where os.access says yes

OUTPUTS = [
    ("evaluate", [*EVALUATE, "--out", f"{UNWRITABLE}/x.csv"]),
    ("simulate", [*SIMULATE, "--out", f"{UNWRITABLE}/x.csv"]),
    ("simulate --report", [*SIMULATE, "--report", f"{UNWRITABLE}/r"]),
    ("hw probe", ["hw", "probe", "--out", f"{UNWRITABLE}/x.toml"]),
    ("measure", [*MEASURE, "--out", f"{UNWRITABLE}/x.parquet"]),
    ("bench spmv", ["bench", "spmv", "--out", f"{UNWRITABLE}/x"]),
    ("bench spmv-blocks", ["bench", "spmv-blocks", "--out", f"{UNWRITABLE}/x.parquet"]),
    ("calibrate spmv-cnn", ["calibrate", "--estimator", "spmv-cnn", "--validate", "--out",
                            f"{UNWRITABLE}/x.json"]),
    ("calibrate", ["calibrate", "--validate", "--out", f"{UNWRITABLE}/x.json"]),
    ("accuracy", [*ACCURACY, "--out", f"{UNWRITABLE}/x.csv"]),
    ("accuracy --work-dir", [*ACCURACY, "--work-dir", f"{UNWRITABLE}/work"]),
    ("fusion-rules", ["fusion-rules", "--out", f"{UNWRITABLE}/x.json"]),
    ("compare", ["compare", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                 "--report", f"{UNWRITABLE}/r"]),
    ("sweep", ["sweep", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4", "--vary",
               "batch=1,2", "--out", f"{UNWRITABLE}/x.parquet"]),
    ("report", ["report", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4", "--out",
                f"{UNWRITABLE}/r"]),
    ("search", ["search", "--report", f"{UNWRITABLE}/r"]),
    ("workloads export", ["workloads", "export", "convnext_tiny", "--out",
                          f"{UNWRITABLE}/x.json"]),
]


@pytest.mark.skipif(not Path(UNWRITABLE).is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("case, argv", OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_an_unwritable_output_is_refused_before_any_work(case, argv, tmp_path, monkeypatch,
                                                         capsys):
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    line = _refused(argv, tmp_path, capsys)
    assert time.perf_counter() - start < 60  # fusion-rules would run for 30 minutes
    assert f" {UNWRITABLE}/" in line and f"cannot write in {UNWRITABLE}" in line, line
    assert "give a writable folder" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        line = _refused(["calibrate", "--validate", "--out", "ro/m.json"], tmp_path, capsys)
    finally:
        folder.chmod(0o755)
    assert "--out ro/m.json" in line


INPUTS = [
    ("report --accuracy-table", ["report", "--model", "toy_hybrid", "--hw", "a100", "--format",
                                 "2:4", "--accuracy-table", "gone.csv", "--out", "r"],
     "--accuracy-table gone.csv"),
    ("search --space", ["search", "--space", "gone.toml"], "--space gone.toml"),
    ("workloads export --sparsity-from", ["workloads", "export", "convnext_tiny",
                                          "--sparsity-from", "gone.pt"],
     "--sparsity-from gone.pt"),
    ("accuracy --checkpoint", [*ACCURACY, "--checkpoint", "gone.pt"], "--checkpoint gone.pt"),
    ("calibrate --data", ["calibrate", "--validate", "--data", "gone.parquet"], "gone.parquet"),
    ("evaluate --calibrated", [*EVALUATE, "--calibrated", "gone.json"], "gone.json"),
]


@pytest.mark.parametrize("case, argv, needle", INPUTS, ids=[c[0] for c in INPUTS])
def test_a_missing_input_is_refused_before_any_work(case, argv, needle, tmp_path, monkeypatch,
                                                    capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(argv, tmp_path, capsys)
    assert needle in line and ("no such" in line or "give" in line), line


# --- an option is honoured: dse report charts every --hw ------------------------------------------


def test_report_charts_every_hardware_it_is_given(tmp_path, monkeypatch, capsys):
    """`report --hw a100,h100` drew only the first; now each accelerator gets its four charts,
    each on its own figures: a memory-bound op's attained FLOP/s on the per-layer roofline is
    its intensity times that accelerator's DRAM bandwidth, from the spec."""
    monkeypatch.chdir(tmp_path)
    assert run_cli(["report", "--model", "toy_hybrid", "--hw", "a100,h100", "--format", "2:4",
                    "--out", "rep"]) == 0
    assert "8 charts, 4 for each of 2 accelerators" in capsys.readouterr().out
    for name in ("a100-40gb", "h100-sxm"):
        for chart in ("sparsity-roofline", "roofline", "bound-mix", "feature-share"):
            assert (tmp_path / "rep" / f"{chart}-{name}.svg").is_file()
        layers = pd.read_csv(tmp_path / "rep" / f"roofline-{name}.csv")
        ops = layers[(layers["series"] == "op") & (layers["bound"] == "memory")]
        assert len(ops) and set(ops["hardware"]) == {name}
        bandwidth = accelerator_models.load(name).dram_bandwidth_bytes_per_s
        assert ops["flops_per_s"].to_numpy() == pytest.approx(
            ops["intensity"].to_numpy() * bandwidth, rel=1e-9)
