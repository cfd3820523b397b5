"""reports: the event-level simulator's charts (Gantt timeline, utilization, gap by cause),
each frame checked by value on small hand-made simulator frames, each chart validated and
rendered, and the three written as a report.

Times are multiples of 1/8 s (dyadic), so sums are exact and busy times compare with ==."""

from __future__ import annotations

import os

import altair as alt
import numpy as np
import pandas as pd
import pytest
import vl_convert

import reports

DESIGN = {"model": "convnext_tiny", "hardware": "a100-40gb", "format": "2:4", "batch": 8,
          "fusion": "unfused"}
GANTT_COLUMNS = ["resource", "op_index", "op", "phase", "tile", "start_s", "end_s",
                 "duration_s", "start_us", "end_us", "intervals", "bytes", *DESIGN]


def interval(resource, op, op_index, tile, phase, start, end, nbytes=0.0):
    return {"resource": resource, "op": op, "op_index": op_index, "tile": tile,
            "phase": phase, "start_s": start, "end_s": end, "bytes": nbytes}


@pytest.fixture
def timeline():
    """A tiled GEMM ``fc`` (4 tiles: loads and stores share DRAM, computes back to back on
    the tensor cores) and an activation ``act`` (prefetched, 2 tiles on the vector cores).
    No two intervals of one resource overlap. 15 rows, shuffled."""
    rows = [interval("dram", "fc", 0, t, "load", 0.25 * t, 0.25 * t + 0.25, 100.0)
            for t in range(3)]
    rows.append(interval("dram", "fc", 0, 3, "load", 0.875, 1.125, 100.0))
    rows += [interval("dram", "fc", 0, t, "store", s, s + 0.125, 50.0)
             for t, s in enumerate([0.75, 1.25, 1.75, 2.25])]
    rows += [interval("tensor", "fc", 0, t, "compute", 0.25 + 0.5 * t, 0.75 + 0.5 * t)
             for t in range(4)]
    rows.append(interval("dram", "act", 1, -1, "prefetch", 2.375, 2.5, 25.0))
    rows += [interval("vector", "act", 1, t, "compute", 2.5 + 0.25 * t, 2.75 + 0.25 * t)
             for t in range(2)]
    frame = pd.DataFrame(rows).assign(**DESIGN)
    return frame.sample(frac=1.0, random_state=3).reset_index(drop=True)


def busy_by_resource(frame, column=None):
    lengths = frame[column] if column else frame["end_s"] - frame["start_s"]
    return lengths.groupby(frame["resource"]).sum().to_dict()


def bars(data):
    return [(r.resource, r.op, r.phase, r.start_s, r.end_s, r.duration_s, r.intervals)
            for r in data.itertuples()]


def render_svg(chart) -> str:
    spec = chart.to_dict()  # validates against the Vega-Lite schema
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
    svg = vl_convert.vegalite_to_svg(chart.to_json())
    assert svg.lstrip().startswith("<svg")
    return svg


# --- Gantt ----------------------------------------------------------------------------------------

