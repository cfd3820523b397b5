"""The event-level simulator fanned out: sweeps in this process, on local processes and on a
real Dask LocalCluster give the same frame, each row equal to a direct ``simulate()``; `dse
sweep --dask` bad input; `dse search --evaluator simulate` and its --resume guard."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import accelerator_models
import dse
import formats
from dse.cli import main
from dse.explore import Simulator
from dse.explore.sweep import parse_vary, sweep
from dse.sim import fanout as sim_fanout
from dse.sim.fanout import LOCAL
from dse.sim.simulate import SimConfig, simulate
from tests.search_spaces import space_text, write_space
from workloads import load_trace

MODEL = "convnext_tiny"
FORMATS = ["2:4", "block16@87.5%"]
L2_SIZES = "1e6,4e7"  # 1 MB: tiles and spills; 40 MB: every op fits on chip
CONFIG = SimConfig(buffer="l2")
SIM_COLUMNS = ["roofline_latency_s", "roofline_speedup", "gap_s", "gap_launch_s",
               "gap_buffer_s", "gap_fill_drain_s", "kernels", "tiles", "sim_dram_bytes",
               "events", "evaluator"]


def _sweep(**kwargs) -> pd.DataFrame:
    varies = [parse_vary("batch=1,4"), parse_vary(f"hw.l2_bytes={L2_SIZES}")]
    return sweep([load_trace(MODEL)], ["a100"], [], FORMATS, varies, **kwargs)


def _spy(monkeypatch, name: str) -> list:
    """Count the calls of ``dse.sim.fanout.<name>`` (still calling it)."""
    calls = []
    real = getattr(sim_fanout, name)

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(sim_fanout, name, spy)
    return calls


@pytest.fixture(scope="module")
def in_process() -> pd.DataFrame:
    return _sweep(evaluator=Simulator(CONFIG, workers=1))


def test_simulated_sweep_rows_equal_direct_simulations(in_process):
    frame = in_process
    # 2 batches x 2 L2 sizes x (dense + 2 formats)
    assert len(frame) == 2 * 2 * 3
    for column in SIM_COLUMNS:
        assert column in frame.columns, column
    assert set(frame["evaluator"]) == {"simulate"}
    assert set(frame["format"]) == {"dense", *FORMATS}
    trace = load_trace(MODEL)
    cache: dict[tuple, object] = {}

    def direct(l2: float, fmt: str, batch: int):
        key = (l2, fmt, batch)
        if key not in cache:
            acc = accelerator_models.load("a100", [f"l2_bytes={l2!r}"])
            cache[key] = simulate(trace, acc, fmt, batch, "unfused", "gemm", CONFIG)
        return cache[key]

    for row in frame.to_dict("records"):
        l2, batch = row["vary.hw.l2_bytes"], int(row["batch"])
        own = direct(l2, row["format"], batch)
        dense = direct(l2, "dense", batch)
        where = (row["format"], batch, l2)
        assert row["latency_s"] == own.latency_s, where  # exact: same design, same number
        assert row["dense_latency_s"] == dense.latency_s, where
        assert row["speedup"] == dense.latency_s / own.latency_s, where
        summary = own.summary()
        for column in ("gap_s", "gap_launch_s", "gap_buffer_s", "gap_fill_drain_s", "kernels",
                       "tiles", "events"):
            assert row[column] == summary[column], (column, where)
        assert row["sim_dram_bytes"] == summary["dram_bytes"], where
        assert row["roofline_latency_s"] == own.roofline_latency_s, where
        assert row["latency_s"] >= row["roofline_latency_s"], where
    # The knob reached the simulator: a 1 MB L2 cuts ops into more tiles than 40 MB.
    tiles = frame.groupby("vary.hw.l2_bytes")["tiles"].sum()
    assert tiles[1e6] > tiles[4e7]


def test_simulated_sweep_keeps_the_roofline_columns(in_process):
    roofline = _sweep()
    assert "evaluator" not in roofline.columns
    sim = in_process
    assert list(sim.columns[:len(roofline.columns)]) == list(roofline.columns)
    pd.testing.assert_series_equal(sim["roofline_latency_s"], roofline["latency_s"],
                                   check_names=False)
    pd.testing.assert_series_equal(sim["roofline_speedup"], roofline["speedup"],
                                   check_names=False)
    changed = {"latency_s", "dense_latency_s", "speedup"}
    same = [c for c in roofline.columns if c not in changed]
    pd.testing.assert_frame_equal(sim[same], roofline[same])


def test_processes_and_dask_local_cluster_give_the_same_frame(in_process, monkeypatch):
    processes = _spy(monkeypatch, "_on_processes")
    on_dask = _spy(monkeypatch, "_on_dask")
    pool = _sweep(evaluator=Simulator(CONFIG, workers=2))
    assert len(processes) == 1 and not on_dask  # really on a process pool
    pd.testing.assert_frame_equal(pool, in_process, check_exact=True)

    started = time.monotonic()
    cluster = _sweep(evaluator=Simulator(CONFIG, workers=2, dask=LOCAL))
    assert len(on_dask) == 1 and on_dask[0][2] == LOCAL and on_dask[0][1] == 2
    pd.testing.assert_frame_equal(cluster, in_process, check_exact=True)
    assert time.monotonic() - started < 120


def _free_closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dse(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


SWEEP = ["sweep", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4", "--vary",
         "batch=1,4", "--out", "s.parquet"]


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_unreachable_dask_scheduler_is_one_line(tmp_path):
    address = f"tcp://127.0.0.1:{_free_closed_port()}"
    started = time.monotonic()
    result = _dse(*SWEEP, "--evaluator", "simulate", "--dask", address, cwd=tmp_path)
    took = time.monotonic() - started
    assert result.returncode == 2, (result.stdout, result.stderr)
    line = _one_line(result)
    assert line.startswith("dse: error: "), line
    assert address in line and "cannot reach a Dask scheduler" in line
    assert "dask scheduler" in line and "--dask alone" in line  # the fix
    assert list(tmp_path.iterdir()) == []  # no output file, no temporary file
    assert took < 60  # the connect timeout is 10 s


@pytest.mark.parametrize("fanout", [
    ["--workers", "2"],
    ["--dask"],
])
def test_a_design_that_fails_in_a_worker_is_one_line(tmp_path, fanout):
    # Each design's smallest tiles need more than 1000 bytes: every simulation fails.
    result = _dse(*SWEEP, "--evaluator", "simulate", "--buffer-bytes", "1000", *fanout,
                  cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines()[-1].startswith("dse: error: buffer of 1000 bytes")
    line = _one_line(result)
    assert "--buffer-bytes of at least" in line
    assert list(tmp_path.iterdir()) == []


def test_dask_without_the_simulator_is_one_line(tmp_path):
    result = _dse(*SWEEP, "--dask", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    line = _one_line(result)
    assert line.startswith("dse: error: ") and "--dask" in line
    assert "--evaluator simulate" in line
    assert list(tmp_path.iterdir()) == []


# --- dse search --evaluator simulate -------------------------------------------------------------

SEARCH_FORMATS = ["2:4", "1:8", "block16@87.5%"]
LAUNCH = ["--launch-overhead-s", "2e-6"]


def _search(tmp_path: Path, *extra: str) -> int:
    space = write_space(tmp_path, space_text(
        formats="list = [" + ", ".join(f'"{f}"' for f in SEARCH_FORMATS) + "]"))
    argv = ["search", "--space", str(space), "--target", "1.3x_over_2:4", "--out",
            str(tmp_path / "out"), "--study", "sim", *extra]
    try:
        return main(argv)
    except SystemExit as exc:  # argparse
        return exc.code


def test_search_with_the_simulator(tmp_path, capsys):
    # A launch overhead that is not the default checks the settings travel through the study.
    assert _search(tmp_path, "--evaluator", "simulate", *LAUNCH) == 0
    capsys.readouterr()
    results = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert len(results) == 1 + len(SEARCH_FORMATS)  # dense, the candidates, the baseline 2:4
    assert set(results["evaluator"].astype(str)) == {"simulate"}
    trace = load_trace("convnext_tiny")
    nm = ",".join(f for f in SEARCH_FORMATS if ":" in f)
    acc = accelerator_models.load("a100", [f"sparse_tensor.patterns={nm}",
                                           "sparse_tensor.nonzero_rate=1.0"])
    config = SimConfig(launch_overhead_s=2e-6)
    dense = simulate(trace, acc, "dense", 1, "unfused", "gemm", config)
    for row in results.to_dict("records"):
        fmt = str(row["format"])
        direct = simulate(trace, acc, fmt, 1, "unfused", "gemm", config)
        assert row["latency_s"] == direct.latency_s, fmt
        assert row["dense_latency_s"] == dense.latency_s, fmt
        assert row["speedup"] == dense.latency_s / direct.latency_s, fmt
        assert row["roofline_latency_s"] == direct.roofline_latency_s, fmt
        # The default overhead gives other numbers: the stored setting was used.
        if fmt == "2:4":
            default = simulate(trace, acc, fmt, 1, "unfused", "gemm", SimConfig())
            assert default.latency_s != direct.latency_s

    before = (tmp_path / "out" / "results.parquet").read_bytes()
    for extra in (["--evaluator", "roofline"], ["--evaluator", "simulate"],
                  ["--evaluator", "simulate", "--launch-overhead-s", "3e-6"]):
        assert _search(tmp_path, "--resume", *extra) == 2, extra
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        line = err.splitlines()[0]
        assert line.startswith("dse: error: ") and "'sim'" in line, line
        assert f"--evaluator {extra[1]}" in line and "--resume" in line, line
    assert (tmp_path / "out" / "results.parquet").read_bytes() == before
    # The same evaluator and settings resume.
    assert _search(tmp_path, "--resume", "--evaluator", "simulate", *LAUNCH) == 0


def test_dask_without_its_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    task = sim_fanout.SimTask(load_trace(MODEL), accelerator_models.load("a100"),
                              formats.parse("2:4"), 1, "unfused", "gemm", CONFIG,
                              dse.Numerics())
    with pytest.raises(sim_fanout.FanoutError, match=r"sparsity-dse\[dask\]"):
        sim_fanout.simulate_designs([task, task], dask=LOCAL)
