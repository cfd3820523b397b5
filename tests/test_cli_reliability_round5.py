"""Reliability, fifth round (issue 26): ``dse measure --budget 5s`` ran 15 s on a 2-core VM.

Why: the trace's own shapes are always timed once, and on that VM (which reports a 480 MiB
last-level cache) every cold call first reads a 1 GB flush buffer (57 ms; five calls a timing at
least), and the buffer itself takes 2 s to set up: 19 timings of toy_hybrid cannot take less
than 7.5 s. Now the budget is checked against that floor before the first kernel (the flush's
cost estimated on a small buffer before the large one is set up, then measured), and, once three
kernels are timed, against the round's pace: a run that would end past 1.5 times the budget
stops there, naming the budget it needs. Tests check the arithmetic with hand-counted numbers
and injected clocks, never wall-clock timing.

Then the defects a hand fuzz of the newest options found, each with its regression test.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dse.measure.budget import (
    OVERRUN_TOLERANCE,
    check_first_round_fits,
    check_first_round_pace,
    first_round_floor_s,
)
from tests.cli_run import run_cli
from tests.test_disk_full import device  # noqa: F401 (the small tmpfs fixture)

# --- 1. the budget of dse measure bounds the run ----------------------------------------------


def test_the_first_rounds_floor_by_hand():
    # 19 cold timings x 5 calls x 60 ms flush = 5.7 s, plus 2 s to set up the flush buffer
    assert first_round_floor_s(19, 5, 0.06, setup_s=2.0) == pytest.approx(7.7)
    assert first_round_floor_s(19, 5, 0.06) == pytest.approx(5.7)
    assert first_round_floor_s(0, 5, 0.06) == 0.0
    assert first_round_floor_s(19, 5, 0.0) == 0.0  # CUDA: its flush is not priced


def test_a_budget_below_the_floor_is_refused_naming_what_fits():
    # 0.2 s of start-up + 7.7 s floor = 7.9 s > 5 s: refused; the least budget is ceil(7.9) = 8
    with pytest.raises(ValueError) as info:
        check_first_round_fits(5.0, 0.2, 19, 5, 0.06, setup_s=2.0)
    text = str(info.value)
    assert text.startswith("--budget 5 s: too short for the trace's own shapes")
    assert "19 cold timings of at least 5 calls" in text and "60 ms cache flush" in text
    assert "give --budget 8s at the very least (16s" in text and "nothing was measured" in text
    assert "\n" not in text
    check_first_round_fits(7.9, 0.2, 19, 5, 0.06, setup_s=2.0)  # exactly fits: no refusal
    check_first_round_fits(600.0, 0.2, 19, 5, 0.06, setup_s=2.0)


@pytest.mark.parametrize("elapsed, done, budget, refused", [
    # 3 of 19 took 2.4 s: all 19 about 15.2 s; with 3 s of start-up 18.2 s in all
    (2.4, 3, 11.0, True),    # 18.2 > 1.5 x 11 = 16.5
    (2.4, 3, 13.0, False),   # 18.2 <= 19.5: it may overrun a little, and the summary says so
    (2.4, 2, 5.0, False),    # two kernels decide nothing
    (19.0, 19, 5.0, False),  # the round is done: nothing left to stop
])
def test_the_first_rounds_pace_stops_a_run_far_past_its_budget(elapsed, done, budget, refused):
    assert OVERRUN_TOLERANCE == 1.5
    args = (elapsed, done, 19, budget - 3.0, budget, 3.0)
    if not refused:
        check_first_round_pace(*args)
        return
    with pytest.raises(ValueError) as info:
        check_first_round_pace(*args)
    text = str(info.value)
    assert "3 of the 19 took 2.4 s, so all would take about 15.2 s" in text
    assert "give --budget 19s at the very least" in text and "nothing was written" in text


class TickClock:
    """A clock that advances ``step`` seconds every time it is read."""

    def __init__(self, step: float = 1.0):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        return value


@pytest.fixture(scope="module")
def host_toml(tmp_path_factory):
    pytest.importorskip("torch")
    from dse.measure.probe import probe_spec_toml
    from tests.test_probe import _result

    path = tmp_path_factory.mktemp("hw") / "host.toml"
    path.write_text(probe_spec_toml(_result()))
    return str(path)


def _no_kernel(*_args, **_kwargs):
    raise AssertionError("a kernel was timed before the budget was checked")


def test_measure_refuses_a_budget_below_the_floor_before_any_kernel(host_toml, monkeypatch):
    from dse.measure import kernels_cpu
    from dse.measure import measure as measuring
    from dse.measure.timing import TimingMethod

    # A 1 s flush and 0.5 s to set it up: toy_hybrid's 10 dense shapes and 9 vector ops are
    # 19 cold timings of 5 calls, 95 s; the run clock read once before the check (1 s).
    monkeypatch.setattr(measuring, "_flush_estimate", lambda: (0.5, 1.0))
    monkeypatch.setattr(kernels_cpu, "build_gemm", _no_kernel)
    monkeypatch.setattr(kernels_cpu, "build_vector", _no_kernel)
    method = TimingMethod(warmup=0, min_repeats=5, max_repeats=5, window=1)
    with pytest.raises(measuring.MeasureError) as info:
        measuring.measure("toy_hybrid", host_toml, [], [1], budget_s=60, clock=TickClock(),
                          method=method, threads=1, rounds=1, real_clock=TickClock())
    text = str(info.value)
    assert "19 cold timings of at least 5 calls, each after a 1e+03 ms cache flush" in text
    assert "take at least 95.5 s, 0.5 s of it to set up the flush" in text
    assert "give --budget 97s at the very least" in text  # ceil(1 + 95.5)


def test_cold_timings_count_shape_fallbacks_out():
    import formats
    import workloads
    from dse.measure import measure as measuring

    trace = workloads.load_trace("toy_hybrid")
    shapes = measuring._distinct_shapes(trace)
    vec = measuring._distinct_vector_ops(trace)
    dense = formats.parse("dense")
    assert (len(shapes), len(vec)) == (10, 9)
    assert measuring._cold_timings(shapes, vec, [dense], [1]) == 19
    assert measuring._cold_timings(shapes, vec, [dense], [1, 8]) == 38
    block = formats.parse("block16@75%")
    applies = sum(bool(block.applies_to(s.m, s.k)) for s in shapes.itertuples())
    assert 0 < applies < 10  # some of toy_hybrid's shapes cannot take 16x16 blocks
    assert measuring._cold_timings(shapes, vec, [dense, block], [1]) == 19 + applies
    assert measuring._cold_timings(shapes.iloc[:0], vec.iloc[:0], [dense], [1]) == 0


def test_measure_stops_when_its_pace_runs_far_past_the_budget(host_toml, monkeypatch):
    from dse.measure import measure as measuring
    from dse.measure.timing import TimingMethod

    # No flush cost (the floor passes); the pace clock advances 1 s a reading: after the
    # third of 19 kernels 3 s, all 19 about 19 s, plus the 2 s of start-up the run clock read
    # (its start, the floor check, the round's start): 21 s > 1.5 x 12 s = 18 s.
    monkeypatch.setattr(measuring, "_flush_estimate", lambda: (0.0, 0.0))
    monkeypatch.setattr(measuring._Flush, "_timed", lambda _self: 0.0)
    fast = TimingMethod(warmup=0, min_repeats=1, max_repeats=1, window=1, max_time_s=0.05)
    with pytest.raises(measuring.MeasureError) as info:
        measuring.measure("toy_hybrid", host_toml, [], [1], budget_s=12, clock=TickClock(),
                          method=fast, threads=1, rounds=1, real_clock=TickClock())
    assert "3 of the 19 took 3 s, so all would take about 19 s" in str(info.value)
    assert "give --budget 21s at the very least" in str(info.value)
    # With room for it (1.5 x 15 = 22.5 s) the same run completes.
    result = measuring.measure("toy_hybrid", host_toml, [], [1], budget_s=15, clock=TickClock(),
                               method=fast, threads=1, rounds=1, real_clock=TickClock())
    assert result.trace_configs == 19
    # An injected run clock without a real one judges no pace (its readings are not time).
    result = measuring.measure("toy_hybrid", host_toml, [], [1], budget_s=12, clock=TickClock(),
                               method=fast, threads=1, rounds=1)
    assert result.trace_configs == 19


def test_a_budget_refusal_on_the_command_line_is_one_line_and_leaves_nothing(
        host_toml, tmp_path, monkeypatch, capsys):
    from dse.measure import measure as measuring

    monkeypatch.setattr(measuring, "_flush_estimate", lambda: (2.0, 0.06))
    code = run_cli(["measure", "--model", "toy_hybrid", "--hw", host_toml, "--budget", "5s",
                    "--out", str(tmp_path / "m.parquet")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("dse: error: --budget 5 s: too short"), err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_wait_for_idle_as_long_as_the_budget_is_refused_before_waiting(tmp_path, monkeypatch,
                                                                        capsys):
    """Was: ``--wait-idle 100 --budget 5s`` waited 100 s on a busy machine, then measured."""
    pytest.importorskip("torch")
    from dse.measure import host

    monkeypatch.setattr(host, "wait_idle", _no_kernel)
    code = run_cli(["measure", "--model", "toy_hybrid", "--hw", "a100", "--wait-idle", "100",
                    "--budget", "5s", "--out", str(tmp_path / "m.parquet")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == ("dse: error: --wait-idle 100: the wait counts in --budget 5 s and "
                           "would leave nothing to measure; give a shorter --wait-idle or a "
                           "longer --budget")
    assert list(tmp_path.iterdir()) == []


# --- 3. the hand fuzz's defects ---------------------------------------------------------------


def _refused(capsys, argv: list[str], *needles: str) -> str:
    code = run_cli(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


LLAMA = ["--model", "llama-3-8b", "--hw", "h100-sxm"]


@pytest.mark.parametrize("argv, needle", [
    # Was: exit 0, the prefill at 64 tokens evaluated and the decode at 128 dropped unsaid.
    (["--phase", "decode", "--context", "128", "--phase", "prefill", "--context", "64"],
     "--phase given twice (decode, prefill)"),
    # Was: exit 0 at context 256.
    (["--phase", "decode", "--context", "128", "--context", "256"],
     "--context given twice (128, 256)"),
    (["--phase", "decode", "--context", "128", "--dtype", "fp16", "--dtype", "int8"],
     "--dtype given twice (fp16, int8)"),
    (["--phase", "decode", "--context", "128", "--kv-dtype", "fp8", "--kv-dtype", "int8"],
     "--kv-dtype given twice (fp8, int8)"),
    (["--phase", "decode", "--context", "128", "--weight-dtype", "int4", "--weight-group-size",
      "64", "--weight-group-size", "128"], "--weight-group-size given twice (64,"),
])
def test_an_option_of_one_value_given_twice_is_refused(argv, needle, tmp_path, monkeypatch,
                                                      capsys):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, ["evaluate", *LLAMA, *argv], needle, "give it once")
    assert list(tmp_path.iterdir()) == []


def test_the_same_value_twice_is_one_value(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = run_cli(["evaluate", *LLAMA, "--phase", "decode", "--context", "128", "--phase",
                    "decode", "--context", "128"])
    out = capsys.readouterr().out
    assert code == 0 and "model llama-3-8b.decode.128," in out


@pytest.mark.parametrize("argv, needle", [
    # Was: --epochs ignored, the kernel predictors trained for minutes, exit 0.
    (["--data", "h100-sxm", "--epochs", "3", "--out", "m.json"],
     "--epochs 3: only --estimator spmv-cnn trains in epochs and folds"),
    (["--data", "h100-sxm", "--folds", "3", "--validate"],
     "--folds 3: only --estimator spmv-cnn trains in epochs and folds"),
    # Was: --residual ignored by the SpMV estimator.
    (["--estimator", "spmv-cnn", "--residual", "monotone", "--validate"],
     "--residual monotone: the residual is the kernel predictors'"),
    # Was: --folds ignored without --validate.
    (["--estimator", "spmv-cnn", "--folds", "3", "--out", "m.json"],
     "--folds 3: folds are for --validate"),
])
def test_calibrate_refuses_an_option_the_estimator_would_ignore(argv, needle, tmp_path,
                                                               monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, ["calibrate", *argv], needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("table, needle", [
    # Was: exit 0 after the training, no comparison made and none said.
    ("model,variant,batch,median_s\n", "no row holds a measured median_s"),
    # Was: exit 0, the rows of no dense run compared with nothing.
    ("model,variant,batch,median_s\ndeit_small_patch16_224,weird_variant,1,0.001\n",
     "no measured row of variant dense_cudagraph or dense_eager"),
    # Was: refused only after 40 s of training.
    ("model,variant,batch,median_s\nnot_a_model,dense_eager,1,0.001\n",
     "row 0 has model = 'not_a_model', which is no shipped trace"),
])
def test_calibrate_checks_whole_model_tables_before_training(table, needle, tmp_path,
                                                            monkeypatch, capsys):
    from dse.calibrate import validate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.csv").write_text(table)
    monkeypatch.setattr(validate, "validated_predictions", _no_kernel)
    _refused(capsys, ["calibrate", "--data", "h100-sxm", "--validate", "--whole-models",
                      "h100-sxm=w.csv"], f"--whole-models w.csv: {needle}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.csv"]


def test_a_budget_spent_starting_up_says_so_without_cold_timings():
    # --whole-models-only: no cold timing, 2.5 s of start-up against a 2 s budget
    with pytest.raises(ValueError) as info:
        check_first_round_fits(2.0, 2.5, 0, 5, 0.06)
    assert str(info.value) == (
        "--budget 2 s: starting took 2.5 s, before the first of the trace's configurations, "
        "which are always timed once; give --budget 3s at the very least (6s leaves room for "
        "timing them); nothing was measured")


def test_a_kernel_too_large_for_memory_is_refused_with_the_batch_that_fits():
    """Was: ``dse measure --batch 16777216`` asked torch for 464 GB: a RuntimeError traceback
    after the start-up. toy_hybrid's largest kernel is block1.dwconv (64 groups of M=1, K=9 over
    N=256 a sample): (64 x (9 + 1) x 256) = 163,840 elements a sample plus 576 weights, twice
    (the copies), 4 bytes each: 1,315,328 bytes at batch 1."""
    import workloads
    from dse.measure.measure import MeasureError, check_memory, kernel_bytes

    trace = workloads.load_trace("toy_hybrid")
    assert kernel_bytes(trace, 1) == (1_315_328, "block1.dwconv")
    assert kernel_bytes(trace, 10) == (8 * (163_840 * 10 + 576), "block1.dwconv")
    memory = 2 * 10 * 1_315_328  # half of it: 8 x (163,840 b + 576) <= that for b <= 10
    check_memory(trace, [1, 10], memory=memory)
    with pytest.raises(MeasureError) as info:
        check_memory(trace, [1, 11], memory=memory)
    assert str(info.value).startswith("--batch 11: the largest kernel of toy_hybrid at this "
                                      "batch (block1.dwconv) needs about")
    assert str(info.value).endswith("give --batch 10 or less")
    with pytest.raises(MeasureError, match="no batch fits"):
        check_memory(trace, [1], memory=1_000_000)


def test_measure_refuses_a_batch_beyond_memory_before_any_kernel(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from dse.measure import kernels_cpu

    monkeypatch.setattr(kernels_cpu, "build_gemm", _no_kernel)
    line = _refused(capsys, ["measure", "--model", "toy_hybrid", "--hw", "a100", "--batch",
                             "16777216", "--out", str(tmp_path / "m.parquet")],
                    "--batch 16,777,216: the largest kernel of toy_hybrid", "or less")
    assert "Traceback" not in line
    assert list(tmp_path.iterdir()) == []


def test_exporting_a_language_model_says_what_it_is(tmp_path, monkeypatch, capsys):
    """Was: "unknown timm model 'llama-3-8b'", after importing timm."""
    monkeypatch.chdir(tmp_path)
    _refused(capsys, ["workloads", "export", "llama-3-8b", "--out", "t.json"],
             "llama-3-8b is a language model, not a timm model",
             "dse evaluate --model llama-3-8b --phase prefill|decode --context TOKENS")
    assert list(tmp_path.iterdir()) == []


# --- 2. signals at a seeded point of a search, on SQLite and on PostgreSQL --------------------
# The audit found SIGKILL of search tested on both (tests/test_search_studies.py,
# tests/test_search_shared.py) but SIGINT of a real search process on neither: only a raised
# KeyboardInterrupt inside the process (tests/test_result_sets.py).

SIGNAL_SEED = 26


def _done_chunks(storage: str, study: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(storage)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(
                "SELECT count(*) FROM dse_chunks WHERE state = 'done' AND study = :study"),
                {"study": study}).scalar() or 0)
    except sa.exc.SQLAlchemyError:  # tables not created yet
        return 0
    finally:
        engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_a_signalled_search_keeps_its_work_and_resumes_to_the_full_result(backend, sig,
                                                                         tmp_path, request):
    """SIGINT or SIGKILL after a seeded number of finished chunks: SIGINT exits 130 with one
    line giving the --resume command; no result file exists under its final name; --resume
    then completes the study to the full result, every design once."""
    import pandas as pd

    from tests.search_spaces import space_text, write_space

    space = write_space(tmp_path, space_text(
        '[hardware.vary]\n"dram_bandwidth_bytes_per_s" = { min = 0.5e12, max = 4.0e12, '
        'steps = 300 }', 'list = ["2:4", "1:8"]', '["convnext_tiny"]'))
    out = tmp_path / "out"
    study = f"sig-{backend}-{sig.lower()}"
    if backend == "sqlite":
        storage, argv = f"sqlite:///{out / 'study.db'}", []
    else:
        storage = request.getfixturevalue("postgres_url")
        argv = ["--storage", storage]
    after = random.Random(f"{SIGNAL_SEED}:{backend}:{sig}").randint(5, 60)
    process = subprocess.Popen(
        [sys.executable, "-m", "dse", "search", "--space", str(space), "--target",
         "1.3x_over_2:4", "--study", study, "--out", str(out), "--chunk-points", "1", *argv],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    deadline = time.monotonic() + 120
    while _done_chunks(storage, study) < after:
        assert process.poll() is None, "the search ended before the signal"
        assert time.monotonic() < deadline, "the search made no progress"
        time.sleep(0.05)
    os.killpg(process.pid, getattr(signal, sig))
    _, err = process.communicate(timeout=120)
    finals = sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) \
        if out.exists() else []
    assert not {"results.parquet", "ranked.parquet", "summary.json"} & set(finals), finals
    if sig == "SIGINT":
        lines = [line for line in err.splitlines() if line.strip()
                 and not line.startswith(("dse: searched", "dse: evaluated", "study "))]
        assert process.returncode == 130, err
        assert "Traceback" not in err, err
        assert any("--resume" in line for line in lines), err
    resumed = subprocess.run(
        [sys.executable, "-m", "dse", "search", "--resume", "--study", study, "--out", str(out),
         *argv], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    results = pd.read_parquet(out / "results.parquet")
    keys = results[["model", "hw_point", "format", "batch"]].astype(str)
    assert not keys.duplicated().any()
    assert len(results) == 300 * (2 + 1)  # every hardware point: the two formats and dense


def test_a_bench_budget_too_short_names_the_budget_as_given(tmp_path, monkeypatch, capsys):
    """Was: "--budget 1.0: 10 s of it go to writing ..." (the seconds, not the budget)."""
    pytest.importorskip("scipy")
    monkeypatch.chdir(tmp_path)
    _refused(capsys, ["bench", "spmv", "--budget", "1s", "--out", "b"],
             "--budget 1 s: 10 s of it go to writing the results and the report, which leaves "
             "nothing to measure; give at least 30s")
    assert list(tmp_path.iterdir()) == []


def _canned_blocks(monkeypatch):
    """dse bench spmv-blocks with its measuring replaced by two blocks of one matrix."""
    import pandas as pd

    from dse.spmv import blocks

    def run(specs, budget, **_kwargs):
        matrices = pd.DataFrame({"matrix": [0], "source": ["synthetic"], "tsc_hz": [2e9],
                                 "instrumented_s": [2e-4], "spmv_s": [1e-4],
                                 "reference_s": [1e-3]})
        return blocks.BlockDataset(matrices, pd.DataFrame({"matrix": [0, 0], "block": [0, 1],
                                                           "block_s": [1e-6, 2e-6]}))

    monkeypatch.setattr(blocks, "run_block_benchmark", run)


BLOCKS = ["bench", "spmv-blocks", "--budget", "5s", "--max-dim", "1024", "--models",
          "toy_hybrid", "--repeats", "3", "--out", "b.parquet"]


def test_bench_spmv_blocks_writes_its_dataset_and_provenance_as_one_set(tmp_path, monkeypatch,
                                                                       capsys):
    """Was: b.parquet written, then b.json; a failure between them (a full device, Ctrl-C)
    left the dataset without its provenance."""
    pytest.importorskip("scipy")
    import errno

    from dse import output

    monkeypatch.chdir(tmp_path)
    _canned_blocks(monkeypatch)
    real = output.write_atomic

    def full_on_the_second(path, write):
        if Path(path).suffix == ".json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, write)

    monkeypatch.setattr(output, "write_atomic", full_on_the_second)
    code = run_cli(BLOCKS)
    err = capsys.readouterr().err
    assert code == 2 and "No space left on device" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no dataset, no temporary file
    monkeypatch.setattr(output, "write_atomic", real)
    assert run_cli(BLOCKS) == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "b.parquet"]


def test_bench_spmv_blocks_refuses_a_folder_where_its_provenance_goes(tmp_path, monkeypatch,
                                                                     capsys):
    pytest.importorskip("scipy")
    from dse.spmv import blocks

    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.json").mkdir()
    monkeypatch.setattr(blocks, "run_block_benchmark", _no_kernel)
    _refused(capsys, BLOCKS, "--out b.parquet: b.json, where its provenance goes, is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


@pytest.mark.parametrize("free_pages", [0, 2])
def test_bench_spmv_blocks_on_a_full_device_leaves_nothing(
        free_pages, device, tmp_path, monkeypatch, capsys):  # noqa: F811 (the fixture)
    """The audit found no full-device test of dse bench spmv-blocks (tests/test_disk_full.py
    covers every other command that writes but bench): on a small tmpfs with no room, or room
    for the dataset and not its provenance, it fails in one line naming the path and leaves
    nothing."""
    pytest.importorskip("scipy")
    from tests.test_disk_full import PAGE, _refusal

    if device is None:
        pytest.skip("no tmpfs can be mounted here (needs root)")
    monkeypatch.chdir(tmp_path)
    _canned_blocks(monkeypatch)
    out = device.root / "out"
    out.mkdir()
    device.leave(free_pages * PAGE)
    line = _refusal([*BLOCKS[:-1], str(out / "b.parquet")], capsys)
    assert "no space left" in line.lower() and str(out) in line, line
    assert device.files() == {"out"}, f"left behind: {sorted(device.files())}"