def test_gantt_data_under_max_bars_is_unmerged_and_ordered(timeline):
    data = reports.gantt_data(timeline)
    assert list(data.columns) == GANTT_COLUMNS
    assert len(data) == len(timeline) == 15 and set(data["intervals"]) == {1}
    # Fixed resource order (dram, tensor, sparse_tensor, vector), then by start.
    assert list(data["resource"]) == ["dram"] * 9 + ["tensor"] * 4 + ["vector"] * 2
    dram = data[data["resource"] == "dram"]
    assert list(dram["start_s"]) == [0.0, 0.25, 0.5, 0.75, 0.875, 1.25, 1.75, 2.25, 2.375]
    assert list(dram["phase"]) == ["load"] * 3 + ["store", "load"] + ["store"] * 3 + \
        ["prefetch"]
    assert list(data["tile"].astype(int)) == [0, 1, 2, 0, 3, 1, 2, 3, -1, 0, 1, 2, 3, 0, 1]
    np.testing.assert_array_equal(data["duration_s"], data["end_s"] - data["start_s"])
    np.testing.assert_array_equal(data["start_us"], data["start_s"] * 1e6)
    np.testing.assert_array_equal(data["end_us"], data["end_s"] * 1e6)
    # Every input row is a bar, unchanged.
    back = data[["resource", "op", "phase", "start_s", "end_s", "bytes"]]
    want = timeline[back.columns].sort_values(["resource", "start_s"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(back.sort_values(["resource", "start_s"])
                                  .reset_index(drop=True), want, check_dtype=False)
    for column, value in DESIGN.items():
        assert set(data[column]) == {value}
    assert reports.gantt_data(timeline, max_bars=15).equals(data)


def test_gantt_data_merges_runs_of_one_op_and_phase(timeline):
    # 15 rows > 10 bars: step 1 with no tolerance merges only intervals that touch.
    data = reports.gantt_data(timeline, max_bars=10, tolerance=0.0)
    assert list(data.columns) == GANTT_COLUMNS
    assert bars(data) == [
        ("dram", "fc", "load", 0.0, 0.75, 0.75, 3),
        ("dram", "fc", "store", 0.75, 0.875, 0.125, 1),
        ("dram", "fc", "load", 0.875, 1.125, 0.25, 1),
        ("dram", "fc", "store", 1.25, 1.375, 0.125, 1),
        ("dram", "fc", "store", 1.75, 1.875, 0.125, 1),
        ("dram", "fc", "store", 2.25, 2.375, 0.125, 1),
        ("dram", "act", "prefetch", 2.375, 2.5, 0.125, 1),
        ("tensor", "fc", "compute", 0.25, 2.25, 2.0, 4),
        ("vector", "act", "compute", 2.5, 3.0, 0.5, 2),
    ]
    assert list(data["bytes"]) == [300.0, 50.0, 100.0, 50.0, 50.0, 50.0, 25.0, 0.0, 0.0]
    # A merged bar has no single tile; a bar of one interval keeps its own.
    assert data["tile"].isna().tolist() == [True] + [False] * 6 + [True, True]
    assert list(data["tile"].dropna().astype(int)) == [0, 3, 1, 2, 3, -1]
    assert busy_by_resource(data, "duration_s") == busy_by_resource(timeline)


def test_gantt_data_tolerance_makes_a_tiled_op_one_bar_per_resource_and_phase(timeline):
    # Span 3 s; a tolerance of 1/6 of it (0.5 s) bridges the gaps between fc's stores.
    data = reports.gantt_data(timeline, max_bars=10, tolerance=1 / 6)
    assert bars(data) == [
        ("dram", "fc", "load", 0.0, 1.125, 1.0, 4),
        ("dram", "fc", "store", 0.75, 2.375, 0.5, 4),
        ("dram", "act", "prefetch", 2.375, 2.5, 0.125, 1),
        ("tensor", "fc", "compute", 0.25, 2.25, 2.0, 4),
        ("vector", "act", "compute", 2.5, 3.0, 0.5, 2),
    ]
    assert busy_by_resource(data, "duration_s") == busy_by_resource(timeline)


def test_gantt_data_merges_across_phases_when_still_too_many(timeline):
    # Step 1 leaves 9 bars > 8: one "busy" bar per resource and op.
    data = reports.gantt_data(timeline, max_bars=8, tolerance=0.0)
    assert bars(data) == [
        ("dram", "fc", "busy", 0.0, 2.375, 1.5, 8),
        ("dram", "act", "busy", 2.375, 2.5, 0.125, 1),
        ("tensor", "fc", "busy", 0.25, 2.25, 2.0, 4),
        ("vector", "act", "busy", 2.5, 3.0, 0.5, 2),
    ]
    assert list(data["bytes"]) == [600.0, 25.0, 0.0, 0.0]
    assert busy_by_resource(data, "duration_s") == busy_by_resource(timeline)
    assert busy_by_resource(data, "duration_s") == {"dram": 1.625, "tensor": 2.0,
                                                    "vector": 0.5}
    # max_bars is a target: one bar per resource and op is as far as merging goes.
    assert bars(reports.gantt_data(timeline, max_bars=1)) == bars(data)


def test_gantt_data_merging_keeps_busy_time_on_a_large_timeline():
    """20,000 disjoint intervals over 4 resources and 50 ops, 8 tiles an op and phase, small
    random gaps: merged below the default 4000 bars, busy time per resource unchanged."""
    rng = np.random.default_rng(11)
    rows = []
    for r, resource in enumerate(["dram", "tensor", "sparse_tensor", "vector"]):
        t = 0
        for op_index in range(50):
            phases = ["load", "store"] if resource == "dram" else ["compute"]
            for _ in range(100 // len(phases)):
                for phase in phases:
                    length, gap = rng.integers(1, 64), rng.integers(0, 3)
                    rows.append((resource, f"op{op_index}", op_index, 0, phase,
                                 t + gap, t + gap + length))
                    t += gap + length
            t += rng.integers(0, 2) * 1000 * (r + 1)
    timeline = pd.DataFrame(rows, columns=["resource", "op", "op_index", "tile", "phase",
                                           "start_s", "end_s"])
    timeline[["start_s", "end_s"]] = timeline[["start_s", "end_s"]] * 2.0 ** -20
    assert len(timeline) == 20_000
    data = reports.gantt_data(timeline)
    assert len(data) <= 4000 and data["intervals"].sum() == len(timeline)
    assert busy_by_resource(data, "duration_s") == busy_by_resource(timeline)
    assert (data["duration_s"] <= data["end_s"] - data["start_s"]).all()
    assert set(data["bytes"]) == {0.0} and "model" not in data


def test_gantt_data_refuses_bad_frames(timeline):
    cases = [
        (timeline.drop(columns=["start_s", "phase"]),
         "gantt_data: the frame lacks column\\(s\\) phase, start_s"),
        (pd.concat([timeline, timeline.assign(batch=32)]), "values of batch"),
        (pd.concat([timeline, timeline.assign(hardware="h100-sxm")]), "values of hardware"),
        (pd.concat([timeline, timeline.assign(fusion="fused")]), "values of fusion"),
        (timeline.assign(end_s=timeline["start_s"] - 1.0), "end before they start"),
        (timeline.assign(start_s=np.nan), "missing or infinite"),
    ]
    for frame, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            reports.gantt_data(frame)
        assert "\n" not in str(err.value)
    with pytest.raises(TypeError, match="gantt_data"):
        reports.gantt_data(timeline.to_dict())
    with pytest.raises(ValueError, match="max_bars"):
        reports.gantt_data(timeline, max_bars=0)


def test_gantt_chart(timeline):
    data = reports.gantt_data(timeline)
    chart = reports.gantt_chart(data)
    assert isinstance(chart, alt.Chart)
    spec = chart.to_dict()
    assert spec["title"] == ("Simulated timeline: convnext_tiny on a100-40gb, 2:4, batch 8, "
                             "unfused")
    encoding = spec["encoding"]
    assert (encoding["x"]["field"], encoding["x2"]["field"]) == ("start_us", "end_us")
    assert encoding["y"]["scale"]["domain"] == ["dram", "tensor", "sparse_tensor", "vector"]
    assert encoding["color"]["field"] == encoding["yOffset"]["field"] == "phase"
    assert encoding["color"]["scale"]["domain"] == ["prefetch", "load", "compute", "store"]
    assert {"op", "phase", "start_us", "end_us"} <= {t["field"] for t in encoding["tooltip"]}
    svg = render_svg(chart)
    assert "mark-rect" in svg and "sparse_tensor" in svg


# --- utilization ----------------------------------------------------------------------------------

@pytest.fixture
def utilization():
    rows = []
    for resource, values in [("vector", [0.0, 0.5]), ("dram", [1.0, 0.25]),
                             ("tensor", [0.75, 1.0 + 1e-12])]:
        rows += [{"resource": resource, "start_s": 1e-6 * i, "end_s": 1e-6 * (i + 1),
                  "utilization": u} for i, u in reversed(list(enumerate(values)))]
    return pd.DataFrame(rows).assign(**DESIGN)


def test_utilization_data_by_value(utilization):
    data = reports.utilization_data(utilization)
    assert list(data.columns) == ["resource", "start_s", "end_s", "start_us", "end_us",
                                  "utilization", *DESIGN]
    assert list(data["resource"]) == ["dram", "dram", "tensor", "tensor", "vector", "vector"]
    assert list(data["start_s"]) == [0.0, 1e-6] * 3
    assert list(data["end_s"]) == [1e-6, 2e-6] * 3
    np.testing.assert_allclose(data["start_us"], [0, 1] * 3, rtol=1e-12)
    np.testing.assert_allclose(data["end_us"], [1, 2] * 3, rtol=1e-12)
    # A rounding overshoot of the simulator's busy fraction is clipped to 1.
    assert list(data["utilization"]) == [1.0, 0.25, 0.75, 1.0, 0.0, 0.5]
    assert set(data["batch"]) == {8}


def test_utilization_data_refuses_bad_frames(utilization):
    cases = [
        (utilization.drop(columns="utilization"),
         "utilization_data: the frame lacks column\\(s\\) utilization"),
        (utilization.assign(utilization=1.5), "outside \\[0, 1\\]"),
        (utilization.assign(utilization=np.nan), "outside \\[0, 1\\]"),
        (pd.concat([utilization, utilization.assign(format="dense")]), "values of format"),
    ]
    for frame, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            reports.utilization_data(frame)
        assert "\n" not in str(err.value)


def test_utilization_chart(utilization):
    chart = reports.utilization_chart(reports.utilization_data(utilization))
    spec = chart.to_dict()
    assert spec["title"].startswith("Utilization over time: convnext_tiny on a100-40gb")
    assert spec["facet"]["row"]["sort"] == ["dram", "tensor", "sparse_tensor", "vector"]
    svg = render_svg(chart)
    assert "mark-rect" in svg and "vector" in svg


# --- gap over the roofline, by cause --------------------------------------------------------------

@pytest.fixture
def ops():
    """Six ops; every gap is exactly launch + buffer + fill/drain; ``pool`` has no gap."""
    rows = [  # op, kind, unit, launch, buffer, fill/drain
        ("stem", "conv", "tensor", 0.125, 0.0, 0.25),
        ("fc1", "linear", "sparse_tensor", 0.125, 1.0, 0.5),
        ("gelu", "activation", "vector", 0.25, 0.0, 0.0),
        ("fc2", "linear", "sparse_tensor", 0.125, 0.5, 0.125),
        ("pool", "pool", "vector", 0.0, 0.0, 0.0),
        ("head", "linear", "tensor", 0.125, 0.125, 0.125),
    ]
    frame = pd.DataFrame(rows, columns=["op", "kind", "unit", "launch_s", "buffer_s",
                                        "fill_drain_s"])
    frame.insert(1, "op_index", range(len(frame)))
    frame["gap_s"] = frame["launch_s"] + frame["buffer_s"] + frame["fill_drain_s"]
    frame["roofline_s"] = 2.0
    frame["latency_s"] = frame["roofline_s"] + frame["gap_s"]
    frame["why"] = ["fill/drain", "buffer-bound", "launch", "buffer-bound", "", "launch"]
    return frame.assign(**DESIGN)


def test_sim_gap_data_picks_the_top_ops_in_order(ops):
    data = reports.sim_gap_data(ops, top=3)
    assert list(data.columns) == ["rank", "op_index", "op", "label", "kind", "unit", "why",
                                  "component", "time_s", "time_us", "gap_s", "latency_s",
                                  "roofline_s", *DESIGN]
    # Gaps: fc1 1.625, fc2 0.75, stem 0.375 and head 0.375 (a tie: lower index first).
    assert list(data["op"]) == ["fc1"] * 3 + ["fc2"] * 3 + ["stem"] * 3
    assert list(data["rank"]) == [1] * 3 + [2] * 3 + [3] * 3
    assert list(data["label"]) == ["#1 fc1"] * 3 + ["#3 fc2"] * 3 + ["#0 stem"] * 3
    assert list(data["component"]) == ["launch", "buffer-bound", "fill/drain"] * 3
    assert list(data["time_s"]) == [0.125, 1.0, 0.5, 0.125, 0.5, 0.125, 0.125, 0.0, 0.25]
    np.testing.assert_array_equal(data["time_us"], data["time_s"] * 1e6)
    assert list(data["why"][::3]) == ["buffer-bound", "buffer-bound", "fill/drain"]
    # The components add up to each op's gap, exactly: no "other" remainder.
    sums = data.groupby("op", sort=False)["time_s"].sum()
    gaps = data.groupby("op", sort=False)["gap_s"].first()
    assert sums.to_dict() == gaps.to_dict() == {"fc1": 1.625, "fc2": 0.75, "stem": 0.375}
    everything = reports.sim_gap_data(ops)
    assert list(everything["op"][::3]) == ["fc1", "fc2", "stem", "head", "gelu"]  # no pool


def test_sim_gap_data_shows_an_unexplained_remainder(ops):
    ops.loc[ops["op"] == "gelu", "gap_s"] = 0.375  # launch 0.25 explains 0.25 of it
    data = reports.sim_gap_data(ops, top=5)
    gelu = data[data["op"] == "gelu"]
    assert list(gelu["component"]) == ["launch", "buffer-bound", "fill/drain", "other"]
    assert list(gelu["time_s"]) == [0.25, 0.0, 0.0, 0.125]
    assert (data["component"] == "other").sum() == 1


def test_sim_gap_data_refuses_bad_frames(ops):
    cases = [
        (ops.drop(columns="fill_drain_s"),
         "sim_gap_data: the frame lacks column\\(s\\) fill_drain_s"),
        (pd.concat([ops, ops.assign(model="vit_b_16")]), "values of model"),
        (ops.assign(buffer_s=np.nan), "missing or infinite"),
    ]
    for frame, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            reports.sim_gap_data(frame)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="top"):
        reports.sim_gap_data(ops, top=0)


def test_sim_gap_chart(ops):
    chart = reports.sim_gap_chart(reports.sim_gap_data(ops, top=4))
    spec = chart.to_dict()
    assert spec["title"].startswith("Gap over the roofline, top 4 ops: convnext_tiny")
    assert spec["encoding"]["y"]["sort"] == ["#1 fc1", "#3 fc2", "#0 stem", "#5 head"]
    assert spec["encoding"]["color"]["scale"]["domain"] == ["launch", "buffer-bound",
                                                            "fill/drain"]
    ops.loc[ops["op"] == "gelu", "gap_s"] = 0.375
    with_other = reports.sim_gap_chart(reports.sim_gap_data(ops)).to_dict()
    assert with_other["encoding"]["color"]["scale"]["domain"][-1] == "other"
    svg = render_svg(chart)
    assert "mark-rect" in svg and "fc1" in svg


# --- a report of the three ------------------------------------------------------------------------

def test_write_report_with_the_simulator_charts(tmp_path, timeline, utilization, ops):
    built = [
        ("timeline", "Timeline", reports.gantt_data(timeline), reports.gantt_chart),
        ("utilization", "Utilization", reports.utilization_data(utilization),
         reports.utilization_chart),
        ("gap", "Gap by cause", reports.sim_gap_data(ops), reports.sim_gap_chart),
    ]
    sections = [reports.Section(name, title, chart(data), data)
                for name, title, data, chart in built]
    folder = tmp_path / "sim-report"
    index = reports.write_report(folder, "Simulation of convnext_tiny", sections)
    assert index == folder.resolve() / "index.html"
    names = [name for name, *_ in built]
    assert set(os.listdir(folder)) == {"index.html"} | {
        f"{n}.{ext}" for n in names for ext in ("png", "svg", "csv")}
    for name, _, data, _ in built:
        assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (folder / f"{name}.svg").read_text()[:200]
        back = pd.read_csv(folder / f"{name}.csv", keep_default_na=False)
        assert list(back.columns) == list(data.columns) and len(back) == len(data)
    page = index.read_text(encoding="utf-8")
    for name in names:
        assert f'<div class="chart" id="chart-{name}"></div>' in page
