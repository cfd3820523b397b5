"""`dse simulate`: what it prints and writes against the API's ``simulate()``, the roofline
settings, bad input (exit 2, one line, nothing written), --help, and --report rendered in
headless Chromium with the network off."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pandas as pd
import pytest

from dse.output import format_seconds
from dse.sim.simulate import SimConfig, simulate
from tests.browser import ensure_chromium, render_report
from tests.cli_run import run_cli

REPO = Path(__file__).resolve().parents[1]
DESIGN = ["--model", "convnext_tiny", "--hw", "a100", "--format", "2:4"]
OPS_COLUMNS = ["model", "hardware", "format", "batch", "fusion", "scope", "op", "op_index",
               "kind", "unit", "fallback", "tiles",
               "start_s", "end_s", "latency_s", "roofline_s", "gap_s",
               "launch_s", "buffer_s", "fill_drain_s", "why", "compute_s", "dram_bytes",
               "roofline_dram_bytes", "prefetch_bytes", "kernel_start", "resident_output",
               "tile_bytes"]
TIMELINE_COLUMNS = ["model", "hardware", "format", "batch", "fusion", "scope", "resource", "op",
                    "op_index", "tile", "phase", "start_s", "end_s", "bytes"]
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}




def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def seconds(text: str) -> float:
    number, unit = text.split()
    return float(number) * UNITS[unit]


@pytest.fixture(scope="module")
def api():
    return simulate("convnext_tiny", "a100", "2:4")


def test_simulate_prints_and_writes_what_the_api_returns(tmp_path, capsys, api):
    ops, timeline = tmp_path / "ops.csv", tmp_path / "tl.parquet"
    assert run_cli(["simulate", *DESIGN, "--out", str(ops), "--timeline", str(timeline)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    s = api.summary()
    lines = out.splitlines()
    assert lines[0] == ("convnext_tiny on a100-40gb, 2:4, batch 1, unfused, scope gemm, fp16 "
                        "(vector ops fp16)")
    assert lines[1].startswith(f"buffer {api.buffer_bytes / 2**20:.3g} MiB (smem of the spec), "
                               "depth 2, launch overhead 3.2 us, overlap pipelined")
    assert lines[2] == (
        f"latency {format_seconds(s['latency_s'])}, roofline "
        f"{format_seconds(s['roofline_latency_s'])}, gap {format_seconds(s['gap_s'])} "
        f"({100 * s['gap_share']:.1f}% of the latency): launch "
        f"{format_seconds(s['gap_launch_s'])}, buffer-bound {format_seconds(s['gap_buffer_s'])}"
        f", fill/drain {format_seconds(s['gap_fill_drain_s'])}")
    assert f"{s['kernels']} kernels, {s['tiles']} tiles" in out
    assert f"{s['events']} events simulated in" in out
    # The design's fallbacks, from the roofline: 2:4 on an A100 keeps 18 ops dense (shape).
    assert s["shape_fallback_ops"] == 18 and s["hw_fallback"] == "" and s["hw_fallback_ops"] == 0
    assert "fallbacks: 18 shape->dense of 59 ops: those ops run dense, not as 2:4" in lines
    assert s["latency_s"] > s["roofline_latency_s"]  # launch overhead alone sees to that
    # The top-gap table: its header, then the ten ops with the largest gaps, largest first.
    head = lines.index("largest gaps to the roofline (top 10):")
    assert lines[head + 1].split() == ["op", "tiles", "latency", "roofline", "gap", "why"]
    table = lines[head + 2:]
    top = api.ops.nlargest(10, "gap_s")
    assert len(table) == 10
    for line, row in zip(table, top.itertuples(), strict=True):
        assert line.split()[0] == row.op
        assert format_seconds(row.gap_s) in line and format_seconds(row.latency_s) in line

    back = pd.read_csv(ops, keep_default_na=False)
    # The API's op rows, then the number types they were priced in (no KV cache here).
    priced = {"dtype": "fp16", "vector_dtype": "fp16", "csr_dtype": "fp32", "index_bytes": 4,
              "weight_dtype": "fp16"}
    assert list(back.columns) == OPS_COLUMNS + list(priced)
    for column, value in priced.items():
        assert set(back.pop(column)) == {value}
    pd.testing.assert_frame_equal(back, api.ops, check_dtype=False, check_exact=True)
    tl = pd.read_parquet(timeline)
    assert list(tl.columns) == TIMELINE_COLUMNS
    pd.testing.assert_frame_equal(tl, api.timeline, check_dtype=False, check_exact=True)
    assert len(tl) > 0 and set(tl["resource"]) >= {"dram", "sparse_tensor"}
    assert sorted(files_under(tmp_path)) == ["ops.csv", "tl.parquet"]  # no temporary files


def test_roofline_settings_reproduce_the_roofline(capsys, api):
    argv = ["simulate", *DESIGN, "--buffer-bytes", "inf", "--launch-overhead-s", "0",
            "--overlap", "full", "--prefetch-depth", "1000000"]
    assert run_cli(argv) == 0
    out = capsys.readouterr().out
    match = re.search(r"^latency (\S+ \w+), roofline (\S+ \w+), gap (\S+ \w+) ", out, re.M)
    assert match, out
    latency, roofline, gap = match.groups()
    assert latency == roofline == format_seconds(api.roofline_latency_s)
    assert abs(seconds(gap)) <= 1e-12 * api.roofline_latency_s  # 0 up to rounding
    assert "buffer unlimited (--buffer-bytes), depth 2, launch overhead 0 s, overlap full" in out
    config = SimConfig(buffer_bytes=float("inf"), launch_overhead_s=0.0, overlap="full",
                       prefetch_depth=1000000)
    direct = simulate("convnext_tiny", "a100", "2:4", config=config)
    assert direct.latency_s == pytest.approx(direct.roofline_latency_s, rel=1e-12)
    assert f"latency {format_seconds(direct.latency_s)}," in out


# --- bad input ----------------------------------------------------------------------------------

BAD = {
    "buffer_below_smallest_tile": (["--buffer-bytes", "1000"],
                                   ["buffer of 1000 bytes", "--buffer-bytes"]),
    # argparse reads -1e-6 as an option, not a number (it only knows -1 and -1.5 as numbers)
    "negative_launch_overhead": (["--launch-overhead-s", "-1e-6"], ["--launch-overhead-s"]),
    "negative_launch_overhead_eq": (["--launch-overhead-s=-1e-6"],
                                    ["--launch-overhead-s -1e-06", ">= 0"]),
    "infinite_launch_overhead": (["--launch-overhead-s", "inf"], ["--launch-overhead-s inf"]),
    "depth_0": (["--depth", "0"], ["--depth 0", ">= 1"]),
    "depth_fraction": (["--depth", "1.5"], ["--depth", "1.5"]),
    "prefetch_depth_negative": (["--prefetch-depth", "-1"], ["--prefetch-depth -1", ">= 0"]),
    "buffer_bytes_negative": (["--buffer-bytes", "-5"], ["--buffer-bytes -5.0", "positive"]),
    "buffer_bytes_zero": (["--buffer-bytes", "0"], ["--buffer-bytes 0.0", "positive"]),
    "buffer_bytes_nan": (["--buffer-bytes", "nan"], ["--buffer-bytes nan"]),
    "buffer_bytes_not_a_number": (["--buffer-bytes", "abc"], ["--buffer-bytes", "'abc'"]),
    "buffer_unknown": (["--buffer", "l3"], ["--buffer", "l3"]),
    "overlap_unknown": (["--overlap", "sometimes"], ["--overlap", "sometimes"]),
    "hw_without_smem": (["--hw", "b200"], ["b200", "shared_memory_per_sm_bytes",
                                           "--buffer-bytes", "--set"]),
    "hw_without_l2": (["--hw", "b200", "--buffer", "l2"], ["b200", "l2_bytes",
                                                          "--buffer-bytes"]),
    "format_unknown": (["--format", "fast"], ["unknown format 'fast'"]),
    "format_bad_nm": (["--format", "9:4"], ["9:4"]),
    "model_unknown": (["--model", "resnet9000"], ["resnet9000"]),
    "set_bad_field": (["--set", "sm_count=0"], ["sm_count"]),
    "timeline_bad_suffix": (["--timeline", "{tmp}/tl.xlsx"], ["tl.xlsx", ".xlsx"]),
    "report_under_missing_folder": (["--report", "{tmp}/missing/rep"], ["missing/rep"]),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_exits_2_with_one_line(name, tmp_path, capsys):
    extra, needles = BAD[name]
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    # --model/--hw/--format in extra replace DESIGN's (a second, different one is refused)
    given = set(extra[::2])
    design = [a for pair in zip(DESIGN[::2], DESIGN[1::2], strict=True)
              if pair[0] not in given for a in pair]
    argv = ["simulate", *design, *extra, "--out", str(tmp_path / "ops.csv")]
    before = files_under(tmp_path)
    assert run_cli(argv) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(("dse: error: ", "dse simulate: error: ")), line
    for needle in needles:
        assert needle in line, (needle, line)
    assert out == ""
    assert files_under(tmp_path) == before  # nothing at --out, no temporary file


def test_simulate_help_documents_every_option(capsys):
    assert run_cli(["simulate", "--help"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "usage:" in out
    options = ["--model", "--hw", "--set", "--format", "--batch", "--fusion", "--scope",
               "--buffer", "--buffer-bytes", "--depth", "--launch-overhead-s", "--overlap",
               "--prefetch-depth", "--top", "--out", "--timeline", "--report"]
    # Every setting of SimConfig has its option (the utilization bins are an API detail).
    for f in dataclasses.fields(SimConfig):
        if f.name != "utilization_bins":
            assert "--" + f.name.replace("_", "-") in options, f.name
    for option in options:
        assert re.search(rf"(^|[\s\[,]){re.escape(option)}([\s\]=,]|$)", out, re.M), option
    assert "pipelined" in out and "full" in out and "smem" in out and "l2" in out


# --- report ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium() -> Path:
    return ensure_chromium()


def test_report_folder_renders(tmp_path, capsys, chromium, api):
    folder = tmp_path / "rep"
    assert run_cli(["simulate", *DESIGN, "--report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"report: {folder / 'index.html'}" in out
    names = {p.name for p in folder.iterdir()}
    for chart in ("timeline", "utilization", "gap"):
        for suffix in (".png", ".svg", ".csv"):
            assert f"{chart}{suffix}" in names, (chart, suffix)
        assert (folder / f"{chart}.png").stat().st_size > 0
        assert (folder / f"{chart}.svg").read_text().lstrip().startswith("<svg")
        assert len(pd.read_csv(folder / f"{chart}.csv")) > 0
    assert "index.html" in names
    summary = pd.read_csv(folder / "table-summary.csv")
    assert summary.loc[0, "latency_s"] == api.latency_s
    assert summary.loc[0, "roofline_latency_s"] == api.roofline_latency_s

    result = render_report(folder / "index.html", folder / "screenshot.png", chromium=chromium)
    assert result.expected_charts == 3, result.problems()
    assert set(result.charts) == {"chart-timeline", "chart-utilization", "chart-gap"}, \
        result.charts
    assert all(marks > 0 for marks in result.charts.values()), result.problems()
    assert result.rendered_flag == result.expected_charts, result.problems()
    assert not result.requests and not result.console_errors and not result.page_errors, \
        result.problems()
    assert not result.embed_errors and not result.timed_out, result.problems()
    keep = REPO / "test-artifacts"
    keep.mkdir(exist_ok=True)
    (keep / "simulate.png").write_bytes(result.screenshot.read_bytes())
