"""Never a silent wrong answer: bad inputs, interrupts and broken outputs (issue 13, parts 2-3).

Every bad input below exits with code 2 and one line on stderr naming the input, with no
traceback and nothing left in the working folder; an interrupt (Ctrl-C) exits with 130 and one
line, leaving no partial file; output that cannot be written is one line and a non-zero exit.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import dse
import workloads
from dse.cli import main
from workloads import TRACES_DIR, Trace, TraceError

SWEEP = ["sweep", "--model", "toy_hybrid", "--hw", "a100", "--out", "s.parquet"]
ACCURACY = ["accuracy", "--model", "test_convnext", "--work-dir", "work", "--out", "a.csv"]


def _trace(name: str, **changes) -> Path:
    """toy_hybrid with its first op (a prunable conv reading the input) changed."""
    document = json.loads((TRACES_DIR / "toy_hybrid.json").read_text())
    document["ops"][0].update(changes)
    path = Path(name)
    path.write_text(json.dumps(document))
    return path


def _spec(name: str, text: str) -> Path:
    path = Path(name)
    path.write_text(text)
    return path


def _garbage(name: str) -> Path:
    path = Path(name)
    path.write_bytes(b"not a checkpoint\n")
    return path


# (case, argv, files the case writes first (name -> maker), needle in the one line)
CASES = [
    # 2. sizes: batch beyond int64 and beyond exact float range
    ("batch beyond int64", ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format",
                            "2:4", "--batch", "99999999999999999999999"], {}, "--batch"),
    ("batch beyond 2**53", ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format",
                            "2:4", "--batch", "9007199254740993"], {}, "16,777,216"),
    ("batch 2**24 + 1", ["simulate", "--model", "toy_hybrid", "--hw", "a100", "--format",
                         "2:4", "--batch", "16777217"], {}, "--batch"),
    # trace values that overflowed int64 in workloads/trace.py
    ("input_elems 1e30", ["evaluate", "--model", "t.json", "--hw", "a100", "--format", "2:4"],
     {"t.json": lambda: _trace("t.json", input_elems=1e30)}, "'input_elems'"),
    ("m = k = 2**40", ["evaluate", "--model", "t.json", "--hw", "a100", "--format", "2:4"],
     {"t.json": lambda: _trace("t.json", m=2**40, k=2**40, weight_elems=2**80)},
     "'weight_elems'"),
    ("m*k*n over 2**53", ["evaluate", "--model", "t.json", "--hw", "a100", "--format", "2:4"],
     {"t.json": lambda: _trace("t.json", m=2**40, k=2**10, weight_elems=2**50)},
     "dense FLOPs"),
    ("n over 2**29", ["workloads", "show", "t.json"],
     {"t.json": lambda: _trace("t.json", n=2**30)}, "'n'"),
    ("vector_flops 1e300", ["evaluate", "--model", "t.json", "--hw", "a100", "--format", "2:4"],
     {"t.json": lambda: _trace("t.json", vector_flops=1e300)}, "'vector_flops'"),
    ("input_shape 2**30 elements", ["evaluate", "--model", "t.json", "--hw", "a100", "--format",
                                    "2:4"],
     {"t.json": lambda: _trace_shape("t.json", [3, 2**15, 2**15])}, "input_shape"),
    # a dimension that does not apply to the format
    ("format.sparsity on N:M", [*SWEEP, "--format", "2:4", "--vary",
                                "format.sparsity=0.5,0.9"], {}, "format.sparsity"),
    ("format.block on unstructured", [*SWEEP, "--format", "unstructured@0.5", "--vary",
                                      "format.block=4,8"], {}, "format.block"),
    # absurd sweeps: refused with the size and the limit, before any work
    ("sweep 10^6 x 10^6", [*SWEEP, "--format", "2:4", "--vary", "batch=1..1000000:1000000",
                           "--vary", "hw.dram_bandwidth_bytes_per_s=1e12..8e12:1000000"], {},
     "2,000,000"),
    ("sweep range of 10^12 points", [*SWEEP, "--format", "2:4", "--vary",
                                     "hw.dram_bandwidth_bytes_per_s=1e12..8e12:1000000000000"],
     {}, "1000000000000 points"),
    ("sweep batch above 2**24", [*SWEEP, "--format", "2:4", "--vary", "batch=1,99999999999"],
     {}, "--vary batch"),
    ("sweep of too many simulations", [*SWEEP, "--format", "2:4", "--evaluator", "simulate",
                                       "--vary", "batch=1..1000:1000", "--vary",
                                       "hw.dram_bandwidth_bytes_per_s=1e12..8e12:1000"], {},
     "100,000"),
    # unknown metric
    ("accuracy-table --metric top5", ["accuracy-table", "--metric", "top5"], {}, "top1"),
    ("accuracy-table bad --format", ["accuracy-table", "--model", "swin_tiny", "--format",
                                     "3:2"], {}, "3:2"),
    # messages naming the input and the rule
    ("N:M beyond 2**64", ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format",
                          "1:99999999999999999999"], {}, "N:M needs 1 <= N < M"),
    ("N:M of 5,000 digits", ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format",
                             "1:" + "9" * 5000], {}, "N:M needs"),
    ("block of 5,000 digits", ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format",
                               "block" + "9" * 5000 + "@0.5"], {}, "block size"),
    ("--set pattern on v100", ["hw", "show", "v100", "--set", "sparse_tensor.patterns=2:4"], {},
     "--set sparse_tensor.patterns=2:4"),
    ("--set pattern M too large", ["hw", "show", "a100", "--set",
                                   "sparse_tensor.patterns=1:99999999999999999999"], {},
     "--set sparse_tensor.patterns"),
    ("extends an unknown GPU", ["hw", "show", "mine.toml"],
     {"mine.toml": lambda: _spec("mine.toml", 'extends = "no_such_gpu"\nname = "mine"\n')},
     "mine.toml"),
    ("extends a missing file", ["hw", "show", "mine.toml"],
     {"mine.toml": lambda: _spec("mine.toml", 'extends = "gone/gpu.toml"\n')}, "mine.toml"),
    # dse accuracy: every option checked before any work; nothing created
    ("accuracy --lr -1", [*ACCURACY, "--lr", "-1"], {}, "--lr"),
    ("accuracy --lr nan", [*ACCURACY, "--lr", "nan"], {}, "--lr"),
    ("accuracy --seed -1", [*ACCURACY, "--seed", "-1"], {}, "--seed"),
    ("accuracy --img-size 100000", [*ACCURACY, "--img-size", "100000"], {}, "--img-size"),
    ("accuracy bad --dataset", [*ACCURACY, "--dataset", "nowhere"], {}, "--dataset nowhere"),
    ("accuracy missing --checkpoint", [*ACCURACY, "--checkpoint", "gone.pt"], {},
     "--checkpoint gone.pt"),
    ("accuracy bad --patterns", [*ACCURACY, "--patterns", "block99"], {}, "--patterns"),
    ("accuracy bad --levels", [*ACCURACY, "--levels", "0.5,1.5"], {}, "--levels"),
    ("accuracy --work-dir is a file", [*ACCURACY[:-4], "--work-dir", "w.txt", "--out", "a.csv"],
     {"w.txt": lambda: _spec("w.txt", "")}, "--work-dir"),
]


def _trace_shape(name: str, shape: list[int]) -> Path:
    document = json.loads((TRACES_DIR / "toy_hybrid.json").read_text())
    document["input_shape"] = shape
    path = Path(name)
    path.write_text(json.dumps(document))
    return path


def _run(argv: list[str]) -> int:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return 0 if code is None else code


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("case, argv, makes, needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_leaves_nothing(case, argv, makes, needle, tmp_path,
                                                  monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for make in makes.values():
        make()
    before = _files(tmp_path)
    code = _run(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert needle in lines[0], lines[0]
    assert _files(tmp_path) == before  # no file or folder left behind


def test_unreadable_checkpoint_is_one_line_and_creates_no_work_dir(tmp_path, monkeypatch,
                                                                   capsys):
    pytest.importorskip("timm")
    monkeypatch.chdir(tmp_path)
    _garbage("bad.pt")
    code = _run([*ACCURACY, "--checkpoint", "bad.pt", "--train-limit", "16"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--checkpoint bad.pt" in lines[0], err
    assert _files(tmp_path) == {"bad.pt"}


# --- the Python API refuses the same sizes ------------------------------------------------------


@pytest.mark.parametrize("batch", [2**24 + 1, 9007199254740993, 99999999999999999999999])
def test_api_refuses_batches_beyond_the_range(batch):
    with pytest.raises(dse.EvaluationError, match="16,777,216"):
        dse.evaluate("toy_hybrid", "a100", "2:4", batches=batch)
    with pytest.raises(TraceError, match="16,777,216"):
        workloads.load_trace("toy_hybrid").at_batch(batch)


def test_largest_batch_is_exact():
    trace = workloads.load_trace("toy_hybrid")
    scaled = trace.at_batch(workloads.MAX_BATCH)
    assert int(scaled["n"].iloc[0]) == int(trace.ops["n"].iloc[0]) * 2**24
    table = dse.evaluate(trace, "a100", "2:4", batches=workloads.MAX_BATCH)
    assert (table["batch"] == 2**24).all() and table["latency_s"].map(math.isfinite).all()


def test_the_ranges_keep_every_scaled_count_exact():
    assert workloads.MAX_PER_SAMPLE * workloads.MAX_BATCH == 2**53 == workloads.MAX_COUNT


def test_trace_at_the_limits_loads():
    document = json.loads((TRACES_DIR / "toy_hybrid.json").read_text())
    document["ops"][0]["output_elems"] = 2**29
    trace = Trace.from_records("edge", document["input_shape"], document["ops"])
    assert int(trace.at_batch(2**24)["output_elems"].iloc[0]) == 2**53


# --- sweeps: no relabelled copies, progress --------------------------------------------------


def test_format_dimension_tags_only_the_formats_it_moves():
    from dse.explore.sweep import parse_vary, sweep

    frame = sweep([workloads.load_trace("toy_hybrid")], ["a100"], [], ["2:4", "block4@50%"],
                  [parse_vary("format.sparsity=0.5,0.9")])
    tagged = frame.dropna(subset=["vary.format.sparsity"])
    assert set(tagged["format"]) == {"block4@50%", "block4@90%"}
    assert frame.loc[frame["format"] == "2:4", "vary.format.sparsity"].isna().all()


def test_sweep_reports_progress_from_the_start():
    from dse.explore.sweep import parse_vary, sweep

    heard = []
    sweep([workloads.load_trace("toy_hybrid")], ["a100"], [], ["2:4"],
          [parse_vary("hw.dram_bandwidth_bytes_per_s=1e12..2e12:3")],
          progress=lambda done, total, unit: heard.append((done, total, unit)))
    assert heard[0][0] == 0 and heard[-1] == (6, 6, "designs")


# --- interrupts: rc 130, one line, no partial files ------------------------------------------


def _interrupt(argv: list[str], cwd: Path, after: str, timeout: float = 120.0):
    """Run ``dse argv`` in its own process group; once stderr shows ``after``, press Ctrl-C
    (SIGINT to the whole group, as a terminal does). Returns (exit code, stderr lines)."""
    process = subprocess.Popen([sys.executable, "-m", "dse", *argv], cwd=cwd, text=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if after in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while not seen.wait(0.2):
            assert process.poll() is None and time.monotonic() < deadline, \
                f"never saw {after!r}: {lines}"
        time.sleep(0.5)
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:  # a hang: leave no process behind
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    reader.join(timeout=10)
    return code, lines


INTERRUPTS = [
    ("sweep", [*SWEEP[:-2], "--format", "2:4", "--vary", "batch=1..1000:1000", "--vary",
               "hw.dram_bandwidth_bytes_per_s=1e12..8e12:1000", "--out", "s.parquet"],
     "dse: swept"),
    ("sweep, simulated on two workers",
     ["sweep", "--model", "convnext_base", "--hw", "a100", "--format", "2:4", "--vary",
      "batch=1..4096:64", "--evaluator", "simulate", "--workers", "2", "--out", "s.parquet"],
     "dse: simulated"),
    ("simulate", ["simulate", "--model", "convnext_base", "--hw", "a100", "--format", "2:4",
                  "--batch", "4096", "--buffer-bytes", "500000", "--out", "sim.csv",
                  "--timeline", "timeline.csv"], "dse: simulated"),
]


@pytest.mark.parametrize("case, argv, after", INTERRUPTS,
                         ids=["sweep", "sweep-simulated-workers", "simulate"])
def test_interrupt_is_one_line_130_and_no_partial_file(case, argv, after, tmp_path):
    code, lines = _interrupt(argv, tmp_path, after)
    text = "\n".join(lines)
    assert code == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    # Progress lines and the first run's compile note are not the error line.
    others = [line for line in lines if line.strip() and not line.startswith(after)
              and not line.startswith("dse: compiling the evaluator's kernels")]
    assert len(others) == 1 and "interrupted" in others[0], text
    assert _files(tmp_path) == set()


def test_an_interrupt_a_finalizer_swallowed_still_interrupts():
    """Ctrl-C that lands in a weakref callback (numba disposing of typing globals during garbage
    collection) cannot propagate from there; Python drops it. It must still stop the command."""
    import gc
    import weakref

    from dse.cli.main import _InterruptFlag

    class Thing:
        pass

    def finalizer(_):
        signal.raise_signal(signal.SIGINT)  # the handler runs inside the callback: dropped
        sum(range(1000))

    flag = _InterruptFlag()
    interrupted = False
    try:
        thing = Thing()
        ref = weakref.ref(thing, finalizer)
        del thing
        gc.collect()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            pass
    except KeyboardInterrupt:
        interrupted = True
    finally:
        flag.restore()
    assert ref() is None and flag.pressed and interrupted
    assert sys.unraisablehook is not flag._unraisable


# --- standard output that cannot be written ----------------------------------------------------


def _dse_shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"exec {sys.executable} -m dse {command}"], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case, redirect, needle", [
    ("full device", "> /dev/full", "No space left"),
    ("closed stdout", ">&-", "standard output is closed"),
])
def test_stdout_that_cannot_be_written_is_an_error(case, redirect, needle, tmp_path):
    if case == "full device" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    result = _dse_shell(f"hw list {redirect}", tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr


def test_broken_pipe_is_one_line_and_non_zero(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "dse", "hw", "show", "a100"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader goes away before dse writes
    err = process.stderr.read()
    code = process.wait(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Broken pipe" in lines[0] and "Traceback" not in err


def test_an_interrupt_resent_for_a_finalizer_does_not_outlive_the_run():
    """A KeyboardInterrupt a finalizer swallowed is sent again; if the run ends first (it
    already caught the interrupt and chose exit 130), the re-sent one must not land after
    main() returned, where it killed the process by SIGINT (exit status -2, seen once in CI)."""
    import time
    from types import SimpleNamespace

    from dse.cli.main import _InterruptFlag

    flag = _InterruptFlag()
    try:
        flag._unraisable(SimpleNamespace(exc_value=KeyboardInterrupt()))
    finally:
        flag.restore()  # at once: before the re-sent interrupt's 10 ms have passed
    time.sleep(0.1)  # a late interrupt would raise KeyboardInterrupt here
